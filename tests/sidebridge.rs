//! Side Bridge end to end: the reference bridge (a separate process, real HTTP) against
//! `bridgewire check sidebridge`, every break mode against its rule, bad input bounded, the
//! recording proxy, pins and replay on recorded cells.

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::proc::spawn_url_first as spawn_url;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const REF: &str = env!("CARGO_BIN_EXE_sidebridge-ref");
const KEY: &str = "s3cret-key";

fn check(extra: &[&str], bridge: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let mut cmd = Command::new(BW);
    cmd.args(["check", "sidebridge", "--format", "json"])
        .args(extra);
    if !bridge.is_empty() {
        cmd.arg("--").arg(REF).args(bridge);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bridgewire");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

fn verdicts(v: &Value) -> Vec<(String, String, String)> {
    v["verdicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["id"].as_str().unwrap_or_default().to_string(),
                        x["status"].as_str().unwrap_or_default().to_string(),
                        x["detail"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn failed(v: &Value) -> BTreeSet<String> {
    verdicts(v)
        .into_iter()
        .filter(|(_, s, _)| s != "pass")
        .map(|(id, _, _)| id)
        .collect()
}

fn catalogue() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/sidebridge.json"
    ))
    .unwrap();
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

#[test]
fn reference_bridge_passes_every_rule() {
    let (with_key, a) = check(&["--key", KEY], &["--key", KEY], &[]);
    let (without_key, b) = check(&[], &[], &[]);
    assert_eq!(
        with_key.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&with_key.stdout)
    );
    assert_eq!(
        without_key.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&without_key.stdout)
    );
    assert!(failed(&a).is_empty() && failed(&b).is_empty());
    // Together the two runs judge every catalogue rule: A1–A3/A5 need a key, A4 needs none.
    let seen: BTreeSet<String> = verdicts(&a)
        .into_iter()
        .chain(verdicts(&b))
        .map(|x| x.0)
        .collect();
    let all: BTreeSet<String> = catalogue()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, all);
    assert!(verdicts(&a).iter().all(|x| x.0 != "SB-A4"));
    assert!(
        verdicts(&b)
            .iter()
            .all(|x| !["SB-A1", "SB-A2", "SB-A3", "SB-A5"].contains(&x.0.as_str()))
    );
    // Every client profile renders every reply of the reference bridge.
    for p in a["profiles"].as_array().unwrap() {
        for prof in ["app", "gamma", "beta", "alpha", "app-dev"] {
            if prof == "app-dev" && p.get(prof).is_none() {
                continue; // app-dev sends no session start: no verdict for those replies
            }
            assert_eq!(p[prof]["renders"], true, "{p}");
        }
        assert!(
            p.get("app-dev").is_some()
                || a["profiles"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|q| q.get("app-dev").is_some())
        );
    }
}

/// (break mode, the rule it breaks (does not pass), whether it breaks that rule alone). Where
/// the fault is another rule's (bad-session-start: SB-D1's) the rule is skipped naming it,
/// asserted below. Where a flaw also
/// breaks rules built on the same reply (e.g. a non-UUID id makes the reply undecodable, so
/// SB-D1 fails with SB-D2), `alone` is false and only the target is asserted.
const BREAKS: &[(&str, &str, bool)] = &[
    ("bad-session-start", "SB-H1", false),
    ("slow-start", "SB-H2", false),
    ("slash-redirect", "SB-H3", true),
    ("no-allow-header", "SB-H4", true),
    ("accept-missing-key", "SB-A1", true),
    ("accept-wrong-key", "SB-A2", false),
    ("parse-before-auth", "SB-A3", true),
    ("reject-unexpected-key", "SB-A4", true),
    ("double-answer", "SB-R1", true),
    ("crash-on-empty", "SB-R2", true),
    ("lowercase-ids", "SB-R3", true),
    ("reject-unknown-from", "SB-R4", true),
    ("raw-body-scan", "SB-R5", false),
    ("stateless", "SB-R6", true),
    ("strict-keys", "SB-R7", true),
    ("exact-version", "SB-R8", true),
    ("html-errors", "SB-R10", false),
    ("leak-errors", "SB-R10", true),
    ("require-known-chat", "SB-R11", true),
    ("crash-on-ended", "SB-R12", true),
    ("latin1", "SB-D1", true),
    ("bad-ids", "SB-D2", false),
    ("missing-from", "SB-D2", false),
    ("from-bot", "SB-D3", true),
    ("reuse-user-id", "SB-D4", true),
    ("relative-sources", "SB-D5", true),
    ("string-options", "SB-D6", false),
    ("empty-content", "SB-D7", true),
    ("no-sources", "SB-D8", true),
    ("html-unsupported-version", "SB-D9", true),
    ("silent-end", "SB-S1", true),
    ("always-send-options", "SB-S2", true),
    ("forget-options-on-reopen", "SB-S3", true),
    ("global-memory", "SB-S4", false),
];

#[test]
fn every_rule_that_can_fail_has_a_break_mode() {
    let listed = Command::new(REF).arg("--list-breaks").output().unwrap();
    let modes: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect();
    for (m, _, _) in BREAKS {
        assert!(modes.contains(*m), "{m} is not a sidebridge-ref break mode");
    }
    for r in catalogue() {
        let id = r["id"].as_str().unwrap();
        if r["level"] == "INFO" {
            continue; // INFO rules record and never fail.
        }
        assert!(BREAKS.iter().any(|b| b.1 == id), "{id} has no failing case");
    }
}

#[test]
fn each_break_mode_fails_its_rule() {
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = BREAKS
            .chunks(BREAKS.len().div_ceil(4))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|(mode, rule, alone)| {
                            let keyed = *mode != "reject-unexpected-key";
                            // Only slow-start needs a short client timeout; the others keep the
                            // default, so a loaded machine cannot fail them spuriously.
                            // --strict: a SHOULD rule's failure fails the run too.
                            let mut extra = if *mode == "slow-start" {
                                vec!["--strict", "--timeout", "1"]
                            } else {
                                vec!["--strict"]
                            };
                            let mut bridge = vec!["--break", *mode];
                            if keyed {
                                extra.extend(["--key", KEY]);
                                bridge.extend(["--key", KEY]);
                            }
                            let (out, v) =
                                check(&extra, &bridge, &[("SIDEBRIDGE_REF_DELAY_MS", "1500")]);
                            (*mode, *rule, *alone, out.status.code(), failed(&v), v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut problems = Vec::new();
    for (mode, rule, alone, code, failed, v) in &results {
        if *code != Some(1) {
            problems.push(format!("{mode}: exit {code:?}"));
        }
        if !failed.contains(*rule) {
            problems.push(format!("{mode}: {rule} did not fail (failed: {failed:?})"));
        }
        // One fault, one failing verdict: an INFO rule with nothing readable to record is
        // not run (naming the rule that judges the fault), which fails nothing.
        let not_run: BTreeSet<String> = verdicts(v)
            .into_iter()
            .filter(|x| x.1 == "not-run")
            .map(|x| x.0)
            .collect();
        let failing: BTreeSet<&String> = failed.difference(&not_run).collect();
        // A session start that does not decode is SB-D1's fault: SB-H1 (which got a reply and
        // recorded its status) is skipped naming SB-D1, not failed beside it.
        if *mode == "bad-session-start" {
            let h1 = verdicts(v).into_iter().find(|x| x.0 == "SB-H1");
            let d1 = verdicts(v).into_iter().find(|x| x.0 == "SB-D1");
            let h1_skipped = h1
                .as_ref()
                .is_some_and(|x| x.1 == "skipped" && x.2.contains("SB-D1 carries that fault"));
            let d1_failed = d1.as_ref().is_some_and(|x| x.1 == "fail");
            if !(h1_skipped && d1_failed) {
                problems.push(format!(
                    "{mode}: expected SB-H1 skipped naming SB-D1 and SB-D1 failed: {h1:?} {d1:?}"
                ));
            }
        }
        if *mode == "html-unsupported-version" {
            let r9 = verdicts(v).into_iter().find(|x| x.0 == "SB-R9");
            if !r9
                .as_ref()
                .is_some_and(|x| x.1 == "not-run" && x.2.contains("SB-D9"))
            {
                problems.push(format!(
                    "{mode}: SB-R9 should be not run naming SB-D9: {r9:?}"
                ));
            }
        }
        if *alone && failing.len() != 1 {
            problems.push(format!(
                "{mode}: expected only {rule} to fail, got {failed:?} (not run: {not_run:?})"
            ));
        }
        // The failing verdict names a reason.
        let detail = verdicts(v)
            .into_iter()
            .find(|x| x.0 == *rule)
            .map(|x| x.2)
            .unwrap_or_default();
        if detail.is_empty() {
            problems.push(format!("{mode}: {rule} failed without a reason"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn per_profile_verdicts_name_the_profile_and_reason() {
    let (_, v) = check(
        &["--key", KEY],
        &["--key", KEY, "--break", "no-sources"],
        &[],
    );
    let replies = v["profiles"].as_array().unwrap();
    let hello = replies
        .iter()
        .find(|p| p["reply"] == "conversation/hello")
        .unwrap();
    assert_eq!(hello["app"]["renders"], true);
    assert_eq!(hello["alpha"]["renders"], false);
    assert!(
        hello["alpha"]["reason"]
            .as_str()
            .unwrap()
            .contains("sources")
    );
    let (_, v) = check(&["--key", KEY], &["--key", KEY, "--break", "from-bot"], &[]);
    let hello = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reply"] == "conversation/hello")
        .unwrap()
        .clone();
    assert_eq!(hello["beta"]["renders"], true);
    assert!(hello["alpha"]["reason"].as_str().unwrap().contains("bot"));
}

#[test]
fn bad_input_ends_in_named_verdicts_within_bounds() {
    let cases: &[(&[&str], &[&str], &str)] = &[
        (&["--url", "http://127.0.0.1:1/"], &[], "connection refused"),
        (&[], &["--break", "html-everything"], "not JSON"),
        (&[], &["--break", "truncated-body"], "truncated body"),
        (
            &["--timeout", "0.3"],
            &["--break", "endless-body"],
            // A chunked body that began and never ended: said as such, not as a silence.
            "the chunked body stopped after 13 bytes, before its last chunk, and no data came for 300ms: the app's timeout (--timeout)",
        ),
        (&["--strict"], &["--break", "slash-redirect"], "301"),
    ];
    // A 50 MB reply is legal (the app reads a body of any size): over bridgewire's own
    // --max-body it is not judged, each verdict that needs it skipped naming the flag.
    let huge: &[(&[&str], &[&str], &str)] = &[(&[], &["--break", "huge-body"], "--max-body")];
    for ((extra, bridge, needle), want) in cases
        .iter()
        .map(|c| (c, "fail"))
        .chain(huge.iter().map(|c| (c, "skipped")))
    {
        let t = Instant::now();
        let (out, v) = check(extra, bridge, &[]);
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{bridge:?} took {:?}",
            t.elapsed()
        );
        assert_eq!(out.status.code(), Some(1), "{bridge:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        let any = verdicts(&v)
            .iter()
            .any(|x| x.1 == want && x.2.contains(needle));
        assert!(
            any,
            "{bridge:?}: no {want} verdict mentions {needle:?}: {v}"
        );
        if want == "skipped" {
            let failed: Vec<_> = verdicts(&v).into_iter().filter(|x| x.1 == "fail").collect();
            assert!(failed.is_empty(), "{bridge:?}: {failed:?}");
        }
    }
}

fn all_lane_text(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for e in walk(dir) {
        if e.extension().is_some_and(|x| x == "ndjson") {
            text.push_str(&std::fs::read_to_string(&e).unwrap());
        }
    }
    text
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn recording_proxy_tees_lanes_per_chat_then_pins_and_replay_work() {
    let tmp = tempfile::tempdir().unwrap();
    let bridge = spawn_url(Command::new(REF).args(["--key", KEY, "--listen", "127.0.0.1:0"]));
    let mut proxy = spawn_url(
        Command::new(BW)
            .args([
                "record",
                "sidebridge",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &bridge.url,
                "--bridge",
                "ref",
                "--key",
                KEY,
                "--dir",
            ])
            .arg(tmp.path()),
    );
    // The proxy is transparent: the whole rule table passes through it.
    let (out, v) = check(&["--url", &proxy.url, "--key", KEY], &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
    // Graceful stop on SIGTERM (in-flight exchanges recorded), exit 143 as every command.
    unsafe {
        libc_kill(proxy.child.id() as i32, 15);
    }
    let status = proxy.child.wait().unwrap();
    assert_eq!(status.code(), Some(143));

    let root = tmp.path().join("ref");
    let chats: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    // One cell per chatId: every request in a chat's lanes names that chat (upper-cased);
    // requests without a chatId (probes) are under _process.
    assert!(chats.len() > 1, "{chats:?}");
    for c in &chats {
        let lane = std::fs::read_to_string(root.join(c).join("client→bridge.ndjson")).unwrap();
        for l in lane.lines() {
            let entry: Value = serde_json::from_str(l).unwrap();
            let env: Value = serde_json::from_str(entry["line"].as_str().unwrap()).unwrap();
            let body: Option<Value> = serde_json::from_str(env["body"].as_str().unwrap()).ok();
            let chat = body
                .as_ref()
                .and_then(|b| b["chatId"].as_str())
                .map(str::to_ascii_uppercase);
            match chat {
                Some(id) if !id.is_empty() => assert_eq!(&id, c),
                _ => assert_eq!(c, "_process"),
            }
        }
    }
    let text = all_lane_text(&root);
    assert!(!text.contains(KEY), "the key leaked into a lane");
    // Check's wrong keys are recorded by how they differ from the key (a replay sends one of
    // the same kind), none of them as sent: the key less its last character included.
    for marker in [
        "[redacted]",
        "[redacted:extended]",
        "[redacted:prefix]",
        "[redacted:case]",
    ] {
        assert!(text.contains(marker), "no {marker} in the lanes");
    }
    assert!(!text.contains(&KEY[..KEY.len() - 1]), "a wrong key leaked");
    assert!(
        !text.contains(&bridgewire::util::swap_case(KEY)),
        "a wrong key leaked"
    );
    // The request envelope: method, path and headers as they crossed.
    let posts: Vec<Value> = text
        .lines()
        .filter(|l| l.contains("\"dir\":\"client→bridge\""))
        .map(|l| {
            let entry: Value = serde_json::from_str(l).unwrap();
            serde_json::from_str(entry["line"].as_str().unwrap()).unwrap()
        })
        .filter(|env: &Value| env["method"] == "POST" && env["path"] == "/")
        .collect();
    assert!(!posts.is_empty());
    assert!(posts.iter().all(|env| {
        env["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "content-type")
    }));
    assert!(text.contains("\"dir\":\"bridge→client\"") && text.contains("\\\"status\\\":401"));

    // Pins on the fresh recording.
    let pins = Command::new(BW)
        .args(["pins", "--update"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(
        pins.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pins.stdout)
    );
    let pins = Command::new(BW)
        .arg("pins")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(pins.status.code(), Some(0));

    // Replay against a fresh reference bridge: every cell matches.
    let replay = Command::new(BW)
        .args(["replay", "sidebridge"])
        .arg(tmp.path())
        .args(["--key", KEY, "--", REF, "--key", KEY])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{so}");
    assert!(!so.contains("FAIL"));
    // Against a flawed build: a divergence, shown as a diff of normalized events.
    let replay = Command::new(BW)
        .args(["replay", "sidebridge"])
        .arg(tmp.path())
        .args(["--key", KEY, "--", REF, "--key", KEY, "--break", "from-bot"])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(1), "{so}");
    assert!(
        so.contains("-      \"from\": \"assistant\"")
            && so.contains("+      \"from\": \"unknown\""),
        "{so}"
    );
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn committed_cells_are_pinned_and_replay_against_the_bundled_bridge() {
    let rec = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/sidebridge");
    let pins = Command::new(BW).args(["pins", rec]).output().unwrap();
    assert_eq!(
        pins.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pins.stdout)
    );
    let replay = Command::new(BW)
        .args(["replay", "sidebridge", rec, "--key", "s3cret"])
        .output()
        .unwrap();
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
}

#[test]
fn proxy_answers_a_side_bridge_502_when_the_bridge_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let proxy = spawn_url(
        Command::new(BW)
            .args([
                "record",
                "sidebridge",
                "--upstream",
                "http://127.0.0.1:1/",
                "--timeout",
                "2",
                "--dir",
            ])
            .arg(tmp.path()),
    );
    let (out, v) = check(&["--url", &proxy.url, "--timeout", "5"], &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    let h1 = verdicts(&v).into_iter().find(|x| x.0 == "SB-H1").unwrap();
    // The 502 body is a Side Bridge message, so H1 passes and the failure shows in the sends.
    assert_eq!(h1.1, "pass", "{h1:?}");
    let r1 = verdicts(&v).into_iter().find(|x| x.0 == "SB-R1").unwrap();
    assert_eq!(r1.1, "fail");
    drop(proxy);
    let text = all_lane_text(tmp.path());
    assert!(
        text.contains("\\\"error\\\":\\\"cannot connect"),
        "{}",
        &text[..text.len().min(400)]
    );
}

#[test]
fn concurrent_chats_through_the_proxy_pair_up_per_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let bridge = spawn_url(Command::new(REF).args(["--listen", "127.0.0.1:0", "--key", KEY]));
    let proxy = spawn_url(
        Command::new(BW)
            .args([
                "record",
                "sidebridge",
                "--upstream",
                &bridge.url,
                "--bridge",
                "ref",
                "--dir",
            ])
            .arg(tmp.path()),
    );
    // Several checks at once through one proxy: their chats interleave on the wire.
    std::thread::scope(|s| {
        for seed in 1..=4 {
            let url = proxy.url.clone();
            s.spawn(move || {
                let (out, v) = check(
                    &["--url", &url, "--key", KEY, "--seed", &seed.to_string()],
                    &[],
                    &[],
                );
                assert_eq!(out.status.code(), Some(0), "{v}");
            });
        }
    });
    drop(proxy);
    let pins = Command::new(BW)
        .args(["pins", "--update", "--format", "json"])
        .arg(tmp.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&pins.stdout).unwrap();
    let cells = doc["cells"].as_array().unwrap();
    assert!(cells.len() > 1);
    for c in cells {
        // Every reply found its request in the same cell, and nothing was invalid.
        assert_eq!(c["invalid"].as_array().unwrap().len(), 0, "{c}");
        assert!(c["grammarDrops"].as_array().unwrap().is_empty(), "{c}");
        assert!(c["laneErrors"].as_array().unwrap().is_empty(), "{c}");
    }
}

#[test]
fn invalid_input_and_a_silent_bridge_exit_2_without_orphans() {
    let out = Command::new(BW)
        .args(["check", "sidebridge", "--url", "https://example.com/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only http://"));
    let out = Command::new(BW)
        .args([
            "check",
            "sidebridge",
            "--url",
            "http://127.0.0.1:1/",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let marker = format!("{}", 4000 + std::process::id() % 1000);
    let t = Instant::now();
    let out = Command::new(BW)
        .args([
            "check",
            "sidebridge",
            "--startup-timeout",
            "0.5",
            "--",
            "sleep",
            &marker,
        ])
        .output()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("printed no address"));
    std::thread::sleep(Duration::from_millis(200));
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let orphan = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .any(|l| l.trim() == format!("sleep {marker}"));
    assert!(!orphan, "the silent bridge was left running");
}

#[test]
fn a_recorder_with_many_chats_keeps_a_bounded_number_of_files_open() {
    use bridgewire::lane::write::{LaneWriter, Line, MAX_OPEN_FILES};
    let t = tempfile::tempdir().unwrap();
    let mut w = LaneWriter::with_run(t.path(), 1).unwrap();
    let chats: Vec<String> = (0..MAX_OPEN_FILES + 20)
        .map(|i| format!("CHAT-{i}"))
        .collect();
    for round in 0..2 {
        for c in &chats {
            for dir in ["client→bridge", "bridge→client"] {
                w.append(Line {
                    scope: Some(c),
                    dir,
                    bytes: format!("{{\"round\":{round}}}").as_bytes(),
                    conn: None,
                });
            }
        }
    }
    assert_eq!(w.failures(), 0);
    let open = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(open < MAX_OPEN_FILES + 64, "{open} descriptors open");
    let first = std::fs::read_to_string(t.path().join("CHAT-0/client→bridge.ndjson")).unwrap();
    assert_eq!(first.lines().count(), 2, "reopened files append");
}

#[test]
fn the_proxy_passes_redirects_through_and_bounds_bad_upstream_replies() {
    // A redirect reaches the client unchanged, so SB-H3 still fails through the proxy. (The
    // proxy starts the bridge itself here: `record sidebridge -- <bridge command>`.)
    let tmp = tempfile::tempdir().unwrap();
    let proxy = spawn_url(
        Command::new(BW)
            .args(["record", "sidebridge", "--dir"])
            .arg(tmp.path())
            .args(["--", REF, "--break", "slash-redirect"]),
    );
    let (_, v) = check(&["--url", &format!("{}sb", proxy.url)], &[], &[]);
    let h3 = verdicts(&v).into_iter().find(|x| x.0 == "SB-H3").unwrap();
    assert_eq!(h3.1, "fail", "{h3:?}");
    assert!(h3.2.contains("301"));
    drop(proxy);
    // An endless body and an oversized body end in a recorded upstream error and a 502.
    for (mode, flags, needle) in [
        (
            "endless-body",
            vec!["--timeout", "0.2"],
            "no data received for 200ms: the app's timeout (--timeout)",
        ),
        (
            "huge-body",
            vec!["--max-body", "1000000"],
            "reply body over",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let bridge = spawn_url(Command::new(REF).args(["--break", mode]));
        let proxy = spawn_url(
            Command::new(BW)
                .args(["record", "sidebridge", "--upstream", &bridge.url])
                .args(&flags)
                .arg("--dir")
                .arg(tmp.path()),
        );
        let t = Instant::now();
        let out = Command::new(BW)
            .args([
                "check",
                "sidebridge",
                "--url",
                &proxy.url,
                "--timeout",
                "5",
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{mode}: {:?}",
            t.elapsed()
        );
        assert_eq!(out.status.code(), Some(1), "{mode}");
        drop(proxy);
        let text = all_lane_text(tmp.path());
        assert!(text.contains(needle), "{mode}: lanes lack {needle:?}");
        assert!(text.contains("\\\"status\\\":502"), "{mode}");
    }
}

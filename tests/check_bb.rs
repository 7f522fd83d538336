//! `bridgewire check bb` end to end: the real CLI drives the real reference bridge (and its
//! real provider child) over real pipes. The clean bridge passes every rule; each break mode
//! fails exactly its rule(s) plus the kit's documented skip cascade (reference §9.5/§9.6);
//! misbehaving programs (hanging, crashing, non-UTF-8, invalid JSON, a 100 MB line, silence)
//! get named verdicts in bounded time and leave no process behind.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");
const PROVIDER: &str = env!("CARGO_BIN_EXE_bb-ref-provider");

/// The repository's fixture (the reference bridge's: `/noop`, `/hold`, its icons).
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bridgewire.toml")
}

fn run_check(extra: &[&str], bridge: &[&str], envs: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new(BRIDGEWIRE);
    cmd.arg("check")
        .arg("bb")
        .args(extra)
        .arg("--")
        .args(bridge);
    cmd.env("BB_REF_PROVIDER_COMMAND", PROVIDER);
    cmd.env_remove("BB_REF_BRIDGE_BREAK");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // Never read a bridgewire.toml from the test's working directory by accident.
    cmd.current_dir(std::env::temp_dir());
    let t0 = Instant::now();
    let out = cmd.output().expect("run bridgewire");
    (out, t0.elapsed())
}

fn json_report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not a JSON report ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `id → (status, detail)`.
fn statuses(report: &Value) -> BTreeMap<String, (String, String)> {
    report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                (
                    v["status"].as_str().unwrap().to_string(),
                    v["detail"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect()
}

const ALL: &[&str] = &[
    "rpc/unknown-method",
    "rpc/invalid-params",
    "rpc/non-json-ignored",
    "rpc/response-not-request",
    "handshake/initialize",
    "skills/configure-declared",
    "commands/list-declared",
    "session/start-identity",
    "turn/lifecycle",
    "events/schema-valid",
    "item/opens-before-delta",
    "presentation/icon-namespaced-declared",
    "stop/release-not-interrupted",
    "session/resume-identity",
    "session/resume-id-uniqueness",
    "session/fork-identity",
    "turn/settles-without-activity",
    "recovery/session-archived",
    "session/threads-independent",
    "stop/interrupt-settles-before-result",
    "turn/delta-outside-turn",
    "stop/interrupt-settles-interrupted",
    "stop/interrupt-closes-items",
    "stop/nothing-after-stop",
    "turn/vouched-key-opened",
    "session/identity-before-deltas",
    "session/identity-echoes-handle",
    "recovery/hint-names-hosted-thread",
    "thread/delta-echoes-thread-id",
    "rpc/jsonrpc-envelope",
    "transport/stdout-protocol-only",
    "events/grammar",
];

/// After a failed `session/start-identity` (fork declared, every opt-in fixture given).
const START_CASCADE: &[&str] = &[
    "turn/lifecycle",
    "events/schema-valid",
    "item/opens-before-delta",
    "stop/release-not-interrupted",
    "session/resume-identity",
    "session/resume-id-uniqueness",
    "session/fork-identity",
    "turn/settles-without-activity",
    "recovery/session-archived",
    "session/threads-independent",
    "stop/interrupt-settles-before-result",
];

struct Expect {
    mode: &'static str,
    fail: &'static [&'static str],
    skipped: &'static [&'static str],
    /// Rules that produce no verdict (not applicable).
    absent: &'static [&'static str],
    /// Rules listed as not run (nothing to judge: no interrupt, no stop answered).
    not_run: &'static [&'static str],
}

const NO_PROBE: &[&str] = &["rpc/non-json-ignored", "rpc/response-not-request"];
const HANDSHAKE_ABSENT: &[&str] = &[
    "skills/configure-declared",
    "commands/list-declared",
    "session/fork-identity",
];

/// Break mode → expected verdicts, from the bridge's module doc and the kit's cascade.
const TABLE: &[Expect] = &[
    Expect {
        mode: "drop-unknown-method",
        fail: &["rpc/unknown-method"],
        skipped: NO_PROBE,
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "drop-invalid-params",
        fail: &["rpc/invalid-params"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "crash-on-non-json",
        // The bridge is gone: the rule that met the exit carries it; the probe, the handshake
        // and the start after it are skipped naming it, the start cascade skips the rest.
        fail: &["rpc/non-json-ignored"],
        skipped: AFTER_NON_JSON_CRASH,
        absent: &[
            "skills/configure-declared",
            "commands/list-declared",
            "session/fork-identity",
            "presentation/icon-namespaced-declared",
        ],
        not_run: &[],
    },
    Expect {
        mode: "error-on-response",
        fail: &["rpc/response-not-request"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "no-grammar-versions",
        fail: &["handshake/initialize"],
        skipped: &[],
        absent: HANDSHAKE_ABSENT,
        not_run: &[],
    },
    Expect {
        mode: "wrong-protocol-version",
        fail: &["handshake/initialize"],
        skipped: &[],
        absent: HANDSHAKE_ABSENT,
        not_run: &[],
    },
    Expect {
        mode: "skills-undeclared-accepted",
        fail: &["skills/configure-declared"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "commands-declared-refused",
        fail: &["commands/list-declared"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "start-no-identity",
        fail: &["session/start-identity"],
        skipped: START_CASCADE,
        absent: &["presentation/icon-namespaced-declared"],
        // No turn ran: no event was assembled for the grammar to judge. No result carried a
        // handle for the identity to echo.
        not_run: &[
            "stop/interrupt-settles-interrupted",
            "stop/interrupt-closes-items",
            "stop/nothing-after-stop",
            "session/identity-echoes-handle",
            "events/grammar",
        ],
    },
    Expect {
        mode: "no-turn-completed",
        fail: &["turn/lifecycle"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "invalid-event",
        fail: &["events/schema-valid"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "delta-outside-turn",
        fail: &["turn/delta-outside-turn"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "interrupt-completes",
        fail: &["stop/interrupt-settles-interrupted"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "delta-after-stop",
        fail: &["stop/nothing-after-stop"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    // A legal reclassification: bb's assembler settles the item twice itself and its host
    // drops the second; events/grammar passes naming it (it failed before).
    Expect {
        mode: "search-reclassified",
        fail: &[],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "plan-step-in-progress",
        fail: &["events/schema-valid"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "malformed-client-request-id",
        fail: &["events/schema-valid"],
        // The refused message held the turn's acceptance, which turn/lifecycle (beyond the
        // kit) needs: skipped naming the refusal, one fault, one verdict.
        skipped: &["turn/lifecycle"],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "delta-before-open",
        fail: &["item/opens-before-delta"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "release-interrupts",
        fail: &["stop/release-not-interrupted"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "resume-reuses-ids",
        fail: &["session/resume-id-uniqueness"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "fork-no-identity",
        fail: &["session/fork-identity"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "zero-work-hangs",
        fail: &["turn/settles-without-activity"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "archived-no-hint",
        fail: &["recovery/session-archived"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "threads-serialized",
        fail: &["session/threads-independent"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "stop-before-settle",
        fail: &["stop/interrupt-settles-before-result"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "undeclared-icon",
        fail: &["presentation/icon-namespaced-declared"],
        skipped: &[],
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "stray-stdout",
        // The stray write glued to the answer: the answer is lost, and the transport rule
        // names the stray line itself.
        fail: &["rpc/unknown-method", "transport/stdout-protocol-only"],
        skipped: NO_PROBE,
        absent: &[],
        not_run: &[],
    },
    Expect {
        mode: "crash-mid-turn",
        // The bridge doc: turn/lifecycle carries the exit; every later rule that needs an
        // answer, from stop/release-not-interrupted on, is skipped naming it (one fault, one
        // verdict; bb's kit fails each, kept under --kit-only), while the event rules pass on
        // what was received. An unanswered thread/resume is skipped as the kit skips it, with
        // the uniqueness rule after it (§9.6).
        fail: &["turn/lifecycle"],
        // The interrupted turn never settles (the bridge is gone): its status was not seen,
        // so stop/interrupt-settles-interrupted is skipped, not passed.
        skipped: &[
            "stop/release-not-interrupted",
            "session/fork-identity",
            "turn/settles-without-activity",
            "recovery/session-archived",
            "session/threads-independent",
            "stop/interrupt-settles-before-result",
            "session/resume-identity",
            "session/resume-id-uniqueness",
            "stop/interrupt-settles-interrupted",
            "stop/interrupt-closes-items",
            // No stop was answered, no hint sent, before the exit: nothing seen to judge.
            "stop/nothing-after-stop",
            "recovery/hint-names-hosted-thread",
        ],
        absent: &[],
        not_run: &[],
    },
];

/// After a crash on the non-JSON probe: the rules the exit left unanswered, skipped naming the
/// probe's rule, then the start cascade with the handshake failed too (fork treated as `none`:
/// no fork verdict).
const AFTER_NON_JSON_CRASH: &[&str] = &[
    "rpc/response-not-request",
    "handshake/initialize",
    "session/start-identity",
    "turn/lifecycle",
    "events/schema-valid",
    "item/opens-before-delta",
    "stop/release-not-interrupted",
    "session/resume-identity",
    "session/resume-id-uniqueness",
    "turn/settles-without-activity",
    "recovery/session-archived",
    "session/threads-independent",
    "stop/interrupt-settles-before-result",
    // No delta ever arrived: the wire rules have nothing to judge (no pass without it), nor
    // has the grammar, and "no notification of its kind was sent" is no evidence of a run the
    // exit cut short; each is skipped naming the exit, not "not run" as if no scenario had
    // called for it.
    "turn/delta-outside-turn",
    "stop/interrupt-settles-interrupted",
    "stop/interrupt-closes-items",
    "turn/vouched-key-opened",
    "stop/nothing-after-stop",
    "thread/delta-echoes-thread-id",
    "events/grammar",
    "session/identity-before-deltas",
    "session/identity-echoes-handle",
    "recovery/hint-names-hosted-thread",
];

fn check_mode(e: &Expect) -> Result<(), String> {
    let fx = fixture();
    let (out, _) = run_check(
        &[
            "--format",
            "json",
            "--timeout-ms",
            "3000",
            "--fixture",
            fx.to_str().unwrap(),
        ],
        &[BRIDGE],
        &[("BB_REF_BRIDGE_BREAK", e.mode)],
    );
    let report = json_report(&out);
    let got = statuses(&report);
    let mut problems = Vec::new();
    for id in ALL {
        let want = if e.fail.contains(id) {
            Some("fail")
        } else if e.skipped.contains(id) {
            Some("skipped")
        } else if e.absent.contains(id) || e.not_run.contains(id) {
            Some("not-run")
        } else {
            Some("pass")
        };
        let have = got.get(*id).map(|(s, _)| s.as_str());
        if want != have {
            problems.push(format!(
                "  {id}: expected {}, got {} {}",
                want.unwrap_or("no verdict"),
                have.unwrap_or("no verdict"),
                got.get(*id).map(|(_, d)| d.as_str()).unwrap_or("")
            ));
        }
    }
    let code = out.status.code();
    let want_code = i32::from(!(e.fail.is_empty() && e.skipped.is_empty()));
    if code != Some(want_code) {
        problems.push(format!("  exit code {code:?}, expected {want_code}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("break mode {}:\n{}", e.mode, problems.join("\n")))
    }
}

#[test]
fn reference_bridge_passes_every_rule() {
    let fx = fixture();
    let (out, _) = run_check(
        &["--format", "json", "--fixture", fx.to_str().unwrap()],
        &[BRIDGE],
        &[],
    );
    let report = json_report(&out);
    let got = statuses(&report);
    let ids: BTreeSet<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(ids, ALL.iter().copied().collect(), "{report:#}");
    for (id, (st, d)) in &got {
        assert_eq!(st, "pass", "{id}: {d}");
    }
    // The kit's order.
    let order: Vec<&str> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(order, ALL);
    assert_eq!(report["format_version"], 1);
    assert_eq!(report["summary"]["ok"], true);
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/schema/report.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&report)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match its schema: {errors:?}"
    );
    assert_eq!(out.status.code(), Some(0));
    // The bridge and its provider children (same process group) are gone.
    let pid = report["target_pid"].as_u64().expect("target_pid") as u32;
    let members = bridgewire::bb::transport::live_group_members(pid);
    assert!(
        members.is_empty(),
        "bridge group {pid} still has {members:?}"
    );
}

#[test]
fn each_break_mode_fails_exactly_its_rules() {
    // Four at a time: the machine is shared.
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let chunks: Vec<Vec<&Expect>> = TABLE.chunks(6).map(|c| c.iter().collect()).collect();
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let mine: Vec<&Expect> = chunks
                    .iter()
                    .flatten()
                    .skip(w)
                    .step_by(4)
                    .copied()
                    .collect();
                s.spawn(move || mine.into_iter().map(check_mode).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    });
    assert_eq!(results.len(), TABLE.len());
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
}

/// bb-strict validation names the field path and what bb allows.
#[test]
fn schema_valid_names_the_field_and_the_allowed_values() {
    let fx = fixture();
    for (mode, needles) in [
        (
            "plan-step-in-progress",
            &[
                "item.steps.1.status: \"inProgress\" is not allowed",
                "allowed values: [\"pending\",\"active\",\"completed\",\"failed\"]",
            ][..],
        ),
        (
            "malformed-client-request-id",
            &[
                "(input.accepted): clientRequestId: \"req_",
                "^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}$",
            ][..],
        ),
    ] {
        let (out, _) = run_check(
            &["--format", "json", "--fixture", fx.to_str().unwrap()],
            &[BRIDGE],
            &[("BB_REF_BRIDGE_BREAK", mode)],
        );
        let got = statuses(&json_report(&out));
        let (status, detail) = &got["events/schema-valid"];
        assert_eq!(status, "fail", "{mode}");
        for n in needles {
            assert!(detail.contains(n), "{mode}: {detail} lacks {n}");
        }
    }
}

#[test]
fn without_opt_in_fixtures_opt_in_rules_are_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("empty.toml");
    std::fs::write(&fx, "[bb.fixture]\npromptInput = \"hello\"\n").unwrap();
    let (out, _) = run_check(
        &["--format", "json", "--fixture", fx.to_str().unwrap()],
        &[BRIDGE],
        &[],
    );
    let got = statuses(&json_report(&out));
    for id in [
        "presentation/icon-namespaced-declared",
        "turn/settles-without-activity",
        "session/threads-independent",
        "stop/interrupt-settles-before-result",
        "stop/interrupt-settles-interrupted",
        "stop/interrupt-closes-items",
    ] {
        let (status, why) = &got[id];
        assert_eq!(status, "not-run", "{id} ran without its fixture");
        assert!(why.contains("[bb.fixture]"), "{id}: {why}");
    }
    assert_eq!(got.len(), ALL.len());
    assert_eq!(
        got.values().filter(|(s, _)| s == "pass").count(),
        ALL.len() - 6,
        "{got:?}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn text_report_and_report_files() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let junit = dir.path().join("out/junit.xml");
    let md = dir.path().join("summary.md");
    let html = dir.path().join("r/report.html");
    let (out, _) = run_check(
        &[
            "--fixture",
            fx.to_str().unwrap(),
            "--timeout-ms",
            "3000",
            "--junit",
            junit.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &[BRIDGE],
        &[("BB_REF_BRIDGE_BREAK", "no-turn-completed")],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "pass    rpc/unknown-method");
    assert!(
        text.contains("fail    turn/lifecycle — turn never settled (no turn/completed)"),
        "{text}"
    );
    // The frames around the first failure: the turn/start that was sent.
    assert!(
        text.contains("first failure: turn/lifecycle — wire frames:"),
        "{text}"
    );
    assert!(text.contains("→ {\"jsonrpc\":\"2.0\""), "{text}");
    assert!(text.contains("\"method\":\"turn/start\""), "{text}");
    // Every live rule of the catalogue gets a verdict; one fails.
    let live = serde_json::from_str::<serde_json::Value>(include_str!("../rules/bb.json"))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"] == "live")
        .count();
    assert_eq!(
        *lines.last().unwrap(),
        format!("{} passed, 1 failed", live - 1)
    );
    assert_eq!(out.status.code(), Some(1));

    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(
        x.contains(&format!("tests=\"{live}\"")) && x.contains("failures=\"1\""),
        "{x}"
    );
    let m = std::fs::read_to_string(&md).unwrap();
    assert!(m.contains("| ❌ fail | MUST | `turn/lifecycle` |"), "{m}");
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.starts_with("<!DOCTYPE html>") && h.contains("turn/lifecycle"));
}

#[test]
fn html_defaults_under_reports() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let out = Command::new(BRIDGEWIRE)
        .args([
            "check",
            "bb",
            "--fixture",
            fx.to_str().unwrap(),
            "--html",
            "--",
            BRIDGE,
        ])
        .env("BB_REF_PROVIDER_COMMAND", PROVIDER)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.path()
            .join("reports/bridgewire-check-bb.html")
            .is_file()
    );
}

/// Pids listed one per line in `file`.
fn pids(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("");
            state != "Z"
        }
        Err(_) => false,
    }
}

fn assert_all_gone(pidfile: &Path) {
    let list = pids(pidfile);
    assert!(list.len() >= 2, "pid file {pidfile:?} holds {list:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while list.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = list.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    // And nothing else in the bridge's process group.
    let members = bridgewire::bb::transport::live_group_members(list[0]);
    assert!(
        members.is_empty(),
        "process group {} still has {members:?}",
        list[0]
    );
}

#[test]
fn hanging_bridge_gets_named_verdicts_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let script = format!(
        "echo $$ > {p}; sleep 1000 & echo $! >> {p}; exec sleep 1000",
        p = pidfile.display()
    );
    let (out, took) = run_check(
        &["--format", "json", "--timeout-ms", "300"],
        &["sh", "-c", &script],
        &[],
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let report = json_report(&out);
    let got = statuses(&report);
    assert_eq!(got["rpc/unknown-method"].0, "fail");
    assert!(
        got["rpc/unknown-method"].1.contains("silently dropped"),
        "{got:?}"
    );
    assert_eq!(got["rpc/non-json-ignored"].0, "skipped");
    assert_eq!(got["handshake/initialize"].0, "fail");
    assert!(got["handshake/initialize"].1.contains("unanswered"));
    assert_eq!(got["session/start-identity"].0, "fail");
    assert_eq!(
        got["turn/lifecycle"],
        (
            "skipped".into(),
            "prerequisite session/start-identity failed".into()
        )
    );
    assert_eq!(out.status.code(), Some(1));
    assert_all_gone(&pidfile);
}

#[test]
fn crashing_bridge_is_named_and_its_group_is_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let script = format!(
        "echo $$ > {p}; sleep 1000 & echo $! >> {p}; echo oops >&2; exit 3",
        p = pidfile.display()
    );
    let (out, took) = run_check(
        &["--format", "json", "--timeout-ms", "500"],
        &["sh", "-c", &script],
        &[],
    );
    // Stdout stays open in the orphaned sleep, so waits run to their bound, but no longer.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let report = json_report(&out);
    let got = statuses(&report);
    assert_eq!(got["rpc/unknown-method"].0, "fail");
    assert!(
        got["rpc/unknown-method"]
            .1
            .contains("bridge exited (exit status 3)"),
        "{got:?}"
    );
    // One fault, one verdict: one bridge process serves every rule, so the rule that met the
    // exit carries it, and every later rule that got no answer is skipped naming that rule
    // (before: each failed, `unanswered (bridge exited …)`).
    let fails: Vec<&String> = got
        .iter()
        .filter(|(_, (st, _))| st == "fail")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(fails, ["rpc/unknown-method"], "{got:?}");
    for id in ["handshake/initialize", "session/start-identity"] {
        assert_eq!(got[id].0, "skipped", "{id}: {got:?}");
        assert!(
            got[id].1.starts_with(
                "not judged: the bridge had exited during rpc/unknown-method, which carries that fault: "
            ),
            "{id}: {got:?}"
        );
    }
    assert_eq!(report["target_exit"], "exit status 3");
    assert!(report["stderr_tail"].as_str().unwrap().contains("oops"));
    assert_all_gone(&pidfile);
}

#[test]
fn sigterm_to_bridgewire_kills_the_bridge_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let script = format!(
        "sleep 1000 & echo $! >> {p}.tmp; echo $$ > {p}; cat {p}.tmp >> {p}; exec sleep 1000",
        p = pidfile.display()
    );
    let mut child = Command::new(BRIDGEWIRE)
        .args([
            "check",
            "bb",
            "--timeout-ms",
            "20000",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .current_dir(std::env::temp_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids(&pidfile).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "bridgewire ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_all_gone(&pidfile);
}

#[test]
fn crash_with_closed_stdout_ends_at_once() {
    let (out, took) = run_check(&["--format", "json"], &["sh", "-c", "exit 7"], &[]);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let got = statuses(&json_report(&out));
    assert!(
        got["rpc/unknown-method"].1.contains("exit status 7"),
        "{got:?}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn garbage_output_gets_named_verdicts() {
    let cases: &[(&str, &str)] = &[
        (
            "printf '\\377\\376 not utf8\\n'; cat >/dev/null",
            "non-UTF-8",
        ),
        ("echo '{not json'; cat >/dev/null", "non-JSON"),
        ("head -c 100000000 /dev/zero; cat >/dev/null", "oversized"),
        ("cat >/dev/null", "initialize unanswered"),
    ];
    for (script, word) in cases {
        let (out, took) = run_check(
            &["--format", "json", "--timeout-ms", "1000"],
            &["sh", "-c", script],
            &[],
        );
        assert!(took < Duration::from_secs(30), "{script}: took {took:?}");
        let report = json_report(&out);
        let got = statuses(&report);
        assert_eq!(got["rpc/unknown-method"].0, "fail", "{script}");
        // The handshake comes a few bounded waits later: by then even a 100 MB line was read.
        let (st, detail) = &got["handshake/initialize"];
        assert_eq!(st, "fail", "{script}");
        assert!(detail.contains(word), "{script}: {detail}");
        assert_eq!(out.status.code(), Some(1), "{script}");
    }
}

/// Wire mistakes named for what they are: a response id of the wrong type (string "1" for
/// request 1) is not "unanswered", an array line is a JSON-RPC batch, a huge line gets a
/// warning with its size. The first two are rpc/jsonrpc-envelope's faults, which fails for
/// them: the rules whose requests went unanswered so are skipped naming it (one fault, one
/// verdict; each of them failed before).
#[test]
fn wire_mistakes_are_named_for_what_they_are() {
    let answer_as = |shape: &str| {
        format!(
            "import json,sys\nfor l in sys.stdin:\n    m=json.loads(l) if l.startswith('{{') else None\n    if isinstance(m,dict) and 'id' in m and 'method' in m:\n        r={{'jsonrpc':'2.0','id':m['id'],'error':{{'code':-32601,'message':'no'}}}}\n        {shape}\n        sys.stdout.flush()\n"
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (
            answer_as("r['id']=str(r['id']); print(json.dumps(r))"),
            "rpc/unknown-method",
            "could not be judged apart from rpc/jsonrpc-envelope, which fails for it: answered with the wrong id type: the response at message 0 has id \"1\" (a string) for request id 1 (a number)",
        ),
        (
            answer_as("print(json.dumps([r]))"),
            "handshake/initialize",
            "was answered only inside a JSON-RPC batch (a JSON array line)",
        ),
        (
            format!(
                "import sys\nprint('{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"' + 'a'*2000000 + '\"}}')\nsys.stdout.flush()\n{}",
                "sys.stdin.read()"
            ),
            "handshake/initialize",
            // The line the script prints, measured here.
            Box::leak(
                format!(
                    "warning: 1 stdout line(s) over 1048576 bytes (largest: {} bytes)",
                    format!(
                        r#"{{"jsonrpc":"2.0","method":"x","params":"{}"}}"#,
                        "a".repeat(2_000_000)
                    )
                    .len()
                )
                .into_boxed_str(),
            ),
        ),
    ];
    for (script, rule, needle) in &cases {
        let (out, _) = run_check(
            &["--format", "json", "--timeout-ms", "1000"],
            &["python3", "-c", script],
            &[],
        );
        let got = statuses(&json_report(&out));
        let (st, detail) = &got[*rule];
        let envelope = !needle.starts_with("warning");
        assert_eq!(
            st,
            if envelope { "skipped" } else { "fail" },
            "{rule}: {detail}"
        );
        assert!(detail.contains(needle), "{rule}: {detail}\nlacks {needle}");
        if envelope {
            assert!(!detail.contains("unanswered"), "{rule}: {detail}");
            let (st, detail) = &got["rpc/jsonrpc-envelope"];
            let sub = if needle.contains("batch") {
                "one-message-per-line: "
            } else {
                "response(s) carry their request's numeric id as a string (first: id \"1\" at message 0, for request id 1)"
            };
            assert!(st == "fail" && detail.contains(sub), "{st} {detail}");
            let failed: Vec<&String> = got
                .iter()
                .filter(|(_, (st, _))| st == "fail")
                .map(|(r, _)| r)
                .collect();
            assert_eq!(failed, ["rpc/jsonrpc-envelope"], "one fault, one verdict");
        }
    }
}

#[test]
fn usage_errors_exit_2() {
    let (out, _) = run_check(&[], &["/nonexistent/bridge-program"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start the bridge"));
    let (out, _) = run_check(
        &["--fixture", "/nonexistent/bridgewire.toml"],
        &[BRIDGE],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(BRIDGEWIRE)
        .args(["check", "bb"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn rules_lists_the_catalogue() {
    let out = Command::new(BRIDGEWIRE)
        .args(["rules", "--protocol", "bb", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let live: BTreeSet<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"] == "live")
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(live, ALL.iter().copied().collect());
    let out = Command::new(BRIDGEWIRE)
        .args(["rules", "--format", "markdown", "--mode", "recorded"])
        .output()
        .unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(
        md.contains("| `recorded/replays` | bb | MUST | recorded |"),
        "{md}"
    );
    let out = Command::new(BRIDGEWIRE).args(["rules"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("turn/lifecycle ")),
        "{text}"
    );
    let out = Command::new(BRIDGEWIRE)
        .args(["rules", "--protocol", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn flooding_bridge_is_bounded_and_named() {
    use bridgewire::bb::conformance;
    use bridgewire::bb::transport::Limits;
    let opts = conformance::Options {
        command: vec![
            "sh".into(),
            "-c".into(),
            r#"exec yes '{"jsonrpc":"2.0","method":"x"}'"#.into(),
        ],
        fixture: Default::default(),
        timeout: Duration::from_millis(300),
        limits: Limits {
            max_line: 1 << 16,
            max_total: 4 << 20,
            stderr_tail: 4096,
        },
        kit_only: false,
    };
    let t0 = Instant::now();
    let (verdicts, info) = conformance::run(&opts, &mut |_| {}).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        info.notes.iter().any(|n| n.contains("flood")),
        "{:?}",
        info.notes
    );
    let first = &verdicts[0];
    assert_eq!(first.id, "rpc/unknown-method");
    assert_eq!(first.status, bridgewire::rule::Status::Fail);
    let init = verdicts
        .iter()
        .find(|v| v.id == "handshake/initialize")
        .unwrap();
    assert!(init.detail.contains("flood"), "{}", init.detail);
    assert!(bridgewire::bb::transport::live_group_members(info.pid).is_empty());
}

/// `--recordings` adds the recorded-traffic rules: they pass on the reference bridge and fail,
/// named, when the bridge crashes mid-turn.
#[test]
fn recordings_add_the_recorded_cell_rules() {
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/bb-ref");
    let run = |breaks: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bridgewire"))
            .args([
                "check",
                "bb",
                "--format",
                "json",
                "--recordings",
                cells,
                "--",
            ])
            .arg(env!("CARGO_BIN_EXE_bb-ref-bridge"))
            .env(
                "BB_REF_PROVIDER_COMMAND",
                env!("CARGO_BIN_EXE_bb-ref-provider"),
            )
            .env("BB_REF_BRIDGE_BREAK", breaks)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), doc)
    };
    let status_of = |doc: &serde_json::Value, id: &str| -> String {
        doc["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .map(|v| v["status"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no verdict {id}"))
    };
    let (code, doc) = run("");
    assert_eq!(code, Some(0), "{doc:#}");
    for cell in ["fork", "resume", "stop-interrupt", "turn-tools"] {
        for rule in [
            "replays",
            "events-schema-valid",
            "grammar",
            "turn-lifecycle",
            "not-empty",
        ] {
            assert_eq!(status_of(&doc, &format!("recorded/{cell}/{rule}")), "pass");
        }
    }
    let (code, doc) = run("crash-mid-turn");
    assert_eq!(code, Some(1));
    assert_eq!(status_of(&doc, "recorded/turn-tools/replays"), "fail");
    let detail = doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "recorded/turn-tools/replays")
        .unwrap()["detail"]
        .clone();
    assert!(
        detail
            .as_str()
            .unwrap()
            .contains("bridge exited while waiting for"),
        "{detail}"
    );
}

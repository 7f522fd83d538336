//! `check sidebridge`, `replay sidebridge` and `parity` against a Side Bridge server that is
//! not ours and frames its replies on a raw socket: `tests/peers/sidebridge-perl/server.pl`
//! (Perl core modules only). Python's and Node's HTTP stacks all frame a reply the same polite
//! way; each switch of this one frames it in a way RFC 9112 allows but they never produce (a
//! reply written a byte at a time, chunk extensions and trailers, interim 1xx replies, a body
//! the close ends, odd field-name case and whitespace, HTTP/1.0 kept alive, `Keep-Alive:
//! timeout=1`, an unsolicited 408 before an idle close) or a flaw (a Content-Length over or
//! short of the body, bare LF line ends, two Content-Length values). A legal switch gets the
//! default build's verdicts, rule by rule (the independent source: the same server framing
//! politely); a flaw fails SB-D1 naming its cause; a short Content-Length, which the app's
//! client discards past, is a note. The recorded chats of `tests/peers/sidebridge-audit/cells`
//! (the server speaks that server's phrases) replay and compare the same way.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const KEY: &str = "perl-key-1";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sidebridge-perl")
}

fn audit_cells() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sidebridge-audit/cells")
}

/// The Perl interpreter, or `None` after [`common::need::missing`] (a panic under CI).
fn perl(test: &str) -> Option<&'static str> {
    match Command::new("perl")
        .args(["-MIO::Select", "-MJSON::PP", "-e", "1"])
        .output()
    {
        Ok(o) if o.status.success() => Some("perl"),
        _ => {
            common::need::missing(test, "perl", "the Perl peer needs perl with core modules");
            None
        }
    }
}

/// The legal framings: each gets the default build's verdicts. `cl-short` (a Content-Length
/// short of the body, the JSON whole within it) too, with a note naming the bytes past it.
const LEGAL: &[&str] = &[
    "trickle",
    "split",
    "chunked-ext",
    "continue",
    "early-hints",
    "close-delimited",
    "odd-headers",
    "http10-keepalive",
    "ka-timeout",
    "idle-408",
    "continue,chunked-ext,odd-headers",
    "cl-short",
];

/// The flawed framings, and a server that stops answering midway: SB-D1's `received` fails
/// saying this.
const FLAWED: &[(&str, &str)] = &[
    ("cl-long", "bytes its Content-Length announced"),
    ("chunk-stall", "the chunked body stopped after"),
    ("chunk-no-crlf", "XY\\\", not CRLF"),
    ("chunk-size-off", "not CRLF"),
    ("bare-lf", "ends in a bare LF, not CRLF"),
    ("dup-cl", "the reply's length cannot be known"),
    ("deaf-after-20", "the bridge stopped answering: "),
    (
        "exit-after-20",
        "the bridge exited (exit status: 3) after `",
    ),
    (
        "exit-after-0",
        "the bridge exited (exit status: 3) after `timing/session-start`",
    ),
];

/// The flaws of every reply the server writes from some point on: one fault, so SB-D1 is the
/// only rule that fails or warns. Broken framing (bare-lf, dup-cl): the rules whose own
/// exchanges meet it (SB-H1, SB-H2, SB-H3, SB-A1, SB-R10) show it skipped naming SB-D1. A stop
/// (every body stalls, or no request is answered after the 20th): every rule shows the requests
/// that timed out in it, and the ones not sent after it, skipped naming SB-D1 (before: cl-long
/// failed SB-D1, SB-H1 and SB-A1 and warned SB-H2, SB-H3, SB-H4 and SB-R10; deaf-after-20
/// failed SB-D1 and SB-A1 and warned SB-R10). An exit midway (exit-after-N: the request it
/// met is hung up on, the next connection refused) likewise (before: exit-after-20 failed
/// SB-D1 and SB-A1 and warned SB-R10; exit-after-0 warned SB-H2 beside SB-D1).
const ONE_VERDICT: &[&str] = &[
    "bare-lf",
    "dup-cl",
    "cl-long",
    "chunk-stall",
    "chunk-no-crlf",
    "chunk-size-off",
    "deaf-after-20",
    "exit-after-20",
    "exit-after-0",
];

/// A server that leaves one request unanswered and answers the next: the timeout is that
/// request's rule's alone (`rule`, a SHOULD, fails (warns) saying `says`; SB-D1 does not fail:
/// it passes, or is skipped naming SB-H2 when the timed first request had no reply; every
/// other rule as the default build, but for the INFO rules listed, which record what the
/// unanswered requests got: nothing, so not run). Before, three malformed requests in a row left unanswered (SB-R9's empty and
/// `null` bodies, SB-R10's truncated JSON) read as a stop: SB-D1 failed on the 14 requests of
/// the emulated client that were then not sent, a false alarm on a live server.
const OWN_STALL: &[(&str, &str, &str, &[&str])] = &[
    (
        "hang-malformed",
        "SB-R10",
        "truncated-json: no data received for 2s",
        &["SB-R9"],
    ),
    (
        "slow-first",
        "SB-H2",
        "session start: no data received for 2s",
        &[],
    ),
];

/// Rule id and a word on its verdict, in the report's order.
type ByRule = Vec<(String, String)>;

/// `check sidebridge --format json` against the server with `switches`: each rule's status,
/// and each rule's verdict as JSON text (SB-D1's: the whole output when it has none).
fn check(perl: &str, switches: &str) -> (ByRule, ByRule) {
    let out = Command::new(BW)
        .args(["check", "sidebridge", "--format", "json", "--timeout", "2"])
        .args(["--startup-timeout", "30", "--key", KEY, "--config"])
        .arg(dir().join("fixture.toml"))
        .arg("--")
        .arg(perl)
        .arg(dir().join("server.pl"))
        .args(["--key", KEY, "--v", switches])
        .stdin(Stdio::null())
        .output()
        .expect("bridgewire runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let verdicts = v["verdicts"].as_array().cloned().unwrap_or_default();
    let statuses = verdicts
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap_or("?").to_string(),
                r["status"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let mut texts: Vec<(String, String)> = verdicts
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or("?").to_string(), r.to_string()))
        .collect();
    if !texts.iter().any(|(id, _)| id == "SB-D1") {
        texts.push(("SB-D1".into(), common::proc::output_text(&out)));
    }
    (statuses, texts)
}

/// Rule `id`'s verdict text of a [`check`].
fn text<'a>(texts: &'a [(String, String)], id: &str) -> &'a str {
    texts
        .iter()
        .find(|(i, _)| i == id)
        .map(|(_, t)| t.as_str())
        .unwrap_or("")
}

#[test]
fn check_judges_each_framing_as_the_default_build_or_names_its_flaw() {
    let Some(perl) = perl("check_judges_each_framing_as_the_default_build_or_names_its_flaw")
    else {
        return;
    };
    let mut jobs: Vec<&str> = vec![""];
    jobs.extend(LEGAL);
    jobs.extend(FLAWED.iter().map(|(s, _)| *s));
    jobs.extend(OWN_STALL.iter().map(|(s, ..)| *s));
    let results = common::verdicts::two_at_a_time(&jobs, |s| check(perl, s));
    let (base, _) = &results[0];
    assert!(
        base.len() > 1 && base.iter().any(|(id, st)| id == "SB-D1" && st == "pass"),
        "the default build's run: {base:?}"
    );
    let mut problems = Vec::new();
    for (switch, (statuses, texts)) in jobs.iter().zip(&results).skip(1) {
        let received = text(texts, "SB-D1");
        if let Some((_, rule, says, info)) = OWN_STALL.iter().find(|(s, ..)| s == switch) {
            let status = |id: &str| {
                statuses
                    .iter()
                    .find(|(i, _)| i == id)
                    .map(|(_, s)| s.as_str())
            };
            let others = |l: &[(String, String)]| -> Vec<(String, String)> {
                l.iter()
                    .filter(|(id, _)| id != rule && id != "SB-D1" && !info.contains(&id.as_str()))
                    .cloned()
                    .collect()
            };
            if status(rule) != Some("fail") || !text(texts, rule).contains(says) {
                problems.push(format!(
                    "--v {switch}: {rule} {:?}, want fail (a SHOULD: warn) saying {says:?}: {}",
                    status(rule),
                    text(texts, rule)
                ));
            }
            if status("SB-D1") == Some("fail") || others(statuses) != others(base) {
                problems.push(format!(
                    "--v {switch}: the other rules {statuses:?}\n  default: {base:?}"
                ));
            }
            continue;
        }
        match FLAWED.iter().find(|(s, _)| s == switch) {
            Some((_, says)) => {
                let d1 = statuses.iter().find(|(id, _)| id == "SB-D1");
                if d1.map(|(_, s)| s.as_str()) != Some("fail") || !received.contains(says) {
                    problems.push(format!(
                        "--v {switch}: SB-D1 {d1:?}, want fail saying {says:?}: {received}"
                    ));
                }
                let beside: Vec<_> = statuses
                    .iter()
                    .filter(|(id, st)| id != "SB-D1" && matches!(st.as_str(), "fail" | "warn"))
                    .collect();
                if ONE_VERDICT.contains(switch) && !beside.is_empty() {
                    problems.push(format!(
                        "--v {switch}: one fault, yet {beside:?} failed or warned beside SB-D1"
                    ));
                }
            }
            None => {
                if statuses != base {
                    problems.push(format!("--v {switch}: {statuses:?}\n  default: {base:?}"));
                }
                let noted = received.contains("byte(s) came after the reply's end");
                if noted != switch.contains("cl-short") {
                    problems.push(format!(
                        "--v {switch}: note of bytes past the reply {noted}: {received}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `replay sidebridge` of the audit server's recorded chats (the same phrases): every legal
/// framing passes on the kept connection; a body stalled short of its Content-Length fails
/// naming it.
#[test]
fn replay_passes_legal_framing_and_names_a_stalled_body() {
    let Some(perl) = perl("replay_passes_legal_framing_and_names_a_stalled_body") else {
        return;
    };
    let mut jobs: Vec<(&str, &str)> = vec![("", "")];
    jobs.extend(LEGAL.iter().map(|s| (*s, "")));
    // The flaws that stall: replay's `not compared` names the cause of the silence. (Bare LF
    // lines and two Content-Length values are named by the check and parity rows; a replay
    // asks after each such reply whether the bridge exited, 0.7 s a request.)
    jobs.push(("cl-long", "bytes its Content-Length announced"));
    jobs.push(("chunk-stall", "before its last chunk"));
    let chats = std::fs::read_dir(audit_cells().join("audit"))
        .expect("the recorded chats")
        .count();
    let problems: Vec<String> = common::verdicts::two_at_a_time(&jobs, |(switch, says)| {
        let out = Command::new(BW)
            .args(["replay", "sidebridge", "--no-second-run", "--timeout", "2"])
            .args(["--startup-timeout", "30"])
            .arg(audit_cells())
            .arg("--")
            .arg(perl)
            .arg(dir().join("server.pl"))
            .args(["--v", switch])
            .env_remove("SIDEBRIDGE_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("bridgewire runs");
        let text = common::proc::output_text(&out);
        let ok = if says.is_empty() {
            out.status.code() == Some(0) && text.contains(&format!("{chats} passed, 0 failed"))
        } else {
            out.status.code() == Some(1) && text.contains(says)
        };
        (!ok).then(|| format!("--v {switch:?}: exit {:?}:\n{text}", out.status.code()))
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `parity` of the audit server's recording against the Perl server: a legal framing is no
/// difference the app could see; a flaw is, naming it.
#[test]
fn parity_of_the_recording_against_each_framing() {
    let Some(perl) = perl("parity_of_the_recording_against_each_framing") else {
        return;
    };
    let leg = |switch: &str| {
        format!(
            "cmd:{perl} {} --v {}",
            dir().join("server.pl").display(),
            if switch.is_empty() { "none" } else { switch }
        )
    };
    let jobs: &[(&str, i32, &str)] = &[
        (
            "chunked-ext,continue,odd-headers,split",
            0,
            " passed, 0 failed",
        ),
        ("close-delimited,early-hints", 0, " passed, 0 failed"),
        ("http10-keepalive,cl-short", 0, " passed, 0 failed"),
        ("dup-cl", 1, "Content-Length given as both"),
        // Every body stalls short of its length: the head leg stops answering, each cell a
        // STALL naming it (it was an ERROR of the leg, "nothing was compared", exit 2).
        ("cl-long", 1, "stall: head: the bridge stopped answering: "),
    ];
    let problems: Vec<String> = common::verdicts::two_at_a_time(jobs, |(switch, code, says)| {
        let out = Command::new(BW)
            .args(["parity", "--no-second-run", "--timeout-ms", "3s", "--base"])
            .arg(format!("rec:{}", audit_cells().display()))
            .arg("--head")
            .arg(leg(switch))
            .arg(audit_cells())
            .env_remove("SIDEBRIDGE_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("bridgewire runs");
        let text = common::proc::output_text(&out);
        let ok = out.status.code() == Some(*code) && text.contains(says);
        (!ok).then(|| {
            format!(
                "--v {switch}: exit {:?}, want {code} saying {says:?}:\n{text}",
                out.status.code()
            )
        })
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The emulated client's kept connection, as `replay` and `parity` use it, after an idle pause
/// (the requests those commands send follow each other at once): a bridge that says
/// `Keep-Alive: timeout=1` and drops a request read on a connection idle that long (its close
/// and the request crossing) is sent the next request on a new connection (it failed as a
/// close after the request, which the app's client does not send again); one that sends an
/// unsolicited 408 before closing an idle connection is answered on a new one, the 408 named.
#[test]
fn a_kept_connection_honours_keep_alive_timeout_and_names_an_unasked_408() {
    let Some(perl) = perl("a_kept_connection_honours_keep_alive_timeout_and_names_an_unasked_408")
    else {
        return;
    };
    use bridgewire::sidebridge::transport::{Limits, Req, Target, send_kept};
    let run = |switch: &'static str, pause: Duration| {
        std::thread::spawn(move || {
            let mut child = Command::new(perl)
                .arg(dir().join("server.pl"))
                .args(["--v", switch])
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .expect("perl runs");
            let mut line = String::new();
            let stdout = child.stdout.take().expect("stdout");
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).ok();
            let target = Target::parse(line.trim()).expect("the server's URL");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let headers = vec![("Content-Type".to_string(), "application/json".to_string())];
            let body = br#"{"sidebridge":"1.0","chatId":"0A1B2C3D-0000-4000-8000-00000000000A","history":[]}"#;
            let req = Req {
                target: &target,
                method: "POST",
                headers: &headers,
                body,
            };
            let limits = Limits {
                idle: Duration::from_secs(3),
                ..Limits::default()
            };
            let got = rt.block_on(async {
                let mut kept = None;
                let first = send_kept(&mut kept, &req, limits).await.map(|r| r.status);
                let was_kept = kept.is_some();
                tokio::time::sleep(pause).await;
                let second = send_kept(&mut kept, &req, limits).await;
                (first, was_kept, second)
            });
            let _ = child.kill();
            let _ = child.wait();
            got
        })
    };
    let ka = run("ka-timeout", Duration::from_millis(1050));
    let r408 = run("idle-408", Duration::from_millis(600));
    let (first, kept, second) = ka.join().expect("the ka-timeout run");
    assert_eq!(first, Ok(200));
    assert!(kept, "the first reply left the connection open");
    match second {
        Ok(r) => assert_eq!((r.status, r.unasked), (200, None)),
        Err(e) => panic!("the request after the Keep-Alive timeout: {e}"),
    }
    let (first, kept, second) = r408.join().expect("the idle-408 run");
    assert_eq!(first, Ok(200));
    assert!(kept, "the first reply left the connection open");
    match second {
        Ok(r) => {
            assert_eq!(r.status, 200);
            let why = r.unasked.unwrap_or_default();
            assert!(why.contains("HTTP/1.1 408 Request Timeout"), "{why}");
        }
        Err(e) => panic!("the request after the 408: {e}"),
    }
}

/// `tests/peers/coverage.tsv`'s `perl:` entries are rows of the tables above: a failing one is
/// a flawed framing (or a stop) SB-D1 fails naming, or a request left unanswered that its own
/// rule warns on, a passing one a legal framing (the check test holds it
/// to the default build's verdicts on every rule).
#[test]
fn the_coverage_map_names_rows_of_this_file() {
    let mut problems = Vec::new();
    let mut named = 0;
    for line in common::coverage::lines("sidebridge") {
        let named_in = |entries: &[common::coverage::Entry]| -> Vec<String> {
            entries
                .iter()
                .filter_map(|e| match e {
                    common::coverage::Entry::Named(n) => n.strip_prefix("perl:").map(String::from),
                    _ => None,
                })
                .collect()
        };
        for name in named_in(&line.fails) {
            named += 1;
            let flawed = line.rule == "SB-D1" && FLAWED.iter().any(|(s, _)| *s == name);
            let own_stall = OWN_STALL
                .iter()
                .any(|(s, rule, ..)| *s == name && *rule == line.rule);
            if !flawed && !own_stall {
                problems.push(format!(
                    "{}: perl:{name} is no flawed row failing {}",
                    line.at, line.rule
                ));
            }
        }
        for name in named_in(&line.passes) {
            named += 1;
            if !LEGAL.contains(&name.as_str()) {
                problems.push(format!("{}: perl:{name} is no legal row", line.at));
            }
        }
    }
    assert!(named > 0, "no perl: entry in tests/peers/coverage.tsv");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

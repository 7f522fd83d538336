//! `check sidebridge` against a Side Bridge server that is not ours and frames HTTP/1.1 by
//! hand: `tests/peers/sidebridge-raw/server.js` (Node's raw `net` module), written from the
//! protocol text and RFC 9112 by an audit of bridgewire that had not read its code. Its legal
//! oddities (chunks that split UTF-8 characters, sizes in upper-case hex with leading zeros,
//! an empty reason phrase, `Transfer-Encoding: Chunked`, JSON written with `\u` escapes and
//! numbers like `1E+300`, interim 102/199 replies, a HEAD 405 framed as a GET would be…) must
//! pass every rule; each flaw must fail (or, for a SHOULD rule, warn) the rule that judges it,
//! and no other. The server's own `--list` is the independent source of what there is.
//!
//! Before: chunk data followed by `XY` instead of CRLF passed every rule (the two bytes after
//! each chunk were skipped unread), and a chunk size 2 over its data failed SB-H1, SB-A1 and
//! SB-D1 and warned SB-H2, SB-H3, SB-H4 and SB-R10 (a broken chunked framing was not taken as
//! broken framing, so no rule handed it to SB-D1).

use std::path::PathBuf;
use std::process::{Command, Stdio};

mod common;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const KEY: &str = "k3y-Audit-9";

fn peer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sidebridge-raw")
}

/// Legal oddities, each run on its own (`idle` and `announceclose` differ in how a connection
/// ends, `chunkext` and `clzeros` in how a body is framed, so they are not combined).
const LEGAL: &[&str] = &[
    "chunkext",
    "tecase",
    "emptyreason",
    "hdrcase",
    "ctparams",
    "clzeros",
    "jsonws",
    "uesc",
    "numbers",
    "idle",
    "announceclose",
    "extrahdrs",
    "headcl",
    "interim",
    "reasonodd",
    "ctrlesc",
    "headte",
];

/// Switches no row runs, and why.
const UNJUDGED: &[(&str, &str)] = &[
    (
        "slowfirst",
        "an 8 s first reply: SB-H2's slow replies are judged on the Perl and Python peers' rows",
    ),
    (
        "gap",
        "12 s per recall answer: too slow for the suite; a body trickled within the app's timeout is the Perl peer's trickle row",
    ),
];

/// A flaw, the rule that must fail (or warn), and what its line says.
const FLAWS: &[(&str, &str, &str)] = &[
    ("f-chunk-crlf", "SB-D1", "is followed by \"XY\", not CRLF"),
    (
        "f-chunk-size",
        "SB-D1",
        "malformed chunked body (RFC 9112 §7.1)",
    ),
    // An incomplete body is SB-D1's ("received completely"), as broken framing is: SB-H1 and
    // SB-A1 failed for it too before, and four SHOULD rules warned.
    (
        "f-cut-body",
        "SB-D1",
        "truncated body: connection closed after ",
    ),
    ("f-no-content", "SB-D2", "content"),
    ("f-title-num", "SB-D5", "title"),
    ("f-get-400", "SB-H4", "status 400"),
];

fn check(switch: &str) -> (i32, String) {
    let dir = peer_dir();
    let mut cmd = Command::new(BW);
    cmd.args(["check", "sidebridge", "--config"])
        .arg(dir.join("fixture.toml"))
        .args(["--key", KEY, "--", "node"])
        .arg(dir.join("server.js"))
        .args(["--key", KEY]);
    if !switch.is_empty() {
        cmd.args(["-o", switch]);
    }
    let out = cmd
        .env_remove("SIDEBRIDGE_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("bridgewire runs");
    (
        out.status.code().unwrap_or(-1),
        common::proc::output_text(&out),
    )
}

#[test]
fn every_switch_is_a_row_or_named_unjudged() {
    let listed = Command::new("node")
        .arg(peer_dir().join("server.js"))
        .arg("--list")
        .output()
        .expect("node runs");
    let mut switches: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    let mut known: Vec<String> = LEGAL
        .iter()
        .copied()
        .chain(UNJUDGED.iter().map(|u| u.0))
        .chain(FLAWS.iter().map(|f| f.0))
        .map(String::from)
        .collect();
    switches.sort();
    known.sort();
    assert_eq!(switches, known);
}

#[test]
fn legal_framings_pass_and_each_flaw_is_one_verdict() {
    let mut jobs: Vec<&str> = vec![""];
    jobs.extend(LEGAL);
    jobs.extend(FLAWS.iter().map(|f| f.0));
    let problems: Vec<String> = common::verdicts::two_at_a_time(&jobs, |switch| {
        let (code, out) = check(switch);
        let bad = common::verdicts::not_passed(&out);
        // Only a verdict that fails or warns counts: INFO rules not run for want of a
        // fixture scenario and SB-A4 (not applicable with a key) are neither.
        let faults: Vec<&&str> = bad
            .iter()
            .filter(|l| l.starts_with("fail ") || l.starts_with("warn "))
            .collect();
        match FLAWS.iter().find(|f| f.0 == *switch) {
            None => (code != 0 || !faults.is_empty())
                .then(|| format!("-o {switch:?} (legal): exit {code}:\n{out}")),
            Some((_, rule, says)) => {
                let own: Vec<&&&str> = faults
                    .iter()
                    .filter(|l| l.contains(&format!(" {rule} ")) && l.contains(says))
                    .collect();
                (own.len() != 1 || faults.len() != 1).then(|| {
                    format!("-o {switch}: want {rule} alone to fall short saying {says:?}:\n{out}")
                })
            }
        }
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

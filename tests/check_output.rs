//! `check bb` output as CI sees it (no terminal): one line per verdict as soon as it is
//! reached, and a signal ends the run with the partial summary, partial reports marked as
//! interrupted, and exit 128 + signal.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");

/// A bridge (not ours) that reads every request and never answers: each rule waits out its
/// per-wait timeout, so a run takes long enough to be interrupted mid-way.
const SILENT_BRIDGE: &str = "import sys\nfor _ in sys.stdin:\n    pass\n";

fn interrupted_by(sig: i32, code: i32, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("out/junit.xml");
    let md = dir.path().join("out/summary.md");
    let mut cmd = Command::new(BRIDGEWIRE);
    let mut child = common::proc::sigint_as_default(&mut cmd)
        .args(["check", "bb", "--timeout-ms", "1500", "--junit"])
        .arg(&junit)
        .arg("--markdown")
        .arg(&md)
        .args(["--", "python3", "-c", SILENT_BRIDGE])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // The first verdict line arrives on its own, long before the run ends (20 rules × 1.5 s).
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("fail    rpc/unknown-method"),
        "first line: {first:?}"
    );
    let first_at = t0.elapsed();
    assert!(first_at < Duration::from_secs(20), "{first_at:?}");
    unsafe { libc::kill(child.id() as i32, sig) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(code), "{rest}");
    assert!(rest.contains(&format!("interrupted by {name}")), "{rest}");
    let last = rest.lines().last().unwrap_or("");
    assert!(last.contains("passed") && last.contains("failed"), "{rest}");
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.contains("name=\"interrupted\""), "{x}");
    assert!(x.contains("rpc/unknown-method"), "{x}");
    let m = std::fs::read_to_string(&md).unwrap();
    assert!(m.contains(&format!("Interrupted by {name}")), "{m}");
}

#[test]
fn sigint_prints_the_partial_summary_and_exits_130() {
    interrupted_by(libc::SIGINT, 130, "SIGINT");
}

#[test]
fn sigterm_prints_the_partial_summary_and_exits_143() {
    interrupted_by(libc::SIGTERM, 143, "SIGTERM");
}

//! `bridgewire lanes` as a viewer: decoded one-line view with filters, `--json`, and `--follow`
//! on a recording that is still being written.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

fn entry(seq: u64, dir: &str, line: &str) -> String {
    bridgewire::lane::Entry {
        ts: 1000.0 + seq as f64 * 10.0,
        run: 1.0,
        seq: seq as f64,
        dir: dir.into(),
        line: line.into(),
        extra: Default::default(),
    }
    .to_line()
        + "\n"
}

#[test]
fn filters_and_json() {
    let cell = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/bb-ref/bb-ref/fork");
    let all = Command::new(BW)
        .args(["lanes", "--json", cell])
        .output()
        .unwrap();
    assert!(all.status.success());
    let rows: Vec<serde_json::Value> = String::from_utf8(all.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The filter keeps exactly the messages the unfiltered JSON says match.
    let want = rows
        .iter()
        .filter(|r| r["dir"] == "bridge→runtime" && r["name"] == "thread/delta")
        .count();
    assert!(want > 0);
    let some = Command::new(BW)
        .args([
            "lanes",
            "--dir",
            "bridge->runtime",
            "--method",
            "thread/delta",
            cell,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(some.stdout).unwrap();
    assert_eq!(text.lines().count(), want, "{text}");
    assert!(
        text.lines()
            .all(|l| l.contains("bridge→runtime") && l.contains("thread/delta"))
    );
    // No colour codes off a terminal unless asked.
    assert!(!text.contains('\x1b'));
    let colored = Command::new(BW)
        .args(["lanes", "--color", "always", cell])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&colored.stdout).contains("\x1b["));
}

#[test]
fn follow_prints_messages_as_they_are_recorded() {
    let t = tempfile::tempdir().unwrap();
    let cell = t.path().join("prov/live");
    std::fs::create_dir_all(&cell).unwrap();
    let lane = cell.join("runtime→bridge.ndjson");
    std::fs::write(
        &lane,
        entry(
            1,
            "runtime→bridge",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BW);
    let mut child = common::proc::sigint_as_default(&mut cmd)
        .args(["lanes", "--follow"])
        .arg(&cell)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("initialize"), "{line}");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&lane)
        .unwrap();
    f.write_all(
        entry(
            2,
            "runtime→bridge",
            r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"thr_9"}}"#,
        )
        .as_bytes(),
    )
    .unwrap();
    drop(f);
    let t0 = Instant::now();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(
        line.contains("thread/start") && line.contains("[thr_9]"),
        "{line}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success());
}

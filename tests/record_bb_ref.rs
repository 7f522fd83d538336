//! End to end with the reference bridge: spawn → record (all four lanes) → assemble → pin.
//!
//! The expected event count is not written here: it comes from assembling the bridge→runtime
//! lines the test itself received on the runtime side, an independent path from the recorded
//! lanes that `pins` reads.

use bridgewire::lane::read::LaneReader;
use bridgewire::protocol::{EventSink, GrammarDrop};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::proc::wait_within;

struct Count(u64);
impl EventSink for Count {
    fn event(&mut self, _e: Value) {
        self.0 += 1;
    }
    fn grammar_drop(&mut self, _d: GrammarDrop) {}
    fn invalid(&mut self, m: String) {
        panic!("invalid delta from the reference bridge: {m}");
    }
}

#[test]
fn records_all_four_lanes_and_pins_them() {
    let t = tempfile::tempdir().unwrap();
    let bw = env!("CARGO_BIN_EXE_bridgewire");
    let provider = env!("CARGO_BIN_EXE_bb-ref-provider");
    let mut child = Command::new(bw)
        .args(["record", "bb", "--dir"])
        .arg(t.path())
        .args([
            "--provider",
            "bb-ref",
            "--",
            env!("CARGO_BIN_EXE_bb-ref-bridge"),
        ])
        .env("BB_REF_PROVIDER_COMMAND", bw)
        .env(
            "BB_REF_PROVIDER_ARGS",
            json!(["record", "child", "--", provider]).to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    // Waits (bounded) until a line satisfying `pred` arrives.
    let wait_for = |seen: &mut Vec<String>, what: &str, pred: &dyn Fn(&Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("timed out waiting for {what}; saw {seen:#?}"));
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            seen.push(line);
            if pred(&v) {
                return;
            }
        }
    };
    send(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2,"client":{"name":"t","version":"0"},"grammarVersions":[3,3]}}),
    );
    wait_for(&mut seen, "initialize", &|v| v["id"] == 1);
    let cwd = t.path().display().to_string();
    send(
        json!({"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"thr_e2e","cwd":cwd,"options":{},"instructionMode":"append"}}),
    );
    wait_for(&mut seen, "thread/start", &|v| v["id"] == 2);
    let ptid =
        serde_json::from_str::<Value>(seen.last().unwrap()).unwrap()["result"]["providerThreadId"]
            .clone();
    send(
        json!({"jsonrpc":"2.0","id":3,"method":"turn/start","params":{"threadId":"thr_e2e","providerThreadId":ptid,"input":[{"type":"text","text":"hello"}],"clientRequestId":"creq_2222222223","options":{}}}),
    );
    wait_for(&mut seen, "the turn to settle", &|v| {
        v["method"] == "thread/delta"
            && v["params"]["deltas"].as_array().is_some_and(|ds| {
                ds.iter()
                    .any(|d| d["kind"] == "turn.boundary" && d.get("providerTurnId").is_none())
            })
    });
    send(
        json!({"jsonrpc":"2.0","id":4,"method":"thread/stop","params":{"threadId":"thr_e2e","providerThreadId":ptid,"intent":"release","activeTurnId":null}}),
    );
    wait_for(&mut seen, "thread/stop", &|v| v["id"] == 4);
    drop(stdin);
    let status = wait_within(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("recorder did not exit after stdin closed");
    });
    assert!(status.success(), "{status:?}");
    // Drain what arrived after the stop response.
    seen.extend(rx.try_iter());

    // All four lanes exist in the thread's scope.
    let cell_dir = t.path().join("bb-ref/thr_e2e");
    for dir in bridgewire::lane::BB_DIRECTIONS {
        let path = cell_dir.join(format!("{dir}.ndjson"));
        let n = LaneReader::open(&path, Some(dir))
            .unwrap()
            .filter(|r| r.is_ok())
            .count();
        assert!(n > 0, "{dir} lane is empty");
    }

    // Independent count: assemble the bridge→runtime lines the runtime side received.
    let mut assembler = bridgewire::bb::assembler::Assembler::new("bb-ref");
    let mut grammar = bridgewire::bb::grammar::Grammar::new();
    let mut count = Count(0);
    for line in &seen {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["method"] == "thread/delta" {
            let (tid, deltas) = bridgewire::bb::delta::validate_params(&v["params"]).unwrap();
            for e in assembler.assemble(tid, deltas) {
                if grammar.accept(&e).is_ok() {
                    count.event(e);
                }
            }
        }
    }
    assert!(count.0 > 0);

    // pins --update on the recorded folder, then check mode passes.
    let root = t.path().join("bb-ref");
    let out = Command::new(bw)
        .args(["pins", "--update"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pins = bridgewire::pins::load(&root.join("row-counts.json")).unwrap();
    let recorded = bridgewire::pins::Counts::from_json(&pins["thr_e2e"]).unwrap();
    assert_eq!(
        recorded.events, count.0,
        "recorded lanes assemble exactly what crossed the wire"
    );
    assert_eq!(recorded.grammar_drops, 0);
    let out = Command::new(bw).arg("pins").arg(&root).output().unwrap();
    assert!(out.status.success());
}

//! `bridgewire provider-double` on a synthetic recording: segments, expectations, id
//! remapping, the cursor, look-ahead, session mismatch, past-end and no-segment generic answers.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const WAIT: Duration = Duration::from_secs(5);

fn lane_line(seq: u64, dir: &str, v: &Value) -> String {
    json!({"ts": 1000 + seq, "run": 1, "seq": seq, "dir": dir, "line": v.to_string()}).to_string()
}

/// Two segments: (initialize, session/new, prompt with a provider tool call) and a second
/// initialize + session/load.
fn write_cell(dir: &Path) {
    let b = "bridge→provider";
    let p = "provider→bridge";
    let script: Vec<(u64, &str, Value)> = vec![
        (
            1,
            b,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}),
        ),
        (
            2,
            p,
            json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}),
        ),
        (
            3,
            b,
            json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{}}),
        ),
        (
            4,
            p,
            json!({"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}),
        ),
        (
            6,
            b,
            json!({"jsonrpc":"2.0","id":3,"method":"prompt","params":{}}),
        ),
        (
            10,
            p,
            json!({"jsonrpc":"2.0","method":"session/update","params":{"n":1}}),
        ),
        (
            11,
            p,
            json!({"jsonrpc":"2.0","id":"prov-req-1","method":"tool/call","params":{}}),
        ),
        (
            12,
            b,
            json!({"jsonrpc":"2.0","id":"prov-req-1","result":{"ok":true}}),
        ),
        (
            13,
            p,
            json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}),
        ),
        (
            20,
            b,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}),
        ),
        (
            21,
            p,
            json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}),
        ),
        (
            22,
            b,
            json!({"jsonrpc":"2.0","id":2,"method":"session/load","params":{}}),
        ),
        (
            23,
            p,
            json!({"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}),
        ),
    ];
    for d in [b, p] {
        let text: String = script
            .iter()
            .filter(|(_, dir, _)| *dir == d)
            .map(|(s, dir, v)| lane_line(*s, dir, v) + "\n")
            .collect();
        std::fs::write(dir.join(format!("{d}.ndjson")), text).unwrap();
    }
}

struct Double {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
}

impl Double {
    fn spawn(cell: &Path, state: &Path) -> Double {
        Self::spawn_with(cell, state, "json-rpc", &["--an-sdk-flag"])
    }

    fn spawn_with(cell: &Path, state: &Path, dialect: &str, extra: &[&str]) -> Double {
        let mut child = Command::new(BRIDGEWIRE)
            .args(["provider-double", "--recording"])
            .arg(cell)
            .args(["--dialect", dialect, "--state"])
            .arg(state)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    break;
                }
            }
        });
        Double {
            stdin: child.stdin.take(),
            child,
            rx,
        }
    }

    fn send(&mut self, v: Value) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{v}").unwrap();
        s.flush().unwrap();
    }

    fn next(&self) -> Value {
        self.rx.recv_timeout(WAIT).expect("a line from the double")
    }

    fn quiet(&self, d: Duration) -> bool {
        self.rx.recv_timeout(d).is_err()
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        for _ in 0..250 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("the double did not exit on stdin EOF");
    }
}

fn report(state: &Path, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(state.join(name)).unwrap()).unwrap()
}

#[test]
fn plays_a_segment_with_live_ids_and_answers_past_the_end_generically() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_cell(cell.path());
    let mut d = Double::spawn(cell.path(), state.path());
    d.send(json!({"jsonrpc":"2.0","id":10,"method":"initialize","params":{}}));
    assert_eq!(
        d.next(),
        json!({"jsonrpc":"2.0","id":10,"result":{"protocolVersion":1}})
    );
    d.send(json!({"jsonrpc":"2.0","id":"n-11","method":"session/new","params":{}}));
    assert_eq!(
        d.next(),
        json!({"jsonrpc":"2.0","id":"n-11","result":{"sessionId":"s1"}})
    );
    // The notification is spontaneous: held while the cursor is at or before it.
    std::fs::write(state.path().join("cursor"), "1 6").unwrap();
    d.send(json!({"jsonrpc":"2.0","id":12,"method":"prompt","params":{}}));
    assert!(
        d.quiet(Duration::from_millis(300)),
        "the cursor holds session/update"
    );
    std::fs::write(state.path().join("cursor"), "end").unwrap();
    assert_eq!(d.next()["method"], "session/update");
    let call = d.next();
    assert_eq!(call["id"], "prov-req-1", "provider-minted ids are verbatim");
    d.send(json!({"jsonrpc":"2.0","id":"prov-req-1","result":{"ok":true}}));
    assert_eq!(
        d.next(),
        json!({"jsonrpc":"2.0","id":12,"result":{"stopReason":"end_turn"}})
    );
    // Past the end of the segment.
    d.send(json!({"jsonrpc":"2.0","id":13,"method":"cancel","params":{}}));
    assert_eq!(d.next(), json!({"jsonrpc":"2.0","id":13,"result":{}}));
    d.finish();
    let r = report(state.path(), "double-report-0.json");
    assert_eq!(r["generic"], 1);
    assert_eq!(r["pastEnd"], 1);
    assert_eq!(r["stepsPlayed"], r["steps"]);
    assert!(state.path().join("segment-0").is_dir());

    // The next child claims segment 1; the one after has none and answers generically.
    let mut d = Double::spawn(cell.path(), state.path());
    d.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}));
    assert_eq!(d.next()["result"]["protocolVersion"], 1);
    d.send(json!({"jsonrpc":"2.0","id":2,"method":"session/load","params":{}}));
    assert_eq!(d.next()["result"]["sessionId"], "s1");
    let mut third = Double::spawn(cell.path(), state.path());
    third.send(json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{}}));
    assert_eq!(third.next(), json!({"jsonrpc":"2.0","id":7,"result":{}}));
    d.finish();
    third.finish();
    let reports: Vec<String> = std::fs::read_dir(state.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("double-report-none-"))
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(report(state.path(), &reports[0])["noSegment"], 1);
}

#[test]
fn looks_ahead_past_a_skipped_expectation() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_cell(cell.path());
    let mut d = Double::spawn(cell.path(), state.path());
    // No initialize: session/new matches a later expectation; after 750 ms the child jumps
    // there, dropping the skipped initialize's recorded response.
    d.send(json!({"jsonrpc":"2.0","id":5,"method":"session/new","params":{}}));
    assert!(d.quiet(Duration::from_millis(500)));
    assert_eq!(
        d.next(),
        json!({"jsonrpc":"2.0","id":5,"result":{"sessionId":"s1"}})
    );
    d.finish();
    assert_eq!(
        report(state.path(), "double-report-0.json")["lookAheadJumps"],
        1
    );
}

#[test]
fn a_different_session_request_releases_the_segment() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_cell(cell.path());
    let mut d = Double::spawn(cell.path(), state.path());
    d.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}));
    assert_eq!(d.next()["result"]["protocolVersion"], 1);
    d.send(json!({"jsonrpc":"2.0","id":2,"method":"session/fork","params":{}}));
    assert_eq!(d.next(), json!({"jsonrpc":"2.0","id":2,"result":{}}));
    assert!(
        !state.path().join("segment-0").exists(),
        "released for the next child"
    );
    d.finish();
}

#[test]
fn an_unmatched_request_is_answered_generically_after_the_stall() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_cell(cell.path());
    let mut d = Double::spawn(cell.path(), state.path());
    d.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}));
    assert_eq!(d.next()["result"]["protocolVersion"], 1);
    d.send(json!({"jsonrpc":"2.0","id":9,"method":"unrecorded/thing","params":{}}));
    assert!(d.quiet(Duration::from_secs(4)), "held until the 5 s stall");
    assert_eq!(d.next(), json!({"jsonrpc":"2.0","id":9,"result":{}}));
    d.finish();
    assert_eq!(report(state.path(), "double-report-0.json")["stall"], 1);
}

fn write_lanes(dir: &Path, script: &[(u64, &str, Value)]) {
    for d in ["bridge→provider", "provider→bridge"] {
        let text: String = script
            .iter()
            .filter(|(_, dir, _)| *dir == d)
            .map(|(s, dir, v)| lane_line(*s, dir, v) + "\n")
            .collect();
        std::fs::write(dir.join(format!("{d}.ndjson")), text).unwrap();
    }
}

#[test]
fn claude_cli_dialect_remaps_request_and_hook_callback_ids() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (b, p) = ("bridge→provider", "provider→bridge");
    write_lanes(
        cell.path(),
        &[
            (
                1,
                b,
                json!({"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["hook_0"]}]}}}),
            ),
            (
                2,
                p,
                json!({"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"commands":[]}}}),
            ),
            (
                3,
                b,
                json!({"type":"user","message":{"role":"user","content":"hi"}}),
            ),
            (
                4,
                p,
                json!({"type":"system","subtype":"init","session_id":"s"}),
            ),
            (
                5,
                p,
                json!({"type":"control_request","request_id":"cb_1","request":{"subtype":"hook_callback","callback_id":"hook_0","input":{}}}),
            ),
            (
                6,
                b,
                json!({"type":"control_response","response":{"subtype":"success","request_id":"cb_1","response":{}}}),
            ),
            (7, p, json!({"type":"result","subtype":"success"})),
        ],
    );
    let mut d = Double::spawn_with(cell.path(), state.path(), "claude-cli", &[]);
    d.send(json!({"type":"control_request","request_id":"live_9","request":{"subtype":"initialize","hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["hook_live"]}]}}}));
    let r = d.next();
    assert_eq!(r["response"]["request_id"], "live_9");
    assert_eq!(r["response"]["response"]["commands"], json!([]));
    d.send(json!({"type":"user","message":{"role":"user","content":"hi"}}));
    assert_eq!(d.next()["subtype"], "init");
    let cb = d.next();
    assert_eq!(cb["request"]["callback_id"], "hook_live");
    assert_eq!(cb["request_id"], "cb_1", "provider-minted ids are verbatim");
    d.send(json!({"type":"control_response","response":{"subtype":"success","request_id":"cb_1","response":{}}}));
    assert_eq!(d.next()["type"], "result");
    // Past the end: the claude-cli generic answer.
    d.send(json!({"type":"control_request","request_id":"x","request":{"subtype":"interrupt"}}));
    assert_eq!(
        d.next(),
        json!({"type":"control_response","response":{"subtype":"success","request_id":"x","response":{}}})
    );
    d.finish();
}

#[test]
fn pi_catalog_mode_answers_from_recorded_state_and_models() {
    let cell = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (b, p) = ("bridge→provider", "provider→bridge");
    let model_a = json!({"provider":"x","id":"a"});
    let model_b = json!({"provider":"x","id":"b"});
    write_lanes(
        cell.path(),
        &[
            (1, b, json!({"id":"bb-1","type":"get_state"})),
            (
                2,
                p,
                json!({"id":"bb-1","type":"response","command":"get_state","success":true,"data":{"model":model_a,"thinkingLevel":"off"}}),
            ),
            (3, b, json!({"id":"bb-2","type":"get_available_models"})),
            (
                4,
                p,
                json!({"id":"bb-2","type":"response","command":"get_available_models","success":true,"data":{"models":[model_a, model_b]}}),
            ),
        ],
    );
    let mut d = Double::spawn_with(
        cell.path(),
        state.path(),
        "pi-rpc",
        &["--mode", "rpc", "--no-session"],
    );
    d.send(json!({"id":"q1","type":"get_available_models"}));
    assert_eq!(
        d.next(),
        json!({"id":"q1","type":"response","command":"get_available_models","success":true,"data":{"models":[model_a, model_b]}})
    );
    d.send(json!({"id":"q2","type":"get_state"}));
    assert_eq!(d.next()["data"]["thinkingLevel"], "off");
    d.finish();
    assert!(
        !state.path().join("segment-0").exists(),
        "catalog mode claims no segment"
    );
}

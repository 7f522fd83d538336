//! End-to-end tests of `bb-ref-bridge` over real pipes, with the real `bb-ref-provider` as
//! its per-thread child. Every wait is bounded; every spawned process is killed and reaped
//! when its harness drops.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::proc::{run_with_input, wait_within};

const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");
const PROVIDER: &str = env!("CARGO_BIN_EXE_bb-ref-provider");
const WAIT: Duration = Duration::from_secs(10);
/// How long "nothing arrives" is observed for.
const QUIET: Duration = Duration::from_millis(800);
const DECLARED_ICONS: &[&str] = &["terminal", "file", "search", "agent", "plan", "message"];

#[derive(Default)]
struct Received {
    /// Every stdout line as read, JSON or not.
    raw: Vec<String>,
    /// The lines that parsed as JSON, in order.
    messages: Vec<Value>,
    closed: bool,
}

/// A running bridge with a reader thread collecting its stdout.
struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    received: Arc<(Mutex<Received>, Condvar)>,
    next_id: u64,
}

impl Bridge {
    fn spawn(breaks: &str) -> Self {
        Self::spawn_with(breaks, &[])
    }

    fn spawn_with(breaks: &str, env: &[(&str, String)]) -> Self {
        let mut command = Command::new(BRIDGE);
        command
            .env("BB_REF_PROVIDER_COMMAND", PROVIDER)
            .env_remove("BB_REF_PROVIDER_ARGS")
            .env("BB_REF_BRIDGE_BREAK", breaks)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn bb-ref-bridge");
        let stdout = child.stdout.take().expect("piped stdout");
        let received = Arc::new((Mutex::new(Received::default()), Condvar::new()));
        let sink = Arc::clone(&received);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let (lock, cvar) = &*sink;
                let mut r = lock.lock().unwrap();
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    r.messages.push(value);
                }
                r.raw.push(line);
                cvar.notify_all();
            }
            let (lock, cvar) = &*sink;
            lock.lock().unwrap().closed = true;
            cvar.notify_all();
        });
        Self {
            stdin: child.stdin.take(),
            child,
            received,
            next_id: 0,
        }
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        // The bridge may have exited on purpose (crash modes); a failed write is fine then.
        let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&line.to_string());
        id
    }

    /// Waits until `pred` holds for some received message; returns its index and a copy.
    fn wait_for(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<(usize, Value)> {
        let deadline = Instant::now() + timeout;
        let (lock, cvar) = &*self.received;
        let mut r = lock.lock().unwrap();
        loop {
            if let Some(i) = r.messages.iter().position(&pred) {
                return Some((i, r.messages[i].clone()));
            }
            let now = Instant::now();
            if now >= deadline || r.closed {
                return None;
            }
            r = cvar.wait_timeout(r, deadline - now).unwrap().0;
        }
    }

    fn response(&self, id: u64, timeout: Duration) -> Option<(usize, Value)> {
        self.wait_for(timeout, |m| {
            m.get("method").is_none() && m["id"] == json!(id)
        })
    }

    fn result(&self, id: u64) -> Value {
        let (_, response) = self
            .response(id, WAIT)
            .unwrap_or_else(|| panic!("no response to request {id}"));
        assert!(
            response.get("error").is_none(),
            "request {id} failed: {response}"
        );
        response["result"].clone()
    }

    fn error(&self, id: u64) -> Value {
        let (_, response) = self
            .response(id, WAIT)
            .unwrap_or_else(|| panic!("no response to request {id}"));
        response
            .get("error")
            .cloned()
            .unwrap_or_else(|| panic!("request {id} succeeded: {response}"))
    }

    fn messages(&self) -> Vec<Value> {
        self.received.0.lock().unwrap().messages.clone()
    }

    fn raw(&self) -> Vec<String> {
        self.received.0.lock().unwrap().raw.clone()
    }

    /// `(message index, delta)` for every delta written for `thread_id`.
    fn deltas(&self, thread_id: &str) -> Vec<(usize, Value)> {
        deltas_of(&self.messages(), thread_id)
    }

    /// Waits for a delta on `thread_id` matching `pred`.
    fn wait_delta(&self, thread_id: &str, pred: impl Fn(&Value) -> bool) -> Option<(usize, Value)> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = self.deltas(thread_id).into_iter().find(|(_, d)| pred(d)) {
                return Some(found);
            }
            if Instant::now() >= deadline || self.received.0.lock().unwrap().closed {
                return None;
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_within(&mut self.child, timeout)
    }

    fn initialize(&mut self) -> Value {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": 2, "client": {"name": "bb-ref-test", "version": "0.0.1"}, "grammarVersions": [3, 3]}),
        );
        self.result(id)
    }

    fn start_thread(&mut self, thread_id: &str, extra: Value) -> String {
        let mut params = json!({"threadId": thread_id, "cwd": "/tmp/bb-ref-ws", "options": {}, "instructionMode": "append"});
        if let (Some(map), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            map.extend(extra.clone());
        }
        let id = self.request("thread/start", params);
        let result = self.result(id);
        result["providerThreadId"]
            .as_str()
            .expect("providerThreadId")
            .to_owned()
    }

    fn turn(&mut self, thread_id: &str, provider_thread_id: &str, text: &str, creq: &str) -> u64 {
        self.request(
            "turn/start",
            json!({
                "threadId": thread_id, "providerThreadId": provider_thread_id,
                "input": [{"type": "text", "text": text}], "clientRequestId": creq, "options": {},
            }),
        )
    }

    fn stop(&mut self, thread_id: &str, provider_thread_id: &str, intent: &str) -> u64 {
        self.request(
            "thread/stop",
            json!({"threadId": thread_id, "providerThreadId": provider_thread_id, "intent": intent, "activeTurnId": null}),
        )
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // EOF first so the bridge reaps its provider children itself, then make sure.
        self.stdin.take();
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn deltas_of(messages: &[Value], thread_id: &str) -> Vec<(usize, Value)> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["method"] == "thread/delta" && m["params"]["threadId"] == thread_id)
        .flat_map(|(i, m)| {
            m["params"]["deltas"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |d| (i, d))
        })
        .collect()
}

fn is_final_boundary(delta: &Value, status: &str) -> bool {
    delta["kind"] == "turn.boundary"
        && delta["status"] == status
        && delta.get("providerTurnId").is_none()
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_pid_gone(pid: u32) -> bool {
    let deadline = Instant::now() + WAIT;
    while pid_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A provider wrapper (`sh -c`) that logs `<pid> <BRIDGEWIRE_RECORD_THREAD>` and then
/// `exec`s the real provider, so the logged pid is the provider's own.
fn logging_provider_env(log: &std::path::Path) -> Vec<(&'static str, String)> {
    let script = format!(
        "echo \"$$ ${{BRIDGEWIRE_RECORD_THREAD:-<unset>}} ${{BRIDGEWIRE_KEEP_ME:-<unset>}}\" >> '{}'; exec '{}'",
        log.display(),
        PROVIDER
    );
    vec![
        ("BB_REF_PROVIDER_COMMAND", "/bin/sh".to_owned()),
        (
            "BB_REF_PROVIDER_ARGS",
            serde_json::to_string(&["-c", &script]).unwrap(),
        ),
        ("BRIDGEWIRE_KEEP_ME", "kept".to_owned()),
    ]
}

fn read_log(log: &std::path::Path) -> Vec<(u32, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let pid = parts.next().unwrap().parse().unwrap();
            (
                pid,
                parts.next().unwrap().to_owned(),
                parts.next().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn hygiene_rules_hold() {
    let mut bridge = Bridge::spawn("");
    let id = bridge.request("bb/conformance/definitely-unknown-method", json!({}));
    let error = bridge.error(id);
    assert_eq!(error["code"], -32601);
    assert_eq!(
        error["message"],
        "Method not found: bb/conformance/definitely-unknown-method"
    );

    let id = bridge.request("thread/stop", json!({}));
    let error = bridge.error(id);
    assert_eq!(error["code"], -32602);
    let paths: Vec<Value> = error["data"]
        .as_array()
        .expect("issues")
        .iter()
        .map(|i| i["path"].clone())
        .collect();
    assert!(
        paths.contains(&json!(["threadId"])) && paths.contains(&json!(["intent"])),
        "{error}"
    );

    bridge.send_raw("this is { not json");
    bridge.send_raw(r#"{"jsonrpc":"2.0","id":999999,"result":{}}"#);
    let probe = bridge.request("bb/conformance/alive-probe", json!({}));
    assert_eq!(bridge.error(probe)["code"], -32601);
    assert!(
        bridge.response(999_999, Duration::ZERO).is_none(),
        "a stray response must not be answered"
    );
    // Nothing but protocol traffic on stdout.
    assert!(
        bridge
            .raw()
            .iter()
            .all(|line| serde_json::from_str::<Value>(line).is_ok())
    );
}

#[test]
fn handshake_declares_every_capability() {
    let mut bridge = Bridge::spawn("");
    let result = bridge.initialize();
    assert_eq!(result["protocolVersion"], 2);
    let caps = &result["capabilities"];
    assert_eq!(caps["grammarVersions"], json!([3, 3]));
    assert_eq!(caps["sessionRestore"], true);
    assert_eq!(caps["threadArchive"], true);
    assert_eq!(caps["fork"], "tip");
    assert_eq!(caps["skills"], json!({"configure": true}));
    assert_eq!(caps["commands"], json!({"list": true}));
    assert_eq!(caps["steerMode"], "queue");
    assert_eq!(caps["approvalEnforcedBy"], "runtime");

    let id = bridge.request("skills/configure", json!({"roots": []}));
    assert_eq!(bridge.result(id), json!({}));
    let id = bridge.request("commands/list", json!({"cwd": "/tmp"}));
    let names: Vec<Value> = bridge.result(id)["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("noop"), json!("hold")]);
}

#[test]
fn ordinary_turn_with_tool_call_then_interrupt() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("providers.log");
    let mut bridge = Bridge::spawn_with("", &logging_provider_env(&log));
    bridge.initialize();
    let tools = json!({"dynamicTools": [{"name": "echo_stamp", "description": "stamps text",
        "presentation": {"label": {"pending": "Stamping", "completed": "Stamped"}, "icon": {"glyph": "bb-tools/stamp"}}}]});
    let ptid = bridge.start_thread("thr_a", tools);
    assert!(ptid.starts_with("refs_"), "{ptid}");

    // thread/identity, then session.reset, then the result.
    let messages = bridge.messages();
    let identity = messages
        .iter()
        .position(|m| m["method"] == "thread/identity")
        .expect("identity");
    let reset = bridge
        .deltas("thr_a")
        .iter()
        .find(|(_, d)| d["kind"] == "session.reset")
        .map(|(i, _)| *i)
        .expect("reset");
    assert!(identity < reset);

    let turn = bridge.turn("thr_a", &ptid, "hello world", "creq_1");
    assert_eq!(bridge.result(turn), json!({}));
    let (_, call) = bridge
        .wait_for(WAIT, |m| m["method"] == "item/tool/call")
        .expect("the bridge asks the runtime to run echo_stamp");
    assert_eq!(call["id"], "echo-req-1");
    assert_eq!(call["params"]["tool"], "echo_stamp");
    assert_eq!(call["params"]["arguments"], json!({"text": "hello world"}));
    assert_eq!(call["params"]["providerThreadId"], json!(ptid));
    assert_eq!(call["params"]["providerNativeIds"], true);
    // The turn must not finish before the runtime answers.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !bridge
            .deltas("thr_a")
            .iter()
            .any(|(_, d)| is_final_boundary(d, "completed"))
    );
    bridge.send_raw(
        &json!({"jsonrpc": "2.0", "id": "echo-req-1", "result": {"success": true, "contentItems": [{"type": "inputText", "text": "STAMPED"}]}})
            .to_string(),
    );
    bridge
        .wait_delta("thr_a", |d| is_final_boundary(d, "completed"))
        .expect("turn completes");

    let kinds: Vec<String> = bridge
        .deltas("thr_a")
        .iter()
        .map(|(_, d)| match d["item"]["type"].as_str() {
            Some(shape) => format!("{}:{shape}", d["kind"].as_str().unwrap()),
            None => d["kind"].as_str().unwrap().to_owned(),
        })
        .collect();
    let expected = [
        "session.reset",
        "input.accepted",
        "turn.open",
        "item.open:command",
        "item.outputDelta",
        "item.close:command",
        "item.open:fileRead",
        "item.close:fileRead",
        "item.open:search",
        "item.close:search",
        "item.open:delegation",
        "turn.open",
        "item.open:agentMessage",
        "item.textDelta",
        "item.textClose",
        "turn.boundary",
        "item.close:delegation",
        "item.open:planSteps",
        "item.close:planSteps",
        "item.open:tool",
        "item.close:tool",
        "item.open:agentMessage",
        "item.textDelta",
        "item.textDelta",
        "item.textClose",
        "usage",
        "contextWindow",
        "turn.boundary",
    ];
    assert_eq!(kinds, expected);

    let deltas = bridge.deltas("thr_a");
    let stamp_close = deltas
        .iter()
        .find(|(_, d)| d["kind"] == "item.close" && d["item"]["type"] == "tool")
        .unwrap();
    assert_eq!(stamp_close.1["item"]["result"], "STAMPED");
    assert_eq!(
        stamp_close.1["presentation"]["label"]["completed"],
        "Stamped"
    );
    let final_text = deltas
        .iter()
        .rev()
        .find(|(_, d)| d["kind"] == "item.textClose")
        .unwrap();
    assert!(
        final_text.1["text"]
            .as_str()
            .unwrap()
            .contains("echo_stamp: STAMPED")
    );
    // Every bridge-owned glyph is namespaced under bb-ref with a declared name.
    for (_, delta) in &deltas {
        if let Some(glyph) = delta["presentation"]["icon"]["glyph"].as_str()
            && delta["item"]["server"] != "bb"
        {
            let name = glyph
                .strip_prefix("bb-ref/")
                .unwrap_or_else(|| panic!("glyph {glyph}"));
            assert!(DECLARED_ICONS.contains(&name), "undeclared glyph {glyph}");
        }
    }

    // An interruptible turn, then thread/stop {interrupt}: settled before the answer.
    let before = bridge.deltas("thr_a").len();
    let hold = bridge.turn("thr_a", &ptid, "please /hold", "creq_2");
    bridge.result(hold);
    bridge
        .wait_delta("thr_a", |d| d["kind"] == "turn.open")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        bridge.deltas("thr_a").len(),
        before + 2,
        "a held turn streams only input.accepted and turn.open"
    );
    let stop = bridge.stop("thr_a", &ptid, "interrupt");
    let (answer_at, _) = bridge.response(stop, WAIT).expect("stop answered");
    let (boundary_at, _) = bridge
        .wait_delta("thr_a", |d| is_final_boundary(d, "interrupted"))
        .expect("interrupted boundary");
    assert!(
        boundary_at < answer_at,
        "settling deltas must precede the stop answer"
    );

    // The child saw its thread scope and the inherited BRIDGEWIRE_* variables, and is gone.
    let launched = read_log(&log);
    assert_eq!(launched.len(), 1, "one provider child per thread");
    let (pid, scope, kept) = &launched[0];
    assert_eq!(scope, "thr_a");
    assert_eq!(kept, "kept");
    assert!(
        wait_pid_gone(*pid),
        "provider child {pid} survived thread/stop"
    );
    // After the stop the bridge holds nothing: no more traffic for the thread.
    std::thread::sleep(QUIET);
    assert!(bridge.deltas("thr_a").iter().all(|(i, _)| *i < answer_at));
}

#[test]
fn zero_work_prompt_settles_by_claim() {
    let mut bridge = Bridge::spawn("");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_z", json!({}));
    let turn = bridge.turn("thr_z", &ptid, "/noop", "creq_z");
    bridge.result(turn);
    bridge
        .wait_delta("thr_z", |d| d["kind"] == "turn.boundary")
        .expect("zero-work settles");
    let deltas: Vec<Value> = bridge.deltas("thr_z").into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        deltas,
        vec![
            json!({"kind": "session.reset"}),
            json!({"kind": "input.accepted", "clientRequestId": "creq_z"}),
            json!({"kind": "turn.boundary", "status": "completed", "claimIfIdle": true}),
        ]
    );
}

#[test]
fn release_resume_archive_and_fork() {
    let mut bridge = Bridge::spawn("");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_r", json!({}));
    let turn = bridge.turn("thr_r", &ptid, "first", "creq_1");
    bridge.result(turn);
    bridge
        .wait_delta("thr_r", |d| is_final_boundary(d, "completed"))
        .unwrap();

    let release = bridge.stop("thr_r", &ptid, "release");
    let (answered_at, _) = bridge.response(release, WAIT).expect("release answered");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        bridge.deltas("thr_r").iter().all(|(i, _)| *i < answered_at),
        "a release of an idle thread writes nothing"
    );

    let resume_params = json!({"threadId": "thr_r", "cwd": "/tmp", "providerThreadId": ptid, "options": {}, "instructionMode": "append"});
    let resume = bridge.request("thread/resume", resume_params.clone());
    let (resumed_at, _) = bridge.response(resume, WAIT).unwrap();
    assert_eq!(bridge.result(resume)["providerThreadId"], json!(ptid));
    let resets = bridge
        .deltas("thr_r")
        .into_iter()
        .filter(|(_, d)| d["kind"] == "session.reset")
        .count();
    assert_eq!(resets, 2, "every session construction sends session.reset");
    assert!(
        bridge
            .deltas("thr_r")
            .iter()
            .any(|(i, d)| d["kind"] == "session.reset" && *i < resumed_at)
    );

    let archive = bridge.request(
        "thread/archive",
        json!({"threadId": "thr_r", "providerThreadId": ptid}),
    );
    bridge.result(archive);
    let rejected = bridge.request("thread/resume", resume_params.clone());
    let error = bridge.error(rejected);
    assert_eq!(error["data"]["recovery"]["kind"], "sessionArchived");
    assert_eq!(error["data"]["recovery"]["retryable"], true);
    assert!(error["data"]["recovery"]["message"].is_string());
    let unarchive = bridge.request(
        "thread/unarchive",
        json!({"threadId": "thr_r", "providerThreadId": ptid}),
    );
    bridge.result(unarchive);
    let retried = bridge.request("thread/resume", resume_params);
    assert_eq!(bridge.result(retried)["providerThreadId"], json!(ptid));

    let fork = bridge.request(
        "thread/fork",
        json!({"threadId": "thr_r_fork", "cwd": "/tmp", "sourceProviderThreadId": ptid, "options": {}, "instructionMode": "append"}),
    );
    let forked = bridge.result(fork)["providerThreadId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(forked, ptid, "a fork is a new provider session");
    let checkpoint = bridge.request(
        "thread/fork",
        json!({"threadId": "thr_r_fork2", "cwd": "/tmp", "sourceProviderThreadId": ptid, "sourceProviderCheckpointId": "cp1", "options": {}}),
    );
    assert_eq!(bridge.error(checkpoint)["code"], -32003);

    // A steer with no running turn is stale.
    let steer = bridge.request(
        "turn/steer",
        json!({"threadId": "thr_r", "providerThreadId": ptid, "input": [], "clientRequestId": "creq_s", "options": {}, "expectedTurnId": "t"}),
    );
    let error = bridge.error(steer);
    assert_eq!(error["code"], -32001);
    assert_eq!(error["data"]["recovery"]["kind"], "staleTurn");
}

#[test]
fn stdin_eof_reaps_children_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("providers.log");
    let mut bridge = Bridge::spawn_with("", &logging_provider_env(&log));
    bridge.initialize();
    let ptid = bridge.start_thread("thr_e", json!({}));
    let hold = bridge.turn("thr_e", &ptid, "/hold", "creq_e");
    bridge.result(hold);
    bridge
        .wait_delta("thr_e", |d| d["kind"] == "turn.open")
        .unwrap();
    let pid = read_log(&log)[0].0;
    assert!(pid_alive(pid));
    bridge.stdin.take();
    let status = bridge.wait_exit(WAIT).expect("bridge exits on EOF");
    assert!(status.success(), "{status:?}");
    assert!(wait_pid_gone(pid), "provider {pid} outlived the bridge");
}

#[test]
fn threads_run_independently() {
    let mut bridge = Bridge::spawn("");
    bridge.initialize();
    let a = bridge.start_thread("thr_1", json!({}));
    let b = bridge.start_thread("thr_2", json!({}));
    assert_ne!(a, b, "provider thread ids are unique");
    bridge.turn("thr_1", &a, "/hold", "creq_a");
    bridge
        .wait_delta("thr_1", |d| d["kind"] == "turn.open")
        .unwrap();
    bridge.turn("thr_2", &b, "other", "creq_b");
    bridge
        .wait_delta("thr_2", |d| is_final_boundary(d, "completed"))
        .expect("second thread is not blocked");
    assert!(
        !bridge
            .deltas("thr_1")
            .iter()
            .any(|(_, d)| d["kind"] == "turn.boundary")
    );
}

// ---- break modes -------------------------------------------------------------------------

#[test]
fn break_drop_unknown_method_leaves_request_unanswered() {
    let mut bridge = Bridge::spawn("drop-unknown-method");
    let id = bridge.request("bb/conformance/definitely-unknown-method", json!({}));
    assert!(
        bridge.response(id, QUIET).is_none(),
        "the request must be dropped"
    );
    // Only that flaw: known methods and invalid params still answer.
    assert_eq!(bridge.initialize()["protocolVersion"], 2);
    let invalid = bridge.request("thread/stop", json!({}));
    assert_eq!(bridge.error(invalid)["code"], -32602);
}

#[test]
fn break_drop_invalid_params() {
    let mut bridge = Bridge::spawn("drop-invalid-params");
    let id = bridge.request("thread/stop", json!({}));
    assert!(bridge.response(id, QUIET).is_none());
    let unknown = bridge.request("nope", json!({}));
    assert_eq!(bridge.error(unknown)["code"], -32601);
}

#[test]
fn break_crash_on_non_json_exits_3() {
    let mut bridge = Bridge::spawn("crash-on-non-json");
    bridge.initialize();
    bridge.send_raw("this is { not json");
    let status = bridge.wait_exit(WAIT).expect("bridge exits");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn break_error_on_response_answers_stray_response() {
    let mut bridge = Bridge::spawn("error-on-response");
    bridge.send_raw(r#"{"jsonrpc":"2.0","id":999999,"result":{}}"#);
    let (_, answer) = bridge
        .response(999_999, WAIT)
        .expect("an error for the stray response");
    assert!(answer.get("error").is_some());
}

#[test]
fn break_handshake_modes() {
    let mut bridge = Bridge::spawn("no-grammar-versions");
    assert!(
        bridge.initialize()["capabilities"]
            .get("grammarVersions")
            .is_none()
    );
    let mut bridge = Bridge::spawn("wrong-protocol-version");
    assert_eq!(bridge.initialize()["protocolVersion"], 1);
    let mut bridge = Bridge::spawn("skills-undeclared-accepted");
    assert!(bridge.initialize()["capabilities"].get("skills").is_none());
    let id = bridge.request("skills/configure", json!({"roots": []}));
    assert_eq!(bridge.result(id), json!({}));
    let mut bridge = Bridge::spawn("commands-declared-refused");
    assert_eq!(
        bridge.initialize()["capabilities"]["commands"]["list"],
        true
    );
    let id = bridge.request("commands/list", json!({"cwd": "/tmp"}));
    assert_eq!(bridge.error(id)["code"], -32601);
}

#[test]
fn break_start_and_fork_without_identity() {
    let mut bridge = Bridge::spawn("start-no-identity,fork-no-identity");
    bridge.initialize();
    let start = bridge.request(
        "thread/start",
        json!({"threadId": "thr_n", "cwd": "/tmp", "options": {}}),
    );
    let result = bridge.result(start);
    assert!(result.get("providerThreadId").is_none(), "{result}");
    let ptid = bridge
        .wait_for(WAIT, |m| m["method"] == "thread/identity")
        .unwrap()
        .1["params"]["providerThreadId"]
        .clone();
    let fork = bridge.request("thread/fork", json!({"threadId": "thr_n_fork", "cwd": "/tmp", "sourceProviderThreadId": ptid, "options": {}}));
    assert!(bridge.result(fork).get("providerThreadId").is_none());
}

#[test]
fn break_stray_stdout_corrupts_the_first_answer() {
    let mut bridge = Bridge::spawn("stray-stdout");
    let id = bridge.request("bb/conformance/definitely-unknown-method", json!({}));
    assert!(
        bridge.response(id, QUIET).is_none(),
        "the first answer must be unreadable"
    );
    let raw = bridge.raw();
    assert!(raw[0].starts_with("bb-ref-bridge: starting {"), "{raw:?}");
    // Later lines are clean protocol traffic again.
    let next = bridge.request("bb/conformance/alive-probe", json!({}));
    assert_eq!(bridge.error(next)["code"], -32601);
}

#[test]
fn break_release_interrupts_fabricates_an_interruption() {
    let mut bridge = Bridge::spawn("release-interrupts");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_ri", json!({}));
    let release = bridge.stop("thr_ri", &ptid, "release");
    let (answered_at, _) = bridge.response(release, WAIT).expect("release answered");
    let (at, _) = bridge
        .wait_delta("thr_ri", |d| is_final_boundary(d, "interrupted"))
        .expect("a fabricated interruption");
    assert!(
        at < answered_at,
        "written before the answer: the fault is the fabrication alone"
    );
}

#[test]
fn break_stop_before_settle_answers_first() {
    let mut bridge = Bridge::spawn("stop-before-settle");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_sb", json!({}));
    bridge.turn("thr_sb", &ptid, "/hold", "creq_h");
    bridge
        .wait_delta("thr_sb", |d| d["kind"] == "turn.open")
        .unwrap();
    let stop = bridge.stop("thr_sb", &ptid, "interrupt");
    let (answer_at, _) = bridge.response(stop, WAIT).unwrap();
    let (boundary_at, _) = bridge
        .wait_delta("thr_sb", |d| is_final_boundary(d, "interrupted"))
        .unwrap();
    assert!(boundary_at > answer_at);
}

#[test]
fn break_crash_mid_turn_exits_7_after_some_deltas() {
    let mut bridge = Bridge::spawn("crash-mid-turn");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_c", json!({}));
    bridge.turn("thr_c", &ptid, "hello", "creq_c");
    let status = bridge.wait_exit(WAIT).expect("bridge exits");
    assert_eq!(status.code(), Some(7));
    let kinds: Vec<Value> = bridge
        .deltas("thr_c")
        .into_iter()
        .map(|(_, d)| d["kind"].clone())
        .collect();
    assert!(kinds.contains(&json!("turn.open")) && kinds.contains(&json!("item.outputDelta")));
    assert!(!kinds.contains(&json!("turn.boundary")));
}

#[test]
fn break_zero_work_hangs() {
    let mut bridge = Bridge::spawn("zero-work-hangs");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_zh", json!({}));
    bridge.turn("thr_zh", &ptid, "/noop", "creq_zh");
    bridge
        .wait_delta("thr_zh", |d| d["kind"] == "input.accepted")
        .unwrap();
    std::thread::sleep(QUIET);
    assert!(
        !bridge
            .deltas("thr_zh")
            .iter()
            .any(|(_, d)| d["kind"] == "turn.boundary")
    );
    // The thread itself is not wedged: an ordinary turn still completes.
    bridge.turn("thr_zh", &ptid, "hello", "creq_zh2");
    bridge
        .wait_delta("thr_zh", |d| is_final_boundary(d, "completed"))
        .expect("next turn completes");
}

#[test]
fn break_no_turn_completed_loses_only_the_first_boundary() {
    let mut bridge = Bridge::spawn("no-turn-completed");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_nt", json!({}));
    bridge.turn("thr_nt", &ptid, "one", "creq_1");
    bridge
        .wait_delta("thr_nt", |d| d["kind"] == "contextWindow")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !bridge
            .deltas("thr_nt")
            .iter()
            .any(|(_, d)| is_final_boundary(d, "completed"))
    );
    bridge.turn("thr_nt", &ptid, "two", "creq_2");
    bridge
        .wait_delta("thr_nt", |d| is_final_boundary(d, "completed"))
        .expect("later turns complete");
}

#[test]
fn break_resume_reuses_ids_skips_the_reset() {
    let mut bridge = Bridge::spawn("resume-reuses-ids");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_ru", json!({}));
    bridge.turn("thr_ru", &ptid, "one", "creq_1");
    bridge
        .wait_delta("thr_ru", |d| is_final_boundary(d, "completed"))
        .unwrap();
    let release = bridge.stop("thr_ru", &ptid, "release");
    bridge.result(release);
    let resume = bridge.request(
        "thread/resume",
        json!({"threadId": "thr_ru", "cwd": "/tmp", "providerThreadId": ptid, "options": {}}),
    );
    bridge.result(resume);
    bridge.turn("thr_ru", &ptid, "two", "creq_2");
    let deadline = Instant::now() + WAIT;
    while bridge
        .deltas("thr_ru")
        .iter()
        .filter(|(_, d)| is_final_boundary(d, "completed"))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "second turn never completed");
        std::thread::sleep(Duration::from_millis(15));
    }
    let deltas = bridge.deltas("thr_ru");
    assert_eq!(
        deltas
            .iter()
            .filter(|(_, d)| d["kind"] == "session.reset")
            .count(),
        1
    );
    let opens: Vec<Value> = deltas
        .iter()
        .filter(|(_, d)| d["kind"] == "item.open")
        .map(|(_, d)| d["key"].clone())
        .collect();
    let unique: std::collections::HashSet<String> = opens.iter().map(Value::to_string).collect();
    assert!(
        unique.len() < opens.len(),
        "provider item ids repeat across the resume"
    );
}

#[test]
fn break_delta_before_open_and_invalid_event_and_icon() {
    let mut bridge = Bridge::spawn("delta-before-open,invalid-event,undeclared-icon");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_d", json!({}));
    bridge.turn("thr_d", &ptid, "hello", "creq_d");
    bridge
        .wait_delta("thr_d", |d| is_final_boundary(d, "completed"))
        .unwrap();
    let deltas = bridge.deltas("thr_d");
    let output = deltas
        .iter()
        .position(|(_, d)| d["kind"] == "item.outputDelta")
        .unwrap();
    let open = deltas
        .iter()
        .position(|(_, d)| d["kind"] == "item.open" && d["item"]["type"] == "command")
        .unwrap();
    assert!(output < open, "the output delta precedes its open");
    let usages: Vec<&Value> = deltas
        .iter()
        .filter(|(_, d)| d["kind"] == "usage")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(usages.len(), 2);
    assert_eq!(usages[1]["last"]["inputTokens"], "1");
    assert!(
        deltas
            .iter()
            .any(|(_, d)| d["presentation"]["icon"]["glyph"] == "bb-ref/sparkles")
    );
}

/// Plan steps go out in bb's vocabulary (`active`, never the provider's `inProgress`) and the
/// acceptance echoes the client request id verbatim; the two break modes undo exactly that.
#[test]
fn plan_steps_and_request_ids_in_bbs_vocabulary_unless_broken() {
    for (mode, running, echoed) in [
        ("", "active", "creq_2222222223"),
        (
            "plan-step-in-progress,malformed-client-request-id",
            "inProgress",
            "req_2222222223",
        ),
    ] {
        let mut bridge = Bridge::spawn(mode);
        bridge.initialize();
        let ptid = bridge.start_thread("thr_p", json!({}));
        bridge.turn("thr_p", &ptid, "hello", "creq_2222222223");
        bridge
            .wait_delta("thr_p", |d| is_final_boundary(d, "completed"))
            .unwrap();
        let deltas = bridge.deltas("thr_p");
        let open = deltas
            .iter()
            .find(|(_, d)| d["kind"] == "item.open" && d["item"]["type"] == "planSteps")
            .map(|(_, d)| d.clone())
            .expect("a plan");
        assert_eq!(
            open["item"]["steps"][1]["status"], running,
            "{mode}: {open}"
        );
        let accepted = deltas
            .iter()
            .find(|(_, d)| d["kind"] == "input.accepted")
            .map(|(_, d)| d.clone())
            .unwrap();
        assert_eq!(accepted["clientRequestId"], echoed, "{mode}");
        // The clean bridge's whole output is bb-valid.
        if mode.is_empty() {
            for (_, d) in &deltas {
                let params = json!({"threadId": "thr_p", "deltas": [d]});
                bridgewire::bb::delta::validate_params(&params).unwrap();
            }
        }
    }
}

#[test]
fn break_threads_serialized_blocks_the_other_thread() {
    let mut bridge = Bridge::spawn("threads-serialized");
    bridge.initialize();
    let a = bridge.start_thread("thr_1", json!({}));
    let b = bridge.start_thread("thr_2", json!({}));
    bridge.turn("thr_1", &a, "/hold", "creq_a");
    bridge
        .wait_delta("thr_1", |d| d["kind"] == "turn.open")
        .unwrap();
    let turn = bridge.turn("thr_2", &b, "other", "creq_b");
    bridge.result(turn);
    std::thread::sleep(QUIET);
    assert!(
        !bridge
            .deltas("thr_2")
            .iter()
            .any(|(_, d)| d["kind"] == "turn.boundary")
    );
    // Once the first thread's turn ends, the deferred one runs.
    let stop = bridge.stop("thr_1", &a, "interrupt");
    bridge.result(stop);
    bridge
        .wait_delta("thr_2", |d| is_final_boundary(d, "completed"))
        .expect("deferred turn runs");
}

#[test]
fn break_archived_no_hint() {
    let mut bridge = Bridge::spawn("archived-no-hint");
    bridge.initialize();
    let ptid = bridge.start_thread("thr_ar", json!({}));
    let archive = bridge.request(
        "thread/archive",
        json!({"threadId": "thr_ar", "providerThreadId": ptid}),
    );
    bridge.result(archive);
    let resume = bridge.request(
        "thread/resume",
        json!({"threadId": "thr_ar", "cwd": "/tmp", "providerThreadId": ptid, "options": {}}),
    );
    assert!(bridge.error(resume).get("data").is_none());
}

#[test]
fn unknown_break_mode_is_refused() {
    let status = Command::new(BRIDGE)
        .args(["--break", "no-such-mode"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}

#[test]
fn break_flag_is_equivalent_to_env() {
    let (_, out) = run_with_input(
        Command::new(BRIDGE)
            .args(["--break", "wrong-protocol-version"])
            .env_remove("BB_REF_BRIDGE_BREAK")
            .stderr(Stdio::null()),
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2,"client":{"name":"t","version":"1"}}}"#,
            "\n"
        )
        .as_bytes(),
        Duration::from_secs(60),
    );
    let line: Value = serde_json::from_str(out.lines().next().unwrap_or_default()).unwrap();
    assert_eq!(line["result"]["protocolVersion"], 1);
}

// ---- the provider on its own --------------------------------------------------------------

#[test]
fn provider_speaks_the_json_rpc_dialect() {
    let run = |lines: &[Value]| -> Vec<Value> {
        let mut child = Command::new(PROVIDER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        let mut seen = Vec::new();
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
            // Wait for the answer to this request before sending the next.
            loop {
                let message = rx.recv_timeout(WAIT).expect("provider answers");
                let done = message.get("method").is_none() && message["id"] == line["id"];
                seen.push(message);
                if done {
                    break;
                }
            }
        }
        drop(stdin);
        let _ = child.wait();
        seen
    };
    let script = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp"}}),
    ];
    let first = run(&script);
    assert_eq!(first[0]["result"]["protocolVersion"], 1);
    let sid_a = first[1]["result"]["sessionId"].as_str().unwrap().to_owned();
    let second = run(&script);
    let sid_b = second[1]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(sid_a, sid_b, "session ids are unique across processes");

    // Use a session created in the same process: /noop does nothing, a prompt streams.
    let both = {
        let mut child = Command::new(PROVIDER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut next = || {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        };
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp"}})
        )
        .unwrap();
        let sid = next()["result"]["sessionId"].as_str().unwrap().to_owned();
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "prompt", "params": {"sessionId": sid, "text": "/noop"}})).unwrap();
        let noop = next();
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 3, "method": "prompt", "params": {"sessionId": sid, "text": "hi"}})).unwrap();
        let mut updates = Vec::new();
        let end = loop {
            let message = next();
            if message.get("method").is_none() {
                break message;
            }
            updates.push(
                message["params"]["update"]["type"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        };
        drop(stdin);
        let _ = child.wait();
        (noop, updates, end)
    };
    let (noop, updates, end) = both;
    assert_eq!(
        noop["result"],
        json!({"stopReason": "end_turn"}),
        "/noop answers at once"
    );
    assert_eq!(end["result"]["stopReason"], "end_turn");
    assert_eq!(updates.first().map(String::as_str), Some("turn_started"));
    assert_eq!(updates.last().map(String::as_str), Some("usage"));
    assert!(
        updates.contains(&"command_started".to_owned())
            && updates.contains(&"agent_message_end".to_owned())
    );
}

#[test]
fn steer_joins_the_running_turn_and_unknown_threads_are_refused() {
    let mut bridge = Bridge::spawn("");
    bridge.initialize();
    let unknown = bridge.turn("thr_missing", "p", "hello", "creq_0");
    let error = bridge.error(unknown);
    assert_eq!(error["code"], -32602);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("No session for thread thr_missing")
    );

    let ptid = bridge.start_thread("thr_s", json!({}));
    bridge.turn("thr_s", &ptid, "/hold", "creq_h");
    bridge
        .wait_delta("thr_s", |d| d["kind"] == "turn.open")
        .unwrap();
    let busy = bridge.turn("thr_s", &ptid, "again", "creq_busy");
    assert_eq!(
        bridge.error(busy)["code"],
        -32004,
        "one turn at a time per thread"
    );
    let steer = bridge.request(
        "turn/steer",
        json!({"threadId": "thr_s", "providerThreadId": ptid, "input": [{"type": "text", "text": "more"}],
            "clientRequestId": "creq_steer", "options": {}, "expectedTurnId": "whatever"}),
    );
    assert_eq!(bridge.result(steer), json!({}));
    let (accepted_at, _) = bridge
        .wait_delta("thr_s", |d| {
            d["kind"] == "input.accepted" && d["clientRequestId"] == "creq_steer"
        })
        .expect("the steer is accepted into the open turn");
    let stop = bridge.stop("thr_s", &ptid, "interrupt");
    let (answer_at, _) = bridge.response(stop, WAIT).unwrap();
    let (boundary_at, _) = bridge
        .wait_delta("thr_s", |d| is_final_boundary(d, "interrupted"))
        .unwrap();
    assert!(accepted_at < boundary_at && boundary_at < answer_at);
}

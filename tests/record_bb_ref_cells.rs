//! Regenerates the bundled `recordings/bb-ref/bb-ref/<cell>/` cells from the reference bridge.
//!
//! Ignored by default: cells are regenerated **on purpose**, with
//! `scripts/record-bb-ref-cells.sh` (which runs this test and then re-pins the folder).
//!
//! ```text
//! this test ──stdin──▶ bridgewire record bb --provider bb-ref ──▶ bb-ref-bridge
//!                                                                   │ BB_REF_PROVIDER_COMMAND
//!                                                                   ▼
//!                                  <tmp>/provider-wrapper = bridgewire record child -- bb-ref-provider
//! ```
//!
//! `record child` learns its thread scope from `BRIDGEWIRE_RECORD_THREAD`, which the bridge sets
//! when it spawns a thread's provider child. Each scenario runs on its own thread id; every
//! thread scope becomes one cell. Output: `$BRIDGEWIRE_RECORD_OUT` (default
//! `<crate>/recordings/bb-ref`), cells under `<out>/bb-ref/<cell>/`; existing cell dirs of the
//! same names are replaced.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");
const PROVIDER: &str = env!("CARGO_BIN_EXE_bb-ref-provider");
const WAIT: Duration = Duration::from_secs(10);
/// The recorded workspace (a machine fact the replay rewrites into its own temp workspace).
const CWD: &str = "/tmp/bb-ref-workspace";

/// `(cell name, thread id)`.
const CELLS: &[(&str, &str)] = &[
    ("turn-tools", "thr_turn_tools"),
    ("resume", "thr_resume"),
    ("stop-interrupt", "thr_stop_interrupt"),
    ("fork", "thr_fork"),
];

struct Driver {
    child: Child,
    stdin: Option<ChildStdin>,
    received: Arc<(Mutex<Vec<Value>>, Condvar)>,
    next_id: u64,
}

impl Driver {
    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{v}")
            .and_then(|()| stdin.flush())
            .expect("write to recorder");
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        let (lock, cvar) = &*self.received;
        let mut r = lock.lock().unwrap();
        loop {
            if let Some(v) = r.iter().find(|v| pred(v)) {
                return v.clone();
            }
            let now = Instant::now();
            assert!(now < deadline, "timed out waiting for {what}");
            r = cvar.wait_timeout(r, deadline - now).unwrap().0;
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        let resp = self.wait_for(&format!("response {id}"), |m| {
            m.get("method").is_none() && m["id"] == json!(id)
        });
        assert!(resp.get("error").is_none(), "{method} failed: {resp}");
        resp["result"].clone()
    }

    fn count_final(&self, thread: &str, status: &str) -> usize {
        let r = self.received.0.lock().unwrap();
        r.iter()
            .filter(|m| m["method"] == "thread/delta" && m["params"]["threadId"] == thread)
            .flat_map(|m| {
                m["params"]["deltas"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|d| {
                d["kind"] == "turn.boundary"
                    && d["status"] == status
                    && d.get("providerTurnId").is_none()
            })
            .count()
    }

    fn wait_final(&self, thread: &str, status: &str, n: usize) {
        let deadline = Instant::now() + WAIT;
        while self.count_final(thread, status) < n {
            assert!(Instant::now() < deadline, "{thread}: no {status} turn #{n}");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Let trailing lines (the prompt answer's aftermath) land before the next request.
        std::thread::sleep(Duration::from_millis(100));
    }

    fn start(&mut self, method: &str, thread: &str, extra: Value) -> String {
        let mut params = json!({"threadId": thread, "cwd": CWD, "options": {"envVars": {"PATH": "/usr/bin:/bin"}}, "instructionMode": "append"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        let r = self.call(method, params);
        r["providerThreadId"].as_str().expect("identity").to_owned()
    }

    fn turn(&mut self, thread: &str, ptid: &str, text: &str, creq: &str) {
        self.call(
            "turn/start",
            json!({"threadId": thread, "providerThreadId": ptid,
                "input": [{"type": "text", "text": text}], "clientRequestId": creq, "options": {}}),
        );
    }

    fn stop(&mut self, thread: &str, ptid: &str, intent: &str) {
        self.call(
            "thread/stop",
            json!({"threadId": thread, "providerThreadId": ptid, "intent": intent, "activeTurnId": null}),
        );
    }
}

fn out_dir() -> PathBuf {
    std::env::var_os("BRIDGEWIRE_RECORD_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb-ref"))
}

#[test]
#[ignore = "regenerates recordings on purpose: scripts/record-bb-ref-cells.sh"]
fn record_bb_ref_cells() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let wrapper = tmp.path().join("provider-wrapper");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec '{BRIDGEWIRE}' record child -- '{PROVIDER}' \"$@\"\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut child = Command::new(BRIDGEWIRE)
        .args(["record", "bb", "--dir"])
        .arg(&raw)
        .args(["--provider", "bb-ref", "--", BRIDGE])
        .env("BB_REF_PROVIDER_COMMAND", &wrapper)
        .env_remove("BB_REF_PROVIDER_ARGS")
        .env_remove("BB_REF_BRIDGE_BREAK")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn recorder");
    let stdout = child.stdout.take().unwrap();
    let received = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let sink = received.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let (lock, cvar) = &*sink;
                lock.lock().unwrap().push(v);
                cvar.notify_all();
            }
        }
    });
    let mut d = Driver {
        stdin: child.stdin.take(),
        child,
        received,
        next_id: 0,
    };
    d.call(
        "initialize",
        json!({"protocolVersion": 2, "client": {"name": "bb-ref-recorder", "version": "0"}, "grammarVersions": [3, 3]}),
    );

    // turn-tools: one turn with every item kind, including the runtime-run echo_stamp tool.
    let tools = json!({"dynamicTools": [{"name": "echo_stamp", "description": "stamps text",
        "presentation": {"label": {"pending": "Stamping", "completed": "Stamped"}, "icon": {"glyph": "bb-tools/stamp"}}}]});
    let t = "thr_turn_tools";
    let ptid = d.start("thread/start", t, tools);
    d.turn(
        t,
        &ptid,
        "read the file, edit it and run a command",
        "creq_2222222223",
    );
    let call = d.wait_for("item/tool/call", |m| m["method"] == "item/tool/call");
    d.send(&json!({"jsonrpc": "2.0", "id": call["id"], "result": {"success": true, "contentItems": [{"type": "inputText", "text": "STAMPED"}]}}));
    d.wait_final(t, "completed", 1);
    d.stop(t, &ptid, "release");

    // resume: a turn, a release stop, then a new turn that resumes.
    let t = "thr_resume";
    let ptid = d.start("thread/start", t, json!({}));
    d.turn(t, &ptid, "first", "creq_2222222224");
    d.wait_final(t, "completed", 1);
    d.stop(t, &ptid, "release");
    let ptid2 = d.start("thread/resume", t, json!({"providerThreadId": ptid}));
    d.turn(t, &ptid2, "second", "creq_2222222225");
    d.wait_final(t, "completed", 2);
    d.stop(t, &ptid2, "release");

    // stop-interrupt: a held turn interrupted, then a new turn on the resumed session.
    let t = "thr_stop_interrupt";
    let ptid = d.start("thread/start", t, json!({}));
    d.turn(t, &ptid, "please /hold", "creq_2222222226");
    d.wait_for("held turn.open", |m| {
        m["method"] == "thread/delta"
            && m["params"]["threadId"] == t
            && m["params"]["deltas"]
                .as_array()
                .is_some_and(|ds| ds.iter().any(|d| d["kind"] == "turn.open"))
    });
    std::thread::sleep(Duration::from_millis(100));
    d.stop(t, &ptid, "interrupt");
    d.wait_final(t, "interrupted", 1);
    let ptid2 = d.start("thread/resume", t, json!({"providerThreadId": ptid}));
    d.turn(t, &ptid2, "after the interrupt", "creq_2222222227");
    d.wait_final(t, "completed", 1);
    d.stop(t, &ptid2, "release");

    // fork: a source thread with one turn, then a fork and one turn on it.
    let src = "thr_fork_source";
    let sptid = d.start("thread/start", src, json!({}));
    d.turn(src, &sptid, "source turn", "creq_2222222228");
    d.wait_final(src, "completed", 1);
    d.stop(src, &sptid, "release");
    let t = "thr_fork";
    let ptid = d.start("thread/fork", t, json!({"sourceProviderThreadId": sptid}));
    d.turn(t, &ptid, "forked turn", "creq_2222222229");
    d.wait_final(t, "completed", 1);
    d.stop(t, &ptid, "release");

    drop(d.stdin.take());
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = d.child.try_wait().unwrap() {
            assert!(status.success(), "recorder exited {status}");
            break;
        }
        if Instant::now() >= deadline {
            let _ = d.child.kill();
            panic!("recorder did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap();

    let out = out_dir().join("bb-ref");
    std::fs::create_dir_all(&out).unwrap();
    for (cell, thread) in CELLS {
        let from = raw.join("bb-ref").join(thread);
        assert!(from.is_dir(), "no scope {}", from.display());
        let to = out.join(cell);
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
        eprintln!("recorded {}", to.display());
    }
}

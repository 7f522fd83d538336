//! bb's half of [`crate::protocol::Live`]: a cell replayed through [`super::player`], and the
//! bridge's identity read from its `initialize` result.
//!
//! The identity is the handshake result itself (bb §10.1: `protocolVersion`, `capabilities`,
//! plus any fields a bridge adds): `<name> <version>` when the result names the bridge
//! (`serverInfo`, `bridgeInfo` or `bridge`), then a fingerprint of the whole result. Two builds
//! with the same answer are indistinguishable here, which is the point: a cell recorded from a
//! bridge that negotiated other capabilities will not replay the same way.

use super::transport::{Bridge, Incoming};
use crate::cell::Cell;
use crate::cells::{Scenario, Step};
use crate::protocol::{
    BridgeCommand, Live, LiveLimits, LiveReplay, Protocol, RecordRequest, RecordedScenario,
};
use serde_json::Value;
use std::time::{Duration, Instant};

pub struct BbLive;

/// The identity of an `initialize` result: its text ([`identity_of`]), the handshake facts
/// and whether bb's runtime would refuse the bridge at spawn.
pub fn identity(result: &Value) -> crate::protocol::Identity {
    crate::protocol::Identity {
        text: identity_of(result),
        facts: handshake_facts(result),
        refused: refusal(result),
        running: Vec::new(),
    }
}

/// Why bb's runtime refuses a bridge whose handshake says this: "the runtime rejects a bridge
/// answering another version", and a `grammarVersions` range that misses 3 (its assembler
/// speaks v3 only), the `[2, 2]` default of a bridge that omits the field included.
pub fn refusal(result: &Value) -> Option<String> {
    let version = result.get("protocolVersion");
    if version.and_then(Value::as_f64) != Some(2.0) {
        return Some(format!(
            "the runtime refuses a bridge answering protocolVersion {} (it speaks 2)",
            version.map_or("(absent)".into(), crate::jsjson::to_string)
        ));
    }
    let range = result.pointer("/capabilities/grammarVersions");
    let (lo, hi) = match range.and_then(Value::as_array).map(Vec::as_slice) {
        Some([lo, hi]) => (lo.as_f64(), hi.as_f64()),
        None => (Some(2.0), Some(2.0)),
        Some(_) => (None, None),
    };
    match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= 3.0 && 3.0 <= hi => None,
        _ => Some(format!(
            "the runtime refuses a bridge whose grammarVersions {} misses 3 (its assembler speaks v3 only)",
            range.map_or("(absent, so [2,2])".into(), crate::jsjson::to_string)
        )),
    }
}

/// The handshake as the runtime acts on it: the protocol version and the capabilities the
/// protocol names, each as stated. A number is compared as a number (`2` and `2.0` are one
/// version, `[3.0, 3.0]` and `[3, 3]` one grammar range); unknown capability fields "pass
/// through" and are left out.
fn handshake_facts(result: &Value) -> Value {
    let caps = result.get("capabilities").and_then(Value::as_object);
    let facts: serde_json::Map<String, Value> = HANDSHAKE_FACTS
        .iter()
        .filter_map(|k| Some((k.to_string(), as_numbers(caps?.get(*k)?.clone()))))
        .collect();
    let version = result.get("protocolVersion").cloned().map(as_numbers);
    serde_json::json!({
        "protocolVersion": version,
        "capabilities": facts,
    })
}

/// `v` with every number that has a zero fraction written as an integer (`3.0` → `3`): JSON has
/// one number type, and bb's runtime reads them as one.
fn as_numbers(v: Value) -> Value {
    match v {
        // One reading of an integral float for the whole bb module (`msg::json_int`, the
        // range a double holds exactly), as the handshake and the ids read it.
        Value::Number(n) if n.is_f64() => match super::msg::json_int(&Value::Number(n.clone())) {
            Some(i) => Value::from(i),
            None => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(as_numbers).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, as_numbers(v))).collect())
        }
        other => other,
    }
}

/// The identity text of an `initialize` result.
pub fn identity_of(result: &Value) -> String {
    let named = ["serverInfo", "bridgeInfo", "bridge"]
        .iter()
        .filter_map(|k| result.get(*k))
        .find_map(|info| {
            let name = info.get("name").and_then(Value::as_str)?;
            let version = info.get("version").and_then(Value::as_str).unwrap_or("");
            Some(format!("{name} {version}").trim().to_string() + " ")
        })
        .unwrap_or_default();
    // Only what the protocol makes of a handshake: its version and the session-behavior facts
    // it names. "Unknown capability fields pass through", so a build that adds one is the same
    // bridge to a replay (it was named "another bridge" before).
    let spec = handshake_facts(result);
    format!("{named}handshake {}", crate::protocol::fingerprint(&spec))
}

/// The handshake capabilities the protocol names ("session-behavior facts", plus the
/// catalogue's `commands`).
const HANDSHAKE_FACTS: &[&str] = &[
    "sessionRestore",
    "threadArchive",
    "threadRename",
    "threadGoalClear",
    "fork",
    "approvalEnforcedBy",
    "grammarVersions",
    "steerMode",
    "skills",
    "commands",
];

/// `turn.mainRun ×n` when the bridge sent held-turn deltas (accepted, not assembled).
fn main_run_note(n: usize) -> Vec<String> {
    if n == 0 {
        Vec::new()
    } else {
        vec![format!("turn.mainRun ×{n}")]
    }
}

/// A player replay as a live leg sees it (what `parity --head cmd:<bridge>` compares), shared
/// with `replay bb`'s `recorded/<cell>/matches-recording` so the two cannot disagree.
pub fn live_replay_of(r: super::player::ReplayResult) -> LiveReplay {
    LiveReplay {
        grammar: r.grammar_violations.iter().map(|d| d.layer_key()).collect(),
        stalls: r.stalls,
        events: r.events,
        left_out: main_run_note(r.main_runs),
        wire: Some(r.wire),
        wire_in_cell: Some(r.wire_in_cell),
        ..Default::default()
    }
}

impl Live for BbLive {
    fn protocol(&self) -> Protocol {
        Protocol::Bb
    }

    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, limits: LiveLimits) -> LiveReplay {
        let timeout = limits.timeout;
        let opts = super::player::ReplayOptions {
            timeout,
            ..Default::default()
        };
        let argv: Vec<std::ffi::OsString> =
            bridge.spawn_argv().into_iter().map(Into::into).collect();
        match super::player::replay_cell(cell, &argv, &opts) {
            Err(super::player::ReplayError::Skip(reason)) => LiveReplay::skipped(reason),
            Err(e) => LiveReplay::failed(e.to_string()),
            Ok(r) => live_replay_of(r),
        }
    }

    fn identify(
        &self,
        bridge: &BridgeCommand,
        timeout: Duration,
    ) -> Result<Option<crate::protocol::Identity>, String> {
        let argv: Vec<std::ffi::OsString> =
            bridge.spawn_argv().into_iter().map(Into::into).collect();
        let mut b = super::transport::Bridge::spawn(&argv, Default::default())
            .map_err(|e| format!("cannot start `{}`: {e}", bridge.display()))?;
        b.send_line(
            r#"{"jsonrpc":"2.0","id":"bridgewire-identify","method":"initialize","params":{"protocolVersion":2,"client":{"name":"bridgewire","version":"0"},"grammarVersions":[3,3]}}"#,
        );
        let deadline = Instant::now() + timeout;
        let found = loop {
            match b.recv(deadline) {
                Some(super::transport::Incoming::Line(line)) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&line)
                        && v["id"] == "bridgewire-identify"
                    {
                        break match v.get("result") {
                            Some(r) => Ok(Some(crate::protocol::Identity {
                                // Read while the bridge that answered still runs.
                                running: crate::proc::tree_image(b.tree_mark(), &[]),
                                ..identity(r)
                            })),
                            None => Err(format!(
                                "`{}` refused initialize: {}",
                                bridge.display(),
                                crate::jsjson::to_string(&v["error"])
                            )),
                        };
                    }
                }
                Some(super::transport::Incoming::Eof) | None => {
                    // Its stdout closed: it exited (or is exiting) without answering, said as
                    // such, not as a wait that ran out. Its stderr is read after the exit, so
                    // its last words are in.
                    let why = match b.wait_status(Duration::from_millis(300)) {
                        Some(st) => format!("exited ({}) before answering initialize", st),
                        None => format!(
                            "gave no initialize response within {} ms",
                            timeout.as_millis()
                        ),
                    };
                    // Its stderr reader may still be copying what it wrote last (bounded).
                    let read_by = Instant::now() + Duration::from_millis(200);
                    let mut tail = b.stderr_tail();
                    while tail.trim().is_empty() && Instant::now() < read_by {
                        std::thread::sleep(Duration::from_millis(10));
                        tail = b.stderr_tail();
                    }
                    let tail = tail.trim();
                    break Err(format!(
                        "`{}` {why}{}",
                        bridge.display(),
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!(" (stderr: {})", last_lines(tail, 3))
                        }
                    ));
                }
                Some(_) => {}
            }
        };
        b.kill();
        found
    }

    fn record(&self, req: &RecordRequest) -> Result<Vec<RecordedScenario>, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut out = Vec::new();
        for scenario in req.scenarios {
            out.push(record_scenario(req, scenario, &exe)?);
        }
        Ok(out)
    }

    fn states_handshake(&self) -> bool {
        true
    }

    fn recorded_identity(&self, cell: &Cell) -> Option<crate::protocol::Identity> {
        let mut init_ids: Vec<Value> = Vec::new();
        for e in cell.merged() {
            let Ok(v) = serde_json::from_str::<Value>(&e.line) else {
                continue;
            };
            match e.dir.as_str() {
                "runtime→bridge" if v["method"] == "initialize" => init_ids.push(v["id"].clone()),
                "bridge→runtime" if init_ids.contains(&v["id"]) => {
                    return v.get("result").map(identity);
                }
                _ => {}
            }
        }
        None
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// A `clientRequestId` of the shape bb's schema requires (`creq_` and ten characters of its
/// alphabet), stable per thread and step so re-recording gives the same ids.
fn client_request_id(thread: &str, step: usize) -> String {
    const ALPHABET: &[u8] = b"23456789abcdefghijkmnpqrstuvwxyz";
    let mut h = crate::util::fnv1a64(format!("{thread}#{step}").as_bytes());
    let mut id = String::from("creq_");
    for _ in 0..10 {
        id.push(ALPHABET[(h & 31) as usize] as char);
        h >>= 5;
    }
    id
}

/// Quotes a word for `sh`.
fn sh_quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', r"'\''"))
}

/// Records one scenario: a fresh `bridgewire record bb` around the bridge, on thread
/// `thr_<name>`, driven step by step; the thread's scope directory becomes the cell.
fn record_scenario(
    req: &RecordRequest,
    scenario: &Scenario,
    exe: &std::path::Path,
) -> Result<RecordedScenario, String> {
    let thread = format!("thr_{}", scenario.name);
    let dir = req.raw.join(&scenario.name);
    let mut argv: Vec<std::ffi::OsString> = vec![
        "env".into(),
        // A bridge that starts its provider under `record child` files the provider lanes in
        // this thread's scope.
        format!("{}={thread}", super::recorder::THREAD_ENV).into(),
    ];
    for (name, command) in req.provider_env {
        let words = crate::parity::split_words(command)?;
        let wrapper = req.raw.join(format!("provider-{}-{name}", scenario.name));
        let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
        let script = format!(
            "#!/bin/sh\nexec {} record child -- {} \"$@\"\n",
            sh_quote(&exe.display().to_string()),
            quoted.join(" ")
        );
        std::fs::write(&wrapper, script).map_err(|e| format!("{}: {e}", wrapper.display()))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755));
        argv.push(format!("{name}={}", wrapper.display()).into());
    }
    argv.push(exe.into());
    argv.extend(["record".into(), "bb".into(), "--dir".into()]);
    argv.push(dir.clone().into());
    argv.extend(["--provider".into(), req.provider.into(), "--".into()]);
    argv.extend(req.bridge.spawn_argv().into_iter().map(Into::into));
    let bridge = Bridge::spawn(&argv, Default::default())
        .map_err(|e| format!("cannot start `{}`: {e}", req.bridge.display()))?;
    let mut s = Session {
        bridge,
        next_id: 0,
        settled: 0,
        timeout: req.timeout,
        scenario: &scenario.name,
    };
    let init = s.call(
        "initialize",
        serde_json::json!({"protocolVersion": 2, "client": {"name": "bridgewire-record-cells", "version": env!("CARGO_PKG_VERSION")}, "grammarVersions": [3, 3]}),
    )?;
    let identity = identity(&init);
    let cwd = std::env::temp_dir().join("bridgewire-record-cells-workspace");
    let _ = std::fs::create_dir_all(&cwd);
    let start_params = |ptid: Option<&str>| {
        let mut p = serde_json::json!({"threadId": thread, "cwd": cwd.display().to_string(),
            "options": {"envVars": {"PATH": std::env::var("PATH").unwrap_or_default()}},
            "instructionMode": "append"});
        if let Some(ptid) = ptid {
            p["providerThreadId"] = ptid.into();
        }
        p
    };
    let mut ptid = s
        .call("thread/start", start_params(None))?
        .get("providerThreadId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut turns = 0;
    for (i, step) in scenario.steps.iter().enumerate() {
        match step {
            Step::Prompt(text) => {
                turns += 1;
                let mut p = serde_json::json!({"threadId": thread,
                    "input": [{"type": "text", "text": text}],
                    "clientRequestId": client_request_id(&thread, i), "options": {}});
                if let Some(t) = &ptid {
                    p["providerThreadId"] = t.clone().into();
                }
                s.call("turn/start", p)?;
                s.wait_settled(&thread, turns, &format!("step {} (prompt {text:?})", i + 1))?;
            }
            Step::Stop => {
                let mut p = serde_json::json!({"threadId": thread, "intent": "release", "activeTurnId": null});
                if let Some(t) = &ptid {
                    p["providerThreadId"] = t.clone().into();
                }
                s.call("thread/stop", p)?;
            }
            Step::Resume => {
                let r = s.call("thread/resume", start_params(ptid.as_deref()))?;
                if let Some(t) = r.get("providerThreadId").and_then(Value::as_str) {
                    ptid = Some(t.to_string());
                }
            }
            Step::WaitMs(ms) => s.pump_for(Duration::from_millis(*ms)),
        }
    }
    let mut p = serde_json::json!({"threadId": thread, "intent": "release", "activeTurnId": null});
    if let Some(t) = &ptid {
        p["providerThreadId"] = t.clone().into();
    }
    if scenario.steps.last() != Some(&Step::Stop) {
        s.call("thread/stop", p)?;
    }
    s.bridge.close_stdin();
    let exited = s.bridge.wait_status(req.timeout);
    s.pump_for(Duration::from_millis(0));
    if exited.is_none() {
        s.bridge.kill();
    }
    let scope_dir = dir
        .join(crate::lane::scope_dir_name(Some(req.provider)))
        .join(crate::lane::scope_dir_name(Some(&thread)));
    if !scope_dir.is_dir() {
        return Err(format!(
            "scenario {}: the recording has no scope {}",
            scenario.name,
            scope_dir.display()
        ));
    }
    Ok(RecordedScenario {
        name: scenario.name.clone(),
        scope_dir,
        thread_id: Some(thread),
        identity: Some(identity),
    })
}

/// A scenario being driven through `record bb`.
struct Session<'a> {
    bridge: Bridge,
    next_id: u64,
    /// Settled turns seen (top-level `turn.boundary` deltas).
    settled: usize,
    timeout: Duration,
    scenario: &'a str,
}

impl Session<'_> {
    /// Handles one line from the bridge; returns it parsed.
    fn handle(&mut self, line: &str) -> Option<Value> {
        let v = Value::Object(super::msg::object(line)?);
        if v["method"] == "thread/delta"
            && let Some(ds) = v["params"]["deltas"].as_array()
        {
            self.settled += ds
                .iter()
                .filter(|d| d["kind"] == "turn.boundary" && d.get("providerTurnId").is_none())
                .count();
        }
        // A request from the bridge: the runtime side of a recording answers nothing it does
        // not know, so it says so (the answer is recorded like any line).
        if let (Some(id), Some(method)) = (v.get("id"), v["method"].as_str()) {
            self.bridge.send_line(
                &serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                    "message": format!("bridgewire record-cells does not answer {method}")}})
                .to_string(),
            );
        }
        Some(v)
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.bridge.send_line(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                .to_string(),
        );
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.bridge.recv(deadline) {
                Some(Incoming::Line(line)) => {
                    if let Some(v) = self.handle(&line)
                        && v.get("method").is_none()
                        && v["id"] == id
                    {
                        return match v.get("result") {
                            Some(r) => Ok(r.clone()),
                            None => Err(format!(
                                "scenario {}: the bridge answered {method} with {}",
                                self.scenario,
                                crate::jsjson::to_string(&v["error"])
                            )),
                        };
                    }
                }
                Some(Incoming::Eof) | None => {
                    let tail = self.bridge.stderr_tail();
                    return Err(format!(
                        "scenario {}: no answer to {method} within {} ms{}",
                        self.scenario,
                        self.timeout.as_millis(),
                        if tail.trim().is_empty() {
                            String::new()
                        } else {
                            format!(" (stderr: {})", last_lines(tail.trim(), 3))
                        }
                    ));
                }
                Some(_) => {}
            }
        }
    }

    fn wait_settled(&mut self, _thread: &str, n: usize, step: &str) -> Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        while self.settled < n {
            match self.bridge.recv(deadline) {
                Some(Incoming::Line(line)) => {
                    self.handle(&line);
                }
                Some(Incoming::Eof) | None => {
                    return Err(format!(
                        "scenario {}: {step}: the turn did not settle (no turn.boundary) within {} ms",
                        self.scenario,
                        self.timeout.as_millis()
                    ));
                }
                Some(_) => {}
            }
        }
        // Lines that follow the settling boundary land before the next request.
        self.pump_for(Duration::from_millis(150));
        Ok(())
    }

    /// Reads (and answers) whatever arrives for `d`.
    fn pump_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while let Some(item) = self.bridge.recv(deadline) {
            if let Incoming::Line(line) = item {
                self.handle(&line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::identity_of;
    use serde_json::json;

    /// "Unknown capability fields pass through": a handshake with one more is the same bridge
    /// to a replay; a session-behavior fact that changes is another.
    #[test]
    fn identity_reads_only_what_the_protocol_names() {
        let base = json!({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3], "sessionRestore": true}});
        let extended = json!({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3], "sessionRestore": true, "x-vendor": {"a": 1}}, "x-extra": 1});
        let narrowed = json!({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3]}});
        assert_eq!(identity_of(&base), identity_of(&extended));
        assert_ne!(identity_of(&base), identity_of(&narrowed));
        let named = json!({"protocolVersion": 2, "capabilities": {}, "serverInfo": {"name": "py", "version": "1"}});
        assert!(identity_of(&named).starts_with("py 1 handshake "));
        // JSON has one number type: `2.0` and `[3.0, 3.0]` are the version and range of `base`
        // (the Perl peer's --mode floats failed parity's handshake with `3 → 3`).
        let floats = serde_json::from_str(r#"{"protocolVersion": 2.0, "capabilities": {"grammarVersions": [3.0, 3.0], "sessionRestore": true}}"#).unwrap();
        assert_eq!(identity_of(&base), identity_of(&floats));
        assert_ne!(
            identity_of(&base),
            identity_of(
                &json!({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3.5], "sessionRestore": true}})
            )
        );
    }
}

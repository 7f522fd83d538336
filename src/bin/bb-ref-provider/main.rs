//! `bb-ref-provider` — a scripted, deterministic provider child for `bb-ref-bridge`.
//!
//! It speaks the **json-rpc dialect** of bb's replay provider double (reference §6.11):
//! line-delimited JSON-RPC 2.0 on stdin/stdout, requests carry string/number `id` + `method`,
//! responses carry `id` without `method`, notifications `method` without `id`, and the
//! segment-starting request is `initialize`. Speaking exactly that dialect is what lets a
//! recorded provider lane of this child be replayed later by the generic fake provider.
//!
//! # Requests it answers (bridge → provider)
//!
//! | Method | Params | Result |
//! | --- | --- | --- |
//! | `initialize` | anything | `{protocolVersion: 1, agentInfo, capabilities}` |
//! | `session/new` | `{cwd, tools?: [name]}` | `{sessionId}` (unique across processes) |
//! | `session/load` | `{sessionId, cwd, tools?}` | `{sessionId}` (re-adopts the id) |
//! | `session/fork` | `{sessionId, cwd, tools?}` | `{sessionId}` (a fresh id) |
//! | `prompt` | `{sessionId, text}` | `{stopReason: "end_turn" \| "cancelled"}` once the turn ends |
//! | `cancel` | `{sessionId}` | `{}`; a running prompt then ends with `cancelled` |
//!
//! Anything else gets `-32601`. While a prompt runs it streams `session/update
//! {sessionId, update: {type, ...}}` notifications and, when the session's tools include
//! `echo_stamp`, sends the request `tool/call {sessionId, callId, tool, arguments}` and waits
//! for the bridge's answer before it continues.
//!
//! # Scripted prompts
//!
//! * `/noop` (a whitespace-delimited word): answers `end_turn` with no update at all.
//! * containing `/hold`: sends `turn_started`, then nothing until `cancel` arrives.
//! * anything else: a short fixed script (see [`run_script`]).
//!
//! Payloads carry no timestamps; only minted session ids depend on time and pid, because
//! they must be unique among all sessions on the host (a bare counter would collide across
//! processes and bb refuses to resume a handle another thread announced).
//!
//! Exits on stdin EOF (and on SIGTERM through the default disposition). Diagnostics go to
//! stderr only, prefixed `[bb-ref-provider]`.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the script waits for the bridge to answer a `tool/call` before giving up.
const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Per-session facts the provider keeps in memory.
#[derive(Default, Clone)]
struct Session {
    /// Prompts run in this process for the session; item ids are derived from it.
    turns: u64,
    /// Dynamic tool names the bridge announced for this session.
    tools: Vec<String>,
}

/// The one prompt that may be in flight per session.
struct Running {
    cancelled: Arc<AtomicBool>,
}

struct Provider {
    out: Mutex<std::io::Stdout>,
    sessions: Mutex<HashMap<String, Session>>,
    running: Mutex<HashMap<String, Running>>,
    /// Provider→bridge requests waiting for their response, by our own id.
    pending: Mutex<HashMap<String, Sender<Value>>>,
    next_request: AtomicU64,
    minted: AtomicU64,
}

impl Provider {
    fn write(&self, value: &Value) {
        // One line per message, flushed at once: the bridge reads line by line and a
        // buffered tail would look like a stalled provider.
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    fn respond(&self, id: &Value, result: Value) {
        self.write(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn error(&self, id: &Value, code: i64, message: String) {
        self.write(
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        );
    }

    fn update(&self, session_id: &str, update: Value) {
        self.write(&json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": update},
        }));
    }

    /// Mints a session id unique across processes: wall-clock millis, pid, and a
    /// per-process counter for sessions minted in the same millisecond.
    fn mint_session_id(&self) -> String {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let n = self.minted.fetch_add(1, Ordering::SeqCst) + 1;
        format!("refs_{millis:x}_{:x}_{n}", std::process::id())
    }

    /// Sends a provider→bridge request and waits (bounded) for its response.
    fn call(&self, method: &str, params: Value) -> Option<Value> {
        let n = self.next_request.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("prov-req-{n}");
        let (tx, rx): (Sender<Value>, Receiver<Value>) = channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), tx);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = rx.recv_timeout(TOOL_CALL_TIMEOUT).ok();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        answer
    }
}

fn diag(message: &str) {
    eprintln!("[bb-ref-provider] {message}");
}

fn str_param<'a>(params: &'a Value, key: &str) -> Option<&'a str> {
    params
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn tool_names(params: &Value) -> Vec<String> {
    params
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn main() {
    let provider = Arc::new(Provider {
        out: Mutex::new(std::io::stdout()),
        sessions: Mutex::new(HashMap::new()),
        running: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        next_request: AtomicU64::new(0),
        minted: AtomicU64::new(0),
    });

    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let line = line.trim_end_matches('\r');
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            diag("ignoring a non-JSON line");
            continue;
        };
        handle_line(&provider, message);
    }
    // stdin EOF: the bridge is gone or done with us. Exit without waiting for prompt
    // threads — nobody is left to read what they would write.
}

fn handle_line(provider: &Arc<Provider>, message: Value) {
    let Some(object) = message.as_object() else {
        return;
    };
    let id = object.get("id").cloned();
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        // A response to one of our own requests (only `tool/call` exists).
        if let Some(key) = id.as_ref().and_then(Value::as_str)
            && let Some(tx) = provider
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key)
        {
            let _ = tx.send(message.clone());
        }
        return;
    };
    let Some(id) = id.filter(|id| id.is_string() || id.is_number()) else {
        return; // Notifications from the bridge carry nothing we act on.
    };
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "initialize" => provider.respond(
            &id,
            json!({
                "protocolVersion": 1,
                "agentInfo": {"name": "bb-ref-provider", "version": env!("CARGO_PKG_VERSION")},
                "capabilities": {"loadSession": true, "fork": true, "cancel": true},
            }),
        ),
        "session/new" => {
            let session_id = provider.mint_session_id();
            adopt(provider, &session_id, &params);
            provider.respond(&id, json!({"sessionId": session_id}));
        }
        "session/load" => match str_param(&params, "sessionId") {
            Some(session_id) => {
                adopt(provider, session_id, &params);
                provider.respond(&id, json!({"sessionId": session_id}));
            }
            None => provider.error(&id, -32602, "session/load needs a sessionId".into()),
        },
        "session/fork" => match str_param(&params, "sessionId") {
            Some(_) => {
                let session_id = provider.mint_session_id();
                adopt(provider, &session_id, &params);
                provider.respond(&id, json!({"sessionId": session_id}));
            }
            None => provider.error(&id, -32602, "session/fork needs a sessionId".into()),
        },
        "prompt" => start_prompt(provider, id, &params),
        "cancel" => {
            if let Some(session_id) = str_param(&params, "sessionId")
                && let Some(running) = provider
                    .running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(session_id)
            {
                running.cancelled.store(true, Ordering::SeqCst);
            }
            provider.respond(&id, json!({}));
        }
        other => provider.error(&id, -32601, format!("Method not found: {other}")),
    }
}

/// Registers (or re-registers) a session; its turn counter restarts in this process, which
/// is exactly why the bridge must send `session.reset` on every construction.
fn adopt(provider: &Provider, session_id: &str, params: &Value) {
    provider
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            session_id.to_owned(),
            Session {
                turns: 0,
                tools: tool_names(params),
            },
        );
}

fn start_prompt(provider: &Arc<Provider>, id: Value, params: &Value) {
    let Some(session_id) = str_param(params, "sessionId").map(str::to_owned) else {
        provider.error(&id, -32602, "prompt needs a sessionId".into());
        return;
    };
    let text = params
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let session = {
        let mut sessions = provider.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let Some(session) = sessions.get_mut(&session_id) else {
            drop(sessions);
            provider.error(&id, -32000, format!("unknown session {session_id}"));
            return;
        };
        session.turns += 1;
        session.clone()
    };
    let cancelled = Arc::new(AtomicBool::new(false));
    {
        let mut running = provider.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.contains_key(&session_id) {
            drop(running);
            provider.error(&id, -32004, format!("session {session_id} is busy"));
            return;
        }
        running.insert(
            session_id.clone(),
            Running {
                cancelled: Arc::clone(&cancelled),
            },
        );
    }
    // The script runs on its own thread so the stdin loop keeps reading: `cancel` and the
    // answers to our `tool/call` requests must get through while a prompt is in flight.
    let provider = Arc::clone(provider);
    std::thread::spawn(move || {
        let stop_reason = run_script(&provider, &session_id, &session, &text, &cancelled);
        provider
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&session_id);
        provider.respond(&id, json!({"stopReason": stop_reason}));
    });
}

/// Runs one prompt and returns its stop reason.
///
/// The ordinary script, in order (ids are `<sessionId>-t<n>-<name>`):
/// `turn_started`, `command_started`/`command_output`/`command_finished`, `file_read`,
/// `search`, `subagent_started`/`subagent_message`/`subagent_finished`, `plan` (pending)
/// and `plan` (all completed), the optional `tool/call` request for `echo_stamp`, two
/// `agent_message_chunk`s and `agent_message_end`, then `usage`.
fn run_script(
    provider: &Provider,
    session_id: &str,
    session: &Session,
    text: &str,
    cancelled: &AtomicBool,
) -> &'static str {
    if text.split_whitespace().any(|word| word == "/noop") {
        return "end_turn";
    }
    let t = session.turns;
    let id = |name: &str| format!("{session_id}-t{t}-{name}");
    provider.update(session_id, json!({"type": "turn_started", "turn": t}));
    if text.contains("/hold") {
        // An interruptible prompt: nothing happens until the bridge cancels it.
        while !cancelled.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        return "cancelled";
    }
    let step = |update: Value| -> bool {
        if cancelled.load(Ordering::SeqCst) {
            return false;
        }
        provider.update(session_id, update);
        true
    };
    let quoted = serde_json::to_string(text).unwrap_or_default();
    let output = format!("{text}\n");
    let script = [
        json!({"type": "command_started", "toolCallId": id("cmd"), "command": format!("echo {quoted}"), "cwd": "."}),
        json!({"type": "command_output", "toolCallId": id("cmd"), "text": output}),
        json!({"type": "command_finished", "toolCallId": id("cmd"), "exitCode": 0, "output": output, "durationMs": 1}),
        json!({"type": "file_read", "toolCallId": id("read"), "path": "README.md"}),
        json!({"type": "search", "toolCallId": id("search"), "mode": "content", "query": text, "path": "."}),
        json!({"type": "subagent_started", "toolCallId": id("agent"), "label": "Summarize the prompt"}),
        json!({"type": "subagent_message", "toolCallId": id("agent"), "messageId": id("agent-message"), "text": format!("The prompt has {} characters.", text.chars().count())}),
        json!({"type": "subagent_finished", "toolCallId": id("agent"), "summary": format!("The prompt has {} characters.", text.chars().count())}),
        json!({"type": "plan", "planId": id("plan"), "entries": plan_entries("pending")}),
        json!({"type": "plan", "planId": id("plan"), "entries": plan_entries("completed")}),
    ];
    for update in script {
        if !step(update) {
            return "cancelled";
        }
    }
    let mut stamp_line = None;
    if session.tools.iter().any(|tool| tool == "echo_stamp") {
        let answer = provider.call(
            "tool/call",
            json!({"sessionId": session_id, "callId": id("stamp"), "tool": "echo_stamp", "arguments": {"text": text}}),
        );
        let content = answer
            .as_ref()
            .and_then(|a| a.get("result"))
            .and_then(|r| r.get("text"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        stamp_line = Some(match content {
            Some(content) => format!("\necho_stamp: {content}"),
            None => "\necho_stamp: <failed>".to_owned(),
        });
    }
    let first = format!("echo: {text}");
    let rest = format!(
        "\nscripted by bb-ref-provider{}",
        stamp_line.unwrap_or_default()
    );
    let full = format!("{first}{rest}");
    let tail = [
        json!({"type": "agent_message_chunk", "messageId": id("message"), "text": first}),
        json!({"type": "agent_message_chunk", "messageId": id("message"), "text": rest}),
        json!({"type": "agent_message_end", "messageId": id("message"), "text": full}),
        json!({"type": "usage", "inputTokens": text.chars().count(), "outputTokens": full.chars().count()}),
    ];
    for update in tail {
        if !step(update) {
            return "cancelled";
        }
    }
    "end_turn"
}

fn plan_entries(status: &str) -> Value {
    json!([
        {"step": "Read the prompt", "status": "completed"},
        {"step": "Run the script", "status": if status == "completed" { "completed" } else { "inProgress" }},
        {"step": "Answer", "status": status},
    ])
}

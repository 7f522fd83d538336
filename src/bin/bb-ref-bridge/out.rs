//! The bridge's stdout: protocol traffic only, one JSON message per line.
//!
//! Every writer (the stdin loop, provider pumps, tool-call workers) goes through one lock so
//! lines never interleave; each line is flushed at once because the runtime frames on `\n`
//! and a buffered tail would look like a stalled bridge.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{LazyLock, Mutex};

static STDOUT: LazyLock<Mutex<std::io::Stdout>> = LazyLock::new(|| Mutex::new(std::io::stdout()));

/// Bridge→runtime requests waiting for the runtime's response, by their string id.
static PENDING: LazyLock<Mutex<HashMap<String, Sender<Value>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

static NEXT_TOOL_REQUEST: AtomicU64 = AtomicU64::new(0);

/// A JSON-RPC error the bridge answers with.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

pub const INVALID_PARAMS: i64 = -32602;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const BRIDGE_ERROR: i64 = -32000;
pub const NO_ACTIVE_TURN: i64 = -32001;
pub const FORK_CHECKPOINT_UNSUPPORTED: i64 = -32003;
/// `TURN_BUSY` in one bb release, `MISSING_EXECUTABLE` in the protocol document.
pub const MISSING_EXECUTABLE: i64 = -32004;
/// The same code under its other name, for "a turn is already running".
pub const TURN_BUSY: i64 = MISSING_EXECUTABLE;

/// Writes one line to stdout.
pub fn write(message: &Value) {
    write_raw(&format!("{message}\n"));
}

/// Writes raw text to stdout (used for messages and, in the `stray-stdout` break mode, the
/// deliberate stray text).
pub fn write_raw(text: &str) {
    let mut out = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
    // A broken stdout means the runtime is gone; the stdin loop will see EOF and shut down.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

pub fn respond(id: &Value, result: Value) {
    write(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

pub fn respond_error(id: &Value, error: &RpcError) {
    let mut body = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    write(&json!({"jsonrpc": "2.0", "id": id, "error": body}));
}

pub fn notify(method: &str, params: Value) {
    write(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
}

/// Sends one `thread/delta` batch. Empty batches are not sent.
pub fn deltas(thread_id: &str, deltas: Vec<Value>) {
    if deltas.is_empty() {
        return;
    }
    notify(
        "thread/delta",
        json!({"threadId": thread_id, "deltas": deltas}),
    );
}

/// Sends a bridge→runtime `item/tool/call` request with id `echo-req-<n>` (the id form bb's
/// echo bridge uses, so replay maps it back) and returns the channel its response arrives on.
pub fn call_tool(params: Value) -> (String, Receiver<Value>) {
    let n = NEXT_TOOL_REQUEST.fetch_add(1, Ordering::SeqCst) + 1;
    let id = format!("echo-req-{n}");
    let (tx, rx) = channel();
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), tx);
    write(&json!({"jsonrpc": "2.0", "id": id, "method": "item/tool/call", "params": params}));
    (id, rx)
}

/// Forgets a request whose answer nobody waits for any more.
pub fn forget(id: &str) {
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
}

/// Routes a response line to the request it answers. Returns false when the id matches
/// none of our pending requests (a stray response).
pub fn deliver_response(message: &Value) -> bool {
    let Some(id) = message.get("id").and_then(Value::as_str) else {
        return false;
    };
    let waiter = PENDING.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    match waiter {
        Some(tx) => {
            let _ = tx.send(message.clone());
            true
        }
        None => false,
    }
}

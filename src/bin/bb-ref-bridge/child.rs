//! One provider child process per thread, spoken to in the json-rpc dialect.
//!
//! The child is spawned with the bridge's environment plus `BRIDGEWIRE_RECORD_THREAD=<threadId>`
//! so that a recording wrapper given as the provider command knows which thread's lanes it
//! is recording. Nothing else is removed: a wrapper also needs the `BRIDGEWIRE_*` variables
//! the bridge itself received.
//!
//! A pump thread reads the child's stdout. Responses to requests made with [`ProviderChild::call`]
//! are routed to their waiter; everything else (notifications, provider→bridge requests,
//! responses to fire-and-forget requests such as `prompt`) goes to the owner's handler.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

/// Every child still alive, so stdin EOF and SIGTERM can reap them all.
static LIVE: LazyLock<Mutex<Vec<Weak<ProviderChild>>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// What the pump hands to the owner.
pub enum Incoming {
    /// A line with `method` (a notification or a provider→bridge request).
    Message(Value),
    /// A response that no [`ProviderChild::call`] waits for (e.g. the answer to `prompt`).
    Response(Value),
    /// The child's stdout closed: it exited or was killed.
    Closed,
}

pub struct ProviderChild {
    pub pid: u32,
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    waiters: Mutex<HashMap<u64, Sender<Value>>>,
    next_id: AtomicU64,
}

/// How the provider is launched: `BB_REF_PROVIDER_COMMAND` (default: `bb-ref-provider` next
/// to this executable) plus the JSON string array in `BB_REF_PROVIDER_ARGS`.
pub fn provider_command() -> Result<(String, Vec<String>), String> {
    let program = match std::env::var("BB_REF_PROVIDER_COMMAND") {
        Ok(command) if !command.trim().is_empty() => command,
        _ => {
            let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
            let sibling = exe.with_file_name("bb-ref-provider");
            sibling.to_string_lossy().into_owned()
        }
    };
    let args = match std::env::var("BB_REF_PROVIDER_ARGS") {
        Ok(raw) if !raw.trim().is_empty() => serde_json::from_str::<Vec<String>>(&raw)
            .map_err(|e| format!("BB_REF_PROVIDER_ARGS must be a JSON array of strings: {e}"))?,
        _ => Vec::new(),
    };
    Ok((program, args))
}

impl ProviderChild {
    /// Spawns the provider for `thread_id` and starts its pump. `handler` runs on the pump
    /// thread for every [`Incoming`] item, in wire order.
    pub fn spawn(
        thread_id: &str,
        handler: impl Fn(Incoming) + Send + 'static,
    ) -> std::io::Result<Arc<Self>> {
        let (program, args) = provider_command().map_err(std::io::Error::other)?;
        let mut child = Command::new(&program)
            .args(&args)
            .env("BRIDGEWIRE_RECORD_THREAD", thread_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Provider diagnostics go straight to our stderr; stdout stays protocol-only.
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let this = Arc::new(Self {
            pid: child.id(),
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            waiters: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&this));
        let weak = Arc::downgrade(&this);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(message) = serde_json::from_str::<Value>(line.trim_end_matches('\r')) else {
                    eprintln!("[bb-ref-bridge] ignoring non-JSON provider line");
                    continue;
                };
                if message.get("method").is_some() {
                    handler(Incoming::Message(message));
                    continue;
                }
                let waiter = message.get("id").and_then(Value::as_u64).and_then(|id| {
                    weak.upgrade().and_then(|child| {
                        child
                            .waiters
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&id)
                    })
                });
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(message);
                    }
                    None => handler(Incoming::Response(message)),
                }
            }
            handler(Incoming::Closed);
        });
        Ok(this)
    }

    fn write(&self, message: &Value) -> bool {
        let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        match stdin.as_mut() {
            Some(pipe) => pipe
                .write_all(format!("{message}\n").as_bytes())
                .and_then(|()| pipe.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Sends a request whose response the pump hands to the owner as
    /// [`Incoming::Response`]; returns its id, or `None` when the child's stdin is gone.
    pub fn send_request(&self, method: &str, params: Value) -> Option<u64> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .then_some(id)
    }

    /// Answers a provider→bridge request.
    pub fn respond(&self, id: &Value, outcome: Result<Value, String>) {
        let message = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(message) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}})
            }
        };
        self.write(&message);
    }

    /// Sends a request and waits (bounded) for its result; a JSON-RPC error, a timeout or a
    /// dead child become `Err(message)`.
    pub fn call(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let (tx, rx) = channel();
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let sent =
            self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = if sent {
            rx.recv_timeout(timeout).ok()
        } else {
            None
        };
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        let Some(answer) = answer else {
            return Err(format!("provider did not answer {method}"));
        };
        if let Some(error) = answer.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("provider error");
            return Err(format!("provider rejected {method}: {message}"));
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Closes the child's stdin (the provider exits on EOF).
    fn close_stdin(&self) {
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Waits until `deadline` for the child to exit, then kills and reaps it.
    fn reap(&self, deadline: Instant) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => break,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the child: EOF first, `grace` to exit on its own, then SIGKILL.
    pub fn shutdown(&self, grace: Duration) {
        self.close_stdin();
        self.reap(Instant::now() + grace);
    }
}

/// Stops every live child with one shared grace period (stdin EOF and SIGTERM paths).
pub fn shutdown_all(grace: Duration) {
    let children: Vec<Arc<ProviderChild>> = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .filter_map(|weak| weak.upgrade())
        .collect();
    for child in &children {
        child.close_stdin();
    }
    let deadline = Instant::now() + grace;
    for child in &children {
        child.reap(deadline);
    }
}

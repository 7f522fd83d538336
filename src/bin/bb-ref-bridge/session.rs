//! One hosted thread: its provider child, its turn state, and the translation of the
//! provider's `session/update` notifications into `thread/delta` batches.
//!
//! Locking discipline: every delta for a thread is written while holding that thread's
//! state lock, and `thread/stop` flips `stopped` under the same lock. So once a stop has
//! taken the lock, nothing a provider pump still reads can reach the wire after the stop's
//! settling deltas — "after `thread/stop` the bridge holds nothing for the thread".
//! Lock order is always thread state → stdout, never the reverse.

use crate::breaks::{self, Break};
use crate::child::{Incoming, ProviderChild};
use crate::out;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// The glyph names this bridge declares for its plugin id `bb-ref`. The conformance fixture
/// lists them as `icons: {pluginId: "bb-ref", names: ICON_NAMES}`.
pub const ICON_NAMES: &[&str] = &["terminal", "file", "search", "agent", "plan", "message"];
/// The plugin id the glyphs are namespaced under.
pub const ICON_PLUGIN: &str = "bb-ref";
/// A glyph name deliberately missing from [`ICON_NAMES`] (break mode `undeclared-icon`).
pub const UNDECLARED_ICON: &str = "sparkles";

/// Context window the scripted model reports.
const CONTEXT_WINDOW: u64 = 8192;

/// Set once the first ordinary turn of this process finished (break `no-turn-completed`).
static FIRST_TURN_DONE: AtomicBool = AtomicBool::new(false);

/// Token counts in bb's breakdown shape.
#[derive(Clone, Copy, Default)]
struct Tokens {
    input: u64,
    output: u64,
}

impl Tokens {
    fn to_json(self) -> Value {
        json!({
            "inputTokens": self.input,
            "cachedInputTokens": 0,
            "outputTokens": self.output,
            "reasoningOutputTokens": 0,
            "totalTokens": self.input + self.output,
        })
    }
}

/// Something the provider opened and has not settled yet, by provider item id.
enum Open {
    Command {
        command: String,
        cwd: String,
    },
    Delegation {
        child_ref: String,
        label: String,
    },
    Message {
        key: Value,
    },
    Plan {
        steps: Value,
    },
    Tool {
        tool: String,
        args: Value,
        presentation: Value,
    },
}

/// The turn in flight on a thread.
pub struct Turn {
    client_request_id: Option<String>,
    /// Prompt text not yet sent to the provider (break `threads-serialized` defers it).
    deferred: Option<String>,
    /// Whether a `turn.open` went out for this turn.
    opened: bool,
    /// The id of the outstanding `prompt` request to the provider.
    prompt_id: Option<u64>,
    /// Steers accepted while the turn runs, sent as follow-up prompts in the same turn
    /// (`steerMode: "queue"`).
    steers: VecDeque<String>,
    open: Vec<(String, Open)>,
    /// Break `delta-before-open`: a command's `item.open`, held until its first output.
    held_open: Option<Value>,
}

pub struct State {
    pub provider_thread_id: String,
    pub cwd: String,
    pub dynamic_tools: Vec<Value>,
    /// Set by `thread/stop`: from then on nothing more is written for this thread.
    pub stopped: bool,
    /// The provider child exited on its own.
    pub dead: bool,
    pub turn: Option<Turn>,
    total: Tokens,
}

pub struct ThreadHandle {
    pub thread_id: String,
    child: OnceLock<Arc<ProviderChild>>,
    state: Mutex<State>,
}

fn key(id: &str) -> Value {
    json!({"providerItemId": id})
}

/// A presentation with a namespaced glyph.
fn presentation(icon: &str, pending: &str, completed: &str) -> Value {
    // Only declared names may reach the wire, except the one the break mode plants.
    debug_assert!(ICON_NAMES.contains(&icon) || icon == UNDECLARED_ICON);
    json!({
        "label": {"pending": pending, "completed": completed},
        "icon": {"glyph": format!("{ICON_PLUGIN}/{icon}")},
    })
}

/// The client request id as `input.accepted` echoes it: verbatim, unless broken on purpose (then
/// only the process's first acceptance, so the later zero-work turn still settles).
fn echoed_request_id(id: &str) -> String {
    static BROKEN_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match id.strip_prefix("creq_") {
        Some(rest)
            if breaks::on(Break::MalformedClientRequestId)
                && !BROKEN_ONCE.swap(true, std::sync::atomic::Ordering::SeqCst) =>
        {
            format!("req_{rest}")
        }
        _ => id.to_string(),
    }
}

/// The provider's plan entries in bb's plan-step vocabulary: bb's statuses are
/// pending/active/completed/failed, the provider says `inProgress` for the running step.
fn plan_steps(entries: Option<&Value>) -> Value {
    let steps = entries
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|entry| {
                    let mut step = json!({"step": str_of(entry, "step")});
                    let status = match str_of(entry, "status") {
                        "inProgress" | "in_progress" | "active" => Some("active"),
                        s @ ("pending" | "completed" | "failed") => Some(s),
                        _ => None, // unknown to bb: the step is shown without a status
                    };
                    if let Some(status) = status {
                        step["status"] = json!(status);
                    }
                    step
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(steps)
}

fn str_of<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}

impl ThreadHandle {
    /// Spawns the provider child for `thread_id`; the handle is not registered anywhere yet.
    pub fn spawn(
        thread_id: &str,
        cwd: &str,
        dynamic_tools: Vec<Value>,
    ) -> std::io::Result<Arc<Self>> {
        let handle = Arc::new(Self {
            thread_id: thread_id.to_owned(),
            child: OnceLock::new(),
            state: Mutex::new(State {
                provider_thread_id: String::new(),
                cwd: cwd.to_owned(),
                dynamic_tools,
                stopped: false,
                dead: false,
                turn: None,
                total: Tokens::default(),
            }),
        });
        let pump_handle = Arc::clone(&handle);
        let child =
            ProviderChild::spawn(thread_id, move |incoming| pump_handle.on_incoming(incoming))?;
        let _ = handle.child.set(child);
        Ok(handle)
    }

    pub fn child(&self) -> &Arc<ProviderChild> {
        self.child.get().expect("child is set right after spawn")
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Dynamic tool names, for the provider's session request.
    pub fn tool_names(&self) -> Vec<String> {
        self.lock()
            .dynamic_tools
            .iter()
            .filter_map(|tool| tool.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect()
    }

    /// Begins a turn: `input.accepted` (when there is a client request id) and the prompt.
    /// With `defer`, the prompt waits for [`ThreadHandle::dispatch_deferred`].
    pub fn start_turn(&self, client_request_id: Option<String>, text: String, defer: bool) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        if let Some(id) = &client_request_id {
            out::deltas(
                &self.thread_id,
                vec![json!({"kind": "input.accepted", "clientRequestId": echoed_request_id(id)})],
            );
        }
        let mut turn = Turn {
            client_request_id,
            deferred: None,
            opened: false,
            prompt_id: None,
            steers: VecDeque::new(),
            open: Vec::new(),
            held_open: None,
        };
        if defer {
            turn.deferred = Some(text);
            st.turn = Some(turn);
            return;
        }
        st.turn = Some(turn);
        self.send_prompt(&mut st, &text);
    }

    /// Sends a deferred prompt, if this thread holds one. Returns whether it did.
    pub fn dispatch_deferred(&self) -> bool {
        let mut st = self.lock();
        let Some(text) = st.turn.as_mut().and_then(|turn| turn.deferred.take()) else {
            return false;
        };
        self.send_prompt(&mut st, &text);
        true
    }

    /// Whether a turn is running (a deferred one does not count: it has not started).
    pub fn has_running_turn(&self) -> bool {
        self.lock()
            .turn
            .as_ref()
            .is_some_and(|turn| turn.deferred.is_none())
    }

    fn send_prompt(&self, st: &mut State, text: &str) {
        let params = json!({"sessionId": st.provider_thread_id, "text": text});
        let id = self.child().send_request("prompt", params);
        match id {
            Some(id) => {
                if let Some(turn) = st.turn.as_mut() {
                    turn.prompt_id = Some(id);
                }
            }
            None => self.fail_turn(st, "the provider child is gone"),
        }
    }

    /// Accepts a steer into the running turn (`steerMode: "queue"`): the input is accepted
    /// into the open turn now and runs as a follow-up prompt when the current one ends.
    pub fn steer(&self, client_request_id: &str, text: String) -> Result<(), out::RpcError> {
        let mut st = self.lock();
        let stopped = st.stopped;
        let Some(turn) = st.turn.as_mut().filter(|_| !stopped) else {
            return Err(out::RpcError::new(out::NO_ACTIVE_TURN, "No active turn to steer").with_data(json!({
                "recovery": {"kind": "staleTurn", "message": "The turn this steer targeted has ended.", "retryable": false}
            })));
        };
        turn.steers.push_back(text);
        out::deltas(
            &self.thread_id,
            vec![
                json!({"kind": "input.accepted", "clientRequestId": echoed_request_id(client_request_id)}),
            ],
        );
        Ok(())
    }

    fn on_incoming(&self, incoming: Incoming) {
        match incoming {
            Incoming::Message(message) => match message.get("method").and_then(Value::as_str) {
                Some("session/update") if message.get("id").is_none() => {
                    let update = message
                        .get("params")
                        .and_then(|p| p.get("update"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    self.on_update(&update);
                }
                Some("tool/call") if message.get("id").is_some() => self.on_tool_call(message),
                Some(other) => {
                    if let Some(id) = message.get("id") {
                        self.child()
                            .respond(id, Err(format!("unsupported request {other}")));
                    }
                }
                None => {}
            },
            Incoming::Response(response) => self.on_prompt_response(&response),
            Incoming::Closed => {
                let mut st = self.lock();
                st.dead = true;
                if !st.stopped && st.turn.is_some() {
                    eprintln!(
                        "[bb-ref-bridge] provider child of {} exited mid-turn",
                        self.thread_id
                    );
                    self.fail_turn(&mut st, "the provider child exited");
                }
            }
        }
    }

    /// Settles the turn as failed: open items close as failed, then the boundary.
    fn fail_turn(&self, st: &mut State, message: &str) {
        let Some(mut turn) = st.turn.take() else {
            return;
        };
        let mut deltas = settle_open(&mut turn, "failed");
        deltas.push(json!({"kind": "turn.boundary", "status": "failed", "error": {"message": message}, "claimIfIdle": true}));
        out::deltas(&self.thread_id, deltas);
    }

    fn on_prompt_response(&self, response: &Value) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        let matches = st.turn.as_ref().is_some_and(|turn| {
            turn.prompt_id.is_some() && turn.prompt_id == response.get("id").and_then(Value::as_u64)
        });
        if !matches {
            return;
        }
        if let Some(error) = response.get("error") {
            let message = str_of(error, "message").to_owned();
            self.fail_turn(&mut st, &message);
            drop(st);
            crate::dispatch_deferred_turns();
            return;
        }
        let next_steer = st.turn.as_mut().and_then(|turn| turn.steers.pop_front());
        if let Some(text) = next_steer {
            self.send_prompt(&mut st, &text);
            return;
        }
        let Some(mut turn) = st.turn.take() else {
            return;
        };
        let mut deltas = settle_open(&mut turn, "completed");
        if !turn.opened {
            // A zero-work prompt: the provider took it and did nothing. `claimIfIdle` makes
            // the assembler open a turn for the queued input and complete it at once, so the
            // thread does not hang (rule `turn/settles-without-activity`).
            if !breaks::on(Break::ZeroWorkHangs) {
                if turn.client_request_id.is_some() {
                    deltas.push(json!({"kind": "turn.boundary", "status": "completed", "claimIfIdle": true}));
                } else {
                    deltas.push(json!({"kind": "turn.open"}));
                    deltas.push(json!({"kind": "turn.boundary", "status": "completed"}));
                }
            }
        } else if breaks::on(Break::NoTurnCompleted)
            && !FIRST_TURN_DONE.swap(true, Ordering::SeqCst)
        {
            // Deliberately lose the terminal boundary of the process's first ordinary turn.
        } else {
            FIRST_TURN_DONE.store(true, Ordering::SeqCst);
            deltas.push(json!({"kind": "turn.boundary", "status": "completed"}));
        }
        out::deltas(&self.thread_id, deltas);
        drop(st);
        crate::dispatch_deferred_turns();
    }

    fn on_update(&self, update: &Value) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        let batches = translate(&mut st, update);
        for batch in batches {
            out::deltas(&self.thread_id, batch);
        }
        if breaks::on(Break::CrashMidTurn) && str_of(update, "type") == "command_output" {
            // A turn is open and a command item has streamed output: die right here.
            eprintln!("[bb-ref-bridge] break crash-mid-turn: exiting with status 7");
            std::process::exit(7);
        }
    }

    /// A provider→bridge `tool/call`: open the bb tool item, ask the runtime through
    /// `item/tool/call`, settle the item and answer the provider. Runs on its own thread so
    /// the pump keeps reading (a `cancel` answer must get through while we wait).
    fn on_tool_call(&self, request: Value) {
        let Some(handle) = crate::find_thread(&self.thread_id) else {
            return;
        };
        std::thread::spawn(move || handle.run_tool_call(&request));
    }

    fn run_tool_call(&self, request: &Value) {
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let call_id = str_of(&params, "callId").to_owned();
        let tool = str_of(&params, "tool").to_owned();
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let (request_id, rx) = {
            let mut st = self.lock();
            let definition = st
                .dynamic_tools
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(tool.as_str()))
                .cloned();
            let (Some(definition), false, Some(turn)) = (definition, st.stopped, st.turn.as_mut())
            else {
                drop(st);
                self.child()
                    .respond(&id, Err(format!("no dynamic tool {tool} on this thread")));
                return;
            };
            // The server resolved the tool's presentation; stamp it as given. A definition
            // without one presents generically (a bb tool row is exempt from the glyph rule).
            let presentation = definition
                .get("presentation")
                .cloned()
                .unwrap_or_else(|| json!({"label": {"pending": format!("Calling {tool}"), "completed": format!("Called {tool}")}}));
            let item = json!({"type": "tool", "tool": tool, "server": "bb", "args": args});
            turn.open.push((
                call_id.clone(),
                Open::Tool {
                    tool: tool.clone(),
                    args: args.clone(),
                    presentation: presentation.clone(),
                },
            ));
            out::deltas(
                &self.thread_id,
                vec![
                    json!({"kind": "item.open", "key": key(&call_id), "item": item, "presentation": presentation}),
                ],
            );
            out::call_tool(json!({
                "providerThreadId": st.provider_thread_id,
                "threadId": self.thread_id,
                "turnId": null,
                "callId": call_id,
                "tool": tool,
                "arguments": args,
                "providerNativeIds": true,
            }))
        };
        // Wait for the runtime, noticing a stop of the thread meanwhile (then the answer
        // is ignored: the stop already settled the item).
        let answer = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(answer) => break Some(answer),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !self.lock().stopped => {}
                Err(_) => break None,
            }
        };
        out::forget(&request_id);
        let Some(answer) = answer else { return };
        let outcome = decode_tool_answer(&answer);
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        let Some(turn) = st.turn.as_mut() else { return };
        let Some(position) = turn.open.iter().position(|(k, _)| *k == call_id) else {
            return;
        };
        let (
            _,
            Open::Tool {
                tool,
                args,
                presentation,
            },
        ) = turn.open.remove(position)
        else {
            return;
        };
        let close = match &outcome {
            Ok(text) => json!({
                "kind": "item.close", "key": key(&call_id), "status": "completed",
                "item": {"type": "tool", "tool": tool, "server": "bb", "args": args, "result": text},
                "presentation": presentation,
            }),
            Err(error) => json!({
                "kind": "item.close", "key": key(&call_id), "status": "failed",
                "item": {"type": "tool", "tool": tool, "server": "bb", "args": args, "error": error},
                "presentation": presentation,
            }),
        };
        out::deltas(&self.thread_id, vec![close]);
        self.child()
            .respond(&id, outcome.map(|text| json!({"text": text})));
    }

    /// `thread/stop` (both intents) and every other teardown. Writes the settling deltas,
    /// releases the provider child, and calls `respond` — after the deltas, unless the
    /// `stop-before-settle` break is on.
    pub fn stop(&self, interrupt_or_release: &str, respond: impl FnOnce()) {
        let (turn, session_id) = {
            let mut st = self.lock();
            if st.stopped {
                drop(st);
                respond();
                return;
            }
            st.stopped = true;
            (st.turn.take(), st.provider_thread_id.clone())
        };
        let mut deltas = Vec::new();
        // Break `release-interrupts`: written after the settling deltas, before the answer
        // (the kit looks for an interruption from the stop request on), so the fault is the
        // fabrication alone, not also traffic after the answer.
        let mut fabricated = Vec::new();
        if let Some(mut turn) = turn {
            // Ask the provider to stop cleanly (bounded); the session on its side stays
            // resumable. A provider that does not answer is killed below anyway.
            if turn.prompt_id.is_some() && !self.lock().dead {
                let _ = self.child().call(
                    "cancel",
                    json!({"sessionId": session_id}),
                    Duration::from_secs(2),
                );
            }
            deltas = settle_open(&mut turn, "interrupted");
            // Without a `turn.open` the accepted input is still queued in the assembler:
            // `claimIfIdle` opens a turn for it so it still reaches a terminal state.
            let status =
                if interrupt_or_release == "interrupt" && breaks::on(Break::InterruptCompletes) {
                    "completed"
                } else {
                    "interrupted"
                };
            deltas.push(json!({"kind": "turn.boundary", "status": status, "claimIfIdle": true}));
        } else if interrupt_or_release == "release" && breaks::on(Break::ReleaseInterrupts) {
            // Fabricate an interruption of an idle session.
            fabricated.push(json!({"kind": "turn.open"}));
            fabricated.push(json!({"kind": "turn.boundary", "status": "interrupted"}));
        }
        if breaks::on(Break::StopBeforeSettle) {
            respond();
            out::deltas(&self.thread_id, deltas);
            self.child().shutdown(Duration::from_millis(500));
        } else {
            out::deltas(&self.thread_id, deltas);
            out::deltas(&self.thread_id, fabricated);
            self.child().shutdown(Duration::from_millis(500));
            respond();
        }
        if breaks::on(Break::DeltaAfterStop) {
            out::deltas(
                &self.thread_id,
                vec![
                    json!({"kind": "provider.warning", "summary": "a late notice after the stop"}),
                ],
            );
        }
    }
}

/// Maps the runtime's `item/tool/call` response to the tool's text or error.
fn decode_tool_answer(answer: &Value) -> Result<String, String> {
    if let Some(error) = answer.get("error") {
        return Err(str_of(error, "message").to_owned());
    }
    let result = answer.get("result").cloned().unwrap_or(Value::Null);
    let text = result
        .get("contentItems")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("inputText"))
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    if result.get("success").and_then(Value::as_bool) == Some(true) {
        Ok(text)
    } else if text.is_empty() {
        Err("the tool call failed".to_owned())
    } else {
        Err(text)
    }
}

/// Closes everything the provider left open, newest first, with `status`.
fn settle_open(turn: &mut Turn, status: &str) -> Vec<Value> {
    let mut deltas = Vec::new();
    if let Some(open) = turn.held_open.take() {
        deltas.push(open);
    }
    while let Some((id, open)) = turn.open.pop() {
        match open {
            Open::Command { command, cwd } => deltas.push(json!({
                "kind": "item.close", "key": key(&id), "status": status,
                "item": {"type": "command", "command": command, "cwd": cwd},
                "presentation": presentation("terminal", "Running command", "Ran command"),
            })),
            Open::Delegation { child_ref, label } => {
                // The vouched child turn settles before the delegation that owns it.
                deltas.push(json!({"kind": "turn.boundary", "status": status, "providerTurnId": format!("{id}-turn")}));
                deltas.push(json!({
                    "kind": "item.close", "key": key(&id), "status": status,
                    "item": {"type": "delegation", "childRef": child_ref, "label": label, "background": false},
                    "presentation": presentation("agent", "Running subagent", "Subagent finished"),
                }));
            }
            Open::Message { key } => {
                deltas.push(json!({"kind": "item.textClose", "key": key, "channel": "agentMessage"}));
            }
            Open::Plan { steps } => deltas.push(json!({
                "kind": "item.close", "key": key(&id), "status": status,
                "item": {"type": "planSteps", "steps": steps},
                "presentation": presentation("plan", "Planning", "Planned"),
            })),
            Open::Tool { tool, args, presentation } => deltas.push(json!({
                "kind": "item.close", "key": key(&id), "status": status,
                "item": {"type": "tool", "tool": tool, "server": "bb", "args": args, "error": status},
                "presentation": presentation,
            })),
        }
    }
    deltas
}

fn resolve_path(cwd: &str, path: &str) -> String {
    if path == "." || path.is_empty() {
        cwd.to_owned()
    } else if path.starts_with('/') || cwd.is_empty() {
        path.to_owned()
    } else {
        format!("{}/{path}", cwd.trim_end_matches('/'))
    }
}

/// Translates one provider `session/update` into delta batches (usually one).
fn translate(st: &mut State, update: &Value) -> Vec<Vec<Value>> {
    // Split borrows: the turn is mutated while the usage totals are summed.
    let State {
        cwd, turn, total, ..
    } = st;
    let cwd = cwd.clone();
    let Some(turn) = turn.as_mut() else {
        eprintln!("[bb-ref-bridge] ignoring a provider update outside a turn");
        return Vec::new();
    };
    let mut deltas = Vec::new();
    let kind = str_of(update, "type");
    // Item updates imply the provider took the prompt; open the turn if it did not say so.
    if !turn.opened {
        turn.opened = true;
        static PREAMBLE_SENT: std::sync::atomic::AtomicBool =
            std::sync::atomic::AtomicBool::new(false);
        if breaks::on(Break::DeltaOutsideTurn) && !PREAMBLE_SENT.swap(true, Ordering::SeqCst) {
            // Text before the turn opens: bb's assembler drops it without a trace.
            deltas.push(json!({"kind": "item.textDelta", "key": {"channel": "preamble"}, "channel": "agentMessage", "text": "thinking… "}));
        }
        deltas.push(json!({"kind": "turn.open"}));
    }
    let id = str_of(update, "toolCallId").to_owned();
    match kind {
        "turn_started" => {}
        "command_started" => {
            let command = str_of(update, "command").to_owned();
            let cwd = resolve_path(&cwd, str_of(update, "cwd"));
            let open = json!({
                "kind": "item.open", "key": key(&id),
                "item": {"type": "command", "command": command, "cwd": cwd},
                "presentation": presentation("terminal", "Running command", "Ran command"),
            });
            if breaks::on(Break::DeltaBeforeOpen) {
                turn.held_open = Some(open);
            } else {
                deltas.push(open);
            }
            turn.open.push((id, Open::Command { command, cwd }));
        }
        "command_output" => {
            deltas.push(json!({"kind": "item.outputDelta", "key": key(&id), "channel": "command", "text": str_of(update, "text")}));
            // Break `delta-before-open`: the open follows the output it should precede.
            deltas.extend(turn.held_open.take());
        }
        "command_finished" => {
            deltas.extend(turn.held_open.take());
            if let Some(position) = turn.open.iter().position(|(k, _)| *k == id) {
                let (_, open) = turn.open.remove(position);
                if let Open::Command { command, cwd } = open {
                    let exit_code = update.get("exitCode").and_then(Value::as_i64).unwrap_or(0);
                    let output = str_of(update, "output");
                    let duration = update
                        .get("durationMs")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    deltas.push(json!({
                        "kind": "item.close", "key": key(&id),
                        "status": if exit_code == 0 { "completed" } else { "failed" },
                        "exitCode": exit_code, "aggregatedOutput": output,
                        "item": {"type": "command", "command": command, "cwd": cwd, "aggregatedOutput": output, "exitCode": exit_code, "durationMs": duration},
                        "presentation": presentation("terminal", "Running command", "Ran command"),
                    }));
                }
            }
        }
        "file_read" => {
            let path = resolve_path(&cwd, str_of(update, "path"));
            let icon = if breaks::on(Break::UndeclaredIcon) {
                UNDECLARED_ICON
            } else {
                "file"
            };
            let presentation = presentation(icon, "Reading file", "Read file");
            let item = json!({"type": "fileRead", "path": path});
            deltas.push(json!({"kind": "item.open", "key": key(&id), "item": item, "presentation": presentation}));
            deltas.push(json!({"kind": "item.close", "key": key(&id), "status": "completed", "item": item, "presentation": presentation}));
        }
        "search" => {
            let mode = match str_of(update, "mode") {
                mode @ ("content" | "path" | "list") => mode,
                _ => "content",
            };
            let item = json!({"type": "search", "mode": mode, "query": str_of(update, "query"), "path": resolve_path(&cwd, str_of(update, "path"))});
            let presentation = presentation("search", "Searching", "Searched");
            deltas.push(json!({"kind": "item.open", "key": key(&id), "item": item, "presentation": presentation}));
            // Break `search-reclassified`: the search closes as a fileRead, a reclassification
            // bb's assembler settles twice under one item id (the host drops the second).
            let item = if breaks::on(Break::SearchReclassified) {
                json!({"type": "fileRead", "path": resolve_path(&cwd, str_of(update, "path"))})
            } else {
                item
            };
            deltas.push(json!({"kind": "item.close", "key": key(&id), "status": "completed", "item": item, "presentation": presentation}));
        }
        "subagent_started" => {
            // A foreground delegation with a vouched child turn keyed by the bridge itself.
            let child_ref = format!("{id}-child");
            let label = str_of(update, "label").to_owned();
            deltas.push(json!({
                "kind": "item.open", "key": key(&id),
                "item": {"type": "delegation", "childRef": child_ref, "label": label, "background": false},
                "presentation": presentation("agent", "Running subagent", "Subagent finished"),
            }));
            deltas.push(json!({"kind": "turn.open", "providerTurnId": format!("{id}-turn"), "parentRef": id}));
            turn.open.push((id, Open::Delegation { child_ref, label }));
        }
        "subagent_message" => {
            let child_turn = format!("{id}-turn");
            let message_key =
                json!({"providerItemId": str_of(update, "messageId"), "parentRef": id});
            let text = str_of(update, "text");
            deltas.push(json!({"kind": "item.open", "key": message_key, "item": {"type": "agentMessage", "text": ""}, "providerTurnId": child_turn}));
            deltas.push(json!({"kind": "item.textDelta", "key": message_key, "channel": "agentMessage", "text": text, "providerTurnId": child_turn}));
            deltas.push(json!({"kind": "item.textClose", "key": message_key, "channel": "agentMessage", "text": text, "providerTurnId": child_turn}));
        }
        "subagent_finished" => {
            if let Some(position) = turn.open.iter().position(|(k, _)| *k == id)
                && let (_, Open::Delegation { child_ref, label }) = turn.open.remove(position)
            {
                deltas.push(json!({"kind": "turn.boundary", "status": "completed", "providerTurnId": format!("{id}-turn")}));
                deltas.push(json!({
                    "kind": "item.close", "key": key(&id), "status": "completed",
                    "item": {"type": "delegation", "childRef": child_ref, "label": label, "background": false, "summary": str_of(update, "summary")},
                    "presentation": presentation("agent", "Running subagent", "Subagent finished"),
                }));
            }
        }
        "plan" => {
            let plan_id = str_of(update, "planId").to_owned();
            let steps = if breaks::on(Break::PlanStepInProgress) {
                update.get("entries").cloned().unwrap_or(json!([]))
            } else {
                plan_steps(update.get("entries"))
            };
            let presentation = presentation("plan", "Planning", "Planned");
            let item = json!({"type": "planSteps", "steps": steps});
            let is_open = turn.open.iter().any(|(k, _)| *k == plan_id);
            if !is_open {
                deltas.push(json!({"kind": "item.open", "key": key(&plan_id), "item": item, "presentation": presentation}));
                turn.open.push((
                    plan_id.clone(),
                    Open::Plan {
                        steps: steps.clone(),
                    },
                ));
            }
            let done = steps
                .as_array()
                .is_some_and(|s| s.iter().all(|step| str_of(step, "status") == "completed"));
            if !done {
                // Keep the latest snapshot so an interrupt closes the plan as it stood.
                for (k, open) in &mut turn.open {
                    if *k == plan_id {
                        *open = Open::Plan {
                            steps: steps.clone(),
                        };
                    }
                }
            } else {
                turn.open.retain(|(k, _)| *k != plan_id);
                deltas.push(json!({"kind": "item.close", "key": key(&plan_id), "status": "completed", "item": item, "presentation": presentation}));
            }
        }
        "agent_message_chunk" => {
            let message_id = str_of(update, "messageId").to_owned();
            let message_key = key(&message_id);
            if !turn.open.iter().any(|(k, _)| *k == message_id) {
                deltas.push(json!({
                    "kind": "item.open", "key": message_key, "item": {"type": "agentMessage", "text": ""},
                    "presentation": presentation("message", "Answering", "Answered"),
                }));
                turn.open.push((
                    message_id,
                    Open::Message {
                        key: message_key.clone(),
                    },
                ));
            }
            deltas.push(json!({"kind": "item.textDelta", "key": message_key, "channel": "agentMessage", "text": str_of(update, "text")}));
        }
        "agent_message_end" => {
            let message_id = str_of(update, "messageId").to_owned();
            turn.open.retain(|(k, _)| *k != message_id);
            let mut text = str_of(update, "text").to_owned();
            if breaks::on(Break::RewordFinalMessage) {
                text.push_str(" (reworded)");
            }
            deltas.push(json!({"kind": "item.textClose", "key": key(&message_id), "channel": "agentMessage", "text": text}));
        }
        "usage" => {
            let last = Tokens {
                input: update
                    .get("inputTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                output: update
                    .get("outputTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            };
            // This provider reports per turn, so the bridge sums `last` into `total`.
            total.input += last.input;
            total.output += last.output;
            let total = *total;
            deltas.push(json!({"kind": "usage", "total": total.to_json(), "last": last.to_json(), "modelContextWindow": CONTEXT_WINDOW}));
            deltas.push(json!({"kind": "contextWindow", "used": total.input + total.output, "size": CONTEXT_WINDOW, "estimated": true, "attach": "open"}));
            if breaks::on(Break::InvalidEvent) {
                // Token counts as strings: bb's runtime refuses the message whole. Its own
                // batch, so nothing else is lost.
                let bad = json!({"inputTokens": "1", "cachedInputTokens": 0, "outputTokens": 2, "reasoningOutputTokens": 0, "totalTokens": 3});
                return vec![
                    deltas,
                    vec![
                        json!({"kind": "usage", "total": bad, "last": bad, "modelContextWindow": CONTEXT_WINDOW}),
                    ],
                ];
            }
        }
        other => {
            eprintln!("[bb-ref-bridge] ignoring provider update type {other:?}");
        }
    }
    vec![deltas]
}

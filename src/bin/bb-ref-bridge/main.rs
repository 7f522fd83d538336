//! `bb-ref-bridge` — a reference bb provider bridge over a scripted provider child.
//!
//! It speaks the bb provider bridge protocol (version 2, `thread/delta` grammar v3) as
//! line-delimited JSON-RPC 2.0 on stdin/stdout and aims to pass every conformance rule of
//! the kit (reference §9, plus `commands/list-declared` from the protocol document). Its
//! behaviour is modelled on bb's echo-provider (reference §15), but every thread runs a real
//! provider child process (`bb-ref-provider`, json-rpc dialect of reference §6.11), so its
//! provider lanes can be recorded and replayed.
//!
//! # Usage
//!
//! `bb-ref-bridge [--break <mode>[,<mode>...]]...`
//!
//! | Environment | Meaning |
//! | --- | --- |
//! | `BB_REF_PROVIDER_COMMAND` | provider program (default: `bb-ref-provider` next to this executable) |
//! | `BB_REF_PROVIDER_ARGS` | extra provider arguments, a JSON array of strings |
//! | `BB_REF_BRIDGE_BREAK` | break modes, comma-separated (added to any `--break` flags) |
//!
//! Each provider child gets this process's environment plus `BRIDGEWIRE_RECORD_THREAD=<threadId>`
//! (so a recording wrapper such as `bridgewire record child -- <provider>` knows its thread
//! scope). The bridge runs no process-level provider probes, so no child ever runs without
//! that variable. Children are reaped on `thread/stop`, on stdin EOF (the bridge then exits 0
//! after a 2 s shared grace, killing stragglers) and on SIGTERM/SIGINT (same, exit 0).
//! Diagnostics go to stderr, prefixed `[bb-ref-bridge]`; stdout carries protocol traffic only.
//!
//! # Line handling (as echo-provider, reference §15.1)
//!
//! Non-JSON or non-object lines are ignored. A line without `method` is a response: it is
//! routed to our pending `item/tool/call` request with that id, or ignored. A `method`
//! without a string/number `id` is a notification and is ignored. An unknown method gets
//! `-32601 Method not found: <method>`; a known method whose params fail validation gets
//! `-32602 Invalid params for <method>` with the issues (`{code, path, message}`) in `data`.
//!
//! # Methods
//!
//! `initialize` (declares `grammarVersions: [3, 3]`, `sessionRestore`, `threadArchive`,
//! `fork: "tip"`, `approvalEnforcedBy: "runtime"`, `steerMode: "queue"`,
//! `skills: {configure: true}`, `commands: {list: true}`), `model/list`, `provider/health`,
//! `skills/configure`, `commands/list {cwd}` (a fixed catalog: `noop`, `hold`),
//! `thread/start`, `thread/resume`, `thread/fork` (tip only; a checkpoint fork gets `-32003`),
//! `thread/archive`, `thread/unarchive`, `turn/start`, `turn/steer`, `thread/stop`.
//!
//! Session constructions spawn the thread's provider child, send `initialize` and
//! `session/new` / `session/load` / `session/fork`, then write `thread/identity`, a
//! `thread/delta [session.reset]` and the result `{providerThreadId, sessionRestorable: true}`.
//! `thread/archive` marks the provider session archived (and releases a live child); a
//! `thread/resume` of it fails `-32000` with `error.data.recovery {kind: "sessionArchived",
//! message, retryable: true}` until `thread/unarchive`. `turn/steer` queues the input into
//! the running turn (accepted at once, run as a follow-up prompt in the same turn); with no
//! running turn it fails `-32001` with a `staleTurn` recovery hint. `thread/stop` with
//! `intent: "interrupt"` cancels the provider prompt (bounded), writes the closes of open
//! items and `turn.boundary {status: "interrupted"}`, kills the child, and only then answers;
//! `intent: "release"` on an idle thread writes nothing.
//!
//! # Turns
//!
//! Provider `session/update`s become `thread/delta` batches: `input.accepted`, `turn.open`,
//! a `command` item (open / `item.outputDelta` / close), `fileRead`, `search`, a foreground
//! `delegation` with a vouched child turn and child agent message, `planSteps`, the optional
//! bb tool call (`item/tool/call` with id `echo-req-<n>` when `dynamicTools` has
//! `echo_stamp`), the agent message (`item.open` + 2 × `item.textDelta` + `item.textClose`),
//! `usage`, `contextWindow`, and `turn.boundary {status: "completed"}` when the provider
//! answers the prompt. A zero-work prompt (`/noop`) yields `input.accepted` +
//! `turn.boundary {status: "completed", claimIfIdle: true}`. A prompt containing `/hold` opens
//! a turn and holds it until interrupted.
//!
//! Glyphs are namespaced `bb-ref/<name>` with the declared names
//! `terminal, file, search, agent, plan, message`; the conformance fixture lists
//! `icons: {pluginId: "bb-ref", names: ["terminal", "file", "search", "agent", "plan", "message"]}`.
//!
//! # Break modes
//!
//! Each mode adds exactly one flaw. "Skipped" below is the kit's own cascade (§9.5/§9.6),
//! not a second flaw.
//!
//! | Mode | Rule(s) it makes fail | How |
//! | --- | --- | --- |
//! | `drop-unknown-method` | `rpc/unknown-method` (then `rpc/non-json-ignored` and `rpc/response-not-request` are skipped: no aliveness probe) | unknown methods get no answer |
//! | `drop-invalid-params` | `rpc/invalid-params` | `-32602` answers are never written |
//! | `crash-on-non-json` | `rpc/non-json-ignored`; every later rule that needs an answer (`rpc/response-not-request`, `handshake/initialize`, `session/start-identity`) is skipped naming it (under `--kit-only` each fails, as bb's kit fails them), the other lifecycle rules after the start | exits with status 3 on a non-JSON line |
//! | `error-on-response` | `rpc/response-not-request` | a response matching no pending request is answered with error `-32600` under its id |
//! | `no-grammar-versions` | `handshake/initialize` (capabilities then unknown, so `skills/configure-declared` does not run) | capabilities omit `grammarVersions` (default `[2, 2]` misses 3) |
//! | `wrong-protocol-version` | `handshake/initialize` (as above) | answers `protocolVersion: 1` |
//! | `skills-undeclared-accepted` | `skills/configure-declared` | no `skills` capability, yet `skills/configure` answers `{}` |
//! | `commands-declared-refused` | `commands/list-declared` | declares `commands: {list: true}`, yet `commands/list` answers `-32601` |
//! | `start-no-identity` | `session/start-identity` (later lifecycle rules skipped) | the `thread/start` result lacks `providerThreadId` |
//! | `no-turn-completed` | `turn/lifecycle` | the process's first ordinary turn never gets its final `turn.boundary` (later turns do, so later rules still see settled turns) |
//! | `invalid-event` | `events/schema-valid` | after every `usage`, a separate batch with one more `usage` whose token counts are strings: bb's runtime refuses that `thread/delta` message whole |
//! | `plan-step-in-progress` | `events/schema-valid` | plan steps go out with the provider's own `inProgress` status instead of bb's `active` (bb's plan-step statuses are pending/active/completed/failed); the plan's `item.open` batch is refused whole |
//! | `delta-outside-turn` | `turn/delta-outside-turn` (beyond the kit: the kit passes) | the process's first turn sends an `item.textDelta` (key `{channel: "preamble"}`, no `noTurnFallback`) right before its `turn.open`: bb's assembler drops it without a trace |
//! | `interrupt-completes` | `stop/interrupt-settles-interrupted` (beyond the kit) | `thread/stop {interrupt}` settles the open turn with `turn.boundary {status: "completed"}` (still before the answer) |
//! | `delta-after-stop` | `stop/nothing-after-stop` (beyond the kit) | right after answering any `thread/stop`, one more `thread/delta` (a `provider.warning`) for the stopped thread |
//! | `malformed-client-request-id` | `events/schema-valid` | the process's first `input.accepted` echoes the client request id with its `creq_` prefix rewritten to `req_`, which bb's id format refuses; that batch (the acceptance alone) is refused whole |
//! | `delta-before-open` | `item/opens-before-delta` | a command's `item.open` is held back until after its first `item.outputDelta`, so `item/commandExecution/outputDelta` precedes `item/started` |
//! | `release-interrupts` | `stop/release-not-interrupted` | `thread/stop {release}` on an idle thread writes `turn.open` + `turn.boundary {interrupted}` right after its answer |
//! | `resume-reuses-ids` | `session/resume-id-uniqueness` | `thread/resume` sends no `session.reset`; the resumed provider restarts its item ids, so bb item ids (and the vouched child turn id) repeat |
//! | `fork-no-identity` | `session/fork-identity` | the `thread/fork` result lacks `providerThreadId` |
//! | `zero-work-hangs` | `turn/settles-without-activity` | a zero-work prompt gets `input.accepted` but never its settling `turn.boundary` |
//! | `archived-no-hint` | `recovery/session-archived` | the archived resume is rejected without `error.data` |
//! | `threads-serialized` | `session/threads-independent` | a `turn/start` while another thread's turn runs is answered but its prompt waits until that turn ends |
//! | `stop-before-settle` | `stop/interrupt-settles-before-result` | `thread/stop` is answered before the interrupted `turn.boundary` is written |
//! | `undeclared-icon` | `presentation/icon-namespaced-declared` | `fileRead` items use the glyph `bb-ref/sparkles`, not a declared name |
//! | `stray-stdout` | `rpc/unknown-method` (then `rpc/non-json-ignored`, `rpc/response-not-request` skipped) | writes `bb-ref-bridge: starting ` to stdout at startup without a newline: it is glued to the first response line (the kit's unknown-method probe answer), which the reader then ignores as non-JSON |
//! | `search-reclassified` | none: legal (`events/grammar` passes naming it; pins count bb's drop) | a search item's `item.close` carries a `fileRead` shape: bb's assembler reclassifies it with two `item/completed` under one item id, and the host drops the second (`item/settles-once`), bb's own pair |
//! | `reword-final-message` | no conformance rule (it is a protocol-valid change): parity against the plain bridge fails on exactly the final agent message's `item/completed` | appends ` (reworded)` to the provider-final text of the agent message's `item.textClose` |
//! | `crash-mid-turn` | `turn/lifecycle`; every later rule that needs an answer (from `stop/release-not-interrupted` on) is skipped naming it (under `--kit-only` each fails); `events/schema-valid`, `item/opens-before-delta` and the presentation rule still pass on the events received | exits with status 7 right after the first turn's command output delta |

mod breaks;
mod child;
mod out;
mod params;
mod session;

use breaks::Break;
use out::RpcError;
use params::Check;
use serde_json::{Value, json};
use session::ThreadHandle;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Grace for provider children to exit on EOF when the bridge itself shuts down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Bound on each provider request made during a session construction.
const PROVIDER_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Live threads by bb thread id.
static THREADS: LazyLock<Mutex<HashMap<String, Arc<ThreadHandle>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
/// Provider session ids archived through `thread/archive`.
static ARCHIVED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

fn threads() -> std::sync::MutexGuard<'static, HashMap<String, Arc<ThreadHandle>>> {
    THREADS.lock().unwrap_or_else(|e| e.into_inner())
}

fn archived() -> std::sync::MutexGuard<'static, HashSet<String>> {
    ARCHIVED.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn find_thread(thread_id: &str) -> Option<Arc<ThreadHandle>> {
    threads().get(thread_id).cloned()
}

/// Break `threads-serialized`: once no thread runs a turn, start one deferred prompt.
pub fn dispatch_deferred_turns() {
    if !breaks::on(Break::ThreadsSerialized) {
        return;
    }
    let all: Vec<Arc<ThreadHandle>> = threads().values().cloned().collect();
    if all.iter().any(|t| t.has_running_turn()) {
        return;
    }
    for handle in all {
        if handle.dispatch_deferred() {
            return;
        }
    }
}

fn main() {
    let modes = match parse_args() {
        Ok(modes) => modes,
        Err(message) => {
            eprintln!("[bb-ref-bridge] {message}");
            std::process::exit(2);
        }
    };
    breaks::install(modes);

    if breaks::on(Break::StrayStdout) {
        // Deliberately unguarded: no newline, so it corrupts the next protocol line.
        out::write_raw("bb-ref-bridge: starting ");
    }

    // SIGTERM/SIGINT: reap every provider child, then exit, so no orphan keeps running.
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ]) {
        std::thread::spawn(move || {
            if signals.forever().next().is_some() {
                child::shutdown_all(SHUTDOWN_GRACE);
                std::process::exit(0);
            }
        });
    }

    let stdin = std::io::stdin();
    for line in stdin.lock().split(b'\n') {
        let Ok(line) = line else { break };
        handle_line(&line);
    }
    child::shutdown_all(SHUTDOWN_GRACE);
}

/// Break modes from `--break` flags and `BB_REF_BRIDGE_BREAK`.
fn parse_args() -> Result<Vec<Break>, String> {
    let mut modes = Vec::new();
    if let Ok(list) = std::env::var("BB_REF_BRIDGE_BREAK") {
        modes.extend(breaks::parse_list(&list)?);
    }
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--break" {
            let list = args.next().ok_or("--break needs a mode")?;
            modes.extend(breaks::parse_list(&list)?);
        } else if let Some(list) = arg.strip_prefix("--break=") {
            modes.extend(breaks::parse_list(list)?);
        } else if arg == "--help" || arg == "-h" {
            let names: Vec<&str> = breaks::ALL.iter().map(|(name, _)| *name).collect();
            eprintln!(
                "usage: bb-ref-bridge [--break <mode>[,<mode>...]]...\nmodes: {}",
                names.join(", ")
            );
            std::process::exit(0);
        } else {
            return Err(format!("unknown argument `{arg}`"));
        }
    }
    Ok(modes)
}

fn handle_line(raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches('\r');
    if text.trim().is_empty() {
        return;
    }
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        if breaks::on(Break::CrashOnNonJson) {
            eprintln!("[bb-ref-bridge] break crash-on-non-json: exiting with status 3");
            std::process::exit(3);
        }
        eprintln!("[bb-ref-bridge] ignoring a non-JSON line");
        return;
    };
    if !message.is_object() {
        return;
    }
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // Discriminated on `method`: no method means a response to one of our requests.
        if !out::deliver_response(&message) && breaks::on(Break::ErrorOnResponse) {
            out::respond_error(
                &id.unwrap_or(Value::Null),
                &RpcError::new(-32600, "Unexpected response: no such request"),
            );
        }
        return;
    };
    let Some(id) = id.filter(|id| id.is_string() || id.is_number()) else {
        return; // A notification: nothing the runtime sends us that way needs acting on.
    };
    let params = message.get("params").cloned().unwrap_or(json!({}));
    if let Err(error) = dispatch(&id, method, &params) {
        let dropped = (error.code == out::METHOD_NOT_FOUND && breaks::on(Break::DropUnknownMethod))
            || (error.code == out::INVALID_PARAMS && breaks::on(Break::DropInvalidParams));
        if dropped {
            eprintln!("[bb-ref-bridge] break: dropping the answer to {method}");
        } else {
            out::respond_error(&id, &error);
        }
    }
}

fn invalid(method: &str, issues: Vec<Value>) -> RpcError {
    RpcError::new(out::INVALID_PARAMS, format!("Invalid params for {method}"))
        .with_data(Value::Array(issues))
}

fn not_found(method: &str) -> RpcError {
    RpcError::new(out::METHOD_NOT_FOUND, format!("Method not found: {method}"))
}

/// Handles one request. `Ok` means the handler already answered; `Err` is written (or, in a
/// break mode, dropped) by the caller.
fn dispatch(id: &Value, method: &str, params: &Value) -> Result<(), RpcError> {
    match method {
        "initialize" => initialize(id, params),
        "model/list" => {
            out::respond(
                id,
                json!({
                    "models": [{
                        "id": "bb-ref-1",
                        "model": "bb-ref-1",
                        "displayName": "bb-ref scripted model",
                        "description": "Deterministic scripted provider for conformance tests",
                        "isDefault": true,
                    }],
                    "selectedOnlyModels": [],
                }),
            );
            Ok(())
        }
        "provider/health" => {
            out::respond(
                id,
                json!({"supported": true, "health": {
                    "status": "ready", "statusMessage": null, "accountEmail": null, "planLabel": null,
                    "installedVersion": null, "minimumSupportedVersion": null,
                    "canInstall": false, "canUpdate": false, "loginCommand": null,
                }}),
            );
            Ok(())
        }
        "skills/configure" => {
            let mut check = Check::new(params);
            check.array("roots");
            check.finish().map_err(|issues| invalid(method, issues))?;
            // The scripted provider has no skills layout; the roots are accepted and unused.
            out::respond(id, json!({}));
            Ok(())
        }
        "commands/list" | "command/list" => {
            let mut check = Check::new(params);
            check.opt_string("cwd");
            check.finish().map_err(|issues| invalid(method, issues))?;
            if breaks::on(Break::CommandsDeclaredRefused) {
                return Err(not_found(method));
            }
            out::respond(
                id,
                json!({"commands": [
                    {"name": "noop", "description": "Finish the turn without doing any work"},
                    {"name": "hold", "description": "Hold the turn open until it is interrupted"},
                ]}),
            );
            Ok(())
        }
        "thread/start" => construct(id, method, Construction::Start, params),
        "thread/resume" => construct(id, method, Construction::Resume, params),
        "thread/fork" => construct(id, method, Construction::Fork, params),
        "thread/archive" | "thread/unarchive" => archive(id, method, params),
        "turn/start" => turn_start(id, method, params),
        "turn/steer" => turn_steer(id, method, params),
        "thread/stop" => thread_stop(id, method, params),
        other => Err(not_found(other)),
    }
}

fn initialize(id: &Value, params: &Value) -> Result<(), RpcError> {
    let mut check = Check::new(params);
    check.positive_int("protocolVersion");
    check
        .finish()
        .map_err(|issues| invalid("initialize", issues))?;
    let client = params.get("client");
    let client_ok = ["name", "version"].iter().all(|field| {
        client
            .and_then(|c| c.get(*field))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    });
    if !client_ok {
        return Err(invalid(
            "initialize",
            vec![
                json!({"code": "invalid_type", "path": ["client"], "message": "Expected {name, version} with non-empty strings"}),
            ],
        ));
    }
    let mut capabilities = json!({
        "sessionRestore": true,
        "threadArchive": true,
        "threadRename": false,
        "threadGoalClear": false,
        "fork": "tip",
        "approvalEnforcedBy": "runtime",
        "grammarVersions": [3, 3],
        "steerMode": "queue",
        "skills": {"configure": true},
        "commands": {"list": true},
    });
    let map = capabilities.as_object_mut().expect("object literal");
    if breaks::on(Break::NoGrammarVersions) {
        map.remove("grammarVersions");
    }
    if breaks::on(Break::SkillsUndeclaredAccepted) {
        map.remove("skills");
    }
    let version = if breaks::on(Break::WrongProtocolVersion) {
        1
    } else {
        2
    };
    out::respond(
        id,
        json!({"protocolVersion": version, "capabilities": capabilities}),
    );
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Construction {
    Start,
    Resume,
    Fork,
}

fn construct(id: &Value, method: &str, kind: Construction, params: &Value) -> Result<(), RpcError> {
    let mut check = Check::new(params);
    let thread_id = check.string("threadId");
    let cwd = check.string("cwd");
    check.opt_object("options");
    let dynamic_tools = check.opt_array("dynamicTools");
    check.opt_array("disallowedTools");
    check.opt_string("instructionMode");
    let input = check.opt_array("input");
    let source = match kind {
        Construction::Start => None,
        Construction::Resume => Some(check.string("providerThreadId")),
        Construction::Fork => Some(check.string("sourceProviderThreadId")),
    };
    let checkpoint = if kind == Construction::Fork {
        check.opt_string("sourceProviderCheckpointId")
    } else {
        None
    };
    check.finish().map_err(|issues| invalid(method, issues))?;

    if kind == Construction::Resume
        && let Some(session) = &source
        && archived().contains(session)
    {
        let message = format!("Session {session} is archived; unarchive it before resuming");
        let mut error = RpcError::new(out::BRIDGE_ERROR, message.clone());
        if !breaks::on(Break::ArchivedNoHint) {
            error = error.with_data(json!({"recovery": {"kind": "sessionArchived", "message": message, "retryable": true}}));
        }
        return Err(error);
    }
    if checkpoint.is_some() {
        return Err(RpcError::new(
            out::FORK_CHECKPOINT_UNSUPPORTED,
            "This bridge forks at the tip only",
        ));
    }
    // Re-constructing a live thread replaces its session: release the old child first.
    if let Some(previous) = threads().remove(&thread_id) {
        previous.stop("release", || {});
    }

    let handle = ThreadHandle::spawn(&thread_id, &cwd, dynamic_tools).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            out::MISSING_EXECUTABLE
        } else {
            out::BRIDGE_ERROR
        };
        RpcError::new(code, format!("cannot start the provider: {e}"))
    })?;
    let session = open_provider_session(&handle, kind, &cwd, source.as_deref());
    let provider_thread_id = match session {
        Ok(session_id) => session_id,
        Err(message) => {
            handle.child().shutdown(Duration::from_millis(500));
            return Err(RpcError::new(out::BRIDGE_ERROR, message));
        }
    };
    handle.lock().provider_thread_id = provider_thread_id.clone();
    threads().insert(thread_id.clone(), Arc::clone(&handle));

    out::notify(
        "thread/identity",
        json!({"threadId": thread_id, "providerThreadId": provider_thread_id, "sessionRestorable": true}),
    );
    // Every session construction starts a fresh provider id space (the provider restarts
    // its item ids), so the assembler must start a fresh map too.
    if !(kind == Construction::Resume && breaks::on(Break::ResumeReusesIds)) {
        out::deltas(&thread_id, vec![json!({"kind": "session.reset"})]);
    }
    let mut result = json!({"providerThreadId": provider_thread_id, "sessionRestorable": true});
    let omit_identity = match kind {
        Construction::Start => breaks::on(Break::StartNoIdentity),
        Construction::Fork => breaks::on(Break::ForkNoIdentity),
        Construction::Resume => false,
    };
    if omit_identity && let Some(map) = result.as_object_mut() {
        map.remove("providerThreadId");
    }
    out::respond(id, result);

    let text = params::input_text(&input);
    if !text.is_empty() {
        // An initial prompt without a clientRequestId: no `input.accepted`.
        handle.start_turn(None, text, false);
    }
    Ok(())
}

/// `initialize` + the session request on a fresh child; returns the provider session id.
fn open_provider_session(
    handle: &ThreadHandle,
    kind: Construction,
    cwd: &str,
    source: Option<&str>,
) -> Result<String, String> {
    let child = handle.child();
    child.call(
        "initialize",
        json!({"protocolVersion": 1, "clientInfo": {"name": "bb-ref-bridge", "version": env!("CARGO_PKG_VERSION")}}),
        PROVIDER_CALL_TIMEOUT,
    )?;
    let tools = handle.tool_names();
    let (method, params) = match kind {
        Construction::Start => ("session/new", json!({"cwd": cwd, "tools": tools})),
        Construction::Resume => (
            "session/load",
            json!({"sessionId": source, "cwd": cwd, "tools": tools}),
        ),
        Construction::Fork => (
            "session/fork",
            json!({"sessionId": source, "cwd": cwd, "tools": tools}),
        ),
    };
    let result = child.call(method, params, PROVIDER_CALL_TIMEOUT)?;
    result
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("provider answered {method} without a sessionId"))
}

fn archive(id: &Value, method: &str, params: &Value) -> Result<(), RpcError> {
    let mut check = Check::new(params);
    let thread_id = check.string("threadId");
    let provider_thread_id = check.string("providerThreadId");
    check.finish().map_err(|issues| invalid(method, issues))?;
    if method == "thread/archive" {
        archived().insert(provider_thread_id);
        // An archived session holds no provider process; a resume after unarchive rebuilds it.
        if let Some(handle) = threads().remove(&thread_id) {
            handle.stop("release", || {});
        }
    } else {
        archived().remove(&provider_thread_id);
    }
    out::respond(id, json!({}));
    Ok(())
}

/// Reads the fields `turn/start` and `turn/steer` share.
fn turn_params(
    method: &str,
    params: &Value,
    steer: bool,
) -> Result<(String, String, String), RpcError> {
    let mut check = Check::new(params);
    let thread_id = check.string("threadId");
    check.opt_string("providerThreadId");
    let input = check.array("input");
    let client_request_id = check.string("clientRequestId");
    check.opt_object("options");
    if steer {
        check.opt_string("expectedTurnId");
    }
    check.finish().map_err(|issues| invalid(method, issues))?;
    Ok((thread_id, client_request_id, params::input_text(&input)))
}

fn no_session(thread_id: &str) -> RpcError {
    RpcError::new(
        out::INVALID_PARAMS,
        format!("No session for thread {thread_id}; send thread/start or thread/resume first"),
    )
}

fn turn_start(id: &Value, method: &str, params: &Value) -> Result<(), RpcError> {
    let (thread_id, client_request_id, text) = turn_params(method, params, false)?;
    let handle = find_thread(&thread_id).ok_or_else(|| no_session(&thread_id))?;
    {
        let st = handle.lock();
        if st.dead {
            return Err(RpcError::new(
                out::BRIDGE_ERROR,
                "The provider child exited; resume the thread",
            ));
        }
        if st.turn.is_some() {
            return Err(RpcError::new(
                out::TURN_BUSY,
                "A turn is already running on this thread; steer it instead",
            ));
        }
    }
    let defer = breaks::on(Break::ThreadsSerialized)
        && threads()
            .values()
            .any(|other| other.thread_id != thread_id && other.has_running_turn());
    out::respond(id, json!({}));
    handle.start_turn(Some(client_request_id), text, defer);
    Ok(())
}

fn turn_steer(id: &Value, method: &str, params: &Value) -> Result<(), RpcError> {
    let (thread_id, client_request_id, text) = turn_params(method, params, true)?;
    let handle = find_thread(&thread_id).ok_or_else(|| no_session(&thread_id))?;
    handle.steer(&client_request_id, text)?;
    out::respond(id, json!({}));
    Ok(())
}

fn thread_stop(id: &Value, method: &str, params: &Value) -> Result<(), RpcError> {
    let mut check = Check::new(params);
    let thread_id = check.string("threadId");
    check.opt_string("providerThreadId");
    let intent = check.one_of("intent", &["interrupt", "release"]);
    check.opt_string("activeTurnId");
    check.finish().map_err(|issues| invalid(method, issues))?;
    // The runtime detaches the thread once this is answered, so the bridge forgets it now.
    let handle = threads().remove(&thread_id);
    match handle {
        Some(handle) => handle.stop(&intent, || out::respond(id, json!({}))),
        // Nothing held: stopping an unknown or already-stopped thread is a no-op.
        None => out::respond(id, json!({})),
    }
    dispatch_deferred_turns();
    Ok(())
}

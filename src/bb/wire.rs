//! Protocol obligations judged on the wire: what the runtime sent and what the bridge sent, in
//! order, beyond what bb's kit checks on assembled events. These are the violations bb's
//! assembler absorbs without a trace (the kit passes them), so they are marked `beyond the
//! kit` in the catalogue and left out by `check bb --kit-only`.
//!
//! | Rule | Protocol document | Fails when |
//! | --- | --- | --- |
//! | `turn/delta-outside-turn` | Turn lifecycle 2 | a turn-requiring delta (item, stream, provider input) arrives with no turn open and no `noTurnFallback`, or a non-claiming `turn.boundary` has no turn to settle: bb's assembler drops it without a trace |
//! | `stop/interrupt-settles-interrupted` | Turn lifecycle 5 | the turn a `thread/stop {intent: "interrupt"}` interrupted settles with any status but `interrupted` |
//! | `stop/interrupt-closes-items` | Turn lifecycle 5 | the turn a `thread/stop {intent: "interrupt"}` interrupted settles with turn-scoped items still open: the bridge owes "explicit closes for provider-owned open items", and bb's assembler forgets them unsettled, so the timeline shows them running |
//! | `stop/interrupt-settles-before-result` (offline and replay; live, the kit's rule of that name) | Turn lifecycle 5, 6 | the bridge answers a `thread/stop {intent: "interrupt"}` while the turn it interrupted is still open: its terminal `turn.boundary` must be on the wire before the response. A turn that settles after the answer fails naming both; one that never settles fails too, unless the traffic was cut short ([`WireJudge::stalled`]: skipped naming the stall) |
//! | `stop/nothing-after-stop` | Turn lifecycle 6 | the bridge sends a `thread/delta` for a thread after answering its `thread/stop`, before the runtime re-attaches it (`thread/start`/`resume`/`fork`, `turn/start`/`steer`); a message the runtime refuses (invalid) counts too: it was still sent |
//! | `turn/vouched-key-opened` | Turn lifecycle 3 | a delta is scoped by a `providerTurnId` the bridge never opened with `turn.open` on that thread (a provider's own turn label forwarded as scoping); a `turn.boundary` for such a key is the grammar's `turn/known` |
//! | `recovery/hint-names-hosted-thread` | Recovery hints | a `provider/recovery` notification names a `threadId` the process does not host (never constructed by `thread/start`/`resume`/`fork`, or released by a stop it answered): the runtime drops it |
//! | `session/identity-before-deltas` | Ordering guarantees | a session's `thread/identity` notification arrives after a `thread/delta` for it (both after the `thread/start`/`resume`/`fork` that constructed it) |
//! | `session/identity-echoes-handle` | Identifiers | a session's `thread/identity` notification (the first after the `thread/start`/`resume`/`fork` that constructed it) names another `providerThreadId` than that request's result ("returned on the result … and echoed by `thread/identity`"), in whichever order the two came; a later identity may re-key the session |
//! | `thread/delta-echoes-thread-id` (live only) | Identity | a `thread/delta` names a `threadId` no runtime request named ("echoed verbatim"): bb's runtime routes by it, so the delta reaches no thread |
//!
//! The judge is fed the same way live (the conformance client) and offline (a recording's
//! merged view): runtime lines, bridge responses, and each `thread/delta`'s assembled events
//! and silent drops. Each violation names where it happened (message position or lane
//! run/seq) and the thread, key or turn involved.

use super::assembler::{ForgottenItem, SilentDrop};
use super::event::EventView;
use crate::jsonref::{Field, JsonView};
use crate::rule::{Status, Verdict};
use serde_json::Value;
use std::collections::HashMap;

pub const DELTA_OUTSIDE_TURN: &str = "turn/delta-outside-turn";
pub const INTERRUPT_SETTLES_INTERRUPTED: &str = "stop/interrupt-settles-interrupted";
pub const NOTHING_AFTER_STOP: &str = "stop/nothing-after-stop";
/// The wire version of the kit's live rule of the same name: judged on recordings and on a
/// replay's live traffic; `check bb` leaves it to the kit's own live scenario.
pub const SETTLES_BEFORE_RESULT: &str = "stop/interrupt-settles-before-result";
pub const INTERRUPT_CLOSES_ITEMS: &str = "stop/interrupt-closes-items";
pub const VOUCHED_KEY_OPENED: &str = "turn/vouched-key-opened";
pub const IDENTITY_BEFORE_DELTAS: &str = "session/identity-before-deltas";
pub const IDENTITY_ECHOES_HANDLE: &str = "session/identity-echoes-handle";
pub const HINT_NAMES_HOSTED_THREAD: &str = "recovery/hint-names-hosted-thread";
/// Live only (not in [`RULES`]): offline, a delta under a threadId the runtime never named
/// lands in that id's own scope, a cell with no runtime lane, so it could never be seen there.
pub const THREAD_ID_ECHOED: &str = "thread/delta-echoes-thread-id";

/// Every wire rule, in report order.
pub const RULES: &[&str] = &[
    DELTA_OUTSIDE_TURN,
    INTERRUPT_SETTLES_INTERRUPTED,
    INTERRUPT_CLOSES_ITEMS,
    SETTLES_BEFORE_RESULT,
    NOTHING_AFTER_STOP,
    VOUCHED_KEY_OPENED,
    IDENTITY_BEFORE_DELTAS,
    IDENTITY_ECHOES_HANDLE,
    HINT_NAMES_HOSTED_THREAD,
];

/// Violations kept (with their detail) per rule; later ones are only counted. A bridge that
/// breaks a rule on every line must not make the judge grow with the lines (issue 15).
pub const MAX_KEPT_PER_RULE: usize = 100;

/// Open turns, pending stops and stopped threads tracked at once (all threads together). Past
/// it the stop rules stop judging (their verdict says so: *not run*, or the failure found before
/// with a note); `turn/delta-outside-turn` needs no state and keeps judging.
pub const MAX_TRACKED: usize = 10_000;

/// Late settlements named in `stop/nothing-after-stop`'s pass detail, at most.
const MAX_LEFT_TO_KIT: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
}

#[derive(Default)]
pub struct WireJudge {
    /// Pending `thread/stop` requests: id (JSON text) → (thread, intent, where).
    stops: HashMap<String, (String, String, String)>,
    /// Open turns per thread, oldest first (from assembled events).
    open_turns: HashMap<String, Vec<String>>,
    /// The turns in `open_turns`, all threads together.
    open_count: usize,
    /// Thread → (interrupted turn, where the stop was sent).
    interrupting: HashMap<String, (String, String)>,
    /// Thread → where its stop was answered (the bridge holds nothing for it any more).
    detached: HashMap<String, String>,
    /// Threads whose stop was answered before the interrupted turn settled: the late
    /// settlement is the kit's `stop/interrupt-settles-before-result` fault, not counted here.
    late_settlement: HashMap<String, String>,
    /// Late messages left to the kit's rule (named in this rule's verdict; the first
    /// [`MAX_LEFT_TO_KIT`], then counted in `left_to_kit_more`).
    pub left_to_kit: Vec<String>,
    pub left_to_kit_more: usize,
    /// The first [`MAX_KEPT_PER_RULE`] violations of each rule.
    pub violations: Vec<Violation>,
    /// Every violation per rule, kept or not.
    pub violation_counts: HashMap<&'static str, usize>,
    /// Where [`MAX_TRACKED`] was reached (the stop rules stopped judging there).
    pub overflow: Option<String>,
    /// Whether any `thread/stop` was answered / any open turn was interrupted.
    pub stops_answered: usize,
    pub interrupts: usize,
    /// Whether any runtime→bridge line was seen (recordings may lack that lane).
    pub runtime_seen: bool,
    /// Valid `thread/delta` messages judged (none: `turn/delta-outside-turn` saw nothing).
    pub deltas_seen: usize,
    /// Thread → the `providerTurnId`s the bridge opened with `turn.open` (vouched keys).
    opened_keys: HashMap<String, std::collections::HashSet<String>>,
    /// The keys in `opened_keys`, all threads together (bounded by [`MAX_TRACKED`]).
    opened_count: usize,
    /// Where the vouched-key bound was reached (later keys were not judged).
    keys_overflow: Option<String>,
    /// Thread → (the construction request, the first `thread/delta` for the thread after it):
    /// sessions whose `thread/identity` notification has not arrived yet.
    awaiting_identity: HashMap<String, (String, Option<String>)>,
    /// `thread/identity` notifications seen.
    pub identities_seen: usize,
    /// Construction requests (`thread/start`/`resume`/`fork`) awaiting their answer: id → thread.
    constructions: HashMap<String, String>,
    /// Thread → the handle its current session's result returned and the one its identity
    /// named, each with where, until both came and were compared.
    handles: HashMap<String, SessionHandles>,
    /// Identity notifications compared with their session's result.
    pub identities_paired: usize,
    /// Threads the process hosts: constructed (`thread/start`/`resume`/`fork` sent) and not
    /// released by an answered `thread/stop {intent: "release"}`.
    hosted: std::collections::HashSet<String>,
    /// Whether `hosted` lost track (bounded by [`MAX_TRACKED`]): hints are then not judged.
    hosted_overflow: Option<String>,
    /// `provider/recovery` notifications seen, and those that named a thread.
    pub hints_seen: usize,
    pub thread_hints: usize,
    /// Hints naming a thread that arrived before any runtime line (not judged).
    unjudged_hints: usize,
    /// Every threadId a runtime request named (bounded by [`MAX_TRACKED`]).
    named_threads: std::collections::HashSet<String>,
    /// Where the bound on named threads was reached (later deltas were not judged).
    named_overflow: Option<String>,
    /// Valid `thread/delta` messages under a threadId no runtime request named: the first
    /// (where, threadId), and how many.
    pub foreign_thread_first: Option<(String, String)>,
    pub foreign_thread_deltas: usize,
    /// Interrupting stops answered (their turn open when they were sent), and those pending
    /// (request ids).
    pub interrupts_answered: usize,
    interrupt_ids: std::collections::HashSet<String>,
    /// Set by the caller when the traffic judged was cut short (a live replay that stalled:
    /// the bridge exited, a wait ran out): a rule that only lacks the rest of the traffic is
    /// then skipped naming it, not failed.
    pub stalled: Option<String>,
}

/// What one session's construction result and its `thread/identity` said its handle is
/// (`None` inside: the result carried no string `providerThreadId`).
#[derive(Debug, Default)]
struct SessionHandles {
    result: Option<(Option<String>, String)>,
    identity: Option<(Option<String>, String)>,
    /// The session's identity came: a later one re-keys the session (Claude Code announces the
    /// session id its first prompt creates), which the result cannot have named.
    identified: bool,
}

/// A position formatted on first use.
struct LazyAt<'a>(std::cell::LazyCell<String, &'a dyn Fn() -> String>);

impl std::ops::Deref for LazyAt<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LazyAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// A request id as text, to pair a response with its request: a number with a fraction part of
/// zero is its integer (`5.0` answers request 5: JSON has one number type, and bb's runtime
/// reads it so).
fn id_key(id: &Value) -> String {
    match super::msg::json_int(id) {
        Some(n) => n.to_string(),
        None => id.to_string(),
    }
}

fn thread_of(msg: &Value) -> Option<&str> {
    msg.get("params")?.get("threadId")?.as_str()
}

impl WireJudge {
    pub fn new() -> WireJudge {
        WireJudge::default()
    }

    fn violation(&mut self, rule: &'static str, detail: impl FnOnce() -> String) {
        let n = self.violation_counts.entry(rule).or_default();
        *n += 1;
        if *n <= MAX_KEPT_PER_RULE {
            self.violations.push(Violation {
                rule,
                detail: detail(),
            });
        }
    }

    /// State tracked for the stop rules, all threads together.
    fn tracked(&self) -> usize {
        self.stops.len()
            + self.open_count
            + self.interrupting.len()
            + self.detached.len()
            + self.late_settlement.len()
            + self.interrupt_ids.len()
    }

    /// Whether one more tracked entry fits; on the first refusal the stop rules' state is
    /// dropped and the overflow named (`at`).
    fn room(&mut self, at: &str) -> bool {
        if self.overflow.is_some() {
            return false;
        }
        if self.tracked() < MAX_TRACKED {
            return true;
        }
        self.overflow = Some(at.to_string());
        self.stops = HashMap::new();
        self.open_turns = HashMap::new();
        self.open_count = 0;
        self.interrupting = HashMap::new();
        self.detached = HashMap::new();
        self.late_settlement = HashMap::new();
        self.interrupt_ids = Default::default();
        false
    }

    /// A line the runtime sent to the bridge.
    pub fn runtime(&mut self, msg: &Value, at: &str) {
        self.runtime_at(msg, &|| at.to_string())
    }

    /// [`WireJudge::runtime`] with the position formatted only if it is kept.
    pub fn runtime_at(&mut self, msg: &Value, at: &dyn Fn() -> String) {
        let at = &LazyAt(std::cell::LazyCell::new(at));
        self.runtime_seen = true;
        let (Some(method), Some(id)) = (msg.get("method").and_then(Value::as_str), msg.get("id"))
        else {
            return;
        };
        let Some(thread) = thread_of(msg) else {
            return;
        };
        if self.named_threads.len() < MAX_TRACKED {
            self.named_threads.insert(thread.to_string());
        } else if !self.named_threads.contains(thread) && self.named_overflow.is_none() {
            self.named_overflow = Some(at.to_string());
        }
        match method {
            "thread/stop" => {
                if !self.room(at) {
                    return;
                }
                let intent = msg
                    .f("params")
                    .f("intent")
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                if intent == "interrupt"
                    && let Some(turn) = self.open_turns.get(thread).and_then(|t| t.last())
                {
                    self.interrupts += 1;
                    self.interrupt_ids.insert(id_key(id));
                    self.interrupting
                        .insert(thread.to_string(), (turn.clone(), at.to_string()));
                }
                self.stops
                    .insert(id_key(id), (thread.to_string(), intent, at.to_string()));
            }
            "thread/start" | "thread/resume" | "thread/fork" => {
                self.detached.remove(thread);
                if self.hosted.len() < MAX_TRACKED {
                    self.hosted.insert(thread.to_string());
                } else if !self.hosted.contains(thread) && self.hosted_overflow.is_none() {
                    self.hosted_overflow = Some(at.to_string());
                }
                if self.awaiting_identity.contains_key(thread)
                    || self.awaiting_identity.len() < MAX_TRACKED
                {
                    self.awaiting_identity
                        .insert(thread.to_string(), (at.to_string(), None));
                }
                // A new session: its handle is the one this request's result returns.
                self.handles.remove(thread);
                if self.constructions.len() < MAX_TRACKED {
                    self.constructions.insert(id_key(id), thread.to_string());
                }
            }
            "turn/start" | "turn/steer" => {
                self.detached.remove(thread);
            }
            _ => {}
        }
    }

    /// A response the bridge sent (a line with an `id` and no `method`).
    pub fn bridge_response(&mut self, msg: &Value, at: &str) {
        self.bridge_response_at(msg, &|| at.to_string())
    }

    /// [`WireJudge::bridge_response`] with the position formatted only if it is kept.
    /// Whether a stop awaits its response: [`WireJudge::bridge_response_at`] does nothing
    /// otherwise, so the offline pass need not parse response lines (a `Value` tree each,
    /// ~4 % of `pins` on folders of corpus cells, which record no stops).
    pub fn awaits_response(&self) -> bool {
        !self.stops.is_empty() || !self.constructions.is_empty()
    }

    pub fn bridge_response_at(&mut self, msg: &Value, at: &dyn Fn() -> String) {
        let at = &LazyAt(std::cell::LazyCell::new(at));
        let Some(id) = msg.get("id") else {
            return;
        };
        if let Some(thread) = self.constructions.remove(&id_key(id)) {
            // A refused construction made no session: nothing to echo.
            if let Some(result) = msg.get("result") {
                let handle = result
                    .get("providerThreadId")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if self.handles.contains_key(&thread) || self.handles.len() < MAX_TRACKED {
                    self.handles.entry(thread.clone()).or_default().result =
                        Some((handle, at.to_string()));
                    self.compare_handles(&thread);
                }
            }
            return;
        }
        if let Some((thread, intent, _)) = self.stops.remove(&id_key(id)) {
            self.stops_answered += 1;
            if intent == "release" {
                self.hosted.remove(&thread);
            }
            if !self.room(at) {
                return;
            }
            if self.interrupt_ids.remove(&id_key(id)) {
                self.interrupts_answered += 1;
            }
            if self.interrupting.contains_key(&thread) {
                self.late_settlement.insert(thread.clone(), at.to_string());
            }
            self.detached.insert(thread, at.to_string());
        }
    }

    /// A `thread/delta` the runtime refuses whole (invalid params) that still names `thread`:
    /// late after a stop all the same (its invalidity is `events/schema-valid`'s fault).
    pub fn bridge_refused_delta_at(&mut self, thread: &str, at: &dyn Fn() -> String) {
        if let Some((_, first)) = self.awaiting_identity.get_mut(thread)
            && first.is_none()
        {
            *first = Some(at());
        }
        if self.late_settlement.contains_key(thread) {
            return; // still settling the interrupted turn: the kit's rule judges it
        }
        if !self.detached.is_empty()
            && let Some(answered) = self.detached.remove(thread)
        {
            let at = at();
            self.violation(NOTHING_AFTER_STOP, || format!(
                "thread/delta for thread {thread:?} at {at} (a message the runtime refuses, see events/schema-valid), after the thread/stop answer at {answered}: the runtime had detached the thread"
            ));
        }
    }

    /// A `provider/recovery` notification the bridge sent (its params).
    pub fn bridge_recovery_at(&mut self, params: &Value, at: &dyn Fn() -> String) {
        self.hints_seen += 1;
        let Some(thread) = params.get("threadId") else {
            return; // process-scoped: names no thread
        };
        self.thread_hints += 1;
        if !self.runtime_seen {
            // No runtime lane (yet): which threads the process hosts is not known.
            self.unjudged_hints += 1;
            return;
        }
        let named = thread.as_str().map(str::to_string);
        if named.as_deref().is_some_and(|t| self.hosted.contains(t))
            || self.hosted_overflow.is_some()
        {
            return;
        }
        let kind = params.get("kind").and_then(Value::as_str).unwrap_or("?");
        self.violation(HINT_NAMES_HOSTED_THREAD, || format!(
            "provider/recovery ({kind}) at {} names thread {thread}, which this process does not host (no thread/start, resume or fork for it, or released): the runtime drops such a hint",
            at()
        ));
    }

    /// A `thread/identity` notification the bridge sent for `thread`, naming `handle` (its
    /// `providerThreadId`).
    pub fn bridge_identity_at(
        &mut self,
        thread: &str,
        handle: Option<&str>,
        at: &dyn Fn() -> String,
    ) {
        let at = &LazyAt(std::cell::LazyCell::new(at));
        self.identities_seen += 1;
        if let Some((constructed, Some(first_delta))) = self.awaiting_identity.remove(thread) {
            self.violation(IDENTITY_BEFORE_DELTAS, || format!(
                "thread/identity for thread {thread:?} at {at} came after a thread/delta for it at {first_delta} (the session was constructed by {constructed}); the identity must precede the session's deltas"
            ));
        }
        // The first identity after a construction is the one its result's handle is echoed
        // by; a later one may re-key the session (a provider that mints its session id at the
        // first prompt) and is not judged.
        if self.handles.contains_key(thread) || self.handles.len() < MAX_TRACKED {
            let h = self.handles.entry(thread.to_string()).or_default();
            if !h.identified {
                h.identified = true;
                h.identity = Some((handle.map(str::to_string), at.to_string()));
                self.compare_handles(thread);
            }
        }
    }

    /// Once a session's result and identity both came: the identity must echo the result's
    /// handle. A result without one is session/*-identity's fault, not judged here.
    fn compare_handles(&mut self, thread: &str) {
        let Some(h) = self.handles.get_mut(thread) else {
            return;
        };
        // Whichever came first waits for the other.
        if h.identity.is_none() || h.result.is_none() {
            return;
        }
        let (Some((Some(result), result_at)), Some((identity, identity_at))) =
            (&h.result, h.identity.take())
        else {
            return;
        };
        self.identities_paired += 1;
        if identity.as_deref() != Some(result.as_str()) {
            let (result, result_at) = (result.clone(), result_at.clone());
            let named = identity.map_or("no providerThreadId".into(), |i| format!("{i:?}"));
            self.violation(IDENTITY_ECHOES_HANDLE, || format!(
                "thread/identity for thread {thread:?} at {identity_at} names {named}, but the result at {result_at} returned providerThreadId {result:?}: the identity must echo the session's handle"
            ));
        }
    }

    /// The keys a valid `thread/delta`'s deltas open or scope by (`providerTurnId`): a key
    /// that scopes a delta must have been opened by the bridge (`turn.open`) on that thread.
    pub fn bridge_delta_keys<J: JsonView>(
        &mut self,
        thread: &str,
        deltas: &[J],
        at: &dyn Fn() -> String,
    ) {
        // The runtime's threadId is "echoed verbatim" (Identity): bb's runtime routes a delta
        // by it, and one it never named reaches no thread.
        if self.runtime_seen
            && self.named_overflow.is_none()
            && !self.named_threads.contains(thread)
        {
            self.foreign_thread_deltas += 1;
            if self.foreign_thread_first.is_none() {
                self.foreign_thread_first = Some((at(), thread.to_string()));
            }
        }
        if let Some((_, first)) = self.awaiting_identity.get_mut(thread)
            && first.is_none()
        {
            *first = Some(at());
        }
        for d in deltas {
            let Some(key) = d.get("providerTurnId").and_then(JsonView::as_str) else {
                continue;
            };
            match d.get("kind").and_then(JsonView::as_str) {
                Some("turn.open") => {
                    if self
                        .opened_keys
                        .get(thread)
                        .is_some_and(|k| k.contains(key))
                    {
                        continue;
                    }
                    if self.opened_count >= MAX_TRACKED {
                        if self.keys_overflow.is_none() {
                            self.keys_overflow = Some(at());
                        }
                        continue;
                    }
                    self.opened_count += 1;
                    self.opened_keys
                        .entry(thread.to_string())
                        .or_default()
                        .insert(key.to_string());
                }
                // A boundary for a key never opened is the grammar's turn/known (one fault,
                // one verdict).
                Some("turn.boundary") => {}
                kind => {
                    if self.keys_overflow.is_some()
                        || self
                            .opened_keys
                            .get(thread)
                            .is_some_and(|k| k.contains(key))
                    {
                        continue;
                    }
                    let kind = kind.unwrap_or("?");
                    self.violation(VOUCHED_KEY_OPENED, || format!(
                        "{kind} at {} on thread {thread:?} is scoped by providerTurnId {key:?}, which the bridge never opened with turn.open: only turn keys the bridge itself opened may scope a delta",
                        at()
                    ));
                }
            }
        }
    }

    /// A valid `thread/delta` for `thread`, with what it assembled into and what was dropped.
    pub fn bridge_delta<E: EventView>(
        &mut self,
        thread: &str,
        at: &str,
        events: &[E],
        drops: &[SilentDrop],
        forgotten: &[ForgottenItem],
    ) {
        self.bridge_delta_at(thread, &|| at.to_string(), events, drops, forgotten);
    }

    /// [`WireJudge::bridge_delta`] with the position formatted only if something names it
    /// (formatting it for every delta line cost `pins` about 5 %).
    pub fn bridge_delta_at<E: EventView>(
        &mut self,
        thread: &str,
        at: &dyn Fn() -> String,
        events: &[E],
        drops: &[SilentDrop],
        forgotten: &[ForgottenItem],
    ) {
        let at = &LazyAt(std::cell::LazyCell::new(at));
        self.deltas_seen += 1;
        if let Some(answered) = self.late_settlement.get(thread).cloned() {
            // Still settling the turn the stop interrupted: one fault, judged by the kit's
            // stop/interrupt-settles-before-result; the thread stays detached afterwards.
            if self.left_to_kit.len() < MAX_LEFT_TO_KIT {
                self.left_to_kit.push(format!(
                    "the late settlement at {at} (after the answer at {answered}) is judged by stop/interrupt-settles-before-result"
                ));
            } else {
                self.left_to_kit_more += 1;
            }
            let settles = events.iter().any(|e| {
                e.ty() == Some("turn/completed")
                    && self
                        .interrupting
                        .get(thread)
                        .is_some_and(|(t, _)| e.turn_id() == Some(t.as_str()))
            });
            if settles && let Some((turn, stop_at)) = self.interrupting.get(thread) {
                let detail = format!(
                    "the turn {turn} interrupted by thread/stop at {stop_at} (thread {thread:?}) settled at {at}, after the stop's answer at {answered}: the interrupted turn's turn.boundary must be on the wire before the response"
                );
                self.violation(SETTLES_BEFORE_RESULT, || detail);
            }
            if settles || !self.interrupting.contains_key(thread) {
                self.late_settlement.remove(thread);
            }
        } else if !self.detached.is_empty()
            && let Some(answered) = self.detached.remove(thread)
        {
            self.violation(NOTHING_AFTER_STOP, || format!(
                "thread/delta for thread {thread:?} at {at}, after the thread/stop answer at {answered}: the runtime had detached the thread"
            ));
        }
        for d in drops {
            let key = d
                .key
                .as_ref()
                .map(|k| format!(" (key {k})"))
                .unwrap_or_default();
            let what = if d.kind == "turn.boundary" {
                "no turn is open to settle".to_string()
            } else {
                "no turn is open and it carries no noTurnFallback".to_string()
            };
            self.violation(DELTA_OUTSIDE_TURN, || {
                format!(
                    "{}{key} at {at} on thread {:?}: {what}; bb's assembler drops it without a trace",
                    d.kind, d.thread
                )
            });
        }
        for e in events {
            let Some(turn) = e.turn_id() else {
                continue;
            };
            match e.ty() {
                Some("turn/started") if self.room(at) => {
                    self.open_count += 1;
                    self.open_turns
                        .entry(thread.to_string())
                        .or_default()
                        .push(turn.to_string());
                }
                Some("turn/completed") => {
                    if let Some(open) = self.open_turns.get_mut(thread) {
                        let before = open.len();
                        open.retain(|t| t != turn);
                        self.open_count -= before - open.len();
                        if open.is_empty() {
                            self.open_turns.remove(thread);
                        }
                    }
                    if let Some((t, stop_at)) = self.interrupting.get(thread)
                        && t == turn
                    {
                        let stop_at = stop_at.clone();
                        let left: Vec<String> = forgotten
                            .iter()
                            .filter(|f| f.turn == turn)
                            .map(|f| format!("{} {}", f.shape, f.id))
                            .collect();
                        if !left.is_empty() {
                            let detail = format!(
                                "the turn {turn} interrupted by thread/stop at {stop_at} (thread {thread:?}) settled at {at} with {} item(s) still open ({}): an interrupt closes provider-owned open items explicitly (item.close / item.textClose); bb's assembler forgets them unsettled, so the timeline shows them running",
                                left.len(),
                                left.join(", ")
                            );
                            self.violation(INTERRUPT_CLOSES_ITEMS, || detail);
                        }
                        let status = e.field("status").as_str().unwrap_or("?");
                        if status != "interrupted" {
                            let detail = format!(
                                "the turn interrupted by thread/stop at {stop_at} (thread {thread:?}) settled with status {status:?} at {at}; an interrupt settles it \"interrupted\""
                            );
                            self.violation(INTERRUPT_SETTLES_INTERRUPTED, || detail);
                        }
                        self.interrupting.remove(thread);
                    }
                }
                _ => {}
            }
        }
    }

    /// [`THREAD_ID_ECHOED`]'s verdict (live): every valid `thread/delta` names a threadId a
    /// runtime request named.
    pub fn thread_id_echoed(&self) -> Verdict {
        if let Some((at, thread)) = &self.foreign_thread_first {
            let n = self.foreign_thread_deltas;
            let mut named: Vec<&String> = self.named_threads.iter().collect();
            named.sort();
            named.truncate(5);
            return Verdict::fail(
                THREAD_ID_ECHOED,
                format!(
                    "{n} thread/delta message(s) under a threadId the runtime never named (first: {thread:?} at {at}; the runtime named {named:?}): the threadId is echoed verbatim, and bb's runtime routes a delta by it, so these reach no thread"
                ),
            );
        }
        if let Some(at) = &self.named_overflow {
            return Verdict::not_run(
                THREAD_ID_ECHOED,
                format!(
                    "the judge's bound ({MAX_TRACKED} named threads) was reached at {at}; later deltas were not judged"
                ),
            );
        }
        if self.deltas_seen == 0 {
            return Verdict::not_run(
                THREAD_ID_ECHOED,
                "no valid thread/delta was received to judge",
            );
        }
        let mut v = Verdict::pass(THREAD_ID_ECHOED);
        v.detail = format!(
            "{} thread/delta message(s), each under a threadId the runtime named",
            self.deltas_seen
        );
        v
    }

    /// Whether `rule` passes only because nothing of its kind was sent: no thread/identity
    /// notification for the identity rules, no provider/recovery notification for the hint
    /// rule (a pass then says so, and holds of a whole run; of a run cut short it is no
    /// evidence).
    pub fn saw_none_for(&self, rule: &str) -> bool {
        match rule {
            IDENTITY_BEFORE_DELTAS | IDENTITY_ECHOES_HANDLE => self.identities_seen == 0,
            HINT_NAMES_HOSTED_THREAD => self.hints_seen == 0,
            _ => false,
        }
    }

    /// One verdict per wire rule; `id` maps a rule to its verdict id (e.g. a cell prefix).
    /// A stop rule that saw no stop is *not run*, with the reason.
    /// When the traffic was cut short ([`WireJudge::stalled`]), a verdict that could not
    /// judge says so, naming the stall.
    pub fn verdicts(&self, id: impl Fn(&str) -> String) -> Vec<Verdict> {
        let mut out = self.verdicts_seen(id);
        if let Some(stall) = &self.stalled {
            for v in &mut out {
                if matches!(v.status, Status::Skipped | Status::NotRun)
                    && !v.detail.contains(stall.as_str())
                {
                    v.detail = format!("{} (the traffic was cut short: {stall})", v.detail);
                }
            }
        }
        out
    }

    /// The interrupted turns whose stop was answered while they were open and that had not
    /// settled when the traffic ended: (thread, turn, where the stop was sent, where answered).
    fn answered_unsettled(&self) -> Vec<(&str, &str, &str, &str)> {
        let mut out: Vec<(&str, &str, &str, &str)> = self
            .late_settlement
            .iter()
            .filter_map(|(thread, answered)| {
                let (turn, stop_at) = self.interrupting.get(thread)?;
                Some((
                    thread.as_str(),
                    turn.as_str(),
                    stop_at.as_str(),
                    answered.as_str(),
                ))
            })
            .collect();
        out.sort();
        out
    }

    fn verdicts_seen(&self, id: impl Fn(&str) -> String) -> Vec<Verdict> {
        RULES
            .iter()
            .map(|rule| {
                let mine: Vec<&Violation> =
                    self.violations.iter().filter(|v| v.rule == *rule).collect();
                let stop_rule = matches!(
                    *rule,
                    INTERRUPT_SETTLES_INTERRUPTED
                        | INTERRUPT_CLOSES_ITEMS
                        | NOTHING_AFTER_STOP
                        | SETTLES_BEFORE_RESULT
                );
                let overflow = match *rule {
                    VOUCHED_KEY_OPENED => self.keys_overflow.as_ref().map(|at| {
                        format!(
                            "the judge's bound ({MAX_TRACKED} opened turn keys) was reached at {at}; deltas scoped by later keys were not judged"
                        )
                    }),
                    _ => self.overflow.as_ref().filter(|_| stop_rule).map(|at| {
                        format!(
                            "the judge's bound ({MAX_TRACKED} open turns, pending stops and stopped threads) was reached at {at}; later stops were not judged"
                        )
                    }),
                };
                if let Some(first) = mine.first() {
                    let total = self.violation_counts.get(rule).copied().unwrap_or(mine.len());
                    let mut more: Vec<String> =
                        mine.iter().skip(1).map(|v| v.detail.clone()).collect();
                    if total > mine.len() {
                        more.push(format!(
                            "… {} more not kept (the first {MAX_KEPT_PER_RULE} are)",
                            total - mine.len()
                        ));
                    }
                    more.extend(overflow);
                    let detail = if total == 1 {
                        first.detail.clone()
                    } else {
                        format!("{} (and {} more)", first.detail, total - 1)
                    };
                    return Verdict::fail(&id(rule), detail).with_context(more);
                }
                if let Some(why) = overflow {
                    // Some stops went unjudged: no pass on evidence not seen.
                    return Verdict::not_run(&id(rule), why);
                }
                if *rule == SETTLES_BEFORE_RESULT
                    && let Some(&(thread, turn, stop_at, answered)) =
                        self.answered_unsettled().first()
                {
                    let n = self.answered_unsettled().len();
                    let more = if n > 1 {
                        format!(" (and {} more)", n - 1)
                    } else {
                        String::new()
                    };
                    let what = format!(
                        "the thread/stop at {stop_at} (thread {thread:?}) was answered at {answered} while the turn {turn} it interrupted was open, and the turn had not settled when the traffic ended{more}"
                    );
                    return match &self.stalled {
                        // The rest of the traffic is missing: the stall owns the fault.
                        Some(stall) => Verdict::skipped(
                            &id(rule),
                            format!("could not be judged apart from the stall ({stall}): {what}"),
                        ),
                        None => Verdict::fail(
                            &id(rule),
                            format!(
                                "{what}: the interrupted turn's turn.boundary must be on the wire before the response"
                            ),
                        ),
                    };
                }
                if matches!(*rule, INTERRUPT_SETTLES_INTERRUPTED | INTERRUPT_CLOSES_ITEMS)
                    && let Some((thread, (turn, stop_at))) = self.interrupting.iter().min()
                {
                    // The status of a turn that never settled was not seen: no pass. Its
                    // missing settlement is stop/interrupt-settles-before-result's fault.
                    let more = self.interrupting.len() - 1;
                    let more = if more > 0 {
                        format!(" (and {more} more)")
                    } else {
                        String::new()
                    };
                    return Verdict::skipped(
                        &id(rule),
                        format!(
                            "could not be judged: the turn {turn} interrupted by thread/stop at {stop_at} (thread {thread:?}) never settled{more}, so {} was not seen (see stop/interrupt-settles-before-result)",
                            if *rule == INTERRUPT_CLOSES_ITEMS {
                                "what it left open"
                            } else {
                                "its status"
                            }
                        ),
                    );
                }
                let not_run = match *rule {
                    // The rules that read what the runtime sent cannot be judged without it.
                    INTERRUPT_SETTLES_INTERRUPTED
                    | INTERRUPT_CLOSES_ITEMS
                    | SETTLES_BEFORE_RESULT
                    | NOTHING_AFTER_STOP
                    | IDENTITY_BEFORE_DELTAS
                    | IDENTITY_ECHOES_HANDLE
                        if !self.runtime_seen =>
                    {
                        Some("no runtime→bridge lines to judge (the recording has no runtime lane)")
                    }
                    // No pass on evidence not seen: a bridge that sent no valid delta (random
                    // bytes, say) has not shown it keeps deltas inside turns.
                    DELTA_OUTSIDE_TURN if self.deltas_seen == 0 => {
                        Some("no valid thread/delta was received to judge")
                    }
                    INTERRUPT_SETTLES_INTERRUPTED | INTERRUPT_CLOSES_ITEMS
                        if self.interrupts == 0 =>
                    {
                        Some("no thread/stop {intent: \"interrupt\"} reached an open turn")
                    }
                    SETTLES_BEFORE_RESULT if self.interrupts == 0 => {
                        Some("no thread/stop {intent: \"interrupt\"} reached an open turn")
                    }
                    SETTLES_BEFORE_RESULT if self.interrupts_answered == 0 => {
                        Some("no thread/stop {intent: \"interrupt\"} that reached an open turn was answered")
                    }
                    NOTHING_AFTER_STOP if self.stops_answered == 0 => {
                        Some("no thread/stop was answered")
                    }
                    VOUCHED_KEY_OPENED if self.deltas_seen == 0 => {
                        Some("no valid thread/delta was received to judge")
                    }
                    HINT_NAMES_HOSTED_THREAD if self.unjudged_hints > 0 => {
                        Some("no runtime→bridge lines to judge (the recording has no runtime lane), so which threads the process hosted is not known")
                    }
                    HINT_NAMES_HOSTED_THREAD if self.hosted_overflow.is_some() && self.thread_hints > 0 => {
                        Some("the judge's bound on hosted threads was reached, so the hints were not judged")
                    }
                    IDENTITY_ECHOES_HANDLE
                        if self.identities_seen > 0 && self.identities_paired == 0 =>
                    {
                        Some("no thread/identity notification could be paired with a construction result carrying a providerThreadId")
                    }
                    _ => None,
                };
                match not_run {
                    Some(why) => Verdict::not_run(&id(rule), why),
                    None if *rule == NOTHING_AFTER_STOP && !self.left_to_kit.is_empty() => {
                        let mut v = Verdict::pass(&id(rule));
                        v.detail = self.left_to_kit.join("; ");
                        if self.left_to_kit_more > 0 {
                            v.detail += &format!(" (and {} more)", self.left_to_kit_more);
                        }
                        v
                    }
                    None if *rule == IDENTITY_ECHOES_HANDLE => {
                        let mut v = Verdict::pass(&id(rule));
                        v.detail = if self.identities_seen == 0 {
                            "no thread/identity notification was sent (the identities rode the thread/start, resume and fork results), so none named another handle".into()
                        } else {
                            format!("{} thread/identity notification(s) echoed their session's result", self.identities_paired)
                        };
                        v
                    }
                    None if *rule == IDENTITY_BEFORE_DELTAS && self.identities_seen == 0 => {
                        // Judged on the whole wire: with no notification, none came late.
                        let mut v = Verdict::pass(&id(rule));
                        v.detail = "no thread/identity notification was sent (the identities rode the thread/start, resume and fork results), so none followed a delta".into();
                        v
                    }
                    None if *rule == HINT_NAMES_HOSTED_THREAD => {
                        let mut v = Verdict::pass(&id(rule));
                        v.detail = match (self.hints_seen, self.thread_hints) {
                            (0, _) => "no provider/recovery notification was sent, so none named a thread".into(),
                            (n, 0) => format!("{n} provider/recovery notification(s), none naming a thread"),
                            (n, t) => format!("{n} provider/recovery notification(s); the {t} naming a thread named one the process hosted"),
                        };
                        v
                    }
                    None => Verdict::pass(&id(rule)),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bb::assembler::Assembler;
    use crate::rule::Status;
    use serde_json::json;

    #[test]
    fn a_delta_under_a_thread_id_the_runtime_never_named_fails_thread_id_echoed() {
        let mut j = WireJudge::new();
        assert_eq!(j.thread_id_echoed().status, Status::NotRun);
        j.runtime(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "thread/start", "params": {"threadId": "thr_1"}}),
            "message 1",
        );
        let deltas = json!([{"kind": "turn.open"}]);
        let deltas = deltas.as_array().unwrap();
        j.bridge_delta_keys("thr_1", deltas, &|| "message 2".into());
        j.deltas_seen += 1;
        assert_eq!(j.thread_id_echoed().status, Status::Pass);
        j.bridge_delta_keys("x-thr_1", deltas, &|| "message 3".into());
        j.bridge_delta_keys("x-thr_1", deltas, &|| "message 4".into());
        let v = j.thread_id_echoed();
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.detail.starts_with("2 thread/delta message(s) under a threadId the runtime never named (first: \"x-thr_1\" at message 3; the runtime named [\"thr_1\"])"),
            "{}",
            v.detail
        );
        // Offline, a cell without the runtime's lane judges nothing.
        let mut offline = WireJudge::new();
        offline.bridge_delta_keys("x-thr_1", deltas, &|| "seq 1".into());
        assert_eq!(offline.foreign_thread_deltas, 0);
    }

    fn feed(j: &mut WireJudge, a: &mut Assembler, thread: &str, at: &str, deltas: Value) {
        let events = a.assemble(thread, deltas.as_array().unwrap());
        let drops = a.take_silent_drops();
        let forgotten = a.take_forgotten_items();
        j.bridge_delta(thread, at, &events, &drops, &forgotten);
    }

    fn status(v: &[Verdict], rule: &str) -> (Status, String) {
        let v = v.iter().find(|v| v.id == rule).unwrap();
        (v.status, v.detail.clone())
    }

    #[test]
    fn a_text_delta_before_its_turn_is_named() {
        let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
        feed(
            &mut j,
            &mut a,
            "t",
            "message 3",
            json!([{"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "early"}]),
        );
        feed(
            &mut j,
            &mut a,
            "t",
            "message 4",
            json!([{"kind": "turn.open"}, {"kind": "turn.boundary", "status": "completed"}]),
        );
        // A claiming boundary on an idle thread and a fallback are legal.
        feed(
            &mut j,
            &mut a,
            "t",
            "message 5",
            json!([{"kind": "turn.boundary", "status": "completed", "claimIfIdle": true},
            {"kind": "item.textDelta", "key": {"channel": "x"}, "channel": "agentMessage", "text": "y", "noTurnFallback": {"raw": {"jsonrpc": "2.0", "method": "m"}, "rawType": "m"}}]),
        );
        let v = j.verdicts(str::to_string);
        let (s, d) = status(&v, DELTA_OUTSIDE_TURN);
        assert_eq!(s, Status::Fail);
        assert_eq!(
            d,
            "item.textDelta (key channel \"assistant\") at message 3 on thread \"t\": no turn is open and it carries no noTurnFallback; bb's assembler drops it without a trace"
        );
        assert_eq!(j.violations.len(), 1);
        assert_eq!(status(&v, NOTHING_AFTER_STOP).0, Status::NotRun);
    }

    #[test]
    fn an_interrupt_settled_completed_and_deltas_after_the_stop_answer() {
        let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
        feed(
            &mut j,
            &mut a,
            "t",
            "message 1",
            json!([{"kind": "turn.open"}]),
        );
        j.runtime(&json!({"jsonrpc": "2.0", "id": 9, "method": "thread/stop", "params": {"threadId": "t", "intent": "interrupt"}}), "request 9");
        feed(
            &mut j,
            &mut a,
            "t",
            "message 2",
            json!([{"kind": "turn.boundary", "status": "completed"}]),
        );
        j.bridge_response(
            &json!({"jsonrpc": "2.0", "id": 9, "result": {}}),
            "message 3",
        );
        feed(
            &mut j,
            &mut a,
            "t",
            "message 4",
            json!([{"kind": "usage", "total": {}, "last": {}, "modelContextWindow": null}]),
        );
        let v = j.verdicts(|r| format!("recorded/c/{r}"));
        let (s, d) = status(&v, "recorded/c/stop/interrupt-settles-interrupted");
        assert_eq!(s, Status::Fail);
        assert!(d.contains("status \"completed\" at message 2"), "{d}");
        let (s, d) = status(&v, "recorded/c/stop/nothing-after-stop");
        assert_eq!(s, Status::Fail);
        assert!(
            d.contains("at message 4, after the thread/stop answer at message 3"),
            "{d}"
        );
        // Re-attaching the thread ends the detachment.
        j.runtime(&json!({"jsonrpc": "2.0", "id": 10, "method": "turn/start", "params": {"threadId": "t"}}), "request 10");
        let before = j.violations.len();
        feed(
            &mut j,
            &mut a,
            "t",
            "message 5",
            json!([{"kind": "turn.open"}]),
        );
        assert_eq!(j.violations.len(), before);
    }

    #[test]
    fn a_correct_interrupt_passes() {
        let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
        feed(&mut j, &mut a, "t", "m1", json!([{"kind": "turn.open"}]));
        j.runtime(&json!({"jsonrpc": "2.0", "id": "s", "method": "thread/stop", "params": {"threadId": "t", "intent": "interrupt"}}), "r1");
        feed(
            &mut j,
            &mut a,
            "t",
            "m2",
            json!([{"kind": "turn.boundary", "status": "interrupted"}]),
        );
        // A response id of another type ("s" vs 1) is not this stop's answer.
        j.bridge_response(&json!({"jsonrpc": "2.0", "id": "s", "result": {}}), "m3");
        let v = j.verdicts(str::to_string);
        assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
    }

    /// Turn lifecycle 6: the interrupted turn's boundary is on the wire before the stop's
    /// response. Settling after the answer fails naming both messages (nothing-after-stop
    /// leaves that settlement to this rule); never settling fails too, unless the traffic was
    /// cut short (a stalled replay): then it is skipped naming the stall.
    #[test]
    fn a_stop_answered_before_the_boundary_fails_settles_before_result() {
        let stop = json!({"jsonrpc": "2.0", "id": 7, "method": "thread/stop", "params": {"threadId": "t", "intent": "interrupt"}});
        let answer = json!({"jsonrpc": "2.0", "id": 7, "result": {}});
        let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
        feed(&mut j, &mut a, "t", "m1", json!([{"kind": "turn.open"}]));
        j.runtime(&stop, "r1");
        j.bridge_response(&answer, "m2");
        feed(
            &mut j,
            &mut a,
            "t",
            "m3",
            json!([{"kind": "turn.boundary", "status": "interrupted"}]),
        );
        let v = j.verdicts(str::to_string);
        let failed: Vec<&Verdict> = v.iter().filter(|v| v.status != Status::Pass).collect();
        assert_eq!(failed.len(), 1, "one fault, one verdict: {v:?}");
        assert_eq!(failed[0].id, SETTLES_BEFORE_RESULT);
        assert_eq!(failed[0].status, Status::Fail);
        assert!(
            failed[0]
                .detail
                .contains("settled at m3, after the stop's answer at m2"),
            "{}",
            failed[0].detail
        );

        // Answered with the turn open, and the turn never settles.
        let never = |stalled: Option<&str>| {
            let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
            feed(&mut j, &mut a, "t", "m1", json!([{"kind": "turn.open"}]));
            j.runtime(&stop, "r1");
            j.bridge_response(&answer, "m2");
            j.stalled = stalled.map(str::to_string);
            let v = j.verdicts(str::to_string);
            v.into_iter()
                .find(|v| v.id == SETTLES_BEFORE_RESULT)
                .unwrap()
        };
        let v = never(None);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.detail.contains("answered at m2 while the turn"),
            "{}",
            v.detail
        );
        let v = never(Some("the replay stalled: bridge exited"));
        assert_eq!(v.status, Status::Skipped, "{v:?}");
        assert!(
            v.detail.starts_with(
                "could not be judged apart from the stall (the replay stalled: bridge exited)"
            ),
            "{}",
            v.detail
        );

        // No interrupt: not run, saying why.
        let j = WireJudge::new();
        let v = j.verdicts(str::to_string);
        let v = v.iter().find(|v| v.id == SETTLES_BEFORE_RESULT).unwrap();
        assert_eq!(v.status, Status::NotRun);
    }

    /// issue 15 item 1: the judge kept every violation and every open turn. A bridge that
    /// breaks a rule on every line, or opens turns it never settles, keeps it bounded: the
    /// first violations are kept and the rest counted, and past the state bound the stop
    /// rules say they stopped judging (not a pass).
    #[test]
    fn violations_and_open_turns_are_bounded_with_a_named_overflow() {
        let (mut j, mut a) = (WireJudge::new(), Assembler::new("p"));
        let n = MAX_KEPT_PER_RULE * 3;
        for i in 0..n {
            feed(
                &mut j,
                &mut a,
                "t",
                &format!("m{i}"),
                json!([{"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "agentMessage", "text": "x"}]),
            );
        }
        assert_eq!(j.violations.len(), MAX_KEPT_PER_RULE);
        assert_eq!(j.violation_counts[DELTA_OUTSIDE_TURN], n);
        let v = j.verdicts(str::to_string);
        let d = v.iter().find(|v| v.id == DELTA_OUTSIDE_TURN).unwrap();
        assert_eq!(d.status, Status::Fail);
        assert!(
            d.detail.ends_with(&format!("(and {} more)", n - 1)),
            "{}",
            d.detail
        );
        assert!(
            d.context
                .last()
                .unwrap()
                .contains(&format!("{} more not kept", n - MAX_KEPT_PER_RULE)),
            "{:?}",
            d.context
        );

        // Turns opened on distinct threads and never settled.
        j.runtime(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
            "r0",
        );
        for i in 0..MAX_TRACKED + 5 {
            let thread = format!("t{i}");
            j.bridge_delta(
                &thread,
                &format!("turn {i}"),
                &[json!({"type": "turn/started", "scope": {"turnId": "u"}})],
                &[],
                &[],
            );
        }
        assert!(j.tracked() <= MAX_TRACKED, "{}", j.tracked());
        let at = format!("turn {MAX_TRACKED}");
        assert_eq!(j.overflow.as_deref(), Some(at.as_str()));
        let v = j.verdicts(str::to_string);
        for rule in [INTERRUPT_SETTLES_INTERRUPTED, NOTHING_AFTER_STOP] {
            let x = v.iter().find(|v| v.id == rule).unwrap();
            assert_eq!(x.status, Status::NotRun, "{rule}: {x:?}");
            assert!(
                x.detail.contains(&format!("was reached at {at}")),
                "{}",
                x.detail
            );
        }
    }

    /// The first identity after a construction echoes its result's handle, whichever came
    /// first; a later identity with a new handle re-keys the session (bb's claude-code corpus,
    /// `stop-interrupt`: the result's handle, then the one the first prompt created) and passes.
    #[test]
    fn a_sessions_identity_echoes_its_results_handle_and_may_re_key_later() {
        let verdict = |lines: &[(bool, Value)]| {
            let mut j = WireJudge::new();
            for (n, (from_bridge, m)) in lines.iter().enumerate() {
                let at = format!("m{n}");
                match (*from_bridge, m.get("method").and_then(Value::as_str)) {
                    (false, _) => j.runtime(m, &at),
                    (true, Some("thread/identity")) => j.bridge_identity_at(
                        m["params"]["threadId"].as_str().unwrap(),
                        m["params"]["providerThreadId"].as_str(),
                        &|| at.clone(),
                    ),
                    (true, _) => j.bridge_response(m, &at),
                }
            }
            let v = j.verdicts(str::to_string);
            v.into_iter()
                .find(|v| v.id == IDENTITY_ECHOES_HANDLE)
                .unwrap()
        };
        let start = (
            false,
            json!({"jsonrpc": "2.0", "id": 1, "method": "thread/start", "params": {"threadId": "t"}}),
        );
        let result = |h: &str| {
            (
                true,
                json!({"jsonrpc": "2.0", "id": 1, "result": {"providerThreadId": h}}),
            )
        };
        let identity = |h: &str| {
            (
                true,
                json!({"jsonrpc": "2.0", "method": "thread/identity", "params": {"threadId": "t", "providerThreadId": h}}),
            )
        };
        let re_keyed = verdict(&[start.clone(), identity("a"), result("a"), identity("b")]);
        assert_eq!(re_keyed.status, Status::Pass, "{re_keyed:?}");
        let result_first = verdict(&[start.clone(), result("a"), identity("a")]);
        assert_eq!(result_first.status, Status::Pass, "{result_first:?}");
        let other = verdict(&[start.clone(), result("a"), identity("x"), identity("a")]);
        assert_eq!(other.status, Status::Fail, "{other:?}");
        assert!(
            other.detail.contains(
                "at m2 names \"x\", but the result at m1 returned providerThreadId \"a\""
            ),
            "{}",
            other.detail
        );
        let none = verdict(&[start, result("a")]);
        assert_eq!(none.status, Status::Pass);
        assert!(
            none.detail
                .contains("no thread/identity notification was sent"),
            "{}",
            none.detail
        );
    }
}

//! The delta assembler: `thread/delta` batches → ThreadEvents (reference §12).
//!
//! A pure state machine: deltas go in, events come out, nothing else. It owns every timeline
//! invariant the protocol gives the runtime: turn and item id minting, turn lifecycle, item
//! lifecycle (synthesized opens, reclassification, dedup of repeated closes), accumulation of
//! streamed text and command output, and the progress throttle.
//!
//! Two settings differ from bb's live runtime, on purpose and as bb's own tooling does:
//! text coalescing is off (window 0), so every text delta is one event; and the 500 ms progress
//! throttle runs on a **frozen clock**, so a non-`flush` progress for a key that already emitted
//! (or opened) is parked and never released. bb's live replay uses the wall clock there, which
//! makes its event counts timing-dependent (§16.4); bridgewire is deterministic instead.
//!
//! Ids are `da00000000-t<n>` and `da00000000-i<n>` (a fixed entropy prefix: the tooling
//! normalizes ids anyway, and fixed ids make dumps reproducible).

use super::delta::KEY_SEPARATOR;
use super::event::{Event, Fields, Scope};
use crate::jsonref::JsonView;
use crate::util::{CappedMap, CappedSet};
use crate::util::{FastMap, FastSet};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;

const PREFIX: &str = "da00000000";

/// The assembler for one bridge (all threads of a cell share it).
pub struct Assembler {
    provider_id: String,
    turn_counter: u64,
    item_counter: u64,
    threads: FastMap<String, ThreadState>,
    /// Deltas dropped without any trace (no event, no grammar drop), since the last
    /// [`Assembler::take_silent_drops`].
    silent_drops: Vec<SilentDrop>,
    /// [`Assembler::take_forgotten_items`] (at most [`MAX_FORGOTTEN`] between two calls).
    forgotten: Vec<ForgottenItem>,
    /// The thread of the batch being assembled.
    current_thread: String,
}

/// A delta bb's assembler drops without a trace: a turn-requiring delta with no turn open and
/// no `noTurnFallback`, provider input with no turn, or a boundary with no turn to settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilentDrop {
    pub thread: String,
    /// The delta's `kind`.
    pub kind: String,
    /// Its item key (`providerItemId`/`channel`/`parentRef`, as given), when it has one.
    pub key: Option<String>,
}

/// A turn-scoped item still open when its turn settled: bb's assembler forgets it, so the
/// timeline keeps it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgottenItem {
    pub thread: String,
    /// The bb turn that settled.
    pub turn: String,
    /// The item's bb id and shape.
    pub id: String,
    pub shape: String,
}

/// Forgotten items kept between two [`Assembler::take_forgotten_items`] calls (a user that
/// never takes them must not grow with the run).
const MAX_FORGOTTEN: usize = 1024;

struct ThreadState {
    current_turn: Option<String>,
    last_turn: Option<String>,
    queued_inputs: VecDeque<String>,
    /// Open items by key string, in opening order (session.ended settles them in that order).
    open_items: Vec<(String, OpenItem)>,
    cumulative_output: FastMap<String, String>,
    provider_items: CappedMap,
    provider_turns: CappedMap,
    bb_turns_to_provider: CappedMap,
    settled_keys: CappedSet,
    /// Keys whose progress clock is set (frozen clock: set means "emitted within 500 ms").
    progress_clock: FastSet<String>,
}

/// bb's caps: id maps keep 1024 entries, settled keys 512 (oldest dropped).
const MAP_CAP: usize = 1024;
const SETTLED_CAP: usize = 512;

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState {
            current_turn: None,
            last_turn: None,
            queued_inputs: VecDeque::new(),
            open_items: Vec::new(),
            cumulative_output: FastMap::default(),
            provider_items: CappedMap::new(MAP_CAP),
            provider_turns: CappedMap::new(MAP_CAP),
            bb_turns_to_provider: CappedMap::new(MAP_CAP),
            settled_keys: CappedSet::new(SETTLED_CAP),
            progress_clock: FastSet::default(),
        }
    }
}

#[derive(Clone)]
struct OpenItem {
    id: String,
    /// The delta shape type (`command`, `tool`, …) or, for synthesized text items, the channel's
    /// item type.
    shape: String,
    /// The pending event item.
    item: Value,
    /// Accumulated streamed text (agentMessage/plan text, reasoning summary or content).
    text: String,
    streamed: bool,
    channel: Option<String>,
    thread_attached: bool,
    anonymous: bool,
    parent_ref: Option<String>,
}

struct Key<'a> {
    provider_item_id: Option<&'a str>,
    channel: Option<&'a str>,
    parent_ref: Option<&'a str>,
}

impl<'a> Key<'a> {
    fn of<J: JsonView>(delta: &'a J) -> Key<'a> {
        let k = delta.get("key");
        let part = |name: &str| k.and_then(|k| k.get(name)).and_then(JsonView::as_str);
        Key {
            provider_item_id: part("providerItemId"),
            channel: part("channel"),
            parent_ref: part("parentRef"),
        }
    }

    fn string(&self) -> String {
        let mut s = String::new();
        s.push_str(self.provider_item_id.unwrap_or(""));
        s.push(KEY_SEPARATOR);
        s.push_str(self.channel.unwrap_or(""));
        s.push(KEY_SEPARATOR);
        s.push_str(self.parent_ref.unwrap_or(""));
        s
    }
}

#[derive(Clone, Copy, PartialEq)]
#[allow(clippy::upper_case_acronyms)] // V(ouched), C(urrent), L(ast)
enum TurnRule {
    /// Vouched, else current.
    Vc,
    /// Vouched, else current, else last.
    Vcl,
}

impl Assembler {
    pub fn new(provider_id: &str) -> Assembler {
        Assembler {
            provider_id: provider_id.to_string(),
            turn_counter: 0,
            item_counter: 0,
            threads: FastMap::default(),
            silent_drops: Vec::new(),
            forgotten: Vec::new(),
            current_thread: String::new(),
        }
    }

    /// The provider-native turn id behind a bb turn id (for `thread/stop.activeTurnId`).
    pub fn provider_turn_id(&self, thread_id: &str, bb_turn: &str) -> Option<&str> {
        self.threads
            .get(thread_id)?
            .bb_turns_to_provider
            .get(bb_turn)
            .map(String::as_str)
    }

    /// The current open turn of a thread.
    pub fn current_turn(&self, thread_id: &str) -> Option<&str> {
        self.threads.get(thread_id)?.current_turn.as_deref()
    }

    fn mint_turn(&mut self) -> String {
        self.turn_counter += 1;
        format!("{PREFIX}-t{}", self.turn_counter)
    }

    fn mint_item(&mut self) -> String {
        self.item_counter += 1;
        format!("{PREFIX}-i{}", self.item_counter)
    }

    /// The turn-scoped items left open when their turn settled, since the last call (bb's
    /// assembler forgets them without settling them).
    /// The thread-attached items (background tasks, background delegations) still open on
    /// `thread_id`, in opening order, as (bb id, shape): live provider work the runtime will
    /// not reap.
    pub fn open_thread_attached(&self, thread_id: &str) -> Vec<(String, String)> {
        self.threads
            .get(thread_id)
            .map(|t| {
                t.open_items
                    .iter()
                    .filter(|(_, o)| o.thread_attached)
                    .map(|(_, o)| (o.id.clone(), o.shape.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn take_forgotten_items(&mut self) -> Vec<ForgottenItem> {
        std::mem::take(&mut self.forgotten)
    }

    /// Assembles one validated batch; returns the events in order.
    /// The deltas dropped without a trace since the last call.
    pub fn take_silent_drops(&mut self) -> Vec<SilentDrop> {
        std::mem::take(&mut self.silent_drops)
    }

    fn silent_drop<J: JsonView>(&mut self, delta: &J) {
        let key = delta.get("key").filter(|k| k.is_object()).map(|k| {
            ["providerItemId", "channel", "parentRef"]
                .iter()
                .filter_map(|p| {
                    k.get(p)
                        .and_then(JsonView::as_str)
                        .map(|v| format!("{p} {v:?}"))
                })
                .collect::<Vec<_>>()
                .join(", ")
        });
        self.silent_drops.push(SilentDrop {
            thread: self.current_thread.clone(),
            kind: delta["kind"].as_str().unwrap_or("?").to_string(),
            key,
        });
    }

    pub fn assemble<J: JsonView>(&mut self, thread_id: &str, deltas: &[J]) -> Vec<Value> {
        self.assemble_events(thread_id, deltas)
            .into_iter()
            .map(Event::into_value)
            .collect()
    }

    /// [`Assembler::assemble`] with the events not yet JSON trees (what counting needs).
    pub fn assemble_events<J: JsonView>(&mut self, thread_id: &str, deltas: &[J]) -> Vec<Event> {
        let mut out = Vec::new();
        if self.current_thread != thread_id {
            self.current_thread = thread_id.to_string();
        }
        // §12.7 step 1 (flushing elapsed text windows and parked progress) never fires with
        // window 0 and a frozen clock.
        for delta in deltas {
            let kind = delta.get("kind").and_then(JsonView::as_str).unwrap_or("");
            if kind == "session.reset" {
                self.threads.remove(thread_id); // counters keep counting
                continue;
            }
            // Taken out (with its key, reused) so `apply` can borrow both.
            let (key, mut st) = self
                .threads
                .remove_entry(thread_id)
                .unwrap_or_else(|| (thread_id.to_string(), ThreadState::default()));
            self.apply(&mut st, kind, delta, &mut out);
            self.threads.insert(key, st);
        }
        out
    }

    fn resolve_turn<J: JsonView>(
        &mut self,
        st: &mut ThreadState,
        delta: &J,
        rule: TurnRule,
    ) -> Option<String> {
        if let Some(ptid) = delta.get("providerTurnId").and_then(JsonView::as_str) {
            return Some(self.vouched_turn(st, ptid));
        }
        match rule {
            TurnRule::Vc => st.current_turn.clone(),
            TurnRule::Vcl => st.current_turn.clone().or_else(|| st.last_turn.clone()),
        }
    }

    fn vouched_turn(&mut self, st: &mut ThreadState, ptid: &str) -> String {
        if let Some(t) = st.provider_turns.get(ptid) {
            return t.clone();
        }
        let t = self.mint_turn();
        st.provider_turns.insert(ptid.to_string(), t.clone());
        st.bb_turns_to_provider.insert(t.clone(), ptid.to_string());
        t
    }

    /// The bb item id for a provider item id, minting and registering one when unknown.
    fn mapped_item(&mut self, st: &mut ThreadState, pid: &str) -> String {
        if let Some(id) = st.provider_items.get(pid) {
            return id.clone();
        }
        let id = self.mint_item();
        st.provider_items.insert(pid.to_string(), id.clone());
        id
    }

    fn parent_tool_call_id(
        &mut self,
        st: &mut ThreadState,
        parent_ref: Option<&str>,
    ) -> Option<String> {
        parent_ref.map(|p| self.mapped_item(st, p))
    }

    fn open_turn(&mut self, st: &mut ThreadState, out: &mut Vec<Event>) -> String {
        if let Some(t) = &st.current_turn {
            return t.clone();
        }
        let t = self.mint_turn();
        st.current_turn = Some(t.clone());
        out.push(event("turn/started", turn_scope(&t), Fields::new()));
        while let Some(client) = st.queued_inputs.pop_front() {
            out.push(event(
                "turn/input/accepted",
                turn_scope(&t),
                Fields::from([("clientRequestId", Value::String(client))]),
            ));
        }
        t
    }

    fn finish_turn(&mut self, st: &mut ThreadState) {
        let settled = st.current_turn.take();
        if let Some(t) = &settled {
            st.last_turn = Some(t.clone());
        }
        // What bb forgets here stays started forever on the timeline: kept for the wire judge.
        for (_, item) in st.open_items.iter().filter(|(_, i)| !i.thread_attached) {
            if self.forgotten.len() < MAX_FORGOTTEN {
                self.forgotten.push(ForgottenItem {
                    thread: self.current_thread.clone(),
                    turn: settled.clone().unwrap_or_default(),
                    id: item.id.clone(),
                    shape: item.shape.clone(),
                });
            }
        }
        st.open_items.retain(|(_, item)| item.thread_attached);
        st.cumulative_output.clear();
    }

    fn fallback<J: JsonView>(&mut self, st: &mut ThreadState, delta: &J, out: &mut Vec<Event>) {
        let Some(fb) = delta.get("noTurnFallback") else {
            return self.silent_drop(delta);
        };
        let parent = Key::of(delta).parent_ref;
        let mut fields = Fields::from([
            ("providerId", Value::String(self.provider_id.clone())),
            (
                "rawType",
                fb.get("rawType")
                    .map(JsonView::to_value)
                    .unwrap_or(Value::Null),
            ),
            (
                "rawEvent",
                fb.get("raw").map(JsonView::to_value).unwrap_or(Value::Null),
            ),
        ]);
        if let Some(p) = self.parent_tool_call_id(st, parent) {
            fields.insert("parentToolCallId", Value::String(p));
        }
        out.push(event("provider/unhandled", thread_scope(), fields));
    }

    fn find_open(st: &ThreadState, key: &str) -> Option<usize> {
        st.open_items.iter().position(|(k, _)| k == key)
    }

    fn apply<J: JsonView>(
        &mut self,
        st: &mut ThreadState,
        kind: &str,
        d: &J,
        out: &mut Vec<Event>,
    ) {
        match kind {
            "input.accepted" => {
                let client = d["clientRequestId"].as_str().unwrap_or("").to_string();
                match self.resolve_turn(st, d, TurnRule::Vc) {
                    Some(t) => out.push(event(
                        "turn/input/accepted",
                        turn_scope(&t),
                        Fields::from([("clientRequestId", Value::String(client))]),
                    )),
                    None => st.queued_inputs.push_back(client),
                }
            }
            "input.provider" => {
                let Some(t) = st.current_turn.clone() else {
                    return self.silent_drop(d);
                };
                let id = self.mint_item();
                let mut item = obj([
                    ("type", json!("userMessage")),
                    ("id", Value::String(id)),
                    (
                        "content",
                        json!([{"type": "text", "text": d["text"].to_value()}]),
                    ),
                ]);
                if let Some(p) =
                    self.parent_tool_call_id(st, d.get("parentRef").and_then(JsonView::as_str))
                {
                    item.insert("parentToolCallId".into(), Value::String(p));
                }
                out.push(event(
                    "item/completed",
                    turn_scope(&t),
                    Fields::from([("item", Value::Object(item))]),
                ));
            }
            "turn.open" => {
                if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
                    let t = self.vouched_turn(st, ptid);
                    let mut fields = Fields::new();
                    if let Some(p) =
                        self.parent_tool_call_id(st, d.get("parentRef").and_then(JsonView::as_str))
                    {
                        fields.insert("parentToolCallId", Value::String(p));
                    }
                    out.push(event("turn/started", turn_scope(&t), fields));
                } else {
                    self.open_turn(st, out);
                }
            }
            "turn.boundary" => {
                let mut fields = Fields::from([("status", d["status"].to_value())]);
                if let Some(e) = d.get("error") {
                    fields.insert("error", e.to_value());
                }
                if let Some(c) = d.get("providerCheckpointId") {
                    fields.insert("providerCheckpointId", c.to_value());
                }
                if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
                    let t = self.vouched_turn(st, ptid);
                    out.push(event("turn/completed", turn_scope(&t), fields));
                    return;
                }
                let turn = match st.current_turn.clone() {
                    Some(t) => t,
                    None if d.get("claimIfIdle").is_some_and(JsonView::is_true)
                        && !st.queued_inputs.is_empty() =>
                    {
                        self.open_turn(st, out)
                    }
                    // A claiming boundary on an idle thread settles nothing, by design.
                    None if d.get("claimIfIdle").is_some_and(JsonView::is_true) => return,
                    None => return self.silent_drop(d),
                };
                out.push(event("turn/completed", turn_scope(&turn), fields));
                self.finish_turn(st);
            }
            "item.open" => self.item_open(st, d, out),
            "item.close" => self.item_close(st, d, out),
            "item.progress" => self.item_progress(st, d, out),
            "item.textDelta" => self.text_delta(st, d, out),
            "item.textClose" => self.text_close(st, d, out),
            "item.outputDelta" => {
                let Some(t) = self.resolve_turn(st, d, TurnRule::Vc) else {
                    return self.fallback(st, d, out);
                };
                let key = Key::of(d);
                let id = match Self::find_open(st, &key.string()) {
                    Some(i) => st.open_items[i].1.id.clone(),
                    None => match key.provider_item_id {
                        Some(pid) => self.mapped_item(st, pid),
                        None => self.mint_item(),
                    },
                };
                let ty = if d["channel"].is_str("fileChange") {
                    "item/fileChange/outputDelta"
                } else {
                    "item/commandExecution/outputDelta"
                };
                let mut fields = Fields::from([
                    ("itemId", Value::String(id)),
                    ("delta", d["text"].to_value()),
                ]);
                if let Some(p) = self.parent_tool_call_id(st, key.parent_ref) {
                    fields.insert("parentToolCallId", Value::String(p));
                }
                out.push(event(ty, turn_scope(&t), fields));
            }
            "command.outputSnapshot" => {
                let Some(t) = st.current_turn.clone() else {
                    return self.fallback(st, d, out);
                };
                let key = Key::of(d);
                let ks = key.string();
                let Some(i) = Self::find_open(st, &ks) else {
                    return;
                };
                let id = st.open_items[i].1.id.clone();
                let text = d["text"].as_str().unwrap_or("");
                let prev = st.cumulative_output.get(&ks).cloned().unwrap_or_default();
                if text.is_empty() || text == prev {
                    return;
                }
                let mut fields = Fields::from([("itemId", Value::String(id))]);
                if let Some(suffix) = text.strip_prefix(prev.as_str()) {
                    fields.insert("delta", Value::String(suffix.to_string()));
                } else {
                    fields.insert("delta", Value::String(text.to_string()));
                    fields.insert("reset", Value::Bool(true));
                }
                if let Some(p) = self.parent_tool_call_id(st, key.parent_ref) {
                    fields.insert("parentToolCallId", Value::String(p));
                }
                st.cumulative_output.insert(ks, text.to_string());
                out.push(event(
                    "item/commandExecution/outputDelta",
                    turn_scope(&t),
                    fields,
                ));
            }
            "usage" => {
                let Some(t) = self.resolve_turn(st, d, TurnRule::Vcl) else {
                    return;
                };
                let usage = obj([
                    ("total", d["total"].to_value()),
                    ("last", d["last"].to_value()),
                    ("modelContextWindow", d["modelContextWindow"].to_value()),
                ]);
                out.push(event(
                    "thread/tokenUsage/updated",
                    turn_scope(&t),
                    Fields::from([("tokenUsage", Value::Object(usage))]),
                ));
            }
            "contextWindow" => {
                let turn = if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
                    Some(self.vouched_turn(st, ptid))
                } else if d["attach"].is_str("open") {
                    st.current_turn.clone()
                } else {
                    st.current_turn.clone().or_else(|| st.last_turn.clone())
                };
                let mut usage = Map::new();
                if let Some(snap) = d.get("snapshot").filter(|s| s.is_object()) {
                    usage.insert(
                        "usedTokens".into(),
                        snap.get("usedTokens")
                            .map(JsonView::to_value)
                            .unwrap_or(Value::Null),
                    );
                    usage.insert(
                        "modelContextWindow".into(),
                        snap.get("contextWindowTokens")
                            .map(JsonView::to_value)
                            .unwrap_or(Value::Null),
                    );
                    usage.insert(
                        "estimated".into(),
                        snap.get("estimated")
                            .map(JsonView::to_value)
                            .unwrap_or(Value::Bool(false)),
                    );
                    usage.insert("snapshot".into(), snap.to_value());
                } else {
                    usage.insert("usedTokens".into(), d["used"].to_value());
                    usage.insert(
                        "modelContextWindow".into(),
                        d.get("size").map(JsonView::to_value).unwrap_or(Value::Null),
                    );
                    usage.insert("estimated".into(), d["estimated"].to_value());
                }
                let scope = turn.as_deref().map(turn_scope).unwrap_or_else(thread_scope);
                out.push(event(
                    "thread/contextWindowUsage/updated",
                    scope,
                    Fields::from([("contextWindowUsage", Value::Object(usage))]),
                ));
            }
            "context.compacted" => match self.resolve_turn(st, d, TurnRule::Vcl) {
                Some(t) => out.push(event("thread/compacted", turn_scope(&t), Fields::new())),
                None => self.fallback(st, d, out),
            },
            "context.cleared" => {
                if let Some(t) = st.current_turn.clone().or_else(|| st.last_turn.clone()) {
                    out.push(event(
                        "thread/context/cleared",
                        turn_scope(&t),
                        Fields::new(),
                    ));
                }
            }
            "turn.diff" => {
                if let Some(t) = self.resolve_turn(st, d, TurnRule::Vc) {
                    out.push(event(
                        "turn/diff/updated",
                        turn_scope(&t),
                        Fields::from([("diff", d["diff"].to_value())]),
                    ));
                }
            }
            "provider.error" => {
                let turn = if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
                    Some(self.vouched_turn(st, ptid))
                } else if d.get("threadScoped").is_some_and(JsonView::is_true) {
                    None
                } else if st.current_turn.is_some() {
                    st.current_turn.clone()
                } else if !st.queued_inputs.is_empty() {
                    Some(self.open_turn(st, out))
                } else {
                    None
                };
                let mut fields = Fields::from([("message", d["message"].to_value())]);
                for f in ["detail", "willRetry", "errorInfo"] {
                    if let Some(v) = d.get(f) {
                        fields.insert(f, v.to_value());
                    }
                }
                let scope = turn.as_deref().map(turn_scope).unwrap_or_else(thread_scope);
                out.push(event("provider/error", scope, fields));
                if d.get("settlesTurn").is_some_and(JsonView::is_true)
                    && let Some(t) = turn
                {
                    out.push(event(
                        "turn/completed",
                        turn_scope(&t),
                        Fields::from([("status", json!("failed"))]),
                    ));
                    if st.current_turn.as_deref() == Some(t.as_str()) {
                        self.finish_turn(st);
                    }
                }
            }
            "provider.modelFallback" => {
                let turn = st.current_turn.clone().or_else(|| st.last_turn.clone());
                let fields = Fields::from([
                    ("originalModel", d["originalModel"].to_value()),
                    ("fallbackModel", d["fallbackModel"].to_value()),
                    ("reason", d["reason"].to_value()),
                    ("message", d["message"].to_value()),
                ]);
                let scope = turn.as_deref().map(turn_scope).unwrap_or_else(thread_scope);
                out.push(event("provider/modelFallback", scope, fields));
            }
            "provider.warning" => {
                let turn = if d.get("vouchedTurn").is_some_and(JsonView::is_true) {
                    st.current_turn.clone()
                } else {
                    None
                };
                let mut fields = Fields::from([(
                    "category",
                    d.get("category")
                        .map(JsonView::to_value)
                        .unwrap_or_else(|| json!("general")),
                )]);
                for f in ["summary", "details"] {
                    if let Some(v) = d.get(f) {
                        fields.insert(f, v.to_value());
                    }
                }
                let scope = turn.as_deref().map(turn_scope).unwrap_or_else(thread_scope);
                out.push(event("provider/warning", scope, fields));
            }
            "unhandled" => {
                let turn = if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
                    Some(self.vouched_turn(st, ptid))
                } else if d.get("vouchedTurn").is_some_and(JsonView::is_true) {
                    st.current_turn.clone()
                } else {
                    None
                };
                if d.get("onlyIfNoTurn").is_some_and(JsonView::is_true) && st.current_turn.is_some()
                {
                    return;
                }
                let mut fields = Fields::from([
                    ("providerId", Value::String(self.provider_id.clone())),
                    ("rawType", d["rawType"].to_value()),
                    ("rawEvent", d["raw"].to_value()),
                ]);
                if let Some(p) =
                    self.parent_tool_call_id(st, d.get("parentRef").and_then(JsonView::as_str))
                {
                    fields.insert("parentToolCallId", Value::String(p));
                }
                let scope = turn.as_deref().map(turn_scope).unwrap_or_else(thread_scope);
                out.push(event("provider/unhandled", scope, fields));
            }
            "thread.started" => {
                // `{type, threadId, scope}`: the one event without `providerThreadId`.
                let mut e = event("thread/started", thread_scope(), Fields::new());
                e.provider_thread_id = None;
                out.push(e);
            }
            "thread.identity" => {
                let mut e = event("thread/identity", thread_scope(), Fields::new());
                e.provider_thread_id = Some(d["providerThreadId"].to_value());
                out.push(e);
            }
            "thread.name" => out.push(event(
                "thread/name/updated",
                thread_scope(),
                Fields::from([("threadName", d["name"].to_value())]),
            )),
            "provider.rateLimits" => out.push(event(
                "provider/rateLimits/updated",
                thread_scope(),
                Fields::from([("rateLimits", d["rateLimits"].to_value())]),
            )),
            "extension.state" => out.push(event(
                "thread/extensionState/updated",
                thread_scope(),
                Fields::from([
                    ("kind", d["extensionKind"].to_value()),
                    ("payload", d["payload"].to_value()),
                ]),
            )),
            "session.ended" => {
                let turn = if st.current_turn.is_some() {
                    st.current_turn.clone()
                } else if !st.queued_inputs.is_empty() {
                    Some(self.open_turn(st, out))
                } else {
                    None
                };
                let Some(t) = turn else {
                    return;
                };
                let open: Vec<OpenItem> = st
                    .open_items
                    .iter()
                    .filter(|(_, i)| !i.thread_attached)
                    .map(|(_, i)| i.clone())
                    .collect();
                for item in open {
                    let settled = if item.streamed {
                        text_item(&item, &item.text)
                    } else {
                        let mut v = item.item.clone();
                        if v.get("status").is_some() {
                            v["status"] = json!("interrupted");
                        }
                        v
                    };
                    out.push(event(
                        "item/completed",
                        turn_scope(&t),
                        Fields::from([("item", settled)]),
                    ));
                }
                out.push(event(
                    "turn/completed",
                    turn_scope(&t),
                    Fields::from([("status", json!("interrupted"))]),
                ));
                // Settled just above: not forgotten by the turn's end (an interrupt the real
                // Claude bridge settles with session.ended alone failed
                // stop/interrupt-closes-items, "2 item(s) still open").
                st.open_items.retain(|(_, item)| item.thread_attached);
                self.finish_turn(st);
            }
            _ => {}
        }
    }

    fn item_open<J: JsonView>(&mut self, st: &mut ThreadState, d: &J, out: &mut Vec<Event>) {
        let turn = if let Some(ptid) = d.get("providerTurnId").and_then(JsonView::as_str) {
            Some(self.vouched_turn(st, ptid))
        } else if d.get("attach").and_then(JsonView::as_str) == Some("currentOrLast") {
            st.current_turn.clone().or_else(|| st.last_turn.clone())
        } else {
            st.current_turn.clone()
        };
        let Some(t) = turn else {
            return self.fallback(st, d, out);
        };
        let key = Key::of(d);
        let ks = key.string();
        st.settled_keys.remove(&ks);
        let shape_ty = d["item"]["type"].as_str().unwrap_or("").to_string();
        if shape_ty != "compaction" {
            st.open_items.retain(|(_, i)| {
                !(i.anonymous
                    && i.shape == "agentMessage"
                    && i.parent_ref.as_deref() == key.parent_ref)
            });
        }
        let id = match key.provider_item_id {
            Some(pid) => self.mapped_item(st, pid),
            None => self.mint_item(),
        };
        let parent = self.parent_tool_call_id(st, key.parent_ref);
        let item = build_item(&d["item"], &id, ItemPhase::Open, d, parent.as_deref(), None);
        let open = OpenItem {
            id,
            shape: shape_ty.clone(),
            item: item.clone(),
            text: String::new(),
            streamed: false,
            channel: None,
            thread_attached: is_thread_attached(&d["item"]),
            anonymous: key.provider_item_id.is_none(),
            parent_ref: key.parent_ref.map(str::to_string),
        };
        match Self::find_open(st, &ks) {
            Some(i) => st.open_items[i].1 = open,
            None => st.open_items.push((ks.clone(), open)),
        }
        st.progress_clock.insert(ks);
        out.push(event(
            "item/started",
            turn_scope(&t),
            Fields::from([("item", item)]),
        ));
    }

    fn item_close<J: JsonView>(&mut self, st: &mut ThreadState, d: &J, out: &mut Vec<Event>) {
        let attached = is_thread_attached(&d["item"]);
        let turn = self.resolve_turn(st, d, TurnRule::Vc);
        if turn.is_none() && !attached {
            return self.fallback(st, d, out);
        }
        let key = Key::of(d);
        let ks = key.string();
        if key.provider_item_id.is_some() && st.settled_keys.contains(&ks) {
            return; // a repeated close of a settled provider item
        }
        let shape_ty = d["item"]["type"].as_str().unwrap_or("");
        let open = Self::find_open(st, &ks).map(|i| st.open_items[i].1.clone());
        let parent = self.parent_tool_call_id(st, key.parent_ref);
        if let (Some(o), Some(t)) = (&open, &turn)
            && o.shape != shape_ty
        {
            // Mid-flight reclassification: settle the started item first, under the same id.
            let mut first = o.item.clone();
            if first.get("status").is_some() {
                first["status"] = d["status"].to_value();
            }
            out.push(event(
                "item/completed",
                turn_scope(t),
                Fields::from([("item", first)]),
            ));
        }
        let id = match (&open, key.provider_item_id) {
            (Some(o), _) => o.id.clone(),
            (None, Some(pid)) => self.mapped_item(st, pid),
            (None, None) => self.mint_item(),
        };
        let open_presentation = open
            .as_ref()
            .and_then(|o| o.item.get("presentation").cloned());
        let item = build_item(
            &d["item"],
            &id,
            ItemPhase::Close,
            d,
            parent.as_deref(),
            open_presentation,
        );
        let item = match (&open, shape_ty) {
            // A close without summary keeps the open delegation's summary.
            (Some(o), "delegation")
                if item.get("summary").is_none() && o.item.get("summary").is_some() =>
            {
                let mut v = item;
                v["summary"] = o.item["summary"].clone();
                v
            }
            _ => item,
        };
        if let Some(i) = Self::find_open(st, &ks) {
            st.open_items.remove(i);
        }
        st.cumulative_output.remove(&ks);
        st.progress_clock.remove(&ks);
        if key.provider_item_id.is_some() {
            st.settled_keys.insert(&ks);
        }
        let background_delegation = shape_ty == "delegation" && d["item"]["background"].is_true();
        if shape_ty == "backgroundTask" {
            out.push(event(
                "item/backgroundTask/completed",
                thread_scope(),
                Fields::from([("item", item)]),
            ));
        } else if background_delegation {
            out.push(event(
                "item/delegation/completed",
                thread_scope(),
                Fields::from([("item", item)]),
            ));
        } else if let Some(t) = turn {
            out.push(event(
                "item/completed",
                turn_scope(&t),
                Fields::from([("item", item)]),
            ));
        }
    }

    fn item_progress<J: JsonView>(&mut self, st: &mut ThreadState, d: &J, out: &mut Vec<Event>) {
        let key = Key::of(d);
        let ks = key.string();
        let snapshot_ty = d
            .get("snapshot")
            .and_then(|s| s.get("type"))
            .and_then(JsonView::as_str)
            .map(str::to_string);
        let turn = if snapshot_ty.is_some() {
            None
        } else {
            match self.resolve_turn(st, d, TurnRule::Vc) {
                Some(t) => Some(t),
                None => return self.fallback(st, d, out),
            }
        };
        let id = match Self::find_open(st, &ks) {
            Some(i) => st.open_items[i].1.id.clone(),
            None => match key.provider_item_id {
                Some(pid) => st
                    .provider_items
                    .get(pid)
                    .cloned()
                    .unwrap_or_else(|| pid.to_string()),
                None => self.mint_item(),
            },
        };
        let parent = self.parent_tool_call_id(st, key.parent_ref);
        let ev = match snapshot_ty.as_deref() {
            Some(ty) => {
                let item = build_item(
                    &d["snapshot"],
                    &id,
                    ItemPhase::Snapshot,
                    d,
                    parent.as_deref(),
                    None,
                );
                let name = if ty == "delegation" {
                    "item/delegation/progress"
                } else {
                    "item/backgroundTask/progress"
                };
                event(name, thread_scope(), Fields::from([("item", item)]))
            }
            None => {
                let mut fields = Fields::from([("itemId", Value::String(id))]);
                if let Some(m) = d.get("message") {
                    fields.insert("message", m.to_value());
                }
                if let Some(p) = parent {
                    fields.insert("parentToolCallId", Value::String(p));
                }
                event(
                    "item/toolCall/progress",
                    turn_scope(turn.as_deref().unwrap_or("")),
                    fields,
                )
            }
        };
        // The 500 ms throttle on a frozen clock (§12.8): a key that emitted (or opened) parks
        // every later non-flush progress, and parked events are never released.
        let flush = d.get("flush").is_some_and(JsonView::is_true);
        if !flush && st.progress_clock.contains(&ks) {
            return;
        }
        st.progress_clock.insert(ks);
        out.push(ev);
    }

    /// A fresh, empty streamed-text item for `channel` (agentMessage, plan or reasoning), its
    /// id mapped from the key's provider item id or minted.
    fn new_text_item(
        &mut self,
        st: &mut ThreadState,
        key: &Key<'_>,
        channel: &str,
        parent: Option<&str>,
    ) -> OpenItem {
        let id = match key.provider_item_id {
            Some(pid) => self.mapped_item(st, pid),
            None => self.mint_item(),
        };
        let item_ty = channel_item_type(channel);
        let mut item = match item_ty {
            "reasoning" => obj([
                ("type", json!("reasoning")),
                ("id", json!(id)),
                ("summary", json!([])),
                ("content", json!([])),
            ]),
            ty => obj([("type", json!(ty)), ("id", json!(id)), ("text", json!(""))]),
        };
        if let Some(p) = parent {
            item.insert("parentToolCallId".into(), json!(p));
        }
        OpenItem {
            id,
            shape: item_ty.to_string(),
            item: Value::Object(item),
            text: String::new(),
            streamed: true,
            channel: Some(channel.to_string()),
            thread_attached: false,
            anonymous: key.provider_item_id.is_none(),
            parent_ref: key.parent_ref.map(str::to_string),
        }
    }

    fn text_delta<J: JsonView>(&mut self, st: &mut ThreadState, d: &J, out: &mut Vec<Event>) {
        let Some(t) = self.resolve_turn(st, d, TurnRule::Vc) else {
            return self.fallback(st, d, out);
        };
        let key = Key::of(d);
        let ks = key.string();
        let channel = d["channel"].as_str().unwrap_or("agentMessage");
        let text = d["text"].as_str().unwrap_or("");
        let parent = self.parent_tool_call_id(st, key.parent_ref);
        let open_idx = Self::find_open(st, &ks);
        let mapped = key
            .provider_item_id
            .and_then(|pid| st.provider_items.get(pid).cloned());
        let id = match (open_idx, mapped) {
            (Some(i), _) => st.open_items[i].1.id.clone(),
            (None, Some(id)) => id, // closed earlier: no synthesized open (§12.6)
            (None, None) => {
                let open = self.new_text_item(st, &key, channel, parent.as_deref());
                let (id, item) = (open.id.clone(), open.item.clone());
                st.open_items.push((ks.clone(), open));
                out.push(event(
                    "item/started",
                    turn_scope(&t),
                    Fields::from([("item", item)]),
                ));
                id
            }
        };
        if let Some(i) = Self::find_open(st, &ks) {
            let o = &mut st.open_items[i].1;
            o.text.push_str(text);
            o.streamed = true;
            o.channel.get_or_insert_with(|| channel.to_string());
        }
        let ty = match channel {
            "reasoningSummary" => "item/reasoning/summaryTextDelta",
            "reasoningText" => "item/reasoning/textDelta",
            "plan" => "item/plan/delta",
            _ => "item/agentMessage/delta",
        };
        let mut fields = Fields::from([("itemId", json!(id)), ("delta", json!(text))]);
        if let Some(p) = parent {
            fields.insert("parentToolCallId", json!(p));
        }
        out.push(event(ty, turn_scope(&t), fields));
    }

    fn text_close<J: JsonView>(&mut self, st: &mut ThreadState, d: &J, out: &mut Vec<Event>) {
        let Some(t) = self.resolve_turn(st, d, TurnRule::Vc) else {
            return self.fallback(st, d, out);
        };
        let key = Key::of(d);
        let ks = key.string();
        if key.provider_item_id.is_some() && st.settled_keys.contains(&ks) {
            return;
        }
        let channel = d["channel"].as_str().unwrap_or("agentMessage");
        let open = Self::find_open(st, &ks).map(|i| st.open_items.remove(i).1);
        let accumulated = open.as_ref().map(|o| o.text.clone()).unwrap_or_default();
        let final_text = match d.get("text").and_then(JsonView::as_str) {
            Some(t) => t.to_string(),
            None => {
                if accumulated.trim().is_empty() {
                    return;
                }
                accumulated
            }
        };
        if final_text.is_empty() {
            return;
        }
        let parent = self.parent_tool_call_id(st, key.parent_ref);
        let item = match open {
            Some(o) => text_item(&o, &final_text),
            None => {
                let o = self.new_text_item(st, &key, channel, parent.as_deref());
                text_item(&o, &final_text)
            }
        };
        if let Some(pid) = key.provider_item_id {
            let id = item["id"].as_str().unwrap_or("").to_string();
            if st.provider_items.get(pid).is_none() {
                st.provider_items.insert(pid.to_string(), id);
            }
            st.settled_keys.insert(&ks);
        }
        out.push(event(
            "item/completed",
            turn_scope(&t),
            Fields::from([("item", item)]),
        ));
    }
}

fn channel_item_type(channel: &str) -> &'static str {
    match channel {
        "plan" => "plan",
        "reasoningSummary" | "reasoningText" => "reasoning",
        _ => "agentMessage",
    }
}

/// A streamed text item settled with `text`.
fn text_item(o: &OpenItem, text: &str) -> Value {
    let mut v = o.item.clone();
    match o.item["type"].as_str() {
        Some("reasoning") => {
            if o.channel.as_deref() == Some("reasoningText") {
                v["content"] = json!([text]);
            } else {
                v["summary"] = json!([text]);
            }
        }
        Some("agentMessage") | Some("plan") => v["text"] = json!(text),
        _ => {}
    }
    v
}

fn is_thread_attached<J: JsonView>(shape: &J) -> bool {
    match shape["type"].as_str() {
        Some("backgroundTask") => true,
        Some("delegation") => shape["background"].is_true(),
        _ => false,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ItemPhase {
    Open,
    Close,
    Snapshot,
}

/// Builds an event item from a delta shape (§12.5).
fn build_item<J: JsonView>(
    shape: &J,
    id: &str,
    phase: ItemPhase,
    delta: &J,
    parent: Option<&str>,
    open_presentation: Option<Value>,
) -> Value {
    let ty = shape["type"].as_str().unwrap_or("");
    let status = match phase {
        ItemPhase::Open => json!("pending"),
        ItemPhase::Close => delta["status"].to_value(),
        ItemPhase::Snapshot => shape
            .get("status")
            .map(JsonView::to_value)
            .unwrap_or(json!("pending")),
    };
    let approval = if phase == ItemPhase::Close && delta["approvalStatus"].is_str("denied") {
        json!("denied")
    } else {
        Value::Null
    };
    let copy = |m: &mut Map<String, Value>, f: &str| {
        if let Some(v) = shape.get(f) {
            m.insert(f.into(), v.to_value());
        }
    };
    let mut m = Map::new();
    match ty {
        "command" => {
            m.insert("type".into(), json!("commandExecution"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "command");
            copy(&mut m, "cwd");
            copy(&mut m, "aggregatedOutput");
            copy(&mut m, "exitCode");
            if phase == ItemPhase::Close {
                for f in ["aggregatedOutput", "exitCode"] {
                    if let Some(v) = delta.get(f) {
                        m.insert(f.into(), v.to_value());
                    }
                }
            }
            copy(&mut m, "durationMs");
            m.insert("status".into(), status);
            m.insert("approvalStatus".into(), approval);
        }
        "fileChange" => {
            m.insert("type".into(), json!("fileChange"));
            m.insert("id".into(), json!(id));
            let changes: Vec<Value> = shape["changes"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            let mut o = Map::new();
                            o.insert("path".into(), c["path"].to_value());
                            o.insert("kind".into(), c["kind"].to_value());
                            if let Some(v) = c.get("movePath") {
                                o.insert("movePath".into(), v.to_value());
                            }
                            if let Some(v) = c.get("diff") {
                                o.insert("diff".into(), v.to_value());
                            } else if let Some(new) = c.get("newText").and_then(JsonView::as_str) {
                                let old = c.get("oldText").and_then(JsonView::as_str).unwrap_or("");
                                o.insert("diff".into(), json!(simple_diff(old, new)));
                            }
                            Value::Object(o)
                        })
                        .collect()
                })
                .unwrap_or_default();
            m.insert("changes".into(), Value::Array(changes));
            m.insert("status".into(), status);
            m.insert("approvalStatus".into(), approval);
        }
        "tool" => {
            m.insert("type".into(), json!("toolCall"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "server");
            copy(&mut m, "tool");
            if shape["args"].is_object() {
                m.insert("arguments".into(), shape["args"].to_value());
            }
            m.insert("status".into(), status);
            if let Some(r) = shape.get("result") {
                m.insert("result".into(), r.to_value());
            } else if phase == ItemPhase::Close
                && let Some(r) = delta.get("resultText")
            {
                m.insert("result".into(), r.to_value());
            }
            copy(&mut m, "error");
            copy(&mut m, "durationMs");
        }
        "compaction" => {
            m.insert("type".into(), json!("contextCompaction"));
            m.insert("id".into(), json!(id));
        }
        "agentMessage" => {
            m.insert("type".into(), json!("agentMessage"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "text");
            copy(&mut m, "asyncQuestion");
        }
        "reasoning" => {
            m.insert("type".into(), json!("reasoning"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "summary");
            copy(&mut m, "content");
        }
        "plan" => {
            m.insert("type".into(), json!("plan"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "text");
        }
        "webSearch" => {
            m.insert("type".into(), json!("webSearch"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "queries");
            let rt = if phase == ItemPhase::Close {
                delta
                    .get("resultText")
                    .map(JsonView::to_value)
                    .unwrap_or(Value::Null)
            } else {
                Value::Null
            };
            m.insert("resultText".into(), rt);
        }
        "webFetch" => {
            m.insert("type".into(), json!("webFetch"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "url");
            m.insert(
                "prompt".into(),
                shape
                    .get("prompt")
                    .map(JsonView::to_value)
                    .unwrap_or(Value::Null),
            );
            m.insert(
                "pattern".into(),
                shape
                    .get("pattern")
                    .map(JsonView::to_value)
                    .unwrap_or(Value::Null),
            );
            let rt = if phase == ItemPhase::Close {
                delta
                    .get("resultText")
                    .map(JsonView::to_value)
                    .unwrap_or(Value::Null)
            } else {
                Value::Null
            };
            m.insert("resultText".into(), rt);
        }
        "imageView" => {
            m.insert("type".into(), json!("imageView"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "path");
        }
        "imageGeneration" => {
            m.insert("type".into(), json!("imageGeneration"));
            m.insert("id".into(), json!(id));
            m.insert("status".into(), status);
            copy(&mut m, "prompt");
            copy(&mut m, "path");
            copy(&mut m, "result");
            copy(&mut m, "error");
            copy(&mut m, "transparentBackground");
        }
        "backgroundTask" => {
            m.insert("type".into(), json!("backgroundTask"));
            m.insert("id".into(), json!(id));
            for f in [
                "familyId",
                "taskType",
                "description",
                "status",
                "taskStatus",
                "skipTranscript",
                "workflowName",
                "workflow",
                "usage",
                "summary",
                "error",
                "outputFile",
            ] {
                copy(&mut m, f);
            }
            if phase == ItemPhase::Open {
                m.insert("status".into(), json!("pending"));
            } else if phase == ItemPhase::Close {
                m.insert("status".into(), status);
            }
        }
        "fileRead" => {
            m.insert("type".into(), json!("fileRead"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "path");
            copy(&mut m, "cmd");
            m.insert("status".into(), status);
        }
        "search" => {
            m.insert("type".into(), json!("search"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "mode");
            copy(&mut m, "query");
            copy(&mut m, "path");
            copy(&mut m, "cmd");
            m.insert("status".into(), status);
        }
        "delegation" => {
            m.insert("type".into(), json!("delegation"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "childRef");
            copy(&mut m, "label");
            m.insert("status".into(), status);
            copy(&mut m, "background");
            copy(&mut m, "summary");
        }
        "planSteps" => {
            m.insert("type".into(), json!("planSteps"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "steps");
            copy(&mut m, "explanation");
            m.insert("status".into(), status);
        }
        "extension" => {
            m.insert("type".into(), json!("extension"));
            m.insert("id".into(), json!(id));
            copy(&mut m, "kind");
            copy(&mut m, "payload");
            m.insert("status".into(), status);
        }
        _ => {
            m.insert("type".into(), json!(ty));
            m.insert("id".into(), json!(id));
        }
    }
    if let Some(p) = parent {
        m.insert("parentToolCallId".into(), json!(p));
    }
    let presentation = delta
        .get("presentation")
        .map(JsonView::to_value)
        .or(open_presentation);
    if let Some(p) = presentation
        && phase != ItemPhase::Snapshot
    {
        m.insert("presentation".into(), p);
    }
    Value::Object(m)
}

/// A minimal unified diff body for a change that carries old/new text instead of a diff.
fn simple_diff(old: &str, new: &str) -> String {
    let mut out = String::new();
    for l in old.lines() {
        out.push('-');
        out.push_str(l);
        out.push('\n');
    }
    for l in new.lines() {
        out.push('+');
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn turn_scope(turn_id: &str) -> Scope {
    Scope::Turn(turn_id.to_string())
}

fn thread_scope() -> Scope {
    Scope::Thread
}

fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// `{type, threadId: "", providerThreadId: "", scope, ...fields}`.
fn event(ty: &'static str, scope: Scope, fields: Fields) -> Event {
    Event::new(ty, scope, fields)
}

//! bb rows: the top-level rows of bb's thread timeline (reference §14), computed the way bb's
//! `thread-view` module decides them, so `pins` writes the `rows` count bb's own pins test
//! expects. bridgewire does not port the UI module; it reproduces the decisions that fix which
//! top-level rows exist (facts read from bb's public `thread-view` package), and gives each row
//! a small JSON shape of its own.
//!
//! # How events become rows
//!
//! 1. **Messages.** Events (in order, `seq` = 1-based position in the event list) build
//!    messages, each with a scope (its turn, or the thread), an optional parent tool call, and
//!    the position where it started:
//!    * assistant text: an `agentMessage` item, created by its first event that carries
//!      non-empty text (`item/started`, `item/agentMessage/delta`, `item/completed`); text for
//!      a turn that already completed, after the message settled, without a turn, or of an
//!      item with an `asyncQuestion` makes none;
//!    * errors: `provider/error` (a reconnect row when `willRetry: true`);
//!    * work: command executions, tool calls, delegations, file reads, searches, plan steps,
//!      extensions, web searches/fetches, image views/generations, file changes (one row per
//!      change; an approval row when a denied change has none; no row when an undenied change
//!      has none), background tasks (no row when `skipTranscript`), one message per item id;
//!      a `toolCall` whose presentation says `suppress` (or named `AskUserQuestion`,
//!      `TodoRead`, `TodoWrite`, `ToolSearch`, `TaskCreate`/`Get`/`List`/`Update`), or a
//!      suppressed `fileRead`/`search`/`planSteps`/`extension`/`delegation`/`fileChange`, makes
//!      nothing while pending or completed;
//!    * operations: `provider/unhandled`, `provider/warning`, compaction (a `contextCompaction`
//!      item and `thread/compacted` of one turn are one operation), `thread/context/cleared`;
//!    * a provider user message (`userMessage` item completed with text): a grouped steer.
//!
//!    Reasoning, usage, context-window, identity, name, rate-limit, diff, plan-update,
//!    extension-state and model-fallback events make no message.
//! 2. **Nesting.** A message whose event (or whose child turn's `turn/started`) names a
//!    `parentToolCallId` is not a top-level message: it nests under its delegation, or is
//!    hidden.
//! 3. **Entries.** Each turn (at its `turn/started`) and each thread-scoped message is an
//!    entry, in source order; a turn whose messages all nested away has no entry.
//! 4. **Turn rows.** A turn that did not complete shows each message as its row(s). A completed
//!    turn shows: its summary (the messages before its last assistant-text or error message) as
//!    one `turn` row, then that terminal message, then the messages after it. The summary is
//!    split where an assistant message is directly followed by another one (that first one
//!    shows as its own row between summary segments); a summary segment that is exactly one
//!    compaction or context-clear operation shows as that operation's row.
//! 5. Consecutive reconnect rows collapse into the last one.
//!
//! A turn-scoped message for a turn that never started (bb's projection throws there) is shown
//! as a thread-level row.

use super::event::EventView;
use crate::jsonref::Field;
use crate::protocol::RowProjector;
use crate::util::{FastMap, FastSet};
use serde_json::{Value, json};

/// Tool names bb's timeline drops whatever their presentation says.
const SUPPRESSED_TOOL_NAMES: [&str; 8] = [
    "TaskCreate",
    "TaskGet",
    "TaskList",
    "TaskUpdate",
    "TodoRead",
    "TodoWrite",
    "ToolSearch",
    "AskUserQuestion",
];

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Assistant,
    Error { reconnect: bool },
    User,
    Work { work: String },
    FileEdit { changes: usize, denied: bool },
    Workflow { skip: bool },
    Operation { op: String },
}

#[derive(Debug, Clone)]
struct Message {
    kind: Kind,
    /// The turn it belongs to; `None` for thread scope.
    turn: Option<String>,
    parent: Option<String>,
    seq: u64,
    item_id: String,
    status: Value,
    text: String,
}

impl Message {
    fn is_terminal(&self) -> bool {
        matches!(self.kind, Kind::Assistant | Kind::Error { .. })
    }

    /// Rows this message converts to (bb's `convertMessage`).
    fn rows(&self) -> Vec<Value> {
        match &self.kind {
            Kind::Assistant => vec![json!({
                "kind": "conversation", "role": "assistant", "itemId": self.item_id, "text": self.text,
            })],
            Kind::User => vec![json!({
                "kind": "conversation", "role": "user", "itemId": self.item_id, "text": self.text,
            })],
            Kind::Error { reconnect } => vec![json!({
                "kind": "system",
                "systemKind": if *reconnect { "reconnect" } else { "error" },
                "title": self.text,
            })],
            Kind::Work { work } => vec![json!({
                "kind": "work", "workKind": work, "itemId": self.item_id, "status": self.status,
            })],
            Kind::FileEdit { changes: 0, denied } => {
                if *denied {
                    vec![
                        json!({"kind": "work", "workKind": "approval", "itemId": self.item_id, "lifecycle": "denied"}),
                    ]
                } else {
                    Vec::new()
                }
            }
            Kind::FileEdit { changes, .. } => (0..*changes)
                .map(|i| {
                    json!({
                        "kind": "work", "workKind": "file-change", "itemId": self.item_id,
                        "change": i, "status": self.status,
                    })
                })
                .collect(),
            Kind::Workflow { skip: true } => Vec::new(),
            Kind::Workflow { skip: false } => vec![json!({
                "kind": "work", "workKind": "workflow", "itemId": self.item_id, "status": self.status,
            })],
            Kind::Operation { op } => vec![json!({
                "kind": "system", "systemKind": "operation", "operationKind": op, "title": self.text,
            })],
        }
    }

    /// `rows().len()`, without building them.
    fn row_count(&self) -> usize {
        match &self.kind {
            Kind::FileEdit { changes: 0, denied } => usize::from(*denied),
            Kind::FileEdit { changes, .. } => *changes,
            Kind::Workflow { skip } => usize::from(!*skip),
            _ => 1,
        }
    }

    /// Whether its rows are reconnect rows (`systemKind: "reconnect"`).
    fn is_reconnect(&self) -> bool {
        matches!(self.kind, Kind::Error { reconnect: true })
    }

    fn summary_count(&self) -> usize {
        match self.kind {
            Kind::FileEdit { changes, .. } => changes.max(1),
            _ => 1,
        }
    }

    fn is_context_management(&self) -> bool {
        matches!(&self.kind, Kind::Operation { op } if op == "compaction" || op == "context-clear")
    }
}

struct Turn {
    id: String,
    seq: u64,
    status: Option<Value>,
}

/// bb's top-level timeline rows (see the module docs).
#[derive(Default)]
pub struct BbTimelineRows {
    seq: u64,
    turns: Vec<Turn>,
    turn_index: FastMap<String, usize>,
    /// Child turn → the tool call it runs under.
    turn_parent: FastMap<String, String>,
    closed_turns: FastSet<String>,
    messages: Vec<Message>,
    /// Message key → index.
    by_key: FastMap<String, usize>,
    finalized_text: FastSet<String>,
}

impl BbTimelineRows {
    fn upsert(&mut self, key: String, make: impl FnOnce() -> Message) -> usize {
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        self.messages.push(make());
        let i = self.messages.len() - 1;
        self.by_key.insert(key, i);
        i
    }

    fn new_message<E: EventView>(&self, kind: Kind, event: &E, parent: Option<String>) -> Message {
        Message {
            kind,
            turn: event.turn_id().map(str::to_string),
            parent,
            seq: self.seq,
            item_id: event
                .field("item")
                .f("id")
                .as_str()
                .or_else(|| event.field("itemId").as_str())
                .unwrap_or("")
                .to_string(),
            status: Value::Null,
            text: String::new(),
        }
    }

    fn assistant_text<E: EventView>(
        &mut self,
        event: &E,
        item_id: &str,
        text: &str,
        last: bool,
        parent: Option<String>,
    ) {
        let Some(turn) = event.turn_id() else {
            return; // no turn: bb's buffered text has no identity for it
        };
        if text.is_empty() || self.closed_turns.contains(turn) {
            return;
        }
        let key = format!("assistant:{item_id}");
        if self.finalized_text.contains(&key) {
            return;
        }
        let msg = self.new_message(Kind::Assistant, event, parent);
        let i = self.upsert(key.clone(), || Message {
            item_id: item_id.to_string(),
            ..msg
        });
        if last {
            self.messages[i].text = text.to_string();
            self.finalized_text.insert(key);
        } else {
            self.messages[i].text.push_str(text);
        }
    }

    fn work<E: EventView>(&mut self, event: &E, kind: Kind, parent: Option<String>) {
        let item = &event.field("item");
        let id = item.f("id").as_str().unwrap_or("").to_string();
        let msg = self.new_message(kind, event, parent);
        let i = self.upsert(format!("call:{id}"), || msg);
        if let Some(s) = item.get("status") {
            self.messages[i].status = s.clone();
        }
        if let Kind::FileEdit { .. } = self.messages[i].kind {
            let changes = item.f("changes").as_array().map_or(0, Vec::len);
            let denied = item.f("approvalStatus") == "denied";
            self.messages[i].kind = Kind::FileEdit { changes, denied };
        }
        if let Kind::Workflow { .. } = self.messages[i].kind {
            self.messages[i].kind = Kind::Workflow {
                skip: item.f("skipTranscript") == true,
            };
        }
    }

    fn operation<E: EventView>(&mut self, key: String, event: &E, op: &str, title: String) {
        let msg = self.new_message(Kind::Operation { op: op.to_string() }, event, None);
        let i = self.upsert(key, || msg);
        self.messages[i].text = title;
    }

    /// One "Context compacted" row per turn, whether the compaction came as an item or as a
    /// `thread/compacted` event (both upsert the same key).
    fn compaction<E: EventView>(&mut self, event: &E) {
        let turn = event.turn_id().unwrap_or("");
        self.operation(
            format!("compaction:{turn}"),
            event,
            "compaction",
            "Context compacted".into(),
        );
    }

    fn suppressed(item: &Value) -> bool {
        let suppress = item.f("presentation").f("suppress") == true;
        let by_type = match item.f("type").as_str().unwrap_or("") {
            "toolCall" => {
                suppress
                    || item
                        .f("tool")
                        .as_str()
                        .is_some_and(|t| SUPPRESSED_TOOL_NAMES.contains(&t))
            }
            "fileRead" | "search" | "planSteps" | "extension" | "delegation" | "fileChange" => {
                suppress
            }
            _ => false,
        };
        by_type && matches!(item.f("status").as_str(), Some("pending" | "completed"))
    }

    /// The tool call an event runs under: its own, its item's, or its child turn's.
    fn parent_of<E: EventView>(&self, event: &E) -> Option<String> {
        event
            .field("parentToolCallId")
            .as_str()
            .or_else(|| event.field("item").f("parentToolCallId").as_str())
            .map(str::to_string)
            .or_else(|| {
                event
                    .turn_id()
                    .and_then(|t| self.turn_parent.get(t).cloned())
            })
    }

    fn item_event<E: EventView>(&mut self, ty: &str, event: &E, parent: Option<String>) {
        let item = &event.field("item");
        let item_type = item.f("type").as_str().unwrap_or("");
        let id = item.f("id").as_str().unwrap_or("");
        if item_type == "agentMessage" {
            if item.get("asyncQuestion").is_some() {
                return;
            }
            let text = item.f("text").as_str().unwrap_or("");
            self.assistant_text(event, id, text, ty == "item/completed", parent);
            return;
        }
        if item_type == "reasoning" || item_type == "plan" {
            return;
        }
        if item_type == "backgroundTask" {
            self.work(event, Kind::Workflow { skip: false }, parent);
            return;
        }
        if item_type == "commandExecution" {
            self.work(
                event,
                Kind::Work {
                    work: "command".into(),
                },
                parent,
            );
            return;
        }
        if Self::suppressed(item) {
            return;
        }
        let work = match item_type {
            "toolCall" | "mcpToolCall" => "tool",
            "delegation" => "delegation",
            "webSearch" => "web-search",
            "webFetch" => "web-fetch",
            "imageView" => "image-view",
            "imageGeneration" => "image-generation",
            "fileRead" => "file-read",
            "search" => "search",
            "planSteps" => "plan-steps",
            "extension" => "extension",
            "fileChange" => {
                self.work(
                    event,
                    Kind::FileEdit {
                        changes: 0,
                        denied: false,
                    },
                    parent,
                );
                return;
            }
            "contextCompaction" => {
                self.compaction(event);
                return;
            }
            "userMessage" => {
                if ty == "item/completed" {
                    let text: String = item
                        .f("content")
                        .as_array()
                        .map(|parts| {
                            parts
                                .iter()
                                .filter(|p| p.f("type") == "text")
                                .filter_map(|p| p.f("text").as_str())
                                .collect()
                        })
                        .unwrap_or_default();
                    if !text.is_empty() {
                        let mut msg = self.new_message(Kind::User, event, parent);
                        msg.text = text;
                        self.upsert(format!("user:{id}"), || msg);
                    }
                }
                return;
            }
            _ => return,
        };
        self.work(event, Kind::Work { work: work.into() }, parent);
    }
}

impl RowProjector for BbTimelineRows {
    fn push(&mut self, event: &Value) {
        self.push_view(event);
    }

    fn push_bb(&mut self, event: &super::event::Event) {
        self.push_view(event);
    }

    fn finish(self: Box<Self>) -> Vec<Value> {
        let mut out = BuiltRows(Vec::new());
        self.emit(&mut out);
        out.0
    }

    fn count(self: Box<Self>) -> usize {
        let mut out = CountedRows::default();
        self.emit(&mut out);
        out.rows
    }
}

impl BbTimelineRows {
    /// One event, from its tree or as assembled (the same rows either way).
    fn push_view<E: EventView>(&mut self, event: &E) {
        self.seq += 1;
        let ty = event.ty().unwrap_or("");
        let parent = self.parent_of(event);
        match ty {
            "turn/started" => {
                let Some(turn) = event.turn_id() else {
                    return;
                };
                if let Some(p) = event.field("parentToolCallId").as_str() {
                    self.turn_parent.insert(turn.to_string(), p.to_string());
                }
                if !self.turn_index.contains_key(turn) {
                    self.turns.push(Turn {
                        id: turn.to_string(),
                        seq: self.seq,
                        status: None,
                    });
                    self.turn_index
                        .insert(turn.to_string(), self.turns.len() - 1);
                }
            }
            "turn/completed" => {
                if let Some(turn) = event.turn_id() {
                    self.closed_turns.insert(turn.to_string());
                    if let Some(&i) = self.turn_index.get(turn) {
                        self.turns[i].status = Some(event.field("status").clone());
                    }
                }
            }
            "item/started" | "item/completed" => self.item_event(ty, event, parent),
            "item/agentMessage/delta" => {
                let id = event.field("itemId").as_str().unwrap_or("").to_string();
                let text = event.field("delta").as_str().unwrap_or("").to_string();
                self.assistant_text(event, &id, &text, false, parent);
            }
            "item/backgroundTask/progress" | "item/backgroundTask/completed" => {
                self.work(event, Kind::Workflow { skip: false }, parent)
            }
            "item/delegation/progress" | "item/delegation/completed" => self.work(
                event,
                Kind::Work {
                    work: "delegation".into(),
                },
                parent,
            ),
            "provider/error" => {
                let mut msg = self.new_message(
                    Kind::Error {
                        reconnect: event.field("willRetry") == true,
                    },
                    event,
                    None,
                );
                msg.text = event
                    .field("message")
                    .as_str()
                    .unwrap_or("Error event")
                    .to_string();
                self.messages.push(msg);
            }
            "provider/unhandled" => {
                let title = format!(
                    "Unhandled {} event",
                    event.field("rawType").as_str().unwrap_or("?")
                );
                self.operation(
                    format!("unhandled:{}", self.seq),
                    event,
                    "provider-unhandled",
                    title,
                );
            }
            "provider/warning" => {
                let deprecation = event.field("category") == "deprecation";
                let title = event
                    .field("summary")
                    .as_str()
                    .unwrap_or("Warning")
                    .to_string();
                let op = if deprecation {
                    "deprecation"
                } else {
                    "warning"
                };
                self.operation(format!("warning:{}", self.seq), event, op, title);
            }
            "thread/compacted" => self.compaction(event),
            "thread/context/cleared" => self.operation(
                format!("clear:{}", self.seq),
                event,
                "context-clear",
                "Context cleared".into(),
            ),
            _ => {}
        }
    }
}

impl BbTimelineRows {
    /// The rows in order, to `out` (built, or only counted).
    fn emit(&self, out: &mut impl RowOut) {
        let mut entries: Vec<(u64, Entry)> = Vec::new();
        let mut per_turn: Vec<Vec<usize>> = vec![Vec::new(); self.turns.len()];
        let mut order: Vec<usize> = (0..self.messages.len()).collect();
        order.sort_by_key(|&i| self.messages[i].seq);
        for i in order {
            let m = &self.messages[i];
            if m.parent.is_some() {
                continue; // nested under its delegation, or hidden
            }
            match m.turn.as_ref().and_then(|t| self.turn_index.get(t)) {
                Some(&t) => per_turn[t].push(i),
                None => entries.push((m.seq, Entry::Message(i))),
            }
        }
        for (t, turn) in self.turns.iter().enumerate() {
            if !per_turn[t].is_empty() {
                entries.push((turn.seq, Entry::Turn(t)));
            }
        }
        // Turns first at equal positions (bb lists turn drafts before messages; stable sort).
        entries.sort_by_key(|(seq, e)| (*seq, matches!(e, Entry::Message(_))));

        for (_, entry) in entries {
            match entry {
                Entry::Message(i) => out.message(&self.messages[i]),
                Entry::Turn(t) => {
                    let msgs: Vec<&Message> =
                        per_turn[t].iter().map(|&i| &self.messages[i]).collect();
                    turn_rows(&self.turns[t], &msgs, out);
                }
            }
        }
    }
}

/// Where [`BbTimelineRows::emit`] puts rows; consecutive reconnect rows collapse into the last.
trait RowOut {
    /// A message's own rows.
    fn message(&mut self, m: &Message);
    /// A turn's summary row over `group` (none when it would be empty).
    fn summary(&mut self, turn: &Turn, group: &[&Message], segment: Option<usize>);
}

/// Rows as JSON (dumps, parity, `finish`).
struct BuiltRows(Vec<Value>);

impl BuiltRows {
    fn push(&mut self, row: Value) {
        let reconnect = |r: &Value| r.f("systemKind") == "reconnect";
        if reconnect(&row) && self.0.last().is_some_and(reconnect) {
            *self.0.last_mut().expect("non-empty") = row;
        } else {
            self.0.push(row);
        }
    }
}

impl RowOut for BuiltRows {
    fn message(&mut self, m: &Message) {
        for row in m.rows() {
            self.push(row);
        }
    }

    fn summary(&mut self, turn: &Turn, group: &[&Message], segment: Option<usize>) {
        if let Some(row) = turn_row(turn, group, segment) {
            self.push(row);
        }
    }
}

/// Rows only counted (`pins`): what [`BuiltRows`] would hold, without the JSON.
#[derive(Default)]
struct CountedRows {
    rows: usize,
    last_reconnect: bool,
}

impl CountedRows {
    fn push(&mut self, reconnect: bool) {
        if !(reconnect && self.last_reconnect) {
            self.rows += 1;
        }
        self.last_reconnect = reconnect;
    }
}

impl RowOut for CountedRows {
    fn message(&mut self, m: &Message) {
        for _ in 0..m.row_count() {
            self.push(m.is_reconnect());
        }
    }

    fn summary(&mut self, _turn: &Turn, group: &[&Message], _segment: Option<usize>) {
        let count: usize = group.iter().map(|m| m.summary_count()).sum();
        if count > 0 || group.iter().any(|m| m.row_count() > 0) {
            self.push(false);
        }
    }
}

enum Entry {
    Turn(usize),
    Message(usize),
}

fn turn_row(turn: &Turn, msgs: &[&Message], segment: Option<usize>) -> Option<Value> {
    let count: usize = msgs.iter().map(|m| m.summary_count()).sum();
    let children: Vec<Value> = msgs.iter().flat_map(|m| m.rows()).collect();
    if count == 0 && children.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "turn",
        "turnId": turn.id,
        "segment": segment,
        "status": turn.status,
        "summaryCount": count,
        "children": children,
    }))
}

/// One turn's top-level rows (bb's `buildTurnRows` with completed-turn grouping), to `out`.
fn turn_rows(turn: &Turn, msgs: &[&Message], out: &mut impl RowOut) {
    if turn.status.is_none() {
        for m in msgs {
            out.message(m);
        }
        return;
    }
    let terminal = msgs.iter().rposition(|m| m.is_terminal());
    let (summary, rest) = match terminal {
        Some(t) => (&msgs[..t], &msgs[t..]),
        None => (msgs, &msgs[..0]),
    };
    let is_response = |m: &Message| m.kind == Kind::Assistant;
    // An assistant message directly followed by another (the next summary message or the
    // terminal one) stays visible on its own.
    let visible: Vec<bool> = (0..summary.len())
        .map(|i| {
            let next = summary
                .get(i + 1)
                .copied()
                .or_else(|| rest.first().copied());
            is_response(summary[i]) && next.is_some_and(is_response)
        })
        .collect();
    let single_or_unwrap = |group: &[&Message], segment: Option<usize>, out: &mut _| {
        if group.len() == 1 && group[0].is_context_management() {
            RowOut::message(out, group[0]);
        } else {
            RowOut::summary(out, turn, group, segment);
        }
    };
    if !visible.iter().any(|v| *v) {
        single_or_unwrap(summary, None, out);
    } else {
        let mut segment = 0;
        let mut group: Vec<&Message> = Vec::new();
        for (i, m) in summary.iter().enumerate() {
            if visible[i] {
                if !group.is_empty() {
                    single_or_unwrap(&group, Some(segment), out);
                    segment += 1;
                    group.clear();
                }
                out.message(m);
            } else {
                group.push(m);
            }
        }
        if !group.is_empty() {
            single_or_unwrap(&group, Some(segment), out);
        }
    }
    for m in rest {
        out.message(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(events: &[Value]) -> Vec<Value> {
        let mut p: Box<BbTimelineRows> = Box::default();
        for e in events {
            p.push(e);
        }
        let counted = {
            let mut out = CountedRows::default();
            p.emit(&mut out);
            out.rows
        };
        let rows = p.finish();
        assert_eq!(counted, rows.len(), "the counted rows are the built ones");
        rows
    }

    fn turn_ev(ty: &str, turn: &str) -> Value {
        json!({"type": ty, "threadId": "", "scope": {"kind": "turn", "turnId": turn}, "status": "completed"})
    }

    fn item(ty: &str, turn: &str, item: Value) -> Value {
        json!({"type": ty, "threadId": "", "scope": {"kind": "turn", "turnId": turn}, "item": item})
    }

    fn text(turn: &str, id: &str, t: &str) -> Value {
        item(
            "item/completed",
            turn,
            json!({"type": "agentMessage", "id": id, "text": t}),
        )
    }

    fn cmd(turn: &str, id: &str) -> Value {
        item(
            "item/completed",
            turn,
            json!({"type": "commandExecution", "id": id, "command": "ls", "cwd": "/", "status": "completed"}),
        )
    }

    #[test]
    fn a_completed_turn_is_a_summary_row_then_its_answer() {
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            cmd("t1", "c1"),
            text("t1", "m1", "done"),
            turn_ev("turn/completed", "t1"),
        ]);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        assert_eq!(rows[0]["kind"], "turn");
        assert_eq!(rows[1]["role"], "assistant");
    }

    #[test]
    fn an_answer_only_turn_is_one_row_and_an_empty_turn_none() {
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            text("t1", "m1", "hi"),
            turn_ev("turn/completed", "t1"),
            turn_ev("turn/started", "t2"),
            turn_ev("turn/completed", "t2"),
        ]);
        assert_eq!(rows.len(), 1, "{rows:#?}");
    }

    #[test]
    fn an_open_turn_shows_every_message() {
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            cmd("t1", "c1"),
            cmd("t1", "c2"),
            text("t1", "m1", "x"),
        ]);
        assert_eq!(rows.len(), 3, "{rows:#?}");
    }

    #[test]
    fn consecutive_answers_split_the_summary() {
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            cmd("t1", "c1"),
            text("t1", "m1", "a"),
            text("t1", "m2", "b"),
            turn_ev("turn/completed", "t1"),
        ]);
        // summary [c1] + visible m1 + terminal m2
        assert_eq!(rows.len(), 3, "{rows:#?}");
    }

    #[test]
    fn suppressed_tools_and_nested_work_make_no_row() {
        let ask = item(
            "item/completed",
            "t1",
            json!({"type": "toolCall", "id": "q", "tool": "AskUserQuestion", "status": "completed"}),
        );
        let nested = item(
            "item/completed",
            "t1",
            json!({"type": "commandExecution", "id": "n", "command": "ls", "cwd": "/", "status": "completed", "parentToolCallId": "d"}),
        );
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            ask,
            nested,
            text("t1", "m1", "x"),
            turn_ev("turn/completed", "t1"),
        ]);
        assert_eq!(rows.len(), 1, "{rows:#?}");
    }

    #[test]
    fn a_lone_compaction_is_its_own_row_and_reconnects_collapse() {
        let retry = |m: &str| json!({"type": "provider/error", "threadId": "", "scope": {"kind": "thread"}, "message": m, "willRetry": true});
        let rows = project(&[
            turn_ev("turn/started", "t1"),
            json!({"type": "thread/compacted", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}}),
            turn_ev("turn/completed", "t1"),
            retry("a"),
            retry("b"),
        ]);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        assert_eq!(rows[0]["operationKind"], "compaction");
        assert_eq!(rows[1]["title"], "b");
    }
}

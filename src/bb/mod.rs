//! The bb provider-bridge protocol: line-delimited JSON-RPC 2.0 over a bridge's stdio, with the
//! `thread/delta` grammar the runtime-side assembler turns into timeline events.
//!
//! Spec: `protocols/bb-provider-bridge-protocol.md`; bb's tooling: `reference/bb-tooling.md`.
//!
//! * [`delta`]: grammar v3 validation (§11);
//! * [`assembler`]: deltas → ThreadEvents (§12);
//! * [`grammar`]: the thread-event grammar (§13);
//! * [`rows`]: the top-level rows of bb's thread timeline (§14);
//! * [`recorder`]: `record bb` / `record child`, the stdio tee;
//! * [`transport`]: a spawned bridge over real pipes (bounded framing and waits);
//! * [`conformance`]: the live conformance kit (`check bb`);
//! * [`BbModel`]: the offline pipeline the core calls (pins, parity, dumps).

pub mod answers;
pub mod assembler;
pub mod conformance;
pub mod delta;
pub mod double;
pub mod event;
pub mod grammar;
pub mod live;
pub mod msg;
pub mod player;
pub mod recorded;
pub mod recorder;
pub mod rows;
pub mod schema_fast;
pub mod surrogate;
pub mod transport;
pub mod wire;

use crate::cell::Cell;
use crate::jsonref::{JsonRef, JsonView};
use crate::lane::{Entry, LazyEntry};
use crate::protocol::{EventSink, Model, Protocol, RowProjector};
use serde_json::Value;

pub struct BbModel;

impl Model for BbModel {
    fn protocol(&self) -> Protocol {
        Protocol::Bb
    }

    /// The offline count procedure of reference §4.2, plus the wire rules of [`wire`]: a
    /// violation bb's assembler would absorb without a trace is counted as an invalid message.
    fn assemble(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        let judge = assemble_judged(cell, entries, sink);
        report_judge(&judge, sink);
    }

    fn assemble_fast(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        let judge = assemble_judged_borrowed(cell, entries, sink);
        report_judge(&judge, sink);
    }

    fn assemble_lazy(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = LazyEntry>,
        sink: &mut dyn EventSink,
    ) {
        let judge = assemble_judged_with::<true>(cell, entries, sink, None, false);
        report_judge(&judge, sink);
    }

    fn wire_outcomes(&self, cell: &Cell) -> Option<Vec<String>> {
        let lines: Vec<(bool, String)> = cell
            .merged()
            .filter_map(|e| match e.dir.as_str() {
                "runtime→bridge" => Some((true, e.line)),
                "bridge→runtime" => Some((false, e.line)),
                _ => None,
            })
            .collect();
        Some(answers::wire_outcomes(
            lines.iter().map(|(to, l)| (*to, l.as_str())),
        ))
    }

    /// The live player takes well-formed `turn.mainRun` deltas out of their message
    /// ([`player::ReplayOptions::accept_main_run`]); a recorded leg read for parity does too,
    /// listing them as the live leg does.
    fn assemble_as_live(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) -> Vec<String> {
        let mut main_runs = 0;
        let judge = assemble_judged_held(cell, entries, sink, &mut main_runs);
        report_judge(&judge, sink);
        if main_runs == 0 {
            Vec::new()
        } else {
            vec![format!("turn.mainRun ×{main_runs}")]
        }
    }

    fn row_projector(&self) -> Box<dyn RowProjector> {
        Box::<rows::BbTimelineRows>::default()
    }

    /// A tool's `arguments` and `result` (and an extension's `payload`) are the provider's JSON:
    /// ids and thread ids inside are compared verbatim. bb's §7 interns ids at any depth, which
    /// made a build that passes another document `id` to a tool compare equal. Times inside are
    /// still zeroed (a tool's clock); pins dumps keep §7 as it is.
    fn normalize_events(&self, events: Vec<Value>) -> Vec<Value> {
        crate::normalize::normalize_list(events, parity_rules(self.event_rules()))
    }

    /// Text and output deltas are coalesced before comparing: "Coalescing is assembler policy,
    /// not bridge policy" (protocol, `item.textDelta`), so two builds that stream the same text
    /// in other chunk sizes behave alike and must compare equal. Pins keep bb's count of each
    /// delta.
    ///
    /// A surrogate pair cut between two chunks ([`msg::parse`]) is joined here, once the chunks
    /// are one text, as bb's runtime joins the JavaScript strings.
    ///
    /// The bridge's clock and process in its own words (a time, a duration, a pid, a temporary
    /// folder in an error's text) are masked once the text is whole
    /// ([`crate::normalize::mask_volatile_text`]): they differ run to run.
    fn fold_events(&self, events: Vec<Value>) -> Vec<Value> {
        let mut events = coalesce_deltas(events);
        events.iter_mut().for_each(|e| {
            surrogate::join(e);
            crate::normalize::mask_volatile_text(e);
        });
        events
    }

    /// A row's text is its chunks': a surrogate pair cut between two is joined here, and its
    /// volatile words masked as an event's are. A `system` row's `title` is the text of the
    /// error, reconnect or operation event it shows: the bridge's words, masked as they are
    /// there.
    fn normalize_rows(&self, rows: Vec<Value>) -> Vec<Value> {
        let mut rows = crate::normalize::normalize_list(rows, parity_rules(self.row_rules()));
        rows.iter_mut().for_each(|r| {
            surrogate::join(r);
            crate::normalize::mask_volatile_text(r);
            if r["kind"] == "system"
                && let Some(title) = r.get_mut("title")
            {
                crate::normalize::mask_worded(title);
            }
        });
        rows
    }

    fn is_unhandled(&self, event: &Value) -> bool {
        is_unhandled(event)
    }

    fn dump_text(&self, json: String) -> String {
        surrogate::as_js_json(json)
    }
}

/// bb's §7 rules with the provider's payloads kept verbatim, for comparing two legs.
fn parity_rules(rules: crate::normalize::Rules<'static>) -> crate::normalize::Rules<'static> {
    crate::normalize::Rules {
        opaque_fields: crate::normalize::BB_PROVIDER_PAYLOADS,
        ..rules
    }
}

/// The streamed-text events whose `delta` strings concatenate: the assembler's one event per
/// `item.textDelta` / `item.outputDelta` (a `command.outputSnapshot` suffix too, unless it is a
/// `reset`).
const DELTA_EVENTS: &[&str] = &[
    "item/agentMessage/delta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/textDelta",
    "item/plan/delta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
];

/// Adjacent delta events of one item (same type and every field but `delta` equal) as one event
/// whose `delta` is their concatenation: the same text however the bridge chunked it. Only
/// neighbours merge, so where a delta falls among other events still counts.
pub fn coalesce_deltas(events: Vec<Value>) -> Vec<Value> {
    let mergeable = |e: &Value| {
        e["type"]
            .as_str()
            .is_some_and(|t| DELTA_EVENTS.contains(&t))
            && e["delta"].is_string()
            && e.get("reset").is_none()
    };
    let same_but_delta = |a: &Value, b: &Value| match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| k == "delta" || b.get(k).is_some_and(|w| w == v))
        }
        _ => false,
    };
    let mut out: Vec<Value> = Vec::with_capacity(events.len());
    for e in events {
        if mergeable(&e)
            && let Some(last) = out.last_mut()
            && mergeable(last)
            && same_but_delta(last, &e)
        {
            let tail = e["delta"].as_str().unwrap_or_default();
            if let Some(Value::String(d)) = last.get_mut("delta") {
                d.push_str(tail);
            }
            continue;
        }
        out.push(e);
    }
    out
}

/// bb's `unhandled` count: the kept `provider/unhandled` events.
pub fn is_unhandled(event: &impl event::EventView) -> bool {
    event.ty() == Some("provider/unhandled")
}

/// The wire judge's violations as invalid messages (the first few of each rule, then a count).
fn report_judge(judge: &wire::WireJudge, sink: &mut dyn EventSink) {
    for v in &judge.violations {
        sink.invalid(format!("{}: {}", v.rule, v.detail));
    }
    for rule in wire::RULES {
        let kept = judge.violations.iter().filter(|v| v.rule == *rule).count();
        let total = judge.violation_counts.get(rule).copied().unwrap_or(0);
        if total > kept {
            sink.invalid(format!(
                "{rule}: {} more violation(s) not kept (the judge keeps the first {})",
                total - kept,
                wire::MAX_KEPT_PER_RULE
            ));
        }
    }
}

/// The offline pass over a cell's merged entries (reference §4.2), with the wire judge fed
/// along; returns the judge (its violations are not yet reported to `sink`).
pub fn assemble_judged(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = Entry>,
    sink: &mut dyn EventSink,
) -> wire::WireJudge {
    assemble_judged_with::<false>(cell, &mut entries.map(LazyEntry::from), sink, None, false)
}

/// [`assemble_judged`] that takes well-formed `turn.mainRun` deltas out of each `thread/delta`
/// before validating it ([`delta::take_main_runs`]), as check bb, replay and parity do live
/// outside `--kit-only`: their recorded rules read a held-turn recording as they read the
/// bridge. Pins keep bb's tooling, which refuses the whole message. Adds the deltas taken
/// out to `main_runs`.
pub fn assemble_judged_held(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = Entry>,
    sink: &mut dyn EventSink,
    main_runs: &mut usize,
) -> wire::WireJudge {
    assemble_judged_with::<false>(
        cell,
        &mut entries.map(LazyEntry::from),
        sink,
        Some(main_runs),
        false,
    )
}

/// [`assemble_judged`] reading each `thread/delta` line as a borrowed [`JsonRef`] instead of a
/// `Value` tree (same events, drops and messages; `tests/counting_path.rs` holds it to that).
pub fn assemble_judged_borrowed(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = Entry>,
    sink: &mut dyn EventSink,
) -> wire::WireJudge {
    assemble_judged_with::<true>(cell, &mut entries.map(LazyEntry::from), sink, None, false)
}

/// [`assemble_judged_held`] over a live replay's traffic (`replay bb`): the lines the runtime
/// side wrote and the bridge answered, in the order they crossed, each entry's `seq` its
/// 1-based position there; violations name `live message <n> (<dir>)`. `main_runs`: accept
/// `turn.mainRun` deltas as the replay did (`None`: bb's tooling).
pub fn assemble_judged_live(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = Entry>,
    sink: &mut dyn EventSink,
    main_runs: Option<&mut usize>,
) -> wire::WireJudge {
    assemble_judged_with::<false>(
        cell,
        &mut entries.map(LazyEntry::from),
        sink,
        main_runs,
        true,
    )
}

/// The offline pass. A line held escaped ([`crate::lane::LazyLine`]) is searched as it is
/// (the pre-filters' texts have no `"` or `\`, so they occur in the escaped body where they
/// occur in the text; `"method"` is `\"method\"` there), a `thread/delta` line is parsed from
/// it in one pass when [`JsonRef::parse_escaped`] can, and anything else is unescaped and read
/// as the text: the same events, drops and messages either way.
///
/// `main_runs` (accept `turn.mainRun`, [`assemble_judged_held`]) is read on the `Value` path only: the borrowed
/// one serves pins, which read recordings as bb's tooling does.
fn assemble_judged_with<const BORROWED: bool>(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = LazyEntry>,
    sink: &mut dyn EventSink,
    mut main_runs: Option<&mut usize>,
    live: bool,
) -> wire::WireJudge {
    let (provider, _) = cell.provider_and_name();
    let mut assembler = assembler::Assembler::new(provider);
    let mut grammar = grammar::Grammar::new();
    let mut judge = wire::WireJudge::new();
    let at = |entry: &LazyEntry| {
        if live {
            return format!(
                "live message {} ({})",
                crate::jsjson::format_f64(entry.seq),
                entry.dir
            );
        }
        format!(
            "{} run {} seq {}",
            entry.dir,
            crate::jsjson::format_f64(entry.run),
            crate::jsjson::format_f64(entry.seq)
        )
    };
    for entry in entries {
        match entry.dir.as_str() {
            "runtime→bridge" => {
                // Cheap pre-filter: only stops and (re)attachments matter offline.
                let f = &*LINE_FINDERS;
                let held = entry.line.held();
                if f.thread.find(held).is_none() && f.turn.find(held).is_none() {
                    continue;
                }
                let Some(m) = msg::object(&entry.line.to_text()) else {
                    continue;
                };
                let m = Value::Object(m);
                judge.runtime_at(&m, &|| at(&entry));
                if m.get("method").and_then(Value::as_str) == Some("thread/stop")
                    && m.get("params")
                        .and_then(|p| p.get("intent"))
                        .and_then(Value::as_str)
                        == Some("release")
                    && let Some(t) = m
                        .get("params")
                        .and_then(|p| p.get("threadId"))
                        .and_then(Value::as_str)
                {
                    grammar.clear_thread(t);
                }
            }
            "bridge→runtime" => {
                let f = &*LINE_FINDERS;
                let held = entry.line.held();
                if f.thread_delta.find(held).is_none() {
                    // Notifications the wire rules judge: rare, so parsed whole.
                    if (f.identity.find(held).is_some() || f.recovery.find(held).is_some())
                        && let Some(m) = msg::object(&entry.line.to_text())
                    {
                        let params = m.get("params").cloned().unwrap_or(Value::Null);
                        match m.get("method").and_then(Value::as_str) {
                            Some("thread/identity") if m.get("id").is_none() => {
                                if let Some(t) = params.get("threadId").and_then(Value::as_str) {
                                    let handle =
                                        params.get("providerThreadId").and_then(Value::as_str);
                                    judge.bridge_identity_at(t, handle, &|| at(&entry));
                                }
                                continue;
                            }
                            Some("provider/recovery") if m.get("id").is_none() => {
                                judge.bridge_recovery_at(&params, &|| at(&entry));
                                continue;
                            }
                            _ => {}
                        }
                    }
                    let method = if entry.line.escaped_body().is_some() {
                        &f.method_escaped
                    } else {
                        &f.method
                    };
                    // A response (no method) may answer a thread/stop, if one is pending.
                    if judge.awaits_response()
                        && method.find(held).is_none()
                        && let Some(m) = msg::object(&entry.line.to_text())
                    {
                        judge.bridge_response_at(&Value::Object(m), &|| at(&entry));
                    }
                    continue;
                }
                let at_entry = || at(&entry);
                let mut pass = Pass {
                    assembler: &mut assembler,
                    grammar: &mut grammar,
                    judge: &mut judge,
                    sink: &mut *sink,
                    at: &at_entry,
                };
                if BORROWED {
                    let text;
                    let parsed = match entry.line.escaped_body().and_then(JsonRef::parse_escaped) {
                        Some(m) => Some(m),
                        None => {
                            text = entry.line.to_text();
                            JsonRef::parse(&text)
                        }
                    };
                    let Some(mut m) = parsed else {
                        // serde refuses lone surrogate escapes, which [`msg::object`] reads.
                        if let Some(mut m) = msg::object(&entry.line.to_text())
                            && m.get("method").and_then(Value::as_str) == Some("thread/delta")
                        {
                            pass.delta(&m.remove("params").unwrap_or(Value::Null));
                        }
                        continue;
                    };
                    if !m.is_object()
                        || m.get("method").and_then(JsonView::as_str) != Some("thread/delta")
                    {
                        continue;
                    }
                    pass.delta(&m.take("params"));
                } else {
                    let Some(mut m) = msg::object(&entry.line.to_text()) else {
                        continue;
                    };
                    if m.get("method").and_then(Value::as_str) != Some("thread/delta") {
                        continue;
                    }
                    let mut params = m.remove("params").unwrap_or(Value::Null);
                    if let Some(n) = main_runs.as_deref_mut() {
                        *n += delta::take_main_runs(&mut params);
                    }
                    pass.delta(&params);
                }
            }
            _ => {} // provider lanes play no part offline
        }
    }
    judge
}

/// The pre-filters' searchers, built once (`str::contains` builds one per call, per line).
struct LineFinders {
    thread: memchr::memmem::Finder<'static>,
    turn: memchr::memmem::Finder<'static>,
    thread_delta: memchr::memmem::Finder<'static>,
    method: memchr::memmem::Finder<'static>,
    /// `"method"` in an escaped body.
    method_escaped: memchr::memmem::Finder<'static>,
    identity: memchr::memmem::Finder<'static>,
    recovery: memchr::memmem::Finder<'static>,
}

static LINE_FINDERS: std::sync::LazyLock<LineFinders> = std::sync::LazyLock::new(|| LineFinders {
    thread: memchr::memmem::Finder::new("thread/"),
    turn: memchr::memmem::Finder::new("turn/"),
    thread_delta: memchr::memmem::Finder::new("thread/delta"),
    method: memchr::memmem::Finder::new("\"method\""),
    method_escaped: memchr::memmem::Finder::new("\\\"method\\\""),
    identity: memchr::memmem::Finder::new("thread/identity"),
    recovery: memchr::memmem::Finder::new("provider/recovery"),
});

/// One `thread/delta` message through validation, the assembler, the wire judge and the grammar.
struct Pass<'p> {
    assembler: &'p mut assembler::Assembler,
    grammar: &'p mut grammar::Grammar,
    judge: &'p mut wire::WireJudge,
    sink: &'p mut dyn EventSink,
    at: &'p dyn Fn() -> String,
}

impl Pass<'_> {
    fn delta<J: JsonView>(&mut self, params: &J) {
        match delta::validate_params(params) {
            Err(e) => {
                if let Some(t) = params.get("threadId").and_then(JsonView::as_str) {
                    self.judge.bridge_refused_delta_at(t, self.at);
                }
                self.sink
                    .invalid(format!("{}: invalid thread/delta: {e}", (self.at)()))
            }
            Ok((thread_id, deltas)) => {
                self.judge.bridge_delta_keys(thread_id, deltas, self.at);
                let events = self.assembler.assemble_events(thread_id, deltas);
                let drops = self.assembler.take_silent_drops();
                let forgotten = self.assembler.take_forgotten_items();
                self.judge
                    .bridge_delta_at(thread_id, self.at, &events, &drops, &forgotten);
                for ev in events {
                    match self.grammar.accept(&ev) {
                        Ok(()) => self.sink.bb_event(ev),
                        Err(drop) => self.sink.grammar_drop(drop),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::coalesce_deltas;
    use serde_json::{Value, json};

    fn d(item: &str, text: &str) -> Value {
        json!({"type": "item/agentMessage/delta", "turnId": "t1", "itemId": item, "delta": text})
    }

    /// An id or a thread id inside a tool's arguments or result is the tool's data: two legs
    /// that pass other values differ, while the item's own ids are still interned and times
    /// inside are still zeroed (a tool's clock).
    #[test]
    fn tool_payloads_keep_their_ids() {
        use crate::protocol::Model;
        let tool = |id: &str, at: &str| {
            json!({"type": "item/started", "item": {"id": "i-9", "type": "toolCall",
                "arguments": {"id": id, "startedAt": at}, "result": {"threadId": id}}})
        };
        let n = |v: Value| super::BbModel.normalize_events(vec![v]);
        let a = n(tool("doc-1", "2026"));
        assert_eq!(a[0]["item"]["id"], "#1");
        assert_eq!(
            a[0]["item"]["arguments"],
            json!({"id": "doc-1", "startedAt": 0})
        );
        assert_eq!(a[0]["item"]["result"], json!({"threadId": "doc-1"}));
        assert_ne!(a, n(tool("doc-2", "2026")));
        assert_eq!(a, n(tool("doc-1", "2027")));
    }

    /// The same text in other chunks is one event; another item, another field, an event
    /// between or a reset keep deltas apart.
    #[test]
    fn adjacent_deltas_of_one_item_coalesce() {
        let one = coalesce_deltas(vec![d("a", "The answ"), d("a", "er is"), d("a", " 42")]);
        assert_eq!(one, vec![d("a", "The answer is 42")]);
        assert_eq!(one, coalesce_deltas(vec![d("a", "The answer is 42")]));
        let started = json!({"type": "item/started", "item": {"id": "b"}});
        let apart = vec![
            d("a", "x"),
            d("b", "y"),
            started.clone(),
            d("b", "z"),
            json!({"type": "item/commandExecution/outputDelta", "itemId": "b", "delta": "w", "reset": true}),
            json!({"type": "item/commandExecution/outputDelta", "itemId": "b", "delta": "v"}),
        ];
        assert_eq!(coalesce_deltas(apart.clone()), apart);
        let parent = json!({"type": "item/agentMessage/delta", "turnId": "t1", "itemId": "a", "delta": "q", "parentToolCallId": "p"});
        assert_eq!(coalesce_deltas(vec![d("a", "x"), parent.clone()]).len(), 2);
    }
}

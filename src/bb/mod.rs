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
pub mod transport;
pub mod wire;

use crate::cell::Cell;
use crate::jsonref::{JsonRef, JsonView};
use crate::lane::{Entry, LazyEntry};
use crate::protocol::{EventSink, Model, Protocol, RowProjector};
use serde_json::Value;

/// What one bridge→runtime (or runtime→bridge) line is, as far as the offline pass cares.
fn parse_object(line: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

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
        let judge = assemble_judged_with::<true>(cell, entries, sink, None);
        report_judge(&judge, sink);
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

    fn is_unhandled(&self, event: &Value) -> bool {
        is_unhandled(event)
    }
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
    assemble_judged_with::<false>(cell, &mut entries.map(LazyEntry::from), sink, None)
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
    )
}

/// [`assemble_judged`] reading each `thread/delta` line as a borrowed [`JsonRef`] instead of a
/// `Value` tree (same events, drops and messages; `tests/counting_path.rs` holds it to that).
pub fn assemble_judged_borrowed(
    cell: &Cell,
    entries: &mut dyn Iterator<Item = Entry>,
    sink: &mut dyn EventSink,
) -> wire::WireJudge {
    assemble_judged_with::<true>(cell, &mut entries.map(LazyEntry::from), sink, None)
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
) -> wire::WireJudge {
    let (provider, _) = cell.provider_and_name();
    let mut assembler = assembler::Assembler::new(provider);
    let mut grammar = grammar::Grammar::new();
    let mut judge = wire::WireJudge::new();
    let at = |entry: &LazyEntry| {
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
                let Some(m) = parse_object(&entry.line.to_text()) else {
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
                        && let Some(m) = parse_object(&entry.line.to_text())
                    {
                        let params = m.get("params").cloned().unwrap_or(Value::Null);
                        match m.get("method").and_then(Value::as_str) {
                            Some("thread/identity") if m.get("id").is_none() => {
                                if let Some(t) = params.get("threadId").and_then(Value::as_str) {
                                    judge.bridge_identity_at(t, &|| at(&entry));
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
                        && let Some(m) = parse_object(&entry.line.to_text())
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
                        continue;
                    };
                    if !m.is_object()
                        || m.get("method").and_then(JsonView::as_str) != Some("thread/delta")
                    {
                        continue;
                    }
                    pass.delta(&m.take("params"));
                } else {
                    let Some(mut m) = parse_object(&entry.line.to_text()) else {
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

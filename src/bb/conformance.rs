//! The live conformance kit (`bridgewire check bb`, reference §9): one bridge process, one
//! scripted run, one verdict per rule, in the kit's order and with its exact pass / fail /
//! skipped / not-applicable semantics (not applicable = no verdict at all).
//!
//! Order: hygiene (no thread) → handshake → one shared lifecycle on `thr_conformance_1` → a
//! final release of `thr_conformance_1` (no verdict). `commands/list-declared`, which bb's kit
//! lacks (§9.7), runs right after `skills/configure-declared` and is pinned both ways the same
//! way (protocol document, "Command catalog").
//!
//! `thread/delta` notifications are validated and assembled as they arrive (text window 0);
//! each event is attributed to the `threadId` of the params it came from and remembers the
//! position of its message in the received log. Every wait is bounded by the per-wait timeout
//! (default 5000 ms). A bridge that exits, closes stdout, writes non-UTF-8, non-JSON or
//! oversized lines, or floods stdout never hangs the run: waits end at EOF, and the verdicts
//! name what the bridge did. bridgewire is stricter than bb's kit in one place: a `thread/delta`
//! whose params are invalid (the runtime refuses the whole message) fails `events/schema-valid`.
//!
//! Beyond the kit, after the wire rules: `events/grammar`, bb's host grammar
//! ([`Grammar::accept_on`], the function the replay and the offline pass use) over every event
//! of the run, one state per thread, forgotten when the bridge answers the thread's release stop
//! (the runtime detaches the thread then, not when it sends the stop); each violation is named with its sub-rule and where it arrived (scenario, event, message, thread).

use super::assembler::Assembler;
use super::delta;
use super::grammar::Grammar;
use super::transport::{Bridge, Incoming, Limits};
use crate::config::{BbFixture, Icons};
use crate::jsonref::Field;
use crate::rule::{Status, SubCheck, Verdict};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// Every live rule this module checks, in the kit's order.
pub const LIVE_RULES: &[&str] = &[
    "rpc/unknown-method",
    "rpc/invalid-params",
    "rpc/non-json-ignored",
    "rpc/response-not-request",
    "handshake/initialize",
    "skills/configure-declared",
    "commands/list-declared",
    "session/start-identity",
    "turn/lifecycle",
    "events/schema-valid",
    "item/opens-before-delta",
    "presentation/icon-namespaced-declared",
    "stop/release-not-interrupted",
    "session/resume-identity",
    "session/resume-id-uniqueness",
    "session/fork-identity",
    "turn/settles-without-activity",
    "recovery/session-archived",
    "session/threads-independent",
    "stop/interrupt-settles-before-result",
    // Beyond the kit: judged on the wire over the whole run (`super::wire`).
    "turn/delta-outside-turn",
    "stop/interrupt-settles-interrupted",
    "stop/interrupt-closes-items",
    "stop/nothing-after-stop",
    "turn/vouched-key-opened",
    "session/identity-before-deltas",
    "session/identity-echoes-handle",
    "recovery/hint-names-hosted-thread",
    super::wire::THREAD_ID_ECHOED,
    // Beyond the kit: every bridge message is a JSON-RPC 2.0 message.
    JSONRPC_ENVELOPE,
    // Beyond the kit: nothing but protocol traffic on stdout.
    STDOUT_PROTOCOL_ONLY,
    // Beyond the kit: bb's host grammar over every event of the run (`LiveGrammar`).
    EVENTS_GRAMMAR,
];

/// Transport: "Anything written to stdout that is not protocol traffic is ignored by the reader;
/// bridges must guard stdout against stray writes" (a must, as every obligation of the document is written).
pub const STDOUT_PROTOCOL_ONLY: &str = "transport/stdout-protocol-only";
/// Transport: "Line-delimited JSON-RPC 2.0 … in both directions": every bridge message carries
/// `"jsonrpc": "2.0"`, every response exactly one of `result` and `error`, and no request is
/// answered twice (JSON-RPC 2.0, sections 4, 5).
pub const JSONRPC_ENVELOPE: &str = "rpc/jsonrpc-envelope";
/// bb's host-side grammar (reference §13) judged over every event the run assembled.
pub const EVENTS_GRAMMAR: &str = "events/grammar";
/// Why the rules that send `thread/resume` are not run for a bridge without sessionRestore.
const NO_SESSION_RESTORE: &str = "not applicable: the bridge does not declare capabilities.sessionRestore (false when absent), and the runtime never sends thread/resume to a bridge that did not advertise it (--kit-only sends it, as bb's kit does)";
/// The kit's rule for one grammar sub-rule: `events/grammar` leaves that sub-rule's violations
/// to it once it failed for one (one fault, one verdict).
const OPENS_BEFORE_DELTA: &str = "item/opens-before-delta";
/// Grammar violations kept with their detail (per owner); later ones are only counted.
pub const MAX_GRAMMAR_FAULTS: usize = 100;
/// Threads the live grammar keeps a state for; events of further threads are not judged (the
/// verdict says so).
pub const MAX_GRAMMAR_THREADS: usize = 10_000;

pub const MAIN_THREAD: &str = "thr_conformance_1";
pub const FORK_THREAD: &str = "thr_conformance_1_fork";
pub const OTHER_THREAD: &str = "thr_conformance_1_other";
/// How long the kit lets a release stop settle before looking for fabricated interruptions.
pub const RELEASE_SETTLE: Duration = Duration::from_millis(150);
/// Wire lines kept per failing verdict as context.
pub const CONTEXT_LINES: usize = 16;
/// Of those, the first lines of the rule's window (normally its request).
pub const CONTEXT_HEAD: usize = 4;
const CONTEXT_LINE_CHARS: usize = 400;
const WIRE_RING: usize = 256;

/// Schemas (JSON Schema 2020-12) for the wire messages the kit validates.
pub mod schema {
    pub const INITIALIZE_RESULT: &str =
        include_str!("../../rules/schema/bb-initialize-result.schema.json");
    pub const IDENTITY_RESULT: &str =
        include_str!("../../rules/schema/bb-identity-result.schema.json");
    pub const THREAD_DELTA_PARAMS: &str =
        include_str!("../../rules/schema/bb-thread-delta-params.schema.json");
    pub const THREAD_EVENT: &str = include_str!("../../rules/schema/bb-thread-event.schema.json");
    pub const COMMANDS_LIST_RESULT: &str =
        include_str!("../../rules/schema/bb-commands-list-result.schema.json");
    pub const ERROR_RESPONSE: &str =
        include_str!("../../rules/schema/bb-error-response.schema.json");
}

/// A compiled schema.
pub struct Schema(jsonschema::Validator);

impl Schema {
    pub fn compile(text: &str) -> Schema {
        let v: Value = serde_json::from_str(text).expect("embedded schema is JSON");
        Schema(jsonschema::validator_for(&v).expect("embedded schema compiles"))
    }

    /// `Err` with the first error: the field path, what was wrong and what is allowed.
    pub fn check(&self, instance: &Value) -> Result<(), String> {
        if self.0.is_valid(instance) {
            return Ok(());
        }
        match self.0.iter_errors(instance).next() {
            None => Ok(()),
            Some(e) => Err(delta::describe(instance, &e)),
        }
    }

    /// Every error the validator gives, each as `(field, description)`: the field is the
    /// instance path of what is wrong (a missing property's own path, `/protocolVersion`),
    /// the description as [`Schema::check`] words it. Empty when the instance is valid.
    pub fn errors(&self, instance: &Value) -> Vec<(String, String)> {
        if self.0.is_valid(instance) {
            return Vec::new();
        }
        let mut out: Vec<(String, String)> = Vec::new();
        for e in self.0.iter_errors(instance) {
            let mut field = e.instance_path().to_string();
            if let jsonschema::error::ValidationErrorKind::Required { property } = e.kind() {
                field = format!("{field}/{}", property.as_str().unwrap_or("?"));
            }
            let d = delta::describe(instance, &e);
            // Said once: a validator may reach one fault through two keywords' paths.
            if !out.iter().any(|(_, o)| *o == d) {
                out.push((field, d));
            }
        }
        out
    }
}

static INITIALIZE_RESULT: LazyLock<Schema> =
    LazyLock::new(|| Schema::compile(schema::INITIALIZE_RESULT));
static IDENTITY_RESULT: LazyLock<Schema> =
    LazyLock::new(|| Schema::compile(schema::IDENTITY_RESULT));
static THREAD_DELTA_PARAMS: LazyLock<Schema> =
    LazyLock::new(|| Schema::compile(schema::THREAD_DELTA_PARAMS));
pub static THREAD_EVENT: LazyLock<Schema> = LazyLock::new(|| Schema::compile(schema::THREAD_EVENT));
static COMMANDS_LIST_RESULT: LazyLock<Schema> =
    LazyLock::new(|| Schema::compile(schema::COMMANDS_LIST_RESULT));
static ERROR_RESPONSE: LazyLock<Schema> = LazyLock::new(|| Schema::compile(schema::ERROR_RESPONSE));

/// How to run the kit.
#[derive(Debug, Clone)]
pub struct Options {
    /// The bridge command (program and arguments).
    pub command: Vec<OsString>,
    pub fixture: BbFixture,
    /// Per-wait timeout.
    pub timeout: Duration,
    pub limits: Limits,
    /// bb's own verdicts only: no rule beyond the kit (the wire rules), and
    /// `events/schema-valid` judges assembled events only, as the kit does.
    pub kit_only: bool,
}

/// What a run produced besides the verdicts.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// The bridge's exit as seen at the end (before bridgewire killed it), if it had exited.
    pub bridge_exit: Option<String>,
    /// The tail of the bridge's stderr.
    pub stderr_tail: String,
    /// Transport anomalies (non-UTF-8, oversized, flood, non-JSON lines).
    pub notes: Vec<String>,
    /// Events assembled over the run.
    pub events: usize,
    /// The bridge's pid (= its process group id).
    pub pid: u32,
}

/// Runs the whole kit; `progress` is called with each verdict as it is decided.
pub fn run(
    opts: &Options,
    progress: &mut dyn FnMut(&Verdict),
) -> std::io::Result<(Vec<Verdict>, RunInfo)> {
    let temp;
    let cwd = match &opts.fixture.cwd {
        Some(c) => c.clone(),
        None => {
            // Registered: a SIGINT/SIGTERM removes it too, not only the drop.
            temp = crate::signals::temp_dir("bridgewire-conformance-")?;
            temp.path().to_string_lossy().into_owned()
        }
    };
    let bridge = Bridge::spawn(&opts.command, opts.limits)?;
    let mut client = Client::new(bridge, opts.timeout);
    client.accept_main_run = !opts.kit_only;
    let mut kit = Kit {
        c: client,
        kit_only: opts.kit_only,
        fx: &opts.fixture,
        cwd,
        verdicts: Vec::new(),
        progress,
        unknown_method_code: None,
        schema_mark: None,
        start_mark: None,
        exit_met: None,
        stop_met: None,
        probe_possible: false,
    };
    kit.run_all();
    let mut c = kit.c;
    let mut verdicts = kit.verdicts;
    // Reports list the rules in the kit's order, although events/schema-valid is judged (and
    // shown as progress) at the end of the run beyond the kit.
    verdicts.sort_by_key(|v| {
        LIVE_RULES
            .iter()
            .position(|r| *r == v.id)
            .unwrap_or(LIVE_RULES.len())
    });
    // Give a bridge that exited a moment to be reaped, so its status can be reported.
    let exit = c.bridge.try_status().map(describe_status);
    c.bridge.kill();
    let info = RunInfo {
        bridge_exit: exit,
        stderr_tail: c.bridge.stderr_tail(),
        notes: c.diag.notes(),
        events: c.events.len(),
        pid: c.bridge.pid(),
    };
    Ok((verdicts, info))
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        _ => "exited".into(),
    }
}

// ───────────────────────────── the client ─────────────────────────────

#[derive(Default, Debug)]
struct Diag {
    non_json: usize,
    /// The first non-JSON line that is not blank.
    first_non_json: Option<String>,
    /// Non-JSON lines that are blank (empty or whitespace only), counted in `non_json`.
    blank: usize,
    non_utf8: usize,
    oversized: Vec<usize>,
    flooded: Option<usize>,
    eof: bool,
    invalid_deltas: Vec<String>,
    invalid_deltas_more: usize,
    /// `turn.mainRun` deltas accepted (the protocol's held-turn signal; see
    /// [`Client::accept_main_run`]), and the message of the first.
    main_runs: usize,
    first_main_run: Option<usize>,
    responses_dropped: usize,
    events_dropped: usize,
    /// JSON array lines (JSON-RPC batches, which the bb protocol does not have).
    batches: usize,
    first_batch: Option<String>,
    /// Request ids answered only inside a batch line.
    batched_ids: HashSet<u64>,
    /// Sizes of stdout lines over [`LARGE_LINE`] bytes (still read, but worth a warning).
    large_lines: Vec<usize>,
    /// Responses whose id is a string spelling a pending numeric request id: request id →
    /// (the id as sent back, its position).
    wrong_type_ids: HashMap<u64, (String, usize)>,
    /// Bridge messages that are not JSON-RPC 2.0 (`jsonrpc` absent or not `"2.0"`): how many,
    /// and the first as (message, what it was, the `jsonrpc` it carried).
    not_v2: usize,
    first_not_v2: Option<(usize, String, String)>,
    /// Bridge messages seen (JSON objects), the denominator of `not_v2`.
    messages: usize,
    /// Responses carrying both `result` and `error`, or neither: how many, the first as
    /// (message, id, which).
    not_one_outcome: usize,
    first_not_one_outcome: Option<(usize, String, &'static str)>,
    /// Request id → the message of its first answer (ids the kit sent only).
    answered_at: HashMap<u64, usize>,
    /// Answers to a request already answered: how many, the first as (id, first, again).
    answered_again: usize,
    first_answered_again: Option<(u64, usize, usize)>,
    /// Responses whose id no request of the run carried (not null, which JSON-RPC 2.0 gives an
    /// error about a request whose id could not be read; not the stray response the
    /// `rpc/response-not-request` probe sends, which that rule judges): how many, the first as
    /// (message, id).
    answered_unsent: usize,
    first_answered_unsent: Option<(usize, String)>,
    /// Response ids written as a number with a fraction part of zero (`5.0`): read as the
    /// integer, as bb's runtime (JavaScript's `JSON.parse`) reads them. The first (message, id).
    float_ids: usize,
    first_float_id: Option<(usize, String)>,
    /// Lone UTF-16 surrogate escapes read (see [`super::surrogate`]), and the lines holding them.
    lone_surrogates: usize,
    surrogate_lines: usize,
    /// Surrogates still unpaired in an assembled item's text, and the first item.
    unpaired: usize,
    first_unpaired: Option<String>,
}

/// What a verdict's detail says when its request's answer did not reach the runtime as one: an
/// id of another type, a batch line ([`Diag::jsonrpc_envelope`] judges both).
const ENVELOPE_FAULTS: [&str; 2] = ["answered with the wrong id type", "JSON-RPC batch"];

/// Received responses kept (a bridge answers the kit's requests; unsolicited ones past this are
/// counted, not kept).
pub const MAX_RESPONSES: usize = 100_000;
/// Assembled events kept over a run (the kit's turns produce a few hundred).
pub const MAX_EVENTS: usize = 200_000;
/// Invalid `thread/delta` messages described (the rest are counted).
pub const MAX_INVALID_DELTAS: usize = 100;

/// Stdout lines above this size get a warning with their size.
pub const LARGE_LINE: usize = 1 << 20;

impl Diag {
    /// `rpc/jsonrpc-envelope`: its four sub-checks over every message of the run.
    fn jsonrpc_envelope(&self) -> Verdict {
        let version = match &self.first_not_v2 {
            None => SubCheck::pass(
                "version",
                format!("{} message(s), each with jsonrpc \"2.0\"", self.messages),
            ),
            Some((pos, what, carried)) => SubCheck::fail(
                "version",
                format!(
                    "{} of {} message(s) are not JSON-RPC 2.0 (first: {what} at message {pos}, with {carried}); the protocol is \"line-delimited JSON-RPC 2.0 … in both directions\", whose every message carries jsonrpc \"2.0\" exactly",
                    self.not_v2, self.messages
                ),
            ),
        };
        let outcome = match &self.first_not_one_outcome {
            None => SubCheck::pass("result-or-error", "each response carries one of the two"),
            Some((pos, id, which)) => SubCheck::fail(
                "result-or-error",
                format!(
                    "{} response(s) carry {which} (first: id {id} at message {pos}); a JSON-RPC 2.0 response carries exactly one of them (the kit reads an error first)",
                    self.not_one_outcome
                ),
            ),
        };
        let once = match self.first_answered_again {
            None => SubCheck::pass(
                "answered-once",
                format!("{} request(s) answered, none twice", self.answered_at.len()),
            ),
            Some((id, first, again)) => SubCheck::fail(
                "answered-once",
                format!(
                    "{} answer(s) to a request already answered (first: id {id} at message {first} and again at message {again}); a JSON-RPC 2.0 request gets one response, and the runtime holds no request for the second",
                    self.answered_again
                ),
            ),
        };
        // The first (lowest request id) of the answers under a string id.
        let first_string_id = self
            .wrong_type_ids
            .iter()
            .min_by_key(|(id, _)| **id)
            .map(|(id, (sent, pos))| (*id, sent.clone(), *pos));
        let sent = match (&self.first_answered_unsent, first_string_id) {
            (None, None) => SubCheck::pass(
                "answers-a-request",
                "each response id names a request the runtime sent",
            ),
            (unsent, string) => {
                let mut faults = Vec::new();
                if let Some((id, sent, pos)) = string {
                    faults.push(format!(
                        "{} response(s) carry their request's numeric id as a string (first: id {sent} at message {pos}, for request id {id}); JSON-RPC matches ids by type and value, so the runtime never sees them as answers",
                        self.wrong_type_ids.len()
                    ));
                }
                if let Some((pos, id)) = unsent {
                    faults.push(format!(
                        "{} response(s) to an id the runtime never sent (first: id {id} at message {pos}); a JSON-RPC 2.0 response carries the id of the request it answers, and the runtime holds no request for it",
                        self.answered_unsent
                    ));
                }
                SubCheck::fail("answers-a-request", faults.join("; "))
            }
        };
        let lines = match self.batches {
            0 => SubCheck::pass("one-message-per-line", "no JSON array line"),
            n => SubCheck::fail(
                "one-message-per-line",
                format!(
                    "{n} line(s) are JSON arrays (JSON-RPC batches; first: {}): the bb protocol is line-delimited, one message per line, and has no batches: the runtime reads none of the messages inside",
                    self.first_batch.as_deref().unwrap_or("")
                ),
            ),
        };
        Verdict::from_subchecks(JSONRPC_ENVELOPE, vec![version, outcome, once, sent, lines])
    }

    /// Names the non-JSON lines: how many were blank (empty or whitespace only, which would
    /// show as nothing), and the first that was not.
    fn blank_and_first(&self) -> (String, String) {
        let blank = match self.blank {
            0 => String::new(),
            n if n == self.non_json => ", all blank (empty or whitespace only)".to_string(),
            n => format!(", {n} of them blank (empty or whitespace only)"),
        };
        let first = match &self.first_non_json {
            Some(l) => format!("first non-JSON line: {}", printable(l)),
            None => String::new(),
        };
        (blank, first)
    }

    fn notes(&self) -> Vec<String> {
        let mut n = Vec::new();
        if self.responses_dropped > 0 {
            n.push(format!(
                "response log full: {} response(s) past {MAX_RESPONSES} not kept",
                self.responses_dropped
            ));
        }
        if self.events_dropped > 0 {
            n.push(format!(
                "event log full: {} event(s) past {MAX_EVENTS} not kept",
                self.events_dropped
            ));
        }
        if self.non_json > 0 {
            let (blank, _) = self.blank_and_first();
            let first = match &self.first_non_json {
                Some(l) => format!(", first: {l}"),
                None => String::new(),
            };
            n.push(format!(
                "{} non-JSON stdout line(s){blank}{first}",
                self.non_json
            ));
        }
        if self.non_utf8 > 0 {
            n.push(format!("{} non-UTF-8 stdout line(s)", self.non_utf8));
        }
        if let Some(len) = self.oversized.first() {
            n.push(format!(
                "{} oversized stdout line(s) discarded (first: {len} bytes)",
                self.oversized.len()
            ));
        }
        if self.batches > 0 {
            n.push(format!(
                "{} JSON-RPC batch line(s) (a JSON array; the bb protocol has no batches, each message is one line), first: {}",
                self.batches,
                self.first_batch.as_deref().unwrap_or("")
            ));
        }
        if let Some(max) = self.large_lines.iter().max() {
            n.push(format!(
                "warning: {} stdout line(s) over {} bytes (largest: {max} bytes)",
                self.large_lines.len(),
                LARGE_LINE
            ));
        }
        for (id, (sent, pos)) in &self.wrong_type_ids {
            n.push(format!(
                "the response at message {pos} has id {sent} (a string) for request id {id} (a number): JSON-RPC matches ids by type and value, so the runtime never sees it as the answer"
            ));
        }
        if self.surrogate_lines > 0 {
            n.push(format!(
                "{} line(s) held {} lone UTF-16 surrogate escape(s) (\\ud83d then \\ude00: a pair cut between chunks, as JavaScript's JSON.stringify writes it): JSON, read as bb's runtime reads it, each pair joined when the text is assembled",
                self.surrogate_lines, self.lone_surrogates
            ));
        }
        if let Some(first) = &self.first_unpaired {
            n.push(format!(
                "{} surrogate(s) stayed unpaired in an assembled item's text (first: {first}): shown as U+FFFD, as a UTF-8 encoder writes them (the protocol does not speak of it)",
                self.unpaired
            ));
        }
        if let Some((pos, id)) = &self.first_float_id {
            n.push(format!(
                "{} response id(s) written with a fraction part (first: id {id} at message {pos}), read as the integer: JSON has one number type, and bb's runtime (JavaScript) reads 5.0 as 5",
                self.float_ids
            ));
        }
        if let Some(t) = self.flooded {
            n.push(format!(
                "stdout flood: more than {t} bytes, the rest was dropped"
            ));
        }
        n
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Sent,
    Received,
}

/// One event the host grammar refused: what, where (scenario, event, message) and on which thread.
#[derive(Debug, Clone)]
struct GrammarFault {
    drop: crate::protocol::GrammarDrop,
    thread: String,
    scenario: &'static str,
    /// The event's number among every event the run assembled (its index in `Client::events`
    /// while that log has room).
    event: usize,
    /// Its `thread/delta` message's position in the received log.
    pos: usize,
}

impl GrammarFault {
    fn describe(&self) -> String {
        format!(
            "{} (event {} at message {} on thread {:?}, during {}); bb's host drops it",
            self.drop.describe(),
            self.event,
            self.pos,
            self.thread,
            self.scenario
        )
    }
}

/// bb's host grammar over the live events: one state per thread the bridge named, forgotten
/// when the bridge answers that thread's release stop (the runtime detaches it then). Fed as
/// events are assembled; judged at the end (`events/grammar`).
#[derive(Default)]
struct LiveGrammar {
    grammar: Grammar,
    /// Events judged.
    assembled: usize,
    /// `item/opens-before-delta` violations, then every other rule's: the first
    /// [`MAX_GRAMMAR_FAULTS`] of each, and the totals.
    opens: Vec<GrammarFault>,
    opens_total: usize,
    other: Vec<GrammarFault>,
    other_total: usize,
    /// Refused events that are in `Client::events` (by index).
    refused: HashSet<usize>,
    /// Where [`MAX_GRAMMAR_THREADS`] was reached (events of new threads were not judged).
    overflow: Option<String>,
    /// What the kit's `item/opens-before-delta` found when it was judged: `Some(true)` a
    /// violation (it owns that sub-rule from then on), `Some(false)` none, `None` not judged.
    kit_opens_found: Option<bool>,
    /// The last event, when it was an accepted `item/completed`: (thread, event, item id,
    /// item type).
    last_settle: Option<(String, usize, String, String)>,
    /// Terminal shapes of reclassified items the host dropped (the first kept).
    reclassified: Vec<GrammarFault>,
    reclassified_total: usize,
}

impl LiveGrammar {
    fn event(&mut self, thread: &str, pos: usize, scenario: &'static str, event: &Value) {
        let n = self.assembled;
        self.assembled += 1;
        if !self.grammar.knows(thread) && self.grammar.threads() >= MAX_GRAMMAR_THREADS {
            self.overflow
                .get_or_insert_with(|| format!("event {n} at message {pos} on thread {thread:?}"));
            return;
        }
        let settle = || {
            (event["type"] == "item/completed").then(|| {
                (
                    thread.to_string(),
                    n,
                    event["item"]["id"].as_str().unwrap_or("").to_string(),
                    event["item"]["type"].as_str().unwrap_or("").to_string(),
                )
            })
        };
        let previous = self.last_settle.take();
        let Err(drop) = self.grammar.accept_on(thread, event) else {
            self.last_settle = settle();
            return;
        };
        if n < MAX_EVENTS {
            self.refused.insert(n);
        }
        // Mid-flight reclassification (a close of another shape than the open item's, legal:
        // protocol, Item lifecycle) is settled twice by the assembler itself, the started shape
        // then the terminal one under the same id; bb's host drops the second. That is bb's
        // own pair, not a fault of the bridge's deltas.
        if let (Some((t, at, id, ty)), Some((_, _, id2, ty2))) = (&previous, settle())
            && drop.rule == "item/settles-once"
            && t == thread
            && *at + 1 == n
            && *id == id2
            && *ty != ty2
        {
            self.reclassified_total += 1;
            if self.reclassified.len() < MAX_GRAMMAR_FAULTS {
                self.reclassified.push(GrammarFault {
                    drop,
                    thread: thread.to_string(),
                    scenario,
                    event: n,
                    pos,
                });
            }
            return;
        }
        let (kept, total) = if drop.rule == OPENS_BEFORE_DELTA {
            (&mut self.opens, &mut self.opens_total)
        } else {
            (&mut self.other, &mut self.other_total)
        };
        *total += 1;
        if kept.len() < MAX_GRAMMAR_FAULTS {
            kept.push(GrammarFault {
                drop,
                thread: thread.to_string(),
                scenario,
                event: n,
                pos,
            });
        }
    }

    /// The `events/grammar` verdict. Violations of `item/opens-before-delta` are left to the
    /// kit's rule of that name once it failed for one (the same fault recurring); otherwise
    /// they are this rule's, like every other sub-rule's.
    fn verdict(&self) -> Verdict {
        let left_to_kit = self.kit_opens_found == Some(true);
        let mut mine: Vec<&GrammarFault> = self.other.iter().collect();
        let mut total = self.other_total;
        if !left_to_kit {
            mine.extend(&self.opens);
            mine.sort_by_key(|f| f.event);
            total += self.opens_total;
        }
        let left = (left_to_kit && self.opens_total > 0).then(|| {
            format!(
                "{} item/opens-before-delta violation(s) left to item/opens-before-delta, which failed for that fault (first: {})",
                self.opens_total,
                self.opens[0].describe()
            )
        });
        let overflow = self.overflow.as_ref().map(|at| {
            format!(
                "the grammar's bound ({MAX_GRAMMAR_THREADS} threads) was reached at {at}; events of later threads were not judged"
            )
        });
        if let Some(first) = mine.first() {
            let mut more: Vec<String> = mine.iter().skip(1).map(|f| f.describe()).collect();
            if total > mine.len() {
                more.push(format!(
                    "… {} more not kept (the first {MAX_GRAMMAR_FAULTS} are)",
                    total - mine.len()
                ));
            }
            more.extend(left);
            more.extend(overflow);
            let detail = if total == 1 {
                first.describe()
            } else {
                format!("{} (and {} more)", first.describe(), total - 1)
            };
            return Verdict::fail(EVENTS_GRAMMAR, detail).with_context(more);
        }
        if let Some(why) = overflow {
            // No pass on evidence not seen.
            return Verdict::not_run(EVENTS_GRAMMAR, why);
        }
        if self.assembled == 0 {
            return Verdict::not_run(EVENTS_GRAMMAR, "no event was assembled to judge");
        }
        let mut v = Verdict::pass(EVENTS_GRAMMAR);
        let reclassified = self.reclassified.first().map(|f| {
            format!(
                "{} reclassified item(s): the assembler settles the started shape, then the terminal one under the same id, and bb's host drops the second (bb's own pair, not the bridge's fault; first: {})",
                self.reclassified_total,
                f.describe()
            )
        });
        v.detail = left
            .into_iter()
            .chain(reclassified)
            .collect::<Vec<_>>()
            .join("; ");
        v
    }
}

/// One assembled event, attributed to its thread.
#[derive(Debug, Clone)]
struct Ev {
    thread: String,
    /// Position of its `thread/delta` message in the received log.
    pos: usize,
    event: Value,
}

struct Client {
    bridge: Bridge,
    timeout: Duration,
    next_id: u64,
    creq: u64,
    /// JSON objects received so far (a message's position is its index in this count).
    received: usize,
    /// Received responses (messages without `method`) with their positions. Notifications
    /// are not kept: deltas are assembled on arrival, so a flood cannot grow this log.
    resp_log: Vec<(usize, Value)>,
    /// Index into `resp_log` by response id (numeric ids only; the kit sends integers).
    responses: HashMap<u64, usize>,
    events: Vec<Ev>,
    assembler: Assembler,
    /// The protocol obligations judged on the wire (beyond the kit).
    judge: super::wire::WireJudge,
    /// bb's host grammar over every assembled event (beyond the kit).
    grammar: LiveGrammar,
    /// The scenario under way (the kit rule whose traffic is being exchanged), to say where a
    /// grammar violation arrived.
    scenario: &'static str,
    wire: VecDeque<(u64, Dir, String)>,
    wire_count: u64,
    diag: Diag,
    /// Accept `turn.mainRun { state: idle | running }`, which the protocol text gives a bridge
    /// for a held turn but bb's grammar-v3 validation (the kit's) rejects, refusing the whole
    /// message: taken out of the message before it is validated and assembled (this grammar
    /// has no `turn/mainRun/updated` event). Off under `--kit-only`.
    accept_main_run: bool,
    /// `provider/recovery` notifications: (message, params), the first [`MAX_INVALID_DELTAS`].
    recoveries: Vec<(usize, Value)>,
    /// Release stops sent and not yet answered: request id → thread. The host forgets the
    /// thread's grammar state when the stop is answered (protocol, Turn lifecycle 6: what the
    /// bridge still owes for the thread goes out before the response), not when it is sent.
    releasing: HashMap<u64, String>,
    /// thread/start and thread/fork requests awaiting their result: id → (method, thread).
    constructing: HashMap<u64, (&'static str, String)>,
    /// The handles those results announced, in order: (method, thread, handle, message).
    announced: Vec<(&'static str, String, String, usize)>,
    /// Release stops answered while background work (a background task or delegation) was
    /// still open on the thread: (stop id, answer message, the items as (bb id, shape)).
    released_open: Vec<(u64, usize, Vec<PendingItem>)>,
    /// Thread → the message of the last `session.reset` delta for it.
    resets: HashMap<String, usize>,
}

/// An open item as (bb id, shape).
type PendingItem = (String, String);

fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Control characters (a terminal escape a bridge wrote, say) shown as `\u{..}` escapes.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl Client {
    fn new(bridge: Bridge, timeout: Duration) -> Client {
        Client {
            bridge,
            timeout,
            next_id: 1,
            creq: 0,
            received: 0,
            resp_log: Vec::new(),
            responses: HashMap::new(),
            events: Vec::new(),
            assembler: Assembler::new("conformance"),
            judge: super::wire::WireJudge::new(),
            grammar: LiveGrammar::default(),
            scenario: "rpc/unknown-method",
            wire: VecDeque::new(),
            wire_count: 0,
            diag: Diag::default(),
            accept_main_run: false,
            recoveries: Vec::new(),
            releasing: HashMap::new(),
            constructing: HashMap::new(),
            announced: Vec::new(),
            released_open: Vec::new(),
            resets: HashMap::new(),
        }
    }

    fn note_wire(&mut self, dir: Dir, line: String) {
        self.wire_count += 1;
        self.wire.push_back((self.wire_count, dir, line));
        if self.wire.len() > WIRE_RING {
            self.wire.pop_front();
        }
    }

    /// The wire lines after `mark`: the first [`CONTEXT_HEAD`] (what the rule sent) and the
    /// last of them, [`CONTEXT_LINES`] at most, with a gap marker between.
    fn context_since(&self, mark: u64) -> Vec<String> {
        let lines: Vec<String> = self
            .wire
            .iter()
            .filter(|(n, _, _)| *n > mark)
            .map(|(_, d, l)| {
                let arrow = match d {
                    Dir::Sent => "→",
                    Dir::Received => "←",
                };
                format!("{arrow} {}", printable(&clip(l, CONTEXT_LINE_CHARS)))
            })
            .collect();
        if lines.len() <= CONTEXT_LINES {
            return lines;
        }
        let tail = CONTEXT_LINES - CONTEXT_HEAD;
        let gap = lines.len() - CONTEXT_LINES;
        let mut out: Vec<String> = lines[..CONTEXT_HEAD].to_vec();
        out.push(format!("… {gap} more line(s) …"));
        out.extend_from_slice(&lines[lines.len() - tail..]);
        out
    }

    fn send_raw(&mut self, line: &str) {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            let at = match (v.get("method").and_then(Value::as_str), v.get("id")) {
                (Some(m), Some(id)) => format!("the {m} request (id {id})"),
                _ => "a runtime line".to_string(),
            };
            self.judge.runtime(&v, &at);
            // A release stop makes the host forget the thread's grammar state once it is
            // answered: what the bridge sends before the response still lands on the thread
            // (a background delegation's last progress and close, for one).
            let thread = v.f("params").f("threadId").as_str();
            if let (Some(t), Some(id)) = (thread, v.get("id").and_then(Value::as_u64))
                && let Some(&m) = ["thread/start", "thread/fork"]
                    .iter()
                    .find(|m| v.f("method") == **m)
            {
                self.constructing.insert(id, (m, t.to_string()));
            }
            if v.f("method") == "thread/stop"
                && v.f("params").f("intent") == "release"
                && let (Some(t), Some(id)) = (thread, v.get("id").and_then(Value::as_u64))
            {
                self.releasing.insert(id, t.to_string());
            } else if let Some(t) = thread
                && matches!(
                    v.f("method").as_str(),
                    Some("thread/start" | "thread/resume" | "thread/fork")
                )
            {
                // A stop never answered (its own rule's fault) detaches the thread all the
                // same before the runtime constructs it again.
                let before = self.releasing.len();
                self.releasing.retain(|_, r| r != t);
                if self.releasing.len() != before {
                    self.grammar.grammar.clear_thread(t);
                }
            }
        }
        self.note_wire(Dir::Sent, line.to_string());
        self.bridge.send_line(line);
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&msg.to_string());
        id
    }

    fn client_request_id(&mut self) -> String {
        const ALPHABET: &[u8] = b"23456789abcdefghijkmnpqrstuvwxyz";
        self.creq += 1;
        let mut n = self.creq;
        let mut digits = Vec::new();
        while n > 0 {
            digits.push(ALPHABET[(n % 32) as usize]);
            n /= 32;
        }
        while digits.len() < 10 {
            digits.push(b'2');
        }
        digits.reverse();
        format!("creq_{}", String::from_utf8(digits).expect("ascii"))
    }

    /// Processes one incoming item; waits until `deadline` at most. `false` on timeout/EOF.
    fn pump(&mut self, deadline: Instant) -> bool {
        let Some(item) = self.bridge.recv(deadline) else {
            return false;
        };
        match item {
            Incoming::Line(line) => self.on_line(line),
            Incoming::NonUtf8 { len, head } => {
                self.diag.non_utf8 += 1;
                // Bytes are kept, not replaced: base64 of the line's head.
                self.note_wire(
                    Dir::Received,
                    format!(
                        "<non-UTF-8 line, {len} bytes, starting base64:{}>",
                        crate::util::base64_encode(&head)
                    ),
                );
            }
            Incoming::Oversized { len } => {
                self.diag.oversized.push(len);
                self.note_wire(Dir::Received, format!("<oversized line, {len} bytes>"));
            }
            Incoming::Flooded { total } => {
                self.diag.flooded = Some(total);
                self.note_wire(Dir::Received, format!("<flood: {total} bytes>"));
            }
            Incoming::Eof => {
                self.diag.eof = true;
                self.note_wire(Dir::Received, "<stdout closed>".into());
            }
        }
        true
    }

    fn on_line(&mut self, line: String) {
        // A lone UTF-16 surrogate escape (a pair cut between two chunks) is JSON that serde
        // refuses and bb's runtime takes: read with markers, joined after assembly.
        let parsed = super::msg::parse(&line).map(|(v, lone)| {
            if lone > 0 {
                self.diag.lone_surrogates += lone;
                self.diag.surrogate_lines += 1;
            }
            v
        });
        self.note_wire(Dir::Received, clip(&line, 4096));
        if line.len() > LARGE_LINE {
            self.diag.large_lines.push(line.len());
        }
        let v = match parsed {
            Ok(v @ Value::Object(_)) => v,
            Ok(Value::Array(items)) => {
                for id in items.iter().filter_map(|i| i.get("id")?.as_u64()) {
                    self.diag.batched_ids.insert(id);
                }
                self.diag.batches += 1;
                if self.diag.first_batch.is_none() {
                    self.diag.first_batch = Some(clip(&line, 120));
                }
                return;
            }
            _ => {
                self.diag.non_json += 1;
                if line.trim().is_empty() {
                    // Named as what it is: an empty line shows as nothing at all.
                    self.diag.blank += 1;
                } else if self.diag.first_non_json.is_none() {
                    self.diag.first_non_json = Some(clip(&line, 120));
                }
                return;
            }
        };
        let pos = self.received;
        self.received += 1;
        self.diag.messages += 1;
        if v.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            self.diag.not_v2 += 1;
            if self.diag.first_not_v2.is_none() {
                let what = match (v.get("method").and_then(Value::as_str), v.get("id")) {
                    (Some(m), _) => format!("a {m} message"),
                    (None, Some(id)) => format!("the response to id {id}"),
                    (None, None) => "a message with neither method nor id".to_string(),
                };
                let carried = match v.get("jsonrpc") {
                    None => "no jsonrpc member".to_string(),
                    Some(j) => format!("jsonrpc {}", clip(&j.to_string(), 40)),
                };
                self.diag.first_not_v2 = Some((pos, what, carried));
            }
        }
        let method = v.get("method").and_then(Value::as_str).map(str::to_string);
        match method {
            None => {
                self.judge.bridge_response(&v, &format!("message {pos}"));
                let rid = v.get("id").and_then(response_id);
                if rid.is_some() && !v["id"].is_u64() {
                    self.diag.float_ids += 1;
                    self.diag
                        .first_float_id
                        .get_or_insert((pos, v["id"].to_string()));
                }
                let outcome = match (v.get("result").is_some(), v.get("error").is_some()) {
                    (true, true) => Some("both result and error"),
                    (false, false) => Some("neither result nor error"),
                    _ => None,
                };
                if let Some(which) = outcome {
                    self.diag.not_one_outcome += 1;
                    self.diag.first_not_one_outcome.get_or_insert((
                        pos,
                        clip(&v.get("id").cloned().unwrap_or(Value::Null).to_string(), 40),
                        which,
                    ));
                }
                let id_value = v.get("id").unwrap_or(&Value::Null);
                let spells_a_sent_id = || {
                    id_value
                        .as_str()
                        .and_then(|s| s.parse::<u64>().ok())
                        .is_some_and(|n| n < self.next_id)
                };
                if !id_value.is_null()
                    && rid != Some(STRAY_RESPONSE_ID)
                    && rid.is_none_or(|id| id >= self.next_id)
                    && !spells_a_sent_id()
                {
                    self.diag.answered_unsent += 1;
                    self.diag
                        .first_answered_unsent
                        .get_or_insert((pos, clip(&id_value.to_string(), 40)));
                }
                if let Some(id) = rid.filter(|id| *id < self.next_id) {
                    match self.diag.answered_at.get(&id) {
                        Some(&first) => {
                            self.diag.answered_again += 1;
                            self.diag
                                .first_answered_again
                                .get_or_insert((id, first, pos));
                        }
                        None => {
                            self.diag.answered_at.insert(id, pos);
                        }
                    }
                }
                if let Some(t) = rid.and_then(|id| self.releasing.remove(&id)) {
                    self.grammar.grammar.clear_thread(&t);
                    let open = self.assembler.open_thread_attached(&t);
                    if !open.is_empty() && self.released_open.len() < MAX_INVALID_DELTAS {
                        self.released_open.push((rid.unwrap_or(0), pos, open));
                    }
                }
                if let Some((method, t)) = rid.and_then(|id| self.constructing.remove(&id))
                    && let Some(h) = v.f("result").f("providerThreadId").as_str()
                    && self.announced.len() < MAX_RESPONSES
                {
                    self.announced.push((method, t, h.to_string(), pos));
                }
                if self.resp_log.len() >= MAX_RESPONSES {
                    self.diag.responses_dropped += 1;
                    return;
                }
                if let Some(id) = rid {
                    self.responses.entry(id).or_insert(self.resp_log.len());
                } else if let Some(n) = v
                    .get("id")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u64>().ok())
                    .filter(|n| *n < self.next_id && !self.responses.contains_key(n))
                {
                    self.diag
                        .wrong_type_ids
                        .entry(n)
                        .or_insert((v["id"].to_string(), pos));
                }
                self.resp_log.push((pos, v));
            }
            Some(m) if m == "thread/identity" && v.get("id").is_none() => {
                if let Some(thread) = v.f("params").f("threadId").as_str() {
                    let handle = v.f("params").f("providerThreadId").as_str();
                    self.judge
                        .bridge_identity_at(thread, handle, &|| format!("message {pos}"));
                }
            }
            Some(m) if m == "provider/recovery" && v.get("id").is_none() => {
                let params = v.get("params").cloned().unwrap_or(Value::Null);
                self.judge
                    .bridge_recovery_at(&params, &|| format!("message {pos}"));
                if self.recoveries.len() < MAX_INVALID_DELTAS {
                    self.recoveries
                        .push((pos, v.get("params").cloned().unwrap_or(Value::Null)));
                }
            }
            Some(m) if m == "thread/delta" => {
                let mut params = v.get("params").cloned().unwrap_or(Value::Null);
                if self.accept_main_run {
                    let n = delta::take_main_runs(&mut params);
                    if n > 0 {
                        self.diag.main_runs += n;
                        self.diag.first_main_run.get_or_insert(pos);
                    }
                }
                let checked = THREAD_DELTA_PARAMS
                    .check(&params)
                    .and_then(|()| delta::validate_params(&params).map(|_| ()));
                if checked.is_err()
                    && let Some(thread) = params.get("threadId").and_then(Value::as_str)
                {
                    self.judge
                        .bridge_refused_delta_at(thread, &|| format!("message {pos}"));
                }
                match checked {
                    Err(_) if self.diag.invalid_deltas.len() >= MAX_INVALID_DELTAS => {
                        self.diag.invalid_deltas_more += 1;
                    }
                    Err(e) => {
                        let cause = self
                            .accept_main_run
                            .then(|| delta::held_turn_fault(&params, &e))
                            .flatten()
                            .unwrap_or(e);
                        self.diag
                            .invalid_deltas
                            .push(format!("message {pos}: {cause}"))
                    }
                    Ok(()) => {
                        let (thread, deltas) = delta::validate_params(&params).expect("checked");
                        if deltas.iter().any(|d| d.f("kind") == "session.reset")
                            && (self.resets.len() < MAX_RESPONSES
                                || self.resets.contains_key(thread))
                        {
                            self.resets.insert(thread.to_string(), pos);
                        }
                        self.judge
                            .bridge_delta_keys(thread, deltas, &|| format!("message {pos}"));
                        let events = self.assembler.assemble(thread, deltas);
                        let drops = self.assembler.take_silent_drops();
                        let forgotten = self.assembler.take_forgotten_items();
                        self.judge.bridge_delta(
                            thread,
                            &format!("message {pos}"),
                            &events,
                            &drops,
                            &forgotten,
                        );
                        for mut event in events {
                            if self.diag.surrogate_lines > 0 {
                                let left = super::surrogate::join(&mut event);
                                if left > 0 && is_type(&event, "item/completed") {
                                    self.diag.unpaired += left;
                                    self.diag.first_unpaired.get_or_insert_with(|| {
                                        let id = event.f("item").f("id").as_str().unwrap_or("?");
                                        format!("item {id} at message {pos}")
                                    });
                                }
                            }
                            self.grammar.event(thread, pos, self.scenario, &event);
                            if self.events.len() >= MAX_EVENTS {
                                self.diag.events_dropped += 1;
                                continue;
                            }
                            self.events.push(Ev {
                                thread: thread.to_string(),
                                pos,
                                event,
                            });
                        }
                    }
                }
            }
            Some(_) => {
                // A bridge→runtime request: the kit offers no runtime services.
                if let Some(id) = v.get("id").filter(|i| i.is_u64() || i.is_string()) {
                    let answer = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not supported by the conformance client"}});
                    self.send_raw(&answer.to_string());
                }
            }
        }
    }

    /// Pumps until `done` holds or the per-wait timeout passes or stdout is drained.
    fn wait(&mut self, mut done: impl FnMut(&Client) -> bool) -> bool {
        let deadline = Instant::now() + self.timeout;
        loop {
            if done(self) {
                return true;
            }
            // Checked here too: a flooding bridge always has something queued.
            if Instant::now() >= deadline || !self.pump(deadline) {
                return done(self);
            }
        }
    }

    /// Pumps everything that arrives for `d` (no early end but EOF).
    fn settle(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline && self.pump(deadline) {}
    }

    /// Whether the bridge answers an alive probe (an unknown method) within the per-wait
    /// timeout: any answer counts, even under the wrong id type.
    fn answers_alive_probe(&mut self) -> bool {
        let id = self.request("bb/conformance/alive-probe", json!({}));
        self.wait_response(id).is_some()
            || self.diag.wrong_type_ids.contains_key(&id)
            || self.diag.batched_ids.contains(&id)
    }

    fn wait_response(&mut self, id: u64) -> Option<Value> {
        // An answer under the wrong id type ends the wait too: it is named, not waited out.
        self.wait(|c| {
            c.responses.contains_key(&id)
                || c.diag.wrong_type_ids.contains_key(&id)
                || c.diag.batched_ids.contains(&id)
        });
        self.response(id).cloned()
    }

    /// The first thread/start or thread/fork result (of `methods`) that announced a handle
    /// announced before: by another thread, or, for a thread/start, by the same thread's
    /// earlier session (a start constructs a new provider session). As (method, thread,
    /// message, first thread, first message).
    fn handle_taken(&self, methods: &[&str]) -> Option<(String, String, usize, String, usize)> {
        self.announced
            .iter()
            .enumerate()
            .filter(|(_, (m, ..))| methods.contains(m))
            .find_map(|(i, (m, t, h, at))| {
                let (_, first, _, first_at) = self.announced[..i]
                    .iter()
                    .find(|(_, ft, fh, _)| fh == h && (ft != t || *m == "thread/start"))?;
                Some((
                    format!("{m} for {t:?} answered providerThreadId {h:?}"),
                    t.clone(),
                    *at,
                    first.clone(),
                    *first_at,
                ))
            })
    }

    fn response(&self, id: u64) -> Option<&Value> {
        self.responses.get(&id).map(|&i| &self.resp_log[i].1)
    }

    /// The position (in the received count) of the response to `id`.
    fn response_pos(&self, id: u64) -> Option<usize> {
        self.responses.get(&id).map(|&i| self.resp_log[i].0)
    }

    /// Index of the first event at or after `from` on `thread` matching `pred`.
    fn find_event(
        &self,
        thread: &str,
        from: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<usize> {
        (from..self.events.len())
            .find(|&i| self.events[i].thread == thread && pred(&self.events[i].event))
    }

    fn wait_event(
        &mut self,
        thread: &str,
        from: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<usize> {
        let mut cursor = from;
        let mut found = None;
        self.wait(|c| {
            if let Some(i) = c.find_event(thread, cursor, &pred) {
                found = Some(i);
                return true;
            }
            cursor = c.events.len();
            false
        });
        found
    }

    /// What the bridge did, for "no answer" details.
    /// When the last request was answered under a string id spelling its numeric id.
    fn wrong_type_answer(&self) -> Option<String> {
        let last = self.next_id.checked_sub(1)?;
        if self.diag.batched_ids.contains(&last) {
            return Some(format!(
                "request id {last} was answered only inside a JSON-RPC batch (a JSON array line); the bb protocol has no batches, each message is one line"
            ));
        }
        let (sent, pos) = self.diag.wrong_type_ids.get(&last)?;
        Some(format!(
            "the response at message {pos} has id {sent} (a string) for request id {last} (a number); JSON-RPC matches ids by type and value, so the runtime never sees it as the answer"
        ))
    }

    fn why_silent(&mut self) -> String {
        let mut parts = Vec::new();
        if self.diag.eof {
            match self.bridge.wait_status(Duration::from_millis(200)) {
                Some(s) => parts.push(format!("{BRIDGE_EXITED}{})", describe_status(s))),
                None => parts.push("bridge closed stdout".to_string()),
            }
        } else if let Some(s) = self.bridge.try_status() {
            parts.push(format!("{BRIDGE_EXITED}{})", describe_status(s)));
        }
        parts.extend(self.diag.notes());
        let partial = self.bridge.partial_line_len();
        if partial > 0 {
            let cap = self.bridge.limits().max_line;
            parts.push(if partial > cap {
                format!("an oversized stdout line without newline: {partial} bytes so far, over the {cap}-byte cap")
            } else {
                format!("{partial} bytes of stdout without a newline")
            });
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    }
}

/// A response id as the kit's integer request id: an unsigned integer, or a number with a
/// fraction part of zero (`5.0`: JSON has one number type, and bb's runtime reads it as 5).
/// The id of the stray response `rpc/response-not-request` sends the bridge (a bridge that
/// answers it is that rule's fault, not `rpc/jsonrpc-envelope`'s).
const STRAY_RESPONSE_ID: u64 = 999_999;

fn response_id(id: &Value) -> Option<u64> {
    id.as_u64()
        .or_else(|| super::msg::json_int(id).and_then(|n| u64::try_from(n).ok()))
}

fn error_code(resp: &Value) -> Option<i64> {
    resp.get("error")?.get("code")?.as_i64()
}

fn is_error(resp: &Value) -> bool {
    resp.get("error").is_some()
}

fn describe_answer(resp: &Value) -> String {
    match resp.get("error") {
        Some(e) => {
            let error = format!(
                "error {} {}",
                e.get("code").map(Value::to_string).unwrap_or_default(),
                e.get("message").and_then(Value::as_str).unwrap_or("")
            );
            let error = error.trim_end();
            match resp.get("result") {
                // Named: read as the error (as a JSON-RPC client checks error first), but
                // the response broke JSON-RPC 2.0 (one of the two, never both).
                Some(r) => format!(
                    "{error} (the response carries both result and error, result {}; see {JSONRPC_ENVELOPE})",
                    clip(&r.to_string(), 120)
                ),
                None => error.to_string(),
            }
        }
        None => format!(
            "result {}",
            clip(
                &resp
                    .get("result")
                    .cloned()
                    .unwrap_or(Value::Null)
                    .to_string(),
                200
            )
        ),
    }
}

fn is_type(ev: &Value, ty: &str) -> bool {
    ev.get("type").and_then(Value::as_str) == Some(ty)
}

fn turn_id(ev: &Value) -> Option<&str> {
    ev.get("scope")?.get("turnId")?.as_str()
}

/// A top-level (non-child) `turn/started`.
fn is_main_turn_start(ev: &Value) -> bool {
    is_type(ev, "turn/started") && turn_id(ev).is_some() && ev.get("parentToolCallId").is_none()
}

// ───────────────────────────── the kit ─────────────────────────────

#[derive(Debug, Clone, Default)]
struct Caps {
    fork: String,
    /// `capabilities.sessionRestore` (false when absent): gates `thread/resume`.
    session_restore: bool,
    skills_configure: bool,
    commands_list: bool,
}

/// How a rule's detail says the bridge process had exited ([`Client::why_silent`]).
const BRIDGE_EXITED: &str = "bridge exited (";

/// How the rule that met a bridge's stop (running, answering nothing) says so.
const STOPPED_ANSWERING: &str = "the bridge, still running, has stopped answering";

struct Kit<'a> {
    c: Client,
    kit_only: bool,
    /// The rule that first failed for want of answers from a bridge that had exited: the one
    /// bridge process serves every rule, so the rules after it are skipped naming it.
    exit_met: Option<String>,
    /// The rule after whose failure the bridge, still running, answered no alive probe (an
    /// unknown method, which it answered at the start of the run), with the count of messages
    /// received then: while nothing more arrives, a later rule that fails is skipped naming it.
    stop_met: Option<(String, usize)>,
    /// Whether the bridge answers an unknown method (`rpc/unknown-method`): what an alive probe
    /// needs. A bridge that drops them cannot be probed; its failures stand as they are.
    probe_possible: bool,
    fx: &'a BbFixture,
    cwd: String,
    verdicts: Vec<Verdict>,
    progress: &'a mut dyn FnMut(&Verdict),
    /// The wrong error code `rpc/unknown-method` got: a capability-gated method refused with
    /// that same code is that rule's fault, not the capability rule's.
    unknown_method_code: Option<i64>,
    /// Where `events/schema-valid`'s scenario began, when it is judged at the end of the run.
    schema_mark: Option<u64>,
    /// Where `session/start-identity`'s scenario began, when it is judged at the end of the run.
    start_mark: Option<u64>,
}

impl Kit<'_> {
    fn mark(&self) -> u64 {
        self.c.wire_count
    }

    /// Starts the traffic of `scenario` (named where a grammar violation arrives); its mark.
    fn begin(&mut self, scenario: &'static str) -> u64 {
        self.c.scenario = scenario;
        self.mark()
    }

    fn emit(&mut self, mark: u64, mut v: Verdict) {
        // One fault, one verdict: once the runtime refused a thread/delta (whole), a later
        // rule that fails may only be missing what that message carried. It is reported as
        // skipped (still failing the run), naming the cause; events/schema-valid fails for it.
        // A rule skipped for want of evidence (no events, no glyph) names that cause too; a
        // skip for a failed prerequisite keeps its own cause.
        let lacks_evidence = v.status == Status::Skipped
            && !v.detail.starts_with("prerequisite")
            && !v.detail.starts_with("could not be judged");
        // A late delta, a late identity or a hint for a foreign thread is a fault whatever
        // the refused messages held.
        let stands_alone = [
            "events/schema-valid",
            super::wire::NOTHING_AFTER_STOP,
            super::wire::IDENTITY_BEFORE_DELTAS,
            super::wire::HINT_NAMES_HOSTED_THREAD,
            super::wire::THREAD_ID_ECHOED,
            JSONRPC_ENVELOPE,
        ]
        .contains(&v.id.as_str());
        // One fault, one verdict: an answer under a string id never reaches the runtime as the
        // answer, and the runtime reads nothing inside a batch line (a JSON array): both are
        // rpc/jsonrpc-envelope's faults, judged at the end of the run. A rule whose request
        // went unanswered for it, or that may only be missing what a batch carried, is skipped
        // naming it (an audit's Node bridge echoing ids as strings failed four rules; one
        // sending its deltas as batches failed two lifecycle rules, the envelope passing).
        let envelope_fault = ENVELOPE_FAULTS.iter().any(|f| v.detail.contains(f));
        let batches = self.c.diag.batches;
        if !self.kit_only
            && !stands_alone
            && ((v.status == Status::Fail && envelope_fault)
                || (batches > 0 && (v.status == Status::Fail || lacks_evidence)))
        {
            v.status = Status::Skipped;
            v.detail = if envelope_fault {
                format!(
                    "could not be judged apart from {JSONRPC_ENVELOPE}, which fails for it: {}",
                    v.detail
                )
            } else {
                format!(
                    "could not be judged: the runtime reads none of the messages inside the bridge's {batches} JSON array line(s) (batches; see {JSONRPC_ENVELOPE}); without them: {}",
                    v.detail
                )
            };
        }
        if (v.status == Status::Fail || lacks_evidence)
            && !stands_alone
            && !self.kit_only
            && !v.detail.starts_with("could not be judged")
            && let Some(first) = self.c.diag.invalid_deltas.first()
        {
            let n = self.c.diag.invalid_deltas.len();
            // Kept in place (not rebuilt) so the verdict's sub-checks stay shown.
            v.status = Status::Skipped;
            v.detail = format!(
                "could not be judged: the runtime refused {n} thread/delta message(s) (first: {first}; see events/schema-valid); without them: {}",
                v.detail
            );
        }
        // One fault, one verdict: deltas under a threadId the runtime never named reach no
        // thread (bb's runtime routes by it), so a rule missing its thread's events fails for
        // that fault, thread/delta-echoes-thread-id's.
        if (v.status == Status::Fail || lacks_evidence)
            && !stands_alone
            && !self.kit_only
            && !v.detail.starts_with("could not be judged")
            && let Some((at, thread)) = &self.c.judge.foreign_thread_first
        {
            let n = self.c.judge.foreign_thread_deltas;
            v.status = Status::Skipped;
            v.detail = format!(
                "could not be judged: the bridge sent {n} thread/delta message(s) under a threadId the runtime never named (first: {thread:?} at {at}; see {}); without them: {}",
                super::wire::THREAD_ID_ECHOED,
                v.detail
            );
        }
        // One fault, one verdict: one bridge process serves every rule, so once it has exited
        // nothing after is answered. The first rule that failed for it carries the exit (a
        // crash on its probe is its fault); a later one failing for want of answers is skipped
        // naming it (still failing the run). bb's kit fails each: kept under --kit-only.
        // A rule left without evidence after the exit (nothing to judge) names it too.
        if lacks_evidence
            && !self.kit_only
            && !v.detail.starts_with("not judged: ")
            && let Some(first) = &self.exit_met
        {
            v.detail = format!(
                "not judged: the bridge had exited during {first}, which carries that fault: {}",
                v.detail
            );
        } else if v.status == Status::Fail && !self.kit_only && v.detail.contains(BRIDGE_EXITED) {
            match &self.exit_met {
                Some(first) if *first != v.id => {
                    v.status = Status::Skipped;
                    v.detail = format!(
                        "not judged: the bridge had exited during {first}, which carries that fault: {}",
                        v.detail
                    );
                }
                Some(_) => {}
                None => self.exit_met = Some(v.id.clone()),
            }
        }
        // One fault, one verdict: a bridge still running that has stopped answering (a
        // deadlocked stdin reader) leaves every later rule without answers. After a rule fails,
        // an alive probe tells that bridge from a rule's own fault: unanswered, this rule
        // carries the stop, and while nothing more arrives, a later rule that fails is skipped
        // naming it (still failing the run). bb's kit fails each: kept under --kit-only.
        // A rule skipped for want of answers after the stop names it too (a rule that stands
        // alone when it fails included: what it lacks is traffic the stop kept away).
        if ((v.status == Status::Fail && !stands_alone) || lacks_evidence)
            && !self.kit_only
            && self.probe_possible
            && !v.detail.contains(BRIDGE_EXITED)
        {
            match &self.stop_met {
                Some((first, at)) if *first != v.id && *at == self.c.received => {
                    v.status = Status::Skipped;
                    v.detail = format!(
                        "not judged: the bridge had stopped answering during {first}, which carries that fault, and has sent nothing since: {}",
                        v.detail
                    );
                }
                _ if v.status != Status::Fail => {}
                _ if self.c.answers_alive_probe() => self.stop_met = None,
                _ => {
                    v.detail.push_str(&format!(
                        "; {STOPPED_ANSWERING}: an alive probe sent after this rule (an unknown method, which it answered at the start of the run) went unanswered too"
                    ));
                    self.stop_met = Some((v.id.clone(), self.c.received));
                }
            }
        }
        if v.status != Status::Pass && v.context.is_empty() {
            v.context = self.c.context_since(mark);
        }
        (self.progress)(&v);
        self.verdicts.push(v);
    }

    /// Whether the bridge has exited, or stopped answering and sent nothing since: the run
    /// was cut short, so a rule over the whole wire that found nothing to judge, or passed
    /// only because nothing of its kind was sent, saw no evidence ([`Kit::unseen`]).
    fn cut_short(&self) -> bool {
        !self.kit_only
            && (self.exit_met.is_some()
                || self
                    .stop_met
                    .as_ref()
                    .is_some_and(|(_, at)| *at == self.c.received))
    }

    /// `v` as a rule over the whole wire reports it, made *skipped* when the run was cut short
    /// and `v` rests on nothing seen: not run for want of traffic, or passed because nothing of
    /// its kind was sent (`vacuous`). [`Kit::emit`] then names the exit or the stop.
    fn unseen(&self, mut v: Verdict, vacuous: bool) -> Verdict {
        if self.cut_short() && (v.status == Status::NotRun || (v.status == Status::Pass && vacuous))
        {
            v.status = Status::Skipped;
        }
        v
    }

    /// Why the rules after `rule`, which did not pass, are skipped: it failed, or it was
    /// skipped (its failure carried by another rule, [`Kit::emit`]).
    fn prerequisite(&self, rule: &str) -> String {
        match self.verdicts.iter().rev().find(|v| v.id == rule) {
            Some(v) if v.status == Status::Skipped => {
                format!("prerequisite {rule} was not judged (skipped)")
            }
            _ => format!("prerequisite {rule} failed"),
        }
    }

    fn pass(&mut self, id: &str, mark: u64) {
        self.emit(mark, Verdict::pass(id));
    }

    fn fail(&mut self, id: &str, mark: u64, detail: impl Into<String>) {
        self.emit(mark, Verdict::fail(id, detail));
    }

    fn skip(&mut self, id: &str, mark: u64, detail: impl Into<String>) {
        self.emit(mark, Verdict::skipped(id, detail));
    }

    fn unanswered(&mut self, what: &str) -> String {
        match self.c.wrong_type_answer() {
            Some(d) if d.contains("batch") => format!("{what} not answered as a message: {d}"),
            Some(d) => format!("{what} answered with the wrong id type: {d}"),
            None => format!("{what} unanswered{}", self.c.why_silent()),
        }
    }

    fn run_all(&mut self) {
        self.hygiene();
        let caps = self.handshake();
        self.lifecycle(caps);
        if !self.kit_only {
            if let Some(m) = self.start_mark.take() {
                match self.c.handle_taken(&["thread/start"]) {
                    Some((what, t, at, first, first_at)) if t == first => self.fail(
                        "session/start-identity",
                        m,
                        format!("{what} at message {at}, the handle the thread's earlier session announced (message {first_at}): a thread/start constructs a new provider session (the earlier one was released; the runtime resumes a session with thread/resume, never with thread/start), and a handle names exactly one provider session among all of that provider's sessions on the host"),
                    ),
                    Some((what, _, at, first, first_at)) => self.fail(
                        "session/start-identity",
                        m,
                        format!("{what} at message {at}, which thread {first:?} announced first (message {first_at}): a handle names exactly one provider session, never one minted from a per-process counter (bb refuses to resume a handle another thread announced first)"),
                    ),
                    None => self.pass("session/start-identity", m),
                }
            }
            if let Some(m) = self.schema_mark.take() {
                self.events_schema_valid(m);
            }
            self.wire_rules();
            let m = self.mark();
            let v = self.c.diag.jsonrpc_envelope();
            self.emit(m, v);
            let m = self.mark();
            let stray = self.c.diag.non_json + self.c.diag.non_utf8;
            let v = if stray == 0 {
                Verdict::pass(STDOUT_PROTOCOL_ONLY)
            } else {
                Verdict::fail(STDOUT_PROTOCOL_ONLY, {
                    let (blank, first) = self.c.diag.blank_and_first();
                    let first = if first.is_empty() {
                        first
                    } else {
                        format!("; {first}")
                    };
                    format!(
                        "{stray} stdout line(s) were not protocol traffic ({} not JSON{blank}, {} not UTF-8){first}: the runtime ignores them, but a stray write can also split or corrupt a protocol line, so bridges must guard stdout",
                        self.c.diag.non_json, self.c.diag.non_utf8
                    )
                })
            };
            self.emit(m, v);
            let m = self.mark();
            let mut v = self.unseen(self.c.grammar.verdict(), false);
            if v.status == Status::NotRun
                && self.c.grammar.assembled == 0
                && let Some(first) = self.c.diag.invalid_deltas.first()
            {
                // Name why nothing was assembled.
                v.detail = format!(
                    "{} (the runtime refused {} thread/delta message(s), first: {first}; see events/schema-valid)",
                    v.detail,
                    self.c.diag.invalid_deltas.len() + self.c.diag.invalid_deltas_more
                );
            }
            self.emit(m, v);
        }
    }

    /// The wire rules over everything this run sent and received (beyond the kit). A stop rule
    /// with nothing to judge is *not run* with the reason; without the interrupt fixture the
    /// interrupt rule gives no verdict here (the CLI lists it as not run, naming the key).
    fn wire_rules(&mut self) {
        let m = self.mark();
        for v in self.c.judge.verdicts(str::to_string) {
            // Judged live by the kit's own scenario of that name (one rule, one verdict).
            if v.id == super::wire::SETTLES_BEFORE_RESULT {
                continue;
            }
            let vacuous = self.c.judge.saw_none_for(&v.id);
            if v.status == Status::NotRun
                && [
                    super::wire::INTERRUPT_SETTLES_INTERRUPTED,
                    super::wire::INTERRUPT_CLOSES_ITEMS,
                ]
                .contains(&v.id.as_str())
                && self.fx.interruptible_prompt_input.is_none()
            {
                continue;
            }
            let v = self.unseen(v, vacuous);
            self.emit(m, v);
        }
        let v = self.unseen(self.c.judge.thread_id_echoed(), false);
        self.emit(m, v);
    }

    fn hygiene(&mut self) {
        // rpc/unknown-method
        let m = self.begin("rpc/unknown-method");
        let id = self
            .c
            .request("bb/conformance/definitely-unknown-method", json!({}));
        let resp = self.c.wait_response(id);
        self.probe_possible = resp.is_some();
        match resp {
            None => {
                let d = match self.c.wrong_type_answer() {
                    Some(d) if d.contains("batch") => format!("not answered as a message: {d}"),
                    Some(d) => format!("answered with the wrong id type: {d}"),
                    None => format!("request was silently dropped{}", self.c.why_silent()),
                };
                self.fail("rpc/unknown-method", m, d)
            }
            Some(r) if error_code(&r) == Some(-32601) => self.pass("rpc/unknown-method", m),
            Some(r) => {
                self.unknown_method_code = error_code(&r);
                self.fail(
                    "rpc/unknown-method",
                    m,
                    format!("expected error -32601, got {}", describe_answer(&r)),
                )
            }
        }

        // rpc/invalid-params
        let m = self.begin("rpc/invalid-params");
        let id = self.c.request("thread/stop", json!({}));
        match self.c.wait_response(id) {
            None => {
                let d = self.unanswered("thread/stop {}");
                self.fail("rpc/invalid-params", m, d)
            }
            Some(r) if error_code(&r) == Some(-32602) => self.pass("rpc/invalid-params", m),
            Some(r) => self.fail(
                "rpc/invalid-params",
                m,
                format!("expected error -32602, got {}", describe_answer(&r)),
            ),
        }

        let no_probe = match self.c.wrong_type_answer() {
            Some(d) => format!(
                "aliveness probe unavailable: the bridge's answer to an unknown method does not reach the runtime as an answer ({d})"
            ),
            None => "aliveness probe unavailable: bridge drops unknown methods".to_string(),
        };
        // rpc/non-json-ignored
        let m = self.begin("rpc/non-json-ignored");
        if !self.probe_possible {
            self.skip("rpc/non-json-ignored", m, no_probe.clone());
        } else {
            self.c.send_raw("this is { not json");
            let id = self.c.request("bb/conformance/alive-probe", json!({}));
            match self.c.wait_response(id) {
                Some(_) => self.pass("rpc/non-json-ignored", m),
                None => {
                    let d = self.unanswered("alive probe after a non-JSON line");
                    self.fail("rpc/non-json-ignored", m, d)
                }
            }
        }

        // rpc/response-not-request
        let m = self.begin("rpc/response-not-request");
        if !self.probe_possible {
            self.skip("rpc/response-not-request", m, no_probe);
        } else {
            let from = self.c.received;
            self.c.send_raw(
                &json!({"jsonrpc": "2.0", "id": STRAY_RESPONSE_ID, "result": {}}).to_string(),
            );
            let id = self.c.request("bb/conformance/alive-probe", json!({}));
            match self.c.wait_response(id) {
                None => {
                    let d = self.unanswered("alive probe after a stray response");
                    self.fail("rpc/response-not-request", m, d)
                }
                Some(_) => {
                    let answered = self
                        .c
                        .resp_log
                        .iter()
                        .filter(|(p, _)| *p >= from)
                        .map(|(_, v)| v)
                        .find(|v| {
                            v.get("method").is_none()
                                && v.get("id").and_then(Value::as_u64) == Some(999_999)
                                && is_error(v)
                        });
                    match answered {
                        Some(r) => {
                            let d = format!(
                                "the stray response (id 999999) was answered with {}",
                                describe_answer(r)
                            );
                            self.fail("rpc/response-not-request", m, d)
                        }
                        None => self.pass("rpc/response-not-request", m),
                    }
                }
            }
        }
    }

    /// `None`: the handshake failed (capabilities unknown, fork treated as `none`).
    fn handshake(&mut self) -> Option<Caps> {
        let m = self.begin("handshake/initialize");
        let id = self.c.request(
            "initialize",
            json!({"protocolVersion": 2, "client": {"name": "bb-conformance", "version": "0.0.1"}, "grammarVersions": [3, 3]}),
        );
        let caps = match self.c.wait_response(id) {
            None => Err(self.unanswered("initialize")),
            Some(r) => initialize_answer(&r),
        };
        let caps = match caps {
            Ok(c) => {
                self.pass("handshake/initialize", m);
                c
            }
            Err(d) => {
                self.fail("handshake/initialize", m, d);
                return None;
            }
        };

        // skills/configure-declared
        let m = self.begin("skills/configure-declared");
        let id = self.c.request("skills/configure", json!({"roots": []}));
        let r = self.c.wait_response(id);
        self.pinned(
            "skills/configure-declared",
            m,
            "skills/configure",
            "capabilities.skills.configure",
            caps.skills_configure,
            r,
            |_| Ok(()),
        );

        // commands/list-declared (beyond the kit, §9.7: not sent under --kit-only)
        if !self.kit_only {
            let m = self.begin("commands/list-declared");
            let cwd = self.cwd.clone();
            let id = self.c.request("commands/list", json!({"cwd": cwd}));
            let r = self.c.wait_response(id);
            self.pinned(
                "commands/list-declared",
                m,
                "commands/list",
                "capabilities.commands.list",
                caps.commands_list,
                r,
                |res| COMMANDS_LIST_RESULT.check(res),
            );
        }
        Some(caps)
    }

    /// A capability-gated method pinned both ways: declared → answered without error;
    /// undeclared → `-32601`.
    #[allow(clippy::too_many_arguments)]
    fn pinned(
        &mut self,
        rule: &str,
        m: u64,
        method: &str,
        cap: &str,
        declared: bool,
        resp: Option<Value>,
        check: impl Fn(&Value) -> Result<(), String>,
    ) {
        let Some(r) = resp else {
            let d = self.unanswered(method);
            return self.fail(rule, m, d);
        };
        if declared {
            if is_error(&r) {
                return self.fail(
                    rule,
                    m,
                    format!(
                        "{cap} is declared, yet {method} answered {}",
                        describe_answer(&r)
                    ),
                );
            }
            match check(r.get("result").unwrap_or(&Value::Null)) {
                Ok(()) => self.pass(rule, m),
                Err(e) => self.fail(rule, m, format!("{method} result is invalid: {e}")),
            }
        } else if error_code(&r) == Some(-32601) {
            self.pass(rule, m)
        } else if let Some(code) = self
            .unknown_method_code
            .filter(|c| error_code(&r) == Some(*c))
        {
            // Refused, with the code this bridge gives every unknown method: one fault, owned
            // by rpc/unknown-method.
            self.skip(
                rule,
                m,
                format!(
                    "could not be judged apart from rpc/unknown-method: {cap} is not declared and {method} was refused with error {code}, the code this bridge gives every unknown method (see rpc/unknown-method)"
                ),
            )
        } else {
            self.fail(
                rule,
                m,
                format!(
                    "{cap} is not declared, so {method} must answer -32601, got {}",
                    describe_answer(&r)
                ),
            )
        }
    }

    fn construction(&self, thread: &str) -> Value {
        json!({"threadId": thread, "cwd": self.cwd, "options": self.fx.options, "instructionMode": "append"})
    }

    fn lifecycle(&mut self, caps: Option<Caps>) {
        let fork_enabled = caps.as_ref().is_some_and(|c| c.fork != "none");
        // "The runtime never sends a capability-gated method to a bridge that did not
        // advertise it": no thread/resume without sessionRestore (bb's kit sends it anyway;
        // --kit-only keeps that).
        let restore = self.kit_only || caps.as_ref().is_none_or(|c| c.session_restore);

        // session/start-identity
        let m = self.begin("session/start-identity");
        let id = self
            .c
            .request("thread/start", self.construction(MAIN_THREAD));
        let ptid = match self.c.wait_response(id) {
            None => Err(self.unanswered("thread/start")),
            Some(r) if is_error(&r) => Err(format!("thread/start failed: {}", describe_answer(&r))),
            Some(r) => parse_identity(&r).map_err(|e| format!("thread/start result: {e}")),
        };
        let mut ptid = match ptid {
            // Beyond the kit, judged at the end of the run: a later thread/start for another
            // thread may answer the same handle (a per-process counter).
            Ok(p) if !self.kit_only => {
                self.start_mark = Some(m);
                p
            }
            Ok(p) => {
                self.pass("session/start-identity", m);
                p
            }
            Err(d) => {
                self.fail("session/start-identity", m, d);
                let mut later: Vec<&str> = vec![
                    "turn/lifecycle",
                    "events/schema-valid",
                    "item/opens-before-delta",
                    "stop/release-not-interrupted",
                    "session/resume-identity",
                    "session/resume-id-uniqueness",
                ];
                if fork_enabled {
                    later.push("session/fork-identity");
                }
                if self.fx.zero_work_prompt_input.is_some() {
                    later.push("turn/settles-without-activity");
                }
                later.push("recovery/session-archived");
                if self.fx.interruptible_prompt_input.is_some() {
                    later.push("session/threads-independent");
                    later.push("stop/interrupt-settles-before-result");
                }
                // The start's failure may be skipped as another rule's fault (the bridge had
                // exited or stopped answering): the prerequisite is named as it was shown.
                let why = self.prerequisite("session/start-identity");
                for r in later {
                    let m = self.mark();
                    self.skip(r, m, why.clone());
                }
                return;
            }
        };

        // turn/lifecycle
        let m = self.begin("turn/lifecycle");
        let input = self.fx.prompt_input.clone();
        let r = self.turn(MAIN_THREAD, &ptid, &input);
        match r {
            // Beyond the kit: "Acceptance rides input.accepted { clientRequestId } —
            // mandatory" (protocol, Turn lifecycle 1); the assembler turns it into
            // turn/input/accepted when the turn opens.
            // Beyond the kit: "a prompt the provider never took must not open a turn"
            // (protocol, Turn lifecycle): an error answer says the provider did not take it.
            TurnOutcome::Settled {
                turn,
                refused: Some(answer),
                ..
            } if !self.kit_only => self.fail(
                "turn/lifecycle",
                m,
                format!(
                    "turn/start answered {answer}, yet turn {turn} opened and settled: a prompt the provider never took must not open a turn (an error answer says it was not taken, so the runtime reports the prompt failed while the turn runs)"
                ),
            ),
            TurnOutcome::Settled { turn, creq, .. } if !self.kit_only => {
                let accepted = self.c.events.iter().any(|e| {
                    e.thread == MAIN_THREAD
                        && is_type(&e.event, "turn/input/accepted")
                        && e.event["clientRequestId"] == creq.as_str()
                });
                if accepted {
                    self.pass("turn/lifecycle", m)
                } else {
                    self.fail(
                        "turn/lifecycle",
                        m,
                        format!(
                            "turn {turn} started and settled, but no input.accepted carried the turn/start's clientRequestId {creq:?}: acceptance is mandatory (protocol, Turn lifecycle 1), so the runtime never guesses which message opened a turn"
                        ),
                    )
                }
            }
            TurnOutcome::Settled { .. } => self.pass("turn/lifecycle", m),
            TurnOutcome::NeverStarted(why) => self.fail(
                "turn/lifecycle",
                m,
                format!("turn never started (no turn/started){why}"),
            ),
            TurnOutcome::NeverSettled { why, .. } => self.fail(
                "turn/lifecycle",
                m,
                format!("turn never settled (no turn/completed){why}"),
            ),
        }

        // events/schema-valid: the kit judges it here, on the messages received so far;
        // beyond the kit it is judged at the end of the run, on every message (a bridge whose
        // later turns send invalid deltas fails it, rather than only skipping later rules).
        let m = self.mark();
        if self.kit_only {
            self.events_schema_valid(m);
        } else {
            self.schema_mark = Some(m);
        }

        // item/opens-before-delta
        let m = self.mark();
        let mut grammar = Grammar::new();
        let mut n = 0;
        let mut violation = None;
        for ev in self.c.events.iter().filter(|e| e.thread == MAIN_THREAD) {
            n += 1;
            if let Err(d) = grammar.accept(&ev.event)
                && d.rule == "item/opens-before-delta"
                && violation.is_none()
            {
                violation = Some(d.describe());
            }
        }
        if n > 0 {
            self.c.grammar.kit_opens_found = Some(violation.is_some());
        }
        match (n, violation) {
            (0, _) => self.skip("item/opens-before-delta", m, "no events on the thread"),
            (_, Some(v)) => self.fail("item/opens-before-delta", m, v),
            (_, None) => self.pass("item/opens-before-delta", m),
        }

        // presentation/icon-namespaced-declared
        if let Some(icons) = self.fx.icons.clone() {
            let m = self.mark();
            self.icons(m, &icons);
        }

        // stop/release-not-interrupted
        let m = self.begin("stop/release-not-interrupted");
        let from = self.c.events.len();
        let id = self.c.request(
            "thread/stop",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "intent": "release", "activeTurnId": null}),
        );
        match self.c.wait_response(id) {
            None => {
                let d = self.unanswered("release thread/stop");
                self.fail("stop/release-not-interrupted", m, d)
            }
            Some(r) if is_error(&r) => self.fail(
                "stop/release-not-interrupted",
                m,
                format!("release thread/stop failed: {}", describe_answer(&r)),
            ),
            Some(_) => {
                self.c.settle(RELEASE_SETTLE);
                let fabricated = self.c.find_event(MAIN_THREAD, from, |e| {
                    is_type(e, "system/thread/interrupted")
                        || (is_type(e, "turn/completed") && e["status"] == "interrupted")
                });
                // Beyond the kit: the release releases the thread's provider work with it
                // ("any per-thread resource the bridge runs … is released before or with
                // it"), so background work it leaves open never settles.
                let left_open = (!self.kit_only)
                    .then(|| self.c.released_open.iter().find(|(s, ..)| *s == id))
                    .flatten();
                match (fabricated, left_open) {
                    (Some(i), _) => {
                        let ty = self.c.events[i].event["type"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        self.fail(
                            "stop/release-not-interrupted",
                            m,
                            format!("a release stop fabricated an interruption ({ty} status interrupted)"),
                        )
                    }
                    (None, Some((_, at, items))) => {
                        let named: Vec<String> = items
                            .iter()
                            .map(|(item, shape)| format!("{shape} {item}"))
                            .collect();
                        self.fail(
                            "stop/release-not-interrupted",
                            m,
                            format!(
                                "the release stop was answered (message {at}) with {} background item(s) still pending on the thread ({}): the release frees the thread's provider work (\"any per-thread resource the bridge runs … is released before or with it\", and what the bridge still owes for the thread \"must be on the wire before the response\"), so the bridge settles that work (as failed: \"settle it — as failed — when your provider child dies\") before answering; pending, the runtime keeps refusing to reap the thread",
                                items.len(),
                                named.join(", ")
                            ),
                        )
                    }
                    (None, None) => self.pass("stop/release-not-interrupted", m),
                }
            }
        }

        // session/resume-identity
        let m = self.begin("session/resume-identity");
        // The first event of the resumed session (events before it are the first session's).
        let mut resume_at = usize::MAX;
        // The first message received after the thread/resume went out.
        let mut resume_msg = usize::MAX;
        let resumed = if !restore {
            for r in ["session/resume-identity", "session/resume-id-uniqueness"] {
                self.emit(m, Verdict::not_run(r, NO_SESSION_RESTORE));
            }
            // The main thread again, as the runtime would bring it back: a new session.
            let id = self
                .c
                .request("thread/start", self.construction(MAIN_THREAD));
            if let Some(r) = self.c.wait_response(id)
                && !is_error(&r)
                && let Ok(p) = parse_identity(&r)
            {
                ptid = p;
            }
            false
        } else {
            let mut params = self.construction(MAIN_THREAD);
            params["providerThreadId"] = json!(ptid);
            resume_at = self.c.events.len();
            resume_msg = self.c.received;
            let id = self.c.request("thread/resume", params);
            match self.c.wait_response(id) {
                None => {
                    let d = self.unanswered("thread/resume");
                    self.skip("session/resume-identity", m, d.clone());
                    self.skip("session/resume-id-uniqueness", m, d);
                    false
                }
                Some(r) if is_error(&r) => {
                    let d = format!("thread/resume failed: {}", describe_answer(&r));
                    self.skip("session/resume-identity", m, d.clone());
                    self.skip("session/resume-id-uniqueness", m, d);
                    false
                }
                Some(r) => match parse_identity(&r) {
                    Ok(p) => {
                        ptid = p;
                        self.pass("session/resume-identity", m);
                        true
                    }
                    Err(e) => {
                        self.fail(
                            "session/resume-identity",
                            m,
                            format!("thread/resume result: {e}"),
                        );
                        let why = self.prerequisite("session/resume-identity");
                        self.skip("session/resume-id-uniqueness", m, why);
                        false
                    }
                },
            }
        };

        // session/resume-id-uniqueness
        if resumed {
            let m = self.begin("session/resume-id-uniqueness");
            let input = self.fx.prompt_input.clone();
            match self.turn(MAIN_THREAD, &ptid, &input) {
                TurnOutcome::Settled { .. } => {
                    let mut turns = HashSet::new();
                    let mut items = HashSet::new();
                    let mut repeat = None;
                    // A turn/started bb's host grammar refused (turn/starts-once: the turn is
                    // already open or completed, no release in between) is events/grammar's
                    // fault; it is not on the host's timeline, so no repeat here (bb's kit,
                    // which applies no grammar, fails this rule for it too).
                    let mut refused_repeat = None;
                    // An explicit reopen reuses the same bb id (protocol, "an explicit reopen
                    // reuses the same bb id"): an item started again, after it settled, in the
                    // provider session that started it is the same item, not a repeated id;
                    // only a start in the resumed session repeats one of the first session's.
                    // Beyond the kit: bb's kit counts a reopen as a repeat, and --kit-only too.
                    // item id → (whether its last start was in the resumed session, settled since).
                    let mut last_start: HashMap<String, (bool, bool)> = HashMap::new();
                    let mut reopened: Option<(String, usize)> = None;
                    for (i, ev) in self.c.events.iter().enumerate() {
                        if ev.thread != MAIN_THREAD {
                            continue;
                        }
                        let e = &ev.event;
                        let session = i >= resume_at;
                        if is_type(e, "turn/started") {
                            let Some(t) = turn_id(e) else { continue };
                            if !self.kit_only && self.c.grammar.refused.contains(&i) {
                                if refused_repeat.is_none() {
                                    refused_repeat = Some(format!(
                                        "turn id {t} started again at event {i}, which bb's host grammar refuses (turn/starts-once): judged by {EVENTS_GRAMMAR}"
                                    ));
                                }
                            } else if !turns.insert(t.to_string()) && repeat.is_none() {
                                repeat = Some(format!("turn id {t} started twice"));
                            }
                        } else if is_type(e, "item/started")
                            && let Some(i) = e["item"]["id"].as_str()
                        {
                            if !items.insert(i.to_string()) {
                                let reopen =
                                    !self.kit_only && last_start.get(i) == Some(&(session, true));
                                if reopen {
                                    let n = reopened.get_or_insert_with(|| (i.to_string(), 0));
                                    n.1 += 1;
                                } else if repeat.is_none() {
                                    let across = last_start.get(i).is_some_and(|l| l.0 != session);
                                    let no_reset = self
                                        .c
                                        .resets
                                        .get(MAIN_THREAD)
                                        .is_none_or(|at| *at < resume_msg);
                                    repeat = Some(if across && no_reset {
                                        format!(
                                            "item id {i} started twice, before the resume and again after it: no session.reset came for the thread after the thread/resume (\"session.reset (mandatory at every provider session construction) starts a fresh provider id space so reused provider-native ids mint fresh bb ids\"), so the resumed session's provider item ids mapped to the first session's bb ids"
                                        )
                                    } else if across {
                                        format!(
                                            "item id {i} started twice, before the resume and again after it (a resumed session starts a fresh id space: session.reset)"
                                        )
                                    } else if no_reset && session {
                                        format!(
                                            "item id {i} started twice; no session.reset came for the thread after the thread/resume (\"session.reset (mandatory at every provider session construction) starts a fresh provider id space\")"
                                        )
                                    } else {
                                        format!("item id {i} started twice")
                                    });
                                }
                            }
                            last_start.insert(i.to_string(), (session, false));
                        } else if is_type(e, "item/completed")
                            && let Some(i) = e["item"]["id"].as_str()
                            && let Some(s) = last_start.get_mut(i)
                        {
                            s.1 = true;
                        }
                    }
                    match repeat {
                        Some(r) => self.fail("session/resume-id-uniqueness", m, r),
                        None if turns.len() < 2 => self.fail(
                            "session/resume-id-uniqueness",
                            m,
                            format!("only {} turn(s) seen, at least 2 expected", turns.len()),
                        ),
                        None => {
                            let mut v = Verdict::pass("session/resume-id-uniqueness");
                            let mut notes: Vec<String> = refused_repeat.into_iter().collect();
                            if let Some((first, n)) = reopened {
                                notes.push(format!(
                                    "{n} explicit reopen(s) (an item started again after it settled, in the same provider session: the same bb id; first: {first}) are no repeated id"
                                ));
                            }
                            v.detail = notes.join("; ");
                            self.emit(m, v)
                        }
                    }
                }
                TurnOutcome::NeverStarted(why) | TurnOutcome::NeverSettled { why, .. } => self
                    .fail(
                        "session/resume-id-uniqueness",
                        m,
                        format!("second turn never settled{why}"),
                    ),
            }
        }

        // session/fork-identity
        if fork_enabled {
            let m = self.begin("session/fork-identity");
            let mut params = self.construction(FORK_THREAD);
            params["sourceProviderThreadId"] = json!(ptid);
            let id = self.c.request("thread/fork", params);
            let res = match self.c.wait_response(id) {
                None => Err(self.unanswered("thread/fork")),
                Some(r) if is_error(&r) => {
                    Err(format!("thread/fork failed: {}", describe_answer(&r)))
                }
                Some(r) => parse_identity(&r).map_err(|e| format!("thread/fork result: {e}")),
            };
            // Release the fork whatever happened (no verdict).
            let fork_ptid = res.clone().unwrap_or_default();
            let id = self.c.request(
                "thread/stop",
                json!({"threadId": FORK_THREAD, "providerThreadId": fork_ptid, "intent": "release", "activeTurnId": null}),
            );
            self.c.wait_response(id);
            let taken = (!self.kit_only)
                .then(|| self.c.handle_taken(&["thread/fork"]))
                .flatten();
            match (res, taken) {
                (Ok(_), Some((what, _, at, first, first_at))) => self.fail(
                    "session/fork-identity",
                    m,
                    format!("{what} at message {at}, which thread {first:?} announced first (message {first_at}): a fork is a new provider session, and a handle names exactly one (bb refuses to resume a handle another thread announced first)"),
                ),
                (Ok(_), None) => self.pass("session/fork-identity", m),
                (Err(d), _) => self.fail("session/fork-identity", m, d),
            }
        }

        // turn/settles-without-activity
        if let Some(input) = self.fx.zero_work_prompt_input.clone() {
            let m = self.begin("turn/settles-without-activity");
            let from = self.c.events.len();
            let creq = self.c.client_request_id();
            let id = self.c.request(
                "turn/start",
                json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "input": input, "clientRequestId": creq, "options": self.fx.options}),
            );
            let mut done = None;
            self.c.wait(|c| {
                if let Some(r) = c.response(id)
                    && is_error(r)
                {
                    done = Some(Err(describe_answer(r)));
                    return true;
                }
                if c.find_event(MAIN_THREAD, from, |e| is_type(e, "turn/completed"))
                    .is_some()
                {
                    done = Some(Ok(()));
                    return true;
                }
                false
            });
            // "A prompt the provider never took must not open a turn" (Turn lifecycle 1): a
            // refusal beside a turn opened for the prompt is a fault, not a skip (a bridge that
            // opened and settled a turn, then answered an error, passed).
            const NEVER_TOOK: &str = "a prompt the provider never took must not open a turn (Turn lifecycle 1): refuse it without opening one, or take it and answer";
            let opened = |c: &Client| {
                c.find_event(MAIN_THREAD, from, |e| is_type(e, "turn/started"))
                    .is_some()
            };
            match done {
                Some(Ok(())) => match self.c.wait_response(id).filter(is_error) {
                    Some(r) => self.fail(
                        "turn/settles-without-activity",
                        m,
                        format!(
                            "turn/start with the zero-work prompt opened a turn, settled it, and was then refused: {}; {NEVER_TOOK}",
                            describe_answer(&r)
                        ),
                    ),
                    None => self.pass("turn/settles-without-activity", m),
                },
                Some(Err(e)) if opened(&self.c) => self.fail(
                    "turn/settles-without-activity",
                    m,
                    format!(
                        "turn/start with the zero-work prompt was refused ({e}), yet a turn opened for it; {NEVER_TOOK}"
                    ),
                ),
                Some(Err(e)) => self.skip(
                    "turn/settles-without-activity",
                    m,
                    format!("turn/start with the zero-work prompt was refused: {e}"),
                ),
                None => {
                    let why = self.c.why_silent();
                    self.fail(
                        "turn/settles-without-activity",
                        m,
                        format!("the zero-work turn never settled (no turn/completed){why}"),
                    )
                }
            }
        }

        // recovery/session-archived (its recovery is a thread/resume)
        {
            let m = self.begin("recovery/session-archived");
            if !restore {
                self.emit(
                    m,
                    Verdict::not_run("recovery/session-archived", NO_SESSION_RESTORE),
                );
            } else if let Some(p) = self.archive(m, &ptid) {
                ptid = p;
            }
        }

        // session/threads-independent + stop/interrupt-settles-before-result
        if let Some(input) = self.fx.interruptible_prompt_input.clone() {
            let held = self.threads_independent(&ptid, &input);
            self.interrupt(&ptid, &input, held);
        }

        // Final release (no verdict).
        self.c.scenario = "the final release";
        let id = self.c.request(
            "thread/stop",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "intent": "release", "activeTurnId": null}),
        );
        self.c.wait_response(id);
    }

    /// Starts a turn and waits for its `turn/started`, its `turn/completed`, then the response.
    fn turn(&mut self, thread: &str, ptid: &str, input: &Value) -> TurnOutcome {
        let from = self.c.events.len();
        let creq = self.c.client_request_id();
        let id = self.c.request(
            "turn/start",
            json!({"threadId": thread, "providerThreadId": ptid, "input": input, "clientRequestId": creq, "options": self.fx.options}),
        );
        let Some(si) = self.c.wait_event(thread, from, is_main_turn_start) else {
            let mut why = self.c.why_silent();
            if let Some(r) = self.c.response(id)
                && is_error(r)
            {
                why = format!(" (turn/start answered {})", describe_answer(r));
            }
            return TurnOutcome::NeverStarted(why);
        };
        let t = turn_id(&self.c.events[si].event).unwrap_or("").to_string();
        let tt = t.clone();
        let done = self.c.wait_event(thread, si, move |e| {
            is_type(e, "turn/completed") && turn_id(e) == Some(tt.as_str())
        });
        if done.is_none() {
            let why = self.c.why_silent();
            return TurnOutcome::NeverSettled { turn: t, why };
        }
        // An error answer that carries a result too is the envelope's fault, named by
        // rpc/jsonrpc-envelope: one fault, one verdict, so the turn is not judged refused.
        let refused = self
            .c
            .wait_response(id)
            .filter(|r| is_error(r) && r.get("result").is_none())
            .map(|r| describe_answer(&r));
        TurnOutcome::Settled {
            turn: t,
            creq,
            refused,
        }
    }

    fn events_schema_valid(&mut self, m: u64) {
        let mut invalid = 0;
        let mut first = None;
        for (i, ev) in self.c.events.iter().enumerate() {
            // JSON round trip, as the kit does.
            let v: Value = serde_json::from_str(&ev.event.to_string()).unwrap_or(Value::Null);
            if let Err(e) = THREAD_EVENT.check(&v) {
                invalid += 1;
                if first.is_none() {
                    let ty = v["type"].as_str().unwrap_or("?").to_string();
                    first = Some(format!("event {i} ({ty}) failed: {e}"));
                }
            }
        }
        let total = self.c.events.len();
        // bb's kit only sees the events of the messages it could assemble.
        let bad_deltas = if self.kit_only {
            Vec::new()
        } else {
            self.c.diag.invalid_deltas.clone()
        };
        if let Some(f) = first {
            self.fail(
                "events/schema-valid",
                m,
                format!("{invalid} of {total} events invalid; first: {f}"),
            );
        } else if let Some(first) = bad_deltas.first() {
            self.fail(
                "events/schema-valid",
                m,
                format!(
                    "{} thread/delta message(s) invalid (refused whole by the runtime); first: {first}",
                    bad_deltas.len() + self.c.diag.invalid_deltas_more
                ),
            );
        } else if let Some(at) = self.c.diag.first_main_run {
            let mut v = Verdict::pass("events/schema-valid");
            v.detail = format!(
                "{} turn.mainRun delta(s) (first at message {at}): the protocol's held-turn signal, accepted and not assembled; bb's grammar-v3 validation (the kit's, --kit-only) rejects the kind and refuses the whole thread/delta message",
                self.c.diag.main_runs
            );
            self.emit(m, v);
        } else {
            self.pass("events/schema-valid", m);
        }
    }

    fn icons(&mut self, m: u64, icons: &Icons) {
        let mut seen = 0;
        let mut bad = None;
        for ev in self.c.events.iter().filter(|e| e.thread == MAIN_THREAD) {
            let Some(item) = ev.event.get("item") else {
                continue;
            };
            let Some(glyph) = item
                .get("presentation")
                .and_then(|p| p.get("icon"))
                .and_then(|i| i.get("glyph"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            seen += 1;
            if item["type"] == "toolCall" && item["server"] == "bb" {
                continue;
            }
            let Some((plugin, name)) = glyph.split_once('/') else {
                continue; // not namespaced
            };
            let ok = plugin == icons.plugin_id && icons.names.iter().any(|n| n == name);
            if !ok && bad.is_none() {
                let why = if plugin != icons.plugin_id {
                    format!("names plugin {plugin:?}, not {:?}", icons.plugin_id)
                } else {
                    format!("{name:?} is not a declared icon name")
                };
                bad = Some(format!(
                    "glyph {glyph:?} on a {} item {why}",
                    item["type"].as_str().unwrap_or("?")
                ));
            }
        }
        match (seen, bad) {
            (0, _) => self.skip(
                "presentation/icon-namespaced-declared",
                m,
                "no item carries a glyph",
            ),
            (_, Some(b)) => self.fail("presentation/icon-namespaced-declared", m, b),
            (_, None) => self.pass("presentation/icon-namespaced-declared", m),
        }
    }

    /// `recovery/session-archived`; returns the new provider thread id when resumed.
    fn archive(&mut self, m: u64, ptid: &str) -> Option<String> {
        const RULE: &str = "recovery/session-archived";
        let id = self.c.request(
            "thread/archive",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid}),
        );
        match self.c.wait_response(id) {
            None => {
                let d = self.unanswered("thread/archive");
                self.fail(RULE, m, d);
                return None;
            }
            Some(r) if is_error(&r) => return None, // no result
            Some(_) => {}
        }
        let mut params = self.construction(MAIN_THREAD);
        params["providerThreadId"] = json!(ptid);
        let hints_before = self.c.recoveries.len();
        let id = self.c.request("thread/resume", params.clone());
        let first = self.c.wait_response(id);
        let id = self.c.request(
            "thread/unarchive",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid}),
        );
        self.c.wait_response(id);
        let first = match first {
            None => {
                let d = self.unanswered("thread/resume of the archived session");
                self.fail(RULE, m, d);
                return None;
            }
            Some(r) if !is_error(&r) => {
                // Resumed although archived: no result, unless the result is unparsable.
                return match parse_identity(&r) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.fail(RULE, m, format!("thread/resume result: {e}"));
                        None
                    }
                };
            }
            Some(r) => r,
        };
        // The resume was rejected: resume again (after the unarchive) whatever the hint said.
        let id = self.c.request("thread/resume", params);
        let second = self.c.wait_response(id);
        let resumed = match &second {
            Some(r) if !is_error(r) => parse_identity(r),
            Some(r) => Err(format!("failed: {}", describe_answer(r))),
            None => Err(format!("unanswered{}", self.c.why_silent())),
        };
        // Both sub-checks are judged and shown, whichever fails.
        let kind = first["error"]["data"]["recovery"]["kind"].as_str();
        let hint = match kind {
            Some("sessionArchived") => SubCheck::pass(
                "rejected-with-hint",
                "error.data.recovery.kind \"sessionArchived\"",
            ),
            Some(k) => SubCheck::fail(
                "rejected-with-hint",
                format!(
                    "the archived resume was rejected with recovery kind {k:?}, not \"sessionArchived\""
                ),
            ),
            None => SubCheck::fail(
                "rejected-with-hint",
                format!(
                    "the archived resume was rejected without error.data.recovery ({})",
                    describe_answer(&first)
                ),
            ),
        };
        // A resume that never answers an identity is session/resume-identity's fault.
        let resume_failed = self
            .verdicts
            .iter()
            .any(|v| v.id == "session/resume-identity" && v.status != Status::Pass);
        let again = match &resumed {
            Ok(p) => SubCheck::pass("resumes-after-unarchive", format!("identity {p:?}")),
            Err(e) if resume_failed => SubCheck::skipped(
                "resumes-after-unarchive",
                format!(
                    "could not be judged apart from session/resume-identity: thread/resume after thread/unarchive {e} (see session/resume-identity)"
                ),
            ),
            Err(e) => SubCheck::fail(
                "resumes-after-unarchive",
                format!("thread/resume after thread/unarchive {e}"),
            ),
        };
        // "Never send both for one event" (protocol, Recovery hints): the rejection's hint and a
        // provider/recovery notification of the same kind for this thread, sent during the
        // exchange. Beyond the kit.
        let mut subs = vec![hint, again];
        if !self.kit_only && kind.is_some() {
            let twice = self.c.recoveries[hints_before..].iter().find(|(_, p)| {
                p["kind"].as_str() == kind
                    && p.get("threadId")
                        .and_then(Value::as_str)
                        .is_none_or(|t| t == MAIN_THREAD)
            });
            subs.push(match twice {
                Some((pos, _)) => SubCheck::fail(
                    "one-hint",
                    format!(
                        "the rejection carried error.data.recovery and a provider/recovery notification (message {pos}) said {:?} again: never both for one event",
                        kind.unwrap_or_default()
                    ),
                ),
                None => SubCheck::pass("one-hint", "the hint rode the rejection only"),
            });
        }
        let v = Verdict::from_all_subchecks(RULE, subs);
        self.emit(m, v);
        resumed.ok()
    }

    /// `session/threads-independent`; returns the held turn (bb id) when it opened.
    fn threads_independent(&mut self, ptid: &str, input: &Value) -> Option<String> {
        const RULE: &str = "session/threads-independent";
        let m = self.begin(RULE);
        let from = self.c.events.len();
        let creq = self.c.client_request_id();
        let id = self.c.request(
            "turn/start",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "input": input, "clientRequestId": creq, "options": self.fx.options}),
        );
        let Some(si) = self.c.wait_event(MAIN_THREAD, from, is_main_turn_start) else {
            let mut why = self.c.why_silent();
            if let Some(r) = self.c.response(id)
                && is_error(r)
            {
                why = format!(" (turn/start answered {})", describe_answer(r));
            }
            self.fail(RULE, m, format!("the held turn never opened{why}"));
            return None;
        };
        let held = turn_id(&self.c.events[si].event).unwrap_or("").to_string();
        let sid = self
            .c
            .request("thread/start", self.construction(OTHER_THREAD));
        let other = match self.c.wait_response(sid) {
            None => Err(self.unanswered("thread/start of the other thread")),
            Some(r) if is_error(&r) => Err(format!(
                "the other thread cannot start: {}",
                describe_answer(&r)
            )),
            Some(r) => parse_identity(&r).map_err(|e| format!("the other thread's identity: {e}")),
        };
        let other = match other {
            Ok(p) => p,
            Err(d) => {
                self.fail(RULE, m, d);
                return Some(held);
            }
        };
        let input = self.fx.prompt_input.clone();
        let outcome = self.turn(OTHER_THREAD, &other, &input);
        let held_done = {
            let h = held.clone();
            self.c
                .find_event(MAIN_THREAD, si, move |e| {
                    is_type(e, "turn/completed") && turn_id(e) == Some(h.as_str())
                })
                .is_some()
        };
        let id = self.c.request(
            "thread/stop",
            json!({"threadId": OTHER_THREAD, "providerThreadId": other, "intent": "release", "activeTurnId": null}),
        );
        self.c.wait_response(id);
        match outcome {
            TurnOutcome::Settled { .. } if !held_done => self.pass(RULE, m),
            TurnOutcome::Settled { .. } => self.fail(
                RULE,
                m,
                "the main thread's held turn completed before the other thread's turn did",
            ),
            TurnOutcome::NeverStarted(why) => self.fail(
                RULE,
                m,
                format!("the other thread's turn never started while the main thread's turn was held{why}"),
            ),
            TurnOutcome::NeverSettled { why, .. } => self.fail(
                RULE,
                m,
                format!("the other thread's turn never completed while the main thread's turn was held{why}"),
            ),
        }
        Some(held)
    }

    fn interrupt(&mut self, ptid: &str, input: &Value, held: Option<String>) {
        const RULE: &str = "stop/interrupt-settles-before-result";
        let m = self.begin(RULE);
        // The most recent still-open turn of the main thread.
        let mut open: Vec<String> = Vec::new();
        for ev in self.c.events.iter().filter(|e| e.thread == MAIN_THREAD) {
            let e = &ev.event;
            if is_main_turn_start(e) {
                open.push(turn_id(e).unwrap_or("").to_string());
            } else if is_type(e, "turn/completed")
                && let Some(t) = turn_id(e)
            {
                open.retain(|o| o != t);
            }
        }
        let mut turn = open.last().cloned();
        let _ = held;
        if turn.is_none() {
            let from = self.c.events.len();
            let creq = self.c.client_request_id();
            let _id = self.c.request(
                "turn/start",
                json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "input": input, "clientRequestId": creq, "options": self.fx.options}),
            );
            turn = self
                .c
                .wait_event(MAIN_THREAD, from, is_main_turn_start)
                .and_then(|i| turn_id(&self.c.events[i].event).map(str::to_string));
        }
        let Some(turn) = turn else {
            let why = self.c.why_silent();
            return self.fail(RULE, m, format!("no open turn to interrupt{why}"));
        };
        let active = self
            .c
            .assembler
            .provider_turn_id(MAIN_THREAD, &turn)
            .unwrap_or(&turn)
            .to_string();
        let id = self.c.request(
            "thread/stop",
            json!({"threadId": MAIN_THREAD, "providerThreadId": ptid, "intent": "interrupt", "activeTurnId": active}),
        );
        let resp = self.c.wait_response(id);
        let Some(r) = resp else {
            let d = self.unanswered("interrupt thread/stop");
            return self.fail(RULE, m, d);
        };
        if is_error(&r) {
            return self.fail(
                RULE,
                m,
                format!("interrupt thread/stop failed: {}", describe_answer(&r)),
            );
        }
        let resp_pos = self.c.response_pos(id).expect("answered");
        let t = turn.clone();
        let completed =
            move |e: &Value| is_type(e, "turn/completed") && turn_id(e) == Some(t.as_str());
        let found = match self.c.find_event(MAIN_THREAD, 0, &completed) {
            Some(i) => Some(i),
            None => self.c.wait_event(MAIN_THREAD, 0, &completed),
        };
        match found {
            None => self.fail(
                RULE,
                m,
                format!("the interrupted turn {turn} never settled (no turn/completed)"),
            ),
            Some(i) if self.c.events[i].pos > resp_pos => self.fail(
                RULE,
                m,
                format!(
                    "the interrupted turn's turn/completed arrived after the stop response (message {} > {resp_pos})",
                    self.c.events[i].pos
                ),
            ),
            Some(_) => self.pass(RULE, m),
        }
    }
}

enum TurnOutcome {
    Settled {
        turn: String,
        /// The clientRequestId its turn/start carried.
        creq: String,
        /// The turn/start's error answer, when it was refused (and the turn ran all the same).
        refused: Option<String>,
    },
    NeverStarted(String),
    NeverSettled {
        #[allow(dead_code)]
        turn: String,
        why: String,
    },
}

/// Parses an identity result `{providerThreadId, sessionRestorable?}` from a response.
fn parse_identity(resp: &Value) -> Result<String, String> {
    let res = resp.get("result").unwrap_or(&Value::Null);
    IDENTITY_RESULT.check(res)?;
    Ok(res["providerThreadId"].as_str().unwrap_or("").to_string())
}

/// `handshake/initialize` as `check bb` judges a bridge's answer to `initialize` (the response
/// object): an error answer fails, a result is checked by [`check_initialize`]. `replay bb`
/// judges each replay's live answer with it.
pub fn judge_initialize_answer(resp: &Value) -> Result<(), String> {
    initialize_answer(resp).map(|_| ())
}

fn initialize_answer(resp: &Value) -> Result<Caps, String> {
    if is_error(resp) {
        return Err(format!("initialize failed: {}", describe_answer(resp)));
    }
    check_initialize(resp.get("result").unwrap_or(&Value::Null))
}

/// Checks an `initialize` result: shape, `protocolVersion == 2`, grammar ranges intersect.
/// Every sub-check runs and each fault is named (one verdict listing each cause, numbered when
/// there are several: `2 faults: (1) …; (2) …`): every schema error, then the version, then
/// the grammar range. A version or range
/// the schema already found wrong (its field, or the object holding it) is not named twice.
fn check_initialize(res: &Value) -> Result<Caps, String> {
    let schema = INITIALIZE_RESULT.errors(res);
    // Whether the schema found `field` wrong itself, or the object holding it (`within`).
    let flagged = |field: &str, within: &[&str]| {
        schema.iter().any(|(f, _)| {
            f.is_empty()
                || within.contains(&f.as_str())
                || f == field
                || f.starts_with(&format!("{field}/"))
        })
    };
    let mut faults: Vec<String> = schema
        .iter()
        .map(|(_, e)| format!("initialize result is invalid: {e}"))
        .collect();
    if !flagged("/protocolVersion", &[]) && super::msg::json_int(&res["protocolVersion"]) != Some(2)
    {
        faults.push(format!(
            "protocolVersion {}, expected 2",
            res["protocolVersion"]
        ));
    }
    let caps = res.get("capabilities").cloned().unwrap_or(json!({}));
    if !flagged("/capabilities/grammarVersions", &["/capabilities"]) {
        let (lo, hi) = match caps.get("grammarVersions").and_then(Value::as_array) {
            Some(a) => (
                a.first().and_then(super::msg::json_int).unwrap_or(0),
                a.get(1).and_then(super::msg::json_int).unwrap_or(0),
            ),
            None => (2, 2),
        };
        if lo.max(3) > hi.min(3) {
            faults.push(format!(
                "grammar versions [{lo}, {hi}] do not intersect the runtime's [3, 3]{}",
                if caps.get("grammarVersions").is_none() {
                    " (capabilities.grammarVersions absent: default [2, 2])"
                } else {
                    ""
                }
            ));
        }
    }
    match faults.len() {
        0 => {}
        1 => return Err(faults.remove(0)),
        // Numbered: a schema error's own wording may hold "; ".
        n => {
            let each: Vec<String> = faults
                .iter()
                .enumerate()
                .map(|(i, f)| format!("({}) {f}", i + 1))
                .collect();
            return Err(format!("{n} faults: {}", each.join("; ")));
        }
    }
    Ok(Caps {
        fork: caps["fork"].as_str().unwrap_or("none").to_string(),
        session_restore: caps["sessionRestore"] == true,
        skills_configure: caps["skills"]["configure"] == true,
        commands_list: caps["commands"]["list"] == true,
    })
}

/// Validates a JSON-RPC error response (used by tests and the catalogue of shapes).
pub fn check_error_response(v: &Value) -> Result<(), String> {
    ERROR_RESPONSE.check(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_request_ids_follow_the_kit() {
        let b = Bridge::spawn(&["true".into()], Limits::default()).unwrap();
        let mut c = Client::new(b, Duration::from_millis(10));
        assert_eq!(c.client_request_id(), "creq_2222222223");
        for _ in 0..30 {
            c.client_request_id();
        }
        assert_eq!(c.client_request_id(), "creq_2222222232");
    }

    #[test]
    fn context_lines_are_printable_and_clipped() {
        assert_eq!(printable("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(printable("plain"), "plain");
        let long = "é".repeat(300);
        let c = clip(&long, 401);
        assert!(
            c.starts_with(&"é".repeat(200)) && c.ends_with("(600 bytes)"),
            "{c}"
        );
    }

    #[test]
    fn every_schema_compiles() {
        for s in [
            schema::INITIALIZE_RESULT,
            schema::IDENTITY_RESULT,
            schema::THREAD_DELTA_PARAMS,
            schema::THREAD_EVENT,
            schema::COMMANDS_LIST_RESULT,
            schema::ERROR_RESPONSE,
        ] {
            Schema::compile(s);
        }
    }

    #[test]
    fn initialize_checks() {
        let ok = json!({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3], "fork": "tip", "skills": {"configure": true}}});
        let caps = check_initialize(&ok).unwrap();
        assert_eq!(caps.fork, "tip");
        assert!(caps.skills_configure && !caps.commands_list);
        let e = check_initialize(&json!({"protocolVersion": 2, "capabilities": {}})).unwrap_err();
        assert!(e.contains("default [2, 2]"), "{e}");
        let e = check_initialize(
            &json!({"protocolVersion": 1, "capabilities": {"grammarVersions": [3, 3]}}),
        )
        .unwrap_err();
        assert!(e.contains("protocolVersion 1"), "{e}");
        // 2.0 is the number 2 (an independent bridge's float-version oddity read it as 0).
        let float = json!({"protocolVersion": 2.0, "capabilities": {"grammarVersions": [3.0, 3]}});
        assert!(check_initialize(&float).is_ok());
        let e = check_initialize(&json!({"protocolVersion": 2.5, "capabilities": {}})).unwrap_err();
        assert!(e.contains("2.5"), "{e}");
        assert!(check_initialize(&json!({"capabilities": {}})).is_err());
        assert!(check_initialize(&json!("x")).is_err());
    }

    #[test]
    fn identity_parsing() {
        assert_eq!(
            parse_identity(
                &json!({"result": {"providerThreadId": "p1", "sessionRestorable": true}})
            ),
            Ok("p1".into())
        );
        assert!(parse_identity(&json!({"result": {"sessionRestorable": true}})).is_err());
        assert!(parse_identity(&json!({"result": {"providerThreadId": 3}})).is_err());
        assert!(parse_identity(&json!({"result": null})).is_err());
    }

    #[test]
    fn thread_event_schema_accepts_assembled_events_and_refuses_bad_usage() {
        let mut a = Assembler::new("p");
        let evs = a.assemble(
            "t",
            &[
                json!({"kind": "input.accepted", "clientRequestId": "creq_2222222223"}),
                json!({"kind": "turn.open"}),
                json!({"kind": "item.open", "key": {"providerItemId": "x"}, "item": {"type": "command", "command": "ls", "cwd": "/"}}),
                json!({"kind": "item.outputDelta", "key": {"providerItemId": "x"}, "channel": "command", "text": "hi"}),
                json!({"kind": "item.close", "key": {"providerItemId": "x"}, "item": {"type": "command", "command": "ls", "cwd": "/"}, "status": "completed"}),
                json!({"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "he"}),
                json!({"kind": "item.textClose", "key": {"channel": "assistant"}, "channel": "agentMessage"}),
                json!({"kind": "usage", "total": {"inputTokens": 1, "cachedInputTokens": 0, "outputTokens": 2, "reasoningOutputTokens": 0, "totalTokens": 3}, "last": {"inputTokens": 1, "cachedInputTokens": 0, "outputTokens": 2, "reasoningOutputTokens": 0, "totalTokens": 3}, "modelContextWindow": 1000}),
                json!({"kind": "contextWindow", "used": 3, "size": 1000, "estimated": true}),
                json!({"kind": "turn.boundary", "status": "completed"}),
            ],
        );
        assert!(evs.len() >= 8, "{evs:?}");
        for e in &evs {
            THREAD_EVENT
                .check(e)
                .unwrap_or_else(|err| panic!("{e}: {err}"));
        }
        let bad = json!({"type": "thread/tokenUsage/updated", "threadId": "", "providerThreadId": "", "scope": {"kind": "turn", "turnId": "t1"},
            "tokenUsage": {"total": {"inputTokens": "1", "cachedInputTokens": 0, "outputTokens": 0.5, "reasoningOutputTokens": 0, "totalTokens": -0.5}, "last": {"inputTokens": 0, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0, "totalTokens": 0}, "modelContextWindow": 5}});
        assert!(THREAD_EVENT.check(&bad).is_err());
        assert!(THREAD_EVENT.check(&json!({"type": "nope"})).is_err());
        // bb's own rules: the clientRequestId format, plan-step statuses, scope policy.
        let accepted = |id: &str| json!({"type": "turn/input/accepted", "threadId": "", "providerThreadId": "", "scope": {"kind": "turn", "turnId": "t1"}, "clientRequestId": id});
        let e = THREAD_EVENT.check(&accepted("creq_1")).unwrap_err();
        assert!(
            e.starts_with("clientRequestId: \"creq_1\" does not have the required format"),
            "{e}"
        );
        assert!(THREAD_EVENT.check(&accepted("creq_2222222223")).is_ok());
        let steps = json!({"type": "item/completed", "threadId": "", "providerThreadId": "", "scope": {"kind": "turn", "turnId": "t1"},
            "item": {"type": "planSteps", "id": "i1", "status": "completed", "steps": [{"step": "a", "status": "inProgress"}]}});
        let e = THREAD_EVENT.check(&steps).unwrap_err();
        assert_eq!(
            e,
            "item.steps.0.status: \"inProgress\" is not allowed; allowed values: [\"pending\",\"active\",\"completed\",\"failed\"]"
        );
        let thread_scoped_item = json!({"type": "item/started", "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"},
            "item": {"type": "agentMessage", "id": "i1", "text": ""}});
        assert!(
            THREAD_EVENT.check(&thread_scoped_item).is_err(),
            "item/started is turn-scoped in bb"
        );
    }

    /// A reclassified item (closed with another shape than it opened with) is settled twice by
    /// the assembler, the host dropping the second: not the bridge's fault. The same shape
    /// settled twice still is.
    #[test]
    fn live_grammar_leaves_the_assemblers_reclassification_pair_alone() {
        let settle = |id: &str, ty: &str| json!({"type": "item/completed", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}, "item": {"type": ty, "id": id}});
        let started = json!({"type": "turn/started", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}});
        let mut g = LiveGrammar::default();
        g.event("a", 1, "turn/lifecycle", &started);
        g.event("a", 2, "turn/lifecycle", &settle("i1", "commandExecution"));
        g.event("a", 2, "turn/lifecycle", &settle("i1", "toolCall"));
        let v = g.verdict();
        assert_eq!(v.status, Status::Pass, "{}", v.detail);
        assert!(
            v.detail.starts_with("1 reclassified item(s)"),
            "{}",
            v.detail
        );
        g.event("a", 3, "turn/lifecycle", &settle("i1", "toolCall"));
        assert_eq!(g.verdict().status, Status::Fail);
    }

    /// `events/grammar`: one state per thread, forgotten at an answered release stop; each violation
    /// named with its sub-rule, scenario, event, message and thread; item/opens-before-delta
    /// left to the kit's rule once it failed; nothing assembled → not run.
    #[test]
    fn live_grammar_judges_every_sub_rule_per_thread() {
        let ev = |ty: &str, turn: &str| json!({"type": ty, "threadId": "", "scope": {"kind": "turn", "turnId": turn}});
        let mut g = LiveGrammar::default();
        assert_eq!(g.verdict().status, Status::NotRun);
        g.event("a", 1, "turn/lifecycle", &ev("turn/started", "t1"));
        // Another thread has its own state.
        g.event("b", 2, "turn/lifecycle", &ev("turn/started", "t1"));
        g.event("a", 3, "turn/lifecycle", &ev("turn/completed", "t1"));
        assert_eq!(g.verdict().status, Status::Pass);
        g.event(
            "a",
            4,
            "session/resume-id-uniqueness",
            &ev("turn/completed", "t1"),
        );
        let v = g.verdict();
        assert_eq!(v.status, Status::Fail);
        assert_eq!(
            v.detail,
            "turn/settles-once on turn/completed: turn t1 already completed (event 3 at message 4 on thread \"a\", during session/resume-id-uniqueness); bb's host drops it"
        );
        assert!(g.refused.contains(&3));
        // An answered release stop forgets the thread: the same turn may start again.
        g.grammar.clear_thread("a");
        g.event("a", 5, "the final release", &ev("turn/started", "t1"));
        assert_eq!(g.other_total, 1);

        let stray = json!({"type": "item/agentMessage/delta", "threadId": "", "itemId": "i9", "scope": {"kind": "turn", "turnId": "t1"}});
        g.event("a", 6, "turn/lifecycle", &stray);
        let v = g.verdict();
        assert!(v.detail.ends_with("(and 1 more)"), "{}", v.detail);
        assert!(v.context[0].starts_with("item/opens-before-delta on item/agentMessage/delta: item i9 is not open (event 5 at message 6"), "{:?}", v.context);
        // Once the kit's item/opens-before-delta failed, that sub-rule is its own.
        g.kit_opens_found = Some(true);
        let v = g.verdict();
        assert_eq!(v.status, Status::Fail);
        assert!(!v.detail.contains("(and"), "{}", v.detail);
        assert!(
            v.context[0].starts_with(
                "1 item/opens-before-delta violation(s) left to item/opens-before-delta"
            ),
            "{:?}",
            v.context
        );
        let mut only_opens = LiveGrammar {
            kit_opens_found: Some(true),
            ..Default::default()
        };
        only_opens.event("a", 1, "turn/lifecycle", &stray);
        let v = only_opens.verdict();
        assert_eq!(v.status, Status::Pass);
        assert!(v.detail.starts_with("1 item/opens-before-delta violation(s) left to item/opens-before-delta, which failed for that fault (first: item/opens-before-delta on "), "{}", v.detail);
    }
}

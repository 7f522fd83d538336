//! The protocols bridgewire speaks, and the small pure interface the core calls for each.
//!
//! The core (pins, parity, offline rules, dumps) is written once against [`Model`]: a cell's
//! merged entries go in, assembled events and grammar drops come out, and rows are projected
//! from events. I/O (spawning, proxying, replay) stays concrete inside each protocol module.

use crate::cell::Cell;
use crate::lane::Entry;
use serde_json::Value;

/// The least a live program's start-up handshake (bb's `initialize`, parity's identity probe)
/// is waited for, whatever `--timeout-ms` says: `--timeout-ms` bounds a replay's waits, not how
/// long an interpreter takes to start on a busy machine (python3 under load took over 2 s). A
/// program that never answers costs this once.
pub const START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Bb,
    Bridle,
    SideBridge,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Bb, Protocol::Bridle, Protocol::SideBridge];

    /// The id used on the command line, in `rules/` and as the recordings sub-folder.
    pub fn id(self) -> &'static str {
        match self {
            Protocol::Bb => "bb",
            Protocol::Bridle => "bridle",
            Protocol::SideBridge => "sidebridge",
        }
    }

    pub fn from_id(id: &str) -> Option<Protocol> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    /// The lane directions, in tie-break (concatenation) order.
    pub fn directions(self) -> &'static [&'static str] {
        match self {
            Protocol::Bb => &crate::lane::BB_DIRECTIONS,
            Protocol::Bridle => &[
                "browser→hub",
                "hub→browser",
                "agent→hub",
                "hub→agent",
                "http→hub",
                "hub→http",
            ],
            Protocol::SideBridge => &["client→bridge", "bridge→client"],
        }
    }

    /// The protocol whose direction set contains `dir`.
    pub fn of_direction(dir: &str) -> Option<Protocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.directions().contains(&dir))
    }

    /// The live half (replay against a running bridge, its handshake identity).
    pub fn live(self) -> &'static dyn Live {
        match self {
            Protocol::Bb => &crate::bb::live::BbLive,
            Protocol::Bridle => &crate::bridle::live::BridleLive,
            Protocol::SideBridge => &crate::sidebridge::live::SideBridgeLive,
        }
    }

    /// The protocol assumed for lists that carry no cell (a dump leg's files).
    pub const DEFAULT: Protocol = Protocol::Bb;

    pub fn model(self) -> &'static dyn Model {
        match self {
            Protocol::Bb => &crate::bb::BbModel,
            Protocol::Bridle => &crate::bridle::model::BridleModel,
            Protocol::SideBridge => &crate::sidebridge::SideBridgeModel,
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// An event the grammar refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarDrop {
    pub rule: String,
    pub reason: String,
    pub event_type: String,
}

impl GrammarDrop {
    /// bb's grammar-layer string, `<rule>:<eventType>`.
    pub fn layer_key(&self) -> String {
        format!("{}:{}", self.rule, self.event_type)
    }

    /// `<rule> on <eventType>: <reason>`, as the grammar verdicts name a violation.
    pub fn describe(&self) -> String {
        format!("{} on {}: {}", self.rule, self.event_type, self.reason)
    }
}

/// Where assembly delivers its results, one at a time (cells can be gigabytes).
/// A sink that keeps everything, in three lists: what a model's unit tests assert on.
#[cfg(test)]
#[derive(Default)]
pub struct Collected(pub Vec<Value>, pub Vec<GrammarDrop>, pub Vec<String>);

#[cfg(test)]
impl EventSink for Collected {
    fn event(&mut self, e: Value) {
        self.0.push(e);
    }
    fn grammar_drop(&mut self, d: GrammarDrop) {
        self.1.push(d);
    }
    fn invalid(&mut self, m: String) {
        self.2.push(m);
    }
}

pub trait EventSink {
    /// An event that passed the grammar.
    fn event(&mut self, event: Value);
    /// A bb event as assembled, before it is a tree: sinks that read a few fields (counting)
    /// take it as it is; the rest get its tree.
    fn bb_event(&mut self, event: crate::bb::event::Event) {
        self.event(event.into_value());
    }
    fn grammar_drop(&mut self, drop: GrammarDrop);
    /// A protocol message that failed validation (e.g. an invalid `thread/delta`); named with
    /// its lane position.
    fn invalid(&mut self, message: String);
}

/// Builds rows (what a user would see) from events, incrementally.
pub trait RowProjector {
    fn push(&mut self, event: &Value);
    /// [`RowProjector::push`] of a bb event as assembled (its tree unless the projector reads
    /// it as it is).
    fn push_bb(&mut self, event: &crate::bb::event::Event) {
        self.push(&event.to_value());
    }
    fn finish(self: Box<Self>) -> Vec<Value>;
    /// `finish().len()`, where a projector can count its rows without building them.
    fn count(self: Box<Self>) -> usize {
        self.finish().len()
    }
}

/// The pure per-protocol half the core calls.
pub trait Model: Sync {
    fn protocol(&self) -> Protocol;
    /// Whether an event's value at `pointer` (`key_varies`: one run had the key, the other
    /// not) may differ between two runs of one build, as a model's wording does. An event with
    /// a value that may not has nothing set aside by parity's second run
    /// ([`crate::parity::varying_between`]). Every value may, unless the protocol says.
    fn may_vary(&self, _pointer: &str, _key_varies: bool) -> bool {
        true
    }
    /// Assembles a cell's merged view (entries in `(run, seq)` order) into `sink`.
    fn assemble(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    );
    /// [`Model::assemble`] by a faster path where the protocol has one (same events, drops
    /// and messages); what `pins` uses.
    fn assemble_fast(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        self.assemble(cell, entries, sink)
    }
    /// [`Model::assemble_fast`] over entries whose `line` may still be escaped
    /// ([`crate::lane::LazyLine`]); what `pins` counts with.
    fn assemble_lazy(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = crate::lane::LazyEntry>,
        sink: &mut dyn EventSink,
    ) {
        self.assemble_fast(
            cell,
            &mut entries.map(crate::lane::LazyEntry::into_entry),
            sink,
        )
    }
    /// [`Model::assemble`] as the protocol's live replay reads the same traffic, for a recorded
    /// leg compared with live ones (parity's `rec:` legs, the recording's own view): where the
    /// live player accepts what the offline count refuses, this accepts it too. Returns what it
    /// took out of the events, as [`LiveReplay::left_out`] does (listed, not compared).
    fn assemble_as_live(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) -> Vec<String> {
        self.assemble(cell, entries, sink);
        Vec::new()
    }
    /// The outcomes beside the events a recording holds (bb: each request's answer and the
    /// spec's notifications, [`crate::bb::answers`]), compared by parity as the `wire` layer;
    /// `None` where the protocol compares none.
    fn wire_outcomes(&self, _cell: &Cell) -> Option<Vec<String>> {
        None
    }
    fn row_projector(&self) -> Box<dyn RowProjector>;
    /// A dump's JSON text as the protocol's own tooling would write it (bb: a lone UTF-16
    /// surrogate as its escape).
    fn dump_text(&self, json: String) -> String {
        json
    }
    /// Counted as `unhandled` in pins.
    fn is_unhandled(&self, _event: &Value) -> bool {
        false
    }
    /// How events are normalized for comparison (ids interned, times zeroed).
    fn event_rules(&self) -> crate::normalize::Rules<'static> {
        crate::normalize::BB_EVENTS
    }
    fn row_rules(&self) -> crate::normalize::Rules<'static> {
        crate::normalize::BB_ROWS
    }
    fn normalize_events(&self, events: Vec<Value>) -> Vec<Value> {
        crate::normalize::normalize_list(events, self.event_rules())
    }
    /// Normalized events folded for comparing where the protocol leaves a bridge a choice
    /// that changes their number but not what they say (bb's text chunks); the counts a report
    /// shows are taken before.
    fn fold_events(&self, events: Vec<Value>) -> Vec<Value> {
        events
    }
    /// What [`Model::normalize_events`] leaves out of a comparison of `events` (extensions the
    /// spec does not forbid), named and counted (`hub→browser "status" ×2`): shown beside the
    /// verdict, so a comparison never passes silently over what it did not compare.
    fn left_out(&self, _events: &[Value]) -> Vec<String> {
        Vec::new()
    }
    fn normalize_rows(&self, rows: Vec<Value>) -> Vec<Value> {
        crate::normalize::normalize_list(rows, self.row_rules())
    }
    /// Why parity does not compare the recording's `_process` scope (what no conversation
    /// holds), said on the SKIP.
    fn process_scope_skip(&self) -> &'static str {
        "process-scoped recording (no thread events to compare)"
    }
}

/// How to start a bridge under test: its words and the directory it runs in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BridgeCommand {
    pub argv: Vec<String>,
    /// The working directory (a parity checkout); `None`: bridgewire's own.
    pub cwd: Option<std::path::PathBuf>,
    /// How to find a served bridge's address in its start-up output, where the protocol's own
    /// reading finds none (its first capture group, else the whole match); `None`: the
    /// protocol's reading.
    pub address_pattern: Option<AddressPattern>,
}

/// A compiled `--url-pattern`, compiled once when the arguments are read. Two are equal when
/// their texts are: [`BridgeCommand`] is compared to refuse two legs that run the same program,
/// and `regex::Regex` has no equality of its own.
#[derive(Debug, Clone)]
pub struct AddressPattern(pub regex::Regex);

impl PartialEq for AddressPattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for AddressPattern {}

impl BridgeCommand {
    pub fn new(argv: Vec<String>) -> BridgeCommand {
        BridgeCommand {
            argv,
            ..Default::default()
        }
    }

    /// The words that start the bridge in [`Self::cwd`]. Players spawn plain argv, so a
    /// directory is entered by `sh -c 'cd "$0" && exec "$@"'`: `exec` keeps the bridge's pid
    /// (and process group) the one the player started.
    pub fn spawn_argv(&self) -> Vec<String> {
        match &self.cwd {
            None => self.argv.clone(),
            Some(dir) => {
                let mut v = vec![
                    "/bin/sh".to_string(),
                    "-c".to_string(),
                    r#"cd "$0" && exec "$@""#.to_string(),
                    dir.display().to_string(),
                ];
                v.extend(self.argv.iter().cloned());
                v
            }
        }
    }

    pub fn display(&self) -> String {
        let words = self.argv.join(" ");
        match &self.cwd {
            Some(d) => format!("{words} (in {})", d.display()),
            None => words,
        }
    }
}

/// The bounds of one live replay (`parity --timeout-ms`, `--max-body`).
#[derive(Debug, Clone, Copy)]
pub struct LiveLimits {
    /// Bound of every wait.
    pub timeout: std::time::Duration,
    /// Largest reply body a Side Bridge leg reads, in bytes (bb and Bridle read lines and
    /// frames, bounded by their own limits, and ignore it).
    pub max_body: usize,
    /// bridgewire's bound on a whole Side Bridge reply (`--max-reply-time`), never under
    /// `timeout` (which bounds the silence between its bytes, as the app's timeout does); bb
    /// and Bridle ignore it.
    pub max_reply: std::time::Duration,
}

/// What a live replay of one cell produced. Events are raw (normalization is the core's).
#[derive(Debug, Clone, Default)]
pub struct LiveReplay {
    pub events: Vec<Value>,
    /// `<rule>:<eventType>` per grammar violation, in order.
    pub grammar: Vec<String>,
    /// Waits that ran out, each naming the step it waited for.
    pub stalls: Vec<String>,
    /// The cell cannot be replayed live (reported as SKIP).
    pub skip: Option<String>,
    /// What the bridge sent that the protocol allows and the event list does not hold (bb's
    /// `turn.mainRun`): listed by parity as "extensions, not compared".
    pub left_out: Vec<String>,
    /// The outcomes beside the events ([`Model::wire_outcomes`] of the replayed traffic);
    /// `None` where the protocol compares none.
    pub wire: Option<Vec<String>>,
    /// [`LiveReplay::wire`] as a recording of the cell holds it: without the notifications
    /// the recorder files under another cell (bb: those naming no thread, or a thread the
    /// runtime never named in this replay). What a recorded leg is compared with
    /// ([`crate::parity::restrict_to_live_view`]); `None`: the same as `wire`.
    pub wire_in_cell: Option<Vec<String>>,
    /// The replay could not run (the bridge did not start, the cell is unreadable).
    pub error: Option<String>,
    /// Every reply refused the credentials the replay sent, which the recording's bridge
    /// accepted: a difference when the other leg was answered (compared as usual), no
    /// evidence about either bridge when both legs were refused alike (then the cell is SKIP,
    /// naming this).
    pub refused: Option<String>,
    /// What the bridge did that the spec forbids and the normalized lists cannot show (a
    /// Bridle welcome whose clientId is not the one the player's own token gives: clientIds
    /// are interned, so a hub that ignores the JWT would compare equal). Each fails the cell.
    pub problems: Vec<String>,
}

impl LiveReplay {
    pub fn failed(e: impl Into<String>) -> LiveReplay {
        LiveReplay {
            error: Some(e.into()),
            ..Default::default()
        }
    }
    pub fn skipped(reason: impl Into<String>) -> LiveReplay {
        LiveReplay {
            skip: Some(reason.into()),
            ..Default::default()
        }
    }
}

/// A cell replayed alone, for a protocol whose [`Live::replay`] is its
/// [`Live::replay_together`] of one cell.
pub fn replay_alone(
    live: &dyn Live,
    cell: &Cell,
    bridge: &BridgeCommand,
    limits: LiveLimits,
) -> LiveReplay {
    live.replay_together(&[cell], bridge, limits)
        .and_then(|mut r| r.pop())
        .unwrap_or_else(|| LiveReplay::failed("no replay"))
}

/// What a bridge's handshake says about it ([`Live::identify`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// A short comparable text: the same for two builds the runtime cannot tell apart, which is
    /// how a recording made from another bridge is noticed.
    pub text: String,
    /// What of the handshake the runtime acts on (a version, the capabilities that gate
    /// methods), compared between parity's two legs: a build that stops declaring a capability
    /// is sent other requests by the runtime although every replayed cell looks the same.
    pub facts: serde_json::Value,
    /// Why the runtime would refuse this bridge at start (a protocol version it does not
    /// speak), said beside a difference in `facts`.
    pub refused: Option<String>,
    /// What the live bridge's process tree ran when it answered ([`crate::proc::tree_image`]);
    /// empty for a recorded handshake. Two legs with one image run one program.
    pub running: Vec<crate::proc::RunningProcess>,
}

/// The live half each protocol implements (in `src/<protocol>/live.rs`, over its player): the
/// core (parity, recording own cells) calls only this.
pub trait Live: Sync {
    fn protocol(&self) -> Protocol;

    /// Replays one cell against a freshly started bridge, within `limits`.
    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, limits: LiveLimits) -> LiveReplay;

    /// Replays `cells` against one bridge process for each leg, when the protocol's cells are
    /// parts of one conversation with a server (Side Bridge: chats recorded interleaved against
    /// one server, whose state a build may share between chats): one result per cell, in
    /// order. `None` (the default): each cell is replayed alone by [`Live::replay`], on a
    /// bridge of its own.
    fn replay_together(
        &self,
        _cells: &[&Cell],
        _bridge: &BridgeCommand,
        _limits: LiveLimits,
    ) -> Option<Vec<LiveReplay>> {
        None
    }

    /// Who the bridge says it is in its handshake; `Ok(None)` when the protocol's handshake
    /// carries nothing to tell bridges apart.
    fn identify(
        &self,
        _bridge: &BridgeCommand,
        _timeout: std::time::Duration,
    ) -> Result<Option<Identity>, String> {
        Ok(None)
    }

    /// Why two live legs would reach one and the same bridge although their commands differ
    /// (e.g. both print the address of one running server), said as the shared address; `None`
    /// when they are two, or when the protocol cannot tell.
    fn same_server(
        &self,
        _a: &BridgeCommand,
        _b: &BridgeCommand,
        _timeout: std::time::Duration,
    ) -> Option<String> {
        None
    }

    /// The identity of the bridge a cell was recorded from, read from the cell's own lanes
    /// (what [`Live::identify`] gives for that bridge): where the recording holds its handshake.
    fn recorded_identity(&self, _cell: &Cell) -> Option<Identity> {
        None
    }

    /// Whether the protocol's bridges state a handshake the runtime acts on: parity then
    /// compares the two legs' handshakes, or says why it could not.
    fn states_handshake(&self) -> bool {
        false
    }

    /// The part of a cell's offline events a live replay reproduces (a replay drives one side
    /// of the wire, so it sees only what that side receives). Parity compares a recording
    /// with a live leg on this view. Default: everything.
    fn live_view(&self, events: Vec<Value>) -> Vec<Value> {
        events
    }

    /// Records one raw scope per scenario from the user's bridge into `req.raw` (lanes as
    /// the protocol's recorder writes them, record-time redaction on). The core packages each
    /// scope into a cell.
    fn record(&self, _req: &RecordRequest) -> Result<Vec<RecordedScenario>, String> {
        Err(format!(
            "recording cells is not available for {} in this build",
            self.protocol()
        ))
    }
}

/// What [`Live::record`] is asked to do.
pub struct RecordRequest<'a> {
    pub bridge: &'a BridgeCommand,
    pub scenarios: &'a [crate::cells::Scenario],
    /// A fresh directory for the raw recording.
    pub raw: &'a std::path::Path,
    /// The provider (first key segment) the cells go under.
    pub provider: &'a str,
    /// Bound of every wait.
    pub timeout: std::time::Duration,
    /// bridgewire's bound on a whole Side Bridge reply (`--max-reply-time`), never under
    /// `timeout`; bb and Bridle ignore it.
    pub max_reply: std::time::Duration,
    /// `NAME=COMMAND`: environment variables the bridge reads its provider command from; each
    /// is pointed at a wrapper that runs the command under `bridgewire record child`, so the
    /// provider lanes are recorded too.
    pub provider_env: &'a [(String, String)],
}

/// One recorded scenario: where its raw scope is, and what the bridge said it was.
#[derive(Debug, Clone)]
pub struct RecordedScenario {
    pub name: String,
    pub scope_dir: std::path::PathBuf,
    /// The session id the scenario ran on (`threadId` in the manifest), if the protocol has one.
    pub thread_id: Option<String>,
    pub identity: Option<Identity>,
}

/// A short stable fingerprint of a JSON value (canonical text, FNV-1a 64).
pub fn fingerprint(v: &Value) -> String {
    let text = crate::diff::canonical(v);
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

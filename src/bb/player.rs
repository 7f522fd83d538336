//! Live replay of a bb cell against a freshly spawned bridge (reference §6), and the
//! `.current` re-recording built on it (§2.6).
//!
//! ```text
//! plan (recorded view, or merged view with exact_plan)
//!   │ runtime→bridge steps, each with a gate: turn/started, turn/completed, events so far
//!   ▼
//! harness ──stdin──▶ bridge ──spawns──▶ <state>/replay-provider ──▶ bridgewire provider-double
//!         ◀─stdout──        ◀─────────────────────────────────────  (recorded provider lanes)
//!   │ live assembler (frozen-clock throttle) + grammar, recorded answers to bridge requests
//!   ▼
//! ReplayResult {lines, line_after, events, grammar_violations, stalls, stderr, exit_code}
//! ```
//!
//! * **Options** ([`ReplayOptions`]): `timeout` 15000 ms bounds every wait and the exit wait;
//!   `settle` 750 ms of bridge silence before stdin is closed; `drain` 300 ms of silence before
//!   each runtime request; `order_timeout` 5000 ms (approximate plan only: silence that also
//!   releases the events gate); `exact_plan`; `provider_env` (default
//!   `BB_REF_PROVIDER_COMMAND`): the environment variables that receive the path of the
//!   provider-double wrapper; `fixed_windows` (bb's kit timing, see below).
//! * **Idle, not windows** (default): the drain before each runtime request and the settle
//!   before closing stdin end as soon as the bridge is idle: every earlier request answered (a
//!   gate of its own), every provider double drained (its status file says `idle`: nothing to
//!   play without the bridge or the cursor; doubles run unpaced), and the bridge quiet (no line
//!   for the window, nothing unread in its stdout pipe) for an
//!   adaptive window: 4× the longest of its last 16 gaps between consecutive reads of its
//!   output (gaps shorter than the fixed window; its reaction time to the harness's own writes
//!   is awaited by the request gates, not counted), at least 10 ms, at most the fixed window. Both windows still end a wait
//!   when they pass, so idle detection never waits longer than the kit would. Waits poll every
//!   2 ms. With `fixed_windows` the kit's timing is kept: the double paces its lines (2 ms,
//!   50 ms after a response), the full windows are waited, waits poll every 10 ms.
//! * **Launch**: temp dirs `bb-parity-replay-*` (state), `bb-parity-ws-*` (workspace, real path)
//!   and `bb-parity-data-*` (exported as `BRIDGEWIRE_REPLAY_DATA_DIR`); the bridge runs in its
//!   own process group, which is SIGKILLed at the end whatever happened, so no provider double
//!   or other grandchild survives.
//! * **Handshake**: cursor, then `initialize` with id `parity-initialize`.
//! * **Steps**: notifications written at once; requests after the four waits (earlier answers,
//!   turn gate, events gate, drain); a release stop clears the live grammar's thread; machine
//!   facts (`params.options.envVars.PATH`, `params.cwd`) are rewritten into this machine's PATH
//!   and the temp workspace; responses are kept for answering bridge requests by method FIFO.
//! * **Reading**: lines framed on `\n` (`\r` stripped, 64 MiB limit), workspace path mapped back
//!   to the recorded cwd, bridge requests answered from the recorded FIFO with the live id,
//!   `thread/delta` assembled and checked by the grammar (violations kept, events dropped).
//! * **Stalls**: bb's exact texts (§6.9), plus two of bridgewire's own: `provider double #<n>
//!   answered <k> request(s) generically` (the double had to help) and `bridge output over
//!   <bytes> bytes; later lines not kept` (a flooding bridge).

use super::assembler::Assembler;
use super::double::{DoubleReport, read_reports};
use super::grammar::Grammar;
use super::msg::{Kind, classify, classify_line, id_text};
use crate::cell::Cell;
use crate::lane::Entry;
use crate::proc::ChildTree;
use crate::protocol::GrammarDrop;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const DEFAULT_TIMEOUT_MS: u64 = 15_000;
pub const DEFAULT_SETTLE_MS: u64 = 750;
pub const DEFAULT_DRAIN_MS: u64 = 300;
pub const DEFAULT_ORDER_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_PROVIDER_ENV: &str = "BB_REF_PROVIDER_COMMAND";
pub const INITIALIZE_ID: &str = "parity-initialize";
/// The wrapper script's name inside the state directory.
pub const WRAPPER_NAME: &str = "replay-provider";
const POLL: Duration = Duration::from_millis(10);
/// Poll interval of event-driven waits.
const POLL_IDLE: Duration = Duration::from_millis(2);
/// The adaptive quiet window: `CADENCE_FACTOR` × the longest recent gap, at least `MIN_WINDOW`.
const MIN_WINDOW: Duration = Duration::from_millis(10);
const CADENCE_FACTOR: u32 = 4;
const CADENCE_GAPS: usize = 16;
const MAX_STORED: usize = 64 * 1024 * 1024;
const MAX_STDERR: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub timeout: Duration,
    pub settle: Duration,
    pub drain: Duration,
    pub order_timeout: Duration,
    pub exact_plan: bool,
    /// Environment variables set to the provider-double wrapper's path.
    pub provider_env: Vec<String>,
    /// More environment for the bridge.
    pub env: Vec<(OsString, OsString)>,
    /// The `bridgewire` executable the wrapper runs (default: the current executable).
    pub double_exe: Option<PathBuf>,
    /// The provider double's dialect: `json-rpc` (default), `claude-cli` or `pi-rpc`.
    pub dialect: String,
    /// bb's kit timing: full drain/settle windows and a paced double, instead of idle detection.
    pub fixed_windows: bool,
    /// Print how long each wait took to stderr (`BRIDGEWIRE_REPLAY_TRACE=1`).
    pub trace: bool,
    /// Take well-formed `turn.mainRun` deltas (the protocol's held-turn signal) out of a
    /// `thread/delta` before validating it, counted in [`ReplayResult::main_runs`], instead of
    /// refusing the whole message as bb's grammar-v3 validation does (a stall). As check bb
    /// does outside `--kit-only`.
    pub accept_main_run: bool,
    /// Permission bits of a lane `rerecord` writes.
    pub write_mode: u32,
    /// End the replay after the handshake when the bridge's `initialize` answer fails
    /// `handshake/initialize` ([`super::conformance::judge_initialize_answer`]): bb's runtime
    /// refuses such a bridge at spawn, so nothing after it is traffic bb would see (`replay bb`,
    /// `rerecord bb`). Off: the replay goes on (parity, `check bb`'s recorded rules).
    pub stop_at_bad_handshake: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            settle: Duration::from_millis(DEFAULT_SETTLE_MS),
            drain: Duration::from_millis(DEFAULT_DRAIN_MS),
            order_timeout: Duration::from_millis(DEFAULT_ORDER_TIMEOUT_MS),
            exact_plan: false,
            provider_env: vec![DEFAULT_PROVIDER_ENV.to_string()],
            env: Vec::new(),
            double_exe: None,
            dialect: "json-rpc".into(),
            fixed_windows: false,
            trace: std::env::var_os("BRIDGEWIRE_REPLAY_TRACE").is_some_and(|v| v == "1"),
            accept_main_run: true,
            write_mode: crate::lane::write::DEFAULT_FILE_MODE,
            stop_at_bad_handshake: false,
        }
    }
}

/// The `{run, seq, ts}` of the last runtime entry written before a line arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Anchor {
    pub run: f64,
    pub seq: f64,
    pub ts: f64,
}

#[derive(Debug, Clone, Default)]
pub struct ReplayResult {
    /// Every stdout line, in arrival order, workspace path mapped back.
    pub lines: Vec<String>,
    /// Arrival times, ms since the bridge was spawned.
    pub line_times: Vec<f64>,
    pub line_after: Vec<Option<Anchor>>,
    /// Live events the grammar accepted.
    pub events: Vec<Value>,
    pub grammar_violations: Vec<GrammarDrop>,
    pub stalls: Vec<String>,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// The provider doubles' own reports.
    pub doubles: Vec<DoubleReport>,
    /// Runtime lines written (the handshake excluded).
    pub written: usize,
    /// `turn.mainRun` deltas accepted and not assembled ([`ReplayOptions::accept_main_run`]).
    pub main_runs: usize,
    /// The requests' answers and the spec's notifications ([`super::answers::wire_outcomes`]).
    pub wire: Vec<String>,
    /// [`ReplayResult::wire`] without the notifications a recording files under another cell
    /// (naming no thread, or a thread the runtime never named): what the cell's recording holds.
    pub wire_in_cell: Vec<String>,
    /// The runtime lines written (the handshake included) and, per kept bridge line, how many
    /// of them had been written when it came: [`ReplayResult::crossed`].
    pub sent: Vec<String>,
    pub sent_before: Vec<usize>,
    /// The recorded lanes' warnings (`file:line: …`), each once.
    pub lane_warnings: Vec<String>,
    /// Recorded runtime→bridge lines cut short (`file:line`): ignored, so not replayed.
    pub not_replayed: Vec<String>,
    /// The bridge's answer to the replay's `initialize` (the response object), if it came.
    pub initialize: Option<Value>,
    /// `handshake/initialize` judged on [`ReplayResult::initialize`] as `check bb` judges it
    /// ([`super::conformance::judge_initialize_answer`]); `None`: no answer came (a stall).
    pub handshake: Option<Result<(), String>>,
    /// Whether the replay ended after the handshake because it failed
    /// ([`ReplayOptions::stop_at_bad_handshake`]).
    pub stopped_at_handshake: bool,
    /// Bridge stdout lines that are JSON cut short (`bridge stdout line N: not JSON: …`, the
    /// text bounded): a message the runtime cannot read, so whatever it carried is lost.
    pub cut_lines: Vec<String>,
}

impl ReplayResult {
    /// The runtime lines written and the bridge lines read, in the order they crossed
    /// (`(runtime→bridge?, line)`).
    pub fn crossed(&self) -> impl Iterator<Item = (bool, &str)> + '_ {
        interleaved(&self.sent, &self.lines, &self.sent_before)
    }

    pub fn count(&self, ty: &str) -> usize {
        self.events.iter().filter(|e| e["type"] == ty).count()
    }
}

/// Why a cell was not replayed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplayError {
    /// Not replayable: the reason, to print as `SKIP <cell>: <reason>`.
    #[error("{0}")]
    Skip(String),
    /// The harness could not run the replay at all (spawn failure, unreadable cell).
    #[error("{0}")]
    Failed(String),
    /// A recorded lane holds an entry that cannot be read (malformed, not UTF-8, wrong `dir`):
    /// invalid input (exit 2), not a failure of the bridge.
    #[error("{0}")]
    Unreadable(String),
}

/// A runtime→bridge step of the pacing plan.
#[derive(Debug, Clone)]
struct Step {
    entry: Entry,
    map: Option<Map<String, Value>>,
    kind: Kind,
    started: usize,
    completed: usize,
    events_before: usize,
}

/// Everything the replay needs from the cell, computed offline.
struct Plan {
    steps: Vec<Step>,
    /// method → recorded answers (response objects), FIFO.
    answers: HashMap<String, VecDeque<Map<String, Value>>>,
    recorded_cwd: Option<String>,
    planned_events: Option<usize>,
    /// See [`ReplayResult::lane_warnings`] and [`ReplayResult::not_replayed`].
    lane_warnings: Vec<String>,
    not_replayed: Vec<String>,
}

fn is_release_stop(m: &Map<String, Value>) -> Option<String> {
    if m.get("method").and_then(Value::as_str) != Some("thread/stop") {
        return None;
    }
    let p = m.get("params")?;
    if p.get("intent").and_then(Value::as_str) != Some("release") {
        return None;
    }
    p.get("threadId").and_then(Value::as_str).map(String::from)
}

/// Whether a cell can be replayed; the reason when not.
pub fn replayable(cell: &Cell) -> Result<(), ReplayError> {
    if cell.protocol != crate::protocol::Protocol::Bb {
        return Err(ReplayError::Skip(format!(
            "{} cells are not replayed by `replay bb`",
            cell.protocol
        )));
    }
    if let Ok(text) = std::fs::read_to_string(cell.path.join("manifest.json"))
        && let Ok(v) = serde_json::from_str::<Value>(&text)
        && v["scope"] == "process"
    {
        return Err(ReplayError::Skip(
            "process-scoped recording (no thread events to compare)".into(),
        ));
    }
    if !cell.lanes.iter().any(|l| l.dir == "runtime→bridge") {
        return Err(ReplayError::Skip(
            "no runtime→bridge lane (nothing to replay)".into(),
        ));
    }
    Ok(())
}

fn collect(m: crate::lane::merge::MergedEntries) -> Result<Vec<Entry>, ReplayError> {
    collect_reported(m).map(|(e, _)| e)
}

/// [`collect`] with the merge's report (its warnings: cut last lines, unsorted lanes).
fn collect_reported(
    mut m: crate::lane::merge::MergedEntries,
) -> Result<(Vec<Entry>, crate::lane::merge::MergeReport), ReplayError> {
    let entries: Vec<Entry> = m.by_ref().collect();
    let report = m.into_report();
    if let Some(e) = report.errors.first() {
        return Err(ReplayError::Unreadable(format!(
            "unreadable lane entry: {e}"
        )));
    }
    Ok((entries, report))
}

fn build_plan(cell: &Cell, opts: &ReplayOptions) -> Result<Plan, ReplayError> {
    let (recorded, report) = collect_reported(cell.recorded())?;
    let mut lane_warnings = report.warnings;
    let plan_view = if opts.exact_plan {
        let (merged, more) = collect_reported(cell.merged())?;
        for w in more.warnings {
            if !lane_warnings.contains(&w) {
                lane_warnings.push(w);
            }
        }
        merged
    } else {
        recorded.clone()
    };
    // A cut last runtime line is ignored, so never written to the bridge (a warning, as for
    // pins and lanes: the cell says so).
    let not_replayed: Vec<String> = report
        .cut_lines
        .iter()
        .filter(|e| {
            e.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("runtime→bridge"))
        })
        .map(|e| format!("{}:{}", e.path.display(), e.line))
        .collect();
    let (provider, _) = cell.provider_and_name();
    let mut asm = Assembler::new(provider);
    // The gates count only events the grammar keeps, as the replay does (bb's plan applies no
    // grammar, §6.5, so a cell whose output the grammar drops stalled on gates waiting for
    // events no replay keeps: one fault, recorded/<cell>/grammar, got a second verdict,
    // replays). Cells without grammar drops plan exactly as bb's.
    let mut grammar = Grammar::new();
    let (mut events, mut started, mut completed) = (0usize, 0usize, 0usize);
    let mut steps = Vec::new();
    for e in &plan_view {
        match e.dir.as_str() {
            "bridge→runtime" => {
                if !e.line.contains("thread/delta") {
                    continue;
                }
                let Some(m) = super::msg::object(&e.line) else {
                    continue;
                };
                if m.get("method").and_then(Value::as_str) != Some("thread/delta") {
                    continue;
                }
                let mut params = m.get("params").cloned().unwrap_or(Value::Null);
                if opts.accept_main_run {
                    super::delta::take_main_runs(&mut params);
                }
                if let Ok((tid, deltas)) = super::delta::validate_params(&params) {
                    for ev in asm.assemble(tid, deltas) {
                        if grammar.accept(&ev).is_err() {
                            continue;
                        }
                        events += 1;
                        match ev["type"].as_str() {
                            Some("turn/started") => started += 1,
                            Some("turn/completed") => completed += 1,
                            _ => {}
                        }
                    }
                }
            }
            "runtime→bridge" => {
                let (map, kind) = classify_line(&e.line);
                if let Some(t) = map.as_ref().and_then(is_release_stop) {
                    grammar.clear_thread(&t);
                }
                steps.push(Step {
                    entry: e.clone(),
                    map,
                    kind,
                    started,
                    completed,
                    events_before: events,
                });
            }
            _ => {}
        }
    }
    // Recorded answers: responses queued under the method of the recorded bridge→runtime
    // request with the same run and id text.
    let mut methods: HashMap<(u64, String), String> = HashMap::new();
    for e in &recorded {
        if e.dir == "bridge→runtime"
            && let Some(m) = super::msg::object(&e.line)
            && let Kind::Request { id, method } = classify(&m)
            && let Some(t) = id_text(&id)
        {
            methods.entry((e.run.to_bits(), t)).or_insert(method);
        }
    }
    let mut answers: HashMap<String, VecDeque<Map<String, Value>>> = HashMap::new();
    for s in &steps {
        if let (Some(m), Kind::Response { id }) = (&s.map, &s.kind) {
            let method = id_text(id)
                .and_then(|t| methods.get(&(s.entry.run.to_bits(), t)).cloned())
                .unwrap_or_else(|| "?".into());
            answers.entry(method).or_default().push_back(m.clone());
        }
    }
    let recorded_cwd = recorded
        .iter()
        .filter(|e| e.dir == "runtime→bridge" && e.line.contains("cwd"))
        .find_map(|e| {
            let m = super::msg::object(&e.line)?;
            let c = m.get("params")?.get("cwd")?.as_str()?;
            (!c.is_empty()).then(|| c.to_string())
        });
    let planned_events = opts
        .exact_plan
        .then(|| crate::pins::compute(cell, None).counts.events as usize);
    Ok(Plan {
        steps,
        answers,
        recorded_cwd,
        planned_events,
        lane_warnings,
        not_replayed,
    })
}

/// The runtime lines `sent` and the bridge lines `lines` in the order they crossed:
/// `sent_before[i]` runtime lines went out before bridge line `i` came (`(runtime→bridge?,
/// line)`, as [`super::answers::wire_outcomes`] reads them).
fn interleaved<'a>(
    sent: &'a [String],
    lines: &'a [String],
    sent_before: &'a [usize],
) -> impl Iterator<Item = (bool, &'a str)> + 'a {
    let mut written = 0usize;
    lines
        .iter()
        .zip(sent_before)
        .flat_map(move |(line, &before)| {
            let upto = before.min(sent.len()).max(written);
            let out = sent[written..upto].iter().map(|s| (true, s.as_str()));
            written = upto;
            out.chain(std::iter::once((false, line.as_str())))
        })
        .chain(
            sent[sent_before.last().copied().unwrap_or(0).min(sent.len())..]
                .iter()
                .map(|s| (true, s.as_str())),
        )
}

/// Live state shared by the main loop and the stdout reader.
struct Live {
    started_at: Instant,
    lines: Vec<String>,
    line_times: Vec<f64>,
    line_after: Vec<Option<Anchor>>,
    stored: usize,
    events: Vec<Value>,
    violations: Vec<GrammarDrop>,
    stalls: Vec<String>,
    /// See [`ReplayOptions::accept_main_run`]: whether, and how many were taken out.
    accept_main_run: bool,
    main_runs: usize,
    /// The thread ids the runtime named in its requests: a bridge echoes `threadId` verbatim,
    /// and bb's runtime routes a `thread/delta` by it, so deltas under another id reach no
    /// thread. The count of such messages.
    runtime_threads: HashSet<String>,
    foreign_deltas: usize,
    /// The runtime lines written, for [`ReplayResult::wire`].
    sent: Vec<String>,
    /// Per kept bridge line, how many runtime lines had been written when it came: the wire
    /// outcomes read both directions in the order they crossed.
    sent_before: Vec<usize>,
    answered: HashSet<String>,
    started: usize,
    completed: usize,
    last_output: Instant,
    /// When the harness last wrote to the bridge.
    last_write: Instant,
    /// The bridge's recent gaps between consecutive lines (cadence), shorter than
    /// `cadence_cap`.
    gaps: VecDeque<Duration>,
    cadence_cap: Duration,
    /// Event-driven waits (not `fixed_windows`), and the state directory the doubles report to.
    event_driven: bool,
    state: PathBuf,
    /// The bridge's stdout pipe (read end), to see bytes written but not yet read.
    out_fd: std::os::fd::RawFd,
    eof: bool,
    anchor: Option<Anchor>,
    answers: HashMap<String, VecDeque<Map<String, Value>>>,
    assembler: Assembler,
    grammar: Grammar,
    /// (live workspace, recorded cwd) when they differ.
    map_path: Option<(String, String)>,
    to_bridge: Sender<Option<Vec<u8>>>,
    /// Bridge stdout lines read so far (kept or not): the `N` of [`ReplayResult::cut_lines`].
    line_no: usize,
    cut_lines: Vec<String>,
    /// See [`ReplayResult::initialize`].
    initialize: Option<Value>,
}

impl Live {
    /// The adaptive quiet window, at most `cap`.
    fn window(&self, cap: Duration) -> Duration {
        let longest = self.gaps.iter().max().copied().unwrap_or_default();
        (longest * CADENCE_FACTOR)
            .clamp(MIN_WINDOW, cap.max(MIN_WINDOW))
            .min(cap)
    }

    /// Whether the bridge is idle for a wait whose fixed window is `fixed`: the window passed
    /// since the last output, or (event-driven) the provider doubles are drained and the bridge
    /// and doubles were quiet for the adaptive window.
    fn idle(&self, fixed: Duration) -> bool {
        // Quiet means nothing written either: a reader that was slow to be scheduled must not
        // make a flooding bridge look idle. This holds for the fixed window too: under heavy
        // load (CI, load 11 on 2 cores) the reader of a `yes` flood was starved past the 750 ms
        // settle window and the flood counted as settled.
        let pending = || !self.eof && unread_bytes(self.out_fd) != 0;
        if self.last_output.elapsed() >= fixed {
            return !pending();
        }
        if !self.event_driven {
            return false;
        }
        let w = self.window(fixed);
        if self.last_output.max(self.last_write).elapsed() < w {
            return false;
        }
        if pending() {
            return false;
        }
        super::double::doubles_idle_for(&self.state).is_some_and(|q| q >= w)
    }

    /// A chunk of output arrived. Cadence: gaps between the bridge's own writes as read here
    /// (per chunk, so scheduling delays under load count and lines parsed from one read do
    /// not). The time it takes to react to a line the harness wrote is service time (awaited by
    /// the request gates), not cadence.
    fn on_chunk(&mut self) {
        let gap = self.last_output.elapsed();
        if self.last_output > self.last_write && gap < self.cadence_cap {
            if self.gaps.len() == CADENCE_GAPS {
                self.gaps.pop_front();
            }
            self.gaps.push_back(gap);
        }
    }

    fn on_line(&mut self, raw: &[u8]) {
        self.last_output = Instant::now();
        self.line_no += 1;
        let mut line = String::from_utf8_lossy(raw).into_owned();
        if let Some((ws, rec)) = &self.map_path
            && line.contains(ws.as_str())
        {
            line = line.replace(ws.as_str(), rec);
        }
        if self.stored <= MAX_STORED {
            self.stored += line.len() + 64; // + bookkeeping per kept line
            if self.stored > MAX_STORED {
                self.stalls.push(format!(
                    "bridge output over {MAX_STORED} bytes; later lines not kept"
                ));
            } else {
                self.lines.push(line.clone());
                self.line_times
                    .push(self.started_at.elapsed().as_secs_f64() * 1000.0);
                self.line_after.push(self.anchor);
                self.sent_before.push(self.sent.len());
            }
        }
        let Some(m) = super::msg::object(&line) else {
            // Non-JSON lines are kept and otherwise ignored; JSON cut short is named.
            if let Some(cut) = cut_json(&line) {
                self.cut_lines
                    .push(format!("bridge stdout line {}: {cut}", self.line_no));
            }
            return;
        };
        match classify(&m) {
            Kind::Response { id } => {
                if let Some(t) = id_text(&id) {
                    if t == INITIALIZE_ID && self.initialize.is_none() {
                        self.initialize = Some(Value::Object(m.clone()));
                    }
                    self.answered.insert(t);
                }
            }
            Kind::Request { id, method } => {
                let answer = self.answers.get_mut(&method).and_then(VecDeque::pop_front);
                let reply = match answer {
                    Some(rec) => {
                        let mut out = Map::new();
                        out.insert("id".into(), id.clone());
                        out.insert(
                            "jsonrpc".into(),
                            rec.get("jsonrpc").cloned().unwrap_or(json!("2.0")),
                        );
                        for (k, v) in rec {
                            if k != "id" && k != "jsonrpc" {
                                out.insert(k, v);
                            }
                        }
                        Value::Object(out)
                    }
                    None => {
                        self.stalls.push(format!(
                            "no recorded answer for bridge request {method} ({})",
                            id_text(&id).unwrap_or_default()
                        ));
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "parity replay: no recorded answer"}})
                    }
                };
                let mut bytes = crate::jsjson::to_string(&reply).into_bytes();
                bytes.push(b'\n');
                let _ = self.to_bridge.send(Some(bytes));
            }
            Kind::Notification { method } if method == "thread/delta" => {
                let mut params = m.get("params").cloned().unwrap_or(Value::Null);
                if self.accept_main_run {
                    self.main_runs += super::delta::take_main_runs(&mut params);
                }
                if let Some(t) = params.get("threadId").and_then(Value::as_str)
                    && !self.runtime_threads.is_empty()
                    && !self.runtime_threads.contains(t)
                {
                    self.foreign_deltas += 1;
                    if self.foreign_deltas == 1 {
                        let mut named: Vec<&str> =
                            self.runtime_threads.iter().map(String::as_str).collect();
                        named.sort_unstable();
                        self.stalls.push(format!(
                            "thread/delta for threadId {t:?}, which the runtime never named (it named {named:?}): a bridge echoes threadId verbatim, and bb's runtime routes deltas by it, so these reach no thread"
                        ));
                    }
                    return;
                }
                match super::delta::validate_params(&params) {
                    Err(e) => {
                        let cause = self
                            .accept_main_run
                            .then(|| super::delta::held_turn_fault(&params, &e))
                            .flatten()
                            .unwrap_or(e);
                        self.stalls.push(format!("invalid thread/delta: {cause}"))
                    }
                    Ok((tid, deltas)) => {
                        for ev in self.assembler.assemble(tid, deltas) {
                            match self.grammar.accept(&ev) {
                                Err(d) => self.violations.push(d),
                                Ok(()) => {
                                    match ev["type"].as_str() {
                                        Some("turn/started") => self.started += 1,
                                        Some("turn/completed") => self.completed += 1,
                                        _ => {}
                                    }
                                    self.events.push(ev);
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// How many bytes of a cut line's start and end [`cut_json`] quotes.
const CUT_HEAD: usize = 80;
const CUT_TAIL: usize = 40;

/// `not JSON: <quote> (…)` when `line` is JSON that ends early (a message cut short: the bridge
/// died mid-write, or wrote a truncated line); `None` for JSON, blank lines and other text (a
/// stray line, which `transport/stdout-protocol-only` judges, not the replay).
pub fn cut_json(line: &str) -> Option<String> {
    if line.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(line) {
        Err(e) if e.is_eof() => {}
        _ => return None,
    }
    // Its start (what it was) and its end (where it was cut).
    let quote = if line.len() > CUT_HEAD + CUT_TAIL {
        let mut head = CUT_HEAD;
        while !line.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = line.len() - CUT_TAIL;
        while !line.is_char_boundary(tail) {
            tail += 1;
        }
        format!(
            "{} … {} ({} bytes)",
            &line[..head],
            &line[tail..],
            line.len()
        )
    } else {
        line.to_string()
    };
    Some(format!(
        "not JSON: {quote} (the JSON ends early: a message cut short, which the runtime cannot read)"
    ))
}

/// Bytes waiting in a pipe (`FIONREAD`); an error counts as some.
fn unread_bytes(fd: std::os::fd::RawFd) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer; a bad fd only returns an error.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if r < 0 { 1 } else { n }
}

/// Writes the cursor file atomically: `<run> <seq>` or `end`.
fn write_cursor(state: &Path, at: Option<&Entry>) {
    // Once a signal arrived the state folder is being removed: writing into it would race the
    // removal (src/signals.rs retries, but a write that never starts cannot race).
    if crate::signals::interrupted().is_some() {
        return;
    }
    let text = match at {
        Some(e) => format!(
            "{} {}",
            crate::jsjson::format_f64(e.run),
            crate::jsjson::format_f64(e.seq)
        ),
        None => "end".into(),
    };
    let tmp = state.join("cursor.tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, state.join("cursor"));
    }
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.to_string_lossy().replace('\'', "'\\''"))
}

/// Writes `<state>/replay-provider`, an executable that runs the provider double for `cell_dir`
/// (extra arguments the bridge passes are forwarded; the double ignores unknown ones).
pub fn write_wrapper(
    state: &Path,
    cell_dir: &Path,
    exe: &Path,
    dialect: &str,
    paced: bool,
) -> std::io::Result<PathBuf> {
    let path = state.join(WRAPPER_NAME);
    let script = format!(
        "#!/bin/sh\nexec {} provider-double --recording {} --dialect {} --state {} --pace {} \"$@\"\n",
        shell_quote(exe),
        shell_quote(cell_dir),
        shell_quote(Path::new(dialect)),
        shell_quote(state),
        if paced { "kit" } else { "none" }
    );
    std::fs::write(&path, script)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// Rewrites machine facts (bb §6.6) in a runtime line; `None` when nothing changed.
pub fn rewrite_machine_facts(
    line: &str,
    path_env: Option<&str>,
    workspace: &str,
) -> Option<String> {
    if !line.contains("\"PATH\"") && !line.contains("\"cwd\"") {
        return None;
    }
    let mut v: Value = serde_json::from_str(line).ok()?;
    let params = v.get_mut("params")?.as_object_mut()?;
    let mut changed = false;
    if let Some(p) = path_env
        && let Some(Value::String(s)) = params
            .get_mut("options")
            .and_then(|o| o.get_mut("envVars"))
            .and_then(|e| e.get_mut("PATH"))
        && s != p
    {
        *s = p.to_string();
        changed = true;
    }
    if let Some(Value::String(c)) = params.get_mut("cwd")
        && c != workspace
    {
        *c = workspace.to_string();
        changed = true;
    }
    changed.then(|| crate::jsjson::to_string(&v))
}

/// A wait condition over the live state.
type Cond<'a> = Box<dyn Fn(&Live) -> bool + 'a>;

enum WaitEnd {
    Met,
    TimedOut,
    Exited,
}

struct Harness {
    live: Arc<Mutex<Live>>,
    child: ChildTree,
    opts: ReplayOptions,
    exited_at: Option<Instant>,
    status: Option<std::process::ExitStatus>,
}

impl Harness {
    fn exited(&mut self) -> bool {
        if self.status.is_none()
            && let Ok(Some(s)) = self.child.try_wait()
        {
            self.status = Some(s);
            self.exited_at = Some(Instant::now());
        }
        match self.exited_at {
            // Give the reader a moment to take the last lines the bridge wrote.
            Some(t) => {
                self.live.lock().expect("live").eof || t.elapsed() > Duration::from_millis(200)
            }
            None => false,
        }
    }

    /// Waits for `cond`; a timeout is a stall only when `stall_on_timeout`.
    fn wait(
        &mut self,
        label: &str,
        stall_on_timeout: bool,
        cond: impl Fn(&Live) -> bool,
    ) -> WaitEnd {
        let bound = self.opts.timeout;
        self.wait_within(label, stall_on_timeout, bound, cond)
    }

    /// [`Harness::wait`] with its own bound.
    fn wait_within(
        &mut self,
        label: &str,
        stall_on_timeout: bool,
        bound: Duration,
        cond: impl Fn(&Live) -> bool,
    ) -> WaitEnd {
        let start = Instant::now();
        loop {
            if cond(&self.live.lock().expect("live")) {
                if self.opts.trace {
                    eprintln!(
                        "replay: waited {:.1} ms for {label}",
                        start.elapsed().as_secs_f64() * 1000.0
                    );
                }
                return WaitEnd::Met;
            }
            if self.exited() {
                self.stall(format!("bridge exited while waiting for {label}"));
                return WaitEnd::Exited;
            }
            if start.elapsed() >= bound {
                if stall_on_timeout {
                    self.stall(format!("timed out waiting for {label}"));
                }
                return WaitEnd::TimedOut;
            }
            std::thread::sleep(self.poll());
        }
    }

    fn poll(&self) -> Duration {
        if self.opts.fixed_windows {
            POLL
        } else {
            POLL_IDLE
        }
    }

    fn stall(&self, s: String) {
        self.live.lock().expect("live").stalls.push(s);
    }

    fn write(&self, entry: Option<&Entry>, line: &str) {
        let mut live = self.live.lock().expect("live");
        if let Some(e) = entry {
            live.anchor = Some(Anchor {
                run: e.run,
                seq: e.seq,
                ts: e.ts,
            });
        }
        if let Some(t) = super::msg::object(line)
            .as_ref()
            .and_then(|m| m.get("params"))
            .and_then(|p| p.get("threadId"))
            .and_then(Value::as_str)
        {
            live.runtime_threads.insert(t.to_string());
        }
        live.sent.push(line.to_string());
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        live.last_write = Instant::now();
        let _ = live.to_bridge.send(Some(bytes));
    }
}

/// A temporary folder removed on drop and on SIGINT/SIGTERM.
fn temp(prefix: &str) -> Result<crate::signals::TempDir, ReplayError> {
    crate::signals::temp_dir(prefix)
        .map_err(|e| ReplayError::Failed(format!("cannot create a temp dir: {e}")))
}

/// Replays one cell through a freshly spawned bridge.
pub fn replay_cell(
    cell: &Cell,
    bridge: &[OsString],
    opts: &ReplayOptions,
) -> Result<ReplayResult, ReplayError> {
    replayable(cell)?;
    let plan = build_plan(cell, opts)?;
    let (program, args) = bridge
        .split_first()
        .ok_or_else(|| ReplayError::Failed("no bridge command given".into()))?;
    let state = temp("bb-parity-replay-")?;
    let ws = temp("bb-parity-ws-")?;
    let data = temp("bb-parity-data-")?;
    let ws_path = std::fs::canonicalize(ws.path()).unwrap_or_else(|_| ws.path().to_path_buf());
    let ws_str = ws_path.to_string_lossy().into_owned();
    let exe = match &opts.double_exe {
        Some(p) => p.clone(),
        None => {
            std::env::current_exe().map_err(|e| ReplayError::Failed(format!("current_exe: {e}")))?
        }
    };
    let cell_dir = std::fs::canonicalize(&cell.path).unwrap_or_else(|_| cell.path.clone());
    let wrapper = write_wrapper(
        state.path(),
        &cell_dir,
        &exe,
        &opts.dialect,
        opts.fixed_windows,
    )
    .map_err(|e| ReplayError::Failed(format!("cannot write the provider wrapper: {e}")))?;

    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("BRIDGEWIRE_REPLAY_DATA_DIR", data.path())
        .env_remove(super::recorder::SOCKET_ENV)
        .env_remove(super::recorder::BB_RECORD_ENV);
    for name in &opts.provider_env {
        cmd.env(name, &wrapper);
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let first_request = plan
        .steps
        .iter()
        .find(|s| matches!(s.kind, Kind::Request { .. }))
        .map(|s| s.entry.clone());
    // The cursor comes before anything the bridge could make the double do.
    write_cursor(state.path(), first_request.as_ref());
    let mut child = ChildTree::spawn(&mut cmd)
        .map_err(|e| ReplayError::Failed(format!("cannot start bridge {program:?}: {e}")))?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let out_fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
    let stderr = child.stderr.take().expect("piped");

    let (tx, rx) = channel::<Option<Vec<u8>>>();
    let writer = std::thread::spawn(move || {
        let mut stdin = Some(stdin);
        while let Ok(msg) = rx.recv() {
            match msg {
                Some(bytes) => {
                    if let Some(s) = &mut stdin
                        && s.write_all(&bytes).and_then(|()| s.flush()).is_err()
                    {
                        stdin = None;
                    }
                }
                None => break, // close the bridge's stdin (dropped with this thread)
            }
        }
    });
    let map_path = plan
        .recorded_cwd
        .clone()
        .filter(|c| *c != ws_str)
        .map(|c| (ws_str.clone(), c));
    let live = Arc::new(Mutex::new(Live {
        started_at: Instant::now(),
        lines: Vec::new(),
        line_times: Vec::new(),
        line_after: Vec::new(),
        stored: 0,
        events: Vec::new(),
        violations: Vec::new(),
        stalls: Vec::new(),
        accept_main_run: opts.accept_main_run,
        main_runs: 0,
        runtime_threads: HashSet::new(),
        foreign_deltas: 0,
        sent: Vec::new(),
        sent_before: Vec::new(),
        answered: HashSet::new(),
        started: 0,
        completed: 0,
        last_output: Instant::now(),
        last_write: Instant::now(),
        gaps: VecDeque::with_capacity(CADENCE_GAPS),
        cadence_cap: opts.drain,
        event_driven: !opts.fixed_windows,
        state: state.path().to_path_buf(),
        out_fd,
        eof: false,
        anchor: None,
        answers: plan.answers.clone(),
        assembler: Assembler::new(cell.provider_and_name().0),
        grammar: Grammar::new(),
        map_path,
        to_bridge: tx.clone(),
        line_no: 0,
        cut_lines: Vec::new(),
        initialize: None,
    }));
    let reader = {
        let live = live.clone();
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut splitter = super::recorder::LineSplitter::default();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match stdout.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let mut l = live.lock().expect("live");
                l.on_chunk();
                splitter.feed(&buf[..n], |p| match p {
                    super::recorder::Piece::Line(line) => l.on_line(line),
                    super::recorder::Piece::Oversized(len) => {
                        l.last_output = Instant::now();
                        l.stalls
                            .push(format!("oversized bridge line ({len} bytes)"));
                    }
                });
            }
            let mut l = live.lock().expect("live");
            if let Some(tail) = splitter.finish() {
                l.on_line(&tail);
            }
            l.eof = true;
        })
    };
    let stderr_text = Arc::new(Mutex::new(Vec::new()));
    let err_reader = {
        let sink = stderr_text.clone();
        std::thread::spawn(move || {
            let mut stderr = stderr;
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().expect("stderr");
                let room = MAX_STDERR.saturating_sub(s.len());
                s.extend_from_slice(&buf[..n.min(room)]);
            }
        })
    };

    let mut h = Harness {
        live: live.clone(),
        child,
        opts: opts.clone(),
        exited_at: None,
        status: None,
    };
    let path_env = std::env::var("PATH").ok();

    // Handshake.
    h.write(
        None,
        r#"{"jsonrpc":"2.0","id":"parity-initialize","method":"initialize","params":{"protocolVersion":2,"client":{"name":"bb-parity","version":"0"}}}"#,
    );
    // The start-up is waited for at least START_WAIT: a short --timeout-ms bounds the replay's
    // waits, not how long an interpreter takes to start on a busy machine.
    let start_wait = opts.timeout.max(crate::protocol::START_WAIT);
    let mut gone = matches!(
        h.wait_within("initialize response", true, start_wait, |l| l
            .answered
            .contains(INITIALIZE_ID)),
        WaitEnd::Exited
    );
    let handshake = live
        .lock()
        .expect("live")
        .initialize
        .as_ref()
        .map(super::conformance::judge_initialize_answer);
    let stopped_at_handshake = opts.stop_at_bad_handshake && matches!(handshake, Some(Err(_)));
    gone |= stopped_at_handshake;

    // Steps.
    let mut written_ids: Vec<String> = Vec::new();
    let mut written = 0usize;
    for (i, step) in plan.steps.iter().enumerate() {
        if gone {
            break;
        }
        match &step.kind {
            Kind::Raw => continue,
            Kind::Response { .. } => continue,
            Kind::Notification { .. } => {
                h.write(Some(&step.entry), &step.entry.line);
                written += 1;
                continue;
            }
            Kind::Request { id, method } => {
                let ids = written_ids.clone();
                let waits: [(String, bool, Cond); 4] = [
                    (
                        format!("earlier requests before {method}"),
                        true,
                        Box::new(move |l: &Live| ids.iter().all(|i| l.answered.contains(i))),
                    ),
                    (
                        format!(
                            "{} turn/started and {} turn/completed before {method}",
                            step.started, step.completed
                        ),
                        true,
                        Box::new(move |l: &Live| {
                            l.started >= step.started && l.completed >= step.completed
                        }),
                    ),
                    (
                        format!("{} events before {method}", step.events_before),
                        opts.exact_plan,
                        {
                            let exact = opts.exact_plan;
                            let order = opts.order_timeout;
                            Box::new(move |l: &Live| {
                                l.events.len() >= step.events_before
                                    || (!exact && l.last_output.elapsed() >= order)
                            })
                        },
                    ),
                    (format!("the stream to drain before {method}"), false, {
                        let drain = opts.drain;
                        Box::new(move |l: &Live| l.idle(drain))
                    }),
                ];
                for (label, stall, cond) in waits {
                    if let WaitEnd::Exited = h.wait(&label, stall, cond) {
                        gone = true;
                        break;
                    }
                }
                if gone {
                    break;
                }
                if let Some(m) = &step.map
                    && let Some(t) = is_release_stop(m)
                {
                    live.lock().expect("live").grammar.clear_thread(&t);
                }
                let line = rewrite_machine_facts(&step.entry.line, path_env.as_deref(), &ws_str)
                    .unwrap_or_else(|| step.entry.line.clone());
                h.write(Some(&step.entry), &line);
                written += 1;
                if let Some(t) = id_text(id) {
                    written_ids.push(t);
                }
                let next = plan.steps[i + 1..]
                    .iter()
                    .find(|s| matches!(s.kind, Kind::Request { .. }))
                    .map(|s| &s.entry);
                write_cursor(state.path(), next);
            }
        }
    }
    write_cursor(state.path(), None);

    // Finishing.
    if !gone {
        let ids = written_ids.clone();
        gone = matches!(
            h.wait("the last responses", true, move |l| ids
                .iter()
                .all(|i| l.answered.contains(i))),
            WaitEnd::Exited
        );
    }
    if !gone && let Some(n) = plan.planned_events {
        gone = matches!(
            h.wait(
                &format!("all {n} planned events before closing the bridge"),
                true,
                move |l| l.events.len() >= n
            ),
            WaitEnd::Exited
        );
    }
    if !gone {
        let settle = opts.settle;
        h.wait("the stream to settle", true, move |l| l.idle(settle));
    }
    let _ = tx.send(None); // close the bridge's stdin
    // A bridge refused at the handshake is not waited for: nothing after it is judged.
    let deadline = Instant::now()
        + if stopped_at_handshake {
            Duration::ZERO
        } else {
            opts.timeout
        };
    loop {
        if h.status.is_some() {
            break;
        }
        if let Ok(Some(s)) = h.child.try_wait() {
            h.status = Some(s);
            break;
        }
        if Instant::now() >= deadline {
            if !stopped_at_handshake {
                h.stall("bridge did not exit after stdin closed; killed".into());
            }
            break;
        }
        std::thread::sleep(h.poll());
    }
    // Whatever happened: the whole tree goes (provider doubles included), then reap.
    let killed = h.child.kill_tree();
    let status = match h.status.or(killed) {
        Some(s) => s,
        None => h
            .child
            .wait()
            .map_err(|e| ReplayError::Failed(format!("wait: {e}")))?,
    };
    drop(tx);
    join_bounded(reader, Duration::from_secs(2));
    join_bounded(err_reader, Duration::from_secs(2));
    join_bounded(writer, Duration::from_secs(2));

    let mut doubles = read_reports(state.path());
    doubles.sort_by_key(|d| d.segment.unwrap_or(u64::MAX));
    let mut l = live.lock().expect("live");
    for d in &doubles {
        if let Some(n) = d.segment
            && d.generic > 0
        {
            l.stalls.push(format!(
                "provider double #{n} answered {} request(s) generically",
                d.generic
            ));
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(&stderr_text.lock().expect("stderr")).into_owned();
    let wire = super::answers::wire_outcomes(interleaved(&l.sent, &l.lines, &l.sent_before));
    let wire_in_cell = super::answers::wire_outcomes(
        interleaved(&l.sent, &l.lines, &l.sent_before)
            .filter(|(to_bridge, line)| *to_bridge || in_cell_scope(line, &l.runtime_threads)),
    );
    Ok(ReplayResult {
        lines: std::mem::take(&mut l.lines),
        line_times: std::mem::take(&mut l.line_times),
        line_after: std::mem::take(&mut l.line_after),
        events: std::mem::take(&mut l.events),
        grammar_violations: std::mem::take(&mut l.violations),
        stalls: std::mem::take(&mut l.stalls),
        stderr,
        exit_code: status.code(),
        exit_signal: status.signal(),
        doubles,
        written,
        main_runs: l.main_runs,
        wire,
        wire_in_cell,
        sent: std::mem::take(&mut l.sent),
        sent_before: std::mem::take(&mut l.sent_before),
        lane_warnings: plan.lane_warnings.clone(),
        not_replayed: plan.not_replayed.clone(),
        initialize: l.initialize.take(),
        handshake,
        stopped_at_handshake,
        cut_lines: std::mem::take(&mut l.cut_lines),
    })
}

/// Whether a bridge→runtime line is filed under the replayed cell by the recorder (scope by
/// `params.threadId`, absent: `_process`): a request or response (scoped by its thread or its
/// request's), or a notification naming a thread the runtime named in this replay.
fn in_cell_scope(line: &str, threads: &HashSet<String>) -> bool {
    let Some(m) = super::msg::object(line) else {
        return true;
    };
    if m.contains_key("id") {
        return true;
    }
    match m
        .get("params")
        .and_then(|p| p.get("threadId"))
        .and_then(Value::as_str)
    {
        Some(t) => threads.is_empty() || threads.contains(t),
        None => false,
    }
}

/// Joins a helper thread, giving up (detaching it) after `limit`.
fn join_bounded(t: std::thread::JoinHandle<()>, limit: Duration) {
    let start = Instant::now();
    while !t.is_finished() {
        if start.elapsed() >= limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = t.join();
}

/// The recorded view's entries of a cell (for [`rerecord_entries`]).
pub fn recorded_entries(cell: &Cell) -> Result<Vec<Entry>, ReplayError> {
    collect(cell.recorded())
}

/// bb's fractional seq (§2.6): divide first, then add to the anchor's seq.
pub fn fractional_seq(anchor_seq: f64, k: usize, n: usize) -> f64 {
    anchor_seq + (k as f64 / (n as f64 + 1.0))
}

/// The `.current` lane entries for a replay (bb §2.6 step 3), from the live lines and the
/// recorded view.
pub fn rerecord_entries(result: &ReplayResult, recorded: &[Entry]) -> Vec<Entry> {
    let n = result.lines.len();
    let mut fifo: HashMap<String, VecDeque<Value>> = HashMap::new();
    for e in recorded.iter().filter(|e| e.dir == "bridge→runtime") {
        if let Some(m) = super::msg::object(&e.line)
            && let Kind::Request { id, method } = classify(&m)
        {
            fifo.entry(method).or_default().push_back(id);
        }
    }
    let fallback = recorded
        .iter()
        .find(|e| e.dir == "runtime→bridge")
        .map(|e| Anchor {
            run: e.run,
            seq: e.seq - 1.0,
            ts: e.ts,
        })
        .unwrap_or(Anchor {
            run: 0.0,
            seq: 0.0,
            ts: 0.0,
        });
    let mut per_anchor: HashMap<(u64, u64), usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, line) in result.lines.iter().enumerate() {
        let mut text = line.clone();
        if let Some(m) = super::msg::object(line) {
            if m.get("id").and_then(Value::as_str) == Some(INITIALIZE_ID) {
                continue;
            }
            if let Kind::Request { id, method } = classify(&m)
                && let Some(rec) = fifo.get_mut(&method).and_then(VecDeque::pop_front)
                && id_text(&rec) != id_text(&id)
            {
                text = super::msg::with_id(m, rec);
            }
        }
        let anchor = result
            .line_after
            .get(i)
            .copied()
            .flatten()
            .unwrap_or(fallback);
        let k = per_anchor
            .entry((anchor.run.to_bits(), anchor.seq.to_bits()))
            .or_insert(0);
        *k += 1;
        out.push(Entry {
            ts: anchor.ts + *k as f64,
            run: anchor.run,
            seq: fractional_seq(anchor.seq, *k, n),
            dir: "bridge→runtime".into(),
            line: text,
            extra: Map::new(),
        });
    }
    out
}

/// Renders lane entries as bb writes a lane file: JS JSON joined by `\n`, trailing `\n` when
/// non-empty.
pub fn render_lane(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(&e.to_line());
        s.push('\n');
    }
    s
}

/// Outcome of re-recording one cell.
#[derive(Debug)]
pub struct Rerecord {
    pub result: ReplayResult,
    /// The `.current` file written, `None` when the replay stalled (lane left untouched).
    pub written: Option<(PathBuf, usize)>,
}

/// Re-records `bridge→runtime.current.ndjson` for a cell (plan from the recorded lane); writes
/// nothing when the replay stalled. Lines go through bridgewire's record-time credential
/// redaction (a [`crate::redact::Secrets`] for the lane: bb §1.9, and every value it replaced
/// stays redacted in later lines) — not bb's checked-in §3 pass, which bridgewire does not
/// have. The file is created with `opts.write_mode`.
pub fn rerecord_cell(
    cell: &Cell,
    bridge: &[OsString],
    opts: &ReplayOptions,
) -> Result<Rerecord, ReplayError> {
    let mut o = opts.clone();
    o.exact_plan = false;
    let result = replay_cell(cell, bridge, &o)?;
    if !result.stalls.is_empty() || matches!(result.handshake, Some(Err(_))) {
        return Ok(Rerecord {
            result,
            written: None,
        });
    }
    let recorded = recorded_entries(cell)?;
    let mut entries = rerecord_entries(&result, &recorded);
    let secrets = crate::redact::Secrets::new();
    for e in &mut entries {
        if let Some(r) = secrets.redact_str(&e.line) {
            e.line = r;
        }
    }
    let path = cell.path.join("bridge→runtime.current.ndjson");
    crate::lane::write::write_file(&path, render_lane(&entries).as_bytes(), opts.write_mode)
        .map_err(|e| ReplayError::Failed(format!("{}: {e}", path.display())))?;
    Ok(Rerecord {
        result,
        written: Some((path, entries.len())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractional_seq_matches_bb_worked_examples() {
        let f = |a, k, n| crate::jsjson::format_f64(fractional_seq(a, k, n));
        assert_eq!(f(868.0, 1, 11), "868.0833333333334");
        assert_eq!(f(868.0, 2, 11), "868.1666666666666");
        assert_eq!(f(868.0, 3, 11), "868.25");
        assert_eq!(f(312.0, 1, 57), "312.01724137931035");
        assert_eq!(f(3030.0, 1, 2), "3030.3333333333335");
    }

    fn entry(dir: &str, run: f64, seq: f64, line: &str) -> Entry {
        Entry {
            ts: 1000.0 + seq,
            run,
            seq,
            dir: dir.into(),
            line: line.into(),
            extra: Map::new(),
        }
    }

    #[test]
    fn both_directions_are_read_in_the_order_they_crossed() {
        let sent: Vec<String> = ["r1", "r2", "r3"].map(String::from).to_vec();
        let lines: Vec<String> = ["b1", "b2", "b3"].map(String::from).to_vec();
        let got: Vec<(bool, &str)> = super::interleaved(&sent, &lines, &[0, 2, 2]).collect();
        assert_eq!(
            got,
            vec![
                (false, "b1"),
                (true, "r1"),
                (true, "r2"),
                (false, "b2"),
                (false, "b3"),
                (true, "r3"),
            ]
        );
    }

    #[test]
    fn rerecord_entries_anchor_restore_ids_and_skip_initialize() {
        let recorded = vec![
            entry(
                "runtime→bridge",
                7.0,
                3.0,
                r#"{"jsonrpc":"2.0","id":1,"method":"turn/start"}"#,
            ),
            entry(
                "bridge→runtime",
                7.0,
                5.0,
                r#"{"jsonrpc":"2.0","id":"echo-req-1","method":"item/tool/call"}"#,
            ),
        ];
        let a = Anchor {
            run: 7.0,
            seq: 3.0,
            ts: 1003.0,
        };
        let result = ReplayResult {
            lines: vec![
                r#"{"jsonrpc":"2.0","id":"parity-initialize","result":{}}"#.into(),
                "not json".into(),
                r#"{"jsonrpc":"2.0","id":"live-9","method":"item/tool/call"}"#.into(),
            ],
            line_after: vec![None, None, Some(a)],
            ..Default::default()
        };
        let out = rerecord_entries(&result, &recorded);
        assert_eq!(out.len(), 2);
        // Before any runtime line: the first runtime entry with seq lowered by one.
        assert_eq!(out[0].seq, 2.0 + 1.0 / 4.0);
        assert_eq!(out[0].ts, 1004.0);
        assert_eq!(out[0].line, "not json");
        assert_eq!(out[1].seq, 3.25);
        assert_eq!(out[1].ts, 1004.0);
        assert_eq!(
            out[1].line,
            r#"{"jsonrpc":"2.0","id":"echo-req-1","method":"item/tool/call"}"#
        );
        assert!(render_lane(&out).ends_with("}\n"));
        assert_eq!(render_lane(&[]), "");
    }

    #[test]
    fn machine_facts_rewritten_only_when_present() {
        let line = r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"t","cwd":"/rec","options":{"envVars":{"PATH":"/old"}}}}"#;
        let out = rewrite_machine_facts(line, Some("/usr/bin"), "/tmp/ws").unwrap();
        assert!(out.contains(r#""cwd":"/tmp/ws""#), "{out}");
        assert!(out.contains(r#""PATH":"/usr/bin""#), "{out}");
        assert_eq!(
            rewrite_machine_facts(r#"{"id":1,"method":"x"}"#, Some("/p"), "/w"),
            None
        );
        assert_eq!(rewrite_machine_facts(line, None, "/rec"), None);
    }
}

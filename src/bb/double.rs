//! `bridgewire provider-double`: the fake provider child of bb's replay (reference §6.11).
//!
//! A bridge under replay spawns this in place of its provider (through the wrapper script the
//! player writes, `<state>/replay-provider`). It plays one **segment** of the cell's recorded
//! provider lanes back to the bridge:
//!
//! * **Script**: the cell's `provider→bridge` and `bridge→provider` entries merged by
//!   `(run, seq)`, cut into segments before every `bridge→provider` `initialize` request
//!   (everything before the first one is segment 0). Each child claims the next free segment by
//!   creating `<state>/segment-<n>`; a child without a segment answers everything generically.
//! * **Playing**: a `provider→bridge` step is emitted (requests and notifications only once the
//!   cursor file `<state>/cursor` allows their `(run, seq)`, responses with the live id of the
//!   request they answer); a `bridge→provider` step is an **expectation**: the child waits until
//!   the live bridge writes a line of the same kind and key (method, or id text for responses),
//!   and maps the recorded request id to the live one.
//! * **Session check**: the first live session-defining request (`thread/…` or `session/…` +
//!   `start|resume|fork|new|load|archive|unarchive|name/set`) must have the key of the
//!   segment's first such recorded request, else the segment is released (its directory
//!   removed) and everything is answered generically.
//! * **Divergence**: 750 ms after a live line arrives unmatched, look ahead: if it matches a
//!   later expectation, jump there (skipped requests' recorded responses are dropped, provider
//!   lines in between are emitted). After 5 s, every pending live request is answered
//!   generically (`{"jsonrpc":"2.0","id":<id>,"result":{}}`) and playing continues. Both timers
//!   re-arm on every live line. A live request past the end of the script is answered
//!   generically too.
//!
//! * **Pacing**: with `--pace kit` (bb's kit, the player's `--fixed-windows`) the double sleeps
//!   2 ms after each line it emits and 50 ms after each response; with `--pace none` (the
//!   player's default, event-driven replay) it emits as fast as the bridge reads.
//! * **Idle status**: `<state>/double-status-<pid>` says `busy` while the double has something
//!   to do (a live line to take, a step to emit) and `idle <epoch µs>` once it cannot progress
//!   without the bridge or the cursor (written on each transition, removed on exit); the
//!   player's event-driven replay reads it to know the provider side is drained.
//!
//! Every generic answer is counted by cause; the counts go to stderr and to
//! `<state>/double-report-<n>.json` (`double-report-none-<pid>.json` without a segment), which
//! the player reads back.
//!
//! Dialects ([`Dialect`]): `json-rpc` (tested end to end with `bb-ref-bridge`), `claude-cli`
//! (control requests/responses, hook callback ids remapped per hook event and matcher
//! position) and `pi-rpc` (commands/events, `{"bbChannel": m}` messages out on fd 3 and in on
//! fd 4, catalog mode with `--no-session` and no `--session-dir`; a channel `model-scope`
//! request gets the generic channel reply there). The last two are checked on synthetic
//! scripts only.
//! `--version` anywhere prints `0.0.0-replay`. Exits on stdin EOF, on SIGTERM, and when the
//! spawning bridge dies (re-parenting).

use super::msg::{Kind, id_text};
use crate::lane::merge::{LaneFile, MergedEntries};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

pub const VERSION_TEXT: &str = "0.0.0-replay";
pub const LOOK_AHEAD: Duration = Duration::from_millis(750);
pub const STALL: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(5);
const POLL_UNPACED: Duration = Duration::from_millis(2);
const GAP: Duration = Duration::from_millis(2);
const GAP_AFTER_RESPONSE: Duration = Duration::from_millis(50);

/// Parsed invocation (unknown arguments are ignored: an SDK may add its own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DoubleArgs {
    pub recording: Option<PathBuf>,
    pub dialect: Option<String>,
    pub state: Option<PathBuf>,
    pub version: bool,
    /// pi: `--no-session` (with no `--session-dir`: catalog mode).
    pub no_session: bool,
    pub session_dir: Option<PathBuf>,
    /// `--pace kit` (bb's gaps between emitted lines) or `none` (default when absent: kit).
    pub pace: Option<String>,
}

pub fn parse_args(args: &[OsString]) -> DoubleArgs {
    let mut a = DoubleArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        let (flag, inline) = match s.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(OsString::from(v))),
            _ => (s.to_string(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag.as_str() {
            "--version" => a.version = true,
            "--recording" => a.recording = value().map(PathBuf::from),
            "--dialect" => a.dialect = value().map(|v| v.to_string_lossy().into_owned()),
            "--state" => a.state = value().map(PathBuf::from),
            "--no-session" => a.no_session = true,
            "--session-dir" => a.session_dir = value().map(PathBuf::from),
            "--pace" => a.pace = value().map(|v| v.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    a
}

/// How the provider's wire is classified (§6.11 table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// JSON-RPC: `id` + `method` requests, key = method; segments start at `initialize`.
    JsonRpc,
    /// Claude CLI stream-json: `control_request` / `control_response`, key =
    /// `control_request:<subtype>` or `<type>[:<subtype>]`; segments start at
    /// `control_request:initialize`; hook callback ids are remapped.
    ClaudeCli,
    /// pi RPC: `{id, type}` commands, `type: "response"` answers, key `event:<type>` for
    /// events; `{"bbChannel": m}` channel messages (fd 3 out, fd 4 in); segments start at
    /// `get_state` with id `bb-1`.
    PiRpc,
}

fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

fn id_value(v: Option<&Value>) -> Option<Value> {
    v.filter(|v| v.is_string() || v.is_number()).cloned()
}

impl Dialect {
    pub fn parse(s: &str) -> Option<Dialect> {
        match s {
            "json-rpc" => Some(Dialect::JsonRpc),
            "claude-cli" => Some(Dialect::ClaudeCli),
            "pi-rpc" => Some(Dialect::PiRpc),
            _ => None,
        }
    }

    /// Classifies one parsed line; the key is carried in `method`.
    pub fn classify(self, m: &Map<String, Value>) -> Kind {
        match self {
            Dialect::JsonRpc => super::msg::classify(m),
            Dialect::ClaudeCli => match str_of(m, "type") {
                Some("control_request") => {
                    let key = format!(
                        "control_request:{}",
                        m.get("request")
                            .and_then(|r| r.get("subtype"))
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                    );
                    match id_value(m.get("request_id")) {
                        Some(id) => Kind::Request { id, method: key },
                        None => Kind::Notification { method: key },
                    }
                }
                Some("control_response") => Kind::Response {
                    id: m
                        .get("response")
                        .and_then(|r| r.get("request_id"))
                        .cloned()
                        .unwrap_or(Value::Null),
                },
                Some(t) => Kind::Notification {
                    method: match str_of(m, "subtype") {
                        Some(st) => format!("{t}:{st}"),
                        None => t.to_string(),
                    },
                },
                None => Kind::Raw,
            },
            Dialect::PiRpc => {
                if let Some(Value::Object(c)) = m.get("bbChannel") {
                    let kind = str_of(c, "kind").unwrap_or("?");
                    return match kind {
                        "tool-call" | "request" => Kind::Request {
                            id: c.get("id").cloned().unwrap_or(Value::Null),
                            method: match str_of(c, "method") {
                                Some(me) => format!("channel:{kind}:{me}"),
                                None => format!("channel:{kind}"),
                            },
                        },
                        "tool-result" | "reply" => Kind::Response {
                            id: c.get("id").cloned().unwrap_or(Value::Null),
                        },
                        k => Kind::Notification {
                            method: format!("channel:{k}"),
                        },
                    };
                }
                match (str_of(m, "type"), m.get("id")) {
                    (Some("response"), id) => Kind::Response {
                        id: id.cloned().unwrap_or(Value::Null),
                    },
                    (Some(t), Some(Value::String(id))) => Kind::Request {
                        id: Value::String(id.clone()),
                        method: t.to_string(),
                    },
                    (Some(t), _) => Kind::Notification {
                        method: format!("event:{t}"),
                    },
                    (None, _) => Kind::Raw,
                }
            }
        }
    }

    /// Whether a bridge→provider line starts a segment.
    fn starts_segment(self, kind: &Kind) -> bool {
        match (self, kind) {
            (Dialect::JsonRpc, Kind::Request { method, .. }) => method == "initialize",
            (Dialect::ClaudeCli, Kind::Request { method, .. }) => {
                method == "control_request:initialize"
            }
            (Dialect::PiRpc, Kind::Request { id, method }) => {
                method == "get_state" && id_text(id).as_deref() == Some("bb-1")
            }
            _ => false,
        }
    }

    /// The generic answer to a live request; `true` when it goes to the pi channel (fd 3).
    fn generic(self, id: &Value, channel: bool) -> (Value, bool) {
        match self {
            Dialect::JsonRpc => (json!({"jsonrpc": "2.0", "id": id, "result": {}}), false),
            Dialect::ClaudeCli => (
                json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {}}}),
                false,
            ),
            Dialect::PiRpc if channel => (json!({"kind": "reply", "id": id, "result": {}}), true),
            Dialect::PiRpc => (
                json!({"id": id, "type": "response", "command": "?", "success": true, "data": {}}),
                false,
            ),
        }
    }

    /// A recorded response re-addressed to the live request id.
    fn with_live_id(self, mut m: Map<String, Value>, live: Value) -> Map<String, Value> {
        match self {
            Dialect::ClaudeCli => {
                if let Some(Value::Object(r)) = m.get_mut("response") {
                    r.insert("request_id".into(), live);
                }
            }
            Dialect::PiRpc if m.contains_key("bbChannel") => {
                if let Some(Value::Object(c)) = m.get_mut("bbChannel") {
                    c.insert("id".into(), live);
                }
            }
            _ => {
                m.insert("id".into(), live);
            }
        }
        m
    }
}

/// Claude initialize: recorded hook callback id → live id, per hook event and matcher position.
fn map_hooks(
    rec: &Map<String, Value>,
    live: &Map<String, Value>,
    out: &mut HashMap<String, Value>,
) {
    let hooks = |m: &Map<String, Value>| {
        m.get("request")
            .and_then(|r| r.get("hooks"))
            .and_then(Value::as_object)
            .cloned()
    };
    let (Some(rh), Some(lh)) = (hooks(rec), hooks(live)) else {
        return;
    };
    for (event, matchers) in rh {
        let (Some(rm), Some(lm)) = (
            matchers.as_array(),
            lh.get(&event).and_then(Value::as_array),
        ) else {
            continue;
        };
        for (i, r) in rm.iter().enumerate() {
            let ids = |v: Option<&Value>| {
                v.and_then(|v| v.get("hookCallbackIds"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            for (r, l) in ids(Some(r)).iter().zip(ids(lm.get(i)).iter()) {
                if let Some(t) = id_text(r) {
                    out.insert(t, l.clone());
                }
            }
        }
    }
}

/// One script entry.
#[derive(Debug, Clone)]
struct Step {
    from_provider: bool,
    run: f64,
    seq: f64,
    line: String,
    map: Option<Map<String, Value>>,
    kind: Kind,
}

fn is_session_defining(method: &str) -> bool {
    let rest = method
        .strip_prefix("thread/")
        .or_else(|| method.strip_prefix("session/"));
    matches!(
        rest,
        Some("start" | "resume" | "fork" | "new" | "load" | "archive" | "unarchive" | "name/set")
    )
}

/// Loads the script and cuts it into segments.
fn load_segments(recording: &Path, dialect: Dialect) -> Vec<Vec<Step>> {
    let lanes: Vec<LaneFile> = ["provider→bridge", "bridge→provider"]
        .iter()
        .map(|d| LaneFile {
            dir: d.to_string(),
            path: recording.join(format!("{d}.ndjson")),
        })
        .filter(|l| l.path.is_file())
        .collect();
    // Sorted by (run, seq); ties broken by the canonical direction order.
    let mut lanes = lanes;
    lanes.sort_by_key(|l| {
        crate::lane::BB_DIRECTIONS
            .iter()
            .position(|d| *d == l.dir)
            .unwrap_or(9)
    });
    let mut segments: Vec<Vec<Step>> = vec![Vec::new()];
    for e in MergedEntries::open(&lanes) {
        let map = super::msg::object(&e.line);
        let kind = map.as_ref().map_or(Kind::Raw, |m| dialect.classify(m));
        let from_provider = e.dir == "provider→bridge";
        let is_init = !from_provider && dialect.starts_segment(&kind);
        if is_init && !segments.last().expect("one").is_empty() {
            segments.push(Vec::new());
        }
        segments.last_mut().expect("one").push(Step {
            from_provider,
            run: e.run,
            seq: e.seq,
            line: e.line,
            map,
            kind,
        });
    }
    if segments.len() == 1 && segments[0].is_empty() {
        segments.clear();
    }
    segments
}

/// The runtime's prompt texts in a cell: the text items of every recorded runtime→bridge
/// `turn/start` / `turn/steer` input, trimmed, empty ones left out.
fn runtime_prompts(recording: &Path) -> Vec<String> {
    let lane = LaneFile {
        dir: "runtime→bridge".into(),
        path: recording.join("runtime→bridge.ndjson"),
    };
    if !lane.path.is_file() {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for e in MergedEntries::open(&[lane]) {
        let Some(m) = super::msg::object(&e.line) else {
            continue;
        };
        if !matches!(
            m.get("method").and_then(Value::as_str),
            Some("turn/start" | "turn/steer")
        ) {
            continue;
        }
        let items = m
            .get("params")
            .and_then(|p| p.get("input"))
            .and_then(Value::as_array);
        for t in items
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("text")?.as_str())
        {
            let t = t.trim();
            if !t.is_empty() && !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
    }
    out
}

/// Every string value of a message (keys `jsonrpc`, `id` and `method` left out), in order.
fn strings_of(m: &Map<String, Value>) -> Vec<&str> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (k, v) in m {
        if !matches!(k.as_str(), "jsonrpc" | "id" | "method") {
            walk(v, &mut out);
        }
    }
    out
}

/// How many characters of a line [`prompt_lost`] quotes.
const PROMPT_QUOTE: usize = 160;

fn quote(s: &str) -> String {
    match s.char_indices().nth(PROMPT_QUOTE) {
        Some((end, _)) => format!("{}… ({} bytes)", &s[..end], s.len()),
        None => s.to_string(),
    }
}

/// Whether a live bridge→provider line lost the runtime's prompt its recorded form carried.
/// bb §6.11 matches these lines on their key only, and a bridge may phrase its provider request
/// as it likes; what it may not do is drop what the user said. So only a prompt the recorded
/// line carried is looked for (a string value equal to it, or containing it when it is at least
/// 8 characters), and the live line keeps it when any string value contains it or all of them
/// joined do (wrapped, split over content blocks, in another field). `Some(quote)` names the
/// prompt and quotes both lines.
pub fn prompt_lost(
    prompts: &[String],
    recorded: &Map<String, Value>,
    live: &Map<String, Value>,
) -> Option<String> {
    let rec = strings_of(recorded);
    let carried = prompts.iter().find(|p| {
        rec.iter()
            .any(|s| s.trim() == p.as_str() || (p.chars().count() >= 8 && s.contains(p.as_str())))
    })?;
    let got = strings_of(live);
    let joined: String = got.concat();
    if got.iter().any(|s| s.contains(carried.as_str())) || joined.contains(carried.as_str()) {
        return None;
    }
    Some(format!(
        "the recorded line carried the runtime's prompt {:?}, the live one does not (recorded: {}; live: {})",
        quote(carried),
        quote(&crate::jsjson::to_string(&Value::Object(recorded.clone()))),
        quote(&crate::jsjson::to_string(&Value::Object(live.clone())))
    ))
}

/// The cursor's verdict for a spontaneous line at `(run, seq)`.
pub fn cursor_allows(cursor: &Path, run: f64, seq: f64) -> bool {
    let text = match std::fs::read_to_string(cursor) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(_) => return false,
        Ok(t) => t,
    };
    let t = text.trim();
    if t == "end" {
        return true;
    }
    let mut parts = t.split(' ');
    let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    const SAFE: i64 = (1 << 53) - 1;
    let (Ok(r), Ok(s)) = (a.parse::<i64>(), b.parse::<i64>()) else {
        return false;
    };
    if r.abs() > SAFE || s.abs() > SAFE {
        return false;
    }
    (run, seq) < (r as f64, s as f64)
}

#[derive(Debug, Default, Clone, Copy)]
struct Generic {
    stall: u64,
    past_end: u64,
    released: u64,
    no_segment: u64,
}

impl Generic {
    fn total(&self) -> u64 {
        self.stall + self.past_end + self.released + self.no_segment
    }
}

struct Live {
    kind: Kind,
    map: Map<String, Value>,
}

struct Double {
    dialect: Dialect,
    /// Claude hook callback ids, recorded → live.
    hook_map: HashMap<String, Value>,
    /// pi channel output (fd 3), when open.
    fd3: Option<std::fs::File>,
    segment: Option<usize>,
    steps: Vec<Step>,
    pos: usize,
    /// Recorded ids of the segment's bridge→provider requests (text).
    recorded_requests: HashSet<String>,
    /// Recorded bridge→provider request id → live id.
    id_map: HashMap<String, Value>,
    skipped: HashSet<String>,
    pending: VecDeque<Live>,
    last_live: Instant,
    looked_ahead: bool,
    session_checked: bool,
    generic: Generic,
    jumps: u64,
    state: PathBuf,
    cursor: PathBuf,
    out: std::io::Stdout,
    broken_pipe: bool,
    /// bb's kit gaps between emitted lines (`--pace kit`).
    paced: bool,
    status: StatusFile,
    /// The runtime's prompt texts (the cell's `turn/start`/`turn/steer` input text), and each
    /// bound line whose recorded form carried one the live form lacks ([`prompt_lost`]).
    prompts: Vec<String>,
    prompt_lost: Vec<String>,
    /// The `pos` the last report said: a double the bridge kills (SIGKILL, no exit path) has
    /// reported how far it played each time it drained.
    reported_pos: usize,
}

/// The double's idle/busy status for the player (`<state>/double-status-<pid>`).
struct StatusFile {
    path: Option<PathBuf>,
    idle: Option<bool>,
}

impl StatusFile {
    fn new(state: Option<&Path>) -> StatusFile {
        StatusFile {
            path: state.map(|s| s.join(format!("{STATUS_PREFIX}{}", std::process::id()))),
            idle: None,
        }
    }

    fn set(&mut self, idle: bool) {
        if self.idle == Some(idle) {
            return;
        }
        self.idle = Some(idle);
        let Some(path) = &self.path else { return };
        let text = if idle {
            let us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            format!("idle {us}")
        } else {
            "busy".to_string()
        };
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }

    fn remove(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Status files are `double-status-<pid>`.
pub const STATUS_PREFIX: &str = "double-status-";

/// What the provider doubles of a state directory say: `None` while one of them is busy, else
/// the time since the last of them became idle (`Some(Duration::MAX)` when there is none).
/// A busy double that is no longer running (killed, or a zombie) counts as idle.
pub fn doubles_idle_for(state: &Path) -> Option<Duration> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let mut quiet = Duration::MAX;
    let Ok(rd) = std::fs::read_dir(state) else {
        return Some(quiet);
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STATUS_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue; // removed on exit meanwhile
        };
        match text
            .strip_prefix("idle ")
            .and_then(|t| t.trim().parse::<u128>().ok())
        {
            Some(at) => {
                let d = Duration::from_micros(now.saturating_sub(at) as u64);
                quiet = quiet.min(d);
            }
            None if running(pid) => return None,
            None => {}
        }
    }
    Some(quiet)
}

/// Whether a process runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
    }
}

fn matches(step: &Step, live: &Live) -> bool {
    match (&step.kind, &live.kind) {
        (Kind::Request { method: a, .. }, Kind::Request { method: b, .. }) => a == b,
        (Kind::Notification { method: a }, Kind::Notification { method: b }) => a == b,
        (Kind::Response { id: a }, Kind::Response { id: b }) => id_text(a) == id_text(b),
        _ => false,
    }
}

impl Double {
    fn tag(&self) -> String {
        match self.segment {
            Some(n) => format!("[replay-child #{n}]"),
            None => "[replay-child #-]".into(),
        }
    }

    fn emit(&mut self, line: &str) {
        self.status.set(false);
        let mut o = self.out.lock();
        if writeln!(o, "{line}").and_then(|()| o.flush()).is_err() {
            self.broken_pipe = true;
        }
    }

    /// Writes a message: pi channel messages (`{"bbChannel": m}`) go unwrapped to fd 3.
    fn emit_value(&mut self, v: &Value) {
        if self.dialect == Dialect::PiRpc
            && let Some(c) = v.get("bbChannel").filter(|c| c.is_object())
            && let Some(f) = &mut self.fd3
        {
            let line = crate::jsjson::to_string(c);
            self.status.set(false);
            if writeln!(f, "{line}").and_then(|()| f.flush()).is_err() {
                self.fd3 = None;
            }
            return;
        }
        self.emit(&crate::jsjson::to_string(v));
    }

    fn answer_generic(&mut self, live: &Live) {
        let Kind::Request { id, method } = &live.kind else {
            return;
        };
        let (v, channel) = self.dialect.generic(id, method.starts_with("channel:"));
        if channel {
            self.emit_value(&json!({ "bbChannel": v }));
        } else {
            self.emit_value(&v);
        }
    }

    /// Emits a provider→bridge step: responses re-addressed, Claude hook callbacks remapped,
    /// everything else verbatim.
    fn emit_step(&mut self, step: &Step, live_id: Option<Value>) {
        let Some(m) = step.map.clone() else {
            self.emit(&step.line);
            return;
        };
        if let Some(live) = live_id {
            let m = self.dialect.with_live_id(m, live);
            self.emit_value(&Value::Object(m));
            return;
        }
        if self.dialect == Dialect::ClaudeCli
            && matches!(&step.kind, Kind::Request { method, .. } if method == "control_request:hook_callback")
        {
            let mut m = m;
            if let Some(Value::Object(r)) = m.get_mut("request")
                && let Some(t) = r.get("callback_id").and_then(id_text)
                && let Some(live) = self.hook_map.get(&t)
            {
                r.insert("callback_id".into(), live.clone());
            }
            self.emit_value(&Value::Object(m));
            return;
        }
        if m.contains_key("bbChannel") {
            self.emit_value(&Value::Object(m));
        } else {
            self.emit(&step.line);
        }
    }

    fn report_path(&self) -> PathBuf {
        match self.segment {
            Some(n) => self.state.join(format!("double-report-{n}.json")),
            None => self
                .state
                .join(format!("double-report-none-{}.json", std::process::id())),
        }
    }

    fn write_report(&self) {
        let g = self.generic;
        let v = json!({
            "segment": self.segment,
            "generic": g.total(),
            "stall": g.stall,
            "pastEnd": g.past_end,
            "released": g.released,
            "noSegment": g.no_segment,
            "lookAheadJumps": self.jumps,
            "stepsPlayed": self.pos,
            "steps": self.steps.len(),
            "promptLost": self.prompt_lost,
        });
        let path = self.report_path();
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, crate::jsjson::to_string_pretty(&v)).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// A live line arrived.
    fn on_live(&mut self, line: String) {
        self.status.set(false);
        let Some(map) = super::msg::object(&line) else {
            return; // non-JSON is ignored
        };
        let live = Live {
            kind: self.dialect.classify(&map),
            map,
        };
        if !self.session_checked
            && let Kind::Request { method, .. } = &live.kind
            && is_session_defining(method)
        {
            self.session_checked = true;
            let recorded = self.steps.iter().find_map(|s| match &s.kind {
                Kind::Request { method, .. } if !s.from_provider && is_session_defining(method) => {
                    Some(method.clone())
                }
                _ => None,
            });
            if let Some(r) = recorded
                && r != *method
            {
                eprintln!(
                    "{} live {method} is not the segment's {r}: releasing the segment",
                    self.tag()
                );
                if let Some(n) = self.segment {
                    let _ = std::fs::remove_dir(self.state.join(format!("segment-{n}")));
                }
                self.steps.clear();
                self.pos = 0;
                self.segment = None;
                let pending: Vec<Live> = self.pending.drain(..).collect();
                for p in pending.into_iter().chain(std::iter::once(live)) {
                    if let Kind::Request { .. } = &p.kind {
                        self.generic.released += 1;
                        self.answer_generic(&p);
                    }
                }
                self.write_report();
                return;
            }
        }
        self.pending.push_back(live);
        self.last_live = Instant::now();
        self.looked_ahead = false;
    }

    /// Plays as far as possible; returns whether anything happened.
    fn advance(&mut self) -> bool {
        let mut progressed = false;
        while self.pos < self.steps.len() && !self.broken_pipe {
            let step = self.steps[self.pos].clone();
            if step.from_provider {
                match &step.kind {
                    Kind::Response { id } => {
                        let t = id_text(id).unwrap_or_default();
                        if self.skipped.contains(&t) || !self.recorded_requests.contains(&t) {
                            self.pos += 1; // a skipped request's answer, or one never asked here
                        } else if let Some(live) = self.id_map.get(&t).cloned() {
                            self.emit_step(&step, Some(live));
                            self.pos += 1;
                            if self.paced {
                                std::thread::sleep(GAP_AFTER_RESPONSE);
                            }
                        } else {
                            break; // the live bridge has not asked yet
                        }
                    }
                    Kind::Raw => {
                        self.emit(&step.line);
                        self.pos += 1;
                        if self.paced {
                            std::thread::sleep(GAP);
                        }
                    }
                    _ => {
                        if !cursor_allows(&self.cursor, step.run, step.seq) {
                            break;
                        }
                        self.emit_step(&step, None);
                        self.pos += 1;
                        if self.paced {
                            std::thread::sleep(GAP);
                        }
                    }
                }
                progressed = true;
            } else {
                if step.kind == Kind::Raw {
                    self.pos += 1;
                    progressed = true;
                    continue;
                }
                let Some(i) = self.pending.iter().position(|l| matches(&step, l)) else {
                    break;
                };
                let live = self.pending.remove(i).expect("found");
                self.bind(&step, &live);
                self.pos += 1;
                progressed = true;
            }
        }
        if self.pos >= self.steps.len() {
            // Past the end (or no segment): answer requests generically, drop the rest.
            while let Some(p) = self.pending.pop_front() {
                if let Kind::Request { .. } = &p.kind {
                    if self.segment.is_some() {
                        self.generic.past_end += 1;
                    } else {
                        self.generic.no_segment += 1;
                    }
                    self.answer_generic(&p);
                    self.write_report();
                    progressed = true;
                }
            }
        }
        progressed
    }

    fn bind(&mut self, step: &Step, live: &Live) {
        if let Some(rec) = &step.map
            && let Some(lost) = prompt_lost(&self.prompts, rec, &live.map)
        {
            let what = match &live.kind {
                Kind::Request { method, .. } | Kind::Notification { method } => method.clone(),
                _ => "line".into(),
            };
            self.prompt_lost
                .push(format!("bridge→provider {what}: {lost}"));
            self.write_report();
        }
        if let (Kind::Request { id: rec, .. }, Kind::Request { id: got, .. }) =
            (&step.kind, &live.kind)
            && let Some(t) = id_text(rec)
        {
            self.id_map.insert(t, got.clone());
        }
        if self.dialect == Dialect::ClaudeCli
            && matches!(&step.kind, Kind::Request { method, .. } if method == "control_request:initialize")
            && let Some(rec) = &step.map
        {
            map_hooks(rec, &live.map, &mut self.hook_map);
        }
    }

    /// Look-ahead: jump to a later expectation an unmatched live line matches.
    fn look_ahead(&mut self) {
        for li in 0..self.pending.len() {
            let Some(j) = (self.pos + 1..self.steps.len()).find(|&j| {
                !self.steps[j].from_provider && matches(&self.steps[j], &self.pending[li])
            }) else {
                continue;
            };
            for k in self.pos..j {
                let s = self.steps[k].clone();
                if s.from_provider {
                    match &s.kind {
                        Kind::Response { id } => {
                            let t = id_text(id).unwrap_or_default();
                            if !self.skipped.contains(&t)
                                && let Some(live) = self.id_map.get(&t).cloned()
                            {
                                self.emit_step(&s, Some(live));
                            }
                        }
                        _ => self.emit_step(&s, None),
                    }
                } else if let Kind::Request { id, .. } = &s.kind
                    && let Some(t) = id_text(id)
                {
                    self.skipped.insert(t);
                }
            }
            eprintln!(
                "{} look-ahead: jumped from step {} to {j}",
                self.tag(),
                self.pos
            );
            self.jumps += 1;
            self.pos = j;
            return;
        }
    }

    fn stall(&mut self) {
        let pending: Vec<Live> = self.pending.drain(..).collect();
        for p in pending {
            if let Kind::Request { .. } = &p.kind {
                self.generic.stall += 1;
                self.answer_generic(&p);
            }
        }
        eprintln!(
            "{} stalled at step {}/{}: pending requests answered generically",
            self.tag(),
            self.pos,
            self.steps.len()
        );
        self.write_report();
    }

    fn run(&mut self, rx: Receiver<Option<String>>, term: Arc<AtomicBool>, parent: libc::pid_t) {
        loop {
            // SAFETY: getppid has no preconditions.
            let orphaned = unsafe { libc::getppid() } != parent;
            if term.load(Ordering::Relaxed) || self.broken_pipe || orphaned {
                return;
            }
            // Take every live line already there before playing on.
            loop {
                match rx.try_recv() {
                    Ok(Some(line)) => self.on_live(line),
                    Ok(None) => return,
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                }
            }
            if self.advance() {
                continue;
            }
            // Nothing to play without the bridge, the cursor or a timer: drained.
            self.status.set(true);
            if self.reported_pos != self.pos {
                self.reported_pos = self.pos;
                self.write_report();
            }
            if !self.pending.is_empty() {
                let quiet = self.last_live.elapsed();
                if quiet >= STALL {
                    self.stall();
                    continue;
                }
                if quiet >= LOOK_AHEAD && !self.looked_ahead {
                    self.looked_ahead = true;
                    self.look_ahead();
                    continue;
                }
            }
            // Unpaced, the cursor is looked at more often: the player waits on this double.
            let poll = if self.paced { POLL } else { POLL_UNPACED };
            match rx.recv_timeout(poll) {
                Ok(Some(line)) => self.on_live(line),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

/// Claims the next free segment directory.
fn claim(state: &Path, count: usize) -> Option<usize> {
    (0..count).find(|n| std::fs::create_dir(state.join(format!("segment-{n}"))).is_ok())
}

/// Runs the double; returns the process exit code.
pub fn run(args: &[OsString]) -> u8 {
    let a = parse_args(args);
    if a.version {
        println!("{VERSION_TEXT}");
        return 0;
    }
    // Busy from the start (loading the script) until there is nothing left to play.
    let mut status = StatusFile::new(a.state.as_deref());
    status.set(false);
    run_double(a, status)
}

fn run_double(a: DoubleArgs, status: StatusFile) -> u8 {
    // Die with the bridge that spawned us: PR_SET_PDEATHSIG would fire when the spawning
    // *thread* ends, which is too early for bridges that spawn from short-lived threads, so the
    // loop watches for re-parenting instead.
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let term = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(libc::SIGTERM, term.clone());
    let (Some(recording), Some(state)) = (a.recording, a.state) else {
        eprintln!("[replay-child] usage: --recording <cell dir> --dialect json-rpc --state <dir>");
        return 2;
    };
    let name = a.dialect.unwrap_or_else(|| "json-rpc".into());
    let Some(dialect) = Dialect::parse(&name) else {
        eprintln!("[replay-child] unknown dialect {name} (json-rpc, claude-cli or pi-rpc)");
        return 2;
    };
    let segments = load_segments(&recording, dialect);
    let catalog = dialect == Dialect::PiRpc && a.no_session && a.session_dir.is_none();
    let segment = if catalog {
        None
    } else {
        claim(&state, segments.len())
    };
    let steps = segment.map(|n| segments[n].clone()).unwrap_or_default();
    let recorded_requests = steps
        .iter()
        .filter(|s| !s.from_provider)
        .filter_map(|s| match &s.kind {
            Kind::Request { id, .. } => id_text(id),
            _ => None,
        })
        .collect();
    let (tx, rx) = channel();
    let fd_open = |fd: libc::c_int| {
        // SAFETY: F_GETFD only queries the descriptor.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    };
    let (fd3, fd4) = if dialect == Dialect::PiRpc {
        use std::os::fd::FromRawFd;
        // SAFETY: the descriptors are open (checked) and owned by this process from here on.
        (
            fd_open(3).then(|| unsafe { std::fs::File::from_raw_fd(3) }),
            fd_open(4).then(|| unsafe { std::fs::File::from_raw_fd(4) }),
        )
    } else {
        (None, None)
    };
    if let Some(f) = fd4 {
        // pi channel input: wrapped as {"bbChannel": m} before matching; its end is not ours.
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(f).lines() {
                let Ok(line) = line else { return };
                let Ok(m) = serde_json::from_str::<Value>(line.trim_end_matches('\r')) else {
                    continue;
                };
                let wrapped = crate::jsjson::to_string(&json!({ "bbChannel": m }));
                if tx.send(Some(wrapped)).is_err() {
                    return;
                }
            }
        });
    }
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lock.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if tx
                        .send(Some(String::from_utf8_lossy(line).into_owned()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    let mut d = Double {
        dialect,
        hook_map: HashMap::new(),
        fd3,
        segment,
        steps,
        pos: 0,
        recorded_requests,
        id_map: HashMap::new(),
        skipped: HashSet::new(),
        pending: VecDeque::new(),
        last_live: Instant::now(),
        looked_ahead: false,
        session_checked: false,
        generic: Generic::default(),
        jumps: 0,
        cursor: state.join("cursor"),
        state,
        out: std::io::stdout(),
        broken_pipe: false,
        paced: a.pace.as_deref() != Some("none"),
        status,
        prompts: runtime_prompts(&recording),
        prompt_lost: Vec::new(),
        reported_pos: 0,
    };
    if catalog {
        pi_catalog(&mut d, &segments, rx, term, parent);
        d.status.remove();
        return 0;
    }
    d.write_report();
    d.run(rx, term, parent);
    d.status.remove();
    d.write_report();
    let g = d.generic;
    eprintln!(
        "{} done at step {}/{}: {} generic answer(s) (stall {}, past end {}, released {}, no segment {}), {} look-ahead jump(s)",
        d.tag(),
        d.pos,
        d.steps.len(),
        g.total(),
        g.stall,
        g.past_end,
        g.released,
        g.no_segment,
        d.jumps
    );
    0
}

/// pi catalog mode: every stdin command `{id, type}` is answered from the recorded
/// `get_state` / `get_available_models` responses. (Channel `model-scope` requests get the
/// generic channel reply: the scoped-model answer is not reproduced.)
fn pi_catalog(
    d: &mut Double,
    segments: &[Vec<Step>],
    rx: Receiver<Option<String>>,
    term: Arc<AtomicBool>,
    parent: libc::pid_t,
) {
    let mut models: Vec<Value> = Vec::new();
    let mut state_data: Option<Value> = None;
    for step in segments.iter().flatten().filter(|s| s.from_provider) {
        let Some(m) = &step.map else { continue };
        if str_of(m, "type") != Some("response") || m.get("success") != Some(&Value::Bool(true)) {
            continue;
        }
        let data = m.get("data").cloned().unwrap_or(Value::Null);
        let mut add = |v: &Value| {
            if v.is_object() && !models.contains(v) {
                models.push(v.clone());
            }
        };
        match str_of(m, "command") {
            Some("get_state") => {
                if let Some(model) = data.get("model") {
                    add(model);
                }
                if state_data.is_none() {
                    state_data = Some(data.clone());
                }
            }
            Some("get_available_models") => {
                for model in data
                    .get("models")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    add(model);
                }
            }
            _ => {}
        }
    }
    loop {
        // SAFETY: getppid has no preconditions.
        if term.load(Ordering::Relaxed) || d.broken_pipe || unsafe { libc::getppid() } != parent {
            return;
        }
        d.status.set(true);
        let line = match rx.recv_timeout(POLL) {
            Ok(Some(line)) => line,
            Ok(None) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => continue,
        };
        let Some(m) = super::msg::object(&line) else {
            continue;
        };
        let kind = Dialect::PiRpc.classify(&m);
        let Kind::Request { id, method } = &kind else {
            continue;
        };
        if method.starts_with("channel:") {
            d.answer_generic(&Live { kind, map: m });
            continue;
        }
        let data = if method == "get_available_models" {
            json!({ "models": models })
        } else {
            state_data.clone().unwrap_or_else(|| json!({}))
        };
        d.emit_value(&json!({"id": id, "type": "response", "command": method, "success": true, "data": data}));
    }
}

/// A double's report, as the player reads it back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DoubleReport {
    pub segment: Option<u64>,
    pub generic: u64,
    pub stall: u64,
    pub past_end: u64,
    pub released: u64,
    pub no_segment: u64,
    pub steps_played: u64,
    pub steps: u64,
    /// Lines that lost the runtime's prompt their recorded form carried ([`prompt_lost`]).
    pub prompt_lost: Vec<String>,
}

/// Reads every `double-report-*.json` in a state directory (sorted by file name).
pub fn read_reports(state: &Path) -> Vec<DoubleReport> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(state)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("double-report-") && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
            let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
            Some(DoubleReport {
                segment: v.get("segment").and_then(Value::as_u64),
                generic: n("generic"),
                stall: n("stall"),
                past_end: n("pastEnd"),
                released: n("released"),
                no_segment: n("noSegment"),
                steps_played: n("stepsPlayed"),
                steps: n("steps"),
                prompt_lost: v
                    .get("promptLost")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_prompt_is_named_and_other_phrasing_is_not() {
        let prompts = vec!["hello there".to_string(), "hi".to_string()];
        let rec = obj(
            json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s","text":"hello there"}}),
        );
        let empty = obj(
            json!({"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s","text":""}}),
        );
        let lost = prompt_lost(&prompts, &rec, &empty).expect("lost");
        assert!(
            lost.starts_with("the recorded line carried the runtime's prompt \"hello there\", the live one does not (recorded: ")
                && lost.contains(r#""text":""}}"#),
            "{lost}"
        );
        for live in [
            json!({"id":7,"method":"session/prompt","params":{"sessionId":"s","text":"hello there"}}),
            json!({"id":7,"method":"session/prompt","params":{"messages":[{"role":"user","content":"The user says: hello there"}]}}),
            json!({"id":7,"method":"session/prompt","params":{"blocks":[{"text":"hello "},{"text":"there"}]}}),
        ] {
            assert_eq!(
                prompt_lost(&prompts, &rec, &obj(live.clone())),
                None,
                "{live}"
            );
        }
        // A recorded line that carried no prompt asks nothing of the live one; a short prompt
        // is looked for as a whole value only.
        let init = obj(json!({"id":1,"method":"initialize","params":{"client":"this bridge"}}));
        assert_eq!(prompt_lost(&prompts, &init, &empty), None);
    }

    #[test]
    fn args_ignore_unknown_and_find_version() {
        let args: Vec<OsString> = [
            "--foo",
            "--recording",
            "/r",
            "--dialect=json-rpc",
            "x",
            "--state",
            "/s",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let a = parse_args(&args);
        assert_eq!(a.recording, Some(PathBuf::from("/r")));
        assert_eq!(a.dialect.as_deref(), Some("json-rpc"));
        assert_eq!(a.state, Some(PathBuf::from("/s")));
        assert!(!a.version);
        assert!(parse_args(&[OsString::from("a"), OsString::from("--version")]).version);
    }

    #[test]
    fn cursor_rules() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("cursor");
        assert!(cursor_allows(&c, 5.0, 5.0), "missing → no limit");
        std::fs::write(&c, "end").unwrap();
        assert!(cursor_allows(&c, 5.0, 5.0));
        std::fs::write(&c, "1 10").unwrap();
        assert!(cursor_allows(&c, 1.0, 9.0));
        assert!(!cursor_allows(&c, 1.0, 10.0));
        assert!(!cursor_allows(&c, 2.0, 0.0));
        std::fs::write(&c, "1 x").unwrap();
        assert!(
            !cursor_allows(&c, 0.0, 0.0),
            "malformed → nothing spontaneous"
        );
        std::fs::write(&c, "1 99999999999999999").unwrap();
        assert!(!cursor_allows(&c, 0.0, 0.0), "not a safe integer");
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn dialect_classification() {
        let c = Dialect::ClaudeCli;
        assert_eq!(
            c.classify(&obj(json!({"type":"control_request","request_id":"r1","request":{"subtype":"initialize"}}))),
            Kind::Request { id: json!("r1"), method: "control_request:initialize".into() }
        );
        assert_eq!(
            c.classify(&obj(json!({"type":"control_response","response":{"subtype":"success","request_id":"r1"}}))),
            Kind::Response { id: json!("r1") }
        );
        assert_eq!(
            c.classify(&obj(json!({"type":"system","subtype":"init"}))),
            Kind::Notification {
                method: "system:init".into()
            }
        );
        assert_eq!(
            c.classify(&obj(json!({"type":"assistant"}))),
            Kind::Notification {
                method: "assistant".into()
            }
        );
        let p = Dialect::PiRpc;
        let init = p.classify(&obj(json!({"id":"bb-1","type":"get_state"})));
        assert!(p.starts_segment(&init));
        assert!(!p.starts_segment(&p.classify(&obj(json!({"id":"bb-2","type":"get_state"})))));
        assert_eq!(
            p.classify(&obj(
                json!({"id":"bb-1","type":"response","command":"get_state"})
            )),
            Kind::Response { id: json!("bb-1") }
        );
        assert_eq!(
            p.classify(&obj(json!({"type":"agent_start"}))),
            Kind::Notification {
                method: "event:agent_start".into()
            }
        );
        assert_eq!(
            p.classify(&obj(
                json!({"bbChannel":{"kind":"request","id":4,"method":"model-scope"}})
            )),
            Kind::Request {
                id: json!(4),
                method: "channel:request:model-scope".into()
            }
        );
        assert_eq!(
            p.classify(&obj(json!({"bbChannel":{"kind":"reply","id":4}}))),
            Kind::Response { id: json!(4) }
        );
        assert!(Dialect::JsonRpc.starts_segment(
            &Dialect::JsonRpc.classify(&obj(json!({"jsonrpc":"2.0","id":1,"method":"initialize"})))
        ));
        assert_eq!(
            Dialect::ClaudeCli.generic(&json!("x"), false).0,
            json!({"type":"control_response","response":{"subtype":"success","request_id":"x","response":{}}})
        );
        assert_eq!(
            Dialect::PiRpc.generic(&json!(3), true),
            (json!({"kind":"reply","id":3,"result":{}}), true)
        );
    }

    #[test]
    fn claude_hook_ids_map_by_event_and_matcher_position() {
        let rec = obj(
            json!({"type":"control_request","request_id":"a","request":{"subtype":"initialize",
            "hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["hook_0","hook_1"]},{"matcher":null,"hookCallbackIds":["hook_2"]}],
                     "Stop":[{"hookCallbackIds":["hook_3"]}]}}}),
        );
        let live = obj(
            json!({"type":"control_request","request_id":"b","request":{"subtype":"initialize",
            "hooks":{"PreToolUse":[{"matcher":"Bash","hookCallbackIds":["h7","h8"]},{"matcher":null,"hookCallbackIds":["h9"]}]}}}),
        );
        let mut m = HashMap::new();
        map_hooks(&rec, &live, &mut m);
        assert_eq!(m.get("hook_0"), Some(&json!("h7")));
        assert_eq!(m.get("hook_1"), Some(&json!("h8")));
        assert_eq!(m.get("hook_2"), Some(&json!("h9")));
        assert_eq!(m.get("hook_3"), None, "no live Stop hooks");
        let resp = Dialect::ClaudeCli.with_live_id(
            obj(json!({"type":"control_response","response":{"subtype":"success","request_id":"a","response":{}}})),
            json!("b"),
        );
        assert_eq!(resp["response"]["request_id"], "b");
    }

    #[test]
    fn idle_status_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            doubles_idle_for(dir.path()),
            Some(Duration::MAX),
            "no double"
        );
        let mut me = StatusFile::new(Some(dir.path()));
        me.set(false);
        assert_eq!(doubles_idle_for(dir.path()), None, "a running busy double");
        me.set(true);
        let q = doubles_idle_for(dir.path()).expect("idle");
        assert!(q < Duration::from_secs(5), "{q:?}");
        // A busy double that is gone (pid beyond pid_max) does not hold the player.
        std::fs::write(dir.path().join(format!("{STATUS_PREFIX}4194305")), "busy").unwrap();
        assert!(doubles_idle_for(dir.path()).is_some());
        me.remove();
        std::fs::remove_file(dir.path().join(format!("{STATUS_PREFIX}4194305"))).unwrap();
        assert_eq!(doubles_idle_for(dir.path()), Some(Duration::MAX));
    }

    #[test]
    fn session_defining_keys() {
        for m in [
            "session/new",
            "session/load",
            "thread/name/set",
            "thread/start",
        ] {
            assert!(is_session_defining(m), "{m}");
        }
        for m in ["prompt", "session/cancel", "thread/stop", "initialize"] {
            assert!(!is_session_defining(m), "{m}");
        }
    }
}

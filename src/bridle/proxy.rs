//! `record bridle`: a Socket.IO-aware recording proxy between browsers or agents and a hub.
//!
//! Every Engine.IO frame crossing the proxy (WebSocket frames and HTTP long-polling packets
//! alike) is queued for its lane *before* it is forwarded, and appended to lanes in the lane
//! entry format:
//!
//! * directions `browser→hub`, `hub→browser` (namespace `/ws/client`), `agent→hub`,
//!   `hub→agent` (namespace `/ws/agent`), `http→hub`, `hub→http` (the HTTP API);
//! * scope (the cell) `<agentId>__<clientId>`: a browser's frames, and the agent frames that
//!   carry that clientId; `<agentId>__agent` for an agent's own frames (register, ping, …);
//!   `<agentId>__http` for the HTTP API and the agent frames answering it (clientIds no
//!   recorded browser holds); Engine.IO control frames go to their connection's scope
//!   (held back until the namespace CONNECT names it);
//! * a frame is recorded as its WebSocket text (`42/ws/client,["message",{…}]`); a binary frame
//!   as `binary:` + base64; a WebSocket's end as Engine.IO's close packet `1` ([`CLOSE_LINE`])
//!   in the lane of the side that ended it: each side's close frame, or, when the connection
//!   ended without one, the side whose stream ended first;
//! * handshake secrets (`auth.token`, `auth.apiKey`) are replaced unless redaction is turned
//!   off, by what kind of secret was sent, so a replay can send one of the same kind
//!   ([`super::token`]): a browser's JWT keeps its header and payload parts and its signature
//!   becomes `[redacted:signed]` or `[redacted:forged]` (judged with the hub's JWT secret,
//!   [`ProxyConfig::jwt_secret`]; `exp`/`nbf` are not judged, they stay readable),
//!   `[redacted:unverified]` (no secret given) or `[redacted:unsigned]` (`alg: none`); any
//!   other token is `[redacted:not-jwt]`; an apiKey is, when the hub's key is known
//!   ([`ProxyConfig::api_key`]), `[redacted]` if it is the key, else how it differs
//!   (`[redacted:case]`, `[redacted:prefix]`, `[redacted:extended]`, `[redacted:other]`), and
//!   `[redacted:unverified]` when the key is not known; an empty one is kept.
//!   The hub's secrets are never written (they are known secrets, redacted wherever a frame
//!   echoes them). So is every secret the bb §1.9 rules find in a frame's JSON or an HTTP API
//!   body (`apiKey`, `token`, env/header containers, …), every JWT-shaped token, and every
//!   secret value seen before, wherever it recurs ([`crate::redact::Secrets`]);
//! * bounded state (issue 15): frames are kept only for Engine.IO sessions the hub opened
//!   through this proxy; frames posted to unknown session ids, or to sessions the hub refused
//!   (a non-2xx answer to a polling request), are dropped and counted, never held; at most
//!   [`MAX_SESSIONS`] sessions and [`MAX_PENDING`] held-back frames per session (past either,
//!   the held-back frames are written to `_unscoped` and counted as overflow).
//!
//! Lane writes are off the forwarding path (issue 13). A WebSocket is relayed as raw bytes:
//! the upgrade request goes to the hub as the client sent it, less `Sec-WebSocket-Extensions`
//! (no compression is negotiated, so frames can be read back as they are), and after the
//! switch each side's bytes are read in chunks and written on unchanged, no frame decoded or
//! re-encoded; each chunk is queued before it is forwarded (its bytes shared, not copied).
//! Long-polling and HTTP API bodies are queued the same way. One writer thread owns everything
//! else: the WebSocket frame parsers ([`super::wsframe`]: unmasking, fragments, control frames,
//! frames split across chunks), the session routing below, redaction, JSON decoding of the
//! frames that need it, and the lane files (up to [`MAX_LANE_FILES`] kept open: four per
//! browser). Woken by an event, it lets a batch gather for
//! [`COALESCE`], takes whatever is queued (up to [`WRITE_BATCH`] events), routes it, and
//! appends it with one `write` per lane file touched before it takes the next batch. Seqs
//! follow queue order, and a chunk is queued before it is forwarded, so an effect still sorts
//! after its cause and every lane is in `(run, seq)` order. The queue is bounded
//! ([`QUEUE_EVENTS`] events, [`QUEUE_BYTES`] bytes): when the writer falls behind, forwarding
//! waits for it (backpressure); the queue never grows past its bound.
//!
//! Crashes: SIGINT/SIGTERM stop accepting, close the open connections (a close frame, 1001,
//! each way where no frame is partly through) and write everything queued before the proxy
//! exits; a browser, agent or hub that crashes loses nothing. A SIGKILL
//! (or crash) of the proxy itself loses the frames still queued, some of which may already have
//! been forwarded: for each lane a tail, never a frame in the middle (normally the last few
//! milliseconds of traffic, at most the queue bound). `tests/bridle.rs` checks both.

use super::wire::{EioPacket, SioPacket, SioType, decode_frame};
use super::wsframe::{Boundary, FrameParser, Message};
use super::{AGENT_NSP, CLIENT_NSP, peek_jwt};
use crate::lane::write::{LaneWriter, Line};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

/// What to record and where.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The hub (`http://host:port`).
    pub upstream: String,
    /// Lanes root (cells are its sub-folders).
    pub dir: PathBuf,
    /// Replace handshake secrets in the lanes (the default).
    pub redact: bool,
    /// Permission bits of lane files (folders get the matching search bits).
    pub mode: u32,
    /// The hub's JWT secret, when known: a browser's token is recorded as signed with it or
    /// not ([`super::token::redact_token`]). Never written.
    pub jwt_secret: Option<String>,
    /// The hub's agent API key, when known: an agent's other `apiKey` is recorded by how it
    /// differs ([`super::token::redact_api_key`]). Never written.
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Browser,
    Agent,
}

impl Role {
    fn dirs(self) -> (&'static str, &'static str) {
        match self {
            Role::Browser => ("browser→hub", "hub→browser"),
            Role::Agent => ("agent→hub", "hub→agent"),
        }
    }
}

/// One Engine.IO session's routing state.
#[derive(Default)]
struct Session {
    /// The session's number in the recording (1, 2, … in the order sessions opened), written
    /// beside each of its lines as `conn`: two tabs of one user share a cell, and a replay
    /// plays each on its own socket.
    conn: u64,
    /// Namespace → (role, agentId, clientId for browsers).
    nsps: HashMap<String, (Role, String, String)>,
    /// Control frames seen before any namespace said who this is: (from_client, line).
    pending: Vec<(bool, Bytes)>,
}

impl Session {
    fn home(&self) -> Option<(Role, String)> {
        let (role, agent, client) = self.nsps.values().next()?;
        Some(match role {
            Role::Browser => (*role, format!("{agent}__{client}")),
            Role::Agent => (*role, format!("{agent}__agent")),
        })
    }
}

/// The line a connection's end is recorded as: Engine.IO's `close` packet, in the lane of the
/// side that ended it (its WebSocket close frame, or its stream's end when none came). A
/// replay needs it: a browser that left without a Socket.IO leave was, replayed, still there
/// for the health probes after it. It is no event and no row (a pin does not move).
pub const CLOSE_LINE: &[u8] = b"1";

/// Engine.IO sessions tracked at once.
pub const MAX_SESSIONS: usize = 65_536;
/// Frames held back per session before it says who it is.
pub const MAX_PENDING: usize = 1024;
/// Events queued for the writer at once; past it, forwarding waits (backpressure).
pub const QUEUE_EVENTS: usize = 4096;
/// The most of a cut message ([`super::wire::CUT_PREFIX`]) a lane keeps: what a hub saw
/// before it closed is its start (lines stay well under the lane reader's limit).
const MAX_CUT: usize = 16 << 20;

/// Bytes of frames queued for the writer at once (a bigger frame goes alone); past it,
/// forwarding waits (backpressure).
pub const QUEUE_BYTES: usize = 16 << 20;
/// Events the writer routes and appends per batch at most.
pub const WRITE_BATCH: usize = 1024;
/// How long the writer lets a batch gather after its first event.
pub const COALESCE: std::time::Duration = std::time::Duration::from_millis(2);

/// How much lower the lane writer thread's scheduling priority is than the forwarding tasks'
/// (a nice increment: 10 gives it about a tenth of the CPU share of a default thread when both
/// want to run).
const WRITER_NICE: libc::c_int = 10;

/// Most lane files the writer keeps open.
pub const MAX_LANE_FILES: usize = 4096;

/// How many lane files the writer keeps open: each browser has four lanes, so the lane
/// writer's default cap (256) would close and reopen files all the time with a few dozen
/// browsers. The soft descriptor limit is raised to the hard one (capped at 65 536) and a
/// quarter of it goes to lane files (at most [`MAX_LANE_FILES`]); the rest stays for sockets.
fn lane_file_cap() -> usize {
    // Children bridgewire spawns later keep the original soft limit (`crate::proc`).
    let soft = crate::proc::raise_open_file_limit(65_536).unwrap_or(0);
    ((soft / 4) as usize).min(MAX_LANE_FILES)
}

/// What a forwarding task hands the writer, in forwarding order.
enum Event {
    /// A WebSocket relay started: its connection number and session id (the query's on an
    /// upgrade, else provisional until the hub's `open` packet names it).
    WsOpen(u64, Arc<str>),
    /// Bytes relayed on WebSocket connection `conn`, as read: from the browser or agent
    /// (`true`) or from the hub. Frames are parsed from them on the writer thread.
    WsChunk(u64, bool, Bytes),
    /// A WebSocket relay ended: which side's stream ended first (`true`: the browser's or
    /// agent's), `None` when the proxy was stopping (the recorder ended it, not a peer).
    WsClose(u64, Option<bool>),
    /// A long-polling POST body: packets separated by U+001E, from the client.
    PollPost(Arc<str>, Bytes),
    /// A long-polling GET answer: the request's sid (none on the handshake), whether the hub
    /// answered 2xx, the body.
    PollGet(Option<Arc<str>>, bool, Bytes),
    /// A session ended: frames still held back go to `_unscoped`.
    Close(Arc<str>),
    /// An HTTP API request, recorded before it is forwarded.
    HttpRequest {
        method: String,
        path: String,
        query: Option<String>,
        content_type: Option<String>,
        body: Bytes,
    },
    /// The hub's answer to an HTTP API request.
    HttpResponse {
        path: String,
        status: u16,
        body: Bytes,
    },
    /// Values of credential headers an HTTP request carried (`Authorization`, `Cookie`, …),
    /// forwarded but never recorded: learned as secrets with their parts
    /// ([`crate::redact::Secrets::learn_header_value`]), so a hub that echoes one into a body
    /// or frame has it redacted there.
    Learn(Vec<String>),
    /// The proxy is stopping: write what is queued, accept nothing more.
    Stop,
}

impl Event {
    /// Bytes it holds, for the queue's byte bound.
    fn size(&self) -> usize {
        64 + match self {
            Event::WsChunk(_, _, b)
            | Event::PollPost(_, b)
            | Event::PollGet(_, _, b)
            | Event::HttpRequest { body: b, .. }
            | Event::HttpResponse { body: b, .. } => b.len(),
            _ => 0,
        }
    }
}

struct Queued {
    event: Event,
    /// Its share of [`QUEUE_BYTES`], released once it is written.
    _bytes: Option<OwnedSemaphorePermit>,
}

/// The forwarding side of the writer's queue.
#[derive(Clone)]
struct LaneQueue {
    tx: mpsc::Sender<Queued>,
    budget: Arc<Semaphore>,
}

impl LaneQueue {
    /// Queues `event`, waiting while the queue is full. `false` when the writer has stopped:
    /// the frame cannot be recorded, so the caller must not forward it.
    async fn push(&self, event: Event) -> bool {
        let n = event.size().min(QUEUE_BYTES) as u32;
        let permit = match self.budget.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => match self.budget.clone().acquire_many_owned(n).await {
                Ok(p) => p,
                Err(_) => return false,
            },
        };
        let q = Queued {
            event,
            _bytes: Some(permit),
        };
        match self.tx.try_send(q) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(q)) => self.tx.send(q).await.is_ok(),
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// One routed lane line, waiting for its batch's write.
struct Record {
    scope: String,
    dir: &'static str,
    line: Bytes,
    /// The session that carried it ([`Session::conn`]); `None` for HTTP API lines.
    conn: Option<u64>,
    /// Whether some key of the line's JSON could lead to a redaction, when a scan of the frame
    /// already told ([`super::event_scan`]); `None`: the redaction pass looks itself.
    keys: Option<bool>,
}

/// The recording half, run by the writer thread: lanes plus per-session state.
struct Recorder {
    /// Frames not recorded: for session ids the hub never opened through this proxy, or refused.
    dropped: u64,
    /// Held-back frames written to `_unscoped` because a bound was reached.
    overflowed: u64,
    writer: LaneWriter,
    sessions: HashMap<String, Session>,
    /// agentId → clientIds of every browser seen connecting.
    browsers: HashMap<String, std::collections::HashSet<String>>,
    redact: bool,
    /// The recording's known secrets (handshake values are learned before they are replaced,
    /// so they stay redacted wherever they recur, in any cell).
    secrets: Option<Arc<crate::redact::Secrets>>,
    /// The hub's JWT secret and API key a handshake's credentials are judged against.
    jwt_secret: Option<String>,
    api_key: Option<String>,
    /// Frames recorded, for reports.
    frames: u64,
    /// Lines routed since the last write.
    out: Vec<Record>,
    /// Sessions opened so far: the last one's number ([`Session::conn`]).
    sessions_opened: u64,
    /// WebSocket relays by connection number: their session and frame parsers.
    conns: HashMap<u64, WsConn>,
    /// Directions of WebSocket relays whose bytes stopped parsing (a protocol error): their
    /// later frames were relayed but not recorded.
    unparsed: u64,
    /// A text frame that was not UTF-8 was said on stderr (once per recording).
    warned_not_utf8: bool,
    /// Messages parsed from the chunk at hand (kept to reuse its allocation).
    scratch: Vec<Message>,
}

/// One WebSocket relay as the writer thread sees it.
struct WsConn {
    /// Its Engine.IO session id (renamed from a provisional one by the hub's `open` packet).
    sid: Arc<str>,
    /// Frames from the browser or agent.
    up: FrameParser,
    /// Frames from the hub.
    down: FrameParser,
    /// A close frame was recorded (either side's): the connection's end is in the lanes.
    closed: bool,
    /// The hub's close came while a message from the browser or agent was still arriving: it
    /// is written once that message is, which is its cause (a hub that refuses a frame over its
    /// size closes on the frame's first bytes, while the proxy still relays the rest), or when
    /// the relay ends.
    held_close: bool,
}

impl Recorder {
    /// `writer` gets lines already redacted ([`Recorder::flush`] redacts them, with what the
    /// routing scan learned about their keys).
    fn new(writer: LaneWriter, cfg: &ProxyConfig) -> Recorder {
        let redact = cfg.redact;
        let secrets = redact.then(crate::redact::Secrets::new);
        if let Some(s) = &secrets {
            // A hub that echoes its own secret has it redacted like any credential.
            for known in [&cfg.jwt_secret, &cfg.api_key].into_iter().flatten() {
                s.learn(known);
            }
        }
        Recorder {
            dropped: 0,
            overflowed: 0,
            writer,
            sessions: HashMap::new(),
            browsers: Default::default(),
            redact,
            secrets,
            jwt_secret: cfg.jwt_secret.clone(),
            api_key: cfg.api_key.clone(),
            frames: 0,
            out: Vec::new(),
            sessions_opened: 0,
            conns: HashMap::new(),
            unparsed: 0,
            warned_not_utf8: false,
            scratch: Vec::new(),
        }
    }

    /// Parses the frames completed by `bytes` (relayed on connection `conn`) and records each
    /// data message as the codec-based relay did: a text frame as its text, a binary one as
    /// `binary:` + base64; a hub `open` packet renames a provisional session first.
    fn ws_chunk(&mut self, conn: u64, from_client: bool, bytes: &Bytes) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let parser = if from_client { &mut c.up } else { &mut c.down };
        let mut msgs = std::mem::take(&mut self.scratch);
        if let Err(e) = parser.feed(bytes, &mut |m| msgs.push(m)) {
            self.unparsed += 1;
            eprintln!(
                "bridgewire record bridle: {} WebSocket frames of session {} stopped parsing: {e}; later frames are relayed, not recorded",
                if from_client { "client" } else { "hub" },
                c.sid
            );
        }
        let mut sid = c.sid.clone();
        for m in msgs.drain(..) {
            match m {
                Message::Text(t) => {
                    if !from_client
                        && t.first() == Some(&b'0')
                        && let Ok(text) = std::str::from_utf8(&t)
                        && let Ok(EioPacket::Open(o)) = EioPacket::decode(text)
                    {
                        let new: Arc<str> = o.sid.into();
                        match self.sessions.remove(&*sid) {
                            Some(s) => {
                                self.sessions.insert(new.to_string(), s);
                            }
                            None => self.open(&new),
                        }
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.sid = new.clone();
                        }
                        sid = new;
                    }
                    self.frame(&sid, from_client, &t);
                }
                Message::Binary(b) => self.binary(&sid, from_client, &b),
                Message::Close => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.closed = true;
                        if !from_client && c.up.mid_message() {
                            c.held_close = true;
                            continue;
                        }
                    }
                    self.end(&sid, from_client);
                }
            }
        }
        self.scratch = msgs;
        if from_client
            && let Some(c) = self.conns.get_mut(&conn)
            && c.held_close
            && !c.up.mid_message()
        {
            c.held_close = false;
            self.end(&sid, false);
        }
    }

    fn write(&mut self, scope: &str, dir: &'static str, line: Bytes, conn: Option<u64>) {
        self.write_scanned(scope.to_string(), dir, line, conn, None);
    }

    /// [`Recorder::write`] with what a scan of the frame said about its keys.
    fn write_scanned(
        &mut self,
        scope: String,
        dir: &'static str,
        line: Bytes,
        conn: Option<u64>,
        keys: Option<bool>,
    ) {
        self.frames += 1;
        self.out.push(Record {
            scope,
            dir,
            line,
            conn,
            keys,
        });
    }

    /// Redacts and appends the lines routed since the last call (in routing order, so a value
    /// learned from one line is replaced in the lines after it): one `write` per lane file
    /// touched.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let redacted: Vec<Option<Vec<u8>>> = match &self.secrets {
            Some(s) => self
                .out
                .iter()
                .map(|r| s.redact_framed_scanned(&r.line, r.keys))
                .collect(),
            None => Vec::new(),
        };
        let lines: Vec<Line<'_>> = self
            .out
            .iter()
            .enumerate()
            .map(|(i, r)| Line {
                scope: Some(&r.scope),
                dir: r.dir,
                bytes: redacted
                    .get(i)
                    .and_then(|b| b.as_deref())
                    .unwrap_or(&r.line),
                conn: r.conn,
            })
            .collect();
        self.writer.append_batch(&lines);
        drop(lines);
        drop(redacted);
        self.out.clear();
    }

    fn apply(&mut self, event: &Event) {
        match event {
            Event::WsOpen(conn, sid) => {
                self.open(sid);
                self.conns.insert(
                    *conn,
                    WsConn {
                        sid: sid.clone(),
                        up: FrameParser::new(),
                        down: FrameParser::new(),
                        closed: false,
                        held_close: false,
                    },
                );
            }
            Event::WsChunk(conn, from_client, bytes) => self.ws_chunk(*conn, *from_client, bytes),
            Event::WsClose(conn, ended_by) => {
                if let Some(c) = self.conns.remove(conn) {
                    // A message the connection ended inside of (a hub closes on a frame over
                    // its size limit after its header): recorded as far as it came, before the
                    // close it caused.
                    for (from_client, parser) in [(true, &c.up), (false, &c.down)] {
                        if let Some(cut) = parser.cut() {
                            self.cut(&c.sid, from_client, cut);
                        }
                    }
                    if c.held_close {
                        self.end(&c.sid, false);
                    }
                    // Ended without a close frame (a dropped TCP connection, a killed peer):
                    // the side whose stream ended first ended it.
                    if let (false, Some(from_client)) = (c.closed, *ended_by) {
                        self.end(&c.sid, from_client);
                    }
                    self.close(&c.sid);
                }
            }
            Event::PollPost(sid, body) => {
                if std::str::from_utf8(body).is_ok() {
                    for packet in body.split(|b| *b == 0x1e) {
                        self.frame(sid, true, &body.slice_ref(packet));
                    }
                }
            }
            Event::PollGet(sid, ok, body) => {
                if let Ok(text) = std::str::from_utf8(body) {
                    let mut sid = sid.as_deref().map(str::to_string);
                    for packet in text.split('\u{1e}') {
                        if *ok
                            && packet.starts_with('0')
                            && let Ok(EioPacket::Open(o)) = EioPacket::decode(packet)
                        {
                            self.open(&o.sid);
                            sid = Some(o.sid);
                        }
                        if let Some(sid) = &sid {
                            self.frame(sid, false, &body.slice_ref(packet.as_bytes()));
                        }
                    }
                }
            }
            Event::Close(sid) => self.close(sid),
            Event::Learn(values) => {
                if let Some(s) = &self.secrets {
                    for v in values {
                        s.learn_header_value(v);
                    }
                }
            }
            Event::HttpRequest {
                method,
                path,
                query,
                content_type,
                body,
            } => {
                // Method, path, query string and body, enough for `replay bridle` to send it
                // again.
                let json_body = serde_json::from_slice::<Value>(body).ok();
                let mut req = json!({
                    "method": method,
                    "path": path,
                    "body": json_body.clone().unwrap_or(Value::Null),
                });
                if let Some(q) = query {
                    req["query"] = json!(q);
                }
                if json_body.is_none() && !body.is_empty() {
                    req["bodyText"] = json!(String::from_utf8_lossy(body));
                    if let Some(ct) = content_type {
                        req["contentType"] = json!(ct);
                    }
                }
                self.http(path, "http→hub", &req);
            }
            Event::HttpResponse { path, status, body } => {
                let resp = json!({
                    "status": status,
                    "body": serde_json::from_slice::<Value>(body).unwrap_or(Value::Null),
                });
                self.http(path, "hub→http", &resp);
            }
            Event::Stop => {}
        }
    }

    /// Starts tracking session `sid` (the hub opened it, or a WebSocket connected).
    fn open(&mut self, sid: &str) {
        if !self.sessions.contains_key(sid) && self.sessions.len() >= MAX_SESSIONS {
            // Bounded: the oldest-looking session goes (its held-back frames to `_unscoped`).
            if let Some(victim) = self.sessions.keys().next().cloned() {
                self.overflowed += self.sessions.get(&victim).map_or(0, |s| s.pending.len()) as u64;
                self.close(&victim);
            }
        }
        if !self.sessions.contains_key(sid) {
            self.sessions_opened += 1;
            let session = Session {
                conn: self.sessions_opened,
                ..Session::default()
            };
            self.sessions.insert(sid.to_string(), session);
        }
    }

    /// Holds a frame back until the session says who it is (bounded by [`MAX_PENDING`]).
    fn hold(&mut self, sid: &str, from_client: bool, line: Bytes) {
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        if session.pending.len() >= MAX_PENDING {
            let pending = std::mem::take(&mut session.pending);
            let conn = session.conn;
            self.overflowed += pending.len() as u64;
            self.unscoped(pending, conn);
        }
        if let Some(session) = self.sessions.get_mut(sid) {
            session.pending.push((from_client, line));
        }
    }

    /// Records one text frame of session `sid` (dropped, counted, when the session is unknown).
    /// A text frame that is not UTF-8 (RFC 6455 §8.1: its receiver fails the connection) is a
    /// fault of its sender, recorded as it came (the lane keeps its bytes as `lineBase64`) in
    /// the connection's home scope, and said once on stderr: never lost.
    fn frame(&mut self, sid: &str, from_client: bool, bytes: &Bytes) {
        let Ok(text) = std::str::from_utf8(bytes) else {
            if !self.warned_not_utf8 {
                self.warned_not_utf8 = true;
                eprintln!(
                    "bridgewire record bridle: a {} WebSocket text frame of session {sid} is not UTF-8 (RFC 6455 §8.1: its receiver fails the connection); recorded as its bytes (lineBase64)",
                    if from_client { "client" } else { "hub" },
                );
            }
            self.write_home(sid, from_client, bytes.clone());
            return;
        };
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        let conn = Some(session.conn);
        // Fast path: an event on a known namespace of a session that said who it is. A
        // browser's goes to the session's scope, an agent's to its clientId's; one borrowed
        // scan ([`super::event_scan`]) finds the clientId and whether any key could need
        // redacting, and tells whether a full decode would take the packet (if not, the slow
        // path below handles it as before). Only CONNECTs and other packets are decoded in full.
        if let Some((nsp, json)) = text.strip_prefix("42").and_then(|r| r.split_once(','))
            && session.pending.is_empty()
            && let Some((role, agent, client)) = session.nsps.get(nsp)
        {
            // The redaction pass reads JSON from the frame's first `{` or `[`: the scan's answer
            // holds for it only when that is where `json` starts.
            let scan = (json.starts_with('[')
                && memchr::memchr2(b'{', b'[', &bytes[..bytes.len() - json.len()]).is_none())
            .then(|| super::event_scan::scan_event(json))
            .flatten();
            let keys = scan.as_ref().map(|s| s.keys_may_matter);
            let (up, down) = role.dirs();
            let dir = if from_client { up } else { down };
            match role {
                Role::Browser => {
                    let scope = format!("{agent}__{client}");
                    self.write_scanned(scope, dir, bytes.clone(), conn, keys);
                    return;
                }
                Role::Agent => {
                    if let Some(scan) = scan {
                        let scope = match scan.client_id.as_deref() {
                            Some(c) if self.browsers.get(agent).is_some_and(|b| b.contains(c)) => {
                                format!("{agent}__{c}")
                            }
                            // A clientId no recorded browser holds: the HTTP API's.
                            Some(c) if !c.is_empty() => format!("{agent}__http"),
                            _ => format!("{agent}__agent"),
                        };
                        self.write_scanned(scope, dir, bytes.clone(), conn, keys);
                        return;
                    }
                }
            }
        }
        let sio = match decode_frame(text) {
            Ok((_, Some(p))) => Some(p),
            _ => None,
        };
        let Some(p) = sio else {
            // Engine.IO control frame or an invalid one: the connection's home scope.
            self.write_home(sid, from_client, bytes.clone());
            return;
        };
        let mut line = bytes.clone();
        if from_client && p.kind == SioType::Connect {
            let auth = p.data.clone().unwrap_or(Value::Null);
            let agent = auth["agentId"].as_str().unwrap_or("_none").to_string();
            let role = if p.nsp == AGENT_NSP {
                Some(Role::Agent)
            } else if p.nsp == CLIENT_NSP {
                Some(Role::Browser)
            } else {
                None
            };
            if let Some(role) = role {
                let client = auth["token"]
                    .as_str()
                    .and_then(peek_jwt)
                    .map(|c| c.client_id())
                    .unwrap_or_else(|| "_anonymous".into());
                if role == Role::Browser {
                    self.browsers
                        .entry(agent.clone())
                        .or_default()
                        .insert(client.clone());
                }
                session.nsps.insert(p.nsp.clone(), (role, agent, client));
            }
            if self.redact {
                let (jwt_secret, api_key) = (self.jwt_secret.as_deref(), self.api_key.as_deref());
                if let (Some(s), Some(Value::Object(m))) = (&self.secrets, &p.data) {
                    for k in CONNECT_SECRETS {
                        if let Some(v) = m.get(k).and_then(Value::as_str) {
                            // A value its recorded form still shows whole holds no secret (an
                            // unsigned JWT's header and payload): learned, it would be replaced
                            // in its own line.
                            if !recorded_credential(k, v, jwt_secret, api_key).contains(v) {
                                s.learn(v);
                            }
                        }
                    }
                }
                line = Bytes::from(redact_connect(&p, jwt_secret, api_key));
            }
        }
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        let Some((role, agent, client)) = session.nsps.get(&p.nsp).cloned() else {
            self.hold(sid, from_client, line);
            return;
        };
        let pending = std::mem::take(&mut session.pending);
        let (up, down) = role.dirs();
        let home = match role {
            Role::Browser => format!("{agent}__{client}"),
            Role::Agent => format!("{agent}__agent"),
        };
        for (fc, l) in pending {
            self.write(&home, if fc { up } else { down }, l, conn);
        }
        let scope = match role {
            Role::Browser => home,
            Role::Agent => match p.as_event().and_then(|(_, d)| d["clientId"].as_str()) {
                Some(c) if self.browsers.get(&agent).is_some_and(|b| b.contains(c)) => {
                    format!("{agent}__{c}")
                }
                // A clientId no recorded browser holds: the HTTP API's.
                Some(c) if !c.is_empty() => format!("{agent}__http"),
                _ => home,
            },
        };
        self.write(&scope, if from_client { up } else { down }, line, conn);
    }

    /// A line for session `sid`'s home scope (its browser's cell, or its agent's), held back
    /// until the session says who it is.
    fn write_home(&mut self, sid: &str, from_client: bool, line: Bytes) {
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        let conn = Some(session.conn);
        match session.home() {
            Some((role, scope)) => {
                let (up, down) = role.dirs();
                self.write(&scope, if from_client { up } else { down }, line, conn);
            }
            None => self.hold(sid, from_client, line),
        }
    }

    /// A message the connection ended inside of, as a [`super::wire::CUT_PREFIX`] line (at most
    /// [`MAX_CUT`] bytes of it kept).
    fn cut(&mut self, sid: &str, from_client: bool, cut: super::wsframe::Cut) {
        let kept = &cut.got[..cut.got.len().min(MAX_CUT)];
        let came = if cut.text {
            let whole = match std::str::from_utf8(kept) {
                Ok(t) => t,
                Err(e) => std::str::from_utf8(&kept[..e.valid_up_to()]).unwrap_or_default(),
            };
            whole.to_string()
        } else {
            format!("binary:{}", crate::util::base64_encode(kept))
        };
        let line = format!("{}{}:{came}", super::wire::CUT_PREFIX, cut.declared);
        self.write_home(sid, from_client, Bytes::from(line));
    }

    fn binary(&mut self, sid: &str, from_client: bool, bytes: &[u8]) {
        let line = Bytes::from(format!("binary:{}", crate::util::base64_encode(bytes)));
        self.write_home(sid, from_client, line);
    }

    /// A session ended: frames still held back go to `_unscoped`.
    fn close(&mut self, sid: &str) {
        if let Some(s) = self.sessions.remove(sid) {
            self.unscoped(s.pending, s.conn);
        }
    }

    /// Writes frames held back for session `conn` to `_unscoped`: it never said who it is.
    fn unscoped(&mut self, pending: Vec<(bool, Bytes)>, conn: u64) {
        for (fc, l) in pending {
            let dir = if fc { "browser→hub" } else { "hub→browser" };
            self.write("_unscoped", dir, l, Some(conn));
        }
    }

    /// Records the end of session `sid`'s connection, in the lane of the side that ended it.
    fn end(&mut self, sid: &str, from_client: bool) {
        self.frame(sid, from_client, &Bytes::from_static(CLOSE_LINE));
    }

    /// Records one HTTP API line: the request (`http→hub`) or the answer (`hub→http`).
    fn http(&mut self, path: &str, dir: &'static str, line: &Value) {
        let rest = path.strip_prefix("/api/agent/").unwrap_or("");
        let agent = match rest.split('/').next() {
            Some(a) if !a.is_empty() && rest != "health" => a,
            _ => "_hub",
        };
        let scope = format!("{agent}__http");
        self.write(&scope, dir, Bytes::from(line.to_string()), None);
    }
}

/// The writer thread: routes and appends queued events in batches until [`Event::Stop`] (then
/// what is still queued) or until every sender is gone.
fn write_lanes(mut rec: Recorder, mut rx: mpsc::Receiver<Queued>) -> Recorder {
    // Forwarding is what a browser waits for; lane writes only have to keep up (the bounded
    // queue makes forwarding wait when they do not). On a busy machine the forwarding tasks
    // (and the hub, the agent, the browsers) should run first when they wake, so this thread
    // runs at a lower priority (nice +WRITER_NICE): it still gets its share, in larger batches.
    // SAFETY: setpriority on this thread's own id changes only its scheduling priority.
    unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            WRITER_NICE,
        );
    }
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        // Let a batch gather: one wake-up and one `write` per lane for a few ms of traffic,
        // not per frame (forwarding does not wait for it; only a SIGKILL window grows).
        std::thread::sleep(COALESCE);
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(q) => batch.push(q),
                Err(_) => break,
            }
        }
        for q in &batch {
            if matches!(q.event, Event::Stop) {
                // Refuse new events; those already queued are still drained and written.
                rx.close();
            }
            rec.apply(&q.event);
        }
        rec.flush();
        // The batch's byte permits go only now that its lines are written.
        batch.clear();
    }
    rec
}

/// The CONNECT `auth` keys holding a credential.
const CONNECT_SECRETS: [&str; 2] = ["apiKey", "token"];

/// What a CONNECT's `auth.<k>` string is recorded as: a token by its kind, judged with the
/// hub's `jwt_secret`; an apiKey by how it differs from the hub's `api_key`.
fn recorded_credential(
    k: &str,
    v: &str,
    jwt_secret: Option<&str>,
    api_key: Option<&str>,
) -> String {
    if k == "token" {
        super::token::redact_token(v, jwt_secret)
    } else {
        super::token::redact_api_key(v, api_key)
    }
}

/// A CONNECT packet with `auth.apiKey` and `auth.token` replaced by what kind of credential
/// they are ([`super::token`]), judged with the hub's `jwt_secret` and `api_key` when known;
/// a credential that is not a string is `[redacted]`.
pub fn redact_connect(p: &SioPacket, jwt_secret: Option<&str>, api_key: Option<&str>) -> String {
    let mut q = p.clone();
    if let Some(Value::Object(m)) = &mut q.data {
        for k in CONNECT_SECRETS {
            let recorded = match m.get(k) {
                None => continue,
                Some(Value::String(v)) => recorded_credential(k, v, jwt_secret, api_key),
                Some(_) => crate::redact::REDACTED.to_string(),
            };
            m.insert(k.into(), json!(recorded));
        }
    }
    q.to_frame()
}

struct Proxy {
    cfg: ProxyConfig,
    queue: LaneQueue,
    http: reqwest::Client,
    /// Turns `true` when the proxy stops: open WebSockets are closed.
    stopping: watch::Receiver<bool>,
    /// WebSocket relays still running.
    relays: Arc<AtomicUsize>,
    /// Numbers WebSocket relays (the writer thread keys their parsers by it).
    conns: std::sync::atomic::AtomicU64,
}

/// Counts one running relay until dropped.
struct RelayGuard(Arc<AtomicUsize>);

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves the proxy on `listener` until `shutdown` resolves, then closes the open WebSockets
/// and writes every queued frame. Returns the number of frames recorded.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: ProxyConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<u64> {
    let writer = LaneWriter::create(&cfg.dir)?
        .with_mode(cfg.mode)?
        .with_max_open_files(lane_file_cap());
    let rec = Recorder::new(writer, &cfg);
    let (tx, rx) = mpsc::channel(QUEUE_EVENTS);
    let writer = std::thread::Builder::new()
        .name("bridle-lanes".into())
        .spawn(move || write_lanes(rec, rx))?;
    let queue = LaneQueue {
        tx,
        budget: Arc::new(Semaphore::new(QUEUE_BYTES)),
    };
    let (stop, stopping) = watch::channel(false);
    let relays = Arc::new(AtomicUsize::new(0));
    let proxy = Arc::new(Proxy {
        cfg,
        queue: queue.clone(),
        http: reqwest::Client::new(),
        stopping,
        relays: relays.clone(),
        conns: Default::default(),
    });
    let app = axum::Router::new().fallback(handle).with_state(proxy);
    // Small frames must not sit in Nagle's buffer waiting for a delayed ACK (~40 ms a hop).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    // Upgraded WebSockets outlive the server: close them (bounded), so their last frames and
    // held-back ones are queued before the writer stops.
    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while relays.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let _ = queue
        .tx
        .send(Queued {
            event: Event::Stop,
            _bytes: None,
        })
        .await;
    drop(queue);
    let rec = tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| anyhow::anyhow!("the lane writer: {e}"))?
        .map_err(|_| anyhow::anyhow!("the lane writer panicked"))?;
    served?;
    if rec.dropped > 0 {
        eprintln!(
            "bridgewire record bridle: {} frame(s) for Engine.IO sessions the hub did not open through this proxy (or refused) were not recorded",
            rec.dropped
        );
    }
    if rec.overflowed > 0 {
        eprintln!(
            "bridgewire record bridle: {} held-back frame(s) written to _unscoped (session bounds reached)",
            rec.overflowed
        );
    }
    Ok(rec.frames)
}

fn query_sid(uri: &axum::http::Uri) -> Option<String> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("sid="))
        .map(str::to_string)
}

async fn handle(State(p): State<Arc<Proxy>>, req: Request) -> Response {
    let is_ws = req
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let path_q = req
        .uri()
        .path_and_query()
        .map(|x| x.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if is_ws {
        return upgrade(p, req, path_q).await;
    }
    forward_http(p, req, path_q).await
}

/// How long the hub may take to connect and answer a WebSocket upgrade.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest upgrade answer head read from the hub.
const MAX_HEAD: usize = 64 << 10;
/// Bytes read per `read` on a relay (a chunk holds as many frames as arrived).
const READ_CHUNK: usize = 64 << 10;
/// After one direction of a relay ends, how long the other may take to finish (its peer's
/// close frame and FIN), before both are dropped.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// `host:port` of the hub (plain TCP: the proxy speaks `http`/`ws` upstream).
fn hub_authority(upstream: &str) -> Result<String, String> {
    let (scheme, rest) = upstream
        .split_once("://")
        .ok_or_else(|| format!("upstream {upstream:?}: no scheme"))?;
    let port = match scheme {
        "http" | "ws" => 80,
        _ => {
            return Err(format!(
                "upstream {upstream:?}: only http:// (or ws://) is relayed"
            ));
        }
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() {
        return Err(format!("upstream {upstream:?}: no host"));
    }
    // `host` or `host:port` (`[v6]:port` included).
    Ok(
        if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host.to_string()
        } else {
            format!("{host}:{port}")
        },
    )
}

/// The hub's answer head to an upgrade request: status, headers, and the bytes read past it
/// (the first relayed bytes from the hub).
struct HubAnswer {
    status: StatusCode,
    headers: Vec<(axum::http::HeaderName, HeaderValue)>,
    rest: Vec<u8>,
}

/// Sends the browser's or agent's upgrade request to the hub as it came (its headers but
/// `Host`, and `Sec-WebSocket-Extensions`: no compression is negotiated, so the relayed
/// frames can be read back as they are) and reads the hub's answer head.
async fn hub_handshake(
    hub: &mut tokio::net::TcpStream,
    authority: &str,
    path_q: &str,
    headers: &axum::http::HeaderMap,
) -> Result<HubAnswer, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = format!("GET {path_q} HTTP/1.1\r\nhost: {authority}\r\n").into_bytes();
    for (k, v) in headers {
        if k == axum::http::header::HOST || k == axum::http::header::SEC_WEBSOCKET_EXTENSIONS {
            continue;
        }
        head.extend_from_slice(k.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    hub.write_all(&head).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(4096);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("answer head over {MAX_HEAD} bytes"));
        }
        let mut chunk = [0u8; 4096];
        let n = hub.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before answering the upgrade".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| "answer head not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut out = Vec::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header line {l:?}"))?;
        let k = axum::http::HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|_| format!("bad header name {k:?}"))?;
        let v = HeaderValue::from_str(v.trim()).map_err(|_| format!("bad header value {v:?}"))?;
        out.push((k, v));
    }
    Ok(HubAnswer {
        status,
        headers: out,
        rest: buf[end + 4..].to_vec(),
    })
}

/// A WebSocket upgrade: the handshake goes to the hub as is; once both sides switched, the
/// bytes are relayed as they are read, both ways (no frame is decoded or re-encoded on the
/// forwarding path), and each chunk read is queued for the writer thread, which parses the
/// frames off it, before it is forwarded.
async fn upgrade(p: Arc<Proxy>, mut req: Request, path_q: String) -> Response {
    let bad = |e: String| (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response();
    let authority = match hub_authority(&p.cfg.upstream) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    // Cloned: the request's body is not `Sync`, so it is not borrowed across an await.
    let headers = req.headers().clone();
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut hub = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| e.to_string())?;
        // Small frames must not wait in Nagle's buffer.
        let _ = hub.set_nodelay(true);
        let a = hub_handshake(&mut hub, &authority, &path_q, &headers).await?;
        Ok::<_, String>((hub, a))
    })
    .await;
    let (hub, answer) = match answer {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return bad(e),
        Err(_) => return bad(format!("no upgrade answer within {HANDSHAKE_TIMEOUT:?}")),
    };
    let mut resp = Response::new(Body::empty());
    for (k, v) in answer.headers {
        resp.headers_mut().append(k, v);
    }
    *resp.status_mut() = answer.status;
    if answer.status != StatusCode::SWITCHING_PROTOCOLS {
        // The hub refused the upgrade: its answer (and what of its body came with the head).
        resp.headers_mut()
            .remove(axum::http::header::CONTENT_LENGTH);
        resp.headers_mut()
            .remove(axum::http::header::TRANSFER_ENCODING);
        *resp.body_mut() = Body::from(answer.rest);
        return resp;
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let sid: Arc<str> = query_sid(req.uri())
        .unwrap_or_else(|| format!("ws-{}", uuid::Uuid::new_v4()))
        .into();
    let conn = p.conns.fetch_add(1, Ordering::Relaxed);
    p.relays.fetch_add(1, Ordering::SeqCst);
    let guard = RelayGuard(p.relays.clone());
    let first = Bytes::from(answer.rest);
    tokio::spawn(async move {
        let _g = guard;
        let mut stopping = p.stopping.clone();
        if *stopping.borrow_and_update() || !p.queue.push(Event::WsOpen(conn, sid)).await {
            return;
        }
        let mut ended_by = None;
        if let Ok(client) = on_upgrade.await {
            let client = hyper_util::rt::TokioIo::new(client);
            ended_by = relay(&p, conn, client, hub, first, stopping).await;
        }
        p.queue.push(Event::WsClose(conn, ended_by)).await;
    });
    resp
}

/// Relays one upgraded connection both ways until either side ends (the other then has
/// [`CLOSE_GRACE`] to finish) or the proxy stops. Which side ended first (`true`: the
/// client), `None` when the proxy stopped it.
async fn relay(
    p: &Proxy,
    conn: u64,
    client: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    hub: tokio::net::TcpStream,
    first: Bytes,
    stopping: watch::Receiver<bool>,
) -> Option<bool> {
    let stopped = stopping.clone();
    let (c_rd, c_wr) = tokio::io::split(client);
    let (h_rd, h_wr) = hub.into_split();
    // Close frames for a stop (1001 going away): masked towards the hub, as a client's must be.
    let key: [u8; 4] = uuid::Uuid::new_v4().as_bytes()[..4].try_into().expect("4");
    let to_hub = super::wsframe::encode(true, 8, &1001u16.to_be_bytes(), Some(key));
    let to_client = super::wsframe::encode(true, 8, &1001u16.to_be_bytes(), None);
    let up = pump(
        &p.queue,
        conn,
        true,
        c_rd,
        h_wr,
        Bytes::new(),
        to_hub,
        stopping.clone(),
    );
    let down = pump(
        &p.queue, conn, false, h_rd, c_wr, first, to_client, stopping,
    );
    tokio::pin!(up, down);
    let client_first = tokio::select! {
        _ = &mut up => { let _ = tokio::time::timeout(CLOSE_GRACE, &mut down).await; true }
        _ = &mut down => { let _ = tokio::time::timeout(CLOSE_GRACE, &mut up).await; false }
    };
    (!*stopped.borrow()).then_some(client_first)
}

/// One direction of a relay: reads what arrived, queues it for its lane, writes the same bytes
/// on. `first`: bytes already read (the hub's, past its upgrade answer). When the proxy stops,
/// sends `close` if no frame is partly through, then ends the direction.
#[allow(clippy::too_many_arguments)]
async fn pump(
    queue: &LaneQueue,
    conn: u64,
    from_client: bool,
    mut src: impl tokio::io::AsyncRead + Unpin,
    mut dst: impl tokio::io::AsyncWrite + Unpin,
    first: Bytes,
    close: Vec<u8>,
    mut stopping: watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut edge = Boundary::default();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut chunk = first;
    loop {
        if !chunk.is_empty() {
            edge.advance(&chunk);
            if !queue
                .push(Event::WsChunk(conn, from_client, chunk.clone()))
                .await
                || dst.write_all(&chunk).await.is_err()
            {
                break;
            }
        }
        let n = tokio::select! {
            biased;
            _ = stopping.changed() => {
                if edge.at_boundary() {
                    let _ = dst.write_all(&close).await;
                }
                break;
            }
            r = src.read(&mut buf) => r,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => chunk = Bytes::copy_from_slice(&buf[..n]),
        }
    }
    let _ = dst.shutdown().await;
}

/// Long-polling requests and the HTTP API: forwarded as is, their packets or bodies queued for
/// their lanes (a request's before it is forwarded, an answer's before it is returned).
async fn forward_http(p: Arc<Proxy>, req: Request, path_q: String) -> Response {
    let method = req.method().clone();
    let content_type = req.headers().get("content-type").cloned();
    // Every end-to-end header goes on (an `Authorization` a hub's HTTP API asks for, cookies):
    // the lanes record bodies only, so none of them reaches a lane.
    let forwarded: Vec<(axum::http::HeaderName, HeaderValue)> = req
        .headers()
        .iter()
        .filter(|(k, _)| crate::http_forward::forwards_request_header(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let credentials: Vec<String> = forwarded
        .iter()
        .filter(|(k, _)| crate::redact::is_secret_header(k.as_str()))
        .filter_map(|(_, v)| v.to_str().ok().map(str::to_string))
        .collect();
    let uri = req.uri().clone();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::PAYLOAD_TOO_LARGE, e.to_string()).into_response(),
    };
    let polling = uri.path().starts_with("/socket.io");
    let sid: Option<Arc<str>> = query_sid(&uri).map(Into::into);
    let stopped = || (StatusCode::SERVICE_UNAVAILABLE, "the recorder stopped").into_response();
    if !credentials.is_empty() && !p.queue.push(Event::Learn(credentials)).await {
        return stopped();
    }
    let queued = if !polling {
        p.queue
            .push(Event::HttpRequest {
                method: method.as_str().to_string(),
                path: uri.path().to_string(),
                query: uri.query().map(str::to_string),
                content_type: content_type
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: body.clone(),
            })
            .await
    } else if method == axum::http::Method::POST
        && let Some(sid) = &sid
    {
        p.queue
            .push(Event::PollPost(sid.clone(), body.clone()))
            .await
    } else {
        true
    };
    if !queued {
        return stopped();
    }
    let url = format!("{}{path_q}", p.cfg.upstream.trim_end_matches('/'));
    let mut rb = p
        .http
        .request(method.clone(), url)
        .body(body)
        .timeout(std::time::Duration::from_secs(180));
    for (k, v) in &forwarded {
        rb = rb.header(k.as_str(), v.as_bytes());
    }
    let resp = match rb.send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response(),
    };
    let status = resp.status();
    let mut queued = true;
    if polling
        && !status.is_success()
        && let Some(sid) = &sid
    {
        // The hub refused this session (unknown or closed id): its state goes now.
        queued &= p.queue.push(Event::Close(sid.clone())).await;
    }
    let returned: Vec<(String, Vec<u8>)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| crate::http_forward::returns_answer_header(k.as_str()))
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let rbody = resp.bytes().await.unwrap_or_default();
    // A hub that compresses unasked: the client gets the bytes as sent, the lanes the body
    // decoded (Engine.IO packets and API answers are read from it).
    let coded: Vec<(String, String)> = returned
        .iter()
        .filter(|(k, _)| k == "content-encoding")
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    let lane_body = if coded.is_empty() {
        rbody.clone()
    } else {
        Bytes::from(crate::content_coding::for_lane(&coded, rbody.to_vec(), 64 << 20).0)
    };
    if polling && method == axum::http::Method::GET {
        queued &= p
            .queue
            .push(Event::PollGet(sid, status.is_success(), lane_body))
            .await;
    } else if !polling {
        queued &= p
            .queue
            .push(Event::HttpResponse {
                path: uri.path().to_string(),
                status: status.as_u16(),
                body: lane_body,
            })
            .await;
    }
    if !queued {
        return stopped();
    }
    let mut out = Response::new(Body::from(rbody));
    *out.status_mut() = status;
    for (k, v) in returned {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(&v),
        ) {
            out.headers_mut().append(k, v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::wsframe::encode;
    use super::*;

    /// The lines of `dir` in the cell `cell` of `root`, in seq order: (seq, line, conn).
    /// A lane entry's seq, line and connection.
    type LaneLine = (f64, String, Option<u64>);

    fn lane(root: &std::path::Path, cell: &str, dir: &str) -> Vec<LaneLine> {
        let path = root.join(cell).join(format!("{dir}.ndjson"));
        crate::lane::read::LaneReader::open(&path, Some(dir))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.seq, e.line.clone(), e.conn())
            })
            .collect()
    }

    /// The browser and hub lanes of session `a___anonymous` after `events` (a browser that
    /// connected to `/ws/client` for agent `a`, then `middle`, then the end of the connection),
    /// and the big masked frame `middle` can send in parts.
    fn recorded_around(middle: impl Fn(&[u8]) -> Vec<Event>) -> (Vec<LaneLine>, Vec<LaneLine>) {
        let t = tempfile::tempdir().unwrap();
        let cfg = ProxyConfig {
            upstream: "http://127.0.0.1:9".into(),
            dir: t.path().to_path_buf(),
            redact: true,
            mode: 0o600,
            jwt_secret: None,
            api_key: None,
        };
        let mut rec = Recorder::new(LaneWriter::create(t.path()).unwrap(), &cfg);
        let key = Some([1, 2, 3, 4]);
        let hub = |text: &str| Bytes::from(encode(true, 1, text.as_bytes(), None));
        let big = encode(true, 1, big_text().as_bytes(), key);
        let mut events = vec![
            Event::WsOpen(1, "provisional".into()),
            Event::WsChunk(1, false, hub(r#"0{"sid":"S1","upgrades":[]}"#)),
            Event::WsChunk(
                1,
                true,
                Bytes::from(encode(
                    true,
                    1,
                    br#"40/ws/client,{"token":"t","agentId":"a"}"#,
                    key,
                )),
            ),
            Event::WsChunk(1, false, hub(r#"40/ws/client,{"sid":"N1"}"#)),
        ];
        events.extend(middle(&big));
        events.push(Event::WsClose(1, Some(false)));
        for event in &events {
            rec.apply(event);
        }
        rec.flush();
        (
            lane(t.path(), "a___anonymous", "browser→hub"),
            lane(t.path(), "a___anonymous", "hub→browser"),
        )
    }

    /// The message [`recorded_around`] sends in parts.
    fn big_text() -> String {
        format!(
            r#"42/ws/client,["message",{{"text":"{}"}}]"#,
            "x".repeat(5000)
        )
    }

    /// The hub's close frame.
    fn hub_close() -> Event {
        Event::WsChunk(1, false, Bytes::from(encode(true, 8, &[3, 241], None)))
    }

    /// A hub that refuses a frame over its size closes on the frame's first bytes, while the
    /// proxy still relays the rest: the frame, which caused the close, is recorded before it
    /// (a replay that met the close first awaited it before sending the frame, and stalled).
    /// Every line names the connection it was on.
    #[test]
    fn a_close_during_a_message_is_recorded_after_the_message() {
        let (up, down) = recorded_around(|big| {
            let (head, tail) = big.split_at(100);
            vec![
                Event::WsChunk(1, true, Bytes::copy_from_slice(head)),
                hub_close(),
                Event::WsChunk(1, true, Bytes::copy_from_slice(tail)),
            ]
        });
        let message = up.iter().find(|l| l.1.contains("message")).unwrap();
        let close = down.last().unwrap();
        assert_eq!(close.1, "1", "{down:?}");
        assert!(message.0 < close.0, "{up:?} {down:?}");
        assert_eq!(down.iter().filter(|l| l.1 == "1").count(), 1, "{down:?}");
        assert!(
            up.iter().chain(&down).all(|l| l.2 == Some(1)),
            "{up:?} {down:?}"
        );
    }

    /// A hub text frame that is not UTF-8 is its fault (RFC 6455 §8.1), recorded as it came (its
    /// bytes as `lineBase64`), not lost: it was silently dropped, and a hub close stood in its
    /// place in the lane.
    #[test]
    fn a_text_frame_that_is_not_utf8_is_recorded_as_its_bytes() {
        let bad = b"42/ws/client,[\"message\",{\"text\":\"bad \xff\xfe\"}]".to_vec();
        let frame = bad.clone();
        let (_, down) = recorded_around(move |_| {
            vec![Event::WsChunk(
                1,
                false,
                Bytes::from(encode(true, 1, &frame, None)),
            )]
        });
        // The lane reader gives the line lossily; the file keeps its bytes.
        let line = down
            .iter()
            .find(|l| l.1.contains("bad "))
            .unwrap_or_else(|| panic!("the frame is not in the lane: {down:?}"));
        assert!(line.1.contains('\u{fffd}'), "{line:?}");
        assert_eq!(line.2, Some(1));
    }

    /// When the connection ends before the rest of that frame is relayed (the hub closed, the
    /// proxy's write failed), the frame is recorded as far as it came, unmasked, with the length
    /// its header declared (`cut:N:…`), still before the close it caused.
    #[test]
    fn a_message_the_connection_ended_inside_of_is_recorded_as_far_as_it_came() {
        let (up, down) = recorded_around(|big| {
            vec![
                Event::WsChunk(1, true, Bytes::copy_from_slice(&big[..100])),
                hub_close(),
            ]
        });
        let cut = up
            .iter()
            .find(|l| l.1.starts_with("cut:"))
            .expect("a cut line");
        let (declared, came) = crate::bridle::wire::parse_cut(&cut.1).unwrap();
        // The frame's header took 8 bytes (126-length form and a mask): the rest of the 100 came.
        assert_eq!(declared, big_text().len() as u64);
        assert_eq!(came, &big_text()[..100 - 8]);
        assert!(
            came.starts_with(r#"42/ws/client,["message",{"text":"xxx"#),
            "{came}"
        );
        let close = down.last().unwrap();
        assert_eq!(close.1, "1", "{down:?}");
        assert!(cut.0 < close.0, "{up:?} {down:?}");
    }
}

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
//!   as `binary:` + base64;
//! * handshake secrets (`auth.apiKey`, `auth.token`) are replaced by `[redacted]` unless
//!   redaction is turned off; so is every secret the bb §1.9 rules find in a frame's JSON or an
//!   HTTP API body (`apiKey`, `token`, env/header containers, …), every JWT-shaped token, and
//!   every secret value seen before, wherever it recurs ([`crate::redact::Secrets`]);
//! * bounded state (issue 15): frames are kept only for Engine.IO sessions the hub opened
//!   through this proxy; frames posted to unknown session ids, or to sessions the hub refused
//!   (a non-2xx answer to a polling request), are dropped and counted, never held; at most
//!   [`MAX_SESSIONS`] sessions and [`MAX_PENDING`] held-back frames per session (past either,
//!   the held-back frames are written to `_unscoped` and counted as overflow).
//!
//! Lane writes are off the forwarding path (issue 13): a forwarding task only queues the frame
//! (its bytes shared, not copied) and forwards it. One writer thread owns everything else: the
//! session routing below, redaction, JSON decoding of the frames that need it, and the lane
//! files. Woken by an event, it lets a batch gather for [`COALESCE`], takes whatever is queued
//! (up to [`WRITE_BATCH`] events), routes it, and appends it with one `write` per lane file
//! touched before it takes the next batch. Seqs follow queue
//! order, and a frame is queued before it is forwarded, so an effect still sorts after its
//! cause and every lane is in `(run, seq)` order. The queue is bounded ([`QUEUE_EVENTS`] events,
//! [`QUEUE_BYTES`] bytes of frames): when the writer falls behind, forwarding waits for it
//! (backpressure); the queue never grows past its bound.
//!
//! Crashes: SIGINT/SIGTERM stop accepting, close the open connections and write everything
//! queued before the proxy exits; a browser, agent or hub that crashes loses nothing. A SIGKILL
//! (or crash) of the proxy itself loses the frames still queued, some of which may already have
//! been forwarded: for each lane a tail, never a frame in the middle (normally the last few
//! milliseconds of traffic, at most the queue bound). `tests/bridle.rs` checks both.

use super::wire::{EioPacket, SioPacket, SioType, decode_frame};
use super::{AGENT_NSP, CLIENT_NSP, peek_jwt};
use crate::lane::write::{LaneWriter, Line};
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as AxMsg, Utf8Bytes as AxText, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_tungstenite::tungstenite::{Message as TMsg, Utf8Bytes as TText};

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

/// Engine.IO sessions tracked at once.
pub const MAX_SESSIONS: usize = 65_536;
/// Frames held back per session before it says who it is.
pub const MAX_PENDING: usize = 1024;
/// Events queued for the writer at once; past it, forwarding waits (backpressure).
pub const QUEUE_EVENTS: usize = 4096;
/// Bytes of frames queued for the writer at once (a bigger frame goes alone); past it,
/// forwarding waits (backpressure).
pub const QUEUE_BYTES: usize = 16 << 20;
/// Events the writer routes and appends per batch at most.
pub const WRITE_BATCH: usize = 1024;
/// How long the writer lets a batch gather after its first event.
pub const COALESCE: std::time::Duration = std::time::Duration::from_millis(2);

/// What a forwarding task hands the writer, in forwarding order.
enum Event {
    /// Session `sid` opened (the hub answered a polling handshake, or a WebSocket connected).
    Open(Arc<str>),
    /// A WebSocket's provisional session id became the hub's (its `open` packet).
    Rename(Arc<str>, Arc<str>),
    /// A text frame of a session: from the browser or agent (`true`) or from the hub.
    Text(Arc<str>, bool, Bytes),
    Binary(Arc<str>, bool, Bytes),
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
    /// The proxy is stopping: write what is queued, accept nothing more.
    Stop,
}

impl Event {
    /// Bytes it holds, for the queue's byte bound.
    fn size(&self) -> usize {
        64 + match self {
            Event::Text(_, _, b)
            | Event::Binary(_, _, b)
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
}

/// The recording half, run by the writer thread: lanes plus per-session state.
struct Recorder {
    /// Frames not recorded: for session ids the hub never opened through this proxy, or refused.
    dropped: u64,
    /// Held-back frames written to `_unscoped` because a bound was reached.
    overflowed: u64,
    writer: LaneWriter,
    sessions: HashMap<String, Session>,
    /// (agentId, clientId) of every browser seen connecting.
    browsers: std::collections::HashSet<(String, String)>,
    redact: bool,
    /// The recording's known secrets (handshake values are learned before they are replaced,
    /// so they stay redacted wherever they recur, in any cell).
    secrets: Option<Arc<crate::redact::Secrets>>,
    /// Frames recorded, for reports.
    frames: u64,
    /// Lines routed since the last write.
    out: Vec<Record>,
}

impl Recorder {
    fn new(writer: LaneWriter, redact: bool) -> Recorder {
        let secrets = redact.then(crate::redact::Secrets::new);
        let writer = match &secrets {
            Some(s) => {
                let s = s.clone();
                writer.with_redactor(Arc::new(move |b: &[u8]| s.redact_framed(b)))
            }
            None => writer,
        };
        Recorder {
            dropped: 0,
            overflowed: 0,
            writer,
            sessions: HashMap::new(),
            browsers: Default::default(),
            redact,
            secrets,
            frames: 0,
            out: Vec::new(),
        }
    }

    fn write(&mut self, scope: &str, dir: &'static str, line: Bytes) {
        self.frames += 1;
        self.out.push(Record {
            scope: scope.to_string(),
            dir,
            line,
        });
    }

    /// Appends the lines routed since the last call: one `write` per lane file touched.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let lines: Vec<Line<'_>> = self
            .out
            .iter()
            .map(|r| Line {
                scope: Some(&r.scope),
                dir: r.dir,
                bytes: &r.line,
            })
            .collect();
        self.writer.append_batch(&lines);
        drop(lines);
        self.out.clear();
    }

    fn apply(&mut self, event: &Event) {
        match event {
            Event::Open(sid) => self.open(sid),
            Event::Rename(from, to) => match self.sessions.remove(&**from) {
                Some(s) => {
                    self.sessions.insert(to.to_string(), s);
                }
                None => self.open(to),
            },
            Event::Text(sid, from_client, text) => self.frame(sid, *from_client, text),
            Event::Binary(sid, from_client, bytes) => self.binary(sid, *from_client, bytes),
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
        self.sessions.entry(sid.to_string()).or_default();
    }

    /// Holds a frame back until the session says who it is (bounded by [`MAX_PENDING`]).
    fn hold(&mut self, sid: &str, from_client: bool, line: Bytes) {
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        if session.pending.len() >= MAX_PENDING {
            let pending = std::mem::take(&mut session.pending);
            self.overflowed += pending.len() as u64;
            for (fc, l) in pending {
                self.write(
                    "_unscoped",
                    if fc { "browser→hub" } else { "hub→browser" },
                    l,
                );
            }
        }
        if let Some(session) = self.sessions.get_mut(sid) {
            session.pending.push((from_client, line));
        }
    }

    /// Records one text frame (UTF-8) of session `sid` (dropped, counted, when the session is
    /// unknown).
    fn frame(&mut self, sid: &str, from_client: bool, bytes: &Bytes) {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        // Fast path: a browser-namespace event of a known session needs no JSON parse (its
        // scope is the session's); only CONNECTs and agent events are decoded in full.
        if let Some((nsp, _)) = text.strip_prefix("42").and_then(|r| r.split_once(','))
            && session.pending.is_empty()
            && let Some((Role::Browser, agent, client)) = session.nsps.get(nsp)
        {
            let scope = format!("{agent}__{client}");
            let (up, down) = Role::Browser.dirs();
            self.write(&scope, if from_client { up } else { down }, bytes.clone());
            return;
        }
        let sio = match decode_frame(text) {
            Ok((_, Some(p))) => Some(p),
            _ => None,
        };
        let Some(p) = sio else {
            // Engine.IO control frame or an invalid one: the connection's home scope.
            match session.home() {
                Some((role, scope)) => {
                    let (up, down) = role.dirs();
                    let dir = if from_client { up } else { down };
                    self.write(&scope, dir, bytes.clone());
                }
                None => self.hold(sid, from_client, bytes.clone()),
            }
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
                    self.browsers.insert((agent.clone(), client.clone()));
                }
                session.nsps.insert(p.nsp.clone(), (role, agent, client));
            }
            if self.redact {
                if let (Some(s), Some(Value::Object(m))) = (&self.secrets, &p.data) {
                    for k in ["apiKey", "token"] {
                        if let Some(v) = m.get(k).and_then(Value::as_str) {
                            s.learn(v);
                        }
                    }
                }
                line = Bytes::from(redact_connect(&p));
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
            self.write(&home, if fc { up } else { down }, l);
        }
        let scope = match role {
            Role::Browser => home,
            Role::Agent => match p.as_event().and_then(|(_, d)| d["clientId"].as_str()) {
                Some(c) if self.browsers.contains(&(agent.clone(), c.to_string())) => {
                    format!("{agent}__{c}")
                }
                // A clientId no recorded browser holds: the HTTP API's.
                Some(c) if !c.is_empty() => format!("{agent}__http"),
                _ => home,
            },
        };
        self.write(&scope, if from_client { up } else { down }, line);
    }

    fn binary(&mut self, sid: &str, from_client: bool, bytes: &[u8]) {
        let line = Bytes::from(format!("binary:{}", crate::util::base64_encode(bytes)));
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        match session.home() {
            Some((role, scope)) => {
                let (up, down) = role.dirs();
                self.write(&scope, if from_client { up } else { down }, line);
            }
            None => self.hold(sid, from_client, line),
        }
    }

    /// A session ended: frames still held back go to `_unscoped`.
    fn close(&mut self, sid: &str) {
        if let Some(s) = self.sessions.remove(sid) {
            for (fc, l) in s.pending {
                self.write(
                    "_unscoped",
                    if fc { "browser→hub" } else { "hub→browser" },
                    l,
                );
            }
        }
    }

    /// Records one HTTP API line: the request (`http→hub`) or the answer (`hub→http`).
    fn http(&mut self, path: &str, dir: &'static str, line: &Value) {
        let rest = path.strip_prefix("/api/agent/").unwrap_or("");
        let agent = match rest.split('/').next() {
            Some(a) if !a.is_empty() && rest != "health" => a,
            _ => "_hub",
        };
        let scope = format!("{agent}__http");
        self.write(&scope, dir, Bytes::from(line.to_string()));
    }
}

/// The writer thread: routes and appends queued events in batches until [`Event::Stop`] (then
/// what is still queued) or until every sender is gone.
fn write_lanes(mut rec: Recorder, mut rx: mpsc::Receiver<Queued>) -> Recorder {
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

/// A CONNECT packet with `auth.apiKey` and `auth.token` replaced.
pub fn redact_connect(p: &SioPacket) -> String {
    let mut q = p.clone();
    if let Some(Value::Object(m)) = &mut q.data {
        for k in ["apiKey", "token"] {
            if m.contains_key(k) {
                m.insert(k.into(), json!("[redacted]"));
            }
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
    let writer = LaneWriter::create(&cfg.dir)?.with_mode(cfg.mode)?;
    let rec = Recorder::new(writer, cfg.redact);
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
        let sid = query_sid(req.uri());
        let (mut parts, _) = req.into_parts();
        let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &p).await {
            Ok(ws) => ws,
            Err(e) => return e.into_response(),
        };
        let url = match super::transport::engine_url(&p.cfg.upstream) {
            Ok(u) => u
                .split("/socket.io/")
                .next()
                .map(|base| format!("{base}{path_q}"))
                .unwrap_or(u),
            Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
        };
        // `true`: TCP_NODELAY on the hub side too.
        let upstream =
            match tokio_tungstenite::connect_async_with_config(url.as_str(), None, true).await {
                Ok((u, _)) => u,
                Err(e) => {
                    return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response();
                }
            };
        let sid = sid.unwrap_or_else(|| format!("ws-{}", uuid::Uuid::new_v4()));
        p.relays.fetch_add(1, Ordering::SeqCst);
        let guard = RelayGuard(p.relays.clone());
        return ws.on_upgrade(move |client| pump(p, client, upstream, sid, guard));
    }
    forward_http(p, req, path_q).await
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Relays one WebSocket both ways, queueing each frame for its lane before forwarding it (the
/// frame's bytes are shared with the queue, not copied). The session key is the Engine.IO sid
/// (from the query on an upgrade, else from the `open` packet).
async fn pump(p: Arc<Proxy>, client: WebSocket, upstream: Upstream, sid: String, _g: RelayGuard) {
    let mut sid: Arc<str> = sid.into();
    let mut stopping = p.stopping.clone();
    let (mut c_tx, mut c_rx) = client.split();
    let (mut u_tx, mut u_rx) = upstream.split();
    if *stopping.borrow_and_update() || !p.queue.push(Event::Open(sid.clone())).await {
        let _ = c_tx.close().await;
        let _ = u_tx.close().await;
        return;
    }
    loop {
        tokio::select! {
            _ = stopping.changed() => break,
            m = c_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let (event, out) = match m {
                    AxMsg::Text(t) => {
                        let b = Bytes::from(t);
                        let Ok(out) = TText::try_from(b.clone()) else { break };
                        (Some(Event::Text(sid.clone(), true, b)), TMsg::Text(out))
                    }
                    AxMsg::Binary(b) => (Some(Event::Binary(sid.clone(), true, b.clone())), TMsg::Binary(b)),
                    AxMsg::Ping(b) => (None, TMsg::Ping(b)),
                    AxMsg::Pong(b) => (None, TMsg::Pong(b)),
                    AxMsg::Close(_) => break,
                };
                if let Some(e) = event && !p.queue.push(e).await {
                    break;
                }
                if u_tx.send(out).await.is_err() {
                    break;
                }
            }
            m = u_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let (event, out) = match m {
                    TMsg::Text(t) => {
                        if t.starts_with('0')
                            && let Ok(EioPacket::Open(o)) = EioPacket::decode(t.as_str())
                        {
                            let new: Arc<str> = o.sid.into();
                            if !p.queue.push(Event::Rename(sid.clone(), new.clone())).await {
                                break;
                            }
                            sid = new;
                        }
                        let b = Bytes::from(t);
                        let Ok(out) = AxText::try_from(b.clone()) else { break };
                        (Some(Event::Text(sid.clone(), false, b)), AxMsg::Text(out))
                    }
                    TMsg::Binary(b) => (Some(Event::Binary(sid.clone(), false, b.clone())), AxMsg::Binary(b)),
                    TMsg::Ping(b) => (None, AxMsg::Ping(b)),
                    TMsg::Pong(b) => (None, AxMsg::Pong(b)),
                    TMsg::Close(_) => break,
                    TMsg::Frame(_) => continue,
                };
                if let Some(e) = event && !p.queue.push(e).await {
                    break;
                }
                if c_tx.send(out).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = c_tx.close().await;
    let _ = u_tx.close().await;
    p.queue.push(Event::Close(sid)).await;
}

/// Long-polling requests and the HTTP API: forwarded as is, their packets or bodies queued for
/// their lanes (a request's before it is forwarded, an answer's before it is returned).
async fn forward_http(p: Arc<Proxy>, req: Request, path_q: String) -> Response {
    let method = req.method().clone();
    let content_type = req.headers().get("content-type").cloned();
    let uri = req.uri().clone();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::PAYLOAD_TOO_LARGE, e.to_string()).into_response(),
    };
    let polling = uri.path().starts_with("/socket.io");
    let sid: Option<Arc<str>> = query_sid(&uri).map(Into::into);
    let stopped = || (StatusCode::SERVICE_UNAVAILABLE, "the recorder stopped").into_response();
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
    if let Some(ct) = &content_type {
        rb = rb.header("content-type", ct.clone());
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
    let rct = resp.headers().get("content-type").cloned();
    let rbody = resp.bytes().await.unwrap_or_default();
    if polling && method == axum::http::Method::GET {
        queued &= p
            .queue
            .push(Event::PollGet(sid, status.is_success(), rbody.clone()))
            .await;
    } else if !polling {
        queued &= p
            .queue
            .push(Event::HttpResponse {
                path: uri.path().to_string(),
                status: status.as_u16(),
                body: rbody.clone(),
            })
            .await;
    }
    if !queued {
        return stopped();
    }
    let mut out = Response::new(Body::from(rbody));
    *out.status_mut() = status;
    if let Some(ct) = rct.and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
        out.headers_mut().insert("content-type", ct);
    }
    out
}

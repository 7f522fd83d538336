//! `record bridle`: a Socket.IO-aware recording proxy between browsers or agents and a hub.
//!
//! Every Engine.IO frame crossing the proxy (WebSocket frames and HTTP long-polling packets
//! alike) is appended to lanes *before* it is forwarded, in the lane entry format:
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

use super::wire::{EioPacket, SioPacket, SioType, decode_frame};
use super::{AGENT_NSP, CLIENT_NSP, peek_jwt};
use crate::lane::write::{LaneWriter, Line};
use axum::body::Body;
use axum::extract::ws::{Message as AxMsg, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_tungstenite::tungstenite::Message as TMsg;

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
    pending: Vec<(bool, String)>,
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

/// The recording half: lanes plus per-session state.
pub struct Recorder {
    /// Frames not recorded: for session ids the hub never opened through this proxy, or refused.
    pub dropped: u64,
    /// Held-back frames written to `_unscoped` because a bound was reached.
    pub overflowed: u64,
    writer: LaneWriter,
    sessions: HashMap<String, Session>,
    /// (agentId, clientId) of every browser seen connecting.
    browsers: std::collections::HashSet<(String, String)>,
    redact: bool,
    /// The recording's known secrets (handshake values are learned before they are replaced,
    /// so they stay redacted wherever they recur, in any cell).
    secrets: Option<Arc<crate::redact::Secrets>>,
    /// Frames recorded, for reports.
    pub frames: u64,
}

impl Recorder {
    pub fn new(writer: LaneWriter, redact: bool) -> Recorder {
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
        }
    }

    fn write(&mut self, scope: &str, dir: &str, line: &str) {
        self.frames += 1;
        self.writer.append(Line {
            scope: Some(scope),
            dir,
            bytes: line.as_bytes(),
        });
    }

    /// Starts tracking session `sid` (the hub opened it, or a WebSocket connected).
    pub fn open(&mut self, sid: &str) {
        if !self.sessions.contains_key(sid) && self.sessions.len() >= MAX_SESSIONS {
            // Bounded: the oldest-looking session goes (its held-back frames to `_unscoped`).
            if let Some(victim) = self.sessions.keys().next().cloned() {
                self.overflowed += self.sessions.get(&victim).map_or(0, |s| s.pending.len()) as u64;
                self.close(&victim);
            }
        }
        self.sessions.entry(sid.to_string()).or_default();
    }

    /// Whether session `sid` is tracked.
    pub fn knows(&self, sid: &str) -> bool {
        self.sessions.contains_key(sid)
    }

    /// Holds a frame back until the session says who it is (bounded by [`MAX_PENDING`]).
    fn hold(&mut self, sid: &str, from_client: bool, line: String) {
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
                    &l,
                );
            }
        }
        if let Some(session) = self.sessions.get_mut(sid) {
            session.pending.push((from_client, line));
        }
    }

    /// Records one text frame of session `sid` (dropped, counted, when the session is unknown).
    pub fn frame(&mut self, sid: &str, from_client: bool, text: &str) {
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
            self.write(&scope, if from_client { up } else { down }, text);
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
                    self.write(&scope, dir, text);
                }
                None => self.hold(sid, from_client, text.to_string()),
            }
            return;
        };
        let mut line = text.to_string();
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
                line = redact_connect(&p);
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
            self.write(&home, if fc { up } else { down }, &l);
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
        self.write(&scope, if from_client { up } else { down }, &line);
    }

    pub fn binary(&mut self, sid: &str, from_client: bool, bytes: &[u8]) {
        let line = format!("binary:{}", crate::util::base64_encode(bytes));
        let Some(session) = self.sessions.get_mut(sid) else {
            self.dropped += 1;
            return;
        };
        match session.home() {
            Some((role, scope)) => {
                let (up, down) = role.dirs();
                self.write(&scope, if from_client { up } else { down }, &line);
            }
            None => self.hold(sid, from_client, line),
        }
    }

    /// A session ended: frames still held back go to `_unscoped`.
    pub fn close(&mut self, sid: &str) {
        if let Some(s) = self.sessions.remove(sid) {
            for (fc, l) in s.pending {
                self.write(
                    "_unscoped",
                    if fc { "browser→hub" } else { "hub→browser" },
                    &l,
                );
            }
        }
    }

    /// Records one HTTP API line: the request (`http→hub`, before it is forwarded) or the
    /// answer (`hub→http`).
    pub fn http(&mut self, path: &str, dir: &str, line: &Value) {
        let rest = path.strip_prefix("/api/agent/").unwrap_or("");
        let agent = match rest.split('/').next() {
            Some(a) if !a.is_empty() && rest != "health" => a,
            _ => "_hub",
        };
        let scope = format!("{agent}__http");
        self.write(&scope, dir, &line.to_string());
    }
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
    rec: Arc<Mutex<Recorder>>,
    http: reqwest::Client,
}

impl Proxy {
    fn rec(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Serves the proxy on `listener` until `shutdown` resolves. Returns the number of frames
/// recorded.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: ProxyConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<u64> {
    let writer = LaneWriter::create(&cfg.dir)?.with_mode(cfg.mode)?;
    let rec = Arc::new(Mutex::new(Recorder::new(writer, cfg.redact)));
    let proxy = Arc::new(Proxy {
        cfg,
        rec: rec.clone(),
        http: reqwest::Client::new(),
    });
    let app = axum::Router::new().fallback(handle).with_state(proxy);
    // Small frames must not sit in Nagle's buffer waiting for a delayed ACK (~40 ms a hop).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    let (frames, dropped, overflowed) = rec
        .lock()
        .map(|r| (r.frames, r.dropped, r.overflowed))
        .unwrap_or_default();
    if dropped > 0 {
        eprintln!(
            "bridgewire record bridle: {dropped} frame(s) for Engine.IO sessions the hub did not open through this proxy (or refused) were not recorded"
        );
    }
    if overflowed > 0 {
        eprintln!(
            "bridgewire record bridle: {overflowed} held-back frame(s) written to _unscoped (session bounds reached)"
        );
    }
    Ok(frames)
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
        let upstream =
            match tokio_tungstenite::connect_async_with_config(url.as_str(), None, true).await {
                Ok((u, _)) => u,
                Err(e) => {
                    return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response();
                }
            };
        let sid = sid.unwrap_or_else(|| format!("ws-{}", uuid::Uuid::new_v4()));
        return ws.on_upgrade(move |client| pump(p, client, upstream, sid));
    }
    forward_http(p, req, path_q).await
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Relays one WebSocket both ways, recording each frame before forwarding it. The session
/// key is the Engine.IO sid (from the query on an upgrade, else from the `open` packet).
async fn pump(p: Arc<Proxy>, client: WebSocket, upstream: Upstream, mut sid: String) {
    p.rec().open(&sid);
    let (mut c_tx, mut c_rx) = client.split();
    let (mut u_tx, mut u_rx) = upstream.split();
    loop {
        tokio::select! {
            m = c_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let out = match m {
                    AxMsg::Text(t) => {
                        p.rec().frame(&sid, true, t.as_str());
                        TMsg::text(t.as_str())
                    }
                    AxMsg::Binary(b) => {
                        p.rec().binary(&sid, true, &b);
                        TMsg::binary(b)
                    }
                    AxMsg::Ping(b) => TMsg::Ping(b),
                    AxMsg::Pong(b) => TMsg::Pong(b),
                    AxMsg::Close(_) => break,
                };
                if u_tx.send(out).await.is_err() {
                    break;
                }
            }
            m = u_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let out = match m {
                    TMsg::Text(t) => {
                        if let Ok(EioPacket::Open(o)) = EioPacket::decode(t.as_str()) {
                            let mut rec = p.rec();
                            match rec.sessions.remove(&sid) {
                                Some(s) => {
                                    rec.sessions.insert(o.sid.clone(), s);
                                }
                                None => rec.open(&o.sid),
                            }
                            sid = o.sid.clone();
                        }
                        p.rec().frame(&sid, false, t.as_str());
                        AxMsg::Text(t.as_str().into())
                    }
                    TMsg::Binary(b) => {
                        p.rec().binary(&sid, false, &b);
                        AxMsg::Binary(b)
                    }
                    TMsg::Ping(b) => AxMsg::Ping(b),
                    TMsg::Pong(b) => AxMsg::Pong(b),
                    TMsg::Close(_) => break,
                    TMsg::Frame(_) => continue,
                };
                if c_tx.send(out).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = c_tx.close().await;
    let _ = u_tx.close().await;
    p.rec().close(&sid);
}

/// Long-polling requests and the HTTP API: forwarded as is, their packets or bodies recorded.
async fn forward_http(p: Arc<Proxy>, req: Request, path_q: String) -> Response {
    let method = req.method().clone();
    let content_type = req.headers().get("content-type").cloned();
    let uri = req.uri().clone();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::PAYLOAD_TOO_LARGE, e.to_string()).into_response(),
    };
    let polling = uri.path().starts_with("/socket.io");
    let sid = query_sid(&uri);
    if polling
        && method == axum::http::Method::POST
        && let (Some(sid), Ok(text)) = (&sid, std::str::from_utf8(&body))
    {
        let mut rec = p.rec();
        for packet in text.split('\u{1e}') {
            rec.frame(sid, true, packet);
        }
    }
    if !polling {
        // Method, path, query string and body, enough for `replay bridle` to send it again.
        let json_body = serde_json::from_slice::<Value>(&body).ok();
        let mut req_json = json!({
            "method": method.as_str(),
            "path": uri.path(),
            "body": json_body.clone().unwrap_or(Value::Null),
        });
        if let Some(q) = uri.query() {
            req_json["query"] = json!(q);
        }
        if json_body.is_none() && !body.is_empty() {
            req_json["bodyText"] = json!(String::from_utf8_lossy(&body));
            if let Some(ct) = content_type.as_ref().and_then(|v| v.to_str().ok()) {
                req_json["contentType"] = json!(ct);
            }
        }
        p.rec().http(uri.path(), "http→hub", &req_json);
    }
    let url = format!("{}{path_q}", p.cfg.upstream.trim_end_matches('/'));
    let mut rb = p
        .http
        .request(method.clone(), url)
        .body(body.clone())
        .timeout(std::time::Duration::from_secs(180));
    if let Some(ct) = &content_type {
        rb = rb.header("content-type", ct.clone());
    }
    let resp = match rb.send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response(),
    };
    let status = resp.status();
    if polling
        && !status.is_success()
        && let Some(sid) = &sid
    {
        // The hub refused this session (unknown or closed id): its state goes now.
        let mut rec = p.rec();
        if rec.knows(sid) {
            rec.close(sid);
        }
    }
    let rct = resp.headers().get("content-type").cloned();
    let rbody = resp.bytes().await.unwrap_or_default();
    if polling && method == axum::http::Method::GET {
        if let Ok(text) = std::str::from_utf8(&rbody) {
            let mut rec = p.rec();
            let mut sid = sid.clone();
            for packet in text.split('\u{1e}') {
                if let Ok(EioPacket::Open(o)) = EioPacket::decode(packet)
                    && status.is_success()
                {
                    rec.open(&o.sid);
                    sid = Some(o.sid);
                }
                if let Some(sid) = &sid {
                    rec.frame(sid, false, packet);
                }
            }
        }
    } else if !polling {
        let resp_json = json!({
            "status": status.as_u16(),
            "body": serde_json::from_slice::<Value>(&rbody).unwrap_or(Value::Null),
        });
        p.rec().http(uri.path(), "hub→http", &resp_json);
    }
    let mut out = Response::new(Body::from(rbody));
    *out.status_mut() = status;
    if let Some(ct) = rct.and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
        out.headers_mut().insert("content-type", ct);
    }
    out
}

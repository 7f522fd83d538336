//! A Socket.IO 5 / Engine.IO 4 client over WebSocket, built for a harness.
//!
//! Two layers, as in the protocols: [`Engine`] owns one WebSocket (the HTTP upgrade to
//! `/socket.io/?EIO=4&transport=websocket`, the `open` handshake, answering pings) and hands
//! decoded frames over a bounded channel; [`Socket`] is one namespace on top (CONNECT with auth,
//! events). Escape hatches for tests: [`Engine::send_raw`] sends any text or binary frame
//! (malformed, oversized), [`Engine::abort`] drops the TCP connection without a close frame, and
//! `auto_pong: false` lets a test starve the server's heartbeat.
//!
//! Every wait takes a deadline. One task per connection; it ends when the connection closes or
//! the [`Engine`] is dropped (which also aborts it), so nothing outlives its owner.

use super::wire::{EioPacket, OpenInfo, SioPacket, SioType, WireError};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// Connection options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bound on the WebSocket upgrade plus the Engine.IO `open` packet.
    pub open_timeout: Duration,
    /// Largest frame accepted from the peer; larger ones close the connection as `TooLarge`.
    pub max_frame: usize,
    /// Answer the server's pings (the default); off starves its heartbeat on purpose.
    pub auto_pong: bool,
    /// Decoded frames buffered before the reader stops reading (backpressure onto TCP).
    pub buffer: usize,
    /// Where the Socket.IO packets sent are measured, when something wants to know how large
    /// the traffic got (`check bridle hub` judges a hub's frame limit against it).
    pub meter: Option<std::sync::Arc<FrameMeter>>,
}

/// The largest Socket.IO frame sent through the connections that share it, and what it was
/// (raw frames sent on purpose, such as a check's oversized one, are not counted).
#[derive(Debug, Default)]
pub struct FrameMeter {
    largest: std::sync::Mutex<(usize, String)>,
}

impl FrameMeter {
    fn record(&self, p: &SioPacket, len: usize) {
        let mut largest = self.largest.lock().unwrap_or_else(|e| e.into_inner());
        if len > largest.0 {
            let what = match p.as_event() {
                Some((name, _)) => format!("a {name} event on {}", p.nsp),
                None => format!(
                    "a {} packet on {}",
                    format!("{:?}", p.kind).to_uppercase(),
                    p.nsp
                ),
            };
            *largest = (len, what);
        }
    }

    /// The largest frame's length in bytes and what it was (`(0, "")` before any).
    pub fn largest(&self) -> (usize, String) {
        self.largest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            open_timeout: Duration::from_secs(5),
            max_frame: 16 << 20,
            auto_pong: true,
            buffer: 4096,
            meter: None,
        }
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    #[error("the server sent an Engine.IO close packet")]
    EngineClose,
    #[error("the server closed the WebSocket")]
    WebSocketClose,
    #[error("the connection ended without a close frame")]
    Abrupt,
    #[error("a frame exceeded the size limit")]
    TooLarge,
    #[error("transport error: {0}")]
    Transport(String),
    /// RFC 6455 §8.1: a text frame that is not UTF-8 fails the connection (a browser's does).
    #[error(
        "the server sent a WebSocket text frame that is not UTF-8 ({0}), which fails the \
         connection (RFC 6455 §8.1)"
    )]
    NotUtf8(String),
}

/// What the reader hands over.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A decoded Engine.IO packet and, for messages, the Socket.IO packet inside.
    Packet(EioPacket, Option<SioPacket>),
    /// A text frame that did not decode.
    Invalid {
        frame: String,
        error: WireError,
    },
    Binary(Vec<u8>),
    Closed(CloseReason),
}

/// How a refused WebSocket upgrade is named ([`ConnectError::Upgrade`]): a hub that serves no
/// WebSocket transport at all, which the rules find in the text.
pub const UPGRADE_FAILED: &str = "WebSocket upgrade failed";

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid URL {0:?}")]
    Url(String),
    #[error("{UPGRADE_FAILED}: {0}")]
    Upgrade(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("expected the Engine.IO open packet, got {0:?}")]
    NoOpen(String),
    #[error("the server refused the namespace: {0}")]
    Rejected(Value),
    #[error("the server disconnected the namespace during the handshake")]
    Disconnected,
    #[error("connection closed: {0}")]
    Closed(CloseReason),
}

enum Cmd {
    Send(Message),
    Abort,
}

/// One Engine.IO connection over WebSocket.
pub struct Engine {
    pub open: OpenInfo,
    cmd: mpsc::UnboundedSender<Cmd>,
    /// Each frame with when the connection read it.
    rx: mpsc::Receiver<(Instant, Incoming)>,
    task: tokio::task::JoinHandle<()>,
    closed: Option<CloseReason>,
    /// When the connection read the frame [`Engine::next`] returned last (replay measures the
    /// hub's cadence from it, not from when the caller got round to the frame).
    arrived: Option<Instant>,
    /// The TCP socket, to see bytes that arrived but were not read yet.
    fd: Option<std::os::fd::RawFd>,
    meter: Option<std::sync::Arc<FrameMeter>>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `http://h:p[/x]` (or `ws://`) → the Engine.IO WebSocket endpoint.
pub fn engine_url(base: &str) -> Result<String, ConnectError> {
    let (scheme, rest) = base
        .split_once("://")
        .ok_or_else(|| ConnectError::Url(base.into()))?;
    let ws = match scheme {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        _ => return Err(ConnectError::Url(base.into())),
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() {
        return Err(ConnectError::Url(base.into()));
    }
    Ok(format!(
        "{ws}://{host}/socket.io/?EIO=4&transport=websocket"
    ))
}

impl Engine {
    /// Upgrades to WebSocket and waits for the `open` packet.
    pub async fn connect(base: &str, opts: &Options) -> Result<Engine, ConnectError> {
        let url = engine_url(base)?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(opts.max_frame))
            .max_frame_size(Some(opts.max_frame));
        let deadline = Instant::now() + opts.open_timeout;
        let (ws, _) = tokio::time::timeout_at(
            deadline,
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true),
        )
        .await
        .map_err(|_| ConnectError::Timeout(opts.open_timeout))?
        .map_err(|e| ConnectError::Upgrade(e.to_string()))?;
        let fd = match ws.get_ref() {
            tokio_tungstenite::MaybeTlsStream::Plain(s) => Some(std::os::fd::AsRawFd::as_raw_fd(s)),
            _ => None,
        };
        let (sink, stream) = ws.split();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (tx, rx) = mpsc::channel(opts.buffer.max(1));
        let task = tokio::spawn(pump(sink, stream, cmd_rx, tx, opts.auto_pong));
        let mut engine = Engine {
            open: OpenInfo {
                sid: String::new(),
                ping_interval_ms: 0,
                ping_timeout_ms: 0,
                max_payload: 0,
            },
            cmd: cmd_tx,
            rx,
            task,
            closed: None,
            arrived: None,
            fd,
            meter: opts.meter.clone(),
        };
        match engine.next(deadline).await {
            Some(Incoming::Packet(EioPacket::Open(o), _)) => {
                engine.open = o;
                Ok(engine)
            }
            Some(Incoming::Closed(r)) => Err(ConnectError::Closed(r)),
            Some(other) => Err(ConnectError::NoOpen(format!("{other:?}"))),
            None => Err(ConnectError::Timeout(opts.open_timeout)),
        }
    }

    /// The next frame before `deadline`; `None` on timeout. After the connection closed, keeps
    /// answering `Closed`.
    pub async fn next(&mut self, deadline: Instant) -> Option<Incoming> {
        if let Some(r) = &self.closed {
            return Some(Incoming::Closed(r.clone()));
        }
        match tokio::time::timeout_at(deadline, self.rx.recv()).await {
            Err(_) => None,
            Ok(None) => {
                self.closed = Some(CloseReason::Abrupt);
                Some(Incoming::Closed(CloseReason::Abrupt))
            }
            Ok(Some((at, i))) => {
                self.arrived = Some(at);
                if let Incoming::Closed(r) = &i {
                    self.closed = Some(r.clone());
                }
                Some(i)
            }
        }
    }

    /// Sends any WebSocket message as is.
    pub fn send_raw(&self, msg: Message) -> bool {
        self.cmd.send(Cmd::Send(msg)).is_ok()
    }

    pub fn send_text(&self, text: impl Into<String>) -> bool {
        self.send_raw(Message::text(text.into()))
    }

    pub fn send_packet(&self, p: &SioPacket) -> bool {
        let frame = p.to_frame();
        if let Some(m) = &self.meter {
            m.record(p, frame.len());
        }
        self.send_text(frame)
    }

    /// Drops the TCP connection without a close frame.
    pub fn abort(&self) {
        let _ = self.cmd.send(Cmd::Abort);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_some() || self.task.is_finished()
    }

    /// When the frame [`Engine::next`] returned last was read off the connection.
    pub fn last_arrival(&self) -> Option<Instant> {
        self.arrived
    }

    /// Whether the connection has more to give than [`Engine::next`] returned so far: frames
    /// read and waiting, or bytes on the socket not read yet (0 once it closed).
    pub fn has_unread(&self) -> bool {
        if !self.rx.is_empty() {
            return true;
        }
        let Some(fd) = self.fd.filter(|_| !self.is_closed()) else {
            return false;
        };
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer; the socket is still open (the
        // pump that owns it is running), and an error only reads as "nothing".
        let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        r == 0 && n > 0
    }
}

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn pump(
    mut sink: futures_util::stream::SplitSink<WsStream, Message>,
    mut stream: futures_util::stream::SplitStream<WsStream>,
    mut cmd: mpsc::UnboundedReceiver<Cmd>,
    tx: mpsc::Sender<(Instant, Incoming)>,
    auto_pong: bool,
) {
    loop {
        tokio::select! {
            c = cmd.recv() => match c {
                Some(Cmd::Send(m)) => {
                    if let Err(e) = sink.send(m).await {
                        let _ = tx.send((Instant::now(), Incoming::Closed(CloseReason::Transport(e.to_string())))).await;
                        return;
                    }
                }
                // Abort or owner gone: drop the socket without a close frame.
                Some(Cmd::Abort) | None => return,
            },
            m = stream.next() => {
                let at = Instant::now();
                let incoming = match m {
                    None => Incoming::Closed(CloseReason::Abrupt),
                    Some(Err(e)) => Incoming::Closed(classify(&e)),
                    Some(Ok(Message::Text(t))) => match super::wire::decode_frame(t.as_str()) {
                        Ok((EioPacket::Ping(d), _)) if auto_pong => {
                            let _ = sink.send(Message::text(EioPacket::Pong(d).encode())).await;
                            continue;
                        }
                        Ok((EioPacket::Close, _)) => Incoming::Closed(CloseReason::EngineClose),
                        Ok((e, s)) => Incoming::Packet(e, s),
                        Err(error) => Incoming::Invalid { frame: t.as_str().to_string(), error },
                    },
                    Some(Ok(Message::Binary(b))) => Incoming::Binary(b.to_vec()),
                    Some(Ok(Message::Close(_))) => Incoming::Closed(CloseReason::WebSocketClose),
                    Some(Ok(_)) => continue, // WebSocket ping/pong frames
                };
                let end = matches!(incoming, Incoming::Closed(_));
                if tx.send((at, incoming)).await.is_err() || end {
                    return;
                }
            }
        }
    }
}

fn classify(e: &tokio_tungstenite::tungstenite::Error) -> CloseReason {
    use tokio_tungstenite::tungstenite::Error as E;
    match e {
        E::Capacity(_) => CloseReason::TooLarge,
        E::ConnectionClosed | E::AlreadyClosed => CloseReason::WebSocketClose,
        E::Protocol(p) if p.to_string().contains("closing handshake") => CloseReason::Abrupt,
        E::Utf8(m) => CloseReason::NotUtf8(m.clone()),
        e => CloseReason::Transport(e.to_string()),
    }
}

/// An event received on a namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
    pub data: Value,
}

/// Why no event came.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecvError {
    #[error("no event within the wait")]
    Timeout,
    #[error("the server disconnected the namespace")]
    Disconnected,
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    #[error("invalid frame {frame:?}: {error}")]
    Invalid { frame: String, error: WireError },
}

/// One Socket.IO namespace over its own Engine.IO connection.
pub struct Socket {
    pub engine: Engine,
    pub nsp: String,
    /// The CONNECT acknowledgement's data (`{"sid": …}`).
    pub connected: Value,
}

impl Socket {
    /// Connects to `nsp` with `auth` and waits for the CONNECT acknowledgement.
    pub async fn connect(
        base: &str,
        nsp: &str,
        auth: Option<Value>,
        opts: &Options,
    ) -> Result<Socket, ConnectError> {
        let deadline = Instant::now() + opts.open_timeout;
        let mut engine = Engine::connect(base, opts).await?;
        engine.send_packet(&SioPacket::connect(nsp, auth));
        loop {
            match engine.next(deadline).await {
                None => return Err(ConnectError::Timeout(opts.open_timeout)),
                Some(Incoming::Closed(r)) => return Err(ConnectError::Closed(r)),
                Some(Incoming::Packet(_, Some(p))) if p.nsp == nsp => match p.kind {
                    SioType::Connect => {
                        return Ok(Socket {
                            engine,
                            nsp: nsp.into(),
                            connected: p.data.unwrap_or(Value::Null),
                        });
                    }
                    SioType::ConnectError => {
                        return Err(ConnectError::Rejected(p.data.unwrap_or(Value::Null)));
                    }
                    SioType::Disconnect => return Err(ConnectError::Disconnected),
                    _ => {} // events before the ack are not expected; ignore them
                },
                Some(_) => {}
            }
        }
    }

    pub fn emit(&self, name: &str, data: Value) -> bool {
        self.engine
            .send_packet(&SioPacket::event(&self.nsp, name, data))
    }

    /// The next event on this namespace within `wait`.
    pub async fn recv(&mut self, wait: Duration) -> Result<Event, RecvError> {
        self.recv_until(Instant::now() + wait).await
    }

    pub async fn recv_until(&mut self, deadline: Instant) -> Result<Event, RecvError> {
        loop {
            match self.engine.next(deadline).await {
                None => return Err(RecvError::Timeout),
                Some(Incoming::Closed(r)) => return Err(RecvError::Closed(r)),
                Some(Incoming::Invalid { frame, error }) => {
                    return Err(RecvError::Invalid { frame, error });
                }
                Some(Incoming::Packet(_, Some(p))) if p.nsp == self.nsp => {
                    if p.kind == SioType::Disconnect {
                        return Err(RecvError::Disconnected);
                    }
                    if let Some((name, data)) = p.event_parts() {
                        return Ok(Event {
                            name: name.into_owned(),
                            data: data.clone(),
                        });
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// The next event named `name` within `wait`, skipping others.
    pub async fn recv_named(&mut self, name: &str, wait: Duration) -> Result<Event, RecvError> {
        let deadline = Instant::now() + wait;
        loop {
            let e = self.recv_until(deadline).await?;
            if e.name == name {
                return Ok(e);
            }
        }
    }

    /// Every event within `wait` (until the connection ends).
    pub async fn drain(&mut self, wait: Duration) -> Vec<Event> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        while let Ok(e) = self.recv_until(deadline).await {
            out.push(e);
        }
        out
    }

    /// Leaves the namespace politely.
    pub fn disconnect(&self) {
        self.engine.send_packet(&SioPacket::disconnect(&self.nsp));
    }
}

//! `check bridle agent`: bridgewire plays the hub (an in-process socketioxide server, so agents
//! on the canonical socket.io-client can use polling or WebSocket) and a browser toward an
//! agent runtime it spawns with `BRIDLE_URL`, `BRIDLE_API_KEY`, `BRIDLE_AGENT_ID`.

use super::rules::{self, id};
use super::spawn::ChildGuard;
use super::{AGENT_NSP, text_parts};
use crate::report::live::VerdictLog;
use crate::rule::{Status, SubCheck, Verdict};
use serde_json::{Value, json};
use socketioxide::SocketIo;
use socketioxide::extract::{Data, Event, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct AgentCheck {
    pub command: Vec<OsString>,
    pub agent_id: String,
    pub api_key: String,
    /// Bound on a connection or a single expected frame.
    pub wait: Duration,
    /// Bound on a whole answer (typing … stream_end).
    pub turn_wait: Duration,
    /// Bound on reconnection after the hub restarts (the spec's agents retry after 3 s).
    pub reconnect_wait: Duration,
    /// Where verdicts go as they are reached (for the partial report of an interrupted run).
    pub live: Option<crate::report::live::Live>,
}

#[derive(Debug)]
struct Rejected;
impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid apiKey or missing agentId")
    }
}

/// What the fake hub saw.
#[derive(Debug, Clone)]
enum Seen {
    Connected {
        auth: Value,
    },
    Rejected {
        auth: Value,
    },
    /// A CONNECT to a namespace other than `/ws/agent` (refused, recorded to diagnose it).
    WrongNamespace {
        nsp: String,
        auth: Value,
    },
    Event {
        name: String,
        data: Value,
        at: Instant,
    },
    Disconnected,
}

/// What the hub double holds of an agent's frames not yet read by the check, at most; past it
/// frames are dropped and counted (a flooding agent cannot grow the check).
pub const MAX_QUEUED: usize = 4096;

/// How long after the agent connects the hub double waits for its transport upgrade to finish
/// before restarting (see [`FakeHub::settle_transport`]).
const UPGRADE_SETTLE: Duration = Duration::from_secs(2);

/// Frames kept of one answer; past it the answer is judged incomplete, named as a flood.
pub const MAX_TURN_FRAMES: usize = 10_000;

/// The sending side of the hub double's queue, bounded by [`MAX_QUEUED`].
#[derive(Clone)]
struct SeenTx {
    tx: mpsc::UnboundedSender<Seen>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    dropped: Arc<std::sync::atomic::AtomicUsize>,
}

impl SeenTx {
    fn send(&self, seen: Seen) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.queued.fetch_add(1, SeqCst) >= MAX_QUEUED {
            self.queued.fetch_sub(1, SeqCst);
            self.dropped.fetch_add(1, SeqCst);
            return;
        }
        if self.tx.send(seen).is_err() {
            self.queued.fetch_sub(1, SeqCst);
        }
    }
}

/// The hub double. It runs on a runtime of its own, on its own thread, so that it can go away
/// as a hub process does when it dies or restarts: dropping that runtime drops every
/// connection at once, the sockets closed by the kernel with no Engine.IO CLOSE packet and no
/// WebSocket close frame. (A graceful Socket.IO shutdown sent a CLOSE packet, which
/// python-socketio's client takes for a deliberate disconnect and does not reconnect after:
/// a false alarm on a python agent that reconnects after a real crash, found by an audit.)
struct FakeHub {
    addr: SocketAddr,
    /// The agent's socket and when it connected.
    agent: Arc<Mutex<Option<(SocketRef, Instant)>>>,
    rx: mpsc::UnboundedReceiver<Seen>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    /// Frames dropped because [`MAX_QUEUED`] were waiting.
    dropped: Arc<std::sync::atomic::AtomicUsize>,
    /// Ends the hub's runtime (and with it every connection).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeHub {
    async fn start(addr: SocketAddr, api_key: String) -> std::io::Result<FakeHub> {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tx = SeenTx {
            tx,
            queued: queued.clone(),
            dropped: dropped.clone(),
        };
        let wrong_tx = tx.clone();
        let agent: Arc<Mutex<Option<(SocketRef, Instant)>>> = Arc::default();
        let slot = agent.clone();
        // Everything happens in the middleware, which runs before the CONNECT ack: handlers
        // are in place before the agent can send its first event.
        let middleware = move |s: SocketRef, TryData(auth): TryData<Value>| {
            let auth = auth.unwrap_or(Value::Null);
            let ok = auth["apiKey"].as_str() == Some(api_key.as_str())
                && auth["agentId"].as_str().is_some_and(|a| !a.is_empty());
            if !ok {
                tx.send(Seen::Rejected { auth });
                return std::future::ready(Err(Rejected));
            }
            tx.send(Seen::Connected { auth });
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((s.clone(), Instant::now()));
            let t = tx.clone();
            // Called synchronously in arrival order (only the returned future is spawned).
            s.on_fallback(move |Event(name): Event, Data(data): Data<Value>| {
                t.send(Seen::Event {
                    name,
                    data,
                    at: Instant::now(),
                });
                std::future::ready(())
            });
            let t = tx.clone();
            s.on("ping", move |s: SocketRef| {
                t.send(Seen::Event {
                    name: "ping".into(),
                    data: json!({}),
                    at: Instant::now(),
                });
                let _ = s.emit("pong", &json!({}));
                std::future::ready(())
            });
            let t = tx.clone();
            s.on_disconnect(move || {
                t.send(Seen::Disconnected);
                std::future::ready(())
            });
            std::future::ready(Ok(()))
        };
        let wrong = move |s: SocketRef, TryData(auth): TryData<Value>| {
            wrong_tx.send(Seen::WrongNamespace {
                nsp: s.ns().to_string(),
                auth: auth.unwrap_or(Value::Null),
            });
            std::future::ready(Err::<(), _>(Rejected))
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = tokio::sync::oneshot::channel::<std::io::Result<SocketAddr>>();
        let thread = std::thread::Builder::new()
            .name("hub-double".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let (layer, io) = SocketIo::builder().build_layer();
                    io.ns(AGENT_NSP, (async || {}).with(middleware));
                    // Any other namespace (`/`, a typo) is refused, and recorded so the
                    // verdict can name it.
                    io.ns("/", (async || {}).with(wrong.clone()));
                    let _ = io.dyn_ns("/{*rest}", (async || {}).with(wrong));
                    let app = axum::Router::new().layer(layer);
                    let listener = match tokio::net::TcpListener::bind(addr).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready.send(listener.local_addr());
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                // Every task dropped: each connection's socket closed, as at a process's death.
                rt.shutdown_background();
            })?;
        let addr = match is_ready.await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::other("the hub double's thread ended")),
        };
        let addr = match addr {
            Ok(a) => a,
            Err(e) => {
                let _ = thread.join();
                return Err(e);
            }
        };
        Ok(FakeHub {
            addr,
            agent,
            rx,
            queued,
            dropped,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Goes away at once, as a hub process that dies: the listener and every connection
    /// closed together (the runtime dropped), so a client never reaches a hub that is half
    /// gone. (A graceful shutdown that stopped listening and then closed the namespaces let a
    /// fast reconnect meet removed namespaces: a CONNECT_ERROR, after which socket.io-client
    /// does not retry. Found by reading the code after a CI run failed "no reconnection within
    /// 8s"; that failure's own cause, caught later in the client's debug log, was the upgrade
    /// race [`FakeHub::settle_transport`] avoids.)
    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            // Bounded: the thread only drops its runtime (in the background) and returns.
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::task::spawn_blocking(move || t.join()),
            )
            .await;
        }
        // Bounded: until a connection to the old address is refused (the listener is gone); a
        // connect that hangs (a full backlog) counts as still listening.
        let gone = Instant::now() + Duration::from_secs(1);
        while Instant::now() < gone {
            let probe = Duration::from_millis(100);
            if let Ok(Err(_)) =
                tokio::time::timeout(probe, tokio::net::TcpStream::connect(self.addr)).await
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn next(&mut self, deadline: Instant) -> Option<Seen> {
        let seen = tokio::time::timeout_at(deadline, self.rx.recv())
            .await
            .ok()
            .flatten();
        if seen.is_some() {
            self.queued
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        seen
    }

    fn agent(&self) -> Option<(SocketRef, Instant)> {
        self.agent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits, bounded, until the agent's connection has finished moving from long-polling to
    /// WebSocket; true when it is on WebSocket.
    ///
    /// Why: the canonical socket.io-client pauses polling while its WebSocket probe is answered;
    /// when the hub goes away in that moment the probe fails and polling stays paused, so the
    /// client notices nothing until its ping timeout (45 s by default). A hub double restarted
    /// right after a quick answer (a plain message) hit that window under load: "no reconnection
    /// within 8s". The restart is to test reconnection, not that race, so it waits for a
    /// settled transport. An agent that stays on polling (it may: the spec names no transport)
    /// costs at most [`UPGRADE_SETTLE`] from its connection.
    async fn settle_transport(&self) -> bool {
        let Some((socket, since)) = self.agent() else {
            return false;
        };
        let until = since + UPGRADE_SETTLE;
        loop {
            if socket.transport_type() == socketioxide::TransportType::Websocket {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn dropped(&self) -> usize {
        self.dropped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Plays a browser message toward the agent. socketioxide sends the CONNECT ack before it
    /// marks the socket connected, so an agent's first event (register) can arrive while an
    /// emit still fails as closed: retry for a bounded moment before calling it gone.
    async fn send(&self, client_id: &str, agent_id: &str, text: &str) -> bool {
        let msg = json!({
            "type": "message",
            "clientId": client_id,
            "agentId": agent_id,
            "text": text,
            "parts": text_parts(text),
            "messageId": uuid::Uuid::new_v4().to_string(),
        });
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some((a, _)) = self.agent()
                && a.emit("message", &msg).is_ok()
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        // The thread drops its runtime on its own; it is not waited for here.
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The events the spec lists from an agent in answer to a message (`Events: Agent -> Hub`, less
/// `register` and `ping`, which are not answers). Other names are extensions: the spec lists
/// the agent's events and forbids no others, so they are listed and not judged.
const ANSWER_EVENTS: &[&str] = &["typing", "stream", "stream_end", "message"];

/// Bound on the watch after the turn's `stream_end` for frames that continue its stream.
const AFTER_END_MAX: Duration = Duration::from_millis(500);

/// One answer: the frames from the first after the message through `stream_end` (or a plain
/// `message` with no turn open, and nothing opening a turn right after it).
struct Turn {
    /// The spec's answer events ([`ANSWER_EVENTS`]), in order.
    frames: Vec<(String, Value, Instant)>,
    /// Frames that are not this answer's ([`Asking`]): a message to a browser answered before,
    /// a frame continuing a stream already closed. Judged by their own rules, not as the answer.
    aside: Vec<(String, Value, Instant)>,
    /// A turn an earlier browser's answer opened late (typing, and streams under a messageId
    /// of their own, all under that browser's clientId), arriving during this answer, which
    /// had frames of its own: that browser's answer, not this one ([`settle_late`]). Judged by
    /// the field rules, said by agent-client-id.
    late: Vec<(String, Value, Instant)>,
    /// Extension events received during the turn (names, in order): not judged.
    extensions: Vec<String>,
    complete: bool,
    /// The agent's connection ended while waiting.
    disconnected: bool,
    /// The agent process exited while waiting (seen when its connection ended): collecting
    /// stopped at once, nothing more can come.
    exited: Option<std::process::ExitStatus>,
    /// Over [`MAX_TURN_FRAMES`] frames without an end: collecting stopped.
    flooded: bool,
}

impl Turn {
    /// The answer's frames without their times.
    fn untimed(&self) -> Vec<(String, Value)> {
        self.frames
            .iter()
            .map(|(n, d, _)| (n.clone(), d.clone()))
            .collect()
    }
}

/// Whose answer a turn collects, and what arriving meanwhile is not that answer.
#[derive(Default)]
struct Asking<'a> {
    /// Browsers that asked before: a `message` carrying one of their clientIds is a message to
    /// that browser (legal at any time: "A plain message sent with no turn open is an ordinary
    /// answer bubble"), not this answer.
    earlier: &'a [&'a str],
    /// messageIds of streams already closed by their `stream_end`: a frame under one continues
    /// that stream (stream-end-final's fault), it neither opens nor ends this answer.
    closed: &'a [Value],
}

impl Asking<'_> {
    /// Whether a turn frame is under the clientId of a browser that asked before and is not
    /// part of a stream this answer opened (`own`: its messageIds): perhaps that browser's
    /// answer opened late, perhaps this one misaddressed ([`settle_late`] tells them apart).
    fn earlier_turn(&self, name: &str, data: &Value, own: &[Value]) -> bool {
        matches!(name, "typing" | "stream" | "stream_end")
            && data
                .get("clientId")
                .and_then(Value::as_str)
                .is_some_and(|c| self.earlier.contains(&c))
            && (name == "typing" || !own.contains(&data["messageId"]))
    }

    fn sets_aside(&self, name: &str, data: &Value) -> bool {
        match name {
            "message" => data
                .get("clientId")
                .and_then(Value::as_str)
                .is_some_and(|c| self.earlier.contains(&c)),
            "stream" | "stream_end" => {
                !data["messageId"].is_null() && self.closed.contains(&data["messageId"])
            }
            _ => false,
        }
    }
}

/// Collects one answer within `wait`. A plain answer is watched for `grace` (the bound on a
/// single frame, `--wait-ms`) for a turn that opens after it (a runtime that says "Let me look
/// into that" before it streams): without it, the streamed answer would go unjudged, and
/// taken for the next browser's (it came 1.5 s later from an independent Python agent, over
/// the 1 s watched before).
async fn collect_turn(
    hub: &mut FakeHub,
    child: &mut ChildGuard,
    wait: Duration,
    grace: Duration,
    asking: &Asking<'_>,
) -> Turn {
    let mut t = collect_frames(hub, child, wait, grace, asking).await;
    settle_late(&mut t);
    t
}

/// Keeps in [`Turn::late`] the streams under an earlier browser's clientId, with the typing
/// under a clientId one of them carries or after this answer's own turn opened, when this
/// answer has frames of its own; any other frame set aside there (a typing before this
/// answer's turn opened with no stream beside it, or all of them when nothing of this
/// answer's came) was this answer's, sent under another browser's clientId: back among its
/// frames, in the order they came, for agent-client-id to judge.
fn settle_late(t: &mut Turn) {
    if t.late.is_empty() {
        return;
    }
    // Streams under an earlier browser's clientId and a messageId of their own are that
    // browser's (closed or not: the answer may end before they do), when this answer has
    // frames of its own; a typing is, beside such a stream under its clientId.
    let own = !t.frames.is_empty();
    let streaming: Vec<Value> = t
        .late
        .iter()
        .filter(|(n, _, _)| n != "typing")
        .map(|(_, d, _)| d["clientId"].clone())
        .collect();
    // A typing after this answer's own turn opened is not this answer's opening either: it
    // opens the earlier browser's late turn, whose streams may come only after this answer's
    // stream_end (an agent that opened its first answer's turn 120 ms into the second answer
    // and streamed 1.5 s later failed agent-client-id: "answered … with typing with clientId
    // …-1"; a fixed-delay variant of it did so in CI, once, under load).
    let opened = t
        .frames
        .iter()
        .find(|(n, _, _)| n == "typing" || n == "stream")
        .map(|(_, _, at)| *at);
    let (keep, back): (Vec<_>, Vec<_>) =
        std::mem::take(&mut t.late)
            .into_iter()
            .partition(|(n, d, at)| {
                own && (n != "typing"
                    || streaming.contains(&d["clientId"])
                    || opened.is_some_and(|o| o <= *at))
            });
    t.late = keep;
    if !back.is_empty() {
        t.frames.extend(back);
        t.frames.sort_by_key(|(_, _, at)| *at);
    }
}

async fn collect_frames(
    hub: &mut FakeHub,
    child: &mut ChildGuard,
    wait: Duration,
    grace: Duration,
    asking: &Asking<'_>,
) -> Turn {
    let deadline = Instant::now() + wait;
    let mut t = Turn {
        frames: Vec::new(),
        aside: Vec::new(),
        late: Vec::new(),
        extensions: Vec::new(),
        complete: false,
        disconnected: false,
        exited: None,
        flooded: false,
    };
    let mut open = false;
    // The messageIds of this answer's streams.
    let mut own: Vec<Value> = Vec::new();
    // Set by a plain answer: the turn is complete unless one opens before this instant.
    let mut plain_until: Option<Instant> = None;
    loop {
        let until = plain_until.map_or(deadline, |g| g.min(deadline));
        let Some(seen) = hub.next(until).await else {
            break;
        };
        let Seen::Event { name, data, at } = seen else {
            if matches!(seen, Seen::Disconnected) {
                t.disconnected = true;
                // A connection that ended because the process did: no answer can come.
                t.exited = child.exited_within(Duration::from_millis(300));
                if t.exited.is_some() {
                    return t;
                }
            }
            continue;
        };
        if name == "ping" || name == "register" {
            continue;
        }
        t.flooded = t.frames.len() + t.aside.len() + t.late.len() + t.extensions.len() + 1
            >= MAX_TURN_FRAMES;
        if !ANSWER_EVENTS.contains(&name.as_str()) {
            // Counted toward the flood bound too: an agent sending only extensions is cut off.
            t.extensions.push(name);
        } else if asking.sets_aside(&name, &data) {
            t.aside.push((name, data, at));
        } else if asking.earlier_turn(&name, &data, &own) {
            let ends = name == "stream_end";
            t.late.push((name, data, at));
            if ends && t.frames.is_empty() {
                // Nothing of this answer's own came, and a whole turn under the clientId of a
                // browser answered before did: this answer, misaddressed (an agent that keeps
                // the first clientId it saw), agent-client-id's to judge.
                t.frames = std::mem::take(&mut t.late);
                t.complete = true;
                return t;
            }
        } else {
            if matches!(name.as_str(), "stream" | "stream_end") {
                own.push(data["messageId"].clone());
            }
            let done = match name.as_str() {
                "typing" | "stream" => {
                    open = true;
                    plain_until = None;
                    false
                }
                "stream_end" => true,
                "message" => {
                    if !open && data.get("kind").is_none_or(Value::is_null) && plain_until.is_none()
                    {
                        plain_until = Some(Instant::now() + grace.min(wait));
                    }
                    false
                }
                _ => false,
            };
            t.frames.push((name, data, at));
            if done {
                t.complete = true;
                t.flooded = false;
                return t;
            }
        }
        if t.flooded {
            return t;
        }
    }
    t.complete = plain_until.is_some() && !open;
    t
}

/// What came after the turn's closing `stream_end`, within a bounded window.
struct AfterEnd {
    /// How long it watched.
    window: Duration,
    /// `stream`/`stream_end` frames under the closed messageId (name, ms after the end).
    late: Vec<(String, u128)>,
    /// How many other frames came (notes, another messageId, extension events): not
    /// stream-end-final's to judge.
    others: usize,
    /// The `message` frames among them (the first [`AFTER_END_KEPT`]): notes judges their
    /// `kind` as it judges the turn's.
    messages: Vec<(String, Value)>,
}

/// The `message` frames after the turn that [`AfterEnd`] keeps for notes.
const AFTER_END_KEPT: usize = 64;

/// The watch window after `stream_end`: a few times the measured stream cadence (a runtime
/// still flushing would send within it), at least 150 ms, at most [`AFTER_END_MAX`] and
/// `wait`; [`AFTER_END_MAX`] when there is no cadence to measure.
fn after_end_window(frames: &[(String, Value, Instant)], wait: Duration) -> Duration {
    let gaps = sorted_gaps(&stream_times(frames));
    let window = match gaps.get(gaps.len() / 2) {
        Some(median) => (*median * 3).clamp(Duration::from_millis(150), AFTER_END_MAX),
        None => AFTER_END_MAX,
    };
    window.min(wait)
}

/// Watches for `window` after the `stream_end` at `end_at` for frames that continue the stream
/// under `message_id` (a stream_end must be the stream's last frame).
async fn watch_after_end(
    hub: &mut FakeHub,
    message_id: &Value,
    end_at: Instant,
    window: Duration,
) -> AfterEnd {
    let deadline = Instant::now() + window;
    let mut late = Vec::new();
    let mut others = 0;
    let mut messages = Vec::new();
    while let Some(seen) = hub.next(deadline).await {
        let Seen::Event { name, data, at } = seen else {
            continue;
        };
        if name == "ping" || name == "register" {
            continue;
        }
        // Without a messageId (optional in the spec) no frame can be told to continue it.
        if matches!(name.as_str(), "stream" | "stream_end")
            && !message_id.is_null()
            && data["messageId"] == *message_id
        {
            late.push((name, at.saturating_duration_since(end_at).as_millis()));
        } else {
            others += 1;
            if name == "message" && messages.len() < AFTER_END_KEPT {
                messages.push((name, data));
            }
        }
    }
    AfterEnd {
        window,
        late,
        others,
        messages,
    }
}

/// Runs the agent rules; verdicts in catalogue order.
pub async fn check_agent(c: &AgentCheck) -> Vec<Verdict> {
    check_agent_run(c).await.0
}

/// [`check_agent`], and why the run could not set up (the hub double did not start, the agent
/// command could not be started), if it could not: then every rule is not run naming it.
pub async fn check_agent_run(c: &AgentCheck) -> (Vec<Verdict>, Option<String>) {
    let mut setup = None;
    let out = agent_rules(c, &mut setup).await.into_vec();
    (out, setup)
}

/// Every rule not run, each check listed as not run naming `why`.
fn all_not_run(mut out: VerdictLog, why: String, setup: &mut Option<String>) -> VerdictLog {
    for r in id::AGENT {
        out.push(rules::not_run_with_subchecks(
            rules::AGENT_SUBCHECKS,
            r,
            &why,
        ));
    }
    *setup = Some(why);
    out
}

async fn agent_rules(c: &AgentCheck, setup: &mut Option<String>) -> VerdictLog {
    let out = VerdictLog::new(c.live.clone());
    let mut hub =
        match FakeHub::start("127.0.0.1:0".parse().expect("addr"), c.api_key.clone()).await {
            Ok(h) => h,
            Err(e) => {
                let why = format!("could not start the hub double: {e}");
                return all_not_run(out, why, setup);
            }
        };
    let mut out = out;
    let env = [
        ("BRIDLE_URL", hub.url()),
        ("BRIDLE_API_KEY", c.api_key.clone()),
        ("BRIDLE_AGENT_ID", c.agent_id.clone()),
        ("BRIDLE_RECONNECT_MS", "300".to_string()),
    ];
    let mut child = match ChildGuard::spawn(&c.command, &env) {
        Ok(ch) => ch,
        Err(e) => {
            let why = format!("could not start the agent: {e}");
            return all_not_run(out, why, setup);
        }
    };

    // agent-auth
    let deadline = Instant::now() + c.wait * 2;
    let mut connected = None;
    let mut rejected = None;
    let mut early = Vec::new();
    let mut wrong_nsp = None;
    while let Some(s) = hub.next(deadline).await {
        match s {
            Seen::Connected { auth } => {
                connected = Some(auth);
                break;
            }
            Seen::Rejected { auth } => rejected = Some(auth),
            Seen::WrongNamespace { nsp, auth } => wrong_nsp = Some((nsp, auth)),
            other => early.push(other),
        }
    }
    match (&connected, &rejected) {
        (Some(auth), _) if auth["agentId"] == c.agent_id.as_str() => {
            out.push(Verdict::pass(id::AGENT_AUTH))
        }
        (Some(auth), _) => out.push(Verdict::fail(
            id::AGENT_AUTH,
            format!(
                "agentId {} is not BRIDLE_AGENT_ID {:?}",
                auth["agentId"], c.agent_id
            ),
        )),
        (None, Some(auth)) => out.push(Verdict::fail(
            id::AGENT_AUTH,
            format!(
                "handshake auth {} lacks the right apiKey or an agentId",
                redact(auth)
            ),
        )),
        (None, None) if wrong_nsp.is_some() => {
            let (nsp, auth) = wrong_nsp.unwrap_or_default();
            let why = format!(
                "the agent connected to namespace {nsp:?} instead of {AGENT_NSP} (auth {}); \
                 connect to BRIDLE_URL + \"{AGENT_NSP}\"",
                redact(&auth)
            );
            return not_connected(out, why);
        }
        (None, None) => {
            let why = match child.exited() {
                Some(st) => format!("the agent exited ({st}) without connecting"),
                None => format!("no connection to /ws/agent within {:?}", c.wait * 2),
            };
            return not_connected(out, why);
        }
    }
    if connected.is_none() {
        for r in &id::AGENT[1..] {
            out.push(rules::not_run_with_subchecks(
                rules::AGENT_SUBCHECKS,
                r,
                "the agent never authenticated (see agent-auth)",
            ));
        }
        return out;
    }

    // agent-register
    // Judged after the reconnection too (the spec: "Sent after connection or reconnection");
    // the verdict keeps its place in the catalogue order.
    let register_at = out.len();
    let register_first = match wait_register(&mut hub, c.wait).await {
        true => SubCheck::pass("after connecting", "register received"),
        false => SubCheck::fail(
            "after connecting",
            format!("no register within {:?} of connecting", c.wait),
        ),
    };

    // One turn, asking for notes too (runtimes that reason out loud mark them).
    let client_id = "bridgewire-browser-1";
    hub.send(
        client_id,
        &c.agent_id,
        "Tell me a story; think and use a tool if you need.",
    )
    .await;
    let turn = collect_turn(
        &mut hub,
        &mut child,
        c.turn_wait,
        c.wait,
        &Asking::default(),
    )
    .await;
    // Where the agent process exited before the hub went away, if it did: one fault, carried
    // by agent-reconnect (the agent is gone; nothing after can be seen).
    let mut exit: Option<(&str, std::process::ExitStatus)> =
        turn.exited.map(|st| ("its first answer", st));
    // A completed stream: watch a short while for frames that continue it past its stream_end.
    let closed_stream = match turn.frames.last() {
        Some((n, d, at)) if turn.complete && n == "stream_end" => {
            Some((d["messageId"].clone(), *at))
        }
        _ => None,
    };
    let mut after_end = match &closed_stream {
        Some((id, at)) => {
            let window = after_end_window(&turn.frames, c.wait);
            Some(watch_after_end(&mut hub, id, *at, window).await)
        }
        None => None,
    };
    // A frame continuing the closed stream later than the watch (in the quiet moment or during
    // a later answer) is still stream-end-final's, named with its delay, not a misrouted answer.
    let mut late_after_end = |name: &str, data: &Value, at: Instant| -> bool {
        match (&closed_stream, after_end.as_mut()) {
            (Some((id, end_at)), Some(a))
                if matches!(name, "stream" | "stream_end")
                    && !id.is_null()
                    && data["messageId"] == *id =>
            {
                a.late.push((
                    name.to_string(),
                    at.saturating_duration_since(*end_at).as_millis(),
                ));
                true
            }
            _ => false,
        }
    };
    // A second browser asks next: its answer must carry its own clientId, not the first
    // browser's (an agent that keeps the first clientId it saw answers the wrong browser).
    // First a quiet moment, bounded, so a late frame of the first answer is not read as part
    // of the second; what comes then joins the after-end messages notes judges.
    let second_client = "bridgewire-browser-2";
    let mut quiet_messages = Vec::new();
    // A first answer that was a plain message closed no stream: stream-end-final judges the
    // second answer's stream_end instead, watched after it as the first's would be.
    let first_plain = turn.complete
        && !turn
            .frames
            .iter()
            .any(|(n, _, _)| matches!(n.as_str(), "typing" | "stream" | "stream_end"));
    let mut second_after_end: Option<AfterEnd> = None;
    let second = if turn.complete {
        let bound = Instant::now() + c.wait.min(Duration::from_secs(2));
        loop {
            let quiet = (Instant::now() + Duration::from_millis(300)).min(bound);
            match hub.next(quiet).await {
                Some(Seen::Event { name, data, .. }) if name == "message" => {
                    quiet_messages.push((name, data))
                }
                Some(Seen::Event { name, data, at }) => {
                    late_after_end(&name, &data, at);
                }
                Some(_) => {}
                None => break,
            }
            if Instant::now() >= bound {
                break;
            }
        }
        hub.send(
            second_client,
            &c.agent_id,
            "One more question: what is two plus two?",
        )
        .await;
        let closed: Vec<Value> = closed_stream.iter().map(|(id, _)| id.clone()).collect();
        let asking = Asking {
            earlier: &[client_id],
            closed: &closed,
        };
        let mut t = collect_turn(&mut hub, &mut child, c.turn_wait, c.wait, &asking).await;
        if let Some(st) = t.exited {
            exit = Some(("its answer to a second browser", st));
        }
        t.aside.retain(|(n, d, at)| !late_after_end(n, d, *at));
        if let Some((n, d, at)) = t.frames.last()
            && first_plain
            && t.complete
            && n == "stream_end"
        {
            let window = after_end_window(&t.frames, c.wait);
            let id = d["messageId"].clone();
            second_after_end = Some(watch_after_end(&mut hub, &id, *at, window).await);
        }
        Some(t)
    } else {
        None
    };
    let frames: Vec<(String, Value)> = turn.untimed();
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    let incomplete = (!turn.complete).then(|| {
        if turn.flooded {
            return format!(
                "more than {MAX_TURN_FRAMES} frames without a closing stream_end (a flood): stopped collecting"
            );
        }
        let shown: Vec<&str> = names.iter().take(40).copied().collect();
        let more = names.len().saturating_sub(shown.len());
        if let Some(st) = turn.exited {
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            return format!("no complete answer: the agent exited ({st}) after {shown:?}{more}");
        }
        let dropped = hub.dropped();
        format!(
            "no complete answer within {:?} (saw {shown:?}{}{}{})",
            c.turn_wait,
            if more > 0 { format!(" and {more} more") } else { String::new() },
            match turn.extensions.len() {
                0 => String::new(),
                n => format!(", and {n} extension event(s), which are not answers"),
            },
            if dropped > 0 {
                format!("; {dropped} frame(s) dropped past the {MAX_QUEUED} queued")
            } else {
                String::new()
            }
        )
    });

    // agent-reconnect: restart the hub on the same port (done before the rules over the
    // answers are judged: the answer after reconnecting is judged with them).
    if exit.is_none()
        && let Some(st) = child.exited()
    {
        exit = Some(("the pause after its answers", st));
    }
    let exit_cause = exit.map(|(during, st)| {
        format!("the agent exited ({st}) during {during}, before the hub went away")
    });
    let addr = hub.addr;
    let on_websocket = hub.settle_transport().await;
    hub.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The old listener may take a moment to go, and under parallel load another process's
    // outgoing connection can hold the port briefly: retry the bind, bounded.
    let rebind_deadline = Instant::now() + Duration::from_secs(3);
    let restarted = loop {
        // An agent already gone cannot reconnect: the hub is not restarted for it.
        if exit_cause.is_some() {
            break Err(std::io::Error::other("the agent had exited"));
        }
        match FakeHub::start(addr, c.api_key.clone()).await {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && Instant::now() < rebind_deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => break r,
        }
    };
    let (verdict, restarted) = match restarted {
        Err(_) if let Some(cause) = &exit_cause => (
            (
                Verdict::fail(
                    id::AGENT_RECONNECT,
                    format!("{cause}: no agent was left to reconnect"),
                ),
                SubCheck::skipped(
                    "after reconnecting",
                    format!(
                        "not judged: {cause} ({} carries that fault)",
                        id::AGENT_RECONNECT
                    ),
                ),
                None,
            ),
            None,
        ),
        Err(e) => (
            (
                Verdict::fail(
                    id::AGENT_RECONNECT,
                    format!("could not restart the hub double on {addr}: {e}"),
                ),
                SubCheck::skipped("after reconnecting", "the hub double could not restart"),
                None,
            ),
            None,
        ),
        Ok(mut h2) => (
            reconnect(
                &mut h2,
                c,
                &mut child,
                on_websocket,
                client_id,
                &connected
                    .as_ref()
                    .map_or(Value::Null, |a| a["agentId"].clone()),
            )
            .await,
            Some(h2),
        ),
    };
    let (reconnect_verdict, register_again, back_turn) = verdict;
    // The answer after reconnecting (to the second browser), judged by the same rules as the
    // first two: an agent that answers right only on its first connection shows it here.
    const BACK: &str = "after reconnecting";
    const SECOND: &str = "to the second browser";
    let back_frames: Vec<(String, Value)> =
        back_turn.as_ref().map(Turn::untimed).unwrap_or_default();
    // Its own stream: the frames under its closing stream_end's messageId. Emits a client made
    // while the hub was gone are sent when it reconnects (socket.io-client buffers them), so
    // the rest of an earlier answer can arrive among this one's frames.
    let back_stream = own_stream(&back_frames);
    // One fault, one verdict: a rule left short of its evidence by an exit during the first
    // answer (nothing to judge, or the answer that never completed) is skipped naming it;
    // agent-reconnect carries the exit.
    let carried = |mut v: Verdict| -> Verdict {
        let short = v.status == Status::NotRun
            || (v.status != Status::Pass
                && (incomplete
                    .as_ref()
                    .is_some_and(|t| v.detail.contains(t.as_str()))
                    || v.detail.starts_with("no answer event to judge")));
        if let (Some(cause), Some(_)) = (&exit_cause, turn.exited)
            && short
        {
            v.status = Status::Skipped;
            v.detail = format!(
                "not judged: {cause} ({} carries that fault): {}",
                id::AGENT_RECONNECT,
                v.detail
            );
        }
        v
    };
    // agent-client-id
    let wrong_in = |frames: &[(String, Value)], want: &str| -> Vec<String> {
        // Grouped by the clientId carried: `typing, stream ×22, stream_end with clientId "x"`.
        let mut by_id: Vec<(String, Vec<String>)> = Vec::new();
        for (n, d) in frames.iter().filter(|(_, d)| d["clientId"] != want) {
            let got = d["clientId"].to_string();
            match by_id.iter_mut().find(|(g, _)| *g == got) {
                Some((_, names)) => names.push(n.clone()),
                None => by_id.push((got, vec![n.clone()])),
            }
        }
        by_id
            .into_iter()
            .map(|(got, names)| format!("{} with clientId {got}", count_names(&names)))
            .collect()
    };
    let mut wrong: Vec<String> = wrong_in(&frames, client_id)
        .into_iter()
        .map(|w| format!("answered {client_id:?} with {w}"))
        .collect();
    let second_frames: Vec<(String, Value)> =
        second.as_ref().map(Turn::untimed).unwrap_or_default();
    // Its own stream, as the answer after reconnecting's ([`own_stream`]): read by
    // streaming-replace, and by stream-end-final when the first answer was plain.
    let second_stream = own_stream(&second_frames);
    wrong.extend(
        wrong_in(&second_frames, second_client)
            .into_iter()
            .map(|w| format!("answered {second_client:?} with {w}")),
    );
    wrong.extend(
        wrong_in(&back_frames, second_client)
            .into_iter()
            .map(|w| format!("{BACK}, answered {second_client:?} with {w}")),
    );
    // Messages to the first browser that came during a later answer: set aside, said.
    let aside_messages: Vec<(String, Value)> = second
        .iter()
        .chain(&back_turn)
        .flat_map(|t| &t.aside)
        .filter(|(n, _, _)| n == "message")
        .map(|(n, d, _)| (n.clone(), d.clone()))
        .collect();
    // Turns a browser that asked before had opened late, during a later browser's answer
    // (which had its own): that browser's answers, set aside, said.
    let late_turns: Vec<(String, Value)> = second
        .iter()
        .chain(&back_turn)
        .flat_map(|t| &t.late)
        .map(|(n, d, _)| (n.clone(), d.clone()))
        .collect();
    out.push(carried(if frames.is_empty() {
        Verdict::fail(id::AGENT_CLIENT_ID, incomplete.clone().unwrap_or_default())
    } else if wrong.is_empty() {
        // What the pass saw beside the answer, each said once, joined.
        let mut notes = vec![extension_events_note(&turn.extensions)];
        if !late_turns.is_empty() {
            let names: Vec<String> = late_turns.iter().map(|(n, _)| n.clone()).collect();
            notes.push(format!(
                "a turn under {client_id:?} ({}) came during a later browser's answer, which had its own: the first browser's answer opened late (nothing bounds when a turn opens), set aside, not judged as that answer",
                count_names(&names)
            ));
        }
        if !aside_messages.is_empty() {
            notes.push(format!(
                "{} message(s) to {client_id:?} came during a later browser's answer: messages to the browser that asked before, under its clientId (legal: \"A plain message sent with no turn open is an ordinary answer bubble\"), not that answer",
                aside_messages.len()
            ));
        }
        if let Some(t) = second.as_ref().filter(|t| t.frames.is_empty()) {
            let why = match (t.exited, t.disconnected) {
                (Some(st), _) => format!(
                    "the agent exited ({st}) meanwhile; {} carries that fault",
                    id::AGENT_RECONNECT
                ),
                (None, true) => "the agent disconnected".to_string(),
                (None, false) => "none came".to_string(),
            };
            notes.push(format!(
                "no answer to a second browser ({second_client:?}) within {:?} ({why}): only the first browser's answer was judged",
                c.turn_wait
            ));
        }
        notes.retain(|n| !n.is_empty());
        let mut v = Verdict::pass(id::AGENT_CLIENT_ID);
        v.detail = notes.join("; ");
        v
    } else {
        let more = wrong.len().saturating_sub(20);
        Verdict::fail(
            id::AGENT_CLIENT_ID,
            format!(
                "{}{}",
                wrong[..wrong.len() - more].join("; "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
        )
    }));

    // One clock reading for the rules that judge ts (epoch milliseconds within a day of now).
    let now_ms = crate::util::now_ms() as f64;
    // agent-event-fields: every answer event seen (both answers, and the messages after the
    // first) against IBridleOutgoingEvent's types and the three part shapes.
    {
        let mut seen_events = 0;
        // Each kind of fault once: its first text and the events that showed it.
        let mut faults: Vec<(String, String, Vec<String>)> = Vec::new();
        let after: Vec<(String, Value)> = after_end
            .as_ref()
            .map(|a| a.messages.clone())
            .unwrap_or_default();
        for (n, d) in frames
            .iter()
            .chain(&after)
            .chain(&quiet_messages)
            .chain(&second_frames)
            .chain(&aside_messages)
            .chain(&late_turns)
            .chain(&back_frames)
        {
            seen_events += 1;
            for (kind, text) in rules::agent_event_problems(d, now_ms) {
                match faults.iter_mut().find(|(k, _, _)| *k == kind) {
                    Some((_, _, on)) => on.push(n.clone()),
                    None => faults.push((kind, format!("{n}: {text}"), vec![n.clone()])),
                }
            }
        }
        let problems: Vec<String> = faults
            .iter()
            .map(|(_, text, on)| {
                if on.len() == 1 {
                    text.clone()
                } else {
                    format!(
                        "{text} (and so on {} events: {})",
                        on.len(),
                        count_names(on)
                    )
                }
            })
            .collect();
        out.push(carried(if seen_events == 0 {
            Verdict::skipped(
                id::AGENT_EVENT_FIELDS,
                format!(
                    "no answer event to judge ({}'s to judge)",
                    id::AGENT_CLIENT_ID
                ),
            )
        } else if problems.is_empty() {
            let mut v = Verdict::pass(id::AGENT_EVENT_FIELDS);
            v.detail = format!("{seen_events} answer event(s)");
            v
        } else {
            let more = problems.len().saturating_sub(12);
            Verdict::fail(
                id::AGENT_EVENT_FIELDS,
                format!(
                    "{}{}",
                    problems[..problems.len() - more].join("; "),
                    if more > 0 {
                        format!("; and {more} more")
                    } else {
                        String::new()
                    }
                ),
            )
        }));
    }

    // A complete, non-streamed answer (the spec's `message` from the agent, no turn opened) is
    // legal: the streaming rules have nothing to judge, so they are not run, naming why (a
    // skip would fail the run on a correct agent; a pass would claim evidence never seen).
    let plain_answer = turn.complete
        && !frames
            .iter()
            .any(|(n, _)| matches!(n.as_str(), "typing" | "stream" | "stream_end"));
    const PLAIN: &str = "the agent answered with a plain message (a complete, non-streamed \
                         response, legal): no stream to judge";

    // Frames without `parts` are legal (the spec's backward compatibility: "if parts is
    // missing, they build it from text"): the streaming rules judge them with the parts every
    // receiver builds, and streaming-replace says so.
    let (with_parts, built) = parts_from_text(&frames);

    // A frame whose text or parts are not the spec's types is agent-event-fields' fault: the
    // rules over the accumulation are not judged apart from it (one fault, one verdict).
    let shape_fault = |frames: &[(String, Value)], names: &[&str]| -> Option<String> {
        frames
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .find_map(|(n, d)| {
                // The faults that change what the text or its parts say: a type on text or
                // parts, a text part without its text, a part of no spec type (an image's
                // media type or a ts does not touch the accumulation).
                rules::agent_event_problems(d, now_ms)
                    .into_iter()
                    .find(|(k, _)| {
                        matches!(k.as_str(), "not an object" | "text type" | "parts type")
                            || k.starts_with("text text ")
                            || k.starts_with("a part of type ")
                    })
                    .map(|(_, t)| format!("{n}: {t}"))
            })
    };
    let apart = |fault: &str| {
        format!(
            "not judged apart from {} ({fault}): the accumulation is read from those fields",
            id::AGENT_EVENT_FIELDS
        )
    };
    // The stream_end's parts are stream-end-final's ("parts mirror text" of the closing
    // frame): streaming-replace reads its text, with the parts a receiver would build from it.
    let replace_view = |frames: &[(String, Value)]| -> Vec<(String, Value)> {
        frames
            .iter()
            .map(|(n, d)| {
                let mut d = d.clone();
                if n == "stream_end"
                    && let Some(t) = d.get("text").and_then(Value::as_str)
                {
                    d["parts"] = text_parts(t);
                }
                (n.clone(), d)
            })
            .collect()
    };
    const STREAMED: &[&str] = &["stream", "stream_end"];

    // streaming-replace: the first answer, and the one after reconnecting where it streamed.
    // A first answer that was plain leaves the later ones that streamed to judge: not run
    // only when none did (the evidence was there otherwise).
    out.push(carried({
        let first = (!plain_answer).then(|| match shape_fault(&frames, STREAMED) {
            Some(f) => Err(Ok(apart(&f))),
            None => {
                rules::streaming_replace_with(&replace_view(&with_parts), rules::EndText::MayExtend)
                    .map_err(|e| Err(incomplete.clone().unwrap_or(e)))
            }
        });
        // The later answers where they streamed: to the second browser, and after reconnecting.
        let later = [
            (SECOND, second.as_ref(), &second_frames, &second_stream),
            (BACK, back_turn.as_ref(), &back_frames, &back_stream),
        ];
        let mut judged_later = Vec::new();
        let mut results: Vec<_> = first.into_iter().collect();
        for (label, turn, frames, stream) in later {
            let streamed = turn.is_some_and(|t| t.complete)
                && frames.iter().any(|(n, _)| STREAMED.contains(&n.as_str()));
            if !streamed {
                continue;
            }
            judged_later.push(label);
            results.push(match shape_fault(stream, STREAMED) {
                Some(f) => Err(Ok(format!("{label}: {}", apart(&f)))),
                None => {
                    let (view, _) = parts_from_text(stream);
                    rules::streaming_replace_with(&replace_view(&view), rules::EndText::MayExtend)
                        .map_err(|e| Err(format!("{label}: {e}")))
                }
            });
        }
        // Err(Err(fault)) fails; Err(Ok(why)) could not be judged apart from another rule.
        let results_judged = results.len();
        let (mut failed, mut apart_from) = (Vec::new(), Vec::new());
        for r in results {
            match r {
                Err(Err(e)) => failed.push(e),
                Err(Ok(why)) => apart_from.push(why),
                Ok(()) => {}
            }
        }
        if results_judged == 0 {
            Verdict::not_run(id::STREAMING_REPLACE, PLAIN)
        } else if !failed.is_empty() {
            Verdict::fail(id::STREAMING_REPLACE, failed.join("; "))
        } else if !apart_from.is_empty() {
            Verdict::skipped(id::STREAMING_REPLACE, apart_from.join("; "))
        } else {
            let mut v = Verdict::pass(id::STREAMING_REPLACE);
            v.detail = [
                plain_answer.then(|| {
                    "the first answer was a plain message (legal), with no stream to judge"
                        .to_string()
                }),
                (built > 0).then(|| {
                    format!(
                        "parts omitted on {built} frame(s): built from text, as receivers do \
                         (backward compatibility)"
                    )
                }),
                (!judged_later.is_empty())
                    .then(|| format!("the answers {} judged too", judged_later.join(" and "))),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ");
            v
        }
    }));

    // stream-end-final: the first answer's closing frame and the watch after it.
    let later_streamed = [&second_frames, &back_frames]
        .iter()
        .any(|f| f.iter().any(|(n, _)| STREAMED.contains(&n.as_str())));
    out.push(carried(if plain_answer && let Some(a) = &second_after_end {
        let on = "on the answer to the second browser (the first answer was a plain message, \
                  legal, closing no stream)";
        match shape_fault(&second_stream, &["stream_end"]) {
            Some(f) => Verdict::skipped(
                id::STREAM_END_FINAL,
                format!(
                    "{on}: not judged apart from {} ({f}): the closing frame's fields are not the spec's types",
                    id::AGENT_EVENT_FIELDS
                ),
            ),
            None => {
                let mut v = stream_end_final(&parts_from_text(&second_stream).0, None, Some(a));
                v.detail = if v.detail.is_empty() {
                    on.to_string()
                } else {
                    format!("{on}: {}", v.detail)
                };
                v
            }
        }
    } else if plain_answer && later_streamed {
        Verdict::not_run(
            id::STREAM_END_FINAL,
            "the first answer was a plain message (a complete, non-streamed response, legal): \
             this rule watches the first answer's stream_end and what follows it, and there was \
             none (the later answers' streams were judged by streaming-replace)",
        )
    } else if plain_answer {
        Verdict::not_run(id::STREAM_END_FINAL, PLAIN)
    } else if let Some(f) = shape_fault(&frames, &["stream_end"]) {
        Verdict::skipped(
            id::STREAM_END_FINAL,
            format!(
                "not judged apart from {} ({f}): the closing frame's fields are not the spec's types",
                id::AGENT_EVENT_FIELDS
            ),
        )
    } else {
        stream_end_final(&with_parts, incomplete.as_deref(), after_end.as_ref())
    }));

    // notes: the turn's frames and the messages seen in the watch after it (a `kind` outside
    // the protocol's two is wrong wherever it comes).
    let mut with_after: Vec<(String, Value)> = frames.clone();
    if let Some(a) = &after_end {
        with_after.extend(a.messages.iter().cloned());
    }
    with_after.extend(quiet_messages.iter().cloned());
    with_after.extend(aside_messages.iter().cloned());
    // The later answers' notes too, each answer read on its own (a first answer with none, a
    // plain one, left notes not run though the next answers reasoned out loud).
    out.push(carried(notes_of(&[
        &with_after,
        &second_frames,
        &back_frames,
    ])));

    out.push(reconnect_verdict);
    out.insert(
        register_at,
        // Both halves or no pass: an agent that never reconnected has not shown its second
        // register (agent-reconnect carries that fault; this rule is skipped, not passed).
        Verdict::from_all_subchecks(id::AGENT_REGISTER, vec![register_first, register_again]),
    );

    // stream-cadence (INFO)
    // Measured on the first answer with enough streams to measure: a first answer that was a
    // plain message (or too short) leaves the later answers' streams.
    let answers = [
        (None, Some(turn.frames.as_slice())),
        (Some(SECOND), second.as_ref().map(|t| t.frames.as_slice())),
        (Some(BACK), back_turn.as_ref().map(|t| t.frames.as_slice())),
    ];
    out.push(cadence(&answers));
    drop(child);
    if let Some(h) = restarted {
        h.shutdown().await;
    }
    out
}

/// One fault, one verdict: `agent-auth` fails with the cause, every later rule is not run.
fn not_connected(mut out: VerdictLog, why: String) -> VerdictLog {
    out.push(Verdict::fail(id::AGENT_AUTH, why));
    for r in &id::AGENT[1..] {
        out.push(rules::not_run_with_subchecks(
            rules::AGENT_SUBCHECKS,
            r,
            "the agent never connected to /ws/agent (see agent-auth)",
        ));
    }
    out
}

async fn wait_register(hub: &mut FakeHub, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while let Some(s) = hub.next(deadline).await {
        if let Seen::Event { name, .. } = s
            && name == "register"
        {
            return true;
        }
    }
    false
}

async fn reconnect(
    hub: &mut FakeHub,
    c: &AgentCheck,
    child: &mut ChildGuard,
    on_websocket: bool,
    first_client: &str,
    first_agent_id: &Value,
) -> (Verdict, SubCheck, Option<Turn>) {
    let not_back = || {
        SubCheck::skipped(
            "after reconnecting",
            "the agent did not reconnect (agent-reconnect carries that fault)",
        )
    };
    let deadline = Instant::now() + c.reconnect_wait;
    let mut connected = None;
    while let Some(s) = hub.next(deadline).await {
        if let Seen::Connected { auth } = s {
            connected = Some(auth);
            break;
        }
    }
    // "agentId is required -- it scopes all routing": a runtime that comes back under another
    // agentId than it connected with is not reached by the browsers of its own. (A wrong one
    // from the start is agent-auth's fault.)
    let other_id = connected
        .as_ref()
        .filter(|auth| auth["agentId"] != *first_agent_id)
        .map(|auth| {
            format!(
                "reconnected with agentId {}, not the {first_agent_id} it connected with (BRIDLE_AGENT_ID {:?}; agentId \"scopes all routing\": browsers of {first_agent_id} no longer reach it)",
                auth["agentId"], c.agent_id
            )
        });
    if connected.is_none() {
        let why = match child.exited() {
            Some(st) => format!("the agent exited ({st}) when the hub went away"),
            None => format!(
                "no reconnection within {:?} of the hub restarting{}",
                c.reconnect_wait,
                match on_websocket {
                    true => "",
                    false => " (its connection was still on long-polling when the hub went away)",
                }
            ),
        };
        return (Verdict::fail(id::AGENT_RECONNECT, why), not_back(), None);
    }
    // Register is agent-register's fact; without it the hub double still routes, so
    // reconnection is judged on its own.
    let register = match wait_register(hub, c.wait).await {
        true => SubCheck::pass("after reconnecting", "register received"),
        false => SubCheck::fail(
            "after reconnecting",
            format!("no register within {:?} of reconnecting", c.wait),
        ),
    };
    if !hub
        .send("bridgewire-browser-2", &c.agent_id, "Are you back?")
        .await
    {
        let v = Verdict::fail(
            id::AGENT_RECONNECT,
            "reconnected, but the connection was gone when a message was sent",
        );
        return (v, register, None);
    }
    let asking = Asking {
        earlier: &[first_client],
        closed: &[],
    };
    let turn = collect_turn(hub, child, c.turn_wait, c.wait, &asking).await;
    if turn.frames.is_empty() {
        let v = Verdict::fail(
            id::AGENT_RECONNECT,
            format!(
                "reconnected, but did not answer a message within {:?}{}",
                c.turn_wait,
                if turn.disconnected {
                    " (it disconnected meanwhile)"
                } else {
                    ""
                }
            ),
        );
        return (v, register, Some(turn));
    }
    let v = match other_id {
        Some(why) => Verdict::fail(id::AGENT_RECONNECT, why),
        None => Verdict::pass(id::AGENT_RECONNECT),
    };
    (v, register, Some(turn))
}

/// `stream_end` closes the streamed answer under the streams' messageId with parts mirroring
/// its text. How its text relates to the last flush is `streaming-replace`'s fact, not this
/// rule's (one fact, one rule).
fn stream_end_final(
    frames: &[(String, Value)],
    incomplete: Option<&str>,
    after_end: Option<&AfterEnd>,
) -> Verdict {
    let streams: Vec<&Value> = frames
        .iter()
        .filter(|(n, _)| n == "stream")
        .map(|(_, d)| d)
        .collect();
    let Some(end) = frames
        .iter()
        .find(|(n, _)| n == "stream_end")
        .map(|(_, d)| d)
    else {
        return Verdict::fail(
            id::STREAM_END_FINAL,
            incomplete
                .unwrap_or("streams without a closing stream_end")
                .to_string(),
        );
    };
    let mut subs = Vec::new();
    let others: Vec<&Value> = streams
        .iter()
        .copied()
        .filter(|s| s["messageId"] != end["messageId"])
        .collect();
    let mut other: Vec<String> = others.iter().map(|s| s["messageId"].to_string()).collect();
    other.dedup();
    // A stream_end with no stream before it is legal, not unseen evidence: the spec's runtime
    // flushes the accumulation every 100 ms and sends the returned text as stream_end, so an
    // answer ready before the first flush has no stream at all. Then there is no streams'
    // messageId to match: the sub-check does not apply (shown as not run, deciding nothing).
    subs.push(if streams.is_empty() {
        crate::rule::SubCheck::new(
            "messageId",
            crate::rule::Status::NotRun,
            "not applicable: no stream before stream_end (legal: an answer ready before the runtime's first 100 ms flush streams nothing)",
        )
    } else if other.is_empty() {
        crate::rule::SubCheck::pass("messageId", format!("{} throughout", end["messageId"]))
    } else {
        crate::rule::SubCheck::fail(
            "messageId",
            format!(
                "stream_end carries messageId {} but {} carry {}",
                end["messageId"],
                if others.len() == streams.len() {
                    "its streams".to_string()
                } else {
                    format!("{} of its {} streams", others.len(), streams.len())
                },
                other.join(", ")
            ),
        )
    });
    subs.push(if !end["text"].is_string() {
        // A stream_end without text is streaming-replace's fault ("stream_end has no
        // text"): nothing here to mirror, and no second verdict for it.
        crate::rule::SubCheck::new(
            "parts mirror text",
            crate::rule::Status::NotRun,
            "not applicable: the stream_end carries no text (streaming-replace's)",
        )
    } else if rules::parts_text(&end["parts"]).as_deref() == end["text"].as_str() {
        crate::rule::SubCheck::pass("parts mirror text", "")
    } else {
        crate::rule::SubCheck::fail(
            "parts mirror text",
            format!(
                "stream_end parts {} do not mirror its text {}",
                end["parts"], end["text"]
            ),
        )
    });
    const LAST: &str = "nothing continues the stream after stream_end";
    subs.push(match after_end {
        None => crate::rule::SubCheck::skipped(LAST, "the turn was not seen to close with stream_end"),
        Some(a) if a.late.is_empty() => crate::rule::SubCheck::pass(
            LAST,
            format!(
                "no stream or stream_end under messageId {} within {} ms after it{}",
                end["messageId"],
                a.window.as_millis(),
                match a.others {
                    0 => String::new(),
                    n => format!(
                        " ({n} other frame(s): notes, another messageId or extension events, not this rule's to judge)"
                    ),
                }
            ),
        ),
        Some(a) => {
            let late: Vec<String> = a
                .late
                .iter()
                .take(10)
                .map(|(n, ms)| format!("{n} +{ms} ms"))
                .collect();
            crate::rule::SubCheck::fail(
                LAST,
                format!(
                    "after stream_end the agent sent {} under the same messageId {} ({} frame(s)): stream_end is the stream's final frame",
                    late.join(", "),
                    end["messageId"],
                    a.late.len()
                ),
            )
        }
    });
    // Any sub-check that could not be seen (skipped) keeps the rule from passing.
    Verdict::from_all_subchecks(id::STREAM_END_FINAL, subs)
}

/// An answer's own stream: the frames under its closing stream_end's messageId, with the other
/// frames it holds (typing, notes). Without a closing stream_end that names one, all of them.
fn own_stream(frames: &[(String, Value)]) -> Vec<(String, Value)> {
    match frames.last() {
        Some((n, end)) if n == "stream_end" && !end["messageId"].is_null() => frames
            .iter()
            .filter(|(n, d)| {
                !matches!(n.as_str(), "stream" | "stream_end") || d["messageId"] == end["messageId"]
            })
            .cloned()
            .collect(),
        _ => frames.to_vec(),
    }
}

/// The frames with the text parts a receiver builds where `stream`, `stream_end` or `message`
/// carries text and no `parts` (absent or null), and how many were built.
fn parts_from_text(frames: &[(String, Value)]) -> (Vec<(String, Value)>, usize) {
    let mut built = 0;
    let out = frames
        .iter()
        .map(|(n, d)| {
            let mut d = d.clone();
            if matches!(n.as_str(), "stream" | "stream_end" | "message")
                && d.get("parts").is_none_or(Value::is_null)
                && let Some(text) = d.get("text").and_then(Value::as_str)
            {
                d["parts"] = text_parts(text);
                built += 1;
            }
            (n.clone(), d)
        })
        .collect();
    (out, built)
}

/// Notes: a `kind`, where a frame has one, is `thinking` or `tool`. An unmarked frame inside
/// the turn is a note by its place, which the spec makes legal ("Runtimes should set this";
/// the place "lets existing runtimes get the work log without a change"): passed, and said.
/// [`notes`] over several answers, each read on its own (a turn left open by one does not
/// hold the next one's plain message inside it).
fn notes_of(answers: &[&[(String, Value)]]) -> Verdict {
    let mut count = 0;
    let mut unmarked = 0;
    // Every note with a wrong kind is shown, not only the first.
    let mut wrong = Vec::new();
    for frames in answers {
        let mut open = false;
        for (n, d) in frames.iter() {
            match n.as_str() {
                "typing" => open = true,
                "stream_end" => open = false,
                "message" => match d.get("kind") {
                    None | Some(Value::Null) if open => {
                        count += 1;
                        unmarked += 1;
                    }
                    None | Some(Value::Null) => {}
                    Some(kind) => {
                        count += 1;
                        if !matches!(kind.as_str(), Some("thinking" | "tool")) {
                            wrong.push(format!(
                                "a note {} {} the turn has kind {kind}, want thinking or tool",
                                d["text"],
                                if open { "inside" } else { "outside" }
                            ));
                        }
                    }
                },
                _ => {}
            }
        }
    }
    if !wrong.is_empty() {
        let more = wrong.len().saturating_sub(10);
        wrong.truncate(10);
        if more > 0 {
            wrong.push(format!("and {more} more"));
        }
        return Verdict::fail(id::NOTES, wrong.join("; "));
    }
    // Notes are optional (an agent need not reason out loud): with none there is nothing to
    // judge, which is said as not run rather than passed on evidence never seen.
    if count == 0 {
        return Verdict::not_run(
            id::NOTES,
            "no notes in the answers (notes are optional): nothing to judge",
        );
    }
    if unmarked > 0 {
        let mut v = Verdict::pass(id::NOTES);
        v.detail = format!(
            "{unmarked} of {count} notes carry no kind, notes by their place in the turn \
                 (legal; the spec asks runtimes to set kind: it is the only signal that \
                 survives a turn with no streamed answer)"
        );
        return v;
    }
    Verdict::pass(id::NOTES)
}

/// A frame of an answer: its event name, its data, when it arrived.
type TimedFrame = (String, Value, Instant);

/// When each `stream` frame of a turn arrived.
fn stream_times(frames: &[(String, Value, Instant)]) -> Vec<Instant> {
    frames
        .iter()
        .filter(|(n, _, _)| n == "stream")
        .map(|(_, _, t)| *t)
        .collect()
}

/// The intervals between consecutive instants, shortest first.
fn sorted_gaps(at: &[Instant]) -> Vec<Duration> {
    let mut gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    gaps
}

/// The stream flush interval of the first of `answers` (labelled, the first answer without a
/// label) with at least three streams; too few to measure when none has.
fn cadence(answers: &[(Option<&str>, Option<&[TimedFrame]>)]) -> Verdict {
    let mut v = Verdict::pass(id::STREAM_CADENCE);
    let measured = answers.iter().find_map(|(label, frames)| {
        let at = stream_times((*frames)?);
        (at.len() >= 3).then_some((*label, at))
    });
    let Some((label, at)) = measured else {
        let counts: Vec<usize> = answers
            .iter()
            .filter_map(|(_, f)| f.map(|f| stream_times(f).len()))
            .collect();
        v.detail = match counts.as_slice() {
            [n] => format!("{n} stream frames: too few to measure (spec: 100 ms)"),
            _ => format!(
                "{} stream frames in its answers ({}): too few in any one to measure (spec: 100 ms)",
                counts.iter().sum::<usize>(),
                counts
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        return v;
    };
    // The last stream is the final flush, which need not wait a full interval.
    let gaps: Vec<u128> = sorted_gaps(&at[..at.len() - 1])
        .iter()
        .map(Duration::as_millis)
        .collect();
    let median = gaps[gaps.len() / 2];
    let max = *gaps.last().unwrap_or(&0);
    v.detail = format!(
        "measured stream flush interval{}: median {median} ms, min {} ms, max {max} ms over {} intervals (spec: 100 ms)",
        label.map_or(String::new(), |l| format!(
            " (in its answer {l}: the first had fewer than 3 streams)"
        )),
        gaps[0],
        gaps.len()
    );
    v
}

/// A passing verdict's detail naming the extension events an agent sent during its turn
/// (names the spec does not list; it forbids none), or "" when there were none.
/// Event names counted in first-seen order: `typing, stream ×22, stream_end`.
fn count_names(names: &[String]) -> String {
    super::counted_names(names.iter().map(String::as_str), false).join(", ")
}

fn extension_events_note(names: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match counts.iter_mut().find(|(m, _)| *m == n.as_str()) {
            Some((_, c)) => *c += 1,
            None => counts.push((n.as_str(), 1)),
        }
    }
    let listed: Vec<String> = counts
        .iter()
        .take(20)
        .map(|(n, c)| format!("{n:?} ×{c}"))
        .collect();
    format!(
        "extension events, which the spec does not list and does not forbid (not judged): {}",
        listed.join(", ")
    )
}

/// The handshake auth with its secrets masked, for messages.
fn redact(auth: &Value) -> Value {
    let mut a = auth.clone();
    if let Some(m) = a.as_object_mut() {
        for k in ["apiKey", "token"] {
            if m.contains_key(k) {
                m.insert(k.into(), json!("[redacted]"));
            }
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::notes_of;
    use crate::rule::Status;
    use serde_json::{Value, json};

    fn frame(name: &str, data: Value) -> (String, Value) {
        (name.to_string(), data)
    }

    /// Every note with a kind outside the protocol's two is named, inside the turn and after
    /// it, not only the first; marked and unmarked notes in place pass.
    #[test]
    fn notes_names_every_wrong_kind() {
        let turn = vec![
            frame("typing", json!({})),
            frame("message", json!({"text": "a", "kind": "reasoning"})),
            frame("message", json!({"text": "b", "kind": "thinking"})),
            frame("message", json!({"text": "c"})),
            frame("stream", json!({"text": "x"})),
            frame("stream_end", json!({"text": "x"})),
            frame("message", json!({"text": "d", "kind": "bogus"})),
        ];
        let v = notes_of(&[&turn]);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.detail
                .contains("\"a\" inside the turn has kind \"reasoning\""),
            "{}",
            v.detail
        );
        assert!(
            v.detail
                .contains("\"d\" outside the turn has kind \"bogus\""),
            "{}",
            v.detail
        );
        assert!(!v.detail.contains("\"b\""), "{}", v.detail);
        let fine: Vec<_> = turn[..6]
            .iter()
            .filter(|(_, d)| d["text"] != "a")
            .cloned()
            .collect();
        let v = notes_of(&[&fine]);
        assert_eq!(v.status, Status::Pass, "{}", v.detail);
        assert!(
            v.detail.contains("1 of 2 notes carry no kind"),
            "{}",
            v.detail
        );
    }
}

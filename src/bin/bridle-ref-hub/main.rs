//! bridle-ref-hub: the reference Bridle hub (socketioxide + axum), bridgewire's bundled default.
//!
//! `bridle-ref-hub [--listen ADDR] [--jwt-secret S] [--api-key K] [--break MODE]`; the bound
//! address is the first stdout line (`http://IP:PORT`), so `--listen 127.0.0.1:0` works.
//! Environment: `JWT_SECRET`, `BRIDLE_API_KEY`, `BRIDLE_REF_BREAK`, `BRIDLE_SYNC_TIMEOUT_MS`
//! (default 120000). Each `--break` mode plants one flaw that one `check bridle hub` rule
//! catches; see `docs/bridle.md`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use bridgewire::bridle::{
    AGENT_NSP, CLIENT_NSP, NOT_CONNECTED, SYNC_TIMEOUT_TEXT, parts_of, text_parts, verify_jwt,
    verify_jwt_claims,
};
use serde_json::{Value, json};
use socketioxide::SocketIo;
use socketioxide::extract::{Data, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// The planted flaws, one per rule (and `extension-events`, a legal variant kept beside them).
const BREAKS: &[(&str, &str)] = &[
    (
        "accept-any-token",
        "handshake-auth: browsers with an invalid JWT are admitted",
    ),
    (
        "accept-any-api-key",
        "handshake-auth: agents with a wrong apiKey are admitted",
    ),
    (
        "welcome-random-id",
        "welcome: clientId is a random id, not the JWT sub",
    ),
    ("no-welcome", "welcome: the hub never sends welcome"),
    ("no-pong", "ping-pong: ping is never answered"),
    (
        "leak-agents",
        "agent-isolation: agent traffic reaches the clientId's browsers of every agent",
    ),
    (
        "broadcast-clients",
        "client-routing: replies reach every browser of the agent",
    ),
    (
        "silent-no-agent",
        "agent-not-connected: messages without an agent vanish",
    ),
    (
        "drop-legacy-images",
        "legacy-parts: parts are built from text only",
    ),
    ("drop-typing", "stream-relay: typing is not relayed"),
    (
        "delta-stream",
        "streaming-replace: stream frames carry deltas",
    ),
    ("strip-kind", "notes: kind is stripped from notes"),
    (
        "stale-agent",
        "agent-reconnect: a reconnecting agent is ignored",
    ),
    (
        "health-miscount",
        "http-health: browserClients is off by one",
    ),
    (
        "fire-and-forget-drop",
        "http-message: messages are acknowledged but not forwarded",
    ),
    (
        "sync-first-stream",
        "http-sync: answers with the first stream, not the final text",
    ),
    (
        "sync-timeout-504",
        "http-sync-timeout: a 504 with another body",
    ),
    (
        "accept-no-sub",
        "handshake-auth: a JWT without sub is admitted",
    ),
    (
        "clobber-same-user",
        "same-user-browsers: a second browser of one user replaces the first",
    ),
    (
        "takeover-unregister",
        "agent-takeover: a replaced agent's disconnect unregisters the agentId",
    ),
    (
        "no-agent-id",
        "event-fields: hub→agent messages lack agentId",
    ),
    (
        "foreign-client-id",
        "event-fields: typing reaches browsers with a clientId naming another browser",
    ),
    (
        "forward-malformed",
        "malformed-payloads: non-array parts are forwarded to the agent as is",
    ),
    (
        "exception-on-bad-payload",
        "not a flaw (an extension): bad messages are dropped and answered with a non-spec exception event; malformed-payloads says so",
    ),
    (
        "sync-timeout-concat",
        "http-sync-timeout: after streams, the timeout answers the snapshots concatenated",
    ),
    (
        "extension-events",
        "not a flaw (extensions are legal): a status event after welcome and a hub-info to agents; spec-events-only lists them",
    ),
    ("flood", "robustness: floods each browser after welcome"),
    (
        "crash-on-bad-message",
        "robustness: exits on a message that is not an object",
    ),
];

struct Config {
    jwt_secret: String,
    api_key: String,
    brk: Option<String>,
    sync_timeout: Duration,
}

#[derive(Default)]
struct Inner {
    /// agentId → the agent's socket.
    agents: HashMap<String, SocketRef>,
    /// agentId → browsers (clientId, socket).
    browsers: HashMap<String, Vec<(String, SocketRef)>>,
    /// Synthetic clientId of a waiting `/message/sync` → its answer.
    sync: HashMap<String, oneshot::Sender<Value>>,
    /// Stream texts seen for a waiting `/message/sync` (the `sync-timeout-concat` flaw).
    sync_streams: HashMap<String, String>,
    /// Waiting `/message/sync`s whose agent opened a turn (typing, no stream_end yet): a
    /// message sent in it is a note, "by definition not that answer".
    sync_turns: std::collections::HashSet<String>,
}

struct Hub {
    cfg: Config,
    inner: Mutex<Inner>,
}

type HubRef = Arc<Hub>;

impl Hub {
    fn broken(&self, mode: &str) -> bool {
        self.cfg.brk.as_deref() == Some(mode)
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who a socket is, set by the auth middleware.
#[derive(Clone)]
struct Identity {
    agent_id: String,
    client_id: String,
}

#[derive(Debug)]
struct AuthError(&'static str);
impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

fn now() -> u64 {
    bridgewire::util::now_ms() as u64
}

fn str_field<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn main() -> std::process::ExitCode {
    let mut listen = "127.0.0.1:3333".to_string();
    let mut jwt_secret = std::env::var("JWT_SECRET").unwrap_or_default();
    let mut api_key = std::env::var("BRIDLE_API_KEY").unwrap_or_default();
    let mut brk = std::env::var("BRIDLE_REF_BREAK")
        .ok()
        .filter(|s| !s.is_empty());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("bridle-ref-hub: {name} needs a value");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--listen" => listen = val("--listen"),
            "--jwt-secret" => jwt_secret = val("--jwt-secret"),
            "--api-key" => api_key = val("--api-key"),
            "--break" => brk = Some(val("--break")),
            "--list-breaks" => {
                for (m, what) in BREAKS {
                    println!("{m}\t{what}");
                }
                return std::process::ExitCode::SUCCESS;
            }
            "-h" | "--help" => {
                println!(
                    "bridle-ref-hub [--listen ADDR] [--jwt-secret S] [--api-key K] [--break MODE] [--list-breaks]"
                );
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("bridle-ref-hub: unknown argument {other:?}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    if let Some(b) = &brk
        && !BREAKS.iter().any(|(m, _)| m == b)
    {
        eprintln!("bridle-ref-hub: unknown break mode {b:?} (see --list-breaks)");
        return std::process::ExitCode::from(2);
    }
    if jwt_secret.is_empty() || api_key.is_empty() {
        eprintln!(
            "bridle-ref-hub: JWT_SECRET/--jwt-secret and BRIDLE_API_KEY/--api-key are required"
        );
        return std::process::ExitCode::from(2);
    }
    let sync_timeout = Duration::from_millis(
        std::env::var("BRIDLE_SYNC_TIMEOUT_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(120_000),
    );
    let hub = Arc::new(Hub {
        cfg: Config {
            jwt_secret,
            api_key,
            brk,
            sync_timeout,
        },
        inner: Mutex::new(Inner::default()),
    });
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bridle-ref-hub: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(serve(hub, &listen)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bridle-ref-hub: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn serve(hub: HubRef, listen: &str) -> anyhow::Result<()> {
    let (layer, io) = SocketIo::builder()
        .max_payload(1_000_000)
        .max_buffer_size(4096)
        .build_layer();

    let h = hub.clone();
    let client_auth = move |s: SocketRef, TryData(auth): TryData<Value>| {
        let h = h.clone();
        async move {
            let auth = auth.unwrap_or(Value::Null);
            let token = str_field(&auth, "token").ok_or(AuthError("missing token"))?;
            let agent_id = str_field(&auth, "agentId").ok_or(AuthError("missing agentId"))?;
            let client_id = match verify_jwt(&h.cfg.jwt_secret, token) {
                Some(c) => c.client_id(),
                None if h.broken("accept-any-token") => "anonymous".into(),
                None if h.broken("accept-no-sub")
                    && verify_jwt_claims(&h.cfg.jwt_secret, token).is_some() =>
                {
                    String::new()
                }
                None => return Err(AuthError("invalid token")),
            };
            s.extensions.insert(Identity {
                agent_id: agent_id.into(),
                client_id,
            });
            Ok(())
        }
    };
    let h = hub.clone();
    io.ns(
        CLIENT_NSP,
        (move |s: SocketRef| on_browser(h.clone(), s)).with(client_auth),
    );

    let h = hub.clone();
    let agent_auth = move |s: SocketRef, TryData(auth): TryData<Value>| {
        let h = h.clone();
        async move {
            let auth = auth.unwrap_or(Value::Null);
            let key = str_field(&auth, "apiKey").unwrap_or("");
            if key != h.cfg.api_key && !h.broken("accept-any-api-key") {
                return Err(AuthError("invalid apiKey"));
            }
            let agent_id = str_field(&auth, "agentId").ok_or(AuthError("missing agentId"))?;
            s.extensions.insert(Identity {
                agent_id: agent_id.into(),
                client_id: String::new(),
            });
            Ok(())
        }
    };
    let h = hub.clone();
    io.ns(
        AGENT_NSP,
        (move |s: SocketRef| on_agent(h.clone(), s)).with(agent_auth),
    );

    let app = Router::new()
        .route("/api/agent/health", get(health))
        .route("/api/agent/{agent_id}/health", get(agent_health))
        .route("/api/agent/{agent_id}/message", post(http_message))
        .route("/api/agent/{agent_id}/message/sync", post(http_sync))
        .with_state(hub.clone())
        .layer(layer);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("http://{}", listener.local_addr()?);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn on_browser(hub: HubRef, s: SocketRef) {
    let Some(id) = s.extensions.get::<Identity>() else {
        let _ = s.disconnect();
        return;
    };
    {
        let mut inner = hub.lock();
        let list = inner.browsers.entry(id.agent_id.clone()).or_default();
        if hub.broken("clobber-same-user") {
            list.retain(|(c, _)| *c != id.client_id);
        }
        list.push((id.client_id.clone(), s.clone()));
    }
    if !hub.broken("no-welcome") {
        let client_id = if hub.broken("welcome-random-id") {
            uuid::Uuid::new_v4().to_string()
        } else {
            id.client_id.clone()
        };
        let _ = s.emit("welcome", &json!({ "clientId": client_id }));
    }
    if hub.broken("extension-events") {
        let connected = hub.lock().agents.contains_key(&id.agent_id);
        let _ = s.emit("status", &json!({ "agentConnected": connected }));
    }
    if hub.broken("flood") {
        let s2 = s.clone();
        tokio::spawn(async move {
            for i in 0..100_000u32 {
                if s2
                    .emit("message", &json!({"type": "message", "text": i}))
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    if !s2.connected() {
                        break;
                    }
                }
            }
        });
    }

    let h = hub.clone();
    let ident = id.clone();
    // socketioxide spawns each handler's future, so order-sensitive work happens in the
    // closure body, which it calls synchronously in arrival order.
    s.on("message", move |s: SocketRef, Data(msg): Data<Value>| {
        browser_message(&h, &s, &ident, msg);
        std::future::ready(())
    });
    let h = hub.clone();
    s.on("ping", move |s: SocketRef| {
        if !h.broken("no-pong") {
            let _ = s.emit("pong", &json!({ "ts": now() }));
        }
        std::future::ready(())
    });
    let h = hub.clone();
    s.on_disconnect(move |s: SocketRef| {
        let h = h.clone();
        async move {
            let mut inner = h.lock();
            if let Some(list) = inner.browsers.get_mut(&id.agent_id) {
                if h.broken("clobber-same-user") {
                    list.retain(|(c, _)| *c != id.client_id);
                }
                list.retain(|(_, b)| b.id != s.id);
                if list.is_empty() {
                    inner.browsers.remove(&id.agent_id);
                }
            }
        }
    });
}

fn browser_message(hub: &Hub, s: &SocketRef, id: &Identity, msg: Value) {
    let bad_parts = msg.get("parts").is_some_and(|p| !p.is_array());
    if hub.broken("exception-on-bad-payload") && (!msg.is_object() || bad_parts) {
        let _ = s.emit(
            "exception",
            &json!({ "status": "error", "message": "Invalid payload" }),
        );
        return;
    }
    if !msg.is_object() {
        if hub.broken("crash-on-bad-message") {
            eprintln!("bridle-ref-hub: crashing on a bad message (break mode)");
            std::process::exit(3);
        }
        return;
    }
    let text = msg
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let parts = if hub.broken("drop-legacy-images") && msg.get("parts").is_none() {
        text_parts(&text)
    } else if hub.broken("forward-malformed") && bad_parts {
        msg["parts"].clone()
    } else {
        parts_of(&msg)
    };
    let agent = hub.lock().agents.get(&id.agent_id).cloned();
    let mut out = json!({
        "type": "message",
        "clientId": id.client_id,
        "agentId": id.agent_id,
        "text": text,
        "parts": parts,
        "messageId": uuid::Uuid::new_v4().to_string(),
    });
    if hub.broken("no-agent-id") {
        out.as_object_mut().map(|m| m.remove("agentId"));
    }
    let delivered = agent.is_some_and(|a| a.emit("message", &out).is_ok());
    if !delivered && !hub.broken("silent-no-agent") {
        let t = format!("{NOT_CONNECTED}. Please try again later.");
        let _ = s.emit(
            "message",
            &json!({
                "type": "message",
                "text": t,
                "parts": text_parts(&t),
                "messageId": uuid::Uuid::new_v4().to_string(),
                "ts": now(),
            }),
        );
    }
}

async fn on_agent(hub: HubRef, s: SocketRef) {
    let Some(id) = s.extensions.get::<Identity>() else {
        let _ = s.disconnect();
        return;
    };
    {
        let mut inner = hub.lock();
        let stale = hub.broken("stale-agent") && inner.agents.contains_key(&id.agent_id);
        if !stale {
            inner.agents.insert(id.agent_id.clone(), s.clone());
        }
    }
    if hub.broken("extension-events") {
        let _ = s.emit("hub-info", &json!({ "version": "ref" }));
    }
    let h = hub.clone();
    let agent_id = id.agent_id.clone();
    s.on("register", move |s: SocketRef| {
        let mut inner = h.lock();
        let stale =
            h.broken("stale-agent") && inner.agents.get(&agent_id).is_some_and(|a| a.id != s.id);
        if !stale {
            inner.agents.insert(agent_id.clone(), s);
        }
        std::future::ready(())
    });
    let h = hub.clone();
    s.on("ping", move |s: SocketRef| {
        if !h.broken("no-pong") {
            let _ = s.emit("pong", &json!({}));
        }
        std::future::ready(())
    });
    for event in ["message", "typing", "stream", "stream_end"] {
        let h = hub.clone();
        let agent_id = id.agent_id.clone();
        s.on(event, move |Data(data): Data<Value>| {
            relay(&h, &agent_id, event, data);
            std::future::ready(())
        });
    }
    let h = hub.clone();
    s.on_disconnect(move |s: SocketRef| {
        let h = h.clone();
        async move {
            if h.broken("stale-agent") {
                return;
            }
            let mut inner = h.lock();
            if h.broken("takeover-unregister")
                || inner.agents.get(&id.agent_id).is_some_and(|a| a.id == s.id)
            {
                inner.agents.remove(&id.agent_id);
            }
        }
    });
}

/// Per-(agent, client, messageId) last relayed text, for the `delta-stream` flaw.
static LAST_TEXT: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

fn relay(hub: &Hub, agent_id: &str, event: &'static str, data: Value) {
    let Some(client_id) = str_field(&data, "clientId").map(str::to_string) else {
        return;
    };
    let mut out = serde_json::Map::new();
    out.insert("type".into(), json!(event));
    if event != "typing" {
        let mut text = data
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if hub.broken("delta-stream") && (event == "stream" || event == "stream_end") {
            let key = format!(
                "{agent_id}\u{0}{client_id}\u{0}{}",
                str_field(&data, "messageId").unwrap_or("")
            );
            let mut g = LAST_TEXT.lock().unwrap_or_else(|p| p.into_inner());
            let map = g.get_or_insert_with(HashMap::new);
            let prev = map.insert(key, text.clone()).unwrap_or_default();
            if event == "stream" {
                text = text
                    .strip_prefix(prev.as_str())
                    .unwrap_or(&text)
                    .to_string();
            }
        }
        let parts = if hub.broken("delta-stream") {
            text_parts(&text)
        } else {
            parts_of(&data)
        };
        out.insert("text".into(), json!(text));
        out.insert("parts".into(), parts);
        out.insert(
            "messageId".into(),
            json!(str_field(&data, "messageId").unwrap_or("")),
        );
        if let Some(k) = data.get("kind")
            && !hub.broken("strip-kind")
        {
            out.insert("kind".into(), k.clone());
        }
    }
    out.insert(
        "ts".into(),
        data.get("ts").cloned().unwrap_or_else(|| json!(now())),
    );
    if event == "typing" && hub.broken("foreign-client-id") {
        out.insert("clientId".into(), json!(format!("{client_id}-other")));
    }
    let out = Value::Object(out);

    // A waiting `/message/sync`?
    let mut inner = hub.lock();
    if inner.sync.contains_key(&client_id) {
        match event {
            "typing" => {
                inner.sync_turns.insert(client_id.clone());
            }
            "stream_end" => {
                inner.sync_turns.remove(&client_id);
            }
            _ => {}
        }
    }
    let resolves = match event {
        "stream_end" => !hub.broken("sync-first-stream"),
        "stream" => hub.broken("sync-first-stream"),
        "message" => data.get("kind").is_none() && !inner.sync_turns.contains(&client_id),
        _ => false,
    };
    if event == "stream" && hub.broken("sync-timeout-concat") && inner.sync.contains_key(&client_id)
    {
        let t = out["text"].as_str().unwrap_or("").to_string();
        inner
            .sync_streams
            .entry(client_id.clone())
            .or_default()
            .push_str(&t);
    }
    if resolves && let Some(tx) = inner.sync.remove(&client_id) {
        inner.sync_turns.remove(&client_id);
        let _ = tx.send(out);
        return;
    }
    if event == "typing" && hub.broken("drop-typing") {
        return;
    }
    // The flaw routes by clientId only, across agents: it leaks to other agents' browsers of
    // the same user (agent-isolation) without also reaching other users (client-routing's).
    let targets: Vec<SocketRef> = if hub.broken("leak-agents") {
        inner
            .browsers
            .values()
            .flatten()
            .filter(|(c, _)| *c == client_id)
            .map(|(_, s)| s.clone())
            .collect()
    } else {
        inner
            .browsers
            .get(agent_id)
            .into_iter()
            .flatten()
            .filter(|(c, _)| hub.broken("broadcast-clients") || *c == client_id)
            .map(|(_, s)| s.clone())
            .collect()
    };
    drop(inner);
    for t in targets {
        let _ = t.emit(event, &out);
    }
}

async fn health(State(hub): State<HubRef>) -> Json<Value> {
    let inner = hub.lock();
    let mut browsers: usize = inner.browsers.values().map(Vec::len).sum();
    if hub.broken("health-miscount") {
        browsers += 1;
    }
    Json(json!({
        "ok": true,
        "agentConnected": !inner.agents.is_empty(),
        "browserClients": browsers,
    }))
}

async fn agent_health(State(hub): State<HubRef>, Path(agent_id): Path<String>) -> Json<Value> {
    let inner = hub.lock();
    let mut browsers = inner.browsers.get(&agent_id).map_or(0, Vec::len);
    if hub.broken("health-miscount") {
        browsers += 1;
    }
    Json(json!({
        "ok": true,
        "agentConnected": inner.agents.contains_key(&agent_id),
        "browserClients": browsers,
        "agentId": agent_id,
    }))
}

/// Sends an HTTP message to the agent under a synthetic clientId; false without an agent.
fn forward_http(hub: &Hub, agent_id: &str, client_id: &str, body: &Value) -> bool {
    let agent = hub.lock().agents.get(agent_id).cloned();
    let text = body.get("text").and_then(Value::as_str).unwrap_or("");
    agent.is_some_and(|a| {
        a.emit(
            "message",
            &json!({
                "type": "message",
                "clientId": client_id,
                "agentId": agent_id,
                "text": text,
                "parts": parts_of(body),
                "messageId": uuid::Uuid::new_v4().to_string(),
            }),
        )
        .is_ok()
    })
}

async fn http_message(
    State(hub): State<HubRef>,
    Path(agent_id): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    if !hub.broken("fire-and-forget-drop") {
        let client_id = format!("http-{}", uuid::Uuid::new_v4());
        forward_http(&hub, &agent_id, &client_id, &body);
    }
    Json(json!({ "ok": true }))
}

async fn http_sync(
    State(hub): State<HubRef>,
    Path(agent_id): Path<String>,
    Json(body): Json<Value>,
) -> axum::response::Response {
    let client_id = format!("http-{}", uuid::Uuid::new_v4());
    let (tx, rx) = oneshot::channel();
    hub.lock().sync.insert(client_id.clone(), tx);
    forward_http(&hub, &agent_id, &client_id, &body);
    let answer = tokio::time::timeout(hub.cfg.sync_timeout, rx).await;
    let streamed = {
        let mut inner = hub.lock();
        inner.sync.remove(&client_id);
        inner.sync_turns.remove(&client_id);
        inner.sync_streams.remove(&client_id)
    };
    match answer {
        Err(_) if streamed.is_some() => Json(json!({
            "text": streamed.unwrap_or_default(),
            "messageId": "",
            "ts": now(),
        }))
        .into_response(),
        Ok(Ok(v)) => Json(json!({
            "text": v.get("text").cloned().unwrap_or(json!("")),
            "messageId": v.get("messageId").cloned().unwrap_or(json!("")),
            "ts": now(),
        }))
        .into_response(),
        _ if hub.broken("sync-timeout-504") => (
            StatusCode::GATEWAY_TIMEOUT,
            Json(json!({"error": "timeout"})),
        )
            .into_response(),
        _ => Json(json!({
            "text": SYNC_TIMEOUT_TEXT,
            "messageId": "",
            "ts": now(),
        }))
        .into_response(),
    }
}

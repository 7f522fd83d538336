//! `check bridle hub`: bridgewire plays browsers (signing their JWTs) and agents (with the
//! apiKey) at once against a live hub and checks the spec's rules, one verdict each.
//!
//! Every rule runs under its own deadline and with its own agentIds (a random tag per run), so a
//! hung or broken hub costs one named verdict, never the run.

use super::rules::{self, id};
use super::transport::{ConnectError, Options, RecvError, Socket};
use super::{AGENT_NSP, CLIENT_NSP, NOT_CONNECTED, SYNC_TIMEOUT_TEXT, sign_jwt};
use crate::rule::Verdict;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// What the hub checker needs.
#[derive(Debug, Clone)]
pub struct HubCheck {
    pub url: String,
    pub jwt_secret: String,
    pub api_key: String,
    /// Bound on each expected event.
    pub wait: Duration,
    /// The hub's `/message/sync` timeout (the spec's 120 s unless configured).
    pub sync_timeout: Duration,
    /// Only these rule ids (all when empty).
    pub only: Vec<String>,
}

type R = Result<(), String>;

struct Ctx<'a> {
    c: &'a HubCheck,
    tag: String,
    http: reqwest::Client,
    opts: Options,
}

impl Ctx<'_> {
    fn agent_id(&self, name: &str) -> String {
        format!("{name}-{}", self.tag)
    }

    async fn browser_raw(&self, auth: Value) -> Result<Socket, ConnectError> {
        Socket::connect(&self.c.url, CLIENT_NSP, Some(auth), &self.opts).await
    }

    /// A browser with a valid JWT for `sub`, past its `welcome`.
    async fn browser(&self, sub: &str, roles: &[&str], agent_id: &str) -> Result<Socket, String> {
        let token = sign_jwt(&self.c.jwt_secret, sub, roles);
        let mut s = self
            .browser_raw(json!({ "token": token, "agentId": agent_id }))
            .await
            .map_err(|e| format!("browser {sub} could not connect: {e}"))?;
        match s.recv(self.c.wait).await {
            Ok(e) if e.name == "welcome" => Ok(s),
            Ok(e) => Err(format!(
                "browser {sub}: first event is {:?}, not welcome",
                e.name
            )),
            Err(RecvError::Timeout) => Err(format!(
                "browser {sub}: no welcome within {:?}",
                self.c.wait
            )),
            Err(e) => Err(format!("browser {sub}: {e} before welcome")),
        }
    }

    /// An agent that connected, sent `register` and is known to the hub.
    async fn agent(&self, agent_id: &str) -> Result<Socket, String> {
        let s = Socket::connect(
            &self.c.url,
            AGENT_NSP,
            Some(json!({ "apiKey": self.c.api_key, "agentId": agent_id })),
            &self.opts,
        )
        .await
        .map_err(|e| format!("agent {agent_id} could not connect: {e}"))?;
        s.emit("register", json!({}));
        self.settle(agent_id, true).await;
        Ok(s)
    }

    /// Waits (bounded) until the hub's per-agent health shows `connected`; falls back to a
    /// short pause when the health endpoint does not say.
    async fn settle(&self, agent_id: &str, connected: bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.get(&format!("/api/agent/{agent_id}/health")).await {
                Ok((_, v)) if v["agentConnected"] == json!(connected) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    return;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    async fn get(&self, path: &str) -> Result<(u16, Value), String> {
        let r = self
            .http
            .get(format!("{}{path}", self.c.url))
            .timeout(self.c.wait)
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        let status = r.status().as_u16();
        let body = r
            .json::<Value>()
            .await
            .map_err(|e| format!("GET {path}: body is not JSON: {e}"))?;
        Ok((status, body))
    }

    async fn post(&self, path: &str, body: Value, wait: Duration) -> Result<(u16, Value), String> {
        let r = self
            .http
            .post(format!("{}{path}", self.c.url))
            .json(&body)
            .timeout(wait)
            .send()
            .await
            .map_err(|e| format!("POST {path}: {e}"))?;
        let status = r.status().as_u16();
        let body = r
            .json::<Value>()
            .await
            .map_err(|e| format!("POST {path}: body is not JSON: {e}"))?;
        Ok((status, body))
    }
}

async fn expect(s: &mut Socket, name: &str, wait: Duration, who: &str) -> Result<Value, String> {
    match s.recv_named(name, wait).await {
        Ok(e) => Ok(e.data),
        Err(RecvError::Timeout) => Err(format!("{who}: no {name} within {wait:?}")),
        Err(e) => Err(format!("{who}: {e} while waiting for {name}")),
    }
}

/// Fails if `s` receives any event within `wait`.
async fn expect_silence(s: &mut Socket, wait: Duration, who: &str) -> R {
    match s.recv(wait).await {
        Ok(e) => Err(format!(
            "{who} received {:?} {} that was not theirs",
            e.name, e.data
        )),
        Err(_) => Ok(()),
    }
}

/// The next `n` events (bounded), names and data.
async fn take(
    s: &mut Socket,
    n: usize,
    wait: Duration,
    who: &str,
) -> Result<Vec<(String, Value)>, String> {
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    while out.len() < n {
        match s.recv_until(deadline).await {
            Ok(e) => out.push((e.name, e.data)),
            Err(e) => {
                return Err(format!(
                    "{who}: {e} after {} of {n} events: {:?}",
                    out.len(),
                    out.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>()
                ));
            }
        }
    }
    Ok(out)
}

fn text_frame(client_id: &str, text: &str, message_id: &str) -> Value {
    json!({ "clientId": client_id, "text": text, "parts": super::text_parts(text),
            "messageId": message_id, "ts": crate::util::now_ms() })
}

/// Runs the hub rules; verdicts in catalogue order.
pub async fn check_hub(c: &HubCheck) -> Vec<Verdict> {
    let ctx = Ctx {
        c,
        tag: uuid::Uuid::new_v4().simple().to_string()[..8].to_string(),
        http: reqwest::Client::new(),
        opts: Options {
            open_timeout: c.wait,
            ..Options::default()
        },
    };
    let mut out = Vec::new();
    for &rule in id::HUB {
        if !c.only.is_empty() && !c.only.iter().any(|o| o == rule) {
            continue;
        }
        let budget = match rule {
            id::HTTP_SYNC_TIMEOUT => c.sync_timeout + c.wait * 3,
            _ => c.wait * 6 + Duration::from_secs(5),
        };
        let fut = run_rule(&ctx, rule);
        let v = match tokio::time::timeout(budget, fut).await {
            Ok(Ok(())) => Verdict::pass(rule),
            Ok(Err(detail)) => Verdict::fail(rule, detail),
            Err(_) => Verdict::fail(rule, format!("timed out after {budget:?}")),
        };
        out.push(v);
    }
    out
}

async fn run_rule(ctx: &Ctx<'_>, rule: &str) -> R {
    match rule {
        id::HANDSHAKE_AUTH => handshake_auth(ctx).await,
        id::WELCOME => welcome(ctx).await,
        id::PING_PONG => ping_pong(ctx).await,
        id::AGENT_ISOLATION => isolation(ctx).await,
        id::CLIENT_ROUTING => routing(ctx).await,
        id::AGENT_NOT_CONNECTED => not_connected(ctx).await,
        id::LEGACY_PARTS => legacy_parts(ctx).await,
        id::STREAM_RELAY => stream_relay(ctx).await,
        id::STREAMING_REPLACE => streaming_replace(ctx).await,
        id::NOTES => notes(ctx).await,
        id::AGENT_RECONNECT => reconnect(ctx).await,
        id::HTTP_HEALTH => http_health(ctx).await,
        id::HTTP_MESSAGE => http_message(ctx).await,
        id::HTTP_SYNC => http_sync(ctx).await,
        id::HTTP_SYNC_TIMEOUT => http_sync_timeout(ctx).await,
        id::ROBUSTNESS => robustness(ctx).await,
        other => Err(format!("no check for {other}")),
    }
}

/// A handshake the spec says must fail: refused (CONNECT_ERROR), or admitted then disconnected
/// at once, and in no case any event delivered.
async fn refused(r: Result<Socket, ConnectError>, what: &str, wait: Duration) -> R {
    match r {
        Err(ConnectError::Rejected(_) | ConnectError::Disconnected | ConnectError::Closed(_)) => {
            Ok(())
        }
        Err(e) => Err(format!("{what}: unexpected handshake failure: {e}")),
        Ok(mut s) => match s.recv(wait.min(Duration::from_millis(1500))).await {
            Err(RecvError::Disconnected | RecvError::Closed(_)) => Ok(()),
            Ok(e) => Err(format!(
                "{what}: admitted and delivered {:?} {}",
                e.name, e.data
            )),
            Err(_) => Err(format!("{what}: admitted and not disconnected")),
        },
    }
}

async fn handshake_auth(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("auth");
    let w = ctx.c.wait;
    let good = sign_jwt(&ctx.c.jwt_secret, "auth-user", &[]);
    let forged = sign_jwt(&format!("{}-wrong", ctx.c.jwt_secret), "auth-user", &[]);
    refused(
        ctx.browser_raw(json!({ "agentId": a })).await,
        "browser without token",
        w,
    )
    .await?;
    refused(
        ctx.browser_raw(json!({ "token": forged, "agentId": a }))
            .await,
        "browser with a JWT signed by another secret",
        w,
    )
    .await?;
    refused(
        ctx.browser_raw(json!({ "token": "not.a.jwt", "agentId": a }))
            .await,
        "browser with a malformed token",
        w,
    )
    .await?;
    refused(
        ctx.browser_raw(json!({ "token": good })).await,
        "browser without agentId",
        w,
    )
    .await?;
    let agent = |auth: Value| Socket::connect(&ctx.c.url, AGENT_NSP, Some(auth), &ctx.opts);
    refused(
        agent(json!({ "apiKey": format!("{}-wrong", ctx.c.api_key), "agentId": a })).await,
        "agent with a wrong apiKey",
        w,
    )
    .await?;
    refused(
        agent(json!({ "agentId": a })).await,
        "agent without apiKey",
        w,
    )
    .await?;
    refused(
        agent(json!({ "apiKey": ctx.c.api_key })).await,
        "agent without agentId",
        w,
    )
    .await?;
    // The passing half: proper credentials are admitted.
    ctx.browser("auth-user", &[], &a).await?;
    ctx.agent(&a).await?;
    Ok(())
}

async fn welcome(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("welcome");
    for (sub, roles, want) in [
        ("user-42", &[][..], "user-42"),
        ("boss-1", &["USER", "ADMIN"][..], "admin"),
    ] {
        let token = sign_jwt(&ctx.c.jwt_secret, sub, roles);
        let mut s = ctx
            .browser_raw(json!({ "token": token, "agentId": a }))
            .await
            .map_err(|e| format!("browser {sub} could not connect: {e}"))?;
        let w = expect(&mut s, "welcome", ctx.c.wait, sub).await?;
        if w["clientId"] != want {
            return Err(format!(
                "welcome for sub {sub:?} roles {roles:?} is {w}, want clientId {want:?}"
            ));
        }
    }
    Ok(())
}

async fn ping_pong(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("ping");
    let mut b = ctx.browser("pinger", &[], &a).await?;
    b.emit("ping", json!({}));
    let p = expect(&mut b, "pong", ctx.c.wait, "browser").await?;
    if !p["ts"].is_number() {
        return Err(format!("browser pong {p} has no numeric ts"));
    }
    let mut ag = ctx.agent(&a).await?;
    ag.emit("ping", json!({}));
    expect(&mut ag, "pong", ctx.c.wait, "agent").await?;
    Ok(())
}

async fn isolation(ctx: &Ctx<'_>) -> R {
    let (a, b) = (ctx.agent_id("iso-a"), ctx.agent_id("iso-b"));
    let mut ag_a = ctx.agent(&a).await?;
    let mut ag_b = ctx.agent(&b).await?;
    // Same user on both agents: only agentId tells their traffic apart.
    let mut br_a = ctx.browser("same-user", &[], &a).await?;
    let mut br_b = ctx.browser("same-user", &[], &b).await?;
    br_a.emit("message", json!({ "text": "for a" }));
    let m = expect(&mut ag_a, "message", ctx.c.wait, "agent a").await?;
    if m["text"] != "for a" {
        return Err(format!("agent a got {m}"));
    }
    let cid = m["clientId"].as_str().unwrap_or("").to_string();
    let short = Duration::from_millis(400);
    expect_silence(&mut ag_b, short, "agent b").await?;
    ag_a.emit("message", text_frame(&cid, "reply from a", "iso-1"));
    let r = expect(&mut br_a, "message", ctx.c.wait, "browser of a").await?;
    if r["text"] != "reply from a" {
        return Err(format!("browser of a got {r}"));
    }
    expect_silence(
        &mut br_b,
        short,
        "browser of b (same clientId, other agent)",
    )
    .await
}

async fn routing(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("route");
    let mut ag = ctx.agent(&a).await?;
    let mut u1 = ctx.browser("route-u1", &[], &a).await?;
    let mut u2 = ctx.browser("route-u2", &[], &a).await?;
    let short = Duration::from_millis(400);
    for (who, from, other) in [("route-u1", &mut u1, &mut u2)] {
        from.emit("message", json!({ "text": "hi" }));
        let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
        if m["clientId"] != who {
            return Err(format!("agent got clientId {} for {who}", m["clientId"]));
        }
        ag.emit("message", text_frame(who, &format!("to {who}"), "r-1"));
        let r = expect(from, "message", ctx.c.wait, who).await?;
        if r["text"] != format!("to {who}") {
            return Err(format!("{who} got {r}"));
        }
        expect_silence(other, short, "the other browser").await?;
    }
    ag.emit("message", text_frame("route-u2", "to route-u2", "r-2"));
    let r = expect(&mut u2, "message", ctx.c.wait, "route-u2").await?;
    if r["text"] != "to route-u2" {
        return Err(format!("route-u2 got {r}"));
    }
    expect_silence(&mut u1, short, "route-u1").await
}

async fn not_connected(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("nobody");
    let mut b = ctx.browser("lonely", &[], &a).await?;
    b.emit("message", json!({ "text": "anyone?" }));
    let m = expect(&mut b, "message", ctx.c.wait, "browser").await?;
    let text = m["text"].as_str().unwrap_or("");
    if !text.starts_with(NOT_CONNECTED) {
        return Err(format!("reply {m} does not start with {NOT_CONNECTED:?}"));
    }
    if rules::parts_text(&m["parts"]).as_deref() != Some(text) {
        return Err(format!("reply {m}: parts do not mirror text"));
    }
    Ok(())
}

async fn legacy_parts(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("legacy");
    let mut ag = ctx.agent(&a).await?;
    let b = ctx.browser("legacy-user", &[], &a).await?;
    b.emit(
        "message",
        json!({ "text": "see", "images": [{ "base64": "QUJD", "mediaType": "image/png" }] }),
    );
    let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
    let want = json!([
        { "type": "text", "text": "see" },
        { "type": "image", "base64": "QUJD", "mediaType": "image/png" }
    ]);
    if m["parts"] != want {
        return Err(format!(
            "text + images became parts {}, want {want}",
            m["parts"]
        ));
    }
    for field in ["type", "clientId", "text", "messageId"] {
        if !m[field].is_string() {
            return Err(format!("hub→agent message {m} lacks {field}"));
        }
    }
    let rich = json!([{ "type": "file", "url": "https://x/y.pdf", "name": "y.pdf" }]);
    b.emit("message", json!({ "text": "doc", "parts": rich }));
    let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
    if m["parts"] != rich {
        return Err(format!("explicit parts changed in transit: {}", m["parts"]));
    }
    Ok(())
}

/// Agent streams a scripted turn to a browser; returns what the browser saw.
async fn scripted_turn(
    ctx: &Ctx<'_>,
    name: &str,
    frames: &[(&str, Value)],
) -> Result<Vec<(String, Value)>, String> {
    let a = ctx.agent_id(name);
    let mut ag = ctx.agent(&a).await?;
    let mut b = ctx.browser(&format!("{name}-user"), &[], &a).await?;
    b.emit("message", json!({ "text": "go" }));
    let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
    let cid = m["clientId"].as_str().unwrap_or("").to_string();
    for (event, data) in frames {
        let mut d = data.clone();
        d["clientId"] = json!(cid);
        ag.emit(event, d);
    }
    let seen = take(&mut b, frames.len(), ctx.c.wait, "browser").await?;
    Ok(seen)
}

fn stream_script(mid: &str) -> Vec<(&'static str, Value)> {
    let mut v = vec![("typing", json!({ "ts": crate::util::now_ms() }))];
    for t in ["Hello", "Hello, how", "Hello, how are you?"] {
        v.push(("stream", text_frame("", t, mid)));
    }
    v.push(("stream_end", text_frame("", "Hello, how are you?", mid)));
    v
}

async fn stream_relay(ctx: &Ctx<'_>) -> R {
    let script = stream_script("relay-1");
    let seen = scripted_turn(ctx, "relay", &script).await?;
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    if names != ["typing", "stream", "stream", "stream", "stream_end"] {
        return Err(format!(
            "browser saw {names:?}, want typing → stream ×3 → stream_end"
        ));
    }
    for (n, d) in &seen[1..] {
        if d["messageId"] != "relay-1" {
            return Err(format!(
                "{n} carries messageId {}, want relay-1",
                d["messageId"]
            ));
        }
    }
    Ok(())
}

async fn streaming_replace(ctx: &Ctx<'_>) -> R {
    let script = stream_script("replace-1");
    let seen = scripted_turn(ctx, "replace", &script).await?;
    rules::streaming_replace(&seen)
}

async fn notes(ctx: &Ctx<'_>) -> R {
    let mid = "notes-1";
    let mut thinking = text_frame("", "The user wants a story.", "n-1");
    thinking["kind"] = json!("thinking");
    let mut tool = text_frame("", "→ searchWeb", "n-2");
    tool["kind"] = json!("tool");
    let script = vec![
        ("typing", json!({ "ts": crate::util::now_ms() })),
        ("message", thinking),
        ("message", tool),
        ("message", text_frame("", "unmarked note", "n-3")),
        ("stream", text_frame("", "Once", mid)),
        ("stream_end", text_frame("", "Once", mid)),
    ];
    let seen = scripted_turn(ctx, "notes", &script).await?;
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    if names
        != [
            "typing",
            "message",
            "message",
            "message",
            "stream",
            "stream_end",
        ]
    {
        return Err(format!(
            "notes out of place between typing and stream_end: {names:?}"
        ));
    }
    if seen[1].1["kind"] != "thinking" || seen[2].1["kind"] != "tool" {
        return Err(format!(
            "kind not relayed: got {} and {}",
            seen[1].1["kind"], seen[2].1["kind"]
        ));
    }
    if seen[3].1.get("kind").is_some_and(|k| !k.is_null()) {
        return Err(format!(
            "an unmarked note gained kind {}",
            seen[3].1["kind"]
        ));
    }
    Ok(())
}

async fn reconnect(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("reconnect");
    let ag = ctx.agent(&a).await?;
    let mut b = ctx.browser("reconnect-user", &[], &a).await?;
    ag.engine.abort();
    drop(ag);
    ctx.settle(&a, false).await;
    b.emit("message", json!({ "text": "are you there?" }));
    let m = expect(&mut b, "message", ctx.c.wait, "browser (agent gone)").await?;
    if !m["text"].as_str().unwrap_or("").starts_with(NOT_CONNECTED) {
        return Err(format!("with the agent gone the browser got {m}"));
    }
    let mut ag = ctx.agent(&a).await?;
    b.emit("message", json!({ "text": "back?" }));
    let m = expect(&mut ag, "message", ctx.c.wait, "reconnected agent")
        .await
        .map_err(|e| format!("messages did not resume after register: {e}"))?;
    let cid = m["clientId"].as_str().unwrap_or("").to_string();
    ag.emit("message", text_frame(&cid, "yes", "rc-1"));
    let r = expect(&mut b, "message", ctx.c.wait, "browser").await?;
    if r["text"] != "yes" {
        return Err(format!("after reconnection the browser got {r}"));
    }
    Ok(())
}

async fn http_health(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("health");
    let _ag = ctx.agent(&a).await?;
    let _b1 = ctx.browser("health-1", &[], &a).await?;
    let _b2 = ctx.browser("health-2", &[], &a).await?;
    let (st, v) = ctx.get(&format!("/api/agent/{a}/health")).await?;
    let want = json!({ "ok": true, "agentConnected": true, "browserClients": 2, "agentId": a });
    if st != 200 || v != want {
        return Err(format!("/api/agent/{a}/health = {st} {v}, want 200 {want}"));
    }
    let none = ctx.agent_id("health-none");
    let (st, v) = ctx.get(&format!("/api/agent/{none}/health")).await?;
    let want = json!({ "ok": true, "agentConnected": false, "browserClients": 0, "agentId": none });
    if st != 200 || v != want {
        return Err(format!(
            "/api/agent/{none}/health = {st} {v}, want 200 {want}"
        ));
    }
    let (st, v) = ctx.get("/api/agent/health").await?;
    let count = v["browserClients"].as_u64();
    if st != 200
        || v["ok"] != true
        || v["agentConnected"] != true
        || count.is_none_or(|n| n < 2)
        || v.as_object().map_or(0, |m| m.len()) != 3
    {
        return Err(format!(
            "/api/agent/health = {st} {v}, want 200 {{ok: true, agentConnected: true, browserClients: ≥2}}"
        ));
    }
    Ok(())
}

async fn http_message(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("http");
    let mut ag = ctx.agent(&a).await?;
    let (st, v) = ctx
        .post(
            &format!("/api/agent/{a}/message"),
            json!({ "text": "over http" }),
            ctx.c.wait,
        )
        .await?;
    if st != 200 || v != json!({ "ok": true }) {
        return Err(format!(
            "fire-and-forget answered {st} {v}, want 200 {{ok: true}}"
        ));
    }
    let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
    if m["text"] != "over http" || m["parts"] != super::text_parts("over http") {
        return Err(format!("the agent got {m}"));
    }
    if !m["clientId"].is_string() || !m["messageId"].is_string() {
        return Err(format!(
            "the agent's message {m} lacks clientId or messageId"
        ));
    }
    Ok(())
}

async fn http_sync(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("sync");
    let mut ag = ctx.agent(&a).await?;
    let path = format!("/api/agent/{a}/message/sync");
    let req = ctx.post(&path, json!({ "text": "sync please" }), ctx.c.wait * 3);
    let answer = async {
        let m = expect(&mut ag, "message", ctx.c.wait, "agent").await?;
        let cid = m["clientId"].as_str().unwrap_or("").to_string();
        ag.emit(
            "typing",
            json!({ "clientId": cid, "ts": crate::util::now_ms() }),
        );
        for t in ["Final", "Final answer"] {
            ag.emit("stream", text_frame(&cid, t, "sync-1"));
        }
        ag.emit("stream_end", text_frame(&cid, "Final answer.", "sync-1"));
        Ok::<(), String>(())
    };
    let (resp, sent) = tokio::join!(req, answer);
    sent?;
    let (st, v) = resp?;
    if st != 200 || v["text"] != "Final answer." || !v["ts"].is_number() {
        return Err(format!(
            "/message/sync = {st} {v}, want 200 with the final text \"Final answer.\""
        ));
    }
    if v["messageId"] != "sync-1" {
        return Err(format!(
            "/message/sync messageId {}, want sync-1",
            v["messageId"]
        ));
    }
    Ok(())
}

async fn http_sync_timeout(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("sync-timeout");
    let _ag = ctx.agent(&a).await?; // connected, never answers
    let path = format!("/api/agent/{a}/message/sync");
    let (st, v) = ctx
        .post(
            &path,
            json!({ "text": "nobody answers" }),
            ctx.c.sync_timeout + ctx.c.wait * 2,
        )
        .await?;
    if st != 200 || v["text"] != SYNC_TIMEOUT_TEXT || v["messageId"] != "" || !v["ts"].is_number() {
        return Err(format!(
            "timeout answered {st} {v}, want 200 {{text: {SYNC_TIMEOUT_TEXT:?}, messageId: \"\", ts}}"
        ));
    }
    Ok(())
}

async fn robustness(ctx: &Ctx<'_>) -> R {
    let a = ctx.agent_id("robust");
    // No unsolicited traffic after welcome (a flooding hub fails here, bounded).
    let mut quiet = ctx.browser("robust-quiet", &[], &a).await?;
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut unsolicited = 0usize;
    while let Ok(_e) = quiet.recv_until(deadline).await {
        unsolicited += 1;
        if unsolicited >= 1000 {
            break;
        }
    }
    if unsolicited > 0 {
        return Err(format!(
            "the hub sent {unsolicited}{} unsolicited events after welcome (flood)",
            if unsolicited >= 1000 { "+" } else { "" }
        ));
    }
    drop(quiet);
    let bad: [(&str, Message); 5] = [
        (
            "an oversized frame",
            Message::text(format!(
                "42{CLIENT_NSP},[\"message\",{{\"text\":\"{}\"}}]",
                "x".repeat(2 << 20)
            )),
        ),
        (
            "invalid JSON in an event",
            Message::text(format!("42{CLIENT_NSP},[\"message\",{{")),
        ),
        ("a binary frame", Message::binary(vec![0u8, 159, 146, 150])),
        (
            "a message that is not an object",
            Message::text(format!("42{CLIENT_NSP},[\"message\",\"oops\"]")),
        ),
        ("an unknown packet type", Message::text("9")),
    ];
    for (what, msg) in bad {
        let b = ctx.browser("robust-bad", &[], &a).await?;
        b.engine.send_raw(msg);
        tokio::time::sleep(Duration::from_millis(100)).await;
        b.engine.abort(); // and an abrupt TCP close
        drop(b);
        alive(ctx, &a)
            .await
            .map_err(|e| format!("after {what} and an abrupt close: {e}"))?;
    }
    Ok(())
}

/// The hub still serves: a new browser gets welcome and health answers.
async fn alive(ctx: &Ctx<'_>, a: &str) -> R {
    ctx.browser("robust-alive", &[], a).await?;
    ctx.get("/api/agent/health").await?;
    Ok(())
}

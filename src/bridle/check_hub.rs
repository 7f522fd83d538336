//! `check bridle hub`: bridgewire plays browsers (signing their JWTs) and agents (with the
//! apiKey) at once against a live hub and checks the spec's rules, one verdict each.
//!
//! Every rule runs under its own deadline and with its own agentIds (a random tag per run), so a
//! hung or broken hub costs one named verdict, never the run. Every rule runs all of its
//! sub-checks and reports each ([`SubCheck`]); a step a sub-check depends on that could not be
//! taken (a browser the hub refused) makes the sub-check *skipped*, never passed.
//!
//! Tolerance of extensions: every harness peer receives through a [`Peer`], which hands rules
//! only the events the spec lists for that side and tallies every other event by name. Rules
//! look for what they judge by name and collect until the awaited event or a bound, never a
//! fixed count; the tally is judged once, by the SHOULD rule `spec-events-only`, which lists
//! extensions (new names: the spec does not forbid them) and fails only spec names misused.

use super::rules::{self, id};
use super::transport::{ConnectError, Event, FrameMeter, Options, RecvError, Socket};
use super::wire::SioPacket;
use super::{AGENT_NSP, CLIENT_NSP, NOT_CONNECTED, SYNC_TIMEOUT_TEXT, sign_claims, sign_jwt};
use crate::rule::{SubCheck, Verdict};
use crate::util::error_chain;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
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
    /// The hub was started by this run: before the first rule no agent or browser is connected
    /// (a hub given by URL may serve others).
    pub own_hub: bool,
    /// Where verdicts go as they are reached (for the partial report of an interrupted run).
    pub live: Option<crate::report::live::Live>,
}

/// The events the spec lists from the hub to a browser (`Events: Hub -> Browser`).
pub const TO_BROWSER: &[&str] = &[
    "welcome",
    "message",
    "typing",
    "stream",
    "stream_end",
    "pong",
];
/// The events the spec lists from the hub to an agent (`Events: Hub -> Agent`).
pub const TO_AGENT: &[&str] = &["message", "pong"];

/// Why a `ts` is not epoch milliseconds, now: [`rules::ts_not_ms`].
fn ts_not_ms(ts: &Value, agent_ts: Option<i64>) -> Option<String> {
    rules::ts_not_ms(ts, agent_ts, crate::util::now_ms() as f64)
}

/// Distinct non-spec event names tallied per run; later new names count under
/// [`OTHER_NAMES`] (a hub inventing a name per frame cannot grow the tally).
const MAX_EXTENSION_NAMES: usize = 1024;
const OTHER_NAMES: &str = "(other names past the first 1024)";

/// Non-spec events a peer keeps for the rules that judge replies; later ones are only tallied.
const MAX_EXTRAS: usize = 10_000;

/// Events the spec does not list, by side and name, over the whole run.
#[derive(Default)]
struct Tally {
    extensions: RefCell<BTreeMap<(&'static str, String), usize>>,
    spec_events: RefCell<usize>,
}

/// One harness connection (a browser or an agent) seen through the spec's event list.
struct Peer<'a> {
    sock: Socket,
    side: &'static str,
    spec: &'static [&'static str],
    tally: &'a Tally,
    /// The non-spec events this peer received, in order (for rules that judge replies).
    extras: Vec<(String, Value)>,
    /// A browser's own welcome, once received. A welcome after it is the hub greeting this
    /// connection once more, not traffic, when it is the same welcome or one naming the
    /// browser's own clientId (and agentId, when it names one): every reader passes over it
    /// ([`Peer::own_welcome`]). The spec sends welcome on connection and forbids no repeat;
    /// a first welcome naming someone else is the welcome rule's fault alone.
    welcome: Option<Value>,
    /// The clientId the spec gives this browser and the agentId it connected for.
    identity: Option<(String, String)>,
}

impl<'a> Peer<'a> {
    fn browser(sock: Socket, tally: &'a Tally) -> Peer<'a> {
        Peer {
            sock,
            side: "hub→browser",
            spec: TO_BROWSER,
            tally,
            extras: Vec::new(),
            welcome: None,
            identity: None,
        }
    }
    fn agent(sock: Socket, tally: &'a Tally) -> Peer<'a> {
        Peer {
            sock,
            side: "hub→agent",
            spec: TO_AGENT,
            tally,
            extras: Vec::new(),
            welcome: None,
            identity: None,
        }
    }

    /// Whether `e` is this browser greeted again (see [`Peer::welcome`]).
    fn own_welcome(&self, e: &Event) -> bool {
        let Some(first) = &self.welcome else {
            return false;
        };
        e.name == "welcome"
            && (e.data == *first
                || self.identity.as_ref().is_some_and(|(client, agent)| {
                    e.data["clientId"] == json!(client)
                        && e.data.get("agentId").is_none_or(|a| a == &json!(agent))
                }))
    }

    fn emit(&self, name: &str, data: Value) -> bool {
        self.sock.emit(name, data)
    }

    /// The next spec event before `deadline`; non-spec events are tallied and skipped.
    async fn recv_until(&mut self, deadline: Instant) -> Result<Event, RecvError> {
        loop {
            let e = self.sock.recv_until(deadline).await?;
            if self.own_welcome(&e) {
                continue;
            }
            if self.spec.contains(&e.name.as_str()) {
                *self.tally.spec_events.borrow_mut() += 1;
                return Ok(e);
            }
            {
                let mut ext = self.tally.extensions.borrow_mut();
                let key = if ext.len() < MAX_EXTENSION_NAMES
                    || ext.contains_key(&(self.side, e.name.clone()))
                {
                    (self.side, e.name.clone())
                } else {
                    (self.side, OTHER_NAMES.to_string())
                };
                *ext.entry(key).or_default() += 1;
            }
            if self.extras.len() < MAX_EXTRAS {
                self.extras.push((e.name, e.data));
            }
        }
    }

    async fn recv(&mut self, wait: Duration) -> Result<Event, RecvError> {
        self.recv_until(Instant::now() + wait).await
    }

    /// The next event named `name` within `wait`, skipping others.
    async fn expect(&mut self, name: &str, wait: Duration, who: &str) -> Result<Value, String> {
        self.next_named(name, Instant::now() + wait)
            .await
            .map_err(|e| match e {
                RecvError::Timeout => format!("{who}: no {name} within {wait:?}"),
                e => format!("{who}: {e} while waiting for {name}"),
            })
    }

    /// The next `message` within `wait` whose text is none of `earlier`: a message with an
    /// earlier step's text is that step's forwarded again (event-fields judges a duplicate), so
    /// it is passed over rather than taken for this step's evidence.
    async fn forwarded(&mut self, wait: Duration, earlier: &[&str]) -> Result<Value, String> {
        let deadline = Instant::now() + wait;
        loop {
            match self.next_named("message", deadline).await {
                Ok(m) if m["text"].as_str().is_some_and(|t| earlier.contains(&t)) => continue,
                Ok(m) => return Ok(m),
                Err(RecvError::Timeout) => {
                    return Err(format!("agent: no message within {wait:?}"));
                }
                Err(e) => return Err(format!("agent: {e} while waiting for message")),
            }
        }
    }

    /// The data of the next spec event named `name` before `deadline`, others skipped.
    async fn next_named(&mut self, name: &str, deadline: Instant) -> Result<Value, RecvError> {
        loop {
            let e = self.recv_until(deadline).await?;
            if e.name == name {
                return Ok(e.data);
            }
        }
    }

    /// The spec events up to and including the first named `until`, within `wait`. The flag
    /// says whether `until` arrived.
    async fn collect_until(&mut self, until: &str, wait: Duration) -> (Vec<(String, Value)>, bool) {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        while let Ok(e) = self.recv_until(deadline).await {
            let done = e.name == until;
            out.push((e.name, e.data));
            if done {
                return (out, true);
            }
        }
        (out, false)
    }

    /// `Ok` when no spec event arrives within `wait`; the event otherwise. A browser's own
    /// welcome repeated is not an event here ([`Peer::own_welcome`]).
    async fn silent(&mut self, wait: Duration) -> Result<(), Event> {
        self.recv_until(Instant::now() + wait)
            .await
            .map_or(Ok(()), Err)
    }

    fn disconnect(&self) {
        self.sock.disconnect();
        self.sock.engine.abort();
    }
}

struct Ctx<'a> {
    c: &'a HubCheck,
    tag: String,
    http: reqwest::Client,
    opts: Options,
    tally: Tally,
    /// The `no flood after welcome` sub-check, once measured.
    flood: RefCell<Option<SubCheck>>,
    /// A routing probe failed ([`Ctx::probe_routing`]).
    probe_failed: std::cell::Cell<bool>,
    /// What [`misrouting`] saw, once measured.
    misroute: RefCell<Option<Option<String>>>,
    /// What [`own_client_ids`] saw, once measured.
    client_ids: RefCell<Option<Option<String>>>,
    /// What [`unaddressed`] saw, once measured.
    unaddressed: RefCell<Option<Option<String>>>,
    /// The largest frame this run's spec traffic sent (every connection's [`Options`]).
    meter: std::sync::Arc<FrameMeter>,
    /// What [`frame_capacity`] saw, once measured.
    frames: RefCell<Option<Result<FrameCapacity, String>>>,
    /// The overall health before any rule connected anything, on a hub this run started.
    idle_health: Option<Result<(u16, Value), String>>,
}

/// A rule's sub-checks, kept outside the rule's future so a rule that runs out of time still
/// reports the ones it ran.
type Subs = RefCell<Vec<SubCheck>>;

fn push(subs: &Subs, c: SubCheck) {
    subs.borrow_mut().push(c);
}

/// Pass or fail from a `Result`.
fn judged(name: &str, r: Result<String, String>) -> SubCheck {
    match r {
        Ok(e) => SubCheck::pass(name, e),
        Err(e) => SubCheck::fail(name, e),
    }
}

/// Whether the HTTP answer `got` is an object carrying every field of `want` with `want`'s
/// value. Other fields are extensions: the spec gives each answer's shape as a TypeScript
/// interface (`IBridleHealthData`, …), which an object with more fields still satisfies, and
/// forbids none, so they are listed, not judged. `Ok`: the text naming them ("" when none).
fn spec_fields(got: &Value, want: &Value) -> Result<String, ()> {
    let (Some(got), Some(want)) = (got.as_object(), want.as_object()) else {
        return Err(());
    };
    if want.iter().any(|(k, w)| got.get(k) != Some(w)) {
        return Err(());
    }
    let extras: Vec<&str> = got
        .keys()
        .filter(|k| !want.contains_key(*k))
        .map(String::as_str)
        .collect();
    Ok(extensions_note(&extras))
}

/// A passing sub-check's tail naming what the spec does not list and does not forbid (events,
/// fields), or "" when there is none.
fn extensions_note(extensions: &[impl AsRef<str>]) -> String {
    if extensions.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = extensions.iter().map(AsRef::as_ref).collect();
    format!(
        "; extensions, which the spec does not forbid (not judged): {}",
        names.join(", ")
    )
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

impl<'a> Ctx<'a> {
    fn agent_id(&self, name: &str) -> String {
        format!("{name}-{}", self.tag)
    }

    async fn browser_raw(&self, auth: Value) -> Result<Socket, ConnectError> {
        Socket::connect(&self.c.url, CLIENT_NSP, Some(auth), &self.opts).await
    }

    async fn agent_raw(&self, auth: Value) -> Result<Socket, ConnectError> {
        Socket::connect(&self.c.url, AGENT_NSP, Some(auth), &self.opts).await
    }

    /// A browser with a valid JWT for `sub`, past its `welcome` (and the welcome's data).
    async fn browser_welcomed(
        &self,
        sub: &str,
        roles: &[&str],
        agent_id: &str,
    ) -> Result<(Peer<'_>, Value), String> {
        let token = sign_jwt(&self.c.jwt_secret, sub, roles);
        let s = self
            .browser_raw(json!({ "token": token, "agentId": agent_id }))
            .await
            .map_err(|e| format!("browser {sub} could not connect: {e}"))?;
        let mut p = Peer::browser(s, &self.tally);
        let client = super::Claims {
            sub: sub.to_string(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            exp: None,
        }
        .client_id();
        p.identity = Some((client, agent_id.to_string()));
        match p.recv(self.c.wait).await {
            Ok(e) if e.name == "welcome" => {
                p.welcome = Some(e.data.clone());
                Ok((p, e.data))
            }
            Ok(e) => Err(format!(
                "browser {sub}: first spec event is {:?}, not welcome",
                e.name
            )),
            Err(RecvError::Timeout) => Err(format!(
                "browser {sub}: no welcome within {:?}",
                self.c.wait
            )),
            Err(e) => Err(format!("browser {sub}: {e} before welcome")),
        }
    }

    /// A welcomed browser for a rule's setup. When there is none, the error names the rule
    /// that carries the fault (a refused valid JWT: handshake-auth; no welcome: welcome), so
    /// the rule skipped for it says whose fault it is.
    async fn browser(&self, sub: &str, agent_id: &str) -> Result<Peer<'_>, String> {
        self.browser_welcomed(sub, &[], agent_id)
            .await
            .map(|(p, _)| p)
            .map_err(|e| {
                let owner = if e.contains(" could not connect: ") {
                    id::HANDSHAKE_AUTH
                } else {
                    id::WELCOME
                };
                format!("{e} ({owner} carries that fault)")
            })
    }

    /// An agent that connected and sent `register`, once the hub's health shows it connected
    /// (or after a bounded pause when the health does not say), and whether the health did.
    async fn agent_registered(&self, agent_id: &str) -> Result<(Peer<'_>, bool), String> {
        let s = self
            .agent_raw(json!({ "apiKey": self.c.api_key, "agentId": agent_id }))
            .await
            .map_err(|e| format!("agent {agent_id} could not connect: {e}"))?;
        s.emit("register", json!({}));
        let confirmed = self.settle(agent_id, true).await;
        Ok((Peer::agent(s, &self.tally), confirmed))
    }

    /// An agent the hub routes to. When the hub's health did not show it connected (a hub
    /// that never registers agents, or a health endpoint that does not say), a probe browser
    /// sends it one message: an agent that does not get it is a setup failure naming
    /// client-routing, which judges that fault (one fault, one verdict: the rules that need a
    /// routed agent are skipped naming it instead of each failing its own way). A hub whose
    /// health does say is not probed, so its rules see no extra browser or message.
    async fn agent(&self, agent_id: &str) -> Result<Peer<'_>, String> {
        let (mut p, confirmed) = self.agent_registered(agent_id).await?;
        if !confirmed {
            self.probe_routing(agent_id, &mut p).await?;
        }
        Ok(p)
    }

    /// An agent for client-routing itself: not probed, since routing is what it judges.
    async fn agent_unprobed(&self, agent_id: &str) -> Result<Peer<'_>, String> {
        Ok(self.agent_registered(agent_id).await?.0)
    }

    /// One message from a probe browser must reach `ag` with the browser's clientId. The error
    /// names the rule that carries the fault.
    async fn probe_routing(&self, agent_id: &str, ag: &mut Peer<'_>) -> Result<(), String> {
        let sub = format!("routing-probe-{agent_id}");
        let mut b = self.browser(&sub, agent_id).await?;
        b.emit("message", json!({ "text": "bridgewire routing probe" }));
        // After one probe has failed, the hub has shown what it does: later ones wait less.
        let wait = if self.probe_failed.get() {
            self.short()
        } else {
            self.c.wait
        };
        let got = ag.next_named("message", Instant::now() + wait).await;
        // Drain what the probe browser was sent (the reply `Agent is not connected`, if any),
        // then leave; the rule starts with the browsers it makes.
        let _ = b.silent(Duration::from_millis(20)).await;
        b.disconnect();
        self.settle_browsers(agent_id, 0).await;
        let why = match got {
            Ok(m) if m["clientId"] == json!(sub) => return Ok(()),
            Ok(m) => format!(
                "the probe message reached it with clientId {}, not {sub:?}",
                m["clientId"]
            ),
            Err(RecvError::Timeout) => "a probe browser's message did not reach it".to_string(),
            Err(e) => format!("a probe browser's message did not reach it (the agent: {e})"),
        };
        self.probe_failed.set(true);
        Err(format!(
            "agent {agent_id} connected and sent register, the hub's health did not show it connected, and {why} ({} carries that fault)",
            id::CLIENT_ROUTING
        ))
    }

    /// Waits (bounded) until the hub's per-agent health shows `connected`, and says whether it
    /// did (a short pause either way). After a failed routing probe the wait is short, since
    /// the hub has shown it does not register agents.
    async fn settle(&self, agent_id: &str, connected: bool) -> bool {
        let bound = if self.probe_failed.get() {
            self.short()
        } else {
            Duration::from_secs(2)
        };
        let shown = self
            .health_shows(agent_id, "agentConnected", json!(connected), bound)
            .await;
        let pause = if shown { 20 } else { 200 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        shown
    }

    /// Waits (bounded) until the per-agent browser count is `n`.
    async fn settle_browsers(&self, agent_id: &str, n: u64) {
        self.health_shows(agent_id, "browserClients", json!(n), Duration::from_secs(2))
            .await;
    }

    /// Polls the hub's per-agent health until its `field` is `want`, within `bound`; whether
    /// it was. A health that does not answer 2xx with `field` is not waited on.
    async fn health_shows(
        &self,
        agent_id: &str,
        field: &str,
        want: Value,
        bound: Duration,
    ) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            match self.get(&format!("/api/agent/{agent_id}/health")).await {
                Ok((st, v)) if (200..300).contains(&st) && v.get(field).is_some() => {
                    if v[field] == want {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await
                }
                _ => break,
            }
        }
        false
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

    fn short(&self) -> Duration {
        (self.c.wait / 5).clamp(Duration::from_millis(300), Duration::from_millis(800))
    }
}

/// The messageId the harness's agent sends for the message it calls `label`: a UUID v4, as
/// the spec's messages carry ("UUID v4 for this message"), so a hub that checks or replaces
/// ids that are not is never judged on input the spec does not allow. The same label gives the
/// same id within a run, so a rule can say which id it wants back.
fn agent_message_id(label: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut bytes = [0u8; 16];
    for (half, salt) in bytes.chunks_mut(8).zip([0x9e37_79b9_u64, 0x7f4a_7c15]) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, label).hash(&mut h);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// An agent frame whose messageId is [`agent_message_id`] of `label`.
fn text_frame(client_id: &str, text: &str, label: &str) -> Value {
    json!({ "clientId": client_id, "text": text, "parts": super::text_parts(text),
            "messageId": agent_message_id(label), "ts": crate::util::now_ms() })
}

/// Runs the hub rules; verdicts in catalogue order.
pub async fn check_hub(c: &HubCheck) -> Vec<Verdict> {
    check_hub_run(c).await.verdicts
}

/// The verdicts of a run, and why it could not set up, if it could not.
pub struct HubRun {
    pub verdicts: Vec<Verdict>,
    /// The hub could not be reached at all: every verdict is not run naming this.
    pub setup_failed: Option<String>,
}

/// The selected hub rules, each not run with every sub-check listed as not run naming `why`
/// (the hub did not start, or cannot be reached).
pub fn setup_failed(only: &[String], why: &str) -> Vec<Verdict> {
    id::HUB
        .iter()
        .filter(|r| only.is_empty() || only.iter().any(|o| o == *r))
        .map(|r| rules::not_run_with_subchecks(rules::HUB_SUBCHECKS, r, why))
        .collect()
}

/// [`check_hub`], saying whether the hub could be reached at all.
pub async fn check_hub_run(c: &HubCheck) -> HubRun {
    let meter = std::sync::Arc::new(FrameMeter::default());
    let mut ctx = Ctx {
        c,
        tag: uuid::Uuid::new_v4().simple().to_string()[..8].to_string(),
        http: reqwest::Client::new(),
        opts: Options {
            open_timeout: c.wait,
            meter: Some(meter.clone()),
            ..Options::default()
        },
        meter,
        frames: RefCell::new(None),
        tally: Tally::default(),
        flood: RefCell::new(None),
        probe_failed: std::cell::Cell::new(false),
        misroute: RefCell::new(None),
        client_ids: RefCell::new(None),
        unaddressed: RefCell::new(None),
        idle_health: None,
    };
    let mut out = crate::report::live::VerdictLog::new(c.live.clone());
    // A hub nobody answers for is a setup failure, not the hub's verdicts: every rule is not
    // run naming it (one cause, said once per rule, every sub-check listed).
    if let Err(why) = reachable(&ctx).await {
        let why = format!("cannot reach the hub at {} ({why})", c.url);
        for v in setup_failed(&c.only, &why) {
            out.push(v);
        }
        return HubRun {
            verdicts: out.into_vec(),
            setup_failed: Some(why),
        };
    }
    // A hub this run started serves nobody yet: what its overall health says now is the
    // idle state http-health judges ("whether any agent is connected").
    let selected = |r: &str| c.only.is_empty() || c.only.iter().any(|o| o == r);
    if c.own_hub && selected(id::HTTP_HEALTH) {
        ctx.idle_health = Some(ctx.get("/api/agent/health").await);
    }
    let ctx = ctx;
    // Where the hub stopped serving, if it did: (the rule it stopped during, how it was seen).
    // Keeping on serving is robustness's fact: robustness fails naming it and every later rule
    // is skipped naming robustness (one fault, one verdict, not a column of refused connects).
    let mut stopped: Option<(&str, String)> = None;
    for &rule in id::HUB {
        if !selected(rule) {
            continue;
        }
        if let Some((during, why)) = &stopped {
            let cause = format!("the hub stopped serving during {during} ({why})");
            let unrun = format!("not judged: {cause}");
            out.push(if rule == id::ROBUSTNESS {
                let mut subs = vec![SubCheck::fail("keeps serving", cause.clone())];
                rules::list_unrun(rules::HUB_SUBCHECKS, rule, &mut subs, &unrun);
                Verdict::fail(rule, cause).with_subchecks(subs)
            } else {
                let mut subs = Vec::new();
                rules::list_unrun(rules::HUB_SUBCHECKS, rule, &mut subs, &unrun);
                Verdict::skipped(
                    rule,
                    format!("{cause}: not judged; {} carries that fault", id::ROBUSTNESS),
                )
                .with_subchecks(subs)
            });
            continue;
        }
        let budget = match rule {
            id::HTTP_SYNC_TIMEOUT => c.sync_timeout + c.wait * 4,
            // Three requests, each waited on for up to three waits.
            id::HTTP_SYNC => c.wait * 11 + Duration::from_secs(5),
            id::HANDSHAKE_AUTH | id::ROBUSTNESS | id::MALFORMED_PAYLOADS => {
                c.wait * 14 + Duration::from_secs(10)
            }
            _ => c.wait * 8 + Duration::from_secs(5),
        };
        let subs: Subs = RefCell::new(Vec::new());
        let fut = run_rule(&ctx, rule, &subs);
        let timed_out = tokio::time::timeout(budget, fut).await.is_err();
        let mut subs = subs.into_inner();
        if timed_out {
            subs.push(SubCheck::fail(
                "deadline",
                format!("the rule timed out after {budget:?}; later sub-checks did not run"),
            ));
            let why = format!("the rule timed out after {budget:?} before it");
            rules::list_unrun(rules::HUB_SUBCHECKS, rule, &mut subs, &why);
        }
        // A setup step that failed ends the rule: what it did not get to judge is listed.
        if let Some(why) = subs
            .iter()
            .find(|c| c.name == "setup" && c.status == crate::rule::Status::Skipped)
            .map(|c| format!("the rule's setup failed: {}", c.evidence))
        {
            rules::list_unrun(rules::HUB_SUBCHECKS, rule, &mut subs, &why);
        }
        // A rule passes only on evidence for all of it: a sub-check that could not be seen
        // (skipped) makes the rule skipped, naming it, even when the others passed.
        let mut v = Verdict::from_all_subchecks(rule, subs);
        if rule == id::SPEC_EVENTS_ONLY && v.status == crate::rule::Status::Pass {
            // Information, not a warning: the extensions seen, by side.
            v.detail = v
                .subchecks
                .iter()
                .filter_map(|c| {
                    let (_, ext) = c.evidence.split_once("; extensions")?;
                    Some(format!("{}: extensions{ext}", c.name))
                })
                .collect::<Vec<_>>()
                .join("; ");
        }
        // A flood-sensitive rule (or sub-check) that fell short: when the hub floods browsers,
        // the flood hid its evidence (one fault, one verdict: robustness's).
        let short_of_pass = |c: &SubCheck| c.status != crate::rule::Status::Pass;
        if v.status != crate::rule::Status::Pass
            && (FLOOD_SENSITIVE.contains(&rule)
                || v.subchecks
                    .iter()
                    .any(|c| short_of_pass(c) && flood_sensitive_subcheck(rule, &c.name)))
        {
            let flood = flood_after_welcome(&ctx).await;
            if flood.status == crate::rule::Status::Fail {
                v = flooded(rule, v, &flood);
            }
        }
        // A hub that closes connections on frames this run's spec traffic needs (an ADMIN
        // browser's handshake, a long accumulation) leaves rules with closed connections and
        // answers that never came: robustness's fault, seen by a probe of frame sizes.
        // A refusal seen as a closed connection is none on such a hub, when the CONNECT was
        // that large.
        if rule != id::ROBUSTNESS
            && v.subchecks.iter().any(|c| frame_explains(c, 0))
            && let Ok(f) = frame_capacity(&ctx).await
            && let Some(fault) = f.fault(&ctx.meter.largest())
        {
            v = carried_by(rule, v, id::ROBUSTNESS, &fault, |c| {
                frame_explains(c, f.kept)
            });
        }
        // What follows from a fault another rule judges is that rule's (one fault, one
        // verdict), seen by a probe: clientIds the hub makes up instead of the token's sub
        // (welcome's), which leave browsers addressed by their sub waiting; answers sent to
        // another browser than the one they are addressed to (client-routing's).
        let failed_on = |v: &Verdict, explains: fn(&str) -> bool| {
            v.status == crate::rule::Status::Fail
                && v.subchecks
                    .iter()
                    .any(|c| c.status == crate::rule::Status::Fail && explains(&c.evidence))
        };
        // The routed rules and client-routing address browsers by the clientId their token's
        // sub gives them.
        if (rule == id::CLIENT_ROUTING || ROUTED.contains(&rule))
            && failed_on(&v, client_id_shortfall)
            && let Some(seen) = own_client_ids(&ctx).await
        {
            v = explained(rule, v, id::WELCOME, &seen, client_id_shortfall);
        }
        if ROUTED.contains(&rule)
            && failed_on(&v, nothing_arrived)
            && let Some(seen) = misrouting(&ctx).await
        {
            v = explained(rule, v, id::CLIENT_ROUTING, &seen, nothing_arrived);
        }
        // Browser messages that reach the agent without the sender's clientId leave it nothing
        // to address its answers to (client-routing's "the agent gets the sender's clientId").
        // A rule skipped for an answer that never came (naming the rule that relays it) is
        // explained too: the answer was never addressed.
        let short_on = |v: &Verdict, explains: fn(&str) -> bool| {
            v.status != crate::rule::Status::Pass
                && v.subchecks
                    .iter()
                    .any(|c| c.status != crate::rule::Status::Pass && explains(&c.evidence))
        };
        if ADDRESSED.contains(&rule)
            && short_on(&v, unaddressed_shortfall)
            && let Some(seen) = unaddressed(&ctx).await
        {
            v = explained(rule, v, id::CLIENT_ROUTING, &seen, unaddressed_shortfall);
        }
        if let Err(why) = serving(&ctx).await {
            // What this rule could not see because the hub went away is robustness's fault;
            // a failure it found is kept (it may be its own). Robustness judges its own.
            if v.status != crate::rule::Status::Fail && rule != id::ROBUSTNESS {
                let subs = std::mem::take(&mut v.subchecks);
                v = Verdict::skipped(
                    rule,
                    format!(
                        "the hub stopped serving during this rule ({why}); {} carries that fault",
                        id::ROBUSTNESS
                    ),
                )
                .with_subchecks(subs);
            }
            stopped = Some((rule, why));
        }
        out.push(v);
    }
    HubRun {
        verdicts: out.into_vec(),
        setup_failed: None,
    }
}

/// Whether the hub answers HTTP (any status) within the wait: a hub that just printed its
/// address gets that long to listen.
/// Whether anything accepts a TCP connection at the hub's address (retried within the wait).
/// Only a connection is asked for: a hub that accepts and then answers garbage is reachable,
/// and its rules fail naming what it answered (a hub speaking random bytes fails, it is not
/// "not run").
async fn reachable(ctx: &Ctx<'_>) -> Result<(), String> {
    let url = reqwest::Url::parse(&ctx.c.url).map_err(|e| format!("not a URL: {e}"))?;
    let host = url.host_str().ok_or("the URL names no host")?.to_string();
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url.port_or_known_default().ok_or("the URL names no port")?;
    let deadline = Instant::now() + ctx.c.wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = tokio::time::timeout(
            left.max(Duration::from_millis(100)),
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await;
        match attempt {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) if Instant::now() >= deadline => return Err(error_chain(&e)),
            Err(_) => return Err(format!("no TCP connection within {:?}", ctx.c.wait)),
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Whether the hub still answers HTTP (any status): a connection refused or no answer within
/// the wait, twice, means it stopped serving.
async fn serving(ctx: &Ctx<'_>) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..2 {
        match ctx
            .http
            .get(format!("{}/api/agent/health", ctx.c.url))
            .timeout(ctx.c.wait * 2)
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            // The cause (connection refused, timed out) is in the source chain.
            Err(e) => last = format!("GET /api/agent/health: {}", error_chain(&e)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

async fn run_rule(ctx: &Ctx<'_>, rule: &str, subs: &Subs) {
    match rule {
        id::HANDSHAKE_AUTH => handshake_auth(ctx, subs).await,
        id::WELCOME => welcome(ctx, subs).await,
        id::PING_PONG => ping_pong(ctx, subs).await,
        id::AGENT_ISOLATION => isolation(ctx, subs).await,
        id::CLIENT_ROUTING => routing(ctx, subs).await,
        id::SAME_USER_BROWSERS => same_user(ctx, subs).await,
        id::AGENT_TAKEOVER => takeover(ctx, subs).await,
        id::AGENT_NOT_CONNECTED => not_connected(ctx, subs).await,
        id::LEGACY_PARTS => legacy_parts(ctx, subs).await,
        id::EVENT_FIELDS => event_fields(ctx, subs).await,
        id::MALFORMED_PAYLOADS => malformed(ctx, subs).await,
        id::STREAM_RELAY => stream_relay(ctx, subs).await,
        id::STREAMING_REPLACE => streaming_replace(ctx, subs).await,
        id::NOTES => notes(ctx, subs).await,
        id::AGENT_RECONNECT => reconnect(ctx, subs).await,
        id::HTTP_HEALTH => http_health(ctx, subs).await,
        id::HTTP_MESSAGE => http_message(ctx, subs).await,
        id::HTTP_SYNC => http_sync(ctx, subs).await,
        id::HTTP_SYNC_TIMEOUT => http_sync_timeout(ctx, subs).await,
        id::ROBUSTNESS => robustness(ctx, subs).await,
        id::SPEC_EVENTS_ONLY => spec_events_only(ctx, subs).await,
        other => push(
            subs,
            SubCheck::fail("rule", format!("no check for {other}")),
        ),
    }
}

/// A handshake the spec says must fail: refused (CONNECT_ERROR), or admitted then disconnected
/// at once (accept-then-reject), and in no case any spec event delivered.
async fn refused(ctx: &Ctx<'_>, side: &str, auth: Value) -> Result<String, String> {
    let wait = ctx.c.wait.min(Duration::from_millis(1500));
    let nsp = if side == "agent" {
        AGENT_NSP
    } else {
        CLIENT_NSP
    };
    // A close is a refusal only where the hub keeps frames this large (robustness measures
    // that): the CONNECT's length is said for it.
    let connect_len = SioPacket::connect(nsp, Some(auth.clone())).to_frame().len();
    let r = if side == "agent" {
        ctx.agent_raw(auth).await
    } else {
        ctx.browser_raw(auth).await
    };
    match r {
        Err(ConnectError::Rejected(v)) => Ok(format!("refused with CONNECT_ERROR {v}")),
        Err(ConnectError::Disconnected) => Ok("disconnected during the handshake".into()),
        Err(ConnectError::Closed(why)) => Ok(format!(
            "connection closed ({why}){CLOSED_AFTER_CONNECT}{connect_len} bytes"
        )),
        Err(e) => Err(format!("unexpected handshake failure: {e}")),
        Ok(s) => {
            let mut p = match side {
                "agent" => Peer::agent(s, &ctx.tally),
                _ => Peer::browser(s, &ctx.tally),
            };
            match p.recv(wait).await {
                Err(RecvError::Disconnected | RecvError::Closed(_)) => {
                    Ok("admitted, then disconnected at once".into())
                }
                Ok(e) => Err(format!("admitted and delivered {:?} {}", e.name, e.data)),
                // Not the same as silence: say what came (e.g. a CONNECT_ERROR-like frame a
                // Socket.IO parser refuses, such as `41/ws/client,{…}` after a CONNECT ack).
                Err(e @ RecvError::Invalid { .. }) => Err(format!(
                    "admitted, then sent a frame that is not Socket.IO: {e}"
                )),
                Err(_) => Err(format!("admitted and not disconnected within {wait:?}")),
            }
        }
    }
}

async fn handshake_auth(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("auth");
    let secret = &ctx.c.jwt_secret;
    let now = (crate::util::now_ms() / 1000) as u64;
    let good = sign_jwt(secret, "auth-user", &[]);
    let forged = sign_jwt(&format!("{secret}-wrong"), "auth-user", &[]);
    let expired = sign_claims(secret, &json!({ "sub": "auth-user", "exp": now - 3600 }));
    // RFC 7519 §4.1.5: a JWT MUST NOT be accepted before its `nbf`; the spec's JwtService
    // (jsonwebtoken's verify) refuses it. An hour ahead: beyond any clock tolerance.
    let not_yet = sign_claims(
        secret,
        &json!({ "sub": "auth-user", "nbf": now + 3600, "exp": now + 7200 }),
    );
    let no_sub = sign_claims(secret, &json!({ "roles": ["USER"], "exp": now + 3600 }));
    // Not verified by the secret at all: the spec's hub verifies every token with JWT_SECRET.
    let unsigned =
        unsigned_jwt(&json!({ "sub": "auth-user", "roles": ["ADMIN"], "exp": now + 3600 }));
    let browsers: [(&str, Value); 8] = [
        ("browser without token", json!({ "agentId": a })),
        (
            "browser with a JWT signed by another secret",
            json!({ "token": forged, "agentId": a }),
        ),
        (
            "browser with a malformed token",
            json!({ "token": "not.a.jwt", "agentId": a }),
        ),
        (
            "browser with an expired JWT",
            json!({ "token": expired, "agentId": a }),
        ),
        (
            "browser with a JWT not valid yet (nbf an hour ahead)",
            json!({ "token": not_yet, "agentId": a }),
        ),
        (
            "browser with a JWT without sub",
            json!({ "token": no_sub, "agentId": a }),
        ),
        (
            "browser with an unsigned JWT (alg none, roles ADMIN)",
            json!({ "token": unsigned, "agentId": a }),
        ),
        ("browser without agentId", json!({ "token": good })),
    ];
    for (what, auth) in browsers {
        let r = refused(ctx, "browser", auth).await;
        push(subs, judged(what, r));
    }
    let agents: [(&str, Value); 3] = [
        (
            "agent with a wrong apiKey",
            json!({ "apiKey": format!("{}-wrong", ctx.c.api_key), "agentId": a }),
        ),
        ("agent without apiKey", json!({ "agentId": a })),
        ("agent without agentId", json!({ "apiKey": ctx.c.api_key })),
    ];
    for (what, auth) in agents {
        let r = refused(ctx, "agent", auth).await;
        push(subs, judged(what, r));
    }
    // The spec validates the apiKey against BRIDLE_API_KEY: a key that differs only in case is
    // another key (a hub comparing case-insensitively admits it).
    let flipped = crate::util::swap_case(&ctx.c.api_key);
    let what = "agent with the apiKey's case flipped";
    if flipped == ctx.c.api_key {
        push(
            subs,
            SubCheck::new(
                what,
                crate::rule::Status::NotRun,
                "not applicable: the apiKey has no letters, so no key differs from it only in case",
            ),
        );
    } else {
        let auth = json!({ "apiKey": flipped, "agentId": a });
        let r = refused(ctx, "agent", auth).await;
        push(subs, judged(what, r));
    }
    // The passing half: proper credentials are admitted (and kept). Whether a welcome follows
    // is welcome's fact, not this rule's.
    let browser = ctx
        .browser_raw(json!({ "token": good, "agentId": a }))
        .await;
    let r = admitted_and_kept(ctx, browser, Peer::browser).await;
    push(subs, judged("browser with a valid JWT", r));
    let agent = ctx
        .agent_raw(json!({ "apiKey": ctx.c.api_key, "agentId": a }))
        .await;
    let r = admitted_and_kept(ctx, agent, Peer::agent).await;
    push(subs, judged("agent with the right apiKey", r));
}

/// A JWT with `"alg": "none"` and an empty signature: what a hub that reads the header's
/// algorithm instead of insisting on its own accepts without any secret.
fn unsigned_jwt(claims: &Value) -> String {
    let b64 = |v: &Value| super::base64url_encode(v.to_string().as_bytes());
    format!(
        "{}.{}.",
        b64(&json!({ "alg": "none", "typ": "JWT" })),
        b64(claims)
    )
}

/// The passing half of `handshake-auth` for one side: the connection was admitted and is not
/// dropped within the short wait that follows.
async fn admitted_and_kept<'a>(
    ctx: &'a Ctx<'_>,
    connected: Result<Socket, ConnectError>,
    peer: fn(Socket, &'a Tally) -> Peer<'a>,
) -> Result<String, String> {
    match connected {
        Ok(s) => match peer(s, &ctx.tally).recv(ctx.short()).await {
            Err(RecvError::Disconnected | RecvError::Closed(_)) => {
                Err("admitted, then disconnected".to_string())
            }
            _ => Ok("admitted and kept".to_string()),
        },
        Err(e) => Err(format!("refused: {e}")),
    }
}

async fn welcome(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("welcome");
    for (name, sub, roles, want) in [
        ("clientId is the JWT sub", "user-42", &[][..], "user-42"),
        (
            "clientId is admin for the ADMIN role",
            "boss-1",
            &["USER", "ADMIN"][..],
            "admin",
        ),
        // The spec: "if JWT roles includes 'ADMIN'"; a role spelled otherwise is another role.
        (
            "clientId is the JWT sub for a role admin in lower case",
            "boss-2",
            &["admin"][..],
            "boss-2",
        ),
    ] {
        let c = match ctx.browser_welcomed(sub, roles, &a).await {
            Ok((_, w)) if w["clientId"] == want => SubCheck::pass(name, format!("welcome {w}")),
            Ok((_, w)) => SubCheck::fail(
                name,
                format!("welcome for sub {sub:?} roles {roles:?} is {w}, want clientId {want:?}"),
            ),
            // A hub that refuses the WebSocket transport lets no browser in, whatever its
            // token: handshake-auth fails on it, judged with every JWT (one fault, one
            // verdict). A token refused in the namespace (its roles, say) is this rule's.
            Err(e) if e.contains(super::transport::UPGRADE_FAILED) => SubCheck::skipped(
                name,
                format!("{e} ({} carries that fault)", id::HANDSHAKE_AUTH),
            ),
            Err(e) => SubCheck::fail(name, e),
        };
        push(subs, c);
    }
    push(
        subs,
        judged(
            "welcomed over long-polling, the default client's first transport",
            welcomed_over_polling(ctx, "user-43", &a).await,
        ),
    );
}

/// The spec's own browser call, `io(url + '/ws/client', { auth })` with socket.io-client's
/// defaults, opens over HTTP long-polling and upgrades to WebSocket afterwards ("Socket.IO
/// (WebSocket upgrade)"); a hub that serves WebSocket only refuses it. Every other sub-check
/// connects over WebSocket directly, so this one opens one polling session by hand: the
/// Engine.IO open, the namespace CONNECT with the auth, polls until the CONNECT answer and
/// the welcome, then a close. Every request is bounded by the rule's wait.
async fn welcomed_over_polling(ctx: &Ctx<'_>, sub: &str, agent_id: &str) -> Result<String, String> {
    use super::wire::{EioPacket, SioPacket, SioType, decode_frame};
    let deadline = Instant::now() + ctx.c.wait;
    let base = format!(
        "{}/socket.io/?EIO=4&transport=polling",
        ctx.c.url.trim_end_matches('/')
    );
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let get = |url: String| async move {
        let r = ctx
            .http
            .get(&url)
            .timeout(left())
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let st = r.status().as_u16();
        let body = r.text().await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok::<_, String>((st, body))
    };
    let post = |url: String, body: String| async move {
        let r = ctx
            .http
            .post(&url)
            .header("content-type", "text/plain;charset=UTF-8")
            .body(body)
            .timeout(left())
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        Ok::<_, String>(r.status().as_u16())
    };
    let clip = |b: &str| b.chars().take(200).collect::<String>();
    let (st, body) = get(base.clone()).await?;
    let Some(Ok(EioPacket::Open(open))) =
        (st == 200).then(|| EioPacket::decode(body.split('\u{1e}').next().unwrap_or("")))
    else {
        return Err(format!(
            "GET {base} (the default client's first request) = {st} {:?}, want 200 with the Engine.IO open packet: a browser using socket.io-client's defaults cannot connect",
            clip(&body)
        ));
    };
    let session = format!("{base}&sid={}", open.sid);
    let token = sign_jwt(&ctx.c.jwt_secret, sub, &[]);
    let connect = SioPacket::connect(
        CLIENT_NSP,
        Some(json!({ "token": token, "agentId": agent_id })),
    );
    let st = post(
        session.clone(),
        EioPacket::Message(connect.encode()).encode(),
    )
    .await?;
    if st != 200 {
        return Err(format!(
            "POST of the namespace CONNECT over polling = {st}, want 200"
        ));
    }
    let mut connected = false;
    let mut seen: Vec<String> = Vec::new();
    let outcome = loop {
        if Instant::now() >= deadline {
            break Err(format!(
                "no {} over polling within {:?} (got {})",
                if connected {
                    "welcome"
                } else {
                    "CONNECT answer"
                },
                ctx.c.wait,
                if seen.is_empty() {
                    "nothing".into()
                } else {
                    seen.join(", ")
                }
            ));
        }
        let (st, body) = match get(session.clone()).await {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        if st != 200 {
            break Err(format!("a poll = {st} {:?}", clip(&body)));
        }
        let mut done = None;
        for packet in body.split('\u{1e}').filter(|p| !p.is_empty()) {
            match decode_frame(packet) {
                Ok((EioPacket::Ping(d), _)) => {
                    let _ = post(session.clone(), EioPacket::Pong(d).encode()).await;
                }
                Ok((EioPacket::Close, _)) => {
                    done = Some(Err(format!(
                        "the hub closed the polling session (got {})",
                        seen.join(", ")
                    )));
                }
                Ok((_, Some(p))) if p.nsp == CLIENT_NSP => match p.kind {
                    SioType::Connect => {
                        connected = true;
                        seen.push("CONNECT".into());
                    }
                    SioType::ConnectError => {
                        done = Some(Err(format!(
                            "refused over polling with CONNECT_ERROR {} (the same credentials are admitted over WebSocket)",
                            p.data.unwrap_or(Value::Null)
                        )));
                    }
                    _ => match p.as_event() {
                        Some(("welcome", w)) => {
                            done = Some(if connected {
                                Ok(format!("welcome {w} after a polling handshake"))
                            } else {
                                Err(format!("welcome {w} before the namespace CONNECT answer"))
                            });
                        }
                        Some((name, _)) => seen.push(name.to_string()),
                        None => seen.push(clip(packet)),
                    },
                },
                Ok(_) => {}
                Err(e) => {
                    done = Some(Err(format!(
                        "a polled packet {:?} does not decode: {e}",
                        clip(packet)
                    )))
                }
            }
            if done.is_some() {
                break;
            }
        }
        if let Some(d) = done {
            break d;
        }
    };
    // Leave politely: an Engine.IO close over polling ends the session on the hub.
    let _ = post(session, EioPacket::Close.encode()).await;
    outcome
}

async fn ping_pong(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("ping");
    // A browser of another user on the same agentId, which never pings: a pong is the
    // "Response to ping", so none is its.
    let bystander = ctx.browser("ping-bystander", &a).await;
    let r = async {
        let mut b = ctx.browser("pinger", &a).await.map_err(|e| (true, e))?;
        b.emit("ping", json!({}));
        let p = b
            .expect("pong", ctx.c.wait, "browser")
            .await
            .map_err(|e| (false, e))?;
        if !p["ts"].is_number() {
            return Err((false, format!("browser pong {p} has no numeric ts")));
        }
        if let Some(why) = ts_not_ms(&p["ts"], None) {
            return Err((false, format!("browser pong {p}: {why}")));
        }
        Ok(format!("pong {p}"))
    }
    .await;
    let pinged = r.is_ok();
    push(subs, setup_or_judged("browser ping", r));
    let name = "only the browser that pinged gets the pong";
    push(
        subs,
        match bystander {
            Err(e) => SubCheck::skipped(name, format!("setup: {e}")),
            Ok(_) if !pinged => SubCheck::skipped(
                name,
                "the pinging browser got no pong (judged by browser ping)",
            ),
            Ok(mut by) => match by.next_named("pong", Instant::now() + ctx.short()).await {
                Ok(p) => SubCheck::fail(
                    name,
                    format!(
                        "another browser of agentId {a}, which never pinged, got pong {p} too (a pong is the \"Response to ping\")"
                    ),
                ),
                Err(RecvError::Timeout) => {
                    SubCheck::pass(name, "another browser of the agentId got none")
                }
                Err(e) => SubCheck::skipped(
                    name,
                    format!("the other browser: {e} while watching for a pong"),
                ),
            },
        },
    );
    let r = async {
        let mut ag = ctx.agent(&a).await.map_err(|e| (true, e))?;
        ag.emit("ping", json!({}));
        ag.expect("pong", ctx.c.wait, "agent")
            .await
            .map_err(|e| (false, e))?;
        Ok("pong".to_string())
    }
    .await;
    push(subs, setup_or_judged("agent ping", r));
}

/// `Err((true, why))` is a setup step that failed (skipped); `Err((false, why))` a failure.
fn setup_or_judged(name: &str, r: Result<String, (bool, String)>) -> SubCheck {
    match r {
        Ok(e) => SubCheck::pass(name, e),
        Err((true, e)) => SubCheck::skipped(name, e),
        Err((false, e)) => SubCheck::fail(name, e),
    }
}

/// Records a setup failure as one skipped sub-check and returns `None`.
fn setup<T>(subs: &Subs, r: Result<T, String>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            push(subs, SubCheck::skipped("setup", e));
            None
        }
    }
}

async fn isolation(ctx: &Ctx<'_>, subs: &Subs) {
    let (a, b) = (ctx.agent_id("iso-a"), ctx.agent_id("iso-b"));
    let Some(mut ag_a) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some(mut ag_b) = setup(subs, ctx.agent(&b).await) else {
        return;
    };
    // Same user on both agents: only agentId tells their traffic apart.
    let Some(mut br_a) = setup(subs, ctx.browser("same-user", &a).await) else {
        return;
    };
    let Some(mut br_b) = setup(subs, ctx.browser("same-user", &b).await) else {
        return;
    };
    br_a.emit("message", json!({ "text": "for a" }));
    let m = ag_a.expect("message", ctx.c.wait, "agent a").await;
    let cid = m
        .as_ref()
        .ok()
        .and_then(|m| m["clientId"].as_str())
        .unwrap_or("same-user")
        .to_string();
    push(
        subs,
        judged(
            "agent a gets its browser's message",
            match m {
                Ok(m) if m["text"] == "for a" => Ok(format!("message {}", m["text"])),
                Ok(m) => Err(format!("agent a got {m}")),
                Err(e) => Err(e),
            },
        ),
    );
    push(
        subs,
        judged(
            "agent b gets nothing",
            match ag_b.silent(ctx.short()).await {
                Ok(()) => Ok("silent".into()),
                Err(e) => Err(format!(
                    "agent b received {:?} {} meant for another agent",
                    e.name, e.data
                )),
            },
        ),
    );
    ag_a.emit("message", text_frame(&cid, "reply from a", "iso-1"));
    push(
        subs,
        judged(
            "browser of a gets the reply",
            match br_a.expect("message", ctx.c.wait, "browser of a").await {
                Ok(r) if r["text"] == "reply from a" => Ok("reply received".into()),
                Ok(r) => Err(format!("browser of a got {r}")),
                Err(e) => Err(e),
            },
        ),
    );
    push(
        subs,
        judged(
            "browser of b gets nothing",
            match br_b.silent(ctx.short()).await {
                Ok(()) => Ok("silent".into()),
                Err(e) => Err(format!(
                    "the browser of b (same clientId, other agent) received {:?} {} from the other agent",
                    e.name, e.data
                )),
            },
        ),
    );
    // The other way too: a hub that sends every browser message to one agent (the first
    // connected: here a) passed a's direction (an audit's hub, seen only as agent-not-connected
    // failing).
    br_b.emit("message", json!({ "text": "for b" }));
    push(
        subs,
        judged(
            "agent b gets its browser's message",
            match ag_b.expect("message", ctx.c.wait, "agent b").await {
                Ok(m) if m["text"] == "for b" => Ok(format!("message {}", m["text"])),
                Ok(m) => Err(format!("agent b got {m}")),
                Err(e) => Err(e),
            },
        ),
    );
    // A copy of a's own message arriving late is event-fields' to judge (a hub forwarding
    // each message twice), not a message from b's browser.
    let until = Instant::now() + ctx.short();
    let stray = loop {
        match ag_a.recv_until(until).await {
            Ok(e) if e.name == "message" && e.data["text"] == "for a" => continue,
            other => break other.ok(),
        }
    };
    push(
        subs,
        judged(
            "agent a gets nothing from b's browser",
            match stray {
                None => Ok("silent".into()),
                Some(e) => Err(format!(
                    "agent a received {:?} {} from the browser of agentId b",
                    e.name, e.data
                )),
            },
        ),
    );
}

async fn routing(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("route");
    let Some(mut ag) = setup(subs, ctx.agent_unprobed(&a).await) else {
        return;
    };
    let Some(mut u1) = setup(subs, ctx.browser("route-u1", &a).await) else {
        return;
    };
    let Some(mut u2) = setup(subs, ctx.browser("route-u2", &a).await) else {
        return;
    };
    u1.emit("message", json!({ "text": "hi" }));
    push(
        subs,
        judged(
            "the agent gets the sender's clientId",
            match ag.expect("message", ctx.c.wait, "agent").await {
                Ok(m) if m["clientId"] == "route-u1" => Ok("clientId route-u1".into()),
                Ok(m) => Err(format!("agent got clientId {} for route-u1", m["clientId"])),
                Err(e) => Err(e),
            },
        ),
    );
    reply_reaches_only(ctx, subs, &mut ag, "route-u1", &mut u1, &mut u2, "r-1").await;
    reply_reaches_only(ctx, subs, &mut ag, "route-u2", &mut u2, &mut u1, "r-2").await;
    admin_routed(ctx, subs, &mut ag, &a).await;
}

/// An ADMIN browser is routed under the clientId the hub assigned it: the spec's "'admin' for
/// admin users" ("All messages between hub and agent include clientId"): its message reaches
/// the agent with it, and a reply carrying it reaches the browser. Routing consistently under
/// what its welcome said instead is no second fault (a welcome that is not 'admin' is
/// welcome's to judge).
async fn admin_routed(ctx: &Ctx<'_>, subs: &Subs, ag: &mut Peer<'_>, a: &str) {
    let sub = "route-boss";
    let Some((mut boss, welcome)) = setup(
        subs,
        ctx.browser_welcomed(sub, &["ADMIN"], a)
            .await
            .map_err(|e| format!("{e} ({} carries that fault)", id::WELCOME)),
    ) else {
        return;
    };
    let welcomed = welcome["clientId"].clone();
    boss.emit("message", json!({ "text": "from the admin" }));
    // route-u1's "hi" again is a duplicate of it (event-fields judges one), not the admin's.
    let got = ag.forwarded(ctx.c.wait, &["hi"]).await;
    // The clientId the hub forwarded under, when it is one it assigned the browser.
    let routed = match &got {
        Ok(m) if m["clientId"] == "admin" || m["clientId"] == welcomed => {
            m["clientId"].as_str().map(String::from)
        }
        _ => None,
    };
    push(
        subs,
        judged(
            "an ADMIN browser's message carries its clientId",
            match (&got, &routed) {
                (Ok(_), Some(id)) => Ok(format!("clientId {id}")),
                (Ok(m), None) => Err(format!(
                    "the agent got clientId {} for an ADMIN browser (JWT sub {sub:?}) the hub welcomed with clientId {welcomed}, want \"admin\" ('admin' for admin users): the hub assigns each browser a clientId, and all messages between hub and agent include it",
                    m["clientId"]
                )),
                (Err(e), _) => Err(e.clone()),
            },
        ),
    );
    let to = routed.unwrap_or_else(|| "admin".to_string());
    ag.emit("message", text_frame(&to, "to the admin", "r-admin"));
    push(
        subs,
        judged(
            "a reply for the ADMIN browser's clientId reaches it",
            match boss
                .expect("message", ctx.c.wait, "the ADMIN browser")
                .await
            {
                Ok(r) if r["text"] == "to the admin" => Ok("received".into()),
                Ok(r) => Err(format!("the ADMIN browser got {r}")),
                Err(e) => Err(format!(
                    "a reply carrying clientId {to:?}, the ADMIN browser's, did not reach it ({e})"
                )),
            },
        ),
    );
}

/// The agent replies to `to`: the reply reaches `to` and not `other`. The reply is the spec's
/// "rich response": text and an image part, which the browser gets as the agent sent them.
async fn reply_reaches_only(
    ctx: &Ctx<'_>,
    subs: &Subs,
    ag: &mut Peer<'_>,
    to: &str,
    target: &mut Peer<'_>,
    other: &mut Peer<'_>,
    mid: &str,
) {
    let text = format!("to {to}");
    let mut reply = text_frame(to, &text, mid);
    let parts = json!([
        { "type": "text", "text": text },
        { "type": "image", "base64": "QUJD", "mediaType": "image/png" },
    ]);
    reply["parts"] = parts.clone();
    ag.emit("message", reply);
    let got = target.expect("message", ctx.c.wait, to).await;
    let arrived = got.as_ref().ok().filter(|r| r["text"] == text.as_str());
    push(
        subs,
        judged(
            &format!("a reply for {to} reaches {to}"),
            match &got {
                Ok(_) if arrived.is_some() => Ok("received".into()),
                Ok(r) => Err(format!("{to} got {r}")),
                Err(e) => Err(e.clone()),
            },
        ),
    );
    let name = format!("a reply for {to} keeps its parts");
    push(
        subs,
        match arrived {
            None => SubCheck::skipped(&name, format!("the reply never reached {to}")),
            Some(r) => judged(
                &name,
                if let Some(note) = same_parts(&r["parts"], &parts) {
                    Ok(format!("text and image parts as the agent sent them{note}"))
                } else {
                    Err(format!(
                        "{to} got parts {}, the agent sent {parts} (the spec's rich response: the browser gets [text, image])",
                        r["parts"]
                    ))
                },
            ),
        },
    );
    push(
        subs,
        judged(
            &format!("a reply for {to} reaches no one else"),
            match other.silent(ctx.short()).await {
                Ok(()) => Ok("the other browser got nothing".into()),
                Err(e) => Err(format!(
                    "the other browser received {:?} {} that was not theirs",
                    e.name, e.data
                )),
            },
        ),
    );
}

/// Several browsers of one user on one agent: each reaches the agent, each gets the replies
/// for that clientId, and one leaving does not cut off the other.
async fn same_user(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("same-user");
    let sub = "twin-user";
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some(mut first) = setup(subs, ctx.browser(sub, &a).await) else {
        return;
    };
    let Some(mut second) = setup(subs, ctx.browser(sub, &a).await) else {
        return;
    };
    for (which, b) in [("first", &first), ("second", &second)] {
        b.emit("message", json!({ "text": format!("from the {which}") }));
        let r = match ag.expect("message", ctx.c.wait, "agent").await {
            Ok(m) if m["clientId"] == sub => Ok(format!("clientId {sub}")),
            Ok(m) => Err(format!(
                "the {which} browser's message reached the agent as {m}, want clientId {sub:?}"
            )),
            Err(e) => Err(format!("the {which} browser's message: {e}")),
        };
        push(
            subs,
            judged(&format!("the {which} browser reaches the agent"), r),
        );
    }
    ag.emit("message", text_frame(sub, "to both", "twin-1"));
    for (which, b) in [("first", &mut first), ("second", &mut second)] {
        let r = match b.expect("message", ctx.c.wait, which).await {
            Ok(m) if m["text"] == "to both" => Ok("received".into()),
            Ok(m) => Err(format!("the {which} browser got {m}")),
            Err(e) => Err(format!(
                "a second browser with sub={sub} is connected; the {which} got no reply ({e}){}",
                if which == "first" {
                    ": the second replaced the first"
                } else {
                    ""
                }
            )),
        };
        push(
            subs,
            judged(&format!("the {which} browser gets the reply"), r),
        );
    }
    first.disconnect();
    drop(first);
    ctx.settle_browsers(&a, 1).await;
    ag.emit("message", text_frame(sub, "still there?", "twin-2"));
    let r = match second.expect("message", ctx.c.wait, "second").await {
        Ok(m) if m["text"] == "still there?" => Ok("received".into()),
        Ok(m) => Err(format!("the second browser got {m}")),
        Err(e) => Err(format!(
            "after the first browser with sub={sub} left, the second got no reply ({e}): its leaving unregistered the clientId"
        )),
    };
    push(
        subs,
        judged("the second browser is served after the first leaves", r),
    );
}

/// One agent per agentId: a second connection with the same agentId takes over (or is
/// refused), a message reaches exactly one of them, and the replaced connection's disconnect
/// does not unregister the agent that is still connected.
async fn takeover(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("takeover");
    let Some(mut old) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let new = match ctx
        .agent_raw(json!({ "apiKey": ctx.c.api_key, "agentId": a }))
        .await
    {
        Ok(s) => s,
        Err(e) => {
            push(
                subs,
                SubCheck::pass(
                    "one agent per agentId",
                    format!("the second connection with agentId {a} was refused ({e})"),
                ),
            );
            return;
        }
    };
    new.emit("register", json!({}));
    let mut new = Peer::agent(new, &ctx.tally);
    // A pong after register means the hub handled register (events are ordered per socket).
    new.emit("ping", json!({}));
    if new
        .expect("pong", ctx.c.wait, "second agent")
        .await
        .is_err()
    {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let Some(mut b) = setup(subs, ctx.browser("takeover-user", &a).await) else {
        return;
    };
    b.emit("message", json!({ "text": "who serves?" }));
    let deadline = Instant::now() + ctx.c.wait;
    let (got_old, got_new) = tokio::join!(
        old.next_named("message", deadline),
        new.next_named("message", deadline)
    );
    let serving_new = got_new.is_ok();
    // The spec's agent flow: the hub "registers agent under agentId", one per agentId. A
    // second connection is refused (at connect, or disconnected once admitted) or takes over;
    // one admitted and kept connected that the hub never routes to is neither.
    let second_kept = match &got_new {
        Err(RecvError::Timeout) if got_old.is_ok() => match new.recv(ctx.short()).await {
            Err(RecvError::Timeout) => true,
            Err(_) => false,
            Ok(_) => true,
        },
        _ => false,
    };
    push(
        subs,
        judged(
            "one agent per agentId",
            match (got_old.is_ok(), got_new.is_ok()) {
                (false, true) => Ok("the newer connection took over".into()),
                (true, false) if !second_kept => Ok(
                    "the second connection was disconnected once admitted; the first kept serving"
                        .into(),
                ),
                (true, false) => Err(format!(
                    "a second agent connection with agentId {a} was admitted and kept connected, but the browser's message went to the first: the hub registers the agent under its agentId, one per agentId, so a second connection is refused or takes over; this hub keeps both and never routes to the second"
                )),
                (true, true) => Err(format!(
                    "one browser message was delivered to both connections of agentId {a}"
                )),
                (false, false) => Err(format!(
                    "with two connections for agentId {a}, neither got the browser's message"
                )),
            },
        ),
    );
    // The connection that is not serving leaves; the other must keep the agentId.
    let (leaving, mut staying) = if serving_new { (old, new) } else { (new, old) };
    let which = if serving_new { "replaced" } else { "second" };
    leaving.disconnect();
    drop(leaving);
    let deadline = Instant::now() + ctx.short() * 2;
    let mut offline = None;
    while Instant::now() < deadline {
        if let Ok((_, v)) = ctx.get(&format!("/api/agent/{a}/health")).await
            && v["agentConnected"] == false
        {
            offline = Some(v);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    push(
        subs,
        judged(
            "health after the other connection leaves",
            match offline {
                None => Ok("agentConnected stayed true".into()),
                Some(v) => Err(format!(
                    "after the {which} connection disconnected, /health says {v} while an agent with agentId {a} is connected"
                )),
            },
        ),
    );
    b.emit("message", json!({ "text": "still served?" }));
    let r = tokio::select! {
        m = staying.expect("message", ctx.c.wait, "the remaining agent") => m.map(|_| "the remaining agent got the message".to_string()),
        r = b.expect("message", ctx.c.wait, "browser") => Err(match r {
            Ok(m) => format!("the {which} connection's disconnect unregistered agentId {a}: the browser got {} while an agent is connected", m["text"]),
            Err(e) => e,
        }),
    };
    push(subs, judged("messages reach the remaining agent", r));
}

async fn not_connected(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("nobody");
    // A bystander: a browser of another agentId, whose agent is connected. agentId "scopes
    // all routing": the answer is the sender's alone (the spec's "Agent unavailable" flow).
    let other = ctx.agent_id("nobody-bystander");
    let Some(_other_agent) = setup(subs, ctx.agent_unprobed(&other).await) else {
        return;
    };
    let Some(mut bystander) = setup(subs, ctx.browser("bystander", &other).await) else {
        return;
    };
    let Some(mut b) = setup(subs, ctx.browser("lonely", &a).await) else {
        return;
    };
    b.emit("message", json!({ "text": "anyone?" }));
    let m = b.expect("message", ctx.c.wait, "browser").await;
    let text = m
        .as_ref()
        .ok()
        .and_then(|m| m["text"].as_str())
        .unwrap_or("")
        .to_string();
    push(
        subs,
        judged(
            "reply text",
            match &m {
                Ok(_) if text.starts_with(NOT_CONNECTED) => Ok(format!("{text:?}")),
                Ok(m) => Err(format!("reply {m} does not start with {NOT_CONNECTED:?}")),
                Err(e) => Err(e.clone()),
            },
        ),
    );
    push(
        subs,
        match &m {
            Ok(m) if rules::parts_text(&m["parts"]).as_deref() == Some(text.as_str()) => {
                SubCheck::pass("parts mirror text", "")
            }
            Ok(m) => SubCheck::fail(
                "parts mirror text",
                format!("reply {m}: parts do not mirror text"),
            ),
            Err(_) => SubCheck::skipped("parts mirror text", "no reply"),
        },
    );
    // The bystander gets nothing that is this reply (a message of its own, an extension, is
    // no part of it).
    let deadline = Instant::now() + ctx.short();
    let mut leaked = None;
    while let Ok(e) = bystander.recv_until(deadline).await {
        if e.name == "message"
            && (is_not_connected(&e.data) || (!text.is_empty() && e.data["text"] == text.as_str()))
        {
            leaked = Some(e.data);
            break;
        }
    }
    push(
        subs,
        judged(
            "only the sender gets it",
            match leaked {
                None => Ok(format!(
                    "a browser of agentId {other}, whose agent is connected, got nothing"
                )),
                Some(l) => Err(format!(
                    "the answer to a browser of agentId {a} also reached a browser of agentId {other}, whose agent is connected: {l} (agentId scopes all routing; the spec's \"Agent unavailable\" answers the sender)"
                )),
            },
        ),
    );
}

async fn legacy_parts(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("legacy");
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some(b) = setup(subs, ctx.browser("legacy-user", &a).await) else {
        return;
    };
    // The spec names `images` ("Legacy: attached images") but not an element's shape, so the
    // shapes a browser sends are tried: an object {base64, mediaType}, a data: URL string and
    // a bare base64 string. A hub that builds the image part from any reads legacy images; one
    // that reads none drops them (buildParts gives a part per image). A shape a hub does not
    // read is noted, not failed: the spec does not say which to read. The object shape names
    // its data and media type, so its part must carry them; from a string a hub may take
    // the data as it is and guess the media type, so any image part after the text counts.
    // Each message has its own text, so a message forwarded twice is not taken for the next
    // (event-fields judges a duplicate).
    let texts = ["see", "see two", "see three", "doc"];
    let want = json!([
        { "type": "text", "text": "see" },
        { "type": "image", "base64": "QUJD", "mediaType": "image/png" }
    ]);
    let image_after_text = |p: &Value, text: &str| {
        p.as_array().is_some_and(|a| {
            a.len() == 2
                && a[0] == json!({ "type": "text", "text": text })
                && a[1]["type"] == "image"
                && a[1]["base64"].as_str().is_some_and(|b| !b.is_empty())
                && a[1]["mediaType"].is_string()
        })
    };
    let mut tried: Vec<(&str, Result<Value, String>, bool)> = Vec::new();
    for (n, (shape, images)) in [
        (
            "{base64, mediaType}",
            json!([{ "base64": "QUJD", "mediaType": "image/png" }]),
        ),
        ("a data: URL string", json!(["data:image/png;base64,QUJD"])),
        ("a bare base64 string", json!(["QUJD"])),
    ]
    .into_iter()
    .enumerate()
    {
        b.emit("message", json!({ "text": texts[n], "images": images }));
        let got = ag
            .forwarded(ctx.c.wait, &texts[..n])
            .await
            .map(|m| m["parts"].clone());
        let ok = got.as_ref().is_ok_and(|p| {
            if shape.starts_with('{') {
                *p == want
            } else {
                image_after_text(p, texts[n])
            }
        });
        tried.push((shape, got, ok));
    }
    let read: Vec<&str> = tried.iter().filter(|t| t.2).map(|t| t.0).collect();
    let text_only = |p: &Value| {
        p.as_array()
            .is_some_and(|a| a.len() == 1 && a[0]["type"] == "text")
    };
    push(
        subs,
        judged(
            "text + images become parts",
            if !read.is_empty() {
                let unread: Vec<String> = tried
                    .iter()
                    .filter(|(_, _, ok)| !ok)
                    .map(|(s, g, _)| match g {
                        Ok(p) => format!("{s} became {p}"),
                        Err(e) => format!("{s}: {e}"),
                    })
                    .collect();
                Ok(format!(
                    "text part, then image part, from images as {}{}",
                    read.join(" and as "),
                    if unread.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; not read (the spec gives no element shape, not judged): {}",
                            unread.join("; ")
                        )
                    }
                ))
            } else if let Some((_, Err(e), _)) = tried.iter().find(|(_, g, _)| g.is_err()) {
                Err(e.clone())
            } else {
                let got: Vec<String> = tried
                    .iter()
                    .map(|(s, g, _)| {
                        format!(
                            "images as {s} became {}",
                            g.as_ref().map(|p| p.to_string()).unwrap_or_default()
                        )
                    })
                    .collect();
                let dropped = tried
                    .iter()
                    .all(|(_, g, _)| g.as_ref().is_ok_and(text_only));
                Err(format!(
                    "{}: {}, want {want}",
                    if dropped {
                        "no image part was built from images in any shape"
                    } else {
                        "text + images became other parts"
                    },
                    got.join("; ")
                ))
            },
        ),
    );
    let rich = json!([
        { "type": "text", "text": "doc" },
        { "type": "image", "base64": "REVG", "mediaType": "image/webp" },
        { "type": "file", "url": "https://x/y.pdf", "name": "y.pdf" }
    ]);
    b.emit("message", json!({ "text": "doc", "parts": rich }));
    push(
        subs,
        judged(
            "explicit parts pass unchanged",
            match ag.forwarded(ctx.c.wait, &texts[..3]).await.map(|m| {
                let same = same_parts(&m["parts"], &rich);
                (m, same)
            }) {
                Ok((_, Some(note))) => Ok(format!("text, image and file parts unchanged{note}")),
                Ok((m, None)) => Err(format!("explicit parts changed in transit: {}", m["parts"])),
                Err(e) => Err(e),
            },
        ),
    );
    legacy_parts_over_http(ctx, subs, &mut ag, &a, &texts).await;
}

/// legacy-parts over `POST /api/agent/:agentId/message`: "parts is optional. If omitted,
/// built from text + images." Explicit parts reach the agent unchanged; text + images (every
/// shape [`legacy_parts`] tries, in one request) reach it with an image part after the text.
/// A message that never reaches the agent is http-message's to judge.
async fn legacy_parts_over_http(
    ctx: &Ctx<'_>,
    subs: &Subs,
    ag: &mut Peer<'_>,
    a: &str,
    earlier: &[&str],
) {
    let path = format!("/api/agent/{a}/message");
    let rich = json!([
        { "type": "text", "text": "doc over http" },
        { "type": "image", "base64": "R0hJ", "mediaType": "image/gif" },
        { "type": "file", "url": "https://x/z.pdf", "name": "z.pdf", "mimeType": "application/pdf" }
    ]);
    let images = json!([
        { "base64": "QUJD", "mediaType": "image/png" },
        "data:image/png;base64,QUJD",
        "QUJD"
    ]);
    let mut seen: Vec<&str> = earlier.to_vec();
    for (name, text, body) in [
        (
            "over HTTP, explicit parts pass unchanged",
            "doc over http",
            json!({ "text": "doc over http", "parts": rich }),
        ),
        (
            "over HTTP, text + images become parts",
            "see over http",
            json!({ "text": "see over http", "images": images }),
        ),
    ] {
        let posted = ctx.post(&path, body, ctx.c.wait).await;
        let got = ag.forwarded(ctx.c.wait, &seen).await;
        seen.push(text);
        let c = match got {
            Err(e) => SubCheck::skipped(
                name,
                format!(
                    "the message posted to {path} did not reach the agent ({e}; the POST: {}); forwarding is {}'s to judge",
                    match posted {
                        Ok((st, v)) => format!("{st} {v}"),
                        Err(e) => e,
                    },
                    id::HTTP_MESSAGE
                ),
            ),
            Ok(m) if text == "doc over http" => judged(
                name,
                match same_parts(&m["parts"], &rich) {
                    Some(note) => Ok(format!("text, image and file parts unchanged{note}")),
                    None => Err(format!(
                        "explicit parts posted to {path} changed in transit: {rich} reached the agent as {}",
                        m["parts"]
                    )),
                },
            ),
            Ok(m) => judged(name, {
                let p = &m["parts"];
                let image = |q: &Value| {
                    q["type"] == "image"
                        && q["base64"].as_str().is_some_and(|b| !b.is_empty())
                        && q["mediaType"].is_string()
                };
                match p.as_array() {
                    Some(a)
                        if a.first()
                            .is_some_and(|f| f["type"] == "text" && f["text"] == text)
                            && a.len() > 1
                            && a[1..].iter().any(image) =>
                    {
                        Ok(format!(
                            "text part, then {} image part(s)",
                            a[1..].iter().filter(|q| image(q)).count()
                        ))
                    }
                    _ => Err(format!(
                        "text + images (as {{base64, mediaType}}, a data: URL string and a bare base64 string) posted to {path} reached the agent as parts {p}, want the text part, then image parts (\"If omitted, built from text + images\")"
                    )),
                }
            }),
        };
        push(subs, c);
    }
}

/// The version of a UUID written as the spec's examples write one (8-4-4-4-12 hex digits,
/// either case), or `None` for any other text.
fn textual_uuid(s: &str) -> Option<u32> {
    let b = s.as_bytes();
    let hyphens = [8, 13, 18, 23];
    let ok = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if hyphens.contains(&i) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| char::from(b[14]).to_digit(16).unwrap_or(0))
}

/// Which of `fields` `v` lacks (missing or null), and which it carries with another type.
fn field_problems(v: &Value, fields: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = fields
        .iter()
        .filter(|f| v.get(**f).is_none_or(Value::is_null))
        .map(|f| format!("lacks {f}"))
        .collect();
    // The types the spec's interfaces give the listed fields (`ts: number`, …).
    for f in fields {
        let (ok, want) = match (*f, v.get(*f)) {
            (_, None | Some(Value::Null)) => continue,
            ("ts", Some(x)) => (x.is_number(), "a number"),
            ("text" | "messageId" | "clientId" | "agentId" | "type", Some(x)) => {
                (x.is_string(), "a string")
            }
            ("parts", Some(x)) => (x.is_array(), "an array"),
            _ => continue,
        };
        if !ok {
            out.push(format!("{f} is {}, want {want}", v[*f]));
        }
    }
    out
}

/// The routing fields (`clientId`, `agentId`) and `ts` of an event relayed to a browser whose
/// welcome gave `own_client` and which connected with `own_agent`, given the `ts` the agent
/// sent: (problems, extensions). The spec lists the browser events' fields and forbids no
/// other, so a routing field naming this very browser (its own clientId, its own agentId) is
/// an extension; one naming another browser or agent claims a different recipient, a fault.
/// A `ts` must be epoch milliseconds (the spec's examples): the agent's own `ts` relayed, or
/// the hub's clock, within a day of now.
fn browser_event_problems(
    d: &Value,
    fields: &[&str],
    own_client: &Value,
    own_agent: &str,
    agent_ts: i64,
) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut extensions = Vec::new();
    for (f, own) in [
        ("clientId", own_client.clone()),
        ("agentId", json!(own_agent)),
    ] {
        match d.get(f) {
            None => {}
            Some(v) if *v == own => extensions.push(format!("{f} (this browser's own)")),
            Some(v) => problems.push(format!(
                "carries {f}={v}, which names another recipient (this browser's {f} is {own})"
            )),
        }
    }
    problems.extend(ts_not_ms(&d["ts"], Some(agent_ts)));
    if let Some(o) = d.as_object() {
        extensions.extend(
            o.keys()
                .filter(|k| {
                    !fields.contains(&k.as_str()) && !["clientId", "agentId"].contains(&k.as_str())
                })
                .cloned(),
        );
    }
    (problems, extensions)
}

/// Every field the spec lists on hub→agent and hub→browser events; on the way to browsers no
/// routing field naming another recipient and a `ts` in epoch milliseconds.
async fn event_fields(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("fields");
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some((mut b, w)) = setup(subs, ctx.browser_welcomed("fields-user", &[], &a).await) else {
        return;
    };
    push(
        subs,
        judged(
            "welcome",
            match field_problems(&w, &["clientId"]) {
                p if p.is_empty() && w["clientId"].is_string() => Ok(format!("{w}")),
                p => Err(format!("welcome {w} {}", p.join(", "))),
            },
        ),
    );
    b.emit("message", json!({ "text": "fields?" }));
    let m = ag.expect("message", ctx.c.wait, "agent").await;
    // A second message: "UUID v4 for this message" is one id per message.
    b.emit("message", json!({ "text": "fields, again?" }));
    let m2 = ag.expect("message", ctx.c.wait, "agent").await;
    let name = "hub→agent messageId per message";
    push(
        subs,
        match (&m, &m2) {
            // The first message again where the second was due: forwarded twice.
            (Ok(m), Ok(m2)) if m2["text"] == "fields?" => SubCheck::fail(
                name,
                format!(
                    "the browser's one message \"fields?\" reached the agent twice (messageIds {} and {}): a duplicate of the message (\"A browser user sent a message\"), where the next was \"fields, again?\"",
                    m["messageId"], m2["messageId"]
                ),
            ),
            (Ok(m), Ok(m2)) if m["messageId"].is_string() && m2["messageId"].is_string() => judged(
                name,
                if m["messageId"] == m2["messageId"] {
                    Err(format!(
                        "two browser messages reached the agent under one messageId {} (the spec: \"UUID v4 for this message\")",
                        m["messageId"]
                    ))
                } else {
                    Ok("two messages, two messageIds".into())
                },
            ),
            (Ok(_), Ok(_)) => SubCheck::skipped(
                name,
                "a forwarded message has no string messageId (judged by hub→agent message)",
            ),
            (_, Err(e)) | (Err(e), _) => SubCheck::skipped(
                name,
                format!(
                    "the agent did not get both messages ({e}); forwarding is {}'s to judge",
                    id::CLIENT_ROUTING
                ),
            ),
        },
    );
    let cid = m
        .as_ref()
        .ok()
        .and_then(|m| m["clientId"].as_str())
        .unwrap_or("fields-user")
        .to_string();
    push(
        subs,
        judged(
            "hub→agent message",
            m.and_then(|m| {
                let mut p = field_problems(
                    &m,
                    &["type", "clientId", "agentId", "text", "parts", "messageId"],
                );
                if m["type"] != "message" && m.get("type").is_some() {
                    p.push(format!("type is {}, want \"message\"", m["type"]));
                }
                if m.get("agentId").is_some() && m["agentId"] != a.as_str() {
                    p.push(format!("agentId is {}, want {a:?}", m["agentId"]));
                }
                if m.get("parts").is_some() && !m["parts"].is_array() {
                    p.push("parts is not an array".into());
                }
                let mut note = String::new();
                match m["messageId"].as_str() {
                    None => {}
                    Some(id) => match textual_uuid(id) {
                        Some(4) => {}
                        // Receivers treat it as a string: another version is noted, not failed.
                        Some(v) => note = format!(" (messageId a UUID of version {v}; the spec says v4)"),
                        None => p.push(format!(
                            "messageId {id:?} is not a UUID (the spec: \"UUID v4 for this message\")"
                        )),
                    },
                }
                if p.is_empty() {
                    Ok(format!("type, clientId, agentId, text, parts, messageId{note}"))
                } else {
                    Err(format!("the hub→agent message {m} {}", p.join(", ")))
                }
            }),
        ),
    );
    // A full turn: every event the browser gets has the spec's fields, its routing fields (if
    // any) name this browser, and its ts is epoch ms. Every frame carries the same agent ts.
    let agent_ts = crate::util::now_ms();
    let at = |mut f: Value| {
        f["ts"] = json!(agent_ts);
        f
    };
    ag.emit("typing", json!({ "clientId": cid, "ts": agent_ts }));
    ag.emit("stream", at(text_frame(&cid, "Fie", "fields-1")));
    ag.emit("stream_end", at(text_frame(&cid, "Fields", "fields-1")));
    ag.emit("message", at(text_frame(&cid, "And a message", "fields-2")));
    let deadline = Instant::now() + ctx.c.wait;
    let mut seen: Vec<(String, Value)> = Vec::new();
    while !seen.iter().any(|(n, _)| n == "message") {
        match b.recv_until(deadline).await {
            Ok(e) => seen.push((e.name, e.data)),
            Err(_) => break,
        }
    }
    let want: [(&str, &[&str]); 4] = [
        ("typing", &["type", "ts"]),
        ("stream", &["type", "text", "parts", "messageId", "ts"]),
        ("stream_end", &["type", "text", "parts", "messageId", "ts"]),
        ("message", &["type", "text", "parts", "messageId", "ts"]),
    ];
    for (event, fields) in want {
        let name = format!("hub→browser {event}");
        let Some((_, d)) = seen.iter().find(|(n, _)| n == event) else {
            // Whether the hub relays it is another rule's fact; its fields are unseen here.
            let owner = if event == "message" {
                id::CLIENT_ROUTING
            } else {
                id::STREAM_RELAY
            };
            push(
                subs,
                SubCheck::skipped(
                    name,
                    format!(
                        "the browser got no {event} within {:?} (saw {:?}): its fields are unseen; relaying it is {owner}'s to judge",
                        ctx.c.wait,
                        names(&seen)
                    ),
                ),
            );
            continue;
        };
        let mut p = field_problems(d, fields);
        if d.get("type").is_some() && d["type"] != event {
            p.push(format!("type is {}, want {event:?}", d["type"]));
        }
        let (routing, extensions) = browser_event_problems(d, fields, &w["clientId"], &a, agent_ts);
        p.extend(routing);
        push(
            subs,
            judged(
                &name,
                if p.is_empty() {
                    Ok(format!(
                        "{}{}",
                        fields.join(", "),
                        extensions_note(&extensions)
                    ))
                } else {
                    Err(format!("{event} {d} {}", p.join(", ")))
                },
            ),
        );
    }
}

/// Malformed browser payloads are rejected or ignored: never forwarded to the agent in a shape
/// the spec does not allow; an answer with an event the spec does not list is said, not judged.
async fn malformed(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("malformed");
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    // Non-spec events a quiet browser gets anyway (an extension status after welcome) are not
    // replies; only names beyond those count as answering bad input.
    let Some(mut control) = setup(subs, ctx.browser("malformed-control", &a).await) else {
        return;
    };
    let _ = control.silent(ctx.short()).await;
    let baseline: Vec<String> = control.extras.iter().map(|(n, _)| n.clone()).collect();
    drop(control);
    let inputs: [(&str, Value); 6] = [
        ("a null message", Value::Null),
        (
            "parts that is not an array",
            json!({ "text": "x", "parts": "not-an-array" }),
        ),
        (
            "parts that is an object",
            json!({ "text": "x", "parts": { "type": "text", "text": "x" } }),
        ),
        ("a text that is not a string", json!({ "text": 42 })),
        ("a message that is an array", json!(["text", "x"])),
        // "The text field is always present": a hub may drop it or supply a text, but what
        // it forwards carries one ("`text` string yes").
        (
            "a message without text",
            json!({ "parts": [{ "type": "text", "text": "x" }] }),
        ),
    ];
    for (what, payload) in inputs {
        let Ok(mut b) = ctx.browser("malformed-user", &a).await else {
            push(subs, SubCheck::skipped(what, "no browser could connect"));
            continue;
        };
        b.emit("message", payload.clone());
        // A ping after the bad input: its pong marks that the hub has handled the input
        // (events are ordered per socket); then a short window for late effects.
        b.emit("ping", json!({}));
        let (seen, ponged) = b.collect_until("pong", ctx.c.wait).await;
        let disconnected = matches!(
            b.recv(ctx.short()).await,
            Err(RecvError::Disconnected | RecvError::Closed(_))
        );
        let mut problems = Vec::new();
        // An answer with an event the spec does not list is an extension: the spec gives no
        // answer to malformed input and forbids no event (spec-events-only lists it). Said, not
        // judged: an audit's hub answering `bridle_error` failed this rule before.
        let replies: Vec<String> = b
            .extras
            .iter()
            .filter(|(n, _)| !baseline.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        let mut named: Vec<String> = Vec::new();
        for n in &replies {
            let quoted = format!("{n:?}");
            if !named.contains(&quoted) {
                named.push(quoted);
            }
        }
        let extension = if named.is_empty() {
            String::new()
        } else {
            format!(
                "; answered with the extension event {} (not judged: the spec gives no answer to malformed input and forbids no event)",
                named.join(", ")
            )
        };
        // Anything the agent got for it must have the hub→agent shape.
        while let Ok(e) = ag.recv(Duration::from_millis(50)).await {
            if e.name != "message" {
                continue;
            }
            let ok = e.data["text"].is_string()
                && e.data["parts"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().all(Value::is_object));
            if !ok {
                problems.push(format!("forwarded to the agent as {}", e.data));
            }
        }
        let how = if disconnected || !ponged {
            "rejected (the hub dropped the browser)".to_string()
        } else {
            let spec: Vec<&str> = names(&seen).into_iter().filter(|n| *n != "pong").collect();
            if spec.is_empty() {
                "ignored".into()
            } else {
                // Counted in order (`message ×4000`): a hub that floods answers with
                // thousands of events, and the evidence names their run, not each one.
                format!(
                    "answered with {}",
                    super::counted_names(spec, true).join(" → ")
                )
            }
        };
        push(
            subs,
            if problems.is_empty() {
                SubCheck::pass(what, format!("{how}{extension}"))
            } else {
                SubCheck::fail(what, format!("{payload}: {}", problems.join("; ")))
            },
        );
    }
}

/// The agent streams a scripted turn to a browser; returns the browser's spec events up to
/// `stream_end` (or the bound) and whether `stream_end` arrived.
async fn scripted_turn(
    ctx: &Ctx<'_>,
    name: &str,
    frames: &[(&str, Value)],
) -> Result<(Vec<(String, Value)>, bool), String> {
    let a = ctx.agent_id(name);
    let mut ag = ctx.agent(&a).await?;
    let mut b = ctx.browser(&format!("{name}-user"), &a).await?;
    b.emit("message", json!({ "text": "go" }));
    let m = ag.expect("message", ctx.c.wait, "agent").await?;
    let cid = m["clientId"].as_str().unwrap_or("").to_string();
    for (event, data) in frames {
        let mut d = data.clone();
        d["clientId"] = json!(cid);
        ag.emit(event, d);
    }
    Ok(b.collect_until("stream_end", ctx.c.wait).await)
}

/// The text of [`stream_script`]'s last `stream`. The turn streams it word by word, one
/// accumulation per word (23 frames): a hub whose relay goes wrong only after a few frames
/// (deltas, or frames dropped, from the fourth on) shows it.
const SCRIPT_LAST_STREAM: &str = "Hello, how are you? This answer streams one word at a time, so a relay that changes after a few frames shows it";

/// The final text of [`stream_script`]'s turn: it extends the last `stream`, as a runtime's
/// does when tokens arrive after its last 100 ms flush (the spec's agent implementation), so a
/// hub that rewrites `stream_end` with the last accumulation loses its tail, visibly.
const SCRIPT_FINAL: &str = "Hello, how are you? This answer streams one word at a time, so a relay that changes after a few frames shows it. I am fine.";

/// The parts of [`stream_script`]'s `stream_end`: its text and an image, as an agent that
/// answers with a picture sends them. The hub relays parts as they are (`parts` is the source
/// of truth; only the text parts mirror `text`).
fn script_final_parts() -> Value {
    json!([
        { "type": "text", "text": SCRIPT_FINAL },
        { "type": "image", "base64": "QUJD", "mediaType": "image/png" },
    ])
}

fn stream_script(mid: &str) -> Vec<(&'static str, Value)> {
    let mut v = vec![("typing", json!({ "ts": crate::util::now_ms() }))];
    let words: Vec<&str> = SCRIPT_LAST_STREAM.split(' ').collect();
    for n in 1..=words.len() {
        v.push(("stream", text_frame("", &words[..n].join(" "), mid)));
    }
    let mut end = text_frame("", SCRIPT_FINAL, mid);
    end["parts"] = script_final_parts();
    v.push(("stream_end", end));
    v
}

/// Event names with runs of one name folded: `typing → stream ×24 → stream_end`.
fn name_runs(names: &[&str]) -> String {
    let shown = super::counted_names(names.iter().copied(), true);
    if shown.is_empty() {
        "nothing".into()
    } else {
        shown.join(" → ")
    }
}

async fn stream_relay(ctx: &Ctx<'_>, subs: &Subs) {
    let script = stream_script("relay-1");
    let Some((seen, _)) = setup(subs, scripted_turn(ctx, "relay", &script).await) else {
        return;
    };
    let want: Vec<&str> = script.iter().map(|(n, _)| *n).collect();
    let got = names(&seen);
    push(
        subs,
        judged(
            "order",
            if got == want {
                Ok(name_runs(&got))
            } else {
                Err(format!(
                    "the browser saw {} within {:?}, want {}",
                    name_runs(&got),
                    ctx.c.wait,
                    name_runs(&want)
                ))
            },
        ),
    );
    let wrong: Vec<String> = seen
        .iter()
        .filter(|(n, _)| n == "stream" || n == "stream_end")
        .filter(|(_, d)| d["messageId"] != json!(agent_message_id("relay-1")))
        .map(|(n, d)| format!("{n} carries messageId {}", d["messageId"]))
        .collect();
    push(
        subs,
        if !seen.iter().any(|(n, _)| n == "stream" || n == "stream_end") {
            SubCheck::skipped("messageId", "no stream frames reached the browser")
        } else {
            judged(
                "messageId",
                if wrong.is_empty() {
                    Ok(format!(
                        "{} (the agent's) throughout",
                        agent_message_id("relay-1")
                    ))
                } else {
                    Err(format!(
                        "{}, want the agent's {}",
                        wrong.join(", "),
                        agent_message_id("relay-1")
                    ))
                },
            )
        },
    );
}

async fn streaming_replace(ctx: &Ctx<'_>, subs: &Subs) {
    let script = stream_script("replace-1");
    let Some((seen, ended)) = setup(subs, scripted_turn(ctx, "replace", &script).await) else {
        return;
    };
    if !ended {
        push(
            subs,
            SubCheck::skipped(
                "accumulation",
                format!(
                    "no stream_end reached the browser within {:?} (saw {:?}): the final accumulation cannot be judged; relaying stream_end is {}'s to judge",
                    ctx.c.wait,
                    names(&seen),
                    id::STREAM_RELAY
                ),
            ),
        );
        return;
    }
    push(
        subs,
        judged(
            "accumulation",
            rules::streaming_replace_with(&seen, rules::EndText::MayExtend)
                .map(|()| "each stream extends the previous; stream_end extends the last".into()),
        ),
    );
    // The hub relays the agent's final text as it is (here it extends the last stream).
    let end = seen.iter().rev().find(|(n, _)| n == "stream_end");
    push(
        subs,
        judged(
            "final text relayed",
            match end.and_then(|(_, d)| d["text"].as_str()) {
                Some(SCRIPT_FINAL) => Ok(format!("{SCRIPT_FINAL:?}")),
                got => Err(format!(
                    "the browser's stream_end says {}, the agent's said {SCRIPT_FINAL:?}",
                    got.map_or("no text".into(), |t| format!("{t:?}"))
                )),
            },
        ),
    );
    let want = script_final_parts();
    push(
        subs,
        judged(
            "final parts relayed",
            match end.map(|(_, d)| (&d["parts"], same_parts(&d["parts"], &want))) {
                Some((_, Some(note))) => {
                    Ok(format!("text and image parts as the agent sent them{note}"))
                }
                got => Err(format!(
                    "the browser's stream_end parts are {}, the agent's were {want}",
                    got.map_or("missing".into(), |(p, _)| p.to_string())
                )),
            },
        ),
    );
}

/// Texts of the notes scenario's frames sent with no turn open (before its `typing`).
const NOTES_PLAIN_ANSWER: &str = "An answer before the turn.";
const NOTES_EARLY_THOUGHT: &str = "A thought before the turn.";

async fn notes(ctx: &Ctx<'_>, subs: &Subs) {
    let mid = "notes-1";
    let mut early = text_frame("", NOTES_EARLY_THOUGHT, "n-0");
    early["kind"] = json!("thinking");
    let mut thinking = text_frame("", "The user wants a story.", "n-1");
    thinking["kind"] = json!("thinking");
    let mut tool = text_frame("", "→ searchWeb", "n-2");
    tool["kind"] = json!("tool");
    // Before typing no turn is open: a plain message there is an answer bubble and stays one
    // (the spec: "A plain message sent with no turn open is an ordinary answer bubble, and
    // stays one"), and a marked note is a note by its kind alone ("the only signal that
    // survives a turn with no streamed answer").
    let script = vec![
        ("message", text_frame("", NOTES_PLAIN_ANSWER, "n-a")),
        ("message", early),
        ("typing", json!({ "ts": crate::util::now_ms() })),
        ("message", thinking),
        ("message", tool),
        ("message", text_frame("", "unmarked note", "n-3")),
        ("stream", text_frame("", "Once", mid)),
        ("stream_end", text_frame("", "Once", mid)),
    ];
    let Some((seen, ended)) = setup(subs, scripted_turn(ctx, "notes", &script).await) else {
        return;
    };
    // The notes' place: after typing, before the stream and stream_end. Whether typing is
    // relayed at all is stream-relay's fact; without it the "after typing" half is unseen.
    let want: Vec<&str> = script
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| *n != "typing")
        .collect();
    let got: Vec<&str> = names(&seen)
        .into_iter()
        .filter(|n| *n != "typing")
        .collect();
    let with_text = |t: &str| {
        seen.iter()
            .position(|(n, d)| n == "message" && d["text"] == t)
    };
    let typing_at = seen.iter().position(|(n, _)| n == "typing");
    let first_note = with_text("The user wants a story.");
    let early_at = [NOTES_PLAIN_ANSWER, NOTES_EARLY_THOUGHT]
        .iter()
        .filter_map(|t| with_text(t))
        .max();
    let place = "place in the turn";
    push(
        subs,
        if !ended {
            SubCheck::skipped(
                place,
                format!(
                    "no stream_end within {:?} (saw {:?}), so the turn never closed; relaying stream_end is {}'s to judge",
                    ctx.c.wait,
                    names(&seen),
                    id::STREAM_RELAY
                ),
            )
        } else if got != want {
            SubCheck::fail(
                place,
                format!(
                    "notes out of place around typing and stream_end: {:?}, want two messages, typing, three notes, stream, stream_end",
                    names(&seen)
                ),
            )
        } else {
            match (typing_at, first_note) {
                (Some(t), Some(n)) if t < n && early_at.is_none_or(|e| e < t) => SubCheck::pass(
                    place,
                    "between typing and stream; the two sent before typing stay before it",
                ),
                (Some(_), _) => SubCheck::fail(
                    place,
                    format!(
                        "notes out of place around typing: {:?}, want two messages, typing, three notes, stream, stream_end",
                        names(&seen)
                    ),
                ),
                (None, _) => SubCheck::skipped(
                    place,
                    format!(
                        "the notes came before the stream, but typing never reached the browser (saw {:?}), so whether they are inside the turn is unseen; relaying typing is {}'s to judge",
                        names(&seen),
                        id::STREAM_RELAY
                    ),
                ),
            }
        },
    );
    let kind_of = |d: &Value| d.get("kind").filter(|k| !k.is_null()).cloned();
    for (name, text, want) in [
        (
            "kind thinking kept",
            "The user wants a story.",
            Some("thinking"),
        ),
        ("kind tool kept", "→ searchWeb", Some("tool")),
        ("an unmarked note keeps its reading", "unmarked note", None),
        (
            "kind kept with no turn open",
            NOTES_EARLY_THOUGHT,
            Some("thinking"),
        ),
    ] {
        let Some(d) = with_text(text).map(|i| &seen[i].1) else {
            push(
                subs,
                SubCheck::skipped(name, format!("the note {text:?} never reached the browser")),
            );
            continue;
        };
        let kind = kind_of(d);
        // An unmarked note inside the turn is read by the spec's rule (→ is tool, anything
        // else thinking): a hub may relay it unmarked or marked as that reading says, which a
        // receiver reads alike; another kind changes what the browser draws.
        let read_as = super::model::note_kind(&json!({ "text": d["text"] }));
        let ok = match want {
            Some(k) => kind.as_ref().is_some_and(|v| v == k),
            None => kind.as_ref().is_none_or(|v| v == read_as),
        };
        push(
            subs,
            judged(
                name,
                if ok {
                    Ok(format!("kind {}", kind.unwrap_or(Value::Null)))
                } else {
                    Err(format!(
                        "kind not relayed: note {} arrived with kind {}, want {}",
                        d["text"],
                        kind.unwrap_or(Value::Null),
                        want.map_or(
                            format!("none, or {read_as:?} as the spec reads an unmarked note"),
                            |k| format!("{k:?}")
                        )
                    ))
                },
            ),
        );
    }
    let name = "a plain answer with no turn open stays an answer";
    push(
        subs,
        match with_text(NOTES_PLAIN_ANSWER).map(|i| &seen[i].1) {
            None => SubCheck::skipped(
                name,
                format!(
                    "the plain message {NOTES_PLAIN_ANSWER:?}, sent before typing, never reached the browser (saw {:?}); relaying messages is {}'s to judge",
                    names(&seen),
                    id::CLIENT_ROUTING
                ),
            ),
            Some(d) => judged(
                name,
                match kind_of(d) {
                    None => Ok("relayed without kind".into()),
                    Some(k) => Err(format!(
                        "the agent's plain message {NOTES_PLAIN_ANSWER:?}, sent with no turn open, reached the browser marked kind {k}: a receiver folds it into the work log, but the spec says it \"is an ordinary answer bubble, and stays one\""
                    )),
                },
            ),
        },
    );
}

async fn reconnect(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("reconnect");
    let Some(ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some(mut b) = setup(subs, ctx.browser("reconnect-user", &a).await) else {
        return;
    };
    ag.sock.engine.abort();
    drop(ag);
    ctx.settle(&a, false).await;
    b.emit("message", json!({ "text": "are you there?" }));
    let gone = "agent gone: not connected";
    let reply = b
        .expect("message", ctx.c.wait, "browser (agent gone)")
        .await;
    push(
        subs,
        match reply {
            Ok(m) if is_not_connected(&m) => SubCheck::pass(gone, format!("{}", m["text"])),
            // No "not connected" answer: either the hub still counts the gone agent (this
            // rule's fault) or it never answers "not connected" at all, which is
            // agent-not-connected's fault (one fault, one verdict). The hub's answer for an
            // agentId no agent ever served tells the two apart.
            other => {
                let why = match other {
                    Ok(m) => format!("with the agent gone the browser got {m}"),
                    Err(e) => e,
                };
                match never_served_answer(ctx).await {
                    Ok(Some(m)) if is_not_connected(&m) => SubCheck::fail(
                        gone,
                        format!(
                            "{why}, although the hub answers {} for an agentId no agent ever served: it kept the gone agent",
                            m["text"]
                        ),
                    ),
                    Ok(answer) => SubCheck::skipped(
                        gone,
                        format!(
                            "{why}; for an agentId no agent ever served it answers {} as well: the hub does not say \"{NOT_CONNECTED}\" at all, and agent-not-connected carries that fault",
                            answer.map_or("nothing".to_string(), |m| m.to_string())
                        ),
                    ),
                    Err(e) => SubCheck::skipped(
                        gone,
                        format!("{why}; whose fault it is could not be told: {e}"),
                    ),
                }
            }
        },
    );
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    b.emit("message", json!({ "text": "back?" }));
    let m = ag.expect("message", ctx.c.wait, "reconnected agent").await;
    let cid = m
        .as_ref()
        .ok()
        .and_then(|m| m["clientId"].as_str())
        .unwrap_or("reconnect-user")
        .to_string();
    push(
        subs,
        judged(
            "messages resume after register",
            m.map(|_| "the reconnected agent got the message".into())
                .map_err(|e| format!("messages did not resume after register: {e}")),
        ),
    );
    ag.emit("message", text_frame(&cid, "yes", "rc-1"));
    push(
        subs,
        judged(
            "replies reach the browser again",
            match b.expect("message", ctx.c.wait, "browser").await {
                Ok(r) if r["text"] == "yes" => Ok("received".into()),
                Ok(r) => Err(format!("after reconnection the browser got {r}")),
                Err(e) => Err(e),
            },
        ),
    );
}

/// A reply that starts with the spec's "Agent is not connected".
fn is_not_connected(m: &Value) -> bool {
    m["text"]
        .as_str()
        .is_some_and(|t| t.starts_with(NOT_CONNECTED))
}

/// What a browser of an agentId no agent ever served gets for a message (agent-not-connected's
/// scenario): the first spec `message` within the wait, or none.
async fn never_served_answer(ctx: &Ctx<'_>) -> Result<Option<Value>, String> {
    let a = ctx.agent_id("never-served");
    let mut b = ctx.browser("never-served-user", &a).await?;
    b.emit("message", json!({ "text": "anyone?" }));
    Ok(b.expect("message", ctx.c.wait, "browser").await.ok())
}

async fn http_health(ctx: &Ctx<'_>, subs: &Subs) {
    let idle = "overall, before any agent";
    let want = json!({ "ok": true, "agentConnected": false, "browserClients": 0 });
    push(
        subs,
        match &ctx.idle_health {
            None => SubCheck::new(
                idle,
                crate::rule::Status::NotRun,
                "the hub was given by URL: agents and browsers of others may be connected (judged on a hub this run starts)",
            ),
            Some(Err(e)) => SubCheck::new(idle, crate::rule::Status::NotRun, e.clone()),
            Some(Ok((st, v))) => judged(
                idle,
                match spec_fields(v, &want) {
                    Ok(extras) if *st == 200 => Ok(format!("{v}{extras}")),
                    _ => Err(format!(
                        "/api/agent/health = {st} {v} before this run connected any agent or browser, want 200 {want}"
                    )),
                },
            ),
        },
    );
    let a = ctx.agent_id("health");
    let Some(ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let Some(mut b1) = setup(subs, ctx.browser("health-1", &a).await) else {
        return;
    };
    let Some(b2) = setup(subs, ctx.browser("health-2", &a).await) else {
        return;
    };
    let path = format!("/api/agent/{a}/health");
    let want = json!({ "ok": true, "agentConnected": true, "browserClients": 2, "agentId": a });
    push(
        subs,
        judged(
            "per agent",
            ctx.get(&path)
                .await
                .and_then(|(st, v)| match spec_fields(&v, &want) {
                    Ok(extras) if st == 200 => Ok(format!("{v}{extras}")),
                    _ => Err(format!("{path} = {st} {v}, want 200 {want}")),
                }),
        ),
    );
    let none = ctx.agent_id("health-none");
    let npath = format!("/api/agent/{none}/health");
    let nwant =
        json!({ "ok": true, "agentConnected": false, "browserClients": 0, "agentId": none });
    push(
        subs,
        judged(
            "unknown agent",
            ctx.get(&npath)
                .await
                .and_then(|(st, v)| match spec_fields(&v, &nwant) {
                    Ok(extras) if st == 200 => Ok(format!("{v}{extras}")),
                    _ => Err(format!("{npath} = {st} {v}, want 200 {nwant}")),
                }),
        ),
    );
    push(
        subs,
        judged(
            "overall",
            ctx.get("/api/agent/health").await.and_then(|(st, v)| {
                // Other browsers (another check's, a user's) may be connected: at least ours.
                let count = v["browserClients"].as_u64();
                let fields = json!({ "ok": true, "agentConnected": true, "browserClients": count });
                if let (200, Some(2..), Ok(extras)) = (st, count, spec_fields(&v, &fields)) {
                    Ok(format!("{v}{extras}"))
                } else {
                    Err(format!(
                        "/api/agent/health = {st} {v}, want 200 {{ok: true, agentConnected: true, browserClients: ≥2}}"
                    ))
                }
            }),
        ),
    );
    b2.disconnect();
    drop(b2);
    ctx.settle_browsers(&a, 1).await;
    push(
        subs,
        judged(
            "a browser leaving is counted",
            ctx.get(&path).await.and_then(|(_, v)| {
                if v["browserClients"] == 1 {
                    Ok("browserClients 2 → 1".into())
                } else {
                    Err(format!(
                        "after one of 2 browsers disconnected, {path} says browserClients {}",
                        v["browserClients"]
                    ))
                }
            }),
        ),
    );
    // "agentConnected: boolean // Whether any agent is connected": once the last agent this
    // run connected has left, false again (on a hub this run started, which serves no one
    // else; every earlier rule's agents are gone by now).
    ag.disconnect();
    drop(ag);
    let left = "overall, after every agent left";
    if !ctx.c.own_hub {
        push(
            subs,
            SubCheck::new(
                left,
                crate::rule::Status::NotRun,
                "the hub was given by URL: agents of others may be connected (judged on a hub this run starts)",
            ),
        );
        return;
    }
    let deadline = Instant::now() + ctx.c.wait.max(Duration::from_secs(2));
    let last = loop {
        let got = ctx.get("/api/agent/health").await;
        let done = matches!(&got, Ok((_, v)) if v["agentConnected"] == false);
        if done || Instant::now() >= deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (st, v) = match last {
        Ok(got) => got,
        Err(e) => {
            push(subs, SubCheck::fail(left, e));
            return;
        }
    };
    if v["agentConnected"] == false {
        push(subs, SubCheck::pass(left, "agentConnected true → false"));
        return;
    }
    let sticky = format!(
        "/api/agent/health = {st} {v} after every agent this run connected has disconnected, want agentConnected false (the spec's \"whether any agent is connected\")"
    );
    // A hub that still counts our agent connected after it left, and still routes to it (a
    // browser's message gets no "Agent is not connected"), keeps a gone agent registered:
    // agent-reconnect carries that fault (one fault, one verdict). One that answers "not
    // connected" knows the agent is gone, and its health says otherwise.
    let kept = match ctx.get(&path).await {
        Ok((_, pv)) if pv["agentConnected"] == true => {
            b1.emit("message", json!({ "text": "is the agent gone?" }));
            match b1.expect("message", ctx.c.wait, "browser").await {
                Ok(m) if is_not_connected(&m) => None,
                _ => Some(pv),
            }
        }
        _ => None,
    };
    push(
        subs,
        match kept {
            None => SubCheck::fail(
                left,
                format!("{sticky}; an agent's leaving is not counted hub-wide"),
            ),
            Some(pv) => SubCheck::skipped(
                left,
                format!(
                    "{sticky}, and {path} = {pv}: the hub still counts agent {a} connected after it left, and a browser's message got no \"{NOT_CONNECTED}\"; it keeps a gone agent registered, and {} carries that fault",
                    id::AGENT_RECONNECT
                ),
            ),
        },
    );
}

async fn http_message(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("http");
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let r = ctx
        .post(
            &format!("/api/agent/{a}/message"),
            json!({ "text": "over http" }),
            ctx.c.wait,
        )
        .await;
    push(
        subs,
        judged(
            "answer",
            r.and_then(|(st, v)| {
                if let (200, Ok(extras)) = (st, spec_fields(&v, &json!({ "ok": true }))) {
                    Ok(format!("200 {{ok: true}}{extras}"))
                } else {
                    Err(format!(
                        "fire-and-forget answered {st} {v}, want 200 {{ok: true}}"
                    ))
                }
            }),
        ),
    );
    push(
        subs,
        judged(
            "forwarded",
            ag.expect("message", ctx.c.wait, "agent")
                .await
                .and_then(|m| {
                    if m["text"] != "over http"
                        || same_parts(&m["parts"], &super::text_parts("over http")).is_none()
                    {
                        Err(format!("the agent got {m}"))
                    } else if !m["clientId"].is_string() || !m["messageId"].is_string() {
                        Err(format!(
                            "the agent's message {m} lacks clientId or messageId"
                        ))
                    } else {
                        Ok("text, parts, clientId, messageId".into())
                    }
                }),
        ),
    );
}

/// The note [`http_sync`]'s agent sends before its answer.
const SYNC_NOTE: &str = "Thinking about the sync request.";
/// The agent's `kind: 'tool'` note in the first sync turn (a note too: "not the answer").
const SYNC_TOOL_NOTE: &str = "→ looking up the sync request";
const SYNC_PLAIN: &str = "A plain answer to the sync request.";
/// The unmarked message the agent sends inside the third sync request's turn: a note.
const SYNC_TURN_NOTE: &str = "Looking into the sync request first.";
const SYNC_AFTER_NOTE: &str = "The answer after a note.";

async fn http_sync(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("sync");
    let Some(mut ag) = setup(subs, ctx.agent(&a).await) else {
        return;
    };
    let path = format!("/api/agent/{a}/message/sync");
    let req = ctx.post(&path, json!({ "text": SYNC_ASKS[0] }), ctx.c.wait * 3);
    let answer = async {
        let m = ag.forwarded(ctx.c.wait, &[]).await?;
        let cid = m["clientId"].as_str().unwrap_or("").to_string();
        // Notes (the spec's `kind: 'tool'`, with no turn open yet, and `kind: 'thinking'`
        // inside the turn) are not the answer.
        for (note, kind, label) in [
            (SYNC_TOOL_NOTE, "tool", "sync-note-2"),
            (SYNC_NOTE, "thinking", "sync-note-1"),
        ] {
            if kind == "thinking" {
                ag.emit(
                    "typing",
                    json!({ "clientId": cid, "ts": crate::util::now_ms() }),
                );
            }
            ag.emit(
                "message",
                json!({
                    "clientId": cid,
                    "text": note,
                    "parts": super::text_parts(note),
                    "messageId": agent_message_id(label),
                    "kind": kind,
                }),
            );
        }
        for t in ["Final", "Final answer"] {
            ag.emit("stream", text_frame(&cid, t, "sync-1"));
        }
        ag.emit("stream_end", text_frame(&cid, "Final answer.", "sync-1"));
        Ok::<(), String>(())
    };
    let (resp, sent) = tokio::join!(req, answer);
    match (sent, resp) {
        (Err(e), _) => {
            push(subs, SubCheck::fail("forwarded", e));
            for name in ["final text", "messageId"] {
                push(
                    subs,
                    SubCheck::skipped(
                        name,
                        "the agent never got the request, so it never answered",
                    ),
                );
            }
        }
        (_, Err(e)) => {
            push(subs, SubCheck::fail("final text", e));
            push(
                subs,
                SubCheck::skipped("messageId", "no answer to read it from"),
            );
        }
        (Ok(()), Ok((st, v))) => sync_final_answer(subs, st, &v),
    }
    // The spec's sequence diagram: the agent answers the sync request with one plain message
    // (no typing, no stream), and that message is the complete response.
    let r = sync_exchange(ctx, &mut ag, &path, 1, |cid| {
        vec![("message", text_frame(cid, SYNC_PLAIN, "sync-2"))]
    })
    .await;
    sync_answered(subs, "a plain message answers", r, SYNC_PLAIN, |st, v| {
        format!(
            "the agent answered with one plain message {SYNC_PLAIN:?} (the spec's diagram: message → 200 {{ text, ts }}), /message/sync = {st} {v}"
        )
    });
    // An unmarked message inside a turn (after typing, before stream_end) is a note: "whatever
    // it sends in between is by definition not that answer".
    let r = sync_exchange(ctx, &mut ag, &path, 2, |cid| {
        vec![
            (
                "typing",
                json!({ "clientId": cid, "ts": crate::util::now_ms() }),
            ),
            ("message", text_frame(cid, SYNC_TURN_NOTE, "sync-note-3")),
            ("stream_end", text_frame(cid, SYNC_AFTER_NOTE, "sync-3")),
        ]
    })
    .await;
    let name = "an unmarked note mid-turn is not the answer";
    sync_answered(subs, name, r, SYNC_AFTER_NOTE, |st, v| {
        if v["text"] == SYNC_TURN_NOTE {
            format!(
                "/message/sync = {st} {v}: answered with the unmarked message the agent sent mid-turn (after typing, before its stream_end {SYNC_AFTER_NOTE:?}), a note: \"whatever it sends in between is by definition not that answer\""
            )
        } else {
            format!(
                "the agent sent typing, an unmarked message {SYNC_TURN_NOTE:?}, then stream_end {SYNC_AFTER_NOTE:?}; /message/sync = {st} {v}, want 200 with the stream_end's text"
            )
        }
    });
}

/// A sync request's sub-check: passed when it was answered 200 with `want` as its text, else
/// failed naming what `why` says of the answer (or what went wrong before one).
fn sync_answered(
    subs: &Subs,
    name: &str,
    r: Result<(u16, Value), String>,
    want: &str,
    why: impl FnOnce(u16, &Value) -> String,
) {
    push(
        subs,
        judged(
            name,
            r.and_then(|(st, v)| {
                if st == 200 && v["text"] == want {
                    Ok(format!("{v}"))
                } else {
                    Err(why(st, &v))
                }
            }),
        ),
    );
}

/// The texts of [`http_sync`]'s requests, in order.
const SYNC_ASKS: [&str; 3] = ["sync please", "sync, plainly", "sync, with a note"];

/// [`http_sync`]'s request `n` (of [`SYNC_ASKS`]) at `path`, whose forwarded message the agent
/// answers with the frames `script` gives for its clientId: the HTTP answer, or what went
/// wrong (the agent never got the request, or the request failed).
async fn sync_exchange(
    ctx: &Ctx<'_>,
    ag: &mut Peer<'_>,
    path: &str,
    n: usize,
    script: impl FnOnce(&str) -> Vec<(&'static str, Value)>,
) -> Result<(u16, Value), String> {
    let text = SYNC_ASKS[n];
    let req = ctx.post(path, json!({ "text": text }), ctx.c.wait * 3);
    let answer = async {
        let m = ag.forwarded(ctx.c.wait, &SYNC_ASKS[..n]).await?;
        let cid = m["clientId"].as_str().unwrap_or("").to_string();
        for (event, frame) in script(&cid) {
            ag.emit(event, frame);
        }
        Ok::<(), String>(())
    };
    let (resp, sent) = tokio::join!(req, answer);
    sent.map_err(|e| format!("the request {text:?}: {e}"))?;
    resp
}

/// The first sync request's answer: the agent's final text (not its note), its messageId, ts.
fn sync_final_answer(subs: &Subs, st: u16, v: &Value) {
    push(
        subs,
        judged(
            "final text",
            if st == 200 && v["text"] == "Final answer." && v["ts"].is_number() {
                match ts_not_ms(&v["ts"], None) {
                    None => Ok(format!("{v}")),
                    Some(why) => Err(format!("/message/sync = {st} {v}: {why}")),
                }
            } else if st == 200 && (v["text"] == SYNC_NOTE || v["text"] == SYNC_TOOL_NOTE) {
                let kind = if v["text"] == SYNC_NOTE {
                    "thinking"
                } else {
                    "tool"
                };
                Err(format!(
                    "/message/sync = {st} {v}: answered with the agent's note (kind {kind}), not its final text \"Final answer.\" (notes \"are not the answer\")"
                ))
            } else if st == 200 && v["text"] == "Final answer." {
                // The text is right: name what is not.
                Err(format!(
                    "/message/sync = {st} {v}: ts is {}, want a number (ms since the epoch)",
                    v.get("ts").map_or("missing".into(), |t| format!("{t}"))
                ))
            } else {
                Err(format!(
                    "/message/sync = {st} {v}, want 200 with the final text \"Final answer.\""
                ))
            },
        ),
    );
    push(
        subs,
        judged(
            "messageId",
            if v["messageId"] == json!(agent_message_id("sync-1")) {
                Ok(format!("{} (the agent's)", agent_message_id("sync-1")))
            } else {
                Err(format!(
                    "/message/sync messageId {}, want the agent's {}",
                    v["messageId"],
                    agent_message_id("sync-1")
                ))
            },
        ),
    );
}

/// The timeout answer, twice at once: an agent that never answers, and one that streamed and
/// then went silent (the timeout text must not be built from its snapshots).
async fn http_sync_timeout(ctx: &Ctx<'_>, subs: &Subs) {
    let want = format!("200 {{text: {SYNC_TIMEOUT_TEXT:?}, messageId: \"\", ts}}");
    let judge = |r: Result<(u16, Value), String>, streamed: &[&str]| {
        r.and_then(|(st, v)| {
            if st == 200
                && v["text"] == SYNC_TIMEOUT_TEXT
                && v["messageId"] == ""
                && v["ts"].is_number()
            {
                // The hub's own clock: epoch milliseconds, as every other ts (a timeout stamped
                // in seconds passed, where a relayed event's failed event-fields).
                return match rules::ts_not_ms(&v["ts"], None, crate::util::now_ms() as f64) {
                    None => Ok(format!("{v}")),
                    Some(unit) => Err(format!("the timeout answered {st} {v}: {unit}")),
                };
            }
            let concat: String = streamed.concat();
            let why = if !streamed.is_empty() && v["text"] == concat.as_str() {
                " (the stream snapshots concatenated, although each stream carries the whole accumulation)"
            } else if streamed.last().is_some_and(|l| v["text"] == *l) {
                " (the last stream snapshot, not the spec's timeout text)"
            } else {
                ""
            };
            let after = if streamed.is_empty() {
                String::new()
            } else {
                format!("after the agent streamed {streamed:?} and went silent, ")
            };
            Err(format!("{after}the timeout answered {st} {v}{why}, want {want}"))
        })
    };
    let silent = async {
        let a = ctx.agent_id("sync-timeout");
        let _ag = ctx.agent(&a).await?; // connected, never answers
        Ok::<_, String>(
            ctx.post(
                &format!("/api/agent/{a}/message/sync"),
                json!({ "text": "nobody answers" }),
                ctx.c.sync_timeout + ctx.c.wait * 2,
            )
            .await,
        )
    };
    let streamed = ["Part", "Partial"];
    let streaming = async {
        let a = ctx.agent_id("sync-timeout-stream");
        let mut ag = ctx.agent(&a).await?;
        let path = format!("/api/agent/{a}/message/sync");
        let req = ctx.post(
            &path,
            json!({ "text": "start, then stall" }),
            ctx.c.sync_timeout + ctx.c.wait * 2,
        );
        let play = async {
            let m = ag.expect("message", ctx.c.wait, "agent").await?;
            let cid = m["clientId"].as_str().unwrap_or("").to_string();
            ag.emit(
                "typing",
                json!({ "clientId": cid, "ts": crate::util::now_ms() }),
            );
            for t in streamed {
                ag.emit("stream", text_frame(&cid, t, "stall-1"));
            }
            Ok::<(), String>(())
        };
        let asked = Instant::now();
        let (r, played) = tokio::join!(req, play);
        played?;
        Ok::<_, String>((r, asked.elapsed()))
    };
    let (r1, r2) = tokio::join!(silent, streaming);
    push(
        subs,
        match r1 {
            Ok(r) => judged("an agent that never answers", judge(r, &[])),
            Err(e) => SubCheck::skipped("an agent that never answers", e),
        },
    );
    let name = "an agent that streamed, then went silent";
    push(
        subs,
        match r2 {
            // An answer well before the timeout, and not the timeout's: the hub answered from
            // the streams without waiting for stream_end, so its timeout was never reached.
            // What the sync answer carries is http-sync's fact (one fault, one verdict).
            Ok((Ok((st, v)), took))
                if took < ctx.c.sync_timeout / 2 && v["text"] != SYNC_TIMEOUT_TEXT =>
            {
                SubCheck::skipped(
                    name,
                    format!(
                        "the hub answered {st} {v} after {took:?}, before its {:?} timeout, while the agent had only streamed {streamed:?}: the timeout was never reached; answering before stream_end is {}'s to judge",
                        ctx.c.sync_timeout,
                        id::HTTP_SYNC
                    ),
                )
            }
            Ok((r, _)) => judged(name, judge(r, &streamed)),
            Err(e) => SubCheck::skipped(name, e),
        },
    );
}

/// Events a quiet browser may get unasked within a second before it is a flood.
pub(crate) const FLOOD: usize = 50;

/// The rules whose verdicts rest on harness browsers past welcome (what they receive, what
/// they send reaching the agent): a hub that floods every browser hides that evidence, so a
/// shortfall of theirs is robustness's fault. Handshakes and welcome (the first event), the
/// HTTP rules and the tally of names are judged on evidence a flood does not hide.
const FLOOD_SENSITIVE: &[&str] = &[
    id::PING_PONG,
    id::LEGACY_PARTS,
    id::AGENT_ISOLATION,
    id::CLIENT_ROUTING,
    id::SAME_USER_BROWSERS,
    id::AGENT_TAKEOVER,
    id::AGENT_NOT_CONNECTED,
    id::EVENT_FIELDS,
    id::MALFORMED_PAYLOADS,
    id::STREAM_RELAY,
    id::STREAMING_REPLACE,
    id::NOTES,
    id::AGENT_RECONNECT,
    id::HTTP_HEALTH,
];

/// Whether the hub floods a quiet browser after welcome: the `no flood after welcome`
/// sub-check, measured once per run (robustness reports it; a flood-sensitive rule that fell
/// short asks for it to tell whether the flood hid its evidence).
async fn flood_after_welcome(ctx: &Ctx<'_>) -> SubCheck {
    if let Some(c) = ctx.flood.borrow().clone() {
        return c;
    }
    let c = measure_flood(ctx).await;
    *ctx.flood.borrow_mut() = Some(c.clone());
    c
}

/// Sub-checks of otherwise flood-proof rules whose evidence a flood can hide: welcome's
/// long-polling session is read one poll at a time, and a hub that floods it after welcome
/// can drop the session (its buffer full, or its ping behind the flood) before the poll
/// that carries welcome is read. Welcome over WebSocket is judged on the first event and
/// stays judged.
fn flood_sensitive_subcheck(rule: &str, name: &str) -> bool {
    rule == id::WELCOME && name.starts_with("welcomed over long-polling")
}

/// A flood-sensitive rule that fell short on a hub that floods browsers: skipped naming
/// robustness (the flood), its shortfalls kept as evidence but not judged. In a rule that is
/// flood-sensitive only in some sub-checks, only theirs are not judged: a failure the flood
/// cannot explain keeps the rule failed.
fn flooded(rule: &str, v: Verdict, flood: &SubCheck) -> Verdict {
    let cause = format!(
        "the hub floods each browser after welcome ({}): what this rule's browsers received \
cannot be told from the flood; not judged, {} carries that fault",
        flood.evidence,
        id::ROBUSTNESS
    );
    let whole = FLOOD_SENSITIVE.contains(&rule);
    let subs: Vec<SubCheck> = v
        .subchecks
        .into_iter()
        .map(|c| match c.status {
            crate::rule::Status::Fail | crate::rule::Status::Skipped
                if whole || flood_sensitive_subcheck(rule, &c.name) =>
            {
                SubCheck::skipped(
                    c.name,
                    format!("not judged (flood; {}): {}", id::ROBUSTNESS, c.evidence),
                )
            }
            _ => c,
        })
        .collect();
    if !whole && subs.iter().any(|c| c.status == crate::rule::Status::Fail) {
        return Verdict::from_all_subchecks(rule, subs);
    }
    Verdict::skipped(rule, cause).with_subchecks(subs)
}

/// Rules whose browsers wait for answers an agent addressed to them: a hub that routes those
/// answers to another browser leaves them waiting.
const ROUTED: &[&str] = &[
    id::AGENT_ISOLATION,
    id::SAME_USER_BROWSERS,
    id::AGENT_TAKEOVER,
    id::LEGACY_PARTS,
    id::STREAM_RELAY,
    id::AGENT_RECONNECT,
];

/// Whether a sub-check's evidence is a browser that received nothing it waited for (the
/// words [`Peer::expect`] and the rules use for it), not something wrong that arrived.
fn nothing_arrived(evidence: &str) -> bool {
    static NOTHING: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    NOTHING
        .get_or_init(|| {
            regex::Regex::new(r"\bno [a-z_]+ within\b|\bgot no reply\b|\bsaw nothing within\b")
                .expect("valid regex")
        })
        .is_match(evidence)
}

/// Whether the hub misroutes, seen once per run: an answer the agent addresses to one of its
/// two browsers reaches the other and not its own (what client-routing fails on). `Some` says
/// what was seen; `None` when the answer reached its browser, or reached no one (not routed
/// elsewhere: the rules keep their own evidence).
async fn misrouting(ctx: &Ctx<'_>) -> Option<String> {
    if let Some(seen) = ctx.misroute.borrow().clone() {
        return seen;
    }
    let seen = async {
        let a = ctx.agent_id("misroute-probe");
        let ag = ctx.agent(&a).await.ok()?;
        let mut own = ctx.browser("misroute-probe-1", &a).await.ok()?;
        let mut other = ctx.browser("misroute-probe-2", &a).await.ok()?;
        let text = "for misroute-probe-1";
        ag.emit(
            "message",
            text_frame("misroute-probe-1", text, "misroute-probe"),
        );
        let mine = own.expect("message", ctx.c.wait, "misroute-probe-1").await;
        let theirs = other
            .expect("message", ctx.short(), "misroute-probe-2")
            .await;
        let reached_other = theirs.is_ok_and(|m| m["text"] == text);
        (mine.is_err() && reached_other).then(|| {
            "the hub misroutes (an answer the agent addressed to one of its browsers reached its \
             other browser and not its own)"
                .to_string()
        })
    }
    .await;
    *ctx.misroute.borrow_mut() = Some(seen.clone());
    seen
}

/// Rules whose agent answers by the clientId a browser's (or an HTTP request's) message
/// reached it with, or that read that clientId: a hub that forwards messages without it
/// leaves every answer unaddressed.
const ADDRESSED: &[&str] = &[
    id::AGENT_ISOLATION,
    id::SAME_USER_BROWSERS,
    id::AGENT_TAKEOVER,
    id::LEGACY_PARTS,
    id::EVENT_FIELDS,
    id::STREAM_RELAY,
    id::STREAMING_REPLACE,
    id::NOTES,
    id::AGENT_RECONNECT,
    id::HTTP_MESSAGE,
    id::HTTP_SYNC,
    id::HTTP_SYNC_TIMEOUT,
];

/// Whether a sub-check fell short the way unaddressed answers make it: a clientId missing or
/// not the one wanted, nothing arriving, or a sync request the hub answered only at its
/// timeout (the agent's answer named no waiting request).
fn unaddressed_shortfall(evidence: &str) -> bool {
    client_id_shortfall(evidence) || never_came(evidence)
}

/// Whether a sub-check's evidence is an answer that never came: nothing arriving, or a sync
/// request the hub answered only at its timeout.
fn never_came(evidence: &str) -> bool {
    nothing_arrived(evidence)
        || evidence.contains("never reached")
        || evidence.contains("reached the browser within")
        || evidence.contains(SYNC_TIMEOUT_TEXT)
        || evidence.contains("messageId \"\", want the agent's")
}

/// Whether browser messages reach the agent without the clientId their browser was welcomed
/// with, seen once per run: a probe browser's message (what client-routing fails on). `None`
/// when it arrives with that clientId, or does not arrive at all (the rules keep their own
/// evidence).
async fn unaddressed(ctx: &Ctx<'_>) -> Option<String> {
    if let Some(seen) = ctx.unaddressed.borrow().clone() {
        return seen;
    }
    let seen = async {
        let a = ctx.agent_id("address-probe");
        let mut ag = ctx.agent_unprobed(&a).await.ok()?;
        let (b, w) = ctx
            .browser_welcomed("address-probe", &[], &a)
            .await
            .ok()?;
        b.emit("message", json!({ "text": "bridgewire address probe" }));
        let m = ag.expect("message", ctx.c.wait, "agent").await.ok()?;
        (m["clientId"] != w["clientId"] || !m["clientId"].is_string()).then(|| {
            format!(
                "browser messages reach the agent without the sender's clientId (a probe browser welcomed as {} reached it with clientId {})",
                w["clientId"], m["clientId"]
            )
        })
    }
    .await;
    *ctx.unaddressed.borrow_mut() = Some(seen.clone());
    seen
}

/// Whether a sub-check fell short the way clientIds the hub makes up make it: an agent that
/// got another clientId than the sender's sub, or a browser addressed by its sub that got
/// nothing.
fn client_id_shortfall(evidence: &str) -> bool {
    evidence.contains("clientId") || nothing_arrived(evidence)
}

/// Whether the hub gives browsers clientIds of its own, seen once per run: a browser whose
/// token's sub is `clientid-probe` (no roles) is welcomed with another clientId (what welcome
/// fails on). `None` when it is welcomed as the sub, or not at all.
async fn own_client_ids(ctx: &Ctx<'_>) -> Option<String> {
    if let Some(seen) = ctx.client_ids.borrow().clone() {
        return seen;
    }
    let seen = async {
        let a = ctx.agent_id("clientid-probe");
        let (_, w) = ctx.browser_welcomed("clientid-probe", &[], &a).await.ok()?;
        (w["clientId"] != "clientid-probe").then(|| {
            format!(
                "the hub gives browsers clientIds of its own (welcome for sub \"clientid-probe\" is {w})"
            )
        })
    }
    .await;
    *ctx.client_ids.borrow_mut() = Some(seen.clone());
    seen
}

/// A rule that fell short on a hub with a fault `owner` judges, `seen` by a probe: its failed
/// sub-checks whose shortfall that fault `explains` are not judged, naming `owner`; a failure
/// it cannot explain keeps the rule failed.
fn explained(
    rule: &str,
    v: Verdict,
    owner: &str,
    seen: &str,
    explains: fn(&str) -> bool,
) -> Verdict {
    carried_by(rule, v, owner, seen, |c| {
        c.status == crate::rule::Status::Fail && explains(&c.evidence)
    })
}

/// A rule on a hub with a fault `owner` judges, `seen` by a probe: its sub-checks `follows`
/// picks are not judged, naming `owner`; a failure left keeps the rule failed, and a rule
/// with none is skipped naming `owner`.
fn carried_by(
    rule: &str,
    v: Verdict,
    owner: &str,
    seen: &str,
    follows: impl Fn(&SubCheck) -> bool,
) -> Verdict {
    let subs: Vec<SubCheck> = v
        .subchecks
        .into_iter()
        .map(|c| {
            if follows(&c) {
                SubCheck::skipped(
                    c.name,
                    format!("not judged ({owner}'s fault): {}", c.evidence),
                )
            } else {
                c
            }
        })
        .collect();
    if subs.iter().any(|c| c.status == crate::rule::Status::Fail) {
        return Verdict::from_all_subchecks(rule, subs);
    }
    Verdict::skipped(
        rule,
        format!(
            "{seen}: what this rule saw follows from that; not judged, {owner} carries that fault"
        ),
    )
    .with_subchecks(subs)
}

/// What a hub's frame limit does to this run's traffic, measured by [`frame_capacity`].
#[derive(Clone, Debug)]
struct FrameCapacity {
    /// The largest frame the probe sent that the hub kept (its connection still open, and
    /// answering a ping where it answers one), in bytes.
    kept: usize,
    /// The first frame the hub closed a connection on, when one: its length and what was
    /// seen.
    dropped: Option<(usize, String)>,
    /// The largest frame this run's spec traffic had sent when measured, and what it was.
    needed: (usize, String),
}

impl FrameCapacity {
    /// The fault, when the hub closes connections on frames no larger than this run's spec
    /// traffic sends (`needed`: its largest frame by now, and what it was). The spec names no
    /// frame size, so a limit above that traffic is the hub's own choice, judged nowhere.
    fn fault(&self, needed: &(usize, String)) -> Option<String> {
        let (len, seen) = self.dropped.as_ref()?;
        let needed = needed.max(&self.needed);
        (*len <= needed.0).then(|| {
            format!(
                "the hub closes connections on frames this run's spec traffic needs: {seen}, \
                 after keeping one of {} bytes; this run sent frames up to {} bytes ({})",
                self.kept, needed.0, needed.1
            )
        })
    }
}

/// Frame sizes the probe tries on one connection: the smallest frame of its kind (`floor`),
/// then powers of two above it, then `up_to` (when larger).
fn frame_ladder(floor: usize, up_to: usize) -> Vec<usize> {
    let mut sizes = vec![floor];
    let mut size = (floor + 1).next_power_of_two();
    while size < up_to {
        sizes.push(size);
        size *= 2;
    }
    if up_to > floor {
        sizes.push(up_to);
    }
    sizes
}

/// The length of the frame that sends `data` as a `message` event on `nsp`.
fn message_frame_len(nsp: &str, data: &Value) -> usize {
    SioPacket::event(nsp, "message", data.clone())
        .to_frame()
        .len()
}

/// A `message` frame for `nsp` of about `size` bytes, its text padded; `None` when even an
/// empty text is larger. `make` builds the frame's data around a text (its parts may mirror
/// the text, so a padded character can cost more than one byte).
fn sized_message(nsp: &str, size: usize, make: impl Fn(&str) -> Value) -> Option<(Value, usize)> {
    let len = |v: &Value| message_frame_len(nsp, v);
    let empty = len(&make(""));
    let per_char = len(&make("x")).saturating_sub(empty).max(1);
    let pad = size.checked_sub(empty)? / per_char;
    let data = make(&"x".repeat(pad));
    let n = len(&data);
    Some((data, n))
}

/// Sends a `message` frame of each size in turn on one connection, each followed by a ping,
/// until the hub closes the connection: the lengths of the frames kept, and the one closed on
/// with what was seen. A ping that gets no pong within a short wait, on a connection still
/// open, counts as kept (a hub that does not answer this side's pings is ping-pong's to judge).
async fn send_sized(
    ctx: &Ctx<'_>,
    peer: &mut Peer<'_>,
    who: &str,
    sizes: &[usize],
    make: &impl Fn(&str) -> Value,
) -> (Vec<usize>, Option<(usize, String)>) {
    let nsp = peer.sock.nsp.clone();
    let mut kept = Vec::new();
    let mut pongs = false;
    for &size in sizes {
        let Some((data, len)) = sized_message(&nsp, size, make) else {
            continue;
        };
        peer.emit("message", data);
        peer.emit("ping", json!({}));
        // A close comes at once; a pong is awaited in full only while this side's pings have
        // been answered.
        let deadline = Instant::now()
            + if pongs || kept.is_empty() {
                ctx.short()
            } else {
                Duration::from_millis(150)
            };
        let closed = loop {
            match peer.sock.recv_until(deadline).await {
                Ok(e) if e.name == "pong" => {
                    pongs = true;
                    break None;
                }
                Ok(_) => continue,
                Err(RecvError::Timeout) => break None,
                Err(RecvError::Closed(r)) => break Some(format!("closed the connection ({r})")),
                Err(RecvError::Disconnected) => break Some("disconnected it".to_string()),
                Err(e) => break Some(format!("{e}")),
            }
        };
        match closed {
            None => kept.push(len),
            Some(how) => {
                let seen = format!("{who}'s message event of {len} bytes: the hub {how}");
                return (kept, Some((len, seen)));
            }
        }
    }
    (kept, None)
}

/// One side's frame limit below `up_to` bytes, if any: `message` frames of growing size on
/// one connection (the smallest of its kind, then powers of two); a close is confirmed on a
/// new connection, where the largest frame kept must be kept again and the one closed on
/// closed again (a hub that closes a connection after so many messages, whatever their size,
/// has no frame limit). `Err` when nothing can be concluded: the smallest frame closed too,
/// or the close did not repeat.
async fn frame_limit_of<'c, P, F>(
    ctx: &'c Ctx<'_>,
    who: &str,
    up_to: usize,
    connect: impl Fn(u32) -> F,
    make: impl Fn(&str) -> Value,
) -> Result<(usize, Option<(usize, String)>), String>
where
    F: std::future::Future<Output = Result<P, String>>,
    P: std::ops::DerefMut<Target = Peer<'c>>,
{
    let mut peer = connect(1).await?;
    let floor = message_frame_len(&peer.sock.nsp, &make(""));
    let (kept, dropped) = send_sized(ctx, &mut peer, who, &frame_ladder(floor, up_to), &make).await;
    peer.disconnect();
    let Some((len, seen)) = dropped else {
        return Ok((kept.last().copied().unwrap_or(0), None));
    };
    let Some(&last) = kept.last() else {
        return Err(format!(
            "{seen}; it was the smallest tried: not a matter of size"
        ));
    };
    let mut again = connect(2).await?;
    let repeat = send_sized(ctx, &mut again, who, &[last, len], &make).await;
    again.disconnect();
    match repeat {
        (k, Some((l, _))) if k == [last] && l == len => {}
        (k, _) => {
            return Err(format!(
                "{seen}, but on a new connection frames of {last} and {len} bytes gave {} kept: \
                 not a frame limit",
                k.len()
            ));
        }
    }
    // The limit itself, between the two: one frame per new connection, halving the gap, so a
    // refusal seen as the close of a CONNECT can be told from the limit to the byte.
    let (mut lo, mut hi, mut seen) = (last, len, seen);
    for n in 3..3 + BISECT_STEPS {
        if hi - lo <= 1 {
            break;
        }
        let mut peer = connect(n).await?;
        let Some((_, mid)) = sized_message(&peer.sock.nsp, lo + (hi - lo) / 2, &make) else {
            break;
        };
        if mid <= lo || mid >= hi {
            // The frame's shape cannot be padded to a size in between.
            break;
        }
        let (kept, dropped) = send_sized(ctx, &mut peer, who, &[mid], &make).await;
        peer.disconnect();
        match dropped {
            Some((l, s)) => (hi, seen) = (l, s),
            None if kept == [mid] => lo = mid,
            None => break,
        }
    }
    Ok((lo, Some((hi, seen))))
}

/// Bound on the new connections that narrow a frame limit down once it is found (a gap of
/// 2^12 bytes is closed to the byte).
const BISECT_STEPS: u32 = 12;

/// Whether the hub closes connections on frames as large as this run's spec traffic sent,
/// measured once per run (again when the traffic has grown past what was measured and no
/// limit was found): an agent's messages, then a browser's, of growing size. `Err` says why
/// nothing could be concluded.
async fn frame_capacity(ctx: &Ctx<'_>) -> Result<FrameCapacity, String> {
    let needed = ctx.meter.largest();
    if let Some(seen) = ctx.frames.borrow().clone() {
        let settled = match &seen {
            Err(_) => true,
            Ok(f) => f.dropped.is_some() || f.needed.0 >= needed.0,
        };
        if settled {
            return seen;
        }
    }
    let seen = async {
        // Short names: the probe's own handshakes stay below a small limit when they can.
        let a = ctx.agent_id("fp");
        let up = frame_limit_of(
            ctx,
            "an agent",
            needed.0,
            |n| {
                let a = format!("{a}-{n}");
                async move { ctx.agent_unprobed(&a).await.map(Box::new) }
            },
            // The smallest frame an agent addresses to a browser: the probe is of size.
            |t| json!({ "clientId": "fp", "text": t }),
        )
        .await?;
        // A browser only when the agent's frames were all kept: its handshake is a frame too.
        let (kept, dropped) = match up {
            (kept, Some(d)) => (kept, Some(d)),
            (_, None) => {
                frame_limit_of(
                    ctx,
                    "a browser",
                    needed.0,
                    |n| {
                        let a = a.clone();
                        async move { ctx.browser(&format!("fp-{n}"), &a).await.map(Box::new) }
                    },
                    |t| json!({ "text": t }),
                )
                .await?
            }
        };
        Ok(FrameCapacity {
            kept,
            dropped,
            needed: needed.clone(),
        })
    }
    .await;
    *ctx.frames.borrow_mut() = Some(seen.clone());
    seen
}

/// Whether a sub-check fell short the way a hub that closes connections on frames this run
/// needs makes it: a connection closed or never made, or something waited for that never
/// came.
fn frame_shortfall(evidence: &str) -> bool {
    never_came(evidence)
        || [
            "closed",
            "could not connect",
            // Engine.IO's answer over long-polling to a payload over its limit.
            "= 413",
            " within ",
            "error sending request",
        ]
        .iter()
        .any(|w| evidence.contains(w))
}

/// Where a refusal was a closed connection: the words that give the CONNECT's length.
const CLOSED_AFTER_CONNECT: &str = ", after a CONNECT of ";

/// The length of the CONNECT a refusal seen as a closed connection followed ([`refused`]).
fn closed_after_connect(evidence: &str) -> Option<usize> {
    let (_, rest) = evidence.split_once(CLOSED_AFTER_CONNECT)?;
    rest.split(' ').next()?.parse().ok()
}

/// Whether a sub-check's evidence is the hub closing a connection on a frame larger than the
/// largest it keeps (`kept` bytes), whatever the frame carries: a shortfall that follows from
/// it, or a refusal seen as a close of a CONNECT over `kept` bytes (no refusal at all).
fn frame_explains(c: &SubCheck, kept: usize) -> bool {
    match c.status {
        crate::rule::Status::Fail | crate::rule::Status::Skipped => frame_shortfall(&c.evidence),
        crate::rule::Status::Pass => closed_after_connect(&c.evidence).is_some_and(|n| n > kept),
        _ => false,
    }
}

/// Robustness's judgement of the hub's frame limit against this run's spec traffic.
async fn spec_sized_frames(ctx: &Ctx<'_>) -> SubCheck {
    const NAME: &str = "frames the spec's traffic takes";
    match frame_capacity(ctx).await {
        Err(why) => SubCheck::skipped(NAME, format!("not measured: {why}")),
        Ok(f) => {
            let needed = ctx.meter.largest();
            match (f.fault(&needed), &f.dropped) {
                (Some(fault), _) => SubCheck::fail(NAME, fault),
                (None, None) => SubCheck::pass(
                    NAME,
                    format!(
                        "frames up to {} bytes kept; the largest this run's spec traffic sent \
                         is {} bytes ({}); the spec names no frame size, so none larger was tried",
                        f.kept, needed.0, needed.1
                    ),
                ),
                (None, Some((_, seen))) => SubCheck::pass(
                    NAME,
                    format!(
                        "{seen}, larger than any frame this run's spec traffic sent ({} bytes, \
                         {}); the spec names no frame size (not judged)",
                        needed.0, needed.1
                    ),
                ),
            }
        }
    }
}

async fn measure_flood(ctx: &Ctx<'_>) -> SubCheck {
    let a = ctx.agent_id("robust");
    // No flood after welcome. A few unsolicited events (an extension's status) are not one;
    // `spec-events-only` reports their names.
    match ctx.browser("robust-quiet", &a).await {
        Err(e) => SubCheck::skipped("no flood after welcome", e),
        Ok(mut quiet) => {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut spec = 0usize;
            while quiet.recv_until(deadline).await.is_ok() {
                spec += 1;
                if spec + quiet.extras.len() >= 10 * FLOOD {
                    break;
                }
            }
            let n = spec + quiet.extras.len();
            quiet.disconnect();
            {
                if n >= FLOOD {
                    SubCheck::fail(
                        "no flood after welcome",
                        format!(
                            "the hub sent {}{n} unsolicited events within 1 s of welcome (flood)",
                            if n >= 10 * FLOOD { "≥" } else { "" }
                        ),
                    )
                } else {
                    SubCheck::pass(
                        "no flood after welcome",
                        format!("{n} unsolicited event(s) within 1 s"),
                    )
                }
            }
        }
    }
}

async fn robustness(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("robust");
    push(subs, flood_after_welcome(ctx).await);
    push(subs, spec_sized_frames(ctx).await);
    let bad: [(&str, Message); 6] = [
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
        (
            "an event without a name",
            Message::text(format!("42{CLIENT_NSP},[]")),
        ),
    ];
    for (what, msg) in bad {
        let Ok(mut b) = ctx.browser("robust-bad", &a).await else {
            push(
                subs,
                SubCheck::skipped(what, "no browser could connect before sending it"),
            );
            continue;
        };
        b.sock.engine.send_raw(msg);
        let did = match b.recv(Duration::from_millis(300)).await {
            Err(RecvError::Disconnected) => "disconnected the browser".to_string(),
            Err(RecvError::Closed(r)) => format!("closed the connection ({r})"),
            Err(RecvError::Invalid { frame, .. }) => format!("sent an invalid frame {frame:?}"),
            Err(RecvError::Timeout) => "ignored it".to_string(),
            Ok(e) => format!("answered {:?}", e.name),
        };
        b.sock.engine.abort(); // and an abrupt TCP close
        drop(b);
        push(
            subs,
            judged(
                what,
                alive(ctx, &a)
                    .await
                    .map(|()| format!("the hub {did}, then an abrupt close; it still serves"))
                    .map_err(|e| format!("the hub {did}; after it and an abrupt close: {e}")),
            ),
        );
    }
}

/// The hub still serves: a new browser gets welcome and health answers.
async fn alive(ctx: &Ctx<'_>, a: &str) -> Result<(), String> {
    ctx.browser("robust-alive", a).await?;
    ctx.get("/api/agent/health").await?;
    Ok(())
}

/// Judges, once, every event the spec does not list that any rule's peers received (this rule
/// runs last), after a small scenario of its own so it judges something when run alone: a spec
/// name misused fails it ([`spec_name_misuse`]); extensions are listed as information.
async fn spec_events_only(ctx: &Ctx<'_>, subs: &Subs) {
    let a = ctx.agent_id("spec-events");
    if let (Ok(mut ag), Ok(mut b)) = (
        ctx.agent(&a).await,
        ctx.browser("spec-events-user", &a).await,
    ) {
        b.emit("ping", json!({}));
        let _ = b.expect("pong", ctx.c.wait, "browser").await;
        ag.emit("ping", json!({}));
        let _ = ag.expect("pong", ctx.c.wait, "agent").await;
        b.emit("message", json!({ "text": "hello" }));
        if let Ok(m) = ag.expect("message", ctx.c.wait, "agent").await {
            let cid = m["clientId"].as_str().unwrap_or("").to_string();
            ag.emit(
                "typing",
                json!({ "clientId": cid, "ts": crate::util::now_ms() }),
            );
            ag.emit("stream", text_frame(&cid, "Hi", "spec-1"));
            ag.emit("stream_end", text_frame(&cid, "Hi there", "spec-1"));
            let _ = b.collect_until("stream_end", ctx.c.wait).await;
        }
        let _ = b.silent(ctx.short()).await;
    }
    let ext = ctx.tally.extensions.borrow();
    let spec = *ctx.tally.spec_events.borrow();
    for side in ["hub→browser", "hub→agent"] {
        let listed = if side == "hub→browser" {
            TO_BROWSER
        } else {
            TO_AGENT
        };
        let (mut extensions, mut misused) = (Vec::new(), Vec::new());
        for ((_, n), c) in ext.iter().filter(|((s, _), _)| *s == side) {
            match spec_name_misuse(n) {
                None => extensions.push(format!("{n:?} ×{c}")),
                Some(why) => misused.push(format!("{n:?} ×{c} ({why})")),
            }
        }
        let info = extensions_note(&extensions);
        push(
            subs,
            if spec == 0 && ext.is_empty() {
                SubCheck::skipped(side, "no event was received at all")
            } else if misused.is_empty() {
                SubCheck::pass(side, format!("spec events as listed {listed:?}{info}"))
            } else {
                SubCheck::fail(
                    side,
                    format!(
                        "spec event names used where the spec does not give them: {}{info}",
                        misused.join(", ")
                    ),
                )
            },
        );
    }
}

/// The event names the spec lists only from browsers and agents to the hub; with
/// [`TO_BROWSER`] and [`TO_AGENT`], every event name the spec lists.
const TO_HUB_ONLY: &[&str] = &["ping", "register"];

/// Every event name the spec lists, on any connection and in either direction.
fn spec_names() -> impl Iterator<Item = &'static str> {
    TO_BROWSER
        .iter()
        .chain(TO_AGENT)
        .chain(TO_HUB_ONLY)
        .copied()
}

/// Why a name the spec does not list for a side misuses the spec's names, if it does. The spec
/// lists the events of each side and forbids nothing else, so a new name is an extension (a
/// receiver built from the spec ignores it). What it does not allow is its own names with
/// another meaning: a spec name sent where the spec does not give it (`typing` to an agent,
/// `register` to a browser), or a look-alike of one (`streamEnd`, `Stream-End`), which a
/// receiver built from the spec misses as the event it imitates.
pub fn spec_name_misuse(name: &str) -> Option<String> {
    if spec_names().any(|s| s == name) {
        return Some("a spec event name the spec does not give this side".into());
    }
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    };
    let folded = fold(name);
    spec_names()
        .find(|s| fold(s) == folded)
        .map(|s| format!("a look-alike of the spec event {s:?}"))
}
/// `got` parts equal `want` on the fields the spec gives each part: `Some` with a note naming
/// the extension fields inside them (empty when none), `None` when they differ. The spec gives
/// `BridlePart` as TypeScript interfaces, which a part with more fields still satisfies (as
/// event-fields tolerates fields beside `parts`).
fn same_parts(got: &Value, want: &Value) -> Option<String> {
    let (view, extensions) = super::model::parts_spec_view(got);
    (view == *want).then(|| {
        if extensions.is_empty() {
            String::new()
        } else {
            format!(
                "; extensions inside the parts, which the spec does not forbid (not judged): {}",
                extensions.join(", ")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{flooded, id, spec_name_misuse, textual_uuid};
    use crate::rule::{Status, SubCheck, Verdict};

    /// Welcome's long-polling session lost to a flood is not judged (robustness carries it);
    /// a wrong clientId over WebSocket beside it keeps welcome failed.
    #[test]
    fn a_flood_excuses_only_welcomes_polling_session() {
        let flood = SubCheck::fail("no flood after welcome", "≥500 events within 1 s");
        let polling = SubCheck::fail(
            "welcomed over long-polling, the default client's first transport",
            "a poll = 400",
        );
        let lost = Verdict::from_all_subchecks(
            id::WELCOME,
            vec![
                SubCheck::pass("clientId is the JWT sub", "ok"),
                polling.clone(),
            ],
        );
        let v = flooded(id::WELCOME, lost, &flood);
        assert_eq!(v.status, Status::Skipped);
        assert!(
            v.detail.contains("robustness carries that fault"),
            "{}",
            v.detail
        );
        assert_eq!(v.subchecks[0].status, Status::Pass);
        assert_eq!(v.subchecks[1].status, Status::Skipped);
        let wrong = Verdict::from_all_subchecks(
            id::WELCOME,
            vec![SubCheck::fail("clientId is the JWT sub", "admin"), polling],
        );
        let v = flooded(id::WELCOME, wrong, &flood);
        assert_eq!(v.status, Status::Fail);
        assert_eq!(v.subchecks[0].status, Status::Fail);
        assert_eq!(v.subchecks[1].status, Status::Skipped);
    }

    /// A UUID as the spec writes one, with its version; other spellings of an id are not.
    #[test]
    fn textual_uuids_and_their_version() {
        assert_eq!(
            textual_uuid("7c9e6679-7425-40de-944b-e07fc1f90ae7"),
            Some(4)
        );
        assert_eq!(
            textual_uuid("7C9E6679-7425-40DE-944B-E07FC1F90AE7"),
            Some(4)
        );
        assert_eq!(
            textual_uuid("01890a5d-ac96-774b-bcce-b302099a8057"),
            Some(7)
        );
        for not in [
            "1",
            "",
            "7c9e6679742540de944be07fc1f90ae7",
            "{7c9e6679-7425-40de-944b-e07fc1f90ae7}",
            "urn:uuid:7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7 ",
            "7c9e667g-7425-40de-944b-e07fc1f90ae7",
            "7c9e66797-425-40de-944b-e07fc1f90ae7",
        ] {
            assert_eq!(textual_uuid(not), None, "{not:?}");
        }
    }

    /// New names are extensions; spec names on the wrong side and look-alikes are misuse.
    #[test]
    fn extensions_are_new_names_and_misuse_is_a_spec_name_or_its_look_alike() {
        for ext in [
            "status",
            "config",
            "hub-info",
            "exception",
            "7",
            "streaming",
        ] {
            assert_eq!(spec_name_misuse(ext), None, "{ext}");
        }
        for (name, like) in [
            ("typing", "spec event name"),
            ("register", "spec event name"),
            ("streamEnd", "look-alike of the spec event \"stream_end\""),
            ("Stream-End", "look-alike of the spec event \"stream_end\""),
            ("MESSAGE", "look-alike of the spec event \"message\""),
        ] {
            let why = spec_name_misuse(name).unwrap_or_default();
            assert!(why.contains(like), "{name}: {why}");
        }
    }
}

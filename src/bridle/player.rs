//! `replay bridle`: plays a recorded cell's browser and agent against a live hub and compares
//! what the browser sees now with what it saw then (normalized hub→browser events and rows).
//!
//! The cell's merged entries become a script, in `(run, seq)` order: a `browser→hub` event is
//! sent by the replayed browser; a `hub→agent` message is awaited by the replayed agent; an
//! `agent→hub` event is sent by it (clientId rewritten to the live message's); a `hub→browser`
//! event is awaited (bounded) and collected; an `http→hub` request is sent without waiting and
//! its answer collected at the recorded `hub→http` line. The browser's JWT is signed afresh for the cell's
//! clientId (`admin` → the ADMIN role); the recorded handshake secrets were redacted.
//!
//! After the script, the browser keeps listening until the hub is idle, so that events a hub
//! build sends beyond the recording are seen: every recorded output arrived (the script awaited
//! each one), and the hub was quiet for an adaptive window measured from its own cadence as in
//! bb's player (`src/bb/player.rs`): 4× the longest of the last 16 gaps before its outputs, at
//! least 10 ms, at most the fixed window (`wait / 10`, 100–500 ms), counted from its last
//! output or the replay's last write, whichever is later. A gap runs from the later of the
//! hub's previous output and the replay's last write to the frame's arrival (read off the
//! socket, not when the script got to it), so the hub's reaction time to what the replay sent
//! counts too: an extra event would be a reaction to the script's last writes. `fixed_windows`
//! keeps the fixed window (the replay's timing before idle detection).

use super::model::{BridleModel, event_of};
use super::transport::{Options, Socket};
use super::{AGENT_NSP, CLIENT_NSP, sign_jwt};
use crate::cell::Cell;
use crate::protocol::Model;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub url: String,
    pub jwt_secret: String,
    pub api_key: String,
    pub wait: Duration,
    /// Wait the full quiet window after the script instead of ending it when the hub is idle.
    pub fixed_windows: bool,
}

/// The adaptive quiet window: `CADENCE_FACTOR` × the longest recent gap, at least `MIN_WINDOW`
/// (as bb's player).
const MIN_WINDOW: Duration = Duration::from_millis(10);
const CADENCE_FACTOR: u32 = 4;
const CADENCE_GAPS: usize = 16;

/// The fixed quiet window after the script.
pub fn fixed_quiet(wait: Duration) -> Duration {
    (wait / 10).clamp(Duration::from_millis(100), Duration::from_millis(500))
}

/// The hub's cadence as the replay sees it.
struct Cadence {
    /// The gaps before the hub's recent outputs.
    gaps: VecDeque<Duration>,
    /// The later of the hub's last output and the replay's last write.
    mark: Instant,
}

impl Cadence {
    fn new() -> Cadence {
        Cadence {
            gaps: VecDeque::with_capacity(CADENCE_GAPS),
            mark: Instant::now(),
        }
    }

    /// The replay sent something (an event, a request, a connect).
    fn wrote(&mut self) {
        self.mark = Instant::now();
    }

    /// A hub output read off its connection at `at`.
    fn arrived(&mut self, at: Option<Instant>) {
        let Some(at) = at else { return };
        if self.gaps.len() == CADENCE_GAPS {
            self.gaps.pop_front();
        }
        self.gaps.push_back(at.saturating_duration_since(self.mark));
        self.mark = self.mark.max(at);
    }

    /// The quiet window, at most `cap`.
    fn window(&self, cap: Duration) -> Duration {
        let longest = self.gaps.iter().max().copied().unwrap_or_default();
        (longest * CADENCE_FACTOR)
            .clamp(MIN_WINDOW, cap.max(MIN_WINDOW))
            .min(cap)
    }
}

/// A replayed cell's outcome.
#[derive(Debug)]
pub enum Outcome {
    Pass {
        events: usize,
        rows: usize,
        /// The live hub's extensions (events the spec does not list, left out of the
        /// comparison), by side and name with counts; empty when there were none.
        extensions: String,
    },
    Fail(String),
    /// Nothing a browser did (agent-only or HTTP cells).
    NotReplayable(String),
}

enum Step {
    /// A recorded packet (CONNECT, DISCONNECT) on the browser's namespace: enacted (the
    /// browser's own disconnect) and shown in the view as it happened live.
    BrowserPacket(Value),
    /// Anything else recorded that the replay does not act on, shown in the view as recorded
    /// (inputs such as another namespace's packets), so both legs list the same kinds of lines.
    Echo(Value),
    BrowserSend(String, Value),
    /// An HTTP API request, sent without waiting (a `/message/sync` answers only after the
    /// agent steps that follow it), and how long the recorded answer took (`None`: no answer
    /// recorded).
    HttpSend(Value, Option<Duration>),
    /// The oldest outstanding HTTP answer.
    HttpExpect,
    /// The next live hub→agent event with this name (a `message` also gives the live clientId).
    AgentExpect(String),
    AgentSend(String, Value),
    /// The next live hub→browser event with this name (others are buffered for later steps).
    BrowserExpect(String),
}

/// What the recording itself waited on: how long each recorded HTTP answer took (a
/// `/message/sync` nobody answered is answered at the hub's sync timeout, 120 s by the spec),
/// summed. A replay awaits each as long again, and a wait more.
pub fn recorded_waits(cell: &Cell) -> Duration {
    let mut sent: VecDeque<f64> = VecDeque::new();
    let mut total = 0.0;
    for entry in cell.recorded() {
        match entry.dir.as_str() {
            "http→hub" => sent.push_back(entry.ts),
            "hub→http" => {
                if let Some(t) = sent.pop_front() {
                    total += (entry.ts - t).max(0.0);
                }
            }
            _ => {}
        }
    }
    Duration::from_secs_f64((total / 1000.0).clamp(0.0, 86_400.0))
}

/// Replays one cell.
pub async fn replay_cell(cell: &Cell, cfg: &ReplayConfig) -> Outcome {
    replay_cell_into(cell, cfg, &mut Vec::new()).await
}

/// The request a recorded `http→hub` line describes: method, path with its query string, and
/// the body as recorded (JSON, or raw text).
fn http_request(
    http: &reqwest::Client,
    base: &str,
    req: &Value,
    wait: Duration,
) -> reqwest::RequestBuilder {
    let method = req["method"]
        .as_str()
        .and_then(|m| reqwest::Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or(reqwest::Method::GET);
    let mut url = format!("{base}{}", req["path"].as_str().unwrap_or("/"));
    if let Some(q) = req["query"].as_str().filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    let mut rb = http.request(method, url).timeout(wait);
    if let Some(text) = req["bodyText"].as_str() {
        rb = rb.body(text.to_string());
        if let Some(ct) = req["contentType"].as_str() {
            rb = rb.header("content-type", ct);
        }
    } else if !req["body"].is_null() {
        rb = rb.json(&req["body"]);
    }
    rb
}

/// Replays one cell. `view_out` gets the live leg's view for parity, in the recorded leg's
/// shape (what the model assembles from a recording): every frame the replayed peers sent and
/// received, in script order, each hub output as it arrived now; pongs included at their
/// recorded place (awaited by name), events the recording lacks appended after quiescence.
pub async fn replay_cell_into(
    cell: &Cell,
    cfg: &ReplayConfig,
    view_out: &mut Vec<Value>,
) -> Outcome {
    let (_, name) = cell.provider_and_name();
    let Some((agent_id, client_id)) = name.split_once("__") else {
        return Outcome::NotReplayable(format!("{name} is not an <agentId>__<clientId> cell"));
    };
    let mut steps = Vec::new();
    let mut recorded = Vec::new();
    let mut has_agent = false;
    let mut has_browser = false;
    let mut has_http = false;
    let mut registers = false;
    // The browser's connections in the cell, and those the hub refused (ended before it sent
    // the browser any event).
    let mut browser_connects = 0;
    let mut refused = 0;
    let mut answered_since_connect = false;
    // The recorded HTTP requests not answered yet (their step and send time), oldest first:
    // answers come in that order (`HttpExpect` takes the oldest).
    let mut unanswered: VecDeque<(usize, f64)> = VecDeque::new();
    for entry in cell.recorded() {
        let Ok(Some(ev)) = event_of(&entry) else {
            continue;
        };
        match entry.dir.as_str() {
            "http→hub" => {
                has_http = true;
                // Compared too (the live leg sends it as recorded): it tells the comparison
                // which answer the next `hub→http` is, and so which of its fields the spec gives.
                recorded.push(ev.clone());
                unanswered.push_back((steps.len(), entry.ts));
                steps.push(Step::HttpSend(ev["http"].clone(), None));
                continue;
            }
            "hub→http" => {
                if let Some((at, sent)) = unanswered.pop_front()
                    && let Some(Step::HttpSend(_, took)) = steps.get_mut(at)
                {
                    *took = Some(Duration::from_secs_f64(
                        ((entry.ts - sent) / 1000.0).clamp(0.0, 86_400.0),
                    ));
                }
                recorded.push(ev.clone());
                steps.push(Step::HttpExpect);
                continue;
            }
            _ => {}
        }
        let Some(name) = ev["event"].as_str().map(str::to_string) else {
            if ev["nsp"] == CLIENT_NSP {
                match (ev["dir"].as_str(), ev["packet"].as_str()) {
                    (Some("browser→hub"), Some("connect")) => {
                        browser_connects += 1;
                        answered_since_connect = false;
                    }
                    (Some("hub→browser"), Some("disconnect" | "connect_error"))
                        if !answered_since_connect =>
                    {
                        refused += 1;
                    }
                    _ => {}
                }
                steps.push(Step::BrowserPacket(ev));
            } else {
                steps.push(Step::Echo(ev));
            }
            continue;
        };
        let data = ev["data"].clone();
        match entry.dir.as_str() {
            "browser→hub" => {
                has_browser = true;
                steps.push(Step::BrowserSend(name, data));
            }
            "hub→browser" => {
                answered_since_connect = true;
                recorded.push(ev.clone());
                steps.push(Step::BrowserExpect(name));
            }
            "hub→agent" => {
                has_agent = true;
                steps.push(Step::AgentExpect(name));
            }
            "agent→hub" => {
                has_agent = true;
                registers |= name == "register";
                steps.push(Step::AgentSend(name, data))
            }
            _ => steps.push(Step::Echo(ev)),
        }
    }
    // The player is one browser per cell, signing a valid token for its clientId: a cell of
    // several connections (two tabs, a reconnect) or a refused one (its token redacted, so
    // not one a replay can send again) would only stall or differ on what the replay cannot
    // reproduce. Said, not replayed.
    if browser_connects > 1 {
        return Outcome::NotReplayable(format!(
            "{browser_connects} browser connections of {client_id:?} in this cell (two tabs, \
             or a reconnect): the replay plays one browser per cell, so the others' events \
             could only stall"
        ));
    }
    if refused > 0 {
        return Outcome::NotReplayable(format!(
            "the hub refused the recorded browser connection of {client_id:?} before sending \
             it any event; the token it refused is redacted in the recording, so a replay \
             cannot send it again"
        ));
    }
    // A browser that only connected (and was welcomed) is replayed too: its welcome is what
    // the hub owes it.
    has_browser |= browser_connects == 1;
    if !has_browser && !has_http && !has_agent {
        return Outcome::NotReplayable("no browser, agent or HTTP client in this cell".into());
    }
    let opts = Options {
        open_timeout: cfg.wait,
        ..Options::default()
    };
    let mut cadence = Cadence::new();
    // Events the replayed agent got before a step awaited them: kept for that step, not
    // dropped (a hub may send an extension such as `config` at connect, before the pong the
    // player waits for after register; dropped, the recorded `config` stalled every agent cell).
    let mut agent_early: VecDeque<super::transport::Event> = VecDeque::new();
    let mut agent = if has_agent {
        match Socket::connect(
            &cfg.url,
            AGENT_NSP,
            Some(json!({ "apiKey": cfg.api_key, "agentId": agent_id })),
            &opts,
        )
        .await
        {
            Ok(mut s) => {
                // A cell that recorded the agent's own register sends it in its place.
                if !registers {
                    s.emit("register", json!({}));
                }
                // A pong after register: the hub handled it (events are ordered per socket).
                // Its round trip is the hub's first reaction time.
                cadence.wrote();
                s.emit("ping", json!({}));
                if agent_recv(&mut s, "pong", cfg.wait, &mut agent_early)
                    .await
                    .is_ok()
                {
                    cadence.arrived(s.engine.last_arrival());
                }
                Some(s)
            }
            Err(e) => return Outcome::Fail(format!("the replayed agent could not connect: {e}")),
        }
    } else {
        None
    };
    let roles: &[&str] = if client_id == "admin" {
        &["ADMIN"]
    } else {
        &[]
    };
    let token = sign_jwt(&cfg.jwt_secret, client_id, roles);
    // The clientId the spec derives from that token ("from JWT sub, or 'admin' for admin
    // users"): the player signed it, so it knows. Interned ids cannot show a hub that ignores
    // the JWT (a random id, or `admin` for everyone), so the welcome is judged against it.
    let claims = super::Claims {
        sub: client_id.to_string(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        exp: None,
    };
    let want_client = claims.client_id();
    let mut wrong: Vec<String> = Vec::new();
    let mut browser = if has_browser {
        match Socket::connect(
            &cfg.url,
            CLIENT_NSP,
            Some(json!({ "token": token, "agentId": agent_id })),
            &opts,
        )
        .await
        {
            Ok(s) => {
                cadence.wrote();
                Some(s)
            }
            Err(e) => {
                return Outcome::Fail(format!("the replayed browser could not connect: {e}"));
            }
        }
    } else {
        None
    };
    let http = reqwest::Client::new();
    let mut pending = std::collections::VecDeque::new();
    // Hub outputs (compared by the player) and the whole view (for parity).
    let mut live = Vec::new();
    let mut view = Vec::new();
    // Live hub→browser events that arrived before a step awaited them.
    let mut buffered: std::collections::VecDeque<(String, Value)> = Default::default();
    let mut live_client = client_id.to_string();
    // One fault, one verdict: once an awaited hub→browser event did not come within the wait,
    // the cell has its fault, and later awaited events are looked for only for the fixed quiet
    // window (`wait / 10`, 100–500 ms), marked `notAwaited` when absent. A hub whose answers reach
    // no browser otherwise cost one full wait per recorded event (21 × 15 s in one cell).
    let mut stalled = false;
    // The agent sent its recorded register and no pong has yet shown the hub handled it.
    let mut register_unsynced = false;
    // What ended the first stall's wait, for its verdict: the names of every hub→browser event
    // in the order they were read, and the first missing event's place in the view.
    let mut arrivals: Vec<String> = Vec::new();
    let mut first_stall: Option<(usize, String)> = None;
    for step in steps {
        match step {
            Step::BrowserPacket(ev) => {
                if ev["dir"] == "browser→hub"
                    && ev["packet"] == "disconnect"
                    && let Some(b) = browser.as_ref()
                {
                    b.disconnect();
                    cadence.wrote();
                }
                view.push(ev);
            }
            Step::Echo(ev) => view.push(ev),
            Step::BrowserSend(n, d) => {
                // The recorded register must have been handled before a browser's message can
                // reach the agent, and the browser's socket is another, unordered with it: a
                // pong on the agent's socket says so (as at connect). Without it a loaded hub
                // answered "not connected" when idle detection sent sooner than the fixed
                // window would. Here, not at the register, so that what the recording awaited
                // from the hub after the register was already read.
                if register_unsynced && let Some(a) = agent.as_mut() {
                    register_unsynced = false;
                    a.emit("ping", json!({}));
                    if agent_recv(a, "pong", cfg.wait, &mut agent_early)
                        .await
                        .is_ok()
                    {
                        cadence.arrived(a.engine.last_arrival());
                    }
                }
                if let Some(b) = browser.as_ref() {
                    b.emit(&n, d.clone());
                    cadence.wrote();
                }
                view.push(json!({ "dir": "browser→hub", "event": n, "data": d }));
            }
            Step::BrowserExpect(want) => {
                let Some(b) = browser.as_mut() else { continue };
                let got = match buffered.iter().position(|(n, _)| *n == want) {
                    Some(i) => buffered.remove(i).map(Ok),
                    None => {
                        // The fixed quiet window, not the adaptive one: a hub that reacts slower
                        // than its recent cadence would make the count vary from run to run.
                        let wait = if stalled {
                            fixed_quiet(cfg.wait)
                        } else {
                            cfg.wait
                        };
                        let deadline = tokio::time::Instant::now() + wait;
                        // Events of other names read during this wait: what came in its place.
                        let mut instead: Vec<String> = Vec::new();
                        loop {
                            let got = b.recv_until(deadline).await;
                            if let Ok(e) = &got {
                                cadence.arrived(b.engine.last_arrival());
                                arrivals.push(e.name.clone());
                            }
                            match got {
                                Ok(e) if e.name == want => break Some(Ok((e.name, e.data))),
                                Ok(e) => {
                                    instead.push(e.name.clone());
                                    buffered.push_back((e.name, e.data));
                                }
                                // Something else came in its place: a longer wait would not
                                // bring it (the replay is lock-step), so the cause names it.
                                Err(super::transport::RecvError::Timeout)
                                    if !instead.is_empty() =>
                                {
                                    break Some(Err(format!(
                                        "none within the wait{}{} arrived in its place",
                                        crate::parity::NOT_SLOW,
                                        super::counted_names(
                                            instead.iter().map(String::as_str),
                                            true
                                        )
                                        .join(" → ")
                                    )));
                                }
                                Err(e) => break Some(Err(e.to_string())),
                            }
                        }
                    }
                };
                if let Some(Ok((n, d))) = &got
                    && n == "welcome"
                    && let Some(c) = d["clientId"].as_str()
                    && c != want_client
                {
                    let m = format!(
                        "welcome clientId {c:?} is not the one the replayed browser's JWT gives: {want_client:?} (sub {:?}, {}; the spec: \"from JWT sub, or 'admin' for admin users\")",
                        claims.sub,
                        if roles.is_empty() {
                            "no ADMIN role"
                        } else {
                            "role ADMIN"
                        }
                    );
                    wrong.push(m.clone());
                    view.push(json!({ "dir": "hub→browser", "wrong": m }));
                }
                let ev = match got {
                    Some(Ok((n, d))) => json!({ "dir": "hub→browser", "event": n, "data": d }),
                    Some(Err(e)) if stalled => json!({
                        "dir": "hub→browser", "missing": format!("{want}: {e}"), "notAwaited": true
                    }),
                    Some(Err(e)) => {
                        stalled = true;
                        first_stall = Some((view.len(), want.clone()));
                        json!({ "dir": "hub→browser", "missing": format!("{want}: {e}") })
                    }
                    None => json!({ "dir": "hub→browser", "missing": want }),
                };
                live.push(ev.clone());
                view.push(ev);
            }
            Step::HttpSend(req, took) => {
                // The answer is given as long as the recorded one took, and a wait more: a
                // `/message/sync` nobody answers is answered only at the hub's sync timeout
                // (the spec's 120 s), which a fixed bound cut short on both legs of a parity.
                let bound = (cfg.wait * 4).max(took.map_or(Duration::ZERO, |t| t + cfg.wait));
                let what = format!(
                    "{} {}",
                    req["method"].as_str().unwrap_or("GET"),
                    req["path"].as_str().unwrap_or("/")
                );
                let rb = http_request(&http, &cfg.url, &req, bound);
                let sent = json!({ "dir": "http→hub", "http": req });
                live.push(sent.clone());
                view.push(sent);
                cadence.wrote();
                pending.push_back(tokio::spawn(async move {
                    match rb.send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let body = r.json::<Value>().await.unwrap_or(Value::Null);
                            (
                                Some(Instant::now()),
                                Ok(json!({ "status": status, "body": body })),
                            )
                        }
                        // Said without the URL: its port is the leg's own, so two legs that
                        // failed alike would differ on it.
                        Err(e) if e.is_timeout() => (
                            None,
                            Err(format!(
                                "the answer to {what}: none within {:.1} s{}",
                                bound.as_secs_f64(),
                                took.map_or(String::new(), |t| format!(
                                    " (the recorded one came after {:.1} s)",
                                    t.as_secs_f64()
                                ))
                            )),
                        ),
                        Err(e) => (
                            None,
                            Ok(json!({ "error": crate::util::error_chain(&e.without_url()) })),
                        ),
                    }
                }));
            }
            Step::HttpExpect => {
                let got = match pending.pop_front() {
                    Some(t) => {
                        let (at, got) = t.await.unwrap_or((None, Ok(Value::Null)));
                        cadence.arrived(at);
                        got
                    }
                    None => Ok(Value::Null),
                };
                // An answer that did not come within its bound is a stall, as a browser event
                // that did not: not a difference of the answer.
                let ev = match got {
                    Ok(got) => json!({ "dir": "hub→http", "http": got }),
                    Err(m) => json!({ "dir": "hub→http", "missing": m }),
                };
                live.push(ev.clone());
                view.push(ev);
            }
            Step::AgentExpect(want) => {
                if let Some(a) = agent.as_mut() {
                    // An extension the hub sent the agent (not one of the spec's hub→agent
                    // events) is not owed: looked for only for the fixed quiet window, and its
                    // absence is no stall (extensions are listed, not compared).
                    let spec = super::check_hub::TO_AGENT.contains(&want.as_str());
                    let wait = if spec {
                        cfg.wait
                    } else {
                        fixed_quiet(cfg.wait)
                    };
                    match agent_recv(a, &want, wait, &mut agent_early).await {
                        Ok(m) => {
                            cadence.arrived(a.engine.last_arrival());
                            if want == "message"
                                && let Some(c) = m.data["clientId"].as_str()
                            {
                                live_client = c.to_string();
                            }
                            view.push(json!({ "dir": "hub→agent", "event": want, "data": m.data }));
                        }
                        Err(e) if want == "message" => {
                            view_out.extend(view);
                            return Outcome::Fail(format!(
                                "the hub did not forward a recorded message to the agent: {e}"
                            ));
                        }
                        Err(_) if !spec => {}
                        Err(e) => {
                            let ev =
                                json!({ "dir": "hub→agent", "missing": format!("{want}: {e}") });
                            live.push(ev.clone());
                            view.push(ev);
                        }
                    }
                }
            }
            Step::AgentSend(n, mut d) => {
                if let Some(a) = agent.as_mut() {
                    if d.get("clientId").is_some() {
                        d["clientId"] = json!(live_client);
                    }
                    a.emit(&n, d.clone());
                    cadence.wrote();
                    register_unsynced |= n == "register";
                }
                view.push(json!({ "dir": "agent→hub", "event": n, "data": d }));
            }
        }
    }
    // Quiescence: whatever else the hub sends (bounded), after everything recorded was seen,
    // is part of what this build does and the recording did not. Idle: quiet for the adaptive
    // window since its last output or the replay's last write (see the module doc).
    if let Some(b) = browser.as_mut() {
        let fixed = fixed_quiet(cfg.wait);
        let end = Instant::now() + cfg.wait;
        loop {
            let until = if cfg.fixed_windows {
                Instant::now() + fixed
            } else {
                cadence.mark + cadence.window(fixed)
            };
            match b.recv_until(until.min(end)).await {
                Ok(e) => {
                    cadence.arrived(b.engine.last_arrival());
                    arrivals.push(e.name.clone());
                    buffered.push_back((e.name, e.data));
                }
                // Quiet, but bytes arrived that the connection did not read yet (its task was
                // not scheduled): not idle.
                Err(super::transport::RecvError::Timeout)
                    if !cfg.fixed_windows && Instant::now() < end && b.engine.has_unread() =>
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(_) => break,
            }
        }
    }
    // The first stall's cause, when the rest of the cell shows it: the awaited event came only
    // later, out of its place (a hub that holds a frame back until the next one), or the
    // events awaited after it came (the hub skipped it). Either way not a slow hub.
    if let Some((at, want)) = &first_stall
        && let Some(m) = view[*at]["missing"].as_str()
        && !m.contains(crate::parity::NOT_SLOW)
    {
        let cause = if buffered.iter().any(|(n, _)| n == want) {
            let last = arrivals.iter().rposition(|n| n == want).unwrap_or(0);
            let after = last
                .checked_sub(1)
                .map_or(String::new(), |i| format!(", after {}", arrivals[i]));
            Some(format!("a {want} came only later, out of its place{after}"))
        } else {
            let later = view[*at + 1..]
                .iter()
                .filter(|e| e["dir"] == "hub→browser" && e.get("event").is_some())
                .count();
            let absent: Vec<&str> = view[*at + 1..]
                .iter()
                .filter(|e| e["notAwaited"] == true)
                .map(|e| {
                    let m = e["missing"].as_str().unwrap_or("");
                    m.split_once(':').map_or(m, |(name, _)| name)
                })
                .collect();
            if later == 0 {
                None
            } else if absent.is_empty() {
                Some(format!(
                    "the {later} hub→browser event(s) awaited after it came, so it was skipped"
                ))
            } else if absent.iter().all(|n| *n == want) {
                // The same event missing each time while the others came: a hub that does not
                // send it (drops `typing`), not one too slow for the wait.
                Some(format!(
                    "the {later} hub→browser event(s) awaited after it came, and every later \
                     {want} ({}) was missing too, so it was skipped",
                    absent.len()
                ))
            } else {
                None
            }
        };
        if let Some(cause) = cause {
            let m = format!("{m}{}{cause}", crate::parity::NOT_SLOW);
            view[*at]["missing"] = json!(m);
            if let Some(l) = live
                .iter_mut()
                .find(|e| e["missing"].is_string() && e["notAwaited"] != true)
            {
                l["missing"] = json!(m);
            }
        }
    }
    for (n, d) in buffered {
        let ev = json!({ "dir": "hub→browser", "event": n, "data": d });
        live.push(ev.clone());
        view.push(ev);
    }
    view_out.extend(view);
    let outcome = compare(&recorded, &live);
    if wrong.is_empty() {
        return outcome;
    }
    // The wrong clientId is the first fault (the welcome comes first); what else differs
    // follows it.
    match outcome {
        Outcome::Fail(m) => Outcome::Fail(format!("{}; {m}", wrong.join("; "))),
        _ => Outcome::Fail(wrong.join("; ")),
    }
}

/// Most events a replayed agent keeps for later steps ([`agent_recv`]); older ones go first.
const AGENT_EARLY_MAX: usize = 4096;

/// The agent's next event named `name`: one it got earlier and kept, else the next to arrive
/// within `wait`, keeping the others it reads on the way for later steps.
async fn agent_recv(
    a: &mut Socket,
    name: &str,
    wait: Duration,
    early: &mut VecDeque<super::transport::Event>,
) -> Result<super::transport::Event, super::transport::RecvError> {
    if let Some(e) = early
        .iter()
        .position(|e| e.name == name)
        .and_then(|i| early.remove(i))
    {
        return Ok(e);
    }
    let deadline = Instant::now() + wait;
    loop {
        let e = a.recv_until(deadline).await?;
        if e.name == name {
            return Ok(e);
        }
        if early.len() == AGENT_EARLY_MAX {
            early.pop_front();
        }
        early.push_back(e);
    }
}

/// Normalized comparison of hub→browser events and HTTP answers (pong, whose place is free,
/// left out) and of the rows both project to.
fn compare(recorded: &[Value], live: &[Value]) -> Outcome {
    let keep = |v: &&Value| v["event"] != "pong";
    let model = BridleModel;
    // The model's comparison view: extensions left out, the not-connected tail folded.
    let norm = |list: &[Value]| model.normalize_events(list.iter().filter(keep).cloned().collect());
    let (a, b) = (norm(recorded), norm(live));
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        // After the first missing event the rest were looked for only briefly: counted, not
        // listed (one fault, one verdict).
        let later = live.iter().filter(|e| e["notAwaited"] == true).count();
        // Named by its side: an HTTP answer is no hub→browser event.
        let side = [a.get(i), b.get(i)]
            .into_iter()
            .flatten()
            .find_map(|e| e["dir"].as_str())
            .map_or("hub→browser event".to_string(), |d| match d {
                "hub→http" => "hub→http answer".to_string(),
                "http→hub" => "http→hub request".to_string(),
                d => format!("{d} event"),
            });
        return Outcome::Fail(format!(
            "{side} #{i} differs: recorded {} vs live {}{}",
            a.get(i).map_or("(none)".into(), Value::to_string),
            b.get(i).map_or("(none)".into(), Value::to_string),
            if later > 0 {
                format!("; {later} later event(s) not there either, not awaited after it")
            } else {
                String::new()
            }
        ));
    }
    let rows = |list: &[Value]| {
        let mut p = model.row_projector();
        for e in list {
            p.push(e);
        }
        model.normalize_rows(p.finish())
    };
    let (ra, rb) = (rows(recorded), rows(live));
    if ra != rb {
        return Outcome::Fail(format!(
            "rows differ: recorded {} vs live {}",
            Value::from(ra),
            Value::from(rb)
        ));
    }
    Outcome::Pass {
        // What the hub sent: the requests in the lists are the replay's own.
        events: a.iter().filter(|e| e["dir"] != "http→hub").count(),
        rows: ra.len(),
        extensions: model.left_out(live).join(", "),
    }
}

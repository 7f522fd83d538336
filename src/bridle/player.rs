//! `replay bridle`: plays a recorded cell's browser and agent against a live hub and compares
//! what the browser sees now with what it saw then (normalized hub→browser events and rows).
//!
//! The cell's merged entries become a script, in `(run, seq)` order: a `browser→hub` event is
//! sent by the replayed browser; a `hub→agent` message is awaited by the replayed agent; an
//! `agent→hub` event is sent by it (clientId rewritten to the live message's); a `hub→browser`
//! event is awaited (bounded) and collected. The browser's JWT is signed afresh for the cell's
//! clientId (`admin` → the ADMIN role); the recorded handshake secrets were redacted.

use super::model::{BRIDLE_RULES, BridleModel, event_of};
use super::transport::{Options, Socket};
use super::{AGENT_NSP, CLIENT_NSP, sign_jwt};
use crate::cell::Cell;
use crate::protocol::Model;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub url: String,
    pub jwt_secret: String,
    pub api_key: String,
    pub wait: Duration,
}

/// A replayed cell's outcome.
#[derive(Debug)]
pub enum Outcome {
    Pass {
        events: usize,
        rows: usize,
    },
    Fail(String),
    /// Nothing a browser did (agent-only or HTTP cells).
    NotReplayable(String),
}

enum Step {
    BrowserSend(String, Value),
    AgentAwait,
    AgentSend(String, Value),
    BrowserExpect,
}

/// Replays one cell.
pub async fn replay_cell(cell: &Cell, cfg: &ReplayConfig) -> Outcome {
    let (_, name) = cell.provider_and_name();
    let Some((agent_id, client_id)) = name.split_once("__") else {
        return Outcome::NotReplayable(format!("{name} is not an <agentId>__<clientId> cell"));
    };
    let mut steps = Vec::new();
    let mut recorded = Vec::new();
    let mut has_agent = false;
    let mut has_browser = false;
    for entry in cell.recorded() {
        let Ok(Some(ev)) = event_of(&entry) else {
            continue;
        };
        let (Some(name), data) = (ev["event"].as_str(), ev["data"].clone()) else {
            continue;
        };
        match entry.dir.as_str() {
            "browser→hub" => {
                has_browser = true;
                steps.push(Step::BrowserSend(name.into(), data));
            }
            "hub→browser" => {
                recorded.push(ev.clone());
                steps.push(Step::BrowserExpect);
            }
            "hub→agent" if name == "message" => {
                has_agent = true;
                steps.push(Step::AgentAwait);
            }
            "agent→hub" if name != "register" && name != "ping" => {
                steps.push(Step::AgentSend(name.into(), data))
            }
            _ => {}
        }
    }
    if !has_browser {
        return Outcome::NotReplayable("no browser in this cell".into());
    }
    let opts = Options {
        open_timeout: cfg.wait,
        ..Options::default()
    };
    let mut agent = if has_agent {
        match Socket::connect(
            &cfg.url,
            AGENT_NSP,
            Some(json!({ "apiKey": cfg.api_key, "agentId": agent_id })),
            &opts,
        )
        .await
        {
            Ok(s) => {
                s.emit("register", json!({}));
                tokio::time::sleep(Duration::from_millis(150)).await;
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
    let mut browser = match Socket::connect(
        &cfg.url,
        CLIENT_NSP,
        Some(json!({ "token": token, "agentId": agent_id })),
        &opts,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(format!("the replayed browser could not connect: {e}")),
    };
    let mut live = Vec::new();
    let mut live_client = client_id.to_string();
    for step in steps {
        match step {
            Step::BrowserSend(n, d) => {
                browser.emit(&n, d);
            }
            Step::BrowserExpect => match browser.recv(cfg.wait).await {
                Ok(e) => {
                    live.push(json!({ "dir": "hub→browser", "event": e.name, "data": e.data }))
                }
                Err(e) => live.push(json!({ "dir": "hub→browser", "missing": e.to_string() })),
            },
            Step::AgentAwait => {
                if let Some(a) = agent.as_mut() {
                    match a.recv_named("message", cfg.wait).await {
                        Ok(m) => {
                            if let Some(c) = m.data["clientId"].as_str() {
                                live_client = c.to_string();
                            }
                        }
                        Err(e) => {
                            return Outcome::Fail(format!(
                                "the hub did not forward a recorded message to the agent: {e}"
                            ));
                        }
                    }
                }
            }
            Step::AgentSend(n, mut d) => {
                if let Some(a) = agent.as_ref() {
                    if d.get("clientId").is_some() {
                        d["clientId"] = json!(live_client);
                    }
                    a.emit(&n, d);
                }
            }
        }
    }
    compare(&recorded, &live)
}

/// Normalized comparison of hub→browser events (pong, whose place is free, left out) and of
/// the rows both project to.
fn compare(recorded: &[Value], live: &[Value]) -> Outcome {
    let keep = |v: &&Value| v["event"] != "pong";
    let model = BridleModel;
    let norm = |list: &[Value]| {
        crate::normalize::normalize_list(list.iter().filter(keep).cloned().collect(), BRIDLE_RULES)
    };
    let (a, b) = (norm(recorded), norm(live));
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        return Outcome::Fail(format!(
            "hub→browser event #{i} differs: recorded {} vs live {}",
            a.get(i).map_or("(none)".into(), Value::to_string),
            b.get(i).map_or("(none)".into(), Value::to_string)
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
        events: a.len(),
        rows: ra.len(),
    }
}

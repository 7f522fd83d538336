//! `replay bridle`: plays a recorded cell's browser and agent against a live hub and compares
//! what the browser sees now with what it saw then (normalized hub→browser events and rows).
//!
//! The cell's merged entries become a script, in `(run, seq)` order: a `browser→hub` event is
//! sent by the replayed browser; a `hub→agent` message is awaited by the replayed agent; an
//! `agent→hub` event is sent by it (clientId rewritten to the live message's); a `hub→browser`
//! event is awaited (bounded) and collected; an `http→hub` request is sent without waiting and
//! its answer collected at the recorded `hub→http` line. The browser's JWT is signed afresh for the cell's
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
    /// An HTTP API request, sent without waiting (a `/message/sync` answers only after the
    /// agent steps that follow it).
    HttpSend(Value),
    /// The oldest outstanding HTTP answer.
    HttpExpect,
    AgentAwait,
    AgentSend(String, Value),
    BrowserExpect,
}

/// Replays one cell.
pub async fn replay_cell(cell: &Cell, cfg: &ReplayConfig) -> Outcome {
    replay_cell_into(cell, cfg, &mut Vec::new()).await
}

/// Replays one cell and hands the live hub→browser events and HTTP answers (pongs left out)
/// to `live_out`, for a parity leg.
pub async fn replay_cell_into(
    cell: &Cell,
    cfg: &ReplayConfig,
    live_out: &mut Vec<Value>,
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
    for entry in cell.recorded() {
        let Ok(Some(ev)) = event_of(&entry) else {
            continue;
        };
        match entry.dir.as_str() {
            "http→hub" => {
                has_http = true;
                steps.push(Step::HttpSend(ev["http"].clone()));
                continue;
            }
            "hub→http" => {
                recorded.push(ev.clone());
                steps.push(Step::HttpExpect);
                continue;
            }
            _ => {}
        }
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
    if !has_browser && !has_http {
        return Outcome::NotReplayable("no browser and no HTTP client in this cell".into());
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
    let mut browser = if has_browser {
        match Socket::connect(
            &cfg.url,
            CLIENT_NSP,
            Some(json!({ "token": token, "agentId": agent_id })),
            &opts,
        )
        .await
        {
            Ok(s) => Some(s),
            Err(e) => {
                return Outcome::Fail(format!("the replayed browser could not connect: {e}"));
            }
        }
    } else {
        None
    };
    let http = reqwest::Client::new();
    let mut pending = std::collections::VecDeque::new();
    let mut live = Vec::new();
    let mut live_client = client_id.to_string();
    for step in steps {
        match step {
            Step::BrowserSend(n, d) => {
                if let Some(b) = browser.as_ref() {
                    b.emit(&n, d);
                }
            }
            Step::BrowserExpect => match browser.as_mut() {
                None => {}
                Some(b) => match b.recv(cfg.wait).await {
                    Ok(e) => {
                        live.push(json!({ "dir": "hub→browser", "event": e.name, "data": e.data }))
                    }
                    Err(e) => live.push(json!({ "dir": "hub→browser", "missing": e.to_string() })),
                },
            },
            Step::HttpSend(req) => {
                let method = req["method"].as_str().unwrap_or("GET").to_string();
                let url = format!("{}{}", cfg.url, req["path"].as_str().unwrap_or("/"));
                let rb = if method == "POST" {
                    http.post(url).json(&req["body"])
                } else {
                    http.get(url)
                }
                .timeout(cfg.wait * 4);
                pending.push_back(tokio::spawn(async move {
                    match rb.send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let body = r.json::<Value>().await.unwrap_or(Value::Null);
                            json!({ "status": status, "body": body })
                        }
                        Err(e) => json!({ "error": e.to_string() }),
                    }
                }));
            }
            Step::HttpExpect => {
                let got = match pending.pop_front() {
                    Some(t) => t.await.unwrap_or(Value::Null),
                    None => Value::Null,
                };
                live.push(json!({ "dir": "hub→http", "http": got }));
            }
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
    live_out.extend(live.iter().filter(|v| v["event"] != "pong").cloned());
    compare(&recorded, &live)
}

/// Normalized comparison of hub→browser events and HTTP answers (pong, whose place is free,
/// left out) and of the rows both project to.
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

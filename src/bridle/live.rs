//! Bridle's half of [`crate::protocol::Live`]: the hub is started for the cell (it prints its
//! URL; `JWT_SECRET` and `BRIDLE_API_KEY` name its credentials, as for `replay bridle`), the
//! recorded browsers and agent are played by [`super::player`], and the replay's events are the
//! same view the recorded leg assembles: every frame the replayed peers sent and received, in
//! script order, through the same grammar. The Socket.IO handshake carries no hub identity.
//!
//! Recording cells: the hub is the bridge under test, so bridgewire plays both of its peers
//! through the recording proxy ([`super::proxy`]): an agent `agent` that answers every
//! forwarded message with one `message` (`Echo: <text>`), and per scenario a browser whose
//! client id is the scenario's name (stop and resume steps are no-ops: replay plays one browser
//! connection per cell). Each scenario's cell is `agent__<scenario>` (the
//! `<agentId>__<clientId>` scope the proxy files a browser under, which replay reads back).

use super::player::{Outcome, ReplayConfig, replay_group_into};
use crate::cell::Cell;
use crate::cells::Step;
use crate::protocol::{
    BridgeCommand, Live, LiveLimits, LiveReplay, Protocol, RecordRequest, RecordedScenario,
};
use serde_json::json;
use std::time::Duration;

pub struct BridleLive;

/// The /message/sync timeout a started hub gets as BRIDLE_SYNC_TIMEOUT_MS: parity's own
/// environment's (a number of ms), else the spec's 120 s. The player awaits a recorded answer
/// as long as it took when recorded, so a hub that ignores it is judged alike, only slower.
fn sync_timeout_ms() -> u64 {
    std::env::var("BRIDLE_SYNC_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(120_000)
}

/// The addresses a hub URL reaches: its host resolved (`localhost` and `127.0.0.1` alike; an
/// unspecified address such as `0.0.0.0` is reached on loopback) and its port (the scheme's
/// default when none is given).
fn endpoints(url: &str) -> Option<(Vec<std::net::IpAddr>, u16)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};
    let u = reqwest::Url::parse(url).ok()?;
    let port = u.port_or_known_default()?;
    let host = u.host_str()?.trim_start_matches('[').trim_end_matches(']');
    let mut ips: Vec<IpAddr> = (host, port)
        .to_socket_addrs()
        .ok()?
        .map(|a| match a.ip() {
            IpAddr::V4(v) if v.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v) if v.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        })
        .collect();
    ips.sort();
    ips.dedup();
    Some((ips, port))
}

/// The address two hub URLs share, if they reach the same hub: the same port on a host that
/// resolves to a shared address. Two legs whose hubs are one are a self-comparison.
pub fn same_hub(a: &str, b: &str) -> Option<String> {
    let (aips, aport) = endpoints(a)?;
    let (bips, bport) = endpoints(b)?;
    if aport != bport {
        return None;
    }
    let shared = aips.iter().find(|ip| bips.contains(ip))?;
    Some(std::net::SocketAddr::new(*shared, aport).to_string())
}

impl Live for BridleLive {
    fn protocol(&self) -> Protocol {
        Protocol::Bridle
    }

    /// A replay plays each agentId apart, so the hub-wide health's counts are its own.
    fn live_view(&self, events: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
        super::model::hub_wide_counts_by_type(events)
    }

    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, limits: LiveLimits) -> LiveReplay {
        crate::protocol::replay_alone(self, cell, bridge, limits)
    }

    /// The cells of one hub folder and agentId together, on a hub of their own, in the order
    /// recorded across them ([`super::player::groups`]): an agent's connects and register are
    /// in its `__agent` cell, what it did for a browser in that browser's, a health probe in
    /// `__http`; replayed each alone, a browser cell had an agent the recording did not.
    fn replay_together(
        &self,
        cells: &[&Cell],
        bridge: &BridgeCommand,
        limits: LiveLimits,
    ) -> Option<Vec<LiveReplay>> {
        use rayon::prelude::*;
        let mut out: Vec<Option<LiveReplay>> = cells.iter().map(|_| None).collect();
        // Groups are independent (a hub each), so they run side by side as cells did.
        let bystanders = super::player::bystanders(cells);
        let replayed: Vec<(Vec<usize>, Vec<LiveReplay>)> = super::player::groups(cells)
            .into_par_iter()
            .map(|group| {
                let members: Vec<&Cell> = group.iter().map(|&i| cells[i]).collect();
                let r = replay_group(&members, &bystanders, bridge, limits);
                (group, r)
            })
            .collect();
        for (group, runs) in replayed {
            for (i, r) in group.into_iter().zip(runs) {
                out[i] = Some(r);
            }
        }
        Some(
            out.into_iter()
                .map(|r| r.unwrap_or_else(|| LiveReplay::failed("no replay")))
                .collect(),
        )
    }

    /// Both legs' hubs started side by side (as a cell starts them): one address printed by
    /// both (a command that prints the URL of one running hub) is one hub.
    fn same_server(
        &self,
        a: &BridgeCommand,
        b: &BridgeCommand,
        _timeout: Duration,
    ) -> Option<String> {
        let start = |bridge: &BridgeCommand| start_env_hub(bridge).ok();
        // Both alive at once: two hubs cannot listen on one address, so a shared one is one hub.
        crate::proc::side_by_side(
            || start(a),
            || start(b),
            |ha, hb| {
                let (Some((_, _, ga, ua)), Some((_, _, gb, ub))) = (ha.flatten(), hb) else {
                    // A hub that does not start is each cell's error to name.
                    return None;
                };
                same_hub(&ua, &ub)
                    .map(|at| format!("both reach {at}"))
                    .or_else(|| {
                        let soon = std::time::Instant::now() + Duration::from_secs(2);
                        crate::port_owner::same_listener(&ua, &ub, soon)
                    })
                    .map(|why| format!("base prints {ua}, head prints {ub}: {why}"))
                    .or_else(|| {
                        let (ga, gb) = (ga.as_ref()?, gb.as_ref()?);
                        // Only hubs of the legs' own: two commands that print the addresses of two
                        // running hubs may run one program to print them.
                        let soon = std::time::Instant::now() + Duration::from_secs(2);
                        let own = crate::port_owner::serves(&ua, ga.tree(), soon)
                            && crate::port_owner::serves(&ub, gb.tree(), soon);
                        own.then_some(())?;
                        // The secrets and the sync timeout: bridgewire's, set on every hub.
                        let ours = ["JWT_SECRET", "BRIDLE_API_KEY", "BRIDLE_SYNC_TIMEOUT_MS"];
                        let (ma, mb) = (ga.tree().mark(), gb.tree().mark());
                        crate::proc::same_image(ma, mb, &ours).map(|runs| {
                            format!(
                                "each leg started a hub of its own ({ua}, {ub}), and both run the \
                             same program: {runs}"
                            )
                        })
                    })
            },
        )
    }

    fn record(&self, req: &RecordRequest) -> Result<Vec<RecordedScenario>, String> {
        let (jwt_secret, api_key, _hub, url) = start_env_hub(req.bridge).map_err(|e| {
            eprintln!("bridgewire record-cells: {e}");
            format!(
                "the hub `{}` did not start (see stderr)",
                req.bridge.display()
            )
        })?;
        let rt = crate::cli::bridle_cmd::runtime().ok_or("cannot start an async runtime")?;
        let dir = req.raw.join(req.provider);
        let wait = req.timeout;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let proxy_url = format!(
                "http://{}",
                listener.local_addr().map_err(|e| e.to_string())?
            );
            let cfg = super::proxy::ProxyConfig {
                mode: crate::lane::write::DEFAULT_FILE_MODE,
                upstream: url.trim_end_matches('/').to_string(),
                dir: dir.clone(),
                redact: true,
                // The hub's secrets: a refused handshake is recorded by what kind of
                // credential it sent.
                jwt_secret: Some(jwt_secret.clone()),
                api_key: Some(api_key.clone()),
            };
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(super::proxy::serve(listener, cfg, async {
                let _ = stopped.await;
            }));
            let opts = super::transport::Options {
                open_timeout: wait,
                ..Default::default()
            };
            let mut agent = super::transport::Socket::connect(
                &proxy_url,
                super::AGENT_NSP,
                Some(json!({ "apiKey": api_key, "agentId": "agent" })),
                &opts,
            )
            .await
            .map_err(|e| format!("the agent could not connect to the hub: {e}"))?;
            agent.emit("register", json!({}));
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            let mut out = Vec::new();
            for scenario in req.scenarios {
                let client = scenario.name.clone();
                let token = super::sign_jwt(&jwt_secret, &client, &[]);
                let connect = || {
                    super::transport::Socket::connect(
                        &proxy_url,
                        super::CLIENT_NSP,
                        Some(json!({ "token": token, "agentId": "agent" })),
                        &opts,
                    )
                };
                let mut browser = connect().await.map_err(|e| {
                    format!("scenario {client}: the browser could not connect: {e}")
                })?;
                browser.drain(std::time::Duration::from_millis(200)).await;
                for (n, step) in scenario.steps.iter().enumerate() {
                    match step {
                        Step::Prompt(text) => {
                            browser.emit(
                                "message",
                                json!({ "text": text, "parts": super::text_parts(text) }),
                            );
                            let m = agent.recv_named("message", wait).await.map_err(|e| {
                                format!(
                                    "scenario {client}: step {}: the hub did not forward the prompt to the agent: {e}",
                                    n + 1
                                )
                            })?;
                            let reply = format!("Echo: {}", m.data["text"].as_str().unwrap_or(""));
                            agent.emit(
                                "message",
                                json!({ "clientId": m.data["clientId"], "text": reply,
                                    "parts": super::text_parts(&reply),
                                    "messageId": uuid::Uuid::new_v4().to_string() }),
                            );
                            browser.drain(std::time::Duration::from_millis(300)).await;
                        }
                        // One browser connection per cell (replay plays one): a chat with
                        // the hub has no session to stop or resume.
                        Step::Stop | Step::Resume => {}
                        Step::WaitMs(ms) => {
                            browser
                                .drain(std::time::Duration::from_millis(*ms))
                                .await;
                        }
                    }
                }
                browser.disconnect();
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let name = format!("agent__{client}");
                out.push(RecordedScenario {
                    scope_dir: dir.join(crate::lane::scope_dir_name(Some(&name))),
                    name,
                    thread_id: None,
                    identity: None,
                });
            }
            agent.disconnect();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let _ = stop.send(());
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
            Ok(out)
        })
    }
}

/// A hub started from a leg's command with bridgewire's own JWT_SECRET, BRIDLE_API_KEY and
/// BRIDLE_SYNC_TIMEOUT_MS (every leg, and a recording, gets the same): its secrets, its process
/// and its address, or why it did not start.
fn start_env_hub(
    bridge: &BridgeCommand,
) -> Result<(String, String, Option<super::spawn::ChildGuard>, String), String> {
    let command: Vec<std::ffi::OsString> =
        bridge.spawn_argv().into_iter().map(Into::into).collect();
    let secret = std::env::var("JWT_SECRET").ok();
    let key = std::env::var("BRIDLE_API_KEY").ok();
    crate::cli::bridle_cmd::start_hub_or_why(
        None,
        secret.as_deref(),
        key.as_deref(),
        &command,
        sync_timeout_ms(),
    )
}

/// For a hub that exited before printing its address: parity starts one hub per group of
/// cells, several at a time, so a hub command with a fixed port collides with itself (the
/// hub's own words, such as "Address already in use", are on its stderr, not read here).
fn port_taken_hint(why: &str) -> &'static str {
    if why.contains("before printing its address") {
        "; if it listens on a fixed port: parity starts one hub per group of cells, several at \
         a time, so they collide (give it port 0, as `bridle-ref-hub --listen 127.0.0.1:0`)"
    } else {
        ""
    }
}

/// One group's cells replayed on a hub started for them: one result per cell.
fn replay_group(
    cells: &[&Cell],
    bystanders: &super::player::Bystanders,
    bridge: &BridgeCommand,
    limits: LiveLimits,
) -> Vec<LiveReplay> {
    let timeout = limits.timeout;
    let failed = |why: String| {
        cells
            .iter()
            .map(|_| LiveReplay::failed(why.clone()))
            .collect()
    };
    let (jwt_secret, api_key, mut hub, url) = match start_env_hub(bridge) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("bridgewire parity: {e}");
            return failed(format!(
                "the hub `{}` did not start: {e}{} (its stderr is on bridgewire's)",
                bridge.display(),
                port_taken_hint(&e)
            ));
        }
    };
    let Some(rt) = crate::cli::bridle_cmd::runtime() else {
        return failed("cannot start an async runtime".into());
    };
    let cfg = ReplayConfig {
        url,
        jwt_secret,
        api_key,
        wait: timeout,
        fixed_windows: false,
    };
    let mut views: Vec<Vec<serde_json::Value>> = cells.iter().map(|_| Vec::new()).collect();
    // A live difference is what parity reports; only a replay that could not run is an error.
    let outcomes = rt.block_on(replay_group_into(cells, &cfg, bystanders, &mut views));
    // A hub that exited is named as such with its status, not as the wait it ended (given a
    // moment to be reaped when a connection closed on the replay).
    let failed_on = |m: &String| m.contains("connection closed");
    let exited = if outcomes.iter().all(|o| !matches!(o, Outcome::Fail(_))) {
        None
    } else {
        let grace = if outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Fail(m) if failed_on(m)))
        {
            super::spawn::EXIT_GRACE
        } else {
            Duration::ZERO
        };
        hub.as_mut().and_then(|h| h.exited_within(grace))
    };
    outcomes
        .into_iter()
        .zip(views)
        .map(|(outcome, events)| {
            let failed = matches!(outcome, Outcome::Fail(_));
            live_replay_of(outcome, events, exited.filter(|_| failed))
        })
        .collect()
}

/// A cell's live replay from its outcome and view: waits that ran out are stalls naming what
/// was awaited, what the player judged against its own token a problem of the leg.
fn live_replay_of(
    outcome: Outcome,
    mut events: Vec<serde_json::Value>,
    exited: Option<std::process::ExitStatus>,
) -> LiveReplay {
    // Waits that ran out are stalls naming what was awaited, not event differences: the
    // player marks an awaited browser event that never came with `missing`. Those it only
    // looked for briefly after the first (`notAwaited`) are counted on that stall's line:
    // one fault, one verdict.
    // Numbered by the place in the event list compared (without the entries that are no
    // events: other missing ones, the player's `wrong` notes).
    let mut place = 0;
    let mut stalls: Vec<String> = Vec::new();
    for e in &events {
        let Some(m) = e["missing"].as_str() else {
            place += usize::from(e.get("wrong").is_none());
            continue;
        };
        if e["notAwaited"] != true {
            let dir = e["dir"].as_str().unwrap_or("hub→browser");
            stalls.push(format!("timed out waiting for {dir} event #{place} ({m})"));
        }
    }
    let later = events.iter().filter(|e| e["notAwaited"] == true).count();
    if let Some(first) = stalls.first_mut().filter(|_| later > 0) {
        first.push_str(&format!(
            "; {later} later hub→browser event(s) not there either, not awaited after it"
        ));
    }
    // What the player judged against its own token (a welcome's clientId): a problem of
    // the leg, named, not an event.
    let problems: Vec<String> = events
        .iter()
        .filter_map(|e| e["wrong"].as_str().map(str::to_string))
        .collect();
    // What the player's grammar dropped as it came (a stream after its message's end): the
    // leg's grammar drops, before those of the view.
    let mut grammar: Vec<String> = events
        .iter()
        .filter_map(|e| e["dropped"].as_str().map(str::to_string))
        .collect();
    events.retain(|e| {
        e.get("missing").is_none() && e.get("wrong").is_none() && e.get("dropped").is_none()
    });
    // The recorded leg's assembly runs its events through the model's grammar; so does this
    // leg, so both compare the same view.
    let (events, view_drops) = super::model::grammar_pass(events);
    grammar.extend(view_drops);
    let mut r = match outcome {
        Outcome::NotReplayable(reason) => LiveReplay::skipped(reason),
        Outcome::Fail(m) if m.contains("could not connect") => LiveReplay::failed(m),
        Outcome::Fail(m) if m.starts_with("the hub did not forward") => {
            if m.contains("no event within the wait") {
                stalls.push(format!("timed out waiting for hub→agent message: {m}"));
            } else {
                stalls.push(format!("stopped waiting for hub→agent message: {m}"));
            }
            LiveReplay {
                events,
                stalls,
                grammar,
                problems,
                ..Default::default()
            }
        }
        // Pass, or the player's own comparison with the recording: parity compares itself.
        Outcome::Pass { .. } | Outcome::Fail(_) => LiveReplay {
            events,
            stalls,
            grammar,
            problems,
            ..Default::default()
        },
    };
    if let Some(st) = exited
        && r.error.is_none()
    {
        let at = if r.stalls.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.stalls.join("; "))
        };
        r.stalls = vec![format!(
            "the hub {}{st}) during the replay{at}",
            crate::parity::EXITED
        )];
    }
    r
}

#[cfg(test)]
mod tests {
    use super::same_hub;

    /// A stall is numbered by its place among the events compared: the player's note of a
    /// wrong welcome clientId before it is no event (it was counted, one too many).
    #[test]
    fn a_stall_is_numbered_among_the_events_compared() {
        use serde_json::json;
        let view = vec![
            json!({"dir": "browser→hub", "packet": "connect", "nsp": "/ws/client"}),
            json!({"dir": "hub→browser", "event": "welcome", "data": {"clientId": "x"}}),
            json!({"dir": "hub→browser", "wrong": "welcome clientId \"x\" is not …"}),
            json!({"dir": "browser→hub", "event": "message", "data": {"text": "hi"}}),
            json!({"dir": "hub→browser", "missing": "message: none within the wait"}),
            json!({"dir": "hub→browser", "missing": "stream_end: none", "notAwaited": true}),
        ];
        let outcome = super::Outcome::Fail("differs".into());
        let r = super::live_replay_of(outcome, view, None);
        assert_eq!(
            r.stalls,
            [
                "timed out waiting for hub→browser event #3 (message: none within the wait); 1 \
              later hub→browser event(s) not there either, not awaited after it"
            ]
        );
        assert_eq!(r.events.len(), 3);
        assert_eq!(r.problems.len(), 1);
    }

    #[test]
    fn one_hub_by_host_and_port() {
        let at = Some("127.0.0.1:4100".to_string());
        assert_eq!(
            same_hub("http://127.0.0.1:4100", "http://localhost:4100/"),
            at
        );
        assert_eq!(same_hub("http://0.0.0.0:4100", "http://127.0.0.1:4100"), at);
        assert_eq!(
            same_hub("http://127.0.0.1:4100", "http://127.0.0.1:4101"),
            None
        );
        assert_eq!(
            same_hub("http://127.0.0.1:80", "http://127.0.0.1").as_deref(),
            Some("127.0.0.1:80")
        );
        assert_eq!(same_hub("http://[::1]:4100", "http://127.0.0.1:4100"), None);
        assert_eq!(same_hub("not a url", "not a url"), None);
    }
}

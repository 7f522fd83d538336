//! Side Bridge's half of [`crate::protocol::Live`]: the cells' recorded requests re-sent to one
//! freshly started bridge through [`super::player`], in the order recorded across the cells; cells recorded through the recording proxy
//! ([`super::proxy`]) with the app's client ([`super::client`]): one chat per scenario, a prompt
//! is a send, a resume reopens the chat (a new session start), a stop ends nothing (the app has
//! no stop). Side Bridge has no handshake, so a bridge has no identity to compare with a
//! recording's. The bridge's key comes from `$SIDEBRIDGE_KEY`.

use crate::cell::Cell;
use crate::cells::Step;
use crate::protocol::{
    BridgeCommand, Live, LiveLimits, LiveReplay, Protocol, RecordRequest, RecordedScenario,
};

pub struct SideBridgeLive;

impl Live for SideBridgeLive {
    fn protocol(&self) -> Protocol {
        Protocol::SideBridge
    }

    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, limits: LiveLimits) -> LiveReplay {
        crate::protocol::replay_alone(self, cell, bridge, limits)
    }

    /// Both legs' bridges started side by side: two commands that print the address of one
    /// running server (a wrapper, a script that finds it) reach one listening socket.
    fn same_server(
        &self,
        a: &BridgeCommand,
        b: &BridgeCommand,
        timeout: std::time::Duration,
    ) -> Option<String> {
        let start =
            |bridge: &BridgeCommand| super::player::leg_spec(bridge, timeout).resolve().ok();
        // Both alive at once: two servers cannot listen on one socket.
        crate::proc::side_by_side(
            || start(a),
            || start(b),
            |sa, sb| {
                // A bridge that does not start is each cell's error to name.
                let ((ua, pa), (ub, pb)) = (sa.flatten()?, sb?);
                let soon = std::time::Instant::now() + std::time::Duration::from_secs(2);
                crate::port_owner::same_listener(&ua, &ub, soon)
                    .map(|why| format!("base prints {ua}, head prints {ub}: {why}"))
                    .or_else(|| {
                        let (pa, pb) = (pa?, pb?);
                        // Only servers of the legs' own: two commands that print the addresses of two
                        // running servers may run one program to print them.
                        let own = crate::port_owner::serves(&ua, pa.tree(), soon)
                            && crate::port_owner::serves(&ub, pb.tree(), soon);
                        own.then_some(())?;
                        let (ma, mb) = (pa.tree().mark(), pb.tree().mark());
                        crate::proc::same_image(ma, mb, &[]).map(|runs| {
                        format!(
                            "each leg started a server of its own ({ua}, {ub}), and both run the \
                         same program: {runs}"
                        )
                    })
                    })
            },
        )
    }

    /// Every cell of the selection on one bridge, in the recorded order across cells: chats
    /// recorded against one server are replayed against one server, so a build that lets one
    /// chat's state into another (one remembered word for every chat) differs in the chat that
    /// sees it; replayed each on a bridge of its own, no chat could. `replay sidebridge` does
    /// the same.
    fn replay_together(
        &self,
        cells: &[&Cell],
        bridge: &BridgeCommand,
        limits: LiveLimits,
    ) -> Option<Vec<LiveReplay>> {
        // Without the key a keyed cell replays as a string of refusals on both legs, which
        // would compare equal: not run, naming what to set (and not sent, so the other
        // chats are replayed as if it had not been recorded).
        let keyless = std::env::var("SIDEBRIDGE_KEY").map_or(true, |k| k.is_empty());
        let skip = |c: &Cell| keyless && super::player::needs_key(c);
        let sent: Vec<&Cell> = cells.iter().copied().filter(|c| !skip(c)).collect();
        let mut replayed = if sent.is_empty() {
            Vec::new()
        } else {
            match super::player::replay_together_for_parity(&sent, bridge, limits) {
                Ok(r) => r,
                // The bridge did not start: the same error for every cell it would have run.
                Err(e) => sent.iter().map(|_| Err(e.clone())).collect(),
            }
        }
        .into_iter();
        let mut out: Vec<(LiveReplay, bool)> = cells
            .iter()
            .map(|c| {
                if skip(c) {
                    return (
                        LiveReplay::skipped(
                            "the cell was recorded with the bridge's key (`[redacted]` in its \
                             requests); set SIDEBRIDGE_KEY to replay it",
                        ),
                        false,
                    );
                }
                match replayed.next() {
                    Some(r) => judged(c, r),
                    None => (LiveReplay::failed("no replay"), false),
                }
            })
            .collect();
        // A chat refused whole is read as "this build asks for a key" only when the build
        // asked it of every chat sent without one: one that answered another chat of this run
        // without a key does not ask for one, and the refusal (which the app shows, and which
        // ends the chat) is compared as any reply.
        let answered_keyless = cells.iter().zip(&out).find_map(|(c, (r, _))| {
            (!skip(c)
                && !super::player::needs_key(c)
                && !super::player::sends_probe_key(c)
                && r.skip.is_none()
                && r.error.is_none()
                && r.refused.is_none())
            .then(|| c.key.clone())
        });
        if let Some(other) = answered_keyless {
            for (r, keyless_refusal) in &mut out {
                if *keyless_refusal && let Some(why) = r.skip.take() {
                    r.refused = Some(format!(
                        "{why}; but the same build answered chat {other} of this run, which was sent without a key too: it refused this chat, not a missing key"
                    ));
                }
            }
        }
        Some(out.into_iter().map(|(r, _)| r).collect())
    }

    fn record(&self, req: &RecordRequest) -> Result<Vec<RecordedScenario>, String> {
        let key = std::env::var("SIDEBRIDGE_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        let spec = super::spawn::BridgeSpec {
            url: None,
            command: req
                .bridge
                .spawn_argv()
                .into_iter()
                .map(Into::into)
                .collect(),
            key: key.clone(),
            startup: std::time::Duration::from_secs(10),
            url_pattern: req.bridge.address_pattern.clone().map(|p| p.0),
        };
        let (upstream, _bridge) = spec
            .resolve()
            .map_err(|e| format!("cannot start `{}`: {e:#}", req.bridge.display()))?;
        let dir = req.raw.join(req.provider);
        let cfg = super::proxy::ProxyConfig {
            mode: crate::lane::write::DEFAULT_FILE_MODE,
            listen: "127.0.0.1:0".into(),
            upstream,
            dir: dir.clone(),
            keep_key: false,
            key: key.clone(),
            timeout: req.timeout,
            max_reply: req.max_reply.max(req.timeout),
            max_body: 64 * 1024 * 1024,
        };
        let limits = super::transport::Limits {
            idle: req.timeout,
            total: req.max_reply.max(req.timeout),
            idle_flag: "--timeout-ms",
            total_flag: "--max-reply-time",
            ..super::transport::Limits::default()
        };
        super::spawn::runtime().block_on(async move {
            let proxy = super::proxy::Proxy::bind(cfg)
                .await
                .map_err(|e| format!("{e:#}"))?;
            let addr = proxy.local_addr().map_err(|e| e.to_string())?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(proxy.serve(async {
                let _ = stopped.await;
            }));
            let mut d = super::client::Driver::new(&format!("http://{addr}/"), key, limits, 1)
                .map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            for scenario in req.scenarios {
                let mut screen = super::client::Screen::new(&mut d.rng);
                let i = screen.start(&mut d, "session start").await;
                check(&d, i, &scenario.name)?;
                for (n, step) in scenario.steps.iter().enumerate() {
                    match step {
                        Step::Prompt(text) => {
                            if let Some(i) =
                                screen.send(&mut d, text, &format!("step {}", n + 1)).await
                            {
                                check(&d, i, &scenario.name)?;
                            }
                        }
                        Step::Stop => {}
                        Step::Resume => {
                            screen = screen.reopen();
                            let i = screen.start(&mut d, "session start").await;
                            check(&d, i, &scenario.name)?;
                        }
                        Step::WaitMs(ms) => {
                            tokio::time::sleep(std::time::Duration::from_millis(*ms)).await
                        }
                    }
                }
                out.push(RecordedScenario {
                    name: scenario.name.clone(),
                    scope_dir: dir.join(crate::lane::scope_dir_name(Some(&screen.chat_id))),
                    thread_id: Some(screen.chat_id.clone()),
                    identity: None,
                });
            }
            let _ = stop.send(());
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
            Ok(out)
        })
    }
}

/// A recorded exchange that got no reply at all is a recording that failed.
fn check(d: &super::client::Driver, i: usize, scenario: &str) -> Result<(), String> {
    match &d.log[i].result {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "scenario {scenario}: {}: the bridge gave no reply ({e})",
            d.log[i].label
        )),
    }
}

/// One cell's replayed events as a parity leg's result: a replay refused the key it was sent
/// (or asked for one the recording never had), and the replies that never came and a bridge
/// that stopped answering (stalls).
/// Also whether it is a cell recorded without a key that the build refused whole (skipped:
/// the caller knows whether the same build answered another chat without one).
fn judged(cell: &Cell, replayed: super::player::ChatReplay) -> (LiveReplay, bool) {
    let (events, crashed, stopped) = match replayed {
        Err(e) => return (LiveReplay::failed(e), false),
        Ok(r) => r,
    };
    let mut refused = None;
    if let Some(n) = super::player::refused_unlike_recording(cell, &events) {
        // Recorded without a key, there was none to send: the cell says nothing about this
        // build. Recorded with one and sent SIDEBRIDGE_KEY, the build refused that key: a
        // difference if the other leg accepts it. Recorded with SB-A4's probe key (the
        // recorded build had none and took it), sent as recorded: the build refused a key a
        // user typed for a bridge that asks none, a difference too.
        refused = Some(if super::player::needs_key(cell) {
            format!(
                "the bridge refused all {n} replayed requests (401/403) that the recording had \
                 answered, sent with the key in SIDEBRIDGE_KEY: is it this bridge's key?"
            )
        } else if super::player::sends_probe_key(cell) {
            format!(
                "the bridge refused all {n} replayed requests (401/403) that the recording had \
                 answered, sent with the key SB-A4 sends a bridge that has none ({:?}, as \
                 recorded): the recorded build took it",
                super::wire::UNEXPECTED_KEY_PROBE
            )
        } else {
            let mut r = LiveReplay::skipped(format!(
                "the bridge refused all {n} replayed requests (401/403) that the recording had \
                 answered: the cell was recorded without a key and this build asks for one \
                 (record the cell again with SIDEBRIDGE_KEY set)"
            ));
            r.events = events;
            return (r, true);
        });
    }
    // A reply that never came is a stall (the wait ran out), not a different reply.
    let mut requests = 0;
    let mut stalls = Vec::new();
    for e in &events {
        if e["type"] == "request" {
            requests += 1;
        }
        if e["type"] == "reply"
            && let Some(err) = e["error"].as_str()
            && super::player::timed_out(err)
        {
            stalls.push(format!(
                "timed out waiting for the reply to request #{requests} ({err})"
            ));
        }
    }
    if let Some(why) = stopped {
        stalls.push(format!("the bridge stopped answering: {why}"));
    }
    (
        LiveReplay {
            events,
            stalls,
            refused,
            problems: crashed.into_iter().collect(),
            ..Default::default()
        },
        false,
    )
}

//! Bridle's half of [`crate::protocol::Live`]: the hub is started for the cell (it prints its
//! URL; `JWT_SECRET` and `BRIDLE_API_KEY` name its credentials, as for `replay bridle`), the
//! recorded browsers and agent are played by [`super::player`], and the replay's events are the
//! same view the recorded leg assembles: every frame the replayed peers sent and received, in
//! script order, through the same grammar. The Socket.IO handshake carries no hub identity.

use super::player::{Outcome, ReplayConfig, replay_cell_into};
use crate::cell::Cell;
use crate::protocol::{BridgeCommand, Live, LiveReplay, Protocol};
use std::time::Duration;

pub struct BridleLive;

impl Live for BridleLive {
    fn protocol(&self) -> Protocol {
        Protocol::Bridle
    }

    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, timeout: Duration) -> LiveReplay {
        let command: Vec<std::ffi::OsString> =
            bridge.spawn_argv().into_iter().map(Into::into).collect();
        let secret = std::env::var("JWT_SECRET").ok();
        let key = std::env::var("BRIDLE_API_KEY").ok();
        let Some((jwt_secret, api_key, _hub, url)) = crate::cli::bridle_cmd::start_hub(
            "parity",
            None,
            secret.as_deref(),
            key.as_deref(),
            &command,
            120_000,
        ) else {
            return LiveReplay::failed(format!(
                "the hub `{}` did not start (see stderr)",
                bridge.display()
            ));
        };
        let Some(rt) = crate::cli::bridle_cmd::runtime() else {
            return LiveReplay::failed("cannot start an async runtime");
        };
        let cfg = ReplayConfig {
            url,
            jwt_secret,
            api_key,
            wait: timeout,
        };
        let mut events = Vec::new();
        // A live difference is what parity reports; only a replay that could not run is an error.
        let outcome = rt.block_on(replay_cell_into(cell, &cfg, &mut events));
        // Waits that ran out are stalls naming what was awaited, not event differences: the
        // player marks an awaited browser event that never came with `missing`.
        let mut stalls: Vec<String> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                e["missing"]
                    .as_str()
                    .map(|m| format!("timed out waiting for hub→browser event #{i} ({m})"))
            })
            .collect();
        events.retain(|e| e.get("missing").is_none());
        // The recorded leg's assembly runs its events through the model's grammar; so does this
        // leg, so both compare the same view.
        let (events, grammar) = super::model::grammar_pass(events);
        match outcome {
            Outcome::NotReplayable(reason) => LiveReplay::skipped(reason),
            Outcome::Fail(m) if m.contains("could not connect") => LiveReplay::failed(m),
            Outcome::Fail(m) if m.starts_with("the hub did not forward") => {
                stalls.push(format!("timed out waiting for hub→agent message: {m}"));
                LiveReplay {
                    events,
                    stalls,
                    grammar,
                    ..Default::default()
                }
            }
            // Pass, or the player's own comparison with the recording: parity compares itself.
            Outcome::Pass { .. } | Outcome::Fail(_) => LiveReplay {
                events,
                stalls,
                grammar,
                ..Default::default()
            },
        }
    }
}

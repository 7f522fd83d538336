//! Side Bridge's half of [`crate::protocol::Live`]: a cell's recorded requests re-sent to a
//! freshly started bridge through [`super::player`]. Side Bridge has no handshake, so a bridge
//! has no identity to compare with a recording's.

use crate::cell::Cell;
use crate::protocol::{BridgeCommand, Live, LiveReplay, Protocol};
use std::time::Duration;

pub struct SideBridgeLive;

impl Live for SideBridgeLive {
    fn protocol(&self) -> Protocol {
        Protocol::SideBridge
    }

    fn replay(&self, cell: &Cell, bridge: &BridgeCommand, timeout: Duration) -> LiveReplay {
        match super::player::replay_for_parity(cell, &bridge.spawn_argv(), timeout) {
            Err(e) => LiveReplay::failed(e),
            Ok(events) => {
                // A reply that never came is a stall (the wait ran out), not a different reply.
                let mut requests = 0;
                let mut stalls = Vec::new();
                for e in &events {
                    if e["type"] == "request" {
                        requests += 1;
                    }
                    if e["type"] == "reply"
                        && let Some(err) = e["error"].as_str()
                        && err.starts_with("no complete reply within")
                    {
                        stalls.push(format!(
                            "timed out waiting for the reply to request #{requests} ({err})"
                        ));
                    }
                }
                LiveReplay {
                    events,
                    stalls,
                    ..Default::default()
                }
            }
        }
    }
}

//! Side Bridge v1.0: Side Search (an iOS app) POSTs JSON to an HTTP "bridge".
//!
//! Spec: `protocols/side-bridge-v1.0.md`; client behaviour and rule table:
//! `reference/side-bridge-clients.md`.
//!
//! * [`profiles`]: the client's request byte habits and the decoders of its builds;
//! * [`transport`]: a raw, bounded HTTP/1.1 client;
//! * [`client`]: the emulated screen (history, options, upsert by id);
//! * [`rules`]: `check sidebridge`, the live rule table;
//! * [`wire`]: the lane envelope of one HTTP request or reply;
//! * [`proxy`]: `record sidebridge`, the recording reverse proxy;
//! * [`player`]: `replay sidebridge`;
//! * [`normalizer`], [`rows`], [`SideBridgeModel`]: the offline pipeline (pins, parity).

pub mod client;
pub mod cmd;
pub mod normalizer;
pub mod profiles;
pub mod proxy;
pub mod rows;
pub mod rules;
pub mod spawn;
pub mod transport;
pub mod wire;

use crate::cell::Cell;
use crate::lane::Entry;
use crate::protocol::{EventSink, GrammarDrop, Model, Protocol, RowProjector};
use serde_json::Value;
use std::collections::HashMap;

/// The offline pipeline: lanes → request/reply events (+ grammar drops) → rows.
///
/// Grammar (per cell, i.e. per chat): a reply must follow its request (`exchange`); a send
/// after a reply that ended the session, before the next session start, is dropped (rule
/// `SB-S1`: the client refuses it locally), and so is its reply. A reply the current app
/// cannot decode (or an upstream failure) is kept as an event and counted `unhandled`.
pub struct SideBridgeModel;

impl Model for SideBridgeModel {
    fn protocol(&self) -> Protocol {
        Protocol::SideBridge
    }

    fn assemble(
        &self,
        _cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        // exchange → whether its request was kept
        let mut pending: HashMap<u64, bool> = HashMap::new();
        let mut ended = false;
        for entry in entries {
            let at = format!(
                "{} run {} seq {}",
                entry.dir,
                crate::jsjson::format_f64(entry.run),
                crate::jsjson::format_f64(entry.seq)
            );
            let Some(env) = wire::Envelope::parse(&entry.line) else {
                sink.invalid(format!("{at}: not a Side Bridge lane envelope"));
                continue;
            };
            match entry.dir.as_str() {
                "client→bridge" => {
                    let ev = normalizer::request_event(&env);
                    match ev["kind"].as_str() {
                        Some("sessionStart") => ended = false,
                        Some("send") if ended => {
                            pending.insert(env.exchange, false);
                            sink.grammar_drop(GrammarDrop {
                                rule: "SB-S1".into(),
                                reason: "a send after endSession (the client refuses it locally)"
                                    .into(),
                                event_type: "request".into(),
                            });
                            continue;
                        }
                        _ => {}
                    }
                    pending.insert(env.exchange, true);
                    sink.event(ev);
                }
                "bridge→client" => {
                    let ev = normalizer::reply_event(&env);
                    match pending.remove(&env.exchange) {
                        Some(true) => {
                            if ev["options"]["endSession"] == true {
                                ended = true;
                            }
                            sink.event(ev);
                        }
                        Some(false) => sink.grammar_drop(GrammarDrop {
                            rule: "SB-S1".into(),
                            reason: "the reply to a dropped request".into(),
                            event_type: "reply".into(),
                        }),
                        None => sink.grammar_drop(GrammarDrop {
                            rule: "pairing".into(),
                            reason: format!(
                                "reply to exchange {} without its request",
                                env.exchange
                            ),
                            event_type: "reply".into(),
                        }),
                    }
                }
                other => sink.invalid(format!("{at}: unknown direction {other}")),
            }
        }
    }

    fn row_projector(&self) -> Box<dyn RowProjector> {
        Box::<rows::SideBridgeRows>::default()
    }

    fn is_unhandled(&self, event: &Value) -> bool {
        event["type"] == "reply" && (event.get("dropped").is_some() || event.get("error").is_some())
    }

    fn event_rules(&self) -> crate::normalize::Rules<'static> {
        normalizer::SIDEBRIDGE_EVENTS
    }

    fn row_rules(&self) -> crate::normalize::Rules<'static> {
        normalizer::SIDEBRIDGE_ROWS
    }
}
pub mod player;

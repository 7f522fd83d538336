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
pub mod fixture;
pub mod normalizer;
pub mod profiles;
pub mod proxy;
pub mod rows;
pub mod rules;
pub mod scenarios;
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

    /// A message's text, a source's title, an id: never who sent it, how many, the options,
    /// the status or an error (as `replay sidebridge`'s second run).
    fn may_vary(&self, pointer: &str, key_varies: bool) -> bool {
        !key_varies && player::may_vary(pointer)
    }

    fn process_scope_skip(&self) -> &'static str {
        "requests without a chatId (GET/OPTIONS probes, bodies the bridge cannot place): the \
         app sends none, so no screen shows their replies to compare"
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
        // Options that change nothing on the client's screen are folded (as replay does).
        let mut screen = normalizer::ScreenOptions::default();
        // A 307/308 the client followed: its reply and the follow-up request are one exchange
        // for the app (its HTTP client hands over only the final reply), so neither is an
        // event; the follow-up's reply answers the redirected request (as replay folds it).
        let mut following = false;
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
                    if std::mem::take(&mut following) {
                        pending.insert(env.exchange, true);
                        continue;
                    }
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
                    let mut ev = ev;
                    screen.fold(&mut ev);
                    sink.event(ev);
                }
                "bridge→client" => {
                    if env.is_followed_redirect() && pending.get(&env.exchange) == Some(&true) {
                        pending.remove(&env.exchange);
                        following = true;
                        continue;
                    }
                    let mut ev = normalizer::reply_event(&env);
                    match pending.remove(&env.exchange) {
                        Some(true) => {
                            if ev["options"]["endSession"] == true {
                                ended = true;
                            }
                            screen.fold(&mut ev);
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
pub mod live;
pub mod player;

#[cfg(test)]
mod tests {
    use super::wire::Envelope;
    use super::*;

    use crate::protocol::Collected as Collect;

    fn entry(seq: u64, dir: &str, e: Envelope) -> Entry {
        Entry {
            ts: 0.0,
            run: 1.0,
            seq: seq as f64,
            dir: dir.into(),
            line: String::from_utf8(e.to_line()).unwrap(),
            extra: Default::default(),
        }
    }

    fn req(n: u64, body: &str) -> Envelope {
        Envelope {
            exchange: n,
            method: Some("POST".into()),
            path: Some("/".into()),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    fn rep(n: u64, status: u16, body: &str) -> Envelope {
        Envelope {
            exchange: n,
            status: Some(status),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    const C: &str = "401790B9-38C5-429D-AE6A-FC4CF35A88AD";
    const U1: &str = "00C5D592-6B1E-4C3A-9D2F-0A7E5B3C1D44";
    const A1: &str = "d2df7849-0000-4000-8000-000000000001";

    fn run(entries: Vec<Entry>) -> (Collect, Vec<Value>) {
        let cell = Cell {
            protocol: Protocol::SideBridge,
            key: "b/c".into(),
            path: "/nonexistent".into(),
            lanes: vec![],
            current: vec![],
        };
        let mut sink = Collect::default();
        SideBridgeModel.assemble(&cell, &mut entries.into_iter(), &mut sink);
        let mut rows = SideBridgeModel.row_projector();
        for e in &sink.0 {
            rows.push(e);
        }
        let rows = rows.finish();
        (sink, rows)
    }

    #[test]
    fn rows_upsert_case_insensitively_skip_empty_and_stop_after_end() {
        let send = format!(
            r#"{{"chatId":"{C}","sidebridge":"1.0","messages":[{{"id":"{U1}","from":"user","content":"hi","sources":[]}}]}}"#
        );
        let entries = vec![
            entry(
                1,
                "client→bridge",
                req(
                    1,
                    &format!(r#"{{"chatId":"{C}","sidebridge":"1.0","history":[]}}"#),
                ),
            ),
            entry(2, "bridge→client", rep(1, 200, "{}")),
            entry(3, "client→bridge", req(2, &send)),
            entry(
                4,
                "bridge→client",
                rep(
                    2,
                    200,
                    &format!(
                        r#"{{"messages":[{{"id":"{A1}","from":"assistant","content":"first"}},{{"id":"{}","from":"assistant","content":"second"}},{{"id":"d2df7849-0000-4000-8000-000000000009","from":"assistant","content":""}}],"options":{{"endSession":true}}}}"#,
                        A1.to_ascii_uppercase()
                    ),
                ),
            ),
            entry(5, "client→bridge", req(3, &send)),
            entry(6, "bridge→client", rep(3, 200, "{}")),
        ];
        let (sink, rows) = run(entries);
        assert_eq!(sink.0.len(), 4);
        assert_eq!(
            sink.1.len(),
            2,
            "the send after endSession and its reply are dropped"
        );
        assert_eq!(sink.1[0].rule, "SB-S1");
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            rows[1]["content"], "second",
            "upserted by id, case-insensitively"
        );
    }

    #[test]
    fn an_undecodable_reply_is_unhandled_and_becomes_an_error_bubble_after_a_send() {
        let send = format!(
            r#"{{"chatId":"{C}","sidebridge":"1.0","messages":[{{"id":"{U1}","from":"user","content":"hi","sources":[]}}]}}"#
        );
        let entries = vec![
            entry(
                1,
                "client→bridge",
                req(
                    1,
                    &format!(r#"{{"chatId":"{C}","sidebridge":"1.0","history":[]}}"#),
                ),
            ),
            entry(2, "bridge→client", rep(1, 200, "<html>")),
            entry(3, "client→bridge", req(2, &send)),
            entry(4, "bridge→client", rep(2, 500, "<html>")),
        ];
        let (sink, rows) = run(entries);
        assert_eq!(
            sink.0
                .iter()
                .filter(|e| SideBridgeModel.is_unhandled(e))
                .count(),
            2
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1]["from"], "system");
        assert!(
            rows[1]["content"]
                .as_str()
                .unwrap()
                .starts_with("Failed to communicate with Side Bridge: ")
        );
    }

    #[test]
    fn normalized_events_intern_ids_across_case() {
        let a = normalizer::reply_event(&rep(
            1,
            200,
            &format!(r#"{{"messages":[{{"id":"{A1}","from":"assistant","content":"x"}}]}}"#),
        ));
        let b = normalizer::request_event(&req(
            2,
            &format!(
                r#"{{"chatId":"{C}","sidebridge":"1.0","history":[{{"id":"{}","from":"assistant","content":"x"}}]}}"#,
                A1.to_ascii_uppercase()
            ),
        ));
        let n = crate::normalize::normalize_list(vec![a, b], normalizer::SIDEBRIDGE_EVENTS);
        assert_eq!(n[0]["messages"][0]["id"], "#1");
        assert_eq!(n[1]["history"][0]["id"], "#1");
        assert_eq!(n[1]["chatId"], "#2");
    }

    /// Statuses compare as the class a client build can tell: 2xx or not (the app ignores the
    /// status, app-dev shows one generic error for any non-2xx); the code is kept, not compared.
    #[test]
    fn statuses_compare_as_2xx_or_not() {
        let body = r#"{"messages":[{"id":"D2DF7849-0000-4000-8000-000000000001","from":"system","content":"no"}]}"#;
        let norm = |status| {
            let e = normalizer::reply_event(&rep(1, status, body));
            assert_eq!(e["httpStatus"], status);
            crate::normalize::normalize_list(vec![e], normalizer::SIDEBRIDGE_EVENTS).remove(0)
        };
        assert_eq!(norm(400), norm(422));
        assert_eq!(norm(401), norm(403));
        assert_eq!(norm(401), norm(500));
        assert_eq!(norm(200), norm(202));
        assert_ne!(norm(200), norm(401));
        assert_eq!(norm(401)["status"], "non-2xx");
        assert!(norm(401).get("httpStatus").is_none());
    }
}

//! Side Bridge events from lane envelopes, and how they are normalized for comparison.
//!
//! A cell is one chat (`<bridge>/<chatId>`). Each recorded request becomes a `request` event
//! and each reply a `reply` event:
//!
//! ```text
//! {"type":"request","method":"POST","path":"/","kind":"sessionStart"|"send"|"other","chatId":"…","sidebridge":"1.0","messages":[{id,from,content}]|null,"history":[…]|null}
//! {"type":"reply","status":"2xx","httpStatus":200,"messages":[{id,from,content,sources}],"options":{"disableSendHistory":true,"endSession":null}|null}
//! {"type":"reply","status":"non-2xx","httpStatus":500,"dropped":"<why the current app drops it>"}
//! {"type":"reply","status":"none","httpStatus":0,"error":"<why the bridge gave no reply>"}
//! ```
//!
//! Every id is upper-cased (ids compare as UUID values) and then interned (`#1`, `#2`, … in
//! first-seen order over the list), so two runs with fresh UUIDs compare equal when they say
//! the same things. `elapsedMs` is removed; time fields are zeroed.
//!
//! The status is compared as the one distinction a client build can make, `"2xx"` or
//! `"non-2xx"` ([`status_class`]): the current app ignores the status altogether (a 401, 405 or
//! 500 carrying a Side Bridge body is shown and its options applied exactly like a 200; a body
//! that is not Side Bridge is a decode error whatever the status: reference §2), and app-dev
//! turns every non-2xx status into the same generic error bubble without reading the body
//! (reference §8). So no build tells 200 from 202, nor 400 from 422, nor 401 from 403, nor a
//! 4xx from a 5xx; two builds differing only there compare equal, while a reply that moves
//! between 2xx and non-2xx (app-dev shows the text, or a generic error instead) still differs.
//! The exact code stays in the event as `httpStatus` for the record and for the player's own
//! checks (an auth refusal is a 401/403), and is removed before comparing
//! ([`SIDEBRIDGE_EVENTS`]).

use super::profiles::{self, Profile};
use super::wire::Envelope;
use crate::normalize::{Rules, TIME_FIELDS};
use serde_json::{Map, Value, json};

pub const SIDEBRIDGE_EVENTS: Rules<'static> = Rules {
    id_fields: &["id", "chatId"],
    blank_fields: &[],
    removed_fields: &["elapsedMs", "httpStatus"],
    time_fields: TIME_FIELDS,
    keep_time_type: false,
    opaque_fields: &[],
};

pub const SIDEBRIDGE_ROWS: Rules<'static> = SIDEBRIDGE_EVENTS;

fn message_json(m: &Value) -> Value {
    let s = |k: &str| m.get(k).cloned().unwrap_or(Value::Null);
    let id = match m.get("id") {
        Some(Value::String(s)) => json!(s.to_ascii_uppercase()),
        other => other.cloned().unwrap_or(Value::Null),
    };
    json!({"id": id, "from": s("from"), "content": s("content")})
}

/// The `request` event of a client→bridge envelope.
pub fn request_event(e: &Envelope) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), json!("request"));
    o.insert("method".into(), json!(e.method.clone().unwrap_or_default()));
    o.insert("path".into(), json!(e.path.clone().unwrap_or_default()));
    let parsed: Option<Map<String, Value>> = profiles::parse_json(&e.body)
        .ok()
        .and_then(|v| v.as_object().cloned());
    match parsed {
        Some(b) if e.method.as_deref() == Some("POST") => {
            let kind = if b.get("messages").is_some_and(|m| !m.is_null()) {
                "send"
            } else {
                "sessionStart"
            };
            o.insert("kind".into(), json!(kind));
            o.insert(
                "chatId".into(),
                match b.get("chatId") {
                    Some(Value::String(c)) => json!(c.to_ascii_uppercase()),
                    other => other.cloned().unwrap_or(Value::Null),
                },
            );
            o.insert(
                "sidebridge".into(),
                b.get("sidebridge").cloned().unwrap_or(Value::Null),
            );
            for k in ["messages", "history"] {
                o.insert(
                    k.into(),
                    match b.get(k) {
                        Some(Value::Array(a)) => Value::Array(a.iter().map(message_json).collect()),
                        Some(other) => other.clone(),
                        None => Value::Null,
                    },
                );
            }
        }
        _ => {
            o.insert("kind".into(), json!("other"));
            o.insert("body".into(), json!(String::from_utf8_lossy(&e.body)));
        }
    }
    Value::Object(o)
}

/// The status as the client builds can tell it apart: `"2xx"` or `"non-2xx"` (see the module
/// documentation: the app ignores the status, app-dev asks only whether it is 2xx).
pub fn status_class(code: u16) -> &'static str {
    if (200..300).contains(&code) {
        "2xx"
    } else {
        "non-2xx"
    }
}

/// The `reply` event of a bridge→client envelope, as the current app decodes it.
pub fn reply_event(e: &Envelope) -> Value {
    let code = e.status.unwrap_or(0);
    let status = status_class(code);
    if let Some(err) = &e.error {
        // No status read (no reply, or one whose framing could not be read): "none", not the
        // class of a status the reply never showed (a cut 200 read as "non-2xx" in parity).
        let status = if code == 0 { "none" } else { status };
        return json!({"type": "reply", "status": status, "httpStatus": code, "error": err});
    }
    match profiles::judge(Profile::App, code, &e.body) {
        Err(why) => {
            json!({"type": "reply", "status": status, "httpStatus": code, "dropped": why})
        }
        Ok(r) => json!({
            "type": "reply",
            "status": status,
            "httpStatus": code,
            "messages": r.messages.iter().map(|m| {
                let mut v = json!({"id": m.key(), "from": m.from.as_str(), "content": m.content});
                if !m.sources.is_empty() {
                    v["sources"] = Value::Array(m.sources.iter().map(|s| json!({"title": s.title, "url": s.url})).collect());
                }
                v
            }).collect::<Vec<_>>(),
            // As the client merges it (reference §3.1, §3.3): absent, `null`, `{}` and
            // all-null flags change nothing, so they are one value; so does
            // `endSession: false` (a screen that could read it was not ended, and an ended
            // one sends nothing more), while `disableSendHistory: false` re-enables history.
            "options": r.options
                .map(|o| (o.disable_send_history, o.end_session.filter(|ended| *ended)))
                .filter(|(history, ended)| history.is_some() || ended.is_some())
                .map(|(history, ended)| json!({
                    "disableSendHistory": history,
                    "endSession": ended,
                })).unwrap_or(Value::Null),
        }),
    }
}

/// The screen state the client keeps, for folding what a reply changes nothing on:
/// - options (reference §3.1, §3.4): a `disableSendHistory` equal to what the screen already
///   has (`true` re-asserted while history is off, `false` while it is on) is the same as
///   absent;
/// - messages (reference §2: a reply message whose id is already in the chat replaces that
///   message in place): a message re-sent with an id the screen shows, with the same `from`,
///   content and sources, changes nothing the user sees, so it is left out. A bridge that
///   re-sends its whole transcript on every reply then compares equal with one that sends
///   only the new answer; a re-sent message whose content changed is an edit, and stays.
///
/// A session start opens the screen afresh with history on; a cell is one chat, whose saved
/// messages stay across its session starts. Feed it every event of one cell, in order.
#[derive(Debug, Default)]
pub struct ScreenOptions {
    history_off: bool,
    /// Upper-cased id → the message as shown (`from`, `content`, `sources`).
    shown: std::collections::HashMap<String, Value>,
}

/// A message as the screen shows it: who, what, and the sources cited (none when absent).
fn as_shown(m: &Value) -> Value {
    json!({
        "from": m.get("from").cloned().unwrap_or(Value::Null),
        "content": m.get("content").cloned().unwrap_or(Value::Null),
        "sources": m.get("sources").filter(|s| !s.is_null()).cloned().unwrap_or(json!([])),
    })
}

impl ScreenOptions {
    pub fn fold(&mut self, ev: &mut Value) {
        match ev["type"].as_str() {
            Some("request") => {
                // A session start opens the screen afresh (history on); the chat's saved
                // messages stay, so a reopened chat still shows them.
                if ev["kind"] == "sessionStart" {
                    self.history_off = false;
                }
                // What the client sends is on its screen: the history it restores or keeps,
                // and the user's own message. A message already shown keeps what the screen
                // has: the request event carries no sources, the screen does.
                for k in ["history", "messages"] {
                    for m in ev[k].as_array().into_iter().flatten() {
                        if let Some(id) = m["id"].as_str() {
                            self.shown
                                .entry(id.to_ascii_uppercase())
                                .or_insert_with(|| as_shown(m));
                        }
                    }
                }
            }
            Some("reply") => {
                if let Some(msgs) = ev.get_mut("messages").and_then(Value::as_array_mut) {
                    let shown = &mut self.shown;
                    msgs.retain(|m| {
                        let Some(id) = m["id"].as_str().map(str::to_ascii_uppercase) else {
                            return true;
                        };
                        let now = as_shown(m);
                        if shown.get(&id) == Some(&now) {
                            return false;
                        }
                        shown.insert(id, now);
                        true
                    });
                }
                let Some(o) = ev.get_mut("options").filter(|o| o.is_object()) else {
                    return;
                };
                if let Some(off) = o["disableSendHistory"].as_bool() {
                    if off == self.history_off {
                        o["disableSendHistory"] = Value::Null;
                    } else {
                        self.history_off = off;
                    }
                }
                if o["disableSendHistory"].is_null() && o["endSession"].is_null() {
                    ev["options"] = Value::Null;
                }
            }
            _ => {}
        }
    }

    /// [`ScreenOptions::fold`] over one cell's events.
    pub fn fold_all(events: &mut [Value]) {
        let mut s = ScreenOptions::default();
        for ev in events {
            s.fold(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ScreenOptions;
    use serde_json::{Value, json};

    #[test]
    fn messages_re_sent_unchanged_are_folded_and_edits_stay() {
        let msg =
            |id: &str, content: &str| json!({"id": id, "from": "assistant", "content": content});
        let mut evs = vec![
            json!({"type": "request", "kind": "sessionStart", "history": []}),
            json!({"type": "reply", "messages": [msg("A", "hello")], "options": null}),
            json!({"type": "request", "kind": "send", "messages": [{"id": "U1", "from": "user", "content": "hi"}], "history": []}),
            // the whole transcript again: A unchanged (folded), B new, a user-id copy unchanged
            json!({"type": "reply", "messages": [msg("a", "hello"), msg("B", "you said hi"), {"id": "U1", "from": "user", "content": "hi"}], "options": null}),
            // A edited in place: kept
            json!({"type": "reply", "messages": [msg("A", "hello again"), msg("B", "you said hi")], "options": null}),
        ];
        ScreenOptions::fold_all(&mut evs);
        let ids = |e: &Value| -> Vec<String> {
            e["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(ids(&evs[1]), ["A"]);
        assert_eq!(ids(&evs[3]), ["B"]);
        assert_eq!(ids(&evs[4]), ["A"]);
    }

    #[test]
    fn options_that_change_nothing_on_the_screen_are_folded() {
        let start = || json!({"type": "request", "kind": "sessionStart"});
        let send = || json!({"type": "request", "kind": "send"});
        let reply = |off: Value| json!({"type": "reply", "options": {"disableSendHistory": off, "endSession": null}});
        let mut evs = vec![
            start(),
            reply(json!(false)), // history is on already: folded
            send(),
            reply(json!(true)), // turns it off: kept
            send(),
            reply(json!(true)), // re-asserted: folded
            send(),
            reply(json!(false)), // turns it on again: kept
            start(),
            reply(json!(true)), // a new screen starts with history on: kept
        ];
        ScreenOptions::fold_all(&mut evs);
        let kept: Vec<Value> = evs
            .iter()
            .filter(|e| e["type"] == "reply")
            .map(|e| e["options"]["disableSendHistory"].clone())
            .collect();
        assert_eq!(
            kept,
            vec![
                Value::Null,
                json!(true),
                Value::Null,
                json!(false),
                json!(true)
            ]
        );
        assert_eq!(evs[1]["options"], Value::Null);
    }
}

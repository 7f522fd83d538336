//! Pure Bridle rule checks shared by the live checkers and the offline model.

use crate::rule::{Status, SubCheck, Verdict};
use serde_json::Value;

/// Rule ids, exactly as the catalogue (`rules/bridle.json`) spells them.
pub mod id {
    pub const HANDSHAKE_AUTH: &str = "handshake-auth";
    pub const WELCOME: &str = "welcome";
    pub const PING_PONG: &str = "ping-pong";
    pub const AGENT_ISOLATION: &str = "agent-isolation";
    pub const CLIENT_ROUTING: &str = "client-routing";
    pub const AGENT_NOT_CONNECTED: &str = "agent-not-connected";
    pub const LEGACY_PARTS: &str = "legacy-parts";
    pub const STREAM_RELAY: &str = "stream-relay";
    pub const STREAMING_REPLACE: &str = "streaming-replace";
    pub const NOTES: &str = "notes";
    pub const AGENT_RECONNECT: &str = "agent-reconnect";
    pub const HTTP_HEALTH: &str = "http-health";
    pub const HTTP_MESSAGE: &str = "http-message";
    pub const HTTP_SYNC: &str = "http-sync";
    pub const HTTP_SYNC_TIMEOUT: &str = "http-sync-timeout";
    pub const ROBUSTNESS: &str = "robustness";
    pub const SAME_USER_BROWSERS: &str = "same-user-browsers";
    pub const AGENT_TAKEOVER: &str = "agent-takeover";
    pub const EVENT_FIELDS: &str = "event-fields";
    pub const MALFORMED_PAYLOADS: &str = "malformed-payloads";
    pub const SPEC_EVENTS_ONLY: &str = "spec-events-only";
    pub const AGENT_AUTH: &str = "agent-auth";
    pub const AGENT_REGISTER: &str = "agent-register";
    pub const AGENT_CLIENT_ID: &str = "agent-client-id";
    pub const AGENT_EVENT_FIELDS: &str = "agent-event-fields";
    pub const STREAM_END_FINAL: &str = "stream-end-final";
    pub const STREAM_CADENCE: &str = "stream-cadence";

    /// The rules `check bridle hub` runs, in order.
    pub const HUB: &[&str] = &[
        HANDSHAKE_AUTH,
        WELCOME,
        PING_PONG,
        AGENT_ISOLATION,
        CLIENT_ROUTING,
        SAME_USER_BROWSERS,
        AGENT_TAKEOVER,
        AGENT_NOT_CONNECTED,
        LEGACY_PARTS,
        EVENT_FIELDS,
        MALFORMED_PAYLOADS,
        STREAM_RELAY,
        STREAMING_REPLACE,
        NOTES,
        AGENT_RECONNECT,
        HTTP_HEALTH,
        HTTP_MESSAGE,
        HTTP_SYNC,
        HTTP_SYNC_TIMEOUT,
        ROBUSTNESS,
        // Last: it reports the non-spec events every earlier rule's peers received.
        SPEC_EVENTS_ONLY,
    ];

    /// The rules `check bridle agent` runs, in order.
    pub const AGENT: &[&str] = &[
        AGENT_AUTH,
        AGENT_REGISTER,
        AGENT_CLIENT_ID,
        AGENT_EVENT_FIELDS,
        STREAMING_REPLACE,
        STREAM_END_FINAL,
        NOTES,
        AGENT_RECONNECT,
        STREAM_CADENCE,
    ];
}

/// The sub-checks each `check bridle hub` rule runs, by name, in order (what a passing hub
/// shows). A rule that could not run (the hub did not start or cannot be reached, a setup step
/// of the rule failed, the rule ran out of time) still lists each, as not run naming why.
pub const HUB_SUBCHECKS: &[(&str, &[&str])] = &[
    (
        id::HANDSHAKE_AUTH,
        &[
            "browser without token",
            "browser with a JWT signed by another secret",
            "browser with a malformed token",
            "browser with an expired JWT",
            "browser with a JWT not valid yet (nbf an hour ahead)",
            "browser with a JWT without sub",
            "browser with an unsigned JWT (alg none, roles ADMIN)",
            "browser without agentId",
            "agent with a wrong apiKey",
            "agent without apiKey",
            "agent without agentId",
            "agent with the apiKey's case flipped",
            "browser with a valid JWT",
            "agent with the right apiKey",
        ],
    ),
    (
        id::WELCOME,
        &[
            "clientId is the JWT sub",
            "clientId is admin for the ADMIN role",
            "clientId is the JWT sub for a role admin in lower case",
            "welcomed over long-polling, the default client's first transport",
        ],
    ),
    (
        id::PING_PONG,
        &[
            "browser ping",
            "only the browser that pinged gets the pong",
            "agent ping",
        ],
    ),
    (
        id::AGENT_ISOLATION,
        &[
            "agent a gets its browser's message",
            "agent b gets nothing",
            "browser of a gets the reply",
            "browser of b gets nothing",
            "agent b gets its browser's message",
            "agent a gets nothing from b's browser",
        ],
    ),
    (
        id::CLIENT_ROUTING,
        &[
            "the agent gets the sender's clientId",
            "a reply for route-u1 reaches route-u1",
            "a reply for route-u1 keeps its parts",
            "a reply for route-u1 reaches no one else",
            "a reply for route-u2 reaches route-u2",
            "a reply for route-u2 keeps its parts",
            "a reply for route-u2 reaches no one else",
            "an ADMIN browser's message carries its clientId",
            "a reply for the ADMIN browser's clientId reaches it",
        ],
    ),
    (
        id::SAME_USER_BROWSERS,
        &[
            "the first browser reaches the agent",
            "the second browser reaches the agent",
            "the first browser gets the reply",
            "the second browser gets the reply",
            "the second browser is served after the first leaves",
        ],
    ),
    (
        id::AGENT_TAKEOVER,
        &[
            "one agent per agentId",
            "health after the other connection leaves",
            "messages reach the remaining agent",
        ],
    ),
    (
        id::AGENT_NOT_CONNECTED,
        &["reply text", "parts mirror text", "only the sender gets it"],
    ),
    (
        id::LEGACY_PARTS,
        &[
            "text + images become parts",
            "explicit parts pass unchanged",
            "over HTTP, explicit parts pass unchanged",
            "over HTTP, text + images become parts",
        ],
    ),
    (
        id::EVENT_FIELDS,
        &[
            "welcome",
            "hub→agent messageId per message",
            "hub→agent message",
            "hub→browser typing",
            "hub→browser stream",
            "hub→browser stream_end",
            "hub→browser message",
        ],
    ),
    (
        id::MALFORMED_PAYLOADS,
        &[
            "a null message",
            "parts that is not an array",
            "parts that is an object",
            "a text that is not a string",
            "a message that is an array",
            "a message without text",
        ],
    ),
    (id::STREAM_RELAY, &["order", "messageId"]),
    (
        id::STREAMING_REPLACE,
        &["accumulation", "final text relayed", "final parts relayed"],
    ),
    (
        id::NOTES,
        &[
            "place in the turn",
            "kind thinking kept",
            "kind tool kept",
            "an unmarked note keeps its reading",
            "kind kept with no turn open",
            "a plain answer with no turn open stays an answer",
        ],
    ),
    (
        id::AGENT_RECONNECT,
        &[
            "agent gone: not connected",
            "messages resume after register",
            "replies reach the browser again",
        ],
    ),
    (
        id::HTTP_HEALTH,
        &[
            "overall, before any agent",
            "per agent",
            "unknown agent",
            "overall",
            "a browser leaving is counted",
            "overall, after every agent left",
        ],
    ),
    (id::HTTP_MESSAGE, &["answer", "forwarded"]),
    (
        id::HTTP_SYNC,
        &[
            "final text",
            "messageId",
            "a plain message answers",
            "an unmarked note mid-turn is not the answer",
        ],
    ),
    (
        id::HTTP_SYNC_TIMEOUT,
        &[
            "an agent that never answers",
            "an agent that streamed, then went silent",
        ],
    ),
    (
        id::ROBUSTNESS,
        &[
            "no flood after welcome",
            "frames the spec's traffic takes",
            "an oversized frame",
            "invalid JSON in an event",
            "a binary frame",
            "a message that is not an object",
            "an unknown packet type",
            "an event without a name",
        ],
    ),
    (id::SPEC_EVENTS_ONLY, &["hub→browser", "hub→agent"]),
];

/// The checks each `check bridle agent` rule makes, by name: its sub-checks, or for a rule
/// judged as one check, that check. Listed (not run, naming why) when the rule could not run.
pub const AGENT_SUBCHECKS: &[(&str, &[&str])] = &[
    (
        id::AGENT_AUTH,
        &["connects to /ws/agent with apiKey and agentId"],
    ),
    (
        id::AGENT_REGISTER,
        &["after connecting", "after reconnecting"],
    ),
    (
        id::AGENT_CLIENT_ID,
        &["every frame carries the browser's clientId"],
    ),
    (
        id::AGENT_EVENT_FIELDS,
        &["every answer event has the spec's field types and part shapes"],
    ),
    (id::STREAMING_REPLACE, &["accumulation"]),
    (
        id::STREAM_END_FINAL,
        &[
            "messageId",
            "parts mirror text",
            "nothing continues the stream after stream_end",
        ],
    ),
    (id::NOTES, &["notes carry kind thinking or tool"]),
    (
        id::AGENT_RECONNECT,
        &[
            "reconnects after the hub restarts",
            "answers after reconnecting",
        ],
    ),
    (id::STREAM_CADENCE, &["stream flush interval"]),
];

/// A rule's sub-check names from `table` (none for an unknown rule).
pub fn subchecks_of(
    table: &[(&str, &'static [&'static str])],
    rule: &str,
) -> &'static [&'static str] {
    table
        .iter()
        .find(|(r, _)| *r == rule)
        .map(|(_, s)| *s)
        .unwrap_or(&[])
}

/// Adds each of `rule`'s sub-checks that `subs` does not have, as not run naming `why`: a rule
/// cut short still lists everything it did not get to judge.
pub fn list_unrun(
    table: &[(&str, &'static [&'static str])],
    rule: &str,
    subs: &mut Vec<SubCheck>,
    why: &str,
) {
    for name in subchecks_of(table, rule) {
        if !subs.iter().any(|c| c.name == *name) {
            subs.push(SubCheck::new(*name, Status::NotRun, why));
        }
    }
}

/// A rule that could not run at all (its peer under test did not start or cannot be reached):
/// not run, naming why, with every sub-check listed as not run naming the same cause.
pub fn not_run_with_subchecks(
    table: &[(&str, &'static [&'static str])],
    rule: &str,
    why: &str,
) -> Verdict {
    let mut subs = Vec::new();
    list_unrun(table, rule, &mut subs, why);
    Verdict::not_run(rule, why).with_subchecks(subs)
}

/// The plain text a `parts` array carries (its text parts concatenated).
pub fn parts_text(parts: &Value) -> Option<String> {
    let arr = parts.as_array()?;
    let mut out = String::new();
    for p in arr {
        if p["type"] == "text" {
            out.push_str(p["text"].as_str()?);
        }
    }
    Some(out)
}

/// How far a `ts` may be from now: the spec's `ts` is epoch milliseconds (its examples:
/// 1712847600000), so a `ts` a day off is another unit (epoch seconds) or no clock at all,
/// unless it is the agent's own `ts` relayed as it came.
pub const TS_SLACK_MS: f64 = 86_400_000.0;

/// Why a numeric `ts` is not epoch milliseconds at `now` (more than [`TS_SLACK_MS`] away, and
/// not `agent_ts`, the agent's own `ts` a hub may relay as it came), or `None`. A `ts` that is
/// not a number is the caller's to name (its type is a field fault, not a unit).
pub fn ts_not_ms(ts: &Value, agent_ts: Option<i64>, now: f64) -> Option<String> {
    let t = ts.as_f64()?;
    if agent_ts.is_some_and(|a| t == a as f64) || (t - now).abs() <= TS_SLACK_MS {
        return None;
    }
    let not_agents = agent_ts.map_or(String::new(), |a| {
        format!(" and is not the agent's ts ({a})")
    });
    Some(format!(
        "ts {ts} is more than a day from now ({}){not_agents}: the spec's ts is epoch milliseconds",
        now as i64
    ))
}

/// The image media types the spec supports ("Supported media types").
pub const IMAGE_MEDIA_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// What is wrong with one `BridlePart` (the spec's union of a text, an image and a file part);
/// other keys are extensions.
pub fn part_problems(part: &Value) -> Vec<String> {
    let mut p = Vec::new();
    let string = |k: &str, p: &mut Vec<String>| {
        if !part[k].is_string() {
            p.push(format!(
                "{} {k} {}",
                part["type"].as_str().unwrap_or("?"),
                if part.get(k).is_some() {
                    "is not a string"
                } else {
                    "is missing"
                }
            ));
        }
    };
    match part["type"].as_str() {
        Some("text") => string("text", &mut p),
        Some("image") => {
            string("base64", &mut p);
            match part["mediaType"].as_str() {
                Some(m) if IMAGE_MEDIA_TYPES.contains(&m) => {}
                Some(m) => p.push(format!(
                    "image mediaType {m:?} is not one the spec supports ({})",
                    IMAGE_MEDIA_TYPES.join(", ")
                )),
                None => string("mediaType", &mut p),
            }
        }
        Some("file") => {
            string("url", &mut p);
            string("name", &mut p);
            if part
                .get("mimeType")
                .is_some_and(|m| !m.is_null() && !m.is_string())
            {
                p.push("file mimeType is not a string".into());
            }
        }
        _ => p.push(format!(
            "a part of type {} is none of the spec's text, image and file parts",
            part.get("type")
                .map_or("(missing)".into(), |t| t.to_string())
        )),
    }
    p
}

/// What is wrong with one answer event an agent sent (`IBridleOutgoingEvent`: `text` a string,
/// `parts` an array of [`part_problems`]-clean parts, `messageId` a string, `ts` a number in
/// epoch milliseconds; each optional) at `now`, each as `(kind, text)`: the kind leaves out
/// the values, so the same fault on many frames is told once. `clientId` and `kind` are
/// other rules' to judge.
pub fn agent_event_problems(data: &Value, now: f64) -> Vec<(String, String)> {
    let mut p = Vec::new();
    if !data.is_object() {
        p.push((
            "not an object".into(),
            format!("the payload {data} is not an object"),
        ));
        return p;
    }
    for k in ["text", "messageId"] {
        if data.get(k).is_some_and(|v| !v.is_null() && !v.is_string()) {
            p.push((
                format!("{k} type"),
                format!("{k} {} is not a string", data[k]),
            ));
        }
    }
    match data.get("parts").filter(|v| !v.is_null()) {
        None => {}
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                p.extend(
                    part_problems(part)
                        .into_iter()
                        .map(|w| (w.clone(), format!("parts[{i}]: {w}"))),
                );
            }
        }
        Some(v) => p.push(("parts type".into(), format!("parts {v} is not an array"))),
    }
    match data.get("ts").filter(|v| !v.is_null()) {
        None => {}
        Some(t) if t.is_number() => {
            p.extend(ts_not_ms(t, None, now).map(|w| ("ts unit".to_string(), w)))
        }
        Some(t) => p.push((
            "ts type".into(),
            format!("ts {t} is not a number (the spec: ts?: number, epoch milliseconds)"),
        )),
    }
    p
}

/// A text shortened for a verdict: long accumulations keep their start and their end.
fn clip(s: &str) -> String {
    let n = s.chars().count();
    if n <= 100 {
        return s.to_string();
    }
    let head: String = s.chars().take(50).collect();
    let tail: String = s.chars().skip(n - 40).collect();
    format!("{head}…({} chars)…{tail}", n - 90)
}

/// What a `stream_end` may carry relative to the last `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndText {
    /// Exactly the last accumulation (a hub relaying a turn whose stream_end repeats it).
    Last,
    /// The last accumulation or an extension of it: an agent runtime flushes its accumulation
    /// every 100 ms and sends the returned final value as `stream_end`, so tokens that arrived
    /// after the last flush appear only there (the spec's "Agent implementation").
    MayExtend,
}

/// `streaming-replace` over one turn's frames (`stream`* then `stream_end`, any other names
/// ignored): every `stream` text extends the previous one, parts mirror text, and `stream_end`
/// carries the final accumulation as `end` allows. Streams are numbered from 1, as the spec
/// numbers them. `Err` names the first violation and how many frames after it break too
/// (each frame judged against the one before it), so one fault stays one verdict that still
/// says how far it reaches.
pub fn streaming_replace_with(frames: &[(String, Value)], end: EndText) -> Result<(), String> {
    let mut prev: Option<String> = None;
    let mut n = 0;
    let mut problems: Vec<(String, String)> = Vec::new();
    for (name, data) in frames {
        if name != "stream" && name != "stream_end" {
            continue;
        }
        n += 1;
        let label = if name == "stream" {
            format!("stream #{n}")
        } else {
            "stream_end".to_string()
        };
        let Some(full) = data["text"].as_str() else {
            problems.push((label.clone(), format!("{label} has no text")));
            continue;
        };
        let text = clip(full);
        match parts_text(&data["parts"]) {
            Some(pt) if pt == full => {}
            Some(pt) => problems.push((
                label.clone(),
                format!("{label}: parts say {:?} but text says {text:?}", clip(&pt)),
            )),
            None => problems.push((
                label.clone(),
                format!("{label}: parts missing or not text parts"),
            )),
        }
        if let Some(prev_full) = &prev {
            let p = &clip(prev_full);
            if name == "stream_end" {
                match end {
                    EndText::Last if full != prev_full => problems.push((
                        label.clone(),
                        format!("stream_end text {text:?} is not the last accumulation {p:?}"),
                    )),
                    EndText::MayExtend if !full.starts_with(prev_full.as_str()) => problems.push((
                        label.clone(),
                        format!(
                            "stream_end text {text:?} does not extend the last accumulation {p:?}"
                        ),
                    )),
                    _ => {}
                }
            } else if !full.starts_with(prev_full.as_str()) {
                // What it looks like, when it looks like something: an earlier accumulation
                // (the previous text extends it: frames out of order, or one sent again late),
                // or a delta (not a prefix of the previous one).
                let looks = if prev_full.starts_with(full) {
                    "an earlier accumulation: out of order?"
                } else {
                    "a delta?"
                };
                problems.push((
                    label.clone(),
                    format!("{label} {text:?} does not extend the previous {p:?} ({looks})"),
                ));
            }
        }
        prev = Some(full.to_string());
    }
    if n == 0 {
        return Err("no stream frames".into());
    }
    let Some((_, first)) = problems.first() else {
        return Ok(());
    };
    let mut why = first.clone();
    let mut later: Vec<&str> = problems[1..].iter().map(|(l, _)| l.as_str()).collect();
    later.dedup();
    if !later.is_empty() {
        const SHOWN: usize = 5;
        let more = if later.len() > SHOWN {
            format!(", … ({} in all)", later.len())
        } else {
            String::new()
        };
        why.push_str(&format!(
            "; {} more frame{} after it break{} too: {}{more}",
            later.len(),
            if later.len() == 1 { "" } else { "s" },
            if later.len() == 1 { "s" } else { "" },
            later[..later.len().min(SHOWN)].join(", ")
        ));
    }
    Err(why)
}

/// [`streaming_replace_with`] where `stream_end` must repeat the last accumulation.
pub fn streaming_replace(frames: &[(String, Value)]) -> Result<(), String> {
    streaming_replace_with(frames, EndText::Last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str, text: &str) -> (String, Value) {
        (
            name.into(),
            json!({"text": text, "parts": [{"type": "text", "text": text}]}),
        )
    }

    #[test]
    fn streams_count_from_one_and_every_break_is_counted() {
        let frames = [
            f("typing", ""),
            f("stream", "w1"),
            f("stream", "w1 w2"),
            f("stream", " w3"),
            f("stream", " w4"),
            f("stream_end", " w4"),
        ];
        let why = streaming_replace(&frames).unwrap_err();
        assert!(
            why.starts_with("stream #3 \" w3\" does not extend"),
            "{why}"
        );
        assert!(
            why.contains("1 more frame after it breaks too: stream #4"),
            "{why}"
        );
        let ok = [f("stream", "a"), f("stream", "ab"), f("stream_end", "ab")];
        assert_eq!(streaming_replace(&ok), Ok(()));
    }

    #[test]
    fn accumulations_pass_and_deltas_fail() {
        let ok = [
            f("typing", ""),
            f("stream", "Hel"),
            f("stream", "Hello"),
            f("stream_end", "Hello"),
        ];
        assert_eq!(streaming_replace(&ok), Ok(()));
        let delta = [f("stream", "Hel"), f("stream", "lo"), f("stream_end", "lo")];
        assert!(
            streaming_replace(&delta)
                .unwrap_err()
                .contains("does not extend")
        );
        let end = [f("stream", "Hel"), f("stream_end", "Help")];
        assert!(
            streaming_replace(&end)
                .unwrap_err()
                .contains("last accumulation")
        );
        let mut parts = f("stream", "Hel");
        parts.1["parts"] = json!([{"type": "text", "text": "He"}]);
        assert!(
            streaming_replace(&[parts])
                .unwrap_err()
                .contains("parts say")
        );
        assert!(streaming_replace(&[]).is_err());
        // An agent's final text may extend its last flush, never replace it.
        let extended = [f("stream", "Hel"), f("stream_end", "Hello")];
        assert!(streaming_replace(&extended).is_err());
        assert_eq!(
            streaming_replace_with(&extended, EndText::MayExtend),
            Ok(())
        );
        let replaced = [f("stream", "Hel"), f("stream_end", "Bye")];
        assert!(
            streaming_replace_with(&replaced, EndText::MayExtend)
                .unwrap_err()
                .contains("does not extend the last accumulation")
        );
    }
}

#[cfg(test)]
mod catalogue_tests {
    #[test]
    fn catalogue_and_checks_agree() {
        let mut cat: Vec<String> = crate::rule::catalogue()
            .into_iter()
            .filter(|r| r.protocol == "bridle")
            .map(|r| r.id)
            .collect();
        let mut checks: Vec<String> = super::id::HUB
            .iter()
            .chain(super::id::AGENT)
            .map(|s| s.to_string())
            .collect();
        cat.sort();
        checks.sort();
        checks.dedup();
        assert_eq!(cat, checks);
    }
}

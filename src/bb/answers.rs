//! What a bridge answered and announced beside its timeline: the outcome of each runtime request
//! on a thread (a result, or an error and its code) and the runtime-visible notifications the
//! protocol names (`provider/recovery` with its kind, `session/replaced`). Parity compares them
//! as a layer of their own: a build that starts refusing `turn/start` while still streaming the
//! turn, or that stops sending a recovery hint, assembles the same events and behaves otherwise.
//!
//! Pure: the same function reads a recording and a live replay's lines.

use serde_json::Value;
use std::collections::HashMap;

/// The requests that construct a provider session: their result must carry the session's
/// `providerThreadId` ("required"), and their `thread/identity` must precede the session's
/// deltas ("Ordering guarantees").
const SESSION_REQUESTS: &[&str] = &["thread/start", "thread/resume", "thread/fork"];

/// Bridge → runtime notifications the protocol gives the runtime, compared by kind. Unknown
/// notifications are ignored by the runtime (and `provider/raw` is diagnostics), so they are
/// not compared; `thread/identity` carries only ids, which are blanked.
const COMPARED_NOTIFICATIONS: &[&str] = &["provider/recovery", "session/replaced"];

/// A request id as a response names it: its text as bb's runtime compares ids
/// ([`super::msg::id_text`]), so a response id written `5.0` answers request 5 (JSON has one
/// number type, and the runtime reads it so).
fn id_key(id: &Value) -> String {
    super::msg::id_text(id).unwrap_or_else(|| id.to_string())
}

/// The outcomes of a cell's traffic, in a leg-independent order: each answered runtime request
/// that names a thread (`answer turn/start → result`, `answer turn/start → error -32000`), in
/// the order the runtime sent them, then the compared notifications in the order they came
/// (`notify provider/recovery rateLimited`). `lines` are `(runtime→bridge?, line)` in wire order.
/// A request never answered is left out (a cut recording or a stalled leg says so elsewhere).
///
/// An answer names what the runtime acts on beyond result-or-error ([`answer_outcome`]): a
/// session request's `providerThreadId` (absent: the runtime has no handle to persist) and
/// `sessionRestorable`, an error's recovery kind, and a session whose deltas came before its
/// `thread/identity`. Ids themselves are blanked, like everywhere in parity.
pub fn wire_outcomes<'a>(lines: impl IntoIterator<Item = (bool, &'a str)>) -> Vec<String> {
    let mut pending: HashMap<String, (usize, String)> = HashMap::new();
    let mut answers: Vec<(usize, String)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut sent = 0usize;
    // Per session request (by its position), what its session showed; per thread, its
    // current session's request.
    let mut sessions: HashMap<usize, Session> = HashMap::new();
    let mut session_of: HashMap<String, usize> = HashMap::new();
    for (to_bridge, line) in lines {
        let Some(m) = super::msg::object(line) else {
            continue;
        };
        let method = m.get("method").and_then(Value::as_str);
        let id = m.get("id").filter(|i| i.is_string() || i.is_number());
        let thread = m
            .get("params")
            .and_then(|p| p.get("threadId"))
            .and_then(Value::as_str);
        if to_bridge {
            if let (Some(method), Some(id), Some(thread)) = (method, id, thread) {
                if SESSION_REQUESTS.contains(&method) {
                    sessions.insert(sent, Session::default());
                    session_of.insert(thread.to_string(), sent);
                }
                pending.insert(id_key(id), (sent, method.to_string()));
                sent += 1;
            }
            continue;
        }
        match (method, id) {
            (None, Some(id)) => {
                if let Some((at, method)) = pending.remove(&id_key(id)) {
                    if let Some(session) = sessions.get_mut(&at) {
                        session.returned = m
                            .get("result")
                            .and_then(|r| r.get("providerThreadId"))
                            .and_then(Value::as_str)
                            .map(str::to_string);
                    }
                    answers.push((
                        at,
                        format!("answer {method} → {}", answer_outcome(&method, &m)),
                    ));
                }
            }
            (Some("thread/identity"), None) => {
                // The first identity after the session request is its; a later one re-keys.
                if let Some(session) = current_session(&mut sessions, &session_of, thread)
                    && session.identity.is_none()
                {
                    session.identity = Some(
                        m.get("params")
                            .and_then(|p| p.get("providerThreadId"))
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    );
                }
            }
            (Some("thread/delta"), None) => {
                if let Some(session) = current_session(&mut sessions, &session_of, thread)
                    && session.identity.is_none()
                {
                    session.delta_before_identity = true;
                }
            }
            (Some(method), None) if COMPARED_NOTIFICATIONS.contains(&method) => {
                let hint = m
                    .get("params")
                    .map(recovery_hint)
                    .filter(|h| !h.is_empty())
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default();
                notes.push(format!("notify {method}{hint}"));
            }
            _ => {}
        }
    }
    // A session whose identity never came is not judged here: its deltas reach no session the
    // runtime knows either way, and its answer (or the stall) says more.
    for (at, answer) in &mut answers {
        let Some(Session {
            identity: Some(identity),
            delta_before_identity,
            returned,
        }) = sessions.get(at)
        else {
            continue;
        };
        if *delta_before_identity {
            answer.push_str("; thread/delta before thread/identity");
        }
        // The identity must echo the result's handle; which handle is an id, blanked.
        if let Some(result) = returned
            && identity.as_ref() != Some(result)
        {
            answer.push_str("; thread/identity names another providerThreadId");
        }
    }
    answers.sort_by_key(|(at, _)| *at);
    answers.into_iter().map(|(_, a)| a).chain(notes).collect()
}

/// The session `thread` is on now (its latest session request's), if it has one.
fn current_session<'s>(
    sessions: &'s mut HashMap<usize, Session>,
    session_of: &HashMap<String, usize>,
    thread: Option<&str>,
) -> Option<&'s mut Session> {
    sessions.get_mut(session_of.get(thread?)?)
}

/// What one session request's session showed on the wire.
#[derive(Default)]
struct Session {
    /// The handle its result returned.
    returned: Option<String>,
    /// The handle its identity named (the first `thread/identity` after the request; `None`
    /// inside: one without a handle), `None` until one came.
    identity: Option<Option<String>>,
    /// A `thread/delta` of its thread came before its identity.
    delta_before_identity: bool,
}

/// What the runtime acts on in a recovery hint: its kind and whether it is retryable
/// (`sessionArchived retryable`); the message is prose and the thread an id.
fn recovery_hint(r: &Value) -> String {
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
    match r.get("retryable").and_then(Value::as_bool) {
        Some(true) => format!("{kind} retryable").trim().to_string(),
        Some(false) => format!("{kind} not retryable").trim().to_string(),
        None => kind.to_string(),
    }
}

/// What the runtime takes from one answer: `result`, or `error <code>` and the recovery kind
/// its `data` hints (`error -32000, recovery sessionArchived`); for a session request, whether
/// the result carries a `providerThreadId` and the `sessionRestorable` it states.
fn answer_outcome(method: &str, m: &serde_json::Map<String, Value>) -> String {
    if let Some(e) = m.get("error") {
        let mut out = format!(
            "error {}",
            e.get("code").map_or("?".into(), Value::to_string)
        );
        if let Some(r) = e.pointer("/data/recovery") {
            out.push_str(&format!(", recovery {}", recovery_hint(r)));
        }
        return out;
    }
    let mut out = "result".to_string();
    if SESSION_REQUESTS.contains(&method) {
        let result = m.get("result");
        if result
            .and_then(|r| r.get("providerThreadId"))
            .is_none_or(|p| p.as_str().is_none_or(str::is_empty))
        {
            out.push_str(" without providerThreadId");
        }
        if let Some(r) = result
            .and_then(|r| r.get("sessionRestorable"))
            .filter(|r| !r.is_null())
        {
            out.push_str(&format!(", sessionRestorable {r}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::wire_outcomes;

    /// Answers in request order whatever order they came in; errors with their code; spec
    /// notifications by kind; requests without a thread, unknown notifications and unanswered
    /// requests left out.
    #[test]
    fn outcomes_name_answers_and_spec_notifications() {
        let lines = [
            (
                true,
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            ),
            (false, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            (
                true,
                r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"t"}}"#,
            ),
            (
                true,
                r#"{"jsonrpc":"2.0","id":"a","method":"turn/start","params":{"threadId":"t"}}"#,
            ),
            (
                false,
                r#"{"jsonrpc":"2.0","method":"provider/raw","params":{}}"#,
            ),
            (
                false,
                r#"{"jsonrpc":"2.0","method":"provider/recovery","params":{"kind":"rateLimited","retryable":false}}"#,
            ),
            (
                false,
                r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32000,"message":"busy"}}"#,
            ),
            (
                false,
                r#"{"jsonrpc":"2.0","id":2,"result":{"providerThreadId":"p"}}"#,
            ),
            (
                true,
                r#"{"jsonrpc":"2.0","id":3,"method":"thread/stop","params":{"threadId":"t"}}"#,
            ),
        ];
        assert_eq!(
            wire_outcomes(lines),
            vec![
                "answer thread/start → result",
                "answer turn/start → error -32000",
                "notify provider/recovery rateLimited not retryable",
            ]
        );
    }

    /// A session request's answer names a missing `providerThreadId`, the `sessionRestorable` it
    /// states, deltas that came before its identity and an identity naming another handle; an
    /// error its recovery hint. Extra result
    /// fields, the ids themselves and a result sent before the identity (legal) are not named.
    #[test]
    fn session_answers_name_the_handle_the_hint_and_an_identity_after_deltas() {
        let start = |id: u32, m: &str, t: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{m}","params":{{"threadId":"{t}"}}}}"#)
        };
        let identity = |t: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"thread/identity","params":{{"threadId":"{t}","providerThreadId":"p-{t}"}}}}"#
            )
        };
        let delta = |t: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"thread/delta","params":{{"threadId":"{t}","deltas":[{{"kind":"session.reset"}}]}}}}"#
            )
        };
        let lines: Vec<(bool, String)> = vec![
            (true, start(1, "thread/start", "a")),
            (false, identity("a")),
            (false, delta("a")),
            (
                false,
                r#"{"jsonrpc":"2.0","id":1,"result":{"providerThreadId":"p-a","sessionRestorable":true,"x":1}}"#.into(),
            ),
            (true, start(2, "thread/start", "b")),
            (false, r#"{"jsonrpc":"2.0","id":2,"result":{"providerThreadId":"p-b"}}"#.into()),
            (false, delta("b")),
            (false, identity("b")),
            (true, start(3, "thread/fork", "c")),
            (false, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#.into()),
            (true, start(4, "thread/resume", "d")),
            (
                false,
                r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"archived","data":{"recovery":{"kind":"sessionArchived","message":"m","retryable":true}}}}"#.into(),
            ),
            (true, start(5, "thread/resume", "e")),
            (false, r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32000,"message":"archived"}}"#.into()),
            (true, start(6, "thread/start", "g")),
            (false, r#"{"jsonrpc":"2.0","id":6,"result":{"providerThreadId":"p-g"}}"#.into()),
            (
                false,
                r#"{"jsonrpc":"2.0","method":"thread/identity","params":{"threadId":"g","providerThreadId":"p-other"}}"#.into(),
            ),
        ];
        assert_eq!(
            wire_outcomes(lines.iter().map(|(t, l)| (*t, l.as_str()))),
            vec![
                "answer thread/start → result, sessionRestorable true",
                "answer thread/start → result; thread/delta before thread/identity",
                "answer thread/fork → result without providerThreadId",
                "answer thread/resume → error -32000, recovery sessionArchived retryable",
                "answer thread/resume → error -32000",
                "answer thread/start → result; thread/identity names another providerThreadId",
            ]
        );
    }

    #[test]
    fn a_response_id_written_with_a_zero_fraction_answers_its_request() {
        let lines = [
            (
                true,
                r#"{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{"threadId":"t"}}"#,
            ),
            (false, r#"{"jsonrpc":"2.0","id":3.0,"result":{}}"#),
        ];
        assert_eq!(wire_outcomes(lines), ["answer turn/start → result"]);
    }
}

//! What a bridge answered and announced beside its timeline: the outcome of each runtime request
//! on a thread (a result, or an error and its code) and the runtime-visible notifications the
//! protocol names (`provider/recovery` with its kind, `session/replaced`). Parity compares them
//! as a layer of their own: a build that starts refusing `turn/start` while still streaming the
//! turn, or that stops sending a recovery hint, assembles the same events and behaves otherwise.
//!
//! Pure: the same function reads a recording and a live replay's lines.

use serde_json::Value;
use std::collections::HashMap;

/// Bridge → runtime notifications the protocol gives the runtime, compared by kind. Unknown
/// notifications are ignored by the runtime (and `provider/raw` is diagnostics), so they are
/// not compared; `thread/identity` carries only ids, which are blanked.
const COMPARED_NOTIFICATIONS: &[&str] = &["provider/recovery", "session/replaced"];

/// The outcomes of a cell's traffic, in a leg-independent order: each answered runtime request
/// that names a thread (`answer turn/start → result`, `answer turn/start → error -32000`), in
/// the order the runtime sent them, then the compared notifications in the order they came
/// (`notify provider/recovery rateLimited`). `lines` are `(runtime→bridge?, line)` in wire order.
/// A request never answered is left out (a cut recording or a stalled leg says so elsewhere).
pub fn wire_outcomes<'a>(lines: impl IntoIterator<Item = (bool, &'a str)>) -> Vec<String> {
    let mut pending: HashMap<String, (usize, String)> = HashMap::new();
    let mut answers: Vec<(usize, String)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut sent = 0usize;
    for (to_bridge, line) in lines {
        let Ok(Value::Object(m)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let method = m.get("method").and_then(Value::as_str);
        let id = m.get("id").filter(|i| i.is_string() || i.is_number());
        if to_bridge {
            let threaded = m
                .get("params")
                .and_then(|p| p.get("threadId"))
                .is_some_and(Value::is_string);
            if let (Some(method), Some(id), true) = (method, id, threaded) {
                pending.insert(id.to_string(), (sent, method.to_string()));
                sent += 1;
            }
            continue;
        }
        match (method, id) {
            (None, Some(id)) => {
                if let Some((at, method)) = pending.remove(&id.to_string()) {
                    let outcome = match m.get("error") {
                        Some(e) => format!(
                            "error {}",
                            e.get("code").map_or("?".into(), Value::to_string)
                        ),
                        None => "result".to_string(),
                    };
                    answers.push((at, format!("answer {method} → {outcome}")));
                }
            }
            (Some(method), None) if COMPARED_NOTIFICATIONS.contains(&method) => {
                let kind = m
                    .get("params")
                    .and_then(|p| p.get("kind"))
                    .and_then(Value::as_str)
                    .map(|k| format!(" {k}"))
                    .unwrap_or_default();
                notes.push(format!("notify {method}{kind}"));
            }
            _ => {}
        }
    }
    answers.sort_by_key(|(at, _)| *at);
    answers.into_iter().map(|(_, a)| a).chain(notes).collect()
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
                r#"{"jsonrpc":"2.0","method":"provider/recovery","params":{"kind":"rateLimited"}}"#,
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
                "notify provider/recovery rateLimited",
            ]
        );
    }
}

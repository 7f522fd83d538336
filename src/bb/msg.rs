//! Small JSON-RPC helpers shared by the replay player and the provider double.

use serde_json::{Map, Value};

/// Parses a line as a JSON object.
pub fn object(line: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// An id's text as JavaScript's `String(id)` would give it (ids are compared as text).
pub fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(f) => crate::jsjson::format_f64(f),
            None => n.to_string(),
        }),
        _ => None,
    }
}

/// What a JSON-RPC line is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// String/number `id` and string `method`.
    Request { id: Value, method: String },
    /// `id` without `method`.
    Response { id: Value },
    /// `method` without an id (`?` when `method` is not a string).
    Notification { method: String },
    /// Not a JSON object, or neither of the above.
    Raw,
}

pub fn classify(m: &Map<String, Value>) -> Kind {
    let id = m.get("id").filter(|v| v.is_string() || v.is_number());
    let method = m.get("method");
    match (id, method) {
        (Some(id), Some(Value::String(method))) => Kind::Request {
            id: id.clone(),
            method: method.clone(),
        },
        (_, Some(method)) => Kind::Notification {
            method: method.as_str().unwrap_or("?").to_string(),
        },
        (Some(id), None) => Kind::Response { id: id.clone() },
        (None, None) if m.contains_key("id") => Kind::Response {
            id: m["id"].clone(),
        },
        (None, None) => Kind::Raw,
    }
}

pub fn classify_line(line: &str) -> (Option<Map<String, Value>>, Kind) {
    match object(line) {
        Some(m) => {
            let k = classify(&m);
            (Some(m), k)
        }
        None => (None, Kind::Raw),
    }
}

/// Replaces `id` in place, keeping the other keys (JS key order on re-serialization).
pub fn with_id(mut m: Map<String, Value>, id: Value) -> String {
    m.insert("id".into(), id);
    crate::jsjson::to_string(&Value::Object(m))
}

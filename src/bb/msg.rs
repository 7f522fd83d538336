//! Small JSON-RPC helpers shared by the replay player, the offline pass, `record-cells` and the
//! provider double.

use serde_json::{Map, Value};

/// Parses a line as JSON, and how many lone UTF-16 surrogate escapes it held.
///
/// A bridge that slices text by UTF-16 index and writes it with JavaScript's `JSON.stringify`
/// cuts a surrogate pair between two chunks (`"\ud83d"`, then `"\ude00"`): JSON (RFC 8259
/// allows any `\uXXXX` escape) that bb's runtime takes and serde refuses. Such a line is read
/// with each lone surrogate replaced by a marker ([`super::surrogate`]); the markers are joined
/// where the chunks are (the assembler's completed item, [`super::coalesce_deltas`]).
pub fn parse(line: &str) -> Result<(Value, usize), serde_json::Error> {
    serde_json::from_str::<Value>(line)
        .map(|v| (v, 0))
        .or_else(|plain| {
            let Some((marked, n)) = super::surrogate::mark_lone(line) else {
                return Err(plain);
            };
            serde_json::from_str::<Value>(&marked)
                .map(|v| (v, n))
                .map_err(|_| plain)
        })
}

/// Parses a line as a JSON object ([`parse`]: lone surrogate escapes read as markers).
pub fn object(line: &str) -> Option<Map<String, Value>> {
    match parse(line) {
        Ok((Value::Object(m), _)) => Some(m),
        _ => None,
    }
}

/// A JSON number with no fractional part as an integer: `2.0` is the number 2 (JSON has one
/// number type; JSON Schema's `integer` and the runtime's JavaScript read it so), where
/// serde's `as_i64` sees only the literal `2`. Shared by the live check and the wire judge.
pub fn json_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
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

//! The lane envelope of one HTTP request or reply.
//!
//! HTTP has no lines, so each request and each reply is recorded as one JSON line:
//!
//! ```text
//! client→bridge  {"exchange":3,"method":"POST","path":"/","headers":[["content-type","application/json"],["x-sidebridge-key","[redacted]"]],"body":"{\"chatId\":…}"}
//! bridge→client  {"exchange":3,"status":200,"headers":[["content-type","application/json"]],"body":"{\"messages\":[…]}","elapsedMs":4}
//! ```
//!
//! * `exchange` pairs a reply with its request (one counter per recording process);
//! * `headers` keep order, duplicates and the name's case as received; the values of
//!   `x-sidebridge-key` and `authorization` are `[redacted]` unless recording with `--keep-key`
//!   (`[redacted:other]` when the recorder knows the bridge's key and the value differs, so a
//!   replay can send the right key or a wrong one);
//! * `body` is the body as text; when it is not UTF-8, `bodyBase64` holds the exact bytes and
//!   `body` the lossy text;
//! * a reply the upstream never gave carries `error` (and the 502 the proxy answered).

use serde_json::{Map, Value, json};

pub const REDACTED: &str = "[redacted]";
/// A redacted value that differed from the key the recorder was told (`record --key`).
pub const REDACTED_OTHER: &str = "[redacted:other]";
pub const SECRET_HEADERS: &[&str] = &["x-sidebridge-key", "authorization"];

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Envelope {
    pub exchange: u64,
    /// Requests only.
    pub method: Option<String>,
    pub path: Option<String>,
    /// Replies only.
    pub status: Option<u16>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub error: Option<String>,
    pub elapsed_ms: Option<u64>,
    /// The `Content-Encoding` the body was recorded with undone (`"gzip"`), when the wire
    /// carried it compressed: a lane holds the body a reader can judge and redaction can see
    /// into, and the headers still say what was sent.
    pub decoded_from: Option<String>,
}

impl Envelope {
    pub fn to_line(&self) -> Vec<u8> {
        let mut o = Map::new();
        o.insert("exchange".into(), json!(self.exchange));
        if let Some(m) = &self.method {
            o.insert("method".into(), json!(m));
        }
        if let Some(p) = &self.path {
            o.insert("path".into(), json!(p));
        }
        if let Some(s) = self.status {
            o.insert("status".into(), json!(s));
        }
        o.insert(
            "headers".into(),
            Value::Array(self.headers.iter().map(|(k, v)| json!([k, v])).collect()),
        );
        match std::str::from_utf8(&self.body) {
            Ok(t) => {
                o.insert("body".into(), json!(t));
            }
            Err(_) => {
                o.insert("body".into(), json!(String::from_utf8_lossy(&self.body)));
                o.insert(
                    "bodyBase64".into(),
                    json!(crate::util::base64_encode(&self.body)),
                );
            }
        }
        if let Some(e) = &self.error {
            o.insert("error".into(), json!(e));
        }
        if let Some(ms) = self.elapsed_ms {
            o.insert("elapsedMs".into(), json!(ms));
        }
        if let Some(c) = &self.decoded_from {
            o.insert("decodedFrom".into(), json!(c));
        }
        serde_json::to_vec(&Value::Object(o)).unwrap_or_default()
    }

    pub fn parse(line: &str) -> Option<Envelope> {
        let v: Value = serde_json::from_str(line).ok()?;
        let o = v.as_object()?;
        let body = match o.get("bodyBase64").and_then(Value::as_str) {
            Some(b) => crate::util::base64_decode(b)?,
            None => o.get("body")?.as_str()?.as_bytes().to_vec(),
        };
        Some(Envelope {
            exchange: o.get("exchange")?.as_u64()?,
            method: o.get("method").and_then(Value::as_str).map(str::to_string),
            path: o.get("path").and_then(Value::as_str).map(str::to_string),
            // An out-of-range status is no status (`as u16` read 65736 as 200).
            status: o
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            headers: o
                .get("headers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| {
                            Some((
                                p.get(0)?.as_str()?.to_string(),
                                p.get(1)?.as_str()?.to_string(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            body,
            error: o.get("error").and_then(Value::as_str).map(str::to_string),
            elapsed_ms: o.get("elapsedMs").and_then(Value::as_u64),
            decoded_from: o
                .get("decodedFrom")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A reply the client's HTTP client follows, same method and body, handing the app only
    /// the final reply (reference §1.1): a 307/308 with a `Location`.
    pub fn is_followed_redirect(&self) -> bool {
        matches!(self.status, Some(307 | 308)) && self.header("location").is_some()
    }
}

/// The chat a request belongs to: its `chatId`, upper-cased (ids compare as UUID values).
pub fn chat_scope(body: &[u8]) -> Option<String> {
    let v = super::profiles::parse_json(body).ok()?;
    let id = v.get("chatId")?.as_str()?;
    (!id.is_empty()).then(|| id.to_ascii_uppercase())
}

/// Headers with secret values replaced, unless `keep`. With the bridge's key known, a value
/// that differs from it becomes [`REDACTED_OTHER`]. `Authorization: <scheme> <token>` keeps
/// its scheme (`Bearer [redacted]`), so a replay sends the key the same way.
pub fn redact(
    headers: Vec<(String, String)>,
    keep: bool,
    key: Option<&str>,
) -> Vec<(String, String)> {
    let marker = |v: &str| {
        if key.is_some_and(|key| v != key) {
            REDACTED_OTHER
        } else {
            REDACTED
        }
    };
    headers
        .into_iter()
        .map(|(k, v)| {
            let key_header = SECRET_HEADERS.iter().any(|s| k.eq_ignore_ascii_case(s));
            if !key_header && crate::redact::is_secret_header(&k) {
                // Cookie, Proxy-Authorization, X-Api-Key, …: never kept.
                return (k, REDACTED.to_string());
            }
            if keep || !key_header {
                return (k, v);
            }
            let redacted = match v.split_once(' ') {
                Some((scheme, token))
                    if k.eq_ignore_ascii_case("authorization")
                        && !scheme.is_empty()
                        && !token.trim().is_empty() =>
                {
                    format!("{scheme} {}", marker(token.trim()))
                }
                _ => marker(&v).to_string(),
            };
            (k, redacted)
        })
        .collect()
}

/// A recorded value with its redaction markers put back: `[redacted]` → `key`,
/// `[redacted:other]` → a wrong key. `None` when it needs the key and none is given.
pub fn unredact(value: &str, key: Option<&str>) -> Option<String> {
    let v = value.replace(REDACTED_OTHER, "bridgewire-replay-wrong-key");
    if v.contains(REDACTED) {
        return key.map(|k| v.replace(REDACTED, k));
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_and_keeps_bytes() {
        let e = Envelope {
            exchange: 3,
            method: Some("POST".into()),
            path: Some("/".into()),
            headers: redact(vec![("X-SideBridge-Key".into(), "k".into())], false, None),
            body: vec![b'{', 0xff, b'}'],
            ..Default::default()
        };
        let line = String::from_utf8(e.to_line()).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.contains(REDACTED));
        let other = redact(
            vec![("x-sidebridge-key".into(), "bad".into())],
            false,
            Some("k"),
        );
        assert_eq!(other[0].1, REDACTED_OTHER);
        assert_eq!(Envelope::parse(&line).unwrap(), e);
        assert_eq!(
            chat_scope(br#"{"chatId":"abc-d"}"#).as_deref(),
            Some("ABC-D")
        );
    }

    #[test]
    fn the_key_is_redacted_wherever_it_appears() {
        let h = vec![
            ("Authorization".to_string(), "Bearer s3cret-key".to_string()),
            ("x-sidebridge-key".to_string(), "s3cret-key".to_string()),
        ];
        let r = redact(h.clone(), false, Some("s3cret-key"));
        assert_eq!(r[0].1, "Bearer [redacted]");
        assert_eq!(r[1].1, REDACTED);
        let wrong = redact(
            vec![("authorization".into(), "Bearer nope".into())],
            false,
            Some("s3cret-key"),
        );
        assert_eq!(wrong[0].1, "Bearer [redacted:other]");
        assert_eq!(
            unredact("Bearer [redacted]", Some("k")).as_deref(),
            Some("Bearer k")
        );
        assert_eq!(unredact("[redacted]", None), None);
    }
}

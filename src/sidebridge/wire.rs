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
//!   (when the recorder knows the bridge's key, a value that differs says how, so a replay
//!   sends a wrong key of the same kind from the key it is given: `[redacted:case]` the key
//!   with its letters' case changed, `[redacted:prefix]` a part the key begins with,
//!   `[redacted:extended]` the key with more after it, `[redacted:other]` anything else; an
//!   empty value holds no secret and is kept);
//! * `body` is the body as text; when it is not UTF-8, `bodyBase64` holds the exact bytes and
//!   `body` the lossy text;
//! * a reply the upstream never gave carries `error` (and the 502 the proxy answered).

use serde_json::{Map, Value, json};

// The key markers and their inverse are shared with Bridle's agent apiKey.
pub use crate::redact::{
    REDACTED, REDACTED_CASE, REDACTED_EXTENDED, REDACTED_OTHER, REDACTED_PREFIX, WRONG_KEY,
    unredact, wrong_key, wrong_key_kind,
};
pub const SECRET_HEADERS: &[&str] = &["x-sidebridge-key", "authorization"];

/// The key `check sidebridge` sends a bridge with no key configured (SB-A4: the app sends the
/// header whenever the user typed one). It is bridgewire's own text, no one's secret: recorded
/// as sent ([`keeps_value`]), so the cell replays with it and parity compares it, where
/// `[redacted]` would read as a cell recorded with the bridge's key.
pub const UNEXPECTED_KEY_PROBE: &str = "any-key-the-user-typed";

/// Whether a key header's value is recorded as sent: an empty one (it holds no secret, and a
/// bridge may take "no key given" for "nothing to check"), or [`UNEXPECTED_KEY_PROBE`] unless
/// it is the bridge's key (`key`).
pub fn keeps_value(v: &str, key: Option<&str>) -> bool {
    v.is_empty() || v == UNEXPECTED_KEY_PROBE && key != Some(UNEXPECTED_KEY_PROBE)
}

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
/// that differs from it is marked by how it differs ([`REDACTED_CASE`], [`REDACTED_PREFIX`],
/// [`REDACTED_EXTENDED`], else [`REDACTED_OTHER`]), so a replay can send a wrong key of the
/// same kind: a build that starts taking the key in any case, or any prefix of it, differs
/// where the recording's build refused. An empty value and SB-A4's probe key are kept
/// ([`keeps_value`]). `Authorization: <scheme> <token>`
/// keeps its scheme (`Bearer [redacted]`), so a replay sends the key the same way.
pub fn redact(
    headers: Vec<(String, String)>,
    keep: bool,
    key: Option<&str>,
) -> Vec<(String, String)> {
    let marker = |v: &str| -> &'static str {
        match key {
            Some(key) if v != key => wrong_key_kind(v, key),
            _ => REDACTED,
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
            if keep || !key_header || keeps_value(&v, key) {
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

    /// A wrong key is recorded by how it differs from the key, and replayed as a wrong key of
    /// that kind made from the replay's own key (never the recorded value itself).
    #[test]
    fn a_wrong_key_replays_as_one_of_its_kind() {
        let key = "S3cret-Key";
        for (sent, marker) in [
            ("S3cret-Ke", REDACTED_PREFIX),
            ("S3cret-Key-extra", REDACTED_EXTENDED),
            ("s3CRET-kEY", REDACTED_CASE),
            ("nope", REDACTED_OTHER),
        ] {
            let r = redact(
                vec![("x-sidebridge-key".into(), sent.into())],
                false,
                Some(key),
            );
            assert_eq!(r[0].1, marker, "{sent}");
            let other = "Zz9-other";
            let back = unredact(marker, Some(other)).unwrap();
            assert_ne!(back, other, "{sent}");
            assert_eq!(wrong_key_kind(&back, other), marker, "{sent} → {back}");
            assert!(!back.contains("redacted"), "{back}");
            // Without a key to make it from, any wrong key.
            assert_eq!(unredact(marker, None).as_deref(), Some(WRONG_KEY));
        }
        // An empty value holds no secret: kept, and sent again as it was.
        let r = redact(
            vec![("x-sidebridge-key".into(), String::new())],
            false,
            Some(key),
        );
        assert_eq!(r[0].1, "");
        // A key without letters has no case variant: any wrong key.
        assert_eq!(
            unredact(REDACTED_CASE, Some("1234")).as_deref(),
            Some(WRONG_KEY)
        );
    }
}

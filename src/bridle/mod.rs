//! The Bridle protocol: browsers and agent runtimes meeting at a stateless Socket.IO relay hub.
//!
//! Spec: `protocols/bridle-protocol.txt`.
//!
//! * [`wire`]: Engine.IO 4 / Socket.IO 5 frames, pure;
//! * [`transport`]: the harness client on tokio-tungstenite;
//! * [`rules`]: rule ids and the pure checks (`streaming-replace`);
//! * [`check_hub`], [`check_agent`]: the live checkers;
//! * [`model`]: the offline model (events, grammar, rows) behind pins and parity;
//! * [`player`]: `replay bridle`;
//! * [`proxy`]: `record bridle`, the recording proxy ([`wsframe`]: its WebSocket frame parser);
//! * [`token`]: handshake secrets as recorded (what kind of token or key was sent) and as a
//!   replay sends them again;
//! * [`spawn`]: peers under test as child processes.

pub mod check_agent;
pub mod check_hub;
pub mod event_scan;
pub mod live;
pub mod model;
pub mod player;
pub mod proxy;
pub mod rules;
pub mod spawn;
pub mod token;
pub mod transport;
pub mod wire;
pub mod wsframe;

use serde_json::{Value, json};

/// The browser namespace.
pub const CLIENT_NSP: &str = "/ws/client";
/// The agent namespace.
pub const AGENT_NSP: &str = "/ws/agent";
/// What a hub answers when no agent serves the agentId (prefix; the spec ends it with `...`).
pub const NOT_CONNECTED: &str = "Agent is not connected";
/// The `/message/sync` timeout body text.
pub const SYNC_TIMEOUT_TEXT: &str = "Timeout: no response from agent";

/// `[{type: text, text}]`.
/// Event names counted for a verdict, as `name` or `name ×n`: every occurrence of a name
/// together, in first-seen order (`typing, stream ×22, stream_end`), or, with `runs`, only
/// consecutive ones (`typing → stream ×23 → stream_end` keeps the order frames came in).
pub(crate) fn counted_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
    runs: bool,
) -> Vec<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for n in names {
        let at = if runs {
            counts.last_mut().filter(|(m, _)| *m == n)
        } else {
            counts.iter_mut().find(|(m, _)| *m == n)
        };
        match at {
            Some((_, c)) => *c += 1,
            None => counts.push((n, 1)),
        }
    }
    counts
        .into_iter()
        .map(|(n, c)| {
            if c == 1 {
                n.to_string()
            } else {
                format!("{n} ×{c}")
            }
        })
        .collect()
}

pub fn text_parts(text: &str) -> Value {
    json!([{ "type": "text", "text": text }])
}

/// The hub's `buildParts(text, images)`: a text part (when there is text), then one image part
/// per legacy image. An image is `{base64|data, mediaType|mimeType}` or a bare base64 string
/// (a `data:` URL is split into its media type and data).
pub fn build_parts(text: &str, images: Option<&Value>) -> Value {
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({ "type": "text", "text": text }));
    }
    for img in images.and_then(Value::as_array).into_iter().flatten() {
        let (b64, media) = match img {
            Value::String(s) => split_data_url(s),
            Value::Object(m) => {
                let raw = m
                    .get("base64")
                    .or_else(|| m.get("data"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let (b, detected) = split_data_url(raw);
                let media = m
                    .get("mediaType")
                    .or_else(|| m.get("mimeType"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or(detected);
                (b, media)
            }
            _ => continue,
        };
        parts.push(json!({ "type": "image", "base64": b64, "mediaType": media }));
    }
    Value::Array(parts)
}

fn split_data_url(s: &str) -> (String, String) {
    if let Some(rest) = s.strip_prefix("data:")
        && let Some((media, data)) = rest.split_once(";base64,")
    {
        return (data.to_string(), media.to_string());
    }
    (s.to_string(), "image/jpeg".to_string())
}

/// The parts of an incoming `message`: `parts` when it is an array, else built from
/// `text` + `images`.
pub fn parts_of(msg: &Value) -> Value {
    match msg.get("parts") {
        Some(p @ Value::Array(_)) => p.clone(),
        _ => build_parts(
            msg.get("text").and_then(Value::as_str).unwrap_or(""),
            msg.get("images"),
        ),
    }
}

/// Browser JWT claims as the hub reads them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Claims {
    pub sub: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Required by [`verify_jwt`]; optional when only peeking (a recorder scopes any token
    /// by its `sub`, whatever else it carries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
}

impl Claims {
    /// The clientId the spec derives: `admin` for the ADMIN role, else `sub`.
    pub fn client_id(&self) -> String {
        if self.roles.iter().any(|r| r == "ADMIN") {
            "admin".into()
        } else {
            self.sub.clone()
        }
    }
}

/// Signs a browser JWT (HS256), valid for an hour.
pub fn sign_jwt(secret: &str, sub: &str, roles: &[&str]) -> String {
    let claims = Claims {
        sub: sub.into(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        exp: Some((crate::util::now_ms() / 1000) as u64 + 3600),
    };
    sign_claims(secret, &claims)
}

/// Signs any claims (HS256): expired tokens, tokens without `sub`, for the handshake rules.
pub fn sign_claims(secret: &str, claims: &impl serde::Serialize) -> String {
    let Ok(key) = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()) else {
        return String::new();
    };
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &key,
    )
    .unwrap_or_default()
}

/// The browser JWT's checks: HS256 only, `exp` required and `nbf` honoured (RFC 7519 §4.1.5:
/// not accepted before it), as the spec's JwtService (jsonwebtoken's verify) does.
fn jwt_validation() -> jsonwebtoken::Validation {
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    v.validate_nbf = true;
    v
}

/// Verifies a JWT's signature, `exp` and `nbf` and returns its claims whatever their shape.
pub fn verify_jwt_claims(secret: &str, token: &str) -> Option<Value> {
    let v = jwt_validation();
    let key = jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()).ok()?;
    jsonwebtoken::decode::<Value>(token, &key, &v)
        .ok()
        .map(|d| d.claims)
}

/// Verifies a browser JWT (HS256, `exp` required, `nbf` honoured).
pub fn verify_jwt(secret: &str, token: &str) -> Option<Claims> {
    let v = jwt_validation();
    let key = jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()).ok()?;
    jsonwebtoken::decode::<Claims>(token, &key, &v)
        .ok()
        .map(|d| d.claims)
}

/// Reads the claims of a JWT without verifying it (for scoping recorded lanes).
pub fn peek_jwt(token: &str) -> Option<Claims> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64url_decode(payload)?;
    serde_json::from_slice(&bytes).ok()
}

/// Base64url without padding (RFC 7515 §2): a JWT's parts.
pub(crate) fn base64url_encode(bytes: &[u8]) -> String {
    crate::util::base64_encode(bytes)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

pub(crate) fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            b'=' => continue,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_images_become_parts() {
        let m = json!({"text": "look", "images": [
            {"base64": "AAA", "mediaType": "image/png"},
            "data:image/webp;base64,BBB",
            "CCC"
        ]});
        assert_eq!(
            parts_of(&m),
            json!([
                {"type": "text", "text": "look"},
                {"type": "image", "base64": "AAA", "mediaType": "image/png"},
                {"type": "image", "base64": "BBB", "mediaType": "image/webp"},
                {"type": "image", "base64": "CCC", "mediaType": "image/jpeg"}
            ])
        );
        let explicit = json!({"text": "x", "parts": [], "images": ["A"]});
        assert_eq!(parts_of(&explicit), json!([]));
    }

    #[test]
    fn jwt_roundtrip_and_admin() {
        let t = sign_jwt("s3", "u-1", &["ADMIN"]);
        let c = verify_jwt("s3", &t).expect("valid");
        assert_eq!(c.client_id(), "admin");
        assert!(verify_jwt("other", &t).is_none());
        assert_eq!(peek_jwt(&t).unwrap().sub, "u-1");
        // A token without exp is still scoped by its sub when peeked, but never verified.
        let no_exp = sign_claims("s3", &json!({"sub": "u-3"}));
        assert_eq!(peek_jwt(&no_exp).unwrap().client_id(), "u-3");
        assert!(verify_jwt("s3", &no_exp).is_none());
        let no_sub = sign_claims("s3", &json!({"exp": 4_000_000_000u64}));
        assert!(verify_jwt("s3", &no_sub).is_none());
        assert!(verify_jwt_claims("s3", &no_sub).is_some());
        assert_eq!(
            verify_jwt("s3", &sign_jwt("s3", "u-2", &[]))
                .unwrap()
                .client_id(),
            "u-2"
        );
    }
}

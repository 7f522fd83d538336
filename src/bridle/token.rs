//! Handshake secrets as `record bridle` writes them, and what a replay sends for them.
//!
//! A refused handshake is only worth replaying if the replay can send a credential of the same
//! kind: a hub that starts admitting expired tokens, or tokens signed by another secret, must
//! differ where the recording's hub refused. So the recorder writes what kind of credential was
//! sent, never the credential:
//!
//! * a browser's JWT keeps its header and payload parts as they were (anyone holding the token
//!   can read them; they hold no secret, and the clientId is in the cell's name anyway) and its
//!   signature becomes a marker: [`SIGNED`] (it verifies with the hub's secret, whatever its
//!   `exp`/`nbf` say: the time claims are kept, for the hub to judge), [`FORGED`] (it does
//!   not), [`UNVERIFIED`] (the recorder was not told the secret), [`UNSIGNED`] (an empty
//!   signature, `alg: none`). The unsigned form is marked too, though nothing in it is secret:
//!   kept bare, the lane redaction would take it for a secret under the `token` key and replace
//!   it whole. No recorded form is JWT-shaped ([`crate::redact::redact_jwt_shapes`]): a marker
//!   is not base64url;
//! * anything else non-empty is [`NOT_JWT`]; an empty token is kept;
//! * an agent's `apiKey` is `[redacted]` when it is the hub's key (or the recorder was not told
//!   the key), else the marker of how it differs ([`crate::redact::wrong_key_kind`], as Side
//!   Bridge records its key); an empty key is kept.
//!
//! A replay makes a token of the recorded kind with its own secret ([`replay_token`]): signed
//! right or wrong, its time claims moved by how much later the replay runs, so an expired token
//! is still expired by the same margin; and a key of the recorded kind ([`replay_api_key`]).

use crate::redact::REDACTED;
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value, json};

/// The signature verified with the hub's JWT secret (`exp`/`nbf` not judged).
pub const SIGNED: &str = "[redacted:signed]";
/// The signature did not verify with the hub's JWT secret.
pub const FORGED: &str = "[redacted:forged]";
/// The recorder was not given the hub's JWT secret: whether the signature is right is unknown.
pub const UNVERIFIED: &str = "[redacted:unverified]";
/// The signature was empty (`alg: none`).
pub const UNSIGNED: &str = "[redacted:unsigned]";
/// A non-empty token that is not a JWT (not three parts, or a header or payload that is not a
/// base64url JSON object).
pub const NOT_JWT: &str = "[redacted:not-jwt]";
/// What a replay sends for [`NOT_JWT`]: the malformed token `check bridle hub` sends, so a
/// replay of a check run sends what check sent.
pub const NOT_JWT_SENT: &str = "not.a.jwt";
/// What a replay's [`FORGED`] token is signed with after the replay's secret.
const FORGED_SECRET_SUFFIX: &str = "-bridgewire-wrong";
/// The registered claims holding times (NumericDate, RFC 7519 §2), moved by a replay's shift.
const TIME_CLAIMS: [&str; 3] = ["exp", "nbf", "iat"];

/// A token split as a JWT: three parts, the header and payload base64url JSON objects.
struct Jwt<'a> {
    header: &'a str,
    payload: &'a str,
    signature: &'a str,
    header_json: Map<String, Value>,
    claims: Map<String, Value>,
}

fn split_jwt(token: &str) -> Option<Jwt<'_>> {
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let object = |part: &str| match serde_json::from_slice(&super::base64url_decode(part)?) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    };
    Some(Jwt {
        header,
        payload,
        signature,
        header_json: object(header)?,
        claims: object(payload)?,
    })
}

/// The HMAC algorithm the header names (the only ones a hub's shared secret signs with).
fn hmac_alg(header: &Map<String, Value>) -> Option<Algorithm> {
    match header.get("alg")?.as_str()? {
        "HS256" => Some(Algorithm::HS256),
        "HS384" => Some(Algorithm::HS384),
        "HS512" => Some(Algorithm::HS512),
        _ => None,
    }
}

/// Whether the signature is the header's HMAC of `<header>.<payload>` under `secret`.
fn signed_with(t: &Jwt<'_>, secret: &str) -> bool {
    let (Some(alg), Ok(key)) = (
        hmac_alg(&t.header_json),
        jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()),
    ) else {
        return false;
    };
    let message = format!("{}.{}", t.header, t.payload);
    jsonwebtoken::crypto::verify(t.signature, message.as_bytes(), &key, alg).unwrap_or(false)
}

/// The recorded form of a browser's `auth.token` (see the module doc): `secret` is the hub's
/// JWT secret when the recorder was told it.
pub fn redact_token(token: &str, secret: Option<&str>) -> String {
    if token.is_empty() {
        return String::new();
    }
    let Some(t) = split_jwt(token) else {
        return NOT_JWT.into();
    };
    let marker = if t.signature.is_empty() {
        UNSIGNED
    } else {
        match secret {
            Some(s) if signed_with(&t, s) => SIGNED,
            Some(_) => FORGED,
            None => UNVERIFIED,
        }
    };
    format!("{}.{}.{marker}", t.header, t.payload)
}

/// The payload of a recorded form (or of any JWT), unverified: the claims a replay derives the
/// clientId from (`admin` for the ADMIN role, else `sub`; [`super::Claims::client_id`]).
pub fn recorded_claims(recorded: &str) -> Option<Value> {
    split_jwt(recorded).map(|t| Value::Object(t.claims))
}

/// The token a replay sends for a recorded form, made with the replay's own JWT `secret`; its
/// `exp`, `nbf` and `iat` are moved by `shift_secs` (how much later than the recording the
/// replay runs), so the token keeps its relation to the clock:
///
/// * [`SIGNED`]: the recorded header and claims, signed with `secret` under the header's
///   HS256/HS384/HS512 (another alg: `Err`);
/// * [`FORGED`]: the same, signed with another secret;
/// * [`UNSIGNED`] or an empty signature: header and claims, the signature empty;
/// * [`NOT_JWT`]: the malformed token [`NOT_JWT_SENT`];
/// * [`UNVERIFIED`], plain `[redacted]` (a recording from before the kinds were recorded), or
///   another marker: `Err` naming why (the caller falls back);
/// * anything not redacted: as it is.
pub fn replay_token(recorded: &str, secret: &str, shift_secs: i64) -> Result<String, String> {
    if recorded == NOT_JWT {
        return Ok(NOT_JWT_SENT.into());
    }
    let unknown_marker = || {
        format!(
            "the token is recorded as {recorded:?}, which does not say what kind of token was \
             sent (a recording from before `record bridle` recorded the kind), so a replay \
             cannot send one like it"
        )
    };
    let Some(t) = split_jwt(recorded) else {
        return if recorded.contains("[redacted") {
            Err(unknown_marker())
        } else {
            Ok(recorded.to_string())
        };
    };
    let signed = |secret: &str| -> Result<String, String> {
        let alg = hmac_alg(&t.header_json).ok_or_else(|| {
            format!(
                "the recorded token's header names alg {}, not HS256/HS384/HS512: a replay \
                 cannot sign one like it with the hub's secret",
                t.header_json.get("alg").unwrap_or(&Value::Null)
            )
        })?;
        let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())
            .map_err(|e| format!("cannot sign a token with the JWT secret given: {e}"))?;
        let message = format!("{}.{}", t.header, shifted_payload(&t, shift_secs));
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, alg)
            .map_err(|e| format!("cannot sign a token with the JWT secret given: {e}"))?;
        Ok(format!("{message}.{signature}"))
    };
    match t.signature {
        SIGNED => signed(secret),
        FORGED => signed(&format!("{secret}{FORGED_SECRET_SUFFIX}")),
        UNSIGNED | "" => Ok(format!("{}.{}.", t.header, shifted_payload(&t, shift_secs))),
        UNVERIFIED => Err(
            "the recorder was not given the hub's JWT secret, so whether this token was signed \
             right is unknown (record with --jwt-secret or JWT_SECRET)"
                .into(),
        ),
        s if s.contains("[redacted") => Err(unknown_marker()),
        _ => Ok(recorded.to_string()),
    }
}

/// The payload part with its time claims moved by `shift_secs`; the recorded part itself when
/// nothing moves (no shift, no numeric time claim).
fn shifted_payload(t: &Jwt<'_>, shift_secs: i64) -> String {
    let mut claims = t.claims.clone();
    let mut moved = false;
    for k in TIME_CLAIMS {
        if let Some(v) = claims.get_mut(k)
            && let Some(n) = shifted_number(v, shift_secs)
        {
            *v = n;
            moved = true;
        }
    }
    if shift_secs == 0 || !moved {
        return t.payload.to_string();
    }
    super::base64url_encode(&serde_json::to_vec(&Value::Object(claims)).unwrap_or_default())
}

/// How many whole seconds later than the recording (`recorded_ms`, the line's ts) a replay at
/// `now_ms` runs: the shift [`replay_token`] moves time claims by. Rounded down, never up: an
/// `iat` recorded as the second it was issued in, moved by a shift rounded up, named a second
/// still ahead of the hub's clock, and a hub that refuses a token issued in the future (PyJWT's
/// default, `ImmatureSignatureError`) refused the replayed browser (about one replay in two).
pub fn shift_secs(now_ms: i64, recorded_ms: f64) -> i64 {
    ((now_ms as f64 - recorded_ms) / 1000.0).floor().max(0.0) as i64
}

/// A JSON number moved by `by`, an integer kept an integer.
fn shifted_number(v: &Value, by: i64) -> Option<Value> {
    if let Some(i) = v.as_i64() {
        Some(json!(i.saturating_add(by)))
    } else if let Some(u) = v.as_u64() {
        Some(json!(u.saturating_add_signed(by)))
    } else {
        v.as_f64().map(|f| json!(f + by as f64))
    }
}

/// The recorded form of an agent's `auth.apiKey`: `[redacted]` when it is the hub's `key`,
/// [`UNVERIFIED`] when the key is not known (right or wrong, a replay cannot tell: recordings
/// made before bridgewire kept key kinds say `[redacted]` for either), else the marker of how
/// it differs ([`crate::redact::wrong_key_kind`]); an empty key is kept (it holds no secret).
pub fn redact_api_key(v: &str, key: Option<&str>) -> String {
    match key {
        _ if v.is_empty() => String::new(),
        None => UNVERIFIED.into(),
        Some(key) if v != key => crate::redact::wrong_key_kind(v, key).into(),
        _ => REDACTED.into(),
    }
}

/// The apiKey a replay sends for a recorded one, made from the replay's hub `key`:
/// `[redacted]` → the key, a wrong key's marker → a wrong key of that kind
/// ([`crate::redact::unredact`]), anything else as recorded.
pub fn replay_api_key(recorded: &str, key: &str) -> String {
    crate::redact::unredact(recorded, Some(key)).unwrap_or_else(|| recorded.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridle::{peek_jwt, sign_claims, verify_jwt, verify_jwt_claims};

    const SECRET: &str = "recording-secret";
    const REPLAY_SECRET: &str = "replay-secret";

    fn now() -> i64 {
        crate::util::now_ms() / 1000
    }

    /// `<header>.<payload>.` of `token`, and its signature.
    fn signed_part(token: &str) -> (&str, &str) {
        let cut = token.rfind('.').unwrap() + 1;
        (&token[..cut], &token[cut..])
    }

    fn unsigned(claims: &Value) -> String {
        let b64 = |v: &Value| crate::bridle::base64url_encode(v.to_string().as_bytes());
        format!(
            "{}.{}.",
            b64(&json!({"alg": "none", "typ": "JWT"})),
            b64(claims)
        )
    }

    /// A token signed with the hub's secret is recorded as signed, header and payload kept;
    /// replayed, it verifies with the replay's secret and keeps its claims.
    #[test]
    fn a_signed_token_replays_signed_with_the_replay_secret() {
        let exp = now() + 3600;
        let token = sign_claims(
            SECRET,
            &json!({"sub": "u-1", "roles": ["ADMIN"], "exp": exp}),
        );
        let recorded = redact_token(&token, Some(SECRET));
        let (kept, sig) = signed_part(&token);
        assert_eq!(recorded, format!("{kept}{SIGNED}"));
        assert!(!recorded.contains(sig));
        let claims = recorded_claims(&recorded).unwrap();
        assert_eq!(claims["sub"], "u-1");
        let back = replay_token(&recorded, REPLAY_SECRET, 0).unwrap();
        let c = verify_jwt(REPLAY_SECRET, &back).expect("verifies with the replay's secret");
        assert_eq!((c.sub.as_str(), c.client_id().as_str()), ("u-1", "admin"));
        assert_eq!(c.exp, Some(exp as u64));
        // Unshifted and with the same secret, the very token recorded.
        assert_eq!(replay_token(&recorded, SECRET, 0).unwrap(), token);
        // HS384/HS512 are judged and signed under their own alg.
        for alg in [Algorithm::HS384, Algorithm::HS512] {
            let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
            let t = jsonwebtoken::encode(
                &jsonwebtoken::Header::new(alg),
                &json!({"sub": "u-2"}),
                &key,
            )
            .unwrap();
            let r = redact_token(&t, Some(SECRET));
            assert!(r.ends_with(SIGNED), "{alg:?}: {r}");
            let back = replay_token(&r, SECRET, 0).unwrap();
            assert_eq!(back, t, "{alg:?}");
        }
    }

    /// A token recorded with `iat` the second it was issued in, replayed 1.6 s after a
    /// recording made at a whole second, is not issued after the replay's own second (the
    /// shift was rounded up to 2 s: `iat` one second ahead of the clock).
    #[test]
    fn a_replayed_iat_is_never_ahead_of_the_clock() {
        for (recorded_ms, now_ms) in [
            (9_000.0_f64, 10_600),
            (9_265.0, 11_000),
            (9_999.0, 10_500),
            (9_000.0, 9_000),
        ] {
            let iat = (recorded_ms / 1000.0).floor() as i64;
            let moved = iat + shift_secs(now_ms, recorded_ms);
            assert!(
                moved <= now_ms / 1000,
                "{recorded_ms} → {now_ms}: iat {moved}"
            );
        }
        assert_eq!(shift_secs(1_000, 5_000.0), 0, "a recording from the future");
    }

    /// The time claims are kept and judged by the hub: an expired token signed right is
    /// recorded signed, and a replay an hour later sends one expired by the same margin.
    #[test]
    fn an_expired_token_stays_expired_by_the_same_margin() {
        let recorded_at = now();
        let token = sign_claims(
            SECRET,
            &json!({"sub": "u-1", "exp": recorded_at - 3600, "iat": recorded_at - 7200}),
        );
        assert!(verify_jwt(SECRET, &token).is_none(), "expired");
        let recorded = redact_token(&token, Some(SECRET));
        assert!(recorded.ends_with(SIGNED), "{recorded}");
        // Replayed a day later, it expired an hour before the replay runs.
        let shift = 86_400;
        let back = replay_token(&recorded, REPLAY_SECRET, shift).unwrap();
        let claims = peek_jwt(&back).unwrap();
        assert_eq!(claims.exp, Some((recorded_at + shift - 3600) as u64));
        let raw = recorded_claims(&back).unwrap();
        assert_eq!(raw["iat"], json!(recorded_at + shift - 7200));
        assert_eq!(raw["sub"], "u-1");
        // Signed right: only the clock refuses it.
        let mut v = jsonwebtoken::Validation::new(Algorithm::HS256);
        v.validate_exp = false;
        let key = jsonwebtoken::DecodingKey::from_secret(REPLAY_SECRET.as_bytes()).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&back, &key, &v).is_ok());
        let now_replayed = replay_token(&recorded, REPLAY_SECRET, 0).unwrap();
        assert!(
            verify_jwt(REPLAY_SECRET, &now_replayed).is_none(),
            "expired"
        );
        // nbf ahead stays ahead; a token with no time claim keeps its payload part.
        let not_yet = sign_claims(
            SECRET,
            &json!({"sub": "u-1", "nbf": recorded_at + 3600, "exp": recorded_at + 7200}),
        );
        let back = replay_token(&redact_token(&not_yet, Some(SECRET)), SECRET, shift).unwrap();
        assert_eq!(
            recorded_claims(&back).unwrap()["nbf"],
            json!(recorded_at + 3600 + shift)
        );
        assert!(verify_jwt_claims(SECRET, &back).is_none(), "not valid yet");
        let timeless = sign_claims(SECRET, &json!({"sub": "u-1"}));
        let back = replay_token(&redact_token(&timeless, Some(SECRET)), SECRET, shift).unwrap();
        assert_eq!(back, timeless);
    }

    /// A token the hub's secret did not sign is recorded forged and replayed signed by
    /// another secret than the replay's.
    #[test]
    fn a_forged_token_replays_forged() {
        let token = sign_claims(
            &format!("{SECRET}-wrong"),
            &json!({"sub": "u-1", "exp": now() + 3600}),
        );
        let recorded = redact_token(&token, Some(SECRET));
        let (kept, _) = signed_part(&token);
        assert_eq!(recorded, format!("{kept}{FORGED}"));
        let back = replay_token(&recorded, REPLAY_SECRET, 0).unwrap();
        assert!(verify_jwt(REPLAY_SECRET, &back).is_none());
        assert_eq!(peek_jwt(&back).unwrap().sub, "u-1");
        assert_eq!(redact_token(&back, Some(REPLAY_SECRET)), recorded);
        // A signature that is not even base64url, or an alg the hub's secret does not sign
        // with, does not verify either; a forged RS256 token cannot be made again.
        let (h, _) = signed_part(&token);
        assert!(redact_token(&format!("{h}!!"), Some(SECRET)).ends_with(FORGED));
        let rs = format!(
            "{}.{}.c2lnbmF0dXJl",
            crate::bridle::base64url_encode(br#"{"alg":"RS256"}"#),
            crate::bridle::base64url_encode(br#"{"sub":"u-1"}"#)
        );
        let r = redact_token(&rs, Some(SECRET));
        assert!(r.ends_with(FORGED), "{r}");
        let e = replay_token(&r, REPLAY_SECRET, 0).unwrap_err();
        assert!(e.contains("RS256"), "{e}");
    }

    /// An unsigned token (alg none) holds no secret: its signature stays empty, marked.
    #[test]
    fn an_unsigned_token_replays_unsigned() {
        let exp = now() + 3600;
        let token = unsigned(&json!({"sub": "u-1", "roles": ["ADMIN"], "exp": exp}));
        for secret in [Some(SECRET), None] {
            assert_eq!(redact_token(&token, secret), format!("{token}{UNSIGNED}"));
        }
        let recorded = redact_token(&token, Some(SECRET));
        assert_eq!(replay_token(&recorded, REPLAY_SECRET, 0).unwrap(), token);
        let back = replay_token(&recorded, REPLAY_SECRET, 60).unwrap();
        assert!(back.ends_with('.'), "{back}");
        assert_eq!(peek_jwt(&back).unwrap().exp, Some(exp as u64 + 60));
        assert!(verify_jwt_claims(REPLAY_SECRET, &back).is_none());
        // The bare unsigned form (an unredacted recording) is replayed the same way.
        assert_eq!(replay_token(&token, REPLAY_SECRET, 0).unwrap(), token);
    }

    #[test]
    fn not_a_jwt_and_empty_tokens() {
        for token in ["not.a.jwt", "opaque-session-token", "a.b", "eyJ9.eyJ9.x.y"] {
            assert_eq!(redact_token(token, Some(SECRET)), NOT_JWT, "{token}");
            assert_eq!(redact_token(token, None), NOT_JWT, "{token}");
        }
        assert_eq!(
            replay_token(NOT_JWT, REPLAY_SECRET, 0).unwrap(),
            NOT_JWT_SENT
        );
        assert_eq!(redact_token(NOT_JWT_SENT, Some(SECRET)), NOT_JWT);
        assert_eq!(redact_token("", Some(SECRET)), "");
        assert_eq!(replay_token("", REPLAY_SECRET, 0).unwrap(), "");
        assert_eq!(recorded_claims(NOT_JWT), None);
    }

    /// Without the secret the recorder cannot tell a right signature from a wrong one: the
    /// replay says so instead of guessing, as it does for an older recording's `[redacted]`.
    #[test]
    fn unverified_and_older_recordings_are_refused_naming_why() {
        let token = sign_claims(SECRET, &json!({"sub": "u-1", "exp": now() + 3600}));
        let recorded = redact_token(&token, None);
        assert!(recorded.ends_with(UNVERIFIED), "{recorded}");
        assert_eq!(recorded_claims(&recorded).unwrap()["sub"], "u-1");
        let e = replay_token(&recorded, REPLAY_SECRET, 0).unwrap_err();
        assert!(
            e.contains("--jwt-secret") && e.contains("JWT_SECRET"),
            "{e}"
        );
        assert!(replay_token(REDACTED, REPLAY_SECRET, 0).is_err());
        assert!(replay_token("[redacted:someday]", REPLAY_SECRET, 0).is_err());
        // Not redacted (a --no-redact recording): sent as recorded.
        assert_eq!(replay_token(&token, REPLAY_SECRET, 0).unwrap(), token);
    }

    /// No recorded form is JWT-shaped, so the lane redaction leaves it as written, and none
    /// holds the signature.
    #[test]
    fn recorded_forms_survive_lane_redaction() {
        let exp = now() + 3600;
        let tokens = [
            sign_claims(SECRET, &json!({"sub": "u-1", "exp": exp})),
            sign_claims("other-secret", &json!({"sub": "u-1", "exp": exp})),
            unsigned(&json!({"sub": "u-1", "exp": exp})),
        ];
        for token in &tokens {
            for secret in [Some(SECRET), None] {
                let recorded = redact_token(token, secret);
                let line = format!(r#"40/ws/client,{{"token":"{recorded}","agentId":"a"}}"#);
                let secrets = crate::redact::Secrets::new();
                assert_eq!(secrets.redact_framed(line.as_bytes()), None, "{line}");
            }
        }
        // Why the unsigned form is marked: bare, it is a secret-keyed value like any other.
        let line = format!(r#"40/ws/client,{{"token":"{}"}}"#, tokens[2]);
        let secrets = crate::redact::Secrets::new();
        assert!(secrets.redact_framed(line.as_bytes()).is_some(), "{line}");
    }

    /// An agent's apiKey: the hub's key is `[redacted]`, a wrong one the marker of its kind,
    /// replayed as a wrong key of that kind made from the replay's key.
    #[test]
    fn api_keys_record_their_kind() {
        let key = "Hub-Key-1234";
        assert_eq!(redact_api_key(key, Some(key)), REDACTED);
        assert_eq!(redact_api_key("anything", None), UNVERIFIED);
        assert_eq!(redact_api_key("", Some(key)), "");
        let replay_key = "Other-Key-99";
        for (sent, marker) in [
            ("Hub-Key-1234-wrong", crate::redact::REDACTED_EXTENDED),
            ("hUB-kEY-1234", crate::redact::REDACTED_CASE),
            ("Hub-Key", crate::redact::REDACTED_PREFIX),
            ("nope", crate::redact::REDACTED_OTHER),
        ] {
            let recorded = redact_api_key(sent, Some(key));
            assert_eq!(recorded, marker, "{sent}");
            let back = replay_api_key(&recorded, replay_key);
            assert_eq!(
                crate::redact::wrong_key_kind(&back, replay_key),
                marker,
                "{sent} → {back}"
            );
        }
        assert_eq!(replay_api_key(REDACTED, replay_key), replay_key);
        assert_eq!(replay_api_key("", replay_key), "");
    }
}

//! Bridle: the Engine.IO / Socket.IO codec (`src/bridle/wire.rs`), the Engine.IO handshake,
//! JWT reading (`src/bridle/mod.rs`), and the redaction of CONNECT payloads
//! (`src/bridle/proxy.rs`). (The proxy's frame router is private to its writer thread since
//! the lane writes moved off the forwarding path; the codec it calls is covered here.)

use super::{bytes, config, json, text};
use bridgewire::bridle::proxy::redact_connect;
use bridgewire::bridle::wire::{EioPacket, OpenInfo, SioPacket, SioType, WireError, decode_frame};
use bridgewire::bridle::{Claims, peek_jwt, sign_claims, verify_jwt, verify_jwt_claims};
use proptest::prelude::*;
use serde_json::{Value, json};

const KINDS: [SioType; 7] = [
    SioType::Connect,
    SioType::Disconnect,
    SioType::Event,
    SioType::Ack,
    SioType::ConnectError,
    SioType::BinaryEvent,
    SioType::BinaryAck,
];

fn nsp() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        Just("/ws/client".to_string()),
        Just("/ws/agent".to_string()),
        // Any namespace the JS parser can delimit: starts with `/`, no `,`.
        text(12).prop_map(|t| format!("/{}", t.replace(',', ""))),
    ]
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::vec((super::key(), json(2)), 0..4)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
}

/// A packet the Socket.IO JS encoder could send: data an object (CONNECT, CONNECT_ERROR), an
/// array (ACK), `[name, ...args]` (EVENT); binary kinds carry their attachment count.
fn packet() -> impl Strategy<Value = SioPacket> {
    (
        prop::sample::select(KINDS.to_vec()),
        nsp(),
        prop::option::of(any::<u64>()),
        1..=bridgewire::bridle::wire::MAX_ATTACHMENTS,
        prop::option::of(object()),
        prop::collection::vec(json(2), 0..3),
        // A name the JS decoder takes (reserved ones are refused).
        text(10).prop_filter("not a reserved event name", |n| {
            !bridgewire::bridle::wire::RESERVED_EVENTS.contains(&n.as_str())
        }),
    )
        .prop_map(|(kind, nsp, ack, attachments, obj, args, name)| {
            let data = match kind {
                SioType::Connect | SioType::ConnectError => obj,
                SioType::Disconnect => None,
                SioType::Event | SioType::BinaryEvent => {
                    let mut a = vec![Value::String(name)];
                    a.extend(args);
                    Some(Value::Array(a))
                }
                SioType::Ack | SioType::BinaryAck => Some(Value::Array(args)),
            };
            let binary = matches!(kind, SioType::BinaryEvent | SioType::BinaryAck);
            let acked = matches!(
                kind,
                SioType::Event | SioType::BinaryEvent | SioType::Ack | SioType::BinaryAck
            );
            SioPacket {
                kind,
                nsp,
                // The JS decoder reads ids as numbers: a u64 id is its nearest f64.
                ack: if acked { ack.map(|a| a as f64) } else { None },
                attachments: if binary { attachments } else { 0 },
                data,
            }
        })
}

/// Frames: valid ones, valid ones with a byte changed, and arbitrary text.
fn frame() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => packet().prop_map(|p| p.to_frame()),
        2 => (packet(), any::<prop::sample::Index>(), any::<char>()).prop_map(|(p, at, c)| {
            let mut chars: Vec<char> = p.to_frame().chars().collect();
            let i = at.index(chars.len());
            chars[i] = c;
            chars.into_iter().collect()
        }),
        1 => prop::sample::select(vec!["0", "1", "2", "3probe", "5", "6", "40", "41", "451-", "4", ""])
            .prop_map(str::to_string),
        2 => text(60),
        1 => super::deep_nesting().prop_map(|d| format!("42[\"e\",{}]", String::from_utf8_lossy(&d))),
    ]
}

fn bounded_error(e: &WireError) -> bool {
    e.to_string().len() < 512
}

proptest! {
    #![proptest_config(config())]

    /// Any text: the decoders answer without a panic; what they decode came from the frame.
    #[test]
    fn frames_decode_without_panic(f in frame()) {
        match decode_frame(&f) {
            Ok((_, Some(p))) => {
                prop_assert!(p.nsp.len() <= f.len());
                // Decoded packets re-encode to a frame that decodes to the same packet (a NaN
                // ack id, which the JS decoder also takes, writes as `NaN` and cannot).
                if !p.ack.is_some_and(f64::is_nan) {
                    let again = SioPacket::decode(&p.encode());
                    prop_assert_eq!(again.as_ref(), Ok(&p), "{}", p.encode());
                }
            }
            Ok((_, None)) => {}
            Err(e) => prop_assert!(bounded_error(&e), "{}", e),
        }
        let _ = EioPacket::decode(&f);
        let _ = SioPacket::decode(&f);
    }

    /// Encode then decode gives the packet back: kind, namespace, ack id, attachment count and
    /// data; decode then encode gives back the bytes (the encoder is canonical).
    #[test]
    fn packets_round_trip(p in packet()) {
        let text = p.encode();
        let back = SioPacket::decode(&text).unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.encode(), text.clone());
        let (eio, sio) = decode_frame(&p.to_frame()).unwrap();
        prop_assert_eq!(eio, EioPacket::Message(text));
        prop_assert_eq!(sio, Some(p));
    }

    /// Engine.IO packets round-trip, the open handshake included.
    #[test]
    fn engine_packets_round_trip(
        sid in text(20),
        ping_interval_ms in any::<u64>(),
        ping_timeout_ms in any::<u64>(),
        max_payload in any::<u64>(),
        data in text(30),
        which in 0u8..7,
    ) {
        let p = match which {
            0 => EioPacket::Open(OpenInfo { sid, ping_interval_ms, ping_timeout_ms, max_payload }),
            1 => EioPacket::Close,
            2 => EioPacket::Ping(data),
            3 => EioPacket::Pong(data),
            4 => EioPacket::Message(data),
            5 => EioPacket::Upgrade,
            _ => EioPacket::Noop,
        };
        prop_assert_eq!(EioPacket::decode(&p.encode()), Ok(p));
    }

    /// The Engine.IO handshake JSON of any shape: an `OpenInfo` or a named refusal.
    #[test]
    fn open_handshakes_of_any_shape(v in prop_oneof![
        json(3),
        (json(1), json(1), json(1), json(1)).prop_map(|(sid, i, t, m)| json!({
            "sid": sid, "upgrades": [], "pingInterval": i, "pingTimeout": t, "maxPayload": m
        })),
    ]) {
        let frame = format!("0{v}");
        match EioPacket::decode(&frame) {
            Ok(EioPacket::Open(o)) => prop_assert_eq!(Some(o.sid.as_str()), v["sid"].as_str()),
            Ok(other) => prop_assert!(false, "{:?}", other),
            Err(e) => prop_assert!(matches!(e, WireError::Open(_))),
        }
    }

    /// JWTs: any token string is read or refused without a panic; a signed token's claims are
    /// read back by `peek_jwt` and verified only with its secret.
    #[test]
    fn jwts_of_any_shape(
        token in prop_oneof![
            text(80),
            "[A-Za-z0-9_=+/-]{0,30}\\.[A-Za-z0-9_=+/-]{0,60}\\.[A-Za-z0-9_-]{0,30}",
            bytes(60).prop_map(|b| format!("eyJ.{}.x", bridgewire::util::base64_encode(&b))),
            json(2).prop_map(|v| format!("eyJhbGciOiJIUzI1NiJ9.{}.sig",
                bridgewire::util::base64_encode(v.to_string().as_bytes()).trim_end_matches('='))),
        ],
    ) {
        let _ = peek_jwt(&token);
        prop_assert!(verify_jwt("secret", &token).is_none() || token.split('.').count() == 3);
        let _ = verify_jwt_claims("secret", &token);
    }

    #[test]
    fn signed_jwts_round_trip(
        sub in text(20),
        roles in prop::collection::vec(text(8), 0..3),
        secret in "[ -~]{1,20}",
        other in "[ -~]{1,20}",
    ) {
        let exp = Some(bridgewire::util::now_ms() as u64 / 1000 + 3600);
        let claims = Claims { sub: sub.clone(), roles: roles.clone(), exp };
        let token = sign_claims(&secret, &claims);
        let peeked = peek_jwt(&token).unwrap();
        prop_assert_eq!((&peeked.sub, &peeked.roles, peeked.exp), (&sub, &roles, exp));
        let verified = verify_jwt(&secret, &token).unwrap();
        prop_assert_eq!(&verified.sub, &sub);
        if other != secret {
            prop_assert!(verify_jwt(&other, &token).is_none());
        }
    }

    /// CONNECT payloads: redaction keeps the packet decodable and removes the credentials.
    #[test]
    fn connect_payloads_redact(
        p in packet(),
        api_key in "[a-z0-9]{12,20}",
        token in "[a-z0-9]{12,20}",
    ) {
        let mut p = p;
        p.kind = SioType::Connect;
        p.ack = None;
        p.attachments = 0;
        let mut m = p.data.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
        m.insert("apiKey".into(), json!(api_key));
        m.insert("token".into(), json!(token));
        p.data = Some(Value::Object(m));
        let line = redact_connect(&p, None, None);
        prop_assert!(!line.contains(&api_key) && !line.contains(&token), "{}", line);
        let (_, back) = decode_frame(&line).unwrap();
        prop_assert_eq!(back.unwrap().nsp, p.nsp);
    }
}

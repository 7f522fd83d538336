//! Engine.IO 4 and Socket.IO 5 frames: pure encode and decode, no I/O.
//!
//! Over WebSocket, Engine.IO 4 sends one packet per text frame, `<type digit><data>`
//! (`0` open, `1` close, `2` ping, `3` pong, `4` message, `5` upgrade, `6` noop); a binary frame
//! is a binary message with no prefix. A Socket.IO 5 packet rides in an Engine.IO message:
//! `<type>[<attachments>-][<nsp>,][<ack id>][<JSON data>]`, the namespace omitted when it is `/`.
//!
//! Decoders name what they refused ([`WireError`]) and never panic, whatever the input. The
//! Socket.IO decoder accepts and refuses exactly what the canonical JS decoder
//! (`socket.io-parser` 4.x, `Decoder#decodeString`) does, with the same fields: a peer's packet
//! is judged as the real server or client would take it (`tests/node_sio_parser.rs` compares
//! the two). Known differences come from JSON itself: serde_json refuses lone surrogates, numbers
//! beyond f64 and nesting past 128 levels, which `JSON.parse` takes.

use serde_json::Value;

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("empty frame")]
    Empty,
    #[error("unknown Engine.IO packet type {0:?}")]
    EngineType(char),
    #[error("unknown Socket.IO packet type {0:?}")]
    SocketType(char),
    #[error("invalid JSON in packet data: {0}")]
    Json(String),
    #[error("invalid attachment count")]
    Attachments,
    #[error("too many attachments ({0}; the JS decoder takes at most {MAX_ATTACHMENTS})")]
    TooManyAttachments(String),
    #[error(
        "an event packet needs an array whose first element is a number or a string other than a reserved event name"
    )]
    EventShape,
    #[error("invalid {kind} payload: {why}")]
    Payload {
        kind: &'static str,
        why: &'static str,
    },
    #[error("invalid Engine.IO open payload: {0}")]
    Open(String),
}

/// An Engine.IO packet (text form).
#[derive(Debug, Clone, PartialEq)]
pub enum EioPacket {
    Open(OpenInfo),
    Close,
    Ping(String),
    Pong(String),
    Message(String),
    Upgrade,
    Noop,
}

/// The server's `open` handshake data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenInfo {
    pub sid: String,
    pub ping_interval_ms: u64,
    pub ping_timeout_ms: u64,
    pub max_payload: u64,
}

impl EioPacket {
    pub fn encode(&self) -> String {
        match self {
            EioPacket::Open(o) => format!(
                "0{}",
                serde_json::json!({
                    "sid": o.sid,
                    "upgrades": [],
                    "pingInterval": o.ping_interval_ms,
                    "pingTimeout": o.ping_timeout_ms,
                    "maxPayload": o.max_payload,
                })
            ),
            EioPacket::Close => "1".into(),
            EioPacket::Ping(d) => format!("2{d}"),
            EioPacket::Pong(d) => format!("3{d}"),
            EioPacket::Message(d) => format!("4{d}"),
            EioPacket::Upgrade => "5".into(),
            EioPacket::Noop => "6".into(),
        }
    }

    pub fn decode(frame: &str) -> Result<EioPacket, WireError> {
        let mut chars = frame.chars();
        let t = chars.next().ok_or(WireError::Empty)?;
        let rest = chars.as_str();
        Ok(match t {
            '0' => EioPacket::Open(decode_open(rest)?),
            '1' => EioPacket::Close,
            '2' => EioPacket::Ping(rest.into()),
            '3' => EioPacket::Pong(rest.into()),
            '4' => EioPacket::Message(rest.into()),
            '5' => EioPacket::Upgrade,
            '6' => EioPacket::Noop,
            c => return Err(WireError::EngineType(c)),
        })
    }
}

fn decode_open(data: &str) -> Result<OpenInfo, WireError> {
    let v: Value = serde_json::from_str(data).map_err(|e| WireError::Open(e.to_string()))?;
    let sid = v["sid"]
        .as_str()
        .ok_or_else(|| WireError::Open("no sid".into()))?
        .to_string();
    Ok(OpenInfo {
        sid,
        ping_interval_ms: v["pingInterval"].as_u64().unwrap_or(25_000),
        ping_timeout_ms: v["pingTimeout"].as_u64().unwrap_or(20_000),
        max_payload: v["maxPayload"].as_u64().unwrap_or(1_000_000),
    })
}

/// Socket.IO packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SioType {
    Connect = 0,
    Disconnect = 1,
    Event = 2,
    Ack = 3,
    ConnectError = 4,
    BinaryEvent = 5,
    BinaryAck = 6,
}

impl SioType {
    fn from_char(c: char) -> Result<SioType, WireError> {
        Ok(match c {
            '0' => SioType::Connect,
            '1' => SioType::Disconnect,
            '2' => SioType::Event,
            '3' => SioType::Ack,
            '4' => SioType::ConnectError,
            '5' => SioType::BinaryEvent,
            '6' => SioType::BinaryAck,
            c => return Err(WireError::SocketType(c)),
        })
    }
}

/// The JS decoder's default `maxAttachments`.
pub const MAX_ATTACHMENTS: u32 = 10;

/// Event names the JS decoder refuses (`RESERVED_EVENTS` of socket.io-parser).
pub const RESERVED_EVENTS: [&str; 6] = [
    "connect",
    "connect_error",
    "disconnect",
    "disconnecting",
    "newListener",
    "removeListener",
];

/// A Socket.IO packet.
#[derive(Debug, Clone, PartialEq)]
pub struct SioPacket {
    pub kind: SioType,
    /// `/` when the frame names none.
    pub nsp: String,
    /// The ack id as the JS decoder reads it: `Number(<digits and spaces>)`, so it may be a
    /// fraction-free float beyond u64, or NaN (`"21 2[…]"`: the JS decoder accepts that).
    pub ack: Option<f64>,
    pub attachments: u32,
    pub data: Option<Value>,
}

impl SioPacket {
    pub fn connect(nsp: &str, auth: Option<Value>) -> SioPacket {
        SioPacket {
            kind: SioType::Connect,
            nsp: nsp.into(),
            ack: None,
            attachments: 0,
            data: auth,
        }
    }

    pub fn disconnect(nsp: &str) -> SioPacket {
        SioPacket {
            kind: SioType::Disconnect,
            nsp: nsp.into(),
            ack: None,
            attachments: 0,
            data: None,
        }
    }

    /// An event `[name, data]`.
    pub fn event(nsp: &str, name: &str, data: Value) -> SioPacket {
        SioPacket {
            kind: SioType::Event,
            nsp: nsp.into(),
            ack: None,
            attachments: 0,
            data: Some(Value::Array(vec![Value::String(name.into()), data])),
        }
    }

    /// The event name and first argument, for event packets.
    pub fn as_event(&self) -> Option<(&str, &Value)> {
        if self.kind != SioType::Event && self.kind != SioType::BinaryEvent {
            return None;
        }
        let arr = self.data.as_ref()?.as_array()?;
        let name = arr.first()?.as_str()?;
        static NULL: Value = Value::Null;
        Some((name, arr.get(1).unwrap_or(&NULL)))
    }

    /// [`SioPacket::as_event`], and also an event named by a number, which the JS decoder
    /// takes and a JS socket emits under the number's text: so a peer's odd event is seen
    /// (and named in a verdict), not silently skipped.
    pub fn event_parts(&self) -> Option<(std::borrow::Cow<'_, str>, &Value)> {
        if let Some((name, data)) = self.as_event() {
            return Some((std::borrow::Cow::Borrowed(name), data));
        }
        if self.kind != SioType::Event && self.kind != SioType::BinaryEvent {
            return None;
        }
        let arr = self.data.as_ref()?.as_array()?;
        let Value::Number(n) = arr.first()? else {
            return None;
        };
        let mut name = String::new();
        crate::jsjson::write_number(&mut name, n);
        static NULL: Value = Value::Null;
        Some((std::borrow::Cow::Owned(name), arr.get(1).unwrap_or(&NULL)))
    }

    /// The Socket.IO text (the Engine.IO message payload, without the leading `4`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        out.push(char::from(b'0' + self.kind as u8));
        if matches!(self.kind, SioType::BinaryEvent | SioType::BinaryAck) {
            out.push_str(&format!("{}-", self.attachments));
        }
        if self.nsp != "/" && !self.nsp.is_empty() {
            out.push_str(&self.nsp);
            out.push(',');
        }
        if let Some(id) = self.ack {
            // As JS's `str += id` writes a number.
            out.push_str(&if id.is_nan() {
                "NaN".to_string()
            } else if id.is_infinite() {
                if id > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            } else {
                crate::jsjson::format_f64(id)
            });
        }
        if let Some(d) = &self.data {
            out.push_str(&d.to_string());
        }
        out
    }

    /// The full WebSocket text frame (`4` + Socket.IO text).
    pub fn to_frame(&self) -> String {
        format!("4{}", self.encode())
    }

    /// Decodes a Socket.IO packet as `socket.io-parser`'s `Decoder#decodeString` does: the type
    /// is `Number(first character)` (empty or a space is 0, CONNECT); binary kinds take
    /// `Number(<up to "-">)` attachments, an integer in 1..=10; a namespace runs from `/` to the
    /// first `,`; the ack id is the run of digits and spaces that follows, read with `Number`;
    /// the rest is JSON, which must suit the type (CONNECT an object, DISCONNECT none, EVENT an
    /// array led by a number or a non-reserved name, ACK an array, CONNECT_ERROR a string or an
    /// object).
    pub fn decode(text: &str) -> Result<SioPacket, WireError> {
        let mut chars = text.chars();
        let kind = match chars.next() {
            None => SioType::Connect,
            Some(c) if is_js_space(c) => SioType::Connect,
            Some(c) => SioType::from_char(c)?,
        };
        let mut rest = chars.as_str();
        let mut attachments = 0;
        if matches!(kind, SioType::BinaryEvent | SioType::BinaryAck) {
            let dash = rest.find('-').ok_or(WireError::Attachments)?;
            let n = js_number(&rest[..dash]);
            if n.is_nan() || !n.is_finite() || n.floor() != n || n < 1.0 {
                return Err(WireError::Attachments);
            }
            if n > f64::from(MAX_ATTACHMENTS) {
                return Err(WireError::TooManyAttachments(crate::jsjson::format_f64(n)));
            }
            attachments = n as u32;
            rest = &rest[dash + 1..];
        }
        let mut nsp = "/".to_string();
        if rest.starts_with('/') {
            match rest.find(',') {
                Some(i) => {
                    nsp = rest[..i].to_string();
                    rest = &rest[i + 1..];
                }
                None => {
                    nsp = rest.to_string();
                    rest = "";
                }
            }
        }
        // `Number(c) == c` holds for a digit and for a JS space (both sides become numbers).
        let id_len: usize = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || is_js_space(*c))
            .map(char::len_utf8)
            .sum();
        let ack = (id_len > 0).then(|| js_number(&rest[..id_len]));
        rest = &rest[id_len..];
        let data = if rest.is_empty() {
            None
        } else {
            Some(serde_json::from_str::<Value>(rest).map_err(|e| WireError::Json(e.to_string()))?)
        };
        if let Some(d) = &data {
            check_payload(kind, d)?;
        }
        Ok(SioPacket {
            kind,
            nsp,
            ack,
            attachments,
            data,
        })
    }
}

/// `Decoder.isPayloadValid` of socket.io-parser.
fn check_payload(kind: SioType, d: &Value) -> Result<(), WireError> {
    let bad = |kind, why| Err(WireError::Payload { kind, why });
    match kind {
        SioType::Connect if !d.is_object() => bad("CONNECT", "not an object"),
        SioType::Disconnect => bad("DISCONNECT", "a DISCONNECT carries no data"),
        SioType::ConnectError if !(d.is_object() || d.is_string()) => {
            bad("CONNECT_ERROR", "neither a string nor an object")
        }
        SioType::Event | SioType::BinaryEvent => match d.as_array().and_then(|a| a.first()) {
            Some(Value::Number(_)) => Ok(()),
            Some(Value::String(name)) if !RESERVED_EVENTS.contains(&name.as_str()) => Ok(()),
            _ => Err(WireError::EventShape),
        },
        SioType::Ack | SioType::BinaryAck if !d.is_array() => bad("ACK", "not an array"),
        _ => Ok(()),
    }
}

/// A JS white space or line terminator (what `Number()` trims): `char::is_whitespace` but
/// U+0085, plus U+FEFF.
fn is_js_space(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

/// JS `Number(string)` (ECMA-262 StringToNumber): trimmed; empty is 0; `0x`/`0o`/`0b`
/// integers; `Infinity` with an optional sign; decimal literals; anything else NaN.
fn js_number(s: &str) -> f64 {
    let t = s.trim_matches(is_js_space);
    if t.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [
        ("0x", 16),
        ("0X", 16),
        ("0o", 8),
        ("0O", 8),
        ("0b", 2),
        ("0B", 2),
    ] {
        if let Some(digits) = t.strip_prefix(prefix) {
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return f64::NAN;
            }
            return digits.chars().fold(0.0, |n, c| {
                n * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))
            });
        }
    }
    match t {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    // StrDecimalLiteral: [+-] (digits [. digits*] | . digits) [(e|E) [+-] digits]; Rust's
    // parser reads the same grammar (and also `inf`/`nan`, kept out by this check).
    let b = t.as_bytes();
    let mut i = usize::from(matches!(b[0], b'+' | b'-'));
    let int = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    i += int;
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac;
    }
    if int + frac == 0 {
        return f64::NAN;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        i += usize::from(matches!(b.get(i), Some(b'+' | b'-')));
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return f64::NAN;
        }
        i += exp;
    }
    if i != b.len() {
        return f64::NAN;
    }
    t.parse().unwrap_or(f64::NAN)
}

/// How a lane holds a message its connection ended inside of: `cut:<bytes declared>:<what
/// came>`, the text as far as it came (to a whole character) or `binary:<base64>`. A hub that
/// will not read a frame whole (one over its size limit) closes the connection after its
/// header: the recording keeps that frame, as far as the proxy relayed it, and the length it
/// declared, so a replay can send the same (the rest filled in).
pub const CUT_PREFIX: &str = "cut:";

/// The length declared and what came, of a [`CUT_PREFIX`] line.
pub fn parse_cut(line: &str) -> Option<(u64, &str)> {
    let (declared, rest) = line.strip_prefix(CUT_PREFIX)?.split_once(':')?;
    Some((declared.parse().ok()?, rest))
}

/// Decodes a WebSocket text frame all the way: the Engine.IO packet and, for messages, the
/// Socket.IO packet inside.
pub fn decode_frame(frame: &str) -> Result<(EioPacket, Option<SioPacket>), WireError> {
    let eio = EioPacket::decode(frame)?;
    let sio = match &eio {
        EioPacket::Message(m) => Some(SioPacket::decode(m)?),
        _ => None,
    };
    Ok((eio, sio))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn engine_packets_roundtrip() {
        for p in [
            EioPacket::Close,
            EioPacket::Ping(String::new()),
            EioPacket::Pong("probe".into()),
            EioPacket::Message("2[\"a\"]".into()),
            EioPacket::Upgrade,
            EioPacket::Noop,
        ] {
            assert_eq!(EioPacket::decode(&p.encode()).unwrap(), p);
        }
        let open = EioPacket::decode(
            r#"0{"sid":"abc","upgrades":[],"pingInterval":300,"pingTimeout":200,"maxPayload":10}"#,
        )
        .unwrap();
        assert_eq!(
            open,
            EioPacket::Open(OpenInfo {
                sid: "abc".into(),
                ping_interval_ms: 300,
                ping_timeout_ms: 200,
                max_payload: 10
            })
        );
        assert_eq!(EioPacket::decode(&open.encode()).unwrap(), open);
    }

    #[test]
    fn engine_rejects_garbage() {
        assert_eq!(EioPacket::decode(""), Err(WireError::Empty));
        assert_eq!(EioPacket::decode("9"), Err(WireError::EngineType('9')));
        assert!(matches!(EioPacket::decode("0{"), Err(WireError::Open(_))));
        assert!(matches!(EioPacket::decode("0{}"), Err(WireError::Open(_))));
    }

    #[test]
    fn socket_packets_match_the_js_parser() {
        let c = SioPacket::connect("/ws/client", Some(json!({"token":"t","agentId":"a"})));
        assert_eq!(c.encode(), r#"0/ws/client,{"token":"t","agentId":"a"}"#);
        assert_eq!(SioPacket::connect("/", None).encode(), "0");
        let e = SioPacket::event("/ws/agent", "register", json!({}));
        assert_eq!(e.to_frame(), r#"42/ws/agent,["register",{}]"#);
        let mut acked = SioPacket::event("/", "x", json!(1));
        acked.ack = Some(12.0);
        assert_eq!(acked.encode(), r#"212["x",1]"#);
        assert_eq!(SioPacket::decode(&acked.encode()).unwrap(), acked);
        assert_eq!(SioPacket::disconnect("/a").encode(), "1/a,");
        let d = SioPacket::decode("1/a,").unwrap();
        assert_eq!(
            (d.kind, d.nsp.as_str(), d.data),
            (SioType::Disconnect, "/a", None)
        );
        let err = SioPacket::decode(r#"4/ws/client,{"message":"unauthorized"}"#).unwrap();
        assert_eq!(err.kind, SioType::ConnectError);
        assert_eq!(err.data.unwrap()["message"], "unauthorized");
        let b = SioPacket::decode(r#"51-/x,["up",{"_placeholder":true,"num":0}]"#).unwrap();
        assert_eq!(
            (b.kind, b.attachments, b.nsp.as_str()),
            (SioType::BinaryEvent, 1, "/x")
        );
        assert_eq!(SioPacket::decode(&b.encode()).unwrap(), b);
        let nsp_only = SioPacket::decode("0/ws/agent").unwrap();
        assert_eq!(nsp_only.nsp, "/ws/agent");
    }

    #[test]
    fn socket_rejects_garbage() {
        assert!(matches!(
            SioPacket::decode("2/ws/client,[\"message\",{"),
            Err(WireError::Json(_))
        ));
        assert_eq!(SioPacket::decode("2[]"), Err(WireError::EventShape));
        assert_eq!(
            SioPacket::decode("2[\"disconnect\"]"),
            Err(WireError::EventShape)
        );
        assert_eq!(SioPacket::decode("7"), Err(WireError::SocketType('7')));
        assert_eq!(SioPacket::decode("5x-[]"), Err(WireError::Attachments));
        assert_eq!(SioPacket::decode("50-[\"a\"]"), Err(WireError::Attachments));
        assert!(matches!(
            SioPacket::decode("511-[\"a\"]"),
            Err(WireError::TooManyAttachments(_))
        ));
        for refused in ["0[]", "1{}", "4[]", "3{}"] {
            assert!(
                matches!(SioPacket::decode(refused), Err(WireError::Payload { .. })),
                "{refused}"
            );
        }
        // Arbitrary bytes never panic.
        for s in ["4", "2/", "2/,", "399999999999999999999999", "5-", "0/é,{"] {
            let _ = SioPacket::decode(s);
            let _ = decode_frame(s);
        }
    }

    /// What the JS decoder takes that looks odd: the same here (tests/node_sio_parser.rs
    /// compares the whole range with socket.io-parser itself).
    #[test]
    fn socket_takes_what_the_js_parser_takes() {
        let p = SioPacket::decode("3 1").unwrap();
        assert_eq!((p.kind, p.ack, p.data), (SioType::Ack, Some(1.0), None));
        let p = SioPacket::decode("").unwrap();
        assert_eq!((p.kind, p.nsp.as_str()), (SioType::Connect, "/"));
        let p = SioPacket::decode("2[1,{\"a\":2}]").unwrap();
        assert_eq!(p.as_event(), None);
        let (name, data) = p.event_parts().unwrap();
        assert_eq!((name.as_ref(), data), ("1", &serde_json::json!({"a": 2})));
        assert!(
            SioPacket::decode("21 2[\"a\"]")
                .unwrap()
                .ack
                .unwrap()
                .is_nan()
        );
        let p = SioPacket::decode("5 1-[\"a\"]").unwrap();
        assert_eq!(p.attachments, 1);
        assert_eq!(super::js_number("0x1f"), 31.0);
        assert_eq!(super::js_number(" 1.5e1 "), 15.0);
        for nan in ["1 2", "inf", "nan", "1e", "+0x1", ".", "1_0"] {
            assert!(super::js_number(nan).is_nan(), "{nan}");
        }
    }

    #[test]
    fn full_frames() {
        let (e, s) = decode_frame(r#"42/ws/client,["welcome",{"clientId":"u1"}]"#).unwrap();
        assert!(matches!(e, EioPacket::Message(_)));
        let s = s.unwrap();
        assert_eq!(s.as_event().unwrap().0, "welcome");
        assert_eq!(s.as_event().unwrap().1["clientId"], "u1");
        assert_eq!(
            decode_frame("2").unwrap(),
            (EioPacket::Ping(String::new()), None)
        );
    }
}

//! Engine.IO 4 and Socket.IO 5 frames: pure encode and decode, no I/O.
//!
//! Over WebSocket, Engine.IO 4 sends one packet per text frame, `<type digit><data>`
//! (`0` open, `1` close, `2` ping, `3` pong, `4` message, `5` upgrade, `6` noop); a binary frame
//! is a binary message with no prefix. A Socket.IO 5 packet rides in an Engine.IO message:
//! `<type>[<attachments>-][<nsp>,][<ack id>][<JSON data>]`, the namespace omitted when it is `/`.
//!
//! Decoders are strict and name what they refused ([`WireError`]); they never panic, whatever
//! the input.

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
    #[error("an event packet needs a non-empty array whose first element is a string")]
    EventShape,
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

/// A Socket.IO packet.
#[derive(Debug, Clone, PartialEq)]
pub struct SioPacket {
    pub kind: SioType,
    /// `/` when the frame names none.
    pub nsp: String,
    pub ack: Option<u64>,
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
            out.push_str(&id.to_string());
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

    pub fn decode(text: &str) -> Result<SioPacket, WireError> {
        let mut chars = text.chars();
        let kind = SioType::from_char(chars.next().ok_or(WireError::Empty)?)?;
        let mut rest = chars.as_str();
        let mut attachments = 0;
        if matches!(kind, SioType::BinaryEvent | SioType::BinaryAck) {
            let dash = rest.find('-').ok_or(WireError::Attachments)?;
            attachments = rest[..dash].parse().map_err(|_| WireError::Attachments)?;
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
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let ack = if digits > 0 {
            let id = rest[..digits].parse().ok();
            rest = &rest[digits..];
            id
        } else {
            None
        };
        let data = if rest.is_empty() {
            None
        } else {
            Some(serde_json::from_str::<Value>(rest).map_err(|e| WireError::Json(e.to_string()))?)
        };
        let p = SioPacket {
            kind,
            nsp,
            ack,
            attachments,
            data,
        };
        if matches!(kind, SioType::Event | SioType::BinaryEvent) && p.as_event().is_none() {
            return Err(WireError::EventShape);
        }
        Ok(p)
    }
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
        acked.ack = Some(12);
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
        assert_eq!(SioPacket::decode("2[1]"), Err(WireError::EventShape));
        assert_eq!(SioPacket::decode("7"), Err(WireError::SocketType('7')));
        assert_eq!(SioPacket::decode("5x-[]"), Err(WireError::Attachments));
        assert_eq!(SioPacket::decode(""), Err(WireError::Empty));
        // Arbitrary bytes never panic.
        for s in ["4", "2/", "2/,", "399999999999999999999999", "5-", "0/é,{"] {
            let _ = SioPacket::decode(s);
            let _ = decode_frame(s);
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

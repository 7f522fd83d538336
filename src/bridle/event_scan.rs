//! One borrowed pass over a Socket.IO EVENT's argument array for what the recording proxy
//! needs from a frame: whether a full decode would take it, the event's `clientId` (agent frames
//! are routed by it) and whether any object key could lead to a redaction
//! ([`crate::redact::key_may_matter`], so the redaction pre-filter does not walk the frame
//! again). Nothing is built: no `Value` tree, no copies of strings without escapes.
//!
//! The JSON is read by serde_json through the same `deserialize_any` path a `Value` takes, so
//! it accepts and refuses exactly what [`super::wire::SioPacket::decode`] does (nesting limit,
//! escapes and lone surrogates, numbers out of range, trailing bytes), and then applies the
//! same EVENT payload check (an array whose first element is a number or a string outside
//! [`super::wire::RESERVED_EVENTS`]).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

/// What [`scan_event`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct EventScan<'a> {
    /// The event is named by a string (a number-named one has no `as_event` data).
    pub named: bool,
    /// The second argument's `clientId` when it is a string and the event is named by a string
    /// (the last one of repeated keys, as in a full parse).
    pub client_id: Option<Cow<'a, str>>,
    /// Some object key anywhere satisfies [`crate::redact::key_may_matter`] (also `true` when
    /// the nesting is deeper than [`KEY_DEPTH`]: the redaction pass then decides).
    pub keys_may_matter: bool,
}

/// Nesting past which keys are not looked at (and [`EventScan::keys_may_matter`] says yes).
pub const KEY_DEPTH: usize = 96;

/// Scans `json`, the JSON text of an EVENT packet (what follows its namespace and ack id).
/// `None` when a full decode would refuse the packet.
pub fn scan_event(json: &str) -> Option<EventScan<'_>> {
    let hit = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(json);
    let (named, client_id) = Event { hit: &hit }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(EventScan {
        named,
        client_id,
        keys_may_matter: hit.get(),
    })
}

/// The scalar arms of a visitor that checks a scalar (serde_json has read it already) and
/// returns `$value` for it; strings are left to each visitor.
macro_rules! scalars_give {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Any value, checked and dropped; object keys are tested.
#[derive(Clone, Copy)]
struct Any<'h> {
    hit: &'h Cell<bool>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Any<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Any<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    scalars_give!(());
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let inner = self.inner();
        while a.next_element_seed(inner)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let inner = self.inner();
        while let Some(k) = a.next_key_seed(Key)? {
            self.key(&k);
            a.next_value_seed(inner)?;
        }
        Ok(())
    }
}

impl Any<'_> {
    fn inner(self) -> Self {
        if self.depth >= KEY_DEPTH {
            self.hit.set(true);
        }
        Any {
            hit: self.hit,
            depth: self.depth + 1,
        }
    }

    fn key(self, k: &str) {
        if !self.hit.get()
            && crate::redact::key_tail_may_matter(k.as_bytes())
            && crate::redact::key_may_matter(k)
        {
            self.hit.set(true);
        }
    }
}

/// An object key, borrowed when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(Str)
    }
}

/// A string, borrowed when it has no escapes.
struct Str;

impl<'de> Visitor<'de> for Str {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

/// The EVENT's argument array: (named by a string, the second argument's `clientId`).
struct Event<'h> {
    hit: &'h Cell<bool>,
}

impl<'de, 'h> DeserializeSeed<'de> for Event<'h> {
    type Value = (bool, Option<Cow<'de, str>>);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Event<'_> {
    type Value = (bool, Option<Cow<'de, str>>);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an EVENT argument array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let any = Any {
            hit: self.hit,
            depth: 1,
        };
        let named = match a.next_element_seed(Name)? {
            Some(named) => named,
            None => return Err(de::Error::custom("an EVENT needs a name")),
        };
        let client_id = a.next_element_seed(Data { any })?.flatten();
        while a.next_element_seed(any)?.is_some() {}
        // A number-named event has no `as_event` data, so no clientId.
        Ok((named, client_id.filter(|_| named)))
    }
}

/// The event name: `true` for a string, `false` for a number; anything else (or a reserved
/// name) refuses the packet.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event name (a string or a number)")
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        if super::wire::RESERVED_EVENTS.contains(&v) {
            return Err(E::custom("a reserved event name"));
        }
        Ok(true)
    }
}

/// The second argument: its `clientId` when it is an object holding a string there.
struct Data<'h> {
    any: Any<'h>,
}

impl<'de> DeserializeSeed<'de> for Data<'_> {
    type Value = Option<Cow<'de, str>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Data<'_> {
    type Value = Option<Cow<'de, str>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    scalars_give!(None);
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.any.visit_seq(a).map(|()| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let inner = self.any.inner();
        let mut client = None;
        while let Some(k) = a.next_key_seed(Key)? {
            self.any.key(&k);
            if k == "clientId" {
                client = a.next_value_seed(ClientId { any: inner })?;
            } else {
                a.next_value_seed(inner)?;
            }
        }
        Ok(client)
    }
}

/// A `clientId` value: the string, or `None` for any other value (still checked and scanned).
struct ClientId<'h> {
    any: Any<'h>,
}

impl<'de> DeserializeSeed<'de> for ClientId<'_> {
    type Value = Option<Cow<'de, str>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ClientId<'_> {
    type Value = Option<Cow<'de, str>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    scalars_give!(None);
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.any.visit_seq(a).map(|()| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.any.visit_map(a).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridle::wire::{SioPacket, SioType};

    /// What a full decode (`SioPacket::decode` of `2<json>`) and the pre-filter say, in the
    /// scan's terms.
    fn reference(json: &str) -> Option<(bool, Option<String>, bool)> {
        let p = SioPacket::decode(&format!("2{json}")).ok()?;
        assert_eq!(p.kind, SioType::Event);
        let named = p.as_event().is_some();
        let client = p
            .as_event()
            .and_then(|(_, d)| d["clientId"].as_str())
            .map(str::to_string);
        Some((
            named,
            client,
            crate::redact::may_need_redaction(json.as_bytes()),
        ))
    }

    #[test]
    fn agrees_with_the_full_decode() {
        let deep_ok = format!("[\"e\",{}1{}]", "[".repeat(120), "]".repeat(120));
        let too_deep = format!("[\"e\",{}1{}]", "[".repeat(200), "]".repeat(200));
        let deep_key = format!(
            "[\"e\",{}{{\"apiKey\":\"x\"}}{}]",
            "[".repeat(110),
            "]".repeat(110)
        );
        let cases: Vec<&str> = vec![
            r#"["stream",{"clientId":"user-1","text":"a","parts":[{"type":"text","text":"a"}]}]"#,
            r#"["stream",{"clientId":"a","clientId":"b"}]"#,
            r#"["stream",{"clientId":"a","clientId":7}]"#,
            r#"["stream",{"client\u0049d":"esc\u00e9"}]"#,
            r#"["stream",{"clientId":{"token":"t"}}]"#,
            r#"["stream",{"x":{"y":[{"api_key":"k"}]}}]"#,
            r#"["stream",{"headers":{"a":"b"}},{"Pass-Word":"p"}]"#,
            r#"["stream",{"callbackUrl":"http://x/?token=abc"}]"#,
            r#"["stream","just text",{"clientId":"third"}]"#,
            r#"["stream"]"#,
            r#"[7,{"clientId":"n"}]"#,
            r#"[7.5e3,{"clientId":"n"}]"#,
            r#"["connect",{"clientId":"r"}]"#,
            r#"["disconnecting"]"#,
            r#"[]"#,
            r#"[{"clientId":"o"}]"#,
            r#"[null]"#,
            r#"{"clientId":"obj"}"#,
            r#""text""#,
            r#"["e",{"clientId":"a"}] "#,
            r#"["e",{"clientId":"a"}]x"#,
            r#"["e",{"clientId":"a"}"#,
            r#"["e",{"clientId":"\ud800"}]"#,
            r#"["e",{"text":"\ud800"}]"#,
            r#"["e",{"text":"\ud83d\ude00","clientId":"ok"}]"#,
            r#"["e",1e400]"#,
            r#"["e",-1e400,{"clientId":"c"}]"#,
            r#"["e",123456789012345678901234567890]"#,
            r#"["e",01]"#,
            r#"["e",{"a":tru}]"#,
            r#"["e",{"a":1,}]"#,
            r#"["e\"",{"clientId":"q\"q"}]"#,
            &deep_ok,
            &too_deep,
            &deep_key,
        ];
        for json in cases {
            let got = scan_event(json).map(|s| {
                (
                    s.named,
                    s.client_id.map(|c| c.into_owned()),
                    s.keys_may_matter,
                )
            });
            let want = reference(json);
            match (&got, &want) {
                (Some((n, c, k)), Some((wn, wc, wk))) => {
                    assert_eq!((n, c), (wn, wc), "{json}");
                    // The pre-filter may say yes more often, never less.
                    assert!(*k || !*wk, "{json}: keys {k} vs the pre-filter's {wk}");
                }
                _ => assert_eq!(got.is_some(), want.is_some(), "{json}: {got:?} vs {want:?}"),
            }
        }
    }
}

//! A borrowed JSON tree, and the read-only view both it and [`serde_json::Value`] offer.
//!
//! The offline count reads every `thread/delta` line of every cell; as a `Value` each object is
//! an `IndexMap` (a hash table, SipHash of every key, a `String` per key and per string). A
//! [`JsonRef`] borrows its strings from the line (an escaped string is the only copy), keeps an
//! object as a `Vec` of entries and hashes nothing. It is parsed by serde_json's own
//! deserializer, so it accepts exactly what `Value` accepts (same grammar, same depth limit, same
//! numbers), and a key given twice keeps its first position and its last value, as `Value`
//! does: code written against [`JsonView`] sees the same document through either.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

/// A JSON number as serde_json hands it over (and as `serde_json::Number` keeps it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    U(u64),
    I(i64),
    F(f64),
}

impl Num {
    pub fn of_number(n: &serde_json::Number) -> Num {
        if let Some(u) = n.as_u64() {
            Num::U(u)
        } else if let Some(i) = n.as_i64() {
            Num::I(i)
        } else {
            Num::F(n.as_f64().unwrap_or(f64::NAN))
        }
    }

    pub fn as_u64(self) -> Option<u64> {
        match self {
            Num::U(u) => Some(u),
            Num::I(i) => u64::try_from(i).ok(),
            Num::F(_) => None,
        }
    }

    pub fn as_i64(self) -> Option<i64> {
        match self {
            Num::U(u) => i64::try_from(u).ok(),
            Num::I(i) => Some(i),
            Num::F(_) => None,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Num::U(u) => u as f64,
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    pub fn is_integer(self) -> bool {
        match self {
            Num::U(_) | Num::I(_) => true,
            Num::F(f) => f.fract() == 0.0,
        }
    }

    fn to_value(self) -> Value {
        match self {
            Num::U(u) => Value::Number(u.into()),
            Num::I(i) => Value::Number(i.into()),
            Num::F(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}

/// What a JSON node is, borrowed from either representation.
pub enum Kind<'v, J> {
    Null,
    Bool(bool),
    Number(Num),
    String(&'v str),
    Array(&'v [J]),
    Object,
}

/// The read-only surface the delta validator and the assembler use, so one code path serves
/// `Value` (dumps, parity, live) and [`JsonRef`] (counting).
pub trait JsonView: Sized + for<'k> std::ops::Index<&'k str, Output = Self> {
    fn kind(&self) -> Kind<'_, Self>;
    /// The member `key` of an object (`None` for anything else).
    fn get(&self, key: &str) -> Option<&Self>;
    /// Whether `f` holds for every member (`true` for a non-object).
    fn all_members(&self, f: impl FnMut(&str, &Self) -> bool) -> bool;
    /// The member count of an object, 0 otherwise.
    fn member_count(&self) -> usize;
    /// An owned copy.
    fn to_value(&self) -> Value;

    fn as_str(&self) -> Option<&str> {
        match self.kind() {
            Kind::String(s) => Some(s),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Self]> {
        match self.kind() {
            Kind::Array(a) => Some(a),
            _ => None,
        }
    }
    fn is_object(&self) -> bool {
        matches!(self.kind(), Kind::Object)
    }
    fn is_null(&self) -> bool {
        matches!(self.kind(), Kind::Null)
    }
    /// `== true` as `Value` compares it: the boolean `true`, nothing else.
    fn is_true(&self) -> bool {
        matches!(self.kind(), Kind::Bool(true))
    }
    /// `== s` as `Value` compares it: a string equal to `s`.
    fn is_str(&self, s: &str) -> bool {
        self.as_str() == Some(s)
    }
}

impl JsonView for Value {
    fn kind(&self) -> Kind<'_, Value> {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(b) => Kind::Bool(*b),
            Value::Number(n) => Kind::Number(Num::of_number(n)),
            Value::String(s) => Kind::String(s),
            Value::Array(a) => Kind::Array(a),
            Value::Object(_) => Kind::Object,
        }
    }
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            // A scan of a few entries is cheaper than hashing the key with SipHash.
            Value::Object(m) if m.len() <= 8 => {
                m.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
            }
            Value::Object(m) => m.get(key),
            _ => None,
        }
    }
    fn all_members(&self, mut f: impl FnMut(&str, &Value) -> bool) -> bool {
        match self {
            Value::Object(m) => m.iter().all(|(k, v)| f(k, v)),
            _ => true,
        }
    }
    fn member_count(&self) -> usize {
        self.as_object().map_or(0, serde_json::Map::len)
    }
    fn to_value(&self) -> Value {
        self.clone()
    }
}

/// `value[key]` (`Null` when `value` is not an object or has no `key`) found by a scan of a
/// small object's keys instead of hashing `key` with SipHash: the grammar, the rows and the
/// wire judge read a few fields of every event, and an event object has a handful of keys.
pub trait Field {
    fn f(&self, key: &str) -> &Value;
}

static NULL_VALUE: Value = Value::Null;

impl Field for Value {
    fn f(&self, key: &str) -> &Value {
        JsonView::get(self, key).unwrap_or(&NULL_VALUE)
    }
}

/// A JSON document borrowing its strings from the text it was parsed from.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonRef<'a> {
    Null,
    Bool(bool),
    Number(Num),
    String(Cow<'a, str>),
    Array(Vec<JsonRef<'a>>),
    /// Members in first-seen order, each key once.
    Object(Vec<(Cow<'a, str>, JsonRef<'a>)>),
}

static NULL: JsonRef<'static> = JsonRef::Null;

impl<'a> JsonRef<'a> {
    /// Parses `text` as one JSON document; `None` where `serde_json::from_str::<Value>` fails.
    pub fn parse(text: &'a str) -> Option<JsonRef<'a>> {
        serde_json::from_str(text).ok()
    }

    /// Takes the member `key` out of an object (`Null` when absent).
    pub fn take(&mut self, key: &str) -> JsonRef<'a> {
        match self {
            JsonRef::Object(m) => m
                .iter_mut()
                .find(|(k, _)| k == key)
                .map_or(JsonRef::Null, |(_, v)| std::mem::replace(v, JsonRef::Null)),
            _ => JsonRef::Null,
        }
    }
}

impl<'k> std::ops::Index<&'k str> for JsonRef<'_> {
    type Output = Self;
    fn index(&self, key: &'k str) -> &Self {
        self.get(key).unwrap_or(&NULL)
    }
}

impl JsonView for JsonRef<'_> {
    fn kind(&self) -> Kind<'_, Self> {
        match self {
            JsonRef::Null => Kind::Null,
            JsonRef::Bool(b) => Kind::Bool(*b),
            JsonRef::Number(n) => Kind::Number(*n),
            JsonRef::String(s) => Kind::String(s),
            JsonRef::Array(a) => Kind::Array(a),
            JsonRef::Object(_) => Kind::Object,
        }
    }
    fn get(&self, key: &str) -> Option<&Self> {
        match self {
            JsonRef::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn all_members(&self, mut f: impl FnMut(&str, &Self) -> bool) -> bool {
        match self {
            JsonRef::Object(m) => m.iter().all(|(k, v)| f(k, v)),
            _ => true,
        }
    }
    fn member_count(&self) -> usize {
        match self {
            JsonRef::Object(m) => m.len(),
            _ => 0,
        }
    }
    fn to_value(&self) -> Value {
        match self {
            JsonRef::Null => Value::Null,
            JsonRef::Bool(b) => Value::Bool(*b),
            JsonRef::Number(n) => n.to_value(),
            JsonRef::String(s) => Value::String(s.to_string()),
            JsonRef::Array(a) => Value::Array(a.iter().map(JsonView::to_value).collect()),
            JsonRef::Object(m) => {
                let mut out = serde_json::Map::with_capacity(m.len());
                for (k, v) in m {
                    out.insert(k.to_string(), v.to_value());
                }
                Value::Object(out)
            }
        }
    }
}

/// A string borrowed from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for JsonRef<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonRef<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<JsonRef<'de>, E> {
                // As `serde_json::Number::from(i64)` keeps it: non-negative is unsigned.
                Ok(JsonRef::Number(match u64::try_from(i) {
                    Ok(u) => Num::U(u),
                    Err(_) => Num::I(i),
                }))
            }
            fn visit_u64<E>(self, u: u64) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::Number(Num::U(u)))
            }
            fn visit_f64<E>(self, f: f64) -> Result<JsonRef<'de>, E> {
                // `Value` turns a non-finite float into null.
                Ok(if f.is_finite() {
                    JsonRef::Number(Num::F(f))
                } else {
                    JsonRef::Null
                })
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::String(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::String(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::String(Cow::Owned(s)))
            }
            fn visit_none<E>(self) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::Null)
            }
            fn visit_unit<E>(self) -> Result<JsonRef<'de>, E> {
                Ok(JsonRef::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<JsonRef<'de>, D::Error> {
                Deserialize::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonRef<'de>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).clamp(4, 64));
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(JsonRef::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonRef<'de>, A::Error> {
                // Most objects of a delta line have a handful of members: one allocation.
                let mut out: Vec<(Cow<'de, str>, JsonRef<'de>)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(0).clamp(8, 64));
                while let Some(Str(k)) = map.next_key()? {
                    let v = map.next_value()?;
                    out.push((k, v));
                }
                dedup_members(&mut out);
                Ok(JsonRef::Object(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A key given twice keeps its first position and its last value (`IndexMap::insert`).
fn dedup_members(m: &mut Vec<(Cow<'_, str>, JsonRef<'_>)>) {
    if m.len() < 2 {
        return;
    }
    // Length and first byte before the bytes: most pairs differ there, without a memcmp call.
    let same = |a: &str, b: &str| {
        a.len() == b.len() && a.as_bytes().first() == b.as_bytes().first() && a == b
    };
    let has_dup = if m.len() <= 16 {
        (1..m.len()).any(|i| m[..i].iter().any(|(k, _)| same(k, &m[i].0)))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(m.len());
        !m.iter().all(|(k, _)| seen.insert(k.as_ref()))
    };
    if !has_dup {
        return;
    }
    let mut first: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out: Vec<(Cow<'_, str>, JsonRef<'_>)> = Vec::with_capacity(m.len());
    for (k, v) in m.drain(..) {
        match first.get(k.as_ref()) {
            Some(&i) => out[i].1 = v,
            None => {
                first.insert(k.to_string(), out.len());
                out.push((k, v));
            }
        }
    }
    *m = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_value_parses_and_converts_back_to_it() {
        for text in [
            r#"{"a":1,"b":[true,null,-2,3.5,"x\ny"],"c":{"d":"é\u00e9"}}"#,
            r#"{"k":1,"j":2,"k":3}"#,
            r#"[18446744073709551615,-9223372036854775808,-9223372036854775809,1e300,-0,0.0,1E2]"#,
            r#""\ud83d\ude00""#,
            "  {}  ",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let r = JsonRef::parse(text).unwrap();
            assert_eq!(r.to_value(), v, "{text}");
            assert_eq!(
                serde_json::to_string(&r.to_value()).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
        }
        for text in [
            "1e400",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "nul",
            "1 2",
            "\"\\ud800\"x",
        ] {
            assert_eq!(
                JsonRef::parse(text).is_some(),
                serde_json::from_str::<Value>(text).is_ok(),
                "{text}"
            );
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(JsonRef::parse(&deep).is_none());
        assert!(serde_json::from_str::<Value>(&deep).is_err());
    }

    #[test]
    fn duplicate_keys_keep_first_position_and_last_value() {
        let many: String = (0..40)
            .map(|i| format!("\"k{}\":{i}", i % 20))
            .collect::<Vec<_>>()
            .join(",");
        for text in [r#"{"a":1,"b":2,"a":3}"#.to_string(), format!("{{{many}}}")] {
            let v: Value = serde_json::from_str(&text).unwrap();
            let r = JsonRef::parse(&text).unwrap();
            assert_eq!(
                serde_json::to_string(&r.to_value()).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            assert_eq!(r.member_count(), v.as_object().unwrap().len());
        }
    }
}

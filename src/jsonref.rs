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

impl<'a> JsonRef<'a> {
    /// Parses the JSON text a lane's `line` stands for from the line as the lane holds it,
    /// without unescaping it first: `body` is the text between the quotes of the JSON string
    /// `line`, whose only escapes are `\"` and `\\` (see [`crate::lane::LazyLine`]), so the
    /// text it stands for is `body` with each `\"` read as `"` and each `\\` as `\`.
    ///
    /// `Some` only with the document `JsonRef::parse` gives for that text; `None` both where
    /// that fails and where this reader is not sure (an integer beyond 19 digits, a
    /// surrogate escape, nesting deeper than [`ESCAPED_MAX_DEPTH`]): the caller then unescapes
    /// and parses the general way. Strings without escapes borrow from `body`.
    pub(crate) fn parse_escaped(body: &'a str) -> Option<JsonRef<'a>> {
        let mut p = Escaped {
            s: body,
            i: 0,
            depth: 0,
        };
        p.ws();
        let v = p.value()?;
        p.ws();
        (p.i == body.len()).then_some(v)
    }
}

/// Nesting [`JsonRef::parse_escaped`] reads; deeper is left to serde_json (which refuses
/// nesting past 127).
pub const ESCAPED_MAX_DEPTH: u32 = 64;

/// The reader of [`JsonRef::parse_escaped`]: `s[i..]` is the rest of the body. In the text
/// it stands for, `"` is `\"` here and `\` is `\\`; every other character stands for itself
/// (the body has no other escape, and no control character: JSON whitespace other than the
/// space would have been escaped, so the space is the only whitespace).
struct Escaped<'a> {
    s: &'a str,
    i: usize,
    depth: u32,
}

impl<'a> Escaped<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn ws(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Option<JsonRef<'a>> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'\\' => self.string().map(JsonRef::String),
            b't' => self.word("true", JsonRef::Bool(true)),
            b'f' => self.word("false", JsonRef::Bool(false)),
            b'n' => self.word("null", JsonRef::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, w: &str, v: JsonRef<'a>) -> Option<JsonRef<'a>> {
        self.s.as_bytes()[self.i..]
            .starts_with(w.as_bytes())
            .then(|| {
                self.i += w.len();
                v
            })
    }

    fn nest(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= ESCAPED_MAX_DEPTH).then_some(())
    }

    fn object(&mut self) -> Option<JsonRef<'a>> {
        self.nest()?;
        self.i += 1; // `{`
        // As the serde visitor sizes it (no size hint from serde_json): one allocation for
        // most objects of a delta line.
        let mut out: Vec<(Cow<'a, str>, JsonRef<'a>)> = Vec::with_capacity(8);
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                if self.peek()? != b'\\' {
                    return None;
                }
                let k = self.string()?;
                self.ws();
                if self.peek()? != b':' {
                    return None;
                }
                self.i += 1;
                self.ws();
                let v = self.value()?;
                out.push((k, v));
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                    }
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        dedup_members(&mut out);
        Some(JsonRef::Object(out))
    }

    fn array(&mut self) -> Option<JsonRef<'a>> {
        self.nest()?;
        self.i += 1; // `[`
        let mut out = Vec::with_capacity(4);
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                out.push(self.value()?);
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                    }
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(JsonRef::Array(out))
    }

    /// A number as serde_json reads it (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`):
    /// an integer as `u64` (or `i64` when negative; `-0` is a float), anything with a
    /// fraction or an exponent as the correctly rounded `f64` (serde_json's
    /// `float_roundtrip`, Rust's `parse`); a float out of range is serde_json's error.
    fn number(&mut self) -> Option<JsonRef<'a>> {
        let b = self.s.as_bytes();
        let start = self.i;
        let neg = b[start] == b'-';
        let digits_from = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let int_start = start + usize::from(neg);
        let int_end = match b.get(int_start)? {
            b'0' => int_start + 1,
            b'1'..=b'9' => digits_from(int_start + 1),
            _ => return None,
        };
        let mut i = int_end;
        let mut float = false;
        if b.get(i) == Some(&b'.') {
            let d = digits_from(i + 1);
            if d == i + 1 {
                return None;
            }
            i = d;
            float = true;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let d = digits_from(i);
            if d == i {
                return None;
            }
            i = d;
            float = true;
        }
        self.i = i;
        if float {
            let f: f64 = self.s.get(start..i)?.parse().ok()?;
            return f.is_finite().then_some(JsonRef::Number(Num::F(f)));
        }
        // Up to 19 digits fit a u64 (beyond, serde_json reads a float: left to it).
        if int_end - int_start > 19 {
            return None;
        }
        let n = b[int_start..int_end]
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        Some(JsonRef::Number(match (neg, n) {
            (false, n) => Num::U(n),
            (true, 0) => Num::F(-0.0),
            (true, n) => Num::I(-(i64::try_from(n).ok()?)),
        }))
    }

    /// At `\"`, an opening quote: the string up to its closing `\"`, borrowed from the body
    /// unless it holds an escape of its own (`\\` then the escape's letter here).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let b = self.s.as_bytes();
        if b.get(self.i + 1) != Some(&b'"') {
            return None; // a `\` of the text outside a string
        }
        let start = self.i + 2;
        let mut i = start + find_backslash(&b[start..])?;
        if b.get(i + 1)? == &b'"' {
            self.i = i + 2;
            return Some(Cow::Borrowed(self.s.get(start..i)?));
        }
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(self.s.get(start..i)?);
        loop {
            // `b[i]` is a `\`: the closing quote, or the text's own `\` starting an escape.
            match b.get(i + 1)? {
                b'"' => {
                    self.i = i + 2;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {}
                _ => return None,
            }
            i += 2;
            match *b.get(i)? {
                b'\\' => {
                    // The escaped character is itself `\"` or `\\` here.
                    match b.get(i + 1)? {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        _ => return None,
                    }
                    i += 2;
                }
                b'/' => {
                    out.push('/');
                    i += 1;
                }
                c @ (b'b' | b'f' | b'n' | b'r' | b't') => {
                    out.push(match c {
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        _ => '\t',
                    });
                    i += 1;
                }
                b'u' => {
                    let hex = b.get(i + 1..i + 5)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    let n = hex
                        .iter()
                        .fold(0u32, |n, &h| n * 16 + (h as char).to_digit(16).unwrap_or(0));
                    // Surrogates (pairs, lone halves) are left to serde_json.
                    out.push(char::from_u32(n).filter(|_| !(0xD800..0xE000).contains(&n))?);
                    i += 5;
                }
                _ => return None,
            }
            let k = find_backslash(&b[i..])?;
            out.push_str(self.s.get(i..i + k)?);
            i += k;
        }
    }
}

/// The first `\` of `b`. Strings between escapes are short here (keys, ids, kinds), so the
/// first bytes are tested a word at a time, without a `memchr` call and its set-up.
fn find_backslash(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while i + 8 <= b.len() && i < 64 {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().ok()?);
        let x = w ^ (LO * u64::from(b'\\'));
        // The high bit of each zero byte of `x`; only the lowest one is exact, which is the
        // one taken.
        let hit = x.wrapping_sub(LO) & !x & HI;
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    memchr::memchr(b'\\', &b[i..]).map(|k| i + k)
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

    /// The text `body` stands for, as [`JsonRef::parse_escaped`] reads it.
    fn unescape(body: &str) -> String {
        body.replace("\\\"", "\u{0}Q")
            .replace("\\\\", "\\")
            .replace("\u{0}Q", "\"")
    }

    /// `text` as a lane holds it in `line`: the body of the JSON string the recorder writes.
    fn escaped(text: &str) -> Option<String> {
        let mut s = String::new();
        crate::jsjson::write_str(&mut s, text);
        let body = s[1..s.len() - 1].to_string();
        // Only `\"` and `\\`: what the lane reader keeps escaped.
        if !crate::lane::is_simply_escaped(&body) {
            return None;
        }
        assert_eq!(unescape(&body), text);
        Some(body)
    }

    /// The one-pass read of an escaped line is `JsonRef::parse` of its text wherever it
    /// answers, and answers for the lines recorders write.
    #[test]
    fn escaped_parse_is_the_parse_of_the_unescaped_text() {
        let fixed = [
            r#"{"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":"t","deltas":[{"kind":"turn.open"},{"kind":"x","n":[1,-2,0,-0,1.5,-1.5e-3,1E2,1234567890123456789,-9223372036854775807,0.1,1e-400,true,false,null,"",{}]}]}}"#,
            r#" { "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] } "#,
            r#"{"k":"a\"b\\c\/d\b\f\n\r\t\u00e9\u0000\uFFFF\u20ac","k":"dup"}"#,
            r#"{"s":"\ud83d\ude00"}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"s":"\udc00x"}"#,
            r#"{"s":"\u12"}"#,
            r#"{"s":"\x"}"#,
            r#"{"s":"a\"}"#,
            r#"{"a":01}"#,
            r#"{"a":1e400}"#,
            r#"[12345678901234567890,-9223372036854775808,18446744073709551615]"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":+1}"#,
            r#"{"a":tru}"#,
            r#"{"a":truex}"#,
            r#"{"a":nul}"#,
            r#"{"a":1,}"#,
            r#"[1,]"#,
            r#"{"a" 1}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}}"#,
            r#"{a:1}"#,
            r#"{"a":1"#,
            r#""#,
            r#" "#,
            r#"1"#,
            r#""x""#,
            r#"[[[[[[[[[[]]]]]]]]]]"#,
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"é😀\"}",
        ];
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut texts: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
        for n in [63, 64, 65, 127, 128, 200] {
            texts.push(deep(n));
        }
        // Generated documents: values of every kind, strings with every escape, spaces, and
        // now and then a cut or a stray character.
        const STRS: &[&str] = &[
            "a",
            "thread/delta",
            r#"\""#,
            r"\\",
            r"\/",
            r"\n",
            r"\u00e9",
            r"\u0041",
            r"\ud83d\ude00",
            r"\ud800",
            "é",
            "😀",
            " ",
            r"\t",
            r"\x",
            r"\u12",
        ];
        const NUMS: &[&str] = &[
            "0",
            "7",
            "-7",
            "-0",
            "1.25",
            "-0.5",
            "1e3",
            "2E-2",
            "1e+2",
            "99999999999999999999",
            "-9223372036854775808",
            "9223372036854775808",
            "1.7976931348623157e308",
            "5e-324",
            "0.30000000000000004",
            "123456789.123456789e-5",
            "01",
            "1.",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        fn doc(out: &mut String, depth: usize, next: &mut dyn FnMut(usize) -> usize) {
            let sp = |out: &mut String, next: &mut dyn FnMut(usize) -> usize| {
                if next(5) == 0 {
                    out.push(' ');
                }
            };
            match if depth > 4 { next(4) } else { next(7) } {
                0 => out.push_str(NUMS[next(NUMS.len())]),
                1 => out.push_str(["true", "false", "null"][next(3)]),
                2 | 3 => {
                    out.push('"');
                    for _ in 0..next(4) {
                        out.push_str(STRS[next(STRS.len())]);
                    }
                    out.push('"');
                }
                4 => {
                    out.push('[');
                    for i in 0..next(4) {
                        if i > 0 {
                            out.push(',');
                        }
                        sp(out, next);
                        doc(out, depth + 1, next);
                        sp(out, next);
                    }
                    out.push(']');
                }
                _ => {
                    out.push('{');
                    for i in 0..next(5) {
                        if i > 0 {
                            out.push(',');
                        }
                        sp(out, next);
                        out.push_str(["\"kind\"", "\"a\"", "\"b\\\"\"", "\"kind\""][next(4)]);
                        sp(out, next);
                        out.push(':');
                        sp(out, next);
                        doc(out, depth + 1, next);
                    }
                    out.push('}');
                }
            }
        }
        for _ in 0..20_000 {
            let mut t = String::new();
            doc(&mut t, 0, &mut next);
            if next(10) == 0 && !t.is_empty() {
                let at = (0..=next(t.len()))
                    .rev()
                    .find(|&i| t.is_char_boundary(i))
                    .unwrap_or(0);
                t.insert(at, [',', '"', '\\', ' ', ']', 'x'][next(6)]);
            }
            texts.push(t);
        }
        let (mut answered, mut fixed_answered) = (0, 0);
        for (n, text) in texts.iter().enumerate() {
            let Some(body) = escaped(text) else { continue };
            let want = JsonRef::parse(text);
            if let Some(got) = JsonRef::parse_escaped(&body) {
                assert_eq!(Some(&got), want.as_ref(), "{text}");
                answered += 1;
                fixed_answered += usize::from(n < 3);
            }
        }
        assert_eq!(
            fixed_answered, 3,
            "the recorder-shaped lines are read in one pass"
        );
        assert!(answered > 5_000, "{answered} answered");
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

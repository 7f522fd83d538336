//! JSON text exactly as JavaScript's `JSON.stringify` writes it ("JS JSON").
//!
//! bb's artefacts (lane entries, re-serialized lines, pins, manifests) are written by Node, and
//! bridgewire must write the same bytes so that files round-trip and diffs stay quiet. The three
//! places where a generic serializer differs are handled here:
//!
//! * key order: integer-like keys (`"0"`, `"42"`) first in ascending numeric order, then every
//!   other key in insertion order (serde_json's `preserve_order` keeps insertion order);
//! * numbers: integral doubles print without a fraction (`868`, never `868.0`), others in
//!   shortest round-trip form, with exponent form only at or above 1e21 or below 1e-6;
//! * strings: only `"`, `\` and control characters are escaped; `/`, non-ASCII, U+2028 and
//!   U+2029 are written raw; control characters use `\b \f \n \r \t` or lower-case `\u00xx`.

use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// Serializes `value` as compact JS JSON.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// Serializes `value` as "pretty JSON": two-space indentation, `": "` after keys, and a
/// trailing newline (how bb writes pins, manifests and dumps).
pub fn to_string_pretty(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_pretty(&mut out, value, 0);
    out.push('\n');
    out
}

pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in ordered_entries(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Pretty JSON of `value` as it appears nested `depth` levels deep (no leading indent, no
/// trailing newline), for documents written piece by piece.
pub fn write_pretty_at(out: &mut String, value: &Value, depth: usize) {
    write_pretty(out, value, depth);
}

fn write_pretty(out: &mut String, value: &Value, depth: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                indent(out, depth + 1);
                write_pretty(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push_str("{\n");
            for (i, (k, v)) in ordered_entries(map).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                indent(out, depth + 1);
                write_str(out, k);
                out.push_str(": ");
                write_pretty(out, v, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push('}');
        }
        other => write_value(out, other),
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// JavaScript orders "array index" keys (canonical integers below 2^32 - 1) before all others.
pub fn array_index(key: &str) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    (n < u32::MAX as u64).then_some(n as u32)
}

/// The map's entries in JavaScript property order.
pub fn ordered_entries(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if entries.iter().any(|(k, _)| array_index(k).is_some()) {
        // A stable sort keeps insertion order among the non-index keys.
        entries.sort_by_key(|(k, _)| match array_index(k) {
            Some(n) => (0u8, n),
            None => (1u8, 0),
        });
    }
    entries
}

pub fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        // JS numbers are doubles: integers above 2^53 lose precision exactly as Node's do.
        out.push_str(&format_f64(u as f64));
    } else {
        out.push_str(&format_f64(n.as_f64().unwrap_or(0.0)));
    }
}

/// Formats a double as JavaScript's `Number.prototype.toString()` does.
pub fn format_f64(x: f64) -> String {
    if x.is_nan() || x.is_infinite() {
        // JSON.stringify writes null for these.
        return "null".to_string();
    }
    if x == 0.0 {
        return "0".to_string(); // also turns -0 into 0
    }
    // `{:e}` yields the shortest round-trip digits in scientific form, e.g. `8.680833333333334e2`.
    let sci = format!("{:e}", x);
    let (mantissa, exp) = sci.split_once('e').expect("scientific form");
    let exp: i32 = exp.parse().expect("exponent");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let k = digits.len() as i32; // number of significant digits
    let n = exp + 1; // position of the decimal point relative to the digits
    let mut s = String::with_capacity(24);
    if negative {
        s.push('-');
    }
    if k <= n && n <= 21 {
        s.push_str(&digits);
        for _ in 0..(n - k) {
            s.push('0');
        }
    } else if 0 < n && n <= 21 {
        s.push_str(&digits[..n as usize]);
        s.push('.');
        s.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        s.push_str("0.");
        for _ in 0..(-n) {
            s.push('0');
        }
        s.push_str(&digits);
    } else {
        let e = n - 1;
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if e >= 0 { '+' } else { '-' });
        let _ = write!(s, "{}", e.abs());
    }
    s
}

/// Writes `s` as a JSON string literal with JS escaping.
pub fn write_str(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let mut start = 0;
    loop {
        // Escapes are ASCII, so `start` and `i` are always on character boundaries.
        let i = next_escape(bytes, start);
        out.push_str(&s[start..i]);
        if i == bytes.len() {
            break;
        }
        let (esc, len) = escape_of(bytes[i]);
        out.extend(esc[..len].iter().map(|&b| b as char));
        start = i + 1;
    }
    out.push('"');
}

/// The first position at or after `from` holding a byte JSON must escape (`"`, `\\` or a control
/// character), or `bytes.len()`. Eight bytes at a time (SWAR): this runs over every recorded byte.
#[inline]
fn next_escape(bytes: &[u8], mut from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    while from + 8 <= bytes.len() {
        let w = u64::from_le_bytes(bytes[from..from + 8].try_into().expect("8 bytes"));
        let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
        let q = w ^ (ONES * b'"' as u64);
        let quote = q.wrapping_sub(ONES) & !q;
        let b = w ^ (ONES * b'\\' as u64);
        let bslash = b.wrapping_sub(ONES) & !b;
        let hit = (ctrl | quote | bslash) & HIGHS;
        if hit != 0 {
            return from + (hit.trailing_zeros() / 8) as usize;
        }
        from += 8;
    }
    while from < bytes.len() {
        let c = bytes[from];
        if c < 0x20 || c == b'"' || c == b'\\' {
            return from;
        }
        from += 1;
    }
    from
}

/// Appends `s` as a JSON string literal to a byte buffer (the recorder's hot path).
pub fn write_str_bytes(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + bytes.len() / 8 + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        let i = next_escape(bytes, start);
        out.extend_from_slice(&bytes[start..i]);
        if i == bytes.len() {
            break;
        }
        push_escape(out, bytes[i]);
        start = i + 1;
    }
    out.push(b'"');
}

/// Appends the JSON escape of one byte that must be escaped (`"`, `\\`, or a control byte), as
/// JSON.stringify writes it: the short forms, else `\u00XX` in lower-case hex. Shared with the
/// lane writer's fast escaper.
#[inline]
pub(crate) fn push_escape(out: &mut Vec<u8>, c: u8) {
    let (esc, len) = escape_of(c);
    out.extend_from_slice(&esc[..len]);
}

/// The escape of one byte that must be escaped, and its length.
#[inline]
fn escape_of(c: u8) -> ([u8; 6], usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = |e: u8| ([b'\\', e, 0, 0, 0, 0], 2);
    match c {
        b'"' => short(b'"'),
        b'\\' => short(b'\\'),
        b'\n' => short(b'n'),
        b'\r' => short(b'r'),
        b'\t' => short(b't'),
        0x08 => short(b'b'),
        0x0c => short(b'f'),
        c => (
            [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ],
            6,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_print_as_javascript_does() {
        assert_eq!(format_f64(868.0), "868");
        assert_eq!(format_f64(868.0 + 1.0 / 12.0), "868.0833333333334");
        assert_eq!(format_f64(312.0 + 1.0 / 58.0), "312.01724137931035");
        assert_eq!(format_f64(3030.0 + 1.0 / 3.0), "3030.3333333333335");
        assert_eq!(format_f64(-0.0), "0");
        assert_eq!(format_f64(1e21), "1e+21");
        assert_eq!(format_f64(1e20), "100000000000000000000");
        assert_eq!(format_f64(1e-7), "1e-7");
        assert_eq!(format_f64(0.000001), "0.000001");
        assert_eq!(format_f64(1.5e-7), "1.5e-7");
        assert_eq!(format_f64(-2.5), "-2.5");
    }

    #[test]
    fn integer_like_keys_come_first() {
        let v: Value = serde_json::from_str(r#"{"b":1,"10":2,"a":3,"2":4,"01":5}"#).unwrap();
        assert_eq!(to_string(&v), r#"{"2":4,"10":2,"b":1,"a":3,"01":5}"#);
    }

    #[test]
    fn strings_escape_like_javascript() {
        let v = json!({"s": "a/b\u{2028}é\"\\\n\u{1}"});
        assert_eq!(to_string(&v), "{\"s\":\"a/b\u{2028}é\\\"\\\\\\n\\u0001\"}");
        let mut b = Vec::new();
        write_str_bytes(&mut b, "a/b\u{2028}é\"\\\n\u{1}");
        // Every ASCII byte value, at every alignment, escaped as serde_json escapes it (as
        // JSON.stringify does: short forms, else `\u00xx` in lower case), by both writers.
        for offset in 0..9 {
            let text: String =
                " ".repeat(offset) + &(0u8..128).map(|c| c as char).collect::<String>() + "é€😀";
            let want = serde_json::to_string(&text).unwrap();
            let mut bytes = Vec::new();
            write_str_bytes(&mut bytes, &text);
            assert_eq!(String::from_utf8(bytes).unwrap(), want);
            let mut string = String::new();
            write_str(&mut string, &text);
            assert_eq!(string, want);
        }
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "\"a/b\u{2028}é\\\"\\\\\\n\\u0001\""
        );
    }

    #[test]
    fn pretty_matches_node_layout() {
        let v = json!({"a": {"events": 1, "rows": []}, "b": [1, 2]});
        assert_eq!(
            to_string_pretty(&v),
            "{\n  \"a\": {\n    \"events\": 1,\n    \"rows\": []\n  },\n  \"b\": [\n    1,\n    2\n  ]\n}\n"
        );
    }
}

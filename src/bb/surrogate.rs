//! Lone UTF-16 surrogate escapes in a bridge's JSON (`"\ud83d"` then `"\ude00"`: what Node's
//! `JSON.stringify` writes when a bridge slices text by UTF-16 index and cuts a pair).
//!
//! The line is JSON (RFC 8259 allows any `\uXXXX` escape) and bb's runtime, JavaScript, takes it:
//! the string holds the lone surrogate, and concatenating the chunks joins the pair. serde_json
//! refuses such strings, so the line is read with each lone surrogate escape replaced by a marker
//! (a Supplementary Private Use Area-A code point, U+F0000 + the surrogate's offset in
//! D800–DFFF); after assembly, [`join`] turns each high marker followed by a low marker into the
//! character the pair encodes, and any marker left (a surrogate still unpaired) into U+FFFD, as a
//! UTF-8 encoder writes it.

use serde_json::Value;

const MARK_BASE: u32 = 0xF0000;
const SURROGATES: std::ops::RangeInclusive<u32> = 0xD800..=0xDFFF;

fn hex4(b: &[u8]) -> Option<u32> {
    let d = b.get(..4)?;
    if !d.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(d).ok()?, 16).ok()
}

/// `line` with each lone surrogate escape replaced by its marker, and how many there were;
/// `None` when it holds none (a pair of escapes is valid JSON and kept as written).
pub fn mark_lone(line: &str) -> Option<(String, usize)> {
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut n = 0;
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        let Some(u) = hex4(&b[(i + 2).min(b.len())..]) else {
            i += 2;
            continue;
        };
        if !SURROGATES.contains(&u) {
            i += 6;
            continue;
        }
        let low_next = (u < 0xDC00)
            .then(|| {
                (b.get(i + 6) == Some(&b'\\') && b.get(i + 7) == Some(&b'u'))
                    .then(|| hex4(&b[(i + 8).min(b.len())..]))
                    .flatten()
            })
            .flatten()
            .filter(|l| (0xDC00..=0xDFFF).contains(l));
        if low_next.is_some() {
            i += 12;
            continue;
        }
        out.push_str(&line[copied..i]);
        out.push(char::from_u32(MARK_BASE + (u - 0xD800)).expect("plane 15"));
        n += 1;
        i += 6;
        copied = i;
    }
    if n == 0 {
        return None;
    }
    out.push_str(&line[copied..]);
    Some((out, n))
}

fn marker(c: char) -> Option<u32> {
    let u = (c as u32).checked_sub(MARK_BASE)? + 0xD800;
    SURROGATES.contains(&u).then_some(u)
}

/// Joins each marked high surrogate followed by a marked low one into its character in every
/// string of `v`; a marker left unpaired becomes U+FFFD. Returns how many were left unpaired.
pub fn join(v: &mut Value) -> usize {
    match v {
        Value::String(s) if s.chars().any(|c| marker(c).is_some()) => {
            let (joined, lone) = join_str(s);
            *s = joined;
            lone
        }
        Value::Array(a) => a.iter_mut().map(join).sum(),
        Value::Object(o) => o.values_mut().map(join).sum(),
        _ => 0,
    }
}

fn join_str(s: &str) -> (String, usize) {
    let mut out = String::with_capacity(s.len());
    let mut lone = 0;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match marker(c) {
            None => out.push(c),
            Some(h @ 0xD800..=0xDBFF) => match chars.peek().copied().and_then(marker) {
                Some(l @ 0xDC00..=0xDFFF) => {
                    chars.next();
                    let cp = 0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00);
                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                }
                _ => {
                    lone += 1;
                    out.push('\u{FFFD}');
                }
            },
            Some(_) => {
                lone += 1;
                out.push('\u{FFFD}');
            }
        }
    }
    (out, lone)
}

/// `json` (JSON text) as JavaScript's `JSON.stringify` writes the strings bb's runtime holds:
/// a marked pair as its character, a surrogate still lone as its `\uXXXX` escape (lower-case
/// hex). A dump of a recording then shows what bb's tooling would, not a private-use marker.
pub fn as_js_json(json: String) -> String {
    // Every marker's UTF-8 starts with 0xF3 (U+F0000..U+F07FF): most texts hold none.
    if memchr::memchr(0xF3, json.as_bytes()).is_none() || !json.chars().any(|c| marker(c).is_some())
    {
        return json;
    }
    let mut out = String::with_capacity(json.len());
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        match marker(c) {
            None => out.push(c),
            Some(h @ 0xD800..=0xDBFF)
                if chars
                    .peek()
                    .copied()
                    .and_then(marker)
                    .is_some_and(|l| l >= 0xDC00) =>
            {
                let l = chars.next().and_then(marker).unwrap_or(0xDC00);
                let cp = 0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00);
                out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
            }
            Some(u) => out.push_str(&format!("\\u{u:04x}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pair_split_across_two_strings_joins_after_concatenation() {
        let line = r#"{"a":"smile \ud83d","b":"\ude00","c":"\ud83d\ude00 kept","d":"\\ud83d"}"#;
        assert!(serde_json::from_str::<Value>(line).is_err());
        let (marked, n) = mark_lone(line).unwrap();
        assert_eq!(n, 2);
        let v: Value = serde_json::from_str(&marked).unwrap();
        assert_eq!(v["c"], "😀 kept");
        assert_eq!(v["d"], "\\ud83d");
        let mut joined = json!(format!(
            "{}{}",
            v["a"].as_str().unwrap(),
            v["b"].as_str().unwrap()
        ));
        assert_eq!(join(&mut joined), 0);
        assert_eq!(joined, "smile 😀");
        let mut alone = v["a"].clone();
        assert_eq!(join(&mut alone), 1);
        assert_eq!(alone, "smile \u{FFFD}");
    }

    #[test]
    fn a_dump_writes_a_joined_pair_as_its_character_and_a_lone_half_as_its_escape() {
        let (marked, _) = mark_lone(r#"{"a":"\ud83d","b":"\ude00!","c":"x\ud83d"}"#).unwrap();
        let v: Value = serde_json::from_str(&marked).unwrap();
        let ab = format!("{}{}", v["a"].as_str().unwrap(), v["b"].as_str().unwrap());
        let text = as_js_json(serde_json::to_string(&json!([ab, v["c"]])).unwrap());
        assert_eq!(text, r#"["😀!","x\ud83d"]"#);
        assert_eq!(as_js_json("plain é".into()), "plain é");
    }

    #[test]
    fn lines_without_lone_surrogates_are_left_alone() {
        assert_eq!(mark_lone(r#"{"a":"\ud83d\ude00 \u00e9 \\u"}"#), None);
        assert_eq!(mark_lone(r#"{"a":"\u12"}"#), None);
        assert_eq!(mark_lone("\\"), None);
    }
}

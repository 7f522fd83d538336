//! Lanes: seq-ordered NDJSON files, one per direction, in bb's recording format.
//!
//! # Format
//!
//! One JSON object per line, written as JS JSON (see [`crate::jsjson`]) and ended by `\n`, with
//! keys exactly in the order `ts`, `run`, `seq`, `dir`, `line`:
//!
//! ```text
//! {"ts":1790000000123,"run":1790000000001,"seq":7,"dir":"runtime→bridge","line":"{\"jsonrpc\":\"2.0\",…}"}
//! ```
//!
//! * `ts`: wall clock in ms when the line crossed; informational, never used for ordering.
//! * `run`: ms timestamp identifying the recording process; a missing `run` reads as 0.
//! * `seq`: one counter across every lane of a process, starting at 1; fractional only in
//!   re-recorded `.current` lanes. `(run, seq)` totally orders the lines of a scope.
//! * `dir`: the direction, spelled with U+2192 (`bridge→runtime`); must equal the file's stem.
//! * `line`: the raw line without its terminator.
//!
//! Extra keys are allowed and kept. bridgewire adds one of its own, `lineBase64`, only when the
//! raw bytes were not valid UTF-8: `line` then holds the lossy text (U+FFFD) that bb's decoder
//! would have produced and `lineBase64` the exact bytes, so nothing is lost.
//!
//! Files live at `<root>/[<provider>/]<scope>/<dir>.ndjson`; `<scope>` comes from
//! [`scope_dir_name`].

pub mod merge;
pub mod read;
pub mod write;

use serde_json::{Map, Value};
use std::cmp::Ordering;

/// The bb directions in bb's reader concatenation order (which breaks `(run, seq)` ties).
pub const BB_DIRECTIONS: [&str; 4] = [
    "runtime→bridge",
    "bridge→runtime",
    "provider→bridge",
    "bridge→provider",
];

/// The re-recorded bridge→runtime lane written by `rerecord` (bb §2.6).
pub const CURRENT_SUFFIX: &str = ".current";

/// One recorded line.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub ts: f64,
    pub run: f64,
    pub seq: f64,
    pub dir: String,
    pub line: String,
    /// Keys other than the five above, in file order.
    pub extra: Map<String, Value>,
}

/// Entries of `(dir, line)`s, in order, in one run (seq and ts their index): what unit tests
/// feed a model or a player.
#[cfg(test)]
pub fn test_entries(lines: &[(&str, &str)]) -> Vec<Entry> {
    lines
        .iter()
        .enumerate()
        .map(|(k, (dir, line))| Entry {
            ts: k as f64,
            run: 1.0,
            seq: k as f64,
            dir: dir.to_string(),
            line: line.to_string(),
            extra: Default::default(),
        })
        .collect()
}

/// [`test_entries`], each line on the connection beside it in `conns` ([`Entry::conn`];
/// `None`: not said).
#[cfg(test)]
pub fn test_entries_on(lines: &[(&str, &str)], conns: &[Option<u64>]) -> Vec<Entry> {
    test_entries(lines)
        .into_iter()
        .zip(conns)
        .map(|(mut e, conn)| {
            if let Some(c) = conn {
                e.extra.insert("conn".into(), Value::from(*c));
            }
            e
        })
        .collect()
}

impl Entry {
    /// The total order of a scope's lines.
    pub fn key(&self) -> SeqKey {
        SeqKey {
            run: self.run,
            seq: self.seq,
        }
    }

    /// Which of its scope's connections carried the line, when the recorder said
    /// ([`write::Line::conn`]).
    pub fn conn(&self) -> Option<u64> {
        self.extra.get("conn").and_then(Value::as_u64)
    }

    /// Serializes the entry as one lane line (without the trailing newline).
    pub fn to_line(&self) -> String {
        let mut out = String::with_capacity(self.line.len() + 96);
        out.push_str("{\"ts\":");
        out.push_str(&crate::jsjson::format_f64(self.ts));
        out.push_str(",\"run\":");
        out.push_str(&crate::jsjson::format_f64(self.run));
        out.push_str(",\"seq\":");
        out.push_str(&crate::jsjson::format_f64(self.seq));
        out.push_str(",\"dir\":");
        crate::jsjson::write_str(&mut out, &self.dir);
        out.push_str(",\"line\":");
        crate::jsjson::write_str(&mut out, &self.line);
        for (k, v) in crate::jsjson::ordered_entries(&self.extra) {
            out.push(',');
            crate::jsjson::write_str(&mut out, k);
            out.push(':');
            crate::jsjson::write_value(&mut out, v);
        }
        out.push('}');
        out
    }

    /// The raw bytes of the line: `lineBase64` when present, else `line`.
    pub fn raw_bytes(&self) -> Vec<u8> {
        if let Some(Value::String(b64)) = self.extra.get("lineBase64")
            && let Some(bytes) = crate::util::base64_decode(b64)
        {
            return bytes;
        }
        self.line.as_bytes().to_vec()
    }
}

/// An [`Entry`] as the counting path reads it: `line` may still be in the form the lane holds
/// it (see [`LazyLine`]), so it is unescaped only if it is read as text.
#[derive(Debug, Clone, PartialEq)]
pub struct LazyEntry {
    pub ts: f64,
    pub run: f64,
    pub seq: f64,
    pub dir: String,
    pub line: LazyLine,
    pub extra: Map<String, Value>,
}

impl LazyEntry {
    pub fn key(&self) -> SeqKey {
        SeqKey {
            run: self.run,
            seq: self.seq,
        }
    }

    pub fn into_entry(self) -> Entry {
        Entry {
            ts: self.ts,
            run: self.run,
            seq: self.seq,
            dir: self.dir,
            line: self.line.into_text(),
            extra: self.extra,
        }
    }
}

impl From<Entry> for LazyEntry {
    fn from(e: Entry) -> LazyEntry {
        LazyEntry {
            ts: e.ts,
            run: e.run,
            seq: e.seq,
            dir: e.dir,
            line: LazyLine::text(e.line),
            extra: e.extra,
        }
    }
}

/// A lane entry's `line`: the text, or the body of the JSON string that holds it in the lane
/// (between its quotes) when that body's only escapes are `\"` and `\\`, as every recorder
/// writes a line of JSON. Such a body is parsed in one pass
/// ([`crate::jsonref::JsonRef::parse_escaped`]) instead of unescaped and then parsed, and
/// searched as it is: a text without `"` and `\` occurs in the body exactly where it occurs
/// in the text (an escape here stands for a `"` or a `\`, and a character of the text that
/// is neither stands for itself).
#[derive(Debug, Clone, PartialEq)]
pub struct LazyLine {
    body: String,
    /// `body` is escaped: no raw `"`, no control character, no escape but `\"` and `\\`.
    escaped: bool,
}

impl LazyLine {
    pub fn text(text: String) -> LazyLine {
        LazyLine {
            body: text,
            escaped: false,
        }
    }

    /// `body` must hold what [`LazyLine`] says of an escaped body (the lane reader checks it).
    pub(crate) fn escaped(body: String) -> LazyLine {
        debug_assert!(is_simply_escaped(&body), "{body}");
        LazyLine {
            body,
            escaped: true,
        }
    }

    /// The escaped body, when the line is held escaped.
    pub fn escaped_body(&self) -> Option<&str> {
        self.escaped.then_some(self.body.as_str())
    }

    /// The body as held: the text, or the escaped body (see [`LazyLine`] for what a search
    /// in it finds).
    pub fn held(&self) -> &[u8] {
        self.body.as_bytes()
    }

    pub fn to_text(&self) -> std::borrow::Cow<'_, str> {
        if self.escaped {
            std::borrow::Cow::Owned(unescape_simple(&self.body))
        } else {
            std::borrow::Cow::Borrowed(&self.body)
        }
    }

    pub fn into_text(self) -> String {
        if self.escaped {
            unescape_simple(&self.body)
        } else {
            self.body
        }
    }
}

/// `body` with each `\"` read as `"` and each `\\` as `\` (its only escapes).
fn unescape_simple(body: &str) -> String {
    let b = body.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while let Some(k) = b.get(i..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        // Cut before a `\` and after the ASCII character it escapes: on character boundaries.
        out.push_str(body.get(i..i + k).unwrap_or(""));
        match b.get(i + k + 1) {
            Some(b'"') => out.push('"'),
            _ => out.push('\\'),
        }
        i += k + 2;
    }
    out.push_str(body.get(i..).unwrap_or(""));
    out
}

/// What [`LazyLine::escaped`] requires of a body: its only escapes are `\"` and `\\`, and it
/// holds no raw quote or control character.
pub(crate) fn is_simply_escaped(body: &str) -> bool {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if matches!(b.get(i + 1), Some(b'"' | b'\\')) => i += 2,
            b'\\' | b'"' | 0..0x20 => return false,
            _ => i += 1,
        }
    }
    true
}

/// `(run, seq)`, compared numerically (a total order over doubles).
#[derive(Debug, Clone, Copy)]
pub struct SeqKey {
    pub run: f64,
    pub seq: f64,
}

impl Ord for SeqKey {
    fn cmp(&self, other: &SeqKey) -> Ordering {
        self.run
            .total_cmp(&other.run)
            .then(self.seq.total_cmp(&other.seq))
    }
}

impl PartialOrd for SeqKey {
    fn partial_cmp(&self, other: &SeqKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for SeqKey {
    fn eq(&self, other: &SeqKey) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for SeqKey {}

/// The scope directory name for a thread id, as bb derives it (§1.4), made safe.
///
/// 1. none → `_process`;
/// 2. every maximal run of characters outside `[A-Za-z0-9_.-]` becomes one `-`;
/// 3. a result starting with `_` gets the prefix `t-`, so no thread can be named `_process`.
///
/// bridgewire adds three guards bb lacks, because a scope name must never leave the recording
/// folder or collide with `_process`: an empty thread id (which bb files under `_process`, mixing
/// a malformed thread's lines into the process scope) becomes `t-`; a result made only of dots
/// (`.`, `..`) gets the `t-` prefix too; and a name longer than 200 bytes is cut and suffixed
/// with a hash of the full id so distinct ids stay distinct.
pub fn scope_dir_name(thread_id: Option<&str>) -> String {
    let id = match thread_id {
        None => return "_process".to_string(),
        Some(id) => id,
    };
    let mut out = String::with_capacity(id.len());
    let mut in_run = false;
    for c in id.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    if out.starts_with('_') || out.chars().all(|c| c == '.') {
        out.insert_str(0, "t-");
    }
    if out.len() > 200 {
        let hash = crate::util::fnv1a64(id.as_bytes());
        out.truncate(200);
        out.push_str(&format!("~{hash:016x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_follow_bb() {
        let cases = [
            (None, "_process"),
            (Some("thr_a7w5btqn3h"), "thr_a7w5btqn3h"),
            (Some("a b/c"), "a-b-c"),
            (Some("a::/b"), "a-b"),
            (Some("é"), "-"),
            (Some("_process"), "t-_process"),
            (Some("_x"), "t-_x"),
        ];
        for (id, want) in cases {
            assert_eq!(scope_dir_name(id), want, "{id:?}");
        }
    }

    #[test]
    fn scope_names_never_escape() {
        assert_eq!(scope_dir_name(Some("../../x")), "..-..-x");
        assert_eq!(scope_dir_name(Some("..")), "t-..");
        assert_eq!(
            scope_dir_name(Some("")),
            "t-",
            "an empty id is not the process scope"
        );
        assert_eq!(scope_dir_name(Some(".")), "t-.");
        let long = "x".repeat(5000);
        let name = scope_dir_name(Some(&long));
        assert!(name.len() < 255);
        assert_ne!(name, scope_dir_name(Some(&"x".repeat(5001))));
    }

    #[test]
    fn entry_line_is_bb_shaped() {
        let e = Entry {
            ts: 1790000000123.0,
            run: 1790000000001.0,
            seq: 868.0 + 1.0 / 12.0,
            dir: "bridge→runtime".into(),
            line: "{\"a\":\"/\"}".into(),
            extra: Map::new(),
        };
        assert_eq!(
            e.to_line(),
            r#"{"ts":1790000000123,"run":1790000000001,"seq":868.0833333333334,"dir":"bridge→runtime","line":"{\"a\":\"/\"}"}"#
        );
    }
}

//! Streaming lane reader: one entry at a time, bounded memory, every problem named by
//! `file:line`.

use super::{Entry, LazyEntry, LazyLine};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// The longest lane line read whole: bb's largest JSON-RPC line is 64 MiB; a longer entry line
/// is skipped (never buffered) and reported.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{}:{line}: {kind}", path.display())]
pub struct LaneError {
    pub path: PathBuf,
    /// 1-based line number; 0 for file-level problems.
    pub line: u64,
    pub kind: LaneErrorKind,
}

impl LaneError {
    /// A recorder killed mid-write leaves a cut last line: worth a warning, not a failure.
    pub fn is_warning(&self) -> bool {
        matches!(self.kind, LaneErrorKind::TruncatedLastLine)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LaneErrorKind {
    #[error("cannot read: {0}")]
    Io(String),
    #[error("not valid UTF-8 (byte {0} of the line)")]
    NotUtf8(usize),
    #[error("not a JSON lane entry: {0}")]
    Json(String),
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    #[error("field `{field}` must be {want}")]
    WrongType {
        field: &'static str,
        want: &'static str,
    },
    #[error("`dir` is {found:?} but the file holds {expected:?}")]
    DirMismatch { expected: String, found: String },
    #[error("line of {0} bytes exceeds the {1}-byte limit; skipped")]
    TooLong(usize, usize),
    #[error(
        "last line is cut short (no newline, not valid JSON): a recorder killed mid-write; ignored"
    )]
    TruncatedLastLine,
}

/// Reads entries from one lane file.
pub struct LaneReader<R> {
    path: PathBuf,
    reader: R,
    expected_dir: Option<String>,
    max_line: usize,
    line_no: u64,
    buf: Vec<u8>,
    done: bool,
    /// Lines may stay escaped ([`LazyLine`]): for [`LaneReader::next_lazy`].
    lazy: bool,
}

impl LaneReader<BufReader<File>> {
    /// Opens `path`; entries must carry `dir == expected_dir` when it is given.
    pub fn open(path: &Path, expected_dir: Option<&str>) -> Result<Self, LaneError> {
        let file = File::open(path).map_err(|e| LaneError {
            path: path.to_path_buf(),
            line: 0,
            kind: LaneErrorKind::Io(e.to_string()),
        })?;
        Ok(Self::new(
            BufReader::with_capacity(256 * 1024, file),
            path,
            expected_dir,
        ))
    }
}

impl<R: BufRead> LaneReader<R> {
    pub fn new(reader: R, path: &Path, expected_dir: Option<&str>) -> Self {
        LaneReader {
            path: path.to_path_buf(),
            reader,
            expected_dir: expected_dir.map(str::to_string),
            max_line: DEFAULT_MAX_LINE,
            line_no: 0,
            buf: Vec::new(),
            done: false,
            lazy: false,
        }
    }

    /// [`LaneReader::next_lazy`] keeps a line escaped when it can (see [`LazyLine`]).
    pub fn lazy_lines(mut self) -> Self {
        self.lazy = true;
        self
    }

    pub fn with_max_line(mut self, max: usize) -> Self {
        self.max_line = max;
        self
    }

    fn err(&self, kind: LaneErrorKind) -> LaneError {
        LaneError {
            path: self.path.clone(),
            line: self.line_no,
            kind,
        }
    }

    /// Reads the next physical line into `self.buf`. Returns `Ok(None)` at end of file,
    /// `Ok(Some(terminated))` otherwise; an over-long line is drained and reported.
    fn next_line(&mut self) -> io::Result<Option<Result<bool, usize>>> {
        self.buf.clear();
        let mut total = 0usize;
        let mut too_long = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                if total == 0 {
                    return Ok(None);
                }
                return Ok(Some(if too_long { Err(total) } else { Ok(false) }));
            }
            let (take, found) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let content = if found { &chunk[..take - 1] } else { chunk };
            total += content.len();
            if !too_long {
                if total > self.max_line {
                    too_long = true;
                    self.buf = Vec::new(); // release the memory at once
                } else {
                    self.buf.extend_from_slice(content);
                }
            }
            self.reader.consume(take);
            if found {
                return Ok(Some(if too_long { Err(total) } else { Ok(true) }));
            }
        }
    }
}

impl<R: BufRead> Iterator for LaneReader<R> {
    type Item = Result<Entry, LaneError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_with(parse_entry)
    }
}

impl<R: BufRead> LaneReader<R> {
    /// The next entry with its `line` kept escaped where it can be (after
    /// [`LaneReader::lazy_lines`]; otherwise as [`Iterator::next`] reads it).
    pub fn next_lazy(&mut self) -> Option<Result<LazyEntry, LaneError>> {
        if self.lazy {
            self.next_with(parse_entry_lazy)
        } else {
            self.next_with(|b, dir| parse_entry(b, dir).map(LazyEntry::from))
        }
    }

    fn next_with<T>(
        &mut self,
        parse: impl Fn(&[u8], Option<&str>) -> Result<T, LaneErrorKind>,
    ) -> Option<Result<T, LaneError>> {
        loop {
            if self.done {
                return None;
            }
            let terminated = match self.next_line() {
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Ok(Some(Err(len))) => {
                    self.line_no += 1;
                    return Some(Err(self.err(LaneErrorKind::TooLong(len, self.max_line))));
                }
                Ok(Some(Ok(t))) => t,
                Err(e) => {
                    self.done = true;
                    self.line_no += 1;
                    return Some(Err(self.err(LaneErrorKind::Io(e.to_string()))));
                }
            };
            self.line_no += 1;
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                continue; // bb skips empty lines
            }
            let result = parse(&self.buf, self.expected_dir.as_deref());
            return Some(match result {
                Ok(e) => Ok(e),
                Err(LaneErrorKind::Json(_)) if !terminated => {
                    Err(self.err(LaneErrorKind::TruncatedLastLine))
                }
                // Cut in the middle of a multi-byte character: the same cut last line.
                Err(LaneErrorKind::NotUtf8(_))
                    if !terminated
                        && std::str::from_utf8(&self.buf)
                            .is_err_and(|e| e.error_len().is_none()) =>
                {
                    Err(self.err(LaneErrorKind::TruncatedLastLine))
                }
                Err(kind) => Err(self.err(kind)),
            });
        }
    }
}

/// Parses one lane line into an [`Entry`].
pub fn parse_entry(bytes: &[u8], expected_dir: Option<&str>) -> Result<Entry, LaneErrorKind> {
    let text = std::str::from_utf8(bytes).map_err(|e| LaneErrorKind::NotUtf8(e.valid_up_to()))?;
    if let Some(entry) = parse_canonical(text) {
        if let Some(expected) = expected_dir
            && entry.dir != expected
        {
            return Err(LaneErrorKind::DirMismatch {
                expected: expected.to_string(),
                found: entry.dir,
            });
        }
        return Ok(entry);
    }
    parse_entry_general(text, expected_dir)
}

/// [`parse_entry`] keeping `line` escaped where it can ([`LazyLine`]): the same entry, the
/// same errors.
pub fn parse_entry_lazy(
    bytes: &[u8],
    expected_dir: Option<&str>,
) -> Result<LazyEntry, LaneErrorKind> {
    let text = std::str::from_utf8(bytes).map_err(|e| LaneErrorKind::NotUtf8(e.valid_up_to()))?;
    if let Some((ts, run, seq, dir, line)) = parse_canonical_with(text, canonical_line_lazy) {
        if let Some(expected) = expected_dir
            && dir != expected
        {
            return Err(LaneErrorKind::DirMismatch {
                expected: expected.to_string(),
                found: dir,
            });
        }
        return Ok(LazyEntry {
            ts,
            run,
            seq,
            dir,
            line,
            extra: Map::new(),
        });
    }
    parse_entry_general(text, expected_dir).map(LazyEntry::from)
}

/// The string `line` at `at` as a [`LazyLine`]: its body as it is when its only escapes are
/// `\"` and `\\`, else unescaped ([`canonical_string`]); `None` where that gives `None`.
fn canonical_line_lazy(text: &str, at: &mut usize) -> Option<LazyLine> {
    let b = text.as_bytes();
    if b.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let mut i = start;
    loop {
        // The next quote, backslash or control character. A body has a `\"` every few bytes
        // (around each key of the line), so a word at a time, inline: a call per stop
        // ([`string_special`]) cost about as much as unescaping the body.
        if i + 8 <= b.len() {
            let hit = special_bytes(u64::from_le_bytes(b[i..i + 8].try_into().ok()?));
            if hit == 0 {
                i += 8;
                continue;
            }
            i += (hit.trailing_zeros() / 8) as usize;
        } else {
            i += b[i..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        }
        match b[i] {
            b'"' => {
                *at = i + 1;
                return Some(LazyLine::escaped(text[start..i].to_string()));
            }
            b'\\' if matches!(b.get(i + 1), Some(b'"' | b'\\')) => i += 2,
            // Another escape (`\n`, `\u…`, `\/`): unescaped now, from the opening quote.
            b'\\' => return canonical_string(text, at).map(LazyLine::text),
            _ => return None, // a control character
        }
    }
}

/// The layout every recorder writes, `{"ts":N,"run":N,"seq":N,"dir":"…","line":"…"}` (`run`
/// optional, no other keys, no whitespace), read without building JSON values; `None` for
/// anything else (which [`parse_entry_general`] then reads or names as an error), so the result
/// is always the general parser's.
fn parse_canonical(text: &str) -> Option<Entry> {
    let (ts, run, seq, dir, line) = parse_canonical_with(text, canonical_string)?;
    Some(Entry {
        ts,
        run,
        seq,
        dir,
        line,
        extra: Map::new(),
    })
}

/// [`parse_canonical`]'s reading, with `line` read by `read_line`.
fn parse_canonical_with<L>(
    text: &str,
    read_line: impl Fn(&str, &mut usize) -> Option<L>,
) -> Option<(f64, f64, f64, String, L)> {
    let b = text.as_bytes();
    let mut at = b"{\"ts\":".len();
    if !b.starts_with(b"{\"ts\":") {
        return None;
    }
    let ts = canonical_number(b, &mut at)?;
    let run = if b[at..].starts_with(b",\"run\":") {
        at += b",\"run\":".len();
        canonical_number(b, &mut at)?
    } else {
        0.0
    };
    at = expect(b, at, b",\"seq\":")?;
    let seq = canonical_number(b, &mut at)?;
    at = expect(b, at, b",\"dir\":")?;
    let dir = canonical_string(text, &mut at)?;
    at = expect(b, at, b",\"line\":")?;
    let line = read_line(text, &mut at)?;
    if &b[at..] != b"}" {
        return None;
    }
    Some((ts, run, seq, dir, line))
}

fn expect(b: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    b[at..].starts_with(word).then_some(at + word.len())
}

/// A non-negative JSON number (`0|[1-9][0-9]*` with optional fraction and exponent) as f64;
/// Rust's parse rounds correctly, as serde_json's `float_roundtrip` does.
fn canonical_number(b: &[u8], at: &mut usize) -> Option<f64> {
    let start = *at;
    if let Some((n, end)) = plain_decimal(b, start) {
        *at = end;
        return Some(n);
    }
    canonical_number_general(b, at)
}

/// [`canonical_number`] for every shape.
fn canonical_number_general(b: &[u8], at: &mut usize) -> Option<f64> {
    let start = *at;
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    let mut i = start;
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return None;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return None;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return None;
        }
    }
    *at = i;
    if let Some(n) = crate::util::small_integer(&b[start..i]) {
        return Some(n);
    }
    let n: f64 = std::str::from_utf8(&b[start..i]).ok()?.parse().ok()?;
    n.is_finite().then_some(n)
}

/// The common `ts`/`run`/`seq` shapes, `[1-9][0-9]*` or `0` with an optional `.[0-9]+` and
/// no exponent, read while they are scanned (each number was scanned, then its digits read
/// again, then a decimal one validated as UTF-8 and parsed by `str::parse`): when the digits
/// make an integer `m < 2^53` and the fraction has at most 22 digits, `m / 10^k` is the
/// correctly rounded value (both are exact doubles and IEEE division rounds correctly:
/// Clinger's fast path, which `str::parse` takes too). `None` for anything else.
fn plain_decimal(b: &[u8], start: usize) -> Option<(f64, usize)> {
    /// Exact powers of ten as doubles.
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let mut m: u64 = 0;
    let mut i = start;
    while let Some(&c) = b.get(i)
        && c.is_ascii_digit()
        && i - start < 19
    {
        m = m * 10 + u64::from(c - b'0');
        i += 1;
    }
    let int_digits = i - start;
    if int_digits == 0 || (int_digits > 1 && b[start] == b'0') {
        return None;
    }
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        let f = i + 1;
        let mut j = f;
        while let Some(&c) = b.get(j)
            && c.is_ascii_digit()
            && j - f + int_digits < 19
        {
            m = m * 10 + u64::from(c - b'0');
            j += 1;
        }
        frac = j - f;
        if frac == 0 {
            return None;
        }
        i = j;
    }
    // A digit left over (more than 19 in all), an exponent, or too big for an exact double:
    // left to the general reading.
    if matches!(b.get(i), Some(b'0'..=b'9' | b'e' | b'E' | b'.')) || m >= 1 << 53 || frac > 22 {
        return None;
    }
    Some((m as f64 / POW10[frac], i))
}

/// A JSON string at `at` (opening quote included), unescaped; `None` on anything a JSON
/// parser would refuse (control characters, bad escapes, lone surrogates).
fn canonical_string(text: &str, at: &mut usize) -> Option<String> {
    let b = text.as_bytes();
    if b.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let first = start + string_special(&b[start..])?;
    match b[first] {
        b'"' => {
            *at = first + 1;
            return Some(text[start..first].to_string());
        }
        b'\\' => {}
        _ => return None, // a control character
    }
    // Escaped (every `line` is: `\"` around each key), so runs between escapes are short.
    // `out` is sized once to the rest of the text: the unescaped string is never longer than
    // what it was read from (an escape is at least as long as what it stands for), so `o`,
    // the bytes written, stays at or below `i - start` and every store below is in bounds.
    // A run is copied a word at a time, a fixed-size store past it that the next store or
    // the final cut overwrites, without a `memcpy` call or the `Vec`'s length bookkeeping
    // per run.
    let mut out = vec![0u8; b.len() - start];
    let mut o = first - start;
    out[..o].copy_from_slice(&b[start..first]);
    let mut i = first;
    loop {
        // `b[i]` is a backslash.
        let esc = *b.get(i + 1)?;
        i += 2;
        match esc {
            b'"' | b'\\' | b'/' => {
                out[o] = esc;
                o += 1;
            }
            b'b' | b'f' | b'n' | b'r' | b't' => {
                out[o] = match esc {
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    _ => b'\t',
                };
                o += 1;
            }
            b'u' => {
                let hi = hex4(b, i)?;
                i += 4;
                let c = if (0xD800..0xDC00).contains(&hi) {
                    if b.get(i..i + 2)? != b"\\u" {
                        return None;
                    }
                    let lo = hex4(b, i + 2)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    i += 6;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                } else {
                    char::from_u32(hi)? // a lone low surrogate is refused here
                };
                o += c.encode_utf8(&mut out[o..o + c.len_utf8()]).len();
            }
            _ => return None,
        }
        // The run up to the next quote, backslash or control character.
        loop {
            if i + 8 > b.len() {
                let k = string_special(&b[i..])?;
                out[o..o + k].copy_from_slice(&b[i..i + k]);
                i += k;
                o += k;
                break;
            }
            debug_assert!(o + 8 <= out.len());
            // SAFETY: `i + 8 <= b.len()` (just checked), and `o + 8 <= out.len()` because
            // `o <= i - start` and `out.len() == b.len() - start`. Raw reads and writes here:
            // the bounds-checked slices kept twice the instructions per word in this loop,
            // the busiest of the lane reader.
            let word = unsafe { b.as_ptr().add(i).cast::<u64>().read_unaligned() };
            unsafe { out.as_mut_ptr().add(o).cast::<u64>().write_unaligned(word) };
            let hit = special_bytes(u64::from_le(word));
            if hit == 0 {
                i += 8;
                o += 8;
                continue;
            }
            let k = (hit.trailing_zeros() / 8) as usize;
            i += k;
            o += k;
            break;
        }
        match b[i] {
            b'\\' => {}
            b'"' => {
                *at = i + 1;
                out.truncate(o);
                debug_assert!(std::str::from_utf8(&out).is_ok());
                // SAFETY: `out[..o]` is `text` (valid UTF-8) with each escape replaced by the
                // UTF-8 of one `char`; its runs are contiguous pieces of `text` cut only before
                // ASCII bytes (a quote, a backslash, a control character), so never inside a
                // character. Checking it again cost 1.5 % of `pins`' instructions.
                return Some(unsafe { String::from_utf8_unchecked(out) });
            }
            _ => return None,
        }
    }
}

/// The high bit of each byte of `x` (little-endian) that is a quote, a backslash or below
/// 0x20. Bits above the first such byte can be wrong (borrows), the lowest one never is.
fn special_bytes(x: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let quote = x ^ (LO * b'"' as u64);
    let backslash = x ^ (LO * b'\\' as u64);
    (quote.wrapping_sub(LO) & !quote
        | backslash.wrapping_sub(LO) & !backslash
        | x.wrapping_sub(LO * 0x20) & !x)
        & HI
}

/// The first byte of `b` that ends a run of plain string content: a quote, a backslash or a
/// control character (which JSON refuses unescaped). Runs between escapes in a lane's `line`
/// are short (`\"` around every key), so the first bytes are tested eight at a time in a
/// word (no SIMD set-up per run); a long run goes on with `memchr2` and a check of its bytes.
fn string_special(b: &[u8]) -> Option<usize> {
    /// Words tested before a long run is left to `memchr2`.
    const WORDS: usize = 8;
    let mut i = 0;
    while i + 8 <= b.len() && i < WORDS * 8 {
        let hit = special_bytes(u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes")));
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i + 8 <= b.len() {
        let rest = &b[i..];
        let end = memchr::memchr2(b'"', b'\\', rest);
        let control = rest[..end.unwrap_or(rest.len())]
            .iter()
            .position(|&c| c < 0x20);
        return control.or(end).map(|p| i + p);
    }
    b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let s = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
    if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// Any JSON object with the five keys (any order, extra keys kept).
fn parse_entry_general(text: &str, expected_dir: Option<&str>) -> Result<Entry, LaneErrorKind> {
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = de
        .deserialize_map(RawEntryVisitor)
        .map_err(|e| LaneErrorKind::Json(e.to_string()))?;
    de.end().map_err(|e| LaneErrorKind::Json(e.to_string()))?;
    let ts = number(raw.ts, "ts")?;
    let run = match raw.run {
        None => 0.0, // bb: an entry without `run` belongs to run 0
        Some(v) => v.as_f64().ok_or(LaneErrorKind::WrongType {
            field: "run",
            want: "a number",
        })?,
    };
    let seq = number(raw.seq, "seq")?;
    let dir = string(raw.dir, "dir")?;
    let line = string(raw.line, "line")?;
    if let Some(expected) = expected_dir
        && dir != expected
    {
        return Err(LaneErrorKind::DirMismatch {
            expected: expected.to_string(),
            found: dir,
        });
    }
    Ok(Entry {
        ts,
        run,
        seq,
        dir,
        line,
        extra: raw.extra,
    })
}

fn number(v: Option<Value>, field: &'static str) -> Result<f64, LaneErrorKind> {
    match v {
        None => Err(LaneErrorKind::MissingField(field)),
        Some(v) => v.as_f64().ok_or(LaneErrorKind::WrongType {
            field,
            want: "a number",
        }),
    }
}

fn string(v: Option<Value>, field: &'static str) -> Result<String, LaneErrorKind> {
    match v {
        None => Err(LaneErrorKind::MissingField(field)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(LaneErrorKind::WrongType {
            field,
            want: "a string",
        }),
    }
}

#[derive(Default)]
struct RawEntry {
    ts: Option<Value>,
    run: Option<Value>,
    seq: Option<Value>,
    dir: Option<Value>,
    line: Option<Value>,
    extra: Map<String, Value>,
}

struct RawEntryVisitor;

impl<'de> Visitor<'de> for RawEntryVisitor {
    type Value = RawEntry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a lane entry object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntry, A::Error> {
        let mut raw = RawEntry::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "ts" => &mut raw.ts,
                "run" => &mut raw.run,
                "seq" => &mut raw.seq,
                "dir" => &mut raw.dir,
                "line" => &mut raw.line,
                _ => {
                    let v: Value = map.next_value()?;
                    raw.extra.insert(key.into_owned(), v);
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(raw)
    }
}

/// The searchers [`peek_key`] runs over every line, built once (a `memmem::find` builds one
/// per call, which showed in profiles of folders of small cells).
pub(crate) struct KeyFinders {
    pub escape: memchr::memmem::Finder<'static>,
    pub run: memchr::memmem::Finder<'static>,
    pub seq: memchr::memmem::Finder<'static>,
}

pub(crate) static KEY_FINDERS: std::sync::LazyLock<KeyFinders> =
    std::sync::LazyLock::new(|| KeyFinders {
        escape: memchr::memmem::Finder::new(b"\\u00"),
        run: memchr::memmem::Finder::new(b"\"run\""),
        seq: memchr::memmem::Finder::new(b"\"seq\""),
    });

/// Reads just `(run, seq)` of a lane line, cheaply, for the sortedness pre-scan.
pub fn peek_key(bytes: &[u8]) -> Option<super::SeqKey> {
    // Fast path for bb's fixed key order: {"ts":N,"run":N,"seq":N,...
    let rest = bytes.strip_prefix(b"{\"ts\":")?;
    let comma = memchr::memchr(b',', rest)?;
    let rest = &rest[comma + 1..];
    // Without `run` in its place the line may still carry one later (`{"ts":…,"seq":…,"run":…}`):
    // reading it as run 0 let an unsorted lane pass the pre-scan; the full parse decides.
    let r = rest.strip_prefix(b"\"run\":")?;
    let comma = memchr::memchr(b',', r)?;
    let (run, rest) = (parse_num(&r[..comma])?, &r[comma + 1..]);
    let r = rest.strip_prefix(b"\"seq\":")?;
    let comma = memchr::memchr(b',', r)?;
    // The full parse takes the last of duplicated keys (as JSON.parse does): a later `run` or
    // `seq`, or a key spelled with an escaped lower-case letter (`"s\u0065q"`), leaves the
    // answer to it. Inside a string value a quote is escaped, so `"seq"` there is a key (or the
    // rare value "seq": a harmless fallback).
    let tail = &r[comma + 1..];
    let f = &*KEY_FINDERS;
    let escaped_letter = f
        .escape
        .find_iter(tail)
        .any(|i| matches!(tail.get(i + 4), Some(b'6' | b'7')));
    if escaped_letter || f.run.find(tail).is_some() || f.seq.find(tail).is_some() {
        return None;
    }
    Some(super::SeqKey {
        run,
        seq: parse_num(&r[..comma])?,
    })
}

fn parse_num(b: &[u8]) -> Option<f64> {
    if let Some(n) = crate::util::small_integer(b) {
        return Some(n);
    }
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &[u8]) -> Vec<Result<Entry, LaneError>> {
        LaneReader::new(text, Path::new("lane.ndjson"), Some("bridge→runtime"))
            .with_max_line(200)
            .collect()
    }

    const GOOD: &str = r#"{"ts":1,"run":2,"seq":3,"dir":"bridge→runtime","line":"x"}"#;

    #[test]
    fn reads_entries_and_keeps_extra_keys() {
        let text = format!(
            "{GOOD}\n\n{}\n",
            r#"{"ts":1,"seq":4.5,"dir":"bridge→runtime","line":"y","z":[1]}"#
        );
        let got = read_all(text.as_bytes());
        assert_eq!(got.len(), 2);
        let second = got[1].as_ref().unwrap();
        assert_eq!(second.run, 0.0);
        assert_eq!(second.seq, 4.5);
        assert_eq!(second.extra["z"], serde_json::json!([1]));
    }

    #[test]
    fn names_each_bad_line() {
        let text = format!(
            "{GOOD}\nnot json\n{}\n{}\n\u{ff}\n{GOOD}\n",
            r#"{"ts":1,"seq":3,"dir":"bridge→runtime"}"#,
            r#"{"ts":1,"seq":3,"dir":"runtime→bridge","line":"x"}"#
        );
        let mut bytes = text.into_bytes();
        // replace the U+00FF (two bytes) with a single invalid byte
        let pos = bytes
            .windows(2)
            .position(|w| w == "\u{ff}".as_bytes())
            .unwrap();
        bytes.splice(pos..pos + 2, [0xffu8]);
        let got = read_all(&bytes);
        let errs: Vec<String> = got
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect();
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].starts_with("lane.ndjson:2: not a JSON lane entry"));
        assert!(errs[1].starts_with("lane.ndjson:3: missing field `line`"));
        assert!(errs[2].starts_with("lane.ndjson:4: `dir` is \"runtime→bridge\""));
        assert!(errs[3].starts_with("lane.ndjson:5: not valid UTF-8"));
        assert!(
            got.last().unwrap().is_ok(),
            "entries after bad lines still load"
        );
    }

    #[test]
    fn a_last_line_cut_inside_a_multibyte_character_is_the_cut_line_warning() {
        // issue 15 item 5: this was refused as "not valid UTF-8" (exit 2).
        let full = r#"{"ts":1,"run":1,"seq":1,"dir":"bridge→runtime","line":"x"}"#;
        let mut bytes = format!("{full}\n").into_bytes();
        let cut = r#"{"ts":1,"run":1,"seq":2,"dir":"bridge→runtime","line":"é"#.as_bytes();
        bytes.extend_from_slice(&cut[..cut.len() - 1]); // half of `é`
        let mut r = LaneReader::new(
            std::io::Cursor::new(bytes),
            std::path::Path::new("x.ndjson"),
            None,
        );
        assert!(r.next().unwrap().is_ok());
        let err = r.next().unwrap().unwrap_err();
        assert!(err.is_warning(), "{err}");
        assert!(r.next().is_none());
    }

    #[test]
    fn truncated_last_line_is_a_warning() {
        let text = format!("{GOOD}\n{{\"ts\":1,\"run\":2,\"se");
        let got = read_all(text.as_bytes());
        assert!(got[0].is_ok());
        let err = got[1].as_ref().unwrap_err();
        assert!(err.is_warning());
        assert_eq!(err.line, 2);
    }

    #[test]
    fn over_long_lines_are_skipped_not_buffered() {
        let long = format!(
            "{{\"ts\":1,\"seq\":1,\"dir\":\"bridge→runtime\",\"line\":\"{}\"}}",
            "a".repeat(500)
        );
        let text = format!("{long}\n{GOOD}\n");
        let got = read_all(text.as_bytes());
        assert!(matches!(
            got[0].as_ref().unwrap_err().kind,
            LaneErrorKind::TooLong(_, 200)
        ));
        assert!(got[1].is_ok());
    }

    /// The canonical-layout fast path reads exactly what the general parser reads, and leaves
    /// to it everything it is not sure of.
    #[test]
    fn the_fast_path_agrees_with_the_general_parser() {
        let lines = [
            GOOD.to_string(),
            r#"{"ts":1.5e3,"seq":0,"dir":"d","line":"\"q\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00 é"}"#.into(),
            r#"{"ts":0.1,"run":17e-1,"seq":12345678901234567890123,"dir":"d","line":""}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"\ud800"}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"\udc00"}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"\ud800\u0041"}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"\x"}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"\u12"}"#.into(),
            "{\"ts\":1,\"run\":2,\"seq\":3,\"dir\":\"d\",\"line\":\"a\tb\"}".into(),
            r#"{"ts":01,"run":2,"seq":3,"dir":"d","line":"x"}"#.into(),
            r#"{"ts":-1,"run":2,"seq":3,"dir":"d","line":"x"}"#.into(),
            r#"{"ts":1.,"run":2,"seq":3,"dir":"d","line":"x"}"#.into(),
            r#"{"ts":1e999,"run":2,"seq":3,"dir":"d","line":"x"}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"x","z":1}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"x"} "#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"x"}}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":1}"#.into(),
            r#"{"ts":1,"run":2,"seq":3,"dir":"d","line":"x"#.into(),
            // Runs longer than the word-at-a-time scan's reach: escapes, a control character
            // and the closing quote past it.
            format!(r#"{{"ts":1,"run":2,"seq":3,"dir":"d","line":"{}\"q\" {}"}}"#, "a".repeat(70), "é".repeat(40)),
            format!("{{\"ts\":1,\"run\":2,\"seq\":3,\"dir\":\"d\",\"line\":\"{}\u{1}\"}}", "a".repeat(90)),
            format!(r#"{{"ts":1,"run":2,"seq":3,"dir":"d","line":"{}"}}"#, "b".repeat(200)),
            format!(r#"{{"ts":1,"run":2,"seq":3,"dir":"d","line":"{}"#, "b".repeat(200)),
        ];
        for line in &lines {
            let general = parse_entry_general(line, None);
            if let Some(fast) = parse_canonical(line) {
                assert_eq!(Some(&fast), general.as_ref().ok(), "{line}");
            }
            let both = parse_entry(line.as_bytes(), None).map_err(|e| e.to_string());
            assert_eq!(both, general.map_err(|e| e.to_string()), "{line}");
            lazy_agrees(line);
        }
        assert!(parse_canonical(&lines[1]).is_some() && parse_canonical(&lines[2]).is_some());
        let n = lines.len();
        assert!(
            parse_canonical(&lines[n - 4]).is_some() && parse_canonical(&lines[n - 2]).is_some()
        );
        assert!(
            parse_canonical(&lines[n - 3]).is_none() && parse_canonical(&lines[n - 1]).is_none()
        );
    }

    /// The lazy read of `line` is [`parse_entry`]'s entry (or error), and a body it keeps
    /// escaped holds the pre-filters' texts exactly where the text does (`"method"` as
    /// `\"method\"`).
    fn lazy_agrees(line: &str) {
        let want = parse_entry(line.as_bytes(), None).map_err(|e| e.to_string());
        let lazy = parse_entry_lazy(line.as_bytes(), None);
        if let Ok(e) = &lazy
            && let Some(body) = e.line.escaped_body()
        {
            let text = e.line.to_text();
            for (needle, held) in [
                ("thread/", "thread/"),
                ("turn/", "turn/"),
                ("thread/delta", "thread/delta"),
                ("a", "a"),
                ("\"method\"", "\\\"method\\\""),
                ("\"q\"", "\\\"q\\\""),
            ] {
                assert_eq!(
                    text.contains(needle),
                    body.contains(held),
                    "{needle} in {line}"
                );
            }
        }
        let got = lazy.map(LazyEntry::into_entry).map_err(|e| e.to_string());
        assert_eq!(got, want, "{line}");
    }

    /// Generated `line` strings (plain runs of every length around the word size, every
    /// escape, surrogate pairs and lone halves, raw control characters, multi-byte
    /// characters, a raw quote): the canonical read is the general parser's, or leaves it to it.
    #[test]
    fn the_fast_path_agrees_with_the_general_parser_on_generated_strings() {
        const PIECES: &[&str] = &[
            r#"\""#,
            r"\\",
            r"\/",
            r"\b",
            r"\f",
            r"\n",
            r"\r",
            r"\t",
            r"\u00e9",
            r"\u0041",
            r"\ud83d\ude00",
            r"\ud800",
            r"\udc00",
            r"\ud800x",
            r"\u12",
            r"\x",
            "\u{1}",
            "\u{1f}",
            "é",
            "😀",
            " ",
            "\u{7f}",
            r#"""#,
            "\\",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut fast, mut total) = (0, 0);
        for _ in 0..4000 {
            let mut body = String::new();
            for _ in 0..next(12) {
                if next(3) == 0 {
                    body.push_str(PIECES[next(PIECES.len())]);
                } else {
                    let run = next(20);
                    body.extend((0..run).map(|k| (b'a' + (k % 26) as u8) as char));
                }
            }
            let line = format!(r#"{{"ts":1,"run":2,"seq":3,"dir":"d","line":"{body}"}}"#);
            let general = parse_entry_general(&line, None);
            if let Some(f) = parse_canonical(&line) {
                assert_eq!(Some(&f), general.as_ref().ok(), "{line}");
                fast += 1;
            }
            total += 1;
            let both = parse_entry(line.as_bytes(), None).map_err(|e| e.to_string());
            assert_eq!(both, general.map_err(|e| e.to_string()), "{line}");
            lazy_agrees(&line);
        }
        assert!(
            fast * 4 > total,
            "{fast} of {total} read by the canonical path"
        );
    }

    /// The word-at-a-time scan finds what a byte-by-byte one finds, at every offset and length
    /// (each special byte among neighbours that are close to it: `!`, `#`, `[`, `]`, 0x1f,
    /// 0x20, 0x7f, 0x80, 0xff).
    #[test]
    fn string_special_is_the_first_quote_backslash_or_control() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        let fillers = [b'a', b'!', b'#', b'[', b']', 0x20, 0x7f, 0x80, 0xff, 0x21];
        for len in 0..150 {
            for filler in fillers {
                let mut b = vec![filler; len];
                assert_eq!(string_special(&b), naive(&b), "len {len} filler {filler}");
                for at in 0..len {
                    for special in [b'"', b'\\', 0x00, 0x1f, 0x0a] {
                        b[at] = special;
                        assert_eq!(string_special(&b), naive(&b), "{len} {at} {special}");
                        // A second one after the first changes nothing.
                        if at + 3 < len {
                            b[at + 3] = 0x01;
                            assert_eq!(string_special(&b), naive(&b), "{len} {at} second");
                            b[at + 3] = filler;
                        }
                        b[at] = filler;
                    }
                }
            }
        }
    }

    /// The scanned decimals are `str::parse`'s values, and every other shape is left to it.
    #[test]
    fn plain_decimals_are_the_parsed_values() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut texts: Vec<String> = [
            "0",
            "1",
            "0.5",
            "517.1333333333333",
            "1787275052565",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "0.1",
            "0.30000000000000004",
            "1.50",
            "123456789012345678",
            "1234567890123456789",
            "12345678901234567890",
            "01",
            "1.",
            "1e3",
            "1.5E-2",
            "0.0000000000000000000001",
            "0.00000000000000000000001",
            ".5",
            "",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for _ in 0..50_000 {
            let width = next(17) as u32 + 1;
            let int = next(10u64.pow(width));
            let frac_len = next(20);
            let frac: String = (0..frac_len)
                .map(|_| (b'0' + next(10) as u8) as char)
                .collect();
            texts.push(if frac_len == 0 {
                int.to_string()
            } else {
                format!("{int}.{frac}")
            });
        }
        let mut fast = 0;
        for t in &texts {
            let b = format!("{t},");
            if let Some((n, end)) = plain_decimal(b.as_bytes(), 0) {
                assert_eq!(end, t.len(), "{t}");
                assert_eq!(n.to_bits(), t.parse::<f64>().unwrap().to_bits(), "{t}");
                fast += 1;
            }
            let mut at = 0;
            let mut at_slow = 0;
            let got = canonical_number(b.as_bytes(), &mut at);
            let want = canonical_number_general(b.as_bytes(), &mut at_slow);
            assert_eq!(
                (got.map(f64::to_bits), at),
                (want.map(f64::to_bits), at_slow),
                "{t}"
            );
        }
        assert!(fast > 15_000, "{fast}");
    }

    #[test]
    fn peeks_keys_fast() {
        let k = peek_key(GOOD.as_bytes()).unwrap();
        assert_eq!((k.run, k.seq), (2.0, 3.0));
        // No `run` in bb's place: left to the full parse (it may come later in the line).
        assert!(peek_key(br#"{"ts":1,"seq":868.25,"dir":"x","line":""}"#).is_none());
        assert!(peek_key(br#"{"ts":1,"seq":2,"run":5,"dir":"x","line":""}"#).is_none());
    }

    /// Duplicated keys: the full parse (serde_json, like JS `JSON.parse`) takes the last one;
    /// the fast read answers the same or leaves it to the full parse, never the first one.
    #[test]
    fn peek_key_never_takes_the_first_of_duplicated_keys() {
        for line in [
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"","seq":1}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"","run":0}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"", "seq" :1}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"","s\u0065q":1}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"","\u0072un":1}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"{\"seq\":9,\"run\":9}"}"#,
            r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"\u001b[0m"}"#,
        ] {
            let full = parse_entry(line.as_bytes(), None).unwrap().key();
            if let Some(k) = peek_key(line.as_bytes()) {
                assert_eq!((k.run, k.seq), (full.run, full.seq), "{line}");
            }
        }
        // Keys that only look alike inside the line's text are still read fast.
        let embedded = r#"{"ts":1,"run":2,"seq":3,"dir":"x","line":"{\"seq\":9,\"run\":9}"}"#;
        assert!(peek_key(embedded.as_bytes()).is_some());
    }
}

//! Pins: per-cell counts in `<recordings>/row-counts.json`, checked or rewritten on purpose.
//!
//! # Format
//!
//! Pretty JSON (two-space indent, trailing newline), one key `<provider>/<cell>` per cell in
//! sorted order, each value with exactly these keys in this order (bb's shape, §4.1):
//!
//! ```json
//! {
//!   "claude-code/fork": {
//!     "events": 11,
//!     "rows": 1,
//!     "unhandled": 0,
//!     "grammarDrops": 0
//!   }
//! }
//! ```
//!
//! `events` are assembled events that passed the grammar; `rows` are the protocol's row
//! projection of them; `unhandled` the kept `provider/unhandled` events; `grammarDrops` the
//! events the grammar refused.
//!
//! Check semantics follow bb's self-test (§4.3): `events` and `rows` must equal the pin;
//! `unhandled` and `grammarDrops` may only go down; a cell without a pin and a pin without a
//! cell both fail.

use crate::cell::Cell;
use crate::protocol::{EventSink, GrammarDrop, Model};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const PINS_FILE: &str = "row-counts.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub events: u64,
    pub rows: u64,
    pub unhandled: u64,
    pub grammar_drops: u64,
}

impl Counts {
    pub fn to_json(self) -> Value {
        json!({
            "events": self.events,
            "rows": self.rows,
            "unhandled": self.unhandled,
            "grammarDrops": self.grammar_drops,
        })
    }

    pub fn from_json(v: &Value) -> Option<Counts> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        Some(Counts {
            events: n("events")?,
            rows: n("rows")?,
            unhandled: n("unhandled")?,
            grammar_drops: n("grammarDrops")?,
        })
    }
}

/// Everything computed for one cell.
#[derive(Debug, Clone)]
pub struct CellOutcome {
    pub key: String,
    pub counts: Counts,
    /// Invalid protocol messages (counted, reported, never fatal).
    pub invalid: Vec<String>,
    pub grammar_drops: Vec<GrammarDrop>,
    /// Unreadable lane entries, named `file:line`.
    pub lane_errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Sink that counts, projects rows, and optionally streams normalized dumps.
struct CountingSink<'m> {
    model: &'m dyn Model,
    counts: Counts,
    rows: Option<Box<dyn crate::protocol::RowProjector>>,
    invalid: Vec<String>,
    drops: Vec<GrammarDrop>,
    dump: Option<Dump<'m>>,
}

struct Dump<'m> {
    out: std::io::BufWriter<std::fs::File>,
    normalizer: crate::normalize::Normalizer<'m>,
    first: bool,
}

impl CountingSink<'_> {
    /// One event that passed the grammar: counted, and given to the rows (by `push`, which
    /// hands it over in the form at hand).
    fn count(
        &mut self,
        unhandled: bool,
        push: impl FnOnce(&mut dyn crate::protocol::RowProjector),
    ) {
        self.counts.events += 1;
        if unhandled {
            self.counts.unhandled += 1;
        }
        if let Some(r) = &mut self.rows {
            push(r.as_mut());
        }
    }
}

impl EventSink for CountingSink<'_> {
    fn event(&mut self, event: Value) {
        let unhandled = self.model.is_unhandled(&event);
        self.count(unhandled, |r| r.push(&event));
        if let Some(d) = &mut self.dump {
            let v = d.normalizer.normalize(event);
            let text = self.model.dump_text(crate::jsjson::to_string_pretty(&v));
            let body = indent_block(text.trim_end());
            let _ = write!(d.out, "{}\n{}", if d.first { "[" } else { "," }, body);
            d.first = false;
        }
    }

    fn bb_event(&mut self, event: crate::bb::event::Event) {
        // A dump needs the tree; counting reads the event as it is.
        if self.dump.is_some() {
            return self.event(event.into_value());
        }
        self.count(crate::bb::is_unhandled(&event), |r| r.push_bb(&event));
    }

    fn grammar_drop(&mut self, drop: GrammarDrop) {
        self.counts.grammar_drops += 1;
        self.drops.push(drop);
    }

    fn invalid(&mut self, message: String) {
        self.invalid.push(message);
    }
}

fn indent_block(s: &str) -> String {
    s.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Computes a cell's counts from its merged view, streaming; with `dump_dir`, writes
/// `<provider>-<cell>.events.json` and `.rows.json` (normalized, pretty JSON).
pub fn compute(cell: &Cell, dump_dir: Option<&Path>) -> CellOutcome {
    let model = cell.protocol.model();
    let dump = dump_dir.and_then(|d| {
        let path = d.join(format!("{}.events.json", dump_stem(&cell.key)));
        let file = crate::lane::write::create_like_folder(&path).ok()?;
        Some(Dump {
            out: std::io::BufWriter::new(file),
            normalizer: crate::normalize::Normalizer::new(model.event_rules()),
            first: true,
        })
    });
    let mut sink = CountingSink {
        model,
        counts: Counts::default(),
        rows: Some(model.row_projector()),
        invalid: Vec::new(),
        drops: Vec::new(),
        dump,
    };
    let mut merged = cell.merged_lazy();
    model.assemble_lazy(
        cell,
        &mut std::iter::from_fn(|| merged.next_lazy()),
        &mut sink,
    );
    let report = merged.into_report();
    let projector = sink.rows.take();
    // Rows are built only for a dump; otherwise they are counted.
    let rows = match (projector, dump_dir) {
        (Some(r), Some(_)) => r.finish(),
        (Some(r), None) => {
            sink.counts.rows = r.count() as u64;
            Vec::new()
        }
        (None, _) => Vec::new(),
    };
    if dump_dir.is_some() {
        sink.counts.rows = rows.len() as u64;
    }
    if let Some(mut d) = sink.dump.take() {
        let _ = writeln!(d.out, "{}", if d.first { "[]" } else { "\n]" });
    }
    if let Some(d) = dump_dir {
        let rows = model.normalize_rows(rows);
        let _ = crate::lane::write::create_like_folder(
            &d.join(format!("{}.rows.json", dump_stem(&cell.key))),
        )
        .and_then(|mut f| {
            f.write_all(
                model
                    .dump_text(crate::jsjson::to_string_pretty(&Value::Array(rows)))
                    .as_bytes(),
            )
        });
    }
    CellOutcome {
        key: cell.key.clone(),
        counts: sink.counts,
        invalid: sink.invalid,
        grammar_drops: sink.drops,
        lane_errors: report.errors.iter().map(|e| e.to_string()).collect(),
        warnings: report.warnings,
    }
}

/// `claude-code/resume` → `claude-code-resume`, safe as a file name.
pub fn dump_stem(key: &str) -> String {
    crate::lane::scope_dir_name(Some(&key.replace('/', "-")))
}

/// The pins file as an ordered map.
pub fn load(path: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read pins: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: not valid JSON: {e}", path.display(), e.line()))?;
    let Value::Object(map) = v else {
        anyhow::bail!("{}: pins must be a JSON object", path.display());
    };
    Ok(map.into_iter().collect())
}

/// Renders pins in bb's shape: keys sorted by provider, then cell.
pub fn render(pins: &BTreeMap<String, Counts>) -> String {
    let mut map = Map::new();
    for (k, c) in pins {
        map.insert(k.clone(), c.to_json());
    }
    crate::jsjson::to_string_pretty(&Value::Object(map))
}

/// One difference between pins and actual counts.
#[derive(Debug, Clone, PartialEq)]
pub enum PinStatus {
    Match,
    /// Passes, but a count went down: `--update` would lower the pin.
    Improved {
        pinned: Counts,
    },
    Mismatch {
        pinned: Counts,
    },
    NotPinned,
}

pub fn check(actual: Counts, pinned: Option<Counts>) -> PinStatus {
    match pinned {
        None => PinStatus::NotPinned,
        Some(p) if p == actual => PinStatus::Match,
        Some(p) => {
            if p.events == actual.events
                && p.rows == actual.rows
                && actual.unhandled <= p.unhandled
                && actual.grammar_drops <= p.grammar_drops
            {
                PinStatus::Improved { pinned: p }
            } else {
                PinStatus::Mismatch { pinned: p }
            }
        }
    }
}

/// `old → new` for each field that differs.
pub fn describe_change(old: Counts, new: Counts) -> String {
    let mut parts = Vec::new();
    for (name, a, b) in [
        ("events", old.events, new.events),
        ("rows", old.rows, new.rows),
        ("unhandled", old.unhandled, new.unhandled),
        ("grammarDrops", old.grammar_drops, new.grammar_drops),
    ] {
        if a != b {
            parts.push(format!("{name} {a} → {b}"));
        }
    }
    parts.join(", ")
}

/// A pin as loaded: its counts when it has the four of them, and the original JSON when
/// that differs from what the counts print (extra keys, another key order, a malformed pin).
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    pub counts: Option<Counts>,
    /// Boxed: almost every pin has none, and a pins file can hold 10⁵ pins.
    pub raw: Option<Box<Value>>,
}

impl Pin {
    /// A pin of the four counts in [`PIN_KEYS`] order, exactly as bridgewire writes it (no
    /// other key, canonical order): nothing raw to keep.
    fn counted([events, rows, unhandled, grammar_drops]: [u64; 4]) -> Pin {
        Pin {
            counts: Some(Counts {
                events,
                rows,
                unhandled,
                grammar_drops,
            }),
            raw: None,
        }
    }

    fn from_value(v: Value) -> Pin {
        let counts = Counts::from_json(&v);
        let raw = match counts {
            Some(c) if c.to_json() == v && key_order_is_canonical(&v) => None,
            _ => Some(Box::new(v)),
        };
        Pin { counts, raw }
    }

    pub fn to_json(&self) -> Value {
        match (&self.raw, self.counts) {
            (Some(v), _) => (**v).clone(),
            (None, Some(c)) => c.to_json(),
            (None, None) => Value::Null,
        }
    }
}

fn key_order_is_canonical(v: &Value) -> bool {
    v.as_object().is_some_and(|m| {
        m.keys()
            .map(String::as_str)
            .eq(["events", "rows", "unhandled", "grammarDrops"])
    })
}

/// The keys of a pin in the order the pins file writes them.
const PIN_KEYS: [&str; 4] = ["events", "rows", "unhandled", "grammarDrops"];

/// A pin read from the file as [`Pin::from_value`] reads its tree, without building the tree
/// for the pins file's own shape (the four counts, in order, as unsigned integers): a `Value`
/// per pin (an `IndexMap`, a `String` and a SipHash per key) was most of a check's cost over
/// an update's, ~16 000 instructions a pin, twice (the order check and the stream). Anything
/// else is read into the same tree `Value` builds, from what was already read and the rest.
impl<'de> serde::Deserialize<'de> for Pin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Pin, D::Error> {
        use serde::Deserialize as _;
        use serde::de::{IntoDeserializer, MapAccess, SeqAccess, Visitor};
        /// A key of a pin: one of [`PIN_KEYS`] (by index), or any other.
        enum Key {
            Known(usize),
            Other(String),
        }
        impl Key {
            fn into_string(self) -> String {
                match self {
                    Key::Known(i) => PIN_KEYS[i].to_string(),
                    Key::Other(s) => s,
                }
            }
        }
        impl<'de> serde::Deserialize<'de> for Key {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
                struct K;
                impl Visitor<'_> for K {
                    type Value = Key;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E>(self, s: &str) -> Result<Key, E> {
                        Ok(match PIN_KEYS.iter().position(|k| *k == s) {
                            Some(i) => Key::Known(i),
                            None => Key::Other(s.to_string()),
                        })
                    }
                    fn visit_string<E>(self, s: String) -> Result<Key, E> {
                        Ok(match PIN_KEYS.iter().position(|k| *k == s) {
                            Some(i) => Key::Known(i),
                            None => Key::Other(s),
                        })
                    }
                }
                // As `Value` reads a key (`deserialize_str`), so errors are its errors.
                d.deserialize_str(K)
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pin;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any valid JSON value")
            }
            // Not an object: the tree `Value`'s own visitor builds, from the same call.
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Pin, E> {
                Value::deserialize(b.into_deserializer()).map(Pin::from_value)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Pin, E> {
                Value::deserialize(n.into_deserializer()).map(Pin::from_value)
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Pin, E> {
                Value::deserialize(n.into_deserializer()).map(Pin::from_value)
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Pin, E> {
                Value::deserialize(n.into_deserializer()).map(Pin::from_value)
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Pin, E> {
                Value::deserialize(s.into_deserializer()).map(Pin::from_value)
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Pin, E> {
                Value::deserialize(s.into_deserializer()).map(Pin::from_value)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Pin, E> {
                Value::deserialize(().into_deserializer()).map(Pin::from_value)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Pin, A::Error> {
                Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(Pin::from_value)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pin, A::Error> {
                let mut counts = [0u64; 4];
                let mut seen = 0;
                let mut ended = false;
                // The first entry that is not the next count, and its value.
                let mut other: Option<(String, Value)> = None;
                while other.is_none() {
                    let Some(key) = map.next_key::<Key>()? else {
                        ended = true;
                        break;
                    };
                    let value: Value = map.next_value()?;
                    match (&key, value.as_u64()) {
                        (Key::Known(i), Some(n)) if *i == seen && seen < 4 => {
                            counts[seen] = n;
                            seen += 1;
                        }
                        _ => other = Some((key.into_string(), value)),
                    }
                }
                if ended && seen == 4 {
                    return Ok(Pin::counted(counts));
                }
                // The tree `Value` builds: the same inserts, in the same order.
                let mut m = Map::new();
                for (k, n) in PIN_KEYS.iter().zip(counts).take(seen) {
                    m.insert(k.to_string(), Value::from(n));
                }
                if let Some((k, v)) = other {
                    m.insert(k, v);
                }
                if !ended {
                    while let Some((k, v)) = map.next_entry::<String, Value>()? {
                        m.insert(k, v);
                    }
                }
                Ok(Pin::from_value(Value::Object(m)))
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads the pins file as a stream, handing each entry to `each` in file order (no text, no
/// tree of the whole file); `each` returns `false` to stop early (not an error).
pub fn read_pins(path: &Path, mut each: impl FnMut(String, Pin) -> bool) -> anyhow::Result<()> {
    match read_pins_layout(path, &mut each) {
        Ok(()) => Ok(()),
        Err(read) => read_pins_json(path, read, each),
    }
}

/// [`read_pins`] for the layout bridgewire writes ([`write_pins`]: two-space indent, the four
/// counts in order, a newline after each line), a line at a time: serde_json's reader goes a
/// byte at a time through a line and column counter, ~8 000 instructions a pin, and the order
/// check reads the whole file before any cell is counted. On the first line that is not of
/// that layout (a key with an escape, another number, other whitespace, anything after the
/// object), `Err(n)`: the `n` pins handed to `each` so far are what serde_json reads first
/// too, and [`read_pins_json`] goes on from the start, past them.
fn read_pins_layout(path: &Path, each: &mut impl FnMut(String, Pin) -> bool) -> Result<(), usize> {
    use std::io::BufRead;
    let mut read = 0;
    let mut r =
        std::io::BufReader::with_capacity(64 << 10, std::fs::File::open(path).map_err(|_| read)?);
    let mut line = Vec::with_capacity(256);
    let mut next = |line: &mut Vec<u8>| -> bool {
        line.clear();
        matches!(r.read_until(b'\n', line), Ok(n) if n > 0)
    };
    if !next(&mut line) {
        return Err(read);
    }
    if line == b"{}\n" {
        return if next(&mut line) { Err(read) } else { Ok(()) };
    }
    if line != b"{\n" {
        return Err(read);
    }
    /// A count line: `    "<name>": <digits><end>`, the digits an unsigned integer as JSON
    /// writes it (`0` or no leading zero) that fits a `u64`.
    fn count(line: &[u8], name: &str, end: &[u8]) -> Option<u64> {
        let rest = line
            .strip_prefix(b"    \"")?
            .strip_prefix(name.as_bytes())?;
        let digits = rest.strip_prefix(b"\": ")?.strip_suffix(end)?;
        if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
            return None;
        }
        digits.iter().try_fold(0u64, |n, &d| {
            if !d.is_ascii_digit() {
                return None;
            }
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    }
    loop {
        if !next(&mut line) {
            return Err(read);
        }
        // `  "<key>": {`, the key without escapes or control characters.
        let Some(key) = line
            .strip_prefix(b"  \"")
            .and_then(|l| l.strip_suffix(b"\": {\n"))
            .filter(|k| !k.iter().any(|&c| c == b'"' || c == b'\\' || c < 0x20))
            .and_then(|k| std::str::from_utf8(k).ok())
            .map(str::to_string)
        else {
            return Err(read);
        };
        let mut counts = [0u64; 4];
        for (i, name) in PIN_KEYS.iter().enumerate() {
            let end: &[u8] = if i < 3 { b",\n" } else { b"\n" };
            counts[i] = match next(&mut line).then(|| count(&line, name, end)).flatten() {
                Some(n) => n,
                None => return Err(read),
            };
        }
        if !next(&mut line) {
            return Err(read);
        }
        let last = match line.as_slice() {
            b"  },\n" => false,
            b"  }\n" => true,
            _ => return Err(read),
        };
        if last {
            // The object's end, then nothing (serde_json allows trailing whitespace: left to it).
            let end = next(&mut line) && line == b"}\n";
            if !end || next(&mut line) {
                return Err(read);
            }
        }
        let pin = Pin::counted(counts);
        read += 1;
        if !each(key, pin) || last {
            return Ok(());
        }
    }
}

/// [`read_pins`] by serde_json, from the start, handing `each` the pins after the first `skip`.
fn read_pins_json(
    path: &Path,
    skip: usize,
    mut each: impl FnMut(String, Pin) -> bool,
) -> anyhow::Result<()> {
    use serde::de::{Deserializer, MapAccess, Visitor};
    struct Pins<F>(F, usize);
    /// The message of the error that ends a read `each` stopped.
    const STOPPED: &str = "\u{0}stopped";
    impl<'de, F: FnMut(String, Pin) -> bool> Visitor<'de> for Pins<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                let pin: Pin = map.next_value()?;
                if self.1 > 0 {
                    self.1 -= 1;
                    continue;
                }
                if !(self.0)(key, pin) {
                    return Err(serde::de::Error::custom(STOPPED));
                }
            }
            Ok(())
        }
    }
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read pins: {e}", path.display()))?;
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(64 << 10, file));
    let parsed = de
        .deserialize_map(Pins(&mut each, skip))
        .and_then(|()| de.end());
    match parsed {
        Ok(()) => Ok(()),
        Err(e) if e.to_string().starts_with(STOPPED) => Ok(()),
        Err(e) => Err(match e.classify() {
            serde_json::error::Category::Data => {
                anyhow::anyhow!("{}: pins must be a JSON object", path.display())
            }
            serde_json::error::Category::Io => {
                anyhow::anyhow!("{}: cannot read pins: {e}", path.display())
            }
            _ => anyhow::anyhow!("{}:{}: not valid JSON: {e}", path.display(), e.line()),
        }),
    }
}

/// The pins file as compact counts (no JSON tree unless a pin does not round-trip), read as a
/// stream; a key given twice keeps its last pin.
pub fn load_compact(path: &Path) -> anyhow::Result<BTreeMap<Box<str>, Pin>> {
    let mut out = BTreeMap::new();
    read_pins(path, |k, p| {
        out.insert(k.into_boxed_str(), p);
        true
    })?;
    Ok(out)
}

/// The pins of a recordings folder in key order, one at a time, for merging against the cells
/// as [`SortedCells`] walks them.
///
/// A pins file bridgewire wrote is sorted: it is read twice as a stream (once to check the
/// order and that it parses, then entry by entry from a reader thread through a bounded
/// channel), so memory does not grow with its size. A file in another order (hand-edited, a
/// key twice, array-index keys first) is loaded as compact counts instead.
pub struct PinCursor {
    head: Option<(Box<str>, Pin)>,
    source: PinSource,
}

enum PinSource {
    Empty,
    Map(std::collections::btree_map::IntoIter<Box<str>, Pin>),
    Stream {
        rx: std::sync::mpsc::Receiver<Result<Vec<(String, Pin)>, String>>,
        /// The rest of the batch last received.
        batch: std::vec::IntoIter<(String, Pin)>,
        reader: Option<std::thread::JoinHandle<()>>,
    },
}

/// Pins the reader thread sends at once. One pin a message woke the blocked reader at every
/// receive once the channel was full: a `futex` wake and sleep per pin (~30 000 `futex` calls
/// over 10 000 pinned cells, against ~200 without a pins file).
const PIN_BATCH: usize = 256;
/// Batches read ahead of the merge (the reader thread's channel): at most ~1 300 pins.
const PIN_CHANNEL: usize = 4;

impl PinCursor {
    /// No pins file: every cell is unpinned.
    pub fn empty() -> PinCursor {
        PinCursor {
            head: None,
            source: PinSource::Empty,
        }
    }

    /// Opens the pins file; the error is [`read_pins`]'s (the file is unreadable as pins).
    pub fn open(path: &Path) -> anyhow::Result<PinCursor> {
        let mut sorted = true;
        let mut last: Option<String> = None;
        read_pins(path, |k, _| {
            if last.as_ref().is_some_and(|l| *l >= k) {
                sorted = false;
                return false;
            }
            last = Some(k);
            true
        })?;
        let source = if sorted {
            let (tx, rx) = std::sync::mpsc::sync_channel(PIN_CHANNEL);
            let path = path.to_path_buf();
            let reader = std::thread::Builder::new()
                .name("pins-reader".into())
                .spawn(move || {
                    let mut batch = Vec::with_capacity(PIN_BATCH);
                    let r = read_pins(&path, |k, p| {
                        batch.push((k, p));
                        batch.len() < PIN_BATCH
                            || tx
                                .send(Ok(std::mem::replace(
                                    &mut batch,
                                    Vec::with_capacity(PIN_BATCH),
                                )))
                                .is_ok()
                    });
                    // The pins read before the end (or before the error) first.
                    if !batch.is_empty() {
                        let _ = tx.send(Ok(batch));
                    }
                    if let Err(e) = r {
                        let _ = tx.send(Err(format!("{e:#}")));
                    }
                })?;
            PinSource::Stream {
                rx,
                batch: Vec::new().into_iter(),
                reader: Some(reader),
            }
        } else {
            PinSource::Map(load_compact(path)?.into_iter())
        };
        let mut c = PinCursor { head: None, source };
        c.head = c.pull().transpose()?;
        Ok(c)
    }

    fn pull(&mut self) -> Option<anyhow::Result<(Box<str>, Pin)>> {
        match &mut self.source {
            PinSource::Empty => None,
            PinSource::Map(it) => it.next().map(Ok),
            PinSource::Stream { rx, batch, .. } => loop {
                if let Some((k, p)) = batch.next() {
                    return Some(Ok((k.into_boxed_str(), p)));
                }
                match rx.recv().ok()? {
                    Ok(b) => *batch = b.into_iter(),
                    Err(e) => {
                        self.source = PinSource::Empty;
                        return Some(Err(anyhow::anyhow!("{e}")));
                    }
                }
            },
        }
    }

    /// The next pin's key.
    pub fn peek_key(&self) -> Option<&str> {
        self.head.as_ref().map(|(k, _)| &**k)
    }

    /// Takes the next pin; an error (the file changed or failed while it was read) ends the
    /// cursor.
    pub fn advance(&mut self) -> anyhow::Result<Option<(Box<str>, Pin)>> {
        let next = match self.pull() {
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                self.head = None;
                return Err(e);
            }
            None => None,
        };
        Ok(std::mem::replace(&mut self.head, next))
    }
}

impl Drop for PinCursor {
    fn drop(&mut self) {
        if let PinSource::Stream { rx, reader, .. } = &mut self.source {
            let reader = reader.take();
            // Dropping the receiver ends the reader at its next send.
            drop(std::mem::replace(rx, std::sync::mpsc::sync_channel(0).1));
            if let Some(r) = reader {
                let _ = r.join();
            }
        }
    }
}

/// A JSON object written entry by entry in the pretty shape [`crate::jsjson::to_string_pretty`]
/// gives (two-space indent, trailing newline), to a temp file renamed into place at the end.
/// Entries are pushed in key order; array-index keys, which JavaScript order puts first, are
/// held aside (there are few) and the file is rewritten with them in front.
pub struct ObjectStream {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
    body_entries: usize,
    index_entries: Vec<(u32, String)>,
    failed: Option<std::io::Error>,
    text: String,
}

impl ObjectStream {
    pub fn new(path: &Path) -> ObjectStream {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        ObjectStream {
            path: path.to_path_buf(),
            tmp: PathBuf::from(tmp),
            out: None,
            body_entries: 0,
            index_entries: Vec::new(),
            failed: None,
            text: String::new(),
        }
    }

    /// Entries pushed so far.
    pub fn len(&self) -> usize {
        self.body_entries + self.index_entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `"key": value`, `value` already rendered at depth 1.
    pub fn push(&mut self, key: &str, value: &str) {
        self.text.clear();
        self.text.push_str("  ");
        crate::jsjson::write_str(&mut self.text, key);
        self.text.push_str(": ");
        self.text.push_str(value);
        if let Some(n) = crate::jsjson::array_index(key) {
            self.index_entries.push((n, self.text.clone()));
            return;
        }
        if self.failed.is_some() {
            return;
        }
        let first = self.body_entries == 0;
        self.body_entries += 1;
        let r = (|| {
            if self.out.is_none() {
                let f = std::fs::File::create(&self.tmp)?;
                self.out = Some(std::io::BufWriter::with_capacity(64 << 10, f));
            }
            let out = self.out.as_mut().expect("opened above");
            out.write_all(if first { b"{\n" } else { b",\n" })?;
            out.write_all(self.text.as_bytes())
        })();
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }

    /// Drops what was written (the file in place is left as it was).
    pub fn abandon(mut self) {
        self.out = None;
        let _ = std::fs::remove_file(&self.tmp);
    }

    /// Puts the object in place; with no entry, writes `{}` (`keep_empty`) or removes the file.
    pub fn finish(mut self, keep_empty: bool) -> std::io::Result<()> {
        if let Some(e) = self.failed.take() {
            self.abandon();
            return Err(e);
        }
        if self.is_empty() {
            self.out = None;
            let _ = std::fs::remove_file(&self.tmp);
            return if keep_empty {
                write_atomic(&self.tmp, &self.path, |out| out.write_all(b"{}\n"))
            } else {
                match std::fs::remove_file(&self.path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            };
        }
        let body = self.out.take();
        if self.index_entries.is_empty() {
            let mut out = body.expect("a body entry was written");
            out.write_all(b"\n}\n")?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all().ok();
            drop(file);
            return std::fs::rename(&self.tmp, &self.path);
        }
        // Array-index keys first, numerically, then the body as written.
        self.index_entries.sort_by_key(|e| e.0);
        let body_path = self.tmp.clone();
        let mut final_tmp = self.tmp.clone().into_os_string();
        final_tmp.push("2");
        let final_tmp = PathBuf::from(final_tmp);
        if let Some(mut b) = body {
            b.flush()?;
        }
        let index_entries = std::mem::take(&mut self.index_entries);
        let has_body = self.body_entries > 0;
        let r = write_atomic(&final_tmp, &self.path, |out| {
            out.write_all(b"{\n")?;
            for (i, (_, e)) in index_entries.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",\n")?;
                }
                out.write_all(e.as_bytes())?;
            }
            if has_body {
                out.write_all(b",\n")?;
                let mut f = std::io::BufReader::new(std::fs::File::open(&body_path)?);
                std::io::Read::read_exact(&mut f, &mut [0u8; 2])?; // the body's "{\n"
                std::io::copy(&mut f, out)?;
            }
            out.write_all(b"\n}\n")
        });
        let _ = std::fs::remove_file(&body_path);
        r
    }
}

impl Drop for ObjectStream {
    fn drop(&mut self) {
        // Not finished: nothing is put in place.
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `tmp` with `fill`, syncs it and renames it to `path`.
fn write_atomic(
    tmp: &Path,
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::fs::File::create(tmp)?);
    let r = fill(&mut out).and_then(|()| out.flush());
    if let Err(e) = r {
        drop(out);
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all().ok();
    drop(file);
    std::fs::rename(tmp, path)
}

/// A pin's counts as the pins file renders them at depth 1.
pub fn counts_block(c: Counts) -> String {
    format!(
        "{{\n    \"events\": {},\n    \"rows\": {},\n    \"unhandled\": {},\n    \"grammarDrops\": {}\n  }}",
        c.events, c.rows, c.unhandled, c.grammar_drops
    )
}

/// Writes pins as [`render`] does, entry by entry, through a temp file renamed into place;
/// `pins` must be sorted by key with no key twice.
pub fn write_pins(path: &Path, pins: &[(&str, Counts)]) -> std::io::Result<()> {
    debug_assert!(pins.windows(2).all(|w| w[0].0 < w[1].0), "sorted, unique");
    let mut out = ObjectStream::new(path);
    for (k, c) in pins {
        out.push(k, &counts_block(*c));
    }
    out.finish(true)
}

/// Directory entries a level of [`SortedCells`] holds at once: a directory with more children
/// is read again for each further window, so memory does not grow with its size.
const WALK_WINDOW: usize = 32 * 1024;
/// As deep as [`crate::cell::walk`] looks (the root is depth 0).
const WALK_MAX_DEPTH: usize = 6;

/// The cells below `root` (or `root` itself) in key order, as [`crate::cell::discover`] finds
/// them, one at a time and without holding a listing of the folder: each directory is read
/// in windows of its smallest names not yet visited.
///
/// A key `a/b` sorts by its bytes, so a directory's own key (`a`) and the keys below it
/// (`a/…`) are not always adjacent (`a-x/…` falls between): each child directory `n` is two
/// walk items, `n` (the directory as a cell) and `n/` (what is below it), sorted together.
pub struct SortedCells {
    root: PathBuf,
    stack: Vec<WalkLevel>,
}

struct WalkLevel {
    dir: PathBuf,
    depth: usize,
    /// Items of the current window: `name`, or `name/` for what is below it (`.` at the
    /// root for the root itself).
    window: std::collections::BTreeSet<Box<[u8]>>,
    /// The last directory taken as an item that has no directory below it: its `name/` item
    /// is skipped (one read of each leaf directory, not two).
    leaf: Option<Box<[u8]>>,
    /// The last item taken: the next window starts after it.
    bound: Option<Box<[u8]>>,
    /// The directory has items beyond the window.
    more: bool,
}

impl WalkLevel {
    fn new(dir: PathBuf, depth: usize) -> WalkLevel {
        WalkLevel {
            dir,
            depth,
            window: std::collections::BTreeSet::new(),
            leaf: None,
            bound: None,
            more: true,
        }
    }

    fn refill(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        self.more = false;
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let (window, bound, more) = (&mut self.window, self.bound.as_deref(), &mut self.more);
        let mut consider = |sort: &[u8]| {
            if bound.is_some_and(|b| sort <= b) {
                return;
            }
            if window.len() >= WALK_WINDOW {
                *more = true;
                match window.last() {
                    Some(last) if sort < &**last => {
                        window.pop_last();
                    }
                    _ => return,
                }
            }
            window.insert(sort.into());
        };
        if self.depth == 0 {
            consider(b".");
        }
        let mut below = Vec::new();
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            consider(name.as_bytes());
            if self.depth + 1 < WALK_MAX_DEPTH {
                below.clear();
                below.extend_from_slice(name.as_bytes());
                below.push(b'/');
                consider(&below);
            }
        }
    }
}

impl SortedCells {
    pub fn new(root: &Path) -> Result<SortedCells, crate::cell::DiscoverError> {
        if !root.is_dir() {
            return Err(crate::cell::DiscoverError::Missing(root.to_path_buf()));
        }
        Ok(SortedCells {
            root: root.to_path_buf(),
            stack: vec![WalkLevel::new(root.to_path_buf(), 0)],
        })
    }
}

impl Iterator for SortedCells {
    type Item = Cell;

    fn next(&mut self) -> Option<Cell> {
        loop {
            use std::os::unix::ffi::OsStrExt;
            let level = self.stack.last_mut()?;
            let Some(sort) = level.window.pop_first() else {
                if level.more {
                    level.refill();
                } else {
                    self.stack.pop();
                }
                continue;
            };
            level.bound = Some(sort);
            let sort = level.bound.as_deref().expect("just set");
            if let Some(name) = sort.strip_suffix(b"/") {
                if level.leaf.as_deref() == Some(name) {
                    continue;
                }
                let dir = level.dir.join(std::ffi::OsStr::from_bytes(name));
                let next = WalkLevel::new(dir, level.depth + 1);
                self.stack.push(next);
            } else {
                let path = if level.depth == 0 && sort == b"." {
                    level.dir.clone()
                } else {
                    level.dir.join(std::ffi::OsStr::from_bytes(sort))
                };
                let (cell, below) = Cell::scan(&self.root, &path);
                level.leaf = (!below).then(|| sort.into());
                if let Some(c) = cell {
                    return Some(c);
                }
            }
        }
    }
}

/// The pins file of a recordings folder.
pub fn pins_path(recordings: &Path) -> PathBuf {
    recordings.join(PINS_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_pins_file_is_the_rendered_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PINS_FILE);
        let c = |n| Counts {
            events: n,
            rows: n + 1,
            unhandled: 0,
            grammar_drops: 2,
        };
        for keys in [vec![], vec!["p/b", "p/a", "12", "3", "a\"q"]] {
            let fresh: BTreeMap<String, Counts> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.to_string(), c(i as u64)))
                .collect();
            let sorted: Vec<(&str, Counts)> = fresh.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            write_pins(&path, &sorted).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), render(&fresh));
        }
    }

    /// The line reader of bridgewire's own layout hands out what serde_json reads, and leaves
    /// everything else to it: the same pins, the same errors, the same stops, over written
    /// files, their every cut, and hand-edited variants.
    #[test]
    fn pins_read_by_lines_are_serde_jsons_pins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PINS_FILE);
        let c = |n: u64| Counts {
            events: n,
            rows: n * 7,
            unhandled: u64::MAX - n,
            grammar_drops: 0,
        };
        let keys = ["12", "a\"q", "p/\u{1}", "p/a", "p/b\\", "p/é", "z"];
        let written: Vec<(&str, Counts)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, c(i as u64)))
            .collect();
        write_pins(&path, &written).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        write_pins(&path, &written[3..4]).unwrap();
        let one = std::fs::read_to_string(&path).unwrap();
        let mut texts = vec![
            good.clone(),
            one.clone(),
            "{}\n".into(),
            "{}".into(),
            "{}\n\n".into(),
            String::new(),
            good.replace("\n", "\r\n"),
            good.clone() + "\n",
            good.clone() + "x",
            good.trim_end().to_string(),
            good.replacen("\"events\": 1,", "\"events\": 01,", 1),
            good.replacen("\"events\": 1,", "\"events\": 1.0,", 1),
            good.replacen("\"rows\": 7,", "\"rows\": 18446744073709551616,", 1),
            good.replacen("\"rows\": 7,", "\"rows\":  7,", 1),
            good.replacen(
                "\"grammarDrops\": 0\n",
                "\"grammarDrops\": 0,\n    \"x\": 1\n",
                1,
            ),
            good.replacen("\"unhandled\"", "\"grammarDrops\"", 1),
            good.replacen("  \"p/a\"", "  \"p/\\u0061\"", 1),
            good.clone() + &one[1..],
        ];
        for cut in 0..one.len() {
            texts.push(one[..cut].to_string());
        }
        for cut in (0..good.len())
            .filter(|&i| good.is_char_boundary(i))
            .step_by(7)
        {
            texts.push(good[..cut].to_string());
        }
        for text in &texts {
            std::fs::write(&path, text).unwrap();
            for stop in [usize::MAX, 0, 1, 3] {
                let run = |by_lines: bool| {
                    let mut got = Vec::new();
                    let each = |k: String, p: Pin| {
                        got.push((k, p));
                        got.len() <= stop
                    };
                    let r = if by_lines {
                        read_pins(&path, each)
                    } else {
                        read_pins_json(&path, 0, each)
                    };
                    (got, r.map_err(|e| e.to_string()))
                };
                assert_eq!(run(true), run(false), "{text:?} stop {stop}");
            }
        }
        // A written file without escapes in its keys is read by lines to its end.
        write_pins(&path, &[written[0], written[3], written[5], written[6]]).unwrap();
        let mut n = 0;
        assert_eq!(
            read_pins_layout(&path, &mut |_, _| {
                n += 1;
                true
            }),
            Ok(())
        );
        assert_eq!(n, 4);
    }

    #[test]
    fn compact_pins_keep_what_does_not_round_trip() {
        let good = json!({"events": 1, "rows": 2, "unhandled": 0, "grammarDrops": 0});
        let p = Pin::from_value(good.clone());
        assert_eq!((p.raw.is_none(), p.to_json()), (true, good));
        let extra = json!({"events": 1, "rows": 2, "unhandled": 0, "grammarDrops": 0, "x": 1});
        assert_eq!(Pin::from_value(extra.clone()).to_json(), extra);
        let bad = json!({"events": "1"});
        let p = Pin::from_value(bad.clone());
        assert_eq!((p.counts, p.to_json()), (None, bad));
    }

    /// A pin read by its own visitor is the pin of the tree `Value` reads, for the pins file's
    /// shape and for everything else a pin can be; errors are the tree's errors.
    #[test]
    fn pins_read_without_a_tree_are_the_trees_pins() {
        let texts = [
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events":18446744073709551615,"rows":0,"unhandled":0,"grammarDrops":7}"#,
            r#"{"rows": 2, "events": 31, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0, "x": 1}"#,
            r#"{"x": 1, "events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 1, "events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0, "events": 4}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0, "rows": 2}"#,
            r#"{"events": 31.0, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": -2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": "2", "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0}"#,
            r#"{"events": 31, "rows": 2, "grammarDrops": 0, "unhandled": 0}"#,
            r#"{"events": 18446744073709551616, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 1e400, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"ev\u0065nts": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": {"a": [1, null]}, "rows": 2, "unhandled": 0, "grammarDrops": 0}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": null}"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0"#,
            r#"{"events": 31, "rows": 2, "unhandled": 0, "grammarDrops": 0,}"#,
            r#"{"events" 31}"#,
            "{}",
            "null",
            "true",
            "7",
            "-7",
            "7.5",
            "1e400",
            r#""x\u00e9""#,
            "[1, 2, {\"a\": 1}]",
            "[]",
        ];
        for text in texts {
            let tree = serde_json::from_str::<Value>(text).map(Pin::from_value);
            let own = serde_json::from_str::<Pin>(text);
            match (tree, own) {
                (Ok(t), Ok(o)) => assert_eq!(t, o, "{text}"),
                (Err(t), Err(o)) => assert_eq!(t.to_string(), o.to_string(), "{text}"),
                (t, o) => panic!("{text}: tree {t:?}, own {o:?}"),
            }
            // Through a reader too, as the pins file is read.
            let tree = serde_json::from_reader::<_, Value>(text.as_bytes()).map(Pin::from_value);
            let own = serde_json::from_reader::<_, Pin>(text.as_bytes());
            assert_eq!(
                tree.map_err(|e| e.to_string()),
                own.map_err(|e| e.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn sorted_walk_is_discover_order_across_windows_and_awkward_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let lane = |d: &Path| {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("bridge→runtime.ndjson"), "").unwrap();
        };
        // Names around '/' in byte order ('-' and '.' sort before it), a cell with cells
        // below it, deep cells, a non-cell directory and a file.
        for k in [
            "a",
            "a/x",
            "a-b/y",
            "a.c/z",
            "a0/w",
            "b/c/d/e/f",
            "b/c/d/e/f/g",
            "b/c",
        ] {
            lane(&root.join(k));
        }
        std::fs::create_dir_all(root.join("empty/dir")).unwrap();
        std::fs::write(root.join("file"), "").unwrap();
        for i in 0..(WALK_WINDOW / 2 + 7) {
            lane(&root.join("many").join(format!("c{i:05}")));
        }
        let discovered: Vec<String> = crate::cell::discover(root)
            .unwrap()
            .into_iter()
            .map(|c| c.key)
            .collect();
        let walked: Vec<String> = SortedCells::new(root).unwrap().map(|c| c.key).collect();
        assert_eq!(walked.len(), discovered.len());
        assert!(walked == discovered, "walk order differs from discover's");
        // The root itself as a cell.
        lane(root);
        let discovered: Vec<String> = crate::cell::discover(root)
            .unwrap()
            .into_iter()
            .map(|c| c.key)
            .collect();
        let walked: Vec<String> = SortedCells::new(root).unwrap().map(|c| c.key).collect();
        assert!(walked == discovered, "walk order differs from discover's");
    }

    #[test]
    fn object_stream_is_the_pretty_document_with_index_keys_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.json");
        let c = Counts {
            events: 3,
            rows: 1,
            unhandled: 0,
            grammar_drops: 2,
        };
        for keys in [
            vec![],
            vec!["7"],
            vec!["p/a", "p/b"],
            vec!["12", "3", "a\"q", "p/a", "z"],
        ] {
            let mut sorted: Vec<&str> = keys.clone();
            sorted.sort();
            let mut out = ObjectStream::new(&path);
            let mut map = Map::new();
            for (i, k) in sorted.iter().enumerate() {
                let v = if i % 2 == 0 { Value::Null } else { c.to_json() };
                out.push(
                    k,
                    &if v.is_null() {
                        "null".into()
                    } else {
                        counts_block(c)
                    },
                );
                map.insert(k.to_string(), v);
            }
            out.finish(false).unwrap();
            if keys.is_empty() {
                assert!(!path.exists());
            } else {
                assert_eq!(
                    std::fs::read_to_string(&path).unwrap(),
                    crate::jsjson::to_string_pretty(&Value::Object(map))
                );
            }
            assert!(!dir.path().join("o.json.tmp").exists());
        }
    }
}

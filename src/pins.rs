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

impl EventSink for CountingSink<'_> {
    fn event(&mut self, event: Value) {
        self.counts.events += 1;
        if self.model.is_unhandled(&event) {
            self.counts.unhandled += 1;
        }
        if let Some(r) = &mut self.rows {
            r.push(&event);
        }
        if let Some(d) = &mut self.dump {
            let v = d.normalizer.normalize(event);
            let text = crate::jsjson::to_string_pretty(&v);
            let body = indent_block(text.trim_end());
            let _ = write!(d.out, "{}\n{}", if d.first { "[" } else { "," }, body);
            d.first = false;
        }
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
    let mut merged = cell.merged();
    model.assemble(cell, &mut merged, &mut sink);
    let report = merged.into_report();
    let rows = sink.rows.take().map(|r| r.finish()).unwrap_or_default();
    sink.counts.rows = rows.len() as u64;
    if let Some(mut d) = sink.dump.take() {
        let _ = writeln!(d.out, "{}", if d.first { "[]" } else { "\n]" });
    }
    if let Some(d) = dump_dir {
        let rows = model.normalize_rows(rows);
        let _ = crate::lane::write::create_like_folder(
            &d.join(format!("{}.rows.json", dump_stem(&cell.key))),
        )
        .and_then(|mut f| {
            f.write_all(crate::jsjson::to_string_pretty(&Value::Array(rows)).as_bytes())
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

/// The pins file as compact counts (what `pins` keeps per cell: no JSON tree unless a pin
/// does not round-trip), read as a stream: neither the file's text nor a tree of all of it is
/// ever held, so a pins file of 10⁵ cells costs its keys and counts only.
pub fn load_compact(path: &Path) -> anyhow::Result<BTreeMap<Box<str>, Pin>> {
    use serde::de::{Deserializer, MapAccess, Visitor};
    struct Pins;
    impl<'de> Visitor<'de> for Pins {
        type Value = BTreeMap<Box<str>, Pin>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let v: Value = map.next_value()?;
                out.insert(key.into_boxed_str(), Pin::from_value(v)); // the last one wins
            }
            Ok(out)
        }
    }
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read pins: {e}", path.display()))?;
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(64 << 10, file));
    let parsed = de.deserialize_map(Pins).and_then(|p| de.end().map(|()| p));
    parsed.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            anyhow::anyhow!("{}: pins must be a JSON object", path.display())
        }
        serde_json::error::Category::Io => {
            anyhow::anyhow!("{}: cannot read pins: {e}", path.display())
        }
        _ => anyhow::anyhow!("{}:{}: not valid JSON: {e}", path.display(), e.line()),
    })
}

/// Cell keys below `root`, sorted, as [`crate::cell::discover`] finds them, without holding
/// the cells.
pub fn discover_keys(root: &Path) -> Result<Vec<Box<str>>, crate::cell::DiscoverError> {
    use crate::cell::DiscoverError;
    let mut keys: Vec<Box<str>> = crate::cell::walk(root)?
        .map(|c| c.key.into_boxed_str())
        .collect();
    if keys.is_empty() {
        return Err(DiscoverError::NotRecordings(root.to_path_buf()));
    }
    keys.sort();
    Ok(keys)
}

/// Writes pins as [`render`] does, entry by entry, through a temp file renamed into place;
/// `pins` must be sorted by key with no key twice.
pub fn write_pins(path: &Path, pins: &[(&str, Counts)]) -> std::io::Result<()> {
    debug_assert!(pins.windows(2).all(|w| w[0].0 < w[1].0), "sorted, unique");
    let tmp = path.with_extension("json.tmp");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    if pins.is_empty() {
        out.write_all(b"{}\n")?;
    } else {
        // JavaScript property order: array-index keys first, numerically.
        let mut index_keys: Vec<(u32, usize)> = pins
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| crate::jsjson::array_index(k).map(|n| (n, i)))
            .collect();
        index_keys.sort();
        let ordered = index_keys.iter().map(|&(_, i)| &pins[i]).chain(
            pins.iter()
                .filter(|(k, _)| crate::jsjson::array_index(k).is_none()),
        );
        out.write_all(b"{\n")?;
        let mut key = String::new();
        for (i, (k, c)) in ordered.enumerate() {
            key.clear();
            crate::jsjson::write_str(&mut key, k);
            write!(
                out,
                "{}  {key}: {{\n    \"events\": {},\n    \"rows\": {},\n    \"unhandled\": {},\n    \"grammarDrops\": {}\n  }}",
                if i > 0 { ",\n" } else { "" },
                c.events,
                c.rows,
                c.unhandled,
                c.grammar_drops
            )?;
        }
        out.write_all(b"\n}\n")?;
    }
    out.into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()
        .ok();
    std::fs::rename(&tmp, path)
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
}

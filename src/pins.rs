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
        let file = std::fs::File::create(&path).ok()?;
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
        let _ = std::fs::write(
            d.join(format!("{}.rows.json", dump_stem(&cell.key))),
            crate::jsjson::to_string_pretty(&Value::Array(rows)),
        );
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

/// The pins file of a recordings folder.
pub fn pins_path(recordings: &Path) -> PathBuf {
    recordings.join(PINS_FILE)
}

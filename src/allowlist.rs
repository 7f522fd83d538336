//! The parity allowlist: intended differences between two builds, in bb's entry shape (§5).
//!
//! # Format
//!
//! A JSON array of entries:
//!
//! ```json
//! [{"provider":"codex","cell":"approval-allow","layer":"events",
//!   "path":"/*/item/presentation","pr":"#2164","reason":"presentation moved to the close"}]
//! ```
//!
//! * `provider`, `cell`: exact names or `*`;
//! * `layer`: `events` or `rows`; beyond bb, `wire` (a cell's answers and notifications, a list
//!   of texts: a path selects positions, `/` the whole layer) and `handshake` (what each leg's
//!   handshake states, an object: `/capabilities/commands`; its `cell` must be `*`);
//! * `path`: `/`-separated segments into the normalized list; `*` selects every key or
//!   position of a level, `**` zero or more levels; `/` alone masks the whole layer. On the last
//!   segment an object key is deleted and an array slot set to `null` (the array keeps its
//!   length);
//! * `pr`: `#<digits>`; `reason`: non-empty.
//!
//! An entry masks matching entries on both legs before they are diffed; an applicable entry that
//! masks nothing on either leg is **stale** and fails the run, named. Entries apply in file order.
//!
//! bridgewire is stricter than bb where bb silently accepts nonsense: an unknown layer, a path
//! without the leading `/`, or a segment that mixes `*` with text (`a*`) is rejected with the
//! entry's position before anything runs.

use serde_json::Value;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub provider: String,
    pub cell: String,
    pub layer: Layer,
    pub path: String,
    pub pr: String,
    pub reason: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Events,
    Rows,
    Wire,
    Handshake,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Events => "events",
            Layer::Rows => "rows",
            Layer::Wire => "wire",
            Layer::Handshake => "handshake",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(String),
    Any,
    Deep,
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: entry {index}: {message}")]
pub struct AllowlistError {
    pub file: String,
    /// 0-based position of the entry in the array (or `-` for file-level errors).
    pub index: String,
    pub message: String,
}

impl Entry {
    /// Whether the entry applies to `<provider>/<cell>`.
    pub fn applies(&self, provider: &str, cell: &str) -> bool {
        (self.provider == "*" || self.provider == provider)
            && (self.cell == "*" || self.cell == cell)
    }

    /// One-line description used in reports.
    pub fn describe(&self) -> String {
        format!(
            "({}) {} {} — {}",
            self.pr,
            self.layer.name(),
            self.path,
            self.reason
        )
    }

    /// Masks one value (a leg's handshake) at the entry's path; returns how many slots it
    /// removed. `/` empties it.
    pub fn mask_value(&self, v: &mut Value) -> usize {
        if self.segments.is_empty() {
            return usize::from(!matches!(std::mem::take(v), Value::Null));
        }
        mask_at(v, &self.segments)
    }

    /// Masks `list`; returns how many slots it removed.
    pub fn mask(&self, list: &mut Vec<Value>) -> usize {
        if self.segments.is_empty() {
            let n = list.len();
            list.clear();
            return n;
        }
        let mut root = Value::Array(std::mem::take(list));
        let n = mask_at(&mut root, &self.segments);
        if let Value::Array(items) = root {
            *list = items;
        }
        n
    }
}

fn mask_at(v: &mut Value, segs: &[Segment]) -> usize {
    let Some((first, rest)) = segs.split_first() else {
        return 0;
    };
    match first {
        Segment::Deep => {
            // Zero levels: try the rest here; then every child with `**` still pending.
            let mut n = if rest.is_empty() { 0 } else { mask_at(v, rest) };
            match v {
                Value::Array(items) => {
                    for item in items.iter_mut() {
                        n += mask_at(item, segs);
                    }
                }
                Value::Object(map) => {
                    for (_, child) in map.iter_mut() {
                        n += mask_at(child, segs);
                    }
                }
                _ => {}
            }
            n
        }
        Segment::Any => match v {
            Value::Array(items) => {
                if rest.is_empty() {
                    let n = items.len();
                    for item in items.iter_mut() {
                        *item = Value::Null;
                    }
                    n
                } else {
                    items.iter_mut().map(|i| mask_at(i, rest)).sum()
                }
            }
            Value::Object(map) => {
                if rest.is_empty() {
                    let n = map.len();
                    map.clear();
                    n
                } else {
                    map.iter_mut().map(|(_, c)| mask_at(c, rest)).sum()
                }
            }
            _ => 0,
        },
        Segment::Literal(key) => match v {
            Value::Array(items) => {
                let Some(i) = key.parse::<usize>().ok().filter(|i| *i < items.len()) else {
                    return 0;
                };
                if rest.is_empty() {
                    items[i] = Value::Null;
                    1
                } else {
                    mask_at(&mut items[i], rest)
                }
            }
            Value::Object(map) => {
                if rest.is_empty() {
                    usize::from(map.shift_remove(key).is_some())
                } else {
                    map.get_mut(key).map(|c| mask_at(c, rest)).unwrap_or(0)
                }
            }
            _ => 0,
        },
    }
}

fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    if !path.starts_with('/') {
        return Err(format!("path {path:?} must start with /"));
    }
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "*" => Ok(Segment::Any),
            "**" => Ok(Segment::Deep),
            s if s.contains('*') => Err(format!(
                "path segment {s:?} mixes * with text (only whole-segment * and ** are wildcards)"
            )),
            s => Ok(Segment::Literal(s.to_string())),
        })
        .collect()
}

/// Parses and validates an allowlist document.
pub fn parse(text: &str, file: &str) -> Result<Vec<Entry>, AllowlistError> {
    let err = |index: String, message: String| AllowlistError {
        file: file.to_string(),
        index,
        message,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        err(
            "-".into(),
            format!("not valid JSON (line {}): {e}", e.line()),
        )
    })?;
    let Value::Array(items) = v else {
        return Err(err(
            "-".into(),
            "an allowlist is a JSON array of entries".into(),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let e = |m: String| err(i.to_string(), m);
        let obj = item
            .as_object()
            .ok_or_else(|| e("an entry must be an object".into()))?;
        let field = |k: &str| -> Result<String, AllowlistError> {
            match obj.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(e(format!("`{k}` must be a string"))),
                None => Err(e(format!("missing `{k}`"))),
            }
        };
        for k in obj.keys() {
            if !["provider", "cell", "layer", "path", "pr", "reason"].contains(&k.as_str()) {
                return Err(e(format!("unknown key `{k}`")));
            }
        }
        let layer = match field("layer")?.as_str() {
            "events" => Layer::Events,
            "rows" => Layer::Rows,
            "wire" => Layer::Wire,
            "handshake" => Layer::Handshake,
            other => {
                return Err(e(format!(
                    "unknown layer {other:?} (expected events, rows, wire or handshake)"
                )));
            }
        };
        if layer == Layer::Handshake && field("cell")? != "*" {
            return Err(e(
                "a handshake entry's `cell` must be \"*\": a leg's handshake is one for every cell"
                    .into(),
            ));
        }
        let path = field("path")?;
        let segments = parse_path(&path).map_err(e)?;
        let pr = field("pr")?;
        if !(pr.len() > 1 && pr.starts_with('#') && pr[1..].bytes().all(|b| b.is_ascii_digit())) {
            return Err(e(format!("`pr` {pr:?} must look like #123")));
        }
        let reason = field("reason")?;
        if reason.trim().is_empty() {
            return Err(e("`reason` must not be empty".into()));
        }
        out.push(Entry {
            provider: field("provider")?,
            cell: field("cell")?,
            layer,
            path,
            pr,
            reason,
            segments,
        });
    }
    Ok(out)
}

pub fn load(path: &Path) -> Result<Vec<Entry>, AllowlistError> {
    let text = std::fs::read_to_string(path).map_err(|e| AllowlistError {
        file: path.display().to_string(),
        index: "-".into(),
        message: format!("cannot read: {e}"),
    })?;
    parse(&text, &path.display().to_string())
}

/// The result of masking both legs of one cell.
#[derive(Debug, Clone, Default)]
pub struct MaskOutcome {
    /// Entries that applied but removed nothing on either side.
    pub stale: Vec<Entry>,
    /// Per applicable entry: removals on (base, head).
    pub removals: Vec<(Entry, usize, usize)>,
}

/// One leg's lists of a cell, as the allowlist masks them.
pub struct Layers<'a> {
    pub events: &'a mut Vec<Value>,
    pub rows: &'a mut Vec<Value>,
    /// `None` where the leg does not hold the wire layer (a dump).
    pub wire: Option<&'a mut Vec<Value>>,
}

/// Applies every applicable entry, in order, to both legs' layers of one cell (handshake
/// entries are applied once per run, by [`Entry::mask_value`]).
pub fn apply(
    entries: &[Entry],
    provider: &str,
    cell: &str,
    mut base: Layers,
    mut head: Layers,
) -> MaskOutcome {
    let mut out = MaskOutcome::default();
    for e in entries.iter().filter(|e| e.applies(provider, cell)) {
        let (b, h) = match e.layer {
            Layer::Events => (e.mask(base.events), e.mask(head.events)),
            Layer::Rows => (e.mask(base.rows), e.mask(head.rows)),
            Layer::Wire => (
                base.wire.as_deref_mut().map_or(0, |l| e.mask(l)),
                head.wire.as_deref_mut().map_or(0, |l| e.mask(l)),
            ),
            Layer::Handshake => continue,
        };
        if b + h == 0 {
            out.stale.push(e.clone());
        }
        out.removals.push((e.clone(), b, h));
    }
    out
}

/// Applies every applicable entry to one leg's layers alone, as [`apply`] would to that leg:
/// a second run of a leg is compared with its first as the allowlist left that one.
pub fn apply_to_one(entries: &[Entry], provider: &str, cell: &str, mut leg: Layers) {
    for e in entries.iter().filter(|e| e.applies(provider, cell)) {
        match e.layer {
            Layer::Events => e.mask(leg.events),
            Layer::Rows => e.mask(leg.rows),
            Layer::Wire => leg.wire.as_deref_mut().map_or(0, |l| e.mask(l)),
            Layer::Handshake => continue,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(path: &str) -> Entry {
        parse(
            &format!(r##"[{{"provider":"*","cell":"*","layer":"events","path":"{path}","pr":"#1","reason":"r"}}]"##),
            "t",
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn masks_as_the_reference_describes() {
        let base = vec![
            json!({"type":"a","item":{"presentation":1,"id":"#1"}}),
            json!({"type":"b","item":{"id":"#2"}}),
        ];
        let mut l = base.clone();
        assert_eq!(entry("/*/item/presentation").mask(&mut l), 1);
        assert_eq!(l[0], json!({"type":"a","item":{"id":"#1"}}));
        let mut l = base.clone();
        assert_eq!(entry("/1").mask(&mut l), 1);
        assert_eq!(l[1], Value::Null);
        assert_eq!(l.len(), 2);
        let mut l = base.clone();
        assert_eq!(entry("/**/id").mask(&mut l), 2);
        let mut l = base.clone();
        assert_eq!(entry("/").mask(&mut l), 2);
        assert!(l.is_empty());
        assert_eq!(entry("/").mask(&mut l), 0, "an empty layer masks nothing");
        let mut l = base.clone();
        assert_eq!(
            entry("/**").mask(&mut l),
            0,
            "a trailing ** selects nothing"
        );
        let mut l = base;
        assert_eq!(entry("/7/type").mask(&mut l), 0);
    }

    #[test]
    fn rejects_bad_entries_with_their_position() {
        let bad = [
            (
                r##"[{"provider":"*","cell":"*","layer":"event","path":"/","pr":"#1","reason":"r"}]"##,
                "unknown layer",
            ),
            (
                r##"[{"provider":"*","cell":"*","layer":"rows","path":"x","pr":"#1","reason":"r"}]"##,
                "must start with /",
            ),
            (
                r##"[{"provider":"*","cell":"*","layer":"rows","path":"/a*","pr":"#1","reason":"r"}]"##,
                "mixes *",
            ),
            (
                r##"[{"provider":"*","cell":"*","layer":"rows","path":"/","pr":"12","reason":"r"}]"##,
                "#123",
            ),
            (
                r##"[{"provider":"*","cell":"*","layer":"rows","path":"/","pr":"#1","reason":" "}]"##,
                "reason",
            ),
        ];
        for (text, want) in bad {
            let e = parse(text, "al.json").unwrap_err();
            assert_eq!(e.index, "0");
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn stale_entries_are_reported() {
        let entries = vec![entry("/*/nope"), entry("/0/type")];
        let (mut be, mut br, mut he, mut hr) = (
            vec![json!({"type":"a"})],
            vec![],
            vec![json!({"type":"b"})],
            vec![],
        );
        let out = apply(
            &entries,
            "p",
            "c",
            Layers {
                events: &mut be,
                rows: &mut br,
                wire: None,
            },
            Layers {
                events: &mut he,
                rows: &mut hr,
                wire: None,
            },
        );
        assert_eq!(out.stale.len(), 1);
        assert_eq!(out.stale[0].path, "/*/nope");
        assert_eq!(be, vec![json!({})]);
    }

    /// A wire entry masks a cell's answers; a handshake entry is applied to a leg's handshake
    /// object (not per cell), must name every cell, and `/` empties the handshake.
    #[test]
    fn wire_and_handshake_entries_mask_their_layer() {
        let parsed = |layer: &str, cell: &str, path: &str| {
            parse(
                &format!(
                    r##"[{{"provider":"*","cell":"{cell}","layer":"{layer}","path":"{path}","pr":"#1","reason":"r"}}]"##
                ),
                "al.json",
            )
        };
        let wire = parsed("wire", "c", "/0").unwrap();
        let (mut bw, mut hw) = (
            vec![json!("answer a → result")],
            vec![json!("answer a → error -1")],
        );
        let out = apply(
            &wire,
            "p",
            "c",
            Layers {
                events: &mut vec![],
                rows: &mut vec![],
                wire: Some(&mut bw),
            },
            Layers {
                events: &mut vec![],
                rows: &mut vec![],
                wire: Some(&mut hw),
            },
        );
        assert!(out.stale.is_empty());
        assert_eq!((bw, hw), (vec![Value::Null], vec![Value::Null]));
        let err = parsed("handshake", "c", "/capabilities").unwrap_err();
        assert!(err.to_string().contains("must be \"*\""), "{err}");
        let hs = parsed("handshake", "*", "/capabilities/fork")
            .unwrap()
            .remove(0);
        let mut v = json!({"protocolVersion": 2, "capabilities": {"fork": "tip"}});
        assert_eq!(hs.mask_value(&mut v), 1);
        assert_eq!(v, json!({"protocolVersion": 2, "capabilities": {}}));
        assert_eq!(hs.mask_value(&mut v), 0);
        let all = parsed("handshake", "*", "/").unwrap().remove(0);
        assert_eq!(all.mask_value(&mut v), 1);
        assert_eq!(v, Value::Null);
    }
}

//! Diffing normalized lists: an LCS over elements (order matters) and a first-divergence report
//! with a JSON-aware diff of the differing entries.
//!
//! Elements are compared by their canonical serialization (object keys sorted), so two builds
//! that emit the same event with keys in another order do not differ (bb compares key order too,
//! which §16.4 of the reference lists as a weak spot).

use serde_json::Value;
use similar::{Algorithm, DiffOp, capture_diff_slices};

/// Canonical JSON text: keys sorted at every level.
pub fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    crate::jsjson::to_string(&sorted(v))
}

/// The difference between two lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListDiff {
    /// (index in base, element) of elements only in base.
    pub only_in_base: Vec<(usize, Value)>,
    /// (index in head, element) of elements only in head.
    pub only_in_head: Vec<(usize, Value)>,
    pub first: Option<Divergence>,
}

impl ListDiff {
    pub fn is_empty(&self) -> bool {
        self.only_in_base.is_empty() && self.only_in_head.is_empty()
    }
}

/// Where two lists first part ways.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub base_index: usize,
    pub head_index: usize,
    /// Equal elements just before the divergence (base indices).
    pub before: Vec<(usize, Value)>,
    pub base: Vec<(usize, Value)>,
    pub head: Vec<(usize, Value)>,
    /// Path-level differences between the first differing pair, when both sides have one.
    pub entry_diff: Vec<String>,
}

/// LCS diff of `base` and `head`.
pub fn diff_lists(base: &[Value], head: &[Value], context: usize) -> ListDiff {
    let a: Vec<String> = base.iter().map(canonical).collect();
    let b: Vec<String> = head.iter().map(canonical).collect();
    let ops = capture_diff_slices(Algorithm::Lcs, &a, &b);
    let mut out = ListDiff::default();
    for op in &ops {
        match *op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete {
                old_index,
                old_len,
                new_index,
            } => {
                out.only_in_base
                    .extend((old_index..old_index + old_len).map(|i| (i, base[i].clone())));
                out.first.get_or_insert_with(|| {
                    divergence(base, head, old_index, new_index, old_len, 0, context)
                });
            }
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => {
                out.only_in_head
                    .extend((new_index..new_index + new_len).map(|i| (i, head[i].clone())));
                out.first.get_or_insert_with(|| {
                    divergence(base, head, old_index, new_index, 0, new_len, context)
                });
            }
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                out.only_in_base
                    .extend((old_index..old_index + old_len).map(|i| (i, base[i].clone())));
                out.only_in_head
                    .extend((new_index..new_index + new_len).map(|i| (i, head[i].clone())));
                out.first.get_or_insert_with(|| {
                    divergence(base, head, old_index, new_index, old_len, new_len, context)
                });
            }
        }
    }
    out
}

fn divergence(
    base: &[Value],
    head: &[Value],
    bi: usize,
    hi: usize,
    blen: usize,
    hlen: usize,
    context: usize,
) -> Divergence {
    let before = (bi.saturating_sub(context)..bi)
        .map(|i| (i, base[i].clone()))
        .collect();
    let take = |list: &[Value], start: usize, len: usize| -> Vec<(usize, Value)> {
        (start..start + len.min(context.max(1)))
            .map(|i| (i, list[i].clone()))
            .collect()
    };
    let entry_diff = if blen > 0 && hlen > 0 {
        json_diff(&base[bi], &head[hi])
    } else {
        Vec::new()
    };
    Divergence {
        base_index: bi,
        head_index: hi,
        before,
        base: take(base, bi, blen),
        head: take(head, hi, hlen),
        entry_diff,
    }
}

/// Structural differences between two JSON values, one line per path:
/// `/item/status: "completed" → "failed"`, `/item/error: (absent) → "x"`.
pub fn json_diff(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_diff(a, b, &mut String::new(), &mut out);
    out
}

fn short(v: &Value) -> String {
    let s = crate::jsjson::to_string(v);
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

fn walk_diff(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let len = path.len();
                path.push('/');
                path.push_str(k);
                match y.get(k) {
                    Some(vb) => walk_diff(va, vb, path, out),
                    None => out.push(format!("{path}: {} → (absent)", short(va))),
                }
                path.truncate(len);
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    out.push(format!("{path}/{k}: (absent) → {}", short(vb)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => walk_diff(va, vb, path, out),
                    (Some(va), None) => out.push(format!("{path}: {} → (absent)", short(va))),
                    (None, Some(vb)) => out.push(format!("{path}: (absent) → {}", short(vb))),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        _ if a != b => {
            let p = if path.is_empty() { "/" } else { path.as_str() };
            out.push(format!("{p}: {} → {}", short(a), short(b)))
        }
        _ => {}
    }
}

/// bb's one-line description of an element: `<type>[:<item.type>] <first 160 chars>`.
pub fn describe(v: &Value) -> String {
    let ty = v
        .get("type")
        .or_else(|| v.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let item = v
        .get("item")
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
        .map(|t| format!(":{t}"))
        .unwrap_or_default();
    let text = crate::jsjson::to_string(v);
    // bb cuts at 160 UTF-16 units (JavaScript string length).
    let units: Vec<u16> = text.encode_utf16().collect();
    let cut = String::from_utf16_lossy(&units[..units.len().min(160)]);
    let more = if units.len() > 160 { "…" } else { "" };
    format!("{ty}{item} {cut}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_matters_and_the_reference_example_holds() {
        let (a, b, c, d) = (
            json!({"type":"A"}),
            json!({"type":"B"}),
            json!({"type":"C"}),
            json!({"type":"D"}),
        );
        let diff = diff_lists(&[a.clone(), b.clone(), c.clone()], &[a, c, d.clone()], 2);
        assert_eq!(diff.only_in_base, vec![(1, b)]);
        assert_eq!(diff.only_in_head, vec![(2, d)]);
        assert_eq!(diff.first.unwrap().base_index, 1);
    }

    #[test]
    fn key_order_does_not_matter() {
        let x: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let y: Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        assert!(diff_lists(&[x], &[y], 2).is_empty());
    }

    #[test]
    fn entry_diff_names_paths() {
        let a = json!({"item":{"status":"completed","x":[1,2]}});
        let b = json!({"item":{"status":"failed","x":[1],"error":"boom"}});
        assert_eq!(
            json_diff(&a, &b),
            vec![
                "/item/status: \"completed\" → \"failed\"",
                "/item/x/1: 2 → (absent)",
                "/item/error: (absent) → \"boom\""
            ]
        );
    }
}

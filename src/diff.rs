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
    /// Ids that do not correspond one to one between the aligned elements (see
    /// [`diff_lists_ids`]), one line each.
    pub id_mismatches: Vec<String>,
    /// (index in base, index in head) of an element only in base and one only in head that are
    /// equal (ids masked): the same element in another place, which a report names as moved
    /// rather than as one element only in base and an identical one only in head. Both stay
    /// listed in `only_in_base` and `only_in_head`.
    pub moved: Vec<(usize, usize)>,
}

impl ListDiff {
    pub fn is_empty(&self) -> bool {
        self.only_in_base.is_empty()
            && self.only_in_head.is_empty()
            && self.id_mismatches.is_empty()
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
    diff_lists_ids(base, head, context, &[])
}

/// LCS diff of `base` and `head` in which the values of `id_fields` do not take part in the
/// alignment: elements are matched with their ids masked, so one inserted or removed element
/// shows as exactly that element even though interned ids (`#1`, `#2`, … in first-seen order)
/// are numbered one further on one side after it. The ids are then checked separately: over the
/// aligned pairs, each base id must correspond to one head id and back (a consistent renaming);
/// an id that maps two ways is listed in [`ListDiff::id_mismatches`] with the elements where the
/// mapping broke. So a build that reuses or splits an id still differs.
pub fn diff_lists_ids(
    base: &[Value],
    head: &[Value],
    context: usize,
    id_fields: &[&str],
) -> ListDiff {
    let key = |v: &Value| {
        if id_fields.is_empty() {
            canonical(v)
        } else {
            canonical(&mask_ids(v, id_fields))
        }
    };
    let a: Vec<String> = base.iter().map(key).collect();
    let b: Vec<String> = head.iter().map(key).collect();
    let ops = align(&a, &b);
    let mut out = ListDiff::default();
    let mut ids = IdMap::default();
    for op in &ops {
        match *op {
            DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => {
                if !id_fields.is_empty() {
                    for k in 0..len {
                        let (i, j) = (old_index + k, new_index + k);
                        ids.pair(&base[i], &head[j], i, j, id_fields, &mut out.id_mismatches);
                    }
                }
            }
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
    out.moved = moved_pairs(&a, &b, &out.only_in_base, &out.only_in_head);
    out
}

/// [`ListDiff::moved`]: each element only in base paired with the first unpaired element only
/// in head of the same key (`a`/`b`: the keys the lists were aligned by), in base order.
fn moved_pairs(
    a: &[String],
    b: &[String],
    only_in_base: &[(usize, Value)],
    only_in_head: &[(usize, Value)],
) -> Vec<(usize, usize)> {
    let mut free: std::collections::HashMap<&str, std::collections::VecDeque<usize>> =
        std::collections::HashMap::new();
    for (j, _) in only_in_head {
        free.entry(b[*j].as_str()).or_default().push_back(*j);
    }
    only_in_base
        .iter()
        .filter_map(|(i, _)| {
            let j = free.get_mut(a[*i].as_str())?.pop_front()?;
            Some((*i, j))
        })
        .collect()
}

/// Largest `base × head` an exact LCS table may cover (4 bytes a cell: 64 MiB). Beyond it
/// (a 32 KB answer streamed a character a delta is 32 000 events a leg, a 4 GB table) the lists
/// are aligned by Myers' algorithm in linear space, which finds the same shortest edit script
/// on the lists legs produce (few differences) and stays bounded on hard ones.
const LCS_TABLE_CELLS: usize = 16 << 20;

/// How long Myers' search may run before it settles for a coarser, still correct, script.
const MYERS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The edit script between two lists of canonical keys: the exact LCS table while it is small,
/// else Myers, in bounded memory and time.
fn align(a: &[String], b: &[String]) -> Vec<DiffOp> {
    if a.len().saturating_mul(b.len()) <= LCS_TABLE_CELLS {
        capture_diff_slices(Algorithm::Lcs, a, b)
    } else {
        similar::capture_diff_slices_deadline(
            Algorithm::Myers,
            a,
            b,
            Some(std::time::Instant::now() + MYERS_DEADLINE),
        )
    }
}

/// Whether `v` under an id field is an interned id (`#1`, `#2`, …, what normalization made of
/// it). Only those are masked and matched as a renaming: a raw string under an id field was left
/// as it is on purpose (a tool's own `id` inside its arguments) and is compared as data.
fn interned(v: &Value) -> Option<&str> {
    let s = v.as_str()?;
    let n = s.strip_prefix('#')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

/// `v` with every interned id under an id field replaced by `#`.
pub fn mask_ids(v: &Value, id_fields: &[&str]) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let masked = if interned(x).is_some() && id_fields.contains(&k.as_str()) {
                        Value::String("#".into())
                    } else {
                        mask_ids(x, id_fields)
                    };
                    (k.clone(), masked)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| mask_ids(x, id_fields)).collect()),
        other => other.clone(),
    }
}

/// The id correspondence built over aligned pairs.
#[derive(Default)]
struct IdMap {
    forward: std::collections::HashMap<String, (String, usize, usize)>,
    backward: std::collections::HashMap<String, (String, usize, usize)>,
}

impl IdMap {
    fn pair(
        &mut self,
        a: &Value,
        b: &Value,
        i: usize,
        j: usize,
        id_fields: &[&str],
        out: &mut Vec<String>,
    ) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for (k, va) in x {
                    let Some(vb) = y.get(k) else { continue };
                    match (interned(va), interned(vb)) {
                        (Some(sa), Some(sb)) if id_fields.contains(&k.as_str()) => {
                            self.link(k, sa, sb, i, j, out)
                        }
                        _ => self.pair(va, vb, i, j, id_fields, out),
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                for (va, vb) in x.iter().zip(y) {
                    self.pair(va, vb, i, j, id_fields, out);
                }
            }
            _ => {}
        }
    }

    fn link(&mut self, field: &str, a: &str, b: &str, i: usize, j: usize, out: &mut Vec<String>) {
        if let Some((seen, pi, pj)) = self.forward.get(a)
            && seen != b
        {
            out.push(format!(
                "{field} {a} of base #{i} is {b} in head #{j}, but {seen} at base #{pi} / head #{pj}"
            ));
            return;
        }
        if let Some((seen, pi, pj)) = self.backward.get(b)
            && seen != a
        {
            out.push(format!(
                "{field} {b} of head #{j} is {a} in base #{i}, but {seen} at base #{pi} / head #{pj}"
            ));
            return;
        }
        self.forward
            .entry(a.to_string())
            .or_insert_with(|| (b.to_string(), i, j));
        self.backward
            .entry(b.to_string())
            .or_insert_with(|| (a.to_string(), i, j));
    }
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

/// `s` for display, with the characters a terminal or a report shows as nothing (or as a line
/// break inside what reads as one JSON string) written as `\uXXXX`, as JSON would escape them:
/// the line and paragraph separators U+2028/U+2029 (JSON.stringify leaves them raw), C1
/// controls, zero-width, joiner and bidirectional format characters, the soft hyphen, Hangul
/// fillers and the byte order mark. A diff that differs only there would otherwise show two identical lines. Only for
/// what is shown: comparisons use the values as they are. (A literal backslash is already
/// `\\` inside the JSON shown, so the escape cannot be mistaken for text.)
pub fn visible(s: &str) -> String {
    let hidden = |c: char| {
        matches!(c,
            '\u{0080}'..='\u{009F}'
            | '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}')
    };
    if !s.chars().any(hidden) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{:04X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// bb's one-line description of an element: `<type>[:<item.type>] <first 160 chars>`.
pub fn describe(v: &Value) -> String {
    // bb's events and rows name their type or kind; Bridle's events their Socket.IO event or
    // packet, Side Bridge's rows the message's sender. "?" only when none does.
    let ty = ["type", "kind", "event", "packet", "from"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or("?");
    let item = v
        .get("item")
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
        .map(|t| format!(":{t}"))
        .unwrap_or_default();
    let text = crate::jsjson::to_string(v);
    let (cut, more) = first_utf16_units(&text, 160);
    format!("{ty}{item} {cut}{}", if more { "…" } else { "" })
}

/// The first `n` UTF-16 units of `text`, as JavaScript's `slice(0, n)` cuts a string (bb's kit
/// cuts at 160), and whether there was more. A pair cut in half leaves U+FFFD, as a lone
/// surrogate decodes. Reads only as far as the cut: an event can hold megabytes of text.
fn first_utf16_units(text: &str, n: usize) -> (std::borrow::Cow<'_, str>, bool) {
    let mut units = 0;
    for (i, ch) in text.char_indices() {
        let w = ch.len_utf16();
        if units + w > n {
            return if units < n {
                (format!("{}\u{FFFD}", &text[..i]).into(), true)
            } else {
                (text[..i].into(), true)
            };
        }
        units += w;
    }
    (text.into(), false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each protocol's entries are labelled by what names them (they all read "?" but bb's).
    #[test]
    fn entries_are_labelled_by_their_own_name_field() {
        for (v, label) in [
            (json!({"type": "turn.started"}), "turn.started "),
            (json!({"dir": "hub→agent", "event": "message"}), "message "),
            (
                json!({"dir": "browser→hub", "packet": "connect"}),
                "connect ",
            ),
            (json!({"id": "#2", "from": "assistant"}), "assistant "),
            (json!({"id": "#2"}), "? "),
        ] {
            assert!(describe(&v).starts_with(label), "{v}: {}", describe(&v));
        }
    }

    /// The cut agrees with collecting every UTF-16 unit and decoding the first `n` (what
    /// `describe` did before it stopped reading at the cut).
    #[test]
    fn the_first_utf16_units_are_cut_as_javascript_slices() {
        for text in ["", "plain", "a😀b😀c", "😀😀😀", "é😀", "abcdefgh"] {
            for n in 0..12 {
                let units: Vec<u16> = text.encode_utf16().collect();
                let want = String::from_utf16_lossy(&units[..units.len().min(n)]);
                let (cut, more) = first_utf16_units(text, n);
                assert_eq!(
                    (cut.as_ref(), more),
                    (want.as_str(), units.len() > n),
                    "{text:?} {n}"
                );
            }
        }
    }

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

    /// Two legs of 40 000 one-character text deltas with one word changed: beyond the LCS
    /// table's bound (a 6.4 GB table) the lists are aligned in linear space, and the script is
    /// still exactly the changed deltas.
    #[test]
    fn long_lists_align_in_bounded_memory() {
        let n = 40_000;
        let ev =
            |i: usize, c: char| json!({"type": "item.delta", "i": i % 7, "text": c.to_string()});
        let base: Vec<Value> = (0..n).map(|i| ev(i, 'a')).collect();
        let mut head = base.clone();
        head[20_000] = ev(20_000, 'b');
        head[20_001] = ev(20_001, 'c');
        assert!(n * n > LCS_TABLE_CELLS);
        let d = diff_lists(&base, &head, 2);
        assert_eq!(d.only_in_base.len(), 2, "{:?}", d.only_in_base);
        assert_eq!(
            d.only_in_head,
            vec![
                (20_000, head[20_000].clone()),
                (20_001, head[20_001].clone())
            ]
        );
        assert_eq!(d.first.unwrap().base_index, 20_000);
    }

    #[test]
    fn one_inserted_element_is_exactly_that_element_despite_interned_ids() {
        let ev = |t: &str, id: &str| json!({"type": t, "item": {"id": id}});
        let base = vec![ev("a", "#1"), ev("b", "#2"), ev("c", "#3")];
        let head = vec![ev("a", "#1"), ev("x", "#2"), ev("b", "#3"), ev("c", "#4")];
        let d = diff_lists_ids(&base, &head, 2, &["id"]);
        assert!(d.only_in_base.is_empty(), "{d:?}");
        assert_eq!(d.only_in_head, vec![(1, ev("x", "#2"))]);
        assert!(d.id_mismatches.is_empty(), "{d:?}");
        // Without masking, every later element differs.
        assert_eq!(diff_lists(&base, &head, 2).only_in_head.len(), 3);
    }

    #[test]
    fn an_id_that_maps_two_ways_is_a_difference() {
        let ev = |id: &str| json!({"type": "t", "id": id});
        // Head reuses one id where base has two.
        let d = diff_lists_ids(&[ev("#1"), ev("#2")], &[ev("#1"), ev("#1")], 2, &["id"]);
        assert!(d.only_in_base.is_empty() && d.only_in_head.is_empty());
        assert_eq!(d.id_mismatches.len(), 1, "{d:?}");
        assert!(!d.is_empty());
    }

    #[test]
    fn key_order_does_not_matter() {
        let x: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let y: Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        assert!(diff_lists(&[x], &[y], 2).is_empty());
    }

    #[test]
    fn invisible_characters_are_escaped_for_display_only() {
        let v = serde_json::json!({"content": "a\u{2028}b\u{2029}c\u{200B}d\u{FEFF}e é 😀"});
        let shown = super::visible(&super::describe(&v));
        assert!(
            shown.contains(r"a\u2028b\u2029c\u200Bd\uFEFFe é 😀"),
            "{shown}"
        );
        assert_eq!(super::visible("plain é"), "plain é");
        let d = super::json_diff(
            &serde_json::json!({"c": "x\u{2028}y"}),
            &serde_json::json!({"c": "x\u{2029}y"}),
        );
        assert_eq!(d.len(), 1);
        assert_eq!(super::visible(&d[0]), r#"/c: "x\u2028y" → "x\u2029y""#);
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

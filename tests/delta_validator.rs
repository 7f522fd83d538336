//! The fast `thread/delta` validator (`bb::schema_fast`) against the general JSON Schema
//! validator as the oracle: every delta of every recording in `recordings/`, instances
//! generated from the schema itself (every kind, every item shape, every optional field and
//! every `anyOf` branch), and mutations of all of them (each field removed, each value replaced
//! by values of other types and edge cases) must get the same valid/invalid verdict from both.

use bridgewire::bb::delta::{PARAMS_FAST, PARAMS_SCHEMA, validate_params};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::Path;

fn schema() -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("rules/schema/bb-thread-delta-params.schema.json"),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every `thread/delta` delta in the bundled recordings.
fn corpus_deltas() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings");
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        if e.path().extension().is_none_or(|x| x != "ndjson") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(l) = entry["line"].as_str() else {
                continue;
            };
            if !l.contains("thread/delta") {
                continue;
            }
            let Ok(msg) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            if let Some(ds) = msg["params"]["deltas"].as_array() {
                for d in ds {
                    out.insert(d.to_string());
                }
            }
        }
    }
    out
}

/// Valid-looking instances of a schema node: a few alternatives covering its branches.
struct Gen<'a> {
    doc: &'a Value,
    depth: usize,
}

impl Gen<'_> {
    fn instances(&mut self, s: &Value) -> Vec<Value> {
        self.depth += 1;
        let out = self.instances_inner(s);
        self.depth -= 1;
        out
    }

    fn instances_inner(&mut self, s: &Value) -> Vec<Value> {
        if self.depth > 12 {
            return vec![json!(null)];
        }
        let Some(o) = s.as_object() else {
            return vec![json!({"any": 1})];
        };
        if let Some(r) = o.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/").unwrap();
            let target = self.doc["$defs"][name].clone();
            return self.instances(&target);
        }
        if let Some(c) = o.get("const") {
            return vec![c.clone()];
        }
        if let Some(e) = o.get("enum").and_then(Value::as_array) {
            return e.clone();
        }
        if let Some(any) = o.get("anyOf").and_then(Value::as_array) {
            return any.iter().flat_map(|b| self.instances(b)).collect();
        }
        let types: Vec<&str> = match o.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if o.contains_key("properties") || o.contains_key("required") => vec!["object"],
            _ => return vec![json!({"any": [1, "x", null]}), json!("raw"), json!(3)],
        };
        let mut out = Vec::new();
        for t in types {
            match t {
                "null" => out.push(Value::Null),
                "boolean" => out.extend([json!(true), json!(false)]),
                "integer" => out.push(json!(
                    o.get("minimum").and_then(Value::as_u64).unwrap_or(0) + 1
                )),
                "number" => out.extend([json!(2.5), json!(7)]),
                "string" => {
                    let s = match o.get("pattern").and_then(Value::as_str) {
                        Some(p) if p.starts_with("^creq_") => "creq_23456789ab".to_string(),
                        Some(p) if p.contains('/') => "my-plugin/a-name0".to_string(),
                        _ => {
                            let min = o.get("minLength").and_then(Value::as_u64).unwrap_or(0);
                            "s".repeat(min.max(1) as usize)
                        }
                    };
                    out.push(json!(s));
                }
                "array" => {
                    let items = o
                        .get("items")
                        .map(|i| self.instances(i))
                        .unwrap_or_default();
                    out.push(Value::Array(items.clone()));
                    if let Some(first) = items.into_iter().next() {
                        out.push(json!([first]));
                    }
                }
                "object" => out.extend(self.object(o)),
                other => panic!("type {other}"),
            }
        }
        out
    }

    fn object(&mut self, o: &Map<String, Value>) -> Vec<Value> {
        let empty = Map::new();
        let props = o
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required: Vec<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let alts: Vec<(String, Vec<Value>)> = props
            .iter()
            .map(|(k, s)| (k.clone(), self.instances(s)))
            .collect();
        let n = alts.iter().map(|(_, a)| a.len()).max().unwrap_or(1).max(1);
        let mut bases = Vec::new();
        for i in 0..n {
            let full: Map<String, Value> = alts
                .iter()
                .filter(|(_, a)| !a.is_empty())
                .map(|(k, a)| (k.clone(), a[i % a.len()].clone()))
                .collect();
            let minimal: Map<String, Value> = full
                .iter()
                .filter(|(k, _)| required.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            bases.push(full);
            bases.push(minimal);
        }
        // `allOf` of `if prop == c then S`: one set of instances per branch, merged in.
        let Some(all) = o.get("allOf").and_then(Value::as_array) else {
            return bases.into_iter().map(Value::Object).collect();
        };
        let mut out = Vec::new();
        for branch in all {
            let cond = &branch["if"]["properties"];
            let (prop, c) = cond.as_object().unwrap().iter().next().unwrap();
            let Some(c) = c.get("const").cloned() else {
                // Another condition (e.g. on a nested field): the bases already cover it.
                out.extend(bases.iter().cloned().map(Value::Object));
                continue;
            };
            for extra in self.instances(&branch["then"]) {
                for base in bases.iter().take(4) {
                    let mut m = base.clone();
                    if let Value::Object(e) = &extra {
                        for (k, v) in e {
                            m.insert(k.clone(), v.clone());
                        }
                    }
                    m.insert(prop.clone(), c.clone());
                    out.push(Value::Object(m));
                }
            }
        }
        out
    }
}

/// Every path in `v` (object keys and array indices).
fn paths(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                at.push(json!(k));
                out.push(at.clone());
                paths(c, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                at.push(json!(i));
                out.push(at.clone());
                paths(c, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn at_mut<'v>(v: &'v mut Value, path: &[Value]) -> &'v mut Value {
    let mut cur = v;
    for p in path {
        cur = match p {
            Value::String(k) => &mut cur[k.as_str()],
            Value::Number(i) => &mut cur[i.as_u64().unwrap() as usize],
            _ => unreachable!(),
        };
    }
    cur
}

/// The delta with the value at each path removed or replaced.
fn mutations(d: &Value) -> Vec<Value> {
    let replacements = [
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(2.0),
        json!(""),
        json!("x"),
        json!("a\u{1f}b"),
        json!("creq_23456789ab"),
        json!("completed"),
        json!("a/b"),
        json!([]),
        json!({}),
        json!("€".repeat(280)),
        json!("€".repeat(281)),
        json!("s".repeat(81)),
    ];
    let mut ps = Vec::new();
    paths(d, &mut Vec::new(), &mut ps);
    let mut out = Vec::new();
    for p in &ps {
        let (last, parent) = p.split_last().unwrap();
        let mut removed = d.clone();
        match (at_mut(&mut removed, parent), last) {
            (Value::Object(m), Value::String(k)) => {
                m.remove(k);
            }
            (Value::Array(a), Value::Number(i)) => {
                a.remove(i.as_u64().unwrap() as usize);
            }
            _ => unreachable!(),
        }
        out.push(removed);
        for r in &replacements {
            let mut m = d.clone();
            *at_mut(&mut m, p) = r.clone();
            out.push(m);
        }
    }
    out
}

fn params(deltas: Vec<Value>) -> Value {
    json!({"threadId": "thr_1", "deltas": deltas})
}

#[test]
fn fast_validator_agrees_with_the_json_schema_on_every_case() {
    let doc = schema();
    let corpus: Vec<Value> = corpus_deltas()
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert!(!corpus.is_empty(), "no deltas in recordings/");
    let all_generated = Gen {
        doc: &doc,
        depth: 0,
    }
    .instances(&doc["$defs"]["delta"]);
    // At most 40 per kind, spread over what was generated (the alternatives multiply).
    let mut generated = Vec::new();
    let mut by_kind: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for d in all_generated {
        by_kind
            .entry(d["kind"].as_str().unwrap_or("").to_string())
            .or_default()
            .push(d);
    }
    for list in by_kind.values() {
        let step = list.len().div_ceil(40);
        generated.extend(list.iter().step_by(step).cloned());
    }
    let mut cases: Vec<Value> = Vec::new();
    let mut seen = BTreeSet::new();
    // Every original, and a quarter of the mutations (a different quarter for each delta);
    // BRIDGEWIRE_DELTA_ORACLE_FULL=1 checks them all (about 130 000 cases, a minute).
    let stride = if std::env::var_os("BRIDGEWIRE_DELTA_ORACLE_FULL").is_some() {
        1
    } else {
        4
    };
    for (i, d) in corpus.iter().chain(&generated).enumerate() {
        let kept = mutations(d)
            .into_iter()
            .enumerate()
            .filter(|(j, _)| (i + j) % stride == 0)
            .map(|(_, m)| m);
        for c in std::iter::once(d.clone()).chain(kept) {
            if seen.insert(c.to_string()) {
                cases.push(c);
            }
        }
    }
    let (mut valid, mut invalid) = (0usize, 0usize);
    let mut valid_kinds = BTreeSet::new();
    let mut disagreements = Vec::new();
    let mut check = |p: &Value| {
        let oracle = PARAMS_SCHEMA.is_valid(p);
        if PARAMS_FAST.is_valid(p) != oracle {
            disagreements.push(format!("schema says {oracle}: {p}"));
        }
        oracle
    };
    for d in &cases {
        if check(&params(vec![d.clone()])) {
            valid += 1;
            valid_kinds.insert(d["kind"].as_str().unwrap_or("").to_string());
        } else {
            invalid += 1;
        }
    }
    // Params-level shapes, and several deltas in one message.
    for p in [
        json!({"threadId": "", "deltas": []}),
        json!({"threadId": "t", "deltas": {}}),
        json!({"threadId": 1, "deltas": []}),
        json!({"deltas": []}),
        json!({"threadId": "t"}),
        json!({"threadId": "t", "deltas": [], "extra": 1}),
        json!([]),
        json!(null),
        params(corpus.iter().take(40).cloned().collect()),
        params(vec![
            corpus[0].clone(),
            json!({"kind": "turn.open", "providerTurnId": ""}),
        ]),
    ] {
        check(&p);
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree, e.g.:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements[..disagreements.len().min(10)].join("\n")
    );
    // The generator reaches a valid instance of every kind the schema lists.
    let kinds: BTreeSet<String> = doc["$defs"]["delta"]["properties"]["kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(valid_kinds, kinds, "kinds without a valid case");
    assert!(valid > 0 && invalid > 0, "valid {valid}, invalid {invalid}");
    eprintln!(
        "{} cases ({valid} valid, {invalid} invalid) from {} corpus and {} generated deltas",
        cases.len(),
        corpus.len(),
        generated.len()
    );
}

#[test]
fn an_invalid_message_is_still_named_by_the_general_validator() {
    let e = validate_params(&params(vec![
        json!({"kind": "turn.boundary", "status": "x"}),
    ]))
    .unwrap_err();
    assert!(
        e.starts_with("deltas[0] (turn.boundary): status: \"x\" is not allowed"),
        "{e}"
    );
}

//! bridgewire's bb-strict JSON Schemas (`rules/schema/bb-thread-delta-params.schema.json`,
//! `rules/schema/bb-thread-event.schema.json`) checked against the protocol's own description
//! (`rules/schema/bb-grammar-v3.md`: the grammar tables and bb's domain values): every kind and
//! item shape with exactly its required fields, every listed optional field, every listed enum,
//! and bb's formats.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn read(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("rules/schema")
            .join(name),
    )
    .unwrap()
}

fn schema(name: &str) -> Value {
    serde_json::from_str(&read(name)).unwrap()
}

/// The rows `| name | cells |` of the table under `heading`.
fn table(doc: &str, heading: &str) -> Vec<(String, String)> {
    let start = doc.find(heading).unwrap_or_else(|| panic!("no {heading}"));
    doc[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').splitn(2, " | ").collect();
            (
                cells[0].trim().trim_matches('`').to_string(),
                cells[1].trim().trim_end_matches('|').trim().to_string(),
            )
        })
        .collect()
}

/// Splits a field list on top-level commas (not inside `()` or `{}`).
fn fields(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in cell.chars() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|f| f.trim().to_string())
        .filter(|f| f.starts_with('`'))
        .collect()
}

/// `(name, optional, enum values listed in its parenthesis)`.
fn parse_field(f: &str) -> (String, bool, Option<BTreeSet<String>>) {
    let name_part = f.trim_start_matches('`');
    let end = name_part.find('`').unwrap();
    let raw = name_part[..end].split_whitespace().next().unwrap();
    let optional = raw.ends_with('?');
    let name = raw.trim_end_matches('?').trim_end_matches("[]").to_string();
    let rest = &name_part[end + 1..];
    let values = rest.find('(').and_then(|open| {
        let inner = &rest[open + 1..rest.rfind(')')?];
        let vals: BTreeSet<String> = inner
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|v| v.trim_matches('"').to_string())
            .collect();
        let plain = !vals.is_empty()
            && vals
                .iter()
                .all(|v| v.chars().all(|c| c.is_ascii_alphabetic()))
            && !inner.contains("shape");
        plain.then_some(vals)
    });
    (name, optional, values)
}

fn resolve<'a>(root: &'a Value, mut v: &'a Value) -> &'a Value {
    while let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        v = &root["$defs"][name];
    }
    v
}

fn enum_of(root: &Value, v: &Value) -> Option<BTreeSet<String>> {
    let v = resolve(root, v);
    if let Some(c) = v.get("const") {
        return Some([c.as_str()?.to_string()].into());
    }
    v.get("enum")?
        .as_array()?
        .iter()
        .map(|x| x.as_str().map(str::to_string))
        .collect()
}

fn required(v: &Value) -> BTreeSet<String> {
    v["required"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// One table row against its schema definition: same required set, every field declared,
/// listed values equal.
fn check_row(root: &Value, def: &Value, what: &str, cell: &str, implicit: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut want_required: BTreeSet<String> = implicit.iter().map(|s| s.to_string()).collect();
    for f in fields(cell) {
        let (name, optional, values) = parse_field(&f);
        if !optional {
            want_required.insert(name.clone());
        }
        let Some(prop) = def["properties"].get(&name) else {
            problems.push(format!("{what}: field {name} is not in the schema"));
            continue;
        };
        if let Some(values) = values {
            match enum_of(root, prop) {
                Some(have) if have == values => {}
                other => problems.push(format!(
                    "{what}.{name}: document lists {values:?}, schema {other:?}"
                )),
            }
        }
    }
    let have_required = required(def);
    if have_required != want_required {
        problems.push(format!(
            "{what}: document requires {want_required:?}, schema {have_required:?}"
        ));
    }
    problems
}

#[test]
fn delta_schema_matches_the_grammar_tables() {
    let doc = read("bb-grammar-v3.md");
    let s = schema("bb-thread-delta-params.schema.json");
    let mut problems = Vec::new();

    let kinds = table(&doc, "### 11.1 Kinds");
    assert_eq!(kinds.len(), 27, "the 27 kinds of grammar v3");
    let listed: BTreeSet<String> = kinds.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        Some(listed),
        enum_of(&s, &s["$defs"]["delta"]["properties"]["kind"])
    );
    for (kind, cell) in &kinds {
        let def = &s["$defs"][format!("delta_{kind}")];
        // `channel (as above)` names the text channels of `item.textDelta`.
        let cell = cell.replace(
            "`channel` (as above)",
            "`channel` (`agentMessage`, `reasoningSummary`, `reasoningText`, `plan`)",
        );
        problems.extend(check_row(&s, def, kind, &cell, &[]));
    }

    let shapes = table(&doc, "### 11.2 Item shapes");
    assert_eq!(shapes.len(), 17);
    let listed: BTreeSet<String> = shapes.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        Some(listed),
        enum_of(&s, &s["$defs"]["itemShape"]["properties"]["type"])
    );
    for (shape, cell) in &shapes {
        let def = &s["$defs"][format!("shape_{shape}")];
        problems.extend(check_row(&s, def, shape, cell, &["type"]));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn schemas_use_bbs_domain_values() {
    let doc = read("bb-grammar-v3.md");
    let values: std::collections::BTreeMap<String, BTreeSet<String>> =
        table(&doc, "### bb's domain values")
            .into_iter()
            .map(|(k, v)| {
                let set = v
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect();
                (k, set)
            })
            .collect();
    let d = schema("bb-thread-delta-params.schema.json");
    let e = schema("bb-thread-event.schema.json");
    for (s, def, value) in [
        (&d, "turnStatus", "turn status"),
        (&d, "itemStatus", "item status"),
        (&d, "planStepStatus", "plan-step status"),
        (&d, "warningCategory", "warning category"),
        (&d, "backgroundTaskStatus", "background-task status"),
        (&d, "providerErrorCategory", "error category"),
        (&e, "turnStatus", "turn status"),
        (&e, "itemStatus", "item status"),
        (&e, "planStepStatus", "plan-step status"),
        (&e, "warningCategory", "warning category"),
        (&e, "backgroundTaskStatus", "background-task status"),
    ] {
        assert_eq!(
            enum_of(s, &s["$defs"][def]).as_ref(),
            Some(&values[value]),
            "{def}"
        );
    }
    assert_eq!(
        enum_of(&d, &d["$defs"]["shape_search"]["properties"]["mode"]).as_ref(),
        Some(&values["search mode"])
    );
    assert_eq!(
        enum_of(
            &d,
            &d["$defs"]["shape_fileChange"]["properties"]["changes"]["items"]["properties"]["kind"]
        )
        .as_ref(),
        Some(&values["file-change kind"])
    );

    // Formats: the schema's pattern accepts exactly what the document describes.
    let id_schema = jsonschema::validator_for(&d["$defs"]["clientTurnRequestId"]).unwrap();
    let alphabet = "23456789abcdefghijkmnpqrstuvwxyz";
    assert!(values["clientRequestId"].contains(alphabet));
    for ok in ["creq_2222222223", "creq_zzzzzzzzzz", "creq_abcdefghij"] {
        assert!(id_schema.is_valid(&Value::from(ok)), "{ok}");
    }
    for bad in [
        "creq_1",
        "creq_222222222l",
        "creq_22222222220",
        "req_2222222223",
        "creq_222222222",
        "CREQ_2222222223",
    ] {
        assert!(!id_schema.is_valid(&Value::from(bad)), "{bad}");
    }
    let kind_schema = jsonschema::validator_for(&d["$defs"]["extensionKind"]).unwrap();
    for ok in ["echo-provider/mood", "a1/b-2"] {
        assert!(kind_schema.is_valid(&Value::from(ok)), "{ok}");
    }
    for bad in ["Echo/mood", "a/b/c", "a_b/c", "/b", "a/"] {
        assert!(!kind_schema.is_valid(&Value::from(bad)), "{bad}");
    }
    let p = resolve(&d, &d["$defs"]["presentation"]);
    assert_eq!(required(p), ["icon", "label"].map(String::from).into());
    assert_eq!(p["properties"]["detail"]["maxLength"], 280);
}

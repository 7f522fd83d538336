//! The rule catalogue is data (`rules/*.json`): every file matches
//! `rules/schema/catalogue.schema.json`, and the live bb rules in the catalogue are exactly the
//! ones the conformance kit checks in code.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn load(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_catalogue_file_matches_the_schema() {
    let schema = load(&root().join("rules/schema/catalogue.schema.json"));
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let mut n = 0;
    for entry in std::fs::read_dir(root().join("rules")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        n += 1;
        let doc = load(&p);
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}:\n{}", p.display(), errors.join("\n"));
        // (protocol, id, mode) is unique.
        let mut seen = BTreeSet::new();
        for r in doc.as_array().unwrap() {
            let key = (
                r["protocol"].to_string(),
                r["id"].to_string(),
                r["mode"].to_string(),
            );
            assert!(
                seen.insert(key.clone()),
                "{}: duplicate {key:?}",
                p.display()
            );
        }
    }
    assert!(n >= 1);
    // The embedded catalogue parses into RuleInfo too.
    assert!(!bridgewire::rule::catalogue().is_empty());
}

#[test]
fn the_schema_refuses_bad_entries() {
    let schema = load(&root().join("rules/schema/catalogue.schema.json"));
    let validator = jsonschema::validator_for(&schema).unwrap();
    let good = serde_json::json!([{"id": "a/b", "protocol": "bb", "level": "MUST", "section": "x", "mode": "live", "description": "d"}]);
    assert!(validator.is_valid(&good));
    for bad in [
        serde_json::json!([{"id": "a/b", "protocol": "bb", "level": "MAY", "section": "x", "mode": "live", "description": "d"}]),
        serde_json::json!([{"id": "a/b", "protocol": "bb", "level": "MUST", "section": "x", "mode": "later", "description": "d"}]),
        serde_json::json!([{"id": "a/b", "protocol": "bb", "level": "MUST", "section": "x", "mode": "live"}]),
        serde_json::json!([{"id": "a/b", "protocol": "bb", "level": "MUST", "section": "x", "mode": "live", "description": "d", "extra": 1}]),
    ] {
        assert!(!validator.is_valid(&bad), "{bad}");
    }
}

#[test]
fn live_bb_rules_in_the_catalogue_are_exactly_the_checks_in_code() {
    let catalogue: BTreeSet<String> = bridgewire::rule::catalogue()
        .into_iter()
        .filter(|r| r.protocol == "bb" && r.mode == "live")
        .map(|r| r.id)
        .collect();
    let code: BTreeSet<String> = bridgewire::bb::conformance::LIVE_RULES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let missing_check: Vec<_> = catalogue.difference(&code).collect();
    let missing_entry: Vec<_> = code.difference(&catalogue).collect();
    assert!(
        missing_check.is_empty(),
        "catalogued without a check: {missing_check:?}"
    );
    assert!(
        missing_entry.is_empty(),
        "checked without a catalogue entry: {missing_entry:?}"
    );
    assert_eq!(
        code.len(),
        bridgewire::bb::conformance::LIVE_RULES.len(),
        "duplicate in LIVE_RULES"
    );
    // Opt-in rules name their fixture key.
    for r in bridgewire::rule::catalogue() {
        if [
            "presentation/icon-namespaced-declared",
            "turn/settles-without-activity",
            "session/threads-independent",
            "stop/interrupt-settles-before-result",
        ]
        .contains(&r.id.as_str())
            && r.mode == "live"
        {
            assert!(r.fixture.is_some(), "{} lacks its fixture key", r.id);
        }
    }
}

#[test]
fn recorded_rules_are_catalogued() {
    let recorded: BTreeSet<String> = bridgewire::rule::catalogue()
        .into_iter()
        .filter(|r| r.protocol == "bb" && r.mode == "recorded")
        .map(|r| r.id)
        .collect();
    for id in [
        "recorded/replays",
        "recorded/events-schema-valid",
        "recorded/grammar",
        "recorded/turn-lifecycle",
        "recorded/not-empty",
        "recorded/matches-recording",
    ] {
        assert!(recorded.contains(id), "{id}");
    }
}

#[test]
fn thread_delta_schema_kinds_match_the_grammar() {
    let s: Value =
        serde_json::from_str(bridgewire::bb::conformance::schema::THREAD_DELTA_PARAMS).unwrap();
    let kinds: BTreeSet<&str> = s["$defs"]["delta"]["properties"]["kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        bridgewire::bb::delta::KINDS.iter().copied().collect()
    );
}

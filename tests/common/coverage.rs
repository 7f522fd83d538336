//! `tests/peers/coverage.tsv`: for each catalogue rule, the test that makes it fail against a
//! peer that is not ours and the one where an unusual but legal peer passes it (or `MISSING:
//! why`). Each protocol's peer test checks its lines against its own tables.

use std::path::Path;

/// One cell entry: a row or divergence name, or a named gap.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Named(String),
    Missing(String),
}

#[derive(Debug)]
pub struct Line {
    /// `tests/peers/coverage.tsv:N`, for messages.
    pub at: String,
    pub protocol: String,
    pub rule: String,
    pub fails: Vec<Entry>,
    pub passes: Vec<Entry>,
}

fn entries(cell: &str) -> Vec<Entry> {
    cell.split(" | ")
        .map(str::trim)
        .map(|e| match e.strip_prefix("MISSING:") {
            Some(why) => Entry::Missing(why.trim().to_string()),
            None => Entry::Named(e.to_string()),
        })
        .collect()
}

/// The lines for `protocol`; panics naming file:line on a malformed line.
pub fn lines(protocol: &str) -> Vec<Line> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/coverage.tsv");
    let text = std::fs::read_to_string(&path).expect("tests/peers/coverage.tsv");
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let at = format!("tests/peers/coverage.tsv:{}", n + 1);
        let cells: Vec<&str> = l.split('\t').collect();
        assert_eq!(
            cells.len(),
            4,
            "{at}: 4 tab-separated cells expected: {l:?}"
        );
        if cells[0] != protocol {
            continue;
        }
        let line = Line {
            at,
            protocol: cells[0].to_string(),
            rule: cells[1].to_string(),
            fails: entries(cells[2]),
            passes: entries(cells[3]),
        };
        for e in line.fails.iter().chain(&line.passes) {
            match e {
                Entry::Missing(why) => assert!(!why.is_empty(), "{}: MISSING without why", line.at),
                Entry::Named(n) => assert!(!n.is_empty(), "{}: an empty entry", line.at),
            }
        }
        out.push(line);
    }
    out
}

/// The rule ids of `rules/<protocol>.json` with their levels, in catalogue order.
pub fn catalogue(protocol: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("rules/{protocol}.json"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["level"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every catalogue rule of `protocol` has exactly one line and every line names a catalogue
/// rule; returns the lines with the rule's level.
pub fn lines_for_catalogue(protocol: &str) -> Vec<(Line, String)> {
    let cat = catalogue(protocol);
    let lines = lines(protocol);
    let mut problems = Vec::new();
    for (id, _) in &cat {
        let n = lines.iter().filter(|l| &l.rule == id).count();
        if n != 1 {
            problems.push(format!(
                "{protocol} {id}: {n} lines in tests/peers/coverage.tsv, want 1"
            ));
        }
    }
    for l in &lines {
        if !cat.iter().any(|(id, _)| *id == l.rule) {
            problems.push(format!(
                "{}: {} is not in rules/{protocol}.json",
                l.at, l.rule
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    lines
        .into_iter()
        .map(|l| {
            let level = cat.iter().find(|(id, _)| *id == l.rule).unwrap().1.clone();
            (l, level)
        })
        .collect()
}

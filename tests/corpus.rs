//! The real bb corpus: bridgewire must reproduce bb's own pinned `events`, `rows`, `unhandled`
//! and `grammarDrops` for every cell exactly. The expected values come from bb's tooling
//! (`recordings/bb/bb-row-counts.json`, copied unchanged from the public bb project), not from
//! bridgewire.

use bridgewire::pins::{self, Counts};
use std::path::Path;

#[test]
fn reproduces_bbs_own_pins_for_every_corpus_cell() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb");
    let bb_pins = pins::load(&root.join("bb-row-counts.json")).unwrap();
    let cells = bridgewire::cell::discover(&root).unwrap();
    assert_eq!(cells.len(), bb_pins.len(), "one cell per bb pin");
    let mut mismatches = Vec::new();
    for cell in &cells {
        let expected = Counts::from_json(&bb_pins[&cell.key]).expect("bb pin shape");
        let got = pins::compute(cell, None);
        assert!(
            got.lane_errors.is_empty(),
            "{}: {:?}",
            cell.key,
            got.lane_errors
        );
        assert!(got.invalid.is_empty(), "{}: {:?}", cell.key, got.invalid);
        if expected != got.counts {
            mismatches.push(format!(
                "{}: bb {:?}, bridgewire {:?}",
                cell.key, expected, got.counts
            ));
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

/// `pins --update` over the corpus writes a file bb's pins test accepts: the same cells with the
/// same four counts as bb's own file (key order aside, which bb's JSON reader ignores).
#[test]
fn pins_update_writes_bbs_own_pins() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb");
    let t = tempfile::tempdir().unwrap();
    for cell in bridgewire::cell::discover(&root).unwrap() {
        let dest = t.path().join(&cell.key);
        std::fs::create_dir_all(&dest).unwrap();
        for f in std::fs::read_dir(&cell.path).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dest.join(f.file_name().unwrap())).unwrap();
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bridgewire"))
        .args(["pins", "--update"])
        .arg(t.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("row-counts.json")).unwrap()).unwrap();
    let bb: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("bb-row-counts.json")).unwrap()).unwrap();
    assert_eq!(written, bb);
}

/// bb's own recordings are valid under bridgewire's bb-strict schemas (no false alarm on what bb
/// itself produced), and so are the bundled reference-bridge cells (no bb-invalid line).
#[test]
fn every_bundled_bb_line_and_event_is_bb_valid() {
    use bridgewire::protocol::{EventSink, GrammarDrop};
    struct Check(Vec<String>, usize);
    impl EventSink for Check {
        fn event(&mut self, event: serde_json::Value) {
            self.1 += 1;
            if let Err(e) = bridgewire::bb::recorded::event_schema_check(&event) {
                self.0.push(format!("{e}: {event}"));
            }
        }
        fn grammar_drop(&mut self, _: GrammarDrop) {}
        fn invalid(&mut self, m: String) {
            self.0.push(m);
        }
    }
    let mut cells = Vec::new();
    for dir in ["recordings/bb", "recordings/bb-ref"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        cells.extend(bridgewire::cell::discover(&root).unwrap());
    }
    assert!(cells.len() >= 18);
    for cell in cells {
        let mut sink = Check(Vec::new(), 0);
        cell.protocol
            .model()
            .assemble(&cell, &mut cell.merged(), &mut sink);
        assert!(sink.1 > 0, "{}", cell.key);
        assert!(sink.0.is_empty(), "{}: {:#?}", cell.key, sink.0);
    }
}

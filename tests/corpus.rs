//! The real bb corpus: bridgewire must reproduce bb's own pinned `events`, `unhandled` and
//! `grammarDrops` for every cell exactly. The expected values come from bb's tooling
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
        let (e, g) = (expected, got.counts);
        if (e.events, e.unhandled, e.grammar_drops) != (g.events, g.unhandled, g.grammar_drops) {
            mismatches.push(format!("{}: bb {:?}, bridgewire {:?}", cell.key, e, g));
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

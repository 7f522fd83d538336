//! `pins` streams its results (cells in chunks, JSON written cell by cell, the pins file entry by
//! entry): what it prints and writes is exactly the whole-document rendering.

use std::path::Path;
use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

fn root(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("recordings")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn json_report_is_the_pretty_printed_document() {
    for args in [
        vec![root("bb"), root("bb-ref")],
        vec!["--cell".into(), "no-such-cell".into(), root("bb")],
    ] {
        let out = Command::new(BW)
            .args(["pins", "--format", "json"])
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        if args[0] == "--cell" {
            assert_eq!(text, "", "nothing selected prints no document");
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            text,
            bridgewire::jsjson::to_string_pretty(&doc),
            "streamed JSON differs from the whole document"
        );
        let cells = doc["cells"].as_array().unwrap();
        let found = bridgewire::cell::discover(Path::new(&root("bb")))
            .unwrap()
            .len()
            + bridgewire::cell::discover(Path::new(&root("bb-ref")))
                .unwrap()
                .len();
        assert_eq!(cells.len(), found);
    }
}

#[test]
fn updated_pins_file_is_the_rendered_one_and_checks_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bb");
    for e in walkdir::WalkDir::new(root("bb")) {
        let e = e.unwrap();
        let to = dir.join(e.path().strip_prefix(root("bb")).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
    let pins = dir.join("row-counts.json");
    // A stale pin of a cell that is gone is dropped.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pins).unwrap()).unwrap();
    v["gone/cell"] = serde_json::json!({"events": 1, "rows": 1, "unhandled": 0, "grammarDrops": 0});
    std::fs::write(&pins, bridgewire::jsjson::to_string_pretty(&v)).unwrap();
    let out = Command::new(BW)
        .args(["pins", "--update"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("DROP gone/cell: pinned but no recording")
    );
    let written = std::fs::read_to_string(&pins).unwrap();
    let loaded: std::collections::BTreeMap<String, bridgewire::pins::Counts> =
        bridgewire::pins::load(&pins)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, bridgewire::pins::Counts::from_json(&v).unwrap()))
            .collect();
    assert_eq!(written, bridgewire::pins::render(&loaded));
    assert!(!loaded.contains_key("gone/cell"));
    let check = Command::new(BW).arg("pins").arg(&dir).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

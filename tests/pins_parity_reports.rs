//! Reports of `pins` and `parity` (JUnit, Markdown, HTML, JSON), and pins that refuse to pin
//! damage: `--update` writes nothing when a recording failed to load, and a failing `pins`
//! prints the command that accepts the new counts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const CELL: &str = "bb-ref/fork";

fn bw(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BW).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A recordings folder with one bundled cell, pinned.
fn pinned(t: &Path, name: &str) -> PathBuf {
    let root = t.join(name);
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("recordings/bb-ref")
        .join(CELL);
    let to = root.join(CELL);
    fs::create_dir_all(&to).unwrap();
    for f in fs::read_dir(&from).unwrap() {
        let f = f.unwrap().path();
        fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
    }
    let (code, out, err) = bw(&["pins", "--update", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    root
}

/// Drops the last bridge→runtime entry that carries a `thread/delta` (fewer events).
fn drop_a_delta(root: &Path) {
    let lane = root.join(CELL).join("bridge→runtime.ndjson");
    let text = fs::read_to_string(&lane).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let i = lines
        .iter()
        .rposition(|l| l.contains("thread/delta") && l.contains("item.close"))
        .expect("a delta");
    lines.remove(i);
    fs::write(&lane, lines.join("\n") + "\n").unwrap();
}

#[test]
fn a_failing_pins_prints_the_update_command_and_update_refuses_unloaded_recordings() {
    let t = tempfile::tempdir().unwrap();
    let root = pinned(t.path(), "rec");
    let r = root.to_str().unwrap();
    drop_a_delta(&root);
    let (code, out, err) = bw(&["pins", r]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("FAIL {CELL}")), "{out}");
    assert!(
        out.contains(&format!(
            "update the pins with:\n  bridgewire pins --update {r}"
        )),
        "{out}"
    );

    // A lane that cannot be read: --update refuses and leaves the pins as they were.
    let pins = fs::read(root.join("row-counts.json")).unwrap();
    let lane = root.join(CELL).join("runtime→bridge.ndjson");
    let mut text = fs::read_to_string(&lane).unwrap();
    text.push_str("{not json\n");
    fs::write(&lane, text).unwrap();
    let (code, out, err) = bw(&["pins", "--update", r]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("not updated"), "{err}");
    assert!(err.contains(CELL), "{err}");
    assert_eq!(fs::read(root.join("row-counts.json")).unwrap(), pins);
}

#[test]
fn pins_and_parity_write_junit_markdown_html_and_json() {
    let t = tempfile::tempdir().unwrap();
    let base = pinned(t.path(), "base");
    let head = pinned(t.path(), "head");
    drop_a_delta(&head);
    let out_dir = t.path().join("reports");
    let path = |n: &str| out_dir.join(n).display().to_string();

    let (code, out, err) = bw(&[
        "pins",
        head.to_str().unwrap(),
        "--junit",
        &path("pins.xml"),
        "--markdown",
        &path("pins.md"),
        "--html",
        &path("pins.html"),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let junit = fs::read_to_string(out_dir.join("pins.xml")).unwrap();
    assert!(
        junit.contains(CELL) && junit.contains("<failure"),
        "{junit}"
    );
    assert!(
        fs::read_to_string(out_dir.join("pins.md"))
            .unwrap()
            .contains(CELL)
    );
    assert!(
        fs::read_to_string(out_dir.join("pins.html"))
            .unwrap()
            .contains(CELL)
    );

    let (code, out, err) = bw(&[
        "parity",
        "--base",
        &format!("rec:{}", base.display()),
        "--head",
        &format!("rec:{}", head.display()),
        "--junit",
        &path("parity.xml"),
        "--markdown",
        &path("parity.md"),
        "--html",
        &path("parity.html"),
        "--format",
        "json",
        base.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let cell = &doc["cells"][0];
    assert_eq!(cell["cell"], CELL);
    assert_eq!(cell["outcome"], "fail");
    assert_eq!(doc["summary"]["failed"], 1);
    let removed = cell["events"]["onlyInBase"].as_array().unwrap().len();
    assert!(removed >= 1, "{cell}");
    let junit = fs::read_to_string(out_dir.join("parity.xml")).unwrap();
    assert!(
        junit.contains(CELL) && junit.contains("<failure"),
        "{junit}"
    );
    let md = fs::read_to_string(out_dir.join("parity.md")).unwrap();
    assert!(md.contains(CELL), "{md}");
    // Parity's waits are bounded by --timeout-ms (default 15 s); pins have none, so no bound
    // is printed for them (it said "per-wait timeout 0 ms").
    assert!(md.contains("per-wait timeout 15000 ms"), "{md}");
    let pins_md = fs::read_to_string(out_dir.join("pins.md")).unwrap();
    assert!(!pins_md.contains("per-wait timeout"), "{pins_md}");
    assert!(
        fs::read_to_string(out_dir.join("parity.html"))
            .unwrap()
            .contains(CELL)
    );
}

#[test]
fn a_failing_check_keeps_pending_changes_that_review_accepts_or_rejects() {
    let t = tempfile::tempdir().unwrap();
    let root = pinned(t.path(), "rec");
    let r = root.to_str().unwrap();
    let pins_before = fs::read(root.join("row-counts.json")).unwrap();
    drop_a_delta(&root);
    let (code, out, _) = bw(&["pins", r]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("bridgewire pins --review {r}")),
        "{out}"
    );
    let pending = root.join("row-counts.pending.json");
    assert!(pending.exists());

    // Rejected: the pins stay, the pending change goes.
    let (code, out, err) = bw(&["pins", "--review", "--reject", r]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{CELL}: events ")),
        "old → new shown: {out}"
    );
    assert!(out.contains("rejected"), "{out}");
    assert_eq!(fs::read(root.join("row-counts.json")).unwrap(), pins_before);
    assert!(!pending.exists());

    // Accepted interactively: the new counts become the pins, and the check passes.
    let (code, _, _) = bw(&["pins", r]);
    assert_eq!(code, 1);
    let mut child = Command::new(BW)
        .args(["pins", "--review", r])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        writeln!(child.stdin.as_mut().unwrap(), "a").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("accepted"), "{text}");
    assert!(!pending.exists());
    let (code, out, err) = bw(&["pins", r]);
    assert_eq!(code, 0, "{out}{err}");
}

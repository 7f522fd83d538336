//! `bridgewire pins` and `bridgewire lanes` on bad input: every case is a named error with its
//! location, a defined exit code, and no panic.

mod common;

use assert_cmd::Command;
use std::fs;
use std::path::Path;

const DIR: &str = "bridge→runtime";

fn bw() -> Command {
    Command::cargo_bin("bridgewire").unwrap()
}

fn entry(seq: u64, line: &str) -> String {
    let e = bridgewire::lane::Entry {
        ts: 1.0,
        run: 1.0,
        seq: seq as f64,
        dir: DIR.into(),
        line: line.into(),
        extra: Default::default(),
    };
    e.to_line()
}

fn delta(deltas: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"thread/delta","params":{{"threadId":"thr_1","deltas":[{deltas}]}}}}"#
    )
}

/// A small valid turn: open, one streamed message, settle.
fn good_lane() -> String {
    [
        entry(1, &delta(r#"{"kind":"session.reset"},{"kind":"input.accepted","clientRequestId":"creq_2222222223"},{"kind":"turn.open"}"#)),
        entry(2, &delta(r#"{"kind":"item.textDelta","key":{"channel":"assistant"},"channel":"agentMessage","text":"hi"}"#)),
        entry(3, &delta(r#"{"kind":"item.textClose","key":{"channel":"assistant"},"channel":"agentMessage"}"#)),
        entry(4, &delta(r#"{"kind":"turn.boundary","status":"completed"}"#)),
    ]
    .join("\n")
        + "\n"
}

fn cell(root: &Path, name: &str, lane: &[u8]) {
    let d = root.join("prov").join(name);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join(format!("{DIR}.ndjson")), lane).unwrap();
}

fn run_pins(root: &Path) -> (i32, String, String) {
    let out = bw().arg("pins").arg(root).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn good_cell_pins_round_trip() {
    let t = tempfile::tempdir().unwrap();
    cell(t.path(), "ok", good_lane().as_bytes());
    let out = bw()
        .args(["pins", "--update"])
        .arg(t.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let pins = fs::read_to_string(t.path().join("row-counts.json")).unwrap();
    // turn/started, turn/input/accepted, item/started, delta, item/completed, turn/completed
    assert!(pins.contains("\"events\": 6"), "{pins}");
    let (code, stdout, _) = run_pins(t.path());
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.ends_with("1 passed, 0 failed\n"), "{stdout}");
}

#[test]
fn changed_counts_print_old_to_new_and_fail() {
    let t = tempfile::tempdir().unwrap();
    cell(t.path(), "ok", good_lane().as_bytes());
    bw().args(["pins", "--update"])
        .arg(t.path())
        .assert()
        .success();
    // An extra delta event changes the count.
    let mut lane = good_lane();
    lane.push_str(&entry(5, &delta(r#"{"kind":"thread.name","name":"x"}"#)));
    lane.push('\n');
    cell(t.path(), "ok", lane.as_bytes());
    let (code, stdout, _) = run_pins(t.path());
    assert_eq!(code, 1);
    assert!(stdout.contains("FAIL prov/ok: events 6 → 7"), "{stdout}");
}

#[test]
fn malformed_entries_are_named_by_file_and_line_and_the_rest_loads() {
    let t = tempfile::tempdir().unwrap();
    let good = good_lane();
    let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
    lines.insert(1, "{not json".into());
    lines.insert(
        2,
        r#"{"ts":1,"run":1,"seq":9,"dir":"bridge→runtime"}"#.into(),
    );
    lines.insert(
        3,
        r#"{"ts":1,"run":1,"seq":9,"dir":"runtime→bridge","line":"x"}"#.into(),
    );
    let mut bytes = lines.join("\n").into_bytes();
    bytes.extend_from_slice(b"\n\xff\xfe\n");
    cell(t.path(), "bad", &bytes);
    let (code, stdout, stderr) = run_pins(t.path());
    assert_eq!(code, 2, "{stdout}{stderr}");
    let lane = format!("prov/bad/{DIR}.ndjson");
    assert!(
        stderr.contains(&format!("{lane}:2: not a JSON lane entry")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{lane}:3: missing field `line`")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{lane}:4: `dir` is \"runtime→bridge\"")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{lane}:8: not valid UTF-8")),
        "{stderr}"
    );
    // The good entries still assemble: 6 events.
    assert!(stdout.contains("events 6"), "{stdout}");
}

#[test]
fn truncated_last_line_is_only_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let mut lane = good_lane();
    lane.push_str(r#"{"ts":1,"run":1,"seq":5,"dir":"bridge→runtime","line":"{\"jsonrpc"#);
    cell(t.path(), "cut", lane.as_bytes());
    bw().args(["pins", "--update"])
        .arg(t.path())
        .assert()
        .success();
    let (code, stdout, stderr) = run_pins(t.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains(":5: last line is cut short"), "{stderr}");
}

#[test]
fn invalid_deltas_are_counted_and_reported_not_fatal() {
    let t = tempfile::tempdir().unwrap();
    let mut lane = good_lane();
    lane.push_str(&entry(
        5,
        &delta(r#"{"kind":"item.close","key":{},"item":{"type":"command"}}"#),
    ));
    lane.push('\n');
    cell(t.path(), "inv", lane.as_bytes());
    let out = bw()
        .args(["pins", "--update"])
        .arg(t.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("seq 5: invalid thread/delta: deltas[0] (item.close): missing status"),
        "{stderr}"
    );
    let pins = fs::read_to_string(t.path().join("row-counts.json")).unwrap();
    assert!(pins.contains("\"events\": 6"), "{pins}");
}

#[test]
fn a_huge_line_is_skipped_with_its_location() {
    let t = tempfile::tempdir().unwrap();
    let mut lane = good_lane().into_bytes();
    // One line of 64 MiB + 1 bytes, then a valid entry.
    let mut huge = vec![b'x'; 64 * 1024 * 1024 + 1];
    huge.push(b'\n');
    lane.extend_from_slice(&huge);
    lane.extend_from_slice(entry(6, &delta(r#"{"kind":"thread.name","name":"x"}"#)).as_bytes());
    lane.push(b'\n');
    cell(t.path(), "huge", &lane);
    let (code, stdout, stderr) = run_pins(t.path());
    assert_eq!(code, 2);
    assert!(
        stderr.contains(":5: line of 67108865 bytes exceeds the 67108864-byte limit; skipped"),
        "{stderr}"
    );
    assert!(
        stdout.contains("events 7"),
        "the entry after the huge line still counts: {stdout}"
    );
}

#[test]
fn empty_lane_and_non_recordings_folder() {
    let t = tempfile::tempdir().unwrap();
    cell(t.path(), "empty", b"");
    bw().args(["pins", "--update"])
        .arg(t.path())
        .assert()
        .success();
    let pins = fs::read_to_string(t.path().join("row-counts.json")).unwrap();
    assert!(pins.contains("\"prov/empty\""));

    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("notes.txt"), "hello").unwrap();
    let out = bw().arg("pins").arg(other.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a recordings folder"));

    let out = bw()
        .arg("pins")
        .arg(other.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such directory"));
}

#[test]
fn pins_without_recordings_fail_and_update_drops_them() {
    let t = tempfile::tempdir().unwrap();
    cell(t.path(), "ok", good_lane().as_bytes());
    fs::write(
        t.path().join("row-counts.json"),
        "{\"prov/gone\": {\"events\": 1, \"rows\": 1, \"unhandled\": 0, \"grammarDrops\": 0}}",
    )
    .unwrap();
    let (code, stdout, _) = run_pins(t.path());
    assert_eq!(code, 1);
    assert!(
        stdout.contains("FAIL prov/gone: pinned but no recording"),
        "{stdout}"
    );
    assert!(stdout.contains("FAIL prov/ok: not pinned"), "{stdout}");
    bw().args(["pins", "--update"])
        .arg(t.path())
        .assert()
        .success();
    assert!(
        !fs::read_to_string(t.path().join("row-counts.json"))
            .unwrap()
            .contains("gone")
    );
}

#[test]
fn dump_dir_writes_normalized_lists() {
    let t = tempfile::tempdir().unwrap();
    cell(t.path(), "ok", good_lane().as_bytes());
    let dump = t.path().join("dump");
    bw().args(["pins", "--update", "--dump-dir"])
        .arg(&dump)
        .arg(t.path())
        .assert()
        .success();
    let events: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dump.join("prov-ok.events.json")).unwrap())
            .unwrap();
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 6);
    assert_eq!(events[0]["scope"]["turnId"], "#1");
    assert_eq!(events[2]["item"]["id"], "#2");
    assert_eq!(events[0]["threadId"], "");
    let rows: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dump.join("prov-ok.rows.json")).unwrap()).unwrap();
    assert!(rows.is_array());
}

#[test]
fn lanes_prints_the_merged_view() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    fs::create_dir_all(&d).unwrap();
    let rt = |seq: u64, l: &str| {
        bridgewire::lane::Entry {
            ts: 1.0,
            run: 1.0,
            seq: seq as f64,
            dir: "runtime→bridge".into(),
            line: l.into(),
            extra: Default::default(),
        }
        .to_line()
    };
    fs::write(
        d.join("runtime→bridge.ndjson"),
        format!("{}\n{}\n", rt(1, "a"), rt(3, "c")),
    )
    .unwrap();
    fs::write(
        d.join(format!("{DIR}.ndjson")),
        format!("{}\n", entry(2, "b")),
    )
    .unwrap();
    let out = bw().arg("lanes").arg("--raw").arg(&d).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| &l[l.find("\"line\"").unwrap()..])
        .collect();
    assert_eq!(
        lines,
        [r#""line":"a"}"#, r#""line":"b"}"#, r#""line":"c"}"#]
    );
}

/// issue 15 item 5: `parity` exited 1 where `pins` exits 2 for the same malformed lane. Both
/// read the same corrupted copy of the bundled recordings: recorded legs on both sides, and a
/// live leg (which reads the same lane to replay it).
#[test]
fn parity_exits_2_where_pins_does_for_the_same_malformed_lane() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("rec");
    common::files::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb-ref"),
        &root,
    );
    let lane = root.join("bb-ref/fork/runtime→bridge.ndjson");
    let text = fs::read_to_string(&lane).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = r#"{"ts":1,"run":1,"seq":broken"#;
    fs::write(&lane, lines.join("\n") + "\n").unwrap();
    let want = format!("{}:2: not a JSON lane entry", lane.display());

    let (code, _, stderr) = run_pins(&root);
    assert_eq!(code, 2, "pins: {stderr}");
    assert!(stderr.contains(&want), "pins names file:line: {stderr}");

    let rec = format!("rec:{}", root.display());
    let live = format!("cmd:{}", env!("CARGO_BIN_EXE_bb-ref-bridge"));
    for (base, head) in [(&rec, &rec), (&rec, &live)] {
        let out = bw()
            .args(["parity", "--base", base, "--head", head, "--cell", "fork"])
            // rec: against itself is a self-comparison, refused unless asked for.
            .arg("--allow-same-bridge")
            .arg(&root)
            .timeout(std::time::Duration::from_secs(120))
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "parity {base} vs {head}: {all}");
        assert!(all.contains(&want), "parity names file:line: {all}");
        assert!(all.contains("ERROR bb-ref/fork"), "{all}");
    }
}

/// issue 15 item 5: `lanes` printed `error:` and exited 0 for an oversized line. Every view
/// exits 2 and names the line.
#[test]
fn lanes_exits_2_for_an_oversized_line_in_every_view() {
    let t = tempfile::tempdir().unwrap();
    let mut lane = good_lane().into_bytes();
    lane.extend(std::iter::repeat_n(b'x', 64 * 1024 * 1024 + 1));
    lane.push(b'\n');
    cell(t.path(), "huge", &lane);
    let dir = t.path().join("prov/huge");
    for view in [
        &[][..],
        &["--json"][..],
        &["--raw"][..],
        &["--recorded"][..],
    ] {
        let out = bw().arg("lanes").args(view).arg(&dir).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "lanes {view:?}: {stderr}");
        assert!(
            stderr.contains(":5: line of 67108865 bytes exceeds the 67108864-byte limit"),
            "lanes {view:?}: {stderr}"
        );
        assert!(!out.stdout.is_empty(), "the readable lines are still shown");
    }
}

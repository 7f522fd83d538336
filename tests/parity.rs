//! `bridgewire parity` on recorded legs: one changed event fails on exactly that event, an
//! allowlist entry masks it, a stale entry fails, bad allowlists are refused before anything runs.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn bw() -> Command {
    Command::cargo_bin("bridgewire").unwrap()
}

const CELL: &str = "claude-code/fork";
const LANE: &str = "bridge→runtime.current.ndjson";

/// Copies one corpus cell into `<tmp>/<leg>/claude-code/fork`.
fn leg(tmp: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("recordings/bb")
        .join(CELL)
        .join(LANE);
    let dst = tmp.join(name).join(CELL);
    fs::create_dir_all(&dst).unwrap();
    fs::copy(src, dst.join(LANE)).unwrap();
    tmp.join(name)
}

/// Rewrites the message holding a leg's first streamed text delta: `edit` gets its deltas and
/// the delta's index, `finish` the message's new line. Returns the delta's text as it was.
fn edit_first_text_delta(
    root: &Path,
    edit: impl FnOnce(&mut Vec<serde_json::Value>, usize),
    finish: impl FnOnce(String) -> String,
) -> String {
    let path = root.join(CELL).join(LANE);
    let text = fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    let mut edit = Some((edit, finish));
    let mut was = None;
    for line in text.lines() {
        let mut entry: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut msg: serde_json::Value =
            serde_json::from_str(entry["line"].as_str().unwrap()).unwrap();
        if was.is_none()
            && msg["method"] == "thread/delta"
            && let Some(i) = msg["params"]["deltas"]
                .as_array()
                .unwrap()
                .iter()
                .position(|d| d["kind"] == "item.textDelta")
            && let Some((edit, finish)) = edit.take()
        {
            let deltas = msg["params"]["deltas"].as_array_mut().unwrap();
            was = Some(deltas[i]["text"].as_str().unwrap().to_string());
            edit(deltas, i);
            entry["line"] = finish(bridgewire::jsjson::to_string(&msg)).into();
        }
        out.push(bridgewire::jsjson::to_string(&entry));
    }
    fs::write(&path, out.join("\n") + "\n").unwrap();
    was.expect("the cell streams text")
}

/// Changes the first streamed text delta of the head leg ("Hi" → something else).
fn change_one_text_delta(root: &Path) -> String {
    edit_first_text_delta(root, |d, i| d[i]["text"] = "CHANGED".into(), |l| l)
}

fn run(args: &[&str], base: &Path, head: &Path) -> (i32, String, String) {
    let out = bw()
        .arg("parity")
        .arg("--base")
        .arg(format!("rec:{}", base.display()))
        .arg("--head")
        .arg(format!("rec:{}", head.display()))
        .args(args)
        .arg(base)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn identical_legs_pass() {
    let t = tempfile::tempdir().unwrap();
    let (base, head) = (leg(t.path(), "base"), leg(t.path(), "head"));
    let (code, stdout, _) = run(&[], &base, &head);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains(&format!("PASS {CELL}: ")), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with("1 passed, 0 failed, 0 skipped (1 cells); the handshakes were not compared"),
        "{stdout}"
    );
}

#[test]
fn one_changed_event_fails_on_exactly_that_event_and_the_allowlist_masks_it() {
    let t = tempfile::tempdir().unwrap();
    let (base, head) = (leg(t.path(), "base"), leg(t.path(), "head"));
    let original = change_one_text_delta(&head);
    let dump = t.path().join("dump");
    let (code, stdout, _) = run(&["--dump-dir", dump.to_str().unwrap()], &base, &head);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains(&format!("FAIL {CELL}: ")), "{stdout}");
    let only_base: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("events only in base"))
        .collect();
    let only_head: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("events only in head"))
        .collect();
    assert_eq!(only_base.len(), 1, "{stdout}");
    assert_eq!(only_head.len(), 1, "{stdout}");
    assert!(only_base[0].contains("item/agentMessage/delta") && only_base[0].contains(&original));
    assert!(only_head[0].contains("CHANGED"));
    assert!(
        stdout.contains("/delta: "),
        "a JSON-aware entry diff: {stdout}"
    );

    // Find the event's position in the dump, as a user would, and allow it.
    let events: Vec<serde_json::Value> = serde_json::from_str(
        &fs::read_to_string(dump.join("claude-code-fork.head.events.json")).unwrap(),
    )
    .unwrap();
    let pos = events.iter().position(|e| e["delta"] == "CHANGED").unwrap();
    let allow = t.path().join("allow.json");
    fs::write(
        &allow,
        format!(r##"[{{"provider":"claude-code","cell":"fork","layer":"events","path":"/{pos}/delta","pr":"#7","reason":"wording"}}]"##),
    )
    .unwrap();
    let (code, stdout, _) = run(&["--allowlist", allow.to_str().unwrap()], &base, &head);
    assert_eq!(code, 0, "{stdout}");

    // A stale entry (masks nothing on either leg) fails, named.
    fs::write(
        &allow,
        format!(
            r##"[{{"provider":"*","cell":"*","layer":"events","path":"/{pos}/delta","pr":"#7","reason":"wording"}},
               {{"provider":"*","cell":"fork","layer":"rows","path":"/*/nothing-here","pr":"#8","reason":"old"}}]"##
        ),
    )
    .unwrap();
    let (code, stdout, _) = run(&["--allowlist", allow.to_str().unwrap()], &base, &head);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("stale allowlist entry (#8) rows /*/nothing-here — old"),
        "{stdout}"
    );

    // An entry for a cell the recordings do not have (a typo, a deleted cell) can never mask
    // anything: refused as stale before any cell runs (it was never reported before).
    fs::write(
        &allow,
        format!(
            r##"[{{"provider":"*","cell":"*","layer":"events","path":"/{pos}/delta","pr":"#7","reason":"wording"}},
               {{"provider":"claude-code","cell":"frok","layer":"rows","path":"/*","pr":"#9","reason":"typo"}}]"##
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = run(&["--allowlist", allow.to_str().unwrap()], &base, &head);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("stale allowlist entry (#9) rows /* — typo (provider \"claude-code\", cell \"frok\"): no cell of these recordings has that name"),
        "{stderr}"
    );
}

#[test]
fn a_bad_allowlist_is_refused_before_anything_runs() {
    let t = tempfile::tempdir().unwrap();
    let (base, head) = (leg(t.path(), "base"), leg(t.path(), "head"));
    let allow = t.path().join("allow.json");
    fs::write(
        &allow,
        r##"[{"provider":"*","cell":"*","layer":"events","path":"/0","pr":"#1","reason":"ok"},
            {"provider":"*","cell":"*","layer":"timeline","path":"/0","pr":"#1","reason":"bad"}]"##,
    )
    .unwrap();
    let (code, _, stderr) = run(&["--allowlist", allow.to_str().unwrap()], &base, &head);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("entry 1: unknown layer \"timeline\""),
        "{stderr}"
    );
}

#[test]
fn no_matching_recordings_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let (base, head) = (leg(t.path(), "base"), leg(t.path(), "head"));
    let (code, _, stderr) = run(&["--provider", "nobody"], &base, &head);
    assert_eq!(code, 2);
    assert!(stderr.contains("no matching recordings"));
}

/// A leg that cannot start (its build fails) ends the run before any cell, exit 2, with the
/// cause (the build's own error) first.
#[test]
fn a_leg_that_cannot_build_stops_the_run_with_the_cause_first() {
    let t = tempfile::tempdir().unwrap();
    let base = leg(t.path(), "base");
    let checkout = t.path().join("checkout");
    fs::create_dir_all(&checkout).unwrap();
    fs::write(
        checkout.join("bridgewire.toml"),
        "[parity]\nbuild = \"echo nope >&2; exit 3\"\nbridge = \"./bridge\"\n",
    )
    .unwrap();
    let out = bw()
        .arg("parity")
        .arg("--base")
        .arg(format!("rec:{}", base.display()))
        .arg("--head")
        .arg(format!("dir:{}", checkout.display()))
        .arg(&base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr
            .starts_with("error: the head leg cannot start: build `echo nope >&2; exit 3` failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nope"),
        "the build's own error is shown: {stderr}"
    );
    assert!(stdout.is_empty(), "no cell ran: {stdout}");
}

/// Splits the head leg's first streamed text delta in two, cutting a surrogate pair between
/// them as a bridge that slices by UTF-16 index writes it with `JSON.stringify`: `"A\ud83d"`,
/// then `"\ude00B"` (each a lone surrogate escape, JSON that serde refuses). The base leg
/// streams `"A😀B"` in one delta.
fn cut_a_surrogate_pair(base: &Path, head: &Path) {
    edit_first_text_delta(base, |d, i| d[i]["text"] = "A😀B".into(), |l| l);
    edit_first_text_delta(
        head,
        |d, i| {
            let mut second = d[i].clone();
            d[i]["text"] = "A@HIGH@".into();
            second["text"] = "@LOW@B".into();
            d.insert(i + 1, second);
        },
        |l| {
            let l = l.replace("@HIGH@", "\\ud83d").replace("@LOW@", "\\ude00");
            assert!(serde_json::from_str::<serde_json::Value>(&l).is_err());
            l
        },
    );
}

/// A surrogate pair cut between two text chunks is JSON bb's runtime takes (RFC 8259 allows
/// any `\uXXXX` escape) and joins when it concatenates the chunks: a recording holding one is
/// read as the character, not dropped as a non-JSON line. Parity coalesces the chunks (bb:
/// "Coalescing is assembler policy, not bridge policy") and compares the joined text; pins
/// count the message's deltas; the dump writes the cut halves as `JSON.stringify` does.
#[test]
fn a_surrogate_pair_cut_between_two_chunks_reads_as_the_character_it_encodes() {
    let t = tempfile::tempdir().unwrap();
    let (base, head) = (leg(t.path(), "base"), leg(t.path(), "head"));
    cut_a_surrogate_pair(&base, &head);
    let (code, stdout, stderr) = run(&[], &base, &head);
    assert_eq!(code, 0, "{stdout}{stderr}");

    // Against a leg whose text differs after the character, it is the text that differs.
    let other = leg(t.path(), "other");
    cut_a_surrogate_pair(&other, &leg(t.path(), "unused"));
    let path = other.join(CELL).join(LANE);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replacen("A😀B", "A😀C", 1);
    fs::write(&path, text).unwrap();
    let (code, stdout, _) = run(&[], &other, &head);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains(r#""A😀C" → "A😀B""#), "{stdout}");

    // Counts: one more delta event than the uncut leg, the same rows, nothing invalid.
    let counts = |root: &Path, dump: &Path| -> serde_json::Value {
        let out = bw()
            .args(["pins", "--format", "json", "--dump-dir"])
            .arg(dump)
            .arg(root)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
        assert_eq!(v["cells"][0]["invalid"], serde_json::json!([]), "{text}");
        v["cells"][0]["counts"].clone()
    };
    let (base_counts, head_counts) = (
        counts(&base, &t.path().join("dump-base")),
        counts(&head, &t.path().join("dump-head")),
    );
    assert_eq!(
        head_counts["events"].as_u64().unwrap(),
        base_counts["events"].as_u64().unwrap() + 1,
        "{base_counts} {head_counts}"
    );
    assert_eq!(head_counts["rows"], base_counts["rows"]);
    let events =
        fs::read_to_string(t.path().join("dump-head/claude-code-fork.events.json")).unwrap();
    assert!(events.contains(r#""delta": "A\ud83d""#), "{events}");
    assert!(events.contains(r#""delta": "\ude00B""#), "{events}");
}

/// A bb leg whose program exits at once is named as exiting, with its status and stderr, not
/// as a wait for `initialize` that ran out (it said "gave no initialize response within
/// 10000 ms" 0.05 s after starting: an audit's `sh -c 'echo boom >&2; exit 7'`).
#[test]
fn a_bb_leg_that_exits_at_once_is_named_as_exiting() {
    let recordings = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb");
    let out = bw()
        .args(["parity", "--timeout-ms", "3000", "--base"])
        .arg(format!("rec:{}", recordings.display()))
        .args(["--head", "cmd:sh -c 'echo boom >&2; exit 7'"])
        .arg(&recordings)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("exited (exit status: 7) before answering initialize (stderr: boom)"),
        "{stderr}"
    );
}

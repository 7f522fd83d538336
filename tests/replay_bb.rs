//! Live replay of the bundled bb-ref cells through the reference bridge and the provider
//! double: a good bridge passes with zero stalls, broken bridges give named stalls and failing
//! recorded rules, damaged cells give a named skip or failure, every wait is bounded, and no
//! process outlives a replay.

use bridgewire::bb::player::{self, ReplayError, ReplayOptions, ReplayResult};
use bridgewire::bb::recorded;
use bridgewire::cell::Cell;
use bridgewire::rule::Status;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");

fn cells_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb-ref")
}

/// A copy of a bundled cell under a temp recordings root (`<tmp>/bb-ref/<name>`).
fn copy_cell(name: &str) -> (tempfile::TempDir, Cell) {
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("bb-ref").join(name);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(cells_root().join("bb-ref").join(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let cell = Cell::at(tmp.path(), &to).expect("a cell");
    (tmp, cell)
}

fn bundled(name: &str) -> Cell {
    let root = cells_root();
    Cell::at(&root, &root.join("bb-ref").join(name)).expect("bundled cell")
}

fn opts(marker: &str, timeout_ms: u64, breaks: &str) -> ReplayOptions {
    ReplayOptions {
        timeout: Duration::from_millis(timeout_ms),
        double_exe: Some(PathBuf::from(BRIDGEWIRE)),
        env: vec![
            (
                OsString::from("BRIDGEWIRE_TEST_MARK"),
                OsString::from(marker),
            ),
            (
                OsString::from("BB_REF_BRIDGE_BREAK"),
                OsString::from(breaks),
            ),
        ],
        ..ReplayOptions::default()
    }
}

/// Processes (of any kind) whose environment carries the marker.
fn marked(marker: &str) -> usize {
    let needle = format!("BRIDGEWIRE_TEST_MARK={marker}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .count()
}

/// Replays while sampling the marked processes; returns the result and the peak count seen.
fn replay_counted(
    cell: &Cell,
    o: &ReplayOptions,
    marker: &str,
) -> (Result<ReplayResult, ReplayError>, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, peak, marker) = (stop.clone(), peak.clone(), marker.to_string());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(marked(&marker), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let r = player::replay_cell(cell, &[BRIDGE.into()], o);
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    (r, peak.load(Ordering::Relaxed))
}

/// The six recorded verdicts of a replay, matches-recording compared as `replay bb` does.
fn verdicts_of(
    name: &str,
    cell: &bridgewire::cell::Cell,
    r: &player::ReplayResult,
) -> Vec<bridgewire::rule::Verdict> {
    let offline = recorded::offline_counts(cell, true);
    let matches = recorded::compare_with_recording(cell, r, &offline);
    recorded::recorded_verdicts(name, r, &offline, Some(&matches))
}

fn verdict<'a>(v: &'a [bridgewire::rule::Verdict], rule: &str) -> &'a bridgewire::rule::Verdict {
    v.iter().find(|v| v.id.ends_with(rule)).expect(rule)
}

#[test]
fn bundled_cell_replays_with_zero_stalls_and_leaves_no_process() {
    let marker = uuid::Uuid::new_v4().to_string();
    let cell = bundled("stop-interrupt");
    let (r, peak) = replay_counted(&cell, &opts(&marker, 15_000, ""), &marker);
    let r = r.expect("replayed");
    assert!(r.stalls.is_empty(), "stalls: {:?}\n{}", r.stalls, r.stderr);
    let offline = recorded::offline_counts(&cell, true);
    assert_eq!(r.events.len(), offline.events);
    let v = verdicts_of("stop-interrupt", &cell, &r);
    assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
    // Two provider children (the start and the resume), each a double with its own segment.
    assert_eq!(r.doubles.len(), 2, "{:?}", r.doubles);
    assert!(
        r.doubles
            .iter()
            .all(|d| d.generic == 0 && d.steps_played == d.steps)
    );
    // The workspace path is mapped back to the recorded cwd.
    assert!(r.lines.iter().all(|l| !l.contains("bb-parity-ws-")));
    assert_eq!(r.exit_code, Some(0));
    assert!(
        peak >= 2,
        "the sampler saw the bridge and a double ({peak})"
    );
    assert_eq!(marked(&marker), 0, "processes outlived the replay");
}

#[test]
fn cli_replays_every_bundled_cell_in_parallel() {
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "-j", "2"])
        .arg(cells_root())
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PASS bb-ref/resume:"), "{text}");
    assert!(
        text.contains("4 passed, 0 failed, 0 skipped (4 cells)"),
        "{text}"
    );
    // A bridge that cannot start is invalid input, said once (exit 2, as `check bb`, the other
    // replays and `parity` say it), not a FAIL per cell with exit 1.
    for verb in ["replay", "rerecord"] {
        let out = Command::new(BRIDGEWIRE)
            .args([verb, "bb"])
            .arg(cells_root())
            .args(["--", "/nonexistent/bridge"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb}: {err}");
        assert!(
            err.contains("error: the bridge cannot start: /nonexistent/bridge: No such file"),
            "{verb}: {err}"
        );
        assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "{verb}");
    }
}

#[test]
fn crash_mid_turn_is_a_named_stall_and_fails_the_rules() {
    let marker = uuid::Uuid::new_v4().to_string();
    let cell = bundled("turn-tools");
    let start = Instant::now();
    let (r, _) = replay_counted(&cell, &opts(&marker, 3_000, "crash-mid-turn"), &marker);
    let r = r.expect("replayed");
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(r.exit_code, Some(7));
    assert!(
        r.stalls
            .iter()
            .any(|s| s.starts_with("bridge exited while waiting for ")),
        "{:?}",
        r.stalls
    );
    let v = verdicts_of("turn-tools", &cell, &r);
    // One fault, one verdict: the bridge exited (replays fails); the turn counts it cut short
    // and the comparison are skipped naming replays.
    assert_eq!(verdict(&v, "/replays").status, Status::Fail);
    let turns = verdict(&v, "/turn-lifecycle");
    assert_eq!(turns.status, Status::Skipped);
    assert!(
        turns
            .detail
            .starts_with("could not be judged apart from recorded/turn-tools/replays: the bridge's own fault cut the replay short (bridge exited while waiting for "),
        "{}",
        turns.detail
    );
    let m = verdict(&v, "/matches-recording");
    assert_eq!(m.status, Status::Skipped);
    assert!(
        m.detail.contains("recorded/turn-tools/replays failed"),
        "{}",
        m.detail
    );
    assert_eq!(marked(&marker), 0, "processes outlived the replay");
}

#[test]
fn missing_turn_completed_times_out_by_name() {
    let marker = uuid::Uuid::new_v4().to_string();
    let cell = bundled("turn-tools");
    let (r, _) = replay_counted(&cell, &opts(&marker, 2_000, "no-turn-completed"), &marker);
    let r = r.expect("replayed");
    assert!(
        r.stalls.contains(
            &"timed out waiting for 2 turn/started and 2 turn/completed before thread/stop"
                .to_string()
        ),
        "{:?}",
        r.stalls
    );
    let v = verdicts_of("turn-tools", &cell, &r);
    assert_eq!(
        verdict(&v, "/turn-lifecycle").detail,
        "replay 2 started/1 completed, recording 2/2"
    );
    assert_eq!(marked(&marker), 0);
}

#[test]
fn hanging_and_flooding_bridges_end_in_bounded_time() {
    let cell = bundled("turn-tools");
    let o = ReplayOptions {
        timeout: Duration::from_millis(500),
        double_exe: Some(PathBuf::from(BRIDGEWIRE)),
        ..ReplayOptions::default()
    };
    // Silent and never exits on EOF: its start-up is waited for START_WAIT (not the 500 ms
    // timeout), every later wait 500 ms.
    let start = Instant::now();
    let r = player::replay_cell(
        &cell,
        &["sh".into(), "-c".into(), "exec sleep 600".into()],
        &o,
    )
    .unwrap();
    assert!(
        start.elapsed() < bridgewire::protocol::START_WAIT + Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        r.stalls
            .contains(&"timed out waiting for initialize response".to_string())
    );
    assert!(
        r.stalls
            .contains(&"bridge did not exit after stdin closed; killed".to_string())
    );
    assert!(r.events.is_empty());
    // Garbage at full speed.
    let start = Instant::now();
    let r = player::replay_cell(&cell, &["yes".into(), "not json {".into()], &o).unwrap();
    assert!(
        start.elapsed() < bridgewire::protocol::START_WAIT + Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(
        r.stalls
            .contains(&"timed out waiting for the stream to settle".to_string()),
        "{:?}",
        r.stalls
    );
    assert!(r.events.is_empty());
    // A bridge that is not there at all.
    let e = player::replay_cell(&cell, &["/nonexistent/bridge".into()], &o).unwrap_err();
    assert!(matches!(e, ReplayError::Failed(m) if m.contains("cannot start bridge")));
}

#[test]
fn missing_runtime_lane_is_a_named_skip() {
    let (_tmp, cell) = copy_cell("resume");
    std::fs::remove_file(cell.path.join("runtime→bridge.ndjson")).unwrap();
    let cell = Cell::at(cell.path.parent().unwrap().parent().unwrap(), &cell.path).unwrap();
    let e = player::replay_cell(&cell, &[BRIDGE.into()], &ReplayOptions::default()).unwrap_err();
    assert_eq!(
        e,
        ReplayError::Skip("no runtime→bridge lane (nothing to replay)".into())
    );
}

#[test]
fn runtime_lane_cut_short_fails_by_name_without_hanging() {
    let (_tmp, cell) = copy_cell("resume");
    let lane = cell.path.join("runtime→bridge.ndjson");
    let text = std::fs::read_to_string(&lane).unwrap();
    // The first request, then half of the second line (a truncated tail).
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    let second = lines.next().unwrap();
    std::fs::write(&lane, format!("{first}\n{}", &second[..second.len() / 2])).unwrap();
    let marker = uuid::Uuid::new_v4().to_string();
    let start = Instant::now();
    let (r, _) = replay_counted(&cell, &opts(&marker, 3_000, ""), &marker);
    let r = r.expect("replayed");
    assert!(start.elapsed() < Duration::from_secs(20));
    let v = verdicts_of("resume", &cell, &r);
    // No event came back: not-empty's fault; the turn counts are skipped naming it.
    assert_eq!(verdict(&v, "/not-empty").status, Status::Fail);
    let turns = verdict(&v, "/turn-lifecycle");
    assert_eq!(turns.status, Status::Skipped);
    assert_eq!(
        turns.detail,
        "could not be judged apart from recorded/resume/not-empty: the replay produced no events (recording 4/4 turns; see not-empty)"
    );
    assert_eq!(marked(&marker), 0);
}

#[test]
fn rerecord_writes_a_current_lane_with_the_recorded_pins() {
    let (_tmp, cell) = copy_cell("resume");
    let before = bridgewire::pins::compute(&cell, None).counts;
    let o = ReplayOptions {
        double_exe: Some(PathBuf::from(BRIDGEWIRE)),
        ..ReplayOptions::default()
    };
    let rr = player::rerecord_cell(&cell, &[BRIDGE.into()], &o).unwrap();
    let (path, n) = rr.written.expect("written");
    assert!(n > 0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    assert!(!text.contains("parity-initialize"));
    let root = cell.path.parent().unwrap().parent().unwrap();
    let cell = Cell::at(root, &cell.path).unwrap();
    assert_eq!(cell.current.len(), 1);
    let after = bridgewire::pins::compute(&cell, None).counts;
    assert_eq!(
        after, before,
        "the .current lane assembles as the recorded one"
    );
    // Every re-recorded seq sits strictly between its anchor and the next integer.
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let seq = v["seq"].as_f64().unwrap();
        assert!(seq.fract() > 0.0, "{l}");
    }
}

#[test]
fn rerecord_leaves_the_lane_untouched_after_a_stall() {
    let (_tmp, cell) = copy_cell("turn-tools");
    let o = opts("unused", 2_000, "crash-mid-turn");
    let rr = player::rerecord_cell(&cell, &[BRIDGE.into()], &o).unwrap();
    assert!(rr.written.is_none());
    assert!(!rr.result.stalls.is_empty());
    assert!(!cell.path.join("bridge→runtime.current.ndjson").exists());
}

#[test]
fn provider_double_prints_its_version() {
    let out = Command::new(BRIDGEWIRE)
        .args(["provider-double", "--sdk-flag", "--version"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0.0.0-replay\n");
}

#[test]
fn parity_of_the_recording_against_a_live_replay_passes() {
    let root = cells_root();
    let out = Command::new(BRIDGEWIRE)
        .args(["parity", "-j", "2", "--cell", "resume", "--base"])
        .arg(format!("rec:{}", root.display()))
        .arg("--head")
        .arg(format!("cmd:{BRIDGE}"))
        .arg(&root)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("PASS bb-ref/resume: base 50 events"),
        "{text}"
    );
}

#[test]
fn every_provider_env_variable_gets_the_wrapper() {
    let cell = bundled("turn-tools");
    let o = ReplayOptions {
        double_exe: Some(PathBuf::from(BRIDGEWIRE)),
        provider_env: vec![
            "MY_BRIDGE_PROVIDER".into(),
            "BB_REF_PROVIDER_COMMAND".into(),
        ],
        ..ReplayOptions::default()
    };
    let script = format!("echo \"provider=$MY_BRIDGE_PROVIDER\" >&2; exec '{BRIDGE}'");
    let r = player::replay_cell(&cell, &["sh".into(), "-c".into(), script.into()], &o).unwrap();
    assert!(r.stalls.is_empty(), "{:?}", r.stalls);
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("provider="))
        .expect("the bridge saw the variable");
    assert!(line.ends_with("/replay-provider"), "{line}");
}

#[test]
fn cli_json_report_and_named_skip() {
    let (tmp, cell) = copy_cell("fork");
    std::fs::remove_file(cell.path.join("runtime→bridge.ndjson")).unwrap();
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "--format", "json"])
        .arg(tmp.path())
        .arg(cells_root().join("bb-ref/turn-tools"))
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], 1);
    assert_eq!(v["skipped"], 1);
    assert_eq!(v["cells"][0]["cell"], "bb-ref/fork");
    assert_eq!(v["cells"][0]["status"], "skip");
    assert_eq!(
        v["cells"][0]["detail"],
        "no runtime→bridge lane (nothing to replay)"
    );
    assert_eq!(v["cells"][1]["cell"], "bb-ref/turn-tools");
    assert_eq!(v["cells"][1]["verdicts"].as_array().unwrap().len(), 6);
    assert_eq!(v["cells"][1]["stalls"], serde_json::json!([]));
}

/// The `invalid-event` break sends a `usage` whose token counts are strings: bb's runtime
/// refuses that `thread/delta` whole, so the replay notes it as a stall (bb's `invalid
/// thread/delta: <message>`) naming the field, and `replays` fails.
#[test]
fn an_invalid_delta_fails_replays_naming_the_field() {
    let cell = bundled("turn-tools");
    let o = opts("unused-mark", 3_000, "invalid-event");
    let r = player::replay_cell(&cell, &[BRIDGE.into()], &o).unwrap();
    let v = verdicts_of("turn-tools", &cell, &r);
    let bad = verdict(&v, "/replays");
    assert_eq!(bad.status, Status::Fail, "{v:?}");
    assert!(
        bad.detail
            .contains("invalid thread/delta: deltas[0] (usage): total.inputTokens"),
        "{}",
        bad.detail
    );
}

/// Event-driven replay (the default) and bb's fixed windows (`--fixed-windows`) give the same
/// report on every bundled cell: lines, events, verdicts, stalls and the doubles' steps.
#[test]
fn event_driven_replay_reports_as_the_fixed_windows_do() {
    let run = |fixed: bool, breaks: &str, cells: &[PathBuf]| {
        let mut cmd = Command::new(BRIDGEWIRE);
        cmd.args(["replay", "bb", "--format", "json", "-j", "2"]);
        if fixed {
            cmd.arg("--fixed-windows");
        }
        let out = cmd
            .args(cells)
            .arg("--")
            .arg(BRIDGE)
            .env("BB_REF_BRIDGE_BREAK", breaks)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v)
    };
    let all = [cells_root()];
    let event = run(false, "", &all);
    assert_eq!(event.1["passed"], 4, "{}", event.1);
    assert_eq!(event, run(true, "", &all));
    // A bridge emitting an invalid event fails the same rule with the same detail either way.
    let one = [cells_root().join("bb-ref/turn-tools")];
    let event = run(false, "invalid-event", &one);
    assert_eq!(event.1["failed"], 1, "{}", event.1);
    assert_eq!(event, run(true, "invalid-event", &one));
}

/// `replay bb --format json` of one cell with `BB_REF_BRIDGE_BREAK=breaks`: exit code, the
/// cell's document and its wire verdicts that did not pass `(id, status, detail)`.
fn replay_json(cell: &Path, breaks: &str) -> (Option<i32>, serde_json::Value, Vec<[String; 3]>) {
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "--format", "json", "--timeout-ms", "3000"])
        .arg(cell)
        .arg("--")
        .arg(BRIDGE)
        .env("BB_REF_BRIDGE_BREAK", breaks)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let c = doc["cells"][0].clone();
    // An unreadable cell has none.
    let not_pass = c["wireVerdicts"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["status"] != "pass" && v["status"] != "not-run")
                .map(|v| ["id", "status", "detail"].map(|k| v[k].as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default();
    (out.status.code(), c, not_pass)
}

/// The wire rules are judged on the replay's own traffic (audit MISS A): a bridge that
/// answers `thread/stop` before the interrupted turn's boundary passed every recorded rule
/// (same events, same counts) and now fails the wire rule alone, naming the live messages; a
/// bridge that crashes mid-turn fails its recorded rules and no wire rule besides (what never
/// came is the stall's, not a wire fault).
#[test]
fn replay_judges_the_wire_rules_on_the_live_traffic() {
    let cell = cells_root().join("bb-ref/stop-interrupt");
    let (code, c, not_pass) = replay_json(&cell, "");
    assert_eq!(code, Some(0), "{c:#}");
    assert!(not_pass.is_empty(), "{not_pass:?}");
    let settles = c["wireVerdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "recorded/stop-interrupt/stop/interrupt-settles-before-result")
        .cloned();
    assert_eq!(settles.unwrap()["status"], "pass", "{c:#}");

    let (code, c, not_pass) = replay_json(&cell, "stop-before-settle");
    assert_eq!(code, Some(1), "{c:#}");
    assert_eq!(c["status"], "fail");
    for v in c["verdicts"].as_array().unwrap() {
        assert_eq!(v["status"], "pass", "the recorded rules pass: {v}");
    }
    assert_eq!(not_pass.len(), 1, "{not_pass:?}");
    let [id, status, detail] = &not_pass[0];
    assert_eq!(
        id,
        "recorded/stop-interrupt/stop/interrupt-settles-before-result"
    );
    assert_eq!(status, "fail");
    assert!(
        detail.contains("interrupted by thread/stop at live message ")
            && detail.contains("(bridge→runtime), after the stop's answer at live message "),
        "{detail}"
    );

    let (code, c, not_pass) = replay_json(&cell, "crash-mid-turn");
    assert_eq!(code, Some(1), "{c:#}");
    assert!(!c["stalls"].as_array().unwrap().is_empty(), "{c:#}");
    assert!(
        not_pass.is_empty(),
        "no wire verdict besides the stall: {not_pass:?}"
    );
}

fn corrupt(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/replay-bb-corrupt/bb-ref")
        .join(name)
}

/// A recorded runtime lane whose last line is cut short (a recorder killed mid-write) is a
/// warning, as for `pins` and `lanes` (audit LOST LINE): stderr names `file:line`, the cell's
/// lines say the cut request was not replayed, and the replay still passes.
#[test]
fn a_cut_runtime_line_is_warned_and_named_not_replayed() {
    let cell = corrupt("trunc-rt");
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb"])
        .arg(&cell)
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let lane = format!("{}:6", cell.join("runtime→bridge.ndjson").display());
    assert!(
        stderr.contains(&format!(
            "warning: bb-ref/trunc-rt: {lane}: last line is cut short (no newline, not valid JSON): a recorder killed mid-write; ignored"
        )),
        "{stderr}"
    );
    assert!(stdout.contains("PASS bb-ref/trunc-rt: "), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "  not replayed: {lane}: the recorded request is cut short (a recorder killed mid-write), so it was ignored"
        )),
        "{stdout}"
    );
    let (_, c, _) = replay_json(&cell, "");
    assert_eq!(c["notReplayed"], serde_json::json!([lane]), "{c:#}");
}

/// A lane entry that cannot be read (malformed JSON, not UTF-8, another `dir`) is an
/// unreadable recording: an ERROR line naming `file:line` and exit 2, as `pins`, `lanes` and
/// `parity` say it (audit EXIT CODE), for `replay` and `rerecord` alike; nothing is written.
#[test]
fn an_unreadable_lane_entry_is_an_error_with_exit_2() {
    for (name, at, what) in [
        ("malformed", 6, "not a JSON lane entry: "),
        ("nonutf8", 4, "not valid UTF-8 (byte "),
        (
            "baddir",
            3,
            "`dir` is \"runtime→bridge\" but the file holds \"bridge→runtime\"",
        ),
    ] {
        let cell = corrupt(name);
        let lane = format!("{}:{at}", cell.join("bridge→runtime.ndjson").display());
        for verb in ["replay", "rerecord"] {
            let out = Command::new(BRIDGEWIRE)
                .args([verb, "bb"])
                .arg(&cell)
                .arg("--")
                .arg(BRIDGE)
                .env_remove("BB_REF_BRIDGE_BREAK")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(2), "{verb} {name}: {stdout}");
            assert!(
                stdout.contains(&format!(
                    "ERROR bb-ref/{name}: unreadable lane entry: {lane}: {what}"
                )),
                "{verb} {name}: {stdout}"
            );
            assert!(!cell.join("bridge→runtime.current.ndjson").exists());
        }
        let (code, c, _) = replay_json(&cell, "");
        assert_eq!(code, Some(2));
        assert_eq!(c["status"], "error", "{c:#}");
    }
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb"])
        .arg(corrupt("malformed"))
        .arg(cells_root().join("bb-ref/resume"))
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("1 passed, 0 failed, 0 skipped, 1 unreadable (2 cells)"),
        "{stdout}"
    );
}

/// `rerecord bb` warns of a recorded runtime line cut short as `replay bb` does (audit: only
/// `replay` said it), and still re-records the cell.
#[test]
fn rerecord_warns_of_a_cut_runtime_line_as_replay_does() {
    let tmp = tempfile::tempdir().unwrap();
    let cell = tmp.path().join("bb-ref/trunc-rt");
    std::fs::create_dir_all(&cell).unwrap();
    for e in std::fs::read_dir(corrupt("trunc-rt")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), cell.join(e.file_name())).unwrap();
    }
    let out = Command::new(BRIDGEWIRE)
        .args(["rerecord", "bb"])
        .arg(&cell)
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let lane = format!("{}:6", cell.join("runtime→bridge.ndjson").display());
    assert!(
        stderr.contains(&format!(
            "warning: bb-ref/trunc-rt: {lane}: last line is cut short (no newline, not valid JSON): a recorder killed mid-write; ignored"
        )),
        "{stderr}"
    );
    assert!(stdout.contains("OK bb-ref/trunc-rt: "), "{stdout}");
    assert!(cell.join("bridge→runtime.current.ndjson").exists());
}

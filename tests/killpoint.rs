//! Kill points (issues 13.5 and 15.4): `record bb` promises that a line that reached the other
//! side is in its lane ("recorded before forwarded"). This test runs the recorder around a real
//! bridge process (`tests/fixtures/kill_bridge.py`, Python stdlib, not our code) with traffic in
//! both directions, SIGKILLs the recorder (two trials in three) or the bridge (one in three) at a
//! random moment, and then checks the promise against what the receiving sides logged:
//!
//! * runtime→bridge: every complete line in the bridge's own log (it logs what it read, before
//!   it answers) must be in a `runtime→bridge` lane;
//! * bridge→runtime: every complete line this test (the runtime) read from the recorder's stdout
//!   must be in a `bridge→runtime` lane.
//!
//! Lanes must load with at most one cut last line per file (the documented warning of a
//! recorder killed mid-write); the killed recorder must leave nothing outside its recordings
//! folder (its `TMPDIR` stays empty, no other file appears) and no bridge process behind.
//!
//! 50 kill points by default; `BRIDGEWIRE_KILL_POINTS=N` runs N, `BRIDGEWIRE_SOAK=1` runs 1000.
//! `BRIDGEWIRE_KILL_SEED` replays a run (the seed is printed).

use bridgewire::lane::read::LaneReader;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kill_bridge.py");
const TO_BRIDGE: &str = "runtime→bridge";
const FROM_BRIDGE: &str = "bridge→runtime";

/// Every wait is bounded by this (generous: the CI box may be loaded).
const BOUND: Duration = Duration::from_secs(60);

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn kill_points() -> usize {
    if let Some(n) = std::env::var("BRIDGEWIRE_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var("BRIDGEWIRE_SOAK").is_ok_and(|v| v == "1") {
        1000
    } else {
        50
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Victim {
    Recorder,
    Bridge,
}

#[derive(Default)]
struct Outcome {
    to_bridge_checked: usize,
    from_bridge_checked: usize,
    lost: Vec<String>,
    cut_lines: usize,
    problems: Vec<String>,
}

#[test]
fn every_line_that_reached_the_other_side_is_in_its_lane() {
    let points = kill_points();
    let seed = std::env::var("BRIDGEWIRE_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill points: {points}, BRIDGEWIRE_KILL_SEED={seed}");
    let started = Instant::now();
    let (mut to_bridge, mut from_bridge, mut cuts, mut lost) = (0, 0, 0, 0);
    let (mut recorder_kills, mut bridge_kills) = (0, 0);
    let mut failures = Vec::new();
    for trial in 0..points {
        let victim = if trial % 3 == 2 {
            Victim::Bridge
        } else {
            Victim::Recorder
        };
        let trial_seed = seed.wrapping_add((trial as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
        let o = run_trial(trial_seed, victim);
        match victim {
            Victim::Recorder => recorder_kills += 1,
            Victim::Bridge => bridge_kills += 1,
        }
        to_bridge += o.to_bridge_checked;
        from_bridge += o.from_bridge_checked;
        cuts += o.cut_lines;
        lost += o.lost.len();
        for p in o.lost.iter().take(3).chain(o.problems.iter()) {
            failures.push(format!(
                "trial {trial} ({victim:?} killed, seed {trial_seed}): {p}"
            ));
        }
        if !o.lost.is_empty() {
            failures.push(format!("trial {trial}: {} lines lost in all", o.lost.len()));
        }
    }
    eprintln!(
        "kill points: {points} ({recorder_kills} recorder, {bridge_kills} bridge) in {:.1} s; \
         lines checked: {} ({to_bridge} runtime→bridge, {from_bridge} bridge→runtime); \
         lost: {lost}; cut last lines: {cuts}",
        started.elapsed().as_secs_f64(),
        to_bridge + from_bridge,
    );
    assert!(
        to_bridge > 0 && from_bridge > 0,
        "the trials carried no traffic: nothing was checked"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One line the runtime sends: mostly requests the bridge answers, some non-JSON (a few not
/// UTF-8), some CRLF-terminated, now and then one longer than a pipe buffer.
fn runtime_line(rng: &mut Rng, n: u64) -> Vec<u8> {
    const BITS: &[&str] = &[
        "turn",
        "délai",
        "漢字",
        "\\\"q\\\"",
        "\\\\",
        "\\u0001",
        "\\n",
        " ",
        "emoji 🙂",
    ];
    let len = if rng.below(100) == 0 {
        70_000 + rng.below(130_000) as usize
    } else {
        rng.below(3000) as usize
    };
    let mut text = String::with_capacity(len + 16);
    while text.len() < len {
        text.push_str(BITS[rng.below(BITS.len() as u64) as usize]);
    }
    let mut line = match rng.below(20) {
        0 => {
            let mut l = format!("not json {n} {{ {text}").into_bytes();
            if rng.below(2) == 0 {
                l.extend_from_slice(b" \xff\xfe half \xe2\x82");
            }
            l
        }
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"turn/start","params":{{"threadId":"thr_{}","input":"{text}"}}}}"#,
            rng.below(8)
        )
        .into_bytes(),
    };
    if rng.below(20) == 0 {
        line.push(b'\r');
    }
    line.push(b'\n');
    line
}

fn wait_bounded(child: &mut Child, bound: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether `pid` is gone (or a zombie awaiting its reaper).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rfind(')').is_some_and(|i| s[i + 2..].starts_with('Z')),
    }
}

fn strip_cr(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\r").unwrap_or(l)
}

fn run_trial(seed: u64, victim: Victim) -> Outcome {
    let mut rng = Rng(seed);
    let mut o = Outcome::default();
    let t = tempfile::tempdir().unwrap();
    let rec = t.path().join("rec");
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let log = t.path().join("bridge.log");
    let pidfile = t.path().join("bridge.pid");
    let stderr = std::fs::File::create(t.path().join("stderr")).unwrap();
    let mut child = Command::new(BRIDGEWIRE)
        .args(["record", "bb", "--dir"])
        .arg(&rec)
        .args(["--", "python3", BRIDGE])
        .env("KILL_BRIDGE_LOG", &log)
        .env("KILL_BRIDGE_PID", &pidfile)
        .env("KILL_BRIDGE_SEED", (seed % 1_000_000_007).to_string())
        .env("TMPDIR", &tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let recorder_pid = child.id() as i32;

    // The runtime: one thread writes, one reads (and keeps every complete line it got).
    let stop = Arc::new(AtomicBool::new(false));
    let mut stdin = child.stdin.take().unwrap();
    let writer_seed = rng.next();
    let writer_stop = stop.clone();
    let (writer_done, writer_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut rng = Rng(writer_seed);
        let mut n = 0u64;
        'run: while !writer_stop.load(Ordering::Relaxed) {
            let mut batch = Vec::new();
            for _ in 0..1 + rng.below(16) {
                n += 1;
                batch.extend_from_slice(&runtime_line(&mut rng, n));
            }
            // Now and then a batch goes in two writes with a pause, so a line is cut between
            // the recorder's reads.
            let cut = if rng.below(8) == 0 {
                rng.below(batch.len() as u64) as usize
            } else {
                batch.len()
            };
            for part in [&batch[..cut], &batch[cut..]] {
                if part.is_empty() {
                    continue;
                }
                if stdin.write_all(part).and_then(|_| stdin.flush()).is_err() {
                    break 'run;
                }
                if rng.below(4) == 0 {
                    std::thread::sleep(Duration::from_micros(rng.below(2000)));
                }
            }
        }
        let _ = writer_done.send(());
    });
    let stdout = child.stdout.take().unwrap();
    let (first_tx, first_rx) = mpsc::channel();
    let (reader_done, reader_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(1 << 16, stdout);
        let mut got = Vec::new();
        let mut first = Some(first_tx);
        loop {
            let mut l = Vec::new();
            match r.read_until(b'\n', &mut l) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if l.pop() != Some(b'\n') {
                break; // a cut line did not reach us whole
            }
            got.push(l);
            if let Some(f) = first.take() {
                let _ = f.send(());
            }
        }
        let _ = reader_done.send(got);
    });

    // Kill once traffic flows, at a random moment of it.
    if first_rx.recv_timeout(BOUND).is_err() {
        o.problems
            .push("no line came back from the bridge in time".into());
    }
    std::thread::sleep(Duration::from_micros(rng.below(250_000)));
    let bridge_pid: Option<i32> = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let target = match victim {
        Victim::Recorder => Some(recorder_pid),
        Victim::Bridge => bridge_pid,
    };
    match target {
        // SAFETY: kill(2) of a process this trial started (the bridge's pid is its own report).
        Some(pid) => unsafe {
            libc::kill(pid, libc::SIGKILL);
        },
        None => o.problems.push("the bridge never wrote its pid".into()),
    }
    stop.store(true, Ordering::Relaxed);
    let status = wait_bounded(&mut child, BOUND);
    if status.is_none() {
        o.problems
            .push(format!("the recorder did not exit within {BOUND:?}"));
    }
    let received = reader_rx.recv_timeout(BOUND).unwrap_or_else(|_| {
        o.problems.push("the runtime's stdout never closed".into());
        Vec::new()
    });
    if writer_rx.recv_timeout(BOUND).is_err() {
        o.problems.push("the runtime's writer never stopped".into());
    }
    if let Some(pid) = bridge_pid {
        let deadline = Instant::now() + BOUND;
        while !gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !gone(pid) {
            o.problems
                .push(format!("the bridge ({pid}) outlived the trial"));
            // SAFETY: as above; do not leak it into the next trial.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    // Nothing outside the recordings folder.
    let tmp_left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    if !tmp_left.is_empty() {
        o.problems
            .push(format!("left in TMPDIR: {:?}", tmp_left[0].path()));
    }
    for e in std::fs::read_dir(t.path()).unwrap().flatten() {
        let name = e.file_name();
        if !["rec", "tmp", "bridge.log", "bridge.pid", "stderr"]
            .iter()
            .any(|n| name == *n)
        {
            o.problems
                .push(format!("left beside the recordings: {:?}", e.path()));
        }
    }

    // The lanes, by direction.
    let mut recorded: [HashSet<Vec<u8>>; 2] = Default::default();
    for (path, dir) in lane_files(&rec) {
        let which = match dir.as_str() {
            TO_BRIDGE => 0,
            FROM_BRIDGE => 1,
            other => {
                o.problems.push(format!("unexpected lane {other}"));
                continue;
            }
        };
        let reader = match LaneReader::open(&path, Some(&dir)) {
            Ok(r) => r,
            Err(e) => {
                o.problems.push(e.to_string());
                continue;
            }
        };
        for entry in reader {
            match entry {
                Ok(e) => {
                    recorded[which].insert(e.raw_bytes());
                }
                Err(e) if e.is_warning() => o.cut_lines += 1,
                Err(e) => o.problems.push(e.to_string()),
            }
        }
    }

    // runtime→bridge: what the bridge logged it read.
    let logged = std::fs::read(&log).unwrap_or_default();
    let mut logged_lines: Vec<&[u8]> = logged.split(|&b| b == b'\n').collect();
    logged_lines.pop(); // after the last `\n`: not a complete line
    for l in logged_lines {
        o.to_bridge_checked += 1;
        if !recorded[0].contains(strip_cr(l)) {
            o.lost.push(format!(
                "{TO_BRIDGE} line reached the bridge but is not in its lane: {:.120}",
                String::from_utf8_lossy(l)
            ));
        }
    }
    // bridge→runtime: what the runtime read.
    for l in &received {
        o.from_bridge_checked += 1;
        if !recorded[1].contains(strip_cr(l)) {
            o.lost.push(format!(
                "{FROM_BRIDGE} line reached the runtime but is not in its lane: {:.120}",
                String::from_utf8_lossy(l)
            ));
        }
    }
    if !o.problems.is_empty() || !o.lost.is_empty() {
        let err = std::fs::read_to_string(t.path().join("stderr")).unwrap_or_default();
        o.problems
            .push(format!("recorder exit {status:?}, stderr: {err:.2000}"));
    }
    o
}

/// `(path, dir)` of every lane file under `root` (`<scope>/<dir>.ndjson`).
fn lane_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(scopes) = std::fs::read_dir(root) else {
        return out; // killed before its first line: no lanes yet
    };
    for scope in scopes.flatten() {
        for f in std::fs::read_dir(scope.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = f.path();
            if let Some(dir) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ndjson"))
            {
                out.push((p.clone(), dir.to_string()));
            }
        }
    }
    out
}

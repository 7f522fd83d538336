//! Guard for the README's main job (`bash scripts/main-job.sh`): CI runs the test suite, not the
//! script, and the script broke unnoticed once. Here it runs every step against the debug
//! binaries this test run built (`BRIDGEWIRE_BIN_DIR`; by default the script builds and uses
//! release ones), reports in a temporary directory, bounded in time, and must pass every step.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous for a loaded 2-core machine (about 25 s there, with debug binaries).
const LIMIT: Duration = Duration::from_secs(600);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// How many steps the script runs, counted from its text: each `step` line, the one inside the
/// loop over `recordings/*/` once per recordings folder.
fn expected_steps(script: &str) -> usize {
    let folders = std::fs::read_dir(root().join("recordings"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    let mut in_loop = false;
    let mut n = 0;
    for line in script.lines().map(str::trim) {
        if line.starts_with("for dir in recordings/") {
            in_loop = true;
        } else if line == "done" {
            in_loop = false;
        } else if line.starts_with("step ") {
            n += if in_loop { folders } else { 1 };
        }
    }
    n
}

#[test]
fn the_main_job_passes_every_step_on_the_debug_binaries() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_bridgewire"))
        .parent()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let reports = tmp.path().join("reports");
    let log = tmp.path().join("main-job.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("bash")
        .arg(root().join("scripts/main-job.sh"))
        .env("BRIDGEWIRE_BIN_DIR", bin_dir)
        .env("BRIDGEWIRE_REPORTS_DIR", &reports)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        // Its own process group: on a timeout the whole tree goes, no orphan bridge.
        .process_group(0)
        .spawn()
        .expect("bash runs the script");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > LIMIT {
            // SAFETY: kill(2) on the child's process group, which we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let Some(status) = status else {
        panic!("the main job took over {LIMIT:?}:\n{text}");
    };
    assert!(status.success(), "the main job failed ({status}):\n{text}");
    assert!(text.contains("main job: all steps passed"), "{text}");
    let script = std::fs::read_to_string(root().join("scripts/main-job.sh")).unwrap();
    let ran = text.lines().filter(|l| l.starts_with("==> ")).count();
    assert_eq!(ran, expected_steps(&script), "steps run:\n{text}");
    // The binaries were the ones given, and the reports went where asked.
    assert!(
        text.contains(&format!("==> {}", bin_dir.join("bridgewire").display())),
        "{text}"
    );
    for report in script
        .split_whitespace()
        .filter_map(|w| w.trim_matches('"').strip_prefix("$reports/"))
    {
        assert!(
            reports.join(report).is_file(),
            "no report {report}:\n{text}"
        );
    }
}

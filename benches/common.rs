//! Shared helpers for the benchmark programs (not a benchmark itself).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

/// Runs a shell pipeline `reps` times; returns the median wall time.
pub fn time_sh(script: &str, reps: usize) -> Duration {
    let mut times: Vec<Duration> = (0..reps).map(|_| time_sh_cpu(script).0).collect();
    times.sort();
    times[times.len() / 2]
}

/// Runs a shell pipeline once: its wall time and the CPU seconds (user + sys) of all its
/// processes. Panics if it fails.
pub fn time_sh_cpu(script: &str) -> (Duration, f64) {
    let before = children_cpu();
    let t = Instant::now();
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .expect("sh");
    let wall = t.elapsed();
    assert!(st.success(), "benchmark step failed: {script}");
    (wall, children_cpu() - before)
}

/// User + system CPU seconds of every waited-for descendant so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills a struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The middle value (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The 1, 5 and 15 minute load averages, as printed beside every measured figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Runs a command, returning (wall time, peak RSS in KiB) measured with wait4(2).
pub fn time_rss(cmd: &mut Command) -> (Duration, u64) {
    let m = measure(cmd);
    (m.wall, m.rss_kib)
}

/// One whole process as wait4(2) reports it.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub wall: Duration,
    /// User + system CPU time, in seconds.
    pub cpu_s: f64,
    pub rss_kib: u64,
}

/// Runs a command to its end: its wall time, CPU time (user + sys) and peak RSS, from
/// wait4(2). Panics if it does not exit normally.
pub fn measure(cmd: &mut Command) -> Usage {
    let t = Instant::now();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below with wait4(2) to read its rusage"
    )]
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain wait4 on our own child; rusage is written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally");
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Usage {
        wall: t.elapsed(),
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        rss_kib: usage.ru_maxrss as u64,
    }
}

pub fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

pub fn dir_bytes(root: &Path) -> u64 {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// A deterministic pseudo-random generator (xorshift), so data is the same on every run.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn text(&mut self, len: usize) -> String {
        const WORDS: &[&str] = &[
            "the", "bridge", "turn", "item", "delta", "runtime", "provider", "thread", "echo",
            "lane", "seq", "run",
        ];
        let mut s = String::with_capacity(len + 8);
        while s.len() < len {
            s.push_str(WORDS[(self.next_u64() % WORDS.len() as u64) as usize]);
            s.push(' ');
        }
        s
    }
}

/// Prints the machine line every results table starts with.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cpu}, {cores} cores")
}

/// Prints one of issue 13's goals as `goal: <what>: <figure> (<criterion>): met` (or `NOT met`),
/// so `cargo bench 2>/dev/null | grep '^goal'` summarises which goals this machine reached in
/// this run. The criterion is printed beside the figure, so the line can be checked by eye.
pub fn goal(what: &str, figure: &str, criterion: &str, met: bool) {
    println!(
        "goal: {what}: {figure} ({criterion}): {}",
        if met { "met" } else { "NOT met" }
    );
}

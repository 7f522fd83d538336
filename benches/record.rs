//! Recording overhead of `bridgewire record bb`.
//!
//! 1. Throughput: N MiB of JSON-RPC lines (default 200) pushed through a bridge (`cat`, which
//!    echoes every line back, so both runtime lanes are recorded) beside a plain pipe and beside
//!    `tee` writing both directions to files. Ratio = bridgewire MB/s ÷ tee MB/s.
//! 2. Latency: request/response round trips on a ping-pong bridge (`cat`), with and without the
//!    recorder in between; the added p50/p99. The paths run interleaved, `--reps` rounds of
//!    `--pings / --reps` pings each (a VM's wake-up cost swings with its state: direct `cat` went
//!    from 4 to 60 µs p50 between minutes), with polling off (`BRIDGEWIRE_RECORD_SPIN_US=0`) as a
//!    row and `--before`'s binary as another; figures are medians over rounds, and "added" is
//!    the median of each round's difference with the direct run beside it.
//!
//! Throughput runs are interleaved (`--reps`, default 5, medians) and report wall and CPU time
//! (user + sys of every process of each pipeline): on a shared machine CPU time is the steadier
//! figure, and the load average is printed around the runs.
//!
//! `cargo bench --bench record [-- --mb 200 --pings 20000 --reps 5 --before PATH]`
//!
//! `--before PATH` adds another `bridgewire` binary (e.g. a build of an earlier commit) to the
//! interleaved throughput and round-trip runs, so a change is measured against its predecessor
//! in one run.

#[path = "common.rs"]
mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let mb = arg("--mb", 200);
    let pings = arg("--pings", 20000) as usize;
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("wire.ndjson");
    let bytes = generate(&data, mb * 1024 * 1024);
    println!("machine: {}", machine());
    println!(
        "data: {:.1} MiB of JSON-RPC lines",
        bytes as f64 / 1048576.0
    );

    let d = data.display();
    let out = t.path().display();
    // The three pipelines, interleaved (pipe, tee, bridgewire, pipe, tee, …) so that each sees
    // the same machine load; per pipeline the median wall time and the median CPU time (user +
    // sys of every process of the pipeline, from getrusage of the children).
    //
    // Only the pipeline is timed. Its outputs are deleted after the clock stops and `sync` runs
    // before the next one starts: deleting 260 MiB of lanes took 0.08 s against 0.05 s for
    // tee's two files (a quarter of a run), and one run's dirty pages were written back during
    // the next. Neither is recording: a user keeps the recording, and the kernel writes it
    // back after the pipeline has finished, for tee's files as for lanes.
    let runs = [
        (
            "plain pipe (cat | cat)",
            format!("cat {d} | cat | cat > /dev/null"),
            String::new(),
        ),
        (
            "tee both directions",
            format!("cat {d} | tee {out}/a | cat | tee {out}/b > /dev/null"),
            format!("rm -f {out}/a {out}/b"),
        ),
        (
            "bridgewire record bb -- cat",
            format!("cat {d} | {BW} record bb --dir {out}/rec -- cat > /dev/null"),
            format!("rm -rf {out}/rec"),
        ),
    ];
    let mut runs = runs.to_vec();
    let args: Vec<String> = std::env::args().collect();
    let before = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
        .cloned();
    if let Some(before) = &before {
        runs.push((
            "bridgewire record bb -- cat (--before)",
            format!("cat {d} | {before} record bb --dir {out}/rec0 -- cat > /dev/null"),
            format!("rm -rf {out}/rec0"),
        ));
    }
    let reps = arg("--reps", 5) as usize;
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    println!("load average before: {}", load_average());
    for _ in 0..reps {
        for (i, (_, script, cleanup)) in runs.iter().enumerate() {
            sh(&format!("{cleanup}\nsync"));
            let (wall, cpu) = time_sh_cpu(script);
            walls[i].push(wall.as_secs_f64());
            cpus[i].push(cpu);
            sh(cleanup);
        }
    }
    println!("load average after: {}", load_average());
    let (tee_wall, tee_cpu) = (median(walls[1].clone()), median(cpus[1].clone()));
    let (pipe_wall, pipe_cpu) = (median(walls[0].clone()), median(cpus[0].clone()));
    println!();
    println!(
        "| run ({reps} interleaved runs, medians) | wall s | MiB/s | vs tee (wall) | vs pipe (wall) | CPU s | vs tee (CPU) | vs pipe (CPU) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    // Each row's median wall time, kept for the goal line.
    let mut row_walls = Vec::with_capacity(runs.len());
    for (i, (name, _, _)) in runs.iter().enumerate() {
        let (w, c) = (median(walls[i].clone()), median(cpus[i].clone()));
        row_walls.push(w);
        println!(
            "| {name} | {w:.2} | {:.0} | {:.2} | {:.2} | {c:.2} | {:.2} | {:.2} |",
            bytes as f64 / 1048576.0 / w,
            tee_wall / w,
            pipe_wall / w,
            tee_cpu / c,
            pipe_cpu / c,
        );
    }

    // The recorder's row is the third (`runs` lists the pipe, tee, then `record bb`).
    let rec_wall = row_walls[2];
    let added_p99 = round_trip_table(t.path(), pings, reps, before.as_deref());
    println!();
    goal(
        "record bb throughput vs tee (both directions, wall)",
        &format!("{:.2}×", tee_wall / rec_wall),
        "≥ 0.95×",
        tee_wall / rec_wall >= 0.95,
    );
    goal(
        "record bb added round trip p99",
        &format!("{added_p99:+.1} µs"),
        "< 50 µs",
        added_p99 < 50.0,
    );
}

/// The round trips: each path `reps` times with `pings / reps` pings, interleaved; per path the
/// median over rounds of p50 and p99, and of each round's difference with direct `cat`.
/// Returns the recorder's added p99 (its row's median over rounds of the difference with direct).
fn round_trip_table(dir: &std::path::Path, pings: usize, reps: usize, before: Option<&str>) -> f64 {
    let record = |bin: &str, lanes: &str, spin_off: bool| {
        let mut c = Command::new(bin);
        c.args(["record", "bb", "--dir"])
            .arg(dir.join(lanes))
            .args(["--", "cat"]);
        if spin_off {
            c.env("BRIDGEWIRE_RECORD_SPIN_US", "0");
        }
        c
    };
    let mut paths: Vec<(String, Box<dyn Fn() -> Command + '_>)> = vec![
        ("direct (cat)".into(), Box::new(|| Command::new("cat"))),
        (
            "through record bb".into(),
            Box::new(move || record(BW, "rec-ping", false)),
        ),
        (
            "through record bb, polling off".into(),
            Box::new(move || record(BW, "rec-ping-off", true)),
        ),
    ];
    if let Some(b) = before {
        let b = b.to_string();
        paths.push((
            "through record bb (--before)".into(),
            Box::new(move || record(&b, "rec-ping-before", false)),
        ));
    }
    let per_round = (pings / reps.max(1)).max(100);
    // [path][round] = (p50, p99)
    let mut stats: Vec<Vec<(f64, f64)>> = vec![Vec::new(); paths.len()];
    for _ in 0..reps.max(1) {
        for (i, (_, cmd)) in paths.iter().enumerate() {
            let v = round_trips(cmd(), per_round);
            stats[i].push((pct(&v, 0.5), pct(&v, 0.99)));
        }
    }
    println!();
    println!(
        "| round trip ({} rounds × {per_round} pings, interleaved, medians) | p50 µs | p99 µs | added p50 µs | added p99 µs |",
        reps.max(1)
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    // Each row's added p99, kept for the goal line.
    let mut added_p99 = Vec::with_capacity(paths.len());
    for (i, (name, _)) in paths.iter().enumerate() {
        let m = |f: &dyn Fn(usize) -> f64| median((0..stats[i].len()).map(f).collect());
        added_p99.push(m(&|r| stats[i][r].1 - stats[0][r].1));
        println!(
            "| {name} | {:.1} | {:.1} | {:+.1} | {:+.1} |",
            m(&|r| stats[i][r].0),
            m(&|r| stats[i][r].1),
            m(&|r| stats[i][r].0 - stats[0][r].0),
            added_p99[i],
        );
    }
    // `paths[1]` is `through record bb` (polling on, as users run it).
    added_p99[1]
}

/// The `p` quantile of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// Writes JSON-RPC lines of mixed size until `target` bytes.
fn generate(path: &std::path::Path, target: u64) -> u64 {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut written = 0u64;
    let mut id = 0u64;
    while written < target {
        id += 1;
        let thread = format!("thr_{}", rng.next_u64() % 16);
        let len = (rng.next_u64() % 900) as usize + 50;
        let line = match rng.next_u64() % 4 {
            0 => {
                serde_json::json!({"jsonrpc":"2.0","id":id,"method":"turn/start","params":{"threadId":thread,"input":[{"type":"text","text":rng.text(200)}],"clientRequestId":format!("creq_{id}")}})
            }
            1 => {
                serde_json::json!({"jsonrpc":"2.0","id":id,"result":{"providerThreadId":format!("p-{id}")}})
            }
            _ => {
                serde_json::json!({"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":thread,"deltas":[{"kind":"item.textDelta","key":{"channel":"assistant"},"channel":"agentMessage","text":rng.text(len)}]}})
            }
        };
        let s = line.to_string();
        written += s.len() as u64 + 1;
        writeln!(f, "{s}").unwrap();
    }
    written
}

/// Round-trip times in µs of one-line requests through `cmd` (which must echo lines).
fn round_trips(mut cmd: Command, n: usize) -> Vec<f64> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut times = Vec::with_capacity(n);
    let mut buf = String::new();
    for i in 0..n + 200 {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\",\"params\":{{\"threadId\":\"thr_1\"}}}}\n"
        );
        let t = Instant::now();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
        buf.clear();
        stdout.read_line(&mut buf).unwrap();
        if i >= 200 {
            times.push(t.elapsed().as_secs_f64() * 1e6); // the first 200 warm up
        }
    }
    drop(stdin);
    let _ = child.wait();
    times.sort_by(|a, b| a.total_cmp(b));
    times
}

/// Runs untimed housekeeping (deleting a run's outputs, `sync`) between timed runs.
fn sh(script: &str) {
    if script.trim().is_empty() {
        return;
    }
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .expect("sh");
    assert!(st.success(), "benchmark housekeeping failed: {script}");
}

//! Recording overhead of `bridgewire record bb`.
//!
//! 1. Throughput: N MiB of JSON-RPC lines (default 200) pushed through a bridge (`cat`, which
//!    echoes every line back, so both runtime lanes are recorded) beside a plain pipe and beside
//!    `tee` writing both directions to files. Ratio = bridgewire MB/s ÷ tee MB/s.
//! 2. Latency: request/response round trips on a ping-pong bridge (`cat`), with and without the
//!    recorder in between; the added p50/p99.
//!
//! Throughput runs are interleaved (`--reps`, default 5, medians) and report wall and CPU time
//! (user + sys of every process of each pipeline): on a shared machine CPU time is the steadier
//! figure, and the load average is printed around the runs.
//!
//! `cargo bench --bench record [-- --mb 200 --pings 20000 --reps 5 --before PATH]`
//!
//! `--before PATH` adds another `bridgewire` binary (e.g. a build of an earlier commit) to the
//! interleaved throughput runs, so a change is measured against its predecessor in one run.

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
    let runs = [
        (
            "plain pipe (cat | cat)",
            format!("cat {d} | cat | cat > /dev/null"),
        ),
        (
            "tee both directions",
            format!("cat {d} | tee {out}/a | cat | tee {out}/b > /dev/null; rm -f {out}/a {out}/b"),
        ),
        (
            "bridgewire record bb -- cat",
            format!(
                "cat {d} | {BW} record bb --dir {out}/rec -- cat > /dev/null; rm -rf {out}/rec"
            ),
        ),
    ];
    let mut runs = runs.to_vec();
    let args: Vec<String> = std::env::args().collect();
    if let Some(before) = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
    {
        runs.push((
            "bridgewire record bb -- cat (--before)",
            format!(
                "cat {d} | {before} record bb --dir {out}/rec0 -- cat > /dev/null; rm -rf {out}/rec0"
            ),
        ));
    }
    let reps = arg("--reps", 5) as usize;
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    println!("load average before: {}", load_average());
    for _ in 0..reps {
        for (i, (_, script)) in runs.iter().enumerate() {
            let (wall, cpu) = time_sh_cpu(script);
            walls[i].push(wall.as_secs_f64());
            cpus[i].push(cpu);
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
    for (i, (name, _)) in runs.iter().enumerate() {
        let (w, c) = (median(walls[i].clone()), median(cpus[i].clone()));
        println!(
            "| {name} | {w:.2} | {:.0} | {:.2} | {:.2} | {c:.2} | {:.2} | {:.2} |",
            bytes as f64 / 1048576.0 / w,
            tee_wall / w,
            pipe_wall / w,
            tee_cpu / c,
            pipe_cpu / c,
        );
    }

    let direct = round_trips(Command::new("cat"), pings);
    let mut rec = Command::new(BW);
    rec.args(["record", "bb", "--dir"])
        .arg(t.path().join("rec-ping"))
        .args(["--", "cat"]);
    let recorded = round_trips(rec, pings);
    let pct = |v: &[f64], p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    println!();
    println!("| round trip ({pings} pings) | p50 µs | p99 µs |");
    println!("| --- | ---: | ---: |");
    println!(
        "| direct (cat) | {:.1} | {:.1} |",
        pct(&direct, 0.5),
        pct(&direct, 0.99)
    );
    println!(
        "| through record bb | {:.1} | {:.1} |",
        pct(&recorded, 0.5),
        pct(&recorded, 0.99)
    );
    println!(
        "| added | {:.1} | {:.1} |",
        pct(&recorded, 0.5) - pct(&direct, 0.5),
        pct(&recorded, 0.99) - pct(&direct, 0.99)
    );
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

//! Recording overhead of `bridgewire record bb`.
//!
//! 1. Throughput: N MiB of JSON-RPC lines (default 200) pushed through a bridge (`cat`, which
//!    echoes every line back, so both runtime lanes are recorded) beside a plain pipe and beside
//!    `tee` writing both directions to files. Ratio = bridgewire MB/s ÷ tee MB/s.
//! 2. Latency: request/response round trips on a ping-pong bridge (`cat`), with and without the
//!    recorder in between; the added p50/p99.
//!
//! `cargo bench --bench record [-- --mb 200 --pings 20000]`

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
    let pipe = time_sh(&format!("cat {d} | cat > /dev/null"), 3);
    let tee = time_sh(
        &format!(
            "cat {d} | tee {out}/a > /dev/null && cat {d} | cat | tee {out}/b > /dev/null; rm -f {out}/a {out}/b"
        ),
        1,
    );
    // tee in both directions of one pipeline, like the recorder's two lanes:
    let tee2 = time_sh(
        &format!("cat {d} | tee {out}/a | cat | tee {out}/b > /dev/null; rm -f {out}/a {out}/b"),
        3,
    );
    let _ = tee;
    let bw = time_sh(
        &format!("cat {d} | {BW} record bb --dir {out}/rec -- cat > /dev/null; rm -rf {out}/rec"),
        3,
    );
    println!();
    println!("| run | MiB/s | vs tee |");
    println!("| --- | ---: | ---: |");
    for (name, dur) in [
        ("plain pipe (cat | cat)", pipe),
        ("tee both directions", tee2),
        ("bridgewire record bb -- cat", bw),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} |",
            mb_per_s(bytes, dur),
            tee2.as_secs_f64() / dur.as_secs_f64()
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

//! Parity over pre-recorded legs: 1000 cells × 200 events, dumped as normalized event lists
//! (`dump:` legs), compared by `bridgewire parity` (both cores) beside
//! `diff <(jq -S -c . a) <(jq -S -c . b)` over the same files, cell by cell (ratio).
//! One event in every tenth head cell differs, so the diff paths run too.
//!
//! `cargo bench --bench parity [-- --cells 1000 --events 200]`

#[path = "common.rs"]
mod common;

use common::*;
use std::process::{Command, Stdio};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let cells = arg("--cells", 1000);
    let events = arg("--events", 200);
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("base"), t.path().join("head"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let mut rng = Rng(0x853c49e6748fea9b);
    for c in 0..cells {
        let mut list = Vec::with_capacity(events);
        for i in 0..events {
            list.push(serde_json::json!({
                "type": if i % 3 == 0 { "item/started" } else { "item/agentMessage/delta" },
                "threadId": "", "providerThreadId": "",
                "scope": {"kind": "turn", "turnId": format!("#{}", 1 + i / 50)},
                "itemId": format!("#{}", 2 + i / 3),
                "delta": rng.text(60),
            }));
        }
        let name = format!("prov-cell{c:04}.events.json");
        let text = bridgewire::jsjson::to_string_pretty(&serde_json::Value::Array(list.clone()));
        std::fs::write(a.join(&name), &text).unwrap();
        if c % 10 == 0 {
            list[events / 2]["delta"] = "changed".into();
        }
        std::fs::write(
            b.join(&name),
            bridgewire::jsjson::to_string_pretty(&serde_json::Value::Array(list)),
        )
        .unwrap();
    }
    let bytes = dir_bytes(&a) + dir_bytes(&b);
    println!("machine: {}", machine());
    println!(
        "data: {cells} cells × {events} events per leg, {:.1} MiB in all",
        bytes as f64 / 1048576.0
    );
    let run = |jobs: &str| {
        time_rss(
            Command::new(BW)
                .args(["parity", "-j", jobs, "--base"])
                .arg(format!("dump:{}", a.display()))
                .arg("--head")
                .arg(format!("dump:{}", b.display()))
                .stdout(Stdio::null()),
        )
    };
    // Exit status 1 is expected (one cell in ten differs); time_rss only needs a normal exit.
    let (j1, _) = run("1");
    let (j2, rss) = run("2");
    let script = format!(
        "cd {} && for f in *.events.json; do diff <(jq -S -c . \"$f\") <(jq -S -c . {}/\"$f\") > /dev/null; done; true",
        a.display(),
        b.display()
    );
    let jq = time_rss(Command::new("bash").arg("-c").arg(&script));
    println!();
    println!("| run | seconds | MiB/s | vs jq+diff |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| jq -S -c + diff, per cell | {:.2} | {:.0} | 1.0× |",
        jq.0.as_secs_f64(),
        mb_per_s(bytes, jq.0)
    );
    println!(
        "| bridgewire parity -j 1 | {:.2} | {:.0} | {:.1}× |",
        j1.as_secs_f64(),
        mb_per_s(bytes, j1),
        jq.0.as_secs_f64() / j1.as_secs_f64()
    );
    println!(
        "| bridgewire parity -j 2 | {:.2} | {:.0} | {:.1}× |",
        j2.as_secs_f64(),
        mb_per_s(bytes, j2),
        jq.0.as_secs_f64() / j2.as_secs_f64()
    );
    println!();
    println!(
        "speed-up -j 2 over -j 1: {:.2}×; peak RSS (-j 2): {:.1} MiB",
        j1.as_secs_f64() / j2.as_secs_f64(),
        rss as f64 / 1024.0
    );
}

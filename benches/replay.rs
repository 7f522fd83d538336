//! Live replay of the bundled `recordings/bb-ref` cells: event-driven (the default) against
//! bb's fixed windows (`--fixed-windows`, the kit's timing), interleaved round by round, at
//! `-j 1`; medians of the wall clock `replay bb --stats` prints, and whether both modes gave
//! the same report (lines, events, verdicts, stalls, doubles).
//!
//! `cargo bench --bench replay [-- --rounds N]` (default 3)

#[path = "common.rs"]
mod common;

use common::*;
use std::process::Command;

const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");

/// One replay of every bb-ref cell: (wall ms from `--stats`, the JSON report).
fn replay(fixed: bool) -> (f64, serde_json::Value) {
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/bb-ref");
    let mut cmd = Command::new(BW);
    cmd.args(["replay", "bb", "--stats", "--format", "json", "-j", "1"]);
    if fixed {
        cmd.arg("--fixed-windows");
    }
    let out = cmd
        .arg(cells)
        .arg("--")
        .arg(BRIDGE)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .output()
        .expect("bridgewire");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let wall = stderr
        .lines()
        .find_map(|l| l.split("wall ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no stats line: {stderr}"));
    let doc = serde_json::from_slice(&out.stdout).expect("a JSON report");
    (wall, doc)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!("machine: {}", machine());
    let (mut event, mut fixed) = (Vec::new(), Vec::new());
    let mut same = true;
    for _ in 0..rounds {
        let (we, de) = replay(false);
        let (wf, df) = replay(true);
        same &= de == df && de["passed"] == 4;
        event.push(we);
        fixed.push(wf);
    }
    let (e, f) = (median(event), median(fixed));
    println!();
    println!(
        "| replay of the 4 bb-ref cells, -j 1 ({rounds} rounds, median) | wall ms | vs fixed windows |"
    );
    println!("| --- | ---: | ---: |");
    println!("| fixed windows (bb's kit timing, --fixed-windows) | {f:.0} | 1.0× |");
    println!(
        "| event-driven (default) | {e:.0} | **{:.1}×** faster |",
        f / e
    );
    println!();
    println!(
        "same report in both modes (lines, events, verdicts, stalls, doubles): {}",
        if same { "yes" } else { "NO" }
    );
    println!();
    goal(
        "replay of the bb-ref cells, event-driven vs fixed windows, same report",
        &format!(
            "{:.1}× faster, {}",
            f / e,
            if same {
                "same report"
            } else {
                "reports DIFFER"
            }
        ),
        "≥ 10× and the same report",
        f / e >= 10.0 && same,
    );
    goal(
        "replay of the 4 bb-ref cells at -j 1, event-driven",
        &format!("{e:.0} ms"),
        "≤ 1000 ms",
        e <= 1000.0,
    );
}

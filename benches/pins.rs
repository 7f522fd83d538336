//! Offline pins throughput and memory, and the parallel speed-up.
//!
//! 1. A synthetic recordings folder (bb cells of ~8 MiB each) at 256 MiB, 512 MiB and 1 GiB:
//!    `bridgewire pins --update` MiB/s and peak RSS, beside `jq -c . <every lane> >/dev/null`
//!    over the same files (ratio).
//! 2. Corpus-shaped folders: the 14 small cells of `recordings/bb` (one re-recorded lane of
//!    ~19 KiB each) replicated (hard links) to 10 000 cells, beside `jq -c .` over the same
//!    files, and to 200 000 cells for peak RSS (bridgewire only: the RSS must stay flat).
//! 3. 1000 small cells: `-j 1` versus `-j 2`.
//!
//! `cargo bench --bench pins [-- --gib 1 --corpus 10000 --corpus-big 200000]`

#[path = "common.rs"]
mod common;

use common::*;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gib: f64 = args
        .iter()
        .position(|a| a == "--gib")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let t = tempfile::tempdir().unwrap();
    println!("machine: {}", machine());
    let cell_bytes = 8u64 << 20;
    let total_cells = ((gib * 1024.0 * 1024.0 * 1024.0) as u64 / cell_bytes).max(4);
    let all = t.path().join("all");
    for i in 0..total_cells {
        write_cell(
            &all.join("synthetic").join(format!("cell-{i:04}")),
            cell_bytes,
            i,
        );
    }
    println!();
    println!("| folder | cells | MiB | bridgewire MiB/s | peak RSS MiB | jq MiB/s | ratio |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for frac in [4u64, 2, 1] {
        let n = total_cells / frac;
        let dir = t.path().join(format!("set-{n}"));
        for i in 0..n {
            let src = all.join("synthetic").join(format!("cell-{i:04}"));
            let dst = dir.join("synthetic").join(format!("cell-{i:04}"));
            std::fs::create_dir_all(&dst).unwrap();
            for f in std::fs::read_dir(&src).unwrap() {
                let f = f.unwrap();
                std::fs::hard_link(f.path(), dst.join(f.file_name())).unwrap();
            }
        }
        let bytes = dir_bytes(&dir);
        let (bw_time, rss_kib) = time_rss(
            Command::new(BW)
                .args(["pins", "--update"])
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let lanes: Vec<String> = walkdir::WalkDir::new(&dir)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "ndjson")
            })
            .map(|e| e.path().display().to_string())
            .collect();
        let (jq_time, _) = time_rss(
            Command::new("jq")
                .arg("-c")
                .arg(".")
                .args(&lanes)
                .stdout(Stdio::null()),
        );
        println!(
            "| {} | {n} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1}× |",
            dir.file_name().unwrap().to_string_lossy(),
            bytes as f64 / 1048576.0,
            mb_per_s(bytes, bw_time),
            rss_kib as f64 / 1024.0,
            mb_per_s(bytes, jq_time),
            jq_time.as_secs_f64() / bw_time.as_secs_f64()
        );
    }

    corpus_shaped(t.path());

    // Parallel speed-up over 1000 small cells.
    let many = t.path().join("many");
    for i in 0..1000u64 {
        write_cell(
            &many.join("synthetic").join(format!("cell-{i:04}")),
            96 << 10,
            i,
        );
    }
    let bytes = dir_bytes(&many);
    let (j1, _) = time_rss(
        Command::new(BW)
            .args(["pins", "--update", "-j", "1"])
            .arg(&many)
            .stdout(Stdio::null()),
    );
    let (j2, _) = time_rss(
        Command::new(BW)
            .args(["pins", "--update", "-j", "2"])
            .arg(&many)
            .stdout(Stdio::null()),
    );
    println!();
    println!(
        "| 1000 cells ({:.0} MiB) | seconds | speed-up |",
        bytes as f64 / 1048576.0
    );
    println!("| --- | ---: | ---: |");
    println!("| -j 1 | {:.2} | 1.00 |", j1.as_secs_f64());
    println!(
        "| -j 2 | {:.2} | {:.2} |",
        j2.as_secs_f64(),
        j1.as_secs_f64() / j2.as_secs_f64()
    );
}

/// Writes one bb cell of about `bytes`: runtime→bridge turn/start requests and bridge→runtime
/// thread/delta batches making complete turns.
fn write_cell(dir: &Path, bytes: u64, salt: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rt =
        std::io::BufWriter::new(std::fs::File::create(dir.join("runtime→bridge.ndjson")).unwrap());
    let mut br =
        std::io::BufWriter::new(std::fs::File::create(dir.join("bridge→runtime.ndjson")).unwrap());
    let mut rng = Rng(0x243f6a8885a308d3 ^ salt.wrapping_mul(0x9e3779b97f4a7c15) | 1);
    let mut seq = 0u64;
    let mut written = 0u64;
    let mut turn = 0u64;
    let entry = |w: &mut dyn Write, dir: &str, line: &serde_json::Value, seq: &mut u64| -> u64 {
        *seq += 1;
        let e = bridgewire::lane::Entry {
            ts: 1_790_000_000_000.0 + *seq as f64,
            run: 1_790_000_000_000.0,
            seq: *seq as f64,
            dir: dir.into(),
            line: line.to_string(),
            extra: Default::default(),
        };
        let s = e.to_line();
        writeln!(w, "{s}").unwrap();
        s.len() as u64 + 1
    };
    let tid = "thr_synthetic";
    let delta = |ds: serde_json::Value| serde_json::json!({"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":tid,"deltas":ds}});
    written += entry(
        &mut br,
        "bridge→runtime",
        &delta(serde_json::json!([{"kind":"session.reset"}])),
        &mut seq,
    );
    while written < bytes {
        turn += 1;
        // bb's format (creq_ + 10 characters of its alphabet), so the deltas stay valid.
        let creq = {
            const ALPHABET: &[u8] = b"23456789abcdefghijkmnpqrstuvwxyz";
            let mut n = turn;
            let mut s = [b'2'; 10];
            for c in s.iter_mut().rev() {
                *c = ALPHABET[(n % 32) as usize];
                n /= 32;
            }
            format!("creq_{}", String::from_utf8_lossy(&s))
        };
        written += entry(
            &mut rt,
            "runtime→bridge",
            &serde_json::json!({"jsonrpc":"2.0","id":turn,"method":"turn/start","params":{"threadId":tid,"input":[{"type":"text","text":rng.text(120)}],"clientRequestId":creq}}),
            &mut seq,
        );
        let cmd = format!("cmd-{turn}");
        written += entry(
            &mut br,
            "bridge→runtime",
            &delta(serde_json::json!([
                {"kind":"input.accepted","clientRequestId":creq},
                {"kind":"turn.open"},
                {"kind":"item.open","key":{"providerItemId":cmd},"item":{"type":"command","command":"ls","cwd":"/w"}},
                {"kind":"item.outputDelta","key":{"providerItemId":cmd},"channel":"command","text":rng.text(300)},
                {"kind":"item.close","key":{"providerItemId":cmd},"status":"completed","exitCode":0,"item":{"type":"command","command":"ls","cwd":"/w"}}
            ])),
            &mut seq,
        );
        for _ in 0..4 {
            written += entry(
                &mut br,
                "bridge→runtime",
                &delta(serde_json::json!([
                    {"kind":"item.textDelta","key":{"channel":"assistant"},"channel":"agentMessage","text":rng.text(200)}
                ])),
                &mut seq,
            );
        }
        written += entry(
            &mut br,
            "bridge→runtime",
            &delta(serde_json::json!([
                {"kind":"item.textClose","key":{"channel":"assistant"},"channel":"agentMessage"},
                {"kind":"usage","total":{"inputTokens":turn,"cachedInputTokens":0,"outputTokens":turn,"reasoningOutputTokens":0,"totalTokens":2*turn},"last":{"inputTokens":1,"cachedInputTokens":0,"outputTokens":1,"reasoningOutputTokens":0,"totalTokens":2},"modelContextWindow":8192},
                {"kind":"turn.boundary","status":"completed"}
            ])),
            &mut seq,
        );
        written += entry(
            &mut br,
            "bridge→runtime",
            &serde_json::json!({"jsonrpc":"2.0","id":turn,"result":{}}),
            &mut seq,
        );
    }
}

/// Replicates the cells of `recordings/bb` into `<dir>/<provider>/<cell>-<n>` (hard links).
fn replicate_corpus(dir: &Path, cells: u64) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bb");
    let mut sources = Vec::new();
    for provider in std::fs::read_dir(&src).unwrap().flatten() {
        if !provider.path().is_dir() {
            continue;
        }
        for cell in std::fs::read_dir(provider.path()).unwrap().flatten() {
            if cell.path().is_dir() {
                sources.push(cell.path());
            }
        }
    }
    sources.sort();
    for i in 0..cells {
        let s = &sources[(i % sources.len() as u64) as usize];
        let provider = s.parent().unwrap().file_name().unwrap();
        let name = format!("{}-{i:06}", s.file_name().unwrap().to_string_lossy());
        let dst = dir.join(provider).join(name);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(s).unwrap().flatten() {
            if f.path().extension().is_some_and(|x| x == "ndjson") {
                std::fs::hard_link(f.path(), dst.join(f.file_name())).unwrap();
            }
        }
    }
}

fn lane_files(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "ndjson"))
        .map(|e| e.path().display().to_string())
        .collect()
}

/// Corpus-shaped folders: many small cells.
fn corpus_shaped(tmp: &Path) {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (small, big) = (arg("--corpus", 10_000), arg("--corpus-big", 200_000));
    println!();
    println!(
        "| corpus-shaped folder | cells | MiB | bridgewire s | MiB/s | peak RSS MiB | jq -c . s | vs jq |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (n, with_jq) in [(small, true), (big, false)] {
        if n == 0 {
            continue;
        }
        let dir = tmp.join(format!("corpus-{n}"));
        replicate_corpus(&dir, n);
        let bytes = dir_bytes(&dir);
        let (bw, rss) = time_rss(
            Command::new(BW)
                .args(["pins", "--update"])
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let jq = with_jq.then(|| {
            let lanes = lane_files(&dir);
            // One jq per 2000 files (argument lists stay short), one after the other.
            let mut total = std::time::Duration::ZERO;
            for chunk in lanes.chunks(2000) {
                let (d, _) = time_rss(
                    Command::new("jq")
                        .arg("-c")
                        .arg(".")
                        .args(chunk)
                        .stdout(Stdio::null()),
                );
                total += d;
            }
            total
        });
        println!(
            "| corpus-{n} | {n} | {:.0} | {:.2} | {:.0} | {:.1} | {} | {} |",
            bytes as f64 / 1048576.0,
            bw.as_secs_f64(),
            mb_per_s(bytes, bw),
            rss as f64 / 1024.0,
            jq.map_or("—".into(), |d| format!("{:.2}", d.as_secs_f64())),
            jq.map_or("—".into(), |d| format!(
                "**{:.1}×**",
                d.as_secs_f64() / bw.as_secs_f64()
            )),
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

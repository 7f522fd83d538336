//! Offline pins throughput and memory, and the parallel speed-up. Every figure is measured on
//! whole processes (`wait4(2)`: wall, CPU = user + sys, peak RSS), bridgewire and its baseline
//! side by side in the same run; the load average is printed, since a shared machine inflates
//! wall times (compare CPU there).
//!
//! 1. A synthetic recordings folder (bb cells of ~8 MiB each) at a quarter, half and all of
//!    `--gib` (default 1; 0 skips): `bridgewire pins --update` beside `jq -c . <every lane>
//!    >/dev/null` over the same files.
//! 2. Corpus-shaped folders: the 14 small cells of `recordings/bb` (one re-recorded lane each)
//!    replicated (hard links) to `--corpus` cells (default 10 000): `--rounds` (default 3)
//!    rounds of `pins --update` (2 workers, and `-j 1`), `pins` (check) and `jq -c .`,
//!    interleaved, medians (the wall ratio is 2 workers against one jq, the CPU ratio is the
//!    fair one on a loaded machine); and to `--corpus-big` cells (default 200 000; 0 skips) for
//!    the peak RSS of a check with no pins file, `--update` and a check (it must stay flat).
//! 3. 1000 small cells: `-j 1` versus `-j 2`.
//!
//! `--before <binary>` adds another build's `pins` runs to the small corpus's rounds,
//! interleaved (the same three runs, its own rows in the table).
//!
//! `cargo bench --bench pins [-- --gib 1 --corpus 10000 --corpus-big 200000 --rounds 3
//! --before /tmp/bw-old]`

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
    println!("load average at the start: {}", load_average());
    let big_ratio = (gib > 0.0).then(|| big_cells(t.path(), gib));
    let corpus = corpus_shaped(t.path());

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
    println!();
    if let Some(r) = big_ratio {
        goal(
            "pins --update vs jq -c ., 8 MiB cells (the whole folder, wall)",
            &format!("{r:.1}×"),
            "≥ 5×",
            r >= 5.0,
        );
    }
    if let Some(r) = corpus.slowest_ratio {
        goal(
            "pins vs jq -c ., corpus-shaped cells (the slower of --update and check, 2 workers, wall)",
            &format!("{r:.1}×"),
            "≥ 5×",
            r >= 5.0,
        );
    }
    if let Some((cells, rss)) = corpus.big_rss {
        goal(
            &format!("pins peak RSS at {cells} cells"),
            &format!("{:.1} MB", rss as f64 * 1024.0 / 1e6),
            "< 64 MB",
            (rss as f64 * 1024.0) < 64e6,
        );
    }
    if let (Some((small, a)), Some((big, b))) = (corpus.small_rss, corpus.big_rss) {
        // Memory that grew with the cell count would show as ~20× here; 1.25× allows for
        // allocator noise and the longer file names of the bigger folder.
        let growth = b as f64 / a.max(1) as f64;
        goal(
            &format!("pins peak RSS flat from {small} to {big} cells"),
            &format!(
                "{:.1} → {:.1} MiB, {growth:.2}×",
                a as f64 / 1024.0,
                b as f64 / 1024.0
            ),
            "≤ 1.25×",
            growth <= 1.25,
        );
    }
}

/// What the corpus-shaped runs measured, for the goal lines.
#[derive(Default)]
struct CorpusFigures {
    /// The smaller wall ratio to `jq` of the 2-worker `--update` and check runs.
    slowest_ratio: Option<f64>,
    /// (cells, peak RSS in KiB of the worst run) for the small and the big folder.
    small_rss: Option<(u64, u64)>,
    big_rss: Option<(u64, u64)>,
}

/// Synthetic 8 MiB cells at a quarter, half and all of `gib`. Returns the wall ratio to `jq`
/// on the whole folder.
fn big_cells(tmp: &Path, gib: f64) -> f64 {
    let cell_bytes = 8u64 << 20;
    let total_cells = ((gib * 1024.0 * 1024.0 * 1024.0) as u64 / cell_bytes).max(4);
    let all = tmp.join("all");
    for i in 0..total_cells {
        write_cell(
            &all.join("synthetic").join(format!("cell-{i:04}")),
            cell_bytes,
            i,
        );
    }
    println!();
    println!(
        "| folder | cells | MiB | bridgewire MiB/s | CPU s | peak RSS MiB | jq MiB/s | jq CPU s | vs jq, wall | vs jq, CPU |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut ratio = 0.0;
    for frac in [4u64, 2, 1] {
        let n = total_cells / frac;
        let dir = tmp.join(format!("set-{n}"));
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
        let (bw_wall, bw_cpu, rss_kib) = bw_pins(&dir, &["--update"]);
        let (jq_wall, jq_cpu) = jq_over(&dir);
        println!(
            "| {} | {n} | {:.0} | {:.0} | {bw_cpu:.2} | {:.1} | {:.0} | {jq_cpu:.2} | **{:.1}×** | {:.1}× |",
            dir.file_name().unwrap().to_string_lossy(),
            bytes as f64 / 1048576.0,
            bytes as f64 / 1048576.0 / bw_wall,
            rss_kib as f64 / 1024.0,
            bytes as f64 / 1048576.0 / jq_wall,
            jq_wall / bw_wall,
            jq_cpu / bw_cpu
        );
        ratio = jq_wall / bw_wall;
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&all);
    ratio
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

/// One process's wall time (s), CPU time (user + sys, s) and peak RSS (KiB).
fn wall_cpu_rss(cmd: &mut Command) -> (f64, f64, u64) {
    let u = measure(cmd);
    (u.wall.as_secs_f64(), u.cpu_s, u.rss_kib)
}

/// `jq -c .` over every lane of `dir`: one jq per 2000 files, one after the other; summed.
fn jq_over(dir: &Path) -> (f64, f64) {
    let lanes = lane_files(dir);
    let (mut wall, mut cpu) = (0.0, 0.0);
    for chunk in lanes.chunks(2000) {
        let (w, c, _) = wall_cpu_rss(
            Command::new("jq")
                .arg("-c")
                .arg(".")
                .args(chunk)
                .stdout(Stdio::null()),
        );
        wall += w;
        cpu += c;
    }
    (wall, cpu)
}

fn bw_pins(dir: &Path, args: &[&str]) -> (f64, f64, u64) {
    bin_pins(BW, dir, args)
}

/// `pins` of the binary `bin` (this build's, or a `--before` one) over `dir`.
fn bin_pins(bin: &str, dir: &Path, args: &[&str]) -> (f64, f64, u64) {
    wall_cpu_rss(
        Command::new(bin)
            .arg("pins")
            .args(args)
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Corpus-shaped folders: many small cells. At `--corpus` cells, rounds of `pins --update`
/// (2 workers and `-j 1`), `pins` (check) and `jq -c .` interleaved, medians; at
/// `--corpus-big` cells, one `--update` and one check for the peak RSS.
fn corpus_shaped(tmp: &Path) -> CorpusFigures {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (small, big, rounds) = (
        arg("--corpus", 10_000),
        arg("--corpus-big", 200_000),
        arg("--rounds", 3).max(1) as usize,
    );
    // Another build's binary, run interleaved with this one on the small corpus.
    let before: Option<String> = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
        .cloned();
    println!();
    println!("load average before the corpus runs: {}", load_average());
    let mut figures = CorpusFigures::default();
    let mut small_rss = None;
    if small > 0 {
        let dir = tmp.join(format!("corpus-{small}"));
        replicate_corpus(&dir, small);
        let bytes = dir_bytes(&dir);
        let runs: [(&str, &[&str]); 3] = [
            ("pins --update (2 workers)", &["--update"]),
            ("pins --update -j 1", &["--update", "-j", "1"]),
            ("pins (check, 2 workers)", &[]),
        ];
        let mut bw: Vec<Vec<(f64, f64, u64)>> = vec![Vec::new(); runs.len()];
        let mut old: Vec<Vec<(f64, f64, u64)>> = vec![Vec::new(); runs.len()];
        let mut jq: Vec<(f64, f64)> = Vec::new();
        for _ in 0..rounds {
            for (i, (_, a)) in runs.iter().enumerate() {
                bw[i].push(bw_pins(&dir, a));
                if let Some(b) = &before {
                    old[i].push(bin_pins(b, &dir, a));
                }
            }
            jq.push(jq_over(&dir));
        }
        let jq_wall = median(jq.iter().map(|r| r.0).collect());
        let jq_cpu = median(jq.iter().map(|r| r.1).collect());
        println!();
        println!(
            "corpus-{small}: {small} cells, {:.0} MiB, {rounds} rounds interleaved, medians",
            bytes as f64 / 1048576.0
        );
        println!();
        println!("| run | wall s | CPU s (user + sys) | peak RSS MiB | vs jq, wall | vs jq, CPU |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        println!("| jq -c . over every lane | {jq_wall:.2} | {jq_cpu:.2} | — | 1.0× | 1.0× |");
        for (i, (name, _)) in runs.iter().enumerate() {
            let wall = median(bw[i].iter().map(|r| r.0).collect());
            let cpu = median(bw[i].iter().map(|r| r.1).collect());
            let rss = bw[i].iter().map(|r| r.2).max().unwrap_or(0);
            small_rss = small_rss.max(Some(rss));
            if !name.contains("-j 1") {
                let r = jq_wall / wall;
                figures.slowest_ratio = Some(figures.slowest_ratio.map_or(r, |s: f64| s.min(r)));
            }
            println!(
                "| bridgewire {name} | {wall:.2} | {cpu:.2} | {:.1} | **{:.1}×** | {:.1}× |",
                rss as f64 / 1024.0,
                jq_wall / wall,
                jq_cpu / cpu
            );
        }
        if let Some(b) = &before {
            for (i, (name, _)) in runs.iter().enumerate() {
                let wall = median(old[i].iter().map(|r| r.0).collect());
                let cpu = median(old[i].iter().map(|r| r.1).collect());
                let rss = old[i].iter().map(|r| r.2).max().unwrap_or(0);
                println!(
                    "| before ({b}) {name} | {wall:.2} | {cpu:.2} | {:.1} | **{:.1}×** | {:.1}× |",
                    rss as f64 / 1024.0,
                    jq_wall / wall,
                    jq_cpu / cpu
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    if big > 0 {
        let dir = tmp.join(format!("corpus-{big}"));
        replicate_corpus(&dir, big);
        let bytes = dir_bytes(&dir);
        // A check with no pins file first (every cell is a pending change), then an update
        // and a check against the pins it wrote.
        let fresh_check = bw_pins(&dir, &[]);
        let update = bw_pins(&dir, &["--update"]);
        let check = bw_pins(&dir, &[]);
        println!();
        println!(
            "corpus-{big}: {big} cells, {:.0} MiB (load average {})",
            bytes as f64 / 1048576.0,
            load_average()
        );
        println!();
        println!("| run | wall s | CPU s (user + sys) | peak RSS MiB |");
        println!("| --- | ---: | ---: | ---: |");
        for (name, (wall, cpu, rss)) in [
            ("pins (check, no pins file, 2 workers)", fresh_check),
            ("pins --update (2 workers)", update),
            ("pins (check, 2 workers)", check),
        ] {
            println!(
                "| bridgewire {name} | {wall:.2} | {cpu:.2} | {:.1} |",
                rss as f64 / 1024.0
            );
        }
        let big_rss = [fresh_check.2, update.2, check.2]
            .into_iter()
            .max()
            .unwrap_or(0);
        figures.big_rss = Some((big, big_rss));
        if let Some(small_rss) = small_rss {
            println!();
            println!(
                "peak RSS, {small} → {big} cells (worst run of each): {:.1} → {:.1} MiB",
                small_rss as f64 / 1024.0,
                big_rss as f64 / 1024.0
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    figures.small_rss = small_rss.map(|r| (small, r));
    println!();
    println!("load average after the corpus runs: {}", load_average());
    figures
}

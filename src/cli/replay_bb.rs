//! `replay bb`, `rerecord bb` and `provider-double`.

use super::exit;
use crate::bb::player::{self, ReplayError, ReplayOptions};
use crate::bb::recorded;
use crate::cell::Cell;
use crate::rule::Status;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `println!` that ignores a closed stdout (`| head`).
/// A line of `replay bb` / `rerecord bb` output, passed through the process's redaction (it
/// may quote what the bridge said).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($t)*);
        let _ = writeln!(std::io::stdout(), "{}", crate::redact::printable(&text));
    }};
}

#[derive(clap::Subcommand, Debug)]
pub enum ReplayCommand {
    /// Replay bb cells against a freshly spawned bridge per cell (bb §6), with a provider
    /// double playing the recorded provider lanes; prints the recorded rules per cell
    /// (`matches-recording`: the replay's content compared with the recording as parity does).
    Bb(ReplayBbArgs),
    /// Replay Side Bridge cells (without --url or a command: the bundled sidebridge-ref).
    Sidebridge(super::ReplaySidebridgeArgs),
    /// Play recorded Bridle cells (browser and agent) against a hub and compare what it sends
    /// (normalized hub→browser events, the messages it forwards to the agent, HTTP answers, and
    /// rows) with the recording.
    ///
    /// The cells of one agentId are played together, in the order recorded across them: the
    /// agent connects where its `__agent` cell recorded it and leaves after its last line when
    /// it connects again; browsers connect at their recorded connect.
    Bridle(super::bridle_cmd::ReplayBridleArgs),
}

#[derive(clap::Subcommand, Debug)]
pub enum RerecordCommand {
    /// Re-record `bridge→runtime.current.ndjson` of bb cells with the given bridge (bb §2.6,
    /// §8.4); a cell whose replay stalls is left untouched.
    Bb(RerecordBbArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct RerecordBbArgs {
    #[command(flatten)]
    pub replay: ReplayBbArgs,
    /// Permission bits of the `.current` lanes written, in octal.
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = crate::cli::parse_mode)]
    pub mode: u32,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ReplayBbArgs {
    /// Bound of every wait, and of the exit wait, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = player::DEFAULT_TIMEOUT_MS, value_parser = super::args::parse_ms)]
    pub timeout_ms: u64,
    /// Bridge silence required before stdin is closed, in ms (the most an idle bridge is
    /// waited for without --fixed-windows).
    #[arg(long, value_name = "DURATION", default_value_t = player::DEFAULT_SETTLE_MS, value_parser = super::args::parse_ms)]
    pub settle_ms: u64,
    /// Bridge silence required before each runtime request, in ms (the most an idle bridge is
    /// waited for without --fixed-windows).
    #[arg(long, value_name = "DURATION", default_value_t = player::DEFAULT_DRAIN_MS, value_parser = super::args::parse_ms)]
    pub drain_ms: u64,
    /// Approximate plan only: bridge silence that also releases the events gate, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = player::DEFAULT_ORDER_TIMEOUT_MS, value_parser = super::args::parse_ms)]
    pub order_timeout_ms: u64,
    /// Pace from the merged view (with `.current` lanes) and wait for every planned event.
    /// Ignored by `rerecord`, which always plans from the recorded lane.
    #[arg(long)]
    pub exact_plan: bool,
    /// bb's kit timing: wait the full drain and settle windows and pace the provider double,
    /// instead of ending each wait when the bridge is idle (strict kit parity).
    #[arg(long)]
    pub fixed_windows: bool,
    /// Cells replayed at once.
    #[arg(short = 'j', long, default_value_t = 1)]
    pub jobs: usize,
    /// Environment variable the bridge reads its provider command from; set to the provider
    /// double's wrapper script (repeatable).
    #[arg(long = "provider-env", value_name = "NAME", default_values_t = [player::DEFAULT_PROVIDER_ENV.to_string()])]
    pub provider_env: Vec<String>,
    /// The provider double's dialect (bb §6.11): json-rpc, claude-cli or pi-rpc.
    #[arg(long, default_value = "json-rpc", value_parser = ["json-rpc", "claude-cli", "pi-rpc"])]
    pub dialect: String,
    /// Print each replay's stderr and stalls in full.
    #[arg(long)]
    pub verbose: bool,
    /// Output format (`replay` only): text, or one JSON document with every cell's result.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
    /// Print wall time, lines and CPU time (getrusage: this process, and its reaped children
    /// = bridges and provider doubles) to stderr.
    #[arg(long)]
    pub stats: bool,
    /// Cell directories or recordings folders.
    #[arg(required = true, value_name = "CELLS")]
    pub cells: Vec<PathBuf>,
    /// The bridge command.
    #[arg(last = true, required = true, value_name = "BRIDGE COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
#[command(disable_help_flag = false)]
pub struct ProviderDoubleArgs {
    /// `--recording <cell dir> --dialect json-rpc --state <dir>` (other arguments ignored;
    /// `--version` prints 0.0.0-replay).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

impl ReplayBbArgs {
    pub fn options(&self) -> ReplayOptions {
        ReplayOptions {
            timeout: Duration::from_millis(self.timeout_ms),
            settle: Duration::from_millis(self.settle_ms),
            drain: Duration::from_millis(self.drain_ms),
            order_timeout: Duration::from_millis(self.order_timeout_ms),
            exact_plan: self.exact_plan,
            provider_env: self.provider_env.clone(),
            dialect: self.dialect.clone(),
            fixed_windows: self.fixed_windows,
            stop_at_bad_handshake: true,
            ..ReplayOptions::default()
        }
    }
}

/// Resolves each argument to cells: a cell directory itself (keyed `<provider>/<cell>` by its
/// parent), or every cell of a recordings folder.
pub fn resolve_cells(paths: &[PathBuf]) -> Result<Vec<Cell>, String> {
    let mut out = Vec::new();
    for p in paths {
        let root = p.parent().and_then(Path::parent).unwrap_or(p);
        if let Some(c) = Cell::at(root, p) {
            out.push(c);
            continue;
        }
        out.extend(crate::cell::discover(p).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Runs `f` over `items` on `jobs` threads; results in input order.
fn parallel<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= items.len() {
                        break;
                    }
                    let r = f(&items[i]);
                    *results[i].lock().expect("slot") = Some(r);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| m.into_inner().expect("slot").expect("every item ran"))
        .collect()
}

/// A bridge that cannot start (not on PATH, missing, not executable) is invalid input, said
/// once before any cell (exit 2, as for `check bb`, the other protocols' replays and
/// `parity`), not a FAIL per cell with exit 1.
fn bridge_cannot_start(command: &[OsString]) -> Option<u8> {
    let argv = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let why = crate::parity::cannot_start(&crate::protocol::BridgeCommand::new(argv))?;
    eprintln!("error: the bridge cannot start: {why}");
    Some(exit::INVALID_INPUT)
}

pub fn run_replay(a: &ReplayBbArgs) -> u8 {
    let cells = match resolve_cells(&a.cells) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("no cells selected");
            return exit::NOTHING_SELECTED;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    if let Some(code) = bridge_cannot_start(&a.command) {
        return code;
    }
    let opts = a.options();
    let wall = std::time::Instant::now();
    let progress = interrupt_summary("replay bb", cells.len());
    let results = parallel(&cells, a.jobs, |cell| {
        if crate::signals::interrupted().is_some() {
            return (
                Err(ReplayError::Skip("interrupted".into())),
                Default::default(),
            );
        }
        let r = (
            player::replay_cell(cell, &a.command, &opts),
            recorded::offline_counts(cell, opts.accept_main_run),
        );
        progress.record(r.0.is_ok());
        r
    });
    // A signal killed the bridges under way: their cells' ends are the signal's, not theirs
    // (no FAIL "bridge exited"); the handler's summary and exit code stand.
    crate::signals::exit_if_interrupted();
    if a.stats {
        let lines: usize = results
            .iter()
            .filter_map(|(r, _)| r.as_ref().ok())
            .map(|r| r.lines.len() + r.written)
            .sum();
        let (me, kids) = (cpu_ms(libc::RUSAGE_SELF), cpu_ms(libc::RUSAGE_CHILDREN));
        eprintln!(
            "stats: cells {}, jobs {}, lines {lines} (read + written), wall {} ms, harness cpu {me:.1} ms, children cpu {kids:.1} ms, harness cpu per line {:.1} µs",
            cells.len(),
            a.jobs,
            wall.elapsed().as_millis(),
            if lines == 0 {
                0.0
            } else {
                me * 1000.0 / lines as f64
            }
        );
    }
    let (mut passed, mut failed, mut skipped, mut errors) = (0, 0, 0, 0);
    let json = a.format == super::Format::Json;
    let mut docs = Vec::new();
    let mut handshake = Handshake::default();
    for (cell, (res, offline)) in cells.iter().zip(results) {
        if let Ok(r) = &res {
            handshake.add(&cell.key, r);
        }
        match res {
            Err(ReplayError::Skip(why)) => {
                skipped += 1;
                if json {
                    docs.push(
                        serde_json::json!({"cell": cell.key, "status": "skip", "detail": why}),
                    );
                } else {
                    say!("SKIP {}: {why}", cell.key);
                }
            }
            Err(ReplayError::Unreadable(why)) => {
                errors += 1;
                if json {
                    docs.push(
                        serde_json::json!({"cell": cell.key, "status": "error", "detail": why}),
                    );
                } else {
                    say!("ERROR {}: {why}", cell.key);
                }
            }
            Err(ReplayError::Failed(why)) => {
                failed += 1;
                if json {
                    docs.push(
                        serde_json::json!({"cell": cell.key, "status": "fail", "detail": why}),
                    );
                } else {
                    say!("FAIL {}: {why}", cell.key);
                }
            }
            Ok(r) if r.stopped_at_handshake => {
                // One fault, one verdict: the handshake is judged once for the run (below);
                // bb's runtime refuses the bridge at spawn, so the cell's traffic after it
                // would be nothing bb sees.
                skipped += 1;
                let why = "not replayed past the handshake: handshake/initialize failed (below); bb's runtime refuses such a bridge at spawn, so no turn of this cell would run";
                for w in &r.lane_warnings {
                    eprintln!("warning: {}: {w}", cell.key);
                }
                if json {
                    docs.push(
                        serde_json::json!({"cell": cell.key, "status": "skip", "detail": why}),
                    );
                } else {
                    say!("SKIP {}: {why}", cell.key);
                }
            }
            Ok(r) => {
                let name = cell.provider_and_name().1;
                let matches = recorded::compare_with_recording(cell, &r, &offline);
                let verdicts = recorded::recorded_verdicts(name, &r, &offline, Some(&matches));
                // The event count is information: matches-recording judges the content, so
                // text in other chunks passes and lost or wrong text fails there, named.
                let same_count = r.events.len() == offline.events;
                let rechunked = recorded::only_chunking_differs(&matches);
                let live = LiveWire::judge(cell, &r, &opts);
                let ok = verdicts.iter().all(|v| v.status == Status::Pass) && live.passes();
                // Cut lines the verdicts did not name as the cause are said, failing nothing.
                let named = r
                    .cut_lines
                    .first()
                    .is_some_and(|c| verdicts.iter().any(|v| v.detail.contains(c.as_str())));
                let cut_noted: &[String] = if named { &[] } else { &r.cut_lines };
                if ok {
                    passed += 1;
                } else {
                    failed += 1;
                }
                if json {
                    let mut doc = serde_json::json!({
                        "cell": cell.key,
                        "status": if ok { "pass" } else { "fail" },
                        "lines": r.lines.len(),
                        "written": r.written,
                        "events": r.events.len(),
                        "recordingEvents": offline.events,
                        "onlyChunkingDiffers": rechunked,
                        "grammarViolations": r.grammar_violations.iter().map(|v| v.layer_key()).collect::<Vec<_>>(),
                        "stalls": r.stalls,
                        "mainRuns": r.main_runs,
                        "exitCode": r.exit_code,
                        "exitSignal": r.exit_signal,
                        "verdicts": verdicts.iter().map(|v| serde_json::json!({
                            "id": v.id, "status": v.status.label(), "detail": v.detail,
                        })).collect::<Vec<_>>(),
                        "doubles": r.doubles.iter().map(|d| serde_json::json!({
                            "segment": d.segment, "generic": d.generic,
                            "stepsPlayed": d.steps_played, "steps": d.steps,
                            "promptLost": d.prompt_lost,
                        })).collect::<Vec<_>>(),
                        "cutLines": r.cut_lines,
                    });
                    live.add_json(&mut doc);
                    docs.push(doc);
                    continue;
                }
                say!(
                    "{} {}: {} lines, {} events (recording {}), grammar violations {}, {} stall(s), exit {}",
                    if ok { "PASS" } else { "FAIL" },
                    cell.key,
                    r.lines.len(),
                    r.events.len(),
                    offline.events,
                    r.grammar_violations.len(),
                    r.stalls.len(),
                    exit_text(&r)
                );
                for v in &verdicts {
                    if v.status != Status::Pass || a.verbose {
                        say!("  {}", v.line());
                    }
                }
                live.print(a.verbose);
                for c in cut_noted {
                    say!("  note: {c}; no rule failed for it");
                }
                if r.main_runs > 0 {
                    say!(
                        "  {} turn.mainRun delta(s): the protocol's held-turn signal, accepted and not assembled",
                        r.main_runs
                    );
                }
                if !same_count {
                    say!(
                        "  event count: replay {}, recording {}{}",
                        r.events.len(),
                        offline.events,
                        if rechunked {
                            " (only the text's chunking differs: the same content, see matches-recording)"
                        } else {
                            ""
                        }
                    );
                }
                if a.verbose {
                    for s in &r.stalls {
                        say!("  stall: {s}");
                    }
                    for l in r.stderr.lines() {
                        say!("  stderr: {l}");
                    }
                }
            }
        }
    }
    // The handshake's verdicts, once for the run; a failed one is a failure of the run.
    let handshake_failed = handshake.failed();
    if !json {
        handshake.print(a.verbose);
    }
    failed += handshake_failed;
    if json {
        let doc = serde_json::json!({
            "passed": passed, "failed": failed, "skipped": skipped, "cells": docs,
            "handshake": handshake.to_json(),
        });
        say!("{}", crate::jsjson::to_string_pretty(&doc).trim_end());
    } else {
        say!("");
        let errors_text = if errors > 0 {
            format!(", {errors} unreadable")
        } else {
            String::new()
        };
        let handshake_text = if handshake_failed > 0 {
            format!("; {handshake_failed} of the failures: handshake/initialize, above")
        } else {
            String::new()
        };
        say!(
            "{passed} passed, {failed} failed, {skipped} skipped{errors_text} ({} cells{handshake_text})",
            cells.len()
        );
    }
    exit::of_replay("bb", errors, failed, passed)
}

/// `handshake/initialize` judged on each cell's live `initialize` answer as `check bb` judges
/// it ([`crate::bb::conformance::judge_initialize_answer`]), said once per distinct outcome
/// with the cells it held for: every cell spawns the same bridge, so one fault is one verdict.
/// A cell whose bridge never answered is left to its `recorded/<cell>/replays` (a stall).
#[derive(Default)]
struct Handshake {
    /// (status, detail) → cell keys, in first-seen order.
    outcomes: Vec<((Status, String), Vec<String>)>,
}

impl Handshake {
    const ID: &'static str = "handshake/initialize";

    fn add(&mut self, cell: &str, r: &player::ReplayResult) {
        let key = match &r.handshake {
            Some(Ok(())) => (Status::Pass, String::new()),
            Some(Err(d)) => (Status::Fail, d.clone()),
            None => (
                Status::Skipped,
                "no answer to initialize came (the cell's recorded/<cell>/replays names why)"
                    .to_string(),
            ),
        };
        match self.outcomes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, cells)) => cells.push(cell.to_string()),
            None => self.outcomes.push((key, vec![cell.to_string()])),
        }
    }

    fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|((s, _), _)| *s == Status::Fail)
            .count()
    }

    fn print(&self, verbose: bool) {
        for ((status, detail), cells) in &self.outcomes {
            if *status != Status::Fail && !verbose {
                continue;
            }
            let v = match status {
                Status::Pass => crate::rule::Verdict::pass(Self::ID),
                Status::Fail => crate::rule::Verdict::fail(Self::ID, detail.clone()),
                _ => crate::rule::Verdict::skipped(Self::ID, detail.clone()),
            };
            say!("{} (cells: {})", v.line(), cells.join(", "));
        }
    }

    fn to_json(&self) -> serde_json::Value {
        self.outcomes
            .iter()
            .map(|((status, detail), cells)| {
                serde_json::json!({"id": Self::ID, "status": status.label(), "detail": detail, "cells": cells})
            })
            .collect()
    }
}

/// What `replay bb` says of a cell's live traffic beyond the recorded rules: the wire rules
/// judged on it ([`recorded::live_wire_verdicts`]; a failed one fails the cell) and the
/// recorded runtime lines that were cut short, so not replayed (each also a warning on
/// stderr, as `pins` and `lanes` give it).
struct LiveWire {
    verdicts: Vec<crate::rule::Verdict>,
    not_replayed: Vec<String>,
}

impl LiveWire {
    fn judge(cell: &Cell, r: &player::ReplayResult, opts: &ReplayOptions) -> LiveWire {
        for w in &r.lane_warnings {
            eprintln!("warning: {}: {w}", cell.key);
        }
        LiveWire {
            verdicts: recorded::live_wire_verdicts(
                cell,
                cell.provider_and_name().1,
                r,
                opts.accept_main_run,
            ),
            not_replayed: r.not_replayed.clone(),
        }
    }

    fn passes(&self) -> bool {
        self.verdicts.iter().all(|v| v.status != Status::Fail)
    }

    /// The cell's lines: failed and skipped wire verdicts (all with `--verbose`), and the cut
    /// requests.
    fn print(&self, verbose: bool) {
        for v in &self.verdicts {
            if matches!(v.status, Status::Fail | Status::Skipped) || verbose {
                say!("  live wire: {}", v.line());
            }
        }
        for at in &self.not_replayed {
            say!(
                "  not replayed: {at}: the recorded request is cut short (a recorder killed mid-write), so it was ignored"
            );
        }
    }

    fn add_json(&self, doc: &mut serde_json::Value) {
        doc["wireVerdicts"] = self
            .verdicts
            .iter()
            .map(
                |v| serde_json::json!({"id": v.id, "status": v.status.label(), "detail": v.detail}),
            )
            .collect();
        doc["notReplayed"] = self.not_replayed.iter().cloned().collect();
    }
}

/// Cells finished so far, printed as a partial summary if a signal ends the run.
struct Progress {
    done: std::sync::atomic::AtomicUsize,
    replayed: std::sync::atomic::AtomicUsize,
}

impl Progress {
    fn record(&self, replayed: bool) {
        use std::sync::atomic::Ordering::SeqCst;
        self.done.fetch_add(1, SeqCst);
        if replayed {
            self.replayed.fetch_add(1, SeqCst);
        }
    }
}

/// Installs the signal handling of a long command ([`crate::signals`]) with a partial summary:
/// on SIGINT/SIGTERM the bridges' trees and temporary folders go, the summary is printed to
/// stderr, and the command exits 130/143.
fn interrupt_summary(command: &'static str, total: usize) -> std::sync::Arc<Progress> {
    crate::signals::install();
    let progress = std::sync::Arc::new(Progress {
        done: Default::default(),
        replayed: Default::default(),
    });
    let p = progress.clone();
    // Kept for the life of the process: the command ends with it.
    std::mem::forget(crate::signals::on_signal(move |sig| {
        use std::sync::atomic::Ordering::SeqCst;
        eprintln!(
            "bridgewire {command}: interrupted by signal {sig}: {} of {total} cells finished ({} replayed); bridges killed, temporary folders removed",
            p.done.load(SeqCst),
            p.replayed.load(SeqCst),
        );
    }));
    progress
}

/// User + system CPU time in ms (getrusage).
fn cpu_ms(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn exit_text(r: &player::ReplayResult) -> String {
    match (r.exit_code, r.exit_signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("signal {s}"),
        _ => "?".into(),
    }
}

pub fn run_rerecord(args: &RerecordBbArgs) -> u8 {
    let a = &args.replay;
    let cells = match resolve_cells(&a.cells) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("no cells selected");
            return exit::NOTHING_SELECTED;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    if let Some(code) = bridge_cannot_start(&a.command) {
        return code;
    }
    let mut opts = a.options();
    opts.write_mode = args.mode;
    let progress = interrupt_summary("rerecord bb", cells.len());
    let results = parallel(&cells, a.jobs, |cell| {
        let r = player::rerecord_cell(cell, &a.command, &opts);
        progress.record(r.is_ok());
        r
    });
    crate::signals::exit_if_interrupted();
    let (mut bad, mut unreadable) = (false, false);
    for (cell, res) in cells.iter().zip(results) {
        if let Ok(r) = &res {
            // The recorded lanes' warnings (a cut last line, not replayed), as `replay` says them.
            for w in &r.result.lane_warnings {
                eprintln!("warning: {}: {w}", cell.key);
            }
        }
        match res {
            Err(ReplayError::Skip(why)) => say!("SKIP {}: {why}", cell.key),
            Err(ReplayError::Unreadable(why)) => {
                unreadable = true;
                say!("ERROR {}: {why}", cell.key);
            }
            Err(ReplayError::Failed(why)) => {
                bad = true;
                say!("FAIL {}: {why}", cell.key);
            }
            Ok(r) if matches!(r.result.handshake, Some(Err(_))) => {
                bad = true;
                let d = match &r.result.handshake {
                    Some(Err(d)) => d.as_str(),
                    _ => "",
                };
                say!(
                    "FAIL {}: handshake/initialize: {d} (current lane left untouched)",
                    cell.key
                );
            }
            Ok(r) => match r.written {
                Some((_, n)) => say!(
                    "OK {}: {n} bridge→runtime lines ({} events)",
                    cell.key,
                    r.result.events.len()
                ),
                None => {
                    bad = true;
                    say!(
                        "STALL {}: {} (current lane left untouched)",
                        cell.key,
                        r.result.stalls.join("; ")
                    );
                }
            },
        }
    }
    if unreadable {
        exit::INVALID_INPUT
    } else if bad {
        exit::FAILED
    } else {
        exit::OK
    }
}

pub fn run_double(a: &ProviderDoubleArgs) -> u8 {
    crate::bb::double::run(&a.args)
}

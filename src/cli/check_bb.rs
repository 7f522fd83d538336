//! `bridgewire check bb` (the live conformance kit) and `bridgewire rules` (the catalogue).
//!
//! Exit codes (see [`super::exit`]): 0 every verdict passed; 1 a verdict failed or was skipped;
//! 2 invalid input or usage (unreadable fixture, a bridge command that cannot start);
//! 4 nothing selected (no verdicts, or no catalogue entry matched).

use super::exit;
use crate::bb::conformance;
use crate::config::Config;
use crate::report::live::{Lines, Live};
use crate::report::{self, RunMeta};
use crate::rule::{RuleInfo, Verdict};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Subcommand, Debug)]
pub enum CheckCommand {
    /// Run the bb conformance kit against a live bridge process.
    Bb(CheckBbArgs),
    /// Play the Side Search client against a Side Bridge server and judge the rule table
    /// (without --url or a command: the bundled sidebridge-ref).
    Sidebridge(Box<super::CheckSidebridgeArgs>),
    /// Bridle hubs and agent runtimes.
    #[command(subcommand)]
    Bridle(super::bridle_cmd::BridleCheck),
}

/// Default HTML report path for a bare `--html`.
pub const DEFAULT_HTML: &str = "reports/bridgewire-check-bb.html";

#[derive(clap::Args, Debug)]
pub struct CheckBbArgs {
    /// Configuration file with a `[bb.fixture]` section (default: the nearest bridgewire.toml
    /// in the working directory or its parents up to the repository root).
    #[arg(long = "config", visible_alias = "fixture", value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub policy: super::PolicyArgs,
    /// Per-wait timeout (`5s`, `750ms`; a bare number is milliseconds): every wait of the kit
    /// is bounded by it.
    #[arg(long, visible_alias = "timeout", value_name = "DURATION", default_value_t = 5000, value_parser = super::args::parse_ms)]
    pub timeout_ms: u64,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
    /// Also write a JUnit XML report.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write a Markdown summary (for CI step summaries).
    #[arg(long, value_name = "PATH")]
    pub markdown: Option<PathBuf>,
    /// Also write a self-contained HTML report (default path: reports/bridgewire-check-bb.html).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = DEFAULT_HTML)]
    pub html: Option<PathBuf>,
    /// Permission bits of the report files, in octal (default 600; folders created for them
    /// get the matching search bits).
    #[arg(long = "mode", value_name = "OCTAL", value_parser = crate::cli::parse_mode)]
    pub mode: Option<u32>,
    /// Also replay the thread cells of these recordings folders against the bridge and add
    /// the recorded-traffic rules `recorded/<cell>/{replays, events-schema-valid, grammar,
    /// turn-lifecycle, not-empty}` (exact plan, as bb's kit) and `matches-recording` (the
    /// replay's content compared with the recording, as parity compares them). The wire rules
    /// (`recorded/<cell>/<rule>`) judge the bridge's live traffic in the replay, as `replay bb`
    /// does, not the recording: a recording is another run's traffic.
    #[arg(long, value_name = "DIR")]
    pub recordings: Vec<PathBuf>,
    #[command(flatten)]
    pub partition: super::args::PartitionArgs,
    /// Environment variable(s) the bridge reads its provider command from; each is pointed at
    /// the provider double during recorded replays (default: BB_REF_PROVIDER_COMMAND).
    #[arg(long, value_name = "NAME")]
    pub provider_env: Vec<String>,
    /// bb's own verdicts only: leave out the rules beyond bb's kit (marked `beyondKit` in
    /// rules/bb.json), and judge `events/schema-valid` on assembled events only, as the kit.
    #[arg(long)]
    pub kit_only: bool,
    /// Bound of every wait of a recorded replay (`15s`; a bare number is milliseconds).
    #[arg(long, value_name = "DURATION", default_value_t = 15000, value_parser = super::args::parse_ms)]
    pub replay_timeout_ms: u64,
    /// Recorded replays wait bb's fixed drain and settle windows (the kit's timing) instead of
    /// ending each wait when the bridge is idle.
    #[arg(long)]
    pub fixed_windows: bool,
    /// The bridge command.
    #[arg(last = true, required = true, value_name = "BRIDGE COMMAND")]
    pub command: Vec<OsString>,
}

/// A `not run` verdict for every live catalogue rule the kit reached no verdict on, naming
/// what to set: the fixture key of an opt-in rule, else why it did not apply.
fn not_run_verdicts(verdicts: &[Verdict], config: &Config, kit_only: bool) -> Vec<Verdict> {
    let file = config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| crate::config::FILE_NAME.to_string());
    let not_passed = |id: &str| {
        verdicts
            .iter()
            .any(|v| v.id == id && v.status != crate::rule::Status::Pass)
    };
    let fx = &config.bb_fixture;
    let key_set = |key: &str| match key {
        "icons" => fx.icons.is_some(),
        "zeroWorkPromptInput" => fx.zero_work_prompt_input.is_some(),
        "interruptiblePromptInput" => fx.interruptible_prompt_input.is_some(),
        _ => false,
    };
    crate::rule::catalogue_cached()
        .iter()
        .filter(|r| r.protocol == "bb" && r.mode == "live")
        .filter(|r| !(kit_only && r.beyond_kit))
        .filter(|r| !verdicts.iter().any(|v| v.id == r.id))
        .map(|r| {
            let why = match (&r.fixture, r.id.as_str()) {
                (Some(key), _) if !key_set(key) => {
                    format!("no fixture: set `{key}` under [bb.fixture] in {file}")
                }
                (_, "session/fork-identity") if !not_passed("handshake/initialize") => {
                    "the bridge does not declare fork support (initialize capabilities.fork \
                     is \"none\")"
                        .to_string()
                }
                _ if not_passed("handshake/initialize") => {
                    "not reached: handshake/initialize did not pass".to_string()
                }
                _ if not_passed("session/start-identity") => {
                    "not reached: session/start-identity did not pass".to_string()
                }
                _ => "not applicable to this bridge (the kit reached no verdict)".to_string(),
            };
            Verdict::not_run(&r.id, why)
        })
        .collect()
}

/// Verdicts a recorded cell normally yields (replays, events-schema-valid, grammar,
/// turn-lifecycle, not-empty, matches-recording, and the wire rules): the progress bar's step
/// per cell.
const RECORDED_PER_CELL: usize = 6 + crate::bb::wire::RULES.len();

/// Replays every thread cell of `roots` and returns the recorded-traffic verdicts.
fn recorded_rules(a: &CheckBbArgs, live: &Live) -> Result<Vec<Verdict>, String> {
    use crate::bb::player::{self, ReplayError, ReplayOptions};
    use rayon::prelude::*;
    let mut cells = Vec::new();
    for root in &a.recordings {
        let found = crate::cell::discover(root).map_err(|e| e.to_string())?;
        cells.extend(found.into_iter().filter(|c| {
            c.protocol == crate::protocol::Protocol::Bb
                && !c.key.ends_with("_process")
                && a.partition.includes(&c.key)
        }));
    }
    let mut opts = ReplayOptions {
        exact_plan: true,
        timeout: Duration::from_millis(a.replay_timeout_ms),
        fixed_windows: a.fixed_windows,
        accept_main_run: !a.kit_only,
        ..Default::default()
    };
    if !a.provider_env.is_empty() {
        opts.provider_env = a.provider_env.clone();
    }
    live.expect_more((cells.len() * RECORDED_PER_CELL) as u64);
    let verdicts: Vec<Vec<Verdict>> = cells
        .par_iter()
        .map(|cell| {
            let (_, name) = cell.provider_and_name();
            let t0 = Instant::now();
            let vs = match player::replay_cell(cell, &a.command, &opts) {
                Ok(result) => {
                    let offline = crate::bb::recorded::offline_counts(cell, !a.kit_only);
                    let matches =
                        crate::bb::recorded::compare_with_recording(cell, &result, &offline);
                    let mut vs = crate::bb::recorded::recorded_verdicts(
                        name,
                        &result,
                        &offline,
                        Some(&matches),
                    );
                    // The wire rules judge this bridge: its replay's own traffic, as `replay
                    // bb` judges them (the recording's traffic is another run's, maybe another
                    // bridge's: judged on it, a fault of the recording failed a correct bridge
                    // and a fault of this bridge passed).
                    if !a.kit_only {
                        vs.extend(crate::bb::recorded::live_wire_verdicts(
                            cell, name, &result, true,
                        ));
                    }
                    vs
                }
                Err(ReplayError::Skip(reason)) => {
                    vec![Verdict::skipped(
                        &format!("recorded/{name}/replays"),
                        reason,
                    )]
                }
                Err(ReplayError::Failed(reason) | ReplayError::Unreadable(reason)) => {
                    vec![Verdict::fail(&format!("recorded/{name}/replays"), reason)]
                }
            };
            // The cell's replay time goes on its first verdict; the others are offline.
            let vs: Vec<Verdict> = vs
                .into_iter()
                .enumerate()
                .map(|(i, v)| v.with_duration(if i == 0 { t0.elapsed() } else { Duration::ZERO }))
                .collect();
            for v in &vs {
                live.verdict(v);
            }
            live.advance(
                RECORDED_PER_CELL.saturating_sub(vs.len()) as u64,
                &format!("recorded cell {name}"),
            );
            vs
        })
        .collect();
    Ok(verdicts.into_iter().flatten().collect())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RulesFormat {
    Text,
    Json,
    Markdown,
}

#[derive(clap::Args, Debug)]
pub struct RulesArgs {
    /// Only rules of this protocol (bb, …).
    #[arg(long, value_name = "P")]
    pub protocol: Option<String>,
    /// Only rules of this mode (live, recorded, offline).
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = RulesFormat::Text)]
    pub format: RulesFormat,
}

pub fn run_check_bb(a: &CheckBbArgs) -> u8 {
    // A signal prints the partial summary and writes the partial reports (the live
    // reporter's hook), kills every running bridge's process tree and exits 128 + sig.
    crate::signals::install();
    let (config, source) = match Config::find(a.config.as_deref()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bridgewire check bb: {e}");
            return exit::INVALID_INPUT;
        }
    };
    eprintln!("{}", source.describe());
    for w in &config.warnings {
        eprintln!("warning: {w}");
    }
    // The fixture's secrets (apiKey, env, headers) never reach a report: learned up front, then
    // every verdict and report passes through the same redaction (issue 15).
    {
        let g = crate::redact::global();
        let f = &config.bb_fixture;
        for v in [Some(&f.options), Some(&f.prompt_input)]
            .into_iter()
            .chain([
                f.zero_work_prompt_input.as_ref(),
                f.interruptible_prompt_input.as_ref(),
            ])
            .flatten()
        {
            g.learn_json(v);
        }
    }
    if a.timeout_ms == 0 {
        eprintln!("bridgewire check bb: --timeout-ms must be positive");
        return exit::INVALID_INPUT;
    }
    let opts = conformance::Options {
        command: a.command.clone(),
        fixture: config.bb_fixture.clone(),
        timeout: Duration::from_millis(a.timeout_ms),
        limits: Default::default(),
        kit_only: a.kit_only,
    };
    let target = a
        .command
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let files = report::ReportFiles {
        junit: a.junit.clone(),
        markdown: a.markdown.clone(),
        html: a.html.clone(),
        mode: a.mode,
    };
    let meta = RunMeta {
        protocol: "bb".into(),
        target: target.clone(),
        started_at: report::rfc3339_utc(crate::util::now_ms()),
        timeout_ms: a.timeout_ms,
        fixture: config.path.as_ref().map(|p| p.display().to_string()),
        ..Default::default()
    };
    let lines = match a.format {
        super::Format::Text => Lines::Stdout,
        super::Format::Json => Lines::Stderr,
    };
    let live = Live::start(
        meta,
        a.policy.policy(),
        files.clone(),
        lines,
        conformance::LIVE_RULES.len() as u64,
    );
    let t0 = Instant::now();
    let mut on_verdict = |v: &Verdict| live.verdict(&report::redact_verdict(v));
    let result = conformance::run(&opts, &mut on_verdict);
    let (live_verdicts, info) = match result {
        Ok(r) => r,
        Err(e) => {
            live.finish();
            eprintln!("bridgewire check bb: cannot start the bridge `{target}`: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let not_run = not_run_verdicts(&live_verdicts, &config, a.kit_only);
    for v in &not_run {
        live.verdict(v);
    }
    let mut recorded = Vec::new();
    if !a.recordings.is_empty() {
        match recorded_rules(a, &live) {
            Ok(v) => recorded = v,
            Err(e) => {
                live.finish();
                eprintln!("bridgewire check bb: {e}");
                return exit::INVALID_INPUT;
            }
        }
    }
    let Some(mut report) = live.finish() else {
        // A signal ended the run: its handler prints, writes the reports and exits.
        crate::signals::exit_if_interrupted();
        return exit::FAILED;
    };
    // The report keeps the kit's order (recorded cells in discovery order), not arrival
    // order; each verdict keeps the time the live reporter measured for it.
    let timed = std::mem::take(&mut report.verdicts);
    let time_of = |id: &str| {
        timed
            .iter()
            .find(|t| t.id == id)
            .and_then(|t| t.duration_ms)
    };
    report.verdicts = live_verdicts
        .into_iter()
        .chain(not_run)
        .chain(recorded)
        .map(|mut v| {
            if v.duration_ms.is_none() {
                v.duration_ms = time_of(&v.id);
            }
            v
        })
        .collect();
    report.meta.duration_ms = t0.elapsed().as_millis() as u64;
    report.meta.target_exit = info.bridge_exit.clone();
    report.meta.notes = info.notes.clone();
    report.meta.stderr_tail = info.stderr_tail.clone();
    report.meta.target_pid = Some(info.pid);
    match a.format {
        // The verdict lines were printed as they were reached.
        super::Format::Text => print!(
            "{}",
            report::terminal::tail(&report::redact_report(&report))
        ),
        super::Format::Json => print!("{}", report::json::render(&report::redact_report(&report))),
    }
    let mut code = if report.verdicts.is_empty() {
        exit::NOTHING_SELECTED
    } else if report.summary().ok() {
        exit::OK
    } else {
        exit::FAILED
    };
    if let Err(e) = files.write(&report) {
        eprintln!("bridgewire check bb: {e}");
        code = exit::INVALID_INPUT;
    }
    code
}

pub fn run_rules(a: &RulesArgs) -> u8 {
    let rules: Vec<RuleInfo> = crate::rule::catalogue()
        .into_iter()
        .filter(|r| a.protocol.as_ref().is_none_or(|p| &r.protocol == p))
        .filter(|r| a.mode.as_ref().is_none_or(|m| &r.mode == m))
        .collect();
    let text = match a.format {
        RulesFormat::Json => {
            let mut s = serde_json::to_string_pretty(&rules).expect("serializable");
            s.push('\n');
            s
        }
        RulesFormat::Markdown => {
            let mut s = String::from(
                "| Rule | Protocol | Level | Mode | Fixture | Section | Description |\n| --- | --- | --- | --- | --- | --- | --- |\n",
            );
            for r in &rules {
                s.push_str(&format!(
                    "| `{}` | {} | {} | {} | {} | {} | {} |\n",
                    r.id,
                    r.protocol,
                    r.level,
                    r.mode,
                    r.fixture.as_deref().unwrap_or(""),
                    report::markdown::cell(&r.section),
                    report::markdown::cell(&r.description)
                ));
            }
            s
        }
        RulesFormat::Text => {
            let w = rules.iter().map(|r| r.id.len()).max().unwrap_or(0);
            let mut s = String::new();
            for r in &rules {
                let fx = r
                    .fixture
                    .as_ref()
                    .map(|f| format!(" [fixture: {f}]"))
                    .unwrap_or_default();
                s.push_str(&format!(
                    "{:<w$}  {:<6} {:<8} {:<6} {}{fx}\n",
                    r.id, r.level, r.mode, r.protocol, r.description
                ));
            }
            s
        }
    };
    print!("{text}");
    if rules.is_empty() {
        eprintln!("no rules selected");
        exit::NOTHING_SELECTED
    } else {
        exit::OK
    }
}

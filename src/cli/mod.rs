//! Command-line dispatch: clap types → library calls → exit code.

pub mod args;
pub(crate) mod bridle_cmd;
mod cells_cmd;
mod check_bb;
pub mod exit;
mod init_cmd;
pub mod lanes_cmd;
mod parity_cmd;
mod pins_cmd;
mod pins_review;
pub mod replay_bb;
pub mod sidebridge_cmd;

pub use check_bb::{CheckBbArgs, CheckCommand, RulesArgs};
pub use sidebridge_cmd::{
    CheckSidebridgeArgs, RecordSidebridgeArgs, ReplaySidebridgeArgs, SidebridgeTarget,
};

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "bridgewire",
    version,
    about = "Record, replay, check and compare chat-bridge programs (bb, Bridle, Side Bridge)",
    long_about = None,
    after_help = "Exit codes: 0 all passed; 1 a verdict failed (or, for `check`, was skipped); 2 invalid input or usage; 4 nothing selected.\n`record` exits with the recorded process's own status."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compute per-cell counts (events, rows, unhandled, grammarDrops) and check them against
    /// `<recordings>/row-counts.json`, or rewrite it with --update.
    Pins(PinsArgs),
    /// Record a live wire into lanes.
    #[command(subcommand)]
    Record(RecordCommand),
    /// View a cell: one decoded line per message ((run, seq) order) with time offsets and
    /// direction; filters, --json, --raw, --follow.
    Lanes(lanes_cmd::LanesArgs),
    /// Compare two builds ("legs") cell by cell on normalized events, rows and grammar drops.
    Parity(ParityArgs),
    /// Record a cell per scenario from your own bridge (any protocol), with manifests,
    /// redacted before it is written.
    RecordCells(cells_cmd::RecordCellsArgs),
    /// Redact recordings for checking in (structural and textual passes, then a survivor
    /// sweep that refuses to leave a known secret behind).
    Redact(cells_cmd::RedactArgs),
    /// Package raw recordings into cells with manifests (bb §2.4), redacted on the way out.
    Package(cells_cmd::PackageArgs),
    /// Write a commented bridgewire.toml for a new project (bb, sidebridge, bridle).
    Init(init_cmd::InitArgs),
    /// Check a live program against a protocol's conformance rules.
    #[command(subcommand)]
    Check(CheckCommand),
    /// List the rule catalogue.
    Rules(RulesArgs),
    /// Replay recorded cells against a live program.
    #[command(subcommand)]
    Replay(replay_bb::ReplayCommand),
    /// Re-record a cell's output lane with the current program.
    #[command(subcommand)]
    Rerecord(replay_bb::RerecordCommand),
    /// The fake provider child a bridge spawns during replay (bb §6.11); run by the
    /// `<state>/replay-provider` wrapper that `replay bb` writes.
    ProviderDouble(replay_bb::ProviderDoubleArgs),
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "A leg is `cmd:<bridge command>`, `dir:<checkout>`, `ref:<git rev>`, \
`rec:<recordings dir>` or `dump:<dump dir>`; without a prefix it is guessed from what exists.\n\
A live leg's environment: Bridle hubs are started with JWT_SECRET, BRIDLE_API_KEY and \
BRIDLE_SYNC_TIMEOUT_MS (default 120000) as set; Side Bridge cells recorded with a key need SIDEBRIDGE_KEY.\n\
Exit codes: 0 nothing failed; 1 a cell failed; 2 usage error, invalid allowlist or no matching recordings."
)]
pub struct ParityArgs {
    /// The reference leg (e.g. main).
    #[arg(long)]
    pub base: String,
    /// The leg under test (e.g. a branch).
    #[arg(long)]
    pub head: String,
    /// Only cells of this provider.
    #[arg(long)]
    pub provider: Option<String>,
    /// Only cells whose key (`<provider>/<cell>`) contains this text (as in every command).
    #[arg(long, value_name = "TEXT")]
    pub cell: Option<String>,
    #[command(flatten)]
    pub partition: args::PartitionArgs,
    /// Intended differences (bb's parity-allowlist.json shape); stale entries fail the run.
    #[arg(long, value_name = "FILE")]
    pub allowlist: Option<PathBuf>,
    /// Write both legs' normalized lists per cell (`<provider>-<cell>.{base,head}.{events,rows}.json`).
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Bound of every wait in a live replay (`15s`, `750ms`; a bare number is milliseconds).
    #[arg(long, visible_alias = "timeout", value_name = "DURATION", default_value = "15000", value_parser = args::parse_ms)]
    pub timeout_ms: u64,
    /// bridgewire's own bound on a whole reply of a Side Bridge live leg, in seconds (the app has
    /// none: it waits as long as data keeps arriving); never under --timeout-ms.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", value_parser = args::parse_secs)]
    pub max_reply_time: f64,
    /// Largest reply body a Side Bridge live leg reads, in bytes. A reply over it is not read
    /// whole: its cell is an ERROR naming the limit, never compared (the app reads any size).
    #[arg(long, default_value_t = 10 * 1024 * 1024, value_name = "BYTES")]
    pub max_body: usize,
    /// How to find a Side Bridge live leg's URL in its start-up output, for a banner the
    /// default reading passes over (first capture group, else the whole match), as `check
    /// sidebridge --url-pattern`.
    #[arg(long, value_name = "REGEX", value_parser = args::parse_regex)]
    pub url_pattern: Option<regex::Regex>,
    /// Run even when both legs would execute the same files with the same arguments in the
    /// same directory, run one program once started (however each command spells it), reach
    /// one server, or read the same recordings folder or the same single-list dump (a
    /// determinism check of one bridge; refused otherwise).
    #[arg(long)]
    pub allow_same_bridge: bool,
    /// Report every difference as found. By default a cell whose events or rows differ is
    /// run once more on one live leg (the base when it is live): values that differ between
    /// that leg's own two runs (a bridge whose replies vary, as a model's do) are set aside in
    /// both legs, named, and the rest is compared. A determinism check (both legs one bridge)
    /// makes no second run.
    #[arg(long)]
    pub no_second_run: bool,
    #[command(flatten)]
    pub reports: crate::report::ReportFiles,
    /// Output format (json: one document with every cell's outcome and differences).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Recordings folders (default: ./recordings).
    pub recordings: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct PinsArgs {
    /// Recordings folders (each holds its own row-counts.json).
    #[arg(required = true)]
    pub recordings: Vec<PathBuf>,
    /// Rewrite row-counts.json from the actual counts (on purpose: after an intended change).
    #[arg(long)]
    pub update: bool,
    /// Write each cell's normalized events and rows as `<provider>-<cell>.{events,rows}.json`.
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Only cells whose key (`<provider>/<cell>`) contains this text.
    #[arg(long, value_name = "TEXT")]
    pub cell: Option<String>,
    #[command(flatten)]
    pub partition: args::PartitionArgs,
    /// Worker threads (default: one per core).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Review the changes a failing check kept in `row-counts.pending.json`: `old → new` per
    /// cell, accept, reject or skip each (answers on stdin, or --accept / --reject).
    #[arg(long, conflicts_with = "update")]
    pub review: bool,
    /// With --review: accept every pending change (of --cell's cells).
    #[arg(long, requires = "review", conflicts_with = "reject")]
    pub accept: bool,
    /// With --review: reject every pending change (of --cell's cells).
    #[arg(long, requires = "review")]
    pub reject: bool,
    #[command(flatten)]
    pub reports: crate::report::ReportFiles,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How verdicts decide the exit status; shared by every `check` command.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct PolicyArgs {
    /// SHOULD-level failures fail the run (without it they are warnings).
    #[arg(long)]
    pub strict: bool,
    /// Rules that could not run (no fixture, a feature the bridge does not declare) fail the
    /// run (without it they are listed as `not run`).
    #[arg(long)]
    pub require_all: bool,
}

impl PolicyArgs {
    pub fn policy(&self) -> crate::rule::Policy {
        crate::rule::Policy {
            strict: self.strict,
            require_all: self.require_all,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum RecordCommand {
    /// Stand in for a bb bridge: spawn it, tee runtime↔bridge lines into lanes scoped per
    /// thread, pass exit status, stderr and signals through.
    Bb(RecordBbArgs),
    /// Stand in for a provider child (spawned by a bridge under `record bb`): tee the
    /// bridge↔provider lines into the same recording, sharing its seq counter.
    Child(RecordChildArgs),
    /// A recording reverse proxy for a Side Bridge server: tees client→bridge and
    /// bridge→client lanes per chatId under `<dir>/<bridge>/`. Prints its URL first.
    Sidebridge(RecordSidebridgeArgs),
    /// A Socket.IO-aware recording proxy between browsers/agents and a Bridle hub.
    Bridle(bridle_cmd::RecordBridleArgs),
}

#[derive(clap::Args, Debug)]
pub struct RecordBbArgs {
    /// Recording root; lanes go to `<dir>/[<provider>/]<scope>/<direction>.ndjson`.
    #[arg(
        long,
        env = "BRIDGEWIRE_RECORD_DIR",
        default_value = "bridgewire-recordings"
    )]
    pub dir: PathBuf,
    /// Provider id, appended to the root as bb's daemon does.
    #[arg(long)]
    pub provider: Option<String>,
    /// Record lines exactly as they cross, without credential redaction (bb §1.9 rules:
    /// secret keys, env/header containers, cross-referenced values).
    #[arg(long)]
    pub no_redact: bool,
    /// Permission bits of the lane files, in octal (folders get the matching search bits).
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = parse_mode)]
    pub mode: u32,
    /// The bridge command.
    #[arg(last = true, required = true, value_name = "BRIDGE COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
pub struct RecordChildArgs {
    /// Thread scope of the child's lines (default: $BRIDGEWIRE_RECORD_THREAD, else _process).
    #[arg(long)]
    pub thread: Option<String>,
    /// The provider command.
    #[arg(last = true, required = true, value_name = "PROVIDER COMMAND")]
    pub command: Vec<OsString>,
}

/// The exit codes a command's help lists, by the kind of command (`path` is the command's
/// words after `bridgewire`, e.g. `["check", "bb"]`).
pub fn exit_codes_help(path: &[&str]) -> &'static str {
    match path.first().copied() {
        Some("check") if path.get(1) == Some(&"bb") => {
            "Exit codes: 0 every rule passed; 1 a rule failed or was skipped (also: a rule that \
did not run, with --require-all; a SHOULD failure, with --strict); 2 invalid input or usage \
(bad config, the bridge cannot start, a report file cannot be written); 4 nothing selected; \
130/143 interrupted by SIGINT/SIGTERM (the partial summary is printed and the partial reports \
are written, marked as interrupted)."
        }
        Some("check") => {
            "Exit codes: 0 every rule passed; 1 a rule failed or was skipped (also: a rule that \
did not run, with --require-all; a SHOULD failure, with --strict); 2 invalid input or usage \
(bad config, the target cannot start, a Bridle hub nothing answers for at its address, a report \
file cannot be written: every rule is listed not run, naming why); 4 nothing selected; \
130/143 interrupted by SIGINT/SIGTERM."
        }
        Some("record") if matches!(path.get(1).copied(), Some("bb" | "child")) => {
            "Exit codes: the recorded process's own exit status (128 + N when a signal N ended \
it); 2 bridgewire could not start it or write the recording."
        }
        Some("record") => {
            "Exit codes: 0 stopped cleanly; 2 invalid input or usage (cannot listen, no \
upstream, the bridge cannot start); 130/143 stopped by SIGINT/SIGTERM."
        }
        Some("init") => {
            "Exit codes: 0 written; 2 the file exists (pass --force) or cannot be written."
        }
        Some("provider-double") => {
            "Exit codes: 0 the recorded exchange was played; 1 the bridge sent something the \
recording does not have; 2 invalid input or usage."
        }
        _ => {
            "Exit codes: 0 all passed; 1 something failed (a pin differs, a parity diff, a \
replay mismatch, an invalid recorded message); 2 invalid input or usage; 4 nothing selected \
(no cell or rule matched); 130/143 interrupted by SIGINT/SIGTERM."
        }
    }
}

/// The CLI definition with every command's help ending in its exit codes (a command that
/// writes its own `Exit codes:` line keeps it). Parsing, help and the README's generated
/// reference all go through this.
pub fn command() -> clap::Command {
    fn walk(cmd: clap::Command, path: &mut Vec<String>) -> clap::Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let mut cmd = cmd;
        if !path.is_empty() {
            let own = cmd.get_after_help().map(|h| h.to_string());
            if !own.as_deref().is_some_and(|h| h.contains("Exit codes")) {
                let words: Vec<&str> = path.iter().map(String::as_str).collect();
                let codes = exit_codes_help(&words);
                let text = match own {
                    Some(h) => format!("{h}\n{codes}"),
                    None => codes.to_string(),
                };
                cmd = cmd.after_help(text.clone()).after_long_help(text);
            }
        }
        for name in names {
            path.push(name.clone());
            let p = path.clone();
            cmd = cmd.mut_subcommand(&name, move |c| walk(c, &mut p.clone()));
            path.pop();
        }
        cmd
    }
    use clap::CommandFactory;
    walk(Cli::command(), &mut Vec::new())
}

/// Runs the CLI; returns the process exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    use clap::FromArgMatches;
    let args: Vec<OsString> = args.into_iter().collect();
    // Secrets given on the command line or in the environment are known to every report and
    // every printed line of this process (issue 15), wherever a peer echoes them.
    crate::redact::learn_command_line(crate::redact::global(), &args);
    crate::redact::learn_environment(crate::redact::global());
    let parsed = command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::INVALID_INPUT
            } else {
                exit::OK
            });
        }
    };
    let code = match cli.command {
        Command::Pins(a) => pins_cmd::run(&a),
        Command::Record(RecordCommand::Bb(a)) => {
            // The root's missing folders (above `<dir>/<provider>`) get `--mode`'s bits too.
            let _ = crate::lane::write::create_dirs(&a.dir, crate::lane::write::dir_mode(a.mode));
            let opts = crate::bb::recorder::RecordBridge {
                dir: a.dir,
                provider: a.provider,
                command: a.command,
                redact: !a.no_redact,
                mode: Some(a.mode),
            };
            match crate::bb::recorder::record_bridge(&opts) {
                Ok(status) => crate::proc::exit_like(status),
                Err(e) => {
                    eprintln!("bridgewire record bb: {e:#}");
                    exit::INVALID_INPUT
                }
            }
        }
        Command::Record(RecordCommand::Child(a)) => {
            let opts = crate::bb::recorder::RecordChild {
                thread: a.thread,
                command: a.command,
            };
            match crate::bb::recorder::record_child(&opts) {
                Ok(status) => crate::proc::exit_like(status),
                Err(e) => {
                    eprintln!("bridgewire record child: {e:#}");
                    exit::INVALID_INPUT
                }
            }
        }
        Command::Lanes(a) => lanes_cmd::run(&a),
        Command::Replay(replay_bb::ReplayCommand::Bb(a)) => replay_bb::run_replay(&a),
        Command::Rerecord(replay_bb::RerecordCommand::Bb(a)) => replay_bb::run_rerecord(&a),
        Command::ProviderDouble(a) => replay_bb::run_double(&a),
        Command::Parity(a) => parity_cmd::run(&a),
        Command::RecordCells(a) => cells_cmd::record_cells(&a),
        Command::Redact(a) => cells_cmd::redact(&a),
        Command::Package(a) => cells_cmd::package(&a),
        Command::Check(CheckCommand::Bb(a)) => check_bb::run_check_bb(&a),
        Command::Rules(a) => check_bb::run_rules(&a),
        Command::Init(a) => init_cmd::run(&a),
        Command::Record(RecordCommand::Sidebridge(a)) => sidebridge_cmd::record_cmd(&a),
        Command::Check(CheckCommand::Sidebridge(a)) => sidebridge_cmd::check_cmd(&a),
        Command::Replay(replay_bb::ReplayCommand::Sidebridge(a)) => sidebridge_cmd::replay_cmd(&a),
        Command::Record(RecordCommand::Bridle(a)) => bridle_cmd::record_cmd(&a),
        Command::Replay(replay_bb::ReplayCommand::Bridle(a)) => bridle_cmd::replay_cmd(&a),
        Command::Check(CheckCommand::Bridle(bridle_cmd::BridleCheck::Hub(a))) => {
            bridle_cmd::check_hub_cmd(&a)
        }
        Command::Check(CheckCommand::Bridle(bridle_cmd::BridleCheck::Agent(a))) => {
            bridle_cmd::check_agent_cmd(&a)
        }
    };
    // A process a program under test started and left running past its own exit (a provider
    // child in a session of its own) would outlive bridgewire: killed here, and named.
    let left = crate::proc::sweep_left_behind();
    if !left.is_empty() {
        eprintln!(
            "bridgewire: {} process(es) outlived the program that started them and were killed at exit: {} (a child started in a session of its own, which its program did not stop before it exited)",
            left.len(),
            left.join(", ")
        );
    }
    // A signal's handler decides the exit code (130/143) once it arrived.
    crate::signals::exit_if_interrupted();
    ExitCode::from(code)
}

/// An octal permission mode (`600`, `0644`).
pub fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal mode like 600 or 644"))
}

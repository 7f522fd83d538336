//! `check sidebridge`, `record sidebridge`, `replay sidebridge`.
//!
//! Exit codes of `check sidebridge` come from the report's summary under its policy: 0 no MUST
//! rule failed and nothing was skipped (SHOULD failures are warnings unless `--strict`, INFO
//! never fails, rules not run fail only under `--require-all`); 1 otherwise; 2 invalid input
//! (bad URL, fixture or flag; the bridge did not start).

use super::exit;
use crate::config::Config;
use crate::report::{self, Report, RunMeta};
use crate::sidebridge::fixture::Fixture;
use crate::sidebridge::profiles::Profile;
use crate::sidebridge::rules::{CheckConfig, CheckReport};
use crate::sidebridge::spawn::BridgeSpec;
use crate::sidebridge::transport::Limits;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Where a Side Bridge under test is, and how long to wait for it.
#[derive(clap::Args, Debug, Clone)]
pub struct SidebridgeTarget {
    /// The bridge's endpoint URL (http://).
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// The key configured on the bridge (sent as x-sidebridge-key). Without it the bridge is
    /// taken to have no key.
    #[arg(long, env = "SIDEBRIDGE_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Seconds to wait for a spawned bridge to print its address.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub startup_timeout: f64,
    /// How to find a spawned bridge's URL in its start-up output (stdout or stderr): a regex
    /// whose first capture group (else whole match) is the URL or host:port. Default: the
    /// first http(s):// URL or host:port in any line.
    #[arg(long, value_name = "REGEX", value_parser = super::args::parse_regex)]
    pub url_pattern: Option<regex::Regex>,
    /// The app's timeout: seconds without receiving data before an exchange is given up
    /// (every byte of the reply restarts it; a reply may take longer in all, see
    /// --max-reply-time).
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub timeout: f64,
    /// bridgewire's own bound on a whole reply, in seconds (the app has none: it waits as long
    /// as data keeps arriving); never under --timeout.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub max_reply_time: f64,
    /// Seconds to wait for a TCP connection.
    #[arg(long, default_value_t = 5.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub connect_timeout: f64,
    /// Largest reply body read, in bytes.
    #[arg(long, default_value_t = 10 * 1024 * 1024, value_name = "BYTES")]
    pub max_body: usize,
    /// A bridge command that prints its URL (or host:port) during start-up.
    #[arg(last = true, value_name = "BRIDGE COMMAND")]
    pub command: Vec<OsString>,
}

impl SidebridgeTarget {
    pub fn spec(&self) -> BridgeSpec {
        BridgeSpec {
            url: self.url.clone(),
            command: self.command.clone(),
            key: self.key.clone().filter(|k| !k.is_empty()),
            startup: secs(self.startup_timeout),
            url_pattern: self.url_pattern.clone(),
        }
    }
    pub fn limits(&self) -> Limits {
        Limits {
            connect: secs(self.connect_timeout),
            idle: secs(self.timeout),
            total: secs(self.max_reply_time).max(secs(self.timeout)),
            max_body: self.max_body,
            idle_flag: "--timeout",
            total_flag: "--max-reply-time",
        }
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() && s > 0.0 { s } else { 0.001 })
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Scenario rules (SB-R3, SB-R6, SB-R11, SB-R12, SB-S1…S4) need the bridge's own phrases: \
`[sidebridge.fixture]` in bridgewire.toml or the flags below; without them those rules are not run.\n\
Exit codes: 0 no MUST rule failed and none was skipped (SHOULD failures warn unless --strict; INFO never \
fails; not-run rules fail only with --require-all); 1 otherwise; 2 invalid input (bad URL, fixture or \
flag; the bridge did not start; a report file cannot be written); 130/143 interrupted by SIGINT/SIGTERM."
)]
pub struct CheckSidebridgeArgs {
    #[command(flatten)]
    pub target: SidebridgeTarget,
    #[command(flatten)]
    pub reports: crate::report::ReportFiles,
    /// Configuration file with a `[sidebridge.fixture]` section (default: the nearest
    /// bridgewire.toml in the working directory or its parents up to the repository root).
    #[arg(long = "config", visible_alias = "fixture", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Prompt that makes the bridge remember a word (`{word}` marks it); overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub remember: Option<String>,
    /// Prompt whose reply must name the remembered word; overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub recall: Option<String>,
    /// Prompt whose reply must repeat the bridge's previous reply (SB-R3); overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub repeat: Option<String>,
    /// Prompt that makes the bridge set disableSendHistory true; overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub disable_history: Option<String>,
    /// Prompt that makes the bridge set disableSendHistory false; overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub enable_history: Option<String>,
    /// Prompt that makes the bridge end the session; overrides the fixture.
    #[arg(long, value_name = "PROMPT")]
    pub end_session: Option<String>,
    #[command(flatten)]
    pub policy: super::PolicyArgs,
    /// SB-H2 warns above this many seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub warn_after: f64,
    /// Seed for chat ids, message ids and key order (the words to remember are fresh per run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// After this many timeouts in a row, the bridge is taken as stopped and nothing more is
    /// sent (SB-D1 fails once naming the stop; every other rule shows those requests skipped
    /// naming it). After a timeout, session starts of fresh chats are sent until one is
    /// answered (the timeout was that request's alone) or this many have timed out in all.
    /// 0: never give up.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub give_up_after: usize,
    /// Print, per reply, what every client profile would do with it.
    #[arg(short, long)]
    pub verbose: bool,
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
}

#[derive(clap::Args, Debug)]
pub struct ReplaySidebridgeArgs {
    /// Recordings folders or cells.
    #[arg(required = true)]
    pub recordings: Vec<PathBuf>,
    /// Only cells whose key (`<bridge>/<chat>`) contains this text.
    #[arg(long, value_name = "TEXT")]
    pub cell: Option<String>,
    /// Write the replayed replies as `bridge→client.current.ndjson` in each cell.
    #[arg(long)]
    pub write_current: bool,
    /// Permission bits of the `.current` lanes --write-current writes, in octal.
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = crate::cli::parse_mode)]
    pub mode: u32,
    /// Report every difference from the recording as found. By default a cell whose replay
    /// differs is replayed once more: values that differ between the build's own two replays
    /// (a bridge whose replies vary, as a model's do) are set aside in the recording and the
    /// replay, named, and the rest is compared.
    #[arg(long)]
    pub no_second_run: bool,
    #[command(flatten)]
    pub target: SidebridgeTarget,
}

#[derive(clap::Args, Debug)]
pub struct RecordSidebridgeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// The bridge's endpoint URL; requests to `/` go to it, other paths are appended.
    #[arg(long, required_unless_present = "command")]
    pub upstream: Option<String>,
    /// Recording root.
    #[arg(
        long,
        env = "BRIDGEWIRE_RECORD_DIR",
        default_value = "bridgewire-recordings"
    )]
    pub dir: PathBuf,
    /// Bridge name: the folder under the root that holds one cell per chatId.
    #[arg(long, default_value = "bridge")]
    pub bridge: String,
    /// Record x-sidebridge-key and Authorization values instead of `[redacted]`.
    #[arg(long)]
    pub keep_key: bool,
    /// The bridge's key: a value that differs from it is recorded by how it differs
    /// (`[redacted:case]`, `[redacted:prefix]`, `[redacted:extended]`, `[redacted:other]`),
    /// so a replay sends a wrong key of the same kind where the recording had one.
    #[arg(long, env = "SIDEBRIDGE_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// The app's timeout: seconds the upstream may send nothing while its reply is awaited or
    /// read (every byte restarts it; see --max-reply-time for the whole reply).
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub timeout: f64,
    /// bridgewire's own bound on a whole upstream reply, in seconds (the app has none);
    /// never under --timeout.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub max_reply_time: f64,
    /// Largest request or reply body forwarded, in bytes.
    #[arg(long, default_value_t = 64 * 1024 * 1024, value_name = "BYTES")]
    pub max_body: usize,
    /// How to find a started bridge's URL in its start-up output (see `check sidebridge`).
    #[arg(long, value_name = "REGEX", value_parser = super::args::parse_regex)]
    pub url_pattern: Option<regex::Regex>,
    /// Permission bits of the lane files, in octal (folders get the matching search bits).
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = crate::cli::parse_mode)]
    pub mode: u32,
    /// Instead of --upstream: a bridge command that prints its URL during start-up (started,
    /// and killed when recording stops).
    #[arg(
        last = true,
        value_name = "BRIDGE COMMAND",
        conflicts_with = "upstream"
    )]
    pub command: Vec<OsString>,
}

pub fn record_cmd(a: &RecordSidebridgeArgs) -> u8 {
    // A signal stops the proxy gracefully (in-flight exchanges get a moment to be recorded),
    // kills the bridge's tree, prints where the recording is and exits 130/143.
    crate::signals::install();
    let (drained, _drain) = crate::signals::drain_on_signal(Duration::from_millis(1200));
    let spec = BridgeSpec {
        url: a.upstream.clone(),
        command: a.command.clone(),
        key: None,
        startup: secs(10.0),
        url_pattern: a.url_pattern.clone(),
    };
    let (upstream, _bridge) = match spec.resolve() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bridgewire record sidebridge: {e:#}");
            return exit::INVALID_INPUT;
        }
    };
    // The root's missing folders (above `<dir>/<bridge>`) get `--mode`'s bits too.
    let _ = crate::lane::write::create_dirs(&a.dir, crate::lane::write::dir_mode(a.mode));
    let cfg = crate::sidebridge::proxy::ProxyConfig {
        listen: a.listen.clone(),
        upstream,
        dir: a.dir.join(crate::lane::scope_dir_name(Some(&a.bridge))),
        keep_key: a.keep_key,
        key: a.key.clone().filter(|k| !k.is_empty()),
        timeout: secs(a.timeout),
        max_reply: secs(a.max_reply_time),
        max_body: a.max_body,
        mode: a.mode,
    };
    let dir = cfg.dir.clone();
    let code = match crate::sidebridge::proxy::run(cfg) {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("bridgewire record sidebridge: {e:#}");
            exit::INVALID_INPUT
        }
    };
    if let Some(sig) = crate::signals::interrupted() {
        eprintln!(
            "bridgewire record sidebridge: interrupted by {}: the exchanges completed so far are in {}",
            crate::report::live::signal_name(sig),
            dir.display()
        );
    }
    drained.store(true, std::sync::atomic::Ordering::SeqCst);
    code
}

pub fn replay_cmd(a: &ReplaySidebridgeArgs) -> u8 {
    let bridge = a.target.spec();
    crate::sidebridge::player::replay(&crate::sidebridge::player::ReplayOptions {
        recordings: a.recordings.clone(),
        cell: a.cell.clone(),
        bridge,
        limits: a.target.limits(),
        write_current: a.write_current.then_some(a.mode),
        second_run: !a.no_second_run,
    })
}

/// The config file (`--config`, else the nearest bridgewire.toml) with the flags laid over
/// its `[sidebridge.fixture]`.
fn load_fixture(a: &CheckSidebridgeArgs) -> Result<(Fixture, Option<String>), String> {
    let (config, source) = Config::find(a.config.as_deref())?;
    eprintln!("{}", source.describe());
    for w in &config.warnings {
        eprintln!("warning: {w}");
    }
    let mut fx = config.sidebridge_fixture;
    for (key, flag) in [
        ("remember", &a.remember),
        ("recall", &a.recall),
        ("repeat", &a.repeat),
        ("disableHistory", &a.disable_history),
        ("enableHistory", &a.enable_history),
        ("endSession", &a.end_session),
    ] {
        if let Some(p) = flag {
            fx.set_prompt(key, p)?;
        }
    }
    Ok((fx, config.path.map(|p| p.display().to_string())))
}

/// A fresh value per run (the words a bridge is asked to remember must not be predictable).
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    h.finish()
}

pub fn check_cmd(a: &CheckSidebridgeArgs) -> u8 {
    crate::signals::install();
    let started = crate::util::now_ms();
    let (fixture, fixture_path) = match load_fixture(a) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bridgewire check sidebridge: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let spec = a.target.spec();
    let limits = a.target.limits();
    let meta = |target: String| RunMeta {
        protocol: "sidebridge".into(),
        target,
        started_at: report::rfc3339_utc(started),
        duration_ms: (crate::util::now_ms() - started).max(0) as u64,
        timeout_ms: limits.idle.as_millis() as u64,
        fixture: fixture_path.clone(),
        ..Default::default()
    };
    // Verdicts are kept as reached: a signal prints them with the partial summary and writes
    // the report files marked interrupted (the bridge's tree is killed, exit 130/143).
    let spec_target = spec.url.clone().unwrap_or_else(|| {
        spec.command
            .iter()
            .map(|s| s.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let live = crate::report::live::Live::start_held(
        meta(spec_target),
        a.policy.policy(),
        a.reports.clone(),
        match a.format {
            super::Format::Text => crate::report::live::Lines::Stdout,
            super::Format::Json => crate::report::live::Lines::Stderr,
        },
    );
    let (url, guard) = match spec.resolve() {
        Ok(x) => x,
        Err(e) => {
            live.finish();
            eprintln!("bridgewire check sidebridge: {e:#}");
            return exit::INVALID_INPUT;
        }
    };
    let cfg = CheckConfig {
        url: url.clone(),
        key: spec.key.clone(),
        limits,
        warn_after: secs(a.warn_after),
        seed: a.seed,
        give_up_after: a.give_up_after,
        fixture,
        nonce: nonce(),
        live: Some(live.clone()),
        // Held here and by the check's driver: the bridge's tree is killed when both let go.
        process: guard.map(|g| std::sync::Arc::new(std::sync::Mutex::new(g))),
    };
    let checked =
        match crate::sidebridge::spawn::runtime().block_on(crate::sidebridge::rules::check(&cfg)) {
            Ok(r) => r,
            Err(e) => {
                live.finish();
                eprintln!("bridgewire check sidebridge: {e}");
                return exit::INVALID_INPUT;
            }
        };
    drop(cfg);
    if live.finish().is_none() {
        // A signal ended the run: its handler printed what was reached, wrote the reports
        // and exits 130/143 (the verdicts decided after the bridge was killed are not shown).
        crate::signals::exit_if_interrupted();
        return exit::FAILED;
    }
    let mut verdicts = checked.verdicts.clone();
    for v in &mut verdicts {
        // Every verdict carries its catalogue level, whoever reads it.
        v.level = Some(crate::rule::level_of("sidebridge", v));
    }
    let report = Report {
        meta: meta(url.clone()),
        verdicts,
        policy: a.policy.policy(),
    };
    if let Err(e) = a.reports.write(&report) {
        eprintln!("bridgewire check sidebridge: {e}");
        return exit::INVALID_INPUT;
    }
    // stdout passes through the same redaction as the report files.
    let shown = report::redact_report(&report);
    if a.format == super::Format::Json {
        let mut doc = report::json::to_value(&shown);
        doc["url"] = serde_json::json!(url);
        doc["not_applicable"] = serde_json::json!(not_applicable(&checked));
        doc["profiles"] = profiles_json(&checked);
        let doc = crate::jsjson::to_string_pretty(&doc);
        println!("{}", crate::redact::printable(doc.trim_end()));
    } else {
        println!("sidebridge {}", crate::redact::printable(&url));
        print!("{}", report::terminal::render(&shown));
        print_extra(&checked, a.verbose);
    }
    if report.summary().ok() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// Catalogue rules that produce no verdict in this run: the key rules of the other case
/// (SB-A1/A2/A3/A5 need `--key`, SB-A4 needs none).
fn not_applicable(r: &CheckReport) -> Vec<String> {
    crate::rule::catalogue()
        .into_iter()
        .filter(|c| c.protocol == "sidebridge" && !r.verdicts.iter().any(|v| v.id == c.id))
        .map(|c| c.id)
        .collect()
}

fn print_extra(r: &CheckReport, verbose: bool) {
    let na = not_applicable(r);
    if !na.is_empty() {
        println!(
            "not applicable: {} ({})",
            na.join(", "),
            if na.iter().any(|i| i == "SB-A4") {
                "--key given: the bridge has a key"
            } else {
                "no --key: the bridge is taken to have none"
            }
        );
    }
    println!(
        "profiles ({} replies to the emulated client):",
        r.profiles.len()
    );
    for p in Profile::ALL {
        let outcomes: Vec<(&str, &Result<usize, String>)> = r
            .profiles
            .iter()
            .filter_map(|v| {
                v.outcomes
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, o)| (v.label.as_str(), o))
            })
            .collect();
        let dropped: Vec<_> = outcomes.iter().filter(|(_, o)| o.is_err()).collect();
        match dropped.first() {
            None => println!(
                "  {:<8} every reply would render ({})",
                p.id(),
                p.describe()
            ),
            Some((label, Err(e))) => println!(
                "  {:<8} {} of {} replies would be dropped ({}); first: {label}: {e}",
                p.id(),
                dropped.len(),
                outcomes.len(),
                p.describe()
            ),
            Some(_) => {}
        }
    }
    if verbose {
        for v in &r.profiles {
            if let Some((_, Ok(n))) = v.outcomes.first()
                && v.outcomes.iter().all(|(_, o)| o.as_ref().ok() == Some(n))
            {
                println!(
                    "  reply {}: would render {n} message(s) in every profile",
                    v.label
                );
                continue;
            }
            let parts: Vec<String> = v
                .outcomes
                .iter()
                .map(|(p, o)| match o {
                    Ok(n) => format!("{}: would render {n} message(s)", p.id()),
                    Err(e) => format!("{}: would be dropped ({e})", p.id()),
                })
                .collect();
            println!("  reply {}: {}", v.label, parts.join("; "));
        }
    }
}

fn profiles_json(r: &CheckReport) -> serde_json::Value {
    serde_json::Value::Array(
        r.profiles
            .iter()
            .map(|v| {
                let mut o = serde_json::Map::new();
                o.insert("reply".into(), serde_json::json!(v.label));
                for (p, out) in &v.outcomes {
                    o.insert(
                        p.id().into(),
                        match out {
                            Ok(n) => serde_json::json!({"renders": true, "messages": n}),
                            Err(e) => serde_json::json!({"renders": false, "reason": e}),
                        },
                    );
                }
                serde_json::Value::Object(o)
            })
            .collect(),
    )
}

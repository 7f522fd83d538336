//! `check bridle hub|agent`, `record bridle`, `replay bridle`.

use super::exit;
use crate::bridle::check_agent::{AgentCheck, check_agent};
use crate::bridle::check_hub::{HubCheck, check_hub};
use crate::bridle::spawn::{ChildGuard, bundled, parse_address};
use crate::rule::Verdict;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Subcommand, Debug)]
pub enum BridleCheck {
    /// Play browsers and agents against a hub (a URL, a command, or the bundled reference hub)
    /// and check the spec's rules.
    Hub(HubArgs),
    /// Play the hub and a browser toward an agent runtime command and check its rules.
    Agent(AgentArgs),
}

#[derive(clap::Args, Debug)]
pub struct HubArgs {
    #[command(flatten)]
    pub reports: crate::report::ReportFiles,
    /// A running hub (`http://host:port`); otherwise the command after `--` (or the bundled
    /// `bridle-ref-hub`) is started, and its first stdout line must be its address.
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// The secret browser JWTs are signed with (HS256); passed to a started hub as JWT_SECRET.
    #[arg(long, env = "JWT_SECRET")]
    pub jwt_secret: Option<String>,
    /// The agents' apiKey; passed to a started hub as BRIDLE_API_KEY.
    #[arg(long, env = "BRIDLE_API_KEY")]
    pub api_key: Option<String>,
    /// Bound on each expected event, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 3000, value_parser = super::args::parse_ms)]
    pub wait_ms: u64,
    /// The hub's /message/sync timeout in ms (the spec's 120000); a started hub gets it as
    /// BRIDLE_SYNC_TIMEOUT_MS.
    #[arg(long, value_name = "DURATION", default_value_t = 120_000, value_parser = super::args::parse_ms)]
    pub sync_timeout_ms: u64,
    /// Only this rule (repeatable).
    #[arg(long = "rule", value_name = "ID")]
    pub rules: Vec<String>,
    /// SHOULD failures (e.g. `spec-events-only`) fail the run too.
    #[arg(long)]
    pub strict: bool,
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
    /// The hub command.
    #[arg(last = true, value_name = "HUB COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub reports: crate::report::ReportFiles,
    /// BRIDLE_AGENT_ID given to the agent.
    #[arg(long, default_value = "bridgewire-agent")]
    pub agent_id: String,
    /// BRIDLE_API_KEY given to the agent (random when absent).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Bound on a connection or a single frame, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 5000, value_parser = super::args::parse_ms)]
    pub wait_ms: u64,
    /// Bound on a whole answer, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 30_000, value_parser = super::args::parse_ms)]
    pub turn_wait_ms: u64,
    /// Bound on reconnection after the hub restarts, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 10_000, value_parser = super::args::parse_ms)]
    pub reconnect_wait_ms: u64,
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
    /// The agent command (default: the bundled bridle-ref-agent).
    #[arg(last = true, value_name = "AGENT COMMAND")]
    pub command: Vec<OsString>,
}

pub(crate) fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .ok()
}

/// Prints the verdicts (levels from the catalogue, every sub-check under its rule) and returns
/// the exit code: MUST failures and skipped rules fail; SHOULD failures only under `--strict`.
fn report(verdicts: &[Verdict], format: super::Format, strict: bool) -> u8 {
    let mut r = crate::report::ReportFiles::simple_report("bridle", "", 0, verdicts.to_vec());
    r.policy.strict = strict;
    let summary = r.summary();
    match format {
        super::Format::Text => print!("{}", crate::report::terminal::render(&r)),
        super::Format::Json => {
            let doc = serde_json::json!({
                "verdicts": verdicts,
                "passed": summary.passed,
                "failed": summary.failed,
                "skipped": summary.skipped,
                "warned": summary.warned,
                "not_run": summary.not_run,
            });
            println!("{doc}");
        }
    }
    if summary.ok() { exit::OK } else { exit::FAILED }
}

/// Writes the requested report files; a file that cannot be written makes the run exit 2.
fn write_reports(
    files: &crate::report::ReportFiles,
    protocol: &str,
    target: &str,
    started_ms: i64,
    verdicts: Vec<Verdict>,
    code: u8,
) -> u8 {
    let report = crate::report::ReportFiles::simple_report(protocol, target, started_ms, verdicts);
    match files.write(&report) {
        Ok(()) => code,
        Err(e) => {
            eprintln!("bridgewire check {protocol}: {e}");
            exit::INVALID_INPUT
        }
    }
}

fn random_secret(what: &str) -> String {
    format!("bridgewire-{what}-{}", uuid::Uuid::new_v4().simple())
}

fn default_command(name: &str) -> Result<Vec<OsString>, String> {
    bundled(name)
        .map(|p| vec![p.into_os_string()])
        .ok_or_else(|| {
            format!("the bundled {name} was not found beside bridgewire; pass a command after --")
        })
}

pub fn check_hub_cmd(a: &HubArgs) -> u8 {
    // SIGINT/SIGTERM: the hub's tree is killed, exit 130/143.
    crate::signals::install();
    for r in &a.rules {
        if !crate::bridle::rules::id::HUB.contains(&r.as_str()) {
            eprintln!("bridgewire check bridle hub: unknown rule {r:?}");
            return exit::INVALID_INPUT;
        }
    }
    let Some((jwt_secret, api_key, _hub, url)) = start_hub(
        "check bridle hub",
        a.url.as_deref(),
        a.jwt_secret.as_deref(),
        a.api_key.as_deref(),
        &a.command,
        a.sync_timeout_ms,
    ) else {
        return exit::INVALID_INPUT;
    };
    let cfg = HubCheck {
        url,
        jwt_secret,
        api_key,
        wait: Duration::from_millis(a.wait_ms),
        sync_timeout: Duration::from_millis(a.sync_timeout_ms),
        only: a.rules.clone(),
    };
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let started = crate::util::now_ms();
    let verdicts = rt.block_on(check_hub(&cfg));
    rt.shutdown_timeout(Duration::from_secs(1));
    let code = report(&verdicts, a.format, a.strict);
    write_reports(&a.reports, "bridle", &cfg.url, started, verdicts, code)
}

pub fn check_agent_cmd(a: &AgentArgs) -> u8 {
    crate::signals::install();
    let command = if a.command.is_empty() {
        match default_command("bridle-ref-agent") {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bridgewire check bridle agent: {e}");
                return exit::INVALID_INPUT;
            }
        }
    } else {
        a.command.clone()
    };
    let cfg = AgentCheck {
        command,
        agent_id: a.agent_id.clone(),
        api_key: a.api_key.clone().unwrap_or_else(|| random_secret("key")),
        wait: Duration::from_millis(a.wait_ms),
        turn_wait: Duration::from_millis(a.turn_wait_ms),
        reconnect_wait: Duration::from_millis(a.reconnect_wait_ms),
    };
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let started = crate::util::now_ms();
    let verdicts = rt.block_on(check_agent(&cfg));
    rt.shutdown_timeout(Duration::from_secs(1));
    let code = report(&verdicts, a.format, false);
    let target = cfg
        .command
        .iter()
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    write_reports(&a.reports, "bridle", &target, started, verdicts, code)
}

#[derive(clap::Args, Debug)]
pub struct RecordBridleArgs {
    /// Where browsers and agents connect (port 0 picks one; the bound address is printed as
    /// the first stdout line).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// The hub (`http://host:port`).
    #[arg(long)]
    pub upstream: String,
    /// Recording root; cells go to `<dir>/[<hub>/]<agentId>__<clientId>/<direction>.ndjson`.
    #[arg(
        long,
        env = "BRIDGEWIRE_RECORD_DIR",
        default_value = "bridgewire-recordings"
    )]
    pub dir: PathBuf,
    /// Hub name, appended to the root (`recordings/bridle/<hub>/…`).
    #[arg(long)]
    pub hub: Option<String>,
    /// Keep handshake secrets (apiKey, token) in the lanes.
    #[arg(long)]
    pub no_redact: bool,
    /// Permission bits of the lane files, in octal (folders get the matching search bits).
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = crate::cli::parse_mode)]
    pub mode: u32,
}

pub fn record_cmd(a: &RecordBridleArgs) -> u8 {
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let dir = match &a.hub {
        Some(h) => a.dir.join(h),
        None => a.dir.clone(),
    };
    // The root's missing folders (above `<dir>/<hub>`) get `--mode`'s bits too.
    let _ = crate::lane::write::create_dirs(&a.dir, crate::lane::write::dir_mode(a.mode));
    let cfg = crate::bridle::proxy::ProxyConfig {
        upstream: a.upstream.trim_end_matches('/').to_string(),
        dir,
        redact: !a.no_redact,
        mode: a.mode,
    };
    let listen = a.listen.clone();
    let r = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
        println!("http://{}", listener.local_addr()?);
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        };
        crate::bridle::proxy::serve(listener, cfg, shutdown).await
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    match r {
        Ok(frames) => {
            eprintln!("bridgewire record bridle: {frames} frames recorded");
            exit::OK
        }
        Err(e) => {
            eprintln!("bridgewire record bridle: {e:#}");
            exit::INVALID_INPUT
        }
    }
}

/// The hub under test: `--url` (with its secrets), or a started command (default: the bundled
/// reference hub) given the secrets as env, its address read from its first stdout line.
pub(crate) fn start_hub(
    who: &str,
    url: Option<&str>,
    jwt_secret: Option<&str>,
    api_key: Option<&str>,
    command: &[OsString],
    sync_timeout_ms: u64,
) -> Option<(String, String, Option<ChildGuard>, String)> {
    if let Some(url) = url {
        let (Some(s), Some(k)) = (jwt_secret, api_key) else {
            eprintln!(
                "bridgewire {who}: --url needs --jwt-secret and --api-key (or JWT_SECRET, BRIDLE_API_KEY)"
            );
            return None;
        };
        return Some((
            s.to_string(),
            k.to_string(),
            None,
            url.trim_end_matches('/').to_string(),
        ));
    }
    let command = if command.is_empty() {
        match default_command("bridle-ref-hub") {
            Ok(mut c) => {
                c.extend(["--listen".into(), "127.0.0.1:0".into()]);
                c
            }
            Err(e) => {
                eprintln!("bridgewire {who}: {e}");
                return None;
            }
        }
    } else {
        command.to_vec()
    };
    let secret = jwt_secret
        .map(str::to_string)
        .unwrap_or_else(|| random_secret("jwt"));
    let key = api_key
        .map(str::to_string)
        .unwrap_or_else(|| random_secret("key"));
    let env = [
        ("JWT_SECRET", secret.clone()),
        ("BRIDLE_API_KEY", key.clone()),
        ("BRIDLE_SYNC_TIMEOUT_MS", sync_timeout_ms.to_string()),
    ];
    let mut hub = match ChildGuard::spawn(&command, &env) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("bridgewire {who}: cannot start the hub: {e}");
            return None;
        }
    };
    let Some(url) = hub
        .line(Duration::from_secs(20))
        .and_then(|l| parse_address(&l))
    else {
        let why = match hub.exited() {
            Some(st) => format!("the hub exited ({st})"),
            None => "no address on its first stdout line within 20 s".into(),
        };
        eprintln!("bridgewire {who}: {why}");
        return None;
    };
    Some((secret, key, Some(hub), url))
}

#[derive(clap::Args, Debug)]
pub struct ReplayBridleArgs {
    /// Recordings folders or cells.
    #[arg(required = true)]
    pub recordings: Vec<PathBuf>,
    /// Only cells whose key contains this text.
    #[arg(long, value_name = "TEXT")]
    pub cell: Option<String>,
    /// A running hub; otherwise the command after `--` (default: the bundled reference hub).
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    #[arg(long, env = "JWT_SECRET")]
    pub jwt_secret: Option<String>,
    #[arg(long, env = "BRIDLE_API_KEY")]
    pub api_key: Option<String>,
    /// Bound on each expected frame, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 3000, value_parser = super::args::parse_ms)]
    pub wait_ms: u64,
    /// Listen for events beyond the recording for the full quiet window after each cell
    /// (wait-ms / 10, 100-500 ms) instead of ending it once the hub is idle.
    #[arg(long)]
    pub fixed_windows: bool,
    /// The hub command.
    #[arg(last = true, value_name = "HUB COMMAND")]
    pub command: Vec<OsString>,
}

pub fn replay_cmd(a: &ReplayBridleArgs) -> u8 {
    use crate::bridle::player::{Outcome, ReplayConfig, replay_cell};
    let mut cells = Vec::new();
    for r in &a.recordings {
        match crate::cell::discover(r) {
            Ok(c) => cells.extend(c),
            Err(e) => {
                eprintln!("bridgewire replay bridle: {e}");
                return exit::INVALID_INPUT;
            }
        }
    }
    cells.retain(|c| c.protocol == crate::protocol::Protocol::Bridle);
    if let Some(f) = &a.cell {
        cells.retain(|c| c.key.contains(f.as_str()));
    }
    if cells.is_empty() {
        eprintln!("bridgewire replay bridle: no Bridle cells selected");
        return exit::NOTHING_SELECTED;
    }
    let Some((jwt_secret, api_key, _hub, url)) = start_hub(
        "replay bridle",
        a.url.as_deref(),
        a.jwt_secret.as_deref(),
        a.api_key.as_deref(),
        &a.command,
        120_000,
    ) else {
        return exit::INVALID_INPUT;
    };
    let cfg = ReplayConfig {
        url,
        jwt_secret,
        api_key,
        wait: Duration::from_millis(a.wait_ms),
        fixed_windows: a.fixed_windows,
    };
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let (mut passed, mut failed) = (0, 0);
    for cell in &cells {
        let budget = cfg.wait * 40;
        let outcome = rt
            .block_on(async { tokio::time::timeout(budget, replay_cell(cell, &cfg)).await })
            .unwrap_or_else(|_| Outcome::Fail(format!("timed out after {budget:?}")));
        match outcome {
            Outcome::Pass { events, rows } => {
                passed += 1;
                println!("PASS {}: events {events}, rows {rows}", cell.key);
            }
            Outcome::Fail(why) => {
                failed += 1;
                println!("FAIL {}: {why}", cell.key);
            }
            Outcome::NotReplayable(why) => println!("SKIP {}: {why}", cell.key),
        }
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    println!("{passed} passed, {failed} failed");
    if failed == 0 { exit::OK } else { exit::FAILED }
}

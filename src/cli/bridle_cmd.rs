//! `check bridle hub|agent`, `record bridle`, `replay bridle`.

use super::exit;
use crate::bridle::check_agent::{AgentCheck, check_agent_run};
use crate::bridle::check_hub::{HubCheck, check_hub_run};
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
    /// `bridle-ref-hub`) is started, and must print its address on stdout within 20 s: a line
    /// that is one (`http://h:p`, `h:p`, a port) or names one (`listening on http://0.0.0.0:3333`)
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// The secret browser JWTs are signed with (HS256); passed to a started hub as JWT_SECRET.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// The agents' apiKey; passed to a started hub as BRIDLE_API_KEY.
    #[arg(long, env = "BRIDLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Bound on each expected event, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 3000, value_parser = super::args::parse_ms)]
    pub wait_ms: u64,
    /// The hub's /message/sync timeout in ms (the spec's 120000); a started hub gets it as
    /// BRIDLE_SYNC_TIMEOUT_MS.
    #[arg(long, env = "BRIDLE_SYNC_TIMEOUT_MS", value_name = "DURATION", default_value_t = 120_000, value_parser = super::args::parse_ms)]
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
    // stdout passes through the same redaction as the report files.
    let r = crate::report::redact_report(&r);
    let verdicts = &r.verdicts;
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

/// A held live reporter for a Bridle check: verdicts are kept as reached, and a signal prints
/// them with the partial summary and writes the report files marked interrupted.
fn live_for(
    target: &str,
    started_ms: i64,
    wait_ms: u64,
    files: &crate::report::ReportFiles,
    format: super::Format,
    strict: bool,
) -> crate::report::live::Live {
    let mut r = crate::report::ReportFiles::simple_report("bridle", target, started_ms, Vec::new());
    r.meta.timeout_ms = wait_ms;
    let mut policy = r.policy;
    policy.strict = strict;
    crate::report::live::Live::start_held(
        r.meta,
        policy,
        files.clone(),
        match format {
            super::Format::Text => crate::report::live::Lines::Stdout,
            super::Format::Json => crate::report::live::Lines::Stderr,
        },
    )
}

fn joined(command: &[OsString]) -> String {
    command
        .iter()
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes the requested report files; a file that cannot be written makes the run exit 2.
fn write_reports(
    files: &crate::report::ReportFiles,
    (protocol, target): (&str, &str),
    started_ms: i64,
    wait_ms: u64,
    verdicts: Vec<Verdict>,
    code: u8,
) -> u8 {
    let mut report =
        crate::report::ReportFiles::simple_report(protocol, target, started_ms, verdicts);
    report.meta.timeout_ms = wait_ms;
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
    let started = crate::util::now_ms();
    let live = live_for(
        a.url.clone().unwrap_or_else(|| joined(&a.command)).as_str(),
        started,
        a.wait_ms,
        &a.reports,
        a.format,
        a.strict,
    );
    let (jwt_secret, api_key, _hub, url) = match start_hub_or_why(
        a.url.as_deref(),
        a.jwt_secret.as_deref(),
        a.api_key.as_deref(),
        &a.command,
        a.sync_timeout_ms,
    ) {
        Ok(started) => started,
        Err(why) => {
            eprintln!("bridgewire check bridle hub: {why}");
            // Every rule is listed, not run, with each sub-check naming the cause; exit 2.
            let _ = live.finish();
            let why = format!("the hub did not start: {why}");
            let verdicts = crate::bridle::check_hub::setup_failed(&a.rules, &why);
            report(&verdicts, a.format, a.strict);
            let target = joined(&a.command);
            return write_reports(
                &a.reports,
                ("bridle", &target),
                started,
                a.wait_ms,
                verdicts,
                exit::INVALID_INPUT,
            );
        }
    };
    let cfg = HubCheck {
        url,
        jwt_secret,
        api_key,
        wait: Duration::from_millis(a.wait_ms),
        sync_timeout: Duration::from_millis(a.sync_timeout_ms),
        only: a.rules.clone(),
        own_hub: a.url.is_none(),
        live: Some(live.clone()),
    };
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let run = rt.block_on(check_hub_run(&cfg));
    rt.shutdown_timeout(Duration::from_secs(1));
    if live.finish().is_none() {
        // A signal ended the run: its handler printed and wrote what was reached.
        crate::signals::exit_if_interrupted();
        return exit::FAILED;
    }
    let verdicts = run.verdicts;
    let mut code = report(&verdicts, a.format, a.strict);
    if let Some(why) = &run.setup_failed {
        // A hub nobody answers for is a check target that cannot be started.
        eprintln!("bridgewire check bridle hub: {why}");
        code = exit::INVALID_INPUT;
    }
    write_reports(
        &a.reports,
        ("bridle", &cfg.url),
        started,
        a.wait_ms,
        verdicts,
        code,
    )
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
        live: None,
    };
    let started = crate::util::now_ms();
    let target = joined(&cfg.command);
    let live = live_for(&target, started, a.wait_ms, &a.reports, a.format, false);
    let cfg = AgentCheck {
        live: Some(live.clone()),
        ..cfg
    };
    let Some(rt) = runtime() else {
        return exit::INVALID_INPUT;
    };
    let (verdicts, setup_failed) = rt.block_on(check_agent_run(&cfg));
    rt.shutdown_timeout(Duration::from_secs(1));
    if live.finish().is_none() {
        crate::signals::exit_if_interrupted();
        return exit::FAILED;
    }
    let mut code = report(&verdicts, a.format, false);
    if let Some(why) = setup_failed {
        // An agent command that cannot be started is a check target that cannot be started.
        eprintln!("bridgewire check bridle agent: {why}");
        code = exit::INVALID_INPUT;
    }
    write_reports(
        &a.reports,
        ("bridle", &target),
        started,
        a.wait_ms,
        verdicts,
        code,
    )
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
    /// The hub's JWT secret, only to say what kind of token a browser's handshake sent: its
    /// signature is recorded as `[redacted:signed]` or `[redacted:forged]` (without it,
    /// `[redacted:unverified]`, which a replay cannot send again). Never written.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// The hub's agent API key, only to say how an agent's other apiKey differs from it
    /// (`[redacted:case]`, `[redacted:prefix]`, `[redacted:extended]`, `[redacted:other]`;
    /// without it, `[redacted]`). Never written.
    #[arg(long, env = "BRIDLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

pub fn record_cmd(a: &RecordBridleArgs) -> u8 {
    // A signal stops the proxy gracefully (in-flight frames recorded), then the summary is
    // printed and the command exits 130/143.
    crate::signals::install();
    let (drained, _drain) = crate::signals::drain_on_signal(Duration::from_millis(1200));
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
        jwt_secret: a.jwt_secret.clone().filter(|s| !s.is_empty()),
        api_key: a.api_key.clone().filter(|k| !k.is_empty()),
    };
    let listen = a.listen.clone();
    let r = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
        println!("http://{}", listener.local_addr()?);
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let shutdown = async {
            crate::signals::interrupted_async().await;
        };
        crate::bridle::proxy::serve(listener, cfg, shutdown).await
    });
    rt.shutdown_timeout(Duration::from_millis(300));
    let interrupted = crate::signals::interrupted()
        .map(|sig| format!("interrupted by {}: ", crate::report::live::signal_name(sig)))
        .unwrap_or_default();
    let code = match r {
        Ok(frames) => {
            eprintln!("bridgewire record bridle: {interrupted}{frames} frames recorded");
            exit::OK
        }
        Err(e) => {
            eprintln!("bridgewire record bridle: {e:#}");
            exit::INVALID_INPUT
        }
    };
    drained.store(true, std::sync::atomic::Ordering::SeqCst);
    code
}

/// How long a started hub is given to print its address.
const ADDRESS_WAIT: Duration = Duration::from_secs(20);

/// The hub under test: `--url` (with its secrets), or a started command (default: the bundled
/// reference hub) given the secrets as env, its address read from its stdout: the first line
/// that is an address or names one ([`parse_address`]).
pub(crate) fn start_hub_or_why(
    url: Option<&str>,
    jwt_secret: Option<&str>,
    api_key: Option<&str>,
    command: &[OsString],
    sync_timeout_ms: u64,
) -> Result<(String, String, Option<ChildGuard>, String), String> {
    if let Some(url) = url {
        let (Some(s), Some(k)) = (jwt_secret, api_key) else {
            return Err(
                "--url needs --jwt-secret and --api-key (or JWT_SECRET, BRIDLE_API_KEY)".into(),
            );
        };
        return Ok((
            s.to_string(),
            k.to_string(),
            None,
            url.trim_end_matches('/').to_string(),
        ));
    }
    let command = if command.is_empty() {
        let mut c = default_command("bridle-ref-hub")?;
        c.extend(["--listen".into(), "127.0.0.1:0".into()]);
        c
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
        Err(e) => return Err(format!("cannot start the hub: {e}")),
    };
    // Its address is the first stdout line that is one or names one (a banner or log lines
    // may come first), within 20 s.
    let started = std::time::Instant::now();
    let deadline = started + ADDRESS_WAIT;
    let (mut seen, mut last) = (0usize, None::<String>);
    let mut url = None;
    while let Some(line) = hub.line(deadline.saturating_duration_since(std::time::Instant::now())) {
        if let Some(u) = parse_address(&line) {
            url = Some(u);
            break;
        }
        seen += 1;
        last = Some(line);
    }
    let Some(url) = url else {
        // Its stdout closed early: it is exiting, which is said rather than a wait it never had.
        let mut exited = hub.exited();
        let closed = started.elapsed() < ADDRESS_WAIT - Duration::from_secs(1);
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while exited.is_none() && closed && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
            exited = hub.exited();
        }
        let printed = match &last {
            Some(l) => format!(
                "; it printed {seen} stdout line(s), none an address, the last {:?}",
                crate::redact::printable(l)
            ),
            None => String::new(),
        };
        let why = match exited {
            Some(st) => format!("the hub exited ({st}) before printing its address{printed}"),
            None if closed => format!("its stdout closed before it printed an address{printed}"),
            None => format!(
                "no address on its stdout within {} s{printed}",
                ADDRESS_WAIT.as_secs()
            ),
        };
        return Err(why);
    };
    // A hub that printed its address before failing to bind a taken port: what answers there
    // is another program (not judged when nothing listens soon: each use names that).
    let soon = std::time::Instant::now() + Duration::from_secs(5);
    if let Ok(Some(reached)) = crate::port_owner::await_listening(&url, soon)
        && let Some(foreign) = crate::port_owner::foreign_listener(reached, hub.tree())
    {
        // Its further stdout and its exit, for a moment (stderr is the terminal's).
        let until = std::time::Instant::now() + crate::port_owner::Foreign::WATCH;
        let mut output = Vec::new();
        let exited = loop {
            if let Some(st) = hub.exited() {
                break Some(st);
            }
            if std::time::Instant::now() >= until
                || output
                    .iter()
                    .any(|l: &String| crate::port_owner::says_address_in_use(l))
            {
                break None;
            }
            match hub.line(Duration::from_millis(20)) {
                Some(l) => output.push(l),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        if let Some(who) = foreign.refusal(exited, &output) {
            return Err(format!(
                "the hub printed its address {url}, but what listens there is not this hub: \
                 {who}. Every verdict would judge that program; let the hub listen on a port of \
                 its own (port 0, printing the one it got) or stop the other program"
            ));
        }
    }
    Ok((secret, key, Some(hub), url))
}

/// [`start_hub_or_why`], saying why on stderr.
pub(crate) fn start_hub(
    who: &str,
    url: Option<&str>,
    jwt_secret: Option<&str>,
    api_key: Option<&str>,
    command: &[OsString],
    sync_timeout_ms: u64,
) -> Option<(String, String, Option<ChildGuard>, String)> {
    start_hub_or_why(url, jwt_secret, api_key, command, sync_timeout_ms)
        .map_err(|e| eprintln!("bridgewire {who}: {e}"))
        .ok()
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
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    #[arg(long, env = "BRIDLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Bound on each expected frame, in ms.
    #[arg(long, value_name = "DURATION", default_value_t = 3000, value_parser = super::args::parse_ms)]
    pub wait_ms: u64,
    /// Listen for events beyond the recording for the full quiet window after each cell
    /// (wait-ms / 10, 100-500 ms) instead of ending it once the hub is idle.
    #[arg(long)]
    pub fixed_windows: bool,
    /// The /message/sync timeout a started hub gets as BRIDLE_SYNC_TIMEOUT_MS (the spec's
    /// 120000). A recorded answer is awaited as long as it took when recorded, and a wait more,
    /// so a shorter one only makes a hub that honours it quicker.
    #[arg(long, env = "BRIDLE_SYNC_TIMEOUT_MS", value_name = "DURATION", default_value_t = 120_000, value_parser = super::args::parse_ms)]
    pub sync_timeout_ms: u64,
    /// The hub command.
    #[arg(last = true, value_name = "HUB COMMAND")]
    pub command: Vec<OsString>,
}

/// Whether the hub answers at all: `GET /api/agent/health` (the spec's hub-wide health) within
/// the wait; any HTTP answer will do. `Err`: what the probe saw instead.
async fn answers(cfg: &crate::bridle::player::ReplayConfig) -> Result<(), String> {
    let url = format!("{}/api/agent/health", cfg.url.trim_end_matches('/'));
    let probe = reqwest::Client::new().get(&url).timeout(cfg.wait).send();
    match tokio::time::timeout(cfg.wait + Duration::from_millis(100), probe).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.is_timeout() => Err(format!(
            "GET /api/agent/health: no answer within {:.1} s",
            cfg.wait.as_secs_f64()
        )),
        Ok(Err(e)) => Err(format!("GET /api/agent/health: {e}")),
        Err(_) => Err(format!(
            "GET /api/agent/health: no answer within {:.1} s",
            cfg.wait.as_secs_f64()
        )),
    }
}

pub fn replay_cmd(a: &ReplayBridleArgs) -> u8 {
    use crate::bridle::player::{Outcome, ReplayConfig, Trace, replay_group_traced};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    // SIGINT/SIGTERM: the hub's tree is killed, the cells finished so far are summed up, exit
    // 130/143.
    crate::signals::install();
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
    // Lane lines the reader cannot take (not JSON, not UTF-8, a wrong `dir`) make the cell an
    // error naming file:line (exit 2): the player finds them as it reads a cell to replay it
    // ([`Trace::unreadable`]), its warnings (a cut last line) with them; the cells it does not
    // replay (the hub gone) are read for them here.
    let unreadable_now = |members: &[&crate::cell::Cell]| -> Vec<(Outcome, Trace)> {
        let reports: Vec<(Vec<String>, Vec<String>)> = members
            .iter()
            .map(|c| crate::bridle::player::read_report(c))
            .collect();
        let bad: Vec<&str> = members
            .iter()
            .zip(&reports)
            .filter(|(_, r)| !r.0.is_empty())
            .map(|(c, _)| c.key.as_str())
            .collect();
        if bad.is_empty() {
            return Vec::new();
        }
        reports
            .iter()
            .map(|(errors, warnings)| {
                let trace = Trace {
                    unreadable: !errors.is_empty(),
                    warnings: warnings.clone(),
                    ..Trace::default()
                };
                let o = if errors.is_empty() {
                    Outcome::NotReplayable(format!(
                        "not replayed: it is replayed with {}, whose recording is unreadable",
                        bad.join(", ")
                    ))
                } else {
                    Outcome::Fail(format!("unreadable recording: {}", errors.join("; ")))
                };
                (o, trace)
            })
            .collect()
    };
    let Some((jwt_secret, api_key, mut hub, url)) = start_hub(
        "replay bridle",
        a.url.as_deref(),
        a.jwt_secret.as_deref(),
        a.api_key.as_deref(),
        &a.command,
        a.sync_timeout_ms,
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
    let tally = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let total = cells.len();
    let t = tally.clone();
    let _summary = crate::signals::on_signal(move |sig| {
        let (p, f) = (t[0].load(SeqCst), t[1].load(SeqCst));
        eprintln!(
            "bridgewire replay bridle: interrupted by {}: {} of {total} cells finished ({p} passed, {f} failed); the hub's tree killed",
            crate::report::live::signal_name(sig),
            p + f
        );
    });
    let (mut passed, mut failed, mut errors) = (0, 0, 0);
    // A hub that exited is named with its status, in the cell it exited in and in every later
    // one (which are not replayed: nobody listens any more), with the cell it exited during.
    let mut gone: Option<(std::process::ExitStatus, String)> = None;
    // A hub that stopped answering (its event loop blocked): the cell that waited in vain
    // first, and what the probe saw. Later groups are replayed once it answers again.
    let mut hung: Option<(String, String)> = None;
    // The cells of one agentId are replayed together, in their recorded order across them
    // (its connects live in its `__agent` cell): see `player::groups`.
    let refs: Vec<&crate::cell::Cell> = cells.iter().collect();
    let bystanders = crate::bridle::player::bystanders(&refs);
    'groups: for group in crate::bridle::player::groups(&refs) {
        let members: Vec<&crate::cell::Cell> = group.iter().map(|&i| refs[i]).collect();
        // Every wait is bounded; this bounds their number too, plus what the recording itself
        // waited on (a `/message/sync` answered at the hub's 120 s timeout).
        let budget = members.iter().fold(Duration::ZERO, |b, c| {
            b + cfg.wait * 40 + crate::bridle::player::recorded_waits(c)
        });
        // A group not replayed (the hub gone or not answering) is still read for unreadable
        // lines: those are the recording's errors, whatever the hub did.
        let bad = if gone.is_some() || hung.is_some() {
            unreadable_now(&members)
        } else {
            Vec::new()
        };
        // Still not answering: the group is not replayed (every wait would run out, each cell
        // blamed for the one fault).
        if let Some((during, saw)) = &hung
            && bad.is_empty()
        {
            match rt.block_on(answers(&cfg)) {
                Ok(()) => hung = None,
                Err(now) => {
                    for c in &members {
                        println!(
                            "SKIP {}: not replayed: the hub has answered nothing since {during} ({saw}; again now: {now})",
                            c.key
                        );
                    }
                    continue;
                }
            }
        }
        let outcomes: Vec<(Outcome, Trace)> = match &gone {
            _ if !bad.is_empty() => bad,
            Some((st, during)) => members
                .iter()
                .map(|_| {
                    (
                        Outcome::NotReplayable(format!(
                            "not replayed: the hub {}{st}) during {during}",
                            crate::parity::EXITED
                        )),
                        Trace::default(),
                    )
                })
                .collect(),
            None => {
                let mut views = vec![Vec::new(); members.len()];
                rt.block_on(async {
                    tokio::time::timeout(
                        budget,
                        replay_group_traced(&members, &cfg, &bystanders, &mut views),
                    )
                    .await
                })
                .unwrap_or_else(|_| {
                    members
                        .iter()
                        .map(|_| {
                            (
                                Outcome::Fail(format!("timed out after {budget:?}")),
                                Trace::default(),
                            )
                        })
                        .collect()
                })
            }
        };
        // A hub that exited during the group: named in the cell whose connection first found
        // it gone (the cell it exited during, the first failing one when none did), and the
        // cells that found it gone later are its consequence, not faults of their own (one
        // fault, one verdict).
        let mut outcomes = outcomes;
        for (c, (_, t)) in members.iter().zip(&outcomes) {
            for w in &t.warnings {
                eprintln!("warning: {}: {w}", c.key);
            }
        }
        let unreadable_group = outcomes.iter().any(|(_, t)| t.unreadable);
        if gone.is_none() && !unreadable_group {
            let failing = |o: &Outcome| matches!(o, Outcome::Fail(_));
            let closed = outcomes
                .iter()
                .any(|(o, t)| failing(o) && t.closed.is_some());
            let any_fail = outcomes.iter().any(|(o, _)| failing(o));
            // Given a moment to be reaped when a connection closed on the replay.
            let grace = if closed
                || outcomes
                    .iter()
                    .any(|(o, _)| matches!(o, Outcome::Fail(w) if w.contains("connection closed")))
            {
                crate::bridle::spawn::EXIT_GRACE
            } else {
                Duration::ZERO
            };
            if any_fail && let Some(st) = hub.as_mut().and_then(|h| h.exited_within(grace)) {
                let first = outcomes
                    .iter()
                    .enumerate()
                    .filter(|(_, (o, t))| failing(o) && t.closed.is_some())
                    .min_by_key(|(_, (_, t))| t.closed)
                    .or_else(|| outcomes.iter().enumerate().find(|(_, (o, _))| failing(o)))
                    .map_or(0, |(k, _)| k);
                let during = members[first].key.clone();
                // The others are skipped, naming that cell: the exit is one fault (as
                // `replay sidebridge` names a bridge's exit once).
                // A cell that had failed on its own before it met the exit keeps its cause.
                for (k, (o, t)) in outcomes.iter_mut().enumerate() {
                    let Outcome::Fail(why) = o else { continue };
                    if k == first {
                        *why = format!(
                            "the hub {}{st}) during this cell: {why}",
                            crate::parity::EXITED
                        );
                    } else if t.closed.is_some() && !t.own_before_close {
                        *o = Outcome::NotReplayable(format!(
                            "not replayed past the hub's exit: the hub {}{st}) during {during}",
                            crate::parity::EXITED
                        ));
                    }
                }
                gone = Some((st, during));
            } else if any_fail
                && outcomes
                    .iter()
                    .any(|(o, t)| failing(o) && t.stalled.is_some())
                && let Err(saw) = rt.block_on(answers(&cfg))
            {
                // A hub that answers nothing (its event loop blocked): named in the cell that
                // waited in vain first; the cells that waited in vain after it are its
                // consequence (one fault, one verdict), those that failed otherwise keep theirs.
                let (first, at) = outcomes
                    .iter()
                    .enumerate()
                    .filter_map(|(k, (o, t))| Some((k, t.stalled.filter(|_| failing(o))?)))
                    .min_by_key(|(_, at)| *at)
                    .unwrap_or((0, std::time::Instant::now()));
                let during = members[first].key.clone();
                for (k, (o, t)) in outcomes.iter_mut().enumerate() {
                    let Outcome::Fail(why) = o else { continue };
                    if k == first {
                        *why = format!("the hub stopped answering during this cell ({saw}): {why}");
                    } else if t.stalled.is_some_and(|s| s >= at) {
                        *o = Outcome::NotReplayable(format!(
                            "not judged: the hub stopped answering during {during} ({saw})"
                        ));
                    }
                }
                hung = Some((during, saw));
            }
        }
        for (cell, (outcome, trace)) in members.into_iter().zip(outcomes) {
            let outcome = match outcome {
                Outcome::Fail(why) if trace.unreadable => {
                    errors += 1;
                    println!("ERROR {}: {}", cell.key, crate::redact::printable(&why));
                    continue;
                }
                o => o,
            };
            match outcome {
                _ if crate::signals::interrupted().is_some() => break 'groups,
                Outcome::Pass {
                    events,
                    rows,
                    extensions,
                    note,
                } => {
                    passed += 1;
                    tally[0].fetch_add(1, SeqCst);
                    // Extensions are information: the spec forbids none, so they are not compared.
                    let ext = if extensions.is_empty() {
                        String::new()
                    } else {
                        format!("; extensions, not compared: {extensions}")
                    };
                    let note = if note.is_empty() {
                        String::new()
                    } else {
                        format!("; {note}")
                    };
                    println!("PASS {}: events {events}, rows {rows}{ext}{note}", cell.key);
                }
                Outcome::Fail(why) => {
                    failed += 1;
                    tally[1].fetch_add(1, SeqCst);
                    println!("FAIL {}: {}", cell.key, crate::redact::printable(&why));
                }
                Outcome::NotReplayable(why) => println!("SKIP {}: {why}", cell.key),
            }
        }
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    if errors > 0 {
        println!("{passed} passed, {failed} failed, {errors} unreadable");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    exit::of_replay("bridle", errors, failed, passed)
}

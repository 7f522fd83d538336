//! Recording-proxy overhead: 100 browsers × 20 messages, each answered by an in-process agent
//! with typing → 5 accumulated streams → stream_end, against the reference hub, run directly,
//! through `bridgewire record bridle`, and (when `mitmdump` is on PATH) through
//! `mitmdump --mode reverse:… -w flows` recording the same WebSocket traffic.
//!
//! Run: `cargo bench --bench bridle_proxy` (results: BENCHMARKS.md); mitmdump is optional
//! (`MITMDUMP=<path>`, skipped when absent). Env: `BENCH_BROWSERS` (100), `BENCH_MESSAGES` (20),
//! `BENCH_ROUNDS` (3: the paths interleaved, medians of the per-round figures),
//! `BENCH_PACE_MS` (200: a second, paced load, each browser one message per period at the
//! earliest, well under saturation; 0 skips it),
//! `BRIDGEWIRE_BASELINE=<another bridgewire binary>` (a second proxy row, e.g. an older build).
//! Prints a Markdown table per load (saturated: latency mostly queueing behind the CPU; paced:
//! the path's own latency) with each proxy's added p50/p99/mean and frames/s ratio against the
//! direct run of the same round, the goals, and the load average.
//!
//! A second baseline, **plain relay**, is this bench re-run as a bare TCP relay in its own
//! process (tokio, two workers like the proxy's runtime, `copy_bidirectional`, no framing and no
//! lanes): what one more hop costs by itself on this machine. At saturation on two cores every
//! hop's wake-ups queue behind the hub and the load, so the proxy's added latency is shown both
//! against direct (the goal) and against the plain relay (what recording adds to the hop).
//!
//! Every browser connects (and gets its `welcome`) before any sends: the message phase, over
//! which both latency and frames/s are measured, then has exactly one message in flight per
//! browser at saturation, on every path; connect time is printed apart. In that closed loop the
//! *mean* latency is in-flight ÷ message rate (Little's law), so a path with the same frames/s
//! has the same mean; p50 and p99 also show how evenly the waiting is shared.

#[path = "common.rs"]
mod common;

use bridgewire::bridle::spawn::{ChildGuard, parse_address};
use bridgewire::bridle::transport::{Options, Socket};
use bridgewire::bridle::{AGENT_NSP, CLIENT_NSP, sign_jwt, text_parts};
use common::{goal, load_average, median};
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret";
const KEY: &str = "bench-key";

fn bin(name: &str) -> PathBuf {
    // benches run from target/<profile>/deps; the binaries sit one level up.
    let exe = std::env::current_exe().expect("exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join(name)
}

fn start(argv: Vec<OsString>, env: &[(&str, String)]) -> (ChildGuard, String) {
    let g = ChildGuard::spawn(&argv, env).expect("spawn");
    let line = g.line(Duration::from_secs(30)).expect("address line");
    let url = parse_address(&line).unwrap_or_else(|| panic!("address in {line:?}"));
    (g, url)
}

struct Result {
    name: String,
    p50: f64,
    p99: f64,
    /// Mean latency: in a closed loop, messages in flight ÷ message rate (Little's law).
    mean: f64,
    frames_per_s: f64,
    /// Seconds from the first message sent to the last answer (every browser connected).
    wall: f64,
    /// Seconds for the browsers to connect (not in `wall` nor in `frames_per_s`).
    connect: f64,
}

async fn agent(url: String, agent_id: String) {
    let mut a = Socket::connect(
        &url,
        AGENT_NSP,
        Some(json!({"apiKey": KEY, "agentId": agent_id})),
        &Options::default(),
    )
    .await
    .expect("agent connects");
    a.emit("register", json!({}));
    while let Ok(m) = a.recv(Duration::from_secs(60)).await {
        if m.name != "message" {
            continue;
        }
        let cid = m.data["clientId"].clone();
        let mid = uuid::Uuid::new_v4().to_string();
        a.emit("typing", json!({"clientId": cid, "ts": 0}));
        let mut acc = String::new();
        for w in ["Lorem ", "ipsum ", "dolor ", "sit ", "amet."] {
            acc.push_str(w);
            a.emit(
                "stream",
                json!({"clientId": cid, "text": acc, "parts": text_parts(&acc), "messageId": mid, "ts": 0}),
            );
        }
        a.emit(
            "stream_end",
            json!({"clientId": cid, "text": acc, "parts": text_parts(&acc), "messageId": mid, "ts": 0}),
        );
    }
}

/// Runs the load: every browser sends `messages` messages, each after the previous one's
/// `stream_end`, back to back (`pace` none: the hub at saturation, so latency there is mostly
/// queueing) or one every `pace` at the earliest (browsers staggered over one period: an offered
/// load well under saturation, so latency there is the path's own).
async fn workload(
    name: &str,
    url: &str,
    browsers: usize,
    messages: usize,
    pace: Option<Duration>,
) -> Result {
    let agent_id = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let agent_task = tokio::spawn(agent(url.to_string(), agent_id.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connecting = Instant::now();
    // Every browser connects before any sends: the message phase then has exactly `browsers`
    // messages in flight (saturated), whatever the connect time of the path, and frames/s is
    // measured over the same phase as the latency.
    let ready = std::sync::Arc::new(tokio::sync::Barrier::new(browsers + 1));
    let mut tasks = Vec::new();
    for i in 0..browsers {
        let url = url.to_string();
        let agent_id = agent_id.clone();
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            let token = sign_jwt(SECRET, &format!("user-{i}"), &[]);
            let opts = Options {
                open_timeout: Duration::from_secs(30),
                ..Options::default()
            };
            let mut b = Socket::connect(
                &url,
                CLIENT_NSP,
                Some(json!({"token": token, "agentId": agent_id})),
                &opts,
            )
            .await
            .expect("browser connects");
            b.recv_named("welcome", Duration::from_secs(30))
                .await
                .expect("welcome");
            ready.wait().await;
            let mut lat = Vec::new();
            let mut frames = 0u64;
            let t0 = tokio::time::Instant::now()
                + pace.map_or(Duration::ZERO, |p| p * i as u32 / browsers as u32);
            for n in 0..messages {
                if let Some(p) = pace {
                    tokio::time::sleep_until(t0 + p * n as u32).await;
                }
                let t = Instant::now();
                b.emit("message", json!({"text": format!("m{n}")}));
                loop {
                    let e = b.recv(Duration::from_secs(30)).await.expect("answer");
                    frames += 1;
                    if e.name == "stream_end" {
                        break;
                    }
                }
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            (lat, frames)
        }));
    }
    ready.wait().await;
    let start = Instant::now();
    let connect = (start - connecting).as_secs_f64();
    let mut lat = Vec::new();
    let mut frames = 0;
    for t in tasks {
        let (l, f) = t.await.expect("browser task");
        lat.extend(l);
        frames += f;
    }
    let wall = start.elapsed().as_secs_f64();
    agent_task.abort();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    // Frames crossing the hub per answer: the agent's 7 in, the browser's 7 out, plus the
    // message both ways.
    let total_frames = frames * 2 + (browsers * messages) as u64 * 2;
    Result {
        name: name.into(),
        p50: pct(0.5),
        p99: pct(0.99),
        mean: lat.iter().sum::<f64>() / lat.len() as f64,
        frames_per_s: total_frames as f64 / wall,
        wall,
        connect,
    }
}

/// One path under test: a name and the URL the load generator connects to.
struct Target {
    name: String,
    url: String,
    /// The proxy process (its CPU time is read from `/proc`).
    guard: Option<ChildGuard>,
}

/// CPU seconds (user + system) used so far by the process or thread whose `stat` file is
/// `path`, and its name.
fn stat_cpu(path: &std::path::Path) -> (String, f64) {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let name = stat
        .split_once('(')
        .and_then(|(_, r)| r.rsplit_once(')'))
        .map_or("", |(n, _)| n)
        .to_string();
    // Fields after the command name (which may hold spaces): utime and stime are 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (name, (ticks(11) + ticks(12)) / hz)
}

/// CPU seconds (user + system) process `pid` has used so far: (all threads, the lane writer
/// thread `bridle-lanes`, when the build names it).
fn cpu_seconds(pid: u32) -> (f64, f64) {
    let total = stat_cpu(format!("/proc/{pid}/stat").as_ref()).1;
    let mut writer = 0.0;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let (name, s) = stat_cpu(&t.path().join("stat"));
            if name == "bridle-lanes" {
                writer += s;
            }
        }
    }
    (total, writer)
}

fn record_bridle(exe: PathBuf, hub: &str, dir: PathBuf, name: &str, extra: &[&str]) -> Target {
    let mut argv: Vec<OsString> = vec![
        exe.into(),
        "record".into(),
        "bridle".into(),
        "--upstream".into(),
        hub.into(),
        "--dir".into(),
        dir.into(),
    ];
    argv.extend(extra.iter().map(Into::into));
    let (g, url) = start(argv, &[]);
    Target {
        name: name.into(),
        url,
        guard: Some(g),
    }
}

/// The plain relay's environment variable: the upstream `host:port` to relay to. Set, this
/// binary is the relay (it prints its address and relays until killed), not the bench.
const RELAY_ENV: &str = "BRIDLE_BENCH_RELAY_TO";

/// A bare TCP relay to `upstream`: the same runtime shape as the proxy's (two workers), Nagle
/// off like the proxy's sockets, bytes copied both ways and nothing else.
fn relay(upstream: &str) -> ! {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        println!("http://{addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            let upstream = upstream.to_string();
            tokio::spawn(async move {
                let Ok(mut hub) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = hub.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut hub).await;
            });
        }
    })
}

fn main() {
    if let Ok(upstream) = std::env::var(RELAY_ENV) {
        relay(&upstream);
    }
    let env_num = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let browsers = env_num("BENCH_BROWSERS", 100);
    let messages = env_num("BENCH_MESSAGES", 20);
    let rounds = env_num("BENCH_ROUNDS", 3).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let env = [
        ("JWT_SECRET", SECRET.to_string()),
        ("BRIDLE_API_KEY", KEY.to_string()),
    ];
    let load_before = load_average();
    let (_hub, hub) = start(
        vec![
            bin("bridle-ref-hub").into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &env,
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let mut targets = vec![
        Target {
            name: "direct".into(),
            url: hub.clone(),
            guard: None,
        },
        record_bridle(
            bin("bridgewire"),
            &hub,
            tmp.path().join("bridgewire"),
            "bridgewire record bridle",
            &[],
        ),
        // What redaction (a JSON scan of every frame, on the writer thread) costs.
        record_bridle(
            bin("bridgewire"),
            &hub,
            tmp.path().join("no-redact"),
            "bridgewire record bridle --no-redact",
            &["--no-redact"],
        ),
    ];
    // The hop alone: this binary as a bare relay (see the module doc).
    let hub_addr = hub
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let (g, url) = start(
        vec![std::env::current_exe().expect("exe").into()],
        &[(RELAY_ENV, hub_addr)],
    );
    targets.push(Target {
        name: "plain relay (a hop, no recording)".into(),
        url,
        guard: Some(g),
    });
    // Another build side by side (e.g. the previous commit's `target/release/bridgewire`).
    if let Some(base) = std::env::var_os("BRIDGEWIRE_BASELINE") {
        let name = format!("baseline ({})", PathBuf::from(&base).display());
        targets.push(record_bridle(
            base.into(),
            &hub,
            tmp.path().join("baseline"),
            &name,
            &[],
        ));
    }
    let mitm = std::env::var("MITMDUMP").unwrap_or_else(|_| "mitmdump".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let flows = tmp.path().join("mitm.flows");
    let mitm_argv: Vec<OsString> = vec![
        mitm.clone().into(),
        "--mode".into(),
        format!("reverse:{hub}").into(),
        "--listen-host".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string().into(),
        "-q".into(),
        "-w".into(),
        flows.clone().into(),
    ];
    match ChildGuard::spawn(&mitm_argv, &[]) {
        Ok(g) => {
            let ready = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(100));
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            if ready {
                targets.push(Target {
                    name: "mitmdump -w (reverse proxy)".into(),
                    url: format!("http://127.0.0.1:{port}"),
                    guard: Some(g),
                });
            } else {
                eprintln!("mitmdump did not listen; skipped");
            }
        }
        Err(e) => eprintln!("mitmdump unavailable ({e}); skipped"),
    }
    // Rounds interleave the paths, so each proxy is compared with the direct run next to it
    // (the machine's load drifts between rounds); figures are medians over the rounds. Each
    // round runs every path at saturation, then every path paced.
    let pace = env_num("BENCH_PACE_MS", 200);
    let pace = (pace > 0).then(|| Duration::from_millis(pace as u64));
    let mut runs: Vec<Vec<Result>> = targets.iter().map(|_| Vec::new()).collect();
    let mut paced: Vec<Vec<Result>> = targets.iter().map(|_| Vec::new()).collect();
    // Each proxy's CPU time (all threads; the lane writer thread) and frames relayed, over all
    // rounds (saturated; paced).
    let mut cpu: Vec<Cpu> = targets.iter().map(|_| Cpu::default()).collect();
    let mut paced_cpu: Vec<Cpu> = targets.iter().map(|_| Cpu::default()).collect();
    for _ in 0..rounds {
        for (load, runs, cpu) in [
            (None, &mut runs, &mut cpu),
            (pace, &mut paced, &mut paced_cpu),
        ] {
            for ((t, r), c) in targets.iter().zip(runs.iter_mut()).zip(cpu.iter_mut()) {
                let pid = t.guard.as_ref().map(ChildGuard::id);
                let before = pid.map_or((0.0, 0.0), cpu_seconds);
                let res = rt.block_on(workload(&t.name, &t.url, browsers, messages, load));
                let after = pid.map_or((0.0, 0.0), cpu_seconds);
                c.total += after.0 - before.0;
                c.writer += after.1 - before.1;
                c.frames += res.frames_per_s * res.wall;
                r.push(res);
            }
            if pace.is_none() {
                break;
            }
        }
    }
    let load_after = load_average();
    println!(
        "{browsers} browsers × {messages} messages, {rounds} round(s), medians; load average before {load_before}, after {load_after}\n"
    );
    println!(
        "At saturation (each browser sends its next message as soon as the last is answered; latency is mostly queueing):\n"
    );
    let sat = table(&runs, &cpu, true);
    let (a50, a99, ratio) = sat[1];
    println!();
    goal(
        "record bridle added p50 at saturation",
        &format!("{a50:+.2} ms"),
        "< 1 ms",
        a50 < 1.0,
    );
    goal(
        "record bridle added p99 at saturation",
        &format!("{a99:+.2} ms"),
        "< 5 ms",
        a99 < 5.0,
    );
    goal(
        "record bridle frames/s at saturation vs direct",
        &format!("{ratio:.2}×"),
        "≥ 0.9×",
        ratio >= 0.9,
    );
    over_relay(&targets, &runs, "at saturation");
    if let Some(p) = pace {
        let direct_rate = median(runs[0].iter().map(|x| x.frames_per_s).collect());
        let offered = browsers as f64 * 1000.0 / p.as_millis() as f64;
        let offered_frames = median(paced[0].iter().map(|x| x.frames_per_s).collect());
        println!(
            "\nPaced (each browser one message every {} ms at the earliest, staggered: {offered:.0} messages/s offered, {offered_frames:.0} frames/s direct = {:.0} % of direct's saturated rate):\n",
            p.as_millis(),
            offered_frames / direct_rate * 100.0
        );
        let rows = table(&paced, &paced_cpu, false);
        let (a50, a99, _) = rows[1];
        println!(
            "\nbridgewire record bridle paced: added p50 {a50:+.2} ms (goal < 1), added p99 {a99:+.2} ms (goal < 5)"
        );
        over_relay(&targets, &paced, "paced");
    }
    let recorded: usize = walk(&tmp.path().join("bridgewire"));
    println!(
        "bridgewire recorded {recorded} lane lines for {rounds} round(s) × {browsers} browsers × {messages} messages{}",
        if pace.is_some() { " × 2 loads" } else { "" }
    );
}

/// Prints what `bridgewire record bridle` adds over the plain relay (the hop without
/// recording): medians over rounds of the differences within each round.
fn over_relay(targets: &[Target], runs: &[Vec<Result>], load: &str) {
    let Some(relay) = targets
        .iter()
        .position(|t| t.name.starts_with("plain relay"))
    else {
        return;
    };
    let (bw, hop) = (&runs[1], &runs[relay]);
    let paired = |f: &dyn Fn(&Result, &Result) -> f64| {
        median(bw.iter().zip(hop).map(|(a, d)| f(a, d)).collect())
    };
    println!(
        "bridgewire record bridle {load}, over the plain relay: p50 {:+.2} ms, p99 {:+.2} ms, mean {:+.2} ms, frames/s {:.2}×",
        paired(&|a, d| a.p50 - d.p50),
        paired(&|a, d| a.p99 - d.p99),
        paired(&|a, d| a.mean - d.mean),
        paired(&|a, d| a.frames_per_s / d.frames_per_s),
    );
}

/// A proxy's CPU seconds over a load's rounds, and the frames it relayed.
#[derive(Default)]
struct Cpu {
    total: f64,
    /// The lane writer thread's share.
    writer: f64,
    frames: f64,
}

/// Prints one load's table; returns each path's (added p50, added p99, frames/s vs direct),
/// each the median over rounds of the difference (ratio) with the direct run of the same round.
fn table(runs: &[Vec<Result>], cpu: &[Cpu], rate: bool) -> Vec<(f64, f64, f64)> {
    if rate {
        println!(
            "| path | p50 ms | p99 ms | mean ms | added p50 ms | added p99 ms | added mean ms | frames/s | frames/s vs direct | proxy CPU µs/frame (writer thread) | messages s | connect s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    } else {
        println!(
            "| path | p50 ms | p99 ms | mean ms | added p50 ms | added p99 ms | added mean ms | proxy CPU µs/frame (writer thread) |"
        );
        println!("|---|---|---|---|---|---|---|---|");
    }
    let direct = &runs[0];
    let mut rows = Vec::new();
    for (r, c) in runs.iter().zip(cpu) {
        let per_frame = if c.total > 0.0 {
            format!(
                "{:.1} ({:.1})",
                c.total / c.frames * 1e6,
                c.writer / c.frames * 1e6
            )
        } else {
            "—".into()
        };
        let paired = |f: &dyn Fn(&Result, &Result) -> f64| {
            median(r.iter().zip(direct).map(|(a, d)| f(a, d)).collect())
        };
        let added50 = paired(&|a, d| a.p50 - d.p50);
        let added99 = paired(&|a, d| a.p99 - d.p99);
        let added_mean = paired(&|a, d| a.mean - d.mean);
        let mean = median(r.iter().map(|x| x.mean).collect());
        let ratio = paired(&|a, d| a.frames_per_s / d.frames_per_s);
        let p50 = median(r.iter().map(|x| x.p50).collect());
        let p99 = median(r.iter().map(|x| x.p99).collect());
        if rate {
            println!(
                "| {} | {p50:.2} | {p99:.2} | {mean:.2} | {added50:+.2} | {added99:+.2} | {added_mean:+.2} | {:.0} | {ratio:.2}× | {per_frame} | {:.2} | {:.2} |",
                r[0].name,
                median(r.iter().map(|x| x.frames_per_s).collect()),
                median(r.iter().map(|x| x.wall).collect()),
                median(r.iter().map(|x| x.connect).collect()),
            );
        } else {
            println!(
                "| {} | {p50:.2} | {p99:.2} | {mean:.2} | {added50:+.2} | {added99:+.2} | {added_mean:+.2} | {per_frame} |",
                r[0].name
            );
        }
        rows.push((added50, added99, ratio));
    }
    rows
}

fn walk(dir: &std::path::Path) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                n += walk(&p);
            } else if let Ok(s) = std::fs::read_to_string(&p) {
                n += s.lines().count();
            }
        }
    }
    n
}

//! Recording-proxy overhead: N concurrent Side Search-like clients against sidebridge-ref
//! directly, through `bridgewire record sidebridge`, and through `mitmdump` recording the same
//! traffic (when `mitmdump` is found: $MITMDUMP or PATH). Prints a Markdown table.
//!
//! Run (results: BENCHMARKS.md):
//!   MITMDUMP=<path to mitmdump> cargo bench --bench sidebridge_proxy
//! Knobs: BENCH_CLIENTS (50), BENCH_SECS (5), BENCH_WARMUP_SECS (1), MITMDUMP (path).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_printing_url(cmd: &mut Command) -> (Proc, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(out);
        let mut l = String::new();
        let _ = r.read_line(&mut l);
        let _ = tx.send(l);
        let mut s = String::new();
        while r.read_line(&mut s).map(|n| n > 0).unwrap_or(false) {
            s.clear();
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("URL")
        .trim()
        .to_string();
    (Proc(child), url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn find_mitmdump() -> Option<String> {
    if let Ok(p) = std::env::var("MITMDUMP") {
        return Some(p);
    }
    std::env::var("PATH")
        .ok()?
        .split(':')
        .map(|d| format!("{d}/mitmdump"))
        .find(|p| std::path::Path::new(p).exists())
}

struct Stats {
    p50: Duration,
    p99: Duration,
    rps: f64,
    errors: usize,
    n: usize,
}

async fn load(url: String, clients: usize, warmup: Duration, secs: Duration) -> Stats {
    let start = Instant::now();
    let measure_from = start + warmup;
    let until = measure_from + secs;
    let lat = Arc::new(std::sync::Mutex::new(Vec::<Duration>::new()));
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, lat, errors) = (url.clone(), lat.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let chat = uuid::Uuid::new_v4().hyphenated().to_string().to_ascii_uppercase();
            let mut history: Vec<String> = Vec::new();
            let mut k = 0u64;
            while Instant::now() < until {
                k += 1;
                let id = uuid::Uuid::new_v4().hyphenated().to_string().to_ascii_uppercase();
                let msg = format!(r#"{{"sources":[],"content":"hello {c} {k} https:\/\/example.com\/x","id":"{id}","from":"user"}}"#);
                // Keep the history bounded (a long chat is not what is measured here).
                if history.len() > 8 {
                    history.drain(..2);
                }
                history.push(msg.clone());
                let body = format!(
                    r#"{{"chatId":"{chat}","messages":[{msg}],"sidebridge":"1.0","history":[{}]}}"#,
                    history.join(",")
                );
                let t = Instant::now();
                let r = client.post(&url).header("content-type", "application/json").body(body).send().await;
                let ok = match r {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                let d = t.elapsed();
                if t >= measure_from && Instant::now() <= until {
                    if ok {
                        lat.lock().unwrap().push(d);
                    } else {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut v = lat.lock().unwrap().clone();
    v.sort();
    let q = |p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Stats {
        p50: q(0.50),
        p99: q(0.99),
        rps: v.len() as f64 / secs.as_secs_f64(),
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        n: v.len(),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("sidebridge_proxy: bench");
        return;
    }
    // `cargo bench` passes --bench; `cargo test --all-targets` does not: do not load the
    // shared machine from a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("sidebridge_proxy: skipped (run it with cargo bench)");
        return;
    }
    let env_num = |k: &str, d: f64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let clients = env_num("BENCH_CLIENTS", 50.0) as usize;
    let secs = Duration::from_secs_f64(env_num("BENCH_SECS", 5.0));
    let warmup = Duration::from_secs_f64(env_num("BENCH_WARMUP_SECS", 1.0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();

    let (_bridge, direct) = spawn_printing_url(
        Command::new(env!("CARGO_BIN_EXE_sidebridge-ref")).args(["--listen", "127.0.0.1:0"]),
    );
    let (_proxy, proxied) = spawn_printing_url(
        Command::new(env!("CARGO_BIN_EXE_bridgewire"))
            .args([
                "record",
                "sidebridge",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &direct,
                "--bridge",
                "bench",
                "--dir",
            ])
            .arg(tmp.path()),
    );
    let mut rows = vec![(
        "direct (sidebridge-ref)".to_string(),
        rt.block_on(load(direct.clone(), clients, warmup, secs)),
    )];
    rows.push((
        "bridgewire record sidebridge".into(),
        rt.block_on(load(proxied, clients, warmup, secs)),
    ));
    let mut _mitm = None;
    // A missing or broken mitmdump skips its row (saying why): the other rows stand alone.
    match find_mitmdump() {
        Some(m) => {
            let port = free_port();
            let spawned = Command::new(&m)
                .args([
                    "--mode",
                    &format!("reverse:{}", direct.trim_end_matches('/')),
                    "--listen-host",
                    "127.0.0.1",
                    "--listen-port",
                    &port.to_string(),
                    "-q",
                    "-w",
                ])
                .arg(tmp.path().join("mitm.flows"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match spawned {
                Err(e) => eprintln!("mitmdump unavailable ({m}: {e}): skipping the mitmproxy row"),
                Ok(child) => {
                    _mitm = Some(Proc(child));
                    let t = Instant::now();
                    let mut listening = false;
                    while !listening && t.elapsed() < Duration::from_secs(30) {
                        listening = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
                        if !listening {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                    if listening {
                        rows.push((
                            "mitmdump -w (reverse proxy)".into(),
                            rt.block_on(load(
                                format!("http://127.0.0.1:{port}/"),
                                clients,
                                warmup,
                                secs,
                            )),
                        ));
                    } else {
                        eprintln!(
                            "mitmdump ({m}) did not listen on port {port} within 30 s: skipping the mitmproxy row"
                        );
                    }
                }
            }
        }
        None => eprintln!("mitmdump not found (set MITMDUMP or PATH): skipping the mitmproxy row"),
    }
    let base = rows[0].1.p50;
    let base99 = rows[0].1.p99;
    println!(
        "clients {clients}, {:.0} s measured after {:.0} s warm-up\n",
        secs.as_secs_f64(),
        warmup.as_secs_f64()
    );
    println!("| target | requests | errors | p50 | p99 | added p50 | added p99 | req/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    let added = |a: Duration, b: Duration| {
        format!("{:+.2} ms", (a.as_secs_f64() - b.as_secs_f64()) * 1000.0)
    };
    for (name, s) in &rows {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.0} |",
            s.n,
            s.errors,
            ms(s.p50),
            ms(s.p99),
            added(s.p50, base),
            added(s.p99, base99),
            s.rps
        );
    }
    if rows.len() == 3 {
        let (b, m) = (&rows[1].1, &rows[2].1);
        println!(
            "\nmitmdump / bridgewire: p50 {:.2}x, p99 {:.2}x, req/s {:.2}x (bridgewire does {:.2}x the requests/s of mitmdump)",
            m.p50.as_secs_f64() / b.p50.as_secs_f64().max(1e-9),
            m.p99.as_secs_f64() / b.p99.as_secs_f64().max(1e-9),
            m.rps / b.rps.max(1e-9),
            b.rps / m.rps.max(1e-9),
        );
    }
    let recorded: usize = walk_count(tmp.path());
    println!("\nbridgewire recorded {recorded} lane lines");
}

fn walk_count(p: &std::path::Path) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                n += walk_count(&path);
            } else if path.extension().is_some_and(|x| x == "ndjson") {
                n += std::fs::read_to_string(&path)
                    .map(|t| t.lines().count())
                    .unwrap_or(0);
            }
        }
    }
    n
}

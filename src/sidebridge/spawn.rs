//! Starting a bridge under test: `-- <bridge command>` or the bundled `sidebridge-ref`.
//!
//! The child announces where it listens on stdout *or* stderr, in any line printed during
//! start-up: a bare URL, `host:port`, or a banner with the URL inside text
//! (`Serving on http://0.0.0.0:8080 (press CTRL+C to quit)`). `--url-pattern REGEX` names the
//! address for bridges that print it some other way (its first capture group, else the whole
//! match). If the bridge exits or prints no address within the startup timeout, the error
//! shows the bridge's last output lines. The child runs as a [`ChildTree`] and is killed (tree
//! and all) when the [`BridgeProcess`] drops, so no run leaves an orphan.

use crate::proc::ChildTree;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The bridge's whole tree is killed when this drops ([`ChildTree`]).
pub struct BridgeProcess {
    child: ChildTree,
    pub url: String,
}

impl std::fmt::Debug for BridgeProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeProcess")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl BridgeProcess {
    /// The bridge's process tree, for reading what it runs ([`crate::proc::tree_image`]).
    pub fn tree(&self) -> &ChildTree {
        &self.child
    }
}

/// Where the bridge under test is.
#[derive(Debug, Clone)]
pub struct BridgeSpec {
    pub url: Option<String>,
    pub command: Vec<OsString>,
    pub key: Option<String>,
    pub startup: Duration,
    /// How to find the URL in the bridge's start-up output (default: [`find_url`]).
    pub url_pattern: Option<regex::Regex>,
}

impl BridgeProcess {
    /// The bridge's exit status if it has exited, allowing it `wait` to be reaped.
    pub fn exited_within(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        self.child.exited_within(wait)
    }
}

impl BridgeSpec {
    /// Resolves to a URL, starting the command (or the bundled reference bridge) if needed.
    pub fn resolve(&self) -> anyhow::Result<(String, Option<BridgeProcess>)> {
        if let Some(u) = &self.url {
            return Ok((u.clone(), None));
        }
        let command = if self.command.is_empty() {
            let Some(exe) = bundled_reference() else {
                anyhow::bail!(
                    "no --url, no bridge command, and the bundled sidebridge-ref is not beside this executable"
                );
            };
            let mut c = vec![exe, "--listen".into(), "127.0.0.1:0".into()];
            if let Some(k) = &self.key {
                c.push("--key".into());
                c.push(k.into());
            }
            c
        } else {
            self.command.clone()
        };
        let p = spawn(&command, self.startup, self.url_pattern.as_ref())?;
        Ok((p.url.clone(), Some(p)))
    }
}

/// The runtime every Side Bridge command runs its exchanges on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The bundled reference bridge beside the running executable.
pub fn bundled_reference() -> Option<OsString> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.with_file_name(format!("sidebridge-ref{}", std::env::consts::EXE_SUFFIX));
    p.exists().then(|| p.into_os_string())
}

pub use crate::util::find_url;
use crate::util::loopback;

fn with_pattern(line: &str, re: &regex::Regex) -> Option<String> {
    let c = re.captures(line)?;
    let s = c.get(1).or_else(|| c.get(0))?.as_str().trim();
    if s.is_empty() {
        return None;
    }
    Some(loopback(
        &if s.starts_with("http://") || s.starts_with("https://") {
            s.to_string()
        } else {
            format!("http://{s}/")
        },
    ))
}

enum Line {
    Out(String),
    Err(String),
    Closed,
}

/// Reads lines (lossy UTF-8, each capped) from a pipe into the channel until it closes.
fn pump(r: impl Read + Send + 'static, tx: mpsc::Sender<Line>, err: bool) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            // A line is capped (a bridge printing megabytes without a newline is still bounded).
            match (&mut r).take(64 * 1024).read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let l = String::from_utf8_lossy(&buf).trim_end().to_string();
                    if tx
                        .send(if err { Line::Err(l) } else { Line::Out(l) })
                        .is_err()
                    {
                        // Start-up is over: keep draining so the child never blocks on a full
                        // pipe; stderr still reaches ours.
                        drain(r, err);
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Line::Closed);
    });
}

fn drain(mut r: BufReader<impl Read>, err: bool) {
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut r).take(64 * 1024).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if err => eprint!("{}", String::from_utf8_lossy(&line)),
            Ok(_) => {}
        }
    }
}

/// Watches a bridge whose address another program answers, for at most
/// [`crate::port_owner::Foreign::WATCH`]: its further output (into `seen`) until it says the
/// address is in use, and its exit. Returns how it exited, if it did.
fn watch(
    rx: &mpsc::Receiver<Line>,
    guard: &mut BridgeProcess,
    seen: &mut std::collections::VecDeque<String>,
    closed: &mut usize,
) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + crate::port_owner::Foreign::WATCH;
    loop {
        if let Ok(Some(st)) = guard.child.try_wait() {
            // What it wrote before exiting may still be in the pipes: read it to their end
            // (bounded), so the refusal can say what it said.
            let drained = Instant::now() + Duration::from_secs(1);
            while *closed < 2 {
                match rx.recv_timeout(drained.saturating_duration_since(Instant::now())) {
                    Ok(Line::Out(l)) | Ok(Line::Err(l)) => {
                        if seen.len() == 20 {
                            seen.pop_front();
                        }
                        seen.push_back(l);
                    }
                    Ok(Line::Closed) => *closed += 1,
                    Err(_) => break,
                }
            }
            return Some(st);
        }
        if Instant::now() >= until
            || seen
                .iter()
                .any(|l| crate::port_owner::says_address_in_use(l))
        {
            return None;
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Line::Out(l)) | Ok(Line::Err(l)) => {
                if seen.len() == 20 {
                    seen.pop_front();
                }
                seen.push_back(l);
            }
            Ok(Line::Closed) => *closed += 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(20))
            }
        }
    }
}

/// Spawns `command` and waits (bounded) for the line that names its address.
pub fn spawn(
    command: &[OsString],
    startup: Duration,
    pattern: Option<&regex::Regex>,
) -> anyhow::Result<BridgeProcess> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty bridge command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildTree::spawn(&mut cmd)
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", prog.to_string_lossy()))?;
    let (tx, rx) = mpsc::channel();
    pump(
        child.stdout.take().expect("piped stdout"),
        tx.clone(),
        false,
    );
    pump(child.stderr.take().expect("piped stderr"), tx, true);
    let mut guard = BridgeProcess {
        child,
        url: String::new(),
    };
    let deadline = Instant::now() + startup;
    let mut seen: std::collections::VecDeque<String> = Default::default();
    let mut closed = 0;
    let why = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Line::Out(l)) | Ok(Line::Err(l)) => {
                let url = match pattern {
                    Some(re) => with_pattern(&l, re),
                    None => find_url(&l),
                };
                if let Some(u) = url {
                    match crate::port_owner::await_listening(&u, deadline) {
                        Ok(reached) => {
                            // A bridge that printed its address before failing to bind a taken
                            // port: what answers there is another program.
                            if let Some(f) = reached
                                .and_then(|a| crate::port_owner::foreign_listener(a, &guard.child))
                            {
                                seen.push_back(l);
                                let exited = watch(&rx, &mut guard, &mut seen, &mut closed);
                                let output: Vec<String> = seen.iter().cloned().collect();
                                if let Some(who) = f.refusal(exited, &output) {
                                    break format!(
                                        "the bridge printed its address {u}, but what listens \
                                         there is not this bridge: {who}. Every verdict would \
                                         judge that program; let the bridge listen on a port of \
                                         its own (port 0, printing the one it got) or stop the \
                                         other program"
                                    );
                                }
                            }
                            guard.url = u;
                            return Ok(guard);
                        }
                        Err(e) => {
                            seen.push_back(l);
                            // The default reading takes the first URL printed; a banner's
                            // docs link can come before the listen line.
                            let hint = if pattern.is_none() {
                                "; if it listens elsewhere (that line is a link, not its \
                                 address), name its address line with --url-pattern REGEX"
                            } else {
                                ""
                            };
                            break format!(
                                "the bridge printed its address {u} but accepted no connection there within {startup:?} ({e}){hint}"
                            );
                        }
                    }
                }
                if seen.len() == 20 {
                    seen.pop_front();
                }
                seen.push_back(l);
            }
            Ok(Line::Closed) => {
                closed += 1;
                if closed == 2 {
                    break "the bridge exited (or closed stdout and stderr) before printing its address".to_string();
                }
            }
            Err(_) => {
                break format!(
                    "the bridge printed no address within {startup:?}{}",
                    pattern
                        .map(|p| format!(" (no line matched --url-pattern {:?})", p.as_str()))
                        .unwrap_or_default()
                );
            }
        }
    };
    // A bridge that closed its pipes is usually exiting: give it a moment to say how.
    let mut status = String::new();
    for _ in 0..if closed == 2 { 20 } else { 1 } {
        if let Ok(Some(s)) = guard.child.try_wait() {
            status = format!(" ({s})");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = if seen.is_empty() {
        "\n  (it printed nothing)".to_string()
    } else {
        let lines: Vec<String> = seen.iter().map(|l| format!("  | {l}")).collect();
        format!("\n  its output:\n{}", lines.join("\n"))
    };
    anyhow::bail!("{why}{status}{output}")
}

#[cfg(test)]
mod tests {
    use super::find_url;

    #[test]
    fn urls_inside_banners() {
        for (line, want) in [
            ("http://127.0.0.1:8080/", Some("http://127.0.0.1:8080/")),
            ("127.0.0.1:8080", Some("http://127.0.0.1:8080/")),
            (
                "INFO: Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
                Some("http://127.0.0.1:8000"),
            ),
            (
                "Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ...",
                Some("http://127.0.0.1:8000/"),
            ),
            (
                "listening at localhost:3000.",
                Some("http://localhost:3000/"),
            ),
            (
                "bridge ready on http://127.0.0.1:9/sb, key required.",
                Some("http://127.0.0.1:9/sb"),
            ),
            (
                "Server listening at http://[::]:8080/bridge",
                Some("http://[::1]:8080/bridge"),
            ),
            ("http://[::1]:9/", Some("http://[::1]:9/")),
            (
                "docs: https://github.com/example/bridge, listening on http://0.0.0.0:7000/sb",
                Some("http://127.0.0.1:7000/sb"),
            ),
            ("see https://example.com/docs", None),
            ("loading model 1.2.3", None),
            ("started in 12:30", None),
        ] {
            assert_eq!(find_url(line).as_deref(), want, "{line}");
        }
    }
}

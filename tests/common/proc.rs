//! Child processes for the tests: peers, bridges, hubs and bridgewire itself, each a separate
//! process over real pipes and sockets, killed and reaped on drop (no orphan), every wait
//! bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child process whose output lines arrive on `lines`; killed and reaped on drop.
pub struct Proc {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

/// Sends each line of `r` to `tx` until the stream or the receiver ends.
fn forward_lines(r: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

impl Proc {
    /// Starts `cmd` with stdin held open (a piped stdin nobody writes) and its stdout lines on
    /// `lines`; stderr as `cmd` says (inherited by default).
    pub fn spawn(mut cmd: Command) -> Proc {
        Proc::start(&mut cmd, false)
    }

    /// Like [`Proc::spawn`], with stderr's lines on `lines` too (a server that prints its
    /// banner on stderr, as many do).
    pub fn spawn_watching_stderr(cmd: &mut Command) -> Proc {
        Proc::start(cmd, true)
    }

    fn start(cmd: &mut Command, stderr: bool) -> Proc {
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
        if stderr {
            cmd.stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("spawn");
        let (tx, rx) = mpsc::channel();
        forward_lines(child.stdout.take().expect("stdout"), tx.clone());
        if stderr {
            forward_lines(child.stderr.take().expect("stderr"), tx);
        }
        Proc { child, lines: rx }
    }

    /// The first output line (15 s at most).
    pub fn first_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(15))
            .expect("the child printed no first line within 15 s")
    }

    /// The first `http://` URL in its output (`within` at most): from `http://` to the next
    /// whitespace.
    pub fn url(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("the child printed no http:// URL within {within:?}"));
            if let Some(i) = line.find("http://") {
                return line[i..]
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .collect();
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server process and the URL it printed; derefs to its [`Proc`].
pub struct Served {
    pub proc: Proc,
    pub url: String,
}

impl std::ops::Deref for Served {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl std::ops::DerefMut for Served {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

/// Starts `cmd` and waits (30 s at most) for a line with an `http://` URL on its stdout or
/// stderr.
pub fn spawn_url(cmd: &mut Command) -> Served {
    let proc = Proc::spawn_watching_stderr(cmd);
    let url = proc.url(Duration::from_secs(30));
    Served { proc, url }
}

/// Starts `cmd`, whose first stdout line must be its URL (bridgewire's proxies and the
/// reference servers say so; 15 s at most).
pub fn spawn_url_first(cmd: &mut Command) -> Served {
    let proc = Proc::start(cmd, false);
    let url = proc.first_line().trim().to_string();
    assert!(
        url.starts_with("http://"),
        "the first line is not a URL: {url:?}"
    );
    Served { proc, url }
}

/// Waits for `child` to exit, `within` at most: its status, or `None` when it is still running
/// (the caller decides: kill, or fail naming what did not end).
pub fn wait_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` with `input` on its stdin (then closed) to its end, bounded: its exit status and
/// stdout. Past `within` it is killed and the test fails; stderr as `cmd` says.
pub fn run_with_input(cmd: &mut Command, input: &[u8], within: Duration) -> (ExitStatus, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // A writer thread: a child that does not read cannot block the test.
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let Some(status) = wait_within(&mut child, within) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} did not end within {within:?}");
    };
    let out = rx
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("{cmd:?} ended but its stdout stayed open (a child of it?)"));
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// Starts `cmd` with SIGINT at its default disposition. A runner that starts the tests with
/// SIGINT ignored (a background job of a non-interactive shell, `nohup`) would pass that on,
/// and bridgewire by design keeps ignoring a SIGINT ignored at start: a test that interrupts a
/// command to see it stop must not depend on how the tests themselves were started.
pub fn sigint_as_default(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// What a finished command printed: its stdout, then its stderr, as text.
pub fn output_text(out: &Output) -> String {
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

/// Runs `cmd` to its end with no stdin and its stderr discarded: its exit code (-1 when a
/// signal ended it) and its stdout as text.
pub fn code_and_stdout(cmd: &mut Command) -> (i32, String) {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("the command runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs `jobs` three at a time (each mostly waits on a peer; the machine has 2 cores), results in
/// the jobs' order.
pub fn three_at_a_time<T: Send>(jobs: Vec<Box<dyn FnOnce() -> T + Send + '_>>) -> Vec<T> {
    let mut jobs = jobs;
    let mut out = Vec::new();
    while !jobs.is_empty() {
        let batch: Vec<_> = jobs.drain(..jobs.len().min(3)).collect();
        out.extend(std::thread::scope(|s| {
            let handles: Vec<_> = batch.into_iter().map(|j| s.spawn(j)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        }));
    }
    out
}

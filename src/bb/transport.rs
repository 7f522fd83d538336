//! A spawned bridge process over real pipes: line framing with bounded buffers, bounded waits,
//! captured stderr, and its whole process group killed at the end (and on drop).
//!
//! Reusable by anything that drives a line-delimited stdio program (the live kit, replays):
//!
//! * the child is a [`crate::proc::ChildTree`]: its own process group, dies with bridgewire, and
//!   its whole tree (grandchildren that called `setsid()` included) is killed at the end, on drop
//!   and on SIGINT/SIGTERM ([`crate::signals`]);
//! * stdout is read by a thread into a queue of [`Incoming`] items: a line longer than
//!   [`Limits::max_line`] is discarded (reported as [`Incoming::Oversized`]), a line that is not
//!   UTF-8 is reported as [`Incoming::NonUtf8`], and once [`Limits::max_total`] bytes were
//!   received the rest is drained and counted but not queued ([`Incoming::Flooded`], once);
//! * stdin is written by a thread, so a bridge that never reads cannot block the caller;
//! * stderr keeps the last [`Limits::stderr_tail`] bytes;
//! * every receive takes a deadline; nothing here waits unboundedly.

use crate::proc::ChildTree;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Buffer bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The longest line kept (bytes, without the newline).
    pub max_line: usize,
    /// Total stdout bytes queued over the process's life; the rest is drained and dropped.
    pub max_total: usize,
    /// Bytes of stderr kept (the tail).
    pub stderr_tail: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_line: 64 << 20,
            max_total: 256 << 20,
            stderr_tail: 64 << 10,
        }
    }
}

/// One thing read from the bridge's stdout.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A complete UTF-8 line without its `\n` (a trailing `\r` is kept).
    Line(String),
    /// A line that is not valid UTF-8: its length and its first (up to 80) raw bytes.
    NonUtf8 { len: usize, head: Vec<u8> },
    /// A line longer than the limit, discarded: the bytes seen (at least `max_line + 1`).
    Oversized { len: usize },
    /// The total limit was reached; later output is drained and dropped.
    Flooded { total: usize },
    /// Stdout closed. An unterminated last line is delivered before this, as a line.
    Eof,
}

/// Bytes (payload plus a per-item overhead) the stdout queue holds before the reader stops
/// reading: the bridge then blocks on its own write, as it would with a slow runtime. This is
/// what bounds `check bb`'s memory however many lines a bridge writes.
pub const QUEUE_BYTES: usize = 8 << 20;
const ITEM_OVERHEAD: usize = 64;

fn item_bytes(item: &Incoming) -> usize {
    ITEM_OVERHEAD
        + match item {
            Incoming::Line(s) => s.len(),
            Incoming::NonUtf8 { head, .. } => head.len(),
            _ => 0,
        }
}

#[derive(Default)]
struct Inbox {
    queue: VecDeque<Incoming>,
    /// [`item_bytes`] of what `queue` holds.
    queued: usize,
    /// The reader waits for room.
    reader_waiting: bool,
    /// The bridge was killed: the reader stops waiting for room.
    closed: bool,
    eof: bool,
    /// Bytes of the current line read so far (no newline yet).
    partial: usize,
}

type Shared = Arc<(Mutex<Inbox>, Condvar)>;

/// A running bridge process.
pub struct Bridge {
    child: ChildTree,
    pid: u32,
    stdin: Option<mpsc::Sender<Vec<u8>>>,
    write_failed: Arc<Mutex<Option<String>>>,
    inbox: Shared,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    status: Option<ExitStatus>,
    killed: bool,
    limits: Limits,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bridge {
    /// Spawns `argv` (program and arguments) with piped stdio in its own process group.
    pub fn spawn(argv: &[OsString], limits: Limits) -> std::io::Result<Bridge> {
        let Some((program, args)) = argv.split_first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "empty bridge command",
            ));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ChildTree::spawn(&mut cmd)?;
        let pid = child.id();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut stdin = child.stdin.take().expect("piped stdin");

        let inbox: Shared = Arc::new((Mutex::new(Inbox::default()), Condvar::new()));
        let reader_inbox = Arc::clone(&inbox);
        std::thread::Builder::new()
            .name("bridge-stdout".into())
            .spawn(move || read_stdout(stdout, limits, reader_inbox))?;

        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail_w = Arc::clone(&tail);
        std::thread::Builder::new()
            .name("bridge-stderr".into())
            .spawn(move || read_stderr(stderr, limits.stderr_tail, tail_w))?;

        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let write_failed = Arc::new(Mutex::new(None));
        let wf = Arc::clone(&write_failed);
        std::thread::Builder::new()
            .name("bridge-stdin".into())
            .spawn(move || {
                for buf in rx {
                    if let Err(e) = stdin.write_all(&buf).and_then(|_| stdin.flush()) {
                        *lock(&wf) = Some(e.to_string());
                        return;
                    }
                }
            })?;

        Ok(Bridge {
            child,
            pid,
            stdin: Some(tx),
            write_failed,
            inbox,
            stderr: tail,
            status: None,
            killed: false,
            limits,
        })
    }

    /// The bridge's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The bridge's process tree, for reading what it runs ([`crate::proc::tree_image`]).
    pub fn tree_mark(&self) -> &crate::proc::TreeMark {
        self.child.mark()
    }

    /// Queues one line (a `\n` is appended) for the bridge's stdin. Never blocks.
    pub fn send_line(&self, line: &str) {
        if let Some(tx) = &self.stdin {
            let mut buf = Vec::with_capacity(line.len() + 1);
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
            let _ = tx.send(buf);
        }
    }

    /// Closes the bridge's stdin (after queued lines are written).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Why writing to stdin failed, if it did (the bridge closed its stdin or exited).
    pub fn write_error(&self) -> Option<String> {
        lock(&self.write_failed).clone()
    }

    /// The next item from stdout, waiting until `deadline` at most; `None` on timeout. After
    /// [`Incoming::Eof`] was delivered, returns `None` at once.
    pub fn recv(&self, deadline: Instant) -> Option<Incoming> {
        let (m, cv) = &*self.inbox;
        let mut inbox = lock(m);
        loop {
            if let Some(item) = inbox.queue.pop_front() {
                inbox.queued = inbox.queued.saturating_sub(item_bytes(&item));
                if inbox.reader_waiting && inbox.queued <= QUEUE_BYTES / 2 {
                    cv.notify_all();
                }
                return Some(item);
            }
            if inbox.eof {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            inbox = cv
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Bytes of an unterminated stdout line read so far (0 when the last line ended).
    pub fn partial_line_len(&self) -> usize {
        lock(&self.inbox.0).partial
    }

    /// The buffer bounds this bridge runs with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether stdout closed and everything was delivered.
    pub fn drained(&self) -> bool {
        let inbox = lock(&self.inbox.0);
        inbox.eof && inbox.queue.is_empty()
    }

    /// The exit status, if the bridge exited (non-blocking).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `timeout` for the bridge to exit.
    pub fn wait_status(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The captured stderr tail, lossily decoded.
    pub fn stderr_tail(&self) -> String {
        let tail = lock(&self.stderr);
        let (a, b) = tail.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Kills the bridge's whole tree and reaps the bridge. Idempotent.
    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        self.stdin = None;
        {
            let (m, cv) = &*self.inbox;
            lock(m).closed = true;
            cv.notify_all();
        }
        if let Some(s) = self.child.kill_tree() {
            self.status.get_or_insert(s);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Pids of the processes in process group `pgid` that are not zombies (from `/proc`).
pub fn live_group_members(pgid: u32) -> Vec<u32> {
    crate::proc::all_processes()
        .into_iter()
        .filter(|p| p.state != b'Z' && p.pgrp == pgid)
        .map(|p| p.pid)
        .collect()
}

fn push(inbox: &Shared, item: Incoming) {
    let (m, cv) = &**inbox;
    let mut g = lock(m);
    g.queued += item_bytes(&item);
    g.queue.push_back(item);
    cv.notify_all();
}

/// Blocks the reader while the queue is over [`QUEUE_BYTES`] (until the consumer takes half of
/// it, or the bridge is killed).
fn wait_for_room(inbox: &Shared) {
    let (m, cv) = &**inbox;
    let mut g = lock(m);
    while g.queued > QUEUE_BYTES && !g.closed {
        g.reader_waiting = true;
        g = cv
            .wait_timeout(g, Duration::from_millis(200))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    g.reader_waiting = false;
}

fn read_stdout(mut stdout: impl Read, limits: Limits, inbox: Shared) {
    let mut buf = vec![0u8; 64 << 10];
    let mut line: Vec<u8> = Vec::new();
    let mut line_len = 0usize; // bytes of the current line, kept or not
    let mut total = 0usize;
    let mut flooded = false;
    let finish = |line: &mut Vec<u8>, len: usize, flooded: bool| -> Option<Incoming> {
        if flooded {
            line.clear();
            return None;
        }
        let item = if len > limits.max_line {
            Incoming::Oversized { len }
        } else {
            match String::from_utf8(std::mem::take(line)) {
                Ok(s) => Incoming::Line(s),
                Err(e) => {
                    let bytes = e.into_bytes();
                    let end = bytes.len().min(80);
                    Incoming::NonUtf8 {
                        len: bytes.len(),
                        head: bytes[..end].to_vec(),
                    }
                }
            }
        };
        line.clear();
        Some(item)
    };
    loop {
        let n = match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut chunk = &buf[..n];
        total = total.saturating_add(n);
        while !chunk.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    let part = &chunk[..i];
                    line_len += part.len();
                    if !flooded && line_len <= limits.max_line {
                        line.extend_from_slice(part);
                    }
                    if let Some(item) = finish(&mut line, line_len, flooded) {
                        push(&inbox, item);
                    }
                    line_len = 0;
                    chunk = &chunk[i + 1..];
                }
                None => {
                    line_len += chunk.len();
                    if !flooded && line_len <= limits.max_line {
                        line.extend_from_slice(chunk);
                    } else {
                        line = Vec::new(); // release the memory of a discarded line
                    }
                    chunk = &[];
                }
            }
        }
        lock(&inbox.0).partial = line_len;
        wait_for_room(&inbox);
        if !flooded && total > limits.max_total {
            flooded = true;
            line = Vec::new();
            push(&inbox, Incoming::Flooded { total });
        }
    }
    if line_len > 0
        && let Some(item) = finish(&mut line, line_len, flooded)
    {
        push(&inbox, item);
    }
    let (m, cv) = &*inbox;
    let mut g = lock(m);
    g.queue.push_back(Incoming::Eof);
    g.eof = true;
    g.partial = 0;
    cv.notify_all();
}

fn read_stderr(mut stderr: impl Read, cap: usize, tail: Arc<Mutex<VecDeque<u8>>>) {
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let mut t = lock(&tail);
                t.extend(&buf[..n]);
                while t.len() > cap {
                    t.pop_front();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, limits: Limits) -> Bridge {
        Bridge::spawn(&["sh".into(), "-c".into(), script.into()], limits).expect("spawn sh")
    }

    fn collect(b: &Bridge) -> Vec<Incoming> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        while let Some(i) = b.recv(deadline) {
            let eof = i == Incoming::Eof;
            out.push(i);
            if eof {
                break;
            }
        }
        out
    }

    #[test]
    fn frames_lines_non_utf8_and_unterminated_tail() {
        let b = sh(r"printf 'a\nb\r\n\377\376\nlast'", Limits::default());
        let got = collect(&b);
        assert_eq!(got[0], Incoming::Line("a".into()));
        assert_eq!(got[1], Incoming::Line("b\r".into()));
        assert!(
            matches!(got[2], Incoming::NonUtf8 { len: 2, .. }),
            "{got:?}"
        );
        assert_eq!(got[3], Incoming::Line("last".into()));
        assert_eq!(got[4], Incoming::Eof);
    }

    #[test]
    fn oversized_line_is_discarded_and_reading_continues() {
        let limits = Limits {
            max_line: 1000,
            ..Limits::default()
        };
        let b = sh(
            "head -c 5000 /dev/zero | tr '\\0' x; printf '\\nok\\n'",
            limits,
        );
        let got = collect(&b);
        assert_eq!(got[0], Incoming::Oversized { len: 5000 });
        assert_eq!(got[1], Incoming::Line("ok".into()));
    }

    #[test]
    fn flood_is_bounded() {
        let limits = Limits {
            max_line: 100,
            max_total: 100_000,
            stderr_tail: 10,
        };
        let b = sh(
            "yes hello | head -c 10000000; echo >&2 some-stderr-text",
            limits,
        );
        let got = collect(&b);
        assert!(got.iter().any(|i| matches!(i, Incoming::Flooded { .. })));
        assert!(got.len() < 40_000, "{}", got.len());
        assert_eq!(got.last(), Some(&Incoming::Eof));
    }

    #[test]
    fn recv_times_out_and_kill_reaps_the_group() {
        let mut b = sh("sleep 30 & sleep 30", Limits::default());
        let t0 = Instant::now();
        assert_eq!(b.recv(Instant::now() + Duration::from_millis(100)), None);
        assert!(t0.elapsed() < Duration::from_secs(5));
        let pgid = b.pid() as libc::pid_t;
        b.kill();
        let mut left = live_group_members(pgid as u32);
        for _ in 0..200 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            left = live_group_members(pgid as u32);
        }
        assert!(left.is_empty(), "process group {pgid} still has {left:?}");
    }
}

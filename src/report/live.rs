//! A live reporter: a `check` hands it each verdict as it is reached, and it prints one line
//! per verdict at once (on and off a terminal, as nextest does), drives a progress bar only
//! when stderr is a terminal, and keeps the verdicts so far so that an interrupted run
//! (SIGINT/SIGTERM/SIGHUP) can still print its partial summary and write its report files,
//! marked as interrupted.
//!
//! Any check adopts it in three calls: [`Live::start`] with the run's metadata, report files
//! and output mode; [`Live::verdict`] per verdict (from any thread); [`Live::finish`] at the
//! end. With [`crate::signals::install`] called first, a signal runs [`Live::interrupt`]
//! (registered as an `on_signal` hook, so before the targets' process trees are killed: the
//! verdicts are frozen first, and the dying targets add no misleading ones).

use super::{Report, ReportFiles, RunMeta};
use crate::rule::{Policy, Verdict};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where verdict lines go as they are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// stdout (the text report: the final tail follows them).
    Stdout,
    /// stderr (stdout carries a machine-readable document).
    Stderr,
}

struct State {
    report: Report,
    files: ReportFiles,
    lines: Lines,
    bar: Option<indicatif::ProgressBar>,
    /// Set by `finish` or `interrupt`: later verdicts are dropped, nothing is printed twice.
    closed: bool,
    /// When the previous verdict was reached (per-verdict time).
    last: Instant,
    started: Instant,
    /// The `on_signal` hook; dropped when the run finishes.
    hook: Option<crate::signals::Registration>,
    /// Verdict lines are not printed as reached (the command prints its own report at the
    /// end); an interrupt prints every verdict reached, then the tail.
    held: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A handle on the run in progress; cheap to clone and share across threads.
#[derive(Clone)]
pub struct Live {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Live {
    /// Starts reporting a run. `expected` sizes the progress bar (shown only when stderr is a
    /// terminal; it ticks on its own, so it never looks stalled).
    pub fn start(
        meta: RunMeta,
        policy: Policy,
        files: ReportFiles,
        lines: Lines,
        expected: u64,
    ) -> Live {
        Live::begin(meta, policy, files, lines, expected, false)
    }

    /// Like [`Live::start`] for a check that prints its own report at the end: verdicts are
    /// kept as reached but not printed, and no progress bar is drawn; only an interrupt prints
    /// (every verdict reached, then the partial summary) and writes the report files.
    pub fn start_held(meta: RunMeta, policy: Policy, files: ReportFiles, lines: Lines) -> Live {
        Live::begin(meta, policy, files, lines, 0, true)
    }

    fn begin(
        meta: RunMeta,
        policy: Policy,
        files: ReportFiles,
        lines: Lines,
        expected: u64,
        held: bool,
    ) -> Live {
        let bar = (!held && std::io::stderr().is_terminal()).then(|| {
            let pb = indicatif::ProgressBar::new(expected);
            pb.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} {elapsed:>4} [{pos}/{len}] {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            pb.enable_steady_tick(Duration::from_millis(120));
            pb
        });
        let state = Arc::new(Mutex::new(State {
            report: Report {
                meta,
                verdicts: Vec::new(),
                policy,
            },
            files,
            lines,
            bar,
            closed: false,
            last: Instant::now(),
            started: Instant::now(),
            hook: None,
            held,
        }));
        let live = Live { state };
        let on_signal = live.clone();
        let hook = crate::signals::on_signal(move |sig| {
            on_signal.interrupt(sig);
        });
        lock(&live.state).hook = Some(hook);
        live
    }

    /// Records a verdict and prints its line now. A verdict without a duration gets the time
    /// since the previous one (checks run their rules one after another).
    pub fn verdict(&self, v: &Verdict) {
        let mut st = lock(&self.state);
        if st.closed {
            return;
        }
        let now = Instant::now();
        let mut v = v.clone();
        if v.duration_ms.is_none() {
            v = v.with_duration(now - st.last);
        }
        st.last = now;
        if st.held {
            st.report.verdicts.push(v);
            return;
        }
        let text = super::terminal::verdict_lines(&st.report, &v);
        let lines = st.lines;
        let emit = || emit(lines, &text);
        match &st.bar {
            Some(pb) => {
                pb.suspend(emit);
                pb.inc(1);
                pb.set_message(v.id.clone());
            }
            None => emit(),
        }
        st.report.verdicts.push(v);
    }

    /// Grows the progress bar by `n` expected steps (a new phase: recorded cells).
    pub fn expect_more(&self, n: u64) {
        if let Some(pb) = &lock(&self.state).bar {
            pb.inc_length(n);
        }
    }

    /// Advances the bar by `n` steps that produced no verdict, and names the current phase.
    pub fn advance(&self, n: u64, phase: &str) {
        if let Some(pb) = &lock(&self.state).bar {
            pb.inc(n);
            pb.set_message(phase.to_string());
        }
    }

    /// Ends the run normally: clears the bar and hands back the verdicts reached, in order.
    /// `None` when a signal already ended it (the process is exiting).
    pub fn finish(self) -> Option<Report> {
        let mut st = lock(&self.state);
        if st.closed {
            return None;
        }
        st.closed = true;
        if let Some(pb) = st.bar.take() {
            pb.finish_and_clear();
        }
        let hook = st.hook.take();
        let mut report = st.report.clone();
        report.meta.duration_ms = st.started.elapsed().as_millis() as u64;
        drop(st);
        drop(hook);
        Some(report)
    }

    /// Ends the run because of signal `sig`: freezes its verdicts, prints the partial tail
    /// and summary (to stdout after streamed lines, else stderr) and writes the report files
    /// marked as interrupted. Returns whether the run was still in progress. (The signal
    /// handler then kills the targets and exits 128 + sig.)
    pub fn interrupt(&self, sig: i32) -> bool {
        let (report, files, lines, held) = {
            let mut st = lock(&self.state);
            if st.closed {
                return false;
            }
            st.closed = true;
            if let Some(pb) = st.bar.take() {
                pb.finish_and_clear();
            }
            let mut r = st.report.clone();
            r.meta.interrupted = Some(signal_name(sig));
            r.meta.duration_ms = st.started.elapsed().as_millis() as u64;
            drop(st.hook.take());
            (r, st.files.clone(), st.lines, st.held)
        };
        let text = if held {
            super::terminal::render(&report)
        } else {
            super::terminal::tail(&report)
        };
        emit(lines, &text);
        if let Err(e) = files.write(&report) {
            eprintln!("bridgewire: {e}");
        }
        true
    }
}

/// A check's verdict list that also hands each verdict to a live reporter as it is pushed, so
/// an interrupted run reports what it reached. Derefs to the list for everything else (a
/// verdict changed after it was pushed is reported as it was pushed).
pub struct VerdictLog {
    list: Vec<Verdict>,
    live: Option<Live>,
}

impl VerdictLog {
    pub fn new(live: Option<Live>) -> VerdictLog {
        VerdictLog {
            list: Vec::new(),
            live,
        }
    }

    pub fn push(&mut self, v: Verdict) {
        if let Some(l) = &self.live {
            l.verdict(&v);
        }
        self.list.push(v);
    }

    pub fn insert(&mut self, at: usize, v: Verdict) {
        if let Some(l) = &self.live {
            l.verdict(&v);
        }
        self.list.insert(at, v);
    }

    pub fn extend(&mut self, vs: impl IntoIterator<Item = Verdict>) {
        for v in vs {
            self.push(v);
        }
    }

    pub fn into_vec(self) -> Vec<Verdict> {
        self.list
    }
}

impl std::ops::Deref for VerdictLog {
    type Target = Vec<Verdict>;
    fn deref(&self) -> &Vec<Verdict> {
        &self.list
    }
}

impl std::ops::DerefMut for VerdictLog {
    fn deref_mut(&mut self) -> &mut Vec<Verdict> {
        &mut self.list
    }
}

fn emit(lines: Lines, text: &str) {
    let _ = match lines {
        Lines::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes()).and_then(|_| o.flush())
        }
        Lines::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
    };
}

/// The signal's name as reports show it.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_writes_partial_reports_marked_as_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("r.md");
        let files = ReportFiles {
            markdown: Some(md.clone()),
            ..Default::default()
        };
        let meta = RunMeta {
            protocol: "bb".into(),
            ..Default::default()
        };
        let live = Live::start(meta, Policy::default(), files, Lines::Stderr, 3);
        live.verdict(&Verdict::pass("rpc/unknown-method"));
        live.verdict(&Verdict::fail("rpc/invalid-params", "got result {}"));
        assert!(live.interrupt(libc::SIGINT));
        assert!(!live.interrupt(libc::SIGINT));
        // Later verdicts and finish are no-ops: the signal ended the run.
        live.verdict(&Verdict::pass("handshake/initialize"));
        assert!(live.finish().is_none());
        let text = std::fs::read_to_string(&md).unwrap();
        assert!(text.contains("Interrupted by SIGINT"), "{text}");
        assert!(text.contains("1 passed, 1 failed"), "{text}");
        assert!(!text.contains("`handshake/initialize`"), "{text}");
    }
}

//! Child processes: the one place bridgewire starts, tracks and kills them.
//!
//! # The API
//!
//! * [`ChildTree::spawn`]`(&mut Command)` starts a child as the root of a *tree*: it leads its own
//!   process group (a terminal's Ctrl-C reaches bridgewire, which decides, rather than reaching
//!   both), dies with bridgewire (`PR_SET_PDEATHSIG`), and carries a marker variable
//!   (`BRIDGEWIRE_TREE_<pid>_<n>=1`) that every descendant inherits. A `ChildTree` derefs to the
//!   [`std::process::Child`], so `stdin.take()`, `try_wait()` and `wait()` work as usual.
//! * Dropping it, or [`ChildTree::kill_tree`], kills the **whole tree**: the process group, every
//!   descendant found through `/proc` parent links, and every process carrying the marker, which
//!   finds grandchildren that called `setsid()` (they leave the group) even after their parent
//!   exited. bridgewire is a child subreaper (`PR_SET_CHILD_SUBREAPER`) while a tree is alive, so
//!   such orphans are re-parented to it rather than to init; the killed ones are reaped here.
//!   Killing repeats until no member is left (bounded), so a tree that forks while dying goes too.
//! * Every live tree is registered with [`crate::signals`]: on SIGINT/SIGTERM the signal handler
//!   kills them all before bridgewire exits (a tree is never left behind by a signal).
//!
//! `record bb` / `record child` use [`isolate`] and [`forward_signals`] instead: there the child is
//! the bridge itself, whose exit status bridgewire passes on ([`exit_like`]).
//!
//! Either way a child starts with the soft `RLIMIT_NOFILE` bridgewire itself started with, even
//! after [`raise_open_file_limit`] (the Bridle proxy's, for its lane files) raised bridgewire's.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Signals forwarded to a wrapped child.
pub const FORWARDED_SIGNALS: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Prefix of the marker variable every tree's processes carry.
pub const TREE_ENV_PREFIX: &str = "BRIDGEWIRE_TREE_";

/// How long [`kill_marked`] keeps killing a tree that keeps forking.
const KILL_BOUND: Duration = Duration::from_secs(2);

/// The marker of a wrapped child ([`isolate`]): `BRIDGEWIRE_TREE_<bridgewire pid>_wrapped`.
fn wrapped_var() -> String {
    format!("{TREE_ENV_PREFIX}{}_wrapped", std::process::id())
}

/// The signal that made [`forward_signals`] kill a wrapped child that outlived its grace.
static FORCED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Makes `cmd` (a wrapped child: `record bb`'s bridge, `record child`'s provider) start in its
/// own process group, die when bridgewire dies, and carry a marker every descendant inherits,
/// so [`exit_like`] finds what it left behind (a grandchild that called `setsid()` too).
pub fn isolate(cmd: &mut Command) {
    cmd.env(wrapped_var(), "1");
    isolate_group(cmd);
}

/// Makes `cmd` start in its own process group, die when bridgewire dies, and get back the soft
/// open-file limit bridgewire started with.
fn isolate_group(cmd: &mut Command) {
    // SAFETY: setpgid, prctl, getrlimit and setrlimit are async-signal-safe system calls that
    // touch only the child; the atomic load does not allocate or lock.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            let soft = NOFILE_SOFT_AT_START.load(Ordering::Relaxed);
            if soft != NOT_RAISED {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur != soft {
                    lim.rlim_cur = soft.min(lim.rlim_max);
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
            }
            Ok(())
        });
    }
}

/// [`NOFILE_SOFT_AT_START`] while bridgewire's own soft limit was never raised.
const NOT_RAISED: u64 = u64::MAX;

/// The soft `RLIMIT_NOFILE` bridgewire had before [`raise_open_file_limit`] first raised it:
/// children get it back (a program may size tables by it, or rely on `select`'s 1 024).
static NOFILE_SOFT_AT_START: AtomicU64 = AtomicU64::new(NOT_RAISED);

/// Raises bridgewire's soft `RLIMIT_NOFILE` to its hard limit, capped at `cap`, and returns the
/// soft limit now in force (`None` when it cannot be read). Children spawned through this
/// module afterwards still start with the soft limit bridgewire had before the first raise.
pub fn raise_open_file_limit(cap: u64) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        let want = lim.rlim_max.min(cap);
        if lim.rlim_cur < want {
            // Remembered before raising, so a child spawned meanwhile on another thread gets
            // the original limit either way (restoring an unraised limit changes nothing).
            let _ = NOFILE_SOFT_AT_START.compare_exchange(
                NOT_RAISED,
                lim.rlim_cur,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = want;
            }
        }
    }
    Some(lim.rlim_cur)
}

/// Forwards terminating signals to the wrapped child `pid` (started with [`isolate`]) from a
/// background thread, for the life of the process: to its process group, as a terminal's
/// Ctrl-C reaches a foreground job (a shell and the command it waits for both get it). A child
/// still running [`crate::signals::GRACE`] after the first SIGINT/SIGTERM/SIGHUP is killed with
/// its whole tree, and [`exit_like`] then exits `128 + signal`: the command stops within 2 s.
pub fn forward_signals(pid: u32) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new(FORWARDED_SIGNALS)?;
    std::thread::Builder::new()
        .name("signal-forward".into())
        .spawn(move || {
            let mut grace_started = false;
            for sig in signals.forever() {
                // SAFETY: kill(2) on the child's group (it leads one), else on the child.
                unsafe {
                    if libc::kill(-(pid as libc::pid_t), sig) != 0 {
                        libc::kill(pid as libc::pid_t, sig);
                    }
                }
                let terminating = matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP);
                if terminating && !grace_started {
                    grace_started = true;
                    let _ = std::thread::Builder::new()
                        .name("signal-grace".into())
                        .spawn(move || {
                            std::thread::sleep(crate::signals::GRACE);
                            // The child may have ended on the signal and left processes
                            // holding its stdout (the recorder waits for that pipe): the
                            // whole tree goes either way.
                            let root_alive = proc_stat(pid).is_some_and(|s| s.state != b'Z');
                            if root_alive {
                                FORCED.store(sig, Ordering::SeqCst);
                            }
                            kill_marked(
                                &TreeMark {
                                    pgid: if root_alive { pid } else { 0 },
                                    var: wrapped_var(),
                                },
                                None,
                            );
                        });
                }
            }
        })?;
    Ok(())
}

/// Sends SIGKILL to the process group `pgid` (a child started with [`isolate`] leads a group
/// whose id is its pid; the caller must not have reaped it yet, or the id may be reused).
pub fn kill_group_id(pgid: u32) {
    // SAFETY: kill(2) with a negative pid targets that process group only.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), libc::SIGKILL);
    }
}

/// Kills a child's whole process group, then reaps the child.
pub fn kill_group(child: &mut Child) {
    kill_group_id(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills what a wrapped child ([`isolate`]) left running after it exited: its marker's
/// carriers (a setsid grandchild too). Called once the child was reaped, so no group id is
/// used (it may have been reused).
pub fn kill_wrapped_leftovers() {
    // pgid 0: [`kill_marked`] then looks for marked processes only.
    kill_marked(
        &TreeMark {
            pgid: 0,
            var: wrapped_var(),
        },
        None,
    );
}

/// Ends bridgewire the way the wrapped child ended: same exit code, or the same signal
/// re-raised; `128 + signal` when [`forward_signals`] had to kill it. What the child left
/// running is killed first ([`kill_wrapped_leftovers`]).
pub fn exit_like(status: ExitStatus) -> ! {
    kill_wrapped_leftovers();
    let forced = FORCED.load(Ordering::SeqCst);
    if forced != 0 {
        std::process::exit(128 + forced);
    }
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(sig) = status.signal() {
        // SAFETY: restore the default disposition, then raise the signal on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(1);
}

/// The identity of a tree: its root's process group and its marker variable.
#[derive(Debug, Clone)]
pub struct TreeMark {
    pub pgid: u32,
    /// `BRIDGEWIRE_TREE_<bridgewire pid>_<n>`.
    pub var: String,
}

/// A child process and everything it starts, killed together (see the module docs).
pub struct ChildTree {
    child: Child,
    mark: TreeMark,
    /// The root's start time in clock ticks since boot, read at spawn.
    started: Option<u64>,
    _registration: crate::signals::Registration,
    done: bool,
}

static TREES: AtomicU64 = AtomicU64::new(0);

impl ChildTree {
    /// Spawns `cmd` as the root of a new tree.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<ChildTree> {
        become_subreaper();
        let var = format!(
            "{TREE_ENV_PREFIX}{}_{}",
            std::process::id(),
            TREES.fetch_add(1, Ordering::Relaxed)
        );
        cmd.env(&var, "1");
        isolate_group(cmd);
        let child = cmd.spawn()?;
        let mark = TreeMark {
            pgid: child.id(),
            var,
        };
        let for_signal = mark.clone();
        let registration =
            crate::signals::register(crate::signals::Cleanup::Run(Box::new(move || {
                kill_marked(&for_signal, None)
            })));
        Ok(ChildTree {
            started: crate::port_owner::start_ticks(child.id()),
            child,
            mark,
            _registration: registration,
            done: false,
        })
    }

    /// The tree's process group id (the root's pid).
    pub fn pgid(&self) -> u32 {
        self.mark.pgid
    }

    pub fn mark(&self) -> &TreeMark {
        &self.mark
    }

    /// When the root started, in clock ticks since boot (Linux).
    pub fn started_ticks(&self) -> Option<u64> {
        self.started
    }

    /// Kills every process of the tree and reaps the root; returns its exit status (the status
    /// it had if it already exited). Idempotent.
    pub fn kill_tree(&mut self) -> Option<ExitStatus> {
        if !self.done {
            self.done = true;
            kill_marked(&self.mark, Some(&mut self.child));
        }
        self.child.try_wait().ok().flatten()
    }

    /// The root's exit status if it has exited, allowing it `wait` to be reaped: a program
    /// whose connection just closed may still be exiting.
    pub fn exited_within(&mut self, wait: std::time::Duration) -> Option<ExitStatus> {
        let until = std::time::Instant::now() + wait;
        loop {
            if let Some(st) = self.child.try_wait().ok().flatten() {
                return Some(st);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl std::ops::Deref for ChildTree {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for ChildTree {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildTree {
    fn drop(&mut self) {
        self.kill_tree();
    }
}

/// Makes bridgewire the reaper of its descendants' orphans (Linux), once.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl on ourselves with a plain integer argument.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
        }
    });
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    pub pid: u32,
    pub state: u8,
    pub ppid: u32,
    pub pgrp: u32,
}

/// `/proc/<pid>/stat` of `pid`, parsed.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.bytes().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

/// Every process visible in `/proc`.
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect()
}

/// Whether process `pid` carries the environment variable `var` (set when it was executed).
pub fn has_env_var(pid: u32, var: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let needle = format!("{var}=");
    env.split(|&b| b == 0)
        .any(|kv| kv.starts_with(needle.as_bytes()))
}

/// Set on the cleanup's own helpers (`git worktree prune`): [`kill_everything_started`] spares
/// them and what they start.
pub const SPARE_ON_EXIT_ENV: &str = "BRIDGEWIRE_SPARE_ON_EXIT";

/// The last sweep before bridgewire exits on a signal: SIGKILLs, in one pass and without
/// waiting, every process that descends from bridgewire by parent links (orphans come back to
/// it as subreaper) or carries one of its tree markers (`BRIDGEWIRE_TREE_<pid>_…`, a setsid
/// grandchild that left its group). The per-tree cleanup normally got there first; this covers
/// a cleanup the grace period cut short (a loaded machine) and trees started during the sweep.
pub fn kill_everything_started() {
    kill_started();
}

/// At a normal end: kills what the programs bridgewire ran left behind (a provider child a
/// bridge started in a session of its own, with its environment cleared, and did not stop
/// before exiting: no tree's cleanup can find it once its parent is gone, and it came back to
/// bridgewire as subreaper), and names each (`pid (comm)`), so the leak is said, not hidden.
pub fn sweep_left_behind() -> Vec<String> {
    let me = std::process::id();
    // Only what outlived its own parent: a process still parented by a live program of a tree
    // is that tree's (none is left at a normal end).
    let left: Vec<u32> = all_processes()
        .iter()
        .filter(|p| p.ppid == me && p.state != b'Z' && !has_env_var(p.pid, SPARE_ON_EXIT_ENV))
        .map(|p| p.pid)
        .collect();
    if left.is_empty() {
        return Vec::new();
    }
    let named: Vec<String> = left
        .iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} ({})", comm.trim())
        })
        .collect();
    kill_started();
    // Reap them (they are bridgewire's children now), bounded.
    let until = Instant::now() + Duration::from_millis(500);
    for pid in &left {
        while Instant::now() < until {
            let mut status = 0;
            // SAFETY: waitpid on a child of this process, non-blocking.
            let r = unsafe { libc::waitpid(*pid as libc::pid_t, &mut status, libc::WNOHANG) };
            if r != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    named
}

/// [`kill_everything_started`]'s sweep; the pids it killed.
fn kill_started() -> Vec<u32> {
    let me = std::process::id();
    let prefix = format!("{TREE_ENV_PREFIX}{me}_");
    let procs = all_processes();
    let spared: Vec<u32> = procs
        .iter()
        .filter(|p| has_env_var(p.pid, SPARE_ON_EXIT_ENV))
        .map(|p| p.pid)
        .collect();
    let mut doomed: Vec<u32> = Vec::new();
    for p in &procs {
        if p.pid != me
            && p.state != b'Z'
            && !spared.contains(&p.pid)
            && has_env_var_prefix(p.pid, &prefix)
        {
            doomed.push(p.pid);
        }
    }
    let mut frontier: Vec<u32> = vec![me];
    frontier.extend(doomed.iter().copied());
    while let Some(parent) = frontier.pop() {
        for p in &procs {
            if p.ppid == parent
                && p.pid != me
                && p.state != b'Z'
                && !spared.contains(&p.pid)
                && !doomed.contains(&p.pid)
            {
                doomed.push(p.pid);
                frontier.push(p.pid);
            }
        }
    }
    for &pid in &doomed {
        // SAFETY: kill(2) on a pid just seen alive that bridgewire started (descendant or
        // marker carrier).
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    doomed
}

/// Whether process `pid` carries an environment variable whose name starts with `prefix`.
pub fn has_env_var_prefix(pid: u32, prefix: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    env.split(|&b| b == 0)
        .any(|kv| kv.starts_with(prefix.as_bytes()))
}

/// The live (non-zombie) processes of a tree: members of its group (while `root_alive`, the
/// group id cannot have been reused), descendants of its root by parent links, and carriers of
/// its marker. Never bridgewire itself.
pub fn tree_members(mark: &TreeMark, root_alive: bool) -> Vec<u32> {
    tree_stats(mark, root_alive).iter().map(|p| p.pid).collect()
}

/// [`tree_members`] as the `/proc/<pid>/stat` each was found by (its parent among them).
fn tree_stats(mark: &TreeMark, root_alive: bool) -> Vec<ProcStat> {
    let me = std::process::id();
    let procs = all_processes();
    let mut members: Vec<ProcStat> = Vec::new();
    let mut frontier: Vec<u32> = Vec::new();
    if root_alive {
        frontier.push(mark.pgid);
    }
    for p in &procs {
        if p.pid == me || p.state == b'Z' {
            continue;
        }
        if (root_alive && (p.pgrp == mark.pgid || p.pid == mark.pgid))
            || has_env_var(p.pid, &mark.var)
        {
            members.push(*p);
            frontier.push(p.pid);
        }
    }
    // Descendants by parent link (one that cleared its environment and left the group).
    while let Some(parent) = frontier.pop() {
        for p in &procs {
            if p.ppid == parent
                && p.pid != me
                && p.state != b'Z'
                && !members.iter().any(|m| m.pid == p.pid)
            {
                members.push(*p);
                frontier.push(p.pid);
            }
        }
    }
    members
}

/// Kills a tree until none of it is left (bounded by [`KILL_BOUND`]), then reaps the root
/// (`child`, when the caller has it) and the orphans of the tree that were re-parented to
/// bridgewire. Safe to call from the signal handler thread (`child` = `None`).
pub fn kill_marked(mark: &TreeMark, mut child: Option<&mut Child>) {
    let root_alive = |c: &mut Option<&mut Child>| match c {
        Some(c) => matches!(c.try_wait(), Ok(None)),
        // Without the handle (signal path) the root is not reaped by us concurrently: it may be
        // a zombie, which still reserves its group id.
        None => proc_stat(mark.pgid).is_some(),
    };
    let deadline = Instant::now() + KILL_BOUND;
    let mut killed: Vec<u32> = Vec::new();
    loop {
        let alive = mark.pgid != 0 && root_alive(&mut child);
        if alive {
            kill_group_id(mark.pgid);
        }
        let members = tree_members(mark, alive);
        if members.is_empty() && !alive {
            break;
        }
        for &pid in &members {
            // SAFETY: kill(2) on a pid just seen alive and marked as ours (or a descendant).
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            if !killed.contains(&pid) {
                killed.push(pid);
            }
        }
        if let Some(c) = child.as_deref_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if members.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    reap_orphans(&killed);
}

/// Reaps the zombies among `pids` that were re-parented to bridgewire (subreaper). Only pids
/// seen as zombies whose parent is bridgewire are waited for, so another tree's root, still
/// running, is never reaped behind its `Child`.
fn reap_orphans(pids: &[u32]) {
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut left: Vec<u32> = pids.to_vec();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pid| match proc_stat(pid) {
            None => false,
            Some(s) if s.ppid != me => false, // someone else's to reap (or being re-parented)
            Some(s) if s.state == b'Z' => {
                let mut status = 0;
                // SAFETY: waitpid on one specific zombie child of ours.
                unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
                false
            }
            Some(_) => true, // dying: look again
        });
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn alive(pid: u32) -> bool {
        proc_stat(pid).is_some_and(|s| s.state != b'Z')
    }

    #[test]
    fn kills_a_setsid_grandchild_and_a_double_forked_one() {
        // The child starts a grandchild in a new session (leaves the group) and one that outlives
        // its parent (re-parented), prints their pids, then waits.
        let script = "setsid sleep 300 & echo $!; (sleep 300 & echo $!) ; exec sleep 300";
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdout(Stdio::piped());
        let mut tree = ChildTree::spawn(&mut cmd).unwrap();
        let mut out = std::io::BufReader::new(tree.stdout.take().unwrap());
        let mut pids = Vec::new();
        for _ in 0..2 {
            let mut l = String::new();
            std::io::BufRead::read_line(&mut out, &mut l).unwrap();
            pids.push(l.trim().parse::<u32>().unwrap());
        }
        let root = tree.id();
        assert!(pids.iter().all(|&p| alive(p)));
        let t = Instant::now();
        drop(tree);
        assert!(t.elapsed() < Duration::from_secs(3));
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().chain([&root]).any(|&p| alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in pids.iter().chain([&root]) {
            assert!(!alive(*p), "pid {p} survived the tree kill");
        }
    }
}

/// Environment variables a shell sets for its own bookkeeping: a program started through
/// `sh -c 'exec …'` carries them, the same program started directly does not.
const SHELL_BOOKKEEPING: &[&str] = &["_", "SHLVL", "PWD", "OLDPWD"];

/// Interpreter flags that change nothing a peer says on the wire (unbuffered output, no
/// bytecode files, no banner): `python3 -u bridge.py` runs the program `python3 bridge.py` runs.
const QUIET_INTERPRETER_FLAGS: &[&str] = &["-u", "-B", "-q"];

/// What a started tree runs, read from `/proc` once it has answered (parity's same-program
/// refusal): its processes but the launchers that started another (a wrapper's shell, `env`;
/// a bridge that starts its provider is two programs, both kept), each as its executable,
/// its arguments with every word that names a file as that file's canonical path, its
/// directory when no word names a file, and its environment without the variables bridgewire
/// set itself (the tree's marker and `ours`, e.g. a hub's generated secrets) or a shell's
/// bookkeeping. Sorted; empty when `/proc` could not be read. Two legs with the same image run
/// one program, however each command spelled it (`sh -c 'exec …'`, a wrapper script, `env`).
pub fn tree_image(mark: &TreeMark, ours: &[&str]) -> Vec<RunningProcess> {
    // The stats the members were found by: a member's parent as it was then, /proc read once.
    let members = tree_stats(mark, true);
    let parents: Vec<u32> = members.iter().map(|s| s.ppid).collect();
    let mut image: Vec<RunningProcess> = members
        .iter()
        .map(|s| s.pid)
        .filter(|&p| !(parents.contains(&p) && is_launcher(p)))
        .filter_map(|p| process_image(p, ours))
        .collect();
    image.sort();
    image
}

/// A command word as what it runs with: one that names a file (relative to `cwd`) as that
/// file's canonical path, `--flag=FILE` likewise, any other as written; `names_file` is set
/// when it named one. What parity compares two legs' commands and processes by.
pub fn word_as_file(cwd: &std::path::Path, w: &str, names_file: &mut bool) -> String {
    let mut file = |w: &str| -> Option<String> {
        let p = cwd.join(w);
        if w.is_empty() || !p.is_file() {
            return None;
        }
        *names_file = true;
        std::fs::canonicalize(&p)
            .ok()
            .map(|p| p.display().to_string())
    };
    if let Some(f) = file(w) {
        return f;
    }
    match w.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') => match file(value) {
            Some(f) => format!("{flag}={f}"),
            None => w.to_string(),
        },
        _ => w.to_string(),
    }
}

/// Programs that only start another (a shell running a wrapper script, `env`): when such a
/// process has started a member of the tree, what it started is what runs.
const LAUNCHERS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox", "env"];

fn is_launcher(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        exe.file_name()
            .is_some_and(|n| LAUNCHERS.contains(&n.to_string_lossy().as_ref()))
    })
}

/// One process of a [`tree_image`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunningProcess {
    /// The executable and its arguments (files as canonical paths), and `(in DIR)` when no
    /// word names a file.
    pub command: String,
    /// Its environment, sorted, without what bridgewire or a shell set.
    pub environment: Vec<String>,
}

/// One process of [`tree_image`], `None` when `/proc` does not show it (it exited).
fn process_image(pid: u32, ours: &[&str]) -> Option<RunningProcess> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(&cmdline);
    let words: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let interpreter = exe
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("python"));
    let mut names_file = false;
    let mut out = vec![exe.display().to_string()];
    let mut flags = interpreter;
    for w in words.iter().skip(1) {
        if flags && QUIET_INTERPRETER_FLAGS.contains(&w.as_str()) {
            continue;
        }
        flags = flags && w.starts_with('-');
        out.push(word_as_file(&cwd, w, &mut names_file));
    }
    let mut env: Vec<String> = environ
        .split(|&b| b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| String::from_utf8_lossy(kv).into_owned())
        .filter(|kv| {
            let name = kv.split_once('=').map_or(kv.as_str(), |(n, _)| n);
            // A shell drops the variables whose names it cannot hold (`CARGO_BIN_EXE_a-b`).
            let shell_name = name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
                && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
            shell_name
                && !name.starts_with(TREE_ENV_PREFIX)
                && !ours.contains(&name)
                && !SHELL_BOOKKEEPING.contains(&name)
        })
        .collect();
    env.sort();
    let mut command = out.join(" ");
    if !names_file {
        command.push_str(&format!(" (in {})", cwd.display()));
    }
    Some(RunningProcess {
        command,
        environment: env,
    })
}

/// The command lines two started trees both run, when their [`tree_image`]s are one and the
/// same (and not empty): two servers of one program, however each command spelled it.
pub fn same_image(a: &TreeMark, b: &TreeMark, ours: &[&str]) -> Option<String> {
    let image = tree_image(a, ours);
    (!image.is_empty() && image == tree_image(b, ours)).then(|| {
        image
            .iter()
            .map(|r| r.command.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Runs `a` on another thread and `b` on this one, then `with` on both results while that
/// thread still lives. A child spawned there gets `PR_SET_PDEATHSIG`, which fires when the
/// *thread* that spawned it exits, not the process: a server started on a thread that returned
/// would be killed before it is looked at. `None` from `a` when its thread panicked.
pub fn side_by_side<A: Send, B, R>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B,
    with: impl FnOnce(Option<A>, B) -> R,
) -> R {
    let (result_tx, result_rx) = std::sync::mpsc::channel::<A>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = result_tx.send(a());
            // Held until `with` returned (its sender dropped): the children stay alive.
            let _ = done_rx.recv();
        });
        let rb = b();
        let ra = result_rx.recv().ok();
        let r = with(ra, rb);
        drop(done_tx);
        r
    })
}

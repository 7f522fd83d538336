//! SIGINT/SIGTERM for long commands: stop promptly, leave nothing behind, say what was reached.
//!
//! # The API
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use bridgewire::signals;
//! signals::install(); // once, at the start of a long command
//! // A temporary folder removed on drop *and* on SIGINT/SIGTERM:
//! let tmp = signals::temp_dir("bridgewire-x-")?;
//! // Anything else to undo on a signal (dropping the registration forgets it):
//! let _wt = signals::register(signals::Cleanup::Worktree {
//!     repo: ".".into(),
//!     path: tmp.path().join("wt"),
//! });
//! // What to print or write when interrupted (a partial summary), given the signal:
//! let _hook = signals::on_signal(|sig| eprintln!("interrupted by signal {sig}: 3 of 9 done"));
//! // Long loops may stop early and cleanly:
//! if signals::interrupted().is_some() { /* stop starting new work */ }
//! # Ok(()) }
//! ```
//!
//! Child processes started with [`crate::proc::ChildTree`] register themselves.
//!
//! On the first SIGINT or SIGTERM (or SIGHUP) the handler thread, in this order: runs the
//! `on_signal` hooks (newest first: they report what was reached), kills every registered
//! process tree, removes the registered folders and worktrees, and exits `128 + signal` (130 for
//! SIGINT, 143 for SIGTERM). All of it gets [`GRACE`]; past it (or on a second signal)
//! bridgewire exits at once. The command's main thread keeps running meanwhile (it may see its
//! children die); `cli::run` calls [`exit_if_interrupted`] so its own exit code never wins.
//!
//! A command started with SIGINT ignored (how shells start background jobs) keeps ignoring it:
//! [`install`] only takes over SIGINT when its disposition was not `SIG_IGN`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// Time given to hooks and removals after a signal before bridgewire exits regardless.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Something to undo when a signal ends the command.
pub enum Cleanup {
    /// Remove a file or folder (recursively).
    Path(PathBuf),
    /// Remove a git worktree: its folder, then `git -C <repo> worktree prune`.
    Worktree { repo: PathBuf, path: PathBuf },
    /// Run a closure (process trees register this way).
    Run(Box<dyn FnOnce() + Send>),
}

enum Entry {
    Cleanup(Cleanup),
    Hook(Box<dyn FnOnce(i32) + Send>),
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static REGISTRY: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<u64, Entry>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps an entry registered; dropping it forgets the entry (without running it).
#[must_use = "dropping the registration forgets the cleanup at once"]
pub struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        registry().remove(&self.0);
    }
}

fn add(e: Entry) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut map = registry();
    // The signal thread sets SIGNALLED before the cleanup takes the registry (under this
    // lock), so an entry added after that point would never run: a child spawned while the
    // handler was already sweeping (a second leg's build starting) would be left behind. Such
    // an entry is carried out at once instead.
    if interrupted().is_some() {
        drop(map);
        if let Entry::Cleanup(c) = e {
            run_cleanup(c);
        }
        return Registration(id);
    }
    map.insert(id, e);
    Registration(id)
}

/// Registers something to undo on SIGINT/SIGTERM.
pub fn register(c: Cleanup) -> Registration {
    add(Entry::Cleanup(c))
}

/// Registers what to print or write when a signal interrupts the command (e.g. a partial
/// summary); it gets the signal number.
pub fn on_signal(hook: impl FnOnce(i32) + Send + 'static) -> Registration {
    add(Entry::Hook(Box::new(hook)))
}

/// For a command that ends gracefully on a signal (a proxy finishing its in-flight exchanges
/// and flushing its lanes): set the returned flag once it has ended; the registered hook waits
/// for it, at most `bound` (keep it under [`GRACE`]), before the handler kills the trees and
/// exits.
pub fn drain_on_signal(
    bound: Duration,
) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, Registration) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let reg = on_signal(move |_| {
        let until = std::time::Instant::now() + bound;
        while !flag.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (done, reg)
}

/// Resolves once a SIGINT/SIGTERM arrived (polled: a shutdown future for a tokio server that
/// sees the signal even when it came before the server installed its own handlers).
pub async fn interrupted_async() -> i32 {
    loop {
        if let Some(sig) = interrupted() {
            return sig;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The signal that is ending the command, if one arrived.
pub fn interrupted() -> Option<i32> {
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Called where a command returns its exit code: once a signal arrived, the command's own
/// result must not win the race against the handler (whose cleanup and summary are under way),
/// so this waits for the handler to exit `128 + signal` (bounded by [`GRACE`]).
pub fn exit_if_interrupted() {
    if let Some(sig) = interrupted() {
        std::thread::sleep(GRACE + Duration::from_millis(200));
        exit_now(sig);
    }
}

/// A temporary folder removed on drop and on SIGINT/SIGTERM.
pub struct TempDir {
    dir: tempfile::TempDir,
    _registration: Registration,
}

impl TempDir {
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Creates a registered temporary folder (mode 0700) under the system temp dir.
pub fn temp_dir(prefix: &str) -> std::io::Result<TempDir> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let registration = register(Cleanup::Path(dir.path().to_path_buf()));
    Ok(TempDir {
        dir,
        _registration: registration,
    })
}

/// Whether `sig` was ignored (`SIG_IGN`) when bridgewire started.
pub fn is_ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Installs the handler (idempotent).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SIGINT and SIGHUP stay ignored when they were (background jobs, nohup).
        let mut sigs = vec![libc::SIGTERM];
        sigs.extend(
            [libc::SIGINT, libc::SIGHUP]
                .into_iter()
                .filter(|&s| !is_ignored(s)),
        );
        let Ok(mut signals) = signal_hook::iterator::Signals::new(&sigs) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let first = match SIGNALLED.compare_exchange(
                        0,
                        sig,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => sig,
                        // A second signal: no more waiting.
                        Err(first) => exit_now(first),
                    };
                    let _ = std::thread::Builder::new()
                        .name("signal-cleanup".into())
                        .spawn(move || {
                            run_all(first);
                            exit_now(first);
                        });
                    let _ = std::thread::Builder::new()
                        .name("signal-grace".into())
                        .spawn(move || {
                            std::thread::sleep(GRACE);
                            exit_now(first);
                        });
                }
            });
    });
}

/// Exits `128 + sig` after one last sweep of every process bridgewire started and of the
/// removals still registered (the cleanup may have been cut short by the grace period, or a
/// tree may have been born during it).
///
/// Up to three threads may get here at once (the grace timer, the cleanup thread, the main
/// thread's [`exit_if_interrupted`]); the first holds the lock until the process ends, so a
/// second caller, finding the registry already taken, cannot end the process while the first
/// is still removing a folder.
fn exit_now(sig: i32) -> ! {
    static EXITING: Mutex<()> = Mutex::new(());
    let _only_one = EXITING.lock().unwrap_or_else(|e| e.into_inner());
    crate::proc::kill_everything_started();
    // A removal under way in the cleanup thread holds entries this sweep cannot see; let it
    // finish (bounded: a `git worktree prune` may hang) before the process ends under it.
    let until = std::time::Instant::now() + Duration::from_millis(500);
    let _removing = loop {
        match REMOVING.try_lock() {
            Ok(g) => break Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    remove_registered();
    std::process::exit(128 + sig)
}

/// Runs every registered entry as a signal would: hooks, then trees, then removals. Removals
/// stay registered until their turn, so that when a slow tree kill runs into the grace period,
/// the grace exit still removes them ([`exit_now`]).
fn run_all(sig: i32) {
    let active: Vec<Entry> = {
        let mut map = registry();
        let ids: Vec<u64> = map
            .iter()
            .filter(|(_, e)| !is_removal(e))
            .map(|(&id, _)| id)
            .collect();
        ids.iter().rev().filter_map(|id| map.remove(id)).collect()
    };
    let mut runs = Vec::new();
    for e in active {
        match e {
            Entry::Hook(h) => h(sig),
            Entry::Cleanup(c) => runs.push(c),
        }
    }
    // Test hook: a tree kill slowed past the grace period, as on a machine under heavy load
    // (tests/signals.rs). Never set outside tests.
    if let Some(ms) = std::env::var("BRIDGEWIRE_TEST_SLOW_CLEANUP_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    for c in runs {
        run_cleanup(c);
    }
    run_removals();
}

fn is_removal(e: &Entry) -> bool {
    matches!(
        e,
        Entry::Cleanup(Cleanup::Path(_) | Cleanup::Worktree { .. })
    )
}

/// Held while registered removals run (see [`exit_now`]).
static REMOVING: Mutex<()> = Mutex::new(());

/// Removes every temporary path and worktree still registered (newest first).
fn run_removals() {
    let _removing = REMOVING.lock().unwrap_or_else(|e| e.into_inner());
    remove_registered();
}

fn remove_registered() {
    let left: Vec<Entry> = std::mem::take(&mut *registry())
        .into_values()
        .rev()
        .collect();
    for e in left {
        if let Entry::Cleanup(c) = e {
            run_cleanup(c);
        }
    }
}

fn run_cleanup(c: Cleanup) {
    match c {
        Cleanup::Path(p) => {
            // A writer still running may land one last file in the folder, failing `rmdir`
            // with ENOTEMPTY: the replay's main thread writing its cursor while the grace exit
            // removed the state folder left `bb-parity-replay-*` behind in CI; a process killed
            // a moment ago can do the same. Try again, briefly.
            let removed = || {
                std::fs::remove_dir_all(&p)
                    .or_else(|_| std::fs::remove_file(&p))
                    .is_ok()
                    || std::fs::symlink_metadata(&p).is_err()
            };
            for _ in 0..3 {
                if removed() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            removed();
        }
        Cleanup::Worktree { repo, path } => {
            let _ = std::fs::remove_dir_all(&path);
            let _ = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["worktree", "prune"])
                // Let the last sweep spare it: a prune cut off leaves the worktree registered.
                .env(crate::proc::SPARE_ON_EXIT_ENV, "1")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        Cleanup::Run(f) => f(),
    }
}

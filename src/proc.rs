//! Child processes: the one place bridgewire starts and reaps them.
//!
//! Children run in their own process group (so a terminal's Ctrl-C reaches bridgewire, which
//! forwards it once, rather than reaching both), die with bridgewire (`PR_SET_PDEATHSIG`), and
//! receive every catchable terminating signal bridgewire receives.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

/// Signals forwarded to a wrapped child.
pub const FORWARDED_SIGNALS: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Makes `cmd` start in its own process group and die when bridgewire dies.
pub fn isolate(cmd: &mut Command) {
    // SAFETY: setpgid and prctl are async-signal-safe and touch only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
}

/// Forwards terminating signals to `pid` from a background thread, for the life of the process.
pub fn forward_signals(pid: u32) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new(FORWARDED_SIGNALS)?;
    std::thread::Builder::new()
        .name("signal-forward".into())
        .spawn(move || {
            for sig in signals.forever() {
                // SAFETY: plain kill(2) on the child's pid.
                unsafe {
                    libc::kill(pid as libc::pid_t, sig);
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

/// Ends bridgewire the way the child ended: same exit code, or the same signal re-raised.
pub fn exit_like(status: ExitStatus) -> ! {
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

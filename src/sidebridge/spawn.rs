//! Starting a bridge under test: `-- <bridge command>` or the bundled `sidebridge-ref`.
//!
//! The child must print the URL (or `host:port`) it listens on as its first stdout line,
//! within the startup timeout. It runs as a [`ChildTree`] and is killed (tree and all)
//! when the [`BridgeProcess`] drops, so no run leaves an orphan.

use crate::proc::ChildTree;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The bridge's whole tree is killed when this drops ([`ChildTree`]).
pub struct BridgeProcess {
    _child: ChildTree,
    pub url: String,
}

/// The bundled reference bridge beside the running executable.
pub fn bundled_reference() -> Option<OsString> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.with_file_name(format!("sidebridge-ref{}", std::env::consts::EXE_SUFFIX));
    p.exists().then(|| p.into_os_string())
}

/// Spawns `command` and waits (bounded) for its first stdout line.
pub fn spawn(command: &[OsString], startup: Duration) -> anyhow::Result<BridgeProcess> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty bridge command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = ChildTree::spawn(&mut cmd)
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", prog.to_string_lossy()))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut first = String::new();
        let _ = tx.send(r.read_line(&mut first).map(|_| first));
        // Keep draining so the child never blocks on a full pipe.
        let mut sink = String::new();
        while r.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    let mut proc_guard = BridgeProcess {
        _child: child,
        url: String::new(),
    };
    let line = match rx.recv_timeout(startup) {
        Ok(Ok(l)) if !l.trim().is_empty() => l.trim().to_string(),
        Ok(_) => anyhow::bail!("the bridge exited or closed stdout before printing its address"),
        Err(_) => anyhow::bail!("the bridge printed no address within {startup:?}"),
    };
    proc_guard.url = if line.starts_with("http://") || line.starts_with("https://") {
        line
    } else {
        format!("http://{line}/")
    };
    Ok(proc_guard)
}

//! Peers under test as child processes: spawned as a [`ChildTree`], killed with it on drop,
//! their stdout read line by line (a hub's bound address) within a bound.

use crate::proc::ChildTree;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a peer whose connection closed is given to be seen exiting.
pub const EXIT_GRACE: Duration = Duration::from_millis(500);

/// Stdout lines of a child kept until read.
const STDOUT_LINES: usize = 1024;

/// A child killed (with its whole tree, [`ChildTree`]) and reaped on drop.
pub struct ChildGuard {
    child: ChildTree,
    lines: mpsc::Receiver<String>,
}

impl ChildGuard {
    /// Spawns `argv` with `env` added; stdout is read line by line in a background thread,
    /// stderr is inherited.
    pub fn spawn(argv: &[OsString], env: &[(&str, String)]) -> std::io::Result<ChildGuard> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = ChildTree::spawn(&mut cmd)?;
        let out = child.stdout.take().expect("piped stdout");
        // Bounded: a hub that logs on stdout long after its address is not kept in memory
        // (lines past the bound are dropped; the pipe keeps being drained).
        let (tx, lines) = mpsc::sync_channel(STDOUT_LINES);
        std::thread::Builder::new()
            .name("child-stdout".into())
            .spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.try_send(line); // keep draining after the reader stops listening
                }
            })?;
        Ok(ChildGuard { child, lines })
    }

    /// The next stdout line within `wait`.
    pub fn line(&self, wait: Duration) -> Option<String> {
        self.lines.recv_timeout(wait).ok()
    }

    /// Whether the child has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.exited_within(Duration::ZERO)
    }

    /// Whether the child exited, allowing it `wait` to be reaped: a peer whose connection just
    /// closed may still be exiting.
    pub fn exited_within(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        self.child.exited_within(wait)
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's process tree.
    pub fn tree(&self) -> &ChildTree {
        &self.child
    }
}

/// A hub's address in one stdout line, as its base URL: the line as a whole (`http://h:p`,
/// `h:p` or a bare port), else a listening URL inside text (`Bridle hub listening on
/// http://0.0.0.0:3333`: [`crate::util::find_url`], as Side Bridge servers are read).
pub fn parse_address(line: &str) -> Option<String> {
    exact_address(line)
        .or_else(|| crate::util::find_url(line).map(|u| u.trim_end_matches('/').to_string()))
}

fn exact_address(line: &str) -> Option<String> {
    let t = line.trim();
    if t.starts_with("http://") || t.starts_with("https://") {
        return Some(t.trim_end_matches('/').to_string());
    }
    if let Ok(port) = t.parse::<u16>() {
        return Some(format!("http://127.0.0.1:{port}"));
    }
    if t.parse::<std::net::SocketAddr>().is_ok() {
        return Some(format!("http://{t}"));
    }
    None
}

/// The bundled reference peer `name` (a sibling of the running executable, or of its parent
/// when running from `target/*/deps`).
pub fn bundled(name: &str) -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.parent()?.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    #[test]
    fn addresses() {
        use super::parse_address as p;
        assert_eq!(
            p("http://127.0.0.1:9/").as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(p("127.0.0.1:9").as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(p("9").as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(p("listening"), None);
    }
}

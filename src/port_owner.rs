//! Whether the address a started bridge or hub printed is served by the tree bridgewire started.
//!
//! A server may print its address before it listens (a banner before `listen` returns), and
//! bridgewire waits for that address to accept a connection. If the port is already taken, the
//! server fails to bind, yet the address does accept: whatever holds the port answers — a
//! server left running from an earlier run, or the other leg of a parity run given the same
//! fixed port. Every verdict would then judge that other program, and a parity run would compare
//! a build with itself. On Linux the listening socket's owner is read from `/proc/net/tcp{,6}`
//! and `/proc/<pid>/fd`; it is named only when it is certainly someone else: a process of
//! another tree this bridgewire started, or one already running before the bridge started. An
//! owner that cannot be read (another user's process) or that started afterwards outside the
//! tree (a container's port proxy) is not judged, so no legal setup is refused.

use crate::proc::ChildTree;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Waits (until `deadline`) for a started bridge or hub to accept a TCP connection at `url`: a bridge may
/// print its address a moment before it listens there (a banner printed before `listen`
/// returns), and every rule would then meet a refused connection. `Ok`: the address the
/// connection reached; `Err`: why none did.
pub fn await_listening(
    url: &str,
    deadline: Instant,
) -> Result<Option<std::net::SocketAddr>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("invalid URL {url}: {e}"))?;
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return Ok(None); // judged where the URL is used
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut last = String::new();
    loop {
        let addrs: Vec<std::net::SocketAddr> =
            match std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) {
                Ok(a) => a.collect(),
                Err(e) => return Err(format!("cannot resolve {host}: {e}")),
            };
        for a in &addrs {
            match std::net::TcpStream::connect_timeout(a, Duration::from_millis(200)) {
                Ok(_) => return Ok(Some(*a)),
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A listening TCP socket as `/proc/net/tcp{,6}` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub addr: SocketAddr,
    pub inode: u64,
}

/// The listening sockets in one `/proc/net/tcp` or `/proc/net/tcp6` text.
pub fn parse_listeners(table: &str) -> Vec<Listener> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != LISTEN {
                return None;
            }
            let (ip, port) = f[1].split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let ip = parse_ip(ip)?;
            Some(Listener {
                addr: SocketAddr::new(ip, port),
                inode: f[9].parse().ok()?,
            })
        })
        .collect()
}

/// The kernel prints each 32-bit word of the address as the host-order integer it reads from
/// network-order bytes: the bytes come back with `to_ne_bytes`.
fn parse_ip(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

/// Whether a socket listening on `listener` takes a connection made to `target`: the same
/// address or a wildcard of its family (`::` may take IPv4 too, as a dual-stack socket does).
fn takes(listener: SocketAddr, target: SocketAddr) -> bool {
    if listener.port() != target.port() {
        return false;
    }
    let l = listener.ip();
    let t = target.ip();
    l == t
        || l.is_unspecified() && (l.is_ipv6() || t.is_ipv4())
        || matches!((l, t), (IpAddr::V6(l6), IpAddr::V4(t4)) if l6.to_ipv4_mapped() == Some(t4))
}

/// The listening socket (its inode) that takes a connection to `target`: a socket bound to
/// that very address before one bound to a wildcard, as the kernel picks. `None` when the
/// tables cannot be read or list none.
pub fn serving_inode(target: SocketAddr) -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let listeners: Vec<Listener> = parse_listeners(&read("/proc/net/tcp"))
        .into_iter()
        .chain(parse_listeners(&read("/proc/net/tcp6")))
        .filter(|l| takes(l.addr, target))
        .collect();
    listeners
        .iter()
        .find(|l| !l.addr.ip().is_unspecified())
        .or_else(|| listeners.first())
        .map(|l| l.inode)
}

/// Whether two printed addresses reach one listening socket (one server) although they are
/// written apart (`127.0.0.1` and `[::1]` of a dual-stack server, `127.0.0.2` of one on
/// `0.0.0.0`): said as the two addresses reached. Each must accept a connection by `deadline`;
/// `None` when they are two sockets or when it cannot be told.
pub fn same_listener(a: &str, b: &str, deadline: Instant) -> Option<String> {
    let reached = |url: &str| await_listening(url, deadline).ok().flatten();
    let (ra, rb) = (reached(a)?, reached(b)?);
    let (ia, ib) = (serving_inode(ra)?, serving_inode(rb)?);
    (ia == ib).then(|| {
        if ra == rb {
            format!("both reach {ra}")
        } else {
            format!("{ra} and {rb} are served by one listening socket")
        }
    })
}

/// Whether the server at the address a tree printed is the tree's own: the listening socket a
/// connection to `url` reaches is held by one of its processes (not a running server whose
/// address the command only printed). Bounded by `deadline`.
pub fn serves(url: &str, tree: &ChildTree, deadline: Instant) -> bool {
    let Some(target) = await_listening(url, deadline).ok().flatten() else {
        return false;
    };
    let Some(inode) = serving_inode(target) else {
        return false;
    };
    let members = crate::proc::tree_members(tree.mark(), true);
    owners(&[inode]).iter().any(|p| members.contains(p))
}

/// The processes holding one of `inodes` open (readable ones only).
fn owners(inodes: &[u64]) -> Vec<u32> {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| wanted.iter().any(|w| l.as_os_str() == w.as_str()))
        }) {
            found.push(pid);
        }
    }
    found
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// A process's command line, printable and short, for a message.
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let line = crate::redact::printable(&words.join(" ")).to_string();
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None if line.is_empty() => "?".into(),
        None => line,
    }
}

/// Who holds the address a started program printed, when it is certainly not that program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// A program this bridgewire run started for another leg or cell.
    Sibling(String),
    /// A process already running before the started one.
    Older(String),
}

impl Foreign {
    /// How long to watch the started program before [`Foreign::refusal`]: an older owner is
    /// legal when the command only announces a running server, which a program that failed to
    /// bind shows by exiting or saying so within moments.
    pub const WATCH: Duration = Duration::from_secs(3);

    /// Why the start is refused, given how the started program ended within [`Self::WATCH`]
    /// (`None`: still running) and what it printed; `None` when the command announced a running
    /// server (it keeps running or exits 0, saying nothing of a taken address).
    pub fn refusal(
        &self,
        exited: Option<std::process::ExitStatus>,
        output: &[String],
    ) -> Option<String> {
        match self {
            Foreign::Sibling(who) => Some(format!(
                "{who}, a program this bridgewire run started for another leg or cell: two \
                 programs given one fixed port cannot run side by side (parity runs its two legs \
                 at once, and cells in parallel)"
            )),
            Foreign::Older(who) => {
                let said = output.iter().any(|l| says_address_in_use(l));
                let failed = exited.filter(|st| !st.success());
                let how = match (failed, said) {
                    (Some(st), true) => format!("said the address is in use and exited ({st})"),
                    (Some(st), false) => format!("exited ({st})"),
                    (None, true) => "said the address is in use".to_string(),
                    (None, false) => return None,
                };
                Some(format!(
                    "{who}, a process that was already running before this one started, which {how} \
                     (a server left from an earlier run?)"
                ))
            }
        }
    }
}

/// Whether an output line says a port was taken, as common servers word it (Node's
/// `EADDRINUSE`, glibc's "Address already in use", Python's errno 98, werkzeug's "Port … is in
/// use").
pub fn says_address_in_use(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "eaddrinuse",
        "address already in use",
        "address in use",
        "[errno 98]",
        "is in use by another program",
    ]
    .iter()
    .any(|p| l.contains(p))
}

/// Who holds the address `target` (the one a connection to what `tree` printed reached), when
/// it is certainly not of `tree`; `None` when the tree holds the socket or the owner cannot be
/// told apart for certain.
pub fn foreign_listener(target: SocketAddr, tree: &ChildTree) -> Option<Foreign> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let inodes: Vec<u64> = parse_listeners(&read("/proc/net/tcp"))
        .into_iter()
        .chain(parse_listeners(&read("/proc/net/tcp6")))
        .filter(|l| takes(l.addr, target))
        .map(|l| l.inode)
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let held_by = owners(&inodes);
    let root_alive = crate::proc::proc_stat(tree.pgid()).is_some_and(|s| s.state != b'Z');
    let ours = crate::proc::tree_members(tree.mark(), root_alive);
    if held_by.is_empty() || held_by.iter().any(|p| ours.contains(p)) {
        return None;
    }
    let siblings = format!("{}{}_", crate::proc::TREE_ENV_PREFIX, std::process::id());
    for &pid in &held_by {
        let who = format!("pid {pid} (`{}`)", command_line(pid));
        if crate::proc::has_env_var_prefix(pid, &siblings) {
            return Some(Foreign::Sibling(who));
        }
        // Clock ticks are 10 ms: a process that started in the same tick as the started one
        // counts as older (it is refused only when the started one failed to bind).
        if let (Some(owner), Some(ours)) = (start_ticks(pid), tree.started_ticks())
            && owner <= ours
        {
            return Some(Foreign::Older(who));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_of_both_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n   \
1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1\n   \
2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0\n";
        let got = parse_listeners(v4);
        assert_eq!(
            got,
            vec![
                Listener {
                    addr: "127.0.0.1:8080".parse().unwrap(),
                    inode: 4242
                },
                Listener {
                    addr: "0.0.0.0:80".parse().unwrap(),
                    inode: 77
                },
            ]
        );
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0\n   \
1: 0000000000000000FFFF00000100007F:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 98 1 0000000000000000 100 0 0 10 0\n";
        let got = parse_listeners(v6);
        assert_eq!(got[0].addr, "[::1]:8080".parse().unwrap());
        assert_eq!(got[1].addr, "[::ffff:127.0.0.1]:3000".parse().unwrap());
    }

    #[test]
    fn an_older_owner_is_refused_only_when_the_started_program_failed_to_bind() {
        use std::os::unix::process::ExitStatusExt;
        let older = Foreign::Older("pid 1 (`srv`)".into());
        let failed = std::process::ExitStatus::from_raw(1 << 8);
        let ok = std::process::ExitStatus::from_raw(0);
        // An announcer of a running server: still running, or done with 0, saying nothing.
        assert_eq!(older.refusal(None, &["http://127.0.0.1:8080".into()]), None);
        assert_eq!(older.refusal(Some(ok), &[]), None);
        assert!(
            older
                .refusal(Some(failed), &[])
                .unwrap()
                .contains("exited (exit status: 1)")
        );
        // A wrapper that swallowed the status, or a server that lives on without its port.
        for line in [
            "Error: listen EADDRINUSE: address already in use 127.0.0.1:8080",
            "OSError: [Errno 98] Address already in use",
            "Address already in use",
            "Port 5000 is in use by another program. Either identify and stop that program, or start the server with a different port.",
            "listen tcp 127.0.0.1:8080: bind: address already in use",
        ] {
            let why = older.refusal(Some(ok), &[line.into()]);
            assert!(
                why.is_some_and(|w| w.contains("said the address is in use")),
                "{line}"
            );
        }
        assert!(!says_address_in_use("GET /in-use 200"));
        let sibling = Foreign::Sibling("pid 2 (`srv`)".into());
        assert!(
            sibling
                .refusal(None, &[])
                .unwrap()
                .contains("another leg or cell")
        );
    }

    #[test]
    fn which_listener_takes_a_connection() {
        let t: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for (l, want) in [
            ("127.0.0.1:8080", true),
            ("0.0.0.0:8080", true),
            ("[::]:8080", true),
            ("[::ffff:127.0.0.1]:8080", true),
            ("127.0.0.2:8080", false),
            ("[::1]:8080", false),
            ("127.0.0.1:8081", false),
        ] {
            assert_eq!(takes(l.parse().unwrap(), t), want, "{l}");
        }
        let t6: SocketAddr = "[::1]:8080".parse().unwrap();
        assert!(takes("[::]:8080".parse().unwrap(), t6));
        assert!(!takes("0.0.0.0:8080".parse().unwrap(), t6));
    }

    #[test]
    fn a_listener_of_this_process_is_found_with_its_owner() {
        if !std::path::Path::new("/proc/net/tcp").exists() {
            return;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let mine: Vec<u64> = parse_listeners(&table)
            .into_iter()
            .filter(|x| x.addr == addr)
            .map(|x| x.inode)
            .collect();
        assert_eq!(mine.len(), 1, "{addr} in {table}");
        assert!(owners(&mine).contains(&std::process::id()));
    }
}

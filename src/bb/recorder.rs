//! `record bb` and `record child`: stand in for a bridge (or a provider child) and tee its stdio
//! into lanes.
//!
//! ```text
//! runtime ──stdin──▶ bridgewire record bb ──▶ bridge ──▶ bridgewire record child ──▶ provider
//!         ◀─stdout──                       ◀──        ◀──                        ◀──
//! ```
//!
//! * Framing as bb's recorder (§1.8): only `\n` ends a line, one trailing `\r` is dropped from
//!   the recorded line; the bytes forwarded are exactly the bytes read.
//! * Record before forward: each chunk read is split into lines, the complete lines are appended
//!   to their lanes (one `write` per lane file), and only then forwarded, so every line the other
//!   side has seen is on disk. A crash loses at most the chunk being handled.
//! * Scope (§1.7): runtime lanes are scoped by `params.threadId`, and a response goes to the scope
//!   of the request it answers (pending maps R and B, keyed `number:3` / `string:x`).
//! * A line longer than 64 MiB is forwarded but not recorded (named on stderr), as bb does.
//! * Provider lanes come from `record child` wrappers that the bridge spawns in place of its
//!   provider. They send their lines to this recorder over a Unix socket named by
//!   `BRIDGEWIRE_RECORD_SOCKET` (an abstract socket, `@name`: nothing on disk, so a `SIGKILL`ed
//!   recorder leaves nothing outside its recordings folder; only peers of the recorder's own user
//!   are served) and wait for the ack before forwarding, so provider lines share
//!   the process's one `seq` counter and the same record-before-forward guarantee. The scope is
//!   `BRIDGEWIRE_RECORD_THREAD` (or `--thread`), set by the bridge when it spawns the child;
//!   absent means `_process`. The wrapper removes both variables from the provider's
//!   environment, so a recorded provider never records itself.

use crate::lane::write::{LaneWriter, Line};
use crate::rpc_scan::{self, IdKey, RpcRef};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

pub const SOCKET_ENV: &str = "BRIDGEWIRE_RECORD_SOCKET";
pub const THREAD_ENV: &str = "BRIDGEWIRE_RECORD_THREAD";
/// bb's own switch; removed from children like ours.
pub const BB_RECORD_ENV: &str = "BB_PROVIDER_BRIDGE_RECORD_DIR";

/// The longest line recorded (bb's JSON-RPC line limit).
pub const MAX_RECORDED_LINE: usize = 64 * 1024 * 1024;

/// The read buffer: as large as the pipes are made ([`widen_pipe`]), so one read takes what a
/// fast peer has written and one batch of lane writes covers it.
const CHUNK: usize = 1024 * 1024;

/// Gives a pipe (if `fd` is one) a 1 MiB buffer, the unprivileged maximum by default: fewer,
/// larger reads and writes, so fewer wake-ups and fewer lane writes per byte. The data and its
/// order are the pipe's as before; failures (a file, a tty, a lower limit) are ignored.
fn widen_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: fstat fills a struct we own; F_SETPIPE_SZ only changes a pipe's capacity.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
            let _ = libc::fcntl(fd, libc::F_SETPIPE_SZ, CHUNK as libc::c_int);
        }
    }
}

/// Scopes runtime-lane lines as bb does: pending request maps per direction.
///
/// Unlike bb's, each map holds at most [`PENDING_CAP`] requests (oldest forgotten), so a peer
/// that never answers cannot grow the recorder without bound; a response to a forgotten request
/// keeps its provisional scope, as an unmatched response does in bb.
#[derive(Default)]
pub struct Scoper {
    /// Runtime→bridge requests awaiting a bridge→runtime response (`None` = `_process`).
    r: Pending,
    /// Bridge→runtime requests awaiting a runtime→bridge response.
    b: Pending,
}

pub const PENDING_CAP: usize = 1 << 16;

/// Requests awaiting their response: id → the request's scope, at most [`PENDING_CAP`].
///
/// Every request a peer sends is filed here and every response looked up, so the maps are on
/// the recorder's per-line path: number ids (JSON-RPC's usual kind) are keyed by their bits
/// with a cheap seeded hash, string ids by their text (looked up borrowed, no allocation).
#[derive(Default)]
struct Pending {
    /// id → (the slot it was filed under, the request's scope).
    numbers: HashMap<u64, (u64, Option<Box<str>>), IdBits>,
    strings: HashMap<Box<str>, (u64, Option<Box<str>>)>,
    /// Filing order, for forgetting the oldest; a removed id leaves its slot until it comes
    /// round (the order never holds more than the cap). Each slot carries its filing number:
    /// an id answered and then used again is filed anew, and its old slot coming round must not
    /// forget the new request.
    order: VecDeque<(IdKey<'static>, u64)>,
    filed: u64,
}

impl Pending {
    fn insert(&mut self, id: IdKey<'_>, scope: Option<Box<str>>) {
        use std::collections::hash_map::Entry;
        let slot = self.filed;
        let fresh = match &id {
            IdKey::Number(n) => match self.numbers.entry(*n) {
                Entry::Occupied(mut e) => {
                    e.get_mut().1 = scope;
                    false
                }
                Entry::Vacant(e) => {
                    e.insert((slot, scope));
                    true
                }
            },
            IdKey::String(s) => match self.strings.get_mut(&**s) {
                Some(e) => {
                    e.1 = scope;
                    false
                }
                None => {
                    self.strings.insert(Box::from(&**s), (slot, scope));
                    true
                }
            },
        };
        if fresh {
            self.filed += 1;
            self.order.push_back((id.into_owned(), slot));
            while self.order.len() > PENDING_CAP {
                // Only the entry filed under this slot goes: a stale slot forgets nothing.
                match self.order.pop_front() {
                    Some((IdKey::Number(n), slot))
                        if self.numbers.get(&n).is_some_and(|e| e.0 == slot) =>
                    {
                        self.numbers.remove(&n);
                    }
                    Some((IdKey::String(s), slot))
                        if self.strings.get(&*s).is_some_and(|e| e.0 == slot) =>
                    {
                        self.strings.remove(&*s);
                    }
                    _ => {}
                }
            }
        }
    }

    fn remove(&mut self, id: &IdKey<'_>) -> Option<Option<Box<str>>> {
        match id {
            IdKey::Number(n) => self.numbers.remove(n).map(|e| e.1),
            IdKey::String(s) => self.strings.remove(&**s).map(|e| e.1),
        }
    }
}

/// Hashes a number id's `f64` bits: one multiply folded over 128 bits, seeded per map from
/// std's random keys (so a peer cannot pick ids that collide), instead of SipHash's rounds.
#[derive(Clone)]
struct IdBits(u64);

impl Default for IdBits {
    fn default() -> Self {
        use std::hash::BuildHasher;
        IdBits(std::collections::hash_map::RandomState::new().hash_one(0x9e37_79b9_7f4a_7c15u64))
    }
}

impl std::hash::BuildHasher for IdBits {
    type Hasher = IdBitsHasher;
    fn build_hasher(&self) -> IdBitsHasher {
        IdBitsHasher(self.0)
    }
}

struct IdBitsHasher(u64);

impl std::hash::Hasher for IdBitsHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        let p = ((self.0 ^ n) as u128).wrapping_mul(0x5851_f42d_4c95_7f2d_u128 | (1 << 64));
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Scoper {
    /// The scope of a line on `runtime→bridge` (`from_runtime`) or `bridge→runtime`.
    pub fn scope(&mut self, line: &[u8], from_runtime: bool) -> Option<String> {
        let rpc = rpc_scan::scan_line(line, &mut |_| false).rpc;
        self.scope_of(rpc, from_runtime).map(Cow::into_owned)
    }

    /// The scope of a line already scanned ([`rpc_scan::scan_line`]); borrowed from the line
    /// unless it comes from the request a response answers.
    pub fn scope_of<'a>(
        &mut self,
        rpc: Option<RpcRef<'a>>,
        from_runtime: bool,
    ) -> Option<Cow<'a, str>> {
        let info = rpc?; // non-JSON and non-objects go to _process
        let (own, opposite) = if from_runtime {
            (&mut self.r, &mut self.b)
        } else {
            (&mut self.b, &mut self.r)
        };
        if info.is_request() {
            let id = info.id.expect("a request has an id");
            own.insert(id, info.thread_id.as_deref().map(Box::from));
            info.thread_id
        } else if info.is_response() {
            match opposite.remove(info.id.as_ref().expect("a response has an id")) {
                Some(scope) => scope.map(|s| Cow::Owned(s.into())),
                None => info.thread_id,
            }
        } else {
            info.thread_id
        }
    }
}

/// Splits a byte stream into lines, carrying partial lines between chunks and bounding memory.
#[derive(Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// Inside a line longer than the limit: drop bytes until the next `\n`.
    skipping: Option<usize>,
}

/// What a chunk produced.
pub enum Piece<'a> {
    Line(&'a [u8]),
    /// A line over the limit ended here (its length), unrecorded.
    Oversized(usize),
}

impl LineSplitter {
    /// Feeds a chunk and calls `f` for every complete line (without `\n` and one trailing `\r`).
    pub fn feed(&mut self, chunk: &[u8], mut f: impl FnMut(Piece<'_>)) {
        let mut rest = chunk;
        while !rest.is_empty() {
            match memchr::memchr(b'\n', rest) {
                Some(i) => {
                    let part = &rest[..i];
                    rest = &rest[i + 1..];
                    if let Some(n) = self.skipping.take() {
                        f(Piece::Oversized(n + part.len()));
                        continue;
                    }
                    if self.pending.is_empty() {
                        f(Piece::Line(strip_cr(part)));
                    } else {
                        self.pending.extend_from_slice(part);
                        let line = std::mem::take(&mut self.pending);
                        f(Piece::Line(strip_cr(&line)));
                        self.pending = line;
                        self.pending.clear();
                    }
                }
                None => {
                    if let Some(n) = &mut self.skipping {
                        *n += rest.len();
                    } else if self.pending.len() + rest.len() > MAX_RECORDED_LINE {
                        self.skipping = Some(self.pending.len() + rest.len());
                        self.pending = Vec::new();
                    } else {
                        self.pending.extend_from_slice(rest);
                    }
                    rest = &[];
                }
            }
        }
    }

    /// The unterminated tail at end of stream.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if self.skipping.is_some() || self.pending.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.pending))
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn read_retry(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Frames chunks into lines and hands each chunk's complete lines to `record` at once.
struct Framer<'d> {
    splitter: LineSplitter,
    direction: &'d str,
    /// Per chunk: each line as (offset, len) in the chunk, or (`usize::MAX`, index in `owned`)
    /// for a line that straddled chunks (materialized by the splitter).
    spans: Vec<(usize, usize)>,
    /// The lines handed to `record`, kept allocated between chunks ([`recycle`]).
    refs: Vec<&'static [u8]>,
}

impl<'d> Framer<'d> {
    fn new(direction: &'d str) -> Self {
        Framer {
            splitter: LineSplitter::default(),
            direction,
            spans: Vec::new(),
            refs: Vec::new(),
        }
    }

    fn feed(&mut self, chunk: &[u8], record: &mut impl FnMut(&[&[u8]])) {
        let mut owned: Vec<Vec<u8>> = Vec::new();
        let direction = self.direction;
        let spans = &mut self.spans;
        spans.clear();
        self.splitter.feed(chunk, |piece| match piece {
            Piece::Line(l) => {
                let base = chunk.as_ptr() as usize;
                let p = l.as_ptr() as usize;
                if p >= base && p + l.len() <= base + chunk.len() {
                    spans.push((p - base, l.len()));
                } else {
                    owned.push(l.to_vec());
                    spans.push((usize::MAX, owned.len() - 1));
                }
            }
            Piece::Oversized(len) => eprintln!(
                "bridgewire: a {direction} line of {len} bytes exceeds {MAX_RECORDED_LINE} bytes; forwarded, not recorded"
            ),
        });
        if !spans.is_empty() {
            let mut refs: Vec<&[u8]> = recycle(std::mem::take(&mut self.refs));
            refs.extend(spans.iter().map(|&(off, len)| {
                if off == usize::MAX {
                    owned[len].as_slice()
                } else {
                    &chunk[off..off + len]
                }
            }));
            record(&refs);
            self.refs = recycle(refs);
        }
    }

    fn finish(&mut self, record: &mut impl FnMut(&[&[u8]])) {
        if let Some(tail) = self.splitter.finish() {
            // The line crossed even without its terminator: keep it.
            record(&[strip_cr(&tail)]);
        }
    }
}

/// Copies `input` to `output`, handing each chunk's complete lines to `record` first.
/// Stops forwarding (but keeps reading and recording) once `output` is gone.
///
/// When `input` is a pipe the bytes are forwarded without passing through user space
/// ([`zero_copy`]); otherwise (a file, a tty, a socket) or when the kernel refuses, each chunk
/// is read and written. Either way a chunk's complete lines are on disk before its first byte
/// is forwarded, and the bytes forwarded are exactly the bytes read.
fn tee_pump(
    mut input: impl Read + std::os::fd::AsFd,
    mut output: impl Write + std::os::fd::AsFd,
    direction: &str,
    spin: &SpinCtl,
    mut record: impl FnMut(&[&[u8]]),
) {
    let mut buf = vec![0u8; CHUNK];
    let mut framer = Framer::new(direction);
    let mut output_open = true;
    #[cfg(target_os = "linux")]
    let (in_fd, out_fd) = {
        use std::os::fd::AsRawFd;
        (input.as_fd().as_raw_fd(), output.as_fd().as_raw_fd())
    };
    #[cfg(target_os = "linux")]
    let mut dup = if zero_copy::is_pipe(in_fd) {
        zero_copy::Dup::new()
    } else {
        None
    };
    // Bytes the last round carried: a bulk stream goes zero-copy, a trickle of small writes
    // (one request at a time) goes by read/write, which takes one syscall less per round.
    let mut last = 0usize;
    let spin_fd = {
        use std::os::fd::AsRawFd;
        input.as_fd().as_raw_fd()
    };
    loop {
        #[cfg(target_os = "linux")]
        if output_open
            && last >= ZERO_COPY_FROM
            && let Some(d) = &dup
        {
            match zero_copy::round(d, in_fd, out_fd, &mut buf, &mut framer, &mut record) {
                zero_copy::Round::Moved(n) => {
                    last = n;
                    continue;
                }
                zero_copy::Round::Input => break,
                zero_copy::Round::Unsupported => {
                    dup = None;
                    continue;
                }
                zero_copy::Round::Forwarding {
                    consumed,
                    moved,
                    error,
                } => {
                    // The chunk's lines are recorded and `moved` of its bytes forwarded; the
                    // rest is still in the input pipe: take it off and write it ourselves.
                    dup = None;
                    let rest = &mut buf[moved..consumed];
                    let mut got = 0;
                    while got < rest.len() {
                        match read_retry(&mut input, &mut rest[got..]) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got += n,
                        }
                    }
                    let unsupported = matches!(
                        error.raw_os_error(),
                        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                    );
                    if !unsupported
                        || output.write_all(&rest[..got]).is_err()
                        || output.flush().is_err()
                    {
                        output_open = false;
                    }
                    continue;
                }
            }
        }
        let interactive = last > 0 && last < ZERO_COPY_FROM && !spin.window.is_zero();
        let waiting = interactive.then(|| spin.before_read(spin_fd));
        let n = match read_retry(&mut input, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((start, spun)) = waiting {
            spin.waited(start.elapsed(), spun);
        }
        let chunk = &buf[..n];
        framer.feed(chunk, &mut record);
        if output_open && (output.write_all(chunk).is_err() || output.flush().is_err()) {
            output_open = false;
        }
        last = n;
    }
    framer.finish(&mut record);
}

/// Whether a pump polls its input for a while after a small round before it blocks in `read`
/// (`BRIDGEWIRE_RECORD_SPIN_US` fixes the window; 0 turns polling off; unset, the window is
/// fitted to the machine, see below).
///
/// Why: a recorded round trip hands over four times (runtime → recorder → bridge → recorder →
/// runtime) instead of twice, and on an otherwise idle VM each hand-over to a thread whose
/// vCPU has halted costs ~15-25 µs (waking the halted vCPU). Measured with one-line pings
/// through a two-thread C relay that does nothing but read, append to a file and write
/// (`relay3.c` in the rec5 session's tools): bridge alone p50 5.4 µs, through the relay 58 µs,
/// with a 20 µs poll before blocking 8.9-9.6 µs. A pump that is polling keeps its vCPU awake,
/// needs no wake-up when the answer comes, and the other side's wake-ups land on busy vCPUs.
///
/// Only where it pays: on a loaded machine the pollers take CPU the bridge and the runtime
/// need (the same relay: 45-58 µs p50 with the poll against 20 µs without). Whether polling
/// pays is measured, not guessed: the two pumps of a recorder share one controller that
/// alternates [`SPIN_MEASURE`] interactive reads with polling and [`SPIN_MEASURE_BLOCKING`]
/// without, compares
/// the median wait for data (a median: a read after a pause, the user thinking, must not
/// decide), and polls for the next [`SPIN_USE`] reads only when polling was clearly faster
/// (median under [`SPIN_PAYS`] of blocking's). Bounded: only after a round under
/// [`ZERO_COPY_FROM`] (bulk rounds never poll), and for at most the window per read; an idle
/// recorder does no reads, so it polls nothing.
///
/// Every interactive read is polled and measured, however long ago the last data came: a
/// recency test (an earlier version) kept a ping-pong that blocking had made slow from ever
/// being polled again, since its next request then came later than the window.
///
/// The window: a poll that ends before the answer comes only burns CPU, and how long an answer
/// takes depends on the host (one VM answered a blocking ping-pong in 3 µs, the same VM on
/// another day in 50-120 µs, where a 20 µs poll never caught an answer and was dropped as not
/// paying: +95 µs p50 through the recorder, against +5 µs with a 100 µs poll). Unless the
/// window is set, it starts at [`SPIN_MAX_US`] (a poll ends when the answer comes, so a fast
/// host loses nothing, and a slow one is served from its first read; at most 128 such polls
/// before the first measure) and, after each measure without polling, becomes 5/4 of that
/// median wait (the answer came within it), between [`SPIN_MIN_US`] and [`SPIN_MAX_US`]; when
/// polling did not pay and the new window is over twice the one it was measured with (the host
/// got slower), polling is measured again at once with the new window, not after [`SPIN_USE`]
/// reads.
pub(crate) struct SpinCtl {
    /// The poll's bound; zero turns polling off.
    window: std::time::Duration,
    /// Whether the window follows the waits measured (no window set).
    fitted: bool,
    state: Mutex<SpinState>,
}

#[derive(Default)]
struct SpinState {
    /// Reads done in the current phase.
    reads: u32,
    /// 0: measuring with polling, 1: measuring without, 2: using `use_spin`.
    phase: u8,
    use_spin: bool,
    /// The current measuring phase's waits, ns (saturating at ~4 s).
    waits: Vec<u32>,
    /// The median wait of the last phase measured with polling, ns.
    spin_median_ns: u32,
    /// Reads of the current use phase (0 before the first decision).
    use_reads: u32,
    /// The poll's length now, ns: the window set, or the one fitted so far.
    poll_ns: u32,
}

/// Polling is kept when its median wait is under this share of blocking's: when both are
/// about the same the poll only burns CPU.
const SPIN_PAYS: f64 = 0.8;

// Phases long enough that a decision is not one of a few cold reads at start (32-read phases
// decided a whole 5 000-ping run either way, by chance), short enough that a wrong one is
// measured again within a few thousand reads.

const SPIN_MEASURE: u32 = 128;
const SPIN_USE: u32 = 2048;

/// Reads measured without polling: fewer, since on a host where polling pays each of them is
/// a slow answer (a wake-up of tens of µs): 128 of them every 2 048 reads put a 4 000-ping run's
/// p99 among them (+115 µs against +7 µs p50). A blocking wait is the steadier measure (the
/// wake-up's cost), so a shorter median still tells.
const SPIN_MEASURE_BLOCKING: u32 = 32;

/// While a decision holds, each measure comes after twice as many reads as the last, up to
/// this many (a changed decision starts again at [`SPIN_USE`]).
const SPIN_USE_MAX: u32 = 32_768;

/// The fitted window's bounds ([`SpinCtl`]).
const SPIN_MIN_US: u64 = 20;
const SPIN_MAX_US: u64 = 250;

/// See [`SpinCtl`].
pub const SPIN_ENV: &str = "BRIDGEWIRE_RECORD_SPIN_US";

impl SpinCtl {
    pub(crate) fn from_env() -> SpinCtl {
        let set = std::env::var(SPIN_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        match set {
            Some(us) => SpinCtl::fixed(std::time::Duration::from_micros(us.min(10_000))),
            None => SpinCtl::fitted(),
        }
    }

    /// Polls of exactly `window` (zero: never).
    fn fixed(window: std::time::Duration) -> SpinCtl {
        SpinCtl {
            window,
            fitted: false,
            state: Mutex::new(SpinState {
                // At most 10 ms ([`SpinCtl::from_env`]).
                poll_ns: window.as_nanos() as u32,
                ..SpinState::default()
            }),
        }
    }

    /// Polls whose length is fitted to the waits measured, up to [`SPIN_MAX_US`].
    fn fitted() -> SpinCtl {
        SpinCtl {
            window: std::time::Duration::from_micros(SPIN_MAX_US),
            fitted: true,
            state: Mutex::new(SpinState {
                poll_ns: (SPIN_MAX_US * 1000) as u32,
                ..SpinState::default()
            }),
        }
    }

    /// How long a poll lasts now.
    fn poll_len(s: &SpinState) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::from(s.poll_ns))
    }

    #[cfg(test)]
    fn spinning(&self) -> bool {
        self.poll().is_some()
    }

    /// How long to poll before the next interactive read, if at all.
    fn poll(&self) -> Option<std::time::Duration> {
        let s = self.state.lock().expect("spin state");
        let on = match s.phase {
            0 => true,
            1 => false,
            _ => s.use_spin,
        };
        on.then(|| Self::poll_len(&s))
    }

    /// One interactive read waited `waited` for its data, polling first or not (`spun`). Only
    /// the reads of the phase's kind count, so both medians are over reads of one kind.
    fn waited(&self, waited: std::time::Duration, spun: bool) {
        let mut s = self.state.lock().expect("spin state");
        match (s.phase, spun) {
            (0, true) | (1, false) => {
                s.waits
                    .push(u32::try_from(waited.as_nanos()).unwrap_or(u32::MAX));
            }
            (0 | 1, _) => return, // the other pump's read, decided before the phase changed
            _ => {}
        }
        s.reads += 1;
        let limit = match s.phase {
            0 => SPIN_MEASURE,
            1 => SPIN_MEASURE_BLOCKING,
            _ => s.use_reads.max(SPIN_USE),
        };
        if s.reads < limit {
            return;
        }
        s.reads = 0;
        let median = |w: &mut Vec<u32>| {
            w.sort_unstable();
            let m = w.get(w.len() / 2).copied().unwrap_or(0);
            w.clear();
            m
        };
        match s.phase {
            0 => {
                s.spin_median_ns = median(&mut s.waits);
                s.phase = 1;
            }
            1 => {
                let blocking = median(&mut s.waits);
                let was_spinning = s.use_spin;
                s.use_spin = f64::from(s.spin_median_ns) < f64::from(blocking) * SPIN_PAYS;
                s.use_reads = if s.use_reads > 0 && s.use_spin == was_spinning {
                    (s.use_reads * 2).min(SPIN_USE_MAX)
                } else {
                    SPIN_USE
                };
                s.phase = 2;
                if self.fitted {
                    let was = s.poll_ns;
                    let fit =
                        (u64::from(blocking) * 5 / 4).clamp(SPIN_MIN_US * 1000, SPIN_MAX_US * 1000);
                    s.poll_ns = fit as u32;
                    if !s.use_spin && u64::from(was) * 2 < fit {
                        // The poll measured was too short to catch an answer: measure
                        // polling again now, with one that can.
                        s.phase = 0;
                    }
                }
            }
            _ => s.phase = 0,
        }
    }

    /// Before an interactive read: polls `fd` (without blocking) until it is readable or the
    /// window has passed, if the controller says so. Returns when it started waiting and
    /// whether it polled.
    fn before_read(&self, fd: std::os::fd::RawFd) -> (std::time::Instant, bool) {
        let start = std::time::Instant::now();
        let Some(poll) = self.poll() else {
            return (start, false);
        };
        let deadline = start + poll;
        loop {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own, zero timeout.
            if unsafe { libc::poll(&mut p, 1, 0) } != 0 || std::time::Instant::now() >= deadline {
                return (start, true);
            }
            std::hint::spin_loop();
        }
    }
}

/// A round that carried at least this many bytes makes the next one zero-copy: below it the
/// copy saved costs less than the extra syscall (`tee`, then `read` and `splice`, against
/// `read` and `write`), and small rounds are the interactive ones, where latency counts.
const ZERO_COPY_FROM: usize = 16 * 1024;

/// Forwarding from a pipe without copying through user space: `tee(2)` duplicates what the
/// input pipe holds into a private pipe without consuming it; the copy is read, framed and
/// recorded; then `splice(2)` moves exactly those bytes from the input pipe to the output.
/// One user-space copy per byte instead of two, and the order is the read/write path's:
/// recorded, then forwarded.
#[cfg(target_os = "linux")]
mod zero_copy {
    use super::{CHUNK, Framer, widen_pipe};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    pub fn is_pipe(fd: RawFd) -> bool {
        // SAFETY: fstat fills a struct we own.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
        }
    }

    /// The private pipe `tee(2)` fills.
    pub struct Dup {
        read: OwnedFd,
        write: OwnedFd,
    }

    impl Dup {
        pub fn new() -> Option<Dup> {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two descriptors we then own.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return None;
            }
            // SAFETY: both are fresh descriptors owned by nobody else.
            let (read, write) =
                unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            widen_pipe(write.as_raw_fd());
            Some(Dup { read, write })
        }
    }

    /// What one [`round`] did.
    pub enum Round {
        /// `n` bytes recorded and forwarded.
        Moved(usize),
        /// End of input (or a read error), everything forwarded.
        Input,
        /// `tee(2)` is not possible here; nothing of the input was consumed.
        Unsupported,
        /// Forwarding failed after `consumed` bytes of the current chunk (in `buf`) were
        /// recorded and `moved` of them forwarded (`error`: `EPIPE` when the output is gone,
        /// `EINVAL` when it cannot take a splice).
        Forwarding {
            consumed: usize,
            moved: usize,
            error: io::Error,
        },
    }

    /// Waits until `fd` is ready for `events` (for descriptors in non-blocking mode).
    fn wait(fd: RawFd, events: libc::c_short) {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one pollfd we own.
        unsafe { libc::poll(&mut p, 1, -1) };
    }

    /// Duplicates what the input holds (waiting for something), records its complete lines,
    /// then moves the same bytes to the output.
    pub fn round(
        dup: &Dup,
        input: RawFd,
        output: RawFd,
        buf: &mut [u8],
        framer: &mut Framer<'_>,
        record: &mut impl FnMut(&[&[u8]]),
    ) -> Round {
        let (dup_r, dup_w) = (dup.read.as_raw_fd(), dup.write.as_raw_fd());
        let cap = buf.len().min(CHUNK);
        let n = loop {
            // SAFETY: tee between two pipe descriptors; no memory is passed.
            let n = unsafe { libc::tee(input, dup_w, cap, 0) };
            if n > 0 {
                break n as usize;
            }
            if n == 0 {
                return Round::Input;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => wait(input, libc::POLLIN),
                Some(libc::EINVAL | libc::ENOSYS) => return Round::Unsupported,
                _ => return Round::Input,
            }
        };
        // The copy is whole in the private pipe (it was empty): read it all.
        let mut got = 0;
        while got < n {
            // SAFETY: reads into `buf[got..n]`, which we own.
            let r = unsafe { libc::read(dup_r, buf[got..n].as_mut_ptr().cast(), n - got) };
            if r > 0 {
                got += r as usize;
            } else if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            } else {
                return Round::Input;
            }
        }
        framer.feed(&buf[..n], record);
        // Recorded: now the same bytes leave the input pipe for the output.
        let mut moved = 0;
        while moved < n {
            // SAFETY: splice between descriptors; no memory is passed.
            let r = unsafe {
                libc::splice(
                    input,
                    std::ptr::null_mut(),
                    output,
                    std::ptr::null_mut(),
                    n - moved,
                    libc::SPLICE_F_MOVE,
                )
            };
            if r > 0 {
                moved += r as usize;
                continue;
            }
            let e = if r == 0 {
                io::Error::from_raw_os_error(libc::EPIPE)
            } else {
                io::Error::last_os_error()
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => wait(output, libc::POLLOUT),
                _ => {
                    return Round::Forwarding {
                        consumed: n,
                        moved,
                        error: e,
                    };
                }
            }
        }
        Round::Moved(n)
    }
}

/// What the two directions of `record bb` share.
struct Shared {
    scoper: Mutex<Scoper>,
    spin: SpinCtl,
}

/// Options of `record bb`.
pub struct RecordBridge {
    pub dir: PathBuf,
    pub provider: Option<String>,
    pub command: Vec<OsString>,
    /// Credential redaction of every recorded line (bb §1.9); on by default.
    pub redact: bool,
    /// Lane file mode (default `0600`, folders `0700`).
    pub mode: Option<u32>,
}

/// Runs the bridge under the recorder; returns its exit status.
pub fn record_bridge(opts: &RecordBridge) -> anyhow::Result<std::process::ExitStatus> {
    let root = match &opts.provider {
        Some(p) => opts.dir.join(crate::lane::scope_dir_name(Some(p))),
        None => opts.dir.clone(),
    };
    let mut lanes = LaneWriter::create(&root)?;
    if let Some(m) = opts.mode {
        lanes = lanes.with_mode(m)?;
    }
    if opts.redact {
        // One known-secret set per recording: a value redacted once stays redacted. It starts
        // with what the bridge is given (`--api-key K`, a GH_TOKEN it inherits): a bridge that
        // echoes its own credentials must not get them into a lane.
        let secrets = crate::redact::Secrets::new();
        crate::redact::learn_command_line(&secrets, &opts.command);
        crate::redact::learn_environment(&secrets);
        lanes = lanes.with_secrets(secrets);
    }
    // One writer per thread (siblings share the seq counter): directions never wait for each
    // other's disk writes.
    let writer = lanes;
    // The pending maps and the poll controller ([`SpinCtl`]: whether polling pays is a
    // property of the round trip, not of one direction) are the two directions' to share.
    let shared = Arc::new(Shared {
        scoper: Mutex::new(Scoper::default()),
        spin: SpinCtl::from_env(),
    });
    let redact = opts.redact;

    // The socket provider wrappers report to: abstract, so it needs no folder and leaves
    // nothing behind whatever ends the recorder.
    let sock_name = format!(
        "bridgewire-rec-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let listener = UnixListener::bind_addr(&abstract_addr(&sock_name)?)?;
    let sock_env = format!("@{sock_name}");
    {
        let template = writer.sibling();
        std::thread::Builder::new()
            .name("child-lanes".into())
            .spawn(move || serve_children(listener, template))?;
    }

    let (program, args) = opts
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no bridge command given after --"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env(SOCKET_ENV, &sock_env)
        .env_remove(BB_RECORD_ENV);
    crate::proc::isolate(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start bridge {:?}: {e}", program))?;
    crate::proc::forward_signals(child.id())?;
    let child_stdin = child.stdin.take().expect("piped");
    let child_stdout = child.stdout.take().expect("piped");
    {
        use std::os::fd::AsRawFd;
        for fd in [0, 1, child_stdin.as_raw_fd(), child_stdout.as_raw_fd()] {
            widen_pipe(fd);
        }
    }

    let to_bridge = {
        let writer = writer.sibling();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("runtime→bridge".into())
            .spawn(move || {
                record_direction(
                    &*std_fd(0),
                    child_stdin,
                    "runtime→bridge",
                    true,
                    writer,
                    &shared,
                    redact,
                );
            })?
    };
    let from_bridge = {
        let writer = writer.sibling();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("bridge→runtime".into())
            .spawn(move || {
                record_direction(
                    child_stdout,
                    &*std_fd(1),
                    "bridge→runtime",
                    false,
                    writer,
                    &shared,
                    redact,
                );
            })?
    };
    let status = child.wait()?;
    // What the bridge left running would hold its stdout open (and outlive the recording).
    crate::proc::kill_wrapped_leftovers();
    let _ = from_bridge.join();
    // The runtime may keep its end open after the bridge is gone; stdin is not ours to wait on.
    if to_bridge.is_finished() {
        let _ = to_bridge.join();
    }
    Ok(status)
}

fn record_direction(
    input: impl Read + std::os::fd::AsFd,
    output: impl Write + std::os::fd::AsFd,
    dir: &'static str,
    from_runtime: bool,
    mut writer: LaneWriter,
    shared: &Shared,
    redact: bool,
) {
    let (scoper, spin) = (&shared.scoper, &shared.spin);
    let mut key_hits: Vec<bool> = Vec::new();
    let mut keys = KeyMemo::default();
    // The per-chunk vectors keep their allocations between chunks ([`recycle`]): a one-line
    // chunk (interactive traffic) would otherwise allocate three of them on its way through.
    let mut scans_kept: Vec<Option<RpcRef<'static>>> = Vec::new();
    let mut scopes_kept: Vec<Option<Cow<'static, str>>> = Vec::new();
    let mut batch_kept: Vec<Line<'static>> = Vec::new();
    tee_pump(input, output, dir, spin, |lines| {
        // One pass per line finds its scope and whether redaction must look at it; the shared
        // pending maps are locked only to file and match the ids.
        key_hits.clear();
        let mut scans: Vec<Option<RpcRef<'_>>> = recycle(std::mem::take(&mut scans_kept));
        scans.extend(lines.iter().map(|l| {
            let scan = rpc_scan::scan_line_raw_keys(
                l,
                RecorderKeys {
                    redact,
                    memo: &mut keys,
                },
            );
            key_hits.push(scan.key_hit);
            scan.rpc
        }));
        let mut scopes: Vec<Option<Cow<'_, str>>> = recycle(std::mem::take(&mut scopes_kept));
        {
            let mut s = scoper.lock().expect("scoper");
            scopes.extend(scans.drain(..).map(|rpc| s.scope_of(rpc, from_runtime)));
        }
        scans_kept = recycle(scans);
        let mut batch: Vec<Line<'_>> = recycle(std::mem::take(&mut batch_kept));
        batch.extend(lines.iter().zip(&scopes).map(|(l, s)| Line {
            scope: s.as_deref(),
            dir,
            bytes: l,
            conn: None,
        }));
        writer.append_batch_scanned(&batch, &key_hits);
        batch_kept = recycle(batch);
        scopes_kept = recycle(scopes);
    });
}

/// `v`'s allocation, emptied, for elements of another lifetime: per-chunk vectors that borrow
/// the chunk are reused instead of allocated per chunk. (Collecting an emptied `IntoIter` into
/// a type of the same size and alignment keeps the buffer; were it not kept, the result would
/// only be a fresh empty vector.)
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!()).collect()
}

/// The recorder's key test for [`rpc_scan::scan_line_raw_keys`] (every key of every line),
/// inlined into the walk: as a closure it stayed a call per key.
struct RecorderKeys<'k> {
    redact: bool,
    memo: &'k mut KeyMemo,
}

impl rpc_scan::KeyTest for RecorderKeys<'_> {
    #[inline(always)]
    fn may_matter(&mut self, key: &[u8]) -> bool {
        self.redact && self.memo.may_matter(key)
    }
}

/// [`crate::redact::key_may_matter`] remembered for the keys seen last: a wire repeats the
/// same few dozen keys (`jsonrpc`, `id`, `params`, …) on every line, and the test normalizes the
/// key and compares it with every pattern. Direct-mapped on the key's bytes (no UTF-8 check on a
/// hit); a collision only costs a recompute; keys longer than a slot are tested every time.
struct KeyMemo {
    slots: Vec<KeySlot>,
}

const KEY_SLOT_BYTES: usize = 24;
const KEY_SLOTS: usize = 512;

#[derive(Clone, Copy)]
struct KeySlot {
    /// The key's bytes, zero-padded; `len` > [`KEY_SLOT_BYTES`] marks an empty slot.
    bytes: [u8; KEY_SLOT_BYTES],
    len: u8,
    matters: bool,
}

impl Default for KeyMemo {
    fn default() -> Self {
        KeyMemo {
            slots: vec![
                KeySlot {
                    bytes: [0; KEY_SLOT_BYTES],
                    len: u8::MAX,
                    matters: false,
                };
                KEY_SLOTS
            ],
        }
    }
}

impl KeyMemo {
    /// `key`: a key's text, or raw bytes that may not be UTF-8 (never a match then).
    #[inline(always)]
    fn may_matter(&mut self, key: &[u8]) -> bool {
        // Nearly every key fails the tail test; the memo is for those that pass it.
        crate::redact::key_tail_may_matter(key) && self.remembered(key)
    }

    #[inline(never)]
    fn remembered(&mut self, key: &[u8]) -> bool {
        let test = |key: &[u8]| std::str::from_utf8(key).is_ok_and(crate::redact::key_may_matter);
        if key.len() > KEY_SLOT_BYTES {
            return test(key);
        }
        let mut padded = [0u8; KEY_SLOT_BYTES];
        let mut h = key.len() as u32;
        for (i, &c) in key.iter().enumerate() {
            padded[i] = c;
            h = h.wrapping_mul(31).wrapping_add(c as u32);
        }
        let slot = &mut self.slots[(h as usize) % KEY_SLOTS];
        if slot.len as usize != key.len() || slot.bytes != padded {
            *slot = KeySlot {
                bytes: padded,
                len: key.len() as u8,
                matters: test(key),
            };
        }
        slot.matters
    }
}

/// Stdin or stdout as an unbuffered file: std's stdout buffers (by line) and stdin copies
/// through an 8 KiB buffer; the pumps do their own framing and write each chunk whole. Never
/// closed (the process's own descriptor).
fn std_fd(fd: std::os::fd::RawFd) -> std::mem::ManuallyDrop<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: 0 and 1 stay open for the life of the process and the File is never dropped.
    std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) })
}

fn abstract_addr(name: &str) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
}

/// The uid of the process at the other end of `conn` (`SO_PEERCRED`).
fn peer_uid(conn: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: getsockopt fills a ucred we own, of the size we pass.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        (libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        ) == 0)
            .then_some(cred.uid)
    }
}

/// Accepts `record child` connections (from the recorder's own user only: an abstract socket
/// has no file permissions) and appends what they send.
fn serve_children(listener: UnixListener, template: LaneWriter) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if peer_uid(&conn) != Some(me) {
            continue;
        }
        let writer = template.sibling();
        let _ = std::thread::Builder::new()
            .name("child-lane".into())
            .spawn(move || {
                if let Err(e) = serve_child(conn, writer)
                    && e.kind() != io::ErrorKind::UnexpectedEof
                {
                    eprintln!("bridgewire recorder: provider lane connection failed: {e}");
                }
            });
    }
}

/// Wire format of the child socket (little-endian):
/// hello = `u32 scope_len` + scope bytes (`u32::MAX` = no scope);
/// batch = `u8 dir` (0 provider→bridge, 1 bridge→provider) + `u32 count` + count × (`u32 len` +
/// bytes); each batch is acknowledged with one byte once it is on disk.
fn serve_child(mut conn: UnixStream, mut writer: LaneWriter) -> io::Result<()> {
    let scope_len = read_u32(&mut conn)?;
    let scope = if scope_len == u32::MAX {
        None
    } else {
        let mut s = vec![0u8; scope_len.min(1 << 20) as usize];
        conn.read_exact(&mut s)?;
        Some(String::from_utf8_lossy(&s).into_owned())
    };
    loop {
        let mut d = [0u8; 1];
        conn.read_exact(&mut d)?;
        let dir = if d[0] == 0 {
            "provider→bridge"
        } else {
            "bridge→provider"
        };
        let count = read_u32(&mut conn)?;
        let mut lines = Vec::with_capacity(count.min(4096) as usize);
        for _ in 0..count {
            let len = read_u32(&mut conn)? as usize;
            if len > MAX_RECORDED_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "line over the limit",
                ));
            }
            let mut l = vec![0u8; len];
            conn.read_exact(&mut l)?;
            lines.push(l);
        }
        let batch: Vec<Line<'_>> = lines
            .iter()
            .map(|l| Line {
                scope: scope.as_deref(),
                dir,
                bytes: l,
                conn: None,
            })
            .collect();
        writer.append_batch(&batch);
        conn.write_all(&[1])?;
    }
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// The client side of the child socket, used by `record child`.
struct ChildLaneClient {
    conn: UnixStream,
}

impl ChildLaneClient {
    fn connect(path: &Path, scope: Option<&str>) -> io::Result<ChildLaneClient> {
        let mut conn = match path.to_str().and_then(|p| p.strip_prefix('@')) {
            Some(name) => UnixStream::connect_addr(&abstract_addr(name)?)?,
            None => UnixStream::connect(path)?,
        };
        match scope {
            Some(s) => {
                conn.write_all(&(s.len() as u32).to_le_bytes())?;
                conn.write_all(s.as_bytes())?;
            }
            None => conn.write_all(&u32::MAX.to_le_bytes())?,
        }
        Ok(ChildLaneClient { conn })
    }

    fn send(&mut self, to_provider: bool, lines: &[&[u8]]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 4).sum::<usize>() + 5);
        buf.push(if to_provider { 1 } else { 0 });
        buf.extend_from_slice(&(lines.len() as u32).to_le_bytes());
        for l in lines {
            buf.extend_from_slice(&(l.len() as u32).to_le_bytes());
            buf.extend_from_slice(l);
        }
        self.conn.write_all(&buf)?;
        let mut ack = [0u8; 1];
        self.conn.read_exact(&mut ack)
    }
}

/// Options of `record child`.
pub struct RecordChild {
    pub thread: Option<String>,
    pub command: Vec<OsString>,
}

/// Runs a provider child under the wrapper; returns its exit status.
pub fn record_child(opts: &RecordChild) -> anyhow::Result<std::process::ExitStatus> {
    let scope = opts
        .thread
        .clone()
        .or_else(|| std::env::var(THREAD_ENV).ok().filter(|s| !s.is_empty()));
    let socket = std::env::var_os(SOCKET_ENV).map(PathBuf::from);
    let (program, args) = opts
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no provider command given after --"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env_remove(SOCKET_ENV)
        .env_remove(THREAD_ENV)
        .env_remove(BB_RECORD_ENV);
    crate::proc::isolate(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start provider {:?}: {e}", program))?;
    crate::proc::forward_signals(child.id())?;
    let child_stdin = child.stdin.take().expect("piped");
    let child_stdout = child.stdout.take().expect("piped");

    // Off when no recorder is listening, like bb's no-op when record mode is off.
    let connect = |s: Option<&str>| -> Option<Arc<Mutex<ChildLaneClient>>> {
        let path = socket.as_ref()?;
        match ChildLaneClient::connect(path, s) {
            Ok(c) => Some(Arc::new(Mutex::new(c))),
            Err(e) => {
                eprintln!(
                    "bridgewire record child: cannot reach the recorder at {}: {e}; not recording",
                    path.display()
                );
                None
            }
        }
    };
    // One connection per direction keeps the two pumps independent.
    let up = connect(scope.as_deref());
    let down = connect(scope.as_deref());
    let spin = Arc::new(SpinCtl::from_env());
    let spin_up = spin.clone();

    let to_provider = std::thread::Builder::new()
        .name("bridge→provider".into())
        .spawn(move || {
            tee_pump(
                io::stdin().lock(),
                child_stdin,
                "bridge→provider",
                &spin,
                |lines| {
                    if let Some(c) = &down
                        && let Err(e) = c.lock().expect("client").send(true, lines)
                    {
                        eprintln!(
                            "bridgewire record child: recorder gone ({e}); lines not recorded"
                        );
                    }
                },
            );
        })?;
    let from_provider = std::thread::Builder::new()
        .name("provider→bridge".into())
        .spawn(move || {
            tee_pump(
                child_stdout,
                io::stdout().lock(),
                "provider→bridge",
                &spin_up,
                |lines| {
                    if let Some(c) = &up
                        && let Err(e) = c.lock().expect("client").send(false, lines)
                    {
                        eprintln!(
                            "bridgewire record child: recorder gone ({e}); lines not recorded"
                        );
                    }
                },
            );
        })?;
    let status = child.wait()?;
    crate::proc::kill_wrapped_leftovers();
    let _ = from_provider.join();
    if to_provider.is_finished() {
        let _ = to_provider.join();
    }
    Ok(status)
}

#[cfg(test)]
mod tests {

    /// An id answered and used again is filed anew: its old slot coming round (after
    /// [`PENDING_CAP`] more requests) forgets nothing that is still pending.
    #[test]
    fn a_reused_id_outlives_its_old_slot() {
        for id in [IdKey::Number(5), IdKey::String("req-5".into())] {
            let mut p = Pending::default();
            p.insert(id.clone(), Some("old".into()));
            assert_eq!(p.remove(&id), Some(Some("old".into())));
            p.insert(id.clone(), Some("new".into()));
            // Other requests, each answered, until the old slot is the one past the cap (the
            // new one is next in line, not yet).
            for n in 0..PENDING_CAP as u64 - 1 {
                let other = IdKey::Number(f64::to_bits(1e9 + n as f64));
                p.insert(other.clone(), None);
                p.remove(&other);
            }
            assert_eq!(p.remove(&id), Some(Some("new".into())), "{id:?}");
            // The oldest still goes when the cap is passed.
            let mut p = Pending::default();
            p.insert(id.clone(), Some("first".into()));
            for n in 0..PENDING_CAP as u64 {
                p.insert(IdKey::Number(f64::to_bits(1e9 + n as f64)), None);
            }
            assert_eq!(p.remove(&id), None, "{id:?}");
        }
    }
    use super::*;

    /// The poll before a read is bounded by its window; the controller measures polling and
    /// not polling and keeps polling only when its median wait is clearly shorter.
    #[test]
    fn spinning_is_bounded_and_measured() {
        use std::os::fd::AsRawFd;
        use std::time::Duration;
        let (r, _w) = std::io::pipe().unwrap();
        let ctl = SpinCtl::fixed(Duration::from_micros(200));
        let us = Duration::from_micros;
        let (start, spun) = ctl.before_read(r.as_raw_fd());
        assert!(spun, "measuring with polling first");
        assert!(start.elapsed() >= us(200), "polled the whole window");
        assert!(start.elapsed() < Duration::from_secs(1));
        // Polling measured slow, blocking fast: blocking is kept for SPIN_USE reads.
        for _ in 0..SPIN_MEASURE {
            ctl.waited(us(50), true);
        }
        assert!(!ctl.spinning(), "measuring without polling");
        for _ in 0..SPIN_MEASURE_BLOCKING {
            ctl.waited(us(20), false);
        }
        assert!(!ctl.spinning());
        assert!(!ctl.before_read(r.as_raw_fd()).1);
        for _ in 0..SPIN_USE {
            ctl.waited(us(20), false);
        }
        // And the other way round; reads of the other kind do not count while measuring.
        assert!(ctl.spinning(), "measuring with polling again");
        for _ in 0..100 {
            ctl.waited(Duration::from_secs(1), false);
        }
        assert!(ctl.spinning());
        // A few reads after long pauses do not move the median.
        for i in 0..SPIN_MEASURE {
            ctl.waited(if i % 8 == 0 { us(900_000) } else { us(9) }, true);
        }
        for i in 0..SPIN_MEASURE_BLOCKING {
            ctl.waited(if i % 8 == 0 { us(900_000) } else { us(58) }, false);
        }
        assert!(ctl.spinning(), "polling paid: kept");
        for _ in 0..SPIN_USE {
            ctl.waited(us(9), true);
        }
        // About the same either way: the poll would only burn CPU.
        measure(&ctl, us(50), us(55));
        assert!(!ctl.spinning(), "polling no clearly faster: dropped");
    }

    /// One measure: [`SPIN_MEASURE`] polled reads that waited `polled`, then
    /// [`SPIN_MEASURE_BLOCKING`] blocking ones that waited `blocked`.
    fn measure(ctl: &SpinCtl, polled: std::time::Duration, blocked: std::time::Duration) {
        for _ in 0..SPIN_MEASURE {
            ctl.waited(polled, true);
        }
        for _ in 0..SPIN_MEASURE_BLOCKING {
            ctl.waited(blocked, false);
        }
    }

    /// Unset, the window follows the waits: a host whose answers take longer than the first
    /// poll gets a poll that catches them, measured again at once; a fast host keeps a short
    /// one; the window stays within its bounds.
    #[test]
    fn the_poll_window_is_fitted_to_the_waits() {
        use std::time::Duration;
        let us = Duration::from_micros;
        let ctl = SpinCtl::fitted();
        assert_eq!(
            ctl.poll(),
            Some(us(SPIN_MAX_US)),
            "starts polling, at the bound"
        );
        // A fast host: answers in 3 µs polled, 10 µs blocked; polling pays, with a short poll.
        measure(&ctl, us(3), us(10));
        assert_eq!(
            ctl.poll(),
            Some(us(SPIN_MIN_US)),
            "5/4 of 10 µs, at least the minimum"
        );
        for _ in 0..SPIN_USE {
            ctl.waited(us(3), true);
        }
        // The host got slow, answers take ~100 µs: a 20 µs poll never catches one (the waits
        // are the same either way).
        measure(&ctl, us(100), us(100));
        assert_eq!(
            ctl.poll(),
            Some(us(125)),
            "measured again at once, with a poll 5/4 of the blocking wait"
        );
        // With it the answers are caught: polling pays and is kept, the window stays.
        measure(&ctl, us(8), us(100));
        assert_eq!(ctl.poll(), Some(us(125)));
        for _ in 0..SPIN_USE {
            ctl.waited(us(8), true);
        }
        // The same decision again: the next measure comes after twice as many reads.
        measure(&ctl, us(8), us(100));
        for _ in 0..SPIN_USE {
            ctl.waited(us(8), true);
        }
        assert_eq!(
            ctl.state.lock().unwrap().phase,
            2,
            "still using after SPIN_USE"
        );
        for _ in 0..SPIN_USE {
            ctl.waited(us(8), true);
        }
        assert_eq!(
            ctl.state.lock().unwrap().phase,
            0,
            "measuring after 2 × SPIN_USE"
        );
        // Waits far past the cap (a user typing): the window stops at its bound, and polling
        // that does not pay is dropped for SPIN_USE reads (the window grew under twice: no
        // second measure).
        for _ in 0..SPIN_MEASURE {
            ctl.waited(us(900_000), true);
        }
        for _ in 0..SPIN_MEASURE_BLOCKING {
            ctl.waited(us(900_000), false);
        }
        assert_eq!(ctl.poll(), None, "not paying, window at its bound: dropped");
        assert_eq!(
            SpinCtl::poll_len(&ctl.state.lock().unwrap()),
            us(SPIN_MAX_US),
            "capped"
        );
        // A fixed window (the variable set) never moves.
        let fixed = SpinCtl::fixed(us(20));
        measure(&fixed, us(100), us(100));
        assert_eq!(fixed.poll(), None);
        assert_eq!(SpinCtl::poll_len(&fixed.state.lock().unwrap()), us(20));
    }

    #[test]
    fn scopes_responses_by_their_request() {
        let mut s = Scoper::default();
        let rt = |s: &mut Scoper, l: &str| s.scope(l.as_bytes(), true);
        let br = |s: &mut Scoper, l: &str| s.scope(l.as_bytes(), false);
        assert_eq!(rt(&mut s, r#"{"id":1,"method":"initialize"}"#), None);
        assert_eq!(br(&mut s, r#"{"id":1,"result":{}}"#), None);
        assert_eq!(
            rt(
                &mut s,
                r#"{"id":2,"method":"thread/start","params":{"threadId":"thr_a"}}"#
            )
            .as_deref(),
            Some("thr_a")
        );
        assert_eq!(
            br(
                &mut s,
                r#"{"method":"thread/identity","params":{"threadId":"thr_a"}}"#
            )
            .as_deref(),
            Some("thr_a")
        );
        assert_eq!(
            br(&mut s, r#"{"id":2,"result":{}}"#).as_deref(),
            Some("thr_a")
        );
        assert_eq!(
            br(
                &mut s,
                r#"{"id":"echo-req-1","method":"item/tool/call","params":{"threadId":"thr_a"}}"#
            )
            .as_deref(),
            Some("thr_a")
        );
        // "2" (string) is not 2 (number)
        assert_eq!(rt(&mut s, r#"{"id":"2","result":{}}"#), None);
        assert_eq!(
            rt(&mut s, r#"{"id":"echo-req-1","result":{}}"#).as_deref(),
            Some("thr_a")
        );
        assert_eq!(rt(&mut s, "not json"), None);
    }

    #[test]
    fn splitter_frames_on_newline_only() {
        let mut sp = LineSplitter::default();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut push = |p: Piece<'_>| {
            if let Piece::Line(l) = p {
                got.push(l.to_vec())
            }
        };
        sp.feed(b"a\r\nb\xe2\x80", &mut push);
        sp.feed(b"\xa8c\nd", &mut push);
        assert_eq!(got, vec![b"a".to_vec(), "b\u{2028}c".as_bytes().to_vec()]);
        assert_eq!(sp.finish(), Some(b"d".to_vec()));
    }
}

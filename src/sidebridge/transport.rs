//! A raw HTTP/1.1 client over a tokio `TcpStream`: exact request bytes out, and every reply
//! read under bounds (connect timeout, the app's idle timeout, a whole-reply limit, body size
//! cap), so an HTML page,
//! a truncated or endless body, a 50 MB body or a refused connection each end in a named
//! [`TransportError`] instead of a hang or a panic.
//!
//! [`send`]: one connection per request (`Connection: close`). [`send_kept`]: the next request
//! on the connection the previous reply left open, as the app's HTTP client reuses one, never
//! sent twice. Plain `http://` only.

use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds on one exchange. Defaults: connect 5 s; the app's timeout, 60 s without receiving
/// data (reference §1.1: an idle timeout, reset by every byte that arrives, not a bound on the
/// whole reply); bridgewire's own bound on a whole exchange, 300 s (so a bridge that dribbles a
/// byte now and then cannot hold a run forever); body 10 MiB.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connect: Duration,
    /// The app's timeout: the longest wait for the next byte of the reply.
    pub idle: Duration,
    /// bridgewire's bound on the whole exchange (request written, reply read); never under
    /// `idle` where it is set from flags.
    pub total: Duration,
    pub max_body: usize,
    /// The flags that set `idle` and `total`, named when either runs out.
    pub idle_flag: &'static str,
    pub total_flag: &'static str,
}

/// bridgewire's default bound on a whole reply (`--max-reply-time`).
pub const DEFAULT_MAX_REPLY: Duration = Duration::from_secs(300);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect: Duration::from_secs(5),
            idle: Duration::from_secs(60),
            total: DEFAULT_MAX_REPLY,
            max_body: 10 * 1024 * 1024,
            idle_flag: "--timeout",
            total_flag: "--max-reply-time",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("invalid URL {0}")]
    BadUrl(String),
    #[error("connection refused")]
    Refused,
    #[error("connect failed: {0}")]
    Connect(String),
    /// The app's timeout ran out: nothing received for that long (the app gives up too).
    #[error(
        "no data received for {limit:?}: the app's timeout ({flag}), which it counts from the last byte received"
    )]
    Idle { limit: Duration, flag: &'static str },
    /// bridgewire's own bound on a whole reply ran out while data still came now and then
    /// (the app has no such bound: it waits as long as bytes keep arriving).
    #[error(
        "no complete reply within {limit:?}: bridgewire's whole-reply limit ({flag}), not the app's timeout (data kept arriving, never {idle:?} apart)"
    )]
    Timeout {
        limit: Duration,
        idle: Duration,
        flag: &'static str,
    },
    /// bridgewire's own bound on a reply body (`--max-body`), not the app's: the app reads a
    /// body of any size (reference §1.1). A reply over it is not judged ([`super::rules`]).
    #[error(
        "body larger than {0} bytes: bridgewire's own --max-body limit, not the app's (it reads a body of any size); raise it with --max-body BYTES"
    )]
    TooLarge(usize),
    /// The reply's head came, and its body stopped short of its end (of its `Content-Length`,
    /// `expected`, or of a chunked body's last chunk, `None`) with nothing more within the
    /// app's timeout: the reply began and never ended (RFC 9112 §6.3, §7.1). Counted as a
    /// timeout, as [`TransportError::Idle`] is.
    #[error(
        "{}, and no data came for {limit:?}: the app's timeout ({flag}) ran out on an incomplete reply (RFC 9112 {})",
        stalled_body(*got, *expected),
        if expected.is_some() { "§6.3" } else { "§7.1" }
    )]
    Stalled {
        got: usize,
        expected: Option<usize>,
        limit: Duration,
        flag: &'static str,
    },
    #[error("truncated body: connection closed after {got} of {expected} bytes")]
    Truncated { got: usize, expected: usize },
    /// A chunked body whose framing breaks RFC 9112 §7.1 (a chunk size that is not hex, data
    /// not followed by CRLF, a size line or trailer section without end): as broken as a
    /// head line without CRLF ([`TransportError::is_broken_framing`]).
    #[error("malformed chunked body (RFC 9112 §7.1): {0}")]
    BadChunks(String),
    /// The connection closed inside a chunked body, before its last chunk.
    #[error(
        "truncated chunked body: connection closed after {0} body bytes without the last chunk"
    )]
    ChunksTruncated(usize),
    #[error("malformed HTTP reply: {0}")]
    Malformed(String),
    /// The connection closed before the reply's head was whole (`before any reply`, `inside
    /// the header section`): a hang-up, or the bridge exiting, not a reply framed against
    /// HTTP/1.1 ([`TransportError::is_hang_up`]). Worded as it always was.
    #[error("malformed HTTP reply: connection closed {0}")]
    ClosedEarly(&'static str),
    #[error("i/o error: {0}")]
    Io(String),
    /// Nothing came within the app's timeout on a connection the bridge had left open after
    /// its previous reply, while the same request on a fresh connection was answered. Its text
    /// holds [`DEAF_ON_REUSE`] (a wait that more time would not end).
    #[error(
        "no data received for {limit:?} ({flag}) on the connection the bridge kept open after its previous reply: that reply left it open (no `Connection: close`), so the app's HTTP client sends the next request on the same connection (RFC 9112 §9.3: a server that does not keep connections open must send `close`), and the bridge never answered it there; the same request on a fresh connection was answered (status {fresh_status})"
    )]
    DeafOnReuse {
        limit: Duration,
        flag: &'static str,
        fresh_status: u16,
    },
    /// The bridge closed (or reset) the connection it had kept open after its previous reply
    /// once this request was written on it, before a byte of the reply: the app shows an error
    /// (it does not send a request again, reference §1.1), and a bridge that wants no further
    /// request on a connection says `Connection: close` in the reply before (RFC 9112 §9.6).
    #[error(
        "the bridge closed the kept connection after the request was sent, before any reply ({0}): its previous reply left the connection open (no `Connection: close`), so the app's HTTP client sent this request there, and does not send a POST again (RFC 9112 §9.3.1)"
    )]
    ClosedAfterRequest(String),
    /// The request could not be written (the connection was closed or reset before it went out
    /// whole): within the transport only, where a kept connection is replaced by a new one.
    #[error("i/o error writing the request: {0}")]
    Unwritten(String),
    /// Its text: the last of those timeouts' cause, when it was more than silence (a body
    /// stalled short of its Content-Length), or empty.
    #[error("not sent: the bridge timed out {0} times in a row{1}")]
    GaveUp(usize, String),
    /// Not sent: the bridge is gone (its process exited, or a connection to it was refused
    /// after it had accepted earlier ones); its text says which, and after what.
    #[error("not sent: {0}")]
    Gone(String),
}

impl TransportError {
    /// A reply came whose framing breaks HTTP/1.1 (a head line not ended in CRLF, two
    /// `Content-Length`s, a bad status line, a body coding that does not decode): a fault of
    /// how the bridge writes every reply, not a connection that closed before a head.
    pub fn is_broken_framing(&self) -> bool {
        matches!(
            self,
            TransportError::Malformed(_)
                | TransportError::BadChunks(_)
                // An incomplete message (RFC 9112 §8): the body its framing announced was cut
                // by the connection's close. Received incompletely is SB-D1's, as broken
                // framing is (an audit's server cutting every body in half failed SB-H1, SB-A1
                // and SB-D1 and warned on four more rules for it).
                | TransportError::Truncated { .. }
                | TransportError::ChunksTruncated(_)
        )
    }

    /// The request was not sent: the driver had given up on the bridge (timeouts in a row)
    /// or found it gone.
    pub fn is_not_sent(&self) -> bool {
        matches!(self, TransportError::GaveUp(..) | TransportError::Gone(_))
    }

    /// The bridge's side of the connection went away before a whole reply (closed before or
    /// inside the head, reset): a hang-up, or the bridge exiting.
    pub fn is_hang_up(&self) -> bool {
        matches!(
            self,
            TransportError::ClosedEarly(_)
                | TransportError::Io(_)
                | TransportError::ClosedAfterRequest(_)
        )
    }
}

/// What the text of [`TransportError::DeafOnReuse`] says that no other error's does: the
/// bridge answered the same request on a fresh connection (not a slow bridge).
pub const DEAF_ON_REUSE: &str = "the same request on a fresh connection was answered";

#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body; for an opaque one (see `opaque`), only its first bytes.
    pub body: Vec<u8>,
    pub elapsed: Duration,
    /// Set when the body is not JSON at all (not UTF-8, empty, a syntax error, nested deeper
    /// than the decoder goes) and larger than the client keeps of such a body: the reason,
    /// as decoding states it, and the body's full length. Its verdicts need nothing more, and
    /// a check against a bridge answering megabytes of `[[[[…` stays small (issue 15).
    pub opaque: Option<(String, usize)>,
    /// For a reply to HEAD: how many bytes came after its header section (before the
    /// connection closed or went quiet for [`HEAD_DRAIN`]). HTTP forbids them (RFC 9110
    /// §9.3.2: "the server MUST NOT send content in the response" to HEAD): on a kept-alive
    /// connection they would be read as the start of the next reply.
    pub after_head: usize,
    /// Bytes that arrived with the reply after its end as its framing gives it (a
    /// `Content-Length` smaller than the body sent): the app's client may discard them (RFC
    /// 9112 §6.3) and must not read them as a reply, so the connection is not reused.
    pub extra: usize,
    /// Why the connection the previous reply left open was not reused for this request, when
    /// the bridge had sent bytes on it that no request asked for (an unsolicited `408` before
    /// closing an idle connection, RFC 9110 §15.5.9, or what followed a reply's framing).
    pub unasked: Option<String>,
}

/// How long the bytes after a HEAD reply's header section are waited for once none arrive.
pub const HEAD_DRAIN: Duration = Duration::from_millis(500);

impl HttpReply {
    /// The first field line named `name` (for fields that occur once: `Location`).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A list field's value: every field line named `name`, joined with ", ", as HTTP
    /// combines them (RFC 9110 §5.3: `Allow: GET` then `Allow: POST` is `Allow: GET, POST`).
    /// `None` when there is no such line.
    pub fn header_list(&self, name: &str) -> Option<String> {
        let lines: Vec<&str> = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        (!lines.is_empty()).then(|| lines.join(", "))
    }
}

/// Whether an `Allow` value lists `method`: its comma-separated tokens, compared exactly
/// (method names are case-sensitive, RFC 9110 §9.1: `post` or `POSTAL` is not `POST`).
pub fn allows(allow: &str, method: &str) -> bool {
    allow.split(',').any(|m| m.trim() == method)
}

/// `http://host[:port]/path?query` split for a raw request.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: reqwest::Url,
    pub host_port: String,
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, TransportError> {
        let u =
            reqwest::Url::parse(url).map_err(|e| TransportError::BadUrl(format!("{url}: {e}")))?;
        Target::from_url(u)
    }

    pub fn from_url(u: reqwest::Url) -> Result<Target, TransportError> {
        if u.scheme() != "http" {
            return Err(TransportError::BadUrl(format!(
                "{u}: only http:// is supported (put a TLS terminator in front for https)"
            )));
        }
        let host = u
            .host_str()
            .ok_or_else(|| TransportError::BadUrl(format!("{u}: no host")))?;
        let port = u.port_or_known_default().unwrap_or(80);
        let mut path = u.path().to_string();
        if let Some(q) = u.query() {
            path.push('?');
            path.push_str(q);
        }
        Ok(Target {
            host_port: format!("{host}:{port}"),
            path,
            url: u,
        })
    }

    /// Resolves a `Location` header against this target.
    pub fn join(&self, location: &str) -> Result<Target, TransportError> {
        let u = self
            .url
            .join(location)
            .map_err(|e| TransportError::BadUrl(format!("{location}: {e}")))?;
        Target::from_url(u)
    }
}

/// Sends one request on a connection of its own (`Connection: close`) and reads the whole
/// reply, within `limits`.
pub async fn send(
    target: &Target,
    method: &str,
    headers: &[(String, String)],
    body: &[u8],
    limits: Limits,
) -> Result<HttpReply, TransportError> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.total;
    let mut stream = connect(target, limits).await?;
    let req = Req {
        target,
        method,
        headers,
        body,
    };
    exchange_on(&mut stream, &req, limits, true, start, deadline)
        .await
        .0
        .map(|(reply, _)| reply)
        .map_err(|e| match e {
            TransportError::Unwritten(why) => TransportError::Io(why),
            e => e,
        })
}

/// Whether a `Transfer-Encoding` field value frames the body in chunks (RFC 9112 §7: coding
/// names are case-insensitive).
pub fn names_chunked(transfer_encoding: &str) -> bool {
    transfer_encoding.to_ascii_lowercase().contains("chunked")
}

/// Where a reply's body stopped ([`TransportError::Stalled`]): after `got` bytes of the
/// `expected` its Content-Length announced, or of a chunked body before its last chunk.
pub fn stalled_body(got: usize, expected: Option<usize>) -> String {
    match expected {
        Some(n) => {
            format!("the body stopped after {got} of the {n} bytes its Content-Length announced")
        }
        None => format!("the chunked body stopped after {got} bytes, before its last chunk"),
    }
}

/// A connection the bridge left open after its reply, for the next request, as the app's HTTP
/// client keeps one: the platform's client (reference §1.1) speaks HTTP/1.1, whose connections
/// persist unless a side says `close` (RFC 9112 §9.3).
pub struct Kept {
    host_port: String,
    stream: TcpStream,
    /// When the reply that left it open ended.
    since: Instant,
    /// How long the bridge said it keeps an idle connection (`Keep-Alive: timeout=N`).
    keep_for: Option<Duration>,
}

impl Kept {
    fn new(host_port: String, stream: TcpStream, reply: &HttpReply) -> Kept {
        Kept {
            host_port,
            stream,
            since: Instant::now(),
            keep_for: reply.header("keep-alive").and_then(keep_alive_timeout),
        }
    }

    /// Whether the bridge's `Keep-Alive: timeout=N` still leaves time to send on it: idle for
    /// less than N less a margin (a quarter of N, at most 1 s), so the request never crosses
    /// the close the bridge makes at N on the wire.
    fn within_keep_alive(&self) -> bool {
        self.keep_for.is_none_or(|t| {
            let margin = (t / 4).min(Duration::from_secs(1));
            self.since.elapsed() + margin < t
        })
    }
}

/// The `timeout` parameter of a `Keep-Alive` field value (`timeout=5, max=100`): how long the
/// server keeps an idle connection open, in whole seconds.
pub fn keep_alive_timeout(value: &str) -> Option<Duration> {
    value.split(',').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| v.trim().trim_matches('"').parse::<u64>().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}

/// Sends one request as the app's HTTP client does: on the connection `kept` holds when it
/// leads to the same host and the bridge has not closed it, else on a new one, either without
/// `Connection: close`; a reply that leaves the connection open (HTTP/1.1, no `close`, a framed
/// body) leaves it in `kept`.
///
/// A request is never sent again once written. The reference (§1.1) says the app's client makes
/// no retries, and RFC 9112 §9.3.1 says a client should not retry a non-idempotent request (a
/// POST) automatically: a bridge that read it may have acted on it (answered the user's
/// message). So the kept connection is tested before the request is written ([`still_open`]: a
/// non-blocking peek that sees the end of the stream, a reset, or bytes no request asked for
/// means the bridge closed it, which a server may do to an idle connection at any time, RFC
/// 9112 §9.5): only then, or when the write itself fails (nothing of the request reached the
/// bridge whole), is a new connection opened. Once the request is written, a close or reset
/// before a byte of the reply is the bridge's: [`TransportError::ClosedAfterRequest`].
///
/// One on which nothing arrives within the app's timeout is the bridge's fault too:
/// [`TransportError::DeafOnReuse`] when the same request on a fresh connection is answered
/// (naming that cause), else the timeout as it ran out. That second send is a diagnosis after
/// the exchange has already failed, never a retry: its outcome only names the failure.
pub async fn send_kept(
    kept: &mut Option<Kept>,
    req: &Req<'_>,
    limits: Limits,
) -> Result<HttpReply, TransportError> {
    let target = req.target;
    let mut unasked = None;
    if let Some(mut k) = kept.take().filter(|k| {
        k.host_port == target.host_port && k.within_keep_alive() && {
            let (open, bytes) = still_open(&k.stream);
            unasked = bytes;
            open
        }
    }) {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + limits.total;
        match exchange_on(&mut k.stream, req, limits, false, start, deadline).await {
            (Ok((reply, persists)), _) => {
                if persists {
                    k.since = Instant::now();
                    k.keep_for = reply.header("keep-alive").and_then(keep_alive_timeout);
                    *kept = Some(k);
                }
                return Ok(reply);
            }
            // Nothing within the bound: the idle one, or the whole-exchange one where both
            // are one bound and it ran out first.
            (Err(e @ (TransportError::Idle { .. } | TransportError::Timeout { .. })), 0) => {
                drop(k);
                return match send(target, req.method, req.headers, req.body, limits).await {
                    Ok(fresh) => Err(TransportError::DeafOnReuse {
                        limit: limits.idle,
                        flag: limits.idle_flag,
                        fresh_status: fresh.status,
                    }),
                    Err(_) => Err(e),
                };
            }
            // The write failed: the bridge had closed the connection before the request
            // reached it whole, so it cannot have acted on it; a new connection carries it.
            (Err(TransportError::Unwritten(_)), 0) => {}
            (
                Err(
                    e @ (TransportError::Io(_)
                    | TransportError::Malformed(_)
                    | TransportError::ClosedEarly(_)),
                ),
                0,
            ) => {
                return Err(TransportError::ClosedAfterRequest(e.to_string()));
            }
            (Err(e), _) => return Err(e),
        }
    }
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.total;
    let mut stream = connect(target, limits).await?;
    let (mut reply, persists) = exchange_on(&mut stream, req, limits, false, start, deadline)
        .await
        .0
        .map_err(|e| match e {
            TransportError::Unwritten(why) => TransportError::Io(why),
            e => e,
        })?;
    reply.unasked = unasked;
    if persists {
        *kept = Some(Kept::new(target.host_port.clone(), stream, &reply));
    }
    Ok(reply)
}

/// Whether the bridge still holds `stream` open for another request: a non-blocking peek
/// finds nothing waiting. The end of the stream (the bridge closed it), an error (a reset) or
/// bytes that no request asked for (a late `408`, a body after a reply's framing) each mean
/// the connection cannot carry the next request; such bytes are named (the second value:
/// how many were waiting, and the first of them).
fn still_open(stream: &TcpStream) -> (bool, Option<String>) {
    use std::os::fd::AsRawFd;
    let mut peek = [0u8; 512];
    loop {
        // SAFETY: `peek` is a valid buffer of its length for the call's duration, and the
        // file descriptor belongs to `stream`, borrowed for the call.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                peek.as_mut_ptr().cast(),
                peek.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            let n = n as usize;
            let first = String::from_utf8_lossy(&peek[..n]);
            let first = first.lines().next().unwrap_or_default();
            let first: String = first.chars().take(60).collect();
            return (
                false,
                Some(format!(
                    "the bridge had sent {n}{} byte(s) on the kept connection that no request asked for (starting {first:?}), so a new connection carried this request",
                    if n == peek.len() { " or more" } else { "" }
                )),
            );
        }
        if n == 0 {
            return (false, None);
        }
        match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => return (true, None),
            _ => return (false, None),
        }
    }
}

/// One request's parts.
pub struct Req<'a> {
    pub target: &'a Target,
    pub method: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Whether a new connection to `target` is refused (nothing listens there any more): the
/// connection, when accepted, is closed at once without a byte sent.
pub async fn refuses(target: &Target, limits: Limits) -> bool {
    matches!(connect(target, limits).await, Err(TransportError::Refused))
}

async fn connect(target: &Target, limits: Limits) -> Result<TcpStream, TransportError> {
    let connect = tokio::time::timeout(
        limits.connect.min(limits.total),
        TcpStream::connect(&target.host_port),
    )
    .await;
    let stream = match connect {
        Err(_) => {
            return Err(TransportError::Connect(format!(
                "timed out after {:?}",
                limits.connect
            )));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(TransportError::Refused);
        }
        Ok(Err(e)) => return Err(TransportError::Connect(e.to_string())),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Writes `req` on `stream` (with `Connection: close` when `close`, else `keep-alive`) and
/// reads its reply: the reply and whether the connection may carry another request, and how
/// many bytes of the reply arrived (0: the bridge sent nothing at all).
async fn exchange_on(
    stream: &mut TcpStream,
    req: &Req<'_>,
    limits: Limits,
    close: bool,
    start: Instant,
    deadline: tokio::time::Instant,
) -> (Result<(HttpReply, bool), TransportError>, usize) {
    let Req {
        target,
        method,
        headers,
        body,
    } = *req;
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\n",
        target.path, target.host_port
    );
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    if !body.is_empty() || method != "GET" && method != "HEAD" && method != "OPTIONS" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str(if close {
        "Connection: close\r\n\r\n"
    } else {
        "Connection: keep-alive\r\n\r\n"
    });
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    // Set when the app's timeout ran out (the reader's error says only "timed out"), and the
    // bytes received.
    let watch = Watch::default();
    let io = async {
        stream
            .write_all(&out)
            .await
            .map_err(|e| TransportError::Unwritten(e.to_string()))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*stream);
        quick_ack(fd);
        let mut reader = IdleRead::new(&mut *stream, limits.idle, &watch);
        reader.quick_ack = Some(fd);
        let ((status, headers, body), persists, extra) =
            read_framed_conn(&mut reader, method == "HEAD", limits.max_body).await?;
        if method != "HEAD" {
            return Ok(((status, headers, body), persists && extra == 0, 0, extra));
        }
        // A reply to HEAD has no body; what came after its header section anyway (`body`
        // holds what arrived with it), and whatever follows until the connection closes or
        // stays quiet for HEAD_DRAIN, is counted (never read past --max-body).
        let mut after = body.len();
        let mut chunk = [0u8; 16384];
        while after <= limits.max_body {
            match tokio::time::timeout(HEAD_DRAIN, reader.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => after += n,
                _ => break,
            }
        }
        Ok((
            (status, headers, Vec::new()),
            persists && after == 0,
            after,
            0,
        ))
    };
    let result = match tokio::time::timeout_at(deadline, io).await {
        Err(_) => Err(TransportError::Timeout {
            limit: limits.total,
            idle: limits.idle,
            flag: limits.total_flag,
        }),
        Ok(Err(TransportError::Stalled { got, expected, .. }))
            if watch.fired.load(std::sync::atomic::Ordering::Relaxed) =>
        {
            Err(TransportError::Stalled {
                got,
                expected,
                limit: limits.idle,
                flag: limits.idle_flag,
            })
        }
        Ok(Err(_)) if watch.fired.load(std::sync::atomic::Ordering::Relaxed) => {
            Err(TransportError::Idle {
                limit: limits.idle,
                flag: limits.idle_flag,
            })
        }
        Ok(Err(e)) => Err(e),
        Ok(Ok(((status, headers, body), persists, after_head, extra))) => {
            let len = body.len();
            // A reply whose coding does not undo (a plain body labelled gzip) did arrive, with
            // its status and headers: an undecodable body (`opaque`, kept as none of its
            // bytes, so nothing reads the raw ones as the app never would), not a missing reply.
            match decode_content(&headers, body, limits.max_body) {
                Ok(body) => Ok((body, None)),
                Err(TransportError::Malformed(why)) => Ok((Vec::new(), Some((why, len)))),
                Err(e) => Err(e),
            }
            .map(|(body, opaque)| {
                (
                    HttpReply {
                        status,
                        headers,
                        body,
                        elapsed: start.elapsed(),
                        opaque,
                        after_head,
                        extra,
                        unasked: None,
                    },
                    persists,
                )
            })
        }
    };
    (
        result,
        watch.received.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// What an [`IdleRead`] saw: whether the idle timeout fired, and how many bytes arrived.
#[derive(Default)]
struct Watch {
    fired: std::sync::atomic::AtomicBool,
    received: std::sync::atomic::AtomicUsize,
}

/// Asks the kernel to acknowledge what arrives on `fd` at once rather than delay the ACK (Linux
/// delays it up to 40 ms). A server that writes a reply's header section and body apart (Python's
/// `http.server`) holds the body until its header segment is acknowledged (Nagle's algorithm): on
/// a kept connection, where no close flushes it, every reply waited for the delayed ACK. Only
/// the time a reply takes changes; the setting lasts until the kernel leaves quick-ACK mode, so
/// it is set again after every read.
fn quick_ack(fd: std::os::fd::RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a valid c_int for the call's duration and `fd` a socket the caller holds
    // open; a failure only leaves the kernel's default in place.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A reader that fails when nothing arrives for `idle` (the app's timeout: time without
/// receiving data, reset by every byte), setting `fired` so the caller can name it.
struct IdleRead<'a, R> {
    inner: &'a mut R,
    idle: Duration,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    watch: &'a Watch,
    /// The socket to keep in quick-ACK mode ([`quick_ack`]), when `inner` is one.
    quick_ack: Option<std::os::fd::RawFd>,
}

impl<'a, R> IdleRead<'a, R> {
    fn new(inner: &'a mut R, idle: Duration, watch: &'a Watch) -> Self {
        IdleRead {
            inner,
            idle,
            sleep: Box::pin(tokio::time::sleep(idle)),
            watch,
            quick_ack: None,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for IdleRead<'_, R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        use std::task::Poll;
        let this = &mut *self;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut *this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    if let Some(fd) = this.quick_ack {
                        quick_ack(fd);
                    }
                    this.watch.received.fetch_add(
                        buf.filled().len() - before,
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    let next = tokio::time::Instant::now() + this.idle;
                    this.sleep.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.watch
                        .fired
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no data within the idle timeout",
                    )))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// A reply's status, headers (in order) and body.
pub type Parsed = (u16, Vec<(String, String)>, Vec<u8>);

/// The longest header section read (status line and headers, without the blank line).
pub const MAX_HEAD: usize = 64 * 1024;

/// The longest chunk-size line (size, extensions) read: a longer one is refused, not buffered.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Reads one HTTP/1.1 reply from `stream` (any byte source: the property tests feed it
/// arbitrary bytes): a header section of at most 64 KiB, then a body of at most `max_body`
/// bytes (`Content-Length`, chunked, or up to the end of the stream), its `Content-Encoding`
/// undone ([`decode_content`]).
pub async fn read_reply<R: AsyncRead + Unpin>(
    stream: &mut R,
    head_only: bool,
    max_body: usize,
) -> Result<Parsed, TransportError> {
    let (status, headers, body) = read_framed(stream, head_only, max_body).await?;
    let body = decode_content(&headers, body, max_body)?;
    Ok((status, headers, body))
}

/// [`read_reply`] without undoing the `Content-Encoding`: the body as framed.
async fn read_framed<R: AsyncRead + Unpin>(
    stream: &mut R,
    head_only: bool,
    max_body: usize,
) -> Result<Parsed, TransportError> {
    read_framed_conn(stream, head_only, max_body)
        .await
        .map(|((status, headers, body), _, _)| {
            (status, headers, if head_only { Vec::new() } else { body })
        })
}

/// Where the header section in `buf` ends, searching from `from`: the length of the section
/// (without the line ending before its blank line) and where what follows it starts. The
/// blank line is found whether lines end in CRLF or, against RFC 9112 §2.1, in a bare LF (so
/// such a reply is named, not waited for until the timeout).
fn head_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    memchr::memchr_iter(b'\n', &buf[from..])
        .map(|p| from + p)
        .find_map(|p| match &buf[p + 1..] {
            [b'\n', ..] => Some((p, p + 2)),
            [b'\r', b'\n', ..] => Some((p, p + 3)),
            _ => None,
        })
        .map(|(p, rest)| {
            (
                if p > 0 && buf[p - 1] == b'\r' {
                    p - 1
                } else {
                    p
                },
                rest,
            )
        })
}

/// [`read_framed`], whether the connection may carry another request (RFC 9112 §9.3): an
/// HTTP/1.1 reply without the `close` option, or an HTTP/1.0 one with `keep-alive`, whose body
/// ended by its framing (not by the connection closing), and how many bytes arrived with the
/// reply after its framing's end.
async fn read_framed_conn<R: AsyncRead + Unpin>(
    stream: &mut R,
    head_only: bool,
    max_body: usize,
) -> Result<(Parsed, bool, usize), TransportError> {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 16384];
    // Head (skipping interim 1xx replies).
    loop {
        let too_long = || TransportError::Malformed("header section over 64 KiB".into());
        let mut searched = 0;
        let end = loop {
            // Search only the new bytes (a reply trickling in byte by byte stays linear), and
            // judge the head by its length, not by how the reads happened to split it.
            if let Some((p, rest)) = head_end(&buf, searched) {
                if p > MAX_HEAD {
                    return Err(too_long());
                }
                break (p, rest);
            }
            searched = buf.len().saturating_sub(2);
            if buf.len() > MAX_HEAD + 3 {
                return Err(too_long());
            }
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| TransportError::Io(e.to_string()))?;
            if n == 0 {
                return Err(TransportError::ClosedEarly(if buf.is_empty() {
                    "before any reply"
                } else {
                    "inside the header section"
                }));
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let (end, rest_at) = end;
        // RFC 9112 §2.1: every line of the header section ends in CRLF. A recipient MAY take
        // a bare LF as one (§2.2), but the sender broke the grammar, and the app's client is
        // not known to: named, not guessed.
        if let Some(p) =
            memchr::memchr_iter(b'\n', &buf[..rest_at]).find(|&p| p == 0 || buf[p - 1] != b'\r')
        {
            let line = buf[..p].rsplit(|&b| b == b'\n').next().unwrap_or_default();
            return Err(TransportError::Malformed(format!(
                "a line of the header section ends in a bare LF, not CRLF ({:?}): RFC 9112 §2.1 has the sender end every line in CRLF",
                String::from_utf8_lossy(line)
            )));
        }
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let rest = buf[rest_at..].to_vec();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|_| version.starts_with("HTTP/1."))
            .ok_or_else(|| TransportError::Malformed(format!("bad status line {status_line:?}")))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        if (100..200).contains(&status) && status != 101 {
            buf = rest;
            continue;
        }
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let options = get("connection").unwrap_or_default().to_ascii_lowercase();
        let has = |o: &str| options.split(',').any(|t| t.trim() == o);
        let persists = !has("close") && (version != "HTTP/1.0" || has("keep-alive"));
        if head_only {
            // The bytes that arrived after the header section (none, from a bridge that keeps
            // to HTTP): the caller counts them.
            return Ok(((status, headers, rest), persists, 0));
        }
        if status == 204 || status == 304 {
            let extra = rest.len();
            return Ok(((status, headers, Vec::new()), persists, extra));
        }
        let chunked = get("transfer-encoding").is_some_and(|t| names_chunked(&t));
        let mut persists = persists;
        let mut extra = 0;
        // Every Content-Length field line, each possibly a list (`42, 42`).
        let lengths: Vec<String> = headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .flat_map(|(_, v)| v.split(',').map(|l| l.trim().to_string()))
            .collect();
        let body = if chunked {
            let (body, left) = read_chunked(stream, rest, max_body).await?;
            extra = left;
            body
        } else if let Some(len) = lengths.first() {
            let len: usize = len
                .parse()
                .map_err(|_| TransportError::Malformed(format!("bad Content-Length {len:?}")))?;
            // RFC 9110 §8.6 lets a recipient take `42, 42` as 42; differing values leave the
            // framing undecidable, RFC 9112 §6.3 (5): an unrecoverable error.
            if let Some(other) = lengths
                .iter()
                .find(|l| l.parse::<usize>().ok() != Some(len))
            {
                return Err(TransportError::Malformed(format!(
                    "Content-Length given as both {len} and {other:?}: the reply's length cannot be known, RFC 9112 §6.3 has the client treat it as an unrecoverable error, close the connection and discard the reply"
                )));
            }
            if len > max_body {
                return Err(TransportError::TooLarge(max_body));
            }
            let mut body = rest;
            while body.len() < len {
                let n = match stream.read(&mut chunk).await {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut && !body.is_empty() => {
                        // Named by the caller with the app's timeout that ran out.
                        return Err(TransportError::Stalled {
                            got: body.len(),
                            expected: Some(len),
                            limit: Duration::ZERO,
                            flag: "",
                        });
                    }
                    Err(e) => return Err(TransportError::Io(e.to_string())),
                };
                if n == 0 {
                    return Err(TransportError::Truncated {
                        got: body.len(),
                        expected: len,
                    });
                }
                body.extend_from_slice(&chunk[..n]);
            }
            extra = body.len() - len;
            body.truncate(len);
            body
        } else {
            let mut body = rest;
            loop {
                if body.len() > max_body {
                    return Err(TransportError::TooLarge(max_body));
                }
                let n = stream
                    .read(&mut chunk)
                    .await
                    .map_err(|e| TransportError::Io(e.to_string()))?;
                if n == 0 {
                    persists = false;
                    break body;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        };
        return Ok(((status, headers, body), persists, extra));
    }
}

/// The body with its `Content-Encoding` undone, as the app's HTTP client does: `gzip`
/// (`x-gzip`), `deflate` (zlib, or raw deflate as some servers send it) and `br`, in the reverse of
/// the order they were applied; `identity` is none. The client sends no `Accept-Encoding`, so
/// any coding is acceptable to it (RFC 9110 §12.5.3). Decompressed output is bounded by
/// `max_body` like any body; a coding the client does not decode is named.
pub fn decode_content(
    headers: &[(String, String)],
    body: Vec<u8>,
    max_body: usize,
) -> Result<Vec<u8>, TransportError> {
    use crate::content_coding::{CodingError, decode};
    decode(headers, body, max_body).map_err(|e| match e {
        CodingError::Unknown(other) => TransportError::Malformed(format!(
            "Content-Encoding {other:?}: a coding the emulated client does not decode (gzip, deflate and br only)"
        )),
        CodingError::Corrupt(coding, e) => {
            TransportError::Malformed(format!("the {coding} body does not decode: {e}"))
        }
        CodingError::TooLarge(n) => TransportError::TooLarge(n),
    })
}

/// A chunked body (RFC 9112 §7.1): chunk extensions ignored, the trailer section read to its
/// blank line and discarded (§7.1.2), so the connection is left at the next reply. Returns the
/// body and how many bytes arrived after the trailer section.
async fn read_chunked<R: AsyncRead + Unpin>(
    stream: &mut R,
    mut buf: Vec<u8>,
    max_body: usize,
) -> Result<(Vec<u8>, usize), TransportError> {
    let mut body = Vec::new();
    let mut chunk = [0u8; 16384];
    let mut pos = 0usize;
    async fn fill<R: AsyncRead + Unpin>(
        stream: &mut R,
        buf: &mut Vec<u8>,
        chunk: &mut [u8],
        got: usize,
    ) -> Result<(), TransportError> {
        let n = stream.read(chunk).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                // The head came, the last chunk did not: named by the caller with the app's
                // timeout that ran out.
                TransportError::Stalled {
                    got,
                    expected: None,
                    limit: Duration::ZERO,
                    flag: "",
                }
            } else {
                TransportError::Io(e.to_string())
            }
        })?;
        if n == 0 {
            return Err(TransportError::ChunksTruncated(got));
        }
        buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
    loop {
        let line_end = loop {
            if let Some(p) = memchr::memmem::find(&buf[pos..], b"\r\n") {
                break pos + p;
            }
            // An endless size line (no CRLF) must not grow the buffer until the deadline.
            if buf.len() - pos > MAX_CHUNK_LINE {
                return Err(TransportError::BadChunks(format!(
                    "chunk-size line over {MAX_CHUNK_LINE} bytes"
                )));
            }
            fill(stream, &mut buf, &mut chunk, body.len()).await?;
        };
        let size_text = String::from_utf8_lossy(&buf[pos..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim().to_string();
        let size = usize::from_str_radix(&size_text, 16)
            .map_err(|_| TransportError::BadChunks(format!("bad chunk size {size_text:?}")))?;
        pos = line_end + 2;
        if size == 0 {
            // The trailer section: field lines up to a blank one, bounded like a header section.
            let start = pos;
            loop {
                let end = loop {
                    if let Some(p) = memchr::memmem::find(&buf[pos..], b"\r\n") {
                        break pos + p;
                    }
                    if buf.len() - start > MAX_HEAD {
                        return Err(TransportError::BadChunks(format!(
                            "trailer section over {MAX_HEAD} bytes"
                        )));
                    }
                    // A connection closed after the last chunk ends a body that is whole (as
                    // before trailers were read): not a truncated reply.
                    if fill(stream, &mut buf, &mut chunk, body.len())
                        .await
                        .is_err()
                    {
                        return Ok((body, 0));
                    }
                };
                let blank = end == pos;
                pos = end + 2;
                if blank {
                    return Ok((body, buf.len() - pos));
                }
            }
        }
        // `body.len() <= max_body` holds here; a size near `usize::MAX` must not overflow.
        if size > max_body - body.len() {
            return Err(TransportError::TooLarge(max_body));
        }
        while buf.len() < pos + size + 2 {
            fill(stream, &mut buf, &mut chunk, body.len()).await?;
        }
        // chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF: the CRLF is checked, not
        // skipped (curl and Node's client refuse a reply without it).
        if &buf[pos + size..pos + size + 2] != b"\r\n" {
            return Err(TransportError::BadChunks(format!(
                "a chunk of {size} bytes (at body byte {}) is followed by {:?}, not CRLF",
                body.len(),
                String::from_utf8_lossy(&buf[pos + size..pos + size + 2])
            )));
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
        if pos > 1 << 20 {
            buf.drain(..pos);
            pos = 0;
        }
    }
}

#[cfg(test)]
mod content_tests {
    use super::{TransportError, decode_content};
    use std::io::Write;

    fn h(v: &str) -> Vec<(String, String)> {
        vec![("Content-Encoding".to_string(), v.to_string())]
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    /// gzip, x-gzip, deflate (zlib and raw), br, stacked codings and identity decode; a coding the
    /// client does not know, a corrupt body and a body that inflates past the limit are named.
    #[test]
    fn content_codings_decode_within_the_body_limit() {
        let json = br#"{"messages":[]}"#.to_vec();
        assert_eq!(decode_content(&[], json.clone(), 100).unwrap(), json);
        assert_eq!(
            decode_content(&h("identity"), json.clone(), 100).unwrap(),
            json
        );
        for c in ["gzip", "x-gzip", "GZIP"] {
            assert_eq!(
                decode_content(&h(c), gzip(&json), 100).unwrap(),
                json,
                "{c}"
            );
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&json).unwrap();
        assert_eq!(
            decode_content(&h("deflate"), z.finish().unwrap(), 100).unwrap(),
            json
        );
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        d.write_all(&json).unwrap();
        assert_eq!(
            decode_content(&h("deflate"), d.finish().unwrap(), 100).unwrap(),
            json
        );
        // Applied gzip then gzip again: undone in reverse.
        assert_eq!(
            decode_content(&h("gzip, gzip"), gzip(&gzip(&json)), 100).unwrap(),
            json
        );
        // br, as Node's zlib.brotliCompressSync wrote `{"messages":[]}` and a megabyte of
        // spaces (no brotli encoder here: the bytes come from another implementation).
        let unhex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        };
        assert_eq!(
            decode_content(
                &h("br"),
                unhex("0b07807b226d65737361676573223a5b5d7d03"),
                100
            )
            .unwrap(),
            json
        );
        assert_eq!(
            decode_content(&h("br"), unhex("5bffff8f5f02241e0b0472ef1f00"), 64 * 1024),
            Err(TransportError::TooLarge(64 * 1024))
        );
        match decode_content(&h("br"), json.clone(), 100) {
            Err(TransportError::Malformed(m)) => assert!(m.contains("does not decode"), "{m}"),
            other => panic!("{other:?}"),
        }
        match decode_content(&h("zstd"), json.clone(), 100) {
            Err(TransportError::Malformed(m)) => assert!(m.contains("\"zstd\""), "{m}"),
            other => panic!("{other:?}"),
        }
        match decode_content(&h("gzip"), json.clone(), 100) {
            Err(TransportError::Malformed(m)) => assert!(m.contains("does not decode"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A small body that inflates to a megabyte stops at the limit.
        let bomb = gzip(&vec![b' '; 1 << 20]);
        assert!(bomb.len() < 4096);
        assert_eq!(
            decode_content(&h("gzip"), bomb, 64 * 1024),
            Err(TransportError::TooLarge(64 * 1024))
        );
    }
}

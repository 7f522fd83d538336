//! `record sidebridge`: a recording reverse proxy.
//!
//! Listens on `--listen`, forwards every request to `--upstream` (method, path, headers and
//! body unchanged, hop-by-hop headers dropped, redirects *not* followed so the client sees
//! them), and tees each request (`client→bridge`) and reply (`bridge→client`) as one
//! [`super::wire::Envelope`] line into lanes under `<dir>/<bridge>/<chatId>/`. A request is
//! recorded before it is forwarded, a reply before it is returned. When the upstream fails
//! (refused, timeout, body over the cap) the client gets a 502 whose body is a Side Bridge
//! system message, and the lane records the error.
//!
//! Bounds (issue 15): a connection must deliver a request's headers within
//! [`HEADER_READ_TIMEOUT`] (also how long an idle keep-alive connection is kept), a request body
//! within the exchange timeout, and at most [`MAX_CONNECTIONS`] connections are served at once
//! (more are closed on accept, named on stderr). Credentials never reach the lanes: secret
//! headers (`Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`, `X-Api-Key`, the key
//! header, …), secret query parameters of the path, and secrets in JSON bodies are replaced by
//! `[redacted]`, and every secret value seen is replaced wherever it recurs
//! ([`crate::redact::Secrets`]).

use super::wire::{self, Envelope};
use crate::lane::write::{LaneWriter, Line};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: String,
    pub upstream: String,
    /// Lanes go to `<dir>/<chatId>/<direction>.ndjson`.
    pub dir: PathBuf,
    pub keep_key: bool,
    /// The bridge's key, if known: a differing value is recorded by how it differs
    /// ([`wire::redact`]).
    pub key: Option<String>,
    /// The app's timeout (default 60 s): the longest the upstream may send nothing, while its
    /// reply is awaited or read (every byte restarts it).
    pub timeout: Duration,
    /// bridgewire's bound on a whole upstream exchange (default 300 s), so a bridge that
    /// dribbles a byte now and then cannot hold a connection forever; never under `timeout`.
    pub max_reply: Duration,
    /// Largest request or reply body forwarded (default 64 MiB).
    pub max_body: usize,
    /// Permission bits of lane files (folders get the matching search bits).
    pub mode: u32,
}

/// How long a connection may take to send a request's headers, and to start the next request
/// on a kept-alive connection (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;

struct Shared {
    secrets: Arc<crate::redact::Secrets>,
    cfg: ProxyConfig,
    upstream: reqwest::Url,
    client: reqwest::Client,
    lanes: Mutex<LaneWriter>,
    exchange: AtomicU64,
}

/// A bound proxy; `serve` runs it until `shutdown` resolves.
pub struct Proxy {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
}

impl Proxy {
    pub async fn bind(cfg: ProxyConfig) -> anyhow::Result<Proxy> {
        let upstream = reqwest::Url::parse(&cfg.upstream)
            .map_err(|e| anyhow::anyhow!("--upstream {}: {e}", cfg.upstream))?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // The app's timeout, per read (reset by every byte). The whole-reply bound is
            // `exchange`'s own timer, so either error names its bound exactly.
            .read_timeout(cfg.timeout)
            .no_proxy()
            .build()?;
        let lanes = LaneWriter::create(&cfg.dir)
            .and_then(|w| w.with_mode(cfg.mode))
            .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.dir.display()))?;
        let listener = tokio::net::TcpListener::bind(&cfg.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
        Ok(Proxy {
            listener,
            shared: Arc::new(Shared {
                secrets: crate::redact::Secrets::new(),
                cfg,
                upstream,
                client,
                lanes: Mutex::new(lanes),
                exchange: AtomicU64::new(0),
            }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = Router::new().fallback(handle).with_state(self.shared);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut warned = false;
        loop {
            let stream = tokio::select! {
                r = self.listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(_) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                },
                _ = &mut shutdown => break,
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                if !warned {
                    warned = true;
                    eprintln!(
                        "bridgewire record sidebridge: connection limit ({MAX_CONNECTIONS}) reached; new connections are closed"
                    );
                }
                drop(stream);
                continue;
            };
            let svc = hyper_util::service::TowerToHyperService::new(router.clone());
            let mut closing = closing_rx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let mut b = hyper::server::conn::http1::Builder::new();
                b.timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT);
                let conn = b.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = closing.changed() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                    }
                }
            });
        }
        let _ = closing_tx.send(true);
        // In-flight exchanges get a moment to finish (and be recorded).
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            slots.acquire_many(MAX_CONNECTIONS as u32),
        )
        .await;
        Ok(())
    }
}

fn forward_url(upstream: &reqwest::Url, path_and_query: &str) -> reqwest::Url {
    let mut u = upstream.clone();
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    if path != "/" {
        let base = upstream.path().trim_end_matches('/');
        u.set_path(&format!("{base}{path}"));
    }
    if query.is_some() {
        u.set_query(query);
    }
    u
}

/// Records an envelope with its credentials removed ([`redacted_line`]).
fn record(shared: &Shared, scope: Option<&str>, dir: &str, e: &Envelope) {
    let line = redacted_line(
        &shared.secrets,
        e,
        shared.cfg.keep_key,
        shared.cfg.key.as_deref(),
    );
    let mut w = shared.lanes.lock().unwrap_or_else(|p| p.into_inner());
    w.append(Line {
        scope,
        dir,
        bytes: &line,
        conn: None,
    });
}

/// An envelope's lane line with its credentials removed: secret headers (learned, then
/// replaced; the key header kept when `keep_key`), secret query parameters, secrets in the
/// body, and every value `secrets` knows. Used by the recording proxy and by
/// `replay sidebridge --write-current`.
pub fn redacted_line(
    secrets: &crate::redact::Secrets,
    e: &Envelope,
    keep_key: bool,
    key: Option<&str>,
) -> Vec<u8> {
    let mut e = e.clone();
    {
        for (k, v) in &e.headers {
            // --keep-key keeps the key headers; every other credential header (Cookie,
            // X-Api-Key, …) is never kept, so its value is learned either way.
            let key_header = wire::SECRET_HEADERS
                .iter()
                .any(|s| k.eq_ignore_ascii_case(s));
            if crate::redact::is_secret_header(k)
                && !(keep_key && key_header)
                && !(key_header && wire::keeps_value(v, key))
            {
                secrets.learn_header_value(v);
            }
        }
    }
    e.headers = wire::redact(e.headers, keep_key, key);
    if let Some(p) = &e.path
        && let Some(r) = secrets.redact_url(p)
    {
        e.path = Some(r);
    }
    if let Some(b) = secrets.redact_bytes(&e.body) {
        e.body = b;
    }
    let line = e.to_line();
    secrets.redact_known(&line).unwrap_or(line)
}

fn system_reply(status: StatusCode, text: &str) -> Response {
    let body = serde_json::json!({"messages": [{
        "id": uuid::Uuid::new_v4().hyphenated().to_string().to_ascii_uppercase(),
        "from": "system",
        "content": text,
        "sources": [],
    }]});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let n = shared.exchange.fetch_add(1, Ordering::SeqCst) + 1;
    let (parts, body) = req.into_parts();
    // The body must arrive within the exchange timeout (a slow trickle is not served forever).
    let body = match tokio::time::timeout(
        shared.cfg.timeout,
        axum::body::to_bytes(body, shared.cfg.max_body),
    )
    .await
    .unwrap_or_else(|_| Err(axum::Error::new("request body not received in time")))
    {
        Ok(b) => b,
        Err(e) => {
            return system_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("bridgewire proxy: request body unreadable or over the cap: {e}"),
            );
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    // A compressed request body (a client may send one) is recorded decoded, as replies are.
    let (lane_body, decoded_from) =
        crate::content_coding::for_lane(&headers, body.to_vec(), shared.cfg.max_body);
    let scope = wire::chat_scope(&lane_body);
    record(
        &shared,
        scope.as_deref(),
        "client→bridge",
        &Envelope {
            exchange: n,
            method: Some(parts.method.as_str().to_string()),
            path: Some(path.clone()),
            headers,
            body: lane_body,
            decoded_from,
            ..Default::default()
        },
    );
    let start = Instant::now();
    let mut rb = shared
        .client
        .request(parts.method.clone(), forward_url(&shared.upstream, &path));
    for (k, v) in parts.headers.iter() {
        if crate::http_forward::forwards_request_header(k.as_str()) {
            rb = rb.header(k, v);
        }
    }
    let total = shared.cfg.max_reply.max(shared.cfg.timeout);
    let result = tokio::time::timeout(total, async {
        let mut resp = rb.body(body).send().await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            buf.extend_from_slice(&chunk);
            if buf.len() > shared.cfg.max_body {
                return Ok(Err(format!(
                    "reply body over {} bytes",
                    shared.cfg.max_body
                )));
            }
        }
        Ok::<_, reqwest::Error>(Ok((status, headers, buf)))
    })
    .await;
    let elapsed = Some(start.elapsed().as_millis() as u64);
    let (status, headers, buf) = match result {
        Ok(Ok(Ok(x))) => x,
        Ok(Ok(Err(e))) => return upstream_failure(&shared, scope.as_deref(), n, e, elapsed),
        Err(_) => {
            let what = format!(
                "no complete reply within {total:?}: bridgewire's whole-reply limit \
                 (--max-reply-time), not the app's timeout"
            );
            return upstream_failure(&shared, scope.as_deref(), n, what, elapsed);
        }
        Ok(Err(e)) => {
            // reqwest's only timeout here is the read timeout: the app's.
            let what = if e.is_timeout() {
                format!(
                    "no data received for {:?}: the app's timeout (--timeout), which it counts \
                     from the last byte received",
                    shared.cfg.timeout
                )
            } else if e.is_connect() {
                format!("cannot connect: {e}")
            } else {
                format!("{e}")
            };
            return upstream_failure(&shared, scope.as_deref(), n, what, elapsed);
        }
    };
    let rec_headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    // A bridge that compresses unasked: the client gets the bytes as sent, the lane the body
    // decoded (what the app reads, and what redaction can see into).
    let (lane_body, decoded_from) =
        crate::content_coding::for_lane(&rec_headers, buf.clone(), shared.cfg.max_body);
    record(
        &shared,
        scope.as_deref(),
        "bridge→client",
        &Envelope {
            exchange: n,
            status: Some(status.as_u16()),
            headers: rec_headers,
            body: lane_body,
            elapsed_ms: elapsed,
            decoded_from,
            ..Default::default()
        },
    );
    let mut r = Response::new(Body::from(Bytes::from(buf)));
    *r.status_mut() = status;
    for (k, v) in headers.iter() {
        if crate::http_forward::returns_answer_header(k.as_str())
            && let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_str().as_bytes()),
                HeaderValue::from_bytes(v.as_bytes()),
            )
        {
            r.headers_mut().append(k, v);
        }
    }
    r
}

fn upstream_failure(
    shared: &Shared,
    scope: Option<&str>,
    n: u64,
    error: String,
    elapsed: Option<u64>,
) -> Response {
    record(
        shared,
        scope,
        "bridge→client",
        &Envelope {
            exchange: n,
            status: Some(502),
            error: Some(error.clone()),
            elapsed_ms: elapsed,
            ..Default::default()
        },
    );
    system_reply(
        StatusCode::BAD_GATEWAY,
        &format!("bridgewire proxy: the bridge did not answer ({error})"),
    )
}

/// `record sidebridge`: binds, prints the proxy URL as the first stdout line, serves until
/// SIGINT/SIGTERM.
pub fn run(cfg: ProxyConfig) -> anyhow::Result<()> {
    let rt = super::spawn::runtime();
    rt.block_on(async move {
        let proxy = Proxy::bind(cfg).await?;
        let addr = proxy.local_addr()?;
        println!("http://{addr}/");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // `record sidebridge` installed bridgewire's signal handling (crate::signals).
        let shutdown = async {
            crate::signals::interrupted_async().await;
        };
        proxy.serve(shutdown).await?;
        Ok(())
    })
}

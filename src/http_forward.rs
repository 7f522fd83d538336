//! Which headers a recording proxy passes between a client and the server it records (the
//! Side Bridge proxy, and the Bridle proxy's long-polling and HTTP API forwarder).

/// Hop-by-hop headers (RFC 9110 §7.6.1), and the ones the forwarding side writes itself
/// (`Host`, `Content-Length`).
const NOT_PASSED_ON: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
];

/// Whether request header `name` (lower case, as `http::HeaderName` spells it) goes on to the
/// server: every end-to-end header but `Accept-Encoding`, so the server answers uncompressed
/// and the lanes hold text redaction can read (identity is acceptable to any client, RFC 9110
/// §12.5.3; mitmproxy's `anticomp` does the same).
pub fn forwards_request_header(name: &str) -> bool {
    !NOT_PASSED_ON.contains(&name) && name != "accept-encoding"
}

/// Whether answer header `name` (lower case) goes back to the client: every end-to-end one.
pub fn returns_answer_header(name: &str) -> bool {
    !NOT_PASSED_ON.contains(&name)
}

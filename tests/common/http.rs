//! One raw HTTP/1.1 exchange over a plain socket, for tests that must see the bytes a client
//! gets (a compressed body stays compressed, headers as sent).

use std::io::{Read, Write};
use std::time::Duration;

/// A reply as it came: status, the head's text, the raw body.
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// `method` `url` (an `http://host:port[/path]` URL) with `headers` and `body`, `Connection:
/// close`, 30 s read bound.
pub fn exchange(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(reply.len());
    let head = String::from_utf8_lossy(&reply[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply.get(split + 4..).unwrap_or_default().to_vec();
    Raw { status, head, body }
}

/// A JSON POST: the reply as it came.
pub fn post_json(url: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    exchange("POST", url, &h, body)
}

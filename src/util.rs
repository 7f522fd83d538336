//! Small helpers with no better home.

/// FNV-1a, 64 bit: a stable hash for names (not for security).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = match chunk.len() {
            3 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8 | chunk[2] as u32,
            2 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8,
            _ => (chunk[0] as u32) << 16,
        };
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        if c == b'=' {
            break;
        }
        let v = B64.iter().position(|&x| x == c)? as u32;
        buf = buf << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits & 0xff) as u8);
        }
    }
    Some(out)
}

/// Milliseconds since the Unix epoch.
/// Digits only, at most 15 of them: the integer, which an f64 holds exactly, so it is what the
/// general float parse gives (leading zeros included), without the parser. Lane numbers (`ts`,
/// `run`, `seq`) and JSON-RPC ids mostly are; the general parse cost a fifth of the lane
/// reader's instructions and ~75 a line in the recorder's scan.
pub fn small_integer(digits: &[u8]) -> Option<f64> {
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(n as f64)
}

/// Every letter of `key` in the other case (`Key-7` → `kEY-7`): a key that differs from
/// `key` only in case, for checks that a secret is compared case-sensitively.
pub fn swap_case(key: &str) -> String {
    key.chars()
        .flat_map(|c| {
            let (up, low): (Vec<char>, Vec<char>) =
                (c.to_uppercase().collect(), c.to_lowercase().collect());
            if c.is_uppercase() { low } else { up }
        })
        .collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A server's URL in one line of its start-up output: the first `http(s)://…` in it that names a port or a
/// local host, else a `host:port` (IPv4, `localhost`, `[v6]`) standing alone or inside text. A
/// wildcard listen address (`0.0.0.0`, `[::]`) becomes the loopback address, which is where a
/// client reaches it. A URL with neither a port nor a local host (`https://github.com/…` in a
/// banner line naming the project's docs) is not a listening address: passed over.
pub fn find_url(line: &str) -> Option<String> {
    static URL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static HOST_PORT: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let url = URL.get_or_init(|| {
        // The host: a bracketed IPv6 literal (Node prints `http://[::]:PORT`), or a name.
        regex::Regex::new(r#"https?://(?:\[[0-9A-Fa-f:.]+\]|[^\s"'<>()\]\[,]+)[^\s"'<>(),]*"#)
            .expect("valid")
    });
    let hp = HOST_PORT.get_or_init(|| {
        regex::Regex::new(r"(?:^|[\s(=@])((?:\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9A-Fa-f:]+\]):\d{1,5})(?:$|[\s),/.;])")
            .expect("valid")
    });
    let listening = |u: &str| {
        reqwest::Url::parse(u).is_ok_and(|p| {
            p.port().is_some()
                || matches!(
                    p.host_str(),
                    Some("localhost" | "127.0.0.1" | "0.0.0.0" | "[::1]" | "[::]")
                )
        })
    };
    let found = if let Some(u) = url
        .find_iter(line)
        .map(|m| m.as_str().trim_end_matches(['.', ';', ':']).to_string())
        .find(|u| listening(u))
    {
        u
    } else {
        let c = hp.captures(line)?;
        format!("http://{}/", &c[1])
    };
    Some(loopback(&found))
}

/// A wildcard listen address (`0.0.0.0`, `[::]`) as the loopback address a client reaches.
pub fn loopback(url: &str) -> String {
    url.replacen("//0.0.0.0:", "//127.0.0.1:", 1)
        .replacen("//[::]:", "//[::1]:", 1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn swap_case_changes_letters_only() {
        assert_eq!(super::swap_case("peer-Key-7"), "PEER-kEY-7");
        assert_eq!(super::swap_case("12-34"), "12-34");
    }

    #[test]
    fn base64_round_trips() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"\xff\xfe\x00abc"] {
            let enc = super::base64_encode(data);
            assert_eq!(super::base64_decode(&enc).unwrap(), data);
        }
        assert_eq!(super::base64_encode(b"foob"), "Zm9vYg==");
    }
}

/// A `HashMap` with foldhash's seeded hasher: the offline pass looks up ids and keys for every
/// delta and event, where SipHash was a visible share of `pins`; nothing iterates these maps in
/// an order that reaches an output.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A `HashSet` with [`FastMap`]'s hasher.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A string map that forgets its oldest entries past a cap (bb caps its assembler maps so a
/// long-lived thread holds bounded state).
#[derive(Debug, Clone)]
pub struct CappedMap {
    map: FastMap<String, String>,
    order: std::collections::VecDeque<String>,
    cap: usize,
}

impl CappedMap {
    pub fn new(cap: usize) -> Self {
        CappedMap {
            map: Default::default(),
            order: Default::default(),
            cap,
        }
    }

    pub fn get(&self, k: &str) -> Option<&String> {
        self.map.get(k)
    }

    /// Removes `k`. Its slot in the eviction order is dropped lazily (the order never holds more
    /// than `cap` keys, so memory stays bounded).
    pub fn remove(&mut self, k: &str) -> Option<String> {
        self.map.remove(k)
    }

    pub fn insert(&mut self, k: String, v: String) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }
}

/// A string set that forgets its oldest members past a cap.
#[derive(Debug, Clone)]
pub struct CappedSet {
    members: FastSet<String>,
    order: std::collections::VecDeque<String>,
    cap: usize,
}

impl CappedSet {
    pub fn new(cap: usize) -> Self {
        CappedSet {
            members: Default::default(),
            order: Default::default(),
            cap,
        }
    }

    pub fn contains(&self, k: &str) -> bool {
        self.members.contains(k)
    }

    pub fn insert(&mut self, k: &str) {
        if self.members.insert(k.to_string()) {
            self.order.push_back(k.to_string());
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.members.remove(&old);
                }
            }
        }
    }

    pub fn remove(&mut self, k: &str) {
        if self.members.remove(k) {
            self.order.retain(|x| x != k);
        }
    }
}

/// An error with its sources (the cause, e.g. connection refused, is in the chain).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut why = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        why = format!("{why}: {c}");
        src = c.source();
    }
    why
}

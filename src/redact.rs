//! Record-time credential redaction of lane lines (bb reference §1.9).
//!
//! Key- and container-based, never free text, so provider output stays faithful:
//!
//! * a **secret payload key** (normalized: lower-cased, `-` `_` `.` and whitespace removed) ends
//!   with `token`, `secret`, `password`, `passwd`, `passphrase`, `credential`, `credentials`,
//!   `apikey`, `privatekey`, `authorization` or `cookie`, or equals `auth`, `bearer`,
//!   `signature` or `sig`: a string value becomes `[redacted]`; an object or array value has
//!   every string inside it replaced;
//! * an **env/header container** (normalized key `env`, `envvars`, `environment`, `headers`,
//!   `requestheaders`, `responseheaders`, `httpheaders`, `extraheaders`) holding an object: a
//!   string value under a secret env name is replaced, and `{name, value}` with a secret env
//!   `name` has its `value` replaced;
//! * **secret env names**: `CODEX_POOL_AUTH_TOKEN`, `CODEX_POOL_BASE_URL`,
//!   `BB_ACCOUNT_POOL_PARENT_TOKEN`, `BB_ACCOUNT_POOL_PARENT_URL`, or any name containing
//!   (case-insensitively) `TOKEN`, `SECRET`, `KEY`, `PASSWORD`, `PASSWD`, `PASSPHRASE`,
//!   `CREDENTIAL`, `BEARER`, `AUTH`, `COOKIE`, `PRIVATE` or `POOL`;
//! * **cross-reference**: every replaced value of 8 or more UTF-16 units is then replaced wherever
//!   it occurs inside any other string of the same line, longest first;
//! * **fail closed**: deeper than 64 levels or past 200 000 visited containers, the whole value
//!   becomes `[redacted]`.
//!
//! A line that is not JSON is kept as it is; a line where nothing was redacted is kept byte for
//! byte; otherwise the redacted value is re-serialized as JS JSON.
//!
//! Beyond bb's minimum (issue 15):
//!
//! * **list forms** real runtimes use: a container holding an array of `{name, value}` objects
//!   (`env: [{name, value}]`) or of `[name, value]` pairs (raw header lists), and header maps whose
//!   values are arrays of strings;
//! * **URLs**: a string under a key ending in `url`/`uri` (and any string handed to
//!   [`redact_url`]) has the values of secret query parameters replaced (`?token=…&key=…`);
//! * **any depth, any bytes**: a line serde cannot take (nested deeper than its 128 levels, not
//!   valid UTF-8, lone surrogates) goes through a byte-level pass with no recursion that replaces
//!   string values under secret keys (every string inside a secret container) and whole
//!   env/header containers, so the raw bytes are redacted before `lineBase64` is written;
//! * **known secrets**: a [`Secrets`] set lives as long as a recording (or a report): every value
//!   replaced (8 or more characters) is learned, and every later line, and every report, has each
//!   known value replaced wherever it occurs (raw and JSON-escaped forms, longest first).
//!
//! # The API
//!
//! * [`Secrets::new`] → one per recording, shared (`Arc`) by its writers;
//!   [`Secrets::redact_bytes`] for a lane line (any bytes; `None` = unchanged, write the
//!   original); [`Secrets::learn`] / [`Secrets::learn_json`] for values known up front (a
//!   fixture's apiKey, env, headers); [`Secrets::redact_text`] for report text.
//! * [`global`]: the process-wide set reports use ([`crate::report::redact_report`]).
//! * [`redact_line`]: the stateless §1.9 pass of one line (bb's recorder semantics).
//! * [`is_secret_header`], [`redact_url`]: for proxies recording HTTP.
//!
//! The fast path stays cheap: a line is parsed only when a key-only structural pre-filter
//! ([`may_need_redaction`]) finds a key that could matter; the known-value pass is a `memmem`
//! per known value and is skipped while the set is empty.

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// A value some redaction already replaced: `[redacted]`, `[redacted:other]`, `Bearer
/// [redacted]`, `sid=[redacted]`, or bb's checked-in marker (`REDACTED`, `sk-REDACTED`). Left
/// as it is (and never learned), so redacting twice changes nothing.
pub fn is_redacted(s: &str) -> bool {
    s.contains("[redacted") || s.ends_with("REDACTED")
}

const SECRET_SUFFIXES: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "apikey",
    "privatekey",
    "authorization",
    "cookie",
];
const SECRET_EXACT: &[&str] = &["auth", "bearer", "signature", "sig"];
const CONTAINERS: &[&str] = &[
    "env",
    "envvars",
    "environment",
    "headers",
    "requestheaders",
    "responseheaders",
    "httpheaders",
    "extraheaders",
];
const ENV_EXACT: &[&str] = &[
    "CODEX_POOL_AUTH_TOKEN",
    "CODEX_POOL_BASE_URL",
    "BB_ACCOUNT_POOL_PARENT_TOKEN",
    "BB_ACCOUNT_POOL_PARENT_URL",
];
const ENV_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "BEARER",
    "AUTH",
    "COOKIE",
    "PRIVATE",
    "POOL",
];
const MAX_DEPTH: usize = 64;
const MAX_NODES: usize = 200_000;

fn normalize_key(k: &str) -> String {
    k.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.') && !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Runs `f` on the normalized key; ASCII keys (nearly all) are normalized on the stack, because
/// the recorder checks every key of every line.
fn with_normalized<R>(k: &str, f: impl FnOnce(&str) -> R) -> R {
    if k.len() <= 64 && k.is_ascii() {
        let mut buf = [0u8; 64];
        let mut n = 0;
        for &b in k.as_bytes() {
            if !matches!(b, b'-' | b'_' | b'.') && !b.is_ascii_whitespace() {
                buf[n] = b.to_ascii_lowercase();
                n += 1;
            }
        }
        f(std::str::from_utf8(&buf[..n]).expect("ascii"))
    } else {
        f(&normalize_key(k))
    }
}

pub fn is_secret_key(k: &str) -> bool {
    with_normalized(k, |n| {
        SECRET_EXACT.contains(&n) || SECRET_SUFFIXES.iter().any(|s| n.ends_with(s))
    })
}

fn is_container_key(k: &str) -> bool {
    with_normalized(k, |n| CONTAINERS.contains(&n))
}

pub fn is_secret_env_name(name: &str) -> bool {
    if ENV_EXACT.contains(&name) {
        return true;
    }
    let upper = name.to_uppercase();
    ENV_PARTS.iter().any(|p| upper.contains(p))
}

/// Keys whose string value is a URL whose query may carry secrets.
fn is_url_key(k: &str) -> bool {
    with_normalized(k, |n| n.ends_with("url") || n.ends_with("uri"))
}

/// A query parameter (or header) name that carries a secret.
fn is_secret_param(name: &str) -> bool {
    is_secret_key(name) || is_secret_env_name(name)
}

/// Request/response headers that carry credentials: `Authorization`, `Proxy-Authorization`,
/// `Cookie`, `Set-Cookie`, `X-Api-Key`, a protocol's key header (`X-SideBridge-Key`), and any
/// name a secret env name would match (`…TOKEN…`, `…SECRET…`, `…AUTH…`).
pub fn is_secret_header(name: &str) -> bool {
    is_secret_env_name(name) || is_secret_key(name)
}

/// A URL (or `path?query`) with the values of secret query parameters replaced; `None` when
/// nothing changed.
pub fn redact_url(url: &str) -> Option<String> {
    redact_url_into(url, &mut Vec::new())
}

/// [`redact_url`], pushing the replaced values to `replaced`.
fn redact_url_into(url: &str, replaced: &mut Vec<String>) -> Option<String> {
    let (head, query) = url.split_once('?')?;
    let (query, frag) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let mut changed = false;
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v))
                if !v.is_empty() && !is_redacted(v) && is_secret_param(&percent_decode(k)) =>
            {
                changed = true;
                replaced.push(percent_decode(v));
                if percent_decode(v) != v {
                    replaced.push(v.to_string());
                }
                format!("{k}={REDACTED}")
            }
            _ => kv.to_string(),
        })
        .collect();
    changed.then(|| {
        let mut out = format!("{head}?{}", parts.join("&"));
        if let Some(f) = frag {
            out.push('#');
            out.push_str(f);
        }
        out
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or(""), 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cheap pre-filter: does the line have a key that could lead to a redaction? One structural
/// pass over the keys (string values are skipped), so clean lines are never parsed.
pub fn may_need_redaction(line: &[u8]) -> bool {
    crate::rpc_scan::any_key(line, &key_may_matter)
}

/// Whether one object key could lead to a redaction: the test [`may_need_redaction`] applies to
/// every key (for a caller that walks the keys itself, e.g. the recorder's fused scan).
pub fn key_may_matter(k: &str) -> bool {
    // `is_secret_key(k) || is_container_key(k) || is_url_key(k)`, the key normalized once.
    with_normalized(k, |n| {
        SECRET_EXACT.contains(&n)
            || SECRET_SUFFIXES.iter().any(|s| n.ends_with(s))
            || CONTAINERS.contains(&n)
            || n.ends_with("url")
            || n.ends_with("uri")
    })
}

/// Every name [`key_may_matter`] compares a normalized key with, as an exact name or a suffix.
const KEY_PATTERN_LISTS: [&[&str]; 4] =
    [SECRET_SUFFIXES, SECRET_EXACT, CONTAINERS, &["url", "uri"]];

#[cfg(test)]
fn key_patterns() -> impl Iterator<Item = &'static str> {
    KEY_PATTERN_LISTS.into_iter().flatten().copied()
}

/// The last three bytes of `p`, last byte lowest.
const fn tail3(p: &[u8]) -> u32 {
    let n = p.len();
    p[n - 1] as u32 | (p[n - 2] as u32) << 8 | (p[n - 3] as u32) << 16
}

/// Which bit of [`KEY_TAIL_BLOOM`] a tail sets.
const fn tail_bit(t: u32) -> u32 {
    t.wrapping_mul(0x9e37_79b1) >> 24
}

/// The tails ([`tail3`]) of every key pattern, and a 256-bit filter over them.
const KEY_TAILS: ([u32; 32], usize, [u64; 4]) = {
    let mut tails = [0u32; 32];
    let mut n = 0;
    let mut bloom = [0u64; 4];
    let mut l = 0;
    while l < KEY_PATTERN_LISTS.len() {
        let list = KEY_PATTERN_LISTS[l];
        let mut i = 0;
        while i < list.len() {
            let t = tail3(list[i].as_bytes());
            tails[n] = t;
            n += 1;
            let bit = tail_bit(t);
            bloom[(bit >> 6) as usize] |= 1 << (bit & 63);
            i += 1;
        }
        l += 1;
    }
    (tails, n, bloom)
};

/// A cheap pre-test of [`key_may_matter`] on a key's raw bytes: `false` only where it answers
/// `false` too. Every pattern is at least 3 characters and is matched as a suffix or whole, so
/// a key can matter only if its normalized form ends with the last 3 characters of some
/// pattern; those come from the key's tail alone when the tail is plain ASCII (a non-ASCII or
/// control byte there, whose normalization is not byte-wise, answers "maybe"). The recorder
/// asks this for every key of every line; nearly all fail it after a few bytes.
#[inline(always)]
pub fn key_tail_may_matter(key: &[u8]) -> bool {
    let tail = match key {
        // The common case: the key ends in three letters or digits, which lower-case by
        // setting bit 0x20 (digits have it already).
        [.., a, b, c] if ALNUM[*a as usize] & ALNUM[*b as usize] & ALNUM[*c as usize] => {
            ((*a as u32) << 16 | (*b as u32) << 8 | *c as u32) | 0x0020_2020
        }
        _ => match key_tail_slow(key) {
            Some(Some(t)) => t,
            Some(None) => return false,
            None => return true,
        },
    };
    let (tails, count, bloom) = &KEY_TAILS;
    let bit = tail_bit(tail);
    bloom[(bit >> 6) as usize] & (1 << (bit & 63)) != 0 && tails[..*count].contains(&tail)
}

/// ASCII letters and digits.
const ALNUM: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    t
};

/// [`key_tail_may_matter`]'s tail for any key: `Some(Some(tail))`, `Some(None)` when the key
/// normalizes to fewer than 3 characters, `None` ("maybe") for a byte normalization does not
/// treat byte-wise.
fn key_tail_slow(key: &[u8]) -> Option<Option<u32>> {
    let mut tail = 0u32;
    let mut n = 0;
    for &b in key.iter().rev() {
        match b {
            b'-' | b'_' | b'.' | b' ' => {}
            0x21..=0x7e => {
                tail |= (b.to_ascii_lowercase() as u32) << (8 * n);
                n += 1;
                if n == 3 {
                    break;
                }
            }
            _ => return None,
        }
    }
    // Shorter than every pattern once normalized: `Some(None)`.
    Some((n == 3).then_some(tail))
}

/// Every string under a secret key anywhere in `v` (iteratively, for values past the walk's
/// depth limit), in document order.
fn collect_secret_strings(v: &Value, out: &mut Vec<String>) {
    // (value, whether it sits under a secret key)
    let mut stack: Vec<(&Value, bool)> = vec![(v, false)];
    while let Some((v, secret)) = stack.pop() {
        match v {
            Value::String(s) if secret && !is_redacted(s) => out.push(s.clone()),
            Value::Array(a) => stack.extend(a.iter().rev().map(|x| (x, secret))),
            Value::Object(m) => {
                stack.extend(m.iter().rev().map(|(k, x)| (x, secret || is_secret_key(k))))
            }
            _ => {}
        }
    }
}

struct Walk {
    nodes: usize,
    replaced: Vec<String>,
}

impl Walk {
    fn replace_strings(&mut self, v: &mut Value, depth: usize) {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            *v = Value::String(REDACTED.into());
            return;
        }
        match v {
            Value::String(s) if !is_redacted(s) => {
                self.replaced.push(std::mem::replace(s, REDACTED.into()));
            }
            Value::Array(a) => a
                .iter_mut()
                .for_each(|x| self.replace_strings(x, depth + 1)),
            Value::Object(m) => m
                .iter_mut()
                .for_each(|(_, x)| self.replace_strings(x, depth + 1)),
            _ => {}
        }
    }

    fn visit(&mut self, v: &mut Value, depth: usize) {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            if !matches!(v, Value::String(s) if s == REDACTED) {
                // Fail closed, but still learn the secrets inside, so later lines that repeat
                // them are redacted too (without recursion: the value may be deep).
                collect_secret_strings(v, &mut self.replaced);
                *v = Value::String(REDACTED.into());
                self.replaced.push(String::new());
            }
            return;
        }
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| self.visit(x, depth + 1)),
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if is_secret_key(k) {
                        match x {
                            Value::String(s) if !is_redacted(s) => {
                                self.replaced.push(std::mem::replace(s, REDACTED.into()));
                            }
                            Value::Array(_) | Value::Object(_) => {
                                self.replace_strings(x, depth + 1)
                            }
                            _ => {}
                        }
                    } else if is_container_key(k) && x.is_object() {
                        self.container(x);
                        self.visit(x, depth + 1);
                    } else if is_container_key(k) && x.is_array() {
                        self.container_list(x);
                        self.visit(x, depth + 1);
                    } else if let Value::String(u) = x
                        && is_url_key(k)
                        && let Some(r) = redact_url_into(u, &mut self.replaced)
                    {
                        *u = r;
                    } else {
                        self.visit(x, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    fn take(&mut self, v: &mut Value) {
        match v {
            Value::String(s) if !is_redacted(s) => {
                self.replaced.push(std::mem::replace(s, REDACTED.into()));
            }
            Value::Array(_) | Value::Object(_) => self.replace_strings(v, 0),
            _ => {}
        }
    }

    fn container(&mut self, x: &mut Value) {
        let Value::Object(m) = x else { return };
        let named_secret = matches!(
            (m.get("name"), m.get("value")),
            (Some(Value::String(n)), Some(_)) if is_secret_env_name(n)
        );
        for (k, v) in m.iter_mut() {
            // A secret name's value: a string, or (header maps) a list of strings.
            if (is_secret_env_name(k) && (v.is_string() || v.is_array()))
                || (named_secret && k == "value")
            {
                self.take(v);
            }
        }
    }

    /// `env: [{name, value}, …]` and raw header lists `[[name, value], …]`.
    fn container_list(&mut self, x: &mut Value) {
        let Value::Array(items) = x else { return };
        for item in items {
            match item {
                Value::Object(_) => self.container(item),
                Value::Array(pair) if pair.len() == 2 => {
                    if matches!(&pair[0], Value::String(n) if is_secret_env_name(n)) {
                        self.take(&mut pair[1]);
                    }
                }
                _ => {}
            }
        }
    }
}

fn cross_reference(v: &mut Value, secrets: &[String]) {
    match v {
        Value::String(s) => {
            for sec in secrets {
                if s.contains(sec.as_str()) {
                    *s = s.replace(sec.as_str(), REDACTED);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cross_reference(x, secrets)),
        Value::Object(m) => m.iter_mut().for_each(|(_, x)| cross_reference(x, secrets)),
        _ => {}
    }
}

/// The §1.9 structural pass over a parsed line: the redacted line and every value replaced, or
/// `None` when nothing changed.
fn structural_value(line: &str) -> Result<Option<(String, Vec<String>)>, ()> {
    let mut v: Value = serde_json::from_str(line).map_err(|_| ())?;
    let mut w = Walk {
        nodes: 0,
        replaced: Vec::new(),
    };
    w.visit(&mut v, 0);
    if w.replaced.is_empty() {
        return Ok(None);
    }
    let secrets = learnable(&w.replaced);
    if !secrets.is_empty() {
        cross_reference(&mut v, &secrets);
    }
    Ok(Some((crate::jsjson::to_string(&v), w.replaced)))
}

/// The values worth remembering (8 or more UTF-16 units), longest first, deduplicated.
fn learnable(replaced: &[String]) -> Vec<String> {
    let mut secrets: Vec<String> = replaced
        .iter()
        .filter(|s| s.encode_utf16().count() >= 8 && !is_redacted(s))
        .cloned()
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.encode_utf16().count()));
    secrets.dedup();
    secrets
}

/// The structural pass over any bytes: the serde path when the line is UTF-8 JSON serde can
/// take, else the byte-level pass. `None` when nothing changed.
fn structural(line: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    if !may_need_redaction(line) {
        return None;
    }
    structural_unfiltered(line)
}

/// [`structural`] without its pre-filter.
fn structural_unfiltered(line: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    if let Ok(text) = std::str::from_utf8(line)
        && let Ok(r) = structural_value(text)
    {
        return r.map(|(s, rep)| (s.into_bytes(), rep));
    }
    bytes_pass(line)
}

/// Redacts one line (bb §1.9 plus the list forms and URLs above); `None` when nothing changed
/// (write the original bytes). Stateless: see [`Secrets`] for values learned across lines.
pub fn redact_line(line: &str) -> Option<String> {
    let (out, _) = structural(line.as_bytes())?;
    // Text in, text out: the byte pass only replaces whole JSON strings, so UTF-8 stays UTF-8.
    String::from_utf8(out).ok()
}

/// Byte-level structural redaction with no recursion, for lines serde cannot parse (too deep,
/// not UTF-8, lone surrogates). String values under a secret key are replaced, every string
/// value inside a container under a secret key too, and a whole env/header container (object
/// or array) becomes `"[redacted]"` (fail closed: its list forms are not told apart here).
fn bytes_pass(b: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    struct Frame {
        closer: u8,
        /// Every string value inside is secret.
        all: bool,
    }
    let mut edits: Vec<(usize, usize)> = Vec::new();
    let mut replaced: Vec<String> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0usize;
    let ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
    };
    // The end (exclusive) of the string starting at `i` (a `"`).
    let string_end = |i: usize| -> Option<usize> {
        let mut j = i + 1;
        loop {
            let rel = memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
            j += rel;
            if b[j] == b'\\' {
                j += 2;
            } else {
                return Some(j + 1);
            }
        }
    };
    let decode = |s: usize, e: usize| -> String {
        serde_json::from_slice::<String>(&b[s..e])
            .unwrap_or_else(|_| String::from_utf8_lossy(&b[s + 1..e - 1]).into_owned())
    };
    // What the next value is: (secret string, secret subtree, whole container to replace).
    let mut pending_key: (bool, bool) = (false, false); // (secret key, container key)
    // `None` where the bytes stop being readable: the edits found up to there still apply
    // (fail closed: a secret before a malformed member or trailing bytes is not written).
    let _read_to_the_end: Option<()> = (|| loop {
        ws(&mut i);
        let c = *b.get(i)?;
        let all = stack.last().is_some_and(|f| f.all);
        let (secret, container) = std::mem::take(&mut pending_key);
        match c {
            b'"' => {
                let e = string_end(i)?;
                if secret || all {
                    let v = decode(i, e);
                    if !is_redacted(&v) {
                        edits.push((i, e));
                        replaced.push(v);
                    }
                }
                i = e;
            }
            b'{' | b'[' if container && !all => {
                // The whole container goes: find its end with the non-recursive skipper.
                let end = crate::rpc_scan::value_end(b, i)?;
                edits.push((i, end));
                replaced.push(String::new());
                i = end;
            }
            b'{' | b'[' => {
                stack.push(Frame {
                    closer: if c == b'{' { b'}' } else { b']' },
                    all: all || secret,
                });
                i += 1;
                ws(&mut i);
                match b.get(i)? {
                    b'}' | b']' => {} // empty: closed below
                    _ if c == b'{' => {
                        let e = string_end(i)?;
                        let k = decode(i, e);
                        pending_key = (is_secret_key(&k), is_container_key(&k));
                        i = e;
                        ws(&mut i);
                        (*b.get(i)? == b':').then_some(())?;
                        i += 1;
                        continue;
                    }
                    _ => continue,
                }
            }
            _ => {
                // number or literal: to the next delimiter
                while i < b.len()
                    && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    i += 1;
                }
            }
        }
        // After a value: close containers, or go to the next member.
        loop {
            ws(&mut i);
            let Some(f) = stack.last() else {
                // A top-level value ended; bytes after it may hold another one.
                match memchr::memchr2(b'{', b'[', &b[i..]) {
                    Some(rel) => {
                        i += rel;
                        break;
                    }
                    None => return Some(()),
                }
            };
            let closer = f.closer;
            match *b.get(i)? {
                b',' => {
                    i += 1;
                    if closer == b'}' {
                        ws(&mut i);
                        let e = string_end(i)?;
                        let k = decode(i, e);
                        pending_key = (is_secret_key(&k), is_container_key(&k));
                        i = e;
                        ws(&mut i);
                        (*b.get(i)? == b':').then_some(())?;
                        i += 1;
                    }
                    break;
                }
                x if x == closer => {
                    i += 1;
                    stack.pop();
                }
                _ => return None,
            }
        }
    })();
    if edits.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(b.len());
    let mut at = 0;
    for (s, e) in &edits {
        out.extend_from_slice(&b[at..*s]);
        out.extend_from_slice(b"\"[redacted]\"");
        at = *e;
    }
    out.extend_from_slice(&b[at..]);
    Some((out, replaced))
}

/// Most values a [`Secrets`] set keeps; past it new values are not learned (named on stderr
/// once), the ones known keep being replaced.
pub const MAX_KNOWN_SECRETS: usize = 4096;

/// A set of secret values known for the life of a recording (or of a report): each is replaced
/// wherever it occurs in every later line. Thread-safe; share it with `Arc`.
#[derive(Default)]
pub struct Secrets {
    known: std::sync::RwLock<Known>,
    count: std::sync::atomic::AtomicUsize,
    full_warned: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Known {
    /// Raw values (for `contains` checks).
    values: std::collections::HashSet<String>,
    /// Byte forms to look for, longest first: each value raw and JSON-escaped.
    finders: Vec<memchr::memmem::Finder<'static>>,
    /// The same forms in the order learned.
    forms: Vec<Vec<u8>>,
    /// One automaton over the forms learned before the last rebuild, to tell in one pass over
    /// a line whether any of them occurs (most lines hold none: one pass, not one per form).
    any: Option<aho_corasick::AhoCorasick>,
    /// Forms learned since the last rebuild, looked for one by one until the next.
    fresh: Vec<memchr::memmem::Finder<'static>>,
}

impl Known {
    /// Whether any known form occurs in `b`.
    fn occurs(&self, b: &[u8]) -> bool {
        self.any.as_ref().is_some_and(|ac| ac.is_match(b))
            || self.fresh.iter().any(|f| f.find(b).is_some())
    }

    /// Rebuilds the automaton once the forms it misses are many (an eighth of those it has, 8
    /// at least): each rebuild costs a pass over all forms, so rebuilds thin out as the set
    /// grows, and a line is searched once plus at most that many times.
    fn maybe_rebuild(&mut self) {
        let covered = self.forms.len() - self.fresh.len();
        if self.fresh.len() < (covered / 8).max(8) {
            return;
        }
        if let Ok(ac) = aho_corasick::AhoCorasick::new(&self.forms) {
            self.any = Some(ac);
            self.fresh.clear();
        }
    }
}

impl Secrets {
    pub fn new() -> std::sync::Arc<Secrets> {
        std::sync::Arc::new(Secrets::default())
    }

    /// How many values are known.
    pub fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remembers a secret value (ignored below 8 UTF-16 units: too likely to be ordinary text).
    pub fn learn(&self, value: &str) {
        if value.encode_utf16().count() < 8 || is_redacted(value) {
            return;
        }
        let mut k = self.known.write().unwrap_or_else(|e| e.into_inner());
        if k.values.contains(value) {
            return;
        }
        if k.values.len() >= MAX_KNOWN_SECRETS {
            if !self
                .full_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                eprintln!(
                    "bridgewire: known-secret set full ({MAX_KNOWN_SECRETS} values); later values are redacted by key only"
                );
            }
            return;
        }
        k.values.insert(value.to_string());
        let escaped = serde_json::to_string(value).unwrap_or_default();
        let escaped = &escaped[1..escaped.len().saturating_sub(1).max(1)];
        let mut forms = vec![value.as_bytes().to_vec()];
        if escaped != value {
            forms.push(escaped.as_bytes().to_vec());
        }
        for f in forms {
            k.finders.push(memchr::memmem::Finder::new(&f).into_owned());
            k.fresh.push(memchr::memmem::Finder::new(&f).into_owned());
            k.forms.push(f);
        }
        k.finders
            .sort_by_key(|f| std::cmp::Reverse(f.needle().len()));
        k.maybe_rebuild();
        self.count
            .store(k.values.len(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Learns a credential header's value and its parts: the credential after the scheme
    /// (`Bearer <token>`, `Basic <…>`) and each cookie's value.
    pub fn learn_header_value(&self, v: &str) {
        self.learn(v);
        if let Some((_, cred)) = v.split_once(' ') {
            self.learn(cred.trim());
        }
        for part in v.split(';') {
            if let Some((_, val)) = part.split_once('=') {
                self.learn(val.trim());
            }
        }
    }

    /// Learns every value the structural rules would replace in `v` (a fixture, a config).
    pub fn learn_json(&self, v: &Value) {
        let mut copy = v.clone();
        let mut w = Walk {
            nodes: 0,
            replaced: Vec::new(),
        };
        w.visit(&mut copy, 0);
        for s in &w.replaced {
            self.learn(s);
        }
    }

    /// Replaces every known value in `b`; `None` when none occurs.
    fn known_pass(&self, b: &[u8]) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let k = self.known.read().unwrap_or_else(|e| e.into_inner());
        // Replacing is done longest form first, each on the previous one's output (a shorter
        // value overlapping a longer one must not leave part of it in clear); most lines hold
        // no known value at all, which one scan tells.
        if !k.occurs(b) {
            return None;
        }
        let mut cur: Option<Vec<u8>> = None;
        for f in &k.finders {
            let hay = cur.as_deref().unwrap_or(b);
            if f.find(hay).is_none() {
                continue;
            }
            let mut out = Vec::with_capacity(hay.len());
            let mut at = 0;
            for pos in f.find_iter(hay) {
                if pos < at {
                    continue;
                }
                out.extend_from_slice(&hay[at..pos]);
                out.extend_from_slice(REDACTED.as_bytes());
                at = pos + f.needle().len();
            }
            out.extend_from_slice(&hay[at..]);
            cur = Some(out);
        }
        cur
    }

    /// [`redact_url`], learning the values it replaces.
    pub fn redact_url(&self, url: &str) -> Option<String> {
        let mut replaced = Vec::new();
        let out = redact_url_into(url, &mut replaced);
        for s in &replaced {
            self.learn(s);
        }
        out
    }

    /// Replaces every known value in `b` (no structural pass); `None` when none occurs.
    pub fn redact_known(&self, b: &[u8]) -> Option<Vec<u8>> {
        self.known_pass(b)
    }

    /// Redacts one lane line of any bytes: the structural pass (learning what it replaces),
    /// then every known value. `None` when nothing changed.
    pub fn redact_bytes(&self, line: &[u8]) -> Option<Vec<u8>> {
        self.redact_bytes_scanned(line, may_need_redaction(line))
    }

    /// [`Secrets::redact_bytes`] for a caller that already has [`may_need_redaction`]'s answer
    /// for `line` (`keys_may_matter`, e.g. from the recorder's fused scan with
    /// [`key_may_matter`]), so the line's keys are not walked twice.
    pub fn redact_bytes_scanned(&self, line: &[u8], keys_may_matter: bool) -> Option<Vec<u8>> {
        let first = keys_may_matter
            .then(|| structural_unfiltered(line))
            .flatten()
            .map(|(out, replaced)| {
                for s in &replaced {
                    self.learn(s);
                }
                out
            });
        let base = first.as_deref().unwrap_or(line);
        match self.known_pass(base) {
            Some(out) => Some(out),
            None => first,
        }
    }

    /// A line that may carry a non-JSON prefix before its JSON (a Socket.IO frame,
    /// `42/ws/client,["message",{…}]`): the JSON part is redacted structurally, then JWT-shaped
    /// tokens and every known value are replaced anywhere in the line.
    pub fn redact_framed(&self, b: &[u8]) -> Option<Vec<u8>> {
        self.redact_framed_scanned(b, None)
    }

    /// [`Secrets::redact_framed`] for a caller that already has [`may_need_redaction`]'s
    /// answer for the JSON part (`b` from its first `{` or `[`), e.g. from its own pass over
    /// the frame's keys with [`key_may_matter`]; `None`: scan here.
    pub fn redact_framed_scanned(
        &self,
        b: &[u8],
        keys_may_matter: Option<bool>,
    ) -> Option<Vec<u8>> {
        let start = memchr::memchr2(b'{', b'[', b).unwrap_or(b.len());
        let first = if start < b.len()
            && keys_may_matter.unwrap_or_else(|| may_need_redaction(&b[start..]))
        {
            structural_unfiltered(&b[start..]).map(|(out, replaced)| {
                for s in &replaced {
                    self.learn(s);
                }
                let mut line = b[..start].to_vec();
                line.extend_from_slice(&out);
                line
            })
        } else {
            None
        };
        let base = first.as_deref().unwrap_or(b);
        let jwt = redact_jwt_shapes(base, self);
        let base = jwt.as_deref().unwrap_or(base);
        match self.known_pass(base) {
            Some(out) => Some(out),
            None => jwt.or(first),
        }
    }

    /// [`Secrets::redact_bytes`] for text.
    pub fn redact_str(&self, line: &str) -> Option<String> {
        self.redact_bytes(line.as_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Report text (any format): JSON after any prefix is redacted structurally (learning),
    /// then JWT-shaped tokens and every known value are replaced.
    pub fn redact_text<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        // Report text quotes frames after a prefix (`→ {…}`): the framed pass reads past it.
        match self.redact_framed(text.as_bytes()) {
            Some(b) => std::borrow::Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
            None => std::borrow::Cow::Borrowed(text),
        }
    }
}

/// Replaces JSON Web Tokens (`eyJ…` `.` `eyJ…` `.` signature, each part at least 8 base64url
/// characters) wherever they occur, learning each; `None` when there is none.
pub fn redact_jwt_shapes(b: &[u8], learn_into: &Secrets) -> Option<Vec<u8>> {
    let finder = memchr::memmem::Finder::new(b"eyJ");
    let b64 = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    let mut pos = 0;
    while let Some(rel) = finder.find(&b[pos..]) {
        let s = pos + rel;
        pos = s + 3;
        if s > 0 && b64(b[s - 1]) {
            continue; // inside a longer word
        }
        // header . payload . signature
        let mut i = s;
        let mut ok = true;
        for part in 0..3 {
            let p0 = i;
            if part == 1 && !b[i..].starts_with(b"eyJ") {
                ok = false;
                break;
            }
            while i < b.len() && b64(b[i]) {
                i += 1;
            }
            if i - p0 < 8 {
                ok = false;
                break;
            }
            if part < 2 {
                if b.get(i) != Some(&b'.') {
                    ok = false;
                    break;
                }
                i += 1;
            }
        }
        if !ok {
            continue;
        }
        let o = out.get_or_insert_with(Vec::new);
        o.extend_from_slice(&b[at..s]);
        o.extend_from_slice(REDACTED.as_bytes());
        learn_into.learn(&String::from_utf8_lossy(&b[s..i]));
        at = i;
        pos = i;
    }
    let mut o = out?;
    o.extend_from_slice(&b[at..]);
    Some(o)
}

/// The process-wide set reports pass through.
pub fn global() -> &'static Secrets {
    static G: std::sync::OnceLock<Secrets> = std::sync::OnceLock::new();
    G.get_or_init(Secrets::default)
}

/// Text a command prints (a report, a diff, a line of a recording) passed through [`global`]:
/// JSON after any prefix structurally, then JWT shapes and every known value.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    global().redact_text(text)
}

/// Learns the values a command line carries under secret-named options (`--api-key K`,
/// `--jwt-secret=S`, `--key K`, `--token T`) and in secret-named `NAME=VALUE` words
/// (`GH_TOKEN=…`). Every argument is also split at whitespace, so a leg such as
/// `cmd:hub --api-key K` given as one argument is read too.
pub fn learn_command_line<S: AsRef<std::ffi::OsStr>>(secrets: &Secrets, args: &[S]) {
    let words: Vec<String> = args
        .iter()
        .flat_map(|a| {
            a.as_ref()
                .to_string_lossy()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    for (i, w) in words.iter().enumerate() {
        if let Some(flag) = w.strip_prefix('-') {
            let flag = flag.trim_start_matches('-');
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            if name.is_empty() || !is_secret_param(name) {
                continue;
            }
            match inline {
                Some(v) => secrets.learn(v),
                None => {
                    if let Some(v) = words.get(i + 1).filter(|v| !v.starts_with('-')) {
                        secrets.learn(v);
                    }
                }
            }
        } else if let Some((n, v)) = w.split_once('=')
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && is_secret_env_name(n)
        {
            secrets.learn(v);
        }
    }
}

/// A command line as it may be shown or written (a manifest's `bridge.command`, a report's
/// target): its secret options are learned into [`global`], then it is [`printable`].
pub fn command_line_text(cmd: &str) -> String {
    learn_command_line(global(), &[cmd]);
    printable(cmd).into_owned()
}

/// Learns the values of this process's secret-named environment variables
/// ([`is_secret_env_name`]: `GITHUB_TOKEN`, `JWT_SECRET`, `BRIDLE_API_KEY`, …): a child it
/// starts inherits them and may print them.
pub fn learn_environment(secrets: &Secrets) {
    for (k, v) in std::env::vars_os() {
        if is_secret_env_name(&k.to_string_lossy()) {
            secrets.learn(&v.to_string_lossy());
        }
    }
}

/// A redacted key that differed from the key the recorder was told, in none of the ways below.
pub const REDACTED_OTHER: &str = "[redacted:other]";
/// The key with the case of its letters changed (a peer comparing without case takes it).
pub const REDACTED_CASE: &str = "[redacted:case]";
/// A non-empty part the key begins with (a peer comparing only a prefix takes it).
pub const REDACTED_PREFIX: &str = "[redacted:prefix]";
/// The key with more after it (a peer comparing only as far as the shorter takes it).
pub const REDACTED_EXTENDED: &str = "[redacted:extended]";
/// The value a replay sends for [`REDACTED_OTHER`] (or for a kind it cannot make from its key).
pub const WRONG_KEY: &str = "bridgewire-replay-wrong-key";

/// How a wrong key `v` differs from the `key` the recorder was told, as its redaction marker
/// ([`REDACTED_PREFIX`], [`REDACTED_EXTENDED`], [`REDACTED_CASE`], else [`REDACTED_OTHER`]):
/// a replay then sends a wrong key of the same kind made from its own key ([`unredact`]), so a
/// build that starts taking the key in any case, or any prefix of it, differs where the
/// recording's build refused. Side Bridge's `x-sidebridge-key` and Bridle's agent `apiKey`.
pub fn wrong_key_kind(v: &str, key: &str) -> &'static str {
    if !v.is_empty() && key.starts_with(v) {
        REDACTED_PREFIX
    } else if v.starts_with(key) {
        REDACTED_EXTENDED
    } else if v.to_lowercase() == key.to_lowercase() {
        REDACTED_CASE
    } else {
        REDACTED_OTHER
    }
}

/// A wrong key of the kind `marker` names, made from `key`: the key less its last character
/// ([`REDACTED_PREFIX`]), with `-wrong` after it ([`REDACTED_EXTENDED`]), with its letters'
/// case swapped ([`REDACTED_CASE`]); `None` for another marker or a key without such a variant
/// (one character, no letters). `check sidebridge` probes SB-A2 and `check bridle hub` its
/// wrong apiKeys with these same keys, so a replay of a check run sends what check sent.
pub fn wrong_key(marker: &str, key: &str) -> Option<String> {
    match marker {
        REDACTED_PREFIX => {
            let (cut, _) = key.char_indices().last().filter(|&(i, _)| i > 0)?;
            Some(key[..cut].to_string())
        }
        REDACTED_EXTENDED => Some(format!("{key}-wrong")),
        REDACTED_CASE => Some(crate::util::swap_case(key)).filter(|s| s != key),
        _ => None,
    }
}

/// A recorded value with its key markers put back: `[redacted]` → `key`, a wrong key's marker
/// → a wrong key of that kind made from `key` ([`wrong_key`]), or [`WRONG_KEY`] without one.
/// `None` when it needs the key and none is given.
pub fn unredact(value: &str, key: Option<&str>) -> Option<String> {
    let mut v = value.to_string();
    for marker in [
        REDACTED_PREFIX,
        REDACTED_EXTENDED,
        REDACTED_CASE,
        REDACTED_OTHER,
    ] {
        if v.contains(marker) {
            let made = key.and_then(|k| wrong_key(marker, k));
            v = v.replace(marker, made.as_deref().unwrap_or(WRONG_KEY));
        }
    }
    if v.contains(REDACTED) {
        return key.map(|k| v.replace(REDACTED, k));
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_by_key_and_container_and_cross_references() {
        let line = r#"{"params":{"apiKey":"sk-1234567890","options":{"envVars":{"PATH":"/bin","GH_TOKEN":"ghp_abcdefgh"},"note":"use sk-1234567890 here"},"auth":{"user":"u","pw":["x"]},"headers":{"name":"Authorization","value":"Bearer zzz"}}}"#;
        let out = redact_line(line).unwrap();
        assert_eq!(
            out,
            r#"{"params":{"apiKey":"[redacted]","options":{"envVars":{"PATH":"/bin","GH_TOKEN":"[redacted]"},"note":"use [redacted] here"},"auth":{"user":"[redacted]","pw":["[redacted]"]},"headers":{"name":"Authorization","value":"[redacted]"}}}"#
        );
    }

    #[test]
    fn leaves_clean_and_non_json_lines_alone() {
        assert_eq!(
            redact_line(
                r#"{"method":"thread/delta","params":{"text":"the token is in the text"}}"#
            ),
            None
        );
        assert_eq!(redact_line("apiKey: not json"), None);
        assert_eq!(redact_line(r#"{"token":"[redacted]"}"#), None);
    }

    #[test]
    fn list_forms_urls_and_header_arrays() {
        let line = r#"{"env":[{"name":"GH_TOKEN","value":"ghp_listform1"},{"name":"PATH","value":"/bin"}],"headers":[["Cookie","sid=abcdefgh1"],["Accept","*/*"]],"requestHeaders":{"X-Api-Key":["k-123456789"]},"baseUrl":"https://h/x?a=1&access_token=tok-12345678&key=k2"}"#;
        let out = redact_line(line).unwrap();
        for secret in [
            "ghp_listform1",
            "sid=abcdefgh1",
            "k-123456789",
            "tok-12345678",
            "k2",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(
            out.contains(r#""value":"/bin""#) && out.contains("a=1"),
            "{out}"
        );
        assert_eq!(
            redact_url("/s?sidebridge_key=abc&x=1").as_deref(),
            Some("/s?sidebridge_key=[redacted]&x=1")
        );
        assert_eq!(redact_url("/s?x=1"), None);
        for h in [
            "Cookie",
            "Set-Cookie",
            "X-Api-Key",
            "Proxy-Authorization",
            "Authorization",
            "X-SideBridge-Key",
        ] {
            assert!(is_secret_header(h), "{h}");
        }
        assert!(!is_secret_header("Content-Type"));
    }

    #[test]
    fn any_depth_and_any_bytes() {
        // issue 15: deeper than serde's 128 levels, and not UTF-8, the key was left as it was.
        let deep = format!(
            r#"{{"a":{}{{"apiKey":"sk-deep-secret-1"}}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let out = redact_line(&deep).unwrap();
        assert!(!out.contains("sk-deep-secret-1"));
        assert!(out.contains(r#""apiKey":"[redacted]""#));
        let deeper = format!(
            r#"{{"a":{}{{"x":{{"token":"t-35000-deep"}}}}{}}}"#,
            "[".repeat(35_000),
            "]".repeat(35_000)
        );
        assert!(!redact_line(&deeper).unwrap().contains("t-35000-deep"));
        // Deep but clean: kept byte for byte.
        let clean = format!(r#"{{"a":{}1{}}}"#, "[".repeat(35_000), "]".repeat(35_000));
        assert_eq!(redact_line(&clean), None);

        let mut raw = br#"{"params":{"note":"x"#.to_vec();
        raw.push(0xff);
        raw.extend_from_slice(br#"","apiKey":"sk-raw-bytes-1","envVars":{"GH_TOKEN":"ghp_raw"}}}"#);
        let s = Secrets::default();
        let out = s.redact_bytes(&raw).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            !text.contains("sk-raw-bytes-1") && !text.contains("ghp_raw"),
            "{text}"
        );
        assert!(out.contains(&0xff), "the other raw bytes are kept");
    }

    #[test]
    fn known_values_stay_redacted_in_later_lines() {
        let s = Secrets::default();
        assert!(s.redact_str(r#"{"note":"sk-later-12345"}"#).is_none());
        s.redact_str(r#"{"apiKey":"sk-later-12345"}"#).unwrap();
        let later = s
            .redact_str(r#"{"note":"echo sk-later-12345","q":"sk-later-12345"}"#)
            .unwrap();
        assert_eq!(later, r#"{"note":"echo [redacted]","q":"[redacted]"}"#);
        assert_eq!(
            s.redact_text("plain sk-later-12345 text"),
            "plain [redacted] text"
        );
        // JSON-escaped forms too.
        s.learn("pa\"ss/word-1");
        assert_eq!(
            s.redact_text(r#"{"m":"pa\"ss/word-1"}"#),
            r#"{"m":"[redacted]"}"#
        );
        // Short values are not learned (ordinary words).
        s.learn("short");
        assert_eq!(s.redact_text("short"), "short");
    }

    #[test]
    fn command_lines_teach_their_secret_options() {
        let s = Secrets::default();
        learn_command_line(
            &s,
            &[
                "parity",
                "--head",
                "cmd:hub --listen 127.0.0.1:0 --jwt-secret jwt-secret-value-1 --api-key=api-key-value-2",
                "--key",
                "sidebridge-key-value-3",
                "GH_TOKEN=env-token-value-4",
                "--keep-key",
                "--dir",
                "/tmp/not-a-secret-dir",
            ],
        );
        for v in [
            "jwt-secret-value-1",
            "api-key-value-2",
            "sidebridge-key-value-3",
            "env-token-value-4",
        ] {
            assert_eq!(s.redact_text(&format!("x {v} y")), "x [redacted] y", "{v}");
        }
        assert_eq!(
            s.redact_text("/tmp/not-a-secret-dir"),
            "/tmp/not-a-secret-dir"
        );
        assert_eq!(s.redact_text("127.0.0.1:0"), "127.0.0.1:0");
    }

    #[test]
    fn fails_closed_on_deep_nesting() {
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        let line = format!(r#"{{"secret":"abc","x":{deep}}}"#);
        let out = redact_line(&line).unwrap();
        assert!(
            out.contains(r#""x":"[redacted]""#) || out.contains("[redacted]"),
            "{out}"
        );
    }

    /// Many known values (past the automaton's rebuild points, and some learned since the last
    /// rebuild): each is still replaced wherever it occurs, longest first where they overlap,
    /// and a line holding none is left alone.
    #[test]
    fn many_known_values_are_each_replaced() {
        let s = Secrets::default();
        let values: Vec<String> = (0..203).map(|i| format!("secret-value-{i:04}-x")).collect();
        for v in &values {
            s.learn(v);
        }
        // A shorter value inside a longer one, learned after it.
        s.learn("secret-value-0007-x-and-more");
        for v in &values {
            assert_eq!(s.redact_text(&format!("a {v} b")), "a [redacted] b", "{v}");
        }
        assert_eq!(
            s.redact_text("pre secret-value-0007-x-and-more post"),
            "pre [redacted] post"
        );
        assert!(s.redact_known(b"nothing secret-value-0 here").is_none());
    }

    /// The recorder's key pre-test never says "no" where the full test says "yes": every
    /// pattern spelled with separators, case, prefixes and non-ASCII around it, plus keys
    /// that are not patterns.
    #[test]
    fn key_tail_pre_test_never_misses_a_key_that_matters() {
        let mut keys: Vec<String> = vec![
            "id".into(),
            "key".into(),
            "threadId".into(),
            "a".into(),
            "".into(),
            "é".into(),
            "KEY\u{212a}".into(),
            "sig\u{b}".into(),
            "TOKEN\u{a0}".into(),
        ];
        let decor: &[(&str, &str)] = &[
            ("", ""),
            ("x", ""),
            ("my_", "_"),
            ("X-", " "),
            ("é", ""),
            ("", "\u{a0}"),
            ("", "\u{b}"),
            ("", "\u{2028}"),
            ("", "\t"),
            ("", "."),
            ("a.", "-"),
        ];
        for p in key_patterns() {
            for (pre, post) in decor {
                for form in [
                    p.to_string(),
                    p.to_uppercase(),
                    p.replace('e', "-e"),
                    p.replace('k', "\u{212a}"),
                ] {
                    keys.push(format!("{pre}{form}{post}"));
                }
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let alphabet: Vec<char> = "abcdefghijklmnopqrstuvwxyzKEYTOKN-_. \t\u{b}é\u{212a}\u{a0}"
            .chars()
            .collect();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 9) as usize;
            let mut k: String = (0..len)
                .map(|i| alphabet[((x >> (i * 5 + 8)) % alphabet.len() as u64) as usize])
                .collect();
            if x.is_multiple_of(3) {
                let p = key_patterns().nth((x % 27) as usize).unwrap_or("url");
                k.push_str(&p[p.len().saturating_sub(4)..]);
            }
            keys.push(k);
        }
        let mut mattering = 0;
        for k in &keys {
            if key_may_matter(k) {
                mattering += 1;
                assert!(key_tail_may_matter(k.as_bytes()), "{k:?}");
            }
        }
        assert!(mattering > 1000, "{mattering}");
        assert!(!key_tail_may_matter(b"threadId"));
        assert!(!key_tail_may_matter(b"jsonrpc"));
    }
}

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

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

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

/// Cheap pre-filter: does the line have a key that could lead to a redaction? One structural
/// pass over the keys (string values are skipped), so clean lines are never parsed.
pub fn may_need_redaction(line: &[u8]) -> bool {
    crate::rpc_scan::any_key(line, &|k| is_secret_key(k) || is_container_key(k))
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
            Value::String(s) if s != REDACTED => {
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
                            Value::String(s) if s != REDACTED => {
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
                    } else {
                        self.visit(x, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    fn container(&mut self, x: &mut Value) {
        let Value::Object(m) = x else { return };
        let named_secret = matches!(
            (m.get("name"), m.get("value")),
            (Some(Value::String(n)), Some(Value::String(_))) if is_secret_env_name(n)
        );
        for (k, v) in m.iter_mut() {
            if let Value::String(s) = v
                && s != REDACTED
                && (is_secret_env_name(k) || (named_secret && k == "value"))
            {
                self.replaced.push(std::mem::replace(s, REDACTED.into()));
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

/// Redacts one line; `None` when nothing changed (write the original bytes).
pub fn redact_line(line: &str) -> Option<String> {
    if !may_need_redaction(line.as_bytes()) {
        return None;
    }
    let mut v: Value = serde_json::from_str(line).ok()?;
    let mut w = Walk {
        nodes: 0,
        replaced: Vec::new(),
    };
    w.visit(&mut v, 0);
    if w.replaced.is_empty() {
        return None;
    }
    let mut secrets: Vec<String> = w
        .replaced
        .into_iter()
        .filter(|s| s.encode_utf16().count() >= 8)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.encode_utf16().count()));
    secrets.dedup();
    if !secrets.is_empty() {
        cross_reference(&mut v, &secrets);
    }
    Some(crate::jsjson::to_string(&v))
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
    fn fails_closed_on_deep_nesting() {
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        let line = format!(r#"{{"secret":"abc","x":{deep}}}"#);
        let out = redact_line(&line).unwrap();
        assert!(
            out.contains(r#""x":"[redacted]""#) || out.contains("[redacted]"),
            "{out}"
        );
    }
}

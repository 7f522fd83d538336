//! Redaction of recordings before they are checked in (bb reference §3), on top of the
//! record-time redaction of [`crate::redact`]:
//!
//! * **structural pass** per lane `line`: the record-time key/container rules
//!   ([`crate::redact::redact_line`]); strings longer than 2000 UTF-16 units trimmed to their first
//!   1400 and last 300 units around `⟦redacted: <N> chars trimmed⟧` (cut at code-point
//!   boundaries, §3.5); env maps (`env`, `envVars`, `environment`) lose
//!   `BB_PROVIDER_BRIDGE_RECORD_DIR` and have secret-named values replaced by `REDACTED`; Claude
//!   catalogs reduced to names;
//! * **textual pass** on the re-serialized line (and on whole `*.json` files): the home path and
//!   its dashed form → `/home/user`, `-home-user`; the `ls` owner pair → `user user`; e-mail
//!   addresses → `user@example.com`; `"Authorization": "…"` pairs; token shapes (§3.3 table);
//!   and every value the caller names as a known secret (`--secret`);
//! * **survivor sweep**: every output line is scanned again for all of the above. Unlike bb, the
//!   sweep runs *before* anything is written: when a secret survives, nothing is written and
//!   the error names each `file:line` and the start of the hit.
//!
//! Idempotent: a redacted tree redacts to itself.

use regex::Regex;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What the redaction is told besides the tree.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The home directory to replace (default: `$HOME`); `/` or empty is refused.
    pub home: Option<PathBuf>,
    /// Values that must not survive anywhere (replaced by `REDACTED` textually).
    pub secrets: Vec<String>,
    /// More recording folders to learn secret values from (not written): `package` learns
    /// from the whole raw recording, so a value stated in a scope that is not packaged (the
    /// `_process` scope's `initialize`) is still redacted where a packaged cell repeats it.
    pub learn_from: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Files written (redacted or copied).
    pub files: usize,
    /// Lines that changed.
    pub changed_lines: usize,
    pub home: String,
}

/// A secret still present after redaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Survivor {
    pub file: PathBuf,
    pub line: usize,
    pub what: &'static str,
    /// The first 24 characters of the hit.
    pub head: String,
}

impl std::fmt::Display for Survivor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} `{}`",
            self.file.display(),
            self.line,
            self.what,
            self.head
        )
    }
}

const TRIM_OVER: usize = 2000;
const KEEP_HEAD: usize = 1400;
const KEEP_TAIL: usize = 300;
const TRIM_MARK: &str = "⟦redacted:";
const ENV_KEYS: &[&str] = &["env", "envVars", "environment"];
const ENV_SECRET_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "COOKIE",
    "AUTH",
];
const CATALOG_KEYS: &[&str] = &[
    "tools",
    "slash_commands",
    "skills",
    "plugins",
    "agents",
    "mcp_servers",
    "commands",
];

struct Patterns {
    email: Regex,
    auth_plain: Regex,
    auth_escaped: Regex,
    tokens: Vec<(&'static str, Regex)>,
    sk: Regex,
    bearer: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let r = |s: &str| Regex::new(s).expect("valid pattern");
        Patterns {
            email: r(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"),
            auth_plain: r(r#""([Aa])uthorization"\s*:\s*"(?:[^"\\]|\\.)*""#),
            auth_escaped: r(r#"\\"([Aa])uthorization\\"\s*:\s*\\"(?:[^"\\]|\\[^"])*\\""#),
            tokens: vec![
                ("bbde token", r(r"bbde_[A-Za-z0-9]{16,}")),
                ("GitHub token", r(r"gh[pousr]_[A-Za-z0-9._-]{20,}")),
                ("GitHub token", r(r"github_pat_[A-Za-z0-9_]{20,}")),
                ("Anthropic key", r(r"sk-ant-[A-Za-z0-9_-]{20,}")),
                ("Slack token", r(r"xox[abprs]-[A-Za-z0-9-]{20,}")),
                ("bbcm token", r(r"bbcm_[A-Za-z0-9_-]{16,}")),
                (
                    "JWT",
                    r(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
                ),
            ],
            sk: r(r"(^|[^A-Za-z0-9])(sk-[A-Za-z0-9_-]{20,})"),
            bearer: r(r"([Bb]earer\s+)([A-Za-z0-9._~+/-]{20,}=*)"),
        }
    })
}

/// `<prefix>REDACTED`: the match's leading alphanumeric run plus a following `_` or `-`.
fn token_replacement(m: &str) -> String {
    if m.contains("REDACTED") {
        return m.to_string();
    }
    let run: String = m
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let next = m[run.len()..].chars().next();
    let prefix = match next {
        Some(c @ ('_' | '-')) if !run.is_empty() => format!("{run}{c}"),
        _ => String::new(),
    };
    format!("{prefix}REDACTED")
}

/// The redactor for one home directory and set of known secrets.
pub struct Redactor {
    home: String,
    dashed: String,
    owner: Regex,
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(opts: &Options) -> Result<Redactor, String> {
        let home = match &opts.home {
            Some(h) => h.display().to_string(),
            None => std::env::var("HOME").unwrap_or_default(),
        };
        let home = home.trim_end_matches('/').to_string();
        if home.is_empty() {
            return Err(
                "the home directory is `/` or empty: refusing to redact with it (pass --home)"
                    .into(),
            );
        }
        let user = home.rsplit('/').next().unwrap_or_default().to_string();
        let owner = Regex::new(&format!(r"(\s){u} {u}(\s)", u = regex::escape(&user)))
            .map_err(|e| e.to_string())?;
        let mut secrets: Vec<String> = opts
            .secrets
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Ok(Redactor {
            dashed: home.replace('/', "-"),
            home,
            owner,
            secrets,
        })
    }

    /// Structural then textual pass over one lane `line`.
    pub fn line(&self, line: &str) -> String {
        let structural = match serde_json::from_str::<Value>(line) {
            Ok(mut v @ (Value::Object(_) | Value::Array(_))) => {
                // The record-time key rules first, then bb's structural rules.
                let mut replaced = Vec::new();
                by_key(&mut v, &mut replaced, 0);
                let catalogs = v["type"] == "control_response"
                    || (v["type"] == "system" && v["subtype"] == "init");
                structural(&mut v, catalogs);
                let mut text = crate::jsjson::to_string(&v);
                // A replaced value is replaced wherever else the line repeats it.
                replaced.retain(|s| s.encode_utf16().count() >= 8);
                replaced.sort_by_key(|s| std::cmp::Reverse(s.len()));
                replaced.dedup();
                for secret in &replaced {
                    let quoted = crate::jsjson::to_string(&Value::String(secret.clone()));
                    let inner = &quoted[1..quoted.len() - 1];
                    if text.contains(inner) {
                        text = text.replace(inner, crate::redact::REDACTED);
                    }
                }
                text
            }
            Ok(_) => line.to_string(),
            Err(_) => trim_long(line).unwrap_or_else(|| line.to_string()),
        };
        self.textual(&structural)
    }

    /// The textual pass (§3.3), plus the known secrets.
    pub fn textual(&self, text: &str) -> String {
        let p = patterns();
        let mut s = text.to_string();
        for secret in &self.secrets {
            if s.contains(secret.as_str()) {
                s = s.replace(secret.as_str(), "REDACTED");
            }
        }
        if self.home != "/home/user" {
            s = s.replace(&self.home, "/home/user");
            s = s.replace(&self.dashed, "-home-user");
            s = self.owner.replace_all(&s, "${1}user user${2}").into_owned();
        }
        s = p.email.replace_all(&s, "user@example.com").into_owned();
        s = p
            .auth_plain
            .replace_all(&s, r#""Authorization": "REDACTED""#)
            .into_owned();
        s = p
            .auth_escaped
            .replace_all(&s, r#"\"Authorization\": \"REDACTED\""#)
            .into_owned();
        for (_, re) in &p.tokens {
            s = re
                .replace_all(&s, |c: &regex::Captures| token_replacement(&c[0]))
                .into_owned();
        }
        s =
            p.sk.replace_all(&s, |c: &regex::Captures| {
                format!("{}{}", &c[1], token_replacement(&c[2]))
            })
            .into_owned();
        s = p
            .bearer
            .replace_all(&s, |c: &regex::Captures| {
                if c[2].contains("REDACTED") {
                    c[0].to_string()
                } else {
                    format!("{}REDACTED", &c[1])
                }
            })
            .into_owned();
        s
    }

    /// What of the sweep's shapes is still in `text` (hits that are already redacted ignored).
    pub fn survivors(&self, text: &str) -> Vec<(&'static str, String)> {
        let p = patterns();
        let head = |m: &str| m.chars().take(24).collect::<String>();
        let mut out = Vec::new();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                out.push(("known secret", head(secret)));
            }
        }
        if self.home != "/home/user" {
            for (what, needle) in [("home path", &self.home), ("home path", &self.dashed)] {
                if text.contains(needle.as_str()) {
                    out.push((what, head(needle)));
                }
            }
        }
        for m in p.email.find_iter(text) {
            if m.as_str() != "user@example.com" {
                out.push(("e-mail address", head(m.as_str())));
            }
        }
        for re in [&p.auth_plain, &p.auth_escaped] {
            for m in re.find_iter(text) {
                if !m.as_str().contains("REDACTED") {
                    out.push(("Authorization value", head(m.as_str())));
                }
            }
        }
        for (what, re) in &p.tokens {
            for m in re.find_iter(text) {
                if !m.as_str().contains("REDACTED") {
                    out.push((what, head(m.as_str())));
                }
            }
        }
        for c in p.sk.captures_iter(text) {
            if !c[2].contains("REDACTED") {
                out.push(("sk- key", head(&c[2])));
            }
        }
        for c in p.bearer.captures_iter(text) {
            if !c[2].contains("REDACTED") {
                out.push(("Bearer value", head(&c[2])));
            }
        }
        out
    }
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// bb's long-string trim, cutting at code-point boundaries.
fn trim_long(s: &str) -> Option<String> {
    let n = utf16_len(s);
    if n <= TRIM_OVER || s.contains(TRIM_MARK) {
        return None;
    }
    let mut head = String::new();
    let mut units = 0;
    for c in s.chars() {
        if units + c.len_utf16() > KEEP_HEAD {
            break;
        }
        units += c.len_utf16();
        head.push(c);
    }
    let mut tail: Vec<char> = Vec::new();
    let mut units = 0;
    for c in s.chars().rev() {
        if units + c.len_utf16() > KEEP_TAIL {
            break;
        }
        units += c.len_utf16();
        tail.push(c);
    }
    let tail: String = tail.into_iter().rev().collect();
    Some(format!(
        "{head}\n{TRIM_MARK} {} chars trimmed⟧\n{tail}",
        n - (KEEP_HEAD + KEEP_TAIL)
    ))
}

/// Whether a value is already a redaction marker (record-time `[redacted]`,
/// `[redacted:<why>]`, or bb's `REDACTED`), so redacting again leaves it.
fn is_marker(s: &str) -> bool {
    s == "REDACTED" || s.starts_with("[redacted")
}

const HEADER_CONTAINERS: &[&str] = &[
    "headers",
    "requestheaders",
    "responseheaders",
    "httpheaders",
    "extraheaders",
];

/// Every string inside `v` that is not a marker becomes `[redacted]` (collected).
fn redact_all(v: &mut Value, replaced: &mut Vec<String>) {
    match v {
        Value::String(s) if !s.is_empty() && !is_marker(s) => {
            replaced.push(std::mem::replace(s, crate::redact::REDACTED.into()));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_all(x, replaced)),
        Value::Object(m) => m.iter_mut().for_each(|(_, x)| redact_all(x, replaced)),
        _ => {}
    }
}

/// The record-time rules of [`crate::redact`] (secret keys, header containers with secret
/// names), as markers that a second pass recognizes and leaves, so redaction is idempotent.
/// Fails closed past 64 levels.
fn by_key(v: &mut Value, replaced: &mut Vec<String>, depth: usize) {
    if depth > 64 {
        redact_all(v, replaced);
        return;
    }
    match v {
        Value::Array(a) => a.iter_mut().for_each(|x| by_key(x, replaced, depth + 1)),
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                let norm: String = k
                    .chars()
                    .filter(|c| !matches!(c, '-' | '_' | '.') && !c.is_whitespace())
                    .flat_map(char::to_lowercase)
                    .collect();
                if crate::redact::is_secret_key(k) {
                    redact_all(x, replaced);
                } else if HEADER_CONTAINERS.contains(&norm.as_str()) {
                    match x {
                        Value::Object(h) => {
                            for (name, val) in h.iter_mut() {
                                if crate::redact::is_secret_env_name(name)
                                    || crate::redact::is_secret_key(name)
                                {
                                    redact_all(val, replaced);
                                }
                            }
                        }
                        Value::Array(items) => {
                            for item in items.iter_mut() {
                                let secret =
                                    item.get("name").and_then(Value::as_str).is_some_and(|n| {
                                        crate::redact::is_secret_env_name(n)
                                            || crate::redact::is_secret_key(n)
                                    });
                                if secret && let Some(val) = item.get_mut("value") {
                                    redact_all(val, replaced);
                                }
                            }
                        }
                        _ => {}
                    }
                } else {
                    by_key(x, replaced, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn structural(v: &mut Value, catalogs: bool) {
    match v {
        Value::String(s) => {
            if let Some(t) = trim_long(s) {
                *s = t;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| structural(x, catalogs)),
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if ENV_KEYS.contains(&k.as_str())
                    && let Value::Object(env) = x
                {
                    env.shift_remove(crate::bb::recorder::BB_RECORD_ENV);
                    for (name, val) in env.iter_mut() {
                        let upper = name.to_uppercase();
                        if val.as_str().is_some_and(|s| !s.is_empty() && !is_marker(s))
                            && ENV_SECRET_PARTS.iter().any(|p| upper.contains(p))
                        {
                            *val = Value::String("REDACTED".into());
                        }
                    }
                    continue;
                }
                if catalogs
                    && CATALOG_KEYS.contains(&k.as_str())
                    && let Value::Array(items) = x
                {
                    for item in items.iter_mut() {
                        if let Some(name) = item.get("name").and_then(Value::as_str) {
                            *item = Value::String(name.to_string());
                        }
                    }
                }
                structural(x, catalogs);
            }
        }
        _ => {}
    }
}

/// Every lane line of a lane file's text (`line`, or `lineBase64` decoded): for the learning
/// pass of [`redact_tree`].
fn learn_lane_lines(secrets: &crate::redact::Secrets, text: &str) {
    for raw in text.split('\n') {
        if let Ok(Value::Object(entry)) = serde_json::from_str::<Value>(raw.trim_end_matches('\r'))
        {
            if let Some(line) = entry.get("line").and_then(Value::as_str) {
                let _ = secrets.redact_framed(line.as_bytes());
            } else if let Some(b) = entry.get("lineBase64").and_then(Value::as_str)
                && let Some(bytes) = crate::util::base64_decode(b)
            {
                let _ = secrets.redact_framed(&bytes);
            }
        }
    }
}

/// Redacts one file's text by its kind: lanes per entry, `*.json` textually, others unchanged.
/// Every lane line first goes through `secrets` (the record-time rules at any depth and for any
/// bytes, then every value learned anywhere in the tree), so a raw recording (`--no-redact`,
/// `--keep-key`, another recorder) comes out as bridgewire's recorders would have written it.
fn redact_file_text(
    r: &Redactor,
    secrets: &crate::redact::Secrets,
    name: &str,
    text: &str,
) -> (String, usize) {
    if name.ends_with(".ndjson") {
        let mut out = String::with_capacity(text.len());
        let mut changed = 0;
        for raw in text.split('\n') {
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if raw.trim().is_empty() {
                continue;
            }
            let new = match serde_json::from_str::<Value>(raw) {
                Ok(Value::Object(mut entry))
                    if entry.get("lineBase64").is_some_and(Value::is_string) =>
                {
                    // Not UTF-8: the raw bytes are redacted, then encoded again.
                    let b64 = entry["lineBase64"].as_str().unwrap_or_default();
                    match crate::util::base64_decode(b64)
                        .and_then(|bytes| secrets.redact_framed(&bytes))
                    {
                        Some(bytes) => {
                            entry.insert(
                                "line".into(),
                                Value::String(String::from_utf8_lossy(&bytes).into_owned()),
                            );
                            entry.insert(
                                "lineBase64".into(),
                                Value::String(crate::util::base64_encode(&bytes)),
                            );
                            crate::jsjson::to_string(&Value::Object(entry))
                        }
                        None => raw.to_string(),
                    }
                }
                Ok(Value::Object(mut entry)) if entry.get("line").is_some_and(Value::is_string) => {
                    let line = entry["line"].as_str().unwrap_or_default().to_string();
                    let line = match secrets.redact_framed(line.as_bytes()) {
                        Some(b) => String::from_utf8_lossy(&b).into_owned(),
                        None => line,
                    };
                    entry.insert("line".into(), Value::String(r.line(&line)));
                    crate::jsjson::to_string(&Value::Object(entry))
                }
                _ => r.line(raw),
            };
            if new != raw {
                changed += 1;
            }
            out.push_str(&new);
            out.push('\n');
        }
        (out, changed)
    } else if name.ends_with(".json") {
        let known = secrets.redact_text(text);
        let new = r.textual(&known);
        let changed = usize::from(new != text);
        (new, changed)
    } else {
        (text.to_string(), 0)
    }
}

/// Redacts every file below `input` into `output` (which may be `input` itself: redaction in
/// place). Cell directories written are replaced whole. Nothing is written when a secret
/// survives: the error lists where (up to 20).
pub fn redact_tree(input: &Path, output: &Path, opts: &Options) -> Result<Summary, String> {
    let r = Redactor::new(opts)?;
    if !input.is_dir() {
        return Err(format!("{}: no such directory", input.display()));
    }
    // First every lane line is read once to learn the secrets it holds (a value stated under a
    // secret key in one file is redacted wherever it recurs, in any file, before or after).
    let secrets = crate::redact::Secrets::default();
    for entry in std::iter::once(input)
        .chain(opts.learn_from.iter().map(PathBuf::as_path))
        .flat_map(|d| walkdir::WalkDir::new(d).follow_links(false).into_iter())
        .flatten()
    {
        if entry.file_type().is_file() && entry.file_name().to_string_lossy().ends_with(".ndjson") {
            let bytes = std::fs::read(entry.path())
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
            learn_lane_lines(&secrets, &String::from_utf8_lossy(&bytes));
        }
    }
    // Redact into memory file by file, sweeping each result, before anything is written.
    let mut planned: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut survivors: Vec<Survivor> = Vec::new();
    let mut changed_lines = 0;
    for entry in walkdir::WalkDir::new(input)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
    {
        let entry = entry.map_err(|e| e.to_string())?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(input)
            .map_err(|e| e.to_string())?
            .to_path_buf();
        let name = entry.file_name().to_string_lossy().into_owned();
        let bytes =
            std::fs::read(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        let redactable = name.ends_with(".ndjson") || name.ends_with(".json");
        let out_bytes = if redactable {
            let text = String::from_utf8_lossy(&bytes);
            let (new, changed) = redact_file_text(&r, &secrets, &name, &text);
            changed_lines += changed;
            for (i, l) in new.lines().enumerate() {
                for (what, head) in r.survivors(l) {
                    survivors.push(Survivor {
                        file: output.join(&rel),
                        line: i + 1,
                        what,
                        head,
                    });
                }
            }
            new.into_bytes()
        } else {
            bytes
        };
        planned.push((rel, out_bytes));
    }
    if !survivors.is_empty() {
        let mut msg = format!(
            "SECRETS STILL PRESENT after redaction — refusing to write {} ({} hit(s)):",
            output.display(),
            survivors.len()
        );
        for s in survivors.iter().take(20) {
            msg.push_str(&format!("\n  {s}"));
        }
        return Err(msg);
    }
    // Cell directories are replaced whole, so no stale lane of an earlier recording lingers.
    if input != output {
        let mut dirs: Vec<PathBuf> = planned
            .iter()
            .filter(|(rel, _)| rel.to_string_lossy().ends_with(".ndjson"))
            .filter_map(|(rel, _)| rel.parent().map(Path::to_path_buf))
            .filter(|d| !d.as_os_str().is_empty())
            .collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            let _ = std::fs::remove_dir_all(output.join(d));
        }
    }
    for (rel, bytes) in &planned {
        let to = output.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        // Written beside and renamed, so an interrupted run leaves whole files.
        let tmp = to.with_extension("redact-tmp");
        std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &to).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(Summary {
        files: planned.len(),
        changed_lines,
        home: r.home.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red() -> Redactor {
        Redactor::new(&Options {
            home: Some("/home/alice".into()),
            secrets: vec!["hunter2-very-secret".into()],
            learn_from: Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn textual_pass_follows_the_reference_table() {
        let r = red();
        let line = r#"{"cwd":"/home/alice/w","p":"-home-alice-w","ls":"x alice alice 4096","mail":"a.b@corp.example.org","headers":{"Authorization":"Basic abc"},"t":"ghp_abcdefghijklmnopqrstuvwxyz","k":"key sk-abcdefghijklmnopqrstuvwx","b":"Bearer abcdefghijklmnopqrstuvwxyz012","x":"hunter2-very-secret"}"#;
        let out = r.line(line);
        for gone in [
            "alice",
            "corp.example",
            "Basic abc",
            "ghp_abcdef",
            "sk-abcdef",
            "Bearer abcdef",
            "hunter2",
        ] {
            assert!(!out.contains(gone), "{gone} survived: {out}");
        }
        assert!(out.contains("/home/user/w"), "{out}");
        assert!(out.contains("ghp_REDACTED"), "{out}");
        assert!(out.contains(r#""Authorization": "REDACTED""#), "{out}");
        assert!(r.survivors(&out).is_empty(), "{:?}", r.survivors(&out));
        // Idempotent.
        assert_eq!(r.line(&out), out);
    }

    #[test]
    fn long_strings_are_trimmed_once() {
        let long = "é".repeat(2500);
        let line = serde_json::json!({ "text": long }).to_string();
        let once = red().line(&line);
        assert!(once.contains("⟦redacted: 800 chars trimmed⟧"), "{once}");
        assert_eq!(red().line(&once), once);
    }

    #[test]
    fn env_maps_lose_the_record_dir_and_secret_values() {
        let line = r#"{"env":{"BB_PROVIDER_BRIDGE_RECORD_DIR":"/x","MY_API_KEY":"v","AUTH_MODE":"x","PATH":"/bin"}}"#;
        let out = red().line(line);
        // MY_API_KEY is a secret key by the record-time rules, AUTH_MODE only by bb's env rule.
        assert_eq!(
            out,
            r#"{"env":{"MY_API_KEY":"[redacted]","AUTH_MODE":"REDACTED","PATH":"/bin"}}"#
        );
        assert_eq!(red().line(&out), out);
    }
}

//! `bridgewire lanes`: a viewer for one cell. One line per message in `(run, seq)` order, with
//! its time offset from the cell's first message, its direction, and what it is (a JSON-RPC
//! method or response, a Socket.IO event, an HTTP exchange), decoded from the lane's `line`.
//! Filters by direction, method/event, thread or chat; `--json` for scripts; `--raw` for the
//! lane entries exactly as stored; `--follow` keeps printing a recording in progress.

use super::exit;
use crate::lane::{Entry, SeqKey};
use serde_json::{Value, json};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(clap::Args, Debug)]
pub struct LanesArgs {
    /// A cell directory.
    pub cell: PathBuf,
    /// The recorded view (ignore `.current` re-recordings).
    #[arg(long)]
    pub recorded: bool,
    /// Only messages whose direction contains this text (`runtime→bridge`, `bridge`; `->` is
    /// read as `→`).
    #[arg(long = "dir", value_name = "TEXT")]
    pub direction: Option<String>,
    /// Only messages whose method or event name contains this text (`thread/`, `stream`).
    #[arg(long, value_name = "TEXT")]
    pub method: Option<String>,
    /// Only messages about this thread (`params.threadId`).
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Only messages about this chat (`chatId`, or a Bridle `clientId`).
    #[arg(long, value_name = "ID")]
    pub chat: Option<String>,
    /// One JSON object per message (offset, direction, name, thread, chat, decoded message).
    #[arg(long, conflicts_with = "raw")]
    pub json: bool,
    /// The lane entries as stored (NDJSON), filters applied (redacted unless --no-redact).
    #[arg(long)]
    pub raw: bool,
    /// Show the lines exactly as stored. By default every line shown is passed through the
    /// record-time redaction first (secret keys, env/header containers, URLs, at any depth and
    /// for any bytes, and every value learned from the whole cell), so a raw recording
    /// (`--no-redact`, another recorder) never reaches a terminal or a log unredacted.
    #[arg(long)]
    pub no_redact: bool,
    /// Colour the view: `auto` (only when stdout is a terminal), `always`, `never`.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Keep watching a recording in progress and print new messages as they are written
    /// (polls every 250 ms; Ctrl-C ends it).
    #[arg(long)]
    pub follow: bool,
}

/// What a lane line is, decoded.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    /// `thread/start`, `response #3`, `error #3 -32601`, `stream`, `POST /`, `HTTP 200`.
    pub name: String,
    pub thread: Option<String>,
    pub chat: Option<String>,
    /// The message as JSON when it is JSON (Socket.IO: the event array; HTTP: with `body`
    /// parsed when it is JSON).
    pub message: Value,
    /// A short rendering for the one-line view.
    pub summary: String,
    pub is_error: bool,
}

fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Decodes one lane line (protocol-agnostic: whichever shape it has).
pub fn decode(line: &str) -> Decoded {
    let mut d = Decoded::default();
    if let Ok(v) = serde_json::from_str::<Value>(line) {
        if v.get("jsonrpc").is_some() || v.get("method").is_some() && v.get("exchange").is_none() {
            let id = v.get("id").map(|i| i.to_string());
            d.name = match (v.get("method").and_then(Value::as_str), &id) {
                (Some(m), _) => m.to_string(),
                (None, Some(id)) if v.get("error").is_some() => {
                    d.is_error = true;
                    let code = v["error"]["code"].to_string();
                    format!("error #{id} {code}")
                }
                (None, Some(id)) => format!("response #{id}"),
                (None, None) => "message".into(),
            };
            d.thread = str_at(&v, &["params", "threadId"]);
            d.chat = str_at(&v, &["params", "chatId"]);
            d.summary = if v["method"] == "thread/delta" {
                let kinds: Vec<String> = v["params"]["deltas"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x["kind"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                kinds.join(", ")
            } else if let Some(p) = v.get("params").or(v.get("result")).or(v.get("error")) {
                p.to_string()
            } else {
                String::new()
            };
            d.message = v;
            return d;
        }
        if v.get("exchange").is_some() {
            // An HTTP exchange (Side Bridge): a request or a reply, body JSON when it is.
            let body = v
                .get("body")
                .and_then(Value::as_str)
                .and_then(|b| serde_json::from_str::<Value>(b).ok());
            d.name = match (str_at(&v, &["method"]), str_at(&v, &["status"])) {
                (Some(m), _) => format!("{m} {}", str_at(&v, &["path"]).unwrap_or_default()),
                (None, Some(s)) => {
                    d.is_error = !s.starts_with('2');
                    format!("HTTP {s}")
                }
                (None, None) => "http".into(),
            };
            d.chat = body.as_ref().and_then(|b| str_at(b, &["chatId"]));
            d.summary = match &body {
                Some(b) => b.to_string(),
                None => v.get("body").map(|b| b.to_string()).unwrap_or_default(),
            };
            let mut m = v.clone();
            if let Some(b) = body {
                m["body"] = b;
            }
            d.message = m;
            return d;
        }
        d.name = "json".into();
        d.chat = str_at(&v, &["chatId"]);
        d.summary = v.to_string();
        d.message = v;
        return d;
    }
    // Socket.IO / Engine.IO packet: `<type digits>[/namespace,][id][payload]`.
    if let Some(start) = line.find(['[', '{'])
        && line[..start]
            .trim_end_matches(',')
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_-.,".contains(c))
        && let Ok(v) = serde_json::from_str::<Value>(&line[start..])
    {
        let payload = v.get(1).cloned().unwrap_or(Value::Null);
        d.name = v
            .get(0)
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("packet {}", &line[..start]));
        d.chat = str_at(&payload, &["chatId"]).or_else(|| str_at(&payload, &["clientId"]));
        d.thread = str_at(&payload, &["threadId"]);
        d.summary = payload.to_string();
        d.message = v;
        return d;
    }
    d.name = "text".into();
    d.summary = line.to_string();
    d.message = Value::String(line.to_string());
    d
}

struct Filter<'a> {
    a: &'a LanesArgs,
}

impl Filter<'_> {
    fn keeps(&self, e: &Entry, d: &Decoded) -> bool {
        let a = self.a;
        a.direction
            .as_ref()
            .is_none_or(|t| e.dir.contains(&t.replace("->", "→")))
            && a.method
                .as_ref()
                .is_none_or(|m| d.name.contains(m.as_str()))
            && a.thread
                .as_ref()
                .is_none_or(|t| d.thread.as_ref() == Some(t))
            && a.chat.as_ref().is_none_or(|c| d.chat.as_ref() == Some(c))
    }
}

const SUMMARY_CHARS: usize = 160;

fn paint(on: bool, code: &str, s: &str) -> String {
    if on {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// A stable colour per direction (the same direction reads the same across runs).
fn dir_color(dir: &str) -> &'static str {
    const COLORS: [&str; 5] = ["36", "35", "33", "32", "34"];
    let h = dir
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    COLORS[h as usize % COLORS.len()]
}

fn view_line(e: &Entry, d: &Decoded, t0: f64, color: bool) -> String {
    let offset = (e.ts - t0) / 1000.0;
    let mut summary: String = d.summary.chars().take(SUMMARY_CHARS).collect();
    if d.summary.chars().count() > SUMMARY_CHARS {
        summary.push('…');
    }
    let scope = match (&d.thread, &d.chat) {
        (Some(t), _) => format!(" [{t}]"),
        (None, Some(c)) => format!(" [{c}]"),
        _ => String::new(),
    };
    let name = paint(color, if d.is_error { "1;31" } else { "1" }, &d.name);
    format!(
        "{:>+9.3}s {} {name}{}  {}",
        offset,
        paint(color, dir_color(&e.dir), &format!("{:<18}", e.dir)),
        paint(color, "2", &scope),
        summary
    )
}

/// Sibling cells `lanes` learns secret values from before it shows a cell.
const MAX_LEARN_CELLS: usize = 256;

pub fn run(a: &LanesArgs) -> u8 {
    let root = a.cell.parent().unwrap_or(&a.cell);
    let cell = match crate::cell::discover(&a.cell) {
        Ok(cells) if cells.len() == 1 => cells.into_iter().next().expect("one"),
        Ok(_) => match crate::cell::Cell::at(root, &a.cell) {
            Some(c) => c,
            None => {
                eprintln!("{}: not a single cell", a.cell.display());
                return exit::INVALID_INPUT;
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let color = match a.color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let filter = Filter { a };
    let mut t0: Option<f64> = None;
    let mut last: Option<SeqKey> = None;
    let mut reported = 0usize;
    let secrets = crate::redact::global();
    let redact = |mut e: crate::lane::Entry| {
        if a.no_redact {
            return e;
        }
        let raw = e.raw_bytes();
        if let Some(b) = secrets.redact_framed(&raw) {
            match String::from_utf8(b) {
                Ok(text) => {
                    e.line = text;
                    e.extra.remove("lineBase64");
                }
                Err(b) => {
                    e.line = String::from_utf8_lossy(b.as_bytes()).into_owned();
                    e.extra.insert(
                        "lineBase64".into(),
                        crate::util::base64_encode(b.as_bytes()).into(),
                    );
                }
            }
        }
        e
    };
    if !a.no_redact {
        // Learn first from the whole cell and its sibling cells (one recording's scopes: a key
        // sent in `_process`'s `initialize` and echoed in a thread), so a secret stated after
        // (or beside) its echo is redacted in the echo too.
        let siblings = cell
            .path
            .parent()
            .and_then(|p| crate::cell::discover(p).ok())
            .unwrap_or_default();
        for c in siblings
            .iter()
            .filter(|c| c.path != cell.path)
            .take(MAX_LEARN_CELLS)
            .chain([&cell])
        {
            let mut m = c.merged();
            for e in m.by_ref() {
                let _ = secrets.redact_framed(&e.raw_bytes());
            }
        }
    }
    loop {
        let mut merged = if a.recorded {
            cell.recorded()
        } else {
            cell.merged()
        };
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        for e in merged.by_ref() {
            let e = redact(e);
            let key = e.key();
            if last.is_some_and(|l| key <= l) {
                continue;
            }
            last = Some(key);
            let t0 = *t0.get_or_insert(e.ts);
            let d = decode(&e.line);
            if !filter.keeps(&e, &d) {
                continue;
            }
            let text = if a.raw {
                e.to_line()
            } else if a.json {
                json!({
                    "offset_ms": e.ts - t0, "ts": e.ts, "run": e.run, "seq": e.seq,
                    "dir": e.dir, "name": d.name, "thread": d.thread, "chat": d.chat,
                    "message": d.message,
                })
                .to_string()
            } else {
                view_line(&e, &d, t0, color)
            };
            if writeln!(out, "{text}").is_err() {
                return exit::OK; // a closed pipe (| head) is a quiet success
            }
        }
        if out.flush().is_err() {
            return exit::OK;
        }
        drop(out);
        let report = merged.into_report();
        // A recording in progress may end mid-line: report each problem once.
        let problems: Vec<String> = report
            .warnings
            .iter()
            .map(|w| format!("warning: {w}"))
            .chain(report.errors.iter().map(|e| format!("error: {e}")))
            .collect();
        if !a.follow {
            for p in &problems {
                eprintln!("{p}");
            }
            return if report.errors.is_empty() {
                exit::OK
            } else {
                exit::INVALID_INPUT
            };
        }
        for p in problems.iter().skip(reported) {
            eprintln!("{p}");
        }
        reported = reported.max(problems.len());
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_wire_shape() {
        let d = decode(
            r#"{"jsonrpc":"2.0","id":3,"method":"thread/start","params":{"threadId":"thr_1"}}"#,
        );
        assert_eq!(
            (d.name.as_str(), d.thread.as_deref()),
            ("thread/start", Some("thr_1"))
        );
        let d = decode(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"x"}}"#);
        assert_eq!(d.name, "error #3 -32601");
        assert!(d.is_error);
        let d = decode(
            r#"{"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":"t","deltas":[{"kind":"turn.open"},{"kind":"item.textDelta"}]}}"#,
        );
        assert_eq!(d.summary, "turn.open, item.textDelta");
        let d = decode(r#"42/ws/agent,["stream",{"clientId":"alice","text":"hi"}]"#);
        assert_eq!(
            (d.name.as_str(), d.chat.as_deref()),
            ("stream", Some("alice"))
        );
        let d = decode(
            r#"{"exchange":1,"method":"POST","path":"/","body":"{\"chatId\":\"C1\",\"sidebridge\":\"1.0\"}"}"#,
        );
        assert_eq!((d.name.as_str(), d.chat.as_deref()), ("POST /", Some("C1")));
        assert_eq!(d.message["body"]["sidebridge"], "1.0");
        let d = decode(r#"{"exchange":1,"status":503,"body":"busy"}"#);
        assert_eq!(d.name, "HTTP 503");
        assert!(d.is_error);
        assert_eq!(decode("not json at all").name, "text");
        assert_eq!(decode("2probe").name, "text");
    }
}

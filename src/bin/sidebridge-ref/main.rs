//! sidebridge-ref: the reference Side Bridge v1.0 server bundled with bridgewire.
//!
//! It passes every rule of `rules/sidebridge.json`. `--break <mode>` (or `SIDEBRIDGE_REF_BREAK`)
//! plants one flaw; each mode is named after what it does and fails its rule (see
//! `docs/sidebridge.md`). The first stdout line is the bound URL (`http://127.0.0.1:PORT/`), so a
//! harness can start it with `--listen 127.0.0.1:0`.
//!
//! The assistant understands a small scenario vocabulary (case-insensitive):
//! `remember <word>`, `recall`, `what did you say?`, `disable history`, `enable history`,
//! `search <term>`, `bye`; anything else is echoed as `Echo: <text>`.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BREAKS: &[(&str, &str)] = &[
    (
        "bad-session-start",
        "SB-H1: session-start replies are a JSON array",
    ),
    (
        "slow-start",
        "SB-H2: the first request waits SIDEBRIDGE_REF_DELAY_MS (default 3000) ms",
    ),
    (
        "slash-redirect",
        "SB-H3: a path with a trailing slash answers 301 to the path without it",
    ),
    ("no-allow-header", "SB-H4: 405 replies lack `Allow: POST`"),
    (
        "accept-missing-key",
        "SB-A1: a request without the key header is let through",
    ),
    ("accept-wrong-key", "SB-A2: any key value is let through"),
    (
        "parse-before-auth",
        "SB-A3: the body is parsed before the key is checked",
    ),
    (
        "reject-unexpected-key",
        "SB-A4: without a configured key, a request carrying one is rejected",
    ),
    (
        "double-answer",
        "SB-R1: the last user message of history is answered as well",
    ),
    ("crash-on-empty", "SB-R2: an empty send answers 500"),
    (
        "lowercase-ids",
        "SB-R3: own ids kept lower-case and matched case-sensitively",
    ),
    (
        "reject-unknown-from",
        "SB-R4: history with system/unknown messages answers 500",
    ),
    (
        "raw-body-scan",
        "SB-R5: message text is cut out of the raw bytes, escapes kept",
    ),
    (
        "stateless",
        "SB-R6: context only from history, nothing kept server-side",
    ),
    ("strict-keys", "SB-R7: unknown request keys are refused"),
    ("exact-version", "SB-R8: only \"1.0\" is accepted"),
    (
        "html-errors",
        "SB-R10: malformed requests get an HTML 400 page",
    ),
    (
        "leak-errors",
        "SB-R10: parser error text is shown to the user",
    ),
    (
        "require-known-chat",
        "SB-R11: an unknown chat with history is refused",
    ),
    (
        "crash-on-ended",
        "SB-R12: reopening an ended chat answers 500",
    ),
    (
        "latin1",
        "SB-D1: bodies with non-ASCII text are sent as Latin-1",
    ),
    ("bad-ids", "SB-D2: search results carry non-UUID ids"),
    ("missing-from", "SB-D2: search results lack `from`"),
    ("from-bot", "SB-D3: replies say from: \"bot\""),
    (
        "reuse-user-id",
        "SB-D4: the reply reuses the user's message id",
    ),
    ("relative-sources", "SB-D5: source URLs are relative"),
    ("string-options", "SB-D6: option flags are sent as strings"),
    (
        "empty-content",
        "SB-D7: an empty typing placeholder precedes each answer",
    ),
    ("no-sources", "SB-D8: reply messages omit `sources`"),
    (
        "html-unsupported-version",
        "SB-D9: an unsupported version gets an HTML 400 page",
    ),
    (
        "silent-end",
        "SB-S1: `bye` ends the session without a message",
    ),
    (
        "always-send-options",
        "SB-S2: every reply resets both option flags",
    ),
    (
        "forget-options-on-reopen",
        "SB-S3: a reopened chat is not told to disable history again",
    ),
    ("global-memory", "SB-S4: one memory shared by all chats"),
    (
        "html-everything",
        "transport: every POST answers an HTML page",
    ),
    ("truncated-body", "transport: replies stop mid-body"),
    ("endless-body", "transport: reply bodies never end"),
    ("huge-body", "transport: replies are 50 MB"),
];

#[derive(Default)]
struct Chat {
    memory: Option<String>,
    /// Ids this bridge sent in the chat (upper-case; as sent under `lowercase-ids`).
    sent: HashMap<String, String>,
    last_sent: Option<String>,
    ended: bool,
    history_disabled: bool,
}

struct App {
    key: Option<String>,
    brk: String,
    delay: Duration,
    first: AtomicBool,
    chats: Mutex<HashMap<String, Chat>>,
    global_memory: Mutex<Option<String>>,
}

impl App {
    fn is(&self, mode: &str) -> bool {
        self.brk == mode
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: sidebridge-ref [--listen ADDR] [--key KEY] [--break MODE]\n\
         env: SIDEBRIDGE_REF_LISTEN, SIDEBRIDGE_REF_KEY, SIDEBRIDGE_REF_BREAK\nbreak modes:"
    );
    for (m, d) in BREAKS {
        eprintln!("  {m:<26} {d}");
    }
    std::process::exit(2)
}

fn main() {
    let mut listen =
        std::env::var("SIDEBRIDGE_REF_LISTEN").unwrap_or_else(|_| "127.0.0.1:0".into());
    let mut key = std::env::var("SIDEBRIDGE_REF_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    let mut brk = std::env::var("SIDEBRIDGE_REF_BREAK").unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut val = || {
            inline
                .clone()
                .or_else(|| args.next())
                .unwrap_or_else(|| usage())
        };
        match name.as_str() {
            "--listen" => listen = val(),
            "--key" => key = Some(val()).filter(|k| !k.is_empty()),
            "--break" => brk = val(),
            "--list-breaks" => {
                for (m, d) in BREAKS {
                    println!("{m}\t{d}");
                }
                return;
            }
            _ => usage(),
        }
    }
    if !brk.is_empty() && !BREAKS.iter().any(|(m, _)| *m == brk) {
        eprintln!("sidebridge-ref: unknown break mode {brk:?}");
        usage();
    }
    let delay = std::env::var("SIDEBRIDGE_REF_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let app = Arc::new(App {
        key,
        brk,
        delay: Duration::from_millis(delay),
        first: AtomicBool::new(true),
        chats: Mutex::new(HashMap::new()),
        global_memory: Mutex::new(None),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sidebridge-ref: cannot listen on {listen}: {e}");
                std::process::exit(2);
            }
        };
        let addr = listener.local_addr().expect("bound address");
        println!("http://{addr}/");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let router = Router::new().fallback(handle).with_state(app);
        let _ = axum::serve(listener, router).await;
    });
}

fn new_id(app: &App) -> String {
    let _ = app;
    uuid::Uuid::new_v4().hyphenated().to_string() // lower-case on purpose: clients upper-case it
}

fn msg(app: &App, from: &str, content: &str) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(new_id(app)));
    m.insert(
        "from".into(),
        json!(if app.is("from-bot") && from == "assistant" {
            "bot"
        } else {
            from
        }),
    );
    m.insert("content".into(), json!(content));
    if !app.is("no-sources") {
        m.insert("sources".into(), json!([]));
    }
    Value::Object(m)
}

fn json_reply(app: &App, status: StatusCode, v: &Value) -> Response {
    let text = serde_json::to_string(v).unwrap_or_else(|_| "{}".into());
    let bytes: Vec<u8> = if app.is("latin1") && !text.is_ascii() {
        text.chars()
            .map(|c| if (c as u32) < 256 { c as u8 } else { b'?' })
            .collect()
    } else {
        text.into_bytes()
    };
    let body = match app.brk.as_str() {
        "truncated-body" => {
            // Announce the full length, send half, pause, then drop the connection.
            let full = bytes.len();
            let half = Bytes::from(bytes[..full / 2].to_vec());
            let stream = futures_util::stream::unfold(0u8, move |step| {
                let half = half.clone();
                async move {
                    match step {
                        0 => Some((Ok::<Bytes, std::io::Error>(half), 1)),
                        1 => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Some((Err(std::io::Error::other("cut")), 2))
                        }
                        _ => None,
                    }
                }
            });
            let mut r = Response::new(Body::from_stream(stream));
            *r.status_mut() = status;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(full));
            return r;
        }
        "endless-body" => {
            let first = futures_util::stream::iter(vec![Ok::<Bytes, std::io::Error>(
                Bytes::from_static(b"{\"messages\":["),
            )]);
            use futures_util::StreamExt;
            Body::from_stream(first.chain(futures_util::stream::pending()))
        }
        "huge-body" => {
            let mut big = Vec::with_capacity(50 * 1024 * 1024 + 64);
            big.extend_from_slice(b"{\"messages\":[],\"pad\":\"");
            big.resize(50 * 1024 * 1024, b'x');
            big.extend_from_slice(b"\"}");
            Body::from(big)
        }
        _ => Body::from(bytes),
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn html(status: StatusCode, title: &str) -> Response {
    let mut r = Response::new(Body::from(format!(
        "<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"
    )));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn error_reply(app: &App, status: StatusCode, text: &str, end: bool) -> Response {
    let mut v = json!({"messages": [msg(app, "system", text)]});
    if end {
        v["options"] = json!({"endSession": true});
    }
    json_reply(app, status, &v)
}

async fn handle(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if app.first.swap(false, Ordering::SeqCst) && app.is("slow-start") {
        tokio::time::sleep(app.delay).await;
    }
    if method == Method::OPTIONS {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        let h = r.headers_mut();
        h.insert(header::ALLOW, HeaderValue::from_static("POST, OPTIONS"));
        h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
        h.insert(
            "access-control-allow-methods",
            HeaderValue::from_static("POST"),
        );
        h.insert(
            "access-control-allow-headers",
            HeaderValue::from_static("content-type, x-sidebridge-key"),
        );
        return r;
    }
    if method != Method::POST {
        let mut r = error_reply(
            &app,
            StatusCode::METHOD_NOT_ALLOWED,
            "This Side Bridge only accepts POST.",
            false,
        );
        if !app.is("no-allow-header") {
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, OPTIONS"));
        }
        return r;
    }
    let path = uri.path();
    if app.is("slash-redirect") && path.len() > 1 && path.ends_with('/') {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
        if let Ok(v) = HeaderValue::from_str(path.trim_end_matches('/')) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    if app.is("html-everything") {
        return html(StatusCode::OK, "Welcome to nginx!");
    }
    let parsed: Result<Value, serde_json::Error> = serde_json::from_slice(&body);
    if app.is("parse-before-auth") && parsed.is_err() {
        return error_reply(
            &app,
            StatusCode::BAD_REQUEST,
            "The request could not be read.",
            false,
        );
    }
    if let Some(r) = authenticate(&app, &headers) {
        return r;
    }
    let req = match parsed {
        Ok(Value::Object(m)) => m,
        Ok(_) | Err(_) => return malformed(&app, parsed.err().map(|e| format!("{e:?}"))),
    };
    respond(&app, req, &body)
}

fn authenticate(app: &App, headers: &HeaderMap) -> Option<Response> {
    let given = headers
        .get("x-sidebridge-key")
        .map(|v| v.as_bytes().to_vec());
    let ok = match (&app.key, &given) {
        (None, None) => true,
        (None, Some(_)) => !app.is("reject-unexpected-key"),
        (Some(_), None) => app.is("accept-missing-key"),
        (Some(k), Some(g)) => g.as_slice() == k.as_bytes() || app.is("accept-wrong-key"),
    };
    if ok {
        return None;
    }
    Some(error_reply(
        app,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: check the Side Bridge key in Side Search's settings.",
        true,
    ))
}

fn malformed(app: &App, detail: Option<String>) -> Response {
    if app.is("html-errors") {
        return html(StatusCode::BAD_REQUEST, "400 Bad Request");
    }
    let text = match (app.is("leak-errors"), detail) {
        (true, Some(d)) => format!("internal error: {d}"),
        (true, None) => {
            "internal error: invalid type: expected struct SBRequest at line 1 column 1".into()
        }
        _ => "The request could not be read as a Side Bridge request.".into(),
    };
    error_reply(app, StatusCode::BAD_REQUEST, &text, false)
}

struct In {
    id: String,
    from: String,
    content: String,
}

fn messages_of(v: Option<&Value>) -> Result<Option<Vec<In>>, String> {
    let Some(v) = v else { return Ok(None) };
    if v.is_null() {
        return Ok(None);
    }
    let items = v.as_array().ok_or("not an array")?;
    let mut out = Vec::new();
    for m in items {
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        match (s("id"), s("from"), s("content")) {
            (Some(id), Some(from), Some(content)) => out.push(In { id, from, content }),
            _ => return Err("a message lacks a string id, from or content".into()),
        }
    }
    Ok(Some(out))
}

fn respond(app: &App, req: Map<String, Value>, raw: &[u8]) -> Response {
    if app.is("strict-keys")
        && let Some(k) = req
            .keys()
            .find(|k| !["sidebridge", "chatId", "messages", "history"].contains(&k.as_str()))
    {
        return error_reply(
            app,
            StatusCode::BAD_REQUEST,
            &format!("Unknown request field `{k}`."),
            false,
        );
    }
    let version = match req.get("sidebridge").and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => return malformed(app, Some("missing field `sidebridge`".into())),
    };
    let major_ok = version.split('.').next() == Some("1");
    if !major_ok || (app.is("exact-version") && version != "1.0") {
        if app.is("html-unsupported-version") {
            return html(StatusCode::BAD_REQUEST, "Unsupported version");
        }
        return error_reply(
            app,
            StatusCode::BAD_REQUEST,
            &format!("Side Bridge version {version} is not supported; this bridge speaks 1.x."),
            true,
        );
    }
    let chat_id = match req.get("chatId").and_then(Value::as_str) {
        Some(c) if is_uuid(c) => c.to_ascii_uppercase(),
        _ => return malformed(app, Some("chatId is missing or not a UUID".into())),
    };
    let (messages, history) = match (
        messages_of(req.get("messages")),
        messages_of(req.get("history")),
    ) {
        (Ok(m), Ok(h)) => (m, h),
        (Err(e), _) | (_, Err(e)) => return malformed(app, Some(e)),
    };
    if app.is("reject-unknown-from")
        && let Some(h) = &history
        && h.iter().any(|m| m.from != "user" && m.from != "assistant")
    {
        return error_reply(
            app,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Unsupported message in history.",
            false,
        );
    }
    let mut chats = app.chats.lock().unwrap_or_else(|e| e.into_inner());
    let known = chats.contains_key(&chat_id);
    if !known && app.is("require-known-chat") && history.as_ref().is_some_and(|h| !h.is_empty()) {
        return error_reply(app, StatusCode::NOT_FOUND, "Unknown chat.", false);
    }
    let chat = chats.entry(chat_id).or_default();
    let Some(messages) = messages else {
        // Session start.
        if chat.ended {
            if app.is("crash-on-ended") {
                return error_reply(
                    app,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Session already closed.",
                    false,
                );
            }
            return error_reply(
                app,
                StatusCode::OK,
                "This chat has ended. Start a new chat to continue.",
                true,
            );
        }
        if app.is("bad-session-start") {
            return json_reply(app, StatusCode::OK, &json!([]));
        }
        let mut v = json!({"messages": []});
        if chat.history_disabled && !app.is("forget-options-on-reopen") {
            v["options"] = json!({"disableSendHistory": true});
        } else if app.is("always-send-options") {
            v["options"] = json!({"disableSendHistory": false, "endSession": false});
        }
        return json_reply(app, StatusCode::OK, &v);
    };
    if chat.ended {
        return error_reply(app, StatusCode::OK, "This chat has ended.", true);
    }
    let mut out: Vec<Value> = Vec::new();
    let mut options = Map::new();
    let mut to_answer: Vec<&In> = messages.iter().filter(|m| !m.content.is_empty()).collect();
    if app.is("double-answer")
        && let Some(last) = history
            .as_ref()
            .and_then(|h| h.last())
            .filter(|m| m.from == "user")
    {
        to_answer.push(last);
    }
    if to_answer.is_empty() && app.is("crash-on-empty") {
        return error_reply(
            app,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Nothing to answer.",
            false,
        );
    }
    let raw_text = String::from_utf8_lossy(raw).into_owned();
    for m in to_answer {
        let content = if app.is("raw-body-scan") {
            raw_content(&raw_text).unwrap_or_else(|| m.content.clone())
        } else {
            m.content.clone()
        };
        let text = content.trim().to_string();
        let lower = text.to_lowercase();
        let mut reply = msg(app, "assistant", "");
        let answer = if let Some(word) = strip_prefix_ci(&text, "remember ") {
            let word = word.trim().to_string();
            if app.is("global-memory") {
                *app.global_memory.lock().unwrap_or_else(|e| e.into_inner()) = Some(word.clone());
            } else if !app.is("stateless") {
                chat.memory = Some(word.clone());
            }
            format!("I will remember {word}.")
        } else if lower == "recall" {
            let from_state = if app.is("global-memory") {
                app.global_memory
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
            } else {
                chat.memory.clone()
            };
            let from_history = history.as_ref().and_then(|h| {
                h.iter().rev().find_map(|m| {
                    strip_prefix_ci(&m.content, "remember ")
                        .filter(|_| m.from == "user")
                        .map(|w| w.trim().to_string())
                })
            });
            match from_state.or(from_history) {
                Some(w) => format!("You asked me to remember {w}."),
                None => "I have nothing to recall.".into(),
            }
        } else if lower == "what did you say?" {
            let said = match &history {
                Some(h) => h.iter().rev().find_map(|m| {
                    let key = if app.is("lowercase-ids") {
                        m.id.clone()
                    } else {
                        m.id.to_ascii_uppercase()
                    };
                    chat.sent.get(&key).cloned()
                }),
                None => chat.last_sent.clone(),
            };
            match said {
                Some(s) => format!("I said: {s}"),
                None => "I have not said anything yet.".into(),
            }
        } else if lower == "disable history" {
            chat.history_disabled = true;
            options.insert("disableSendHistory".into(), json!(true));
            "History is off: I keep the context myself.".into()
        } else if lower == "enable history" {
            chat.history_disabled = false;
            options.insert("disableSendHistory".into(), json!(false));
            "History is on again.".into()
        } else if lower == "bye" {
            chat.ended = true;
            options.insert("endSession".into(), json!(true));
            "Goodbye!".into()
        } else if let Some(term) = strip_prefix_ci(&text, "search ") {
            let term = term.trim().replace(' ', "-");
            let url = if app.is("relative-sources") {
                format!("/search/{term}")
            } else {
                format!("https://example.com/search/{term}")
            };
            reply["sources"] = json!([{"title": format!("Results for {term}"), "url": url}]);
            if app.is("bad-ids") {
                reply["id"] = json!(format!("result-{}", chat.sent.len() + 1));
            }
            if app.is("missing-from")
                && let Some(o) = reply.as_object_mut()
            {
                o.remove("from");
            }
            format!("Here is what I found about {term}.")
        } else {
            format!("Echo: {text}")
        };
        if app.is("reuse-user-id") {
            reply["id"] = json!(m.id);
        }
        reply["content"] = json!(answer);
        if app.is("silent-end") && lower == "bye" {
            continue;
        }
        let id = reply["id"].as_str().unwrap_or_default().to_string();
        let key = if app.is("lowercase-ids") {
            id
        } else {
            id.to_ascii_uppercase()
        };
        chat.sent.insert(key, answer.clone());
        chat.last_sent = Some(answer);
        if app.is("empty-content") {
            out.push(msg(app, "assistant", ""));
        }
        out.push(reply);
    }
    let mut v = json!({"messages": out});
    if app.is("always-send-options") {
        let mut o = Map::new();
        o.insert(
            "disableSendHistory".into(),
            options
                .get("disableSendHistory")
                .cloned()
                .unwrap_or(json!(false)),
        );
        o.insert(
            "endSession".into(),
            options.get("endSession").cloned().unwrap_or(json!(false)),
        );
        options = o;
    }
    if app.is("string-options") {
        for val in options.values_mut() {
            *val = json!(val.to_string());
        }
    }
    if !options.is_empty() {
        v["options"] = Value::Object(options);
    }
    json_reply(app, StatusCode::OK, &v)
}

/// `text` without an ASCII `prefix`, compared case-insensitively (never splits a character).
fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// The flawed extraction of `raw-body-scan`: the first `"content":"…"` cut out of the bytes.
fn raw_content(raw: &str) -> Option<String> {
    let start = raw.find("\"content\":\"")? + "\"content\":\"".len();
    let rest = &raw[start..];
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(rest[..i].to_string()),
            _ => i += 1,
        }
    }
    None
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

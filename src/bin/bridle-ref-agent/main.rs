//! bridle-ref-agent: the reference Bridle agent runtime, on bridgewire's own Socket.IO client.
//!
//! Reads `BRIDLE_URL`, `BRIDLE_API_KEY`, `BRIDLE_AGENT_ID`; connects to `/ws/agent`, sends
//! `register`, and answers each message: a text containing `think` or `tool` first gets notes
//! (`kind: thinking`, `kind: tool` `→ searchWeb`) inside the turn; a text starting with `plain`
//! gets one complete `message`; everything else `typing`, accumulated `stream` frames flushed
//! every `BRIDLE_FLUSH_MS` (100) while tokens arrive every `BRIDLE_TOKEN_MS` (30), then
//! `stream_end` with the final text. Reconnects `BRIDLE_RECONNECT_MS` (3000) after losing the hub.
//! `--break MODE` / `BRIDLE_REF_BREAK` plants one flaw (see `--list-breaks`).

use bridgewire::bridle::transport::{Options, RecvError, Socket};
use bridgewire::bridle::{AGENT_NSP, text_parts};
use serde_json::{Value, json};
use std::time::Duration;

const BREAKS: &[(&str, &str)] = &[
    ("no-api-key", "agent-auth: connects without apiKey"),
    ("no-register", "agent-register: never sends register"),
    (
        "wrong-client-id",
        "agent-client-id: answers under another clientId",
    ),
    ("delta-stream", "streaming-replace: streams deltas"),
    (
        "end-mismatch",
        "stream-end-final: stream_end under another messageId than its streams",
    ),
    (
        "root-namespace",
        "agent-auth: connects to namespace / instead of /ws/agent",
    ),
    (
        "bad-kind",
        "notes: notes carry kind \"reasoning\", not a spec value",
    ),
    (
        "no-reconnect",
        "agent-reconnect: gives up when the hub goes away",
    ),
];

struct Cfg {
    url: String,
    api_key: String,
    agent_id: String,
    brk: Option<String>,
    flush: Duration,
    token: Duration,
    reconnect: Duration,
}

impl Cfg {
    fn broken(&self, m: &str) -> bool {
        self.brk.as_deref() == Some(m)
    }
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

fn main() -> std::process::ExitCode {
    let mut brk = std::env::var("BRIDLE_REF_BREAK")
        .ok()
        .filter(|s| !s.is_empty());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--break" => brk = args.next(),
            "--list-breaks" => {
                for (m, what) in BREAKS {
                    println!("{m}\t{what}");
                }
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("bridle-ref-agent: unknown argument {other:?}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    if let Some(b) = &brk
        && !BREAKS.iter().any(|(m, _)| m == b)
    {
        eprintln!("bridle-ref-agent: unknown break mode {b:?}");
        return std::process::ExitCode::from(2);
    }
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let cfg = Cfg {
        url: var("BRIDLE_URL"),
        api_key: var("BRIDLE_API_KEY"),
        agent_id: var("BRIDLE_AGENT_ID"),
        brk,
        flush: env_ms("BRIDLE_FLUSH_MS", 100),
        token: env_ms("BRIDLE_TOKEN_MS", 30),
        reconnect: env_ms("BRIDLE_RECONNECT_MS", 3000),
    };
    if cfg.url.is_empty() || cfg.agent_id.is_empty() {
        eprintln!("bridle-ref-agent: BRIDLE_URL and BRIDLE_AGENT_ID are required");
        return std::process::ExitCode::from(2);
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return std::process::ExitCode::from(1);
    };
    rt.block_on(run(cfg))
}

async fn run(cfg: Cfg) -> std::process::ExitCode {
    let opts = Options::default();
    let mut ever_connected = false;
    loop {
        let mut auth = json!({ "agentId": cfg.agent_id });
        if !cfg.broken("no-api-key") {
            auth["apiKey"] = json!(cfg.api_key);
        }
        let nsp = if cfg.broken("root-namespace") {
            "/"
        } else {
            AGENT_NSP
        };
        match Socket::connect(&cfg.url, nsp, Some(auth), &opts).await {
            Ok(mut s) => {
                ever_connected = true;
                eprintln!("bridle-ref-agent: connected as {}", cfg.agent_id);
                if !cfg.broken("no-register") {
                    s.emit("register", json!({}));
                }
                serve(&cfg, &mut s).await;
                eprintln!("bridle-ref-agent: lost the hub");
                if cfg.broken("no-reconnect") {
                    return std::process::ExitCode::SUCCESS;
                }
            }
            Err(e) => {
                eprintln!("bridle-ref-agent: connect failed: {e}");
                if ever_connected && cfg.broken("no-reconnect") {
                    return std::process::ExitCode::SUCCESS;
                }
            }
        }
        tokio::time::sleep(cfg.reconnect).await;
    }
}

/// Answers messages until the connection ends.
async fn serve(cfg: &Cfg, s: &mut Socket) {
    loop {
        match s.recv(Duration::from_secs(3600)).await {
            Ok(e) if e.name == "message" => answer(cfg, s, &e.data).await,
            Ok(_) => {}
            Err(RecvError::Timeout) | Err(RecvError::Invalid { .. }) => {}
            Err(_) => return,
        }
    }
}

async fn answer(cfg: &Cfg, s: &Socket, msg: &Value) {
    let mut client_id = msg
        .get("clientId")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if cfg.broken("wrong-client-id") {
        client_id = format!("{client_id}-x");
    }
    let text = msg.get("text").and_then(Value::as_str).unwrap_or("");
    let message_id = uuid::Uuid::new_v4().to_string();
    let now = || bridgewire::util::now_ms() as u64;
    if text.starts_with("plain") {
        let reply = format!("Plain answer to: {text}");
        s.emit(
            "message",
            json!({"clientId": client_id, "text": reply, "parts": text_parts(&reply),
                   "messageId": message_id, "ts": now()}),
        );
        return;
    }
    s.emit("typing", json!({"clientId": client_id, "ts": now()}));
    let mut notes = Vec::new();
    if text.contains("think") {
        notes.push(("thinking", format!("The user asks: {text}")));
    }
    if text.contains("tool") {
        notes.push(("tool", "→ searchWeb".to_string()));
    }
    for (kind, note) in notes {
        let mut frame = json!({"clientId": client_id, "text": note, "parts": text_parts(&note),
                               "messageId": uuid::Uuid::new_v4().to_string(), "ts": now()});
        frame["kind"] = json!(if cfg.broken("bad-kind") {
            "reasoning"
        } else {
            kind
        });
        s.emit("message", frame);
    }
    let reply = format!("You said: {text}. This answer arrives in several streamed pieces.");
    let tokens: Vec<&str> = reply.split_inclusive(' ').collect();
    let mut acc = String::new();
    let mut flushed = String::new();
    // Tokens arrive every `token`; the latest accumulation is flushed on a `flush` timer, as the
    // SDK's BridleRepository does.
    let mut tick = tokio::time::interval(cfg.flush);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut next_token = tokio::time::Instant::now() + cfg.token;
    let mut i = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_token), if i < tokens.len() => {
                acc.push_str(tokens[i]);
                i += 1;
                next_token += cfg.token;
            }
            _ = tick.tick() => {
                if acc != flushed {
                    let out = if cfg.broken("delta-stream") {
                        acc[flushed.len()..].to_string()
                    } else {
                        acc.clone()
                    };
                    flushed = acc.clone();
                    s.emit(
                        "stream",
                        json!({"clientId": client_id, "text": out, "parts": text_parts(&out),
                               "messageId": message_id, "ts": now()}),
                    );
                }
                if i == tokens.len() {
                    break;
                }
            }
        }
    }
    // The final text is the last accumulation (the `end-mismatch` flaw closes it under
    // another messageId).
    let end_id = if cfg.broken("end-mismatch") {
        uuid::Uuid::new_v4().to_string()
    } else {
        message_id
    };
    s.emit(
        "stream_end",
        json!({"clientId": client_id, "text": acc, "parts": text_parts(&acc),
               "messageId": end_id, "ts": now()}),
    );
}

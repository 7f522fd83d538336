//! `check sidebridge`: bridgewire plays Side Search against a live bridge and judges the rule
//! table of `reference/side-bridge-clients.md` §9 (catalogue: `rules/sidebridge.json`).
//!
//! Context-dependent rules (SB-R3, SB-R6, SB-S2, SB-S3, SB-S4, SB-R11) speak the scenario
//! vocabulary the reference bridge implements: `remember <word>`, `recall`,
//! `what did you say?`, `disable history`, `enable history`, `bye`. A bridge that does not
//! enter a scenario gets that rule *skipped* with the reason (which fails the report).
//!
//! Which replies feed which rule: SB-D1…SB-D8 judge every reply to a request the emulated
//! client built (not the probes); SB-D9 judges every non-2xx reply of the run; SB-H3 judges
//! every reply of the run plus a trailing-slash probe.

use super::client::{Driver, Exchange, Kind, Screen};
use super::profiles::{self, From, Msg, Profile, Reply, Rng, Style, is_textual_uuid};
use super::transport::{Limits, TransportError};
use crate::rule::Verdict;
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CheckConfig {
    pub url: String,
    /// The key configured on the bridge; `None`: the bridge has none (SB-A4 instead of A1–A3).
    pub key: Option<String>,
    pub limits: Limits,
    /// SB-H2 warns above this (default 10 s); it fails above `limits.total`.
    pub warn_after: Duration,
    pub seed: u64,
    /// Consecutive timeouts after which the remaining exchanges are not sent (0: never).
    pub give_up_after: usize,
}

/// One reply as each profile sees it.
#[derive(Debug, Clone)]
pub struct ProfileView {
    pub label: String,
    pub outcomes: Vec<(Profile, Result<usize, String>)>,
}

#[derive(Debug, Clone)]
pub struct CheckReport {
    pub verdicts: Vec<Verdict>,
    pub profiles: Vec<ProfileView>,
    pub exchanges: Vec<Exchange>,
}

/// Warnings ride on passing verdicts as their detail.
fn pass_with(id: &str, notes: Vec<String>) -> Verdict {
    let mut v = Verdict::pass(id);
    if !notes.is_empty() {
        v.detail = notes.join("; ");
    }
    v
}

fn contents(r: &Reply) -> Vec<(From, String)> {
    r.messages
        .iter()
        .map(|m| (m.from, m.content.clone()))
        .collect()
}

fn reply_text(d: &Driver, i: usize) -> String {
    match d.log[i].judged(Profile::Gamma) {
        Ok(r) => r
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        Err(e) => format!("<{e}>"),
    }
}

fn is_5xx(x: &Exchange) -> bool {
    x.status().is_some_and(|s| s >= 500)
}

fn ends(x: &Exchange) -> bool {
    x.judged(Profile::Gamma)
        .ok()
        .and_then(|r| r.options)
        .and_then(|o| o.end_session)
        == Some(true)
}

/// Text that looks like a stack trace or an internal exception.
pub fn leaks_internals(text: &str) -> Option<&'static str> {
    const MARKERS: &[&str] = &[
        "panicked at",
        "Traceback (most recent call last)",
        "Exception",
        "stack backtrace",
        "Error(\"",
        "line: ",
        "at line ",
        "internal error",
        "    at ",
        ".rs:",
        ".py\", line",
        ".js:",
        "NullPointer",
        "undefined is not",
    ];
    MARKERS.iter().copied().find(|m| text.contains(m))
}

/// Runs every scenario and judges every rule.
pub async fn check(cfg: &CheckConfig) -> Result<CheckReport, TransportError> {
    let mut d = Driver::new(&cfg.url, cfg.key.clone(), cfg.limits, cfg.seed)?;
    d.give_up_after = cfg.give_up_after;
    let mut v: Vec<Verdict> = Vec::new();
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);

    // SB-H2: the first request of the run, timed (a cold start counts).
    let mut s = Screen::new(&mut rng);
    let i = s.start(&mut d, "timing/session-start").await;
    v.push(match &d.log[i].result {
        Err(e) => Verdict::fail("SB-H2", format!("session start: {e}")),
        Ok(r) if r.elapsed > cfg.limits.total => Verdict::fail(
            "SB-H2",
            format!(
                "full reply after {:?}, over the client's {:?}",
                r.elapsed, cfg.limits.total
            ),
        ),
        Ok(r) if r.elapsed > cfg.warn_after => pass_with(
            "SB-H2",
            vec![format!(
                "WARN: full reply after {:.1?} (over {:?})",
                r.elapsed, cfg.warn_after
            )],
        ),
        Ok(r) => pass_with("SB-H2", vec![format!("{:.1?}", r.elapsed)]),
    });

    // SB-H1: session start of a new chat decodes under γ.
    let mut s = Screen::new(&mut rng);
    let i = s.start(&mut d, "session-start/new-chat").await;
    v.push(match d.log[i].judged(Profile::Gamma) {
        Ok(_) => pass_with(
            "SB-H1",
            vec![format!("status {}", d.log[i].status().unwrap_or(0))],
        ),
        Err(e) => Verdict::fail("SB-H1", format!("{}: {e}", d.log[i].label)),
    });

    // SB-H3 probe: the endpoint with its trailing slash toggled.
    let alt = {
        let mut u = d.target.url.clone();
        let p = u.path().to_string();
        let np = if p.len() > 1 && p.ends_with('/') {
            p.trim_end_matches('/').to_string()
        } else if p == "/" {
            "/index/".to_string()
        } else {
            format!("{p}/")
        };
        u.set_path(&np);
        super::transport::Target::from_url(u).ok()
    };
    let mut s = Screen::new(&mut rng);
    let body = profiles::Request {
        version: "1.0".into(),
        chat_id: s.chat_id.clone(),
        history: Some(vec![]),
        ..Default::default()
    }
    .encode(Style::App, &mut d.rng);
    let h = d.client_headers();
    let probe = d
        .exchange(
            "redirect/trailing-slash",
            Kind::Probe,
            alt,
            "POST",
            h,
            body,
            vec![],
        )
        .await;
    s.ended = true;

    // SB-H4, SB-H5: other methods.
    let mut h4_fail = Vec::new();
    let mut h4_notes = Vec::new();
    for m in ["GET", "PUT", "HEAD"] {
        let h = d.client_headers();
        let i = d
            .exchange(
                &format!("methods/{m}"),
                Kind::Probe,
                None,
                m,
                h,
                Vec::new(),
                vec![],
            )
            .await;
        let x = &d.log[i];
        match &x.result {
            Err(e) => h4_fail.push(format!("{m}: {e}")),
            Ok(r) => {
                if r.status != 405 && r.status != 404 {
                    h4_fail.push(format!("{m}: status {} (want 405 or 404)", r.status));
                }
                let allow = r.header("allow").unwrap_or("");
                if !allow.to_ascii_uppercase().contains("POST") {
                    h4_fail.push(format!("{m}: no `Allow: POST` (got {allow:?})"));
                }
                if m != "HEAD"
                    && !r.body.is_empty()
                    && let Err(e) = profiles::decode(Profile::Gamma, &r.body)
                {
                    h4_fail.push(format!(
                        "{m}: the body does not decode as Side Bridge ({e})"
                    ));
                }
                h4_notes.push(format!("{m} {}", r.status));
            }
        }
    }
    v.push(if h4_fail.is_empty() {
        pass_with("SB-H4", h4_notes)
    } else {
        Verdict::fail("SB-H4", h4_fail.join("; "))
    });
    let h = vec![
        ("Origin".to_string(), "https://example.com".to_string()),
        ("Access-Control-Request-Method".into(), "POST".into()),
        (
            "Access-Control-Request-Headers".into(),
            "content-type,x-sidebridge-key".into(),
        ),
    ];
    let i = d
        .exchange(
            "methods/OPTIONS",
            Kind::Probe,
            None,
            "OPTIONS",
            h,
            Vec::new(),
            vec![],
        )
        .await;
    v.push(pass_with(
        "SB-H5",
        vec![match &d.log[i].result {
            Ok(r) => format!(
                "status {}, Allow {:?}, Access-Control-Allow-Methods {:?}",
                r.status,
                r.header("allow").unwrap_or(""),
                r.header("access-control-allow-methods").unwrap_or("")
            ),
            Err(e) => format!("{e}"),
        }],
    ));

    // Authentication.
    auth(&mut d, &mut rng, cfg, &mut v).await;

    // The conversation: plain sends, non-ASCII text, sources, context via ids.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "conversation/start").await;
    let hello = s
        .send(&mut d, "Hello Side Bridge!", "conversation/hello")
        .await;
    s.send(
        &mut d,
        "Grüße aus Köln 👋 – see https://example.com/ä",
        "conversation/non-ascii",
    )
    .await;
    s.send(&mut d, "search side bridge", "conversation/search")
        .await;
    s.send(&mut d, "remember banana", "conversation/remember")
        .await;
    let said = s
        .send(&mut d, "what did you say?", "conversation/what-did-you-say")
        .await;
    // SB-R1.
    v.push(match hello {
        None => Verdict::skipped("SB-R1", "the session ended before the first send"),
        Some(i) => match d.log[i].judged(Profile::Gamma) {
            Err(e) => Verdict::fail("SB-R1", format!("{}: {e}", d.log[i].label)),
            Ok(_) if is_5xx(&d.log[i]) => Verdict::fail(
                "SB-R1",
                format!("the message was not answered: status {}", d.log[i].status().unwrap_or(0)),
            ),
            Ok(r) => {
                let shown: Vec<&Msg> = r.messages.iter().filter(|m| !m.content.is_empty()).collect();
                let dup = shown
                    .iter()
                    .enumerate()
                    .find(|(k, m)| shown[..*k].iter().any(|o| o.content == m.content));
                match dup {
                    Some((_, m)) => Verdict::fail(
                        "SB-R1",
                        format!("the message was answered twice (it is also the last history item): {:?}", m.content),
                    ),
                    None if shown.is_empty() => Verdict::fail("SB-R1", "the message was not answered"),
                    None => Verdict::pass("SB-R1"),
                }
            }
        },
    });
    // SB-R3.
    let remembered = d
        .log
        .iter()
        .rev()
        .find(|x| x.label == "conversation/remember")
        .and_then(|x| x.judged(Profile::Gamma).ok())
        .and_then(|r| r.messages.into_iter().find(|m| !m.content.is_empty()))
        .map(|m| m.content);
    v.push(match (said, remembered) {
        (Some(i), Some(prev)) => {
            let text = reply_text(&d, i);
            if text.contains(&prev) {
                Verdict::pass("SB-R3")
            } else {
                Verdict::fail(
                    "SB-R3",
                    format!(
                        "history carried the bridge's reply {prev:?} under its id in upper case; asked about it, the bridge answered {text:?}"
                    ),
                )
            }
        }
        _ => Verdict::skipped("SB-R3", "the bridge did not answer `remember banana`"),
    });

    // SB-R2: an empty send.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "empty-send/start").await;
    let i = s.send(&mut d, "", "empty-send/send").await;
    v.push(match i {
        None => Verdict::skipped("SB-R2", "the session ended before the send"),
        Some(i) => {
            let x = &d.log[i];
            match x.judged(Profile::App) {
                Err(e) => Verdict::fail("SB-R2", format!("{}: {e}", x.label)),
                Ok(_) if is_5xx(x) => {
                    Verdict::fail("SB-R2", format!("status {}", x.status().unwrap_or(0)))
                }
                Ok(_) if ends(x) => Verdict::fail("SB-R2", "the empty send ended the session"),
                Ok(r) => pass_with(
                    "SB-R2",
                    vec![format!(
                        "INFO: {} message(s) in reply to the empty turn",
                        r.messages.len()
                    )],
                ),
            }
        }
    });

    // SB-R4: app error bubbles and unknown messages in history.
    let mut s = Screen::new(&mut rng);
    s.history = vec![
        Msg::user(&rng.uuid(), "hi"),
        Msg {
            id: rng.uuid(),
            from: From::System,
            content: "Failed to communicate with Side Bridge: The request timed out.".into(),
            sources: vec![],
        },
        Msg {
            id: rng.uuid(),
            from: From::Unknown,
            content: "a message from an unknown sender".into(),
            sources: vec![],
        },
    ];
    let a = s.start(&mut d, "foreign-history/start").await;
    let b = s.send(&mut d, "hello again", "foreign-history/send").await;
    let mut r4 = Vec::new();
    for i in std::iter::once(a).chain(b) {
        let x = &d.log[i];
        if let Err(e) = &x.result {
            r4.push(format!("{}: {e}", x.label));
        } else if is_5xx(x) {
            r4.push(format!("{}: status {}", x.label, x.status().unwrap_or(0)));
        } else if ends(x) {
            r4.push(format!("{}: the session was ended", x.label));
        }
    }
    v.push(if r4.is_empty() {
        Verdict::pass("SB-R4")
    } else {
        Verdict::fail("SB-R4", r4.join("; "))
    });

    // SB-R5: app bytes versus canonical bytes.
    let text = "see https://example.com/a/b";
    let mut app = Screen::new(&mut rng);
    let mut canon = Screen::new(&mut rng);
    canon.style = Style::Canonical;
    app.start(&mut d, "bytes/app-start").await;
    canon.start(&mut d, "bytes/canonical-start").await;
    let a = app.send(&mut d, text, "bytes/app").await;
    let c = canon.send(&mut d, text, "bytes/canonical").await;
    v.push(same_reply(
        "SB-R5",
        &d,
        a,
        c,
        "the app's bytes (\\/, sources:[], shuffled keys)",
    ));

    // SB-R7: legacy and future request keys.
    let mut plain = Screen::new(&mut rng);
    let mut extra = Screen::new(&mut rng);
    extra.extra = vec![
        ("type".into(), Value::String("sendMessage".into())),
        ("futureField".into(), serde_json::json!({"x": 1})),
    ];
    plain.start(&mut d, "extra-keys/plain-start").await;
    extra.start(&mut d, "extra-keys/extra-start").await;
    let a = plain.send(&mut d, "hello keys", "extra-keys/plain").await;
    let c = extra.send(&mut d, "hello keys", "extra-keys/extra").await;
    v.push(same_reply(
        "SB-R7",
        &d,
        c,
        a,
        "a request with `type` and `futureField`",
    ));

    // SB-R8: a newer minor version.
    let mut v10 = Screen::new(&mut rng);
    let mut v11 = Screen::new(&mut rng);
    v11.version = "1.1".into();
    v10.start(&mut d, "version/1.0-start").await;
    v11.start(&mut d, "version/1.1-start").await;
    let a = v10.send(&mut d, "hello version", "version/1.0").await;
    let c = v11.send(&mut d, "hello version", "version/1.1").await;
    v.push(same_reply(
        "SB-R8",
        &d,
        c,
        a,
        "a `\"sidebridge\":\"1.1\"` request",
    ));

    // SB-R9 (INFO) and SB-R10: odd and malformed requests.
    let chat = rng.uuid();
    let probes: Vec<(&str, String)> = vec![
        (
            "odd/version-2.0",
            format!("{{\"sidebridge\":\"2.0\",\"chatId\":\"{chat}\",\"history\":[]}}"),
        ),
        (
            "odd/no-chat-id",
            "{\"sidebridge\":\"1.0\",\"history\":[]}".into(),
        ),
        ("odd/empty-body", String::new()),
        ("odd/null", "null".into()),
    ];
    let mut notes = Vec::new();
    for (label, body) in probes {
        let i = d.probe(label, body.into_bytes()).await;
        let x = &d.log[i];
        notes.push(match x.judged(Profile::Gamma) {
            Ok(r) => format!(
                "{}: status {}, {} system message(s), endSession {}",
                label.trim_start_matches("odd/"),
                x.status().unwrap_or(0),
                r.messages.iter().filter(|m| m.from == From::System).count(),
                r.options.and_then(|o| o.end_session).unwrap_or(false)
            ),
            Err(e) => format!("{}: {}", label.trim_start_matches("odd/"), e),
        });
    }
    v.push(pass_with("SB-R9", notes));
    let chat = rng.uuid(); // a chat of its own: the 2.0 probe may have ended the other
    let probes = [
        (
            "malformed/truncated-json",
            format!("{{\"sidebridge\":\"1.0\",\"chatId\":\"{chat}\",\"mess"),
        ),
        (
            "malformed/wrong-types",
            format!(
                "{{\"sidebridge\":\"1.0\",\"chatId\":\"{chat}\",\"messages\":\"hello\",\"history\":7}}"
            ),
        ),
    ];
    let mut r10 = Vec::new();
    for (label, body) in probes {
        let i = d.probe(label, body.into_bytes()).await;
        let x = &d.log[i];
        match (&x.result, x.judged(Profile::Gamma)) {
            (Err(e), _) => r10.push(format!("{label}: {e}")),
            (Ok(r), Err(e)) => r10.push(format!(
                "{label}: status {}, not a Side Bridge body ({e})",
                r.status
            )),
            (Ok(r), Ok(reply)) => {
                if !(400..500).contains(&r.status) {
                    r10.push(format!("{label}: status {} (want 4xx)", r.status));
                }
                if reply.messages.is_empty() {
                    r10.push(format!("{label}: no message explains the error"));
                }
                for m in &reply.messages {
                    if let Some(mark) = leaks_internals(&m.content) {
                        r10.push(format!(
                            "{label}: internal error text shown to the user ({mark:?} in {:?})",
                            m.content
                        ));
                    }
                }
            }
        }
    }
    v.push(if r10.is_empty() {
        Verdict::pass("SB-R10")
    } else {
        Verdict::fail("SB-R10", r10.join("; "))
    });

    // SB-R11: a reopened chat the bridge has never seen, long history.
    let mut s = Screen::new(&mut rng);
    s.history.push(Msg::user(&rng.uuid(), "remember kiwi"));
    for k in 0..39 {
        if k % 2 == 0 {
            s.history.push(Msg {
                id: rng.uuid(),
                from: From::Assistant,
                content: format!("Answer {k}"),
                sources: vec![],
            });
        } else {
            s.history
                .push(Msg::user(&rng.uuid(), &format!("Question {k}")));
        }
    }
    let a = s.start(&mut d, "unknown-chat/start").await;
    let b = s.send(&mut d, "recall", "unknown-chat/recall").await;
    let mut r11 = Vec::new();
    for i in std::iter::once(a).chain(b) {
        let x = &d.log[i];
        match x.judged(Profile::Gamma) {
            Err(e) => r11.push(format!("{}: {e}", x.label)),
            Ok(_) if x.status().is_some_and(|s| !(200..300).contains(&s)) => {
                r11.push(format!("{}: status {}", x.label, x.status().unwrap_or(0)))
            }
            Ok(_) if ends(x) => r11.push(format!("{}: the session was ended", x.label)),
            Ok(_) => {}
        }
    }
    if let Some(i) = b {
        let t = reply_text(&d, i);
        if r11.is_empty() && !t.contains("kiwi") {
            r11.push(format!(
                "`recall` after the reopen answered {t:?}, not the remembered word from history"
            ));
        }
    }
    v.push(if r11.is_empty() {
        Verdict::pass("SB-R11")
    } else {
        Verdict::fail("SB-R11", r11.join("; "))
    });

    // SB-R6 and SB-S2: disableSendHistory, then its merge sequence.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "no-history/start").await;
    s.send(&mut d, "remember plum", "no-history/remember").await;
    s.send(&mut d, "disable history", "no-history/disable")
        .await;
    if s.send_history {
        let why = "the bridge did not set disableSendHistory on `disable history`";
        v.push(Verdict::skipped("SB-R6", why));
        v.push(Verdict::skipped("SB-S2", why));
    } else {
        let mut s2 = Vec::new();
        let r = s.send(&mut d, "recall", "no-history/recall").await;
        v.push(match r {
            None => Verdict::skipped("SB-R6", "the session ended"),
            Some(i) => {
                let t = reply_text(&d, i);
                if request_has_history(&d.log[i]) {
                    Verdict::fail("SB-R6", "internal: the emulated client sent history")
                } else if t.contains("plum") {
                    Verdict::pass("SB-R6")
                } else {
                    Verdict::fail("SB-R6", format!("without `history`, `recall` was answered {t:?} (expected the remembered word)"))
                }
            }
        });
        // The reply to the recall, and a plain send, must not silently re-enable history.
        let r2 = s
            .send(&mut d, "hello without history", "no-history/plain")
            .await;
        for i in r.into_iter().chain(r2) {
            if let Ok(Some(o)) = d.log[i].judged(Profile::Gamma).map(|r| r.options)
                && o.disable_send_history == Some(false)
            {
                s2.push(format!(
                        "{}: the reply re-enabled history (disableSendHistory:false) the bridge had disabled, unasked",
                        d.log[i].label
                    ));
            }
        }
        if s2.is_empty() {
            if let Some(i) = r2
                && request_has_history(&d.log[i])
            {
                s2.push("internal: a reply without options changed the client's state".into());
            }
            let en = s.send(&mut d, "enable history", "no-history/enable").await;
            if s.send_history {
                let rc = s.send(&mut d, "recall", "no-history/recall-again").await;
                if let Some(i) = rc {
                    if !request_has_history(&d.log[i]) {
                        s2.push("internal: explicit false did not re-enable history".into());
                    }
                    let t = reply_text(&d, i);
                    if !t.contains("plum") {
                        s2.push(format!(
                            "after re-enabling history, `recall` was answered {t:?}"
                        ));
                    }
                }
            } else if en.is_some() {
                s2.push("`enable history` did not send disableSendHistory:false".into());
            }
        }
        v.push(if s2.is_empty() {
            Verdict::pass("SB-S2")
        } else {
            Verdict::fail("SB-S2", s2.join("; "))
        });
    }

    // SB-S3: a reopened chat gets its options again.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "reopen/start").await;
    s.send(&mut d, "disable history", "reopen/disable").await;
    if s.send_history {
        v.push(Verdict::skipped(
            "SB-S3",
            "the bridge did not set disableSendHistory on `disable history`",
        ));
    } else {
        let mut again = s.reopen();
        let i = again.start(&mut d, "reopen/session-start").await;
        v.push(if again.send_history {
            Verdict::fail(
                "SB-S3",
                format!(
                    "the bridge disabled history in this chat, but its reply to the reopened screen's session start did not re-assert it ({})",
                    d.log[i].describe()
                ),
            )
        } else {
            Verdict::pass("SB-S3")
        });
    }

    // SB-S1 and SB-R12: endSession, then the ended chat reopened.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "end/start").await;
    s.send(&mut d, "bye", "end/bye").await;
    if !s.ended {
        v.push(Verdict::skipped(
            "SB-S1",
            "the bridge did not end the session on `bye`",
        ));
        v.push(Verdict::skipped(
            "SB-R12",
            "the bridge did not end the session on `bye`",
        ));
    } else {
        let refused = s
            .send(&mut d, "are you there?", "end/after")
            .await
            .is_none();
        let mut s1 = Vec::new();
        if !refused {
            s1.push("internal: the emulated client sent after endSession".to_string());
        }
        for x in d.log.iter().filter(|x| x.kind == Kind::Client && ends(x)) {
            if let Ok(r) = x.judged(Profile::Gamma)
                && !r.messages.iter().any(|m| !m.content.is_empty())
            {
                s1.push(format!(
                        "{}: endSession:true with no message to show; the client will send nothing more, so the bridge cannot finish later",
                        x.label
                    ));
            }
        }
        v.push(if s1.is_empty() {
            Verdict::pass("SB-S1")
        } else {
            Verdict::fail("SB-S1", s1.join("; "))
        });
        let mut again = s.reopen();
        let i = again.start(&mut d, "end/reopen").await;
        let x = &d.log[i];
        v.push(match x.judged(Profile::Gamma) {
            Err(e) => Verdict::fail("SB-R12", format!("{}: {e}", x.describe())),
            Ok(_) if is_5xx(x) => {
                Verdict::fail("SB-R12", format!("status {}", x.status().unwrap_or(0)))
            }
            Ok(r) => pass_with(
                "SB-R12",
                vec![format!(
                    "status {}, ended again: {}, {} message(s)",
                    x.status().unwrap_or(0),
                    r.options.and_then(|o| o.end_session).unwrap_or(false),
                    r.messages.len()
                )],
            ),
        });
    }

    // SB-S4: two chats interleaved.
    let mut a = Screen::new(&mut rng);
    let mut b = Screen::new(&mut rng);
    a.start(&mut d, "two-chats/a-start").await;
    b.start(&mut d, "two-chats/b-start").await;
    a.send(&mut d, "remember apple", "two-chats/a-remember")
        .await;
    b.send(&mut d, "remember pear", "two-chats/b-remember")
        .await;
    let ra = a.send(&mut d, "recall", "two-chats/a-recall").await;
    let rb = b.send(&mut d, "recall", "two-chats/b-recall").await;
    v.push(match (ra, rb) {
        (Some(ra), Some(rb)) => {
            let (ta, tb) = (reply_text(&d, ra), reply_text(&d, rb));
            if ta.contains("apple")
                && !ta.contains("pear")
                && tb.contains("pear")
                && !tb.contains("apple")
            {
                Verdict::pass("SB-S4")
            } else if !ta.contains("apple") && !ta.contains("pear") {
                Verdict::skipped(
                    "SB-S4",
                    format!("the bridge did not answer `recall` ({ta:?})"),
                )
            } else {
                Verdict::fail(
                    "SB-S4",
                    format!("chat A recalled {ta:?}, chat B recalled {tb:?}"),
                )
            }
        }
        _ => Verdict::skipped("SB-S4", "a session ended early"),
    });

    // Every reply: SB-H3 over the run, SB-D1…D9.
    let mut h3 = Vec::new();
    let mut h3_notes = Vec::new();
    for x in &d.log {
        for s in &x.redirects {
            if matches!(s, 301..=303) {
                h3.push(format!(
                    "{}: {s} (the client may re-send the POST as a GET)",
                    x.label
                ));
            } else {
                h3_notes.push(format!("{}: {s} followed", x.label));
            }
        }
    }
    if let Err(e) = &d.log[probe].result {
        h3.push(format!("{}: {e}", d.log[probe].label));
    }
    v.push(if h3.is_empty() {
        pass_with("SB-H3", h3_notes)
    } else {
        Verdict::fail("SB-H3", h3.join("; "))
    });
    v.extend(reply_rules(&d.log));

    let profiles = profile_views(&d.log);
    let order: Vec<String> = crate::rule::catalogue()
        .into_iter()
        .filter(|r| r.protocol == "sidebridge")
        .map(|r| r.id)
        .collect();
    v.sort_by_key(|x| order.iter().position(|o| *o == x.id).unwrap_or(usize::MAX));
    Ok(CheckReport {
        verdicts: v,
        profiles,
        exchanges: d.log,
    })
}

fn is_session_start(x: &Exchange) -> bool {
    serde_json::from_slice::<Value>(&x.request)
        .ok()
        .is_some_and(|v| v.get("messages").is_none())
}

fn request_has_history(x: &Exchange) -> bool {
    serde_json::from_slice::<Value>(&x.request)
        .ok()
        .is_some_and(|v| v.get("history").is_some())
}

fn same_reply(
    id: &str,
    d: &Driver,
    variant: Option<usize>,
    base: Option<usize>,
    what: &str,
) -> Verdict {
    let (Some(a), Some(b)) = (variant, base) else {
        return Verdict::skipped(id, "a session ended before the send");
    };
    let (xa, xb) = (&d.log[a], &d.log[b]);
    match (xa.judged(Profile::Gamma), xb.judged(Profile::Gamma)) {
        (_, Err(e)) => Verdict::fail(id, format!("{}: {e}", xb.label)),
        (Err(e), Ok(_)) => Verdict::fail(
            id,
            format!(
                "{what} was not answered like the plain one: {e} ({})",
                xa.describe()
            ),
        ),
        (Ok(ra), Ok(rb)) => {
            let class = |x: &Exchange| x.status().map(|s| s / 100);
            if contents(&ra) != contents(&rb) || class(xa) != class(xb) {
                Verdict::fail(
                    id,
                    format!(
                        "{what} got {:?} (status {}), the plain request got {:?} (status {})",
                        reply_text(d, a),
                        xa.status().unwrap_or(0),
                        reply_text(d, b),
                        xb.status().unwrap_or(0)
                    ),
                )
            } else {
                Verdict::pass(id)
            }
        }
    }
}

async fn auth(d: &mut Driver, rng: &mut Rng, cfg: &CheckConfig, v: &mut Vec<Verdict>) {
    let start_body = |rng: &mut Rng, d: &mut Driver| {
        profiles::Request {
            version: "1.0".into(),
            chat_id: rng.uuid(),
            history: Some(vec![]),
            ..Default::default()
        }
        .encode(Style::App, &mut d.rng)
    };
    let ct = || vec![("Content-Type".to_string(), "application/json".to_string())];
    let Some(key) = cfg.key.clone() else {
        // SB-A4: no key configured; the client sends one anyway.
        let mut h = ct();
        h.push(("x-sidebridge-key".into(), "any-key-the-user-typed".into()));
        let body = start_body(rng, d);
        let i = d
            .exchange(
                "auth/unexpected-key",
                Kind::Probe,
                None,
                "POST",
                h.clone(),
                body,
                vec![],
            )
            .await;
        let x = &d.log[i];
        v.push(match x.judged(Profile::App) {
            Err(e) => Verdict::fail("SB-A4", format!("{}: {e}", x.describe())),
            Ok(_) if ends(x) || x.status().is_some_and(|s| s == 401 || s == 403) => Verdict::fail(
                "SB-A4",
                format!(
                    "a bridge with no key configured rejected a request carrying one (status {})",
                    x.status().unwrap_or(0)
                ),
            ),
            Ok(_) => Verdict::pass("SB-A4"),
        });
        return;
    };
    let rejected = |x: &Exchange| -> Result<String, String> {
        let r = x
            .judged(Profile::Gamma)
            .map_err(|e| format!("{}: {e}", x.describe()))?;
        if r.messages
            .iter()
            .any(|m| m.from == From::Assistant && !m.content.is_empty())
        {
            return Err(format!(
                "{}: assistant content was served (status {})",
                x.label,
                x.status().unwrap_or(0)
            ));
        }
        if !r.messages.iter().any(|m| m.from == From::System) {
            return Err(format!(
                "{}: no system message explains the rejection",
                x.label
            ));
        }
        if r.options.and_then(|o| o.end_session) != Some(true) {
            return Err(format!(
                "{}: the session was not ended (options.endSession)",
                x.label
            ));
        }
        Ok(format!("status {}", x.status().unwrap_or(0)))
    };
    // For A1/A2 a session start and a send, so assistant content has a chance to show.
    // A fresh chat per send: a rejection ends its chat.
    let send_body = |d: &mut Driver, rng: &mut Rng| {
        let m = Msg::user(&rng.uuid(), "Hello without a key");
        profiles::Request {
            version: "1.0".into(),
            chat_id: rng.uuid(),
            messages: Some(vec![m.clone()]),
            history: Some(vec![m]),
            extra: vec![],
        }
        .encode(Style::App, &mut d.rng)
    };
    for (id, label, header) in [
        ("SB-A1", "auth/no-key", None),
        ("SB-A2", "auth/wrong-key", Some(format!("{key}-wrong"))),
    ] {
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        for step in ["start", "send"] {
            let mut h = ct();
            if let Some(k) = &header {
                h.push(("x-sidebridge-key".into(), k.clone()));
            }
            let body = if step == "start" {
                start_body(rng, d)
            } else {
                send_body(d, rng)
            };
            let i = d
                .exchange(
                    &format!("{label}/{step}"),
                    Kind::Probe,
                    None,
                    "POST",
                    h,
                    body,
                    vec![],
                )
                .await;
            match rejected(&d.log[i]) {
                Ok(n) => notes.push(format!("{step}: {n}")),
                Err(e) => fails.push(e),
            }
        }
        v.push(if fails.is_empty() {
            pass_with(id, notes)
        } else {
            Verdict::fail(id, fails.join("; "))
        });
    }
    // SB-A3: wrong key and a malformed body.
    let mut h = ct();
    h.push(("x-sidebridge-key".into(), format!("{key}-wrong")));
    let i = d
        .exchange(
            "auth/wrong-key-malformed",
            Kind::Probe,
            None,
            "POST",
            h,
            b"{\"sidebridge\":\"1.0\",\"chatId\":".to_vec(),
            vec![],
        )
        .await;
    let x = &d.log[i];
    v.push(match rejected(x) {
        Ok(_) => Verdict::pass("SB-A3"),
        Err(e) if x.status().is_some_and(|s| s == 400 || s >= 500) => Verdict::fail(
            "SB-A3",
            format!(
                "the body was judged before the key: status {} ({e})",
                x.status().unwrap_or(0)
            ),
        ),
        Err(e) => Verdict::fail("SB-A3", e),
    });
    // SB-A5 (INFO): spacing and header-name case.
    let mut notes = Vec::new();
    for (label, name, value) in [
        (
            "auth/key-with-spaces",
            "x-sidebridge-key".to_string(),
            format!(" {key} "),
        ),
        (
            "auth/header-case",
            "X-SideBridge-Key".to_string(),
            key.clone(),
        ),
    ] {
        let mut h = ct();
        h.push((name, value));
        let body = start_body(rng, d);
        let i = d
            .exchange(label, Kind::Probe, None, "POST", h, body, vec![])
            .await;
        let x = &d.log[i];
        notes.push(format!(
            "{}: {}",
            label.trim_start_matches("auth/"),
            match x.judged(Profile::Gamma) {
                Ok(_) if ends(x) => format!("rejected (status {})", x.status().unwrap_or(0)),
                Ok(_) => format!("accepted (status {})", x.status().unwrap_or(0)),
                Err(e) => e,
            }
        ));
    }
    v.push(pass_with("SB-A5", notes));
}

/// SB-D1…SB-D9 over the logged replies.
pub fn reply_rules(log: &[Exchange]) -> Vec<Verdict> {
    let mut fails: [Vec<String>; 9] = Default::default();
    let mut warns: [Vec<String>; 9] = Default::default();
    for x in log {
        let Ok(r) = &x.result else {
            if x.kind == Kind::Client {
                fails[0].push(format!(
                    "{}: {}",
                    x.label,
                    x.result
                        .as_ref()
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                ));
            }
            continue;
        };
        if !(200..300).contains(&r.status) && x.method != "HEAD" && !(300..400).contains(&r.status)
        {
            match profiles::decode(Profile::Gamma, &r.body) {
                Err(e) => fails[8].push(format!(
                    "{}: status {}, body does not decode ({e})",
                    x.label, r.status
                )),
                Ok(reply) if reply.messages.iter().any(|m| !m.content.is_empty()) => {
                    warns[8].push(format!(
                        "WARN {}: status {} carries text app-dev never shows",
                        x.label, r.status
                    ))
                }
                Ok(_) => {}
            }
        }
        if x.kind != Kind::Client {
            continue;
        }
        if let Err(e) = profiles::decode(Profile::Gamma, &r.body) {
            fails[0].push(format!("{}: status {}: {e}", x.label, r.status));
        }
        let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(&r.body) else {
            continue;
        };
        if let Some(o) = top.get("options").filter(|o| !o.is_null()) {
            match o.as_object() {
                None => fails[5].push(format!("{}: options is {}", x.label, profiles::kind(o))),
                Some(map) => {
                    for (k, f) in map {
                        if !(f.is_boolean() || f.is_null()) {
                            fails[5].push(format!("{}: options.{k} is {f}", x.label));
                        }
                    }
                }
            }
        }
        let Some(msgs) = top.get("messages").and_then(Value::as_array) else {
            continue;
        };
        let mut seen: Vec<String> = Vec::new();
        for (n, m) in msgs.iter().enumerate() {
            let at = format!("{} messages[{n}]", x.label);
            let id = m.get("id").and_then(Value::as_str);
            let from = m.get("from");
            let content = m.get("content");
            match id {
                Some(s) if is_textual_uuid(s) => {}
                Some(s) => fails[1].push(format!("{at}: id {s:?} is not a UUID")),
                None => fails[1].push(format!("{at}: id missing or not a string")),
            }
            match from {
                Some(Value::String(_)) => {}
                Some(other) => fails[1].push(format!("{at}: from is {}", profiles::kind(other))),
                None => fails[1].push(format!("{at}: from missing")),
            }
            match content {
                Some(Value::String(c)) if c.is_empty() => {
                    fails[6].push(format!("{at}: empty content (the app silently drops it)"))
                }
                Some(Value::String(_)) => {}
                Some(other) => fails[1].push(format!("{at}: content is {}", profiles::kind(other))),
                None => fails[1].push(format!("{at}: content missing")),
            }
            match from.and_then(Value::as_str) {
                Some("assistant") | Some("system") | None => {}
                Some(f @ ("user" | "unknown")) => warns[2].push(format!(
                    "WARN {at}: from {f:?} ({})",
                    if f == "user" {
                        "impersonates the user"
                    } else {
                        "outside the protocol"
                    }
                )),
                Some(f) => fails[2].push(format!(
                    "{at}: from {f:?} is not a protocol value (profile alpha drops the whole reply)"
                )),
            }
            if let Some(id) = id {
                let key = id.to_ascii_uppercase();
                if seen.contains(&key) {
                    fails[3].push(format!("{at}: id {id} repeats within the reply"));
                } else if x.request_ids.contains(&key) {
                    fails[3].push(format!(
                        "{at}: id {id} equals an id of the request (overwrites that bubble)"
                    ));
                }
                seen.push(key);
            }
            match m.get("sources") {
                None => fails[7].push(format!(
                    "{at}: no `sources` key (profile alpha drops the whole reply)"
                )),
                Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (k, s) in items.iter().enumerate() {
                        let title = s.get("title").and_then(Value::as_str);
                        let url = s.get("url").and_then(Value::as_str);
                        let ok_url =
                            url.and_then(|u| reqwest::Url::parse(u).ok())
                                .is_some_and(|u| {
                                    matches!(u.scheme(), "http" | "https") && u.host_str().is_some()
                                });
                        if title.is_none() || !ok_url {
                            fails[4].push(format!(
                                "{at}: sources[{k}] is not {{title: string, url: absolute http(s) URL}}: {s}"
                            ));
                        }
                    }
                }
                Some(other) => fails[4].push(format!("{at}: sources is {}", profiles::kind(other))),
            }
        }
    }
    let ids = [
        "SB-D1", "SB-D2", "SB-D3", "SB-D4", "SB-D5", "SB-D6", "SB-D7", "SB-D8", "SB-D9",
    ];
    ids.iter()
        .enumerate()
        .map(|(k, id)| {
            if fails[k].is_empty() {
                let mut w = warns[k].clone();
                w.truncate(3);
                pass_with(id, w)
            } else {
                let n = fails[k].len();
                let mut f = fails[k].clone();
                f.truncate(3);
                let more = if n > 3 {
                    format!(" (and {} more)", n - 3)
                } else {
                    String::new()
                };
                Verdict::fail(id, format!("{}{more}", f.join("; ")))
            }
        })
        .collect()
}

/// Per reply and profile; `app-dev` sends no session start, so it has no verdict for those.
fn profile_views(log: &[Exchange]) -> Vec<ProfileView> {
    log.iter()
        .filter(|x| x.kind == Kind::Client)
        .map(|x| ProfileView {
            label: x.label.clone(),
            outcomes: Profile::ALL
                .iter()
                .filter(|p| **p != Profile::AppDev || !is_session_start(x))
                .map(|p| {
                    (
                        *p,
                        x.judged(*p)
                            .map(|r| r.messages.iter().filter(|m| !m.content.is_empty()).count()),
                    )
                })
                .collect(),
        })
        .collect()
}

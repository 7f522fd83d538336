//! `check sidebridge`: bridgewire plays Side Search against a live bridge and judges the rule
//! table of `reference/side-bridge-clients.md` §9 (catalogue: `rules/sidebridge.json`).
//!
//! Context-dependent rules (SB-R3, SB-R6, SB-R11, SB-R12, SB-S1…S4) speak the bridge's own
//! scenario phrases from the fixture ([`super::scenarios`]); without them they are *not run*.
//!
//! Which replies feed which rule: SB-D1…SB-D8 judge every reply to a request the emulated
//! client built (not the probes), and SB-D4, SB-D5 and SB-D8 the SB-A1/A2 refusals too (the
//! app decodes and shows them whatever the status); SB-D9 judges every non-2xx reply to a POST of the run (the
//! other methods are SB-H4's and SB-H5's); SB-H3 judges
//! every reply of the run plus a trailing-slash probe.
//!
//! One fault, one verdict: SB-D1 judges whether every client reply decodes. Any other rule
//! that needs a reply's content (messages, options) and meets one it cannot read is *skipped*
//! naming SB-D1 ([`unreadable`]), never passed or failed on it; an INFO rule that only records
//! is *not run* when it has nothing readable to record. SB-H1 and SB-R2 show decoding as a
//! sub-check skipped naming SB-D1 and judge the rest (status, no 5xx, session not ended), as
//! the catalogue states it; so do SB-R11 (its session start) and SB-R12. Which rule a cause
//! belongs to is [`fault_owner`]: SB-D2/D5/D6 own the parts they state, SB-H1/SB-H2 a reply
//! that never came to their own request, SB-D1 the rest; SB-D1 and SB-D9 show the others'
//! causes skipped naming them.

use super::client::{Driver, Exchange, Kind, Screen};
use super::profiles::{self, From, Msg, Profile, Reply, Rng, Style, is_textual_uuid};
use super::transport::{Limits, TransportError};
use super::wire;
use crate::report::live::VerdictLog;
use crate::rule::{Status, SubCheck, Verdict};
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CheckConfig {
    pub url: String,
    /// The key configured on the bridge; `None`: the bridge has none (SB-A4 instead of A1–A3).
    pub key: Option<String>,
    pub limits: Limits,
    /// SB-H2 warns above this (default 10 s); it fails above [`SB_H2_WITHIN`].
    pub warn_after: Duration,
    pub seed: u64,
    /// Consecutive timeouts after which the remaining exchanges are not sent (0: never).
    pub give_up_after: usize,
    /// What makes this bridge enter each scenario (`[sidebridge.fixture]` + flags).
    pub fixture: super::fixture::Fixture,
    /// Seeds the words to remember: fresh per run (not `seed`), so no reply can be canned.
    pub nonce: u64,
    /// Where verdicts go as they are reached (for the partial report of an interrupted run).
    pub live: Option<crate::report::live::Live>,
    /// The bridge's process, when this run started it (its exit is seen, with its status).
    pub process: Option<std::sync::Arc<std::sync::Mutex<super::spawn::BridgeProcess>>>,
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
pub(super) fn pass_with(id: &str, notes: Vec<String>) -> Verdict {
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

/// The texts of reply `i` that change what the chat shows ([`Exchange::changed`]), joined
/// (what the scenario rules read as the bridge's answer), and how many messages it re-sent
/// unchanged.
fn changed_text(d: &Driver, i: usize) -> (String, usize) {
    match d.log[i].judged(Profile::Gamma) {
        Ok(r) => {
            let (changed, same) = d.log[i].changed(&r);
            let texts: Vec<&str> = changed.iter().map(|m| m.content.as_str()).collect();
            (texts.join(" | "), same)
        }
        Err(e) => (format!("<{e}>"), 0),
    }
}

/// [`changed_text`]'s text.
pub(super) fn reply_text(d: &Driver, i: usize) -> String {
    changed_text(d, i).0
}

/// [`reply_text`] for a verdict's detail: quoted and clipped, then [`resent_note`].
pub(super) fn reply_quote(d: &Driver, i: usize) -> String {
    let (text, same) = changed_text(d, i);
    match same {
        0 => format!("{:?}", clip(&text)),
        n => format!("{:?} (and {})", clip(&text), resent_note(n)),
    }
}

/// How a detail says that `n` messages of a reply were re-sent unchanged (and not read).
pub(super) fn resent_note(n: usize) -> String {
    match n {
        1 => "1 message re-sent unchanged, which changes nothing on screen".into(),
        n => format!("{n} messages re-sent unchanged, which change nothing on screen"),
    }
}

/// `s` cut to 200 characters for a verdict's detail.
pub(super) fn clip(s: &str) -> String {
    const MAX: usize = 200;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

pub(super) fn is_5xx(x: &Exchange) -> bool {
    x.status().is_some_and(|s| s >= 500)
}

pub(super) fn ends(x: &Exchange) -> bool {
    x.judged(Profile::Gamma)
        .ok()
        .and_then(|r| r.options)
        .and_then(|o| o.end_session)
        == Some(true)
}

/// SB-H3's probe of the endpoint's path with its trailing slash toggled: another path, whose
/// body is no Side Bridge reply's (SB-D9 does not judge it).
pub(super) const TRAILING_SLASH_PROBE: &str = "redirect/trailing-slash";
/// The label of the run's first request, timed by SB-H2.
pub(super) const TIMED_START: &str = "timing/session-start";
/// The label of the new chat's session start judged by SB-H1.
pub(super) const NEW_CHAT_START: &str = "session-start/new-chat";

/// What [`fault_owner`] names for a body over bridgewire's own `--max-body`: no rule. The app
/// reads a body of any size (reference §1.1 sets no limit), so a large reply is legal and only
/// the harness did not read it: every verdict that needs it is skipped saying so (and how to
/// raise the limit), never failed; a false MUST failure on a legal bridge is as wrong as a
/// miss.
pub(super) const OVER_MAX_BODY: &str = "bridgewire's own --max-body limit (not a rule: the reply is not judged; raise it with --max-body BYTES)";

/// A reply over bridgewire's own `--max-body` ([`OVER_MAX_BODY`]): what to say instead of a
/// verdict on it.
pub(super) fn over_max_body(x: &Exchange) -> Option<String> {
    match &x.result {
        Err(e @ TransportError::TooLarge(_)) => Some(format!("{}: {e}", x.label)),
        _ => None,
    }
}

/// The rule that judges why a reply to the emulated client cannot be read (one fault, one
/// verdict), from the rules' wording (reference §9):
/// * a body over bridgewire's own `--max-body`: [`OVER_MAX_BODY`], no rule;
/// * a reply whose HTTP framing is broken ([`TransportError::Malformed`]: a head line not ended
///   in CRLF, two Content-Lengths, …), wherever it is: SB-D1 ("received completely"), since a
///   bridge that frames one reply so frames them all, and the rules of the exchanges it meets
///   first (SB-H1, SB-H2) would otherwise fail beside it (one fault, one verdict);
/// * the bridge's stop (the timeouts in a row after which bridgewire gave up, and the requests
///   it did not send after them, [`Exchange::stopped`]), wherever it meets a rule: SB-D1
///   ("received"), since a bridge that stopped answering stops for every rule, and the rules
///   whose requests came first (SB-H2, SB-H1) would otherwise carry a fault of the whole run;
/// * no complete reply to the timed first request: SB-H2 ("full response in under 60 s");
/// * no HTTP reply to the new chat's session start: SB-H1 (its own scenario; any status);
/// * a message's required keys or their types: SB-D2; `sources`: SB-D5; `options` or a flag
///   that is not a boolean: SB-D6 (each states exactly that part; γ drops the reply for it);
/// * the rest (no complete reply elsewhere, not UTF-8, not JSON, not an object, `messages`
///   not an array): SB-D1 ("top-level object; strict JSON, UTF-8", "received completely").
///
/// `None` when the reply decodes under γ.
pub(super) fn fault_owner(x: &Exchange) -> Option<String> {
    use profiles::Part;
    let r = match &x.result {
        Err(TransportError::TooLarge(_)) => return Some(OVER_MAX_BODY.into()),
        Err(e) if e.is_broken_framing() => return Some("SB-D1".into()),
        Err(_) if x.stopped => return Some("SB-D1".into()),
        Err(_) if x.label == TIMED_START => return Some("SB-H2".into()),
        Err(_) if x.label == NEW_CHAT_START => return Some("SB-H1".into()),
        Err(_) => return Some("SB-D1".into()),
        Ok(r) => r,
    };
    if profiles::decode_reply(Profile::Gamma, r).is_ok() {
        return None;
    }
    let mut owners: Vec<&str> = Vec::new();
    for p in profiles::gamma_faults(r) {
        let id = match p {
            Part::Top => "SB-D1",
            Part::Message => "SB-D2",
            Part::Sources => "SB-D5",
            Part::Options => "SB-D6",
        };
        if !owners.contains(&id) {
            owners.push(id);
        }
    }
    if owners.is_empty() || owners.contains(&"SB-D1") {
        return Some("SB-D1".into());
    }
    owners.sort_unstable();
    Some(owners.join(" and "))
}

/// A decoding error with its values left out (quoted text, numbers, the body's first bytes):
/// two bodies whose errors have one shape fail the same way.
fn error_shape(e: &str) -> String {
    let e = e.split("; body starts ").next().unwrap_or(e);
    let mut out = String::with_capacity(e.len());
    let mut quoted = false;
    let mut last_digit = false;
    for c in e.chars() {
        match c {
            '"' => {
                if !quoted {
                    out.push_str("\"…\"");
                }
                quoted = !quoted;
                last_digit = false;
            }
            _ if quoted => {}
            '0'..='9' => {
                if !last_digit {
                    out.push('#');
                }
                last_digit = true;
            }
            _ => {
                out.push(c);
                last_digit = false;
            }
        }
    }
    out
}

/// The rule that carries a body's decoding fault `e` when the emulated client's own replies
/// fail to decode the same way (an error of the same shape): a bridge that writes every id, or
/// every body, wrong shows it in the GET probe's body, the malformed requests' answers and the
/// refusals too, and SB-H4, SB-R10 and SB-D9 then show that part skipped naming the rule that
/// judges it on the client's replies (one fault, one verdict).
pub(super) fn client_fault_like(log: &[Exchange], e: &str) -> Option<String> {
    let shape = error_shape(e);
    log.iter().filter(|x| x.kind == Kind::Client).find_map(|x| {
        let r = x.result.as_ref().ok()?;
        let err = profiles::decode_reply(Profile::Gamma, r).err()?;
        (error_shape(&err) == shape).then(|| fault_owner(x).unwrap_or_else(|| "SB-D1".into()))
    })
}

/// Why a rule's own exchange `x` is not judged there: its reply's HTTP framing is broken as the
/// framing of a reply to the emulated client is (the same error, its values left out), which
/// SB-D1 judges ([`fault_owner`]). `None` for any other outcome, or a framing fault the
/// client's replies do not share (then the rule judges it as its own).
pub(super) fn framing_carried(log: &[Exchange], x: &Exchange) -> Option<String> {
    let e = x.result.as_ref().err().filter(|e| e.is_broken_framing())?;
    let shape = error_shape(&e.to_string());
    log.iter()
        .filter(|c| c.kind == Kind::Client)
        .any(|c| matches!(&c.result, Err(f) if f.is_broken_framing() && error_shape(&f.to_string()) == shape))
        .then(|| {
            format!(
                "{}: {e}, as replies to the emulated client are; SB-D1 carries that fault",
                x.label
            )
        })
}

/// Why a rule's own exchange `x` is not judged there: the bridge had stopped answering
/// ([`Exchange::stopped`]: one of the timeouts in a row after which bridgewire gave up, or a
/// request not sent after them), which SB-D1 judges once for the run (the driver settles
/// each timeout as it comes, so this is known when the exchange is read).
pub(super) fn stop_carried(x: &Exchange) -> Option<String> {
    let e = x.result.as_ref().err().filter(|_| x.stopped)?;
    Some(match e {
        TransportError::GaveUp(..) | TransportError::Gone(_) | TransportError::Refused => {
            format!("{}: {e}; SB-D1 carries that fault", x.label)
        }
        TransportError::Timeout { .. }
        | TransportError::Idle { .. }
        | TransportError::Stalled { .. } => format!(
            "{}: {e}, one of the timeouts in a row after which the bridge was taken as stopped (nothing more was sent); SB-D1 carries that fault",
            x.label
        ),
        _ => format!(
            "{}: {e}, where the bridge went (it exited, or stopped accepting connections); SB-D1 carries that fault",
            x.label
        ),
    })
}

/// Why a rule's own exchange `x`, which got no reply, is SB-D1's to judge: its framing is
/// broken as the client's replies' is ([`framing_carried`]), or it is part of the bridge's
/// stop ([`stop_carried`]).
pub(super) fn d1_carries(log: &[Exchange], x: &Exchange) -> Option<String> {
    framing_carried(log, x).or_else(|| stop_carried(x))
}

/// SB-D1's word on the bridge's stop, when it cost a request of the emulated client: where it
/// began (the first of the timeouts in a row after which bridgewire gave up), how many timed
/// out, how many requests were not sent after them. `None` when the run had no stop, or only
/// probes met it.
fn stop_summary(log: &[Exchange]) -> Option<String> {
    if !log.iter().any(|x| x.stopped && x.kind == Kind::Client) {
        return None;
    }
    let first = log.iter().find(|x| x.stopped)?;
    let e = first.result.as_ref().err()?;
    let not_sent = log
        .iter()
        .filter(|x| x.result.as_ref().is_err_and(TransportError::is_not_sent))
        .count();
    let gone = log
        .iter()
        .find_map(|x| match &x.result {
            Err(TransportError::Gone(why)) => Some(why.clone()),
            _ => None,
        })
        .or_else(|| {
            log.iter()
                .find(|x| x.stopped && matches!(x.result, Err(TransportError::Refused)))
                .map(|x| super::client::refused_connection(&x.label))
        });
    if let Some(gone) = gone {
        let went_on = if matches!(first.result, Err(TransportError::Refused)) {
            String::new()
        } else {
            format!("; the request it went on: {}: {e}", first.label)
        };
        return Some(format!(
            "{gone}{went_on}; bridgewire sent none of the {not_sent} request(s) after it"
        ));
    }
    let timed_out = log.iter().filter(|x| x.stopped).count() - not_sent;
    // The liveness requests among them (session starts of fresh chats).
    let probes = log
        .iter()
        .filter(|x| x.stopped && x.label.starts_with(super::client::LIVENESS))
        .count();
    let then = match probes {
        0 => String::new(),
        n => format!(
            "; then {n} session start(s) of fresh chats, sent to learn whether it still answered, timed out too (a bridge deaf to session starts alone reads so: --give-up-after 0 sends every request, each bounded by --timeout)"
        ),
    };
    Some(format!(
        "the bridge stopped answering: {}: {e}{then} (--give-up-after {timed_out}); bridgewire sent none of the {not_sent} request(s) after them",
        first.label
    ))
}

/// Why a reply to the emulated client cannot be read, for a rule that needs its content
/// (messages, options): `None` when it decodes under γ. The rule that judges the cause
/// ([`fault_owner`]) is named, so a rule that meets such a reply is skipped naming it instead
/// of passing or failing on what it could not see (one fault, one verdict).
pub(super) fn unreadable(x: &Exchange) -> Option<String> {
    let owner = fault_owner(x)?;
    let e = x.judged(Profile::Gamma).err().unwrap_or_default();
    if owner == OVER_MAX_BODY {
        return Some(format!("{}: the reply was not read ({e})", x.label));
    }
    Some(format!(
        "{}: the reply cannot be read ({e}); {owner} carries that fault",
        x.label
    ))
}

/// Whether a client reply decodes under γ, as a sub-check of a rule whose catalogue text names
/// decoding: passed when it does, else skipped naming the rule that judges the cause.
pub(super) fn decodes(x: &Exchange) -> SubCheck {
    match unreadable(x) {
        None => SubCheck::pass("decodes", "decodes under profile gamma"),
        Some(why) => SubCheck::skipped("decodes", why),
    }
}

/// A rule that passes only on evidence for all of it ([`Verdict::from_all_subchecks`]).
pub(super) fn strict_from_subchecks(id: &str, subs: Vec<SubCheck>) -> Verdict {
    Verdict::from_all_subchecks(id, subs)
}

/// Whether a reply decodes and carries assistant content (the request was served).
fn served_assistant_content(x: &Exchange) -> bool {
    x.judged(Profile::Gamma).is_ok_and(|r| {
        r.messages
            .iter()
            .any(|m| m.from == From::Assistant && !m.content.is_empty())
    })
}

/// Parser and exception text of the common runtimes, as it leaks into error replies
/// (`(runtime, pattern)`). Each pattern is specific to internals: a plain explanation such as
/// "The request body is not valid JSON." matches none.
const LEAK_PATTERNS: &[(&str, &str)] = &[
    ("Python", r"Traceback \(most recent call last\)"),
    ("Python", r"line \d+ column \d+ \(char \d+\)"),
    ("Python", r#"File "[^"]+", line \d+"#),
    (
        "Python",
        r"Expecting (?:value|property name enclosed in double quotes|',' delimiter)",
    ),
    (
        "Python",
        r"\b(?:JSONDecodeError|KeyError|AttributeError|ValueError|IndexError)\b",
    ),
    ("Node/V8", r"is not a function"),
    (
        "Node/V8",
        r"Cannot read propert(?:y|ies) of (?:undefined|null)",
    ),
    (
        "Node/V8",
        r"Unexpected (?:token|end of JSON input|non-whitespace character)",
    ),
    ("Node/V8", r"\bat \S+ \((?:file://|node:|/)[^)]*:\d+:\d+\)"),
    // A source file's path with its line, as a stack frame names it without the frame's
    // parentheses ("at handle /srv/sb/server.js:212:19"): no user-facing text says that.
    (
        "any",
        r"(?:^|[\s(])(?:/|[A-Za-z]:\\)[\w.\\/-]*\.(?:js|mjs|cjs|ts|py|rb|go|rs|java|kt|php|cs):\d+",
    ),
    // `JSON.parse` since V8 10.9 (Node 20): "Unterminated string in JSON at position 73".
    ("Node/V8", r"in JSON at position \d+"),
    ("Go", r"unexpected end of JSON input"),
    (
        "Python",
        r"'\w+' object (?:is not (?:subscriptable|iterable|callable)|has no attribute ')",
    ),
    ("Python", r"\[Errno \d+\]"),
    // CPython's own TypeError/ValueError/KeyError/AttributeError wordings, as `str(e)` shows
    // them without the class name. Each is the interpreter's exact phrase with its quoted type
    // or literal where it has one: "string indices must be integers, not 'str'", "can only
    // concatenate str (not \"int\") to str", "unhashable type: 'dict'". A person explaining an
    // error does not write these ("`messages` must be a list" is not one of them).
    (
        "Python",
        r"\b(?:string|list|tuple|byte) indices must be integers(?: or slices)?(?:, not '?\w+'?)?",
    ),
    (
        "Python",
        r#"can only concatenate (?:str|list|tuple|bytes) \(not "\w+"\) to \w+"#,
    ),
    ("Python", r"unhashable type: '\w+'"),
    ("Python", r"argument of type '\w+' is not iterable"),
    ("Python", r"module '[\w.]+' has no attribute '"),
    ("Python", r"unsupported operand type\(s\) for "),
    ("Python", r"object of type '\w+' has no len\(\)"),
    ("Python", r"invalid literal for int\(\) with base \d+"),
    (
        "Python",
        r"(?:not enough|too many) values to unpack \(expected \d+",
    ),
    (
        "Python",
        r"the JSON object must be str, bytes or bytearray, not \w+",
    ),
    // json.JSONDecodeError's text without its `(char N)`: "Extra data: line 1 column 5",
    // "Expecting value: line 1 column 1".
    (
        "Python",
        r"(?:Extra data|Expecting value|Invalid control character at|Unterminated string starting at): line \d+ column \d+",
    ),
    // A failed upstream call's system error, as Node, Ruby and others word it.
    (
        "any",
        r"\b(?:connect )?E(?:CONNREFUSED|CONNRESET|TIMEDOUT|NOTFOUND|HOSTUNREACH|PIPE) \S*\d",
    ),
    ("Go", r"json: cannot unmarshal"),
    ("Go", r"invalid character '.{1,4}' (?:looking for|after|in)"),
    ("Go", r"goroutine \d+ \["),
    ("Go", r"\bpanic: |runtime error: "),
    (
        "Java",
        r"\b(?:java|javax|jakarta)\.[a-z]+\.[A-Za-z.]*(?:Exception|Error)\b",
    ),
    ("Java", r"com\.fasterxml\.jackson"),
    ("Java", r"\bat [\w$.]+\([\w$]+\.(?:java|kt|scala):\d+\)"),
    (
        "Java",
        r"\b(?:NullPointerException|JsonParseException|MismatchedInputException)\b",
    ),
    (".NET", r"\bSystem\.(?:[A-Z]\w*\.)*[A-Z]\w*Exception\b"),
    (".NET", r"LineNumber: \d+ \| BytePositionInLine: \d+"),
    (
        ".NET",
        r"Object reference not set to an instance of an object",
    ),
    (".NET", r"\bat [\w.`<>]+\(.*\) in .+:line \d+"),
    ("Rust", r"panicked at"),
    // serde_json's own error text: one of its phrases followed by its position. A position or
    // a "missing field `x`" alone is how a person may word an error too (not a leak).
    (
        "Rust",
        r"(?:expected (?:`[^`]*`(?: or `[^`]*`)?|ident|value)|invalid (?:escape|number|unicode code point|type: [^\n]*|value: [^\n]*|length \d+[^\n]*)|number out of range|control character \(\\u0000-\\u001F\) found while parsing a string|key must be a string|lone leading surrogate in hex escape|trailing (?:comma|characters)|unexpected end of hex escape|recursion limit exceeded|missing field `[^`]*`|unknown (?:field|variant) `[^`]*`[^\n]*|duplicate field `[^`]*`) at line \d+ column \d+",
    ),
    ("Rust", r"EOF while parsing"),
    // serde's type mismatch without a position (`from_value`): its own names of the types.
    (
        "Rust",
        r"invalid type: (?:string|integer|floating point|boolean|null|map|sequence|unit value|char|byte array|Option value|newtype struct|enum|unit variant|newtype variant|tuple variant|struct variant)\b[^,\n]*, expected",
    ),
    // Rust web frameworks' rejection text around serde's (axum's Json, actix-web's).
    (
        "Rust",
        r"Failed to deserialize the JSON body into the target type",
    ),
    ("Rust", r"Json deserialize error: "),
    ("Rust", r"called `(?:Option|Result)::unwrap\(\)`"),
    ("Rust", r"stack backtrace:"),
    ("Ruby", r"\bJSON::ParserError\b"),
    ("Ruby", r"\b(?:NoMethodError|ArgumentError|NameError)\b"),
    ("Ruby", r"undefined method `"),
    ("Ruby", r"\.rb:\d+:in `"),
    ("PHP", r"PHP (?:Fatal error|Warning|Notice|Parse error)"),
    ("PHP", r"Uncaught [A-Z]\w*(?:Exception|Error)"),
    ("PHP", r"json_decode\(\)"),
    ("PHP", r"\.php(?::\d+| on line \d+)"),
    (
        "Node/V8",
        r"\b(?:TypeError|ReferenceError|SyntaxError|RangeError): ",
    ),
    ("any", r"(?i)stack ?trace"),
    ("any", r"\b[A-Z]\w*Exception: "),
    // pydantic's ValidationError as `str(e)` gives it (FastAPI's validation errors too): its
    // head line, its `[type=…, input_value=…` tail, its documentation link.
    ("Python", r"\b\d+ validation errors? for [A-Za-z_]\w*"),
    ("Python", r"\[type=[a-z_]+, input_value="),
    ("Python", r"errors\.pydantic\.dev/"),
    // Swift's DecodingError as `String(describing:)` gives it (a Swift bridge's `\(error)`).
    (
        "Swift",
        r"\b(?:typeMismatch|keyNotFound|valueNotFound|dataCorrupted)\((?:Swift\.|CodingKeys\()",
    ),
    ("Swift", r"\bSwift\.DecodingError\b"),
    ("Swift", r"CodingKeys\(stringValue: "),
];

/// Text that looks like a stack trace or an internal exception: the runtime it is typical of
/// and the matched text.
pub fn leaks_internals(text: &str) -> Option<(&'static str, String)> {
    static RES: std::sync::OnceLock<Vec<(&'static str, regex::Regex)>> = std::sync::OnceLock::new();
    let res = RES.get_or_init(|| {
        LEAK_PATTERNS
            .iter()
            .map(|(rt, p)| (*rt, regex::Regex::new(p).expect("valid leak pattern")))
            .collect()
    });
    res.iter()
        .find_map(|(rt, re)| re.find(text).map(|m| (*rt, m.as_str().to_string())))
}

/// SB-H2: "full response in under 60 s" (the reference's figure, the app's default timeout).
/// The app's timeout counts only time without data, so a reply that keeps coming for longer is
/// still shown; this SHOULD judges the whole reply's time.
pub const SB_H2_WITHIN: Duration = Duration::from_secs(60);

/// Runs every scenario and judges every rule.
pub async fn check(cfg: &CheckConfig) -> Result<CheckReport, TransportError> {
    let mut d = Driver::new(&cfg.url, cfg.key.clone(), cfg.limits, cfg.seed)?;
    d.give_up_after = cfg.give_up_after;
    d.liveness = true;
    d.process = cfg.process.clone();
    // Each verdict is also handed to the live reporter (an interrupted run reports it).
    let mut v = VerdictLog::new(cfg.live.clone());
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);

    // SB-H2: the first request of the run, timed (a cold start counts).
    let mut s = Screen::new(&mut rng);
    let i = s.start(&mut d, TIMED_START).await;
    v.push(match &d.log[i].result {
        Err(e @ TransportError::TooLarge(_)) => {
            Verdict::skipped("SB-H2", format!("session start: {e}"))
        }
        // A bridge that answers nothing stops for every rule: SB-D1 judges it once.
        Err(_) if d.log[i].stopped => {
            Verdict::skipped("SB-H2", stop_carried(&d.log[i]).unwrap_or_default())
        }
        // Broken framing is SB-D1's ("received completely"), judged on this reply too.
        Err(e) if e.is_broken_framing() => Verdict::skipped(
            "SB-H2",
            format!("session start: {e}; SB-D1 carries that fault"),
        ),
        Err(e) => Verdict::fail("SB-H2", format!("session start: {e}")),
        Ok(r) if r.elapsed > SB_H2_WITHIN => Verdict::fail(
            "SB-H2",
            format!(
                "full reply after {:.1?}, over the {SB_H2_WITHIN:?} the reference asks for",
                r.elapsed
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

    // SB-H1: session start of a new chat; any status, recorded. Whether it decodes under γ is
    // shown as a sub-check but judged by SB-D1 (one fault, one verdict).
    let mut s = Screen::new(&mut rng);
    let i = s.start(&mut d, NEW_CHAT_START).await;
    let x = &d.log[i];
    v.push(strict_from_subchecks(
        "SB-H1",
        vec![
            match &x.result {
                Ok(r) => SubCheck::pass("status", format!("status {}", r.status)),
                Err(e @ TransportError::TooLarge(_)) => {
                    SubCheck::skipped("status", format!("{}: {e}", x.label))
                }
                Err(e) if e.is_broken_framing() => SubCheck::skipped(
                    "status",
                    format!("{}: {e}; SB-D1 carries that fault", x.label),
                ),
                Err(_) if x.stopped => {
                    SubCheck::skipped("status", stop_carried(x).unwrap_or_default())
                }
                Err(e) => SubCheck::fail("status", format!("{}: no HTTP reply ({e})", x.label)),
            },
            decodes(x),
        ],
    ));

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
            TRAILING_SLASH_PROBE,
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
    // Bodies that do not decode, judged once the client's own replies are in (below).
    let mut h4_undecoded = Vec::new();
    // Bodies over bridgewire's own --max-body: not judged.
    let mut h4_skipped: Vec<String> = Vec::new();
    // Exchanges with no readable reply, judged below beside the client's.
    let mut h4_unframed = Vec::new();
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
            Err(TransportError::TooLarge(_)) => h4_skipped.extend(over_max_body(x)),
            Err(_) if x.stopped => h4_skipped.extend(stop_carried(x)),
            // Judged once the client's own replies are in: framing broken as theirs is is
            // SB-D1's (one fault, one verdict).
            Err(_) => h4_unframed.push((m, i)),
            Ok(r) => {
                if r.status != 405 && r.status != 404 {
                    h4_fail.push(format!("{m}: status {} (want 405 or 404)", r.status));
                }
                let allow = r.header_list("allow").unwrap_or_default();
                if !super::transport::allows(&allow, "POST") {
                    h4_fail.push(format!("{m}: no `Allow: POST` (got {allow:?})"));
                }
                if r.after_head > 0 {
                    h4_fail.push(format!(
                        "{m}: {} byte(s) of content after the header section (RFC 9110 §9.3.2: \
                         \"the server MUST NOT send content in the response\" to HEAD; on a \
                         kept-alive connection the client reads them as the start of the next \
                         reply)",
                        r.after_head
                    ));
                }
                if m != "HEAD"
                    && !r.body.is_empty()
                    && let Err(e) = profiles::decode_reply(Profile::Gamma, r)
                {
                    h4_undecoded.push((m, e));
                }
                h4_notes.push(format!("{m} {}", r.status));
            }
        }
    }

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
    // Recorded only: with no HTTP reply there is nothing to record (never a pass on it).
    v.push(match &d.log[i].result {
        Ok(r) => pass_with(
            "SB-H5",
            vec![format!(
                "status {}, Allow {:?}, Access-Control-Allow-Methods {:?}",
                r.status,
                r.header_list("allow").unwrap_or_default(),
                r.header_list("access-control-allow-methods")
                    .unwrap_or_default()
            )],
        ),
        Err(e) => Verdict::not_run(
            "SB-H5",
            format!("the OPTIONS request got no readable HTTP reply ({e}): nothing to record"),
        ),
    });

    // Authentication.
    let mut key_probes = None;
    auth(&mut d, &mut rng, cfg, &mut v, &mut key_probes).await;

    // The conversation: plain sends, non-ASCII text, sources, context via ids.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "conversation/start").await;
    let hello = s.send(&mut d, HELLO, "conversation/hello").await;
    s.send(
        &mut d,
        "Grüße aus Köln 👋 – see https://example.com/ä",
        "conversation/non-ascii",
    )
    .await;
    s.send(&mut d, "search side bridge", "conversation/search")
        .await;
    // SB-R1.
    let r1 = sb_r1(&mut d, &mut rng, hello).await;
    v.push(r1);
    // SB-R2: an empty send. A 5xx or a dropped connection is seen without reading the body;
    // decoding is SB-D1's (a sub-check skipped naming it), "not ended" needs the body.
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "empty-send/start").await;
    let i = s.send(&mut d, "", "empty-send/send").await;
    v.push(match i {
        None => Verdict::skipped("SB-R2", "the session ended before the send"),
        Some(i) => {
            let x = &d.log[i];
            let no_5xx = match &x.result {
                // No reply at all is not a 5xx: receiving it is SB-D1's ("received completely").
                Err(_) => SubCheck::skipped("no-5xx", unreadable(x).unwrap_or_default()),
                Ok(r) if r.status >= 500 => {
                    SubCheck::fail("no-5xx", format!("{}: status {}", x.label, r.status))
                }
                Ok(r) => SubCheck::pass("no-5xx", format!("status {}", r.status)),
            };
            let not_ended = match (x.judged(Profile::Gamma), unreadable(x)) {
                (Ok(r), _) if r.options.and_then(|o| o.end_session) == Some(true) => {
                    SubCheck::fail("not-ended", "the empty send ended the session")
                }
                (Ok(r), _) => SubCheck::pass(
                    "not-ended",
                    format!(
                        "INFO: {} message(s) in reply to the empty turn",
                        r.messages.len()
                    ),
                ),
                (Err(_), why) => SubCheck::skipped("not-ended", why.unwrap_or_default()),
            };
            strict_from_subchecks("SB-R2", vec![no_5xx, decodes(x), not_ended])
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
    // A 5xx is seen without reading the body; "no session end" needs the body: a reply that
    // does not decode, or none at all, leaves the rule skipped naming the rule that carries it.
    let (mut r4, mut r4_unread) = (Vec::new(), Vec::new());
    for i in std::iter::once(a).chain(b) {
        let x = &d.log[i];
        if is_5xx(x) {
            r4.push(format!("{}: status {}", x.label, x.status().unwrap_or(0)));
        } else if let Some(why) = unreadable(x) {
            r4_unread.push(why);
        } else if ends(x) {
            r4.push(format!("{}: the session was ended", x.label));
        }
    }
    v.push(if !r4.is_empty() {
        Verdict::fail("SB-R4", r4.join("; "))
    } else if !r4_unread.is_empty() {
        Verdict::skipped(
            "SB-R4",
            format!(
                "whether the session was ended cannot be seen: {}",
                r4_unread.join("; ")
            ),
        )
    } else {
        Verdict::pass("SB-R4")
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
    v.push(
        same_reply(
            "SB-R5",
            &mut d,
            &mut rng,
            a,
            c,
            Control {
                like: &canon,
                text,
                label: "bytes/canonical-control",
                variant_like: &app,
                variant_label: "bytes/app-control",
            },
            "the app's bytes (\\/, sources:[], shuffled keys)",
        )
        .await,
    );

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
    v.push(
        same_reply(
            "SB-R7",
            &mut d,
            &mut rng,
            c,
            a,
            Control {
                like: &plain,
                text: "hello keys",
                label: "extra-keys/plain-control",
                variant_like: &extra,
                variant_label: "extra-keys/extra-control",
            },
            "a request with `type` and `futureField`",
        )
        .await,
    );

    // SB-R8: a newer minor version.
    let mut v10 = Screen::new(&mut rng);
    let mut v11 = Screen::new(&mut rng);
    v11.version = "1.1".into();
    let s10 = v10.start(&mut d, "version/1.0-start").await;
    let s11 = v11.start(&mut d, "version/1.1-start").await;
    // A refusal at session start is the rule's verdict, not a "session ended" skip.
    let refused = |x: &Exchange| ends(x) || x.status().is_some_and(|s| s >= 400);
    if refused(&d.log[s11]) && !refused(&d.log[s10]) {
        v.push(Verdict::fail(
            "SB-R8",
            format!(
                "a `\"sidebridge\":\"1.1\"` session start was refused ({}); the same with 1.0 was not ({})",
                d.log[s11].describe_reply(),
                d.log[s10].describe_reply()
            ),
        ));
    } else {
        let a = v10.send(&mut d, "hello version", "version/1.0").await;
        let c = v11.send(&mut d, "hello version", "version/1.1").await;
        v.push(
            same_reply(
                "SB-R8",
                &mut d,
                &mut rng,
                c,
                a,
                Control {
                    like: &v10,
                    text: "hello version",
                    label: "version/1.0-control",
                    variant_like: &v11,
                    variant_label: "version/1.1-control",
                },
                "a `\"sidebridge\":\"1.1\"` request",
            )
            .await,
        );
    }

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
    // Recorded only, each probe a sub-check: a reply that cannot be read records nothing, so
    // the rule is not run (naming why) rather than passing on it; INFO never fails the run.
    let mut r9 = Vec::new();
    for (label, body) in probes {
        let i = d.probe(label, body.into_bytes()).await;
        r9.push(recorded(&d.log[i], label.trim_start_matches("odd/"), |r| {
            format!(
                "{} system message(s), endSession {}",
                r.messages.iter().filter(|m| m.from == From::System).count(),
                r.options.and_then(|o| o.end_session).unwrap_or(false)
            )
        }));
    }
    v.push(record_verdict("SB-R9", r9));
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
    // Every probe is judged on all counts (status, shape, leaks), each a sub-check; leaked
    // internals are looked for in any status, in the messages or, undecodable, the raw body.
    let mut r10 = Vec::new();
    for (label, body) in probes {
        let i = d.probe(label, body.into_bytes()).await;
        let x = &d.log[i];
        let name = label.trim_start_matches("malformed/");
        let r = match &x.result {
            Err(TransportError::TooLarge(_)) => {
                r10.push(SubCheck::skipped(
                    name,
                    over_max_body(x).unwrap_or_default(),
                ));
                continue;
            }
            Err(e) => {
                r10.push(match d1_carries(&d.log, x) {
                    Some(why) => SubCheck::skipped(name, why),
                    None => SubCheck::fail(name, e.to_string()),
                });
                continue;
            }
            Ok(r) => r,
        };
        let mut problems = Vec::new();
        let mut carried = None;
        let shown = match x.judged(Profile::Gamma) {
            Err(e) => {
                match client_fault_like(&d.log, &e) {
                    Some(owner) => {
                        carried = Some(format!(
                            "not a Side Bridge body ({e}), as the client's replies are not; {owner} carries that fault"
                        ))
                    }
                    None => problems.push(format!("not a Side Bridge body ({e})")),
                }
                String::from_utf8_lossy(&r.body[..r.body.len().min(64 * 1024)]).into_owned()
            }
            Ok(reply) => {
                if reply.messages.is_empty() {
                    problems.push("no message explains the error".to_string());
                }
                reply
                    .messages
                    .iter()
                    .map(|m| m.content.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            }
        };
        if !(400..500).contains(&r.status) {
            problems.push(format!("status {} (want 4xx)", r.status));
        }
        if let Some((runtime, text)) = leaks_internals(&shown) {
            problems.push(format!(
                "internal error text ({runtime}) shown to the user: {text:?} in {:?}",
                shown.chars().take(300).collect::<String>()
            ));
        }
        r10.push(if let (true, Some(c)) = (problems.is_empty(), &carried) {
            SubCheck::skipped(name, format!("status {}: {c}", r.status))
        } else if problems.is_empty() {
            SubCheck::pass(name, format!("status {}", r.status))
        } else {
            SubCheck::fail(
                name,
                format!("status {}: {}", r.status, problems.join("; ")),
            )
        });
    }
    // Both probes are the rule's whole scenario (malformed JSON, wrong field types): neither
    // is ever "not applicable", so a sub-check that could not be judged is unseen evidence and
    // the rule must not pass beside it (a probe with no HTTP reply fails, since the probes are
    // SB-R10's own, not the emulated client's; one whose framing is broken as the client's
    // replies' is is skipped naming SB-D1, which judges it, and the rule with it).
    v.push(strict_from_subchecks("SB-R10", r10));

    // The scenario rules (SB-R3, SB-R6, SB-R11, SB-S1…S4, SB-R12), driven by the fixture.
    super::scenarios::run(&mut d, &mut rng, cfg, &mut v).await;

    // Connection reuse. The app's HTTP client is the platform's (reference §1.1), which keeps
    // an HTTP/1.1 connection open and sends the screen's next request on it; a bridge whose
    // reply does not say `Connection: close` has to read that request (RFC 9112 §9.3: "A
    // server that does not support persistent connections MUST send the "close" connection
    // option in every response message"). The requests above each had a connection of their
    // own; here a new chat's session start and first send share one. A bridge that closed the
    // connection before the send was written is answered on a new one (legal); one that closes
    // it once the send was written (never sent twice, as the app does not) or leaves it open
    // and never answers there fails SB-D1 ("received completely") naming that cause.
    d.set_keep_alive(true);
    let mut s = Screen::new(&mut rng);
    s.start(&mut d, "keep-alive/start").await;
    s.send(&mut d, HELLO, "keep-alive/send").await;
    d.set_keep_alive(false);

    // Every reply: SB-H3 over the run, SB-D1…D9.
    let mut h3 = Vec::new();
    let mut h3_notes = Vec::new();
    for x in &d.log {
        for s in &x.redirects {
            // Only a POST can be re-sent as a GET; another method redirected is not the 405 SB-H4
            // asks for, and judged there (one fault, one verdict).
            if matches!(s, 301..=303) && x.method != "POST" {
                h3_notes.push(format!(
                    "{}: {s} (a {}: judged by SB-H4)",
                    x.label, x.method
                ));
            } else if matches!(s, 301..=303) {
                h3.push(format!(
                    "{}: {s} (the client may re-send the POST as a GET)",
                    x.label
                ));
            } else {
                h3_notes.push(format!("{}: {s} followed", x.label));
            }
        }
    }
    let h3_unread = over_max_body(&d.log[probe]).or_else(|| d1_carries(&d.log, &d.log[probe]));
    if let (Err(e), None) = (&d.log[probe].result, &h3_unread) {
        h3.push(format!("{}: {e}", d.log[probe].label));
    }
    v.push(if !h3.is_empty() {
        Verdict::fail("SB-H3", h3.join("; "))
    } else if let Some(why) = h3_unread {
        Verdict::skipped("SB-H3", why)
    } else {
        pass_with("SB-H3", h3_notes)
    });
    // SB-H4, now that the client's replies are in: a body that does not decode as they do not
    // is their rule's fault (one fault, one verdict).
    let mut h4_skips = h4_skipped;
    for (m, i) in h4_unframed {
        let x = &d.log[i];
        match (framing_carried(&d.log, x), &x.result) {
            (Some(why), _) => h4_skips.push(why),
            (None, Err(e)) => h4_fail.push(format!("{m}: {e}")),
            (None, Ok(_)) => {}
        }
    }
    for (m, e) in h4_undecoded {
        match client_fault_like(&d.log, &e) {
            Some(owner) => h4_skips.push(format!(
                "{m}: the body does not decode as Side Bridge ({e}), as the client's replies do not; {owner} carries that fault"
            )),
            None => h4_fail.push(format!(
                "{m}: the body does not decode as Side Bridge ({e})"
            )),
        }
    }
    v.push(if !h4_fail.is_empty() {
        Verdict::fail("SB-H4", h4_fail.join("; "))
    } else if !h4_skips.is_empty() {
        Verdict::skipped("SB-H4", h4_skips.join("; "))
    } else {
        pass_with("SB-H4", h4_notes)
    });
    let refusals: Vec<usize> = key_probes
        .iter()
        .flat_map(|kp| kp.probes.iter().flat_map(|p| p.steps.iter().copied()))
        .collect();
    v.extend(reply_rules(&d.log, &refusals));
    if let Some(kp) = &key_probes {
        v.extend(key_verdicts(&d.log, kp));
    }

    // One fault, one verdict: when the endpoint itself answers the client's POST with a
    // 301/302/303, every reply the other rules would judge is that redirect's empty body.
    let redirect = d.log.iter().find_map(|x| {
        let r = x.result.as_ref().ok()?;
        (x.kind == Kind::Client && matches!(r.status, 301..=303)).then(|| {
            format!(
                "not judged: the bridge redirects (SB-H3): {} answered {} to {:?}",
                x.label,
                r.status,
                r.header("location").unwrap_or("")
            )
        })
    });
    if let Some(why) = redirect {
        for x in v.iter_mut().filter(|x| x.id != "SB-H3") {
            *x = Verdict::skipped(&x.id, why.clone());
        }
    }

    let profiles = profile_views(&d.log);
    let order: Vec<String> = crate::rule::catalogue()
        .into_iter()
        .filter(|r| r.protocol == "sidebridge")
        .map(|r| r.id)
        .collect();
    v.sort_by_key(|x| order.iter().position(|o| *o == x.id).unwrap_or(usize::MAX));
    Ok(CheckReport {
        verdicts: v.into_vec(),
        profiles,
        exchanges: d.log,
    })
}

fn is_session_start(x: &Exchange) -> bool {
    serde_json::from_slice::<Value>(&x.request)
        .ok()
        .is_some_and(|v| v.get("messages").is_none())
}

pub(super) fn request_has_history(x: &Exchange) -> bool {
    serde_json::from_slice::<Value>(&x.request)
        .ok()
        .is_some_and(|v| v.get("history").is_some())
}

/// One reply of an INFO rule that only records: passed with what was seen (status and
/// `what` of the decoded reply), or not run when there is nothing readable to record.
fn recorded(x: &Exchange, name: &str, what: impl Fn(&Reply) -> String) -> SubCheck {
    let status = match &x.result {
        Err(e) => return SubCheck::new(name, Status::NotRun, format!("no HTTP reply ({e})")),
        Ok(r) => r.status,
    };
    match x.judged(Profile::Gamma) {
        Ok(r) => SubCheck::pass(name, format!("status {status}, {}", what(&r))),
        Err(e) => SubCheck::new(
            name,
            Status::NotRun,
            format!(
                "status {status}, the reply does not decode ({e}){}",
                if (200..300).contains(&status) {
                    ""
                } else {
                    "; SB-D9 judges it"
                }
            ),
        ),
    }
}

/// An INFO rule over [`recorded`] sub-checks: not run when any reply could not be read (the
/// detail names each), else passed with every record as its detail.
fn record_verdict(id: &str, subs: Vec<SubCheck>) -> Verdict {
    let unread: Vec<String> = subs
        .iter()
        .filter(|c| c.status != Status::Pass)
        .map(|c| format!("{}: {}", c.name, c.evidence))
        .collect();
    let v = if unread.is_empty() {
        pass_with(
            id,
            subs.iter()
                .map(|c| format!("{}: {}", c.name, c.evidence))
                .collect(),
        )
    } else {
        Verdict::not_run(id, format!("nothing to record: {}", unread.join("; ")))
    };
    v.with_subchecks(subs)
}

/// SB-D5's URL: absolute, scheme http or https (either case: RFC 3986 §3.1), and an
/// authority with a host (RFC 3986 §3.2, RFC 9110 §4.2.1: an http(s) URI has a non-empty host).
/// Judged on the text as written: a WHATWG parser (the `url` crate) reads `https:example.com`
/// or `https:///example.com` as `https://example.com/`; RFC 3986 reads no authority, no host.
pub(super) fn absolute_http_url(u: &str) -> bool {
    let Some((scheme, rest)) = u.split_once(':') else {
        return false;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return false;
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        host_port.split_inclusive(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    !host.is_empty()
        && reqwest::Url::parse(u).is_ok_and(|p| {
            matches!(p.scheme(), "http" | "https") && p.host_str().is_some_and(|h| !h.is_empty())
        })
}

/// The text of SB-R1's send, the first of its conversation.
const HELLO: &str = "Hello Side Bridge!";

/// Answers a reply shows: assistant messages with content.
fn answers(r: &Reply) -> Vec<&Msg> {
    r.messages
        .iter()
        .filter(|m| m.from == From::Assistant && !m.content.is_empty())
        .collect()
}

/// SB-R1: the send whose message is also the last history item (the app's habit) is answered
/// once. A content repeated in the reply is the history's copy answered again. Answered
/// by two or more assistant messages of different wording, the same text is sent as a control
/// in a fresh chat without history (only then: a bridge answering once sees no extra traffic).
/// A bridge that answers with two messages every time answers the control with two as well and
/// passes. Fewer answers there is not proof on its own (the app never sends that request; see
/// [`sb_r1_other_text`], which then tells the answers to the message from the ones that do not
/// depend on it).
async fn sb_r1(d: &mut Driver, rng: &mut Rng, hello: Option<usize>) -> Verdict {
    let Some(i) = hello else {
        return Verdict::skipped("SB-R1", "the session ended before the first send");
    };
    if is_5xx(&d.log[i]) {
        return Verdict::fail(
            "SB-R1",
            format!(
                "the message was not answered: status {}",
                d.log[i].status().unwrap_or(0)
            ),
        );
    }
    let r = match d.log[i].judged(Profile::Gamma) {
        Err(_) => return Verdict::skipped("SB-R1", unreadable(&d.log[i]).unwrap_or_default()),
        Ok(r) => r,
    };
    let shown: Vec<&Msg> = r
        .messages
        .iter()
        .filter(|m| !m.content.is_empty())
        .collect();
    if let Some((_, m)) = shown
        .iter()
        .enumerate()
        .find(|(k, m)| shown[..*k].iter().any(|o| o.content == m.content))
    {
        return Verdict::fail(
            "SB-R1",
            format!(
                "the message was answered twice (it is also the last history item): {:?}",
                m.content
            ),
        );
    }
    if shown.is_empty() {
        return Verdict::fail("SB-R1", "the message was not answered");
    }
    let n = answers(&r).len();
    if n < 2 {
        return Verdict::pass("SB-R1");
    }
    let mut c = Screen::new(rng);
    c.send_history = false;
    c.start(d, "conversation/hello-control-start").await;
    let control = c.send(d, HELLO, "conversation/hello-control").await;
    let texts = |r: &Reply| {
        answers(r)
            .iter()
            .map(|m| format!("{:?}", m.content))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(ci) = control else {
        return Verdict::skipped(
            "SB-R1",
            format!(
                "{n} answers ({}); the control without history (to see whether it is answered once) could not be sent: its session ended at its start",
                texts(&r)
            ),
        );
    };
    match d.log[ci].judged(Profile::Gamma) {
        Err(_) => Verdict::skipped(
            "SB-R1",
            format!(
                "{n} answers ({}); whether the bridge answers this text with as many without the history's copy cannot be seen: {}",
                texts(&r),
                unreadable(&d.log[ci]).unwrap_or_default()
            ),
        ),
        Ok(rc) if answers(&rc).len() < n => {
            let without = format!(
                "{} without history ({}: {})",
                answers(&rc).len(),
                d.log[ci].label,
                texts(&rc)
            );
            sb_r1_other_text(d, rng, &r, &texts(&r), &without).await
        }
        Ok(rc) => pass_with(
            "SB-R1",
            vec![format!(
                "{n} answers, as many as without history ({}): the bridge answers with {n} messages",
                answers(&rc).len()
            )],
        ),
    }
}

/// SB-R1 once the control without history got fewer answers than the send. That control is a
/// request the app never sends (no history in a chat whose bridge never asked for that:
/// reference §1.4, §3.2), so fewer answers there are no proof: a bridge may answer from what
/// the history shows, e.g. an assistant welcome when the history holds the chat's first user
/// message and none without history (legal: the rule asks only that the message is answered
/// once). Counting answers cannot tell that welcome from a second answer to the history's copy
/// of the message (both add one message exactly where the history is sent), so the answers are
/// told apart by what they answer: the same first send with another text, in a fresh chat with
/// its history (a request the app sends). An answer that the other text gets word for word
/// too does not depend on the message (a welcome, a banner): it is not an answer to it. Two or
/// more answers that change with the message answer it more than once: failed (answering the
/// history's copy again in other words, as a bridge reading both `messages` and the last
/// `history` item does). Nothing readable to compare with: skipped naming why.
async fn sb_r1_other_text(
    d: &mut Driver,
    rng: &mut Rng,
    r: &Reply,
    texts: &str,
    without: &str,
) -> Verdict {
    const OTHER: &str = "Good morning, Side Bridge!";
    let n = answers(r).len();
    let mut o = Screen::new(rng);
    o.start(d, "conversation/other-text-start").await;
    let Some(oi) = o.send(d, OTHER, "conversation/other-text").await else {
        return Verdict::skipped(
            "SB-R1",
            format!(
                "{n} answers ({texts}), {without}; another text in a fresh chat (to tell answers to the message from ones that do not depend on it) could not be sent: its session ended at its start"
            ),
        );
    };
    let ro = match d.log[oi].judged(Profile::Gamma) {
        Ok(ro) => ro,
        Err(_) => {
            return Verdict::skipped(
                "SB-R1",
                format!(
                    "{n} answers ({texts}), {without}; which of them depend on the message cannot be seen: {}",
                    unreadable(&d.log[oi]).unwrap_or_default()
                ),
            );
        }
    };
    let other: Vec<&str> = answers(&ro).iter().map(|m| m.content.as_str()).collect();
    let (fixed, to_message): (Vec<&Msg>, Vec<&Msg>) = answers(r)
        .into_iter()
        .partition(|m| other.contains(&m.content.as_str()));
    let quoted = |ms: &[&Msg]| {
        ms.iter()
            .map(|m| format!("{:?}", m.content))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if to_message.len() >= 2 {
        Verdict::fail(
            "SB-R1",
            format!(
                "the message was answered again as the last history item: {n} answers ({texts}), {} of them changing with the message ({OTHER:?} in a fresh chat got {}: {}); {without}",
                to_message.len(),
                d.log[oi].label,
                quoted(&answers(&ro))
            ),
        )
    } else {
        pass_with(
            "SB-R1",
            vec![format!(
                "{n} answers, {without}; {} also answered {OTHER:?} in a fresh chat ({}), so not an answer to this message: answered once",
                quoted(&fixed),
                d.log[oi].label,
            )],
        )
    }
}

/// What the app acts on in a reply, when its text cannot be compared: the status class, each
/// message's `from`, whether its content is shown (non-empty) and whether it cites sources,
/// and the session options (`endSession` absent reads as false).
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    class: Option<u16>,
    messages: Vec<(From, bool, bool)>,
    disable_send_history: Option<bool>,
    end_session: bool,
}

impl Shape {
    fn of(x: &Exchange, r: &Reply) -> Shape {
        let o = r.options.unwrap_or_default();
        Shape {
            class: x.status().map(|s| s / 100),
            messages: r
                .messages
                .iter()
                .map(|m| (m.from, !m.content.is_empty(), !m.sources.is_empty()))
                .collect(),
            disable_send_history: o.disable_send_history,
            end_session: o.end_session == Some(true),
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let msgs: Vec<String> = self
            .messages
            .iter()
            .map(|(from, shown, cites)| {
                format!(
                    "{}{}{}",
                    from.as_str(),
                    if *shown { "" } else { " (empty)" },
                    if *cites { " with sources" } else { "" }
                )
            })
            .collect();
        let disable = match self.disable_send_history {
            None => "absent".to_string(),
            Some(b) => b.to_string(),
        };
        write!(
            f,
            "status {}xx, messages [{}], disableSendHistory {disable}, endSession {}",
            self.class.unwrap_or(0),
            msgs.join(", "),
            self.end_session
        )
    }
}

/// The system messages `variant` adds to `base`'s messages (from and content, in order), when
/// that is the only difference: a bridge may say more (a note on the version it speaks, on the
/// keys it ignored) and still serve the request as it serves the plain one. `None` when a
/// message of `base` is missing or another message is added.
fn added_system_notes(variant: &Reply, base: &Reply) -> Option<Vec<String>> {
    let mut want = base.messages.iter().peekable();
    let mut notes = Vec::new();
    for m in &variant.messages {
        match want.peek() {
            Some(b) if b.from == m.from && b.content == m.content => {
                want.next();
            }
            _ if m.from == From::System => notes.push(m.content.clone()),
            _ => return None,
        }
    }
    (want.next().is_none() && !notes.is_empty()).then_some(notes)
}

/// What a reply's options do to the chats [`same_reply`] compares, each fresh (session open,
/// history on): whether it ends the session, whether it turns history off. `endSession: false`
/// and `disableSendHistory: false` change nothing there, as absent options do.
fn effect(r: &Reply) -> (bool, bool) {
    let o = r.options.unwrap_or_default();
    (
        o.end_session == Some(true),
        o.disable_send_history == Some(true),
    )
}

/// The request a rule compares a variant with, to send again as a control: a fresh chat of
/// this style, version and keys, started, then sent `text` (labelled `label`).
struct Control<'a> {
    like: &'a Screen,
    text: &'a str,
    label: &'a str,
    /// The variant's own request, sent again (labelled `variant_label`) when the base's
    /// control reproduced the base reply: a bridge whose replies vary can repeat one by chance.
    variant_like: &'a Screen,
    variant_label: &'a str,
}

/// A fresh chat of `like`'s style, version and keys, started, then sent `text`: the index of
/// the send, `None` when its session ended at its start.
async fn send_like(
    d: &mut Driver,
    rng: &mut Rng,
    like: &Screen,
    text: &str,
    label: &str,
) -> Option<usize> {
    let mut c = Screen::new(rng);
    c.style = like.style;
    c.version = like.version.clone();
    c.extra = like.extra.clone();
    c.start(d, &format!("{label}-start")).await;
    c.send(d, text, label).await
}

/// A variant request judged by the reply a base request got (SB-R5, SB-R7, SB-R8).
///
/// Replies equal in content, status class and what their options do ([`effect`]) pass. When they differ, the base request is sent
/// again in a fresh chat (lazily: a deterministic bridge sees no extra traffic). A control
/// equal to the base reply sends the variant again too: its reply reproduced puts the
/// difference on the variant (failed); another reply shows replies that vary, as below. A control that differs
/// too shows a bridge whose replies vary between identical requests (a model, a counter): the
/// content cannot be compared (a sub-check skipped saying so) and the rule judges the shape the
/// app acts on ([`Shape`]): the variant's against the base's. The rule passes or fails on that
/// shape, the evidence it has; when even the control's shape differs from the base's, no
/// shape is stable enough to judge and the rule is skipped naming why.
async fn same_reply(
    id: &str,
    d: &mut Driver,
    rng: &mut Rng,
    variant: Option<usize>,
    base: Option<usize>,
    control: Control<'_>,
    what: &str,
) -> Verdict {
    let (Some(a), Some(b)) = (variant, base) else {
        return Verdict::skipped(id, "a session ended before the send");
    };
    if let Some(why) = stop_carried(&d.log[a]) {
        return Verdict::skipped(id, why);
    }
    let (ra, rb) = match (
        d.log[a].judged(Profile::Gamma),
        d.log[b].judged(Profile::Gamma),
    ) {
        // Nothing to compare with: the plain reply's fault is SB-D1's.
        (_, Err(_)) => {
            return Verdict::skipped(
                id,
                format!(
                    "nothing to compare with: {}",
                    unreadable(&d.log[b]).unwrap_or_default()
                ),
            );
        }
        (Err(e), Ok(_)) => {
            return Verdict::fail(
                id,
                format!(
                    "{what} was not answered like the plain one: {e} ({})",
                    d.log[a].describe()
                ),
            );
        }
        (Ok(ra), Ok(rb)) => (ra, rb),
    };
    let class = |x: &Exchange| x.status().map(|s| s / 100);
    // The options are part of the reply: the same messages with the session ended or history
    // turned off are not the same reply.
    let same = |x: &Exchange, r: &Reply, y: &Exchange, q: &Reply| {
        contents(r) == contents(q) && class(x) == class(y) && effect(r) == effect(q)
    };
    if same(&d.log[a], &ra, &d.log[b], &rb) {
        return Verdict::pass(id);
    }
    if class(&d.log[a]) == class(&d.log[b])
        && effect(&ra) == effect(&rb)
        && let Some(notes) = added_system_notes(&ra, &rb)
    {
        return pass_with(
            id,
            vec![format!(
                "{what} got the plain request's reply with {} system note{} added ({}): an added note is legal, the request was served alike",
                notes.len(),
                if notes.len() == 1 { "" } else { "s" },
                clipped(
                    &notes
                        .iter()
                        .map(|n| format!("{:?}", clip(n)))
                        .collect::<Vec<_>>()
                )
            )],
        );
    }
    let got = |d: &Driver, i: usize| {
        let (ends, private) = d.log[i]
            .judged(Profile::Gamma)
            .map(|r| effect(&r))
            .unwrap_or_default();
        format!(
            "{} (status {}{}{})",
            reply_quote(d, i),
            d.log[i].status().unwrap_or(0),
            if ends { ", endSession: true" } else { "" },
            if private {
                ", disableSendHistory: true"
            } else {
                ""
            }
        )
    };
    // The control: the base request once more, in a chat of its own.
    let Some(ci) = send_like(d, rng, control.like, control.text, control.label).await else {
        return Verdict::skipped(
            id,
            format!(
                "{what} got {}, the plain request got {}; the control (the plain request again, to see whether the bridge's replies vary) could not be sent: its session ended at its start",
                got(d, a),
                got(d, b)
            ),
        );
    };
    let rc = match d.log[ci].judged(Profile::Gamma) {
        Ok(rc) => rc,
        Err(_) => {
            return Verdict::skipped(
                id,
                format!(
                    "{what} got {}, the plain request got {}; whether the bridge's replies vary cannot be seen: {}",
                    got(d, a),
                    got(d, b),
                    unreadable(&d.log[ci]).unwrap_or_default()
                ),
            );
        }
    };
    // The pair that shows the bridge's replies vary (two identical requests, two replies), if
    // one does, and the variant's second reply when it was sent.
    let mut again: Option<(usize, Reply)> = None;
    let (vary_first, vary_then) = if same(&d.log[ci], &rc, &d.log[b], &rb) {
        // The base reproduced: the variant once more too, before the difference is put on it.
        // A model-like bridge can repeat one of its replies by chance (an audit's bridge with
        // six endings failed 8 runs of 19 when only the base was sent again).
        let vi = send_like(
            d,
            rng,
            control.variant_like,
            control.text,
            control.variant_label,
        )
        .await;
        let rv = vi.and_then(|vi| Some((vi, d.log[vi].judged(Profile::Gamma).ok()?)));
        match rv {
            Some((vi, rv)) if !same(&d.log[vi], &rv, &d.log[a], &ra) => {
                let pair = (a, vi);
                again = Some((vi, rv));
                pair
            }
            // The variant reproduced its own reply (or could not be sent again, or its reply
            // could not be read: the evidence is the base's reproduction alone).
            Some((vi, _)) => {
                return Verdict::fail(
                    id,
                    format!(
                        "{what} got {} twice (again as {}), the plain request got {} twice (again as {})",
                        got(d, a),
                        d.log[vi].label,
                        got(d, b),
                        d.log[ci].label
                    ),
                );
            }
            None => {
                return Verdict::fail(
                    id,
                    format!(
                        "{what} got {}, the plain request got {} twice (again as {})",
                        got(d, a),
                        got(d, b),
                        d.log[ci].label
                    ),
                );
            }
        }
    } else {
        (b, ci)
    };
    let (sa, sb, sc) = (
        Shape::of(&d.log[a], &ra),
        Shape::of(&d.log[b], &rb),
        Shape::of(&d.log[ci], &rc),
    );
    let varies = format!(
        "two identical requests got different replies ({} then {} as {})",
        got(d, vary_first),
        got(d, vary_then),
        d.log[vary_then].label
    );
    // The variant's second reply: its shape, where the app acts on it, may be the base's.
    let sv = again.as_ref().map(|(vi, rv)| Shape::of(&d.log[*vi], rv));
    let content = SubCheck::skipped("content", format!("{varies}: content cannot be compared"));
    if sc != sb {
        return Verdict::skipped(
            id,
            format!(
                "{varies}, of different shape too ({sb}; then {sc}): neither content nor shape can be compared"
            ),
        )
        .with_subchecks(vec![
            content,
            SubCheck::skipped("shape", format!("the plain request's shape varies: {sb}; then {sc}")),
        ]);
    }
    let shape = if sa == sb || sv.as_ref() == Some(&sb) {
        let shown = if sa == sb { &sa } else { &sb };
        SubCheck::pass("shape", format!("{what}: {shown}, as the plain request's"))
    } else {
        SubCheck::fail(
            "shape",
            format!(
                "{what} got {} shaped {sa}; the plain request's replies, twice: {sb}",
                got(d, a)
            ),
        )
    };
    let mut v = Verdict::from_subchecks(id, vec![content, shape]);
    if v.status == Status::Pass {
        v.detail = format!(
            "{varies}, so content is not compared; the shape the app acts on is the same ({sa}): judged on it"
        );
    }
    v
}

/// The key with its last character changed to another of its kind (a digit to the next digit,
/// a letter to the next letter of the same case, anything else to `x` or `y`): as long as the
/// key, and not it.
fn same_length_other_key(key: &str) -> String {
    let mut chars: Vec<char> = key.chars().collect();
    if let Some(last) = chars.last_mut() {
        *last = match *last {
            '9' => '0',
            c @ '0'..='8' => (c as u8 + 1) as char,
            'z' => 'a',
            'Z' => 'A',
            c if c.is_ascii_alphabetic() => (c as u8 + 1) as char,
            'x' => 'y',
            _ => 'x',
        };
    }
    chars.into_iter().collect()
}

/// One wrong or missing key of SB-A1/A2, sent as a session start and a send in a fresh chat,
/// or as a send only, in a chat started with the right key.
struct KeyProbe {
    rule: &'static str,
    label: &'static str,
    /// The `x-sidebridge-key` sent; `None`: no header.
    header: Option<String>,
    /// The exchanges judged as refusals, `start` then `send` (the accepted start of a keyed
    /// chat is not one of them).
    steps: Vec<usize>,
}

/// SB-A1…A3's requests, sent where the run sends them and judged once the emulated client's
/// own replies are in ([`key_verdicts`]): a refusal whose messages fail the way the client's
/// replies do is the fault of the rule that judges those (one fault, one verdict).
pub(super) struct KeyProbes {
    key: String,
    probes: Vec<KeyProbe>,
    /// The wrong key with a malformed body (SB-A3).
    a3: usize,
}

/// Why a reply is not the refusal SB-A1 asks for, by kind: a wrong key's refusal (SB-A2,
/// SB-A3) that falls short the same way as the refusal of no key is the bridge's one refusal
/// shape, judged once, by SB-A1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shortfall {
    NoReply,
    Unreadable,
    Served,
    NoSystemMessage,
    NotEnded,
    QuotesKey,
}

/// The JSON kind of the first message `from` in `x`'s body that is not a string ("a number",
/// "null", "missing"), the part SB-D2 judges on the client's replies.
fn from_not_string(x: &Exchange) -> Option<&'static str> {
    let body = profiles::parse_json(x.body()?).ok()?;
    body.get("messages")?
        .as_array()?
        .iter()
        .find_map(|m| match m.get("from") {
            Some(Value::String(_)) => None,
            Some(v) => Some(profiles::kind(v)),
            None => Some("missing"),
        })
}

/// How `x` falls short of a refusal SB-A1 accepts: `Ok(note)` when it is one. Judged by the
/// outcome first: a 401/403 is a refusal whatever its body (a body the client cannot decode is
/// SB-D9's fault, not the rule's); any other status must carry a refusal the client shows: no
/// assistant content, a system message, endSession.
fn refusal(x: &Exchange) -> Result<String, (Shortfall, String)> {
    let status = match &x.result {
        Err(e) => return Err((Shortfall::NoReply, format!("{}: {e}", x.label))),
        Ok(r) => r.status,
    };
    let refused_by_status = status == 401 || status == 403;
    let r = match x.judged(Profile::Gamma) {
        Ok(r) => r,
        Err(_) if refused_by_status => {
            return Ok(format!(
                "status {status} (its body does not decode: judged by SB-D9)"
            ));
        }
        Err(e) => return Err((Shortfall::Unreadable, format!("{}: {e}", x.describe()))),
    };
    if r.messages
        .iter()
        .any(|m| m.from == From::Assistant && !m.content.is_empty())
    {
        return Err((
            Shortfall::Served,
            format!(
                "{}: assistant content was served (status {status})",
                x.label
            ),
        ));
    }
    // The app shows no bubble for an empty content (and a blank one says nothing).
    if !r
        .messages
        .iter()
        .any(|m| m.from == From::System && !m.content.trim().is_empty())
    {
        let empty = r.messages.iter().any(|m| m.from == From::System);
        return Err((
            Shortfall::NoSystemMessage,
            format!(
                "{}: status {status}, no system message explains the rejection{}",
                x.label,
                if empty {
                    " (its system message has no text: the app shows nothing)"
                } else {
                    ""
                }
            ),
        ));
    }
    if r.options.and_then(|o| o.end_session) != Some(true) {
        return Err((
            Shortfall::NotEnded,
            format!(
                "{}: status {status}, the session was not ended (options.endSession)",
                x.label
            ),
        ));
    }
    Ok(format!("status {status}"))
}

/// The rule other than SB-A1…A3 that carries a refusal's shortfall, when the emulated client's
/// own replies fail the same way: messages whose `from` is not a string (SB-D2: then no
/// message can be seen to be a system message), a body that does not decode as theirs do not.
fn refusal_owner_elsewhere(log: &[Exchange], x: &Exchange, why: Shortfall) -> Option<String> {
    match why {
        Shortfall::NoSystemMessage => {
            let kind = from_not_string(x)?;
            log.iter()
                .filter(|c| c.kind == Kind::Client)
                .any(|c| from_not_string(c) == Some(kind))
                .then(|| "SB-D2".to_string())
        }
        Shortfall::NoReply if over_max_body(x).is_some() => Some(OVER_MAX_BODY.to_string()),
        Shortfall::NoReply => d1_carries(log, x).map(|_| "SB-D1".to_string()),
        // A source SB-D5 rejects (it judges the refusals' messages too: [`reply_rules`]).
        Shortfall::Unreadable if fault_owner(x).as_deref() == Some("SB-D5") => {
            Some("SB-D5".to_string())
        }
        Shortfall::Unreadable => {
            let e = x.judged(Profile::Gamma).err()?;
            client_fault_like(log, &e)
        }
        _ => None,
    }
}

/// A rule's judged shortfalls: its own (failing it) and the ones another rule carries, each
/// with that rule's id.
#[derive(Default)]
struct Judged {
    notes: Vec<String>,
    own: Vec<(Shortfall, String)>,
    elsewhere: Vec<(Shortfall, String, String)>,
}

impl Judged {
    /// Files one reply's shortfall: under the rule `known` names for its kind (a shortfall an
    /// earlier rule of the family already carries), else the rule that judges the client's
    /// replies failing the same way, else the rule's own.
    fn file(
        &mut self,
        log: &[Exchange],
        x: &Exchange,
        known: &[(Shortfall, String)],
        why: Shortfall,
        text: String,
    ) {
        if let Some((_, owner)) = known.iter().find(|(k, _)| *k == why) {
            self.elsewhere.push((why, text, owner.clone()));
        } else if let Some(owner) = refusal_owner_elsewhere(log, x, why) {
            self.elsewhere.push((why, text, owner));
        } else {
            self.own.push((why, text));
        }
    }

    /// The kinds this rule carries or hands on, with the rule carrying each.
    fn owners(&self, id: &str) -> Vec<(Shortfall, String)> {
        let mut out: Vec<(Shortfall, String)> = Vec::new();
        for (k, _) in &self.own {
            if !out.iter().any(|(o, _)| o == k) {
                out.push((*k, id.to_string()));
            }
        }
        for (k, _, owner) in &self.elsewhere {
            if !out.iter().any(|(o, _)| o == k) {
                out.push((*k, owner.clone()));
            }
        }
        out
    }

    fn verdict(self, id: &str) -> Verdict {
        let elsewhere: Vec<String> = self
            .elsewhere
            .iter()
            .map(|(_, t, owner)| format!("{t} ({owner} carries that fault)"))
            .collect();
        if !self.own.is_empty() {
            let mut text: Vec<String> = self.own.into_iter().map(|(_, t)| t).collect();
            if !elsewhere.is_empty() {
                text.push(format!("not judged again here: {}", elsewhere.join("; ")));
            }
            Verdict::fail(id, text.join("; "))
        } else if !elsewhere.is_empty() {
            Verdict::skipped(
                id,
                format!(
                    "each shortfall of these refusals is another rule's to judge (one fault, one verdict): {}",
                    elsewhere.join("; ")
                ),
            )
        } else {
            pass_with(id, self.notes)
        }
    }
}

/// Every probe of `rule`, each step judged as a refusal; a shortfall of a kind `known` names is
/// filed under that rule. SB-A2's wrong keys are one verdict: every probe judged, each shown
/// (its notes name the wrong key).
fn judge_key_probes(
    log: &[Exchange],
    kp: &KeyProbes,
    rule: &str,
    known: &[(Shortfall, String)],
) -> Judged {
    let mut j = Judged::default();
    for p in kp.probes.iter().filter(|p| p.rule == rule) {
        let which = p.label.trim_start_matches("auth/");
        for &i in &p.steps {
            let x = &log[i];
            let step = x.label.rsplit('/').next().unwrap_or_default();
            match refusal(x) {
                Ok(n) if rule == "SB-A2" || p.label != "auth/no-key" => {
                    j.notes.push(format!("{which} {step}: {n}"))
                }
                Ok(n) => j.notes.push(format!("{step}: {n}")),
                Err((why, text)) => j.file(log, x, known, why, text),
            }
            match quotes_key(x, &kp.key, p.header.as_deref()) {
                Ok(Some(e)) => j.file(log, x, known, Shortfall::QuotesKey, e),
                Ok(None) => {}
                // Said once per rule (every refusal of a bridge holds the same words).
                Err(why) => {
                    if !j
                        .notes
                        .iter()
                        .any(|n| n.starts_with("whether a refusal quotes"))
                    {
                        j.notes.push(why);
                    }
                }
            }
        }
    }
    j
}

/// SB-A1, SB-A2 and SB-A3 from their probes, the whole run's log in.
fn key_verdicts(log: &[Exchange], kp: &KeyProbes) -> Vec<Verdict> {
    let a1 = judge_key_probes(log, kp, "SB-A1", &[]);
    let from_a1 = a1.owners("SB-A1");
    let a2 = judge_key_probes(log, kp, "SB-A2", &from_a1);
    // Whether the suffixed wrong key SB-A3 sends got assistant content: then the bridge checks
    // no key, and SB-A3 (which order key and body are judged in) has nothing to judge.
    let wrong_key_served = kp
        .probes
        .iter()
        .filter(|p| p.label == "auth/wrong-key")
        .flat_map(|p| &p.steps)
        .map(|&i| &log[i])
        .find(|x| x.label.ends_with("/send") && served_assistant_content(x))
        .map(|x| x.label.clone());
    let mut known = from_a1.clone();
    known.extend(
        a2.owners("SB-A2")
            .into_iter()
            .filter(|(k, _)| !from_a1.iter().any(|(o, _)| o == k)),
    );
    let served_owner = known
        .iter()
        .find(|(k, _)| *k == Shortfall::Served)
        .map_or("SB-A2".to_string(), |(_, o)| o.clone());
    let mut out = vec![a1.verdict("SB-A1"), a2.verdict("SB-A2")];
    let x = &log[kp.a3];
    let status = x.status().unwrap_or(0);
    out.push(if let Some(at) = wrong_key_served {
        Verdict::skipped(
            "SB-A3",
            format!(
                "a wrong key is accepted ({at}: assistant content served); {served_owner} carries that fault: \
                 whether the key is checked before the body cannot be seen"
            ),
        )
    } else if status == 400 || status >= 500 {
        // Whatever the body says: the malformed body was judged before the key.
        Verdict::fail(
            "SB-A3",
            format!(
                "the body was judged before the key: status {status} ({})",
                x.describe_reply()
            ),
        )
    } else {
        let mut a3 = Judged::default();
        match refusal(x) {
            Ok(n) => a3.notes.push(n),
            Err((why, text)) => a3.file(log, x, &known, why, text),
        }
        a3.verdict("SB-A3")
    });
    out
}

/// Sends `m` into `chat` as the app sends a message (with `m` as its history, or with none once
/// the chat turned history off), with `header` as its key: a probe judged as a refusal. The
/// index of its exchange.
async fn send_probe(
    d: &mut Driver,
    label: &str,
    chat: String,
    m: Msg,
    with_history: bool,
    header: &Option<String>,
) -> usize {
    let ids = vec![m.key()];
    let body = profiles::Request {
        version: "1.0".into(),
        chat_id: chat,
        messages: Some(vec![m.clone()]),
        history: with_history.then(|| vec![m]),
        extra: vec![],
    }
    .encode(Style::App, &mut d.rng);
    let mut h = vec![("Content-Type".to_string(), "application/json".to_string())];
    if let Some(k) = header {
        h.push(("x-sidebridge-key".into(), k.clone()));
    }
    d.exchange(
        &format!("{label}/send"),
        Kind::Probe,
        None,
        "POST",
        h,
        body,
        ids,
    )
    .await
}

async fn auth(
    d: &mut Driver,
    rng: &mut Rng,
    cfg: &CheckConfig,
    v: &mut VerdictLog,
    key_probes: &mut Option<KeyProbes>,
) {
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
        h.push((
            "x-sidebridge-key".into(),
            super::wire::UNEXPECTED_KEY_PROBE.into(),
        ));
        let body = start_body(rng, d);
        // The app sends exactly this whenever the user typed a key: a client request, so its
        // body is judged by SB-D1…D8 and SB-A4 judges only acceptance (one fault, one verdict).
        let i = d
            .exchange(
                "auth/unexpected-key",
                Kind::Client,
                None,
                "POST",
                h.clone(),
                body,
                vec![],
            )
            .await;
        let x = &d.log[i];
        let status = x.status().unwrap_or(0);
        v.push(match x.judged(Profile::App) {
            Err(_) if over_max_body(x).is_some() => {
                Verdict::skipped("SB-A4", over_max_body(x).unwrap_or_default())
            }
            Err(e) if x.result.is_err() => Verdict::skipped(
                "SB-A4",
                format!("{}: no reply to judge ({e}); SB-D1 carries that fault", x.label),
            ),
            _ if status == 401 || status == 403 => Verdict::fail(
                "SB-A4",
                format!(
                    "a bridge with no key configured rejected a request carrying one (status {status})"
                ),
            ),
            Ok(_) if ends(x) => Verdict::fail(
                "SB-A4",
                format!(
                    "a bridge with no key configured ended the session of a request carrying one (status {status})"
                ),
            ),
            Ok(_) => pass_with("SB-A4", vec![format!("status {status}")]),
            // Whether the bridge accepted the request is in the body it sent: unreadable, it
            // is not seen (the body's fault is SB-D1's).
            Err(_) => Verdict::skipped(
                "SB-A4",
                format!(
                    "status {status}, but whether the request was accepted cannot be seen: {}",
                    unreadable(x).unwrap_or_default()
                ),
            ),
        });
        return;
    };
    // For A1/A2 a session start and a send, so assistant content has a chance to show.
    // A fresh chat per send: a rejection ends its chat.
    // With the user's message id, which SB-D4 judges the refusal by (the app decodes it).
    let send_body = |d: &mut Driver, rng: &mut Rng| {
        let m = Msg::user(&rng.uuid(), "Hello without a key");
        let ids = vec![m.key()];
        let body = profiles::Request {
            version: "1.0".into(),
            chat_id: rng.uuid(),
            messages: Some(vec![m.clone()]),
            history: Some(vec![m]),
            extra: vec![],
        }
        .encode(Style::App, &mut d.rng);
        (body, ids)
    };
    // Wrong keys: the key with a suffix, and the key less its last character (a bridge that
    // compares only a prefix, or only as far as the shorter of the two, takes one of them).
    // And the key with the case of its letters changed (a bridge comparing without case
    // takes it; only a key with letters has such a variant). Each is made as a replay makes a
    // recorded wrong key of its kind ([`wire::wrong_key`]).
    let mut probes = vec![("SB-A1", "auth/no-key", None)];
    for (label, marker) in [
        ("auth/wrong-key", wire::REDACTED_EXTENDED),
        ("auth/key-prefix", wire::REDACTED_PREFIX),
        ("auth/key-case", wire::REDACTED_CASE),
    ] {
        if let Some(wrong) = wire::wrong_key(marker, &key) {
            probes.push(("SB-A2", label, Some(wrong)));
        }
    }
    // Keys a looser comparison takes: the key less its first character (a bridge testing
    // whether the key ends with what was sent), the key with a hyphen put in after its first
    // character (one comparing with hyphens taken out), the key with its last character
    // changed (one comparing lengths only; a digits-only key has no case variant to catch it).
    for (label, wrong) in [
        ("auth/key-suffix", key.chars().skip(1).collect::<String>()),
        ("auth/key-hyphen-added", {
            let mut c = key.chars();
            let first: String = c.next().into_iter().collect();
            format!("{first}-{}", c.as_str())
        }),
        ("auth/key-same-length", same_length_other_key(&key)),
    ] {
        if !wrong.is_empty() && wrong != key {
            probes.push(("SB-A2", label, Some(wrong)));
        }
    }
    // The header sent with an empty value (a bridge testing the value for truthiness before
    // comparing it takes it: "no key given, nothing to check").
    probes.push(("SB-A2", "auth/empty-key", Some(String::new())));
    let mut sent = Vec::new();
    for (id, label, header) in probes {
        let mut steps = Vec::new();
        for step in ["start", "send"] {
            let mut h = ct();
            if let Some(k) = &header {
                h.push(("x-sidebridge-key".into(), k.clone()));
            }
            let (body, ids) = if step == "start" {
                (start_body(rng, d), vec![])
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
                    ids,
                )
                .await;
            steps.push(i);
        }
        sent.push(KeyProbe {
            rule: id,
            label,
            header,
            steps,
        });
    }
    let mut keyed = Vec::new();
    // A bridge may check the key only at a chat's session start and serve the chat's sends
    // on the strength of it; every probe above is a chat of its own, which such a bridge
    // refuses. So a chat is also started with the right key (accepted, not judged), then sent
    // to with no key (SB-A1) and with a wrong key (SB-A2): each send must be refused like the
    // others. A chat each: a refusal may end its chat.
    for (id, label, header) in [
        ("SB-A1", "auth/no-key-in-keyed-chat", None),
        (
            "SB-A2",
            "auth/wrong-key-in-keyed-chat",
            Some(format!("{key}-wrong")),
        ),
    ] {
        let chat = rng.uuid();
        let start = profiles::Request {
            version: "1.0".into(),
            chat_id: chat.clone(),
            history: Some(vec![]),
            ..Default::default()
        }
        .encode(Style::App, &mut d.rng);
        let mut h = ct();
        h.push(("x-sidebridge-key".into(), key.clone()));
        d.exchange(
            &format!("{label}/keyed-start"),
            Kind::Probe,
            None,
            "POST",
            h,
            start,
            vec![],
        )
        .await;
        let m = Msg::user(&rng.uuid(), "Hello without the right key");
        let i = send_probe(d, label, chat, m, true, &header).await;
        keyed.push(KeyProbe {
            rule: id,
            label,
            header,
            steps: vec![i],
        });
    }
    sent.extend(keyed);
    // The app sends no `history` once a chat turned it off (disableSendHistory): a send like
    // that, in a chat of its own, with no key (SB-A1) and with a wrong key (SB-A2). Every probe
    // above carries a history, so a bridge that checks the key only where one is sent would
    // pass them all.
    for (id, label, header) in [
        ("SB-A1", "auth/no-key-without-history", None),
        (
            "SB-A2",
            "auth/wrong-key-without-history",
            Some(format!("{key}-wrong")),
        ),
    ] {
        let m = Msg::user(&rng.uuid(), "Hello without history or the right key");
        let i = send_probe(d, label, rng.uuid(), m, false, &header).await;
        sent.push(KeyProbe {
            rule: id,
            label,
            header,
            steps: vec![i],
        });
    }
    // SB-A3: wrong key and a malformed body.
    let mut h = ct();
    h.push(("x-sidebridge-key".into(), format!("{key}-wrong")));
    let a3 = d
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
    *key_probes = Some(KeyProbes {
        key: key.clone(),
        probes: sent,
        a3,
    });
    // SB-A5 (INFO): spacing and header-name case.
    let mut a5 = Vec::new();
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
        let name = label.trim_start_matches("auth/");
        // A 401/403 is a refusal whatever its body; otherwise the body says which it was.
        a5.push(match x.status() {
            Some(s @ (401 | 403)) => SubCheck::pass(name, format!("status {s}, rejected")),
            _ => recorded(x, name, |r| {
                if r.options.and_then(|o| o.end_session) == Some(true) {
                    "rejected".to_string()
                } else {
                    "accepted".to_string()
                }
            }),
        });
    }
    v.push(record_verdict("SB-A5", a5));
}

/// SB-D1…SB-D9 over the logged replies. `refusals`: the replies to SB-A1/A2's key probes
/// (log indices), which the app decodes and shows like any reply (it ignores the status,
/// reference §2): SB-D4, SB-D5 and SB-D8 judge their messages too (a refusal that reuses the
/// id of the message it refuses overwrites the user's bubble; profile alpha drops one without
/// `sources`). Whether a refusal refuses is SB-A1/A2's; a body that does not decode is SB-D9's,
/// unless the cause is a source SB-D5 judges (then skipped naming it).
pub fn reply_rules(log: &[Exchange], refusals: &[usize]) -> Vec<Verdict> {
    let mut fails: [Vec<String>; 9] = Default::default();
    let mut warns: [Vec<String>; 9] = Default::default();
    // Evidence: replies to the emulated client that were JSON objects, messages they carried,
    // non-2xx replies of the run. A rule with nothing to look at does not pass.
    let (mut objects, mut messages, mut non_2xx) = (0usize, 0usize, 0usize);
    // SB-D1's two sub-checks, each with what failed it and what another rule judges
    // ([`fault_owner`]: shown skipped naming that rule, one fault, one verdict).
    let mut received = Tally::default();
    let mut decoded = Tally::default();
    // Replies that decode after a UTF-8 byte order mark the app's decoder skips (said, not
    // judged: the app shows them).
    let mut boms: Vec<String> = Vec::new();
    // Bytes past a reply's framing (a Content-Length short of the body sent) and bytes sent on
    // a kept connection that no request asked for (an unsolicited 408 before an idle close):
    // the app's client discards them and does not reuse the connection (RFC 9112 §6.3), so
    // nothing the user sees changes. Said, not judged.
    let mut framing_notes: Vec<String> = Vec::new();
    // SB-D9's replies to the emulated client that do not decode: another rule's.
    let mut d9_skips = Vec::new();
    // SB-D3 judges the value of a string `from`; a `from` that is missing or not a string is
    // SB-D2's fault (one fault, one verdict), shown here as skipped naming it (one entry per
    // such message, so the messages it judged are the others).
    let mut d3_skips: Vec<String> = Vec::new();
    // Ids the bridge gave messages the client decoded earlier in the run (upper-cased). A
    // reply that reuses one of those is the in-place update the protocol provides for (upsert
    // by id, reference §2, §7): the bridge editing its own message. Reusing any other id of
    // the request (the user's message, an app error bubble) overwrites a bubble that is not
    // the bridge's: SB-D4's fault.
    let mut issued: std::collections::HashSet<String> = Default::default();
    // The refusals' faults, listed after the client replies' own.
    let mut refusal_fails: [Vec<String>; 9] = Default::default();
    for (ix, x) in log.iter().enumerate() {
        let refusal = refusals.contains(&ix);
        let Ok(r) = &x.result else {
            if x.kind == Kind::Client {
                let e = x
                    .result
                    .as_ref()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                match fault_owner(x).as_deref() {
                    // The stop is said once, below, not once per request it cost.
                    _ if x.stopped => {}
                    Some("SB-D1") | None => received.fail.push(format!("{}: {e}", x.label)),
                    Some(OVER_MAX_BODY) => received.skip.push(format!("{}: {e}", x.label)),
                    Some(owner) => received.skip.push(format!(
                        "{}: no complete reply ({e}); {owner} carries that fault",
                        x.label
                    )),
                }
            }
            continue;
        };
        if x.kind == Kind::Client {
            received.ok += 1;
        }
        if r.extra > 0 {
            // What the framing was, so the note names why the bytes were past it.
            let cause = if r.status == 204 || r.status == 304 {
                format!(
                    "a {} reply has no body, RFC 9112 §6.3: bytes after its head",
                    r.status
                )
            } else if r
                .header("transfer-encoding")
                .is_some_and(super::transport::names_chunked)
            {
                "bytes after the chunked body's last chunk and trailer section".to_string()
            } else {
                "a Content-Length short of the body sent".to_string()
            };
            framing_notes.push(format!(
                "{}: {} byte(s) came after the reply's end as its framing gives it ({cause}), discarded as the app's client may (RFC 9112 §6.3), the connection not reused",
                x.label, r.extra
            ));
        }
        if let Some(why) = &r.unasked {
            framing_notes.push(format!("{}: {why}", x.label));
        }
        // Only replies to a POST: the app sends nothing else. The GET/PUT/HEAD probes' bodies
        // are SB-H4's and the OPTIONS probe is SB-H5's record (one fault, one verdict; no
        // warning about text the app never asks for).
        // Nor the trailing-slash probe: another path than the endpoint (a framework's 404
        // page there is not an error reply of the bridge).
        if !(200..300).contains(&r.status)
            && x.method == "POST"
            && !(300..400).contains(&r.status)
            && x.label != TRAILING_SLASH_PROBE
        {
            non_2xx += 1;
            match profiles::decode_reply(Profile::Gamma, r) {
                // The emulated client's replies decode or not whatever their status (the app
                // ignores it): that is the rule named by [`fault_owner`], SB-D9 judges the
                // probes' error replies.
                Err(e) if x.kind == Kind::Client => d9_skips.push(format!(
                    "{}: status {}, body does not decode ({e}); {} carries that fault",
                    x.label,
                    r.status,
                    fault_owner(x).unwrap_or_else(|| "SB-D1".into())
                )),
                // A refusal whose sources SB-D5 judges (it judges the refusals' messages).
                Err(e) if refusal && fault_owner(x).as_deref() == Some("SB-D5") => {
                    d9_skips.push(format!(
                        "{}: status {}, body does not decode ({e}); SB-D5 carries that fault",
                        x.label, r.status
                    ))
                }
                Err(e) => match client_fault_like(log, &e) {
                    Some(owner) => d9_skips.push(format!(
                        "{}: status {}, body does not decode ({e}), as the client's replies do not; {owner} carries that fault",
                        x.label, r.status
                    )),
                    None => fails[8].push(format!(
                        "{}: status {}, body does not decode ({e})",
                        x.label, r.status
                    )),
                },
                // Only where a user waits for the text: the emulated client's own requests.
                // The probes are requests no client build sends (odd and malformed bodies,
                // which SB-R10 requires a 4xx with a message for) or refusals SB-A1/A2 ask for
                // with a system message and recommend 401 for: warning there would warn every
                // correct bridge for doing what those rules ask.
                Ok(reply)
                    if x.kind == Kind::Client
                        && reply.messages.iter().any(|m| !m.content.is_empty()) =>
                {
                    warns[8].push(format!(
                        "WARN {}: status {} carries text app-dev never shows",
                        x.label, r.status
                    ))
                }
                Ok(_) => {}
            }
        }
        if x.kind != Kind::Client && !refusal {
            continue;
        }
        if refusal {
            if r.opaque.is_none()
                && let Ok(Value::Object(top)) = profiles::parse_json(&r.body)
                && let Some(msgs) = top.get("messages").and_then(Value::as_array)
            {
                refusal_messages(x, msgs, &issued, &mut refusal_fails);
            }
            continue;
        }
        if let Err(e) = profiles::decode_reply(Profile::Gamma, r) {
            let at = format!("{}: status {}: {e}", x.label, r.status);
            match fault_owner(x).as_deref() {
                Some("SB-D1") | None => decoded.fail.push(at),
                Some(owner) => decoded
                    .skip
                    .push(format!("{at}; {owner} carries that fault")),
            }
        } else {
            decoded.ok += 1;
            if profiles::starts_with_bom(&r.body) {
                boms.push(x.label.clone());
            }
        }
        if r.opaque.is_some() {
            continue;
        }
        let Ok(Value::Object(top)) = profiles::parse_json(&r.body) else {
            continue;
        };
        objects += 1;
        if let Some(o) = top.get("options").filter(|o| !o.is_null()) {
            match o.as_object() {
                None => fails[5].push(format!("{}: options is {}", x.label, profiles::kind(o))),
                Some(map) => {
                    // The flags the client decodes; other keys are ignored (reference §2).
                    for (k, f) in map
                        .iter()
                        .filter(|(k, _)| *k == "disableSendHistory" || *k == "endSession")
                    {
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
        // This reply's ids count as the bridge's only after its own checks (the loop below).
        let fresh: Vec<String> = profiles::decode_reply(Profile::Gamma, r)
            .map(|reply| {
                reply
                    .messages
                    .iter()
                    .map(|m| m.id.to_ascii_uppercase())
                    .collect()
            })
            .unwrap_or_default();
        for (n, m) in msgs.iter().enumerate() {
            messages += 1;
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
                Some("assistant") | Some("system") => {}
                None => d3_skips.push(match from {
                    None => format!("{at}: from is missing (SB-D2's fault)"),
                    Some(f) => format!("{at}: from is {} (SB-D2's fault)", profiles::kind(f)),
                }),
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
                fails[3].extend(reply_id_fault(
                    &at,
                    id,
                    &mut seen,
                    x,
                    &issued,
                    "equals an id of the request that the bridge did not give (overwrites that bubble)",
                ));
            }
            sources_faults(m, &at, &mut fails);
        }
        issued.extend(fresh);
    }
    if let Some(stop) = stop_summary(log) {
        received.fail.insert(0, stop);
    }
    for (all, more) in fails.iter_mut().zip(refusal_fails) {
        all.extend(more);
    }
    let d3_judged = messages - d3_skips.len();
    let ids = [
        "SB-D1", "SB-D2", "SB-D3", "SB-D4", "SB-D5", "SB-D6", "SB-D7", "SB-D8", "SB-D9",
    ];
    ids.iter()
        .enumerate()
        .map(|(k, id)| {
            let nothing = match *id {
                "SB-D1" => {
                    return strict_from_subchecks(
                        "SB-D1",
                        vec![
                            {
                                let mut r =
                                    received.subcheck("received", "reply received completely");
                                if !framing_notes.is_empty() && r.status == Status::Pass {
                                    r.evidence.push_str(&format!(
                                        "; note: {}",
                                        clipped(&framing_notes)
                                    ));
                                }
                                r
                            },
                            {
                                let mut d = decoded
                                    .subcheck("decodes", "reply decodes under profile gamma");
                                if !boms.is_empty() && d.status == Status::Pass {
                                    d.evidence.push_str(&format!(
                                        "; {} of them after a UTF-8 byte order mark, which the app's JSON decoder skips ({})",
                                        boms.len(),
                                        clipped(&boms)
                                    ));
                                }
                                d
                            },
                        ],
                    );
                }
                "SB-D3" if fails[2].is_empty() && d3_judged == 0 && !d3_skips.is_empty() => {
                    return Verdict::skipped(
                        id,
                        format!("no message's `from` is a string: judged by SB-D2 ({})", clipped(&d3_skips)),
                    );
                }
                "SB-D3" if fails[2].is_empty() && !d3_skips.is_empty() => {
                    let mut notes = warns[2].clone();
                    notes.truncate(3);
                    notes.push(format!(
                        "{d3_judged} message(s) judged; not judged here, SB-D2's: {}",
                        clipped(&d3_skips)
                    ));
                    return pass_with(id, notes);
                }
                "SB-D9" if fails[8].is_empty() && !d9_skips.is_empty() => {
                    return Verdict::skipped(id, clipped(&d9_skips));
                }
                "SB-D5" | "SB-D6" if objects == 0 => Some(
                    "no reply to the emulated client was a JSON object: nothing to judge (see SB-D1)",
                ),
                "SB-D2" | "SB-D3" | "SB-D4" | "SB-D7" | "SB-D8" if messages == 0 => Some(if objects == 0 {
                    "no reply to the emulated client was a JSON object: nothing to judge (see SB-D1)"
                } else {
                    "no reply to the emulated client carried a message: nothing to judge"
                }),
                "SB-D9" if non_2xx == 0 => {
                    return Verdict::not_run("SB-D9", "no non-2xx reply in this run: nothing to judge");
                }
                _ => None,
            };
            if let Some(why) = nothing
                && fails[k].is_empty()
            {
                return Verdict::skipped(id, why);
            }
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

/// SB-D4, SB-D5 and SB-D8 over a refusal's messages (see [`reply_rules`]), the same checks as
/// for the client's replies: ids unique and none the request's (the refused message's own),
/// `sources` present and an array of `{title, url}` with an absolute http(s) URL.
fn refusal_messages(
    x: &Exchange,
    msgs: &[Value],
    issued: &std::collections::HashSet<String>,
    fails: &mut [Vec<String>; 9],
) {
    let mut seen: Vec<String> = Vec::new();
    for (n, m) in msgs.iter().enumerate() {
        let at = format!("{} messages[{n}] (a refusal)", x.label);
        if let Some(id) = m.get("id").and_then(Value::as_str) {
            fails[3].extend(reply_id_fault(
                &at,
                id,
                &mut seen,
                x,
                issued,
                "equals the id of the message it refuses (overwrites the user's bubble)",
            ));
        }
        sources_faults(m, &at, fails);
    }
}

/// SB-D4 on one reply message id: repeated within the reply (`seen`, the reply's ids so far,
/// upper-cased), or equal to an id of the request that the bridge did not itself give earlier
/// (`issued`), which overwrites that bubble: `overwrites` says whose.
fn reply_id_fault(
    at: &str,
    id: &str,
    seen: &mut Vec<String>,
    x: &Exchange,
    issued: &std::collections::HashSet<String>,
    overwrites: &str,
) -> Option<String> {
    let key = id.to_ascii_uppercase();
    let fault = if seen.contains(&key) {
        Some(format!("{at}: id {id} repeats within the reply"))
    } else if x.request_ids.contains(&key) && !issued.contains(&key) {
        Some(format!("{at}: id {id} {overwrites}"))
    } else {
        None
    };
    seen.push(key);
    fault
}

/// SB-D8 (`sources` missing or null) and SB-D5 (not an array of `{title: string, url:
/// absolute http(s) URL}`) on one message.
fn sources_faults(m: &Value, at: &str, fails: &mut [Vec<String>; 9]) {
    match m.get("sources") {
        None => fails[7].push(format!(
            "{at}: no `sources` key (profile alpha drops the whole reply)"
        )),
        Some(Value::Null) => fails[7].push(format!(
            "{at}: `sources` is null (profile alpha needs an array and drops the whole reply)"
        )),
        Some(Value::Array(items)) => {
            for (k, s) in items.iter().enumerate() {
                let title = s.get("title").and_then(Value::as_str);
                let url = s.get("url").and_then(Value::as_str);
                let ok_url = url.is_some_and(absolute_http_url);
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

/// What one sub-check of a rule over many replies saw: replies that passed, failures, and
/// replies another rule judges (skipped naming it).
#[derive(Default)]
struct Tally {
    ok: usize,
    fail: Vec<String>,
    skip: Vec<String>,
}

impl Tally {
    fn subcheck(&self, name: &str, what: &str) -> SubCheck {
        if !self.fail.is_empty() {
            SubCheck::fail(name, clipped(&self.fail))
        } else if !self.skip.is_empty() {
            SubCheck::skipped(name, clipped(&self.skip))
        } else if self.ok == 0 {
            SubCheck::skipped(name, "no reply to the emulated client: nothing to judge")
        } else {
            SubCheck::pass(name, format!("{what}: {} of {}", self.ok, self.ok))
        }
    }
}

/// The first three items, and how many more.
fn clipped(items: &[String]) -> String {
    let more = if items.len() > 3 {
        format!(" (and {} more)", items.len() - 3)
    } else {
        String::new()
    };
    format!("{}{more}", items[..items.len().min(3)].join("; "))
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

/// Whether `key` cannot be told from an ordinary word of a text: letters only, written as
/// words are (all lower case, capitalized, or all upper case), and under 20 characters. A key
/// is "an arbitrary string": `refused` is a legal key, and a refusal saying "Access refused"
/// holds it by coincidence as much as by a leak. A key with a digit, a sign, mixed case or 20
/// letters and more does not occur in a text by chance.
fn key_is_word_like(key: &str) -> bool {
    let letters = key.chars().all(|c| c.is_alphabetic());
    let mut rest = key.chars().skip(1);
    let cased = key.chars().all(|c| !c.is_uppercase())
        || key.chars().all(|c| !c.is_lowercase())
        || rest.all(|c| !c.is_uppercase());
    letters && cased && key.chars().count() < 20
}

/// Why a refusal's text shown to the user quotes the configured key (`Ok(None)`: it does not),
/// once the value the request sent (`sent`, which a refusal may echo: "key K-wrong is not
/// valid") is taken out. Keys under 4 characters are not looked for (they occur in any text).
/// `Err(why)`: the text holds a key [`key_is_word_like`], which is not judged a quote.
fn quotes_key(x: &Exchange, key: &str, sent: Option<&str>) -> Result<Option<String>, String> {
    let key = key.trim();
    if key.chars().count() < 4 {
        return Ok(None);
    }
    let Ok(r) = x.judged(Profile::Gamma) else {
        return Ok(None);
    };
    // As written first; then in any letter case (a refusal that upper-cases what it quotes
    // still hands the key over: one whose letters' case is guessed from a few tries), with the
    // value sent taken out in any case too (the client's own text, whatever case it comes back
    // in, is no leak).
    let folded_key = key.to_lowercase();
    let found = r.messages.iter().enumerate().find_map(|(n, m)| {
        let (shown, folded) = match sent {
            Some(s) if !s.is_empty() => (
                m.content.replace(s, ""),
                m.content.to_lowercase().replace(&s.to_lowercase(), ""),
            ),
            _ => (m.content.clone(), m.content.to_lowercase()),
        };
        if shown.contains(key) {
            Some((n, m.content.clone(), false))
        } else {
            folded
                .contains(&folded_key)
                .then_some((n, m.content.clone(), true))
        }
    });
    match found {
        None => Ok(None),
        // A key found only in another case is as word-like as its letters: `PeerKey` is told
        // from a word by its mixed case, which a case-blind match does not see.
        Some((n, text, other_case))
            if key_is_word_like(key) || other_case && key_is_word_like(&folded_key) =>
        {
            Err(format!(
                "whether a refusal quotes the key is not judged: the configured key is made of \
             letters, written as a word is, and {}'s messages[{n}] ({:?}) holds it: a leak \
             cannot be told from the same word by coincidence (a key with a digit, a sign, \
             mixed case or 20 letters can be)",
                x.label,
                clip(&text)
            ))
        }
        Some((n, _, other_case)) => Ok(Some(format!(
            "{}: messages[{n}] quotes the configured key{} to a client that did not send it",
            x.label,
            if other_case {
                " in another letter case"
            } else {
                ""
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::{error_shape, leaks_internals};

    /// Two decoding errors have one shape when they differ only in values: quoted text,
    /// numbers, the body's first bytes.
    #[test]
    fn error_shapes_leave_values_out() {
        let same = [
            (
                r#"messages[0]: id "msg-1" is not a UUID string"#,
                r#"messages[12]: id "msg-27" is not a UUID string"#,
            ),
            (
                r#"not JSON (trailing comma at line 1 column 164); body starts "{\"messages\":[""#,
                r#"not JSON (trailing comma at line 1 column 38); body starts "{}""#,
            ),
        ];
        for (a, b) in same {
            assert_eq!(error_shape(a), error_shape(b), "{a} / {b}");
        }
        let different = [
            (
                r#"messages[0]: id "x" is not a UUID string"#,
                r#"messages[0]: from "x" is not a string"#,
            ),
            (
                "not JSON (trailing comma at line 1 column 2)",
                "not JSON (key must be a string at line 1 column 2)",
            ),
            ("body is not UTF-8 (invalid utf-8 sequence)", "empty body"),
        ];
        for (a, b) in different {
            assert_ne!(error_shape(a), error_shape(b), "{a} / {b}");
        }
    }

    #[test]
    fn source_urls_need_an_http_scheme_and_a_host_as_written() {
        for ok in [
            "https://example.com",
            "http://example.com/a/b?q=1#top",
            "HTTPS://Example.COM/docs",
            "Http://example.com:8080/",
            "http://[2001:db8::1]:8443/a",
            "https://127.0.0.1/x",
            "https://example.com/a%20b?l=%C3%A4",
            "https://user@example.com/",
        ] {
            assert!(super::absolute_http_url(ok), "{ok}");
        }
        for bad in [
            "https:example.com",
            "https:/example.com",
            "https:///example.com",
            "https://",
            "https://:443/",
            "https://user@/x",
            "/docs/peer",
            "ftp://example.com/",
            "example.com",
            "",
            "https:\\\\example.com",
        ] {
            assert!(!super::absolute_http_url(bad), "{bad}");
        }
    }

    #[test]
    fn leaks_of_each_runtime_are_named_and_plain_errors_are_not() {
        for (text, runtime) in [
            ("Expecting value: line 1 column 69 (char 68)", "Python"),
            (
                "Traceback (most recent call last):\n  File \"app.py\", line 3",
                "Python",
            ),
            ("TypeError: body.messages.map is not a function", "Node/V8"),
            (
                "Cannot read properties of undefined (reading 'map')",
                "Node/V8",
            ),
            ("json: cannot unmarshal string into Go struct field", "Go"),
            (
                "com.fasterxml.jackson.core.JsonParseException: Unexpected end-of-input",
                "Java",
            ),
            (
                "System.Text.Json.JsonException: 'x' is invalid. Path: $ | LineNumber: 0 | BytePositionInLine: 68.",
                ".NET",
            ),
            ("thread 'main' panicked at src/main.rs:3:5", "Rust"),
            ("EOF while parsing a string at line 1 column 69", "Rust"),
            ("JSON::ParserError: unexpected token at '{'", "Ruby"),
            ("PHP Fatal error:  Uncaught TypeError: count()", "PHP"),
            ("Unterminated string in JSON at position 73", "Node/V8"),
            ("missing field `chatId` at line 1 column 40", "Rust"),
            ("expected value at line 1 column 1", "Rust"),
            ("trailing characters at line 1 column 5", "Rust"),
            (
                "invalid type: string \"hello\", expected a sequence at line 1 column 60",
                "Rust",
            ),
            ("invalid type: integer `7`, expected a sequence", "Rust"),
            (
                "Failed to deserialize the JSON body into the target type: messages: invalid type",
                "Rust",
            ),
            (
                "Expected property name or '}' in JSON at position 1",
                "Node/V8",
            ),
            ("unexpected end of JSON input", "Go"),
            ("'NoneType' object is not subscriptable", "Python"),
            ("[Errno 111] Connection refused", "Python"),
            ("string indices must be integers, not 'str'", "Python"),
            ("string indices must be integers", "Python"),
            ("list indices must be integers or slices, not str", "Python"),
            ("can only concatenate str (not \"int\") to str", "Python"),
            ("unhashable type: 'dict'", "Python"),
            ("argument of type 'int' is not iterable", "Python"),
            ("'str' object has no attribute 'get'", "Python"),
            ("'int' object is not subscriptable", "Python"),
            ("'list' object is not callable", "Python"),
            ("module 'json' has no attribute 'loadz'", "Python"),
            (
                "unsupported operand type(s) for +: 'int' and 'str'",
                "Python",
            ),
            ("object of type 'int' has no len()", "Python"),
            ("invalid literal for int() with base 10: 'x'", "Python"),
            ("not enough values to unpack (expected 2, got 1)", "Python"),
            (
                "the JSON object must be str, bytes or bytearray, not dict",
                "Python",
            ),
            ("Extra data: line 1 column 5", "Python"),
            ("Expecting value: line 1 column 1", "Python"),
            ("connect ECONNREFUSED 127.0.0.1:11434", "any"),
            ("Bad request (at handle /srv/sb/server.js:212:19)", "any"),
            ("error in C:\\srv\\app\\main.py:40", "any"),
        ] {
            let (rt, matched) = leaks_internals(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(rt, runtime, "{text}");
            assert!(text.contains(&matched));
        }
        for text in [
            "The request body is not valid JSON.",
            "Unsupported protocol version 2.0; this bridge speaks 1.x.",
            "`messages` must be an array of messages.",
            "Bad request: missing chatId.",
            "The model is not reachable right now; please try again.",
            "That JSON ends too early: check the position of the closing brace.",
            "The request body is not valid JSON: it breaks off at line 1 column 69.",
            "Bad request: missing field `messages` (a list of messages).",
            "Invalid type: `messages` must be a list.",
            "See https://example.com/docs/errors.html for the request format.",
            "Send JSON such as {\"sidebridge\":\"1.0\"} (see server.js docs).",
            "Message ids must be strings, not numbers.",
            "List items must be messages; indices start at 0.",
            "The string you sent has no `messages` list.",
            "We can only concatenate your messages when each one is text.",
            "This message has no attribute `from`: add one.",
            "The argument of type `history` is not a list.",
            "Extra data after the JSON object is not allowed.",
            "Too many values: send one message at a time.",
        ] {
            assert_eq!(leaks_internals(text), None, "{text}");
        }
    }
}

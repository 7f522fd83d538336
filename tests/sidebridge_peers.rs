//! `check sidebridge` against Side Bridge servers that are not ours: `tests/peers/sidebridge/
//! peer.py` (Python standard library, written from the protocol text), correct, with one flaw,
//! or with one legal oddity. Table-driven: one row per server, each with the exact set of
//! verdicts that must not pass (`id:status`) and the exit code.
//!
//! Every run starts from an empty working directory (no `bridgewire.toml` is picked up); the
//! rows that use the peer's phrases pass `--config tests/peers/sidebridge/peer.toml`.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

mod common;
use common::need::python;
use common::proc::spawn_url;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const KEY: &str = "peer-key-7";

fn peer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sidebridge")
}

/// What a row expects among the verdicts that do not pass.
enum Expect {
    /// Exactly these `id:status` pairs.
    Exact(&'static [&'static str]),
    /// Every judged rule except these ids (a flaw that leaves nothing else to judge).
    AllBut(&'static [&'static str]),
}

struct Row {
    name: &'static str,
    peer: &'static [&'static str],
    keyed: bool,
    fixture: bool,
    flags: &'static [&'static str],
    expect: Expect,
    exit: i32,
}

const SCENARIO_NOT_RUN: &[&str] = &[
    "SB-R3:not-run",
    "SB-R6:not-run",
    "SB-R11:not-run",
    "SB-R12:not-run",
    "SB-S1:not-run",
    "SB-S2:not-run",
    "SB-S3:not-run",
    "SB-S4:not-run",
];

fn rows() -> Vec<Row> {
    use Expect::*;
    let row = |name, peer, keyed, flags, expect, exit| Row {
        name,
        peer,
        keyed,
        fixture: true,
        flags,
        expect,
        exit,
    };
    vec![
        // Correct, through its own phrases.
        row("correct", &[], true, &[], Exact(&[]), 0),
        row("correct, no key", &[], false, &[], Exact(&[]), 0),
        row(
            "correct, --require-all --strict",
            &[],
            true,
            &["--require-all", "--strict"],
            Exact(&[]),
            0,
        ),
        // Correct, without a fixture: the scenario rules are not run, which fails only under
        // --require-all.
        Row {
            fixture: false,
            ..row(
                "correct, no fixture",
                &[],
                true,
                &[],
                Exact(SCENARIO_NOT_RUN),
                0,
            )
        },
        Row {
            fixture: false,
            ..row(
                "correct, no fixture, --require-all",
                &[],
                true,
                &["--require-all"],
                Exact(SCENARIO_NOT_RUN),
                1,
            )
        },
        // Legal oddities: nothing to report.
        row(
            "chunked",
            &["--oddity", "chunked"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "307 redirect",
            &["--oddity", "redirect-307"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "unknown keys",
            &["--oddity", "unknown-keys"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "upper-case ids",
            &["--oddity", "upper-ids"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "options null",
            &["--oddity", "options-null"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "404 with Allow",
            &["--oddity", "404-allow"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // One flaw each: exactly its rules.
        row(
            "parse before auth",
            &["--flaw", "parse-before-auth"],
            true,
            &["--strict"],
            Exact(&["SB-A3:fail"]),
            1,
        ),
        row(
            "401 with a non-Side-Bridge body",
            &["--flaw", "auth-garbage-body"],
            true,
            &["--strict"],
            Exact(&["SB-D9:fail"]),
            1,
        ),
        row(
            "from null",
            &["--flaw", "null-from"],
            true,
            &[],
            // One fault: `from` is not a string (SB-D2's). SB-D3 judges the string values it
            // saw (the system messages) and names the null ones SB-D2's.
            Exact(&["SB-D2:fail"]),
            1,
        ),
        row(
            "from bot",
            &["--flaw", "bot-from"],
            true,
            &[],
            Exact(&["SB-D3:fail"]),
            1,
        ),
        row(
            "refuses 1.1 at session start",
            &["--flaw", "refuse-1.1"],
            true,
            &["--strict"],
            Exact(&["SB-R8:fail"]),
            1,
        ),
        // A SHOULD failure warns: exit 0 without --strict.
        row(
            "refuses 1.1, not strict",
            &["--flaw", "refuse-1.1"],
            true,
            &[],
            Exact(&["SB-R8:fail"]),
            0,
        ),
        row(
            "leaks Python",
            &["--flaw", "leak-python"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks Node",
            &["--flaw", "leak-node"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "V8 JSON.parse message",
            &["--flaw", "leak-node-json"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "Allow: post",
            &["--flaw", "allow-lowercase"],
            true,
            &["--strict"],
            Exact(&["SB-H4:fail"]),
            1,
        ),
        row(
            "sources null",
            &["--flaw", "sources-null"],
            true,
            &["--strict"],
            Exact(&["SB-D8:fail"]),
            1,
        ),
        row(
            "refusal quotes the key",
            &["--flaw", "refusal-quotes-key"],
            true,
            &[],
            // The wrong keys' refusals quote it too: one refusal shape, SB-A1's fault.
            Exact(&["SB-A1:fail", "SB-A2:skipped"]),
            1,
        ),
        // In another letter case: the key is handed over all the same.
        row(
            "refusal quotes the key upper-cased",
            &["--flaw", "refusal-quotes-key-upper"],
            true,
            &[],
            Exact(&["SB-A1:fail", "SB-A2:skipped"]),
            1,
        ),
        // Only the key less its last character is accepted: SB-A3's suffixed key is refused,
        // so A3 is judged.
        row(
            "key prefix accepted",
            &["--flaw", "key-prefix"],
            true,
            &[],
            Exact(&["SB-A2:fail"]),
            1,
        ),
        // Legal, each a false alarm once: Allow on two field lines (one list, RFC 9110 §5.3),
        // an assistant message of the history updated in place by its id, a system note after
        // the answer, an address printed before the socket listens.
        row(
            "Allow on two field lines",
            &["--oddity", "allow-split"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "restored answer updated in place",
            &["--oddity", "edit-restored"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "a length note after every answer",
            &["--oddity", "length-note"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "address printed before listening",
            &["--oddity", "late-listen"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "leaks Go (status 200)",
            &["--flaw", "leak-go"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks Java (status 500)",
            &["--flaw", "leak-java"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks .NET",
            &["--flaw", "leak-dotnet"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks Rust",
            &["--flaw", "leak-rust"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks pydantic (status 422)",
            &["--flaw", "leak-pydantic"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks Swift",
            &["--flaw", "leak-swift"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks Ruby",
            &["--flaw", "leak-ruby"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        row(
            "leaks PHP",
            &["--flaw", "leak-php"],
            true,
            &["--strict"],
            Exact(&["SB-R10:fail"]),
            1,
        ),
        // Whether the key was accepted is in the body: unreadable, SB-A4 is skipped naming
        // SB-D1, which carries the fault.
        row(
            "undecodable 200 to an unexpected key",
            &["--flaw", "garbage-with-key"],
            false,
            &[],
            Exact(&["SB-D1:fail", "SB-A4:skipped"]),
            1,
        ),
        // A rule that needs a reply's content never passes or fails on one it cannot read:
        // it is skipped naming SB-D1 (MUST/SHOULD) or not run (INFO rules, which only record).
        row(
            "500 on foreign history",
            &["--flaw", "foreign-history-500"],
            true,
            &["--strict"],
            Exact(&["SB-R4:fail"]),
            1,
        ),
        row(
            "HTML page on foreign history",
            &["--flaw", "foreign-history-html"],
            true,
            &[],
            Exact(&["SB-D1:fail", "SB-R4:skipped"]),
            1,
        ),
        row(
            "OPTIONS answered with no HTTP",
            &["--flaw", "options-broken"],
            true,
            &["--strict"],
            Exact(&["SB-H5:not-run"]),
            0,
        ),
        row(
            "odd requests answered with plain text",
            &["--flaw", "odd-unreadable"],
            true,
            &["--strict"],
            Exact(&["SB-R9:not-run"]),
            0,
        ),
        row(
            "key header case answered with plain text",
            &["--flaw", "key-case-unreadable"],
            true,
            &["--strict"],
            Exact(&["SB-A5:not-run"]),
            0,
        ),
        row(
            "HTML page at a private chat's session start",
            &["--flaw", "private-start-html"],
            true,
            &[],
            Exact(&["SB-D1:fail", "SB-S3:skipped"]),
            1,
        ),
        row(
            "HTML page without history",
            &["--flaw", "no-history-html"],
            true,
            &[],
            Exact(&["SB-D1:fail", "SB-R6:skipped", "SB-S2:skipped"]),
            1,
        ),
        // Legal: explicit endSession:false, a 405 to OPTIONS, a no-op reply to odd requests.
        row(
            "endSession false",
            &["--oddity", "end-false"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "405 to OPTIONS",
            &["--oddity", "options-405"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // GET/PUT/HEAD bodies are SB-H4's alone; OPTIONS, which the app never sends, is only
        // recorded (SB-D9 judges replies to POSTs).
        row(
            "HTML 405 to GET/PUT/HEAD",
            &["--flaw", "html-not-post"],
            true,
            &["--strict"],
            Exact(&["SB-H4:fail"]),
            1,
        ),
        row(
            "stdlib 501 to OPTIONS",
            &["--oddity", "options-501"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "no-op reply to odd requests",
            &["--oddity", "odd-noop"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "forgets without history",
            &["--flaw", "forget-without-history"],
            true,
            &[],
            Exact(&["SB-R6:fail"]),
            1,
        ),
        // An echo of history never recalls: with the fixture's recall pattern the bridge does
        // not enter the scenario (skipped, reply quoted); with a plain recall prompt (a flag
        // overriding the file) the word is found, but not without history (SB-R6) and the
        // decoys of a restored history are echoed too (SB-R11).
        row(
            "echoes history",
            &["--flaw", "echo-history"],
            true,
            &[],
            Exact(&[
                "SB-R6:skipped",
                "SB-R11:skipped",
                "SB-S2:skipped",
                "SB-S4:skipped",
            ]),
            1,
        ),
        row(
            "echoes history, plain recall prompt",
            &["--flaw", "echo-history"],
            true,
            &["--recall", "which word did I give you?"],
            Exact(&["SB-R6:fail", "SB-R11:fail"]),
            1,
        ),
        row(
            "case-sensitive ids",
            &["--flaw", "case-sensitive-ids"],
            true,
            &[],
            Exact(&["SB-R3:fail"]),
            1,
        ),
        // One memory for every chat: cross-talk (SB-S4). A restored chat recalls another chat's
        // word instead of its history's: the same fault, so SB-R11's recall is skipped naming
        // SB-S4 (one fault, one verdict; it failed too before).
        row(
            "global memory",
            &["--flaw", "global-memory"],
            true,
            &["--strict"],
            Exact(&["SB-R11:skipped", "SB-S4:fail"]),
            1,
        ),
        // Answers but does not enter the end-session scenario: skipped, with the reply quoted.
        row(
            "never ends a session",
            &["--flaw", "no-end"],
            true,
            &[],
            Exact(&["SB-S1:skipped", "SB-R12:skipped"]),
            1,
        ),
        // SB-R2: decoding is SB-D1's; a 5xx or an ended session is SB-R2's own cause, and a
        // rule whose own sub-check fails still fails beside SB-D1.
        row(
            "500 to an empty send",
            &["--flaw", "empty-send-500"],
            true,
            &[],
            Exact(&["SB-R2:fail"]),
            1,
        ),
        row(
            "empty send ends the session",
            &["--flaw", "empty-send-ends"],
            true,
            &[],
            Exact(&["SB-R2:fail"]),
            1,
        ),
        row(
            "HTML page to an empty send",
            &["--flaw", "empty-send-html"],
            true,
            &[],
            Exact(&["SB-D1:fail", "SB-R2:skipped"]),
            1,
        ),
        row(
            "500 HTML page to an empty send",
            &["--flaw", "empty-send-html-500"],
            true,
            &[],
            // Two faults: the 5xx (SB-R2's) and the HTML body (SB-D1's: the app ignores the
            // status of its own reply); SB-D9 judges the probes' error replies and shows this
            // one skipped naming SB-D1.
            Exact(&["SB-D1:fail", "SB-R2:fail", "SB-D9:skipped"]),
            1,
        ),
        // SB-H1's own cause: no HTTP reply at all to its session start (no status to record);
        // SB-D1 shows that exchange skipped naming SB-H1 (one fault, one verdict).
        row(
            "hangs up on the new-chat session start",
            &["--flaw", "hangup-second-post"],
            true,
            &[],
            Exact(&["SB-H1:fail", "SB-D1:skipped"]),
            1,
        ),
        // The session starts SB-R11 and SB-R12 judge, answered with an HTML page: SB-D1's
        // fault; each rule shows its `decodes` sub-check skipped naming SB-D1.
        row(
            "HTML page at a restored chat's session start",
            &["--flaw", "restored-start-html"],
            true,
            &["--strict"],
            Exact(&["SB-D1:fail", "SB-R11:skipped"]),
            1,
        ),
        row(
            "HTML page at an ended chat's session start",
            &["--flaw", "ended-start-html"],
            true,
            &["--strict"],
            Exact(&["SB-D1:fail", "SB-R12:skipped"]),
            1,
        ),
        // Legal: a nudge to the empty send, a 201 with a greeting at session start.
        row(
            "nudge on an empty send",
            &["--oddity", "empty-send-nudge"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "201 with a greeting at session start",
            &["--oddity", "start-201"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // The MUST rules' own flaws (audit: each rule fails against a peer not ours).
        row(
            "accepts a missing key",
            &["--flaw", "accept-missing-key"],
            true,
            &[],
            Exact(&["SB-A1:fail"]),
            1,
        ),
        row(
            "accepts a wrong key",
            &["--flaw", "accept-wrong-key"],
            true,
            &[],
            // No key check: which comes first, key or body, cannot be seen (SB-A2's fault).
            Exact(&["SB-A2:fail", "SB-A3:skipped"]),
            1,
        ),
        row(
            "answers the send twice",
            &["--flaw", "answer-twice"],
            true,
            &[],
            Exact(&["SB-R1:fail"]),
            1,
        ),
        row(
            "reply reuses the request's id",
            &["--flaw", "reply-with-request-id"],
            true,
            &[],
            Exact(&["SB-D4:fail"]),
            1,
        ),
        row(
            "relative source URL",
            &["--flaw", "relative-sources"],
            true,
            &[],
            Exact(&["SB-D5:fail"]),
            1,
        ),
        row(
            "re-enables history unasked",
            &["--flaw", "reenable-history"],
            true,
            &[],
            Exact(&["SB-S2:fail"]),
            1,
        ),
        row(
            "500 at an ended chat's session start",
            &["--flaw", "crash-on-ended"],
            true,
            &["--strict"],
            Exact(&["SB-R12:fail"]),
            1,
        ),
        row(
            "400 to unknown request keys",
            &["--flaw", "strict-keys"],
            true,
            &["--strict"],
            Exact(&["SB-R7:fail"]),
            1,
        ),
        // The same messages with other options are another reply (the app ends the chat or
        // stops sending history).
        row(
            "ends the session on unknown request keys",
            &["--flaw", "end-on-unknown-keys"],
            true,
            &["--strict"],
            Exact(&["SB-R7:fail"]),
            1,
        ),
        row(
            "history off on unknown request keys",
            &["--flaw", "private-on-unknown-keys"],
            true,
            &["--strict"],
            Exact(&["SB-R7:fail"]),
            1,
        ),
        row(
            "ends the session on a 1.1 send",
            &["--flaw", "end-on-1.1"],
            true,
            &["--strict"],
            Exact(&["SB-R8:fail"]),
            1,
        ),
        // Looser key comparisons, each caught by a wrong key of its own.
        row(
            "key suffix accepted",
            &["--flaw", "key-suffix"],
            true,
            &["--strict"],
            Exact(&["SB-A2:fail"]),
            1,
        ),
        row(
            "key compared without hyphens",
            &["--flaw", "key-nohyphen"],
            true,
            &["--strict"],
            Exact(&["SB-A2:fail"]),
            1,
        ),
        row(
            "key length compared only",
            &["--flaw", "key-length"],
            true,
            &["--strict"],
            Exact(&["SB-A2:fail"]),
            1,
        ),
        // The app sends no history once a chat turned it off: such a send is refused too.
        row(
            "no key check without history",
            &["--flaw", "auth-skip-without-history"],
            true,
            &["--strict"],
            Exact(&["SB-A1:fail", "SB-A2:skipped"]),
            1,
        ),
        // A key that is an ordinary word of the refusal ("This bridge needs the right key"): its
        // occurrence there cannot be told from a coincidence, so it is not judged a leak.
        row(
            "key is a word of the refusal",
            &["--oddity", "refuse-403", "--key", "right"],
            false,
            &["--key", "right", "--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "text cut from the raw bytes",
            &["--flaw", "raw-text"],
            true,
            &[],
            Exact(&["SB-R5:fail"]),
            1,
        ),
        // A 200 whose body is labelled gzip but plain arrived: SB-H1 has its reply, and the one
        // fault, a body the app cannot decode, is SB-D1's (SB-H1's decodes part skipped naming it).
        row(
            "plain body labelled gzip",
            &["--flaw", "gzip-lie"],
            true,
            &["--strict"],
            Exact(&["SB-H1:skipped", "SB-D1:fail"]),
            1,
        ),
        // The app's HTTP client sends the next request on the connection a reply left open
        // (RFC 9112 §9.3); this bridge never reads it there, and SB-D1 names that cause.
        row(
            "deaf on a kept-alive connection",
            &["--flaw", "keepalive-deaf"],
            true,
            &["--timeout", "3", "--strict"],
            Exact(&["SB-D1:fail"]),
            1,
        ),
        // This bridge reads the request sent on the connection its reply left open, then
        // closes it without a reply: the app does not send a POST again (reference §1.1, RFC
        // 9112 §9.3.1), and SB-D1 names the cause (the POST re-sent on a new connection passed
        // it before).
        row(
            "hangs up a request on a kept-alive connection",
            &["--flaw", "hangup-kept-post"],
            true,
            &["--timeout", "3", "--strict"],
            Exact(&["SB-D1:fail"]),
            1,
        ),
        // A server may close an idle connection at any time (RFC 9112 §9.5): seen before the
        // request is written, which goes out on a new connection.
        row(
            "closes kept-alive connections unannounced",
            &["--oddity", "close-unannounced"],
            true,
            &["--timeout", "3", "--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "body in the reply to HEAD",
            &["--flaw", "head-body"],
            true,
            &["--strict"],
            Exact(&["SB-H4:fail"]),
            1,
        ),
        // A first reply past the client's timeout (3 s here): SB-H2's own cause ("full
        // response in under 60 s"); SB-D1 shows that exchange skipped naming SB-H2.
        row(
            "first reply after the timeout",
            &["--flaw", "slow-first"],
            true,
            &["--timeout", "3", "--strict"],
            Exact(&["SB-H2:fail", "SB-D1:skipped"]),
            1,
        ),
        // The app's timeout counts time without data (reference §1.1): a first reply that
        // keeps coming (a space every 0.5 s for 4 s) is read whole under `--timeout 2`.
        row(
            "first reply dribbled past the timeout",
            &["--oddity", "trickle"],
            true,
            &["--timeout", "2", "--strict"],
            Exact(&[]),
            0,
        ),
        // bridgewire's own bound on a whole reply still ends it, named as its own.
        row(
            "first reply dribbled past --max-reply-time",
            &["--oddity", "trickle"],
            true,
            &["--timeout", "2", "--max-reply-time", "3", "--strict"],
            Exact(&["SB-H2:fail", "SB-D1:skipped"]),
            1,
        ),
        row(
            "401 to a key it does not expect",
            &["--flaw", "reject-unexpected-key"],
            false,
            &["--strict"],
            Exact(&["SB-A4:fail"]),
            1,
        ),
        // A string flag does not decode under gamma: SB-D6 states exactly that part, so it
        // carries the fault; SB-D1 shows that reply skipped naming SB-D6, as do the scenario
        // rules that needed it.
        row(
            "string option flag",
            &["--flaw", "options-string"],
            true,
            &[],
            Exact(&[
                "SB-D1:skipped",
                "SB-D6:fail",
                "SB-R6:skipped",
                "SB-S2:skipped",
                "SB-S3:skipped",
            ]),
            1,
        ),
        row(
            "empty assistant message",
            &["--flaw", "empty-content"],
            true,
            &["--strict"],
            Exact(&["SB-D7:fail"]),
            1,
        ),
        row(
            "no sources key",
            &["--flaw", "no-sources"],
            true,
            &["--strict"],
            Exact(&["SB-D8:fail"]),
            1,
        ),
        row(
            "options not re-asserted on reopen",
            &["--flaw", "forget-private-on-reopen"],
            true,
            &["--strict"],
            Exact(&["SB-S3:fail"]),
            1,
        ),
        row(
            "private mode re-asserted on every reply",
            &["--oddity", "private-reassert"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "an ended chat reopens afresh",
            &["--oddity", "ended-reopens"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "422 to malformed requests",
            &["--oddity", "errors-422"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // Legal: cited sources with an absolute https URL (and a key the client ignores), a
        // 403 refusal of a missing or wrong key.
        row(
            "https sources",
            &["--oddity", "sources-https"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "403 refusal",
            &["--oddity", "refuse-403"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // `farewell` ends the session with nothing to show: the fixture's `expect` has no text
        // to match, but the session did end, so SB-S1 judges it (it was skipped, a miss).
        row(
            "silent end",
            &["--flaw", "silent-end"],
            true,
            &[],
            Exact(&["SB-S1:fail"]),
            1,
        ),
        // Legal oddities for what SB-A4, A5, R1, R5, R7, R8, D7 and S4 judge: no warning.
        row(
            "no key configured, a sent key noted as ignored",
            &["--oddity", "key-noted"],
            false,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "key compared trimmed",
            &["--oddity", "key-trim"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "a system note before every answer",
            &["--oddity", "preface-note"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "links cited, slashes escaped",
            &["--oddity", "cite-links"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "ignored request keys listed in the reply",
            &["--oddity", "report-ignored"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "the request's version echoed in the reply",
            &["--oddity", "version-echo"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "options-only replies to the toggles",
            &["--oddity", "silent-toggle"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // Upsert by id is the protocol's in-place update: reusing its own earlier message's id
        // (upper-cased in the request's history) is legal; SB-D4 failed it (a false alarm).
        row(
            "the previous answer edited in place",
            &["--oddity", "edit-previous"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // No reply to the empty send: receiving it is SB-D1's ("received completely"); SB-R2
        // (no 5xx, not ended) cannot see either and is skipped naming SB-D1 (it failed too).
        row(
            "hangs up on an empty send",
            &["--flaw", "empty-send-hangup"],
            true,
            &[],
            Exact(&["SB-D1:fail", "SB-R2:skipped"]),
            1,
        ),
        // Legal HTTP framing and labels: the client reads the whole body and decodes it.
        row(
            "text/plain label on JSON replies",
            &["--oddity", "text-plain"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "close-delimited replies",
            &["--oddity", "close-delimited"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "202 for every reply",
            &["--oddity", "accepted-202"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "the word echoed, chats counted",
            &["--oddity", "word-echo"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // Replies that vary between identical requests (a model, a counter): SB-R5, R7 and R8
        // compared contents and failed (a false alarm); a control shows that the plain request
        // varies too, so they judge the reply's shape. A varying bridge that answers the app's
        // `\/` bytes with an error still fails SB-R5 (its shape differs).
        row(
            "replies vary between identical requests",
            &["--oddity", "varying"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // Random wording on every answer (as a model's): two runs never answer alike.
        row(
            "replies worded at random, as a model's",
            &["--oddity", "model-wording"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "varying replies, a system error for escaped links",
            &["--flaw", "varying-escaped-error"],
            true,
            &["--strict"],
            Exact(&["SB-R5:fail"]),
            1,
        ),
        // Valid JSON beyond serde's limits in keys the app ignores: SB-D1 failed both.
        row(
            "a number beyond a double in an extension",
            &["--oddity", "huge-number"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        row(
            "an extension nested 150 deep",
            &["--oddity", "deep-extension"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // Misses: a second answer in other words, a key compared without case, a source URL
        // with no host (a WHATWG parser reads `https:example.com` as having one).
        row(
            "answered twice, reworded",
            &["--flaw", "double-answer-reworded"],
            true,
            &["--strict"],
            Exact(&["SB-R1:fail"]),
            1,
        ),
        row(
            "key case ignored",
            &["--flaw", "key-casefold"],
            true,
            &["--strict"],
            Exact(&["SB-A2:fail"]),
            1,
        ),
        row(
            "source URL without a host",
            &["--flaw", "source-no-host"],
            true,
            &["--strict"],
            Exact(&["SB-D5:fail"]),
            1,
        ),
        row(
            "unusual legal source URLs",
            &["--oddity", "sources-unusual"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // A plain English error that names a position or a field as serde does is no leak
        // (SB-R10 warned on "at line 1 column N" and "missing field `x`" alone).
        row(
            "plain errors naming a position or a field",
            &["--oddity", "error-positions"],
            true,
            &["--strict"],
            Exact(&[]),
            0,
        ),
        // The endpoint redirects with 301: SB-H3 fails, nothing else is judged on a redirect.
        row(
            "301 redirect",
            &["--flaw", "redirect-301"],
            true,
            &[],
            AllBut(&[]),
            1,
        ),
        // Random bytes: nothing decodes. SB-D1 carries it; SB-H1 and SB-R2 show their decode
        // sub-check skipped naming SB-D1 (they got an HTTP reply, no 5xx), SB-R10 sees a 200
        // to malformed JSON; every other rule that needs a reply's content is skipped naming
        // SB-D1, SB-R9 (INFO) records nothing.
        row(
            "random bytes",
            &["--flaw", "random-bytes"],
            false,
            &[],
            Exact(&[
                "SB-H1:skipped",
                "SB-R2:skipped",
                "SB-R10:fail",
                "SB-D1:fail",
                "SB-A4:skipped",
                "SB-R1:skipped",
                "SB-R3:skipped",
                "SB-R4:skipped",
                "SB-R5:skipped",
                "SB-R6:skipped",
                "SB-R7:skipped",
                "SB-R8:skipped",
                "SB-R11:skipped",
                "SB-R12:skipped",
                "SB-S1:skipped",
                "SB-S2:skipped",
                "SB-S3:skipped",
                "SB-S4:skipped",
                "SB-D2:skipped",
                "SB-D3:skipped",
                "SB-D4:skipped",
                "SB-D5:skipped",
                "SB-D6:skipped",
                "SB-D7:skipped",
                "SB-D8:skipped",
                "SB-R9:not-run",
                // Every POST got a 200: no error reply to judge.
                "SB-D9:not-run",
            ]),
            1,
        ),
    ]
}

fn run(row: &Row, py: &str, cwd: &std::path::Path) -> (Option<i32>, Value, String) {
    let mut cmd = Command::new(BW);
    cmd.current_dir(cwd)
        .args([
            "check",
            "sidebridge",
            "--format",
            "json",
            "--startup-timeout",
            "30",
        ])
        .args(row.flags);
    if row.fixture {
        cmd.arg("--config").arg(peer_dir().join("peer.toml"));
    }
    if row.keyed {
        cmd.args(["--key", KEY]);
    }
    cmd.arg("--")
        .arg(py)
        .arg(peer_dir().join("peer.py"))
        .args(row.peer);
    if row.keyed {
        cmd.args(["--key", KEY]);
    }
    let out = cmd.output().expect("run bridgewire");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn independent_peers_get_exactly_their_verdicts() {
    let Some(py) = python("independent_peers_get_exactly_their_verdicts") else {
        return;
    };
    let rows = rows();
    let tmp = tempfile::tempdir().unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .chunks(rows.len().div_ceil(4))
            .map(|chunk| {
                let cwd = tmp.path();
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|r| (r, run(r, py, cwd)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut problems = Vec::new();
    for (row, (code, v, stderr)) in &results {
        let Some(verdicts) = v["verdicts"].as_array() else {
            problems.push(format!(
                "{}: no JSON report (exit {code:?}): {stderr}",
                row.name
            ));
            continue;
        };
        let judged: BTreeSet<String> = verdicts
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect();
        let bad: BTreeSet<String> = verdicts
            .iter()
            .filter(|x| x["status"] != "pass")
            .map(|x| {
                format!(
                    "{}:{}",
                    x["id"].as_str().unwrap(),
                    x["status"].as_str().unwrap()
                )
            })
            .collect();
        let bad_ids: BTreeSet<String> = bad
            .iter()
            .map(|b| b.split(':').next().unwrap().to_string())
            .collect();
        match &row.expect {
            Expect::Exact(want) => {
                let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
                if bad != want {
                    let details: Vec<String> = verdicts
                        .iter()
                        .filter(|x| x["status"] != "pass")
                        .map(|x| format!("    {} {}: {}", x["id"], x["status"], x["detail"]))
                        .collect();
                    problems.push(format!(
                        "{}: expected non-pass {want:?}, got {bad:?}\n{}",
                        row.name,
                        details.join("\n")
                    ));
                }
            }
            Expect::AllBut(passing) => {
                let want: BTreeSet<String> = judged
                    .iter()
                    .filter(|id| !passing.contains(&id.as_str()))
                    .cloned()
                    .collect();
                if bad_ids != want {
                    problems.push(format!(
                        "{}: expected every rule but {passing:?} not to pass; differs: missing {:?}, extra {:?}",
                        row.name,
                        want.difference(&bad_ids).collect::<Vec<_>>(),
                        bad_ids.difference(&want).collect::<Vec<_>>()
                    ));
                }
            }
        }
        if *code != Some(row.exit) {
            problems.push(format!(
                "{}: exit {code:?}, expected {}",
                row.name, row.exit
            ));
        }
        // Every non-pass verdict names its cause; a skipped or failed one never comes
        // without a detail.
        for x in verdicts.iter().filter(|x| x["status"] != "pass") {
            if x["detail"].as_str().unwrap_or_default().is_empty() {
                problems.push(format!("{}: {} has no detail", row.name, x["id"]));
            }
        }
        // Levels are carried by every verdict, as the catalogue says.
        if verdicts.iter().any(|x| x["level"].as_str().is_none()) {
            problems.push(format!("{}: a verdict without a level", row.name));
        }
    }
    // Spot checks of what the details say.
    let detail = |name: &str, id: &str| -> String {
        results
            .iter()
            .find(|(r, _)| r.name == name)
            .and_then(|(_, (_, v, _))| {
                v["verdicts"]
                    .as_array()?
                    .iter()
                    .find(|x| x["id"] == id)
                    .map(|x| x["detail"].as_str().unwrap_or_default().to_string())
            })
            .unwrap_or_default()
    };
    for (name, id, needle) in [
        ("leaks Python", "SB-R10", "line 1 column 69 (char 68)"),
        (
            "leaks pydantic (status 422)",
            "SB-R10",
            "2 validation errors for ChatRequest",
        ),
        ("leaks Swift", "SB-R10", "Swift.DecodingError"),
        (
            "plain body labelled gzip",
            "SB-D1",
            "status 200: the gzip body does not decode",
        ),
        (
            "plain body labelled gzip",
            "SB-H1",
            "SB-D1 carries that fault",
        ),
        (
            "key suffix accepted",
            "SB-A2",
            "auth/key-suffix/send: assistant content was served",
        ),
        (
            "key compared without hyphens",
            "SB-A2",
            "auth/key-hyphen-added/send: assistant content was served",
        ),
        (
            "key length compared only",
            "SB-A2",
            "auth/key-same-length/send: assistant content was served",
        ),
        (
            "no key check without history",
            "SB-A1",
            "auth/no-key-without-history/send: assistant content was served",
        ),
        (
            "key is a word of the refusal",
            "SB-A1",
            "whether a refusal quotes the key is not judged",
        ),
        (
            "ends the session on unknown request keys",
            "SB-R7",
            "(status 200, endSession: true)",
        ),
        (
            "history off on unknown request keys",
            "SB-R7",
            "(status 200, disableSendHistory: true)",
        ),
        (
            "ends the session on a 1.1 send",
            "SB-R8",
            "(status 200, endSession: true)",
        ),
        (
            "first reply after the timeout",
            "SB-H2",
            "no data received for 3s: the app's timeout (--timeout)",
        ),
        (
            "first reply dribbled past --max-reply-time",
            "SB-H2",
            "whole-reply limit (--max-reply-time), not the app's timeout",
        ),
        ("leaks Node", "SB-R10", "Cannot read properties of"),
        ("V8 JSON.parse message", "SB-R10", "in JSON at position 73"),
        ("Allow: post", "SB-H4", "got \"post\""),
        ("sources null", "SB-D8", "`sources` is null"),
        (
            "refusal quotes the key",
            "SB-A1",
            "quotes the configured key",
        ),
        (
            "refusal quotes the key",
            "SB-A2",
            "quotes the configured key",
        ),
        (
            "deaf on a kept-alive connection",
            "SB-D1",
            "keep-alive/send: no data received for 3s (--timeout) on the connection the bridge kept open",
        ),
        (
            "hangs up a request on a kept-alive connection",
            "SB-D1",
            "keep-alive/send: the bridge closed the kept connection after the request was sent, before any reply",
        ),
        (
            "body in the reply to HEAD",
            "SB-H4",
            "\"the server MUST NOT send content in the response\" to HEAD",
        ),
        (
            "refusal quotes the key upper-cased",
            "SB-A1",
            "quotes the configured key in another letter case",
        ),
        (
            "key prefix accepted",
            "SB-A2",
            "auth/key-prefix/send: assistant content was served",
        ),
        (
            "key case ignored",
            "SB-A2",
            "auth/key-case/send: assistant content was served",
        ),
        (
            "replies vary between identical requests",
            "SB-R5",
            "so content is not compared",
        ),
        (
            "replies vary between identical requests",
            "SB-R8",
            "so content is not compared",
        ),
        (
            "varying replies, a system error for escaped links",
            "SB-R5",
            "shape: ",
        ),
        ("answered twice, reworded", "SB-R1", "without history"),
        ("source URL without a host", "SB-D5", "https:example.com"),
        ("leaks Go (status 200)", "SB-R10", "json: cannot unmarshal"),
        ("leaks Java (status 500)", "SB-R10", "com.fasterxml.jackson"),
        ("leaks .NET", "SB-R10", "BytePositionInLine"),
        ("leaks Rust", "SB-R10", "EOF while parsing"),
        ("leaks Ruby", "SB-R10", "JSON::ParserError"),
        ("leaks PHP", "SB-R10", "PHP Fatal error"),
        ("never ends a session", "SB-S1", "Farewell, and thanks"),
        ("echoes history", "SB-R6", "You wrote:"),
        (
            "echoes history, plain recall prompt",
            "SB-R11",
            "echoes history",
        ),
        (
            "301 redirect",
            "SB-R1",
            "not judged: the bridge redirects (SB-H3)",
        ),
        ("correct, no fixture", "SB-R6", "[sidebridge.fixture]"),
        (
            "refuses 1.1 at session start",
            "SB-R8",
            "session start was refused",
        ),
        (
            "HTML page on foreign history",
            "SB-R4",
            "SB-D1 carries that fault",
        ),
        ("random bytes", "SB-R4", "SB-D1 carries that fault"),
        ("random bytes", "SB-H1", "SB-D1 carries that fault"),
        ("301 redirect", "SB-H3", "301"),
        ("accepts a wrong key", "SB-A3", "SB-A2 carries that fault"),
        (
            "accepts a missing key",
            "SB-A1",
            "assistant content was served",
        ),
        ("answers the send twice", "SB-R1", "answered twice"),
        (
            "reply reuses the request's id",
            "SB-D4",
            "equals an id of the request",
        ),
        ("relative source URL", "SB-D5", "/docs/peer"),
        ("400 to unknown request keys", "SB-R7", "status 400"),
        ("text cut from the raw bytes", "SB-R5", "\\/"),
        ("random bytes", "SB-R2", "SB-D1 carries that fault"),
        (
            "HTML page to an empty send",
            "SB-R2",
            "SB-D1 carries that fault",
        ),
        ("500 to an empty send", "SB-R2", "status 500"),
        ("500 HTML page to an empty send", "SB-R2", "status 500"),
        (
            "empty send ends the session",
            "SB-R2",
            "the empty send ended the session",
        ),
        (
            "hangs up on the new-chat session start",
            "SB-H1",
            "no HTTP reply",
        ),
        ("random bytes", "SB-R5", "SB-D1 carries that fault"),
        ("string option flag", "SB-S3", "SB-D6 carries that fault"),
        (
            "hangs up on an empty send",
            "SB-R2",
            "SB-D1 carries that fault",
        ),
        ("silent end", "SB-S1", "no message to show"),
        (
            "key compared trimmed",
            "SB-A5",
            "key-with-spaces: status 200, accepted",
        ),
        ("string option flag", "SB-D6", "options.disableSendHistory"),
        (
            "500 HTML page to an empty send",
            "SB-D9",
            "SB-D1 carries that fault",
        ),
        (
            "undecodable 200 to an unexpected key",
            "SB-A4",
            "SB-D1 carries that fault",
        ),
        (
            "HTML page at a private chat's session start",
            "SB-S3",
            "SB-D1 carries that fault",
        ),
        (
            "HTML page without history",
            "SB-R6",
            "SB-D1 carries that fault",
        ),
        ("OPTIONS answered with no HTTP", "SB-H5", "bad status line"),
        (
            "odd requests answered with plain text",
            "SB-R9",
            "unsupported request",
        ),
        (
            "key header case answered with plain text",
            "SB-A5",
            "header-case",
        ),
    ] {
        let d = detail(name, id);
        if !d.contains(needle) {
            problems.push(format!("{name}: {id} detail lacks {needle:?}: {d:?}"));
        }
    }
    // Every sub-check is run and shown: the decode sub-check of SB-H1 and SB-R2 is skipped
    // naming SB-D1 on an unreadable reply, passed on a readable one, whatever the rule's
    // verdict; SB-R2's own sub-checks still decide when they fail.
    let subcheck = |name: &str, id: &str, sub: &str| -> (String, String) {
        results
            .iter()
            .find(|(r, _)| r.name == name)
            .and_then(|(_, (_, v, _))| {
                let x = v["verdicts"].as_array()?.iter().find(|x| x["id"] == id)?;
                let c = x["subchecks"]
                    .as_array()?
                    .iter()
                    .find(|c| c["name"] == sub)?;
                Some((
                    c["status"].as_str()?.to_string(),
                    c["evidence"].as_str()?.to_string(),
                ))
            })
            .unwrap_or_default()
    };
    for (name, id, sub, status, needle) in [
        ("random bytes", "SB-H1", "decodes", "skipped", "SB-D1"),
        ("random bytes", "SB-H1", "status", "pass", "status 200"),
        ("random bytes", "SB-R2", "decodes", "skipped", "SB-D1"),
        ("random bytes", "SB-R2", "no-5xx", "pass", "status 200"),
        ("random bytes", "SB-R2", "not-ended", "skipped", "SB-D1"),
        ("500 to an empty send", "SB-R2", "decodes", "pass", ""),
        (
            "500 to an empty send",
            "SB-R2",
            "no-5xx",
            "fail",
            "status 500",
        ),
        (
            "500 HTML page to an empty send",
            "SB-R2",
            "decodes",
            "skipped",
            "SB-D1",
        ),
        (
            "500 HTML page to an empty send",
            "SB-R2",
            "no-5xx",
            "fail",
            "status 500",
        ),
        (
            "hangs up on the new-chat session start",
            "SB-H1",
            "status",
            "fail",
            "no HTTP reply",
        ),
        (
            "hangs up on the new-chat session start",
            "SB-D1",
            "received",
            "skipped",
            "SB-H1 carries that fault",
        ),
        (
            "first reply after the timeout",
            "SB-D1",
            "received",
            "skipped",
            "SB-H2 carries that fault",
        ),
        (
            "string option flag",
            "SB-D1",
            "decodes",
            "skipped",
            "SB-D6 carries that fault",
        ),
        ("string option flag", "SB-D1", "received", "pass", ""),
        (
            "HTML page at a restored chat's session start",
            "SB-R11",
            "decodes",
            "skipped",
            "SB-D1 carries that fault",
        ),
        (
            "HTML page at a restored chat's session start",
            "SB-R11",
            "status",
            "pass",
            "status 200",
        ),
        (
            "HTML page at an ended chat's session start",
            "SB-R12",
            "decodes",
            "skipped",
            "SB-D1 carries that fault",
        ),
        (
            "HTML page at an ended chat's session start",
            "SB-R12",
            "no-5xx",
            "pass",
            "status 200",
        ),
        (
            "500 at an ended chat's session start",
            "SB-R12",
            "no-5xx",
            "fail",
            "status 500",
        ),
        ("correct", "SB-H1", "decodes", "pass", ""),
        (
            "201 with a greeting at session start",
            "SB-H1",
            "status",
            "pass",
            "status 201",
        ),
        (
            "nudge on an empty send",
            "SB-R2",
            "not-ended",
            "pass",
            "1 message",
        ),
    ] {
        let (got, evidence) = subcheck(name, id, sub);
        if got != status || !evidence.contains(needle) {
            problems.push(format!(
                "{name}: {id} sub-check {sub}: expected {status} with {needle:?}, got {got:?} {evidence:?}"
            ));
        }
    }
    // The legal oddities pass their rule without a warning.
    for (name, id) in [
        ("422 to malformed requests", "SB-R10"),
        ("private mode re-asserted on every reply", "SB-S2"),
        ("private mode re-asserted on every reply", "SB-S3"),
        ("an ended chat reopens afresh", "SB-R12"),
        ("https sources", "SB-D5"),
        ("403 refusal", "SB-A1"),
        ("403 refusal", "SB-A2"),
        ("nudge on an empty send", "SB-R2"),
        ("201 with a greeting at session start", "SB-H1"),
        ("endSession false", "SB-R4"),
        ("405 to OPTIONS", "SB-H5"),
        ("Allow on two field lines", "SB-H4"),
        ("restored answer updated in place", "SB-D4"),
        ("a length note after every answer", "SB-R3"),
        ("address printed before listening", "SB-H1"),
        ("no-op reply to odd requests", "SB-R9"),
        ("stdlib 501 to OPTIONS", "SB-H5"),
        ("no key configured, a sent key noted as ignored", "SB-A4"),
        ("key compared trimmed", "SB-A5"),
        ("a system note before every answer", "SB-R1"),
        ("links cited, slashes escaped", "SB-R5"),
        ("links cited, slashes escaped", "SB-D5"),
        ("ignored request keys listed in the reply", "SB-R7"),
        ("the request's version echoed in the reply", "SB-R8"),
        ("options-only replies to the toggles", "SB-D7"),
        ("the word echoed, chats counted", "SB-S4"),
        ("the previous answer edited in place", "SB-D4"),
    ] {
        let d = detail(name, id);
        if d.contains("WARN") {
            problems.push(format!("{name}: {id} warns: {d:?}"));
        }
    }
    // Every legal oddity, and the correct peer, passes with no warning at all (SB-D9 once
    // warned every run about the 4xx/401 texts SB-R10 and SB-A1 ask for).
    for (row, (_, v, _)) in &results {
        let legal = !row.peer.contains(&"--flaw");
        for x in v["verdicts"].as_array().into_iter().flatten() {
            let d = x["detail"].as_str().unwrap_or_default();
            if legal && d.contains("WARN") {
                problems.push(format!("{}: {} warns: {d:?}", row.name, x["id"]));
            }
        }
    }
    // A non-2xx reply to the emulated client's own request, with text, still warns.
    let d = detail("500 to an empty send", "SB-D9");
    if !d.contains("WARN empty-send/send: status 500") {
        problems.push(format!("500 to an empty send: SB-D9 does not warn: {d:?}"));
    }
    // The app sends only POST: no warning about the text of a reply to another method.
    for name in ["correct", "404 with Allow", "stdlib 501 to OPTIONS"] {
        let d = detail(name, "SB-D9");
        if d.contains("methods/") {
            problems.push(format!("{name}: SB-D9 judges a method probe: {d:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `parity` between two builds of a bridge that is not ours (peer.py and a variant), replaying
/// the recorded Side Bridge cells on both: differences the client cannot see pass (explicit
/// `endSession: false`, `options: null`, upper-case ids, extra keys, chunked replies, 202 for 200), one it
/// shows fails naming the changed field.
#[test]
fn parity_of_two_peer_builds_passes_what_the_client_cannot_see_and_names_what_it_can() {
    let Some(py) =
        python("parity_of_two_peer_builds_passes_what_the_client_cannot_see_and_names_what_it_can")
    else {
        return;
    };
    let cells = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("recordings/sidebridge");
    let peer = peer_dir().join("peer.py");
    let leg = |extra: &[&str]| {
        let mut l = format!("cmd:{py} {} --key s3cret", peer.display());
        for a in extra {
            l.push(' ');
            l.push_str(a);
        }
        l
    };
    let parity = |head: &[&str]| {
        let out = Command::new(BW)
            .args(["parity", "--allow-same-bridge"])
            .args(if head.contains(&"max-reply") {
                &["--timeout-ms", "2s", "--max-reply-time", "3"][..]
            } else {
                &["--timeout-ms", "30s"][..]
            })
            .args(["--base", &leg(&[]), "--head"])
            .arg(leg(&head[..head.len()
                - usize::from(
                    head.contains(&"keyless") || head.contains(&"max-reply"),
                )]))
            .arg(&cells)
            // The cells' key was redacted when they were recorded; this is the one to send
            // (an empty one: none, the keyless case below).
            .env(
                "SIDEBRIDGE_KEY",
                if head.contains(&"keyless") {
                    ""
                } else {
                    "s3cret"
                },
            )
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let jobs: Vec<&[&str]> = vec![
        &["--oddity", "end-false"],
        &["--oddity", "options-null"],
        &["--oddity", "upper-ids"],
        &["--oddity", "unknown-keys"],
        &["--oddity", "chunked"],
        // 202 instead of 200: no client build tells them apart (it was a parity FAIL,
        // `/status: 200 → 202`); extension keys at the top level of the reply.
        &["--oddity", "accepted-202"],
        &["--oddity", "version-echo"],
        &["--oddity", "report-ignored"],
        &["--flaw", "null-from"],
        // Without the key every keyed request would be refused alike on both legs: the flaw
        // must not pass on that; the cells are not run, naming SIDEBRIDGE_KEY.
        &["--flaw", "null-from", "keyless"],
        // Its first reply trickles in for 4 s (a space every 0.5 s): never 2 s without data,
        // but past a --max-reply-time of 3 s, which the leg's error names.
        &["--oddity", "trickle", "max-reply"],
    ];
    // Four threads, not one per job: every job starts two interpreters per cell, and a 2-core
    // machine under load must still start each within the legs' bound.
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(4))
            .map(|chunk| s.spawn(move || chunk.iter().map(|j| (*j, parity(j))).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // The cells hold real replies to compare: the recorded rows, not only 401s.
    let cells_count = std::fs::read_dir(cells.join("sidebridge-ref"))
        .unwrap()
        .count();
    for (head, (code, out)) in results {
        if head.contains(&"max-reply") {
            assert_ne!(code, Some(0), "{head:?}: {out}");
            assert!(
                out.contains(
                    "no complete reply within 3s: bridgewire's whole-reply limit (--max-reply-time)"
                ),
                "{head:?}: {out}"
            );
            continue;
        }
        if head.contains(&"keyless") {
            assert_eq!(code, Some(2), "{head:?}: {out}");
            assert!(
                out.contains("nothing was compared") && out.contains("set SIDEBRIDGE_KEY"),
                "{head:?}: {out}"
            );
            assert!(!out.contains("PASS"), "{head:?}: {out}");
            continue;
        }
        if head[0] == "--flaw" {
            assert_eq!(code, Some(1), "{head:?}: {out}");
            assert!(
                out.contains("/from: \"assistant\" → \"unknown\""),
                "{head:?}: {out}"
            );
        } else {
            assert_eq!(code, Some(0), "{head:?}: {out}");
            assert!(
                out.contains(&format!("{cells_count} passed, 0 failed, 0 skipped")),
                "{head:?}: {out}"
            );
        }
        assert!(
            !out.contains(" 0 rows"),
            "{head:?}: nothing compared: {out}"
        );
    }
}

/// A bridge whose replies vary between runs (peer.py `--oddity model-wording`: every answer
/// ends with a random tag, as a model's wording varies) differs from itself: `parity` of two of
/// its builds failed every cell on content alone (`/messages/0/content: "You said: hello ~e464e6"
/// → "You said: hello ~4f14ab"`, with a head that changed only the case of ids). A cell whose
/// lists differ is now run once more on the base leg: what differs between its two runs is set
/// aside in both legs, named, and the rest compared. So a legal change passes, naming what was
/// not compared; a changed `from` or an answer left out still fails; `--no-second-run` and a
/// determinism check (one bridge on both legs) report every difference; and a base that
/// answers alike twice says so under its difference.
#[test]
fn parity_sets_aside_what_varies_between_two_runs_of_one_build() {
    let Some(py) = python("parity_sets_aside_what_varies_between_two_runs_of_one_build") else {
        return;
    };
    let cells = peer_dir().join("cells");
    let leg = |extra: &str| format!("cmd:{py} {} {extra}", peer_dir().join("peer.py").display());
    let model = "--oddity model-wording";
    let parity = |base: &str, head: &str, flags: &[&str]| {
        common::proc::code_and_stdout(
            Command::new(BW)
                .args(["parity", "--timeout-ms", "30s", "--base"])
                .arg(leg(base))
                .arg("--head")
                .arg(leg(head))
                .args(flags)
                .arg(&cells),
        )
    };
    let upper = format!("{model} --oddity upper-ids");
    let bot = format!("{model} --flaw bot-from");
    let silent = format!("{model} --oddity silent-toggle");
    let jobs: Vec<(&str, &str, &[&str])> = vec![
        (model, &upper, &[]),
        (model, &bot, &[]),
        (model, &silent, &[]),
        (model, &upper, &["--no-second-run"]),
        (model, model, &["--allow-same-bridge"]),
        ("", "--flaw bot-from", &[]),
        (model, &upper, &["--format", "json"]),
    ];
    let results = common::verdicts::two_at_a_time(&jobs, |(b, h, f)| parity(b, h, f));
    let chats = std::fs::read_dir(cells.join("peer")).unwrap().count();
    let set_aside = "value(s) that differ between two runs of the base leg (its replies vary, as a model's do), set aside in both legs as their kind: ";

    // A legal change passes; the answers' text was not compared, and it says so.
    let (code, out) = &results[0];
    assert_eq!(*code, 0, "{out}");
    assert!(out.contains(&format!("{chats} passed, 0 failed")), "{out}");
    assert!(
        out.contains(set_aside) && out.contains("events #3 /messages/0/content"),
        "{out}"
    );
    // A changed `from` fails, on what the app shows: the sender, not the varying text.
    let (code, out) = &results[1];
    assert_eq!(*code, 1, "{out}");
    // (The app shows a `from` it does not know as "unknown".)
    assert!(out.contains("/from: \"assistant\" → \"unknown\""), "{out}");
    assert!(
        !out.contains("/content:"),
        "the text varies and is not named as a difference: {out}"
    );
    // An answer left out (toggles answered with options only) still fails.
    let (code, out) = &results[2];
    assert_eq!(*code, 1, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("FAIL ")) && out.contains(set_aside),
        "{out}"
    );
    // Without the second run, every difference stands, text included.
    let (code, out) = &results[3];
    assert_eq!(*code, 1, "{out}");
    assert!(
        out.contains("/messages/0/content: \"You said: hello ~"),
        "{out}"
    );
    assert!(
        !out.contains("second run") && !out.contains("set aside"),
        "{out}"
    );
    // A determinism check of one bridge shows the variation itself.
    let (code, out) = &results[4];
    assert_eq!(*code, 1, "{out}");
    assert!(!out.contains("set aside"), "{out}");
    // A base that answers alike twice: the difference is the builds'.
    let (code, out) = &results[5];
    assert_eq!(*code, 1, "{out}");
    assert!(
        out.contains(
            "a second run of the base leg gave the same lists: the difference is the builds'"
        ),
        "{out}"
    );
    // JSON names each value set aside.
    let (code, out) = &results[6];
    assert_eq!(*code, 0, "{out}");
    let doc: Value = serde_json::from_str(out).unwrap();
    let second = &doc["cells"][0]["secondRun"];
    assert_eq!(second["leg"], "base", "{second}");
    assert_eq!(second["outcome"], "varies", "{second}");
    assert!(
        second["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["pointer"] == "/messages/0/content" && v["index"] == 3),
        "{second}"
    );
}

/// `replay sidebridge` held a build whose replies vary (peer.py `--oddity model-wording`)
/// against the recording of a plain build and failed every chat on the answers' text alone,
/// as parity did before its second run. A cell whose replay differs is now replayed once more:
/// what differs between the build's own two replays is set aside in the recording and the
/// replay, named, and the rest compared. So the varying build passes, naming the text it did
/// not compare; one that also changes `from` still fails, on `from`; `--no-second-run` reports
/// the text; and a build that answers alike twice says its difference is its own. (The second
/// replay replays every cell again, interleaved as the first: one that replayed only the
/// differing chat passed `--flaw global-memory`, whose wrong recall shows only interleaved,
/// setting its answer aside as varying; replay_keeps_the_recorded_order_across_chats… holds it.)
#[test]
fn replay_sets_aside_what_varies_between_two_replays_of_one_build() {
    let Some(py) = python("replay_sets_aside_what_varies_between_two_replays_of_one_build") else {
        return;
    };
    let cells = peer_dir().join("cells");
    let chats = std::fs::read_dir(cells.join("peer")).unwrap().count();
    let replay = |build: &[&str], flags: &[&str]| {
        common::proc::code_and_stdout(
            Command::new(BW)
                .args(["replay", "sidebridge", "--startup-timeout", "30"])
                .args(flags)
                .arg(&cells)
                .arg("--")
                .arg(py)
                .arg(peer_dir().join("peer.py"))
                .args(build),
        )
    };
    let model: &[&str] = &["--oddity", "model-wording"];
    let model_bot: &[&str] = &["--oddity", "model-wording", "--flaw", "bot-from"];
    let jobs: Vec<(&[&str], &[&str])> = vec![
        (model, &[]),
        (model_bot, &[]),
        (model, &["--no-second-run"]),
        (&["--flaw", "bot-from"], &[]),
    ];
    let results = common::verdicts::two_at_a_time(&jobs, |(b, f)| replay(b, f));
    let set_aside = "value(s) that differ between two replays of this build, each on a bridge started afresh (its replies vary, as a model's do), set aside in the recording and the replay as their kind: ";

    let (code, out) = &results[0];
    assert_eq!(*code, 0, "{out}");
    assert!(out.contains(&format!("{chats} passed, 0 failed")), "{out}");
    assert!(
        out.contains(set_aside) && out.contains("/messages/0/content"),
        "{out}"
    );
    let (code, out) = &results[1];
    assert_eq!(*code, 1, "{out}");
    assert!(
        // (The app shows a `from` it does not know as "unknown".)
        out.contains(r#"-      "from": "assistant","#)
            && out.contains(r#"+      "from": "unknown","#),
        "{out}"
    );
    assert!(
        out.contains(set_aside) && !out.contains("+      \"content\": \"You said"),
        "the text varies and is not shown as a difference: {out}"
    );
    let (code, out) = &results[2];
    assert_eq!(*code, 1, "{out}");
    assert!(out.contains("You said: hello ~"), "{out}");
    assert!(!out.contains("set aside"), "{out}");
    let (code, out) = &results[3];
    assert_eq!(*code, 1, "{out}");
    assert!(
        out.contains("a second replay gave the same events: the difference is the build's"),
        "{out}"
    );
}

/// Flaws of peer.py a parity of `check-run` cannot see, each with why: what the recording
/// holds never reaches the flaw, or what the flaw changes is nothing the app shows.
const PARITY_BLIND_FLAWS: &[(&str, &str)] = &[
    (
        "allow-lowercase",
        "GET/PUT/HEAD carry no chatId: the app sends none (`_process`, skipped)",
    ),
    (
        "html-not-post",
        "GET/PUT/HEAD carry no chatId: the app sends none (`_process`, skipped)",
    ),
    (
        "head-body",
        "HEAD carries no chatId: the app sends none (`_process`, skipped)",
    ),
    (
        "options-broken",
        "OPTIONS carries no chatId: the app sends none (`_process`, skipped)",
    ),
    (
        "parse-before-auth",
        "the malformed bodies carry no chatId (`_process`, skipped)",
    ),
    (
        "garbage-with-key",
        "acts only on a bridge without a key; the recording's has one",
    ),
    (
        "reject-unexpected-key",
        "acts only on a bridge without a key; the recording's has one",
    ),
    (
        "key-case-unreadable",
        "the recording proxy writes header names in lower case",
    ),
    ("no-sources", "the app decodes a missing `sources` as none"),
    ("sources-null", "the app decodes `sources: null` as none"),
    (
        "slow-first",
        "how long a reply takes is not compared (within --timeout-ms)",
    ),
    (
        "key-suffix",
        "the recording's wrong keys are none of the key's suffixes (a replay sends a wrong key of a recorded kind only)",
    ),
    (
        "key-nohyphen",
        "the recording's key has no hyphen, and no wrong key of it one put in",
    ),
    (
        "auth-skip-without-history",
        "the recording holds no send without history that lacks the key",
    ),
];

/// Oddities of peer.py that change what the app shows: legal, and a difference parity names.
const PARITY_VISIBLE_ODDITIES: &[(&str, &str)] = &[
    ("cite-links", "answers cite links"),
    ("edit-previous", "the previous answer edited in place"),
    ("edit-restored", "a restored answer edited in place"),
    ("empty-send-nudge", "a system message asks for text"),
    ("ended-reopens", "an ended chat opens afresh"),
    ("error-positions", "error messages name positions"),
    (
        "huge-answers",
        "replies over --max-body: each leg an error naming it",
    ),
    ("length-note", "answers carry a length note"),
    ("odd-noop", "an unplaceable request gets no error message"),
    ("preface-note", "a system note before each answer"),
    ("silent-toggle", "toggles answered with no message"),
    ("sources-https", "answers cite a source"),
    ("sources-unusual", "answers cite sources"),
    ("start-201", "a greeting at each session start"),
    ("varying", "every answer carries a counter"),
    (
        "model-wording",
        "every answer carries a random tag (the base answers alike every run)",
    ),
    ("word-echo", "`remember` repeats the word"),
];

/// `parity` over `check-run` (every request `check sidebridge` makes of peer.py, recorded
/// through the proxy: 38 chats, some interleaved) against each of peer.py's switches, from its
/// own `--list`: every flaw fails but those the recording cannot show (named above, with why),
/// every oddity passes but those the app shows. The chats replay on one bridge per leg, in the
/// recorded order, so `global-memory` (one remembered word for every chat, the audit's F3)
/// fails in the chat that recalls another chat's word; replayed a bridge per chat it passed.
#[test]
fn parity_over_a_recorded_check_run_fails_each_flaw_the_app_would_show() {
    let Some(py) = python("parity_over_a_recorded_check_run_fails_each_flaw_the_app_would_show")
    else {
        return;
    };
    let cells = peer_dir().join("check-run");
    let peer = peer_dir().join("peer.py");
    let leg = |extra: &[&str]| {
        let mut l = format!("cmd:{py} {} --key s3cret", peer.display());
        for a in extra {
            l.push(' ');
            l.push_str(a);
        }
        l
    };
    let parity = |head: &[&str]| {
        // A build deaf on the kept connection holds its request for the whole bound: a short
        // one (the same request on a fresh connection, which names the cause, is answered at once).
        let bound = if head.contains(&"keepalive-deaf") {
            "5s"
        } else {
            "30s"
        };
        let out = Command::new(BW)
            // The plain base answers alike every run: a second run of a differing cell could only
            // say so (parity_sets_aside_what_varies_between_two_runs_of_one_build shows it), at the
            // cost of another replay of every chat per switch.
            .args(["parity", "--allow-same-bridge", "--no-second-run"])
            .args(["--timeout-ms", bound])
            .arg("--base")
            .arg(leg(&[]))
            .arg("--head")
            .arg(leg(head))
            .arg(&cells)
            .env("SIDEBRIDGE_KEY", "s3cret")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let list = Command::new(py).arg(&peer).arg("--list").output().unwrap();
    let mut jobs: Vec<(String, String)> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect();
    assert!(jobs.len() > 50, "peer.py --list: {jobs:?}");
    for (name, _) in PARITY_BLIND_FLAWS {
        assert!(
            jobs.contains(&("flaw".into(), name.to_string())),
            "{name}: no such flaw"
        );
    }
    for (name, _) in PARITY_VISIBLE_ODDITIES {
        assert!(
            jobs.contains(&("oddity".into(), name.to_string())),
            "{name}: no such oddity"
        );
    }
    jobs.push(("same".into(), String::new()));
    let results = common::verdicts::two_at_a_time(&jobs, |(kind, name)| {
        let switch = format!("--{kind}");
        let head: Vec<&str> = if kind == "same" {
            vec![]
        } else {
            vec![&switch, name]
        };
        ((kind.clone(), name.clone()), parity(&head))
    });
    let chats = std::fs::read_dir(cells.join("peer")).unwrap().count() - 1;
    let mut wrong = Vec::new();
    for ((kind, name), (code, out)) in &results {
        let named = |t: &[(&str, &str)]| t.iter().any(|(n, _)| n == name);
        let expect_pass = match kind.as_str() {
            "flaw" => named(PARITY_BLIND_FLAWS),
            "oddity" => !named(PARITY_VISIBLE_ODDITIES),
            _ => true,
        };
        let ok = if expect_pass {
            *code == Some(0) && out.contains(&format!("{chats} passed, 0 failed, 1 skipped"))
        } else {
            *code == Some(1)
                && (out.contains("\nFAIL ")
                    || out.contains("\nSTALL ")
                    || out.contains("not run (leg error)"))
                && !out.contains("nothing was compared")
        };
        if !ok {
            let tail: Vec<&str> = out.lines().rev().take(12).collect();
            wrong.push(format!(
                "--{kind} {name}: expected {}, exit {code:?}:\n{}",
                if expect_pass { "a pass" } else { "a failure" },
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    // A leg replays on the connection each reply left open, as the app sends: a build deaf
    // there, or one closing it once a request was written (the request is never sent again on
    // a new one), fails naming that cause.
    let closed =
        "the bridge closed the kept connection after the request was sent, before any reply";
    for (name, cause) in [
        (
            "keepalive-deaf",
            "on the connection the bridge kept open after its previous reply",
        ),
        ("hangup-kept-post", closed),
        ("hangup-second-post", closed),
    ] {
        let (_, out) = &results.iter().find(|((_, n), _)| n == name).unwrap().1;
        assert!(out.contains(cause), "--flaw {name}: {out}");
    }
    // F3 names the word the chat was not told: in the chat that recalls it, not elsewhere.
    let (_, out) = &results
        .iter()
        .find(|((_, n), _)| n == "global-memory")
        .unwrap()
        .1;
    assert!(
        out.contains("/messages/0/content: \"The word was ") && out.contains("2 failed"),
        "{out}"
    );
    // The chats without a chatId are said to be skipped as the app never sends them.
    assert!(
        out.contains("SKIP peer/_process: requests without a chatId"),
        "{out}"
    );
}

/// A build that stops answering holds a parity leg for two waits, not one per request: after
/// two requests in a row get no reply within `--timeout-ms`, the rest of the leg's replay is
/// not sent, and each cell is a stall naming why (38 chats of some 150 requests would have
/// waited 150 × the bound).
#[test]
fn a_build_that_stops_answering_is_given_up_after_two_silent_requests() {
    let Some(py) = python("a_build_that_stops_answering_is_given_up_after_two_silent_requests")
    else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let mute = t.path().join("mute.py");
    std::fs::write(
        &mute,
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen(256)\n\
         print('http://127.0.0.1:%d/' % s.getsockname()[1], flush=True)\nheld = []\n\
         while True:\n    held.append(s.accept()[0])\n",
    )
    .unwrap();
    let out = Command::new(BW)
        .args(["parity", "--timeout-ms", "1s", "--base"])
        .arg(format!(
            "cmd:{py} {} --key s3cret",
            peer_dir().join("peer.py").display()
        ))
        .arg("--head")
        .arg(format!("cmd:{py} {}", mute.display()))
        .arg(peer_dir().join("check-run"))
        .env("SIDEBRIDGE_KEY", "s3cret")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let stalled = text.matches("timed out waiting for the reply").count();
    assert_eq!(stalled, 2, "two requests waited the bound: {text}");
    assert!(
        text.contains(
            "requests not sent: the bridge had answered none of the last 2 requests sent in time ("
        ),
        "{text}"
    );
    let chats = std::fs::read_dir(peer_dir().join("check-run/peer"))
        .unwrap()
        .count()
        - 1;
    // Every chat is a stall of the head leg, naming the stop (it was an error of the leg,
    // "nothing compared", for the chats not sent: a build that stops answering is what
    // parity is there to show, not a leg that could not run).
    assert!(
        text.contains(&format!("0 passed, 0 failed, {chats} stalled"))
            && text
                .matches("stall: head: the bridge stopped answering: ")
                .count()
                >= chats - 2,
        "every chat is stalled, the stop named: {text}"
    );
}

/// `parity` over a cell recorded from peer.py itself (its own phrases, no key: `go private`
/// mid-chat): re-asserting `disableSendHistory: true` on every later reply changes nothing on
/// the client's screen and passes (it was a FAIL, `/options: null → {…true…}`); re-enabling
/// history unasked changes what the client sends and fails naming `/options`.
#[test]
fn parity_folds_options_that_change_nothing_on_the_screen() {
    let Some(py) = python("parity_folds_options_that_change_nothing_on_the_screen") else {
        return;
    };
    let cells = peer_dir().join("cells");
    let peer = peer_dir().join("peer.py");
    let leg = |extra: &str| format!("cmd:{py} {} {extra}", peer.display());
    let parity = |head: &str| {
        let out = Command::new(BW)
            .args([
                "parity",
                "--allow-same-bridge",
                "--base",
                &leg(""),
                "--head",
            ])
            .arg(leg(head))
            .arg(&cells)
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = parity("--oddity private-reassert");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 passed, 0 failed, 0 skipped"), "{out}");
    let (code, out) = parity("--flaw reenable-history");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("/options: null → {\"disableSendHistory\":false"),
        "{out}"
    );
    // The same key-less cell against two builds that ask for a key: both refuse every request
    // alike, which is no evidence about either; the cell is skipped, naming why (it passed).
    let out = Command::new(BW)
        .args(["parity", "--allow-same-bridge", "--base"])
        .arg(leg("--key s3cret"))
        .arg("--head")
        .arg(leg("--key s3cret --flaw reenable-history"))
        .arg(&cells)
        .env("SIDEBRIDGE_KEY", "s3cret")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("nothing was compared") && text.contains("recorded without a key"),
        "{text}"
    );
}

/// `tests/peers/coverage.tsv` is true of the table above: each rule's failing rows expect it to
/// fail (an INFO rule: not run) and its passing rows are legal oddities expecting it to pass.
/// The table itself is checked against the live peer by the test above.
#[test]
fn the_coverage_map_names_rows_that_fail_and_pass_each_rule() {
    use common::coverage::{Entry, lines_for_catalogue};
    let rows = rows();
    let mut problems = Vec::new();
    for (line, level) in lines_for_catalogue("sidebridge") {
        let id = line.rule.as_str();
        let find = |name: &str| rows.iter().find(|r| r.name == name);
        for e in &line.fails {
            let Entry::Named(name) = e else { continue };
            // The Perl peer's rows: checked by tests/sidebridge_perl_peer.rs.
            if name.starts_with("perl:") {
                continue;
            }
            let want = if level == "INFO" {
                format!("{id}:not-run")
            } else {
                format!("{id}:fail")
            };
            match find(name).map(|r| &r.expect) {
                None => problems.push(format!("{}: no row {name:?}", line.at)),
                Some(Expect::Exact(bad)) if bad.contains(&want.as_str()) => {}
                Some(Expect::AllBut(passing)) if !passing.contains(&id) => {}
                Some(_) => {
                    problems.push(format!("{}: row {name:?} does not expect {want}", line.at))
                }
            }
        }
        for e in &line.passes {
            let Entry::Named(name) = e else { continue };
            if name.starts_with("perl:") {
                continue;
            }
            match find(name) {
                None => problems.push(format!("{}: no row {name:?}", line.at)),
                Some(r) => {
                    let odd = r.peer.contains(&"--oddity") && !r.peer.contains(&"--flaw");
                    let passes = match &r.expect {
                        Expect::Exact(bad) => !bad.iter().any(|b| b.starts_with(&format!("{id}:"))),
                        Expect::AllBut(_) => false,
                    };
                    if !odd || !passes {
                        problems.push(format!(
                            "{}: row {name:?} is not a legal oddity expected to pass {id}",
                            line.at
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_banner_on_stderr_or_a_url_pattern_finds_the_bridge_and_a_failed_start_shows_its_output() {
    let Some(py) = python(
        "a_banner_on_stderr_or_a_url_pattern_finds_the_bridge_and_a_failed_start_shows_its_output",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // Every row above finds the peer by its stderr banner ("peer bridge ready, serving on
    // http://127.0.0.1:N (flaws: none)"); here --url-pattern picks it out of that line.
    let out = Command::new(BW)
        .current_dir(tmp.path())
        .args([
            "check",
            "sidebridge",
            "--startup-timeout",
            "30",
            "--url-pattern",
            r"serving on (\S+)",
            "--",
            py,
        ])
        .arg(peer_dir().join("peer.py"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A bridge that dies at start-up: its output is shown.
    let out = Command::new(BW)
        .current_dir(tmp.path())
        .args(["check", "sidebridge", "--", py, "-c"])
        .arg("import sys; print('loading config'); sys.stderr.write('fatal: port 80 is taken\\n'); sys.exit(3)")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fatal: port 80 is taken")
            && err.contains("loading config")
            && err.contains("exit status: 3"),
        "{err}"
    );
}

/// `parity --url-pattern` finds a Side Bridge leg whose banner misleads the default reading (a
/// docs link with a port before the listen line): without it the legs cannot start, naming the
/// address they waited for; with it the cell is compared (the audit's F8: parity had no way to
/// name a leg's address, where check, record and replay have `--url-pattern`); `record-cells`
/// takes it too.
#[test]
fn parity_takes_a_url_pattern_for_legs_whose_banner_misleads() {
    let Some(py) = python("parity_takes_a_url_pattern_for_legs_whose_banner_misleads") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("docs-first.sh");
    std::fs::write(
        &wrapper,
        "echo 'docs: http://127.0.0.1:9/help (see there)'\nexec \"$@\"\n",
    )
    .unwrap();
    let leg = |extra: &str| {
        format!(
            "cmd:sh {} {py} {} {extra}",
            wrapper.display(),
            peer_dir().join("peer.py").display()
        )
    };
    let parity = |pattern: Option<&str>, head: &str| {
        let mut cmd = Command::new(BW);
        cmd.args(["parity", "--allow-same-bridge", "--timeout-ms", "2s"]);
        if let Some(p) = pattern {
            cmd.args(["--url-pattern", p]);
        }
        let out = cmd
            .arg("--base")
            .arg(leg(""))
            .arg("--head")
            .arg(leg(head))
            .arg(peer_dir().join("cells"))
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = parity(None, "");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("127.0.0.1:9"), "{out}");
    assert!(
        out.contains("name its address line with --url-pattern REGEX"),
        "{out}"
    );
    let (code, out) = parity(Some(r"serving on (\S+)"), "");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 passed, 0 failed"), "{out}");
    let (code, out) = parity(Some(r"serving on (\S+)"), "--flaw reenable-history");
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = parity(Some("serving on ("), "");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--url-pattern"), "{out}");
    // record-cells takes it too (it had none: such a bridge could not be recorded).
    let record = |pattern: &str| {
        let out = Command::new(BW)
            .args(["record-cells", "sidebridge", "--timeout-ms", "10s"])
            .args(["--url-pattern", pattern, "--out"])
            .arg(tmp.path().join("cells"))
            .args(["--", "sh"])
            .arg(&wrapper)
            .arg(py)
            .arg(peer_dir().join("peer.py"))
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = record(r"serving on (\S+)");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("2 cells recorded"), "{out}");
    let (code, out) = record("serving on (");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--url-pattern"), "{out}");
}

/// One raw HTTP/1.1 POST (`Connection: close`); the status code.
fn post(url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    common::http::post_json(url, headers, body).status
}

#[test]
fn replay_keeps_the_recorded_order_across_chats_follows_307_and_the_key_never_reaches_a_lane() {
    let Some(py) = python(
        "replay_keeps_the_recorded_order_across_chats_follows_307_and_the_key_never_reaches_a_lane",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let peer = |extra: &[&str]| {
        let mut c = Command::new(py);
        c.arg(peer_dir().join("peer.py"))
            .args(["--key", KEY])
            .args(extra);
        c
    };
    let bridge = spawn_url(&mut peer(&[]));
    let proxy = spawn_url(
        Command::new(BW)
            .args(["record", "sidebridge", "--upstream", &bridge.url])
            .args(["--bridge", "peer", "--key", KEY, "--dir"])
            .arg(tmp.path()),
    );
    // Two chats, interleaved step by step; the key also rides in an Authorization header,
    // the query string and the body.
    let chats = [
        ("0A1B2C3D-0000-4000-8000-00000000000A", "apple"),
        ("0A1B2C3D-0000-4000-8000-00000000000B", "pear"),
    ];
    let bearer = format!("Bearer {KEY}");
    let headers = [
        ("x-sidebridge-key", KEY),
        ("Authorization", bearer.as_str()),
    ];
    let url = format!("{}?key={KEY}", proxy.url);
    for (chat, _) in chats {
        let body =
            format!(r#"{{"sidebridge":"1.0","chatId":"{chat}","history":[],"apiKey":"{KEY}"}}"#);
        assert_eq!(post(&url, &headers, &body), 200);
    }
    let mut n = 0;
    for text in ["please keep this word: {w}", "which word did I give you?"] {
        for (chat, word) in chats {
            n += 1;
            let body = format!(
                r#"{{"sidebridge":"1.0","chatId":"{chat}","messages":[{{"id":"00000000-0000-4000-8000-{n:012}","from":"user","content":"{}","sources":[]}}]}}"#,
                text.replace("{w}", word)
            );
            assert_eq!(post(&url, &headers, &body), 200);
        }
    }
    drop(proxy);
    let mut text = String::new();
    for chat in std::fs::read_dir(tmp.path().join("peer"))
        .unwrap()
        .flatten()
    {
        for lane in std::fs::read_dir(chat.path()).unwrap().flatten() {
            text.push_str(&std::fs::read_to_string(lane.path()).unwrap());
        }
    }
    assert!(!text.contains(KEY), "the key reached a lane");
    for needle in [
        "Bearer [redacted]",
        "key=[redacted]",
        r#"\\\"apiKey\\\":\\\"[redacted]\\\""#,
    ] {
        assert!(text.contains(needle), "lanes lack {needle}");
    }
    let replay_with = |flags: &[&str], extra: &[&str]| {
        let out = Command::new(BW)
            .args([
                "replay",
                "sidebridge",
                "--startup-timeout",
                "30",
                "--key",
                KEY,
            ])
            .args(flags)
            .arg(tmp.path())
            .arg("--")
            .arg(py)
            .arg(peer_dir().join("peer.py"))
            .args(["--key", KEY])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let replay = |extra: &[&str]| replay_with(&[], extra);
    // The same bridge, and bridges that differ only in ways the client cannot see (one that
    // closes the connection after each reply without saying so: the replay sends on the
    // connection a reply left open, as the app does, and on a new one once that is closed).
    for extra in [
        &[][..],
        &["--oddity", "close-unannounced"][..],
        &["--oddity", "redirect-307"][..],
        &["--oddity", "options-null"][..],
        &["--oddity", "upper-ids"][..],
        &["--oddity", "accepted-202"][..],
    ] {
        let (code, out) = replay(extra);
        assert_eq!(code, Some(0), "{extra:?}: {out}");
        assert_eq!(out.matches("PASS").count(), 2, "{out}");
    }
    // A bridge failing the kept connection the app sends on: closing it once the request was
    // written there (not sent again on a new connection), or never reading it there (it passed
    // before: every request had a connection of its own). Each fails, naming the cause.
    for (flaw, flags, cause) in [
        (
            "hangup-second-post",
            &[][..],
            "the bridge closed the kept connection after the request was sent, before any reply",
        ),
        (
            "keepalive-deaf",
            &["--timeout", "2"][..],
            "on the connection the bridge kept open after its previous reply",
        ),
    ] {
        let (code, out) = replay_with(flags, &["--flaw", flaw]);
        assert_eq!(code, Some(1), "{flaw}: {out}");
        assert!(out.contains(cause) && out.contains("FAIL"), "{flaw}: {out}");
    }
    // One memory for both chats: only an interleaved replay makes chat A recall B's word.
    let (code, out) = replay(&["--flaw", "global-memory"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("The word was pear.") && out.contains("FAIL"),
        "{out}"
    );
    assert!(
        out.contains("a second replay gave the same events: the difference is the build's"),
        "{out}"
    );
}

/// A POST that follows 307/308 to their `Location` (same method and body), as the app's HTTP
/// client does.
fn post_following(url: &str, body: &str) -> common::http::Raw {
    let mut url = url.to_string();
    for _ in 0..5 {
        let r = common::http::post_json(&url, &[], body);
        let location = r
            .head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("location"))
            })
            .map(|(_, v)| v.trim().to_string());
        match (r.status, location) {
            (307 | 308, Some(l)) => {
                let rest = url.trim_start_matches("http://");
                let host = &rest[..rest.find('/').unwrap_or(rest.len())];
                url = format!("http://{host}{l}");
            }
            _ => return r,
        }
    }
    panic!("more than 5 redirects from {url}");
}

/// Records one chat with history from peer.py (with `extra`), through the recording proxy
/// into `dir/peer/`, the client carrying every reply's id in later history as the app does.
fn record_chat(py: &str, dir: &std::path::Path, texts: &[&str], extra: &[&str]) {
    let bridge = spawn_url(Command::new(py).arg(peer_dir().join("peer.py")).args(extra));
    let proxy = spawn_url(
        Command::new(BW)
            .args(["record", "sidebridge", "--upstream", &bridge.url])
            .args(["--bridge", "peer", "--dir"])
            .arg(dir),
    );
    let chat = "0A1B2C3D-0000-4000-8000-0000000000C1";
    let start = format!(r#"{{"sidebridge":"1.0","chatId":"{chat}","history":[]}}"#);
    assert_eq!(post_following(&proxy.url, &start).status, 200);
    let mut history: Vec<Value> = Vec::new();
    for (n, text) in texts.iter().enumerate() {
        let m = serde_json::json!({"id": format!("10000000-0000-4000-8000-{:012}", n + 1),
            "from": "user", "content": text, "sources": []});
        history.push(m.clone());
        let body = serde_json::json!({"sidebridge": "1.0", "chatId": chat, "messages": [m],
            "history": history});
        let r = post_following(&proxy.url, &body.to_string());
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        for m in v["messages"].as_array().into_iter().flatten() {
            let mut m = m.clone();
            m["id"] = Value::from(m["id"].as_str().unwrap().to_ascii_uppercase());
            // Upsert by id, as the app keeps its transcript.
            match history.iter().position(|h| h["id"] == m["id"]) {
                Some(at) => history[at] = m,
                None => history.push(m),
            }
        }
    }
    drop(proxy);
}

/// Ids are opaque: a build whose id counter starts one higher gives, for the recorded `…1`,
/// `…2`, `…3`, the ids `…2`, `…3`, `…4`. Replay renames each recorded id in later history to
/// the replayed bridge's id once: renamed one after another, `…1`→`…2` and then both `…2`s →
/// `…3`, the bridge was sent a history in which different messages carried one id (exit 1,
/// `id differs` in parity, and a repeat answered from the wrong message).
#[test]
fn overlapping_opaque_ids_are_renamed_once_in_replayed_history() {
    let Some(py) = python("overlapping_opaque_ids_are_renamed_once_in_replayed_history") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    record_chat(
        py,
        tmp.path(),
        &[
            "please keep this word: plum",
            "which word did I give you?",
            "hello there",
            "repeat your last answer",
            "hello again",
            "repeat your last answer",
        ],
        &["--oddity", "counter-ids"],
    );
    let head = [
        py,
        &peer_dir().join("peer.py").display().to_string(),
        "--oddity",
        "counter-ids",
        "--oddity",
        "counter-from-2",
    ]
    .join(" ");
    let out = Command::new(BW)
        .args(["replay", "sidebridge", "--startup-timeout", "30"])
        .arg(tmp.path())
        .arg("--")
        .args(head.split(' '))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "replay: {text}");
    assert!(text.contains("1 passed, 0 failed"), "replay: {text}");
    let out = Command::new(BW)
        .arg("parity")
        .arg("--base")
        .arg(format!("rec:{}", tmp.path().display()))
        .arg("--head")
        .arg(format!("cmd:{head}"))
        .arg(tmp.path())
        .env_remove("SIDEBRIDGE_KEY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "parity: {text}");
    assert!(
        text.contains("1 passed, 0 failed, 0 skipped"),
        "parity: {text}"
    );
}

/// A build that re-sends the user's own message unchanged (same id, `from`, content) before its
/// answer changes nothing on the app's screen (an upsert by id). Replay paired the recorded
/// answer's id with the first id new in the replayed reply, the user's own, and sent every
/// later history with the user's id on the answer: the bridge, looking its answers up by id,
/// found none (`I have not answered yet.`), and parity failed both ways round.
#[test]
fn a_re_sent_user_message_lends_its_id_to_no_answer() {
    let Some(py) = python("a_re_sent_user_message_lends_its_id_to_no_answer") else {
        return;
    };
    let texts = [
        "please keep this word: plum",
        "hello there",
        "repeat your last answer",
        "which word did I give you?",
        "repeat your last answer",
    ];
    let peer = peer_dir().join("peer.py").display().to_string();
    let plain = tempfile::tempdir().unwrap();
    record_chat(py, plain.path(), &texts, &[]);
    let echoing = tempfile::tempdir().unwrap();
    record_chat(py, echoing.path(), &texts, &["--oddity", "echo-user-first"]);
    let run = |args: Vec<String>| {
        let out = Command::new(BW)
            .args(args)
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let s = |x: &std::path::Path| x.display().to_string();
    // Recorded plain, replayed against the echoing build.
    let (code, out) = run(vec![
        "replay".into(),
        "sidebridge".into(),
        s(plain.path()),
        "--".into(),
        py.into(),
        peer.clone(),
        "--oddity".into(),
        "echo-user-first".into(),
    ]);
    assert_eq!(code, Some(0), "replay: {out}");
    for (base, head, cells) in [
        (plain.path(), "--oddity echo-user-first", plain.path()),
        (echoing.path(), "", echoing.path()),
    ] {
        let (code, out) = run(vec![
            "parity".into(),
            "--base".into(),
            format!("rec:{}", s(base)),
            "--head".into(),
            format!("cmd:{py} {peer} {head}"),
            s(cells),
        ]);
        assert_eq!(code, Some(0), "parity head {head:?}: {out}");
        assert!(out.contains("1 passed, 0 failed"), "{out}");
    }
}

/// A reply over bridgewire's own `--max-body` (10 MiB by default; the app reads a body of any
/// size) is not read whole, so nothing of it was seen: the leg is an ERROR naming the limit and
/// how to raise it. Both legs over it became the same stand-in error event and passed although
/// their texts differed; one leg alone showed as the bridge failing (`"2xx" → "non-2xx"`,
/// an error bubble the app never shows). With `parity --max-body` raised the texts compare.
#[test]
fn a_reply_over_max_body_is_an_error_of_the_leg_not_a_comparison() {
    let Some(py) = python("a_reply_over_max_body_is_an_error_of_the_leg_not_a_comparison") else {
        return;
    };
    let cells = peer_dir().join("cells");
    let peer = peer_dir().join("peer.py");
    let leg = |extra: &str| format!("cmd:{py} {} {extra}", peer.display());
    let parity = |base: &str, head: &str, extra: &[&str]| {
        let out = Command::new(BW)
            .arg("parity")
            .args(extra)
            .args(["--timeout-ms", "60s", "--base"])
            .arg(base)
            .arg("--head")
            .arg(head)
            .arg(&cells)
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let huge = leg("--oddity huge-answers");
    let huge_other = leg("--oddity huge-answers --oddity preface-note");
    // Both legs over the limit, their texts differing (the one cell not compared: nothing
    // was, exit 2).
    let (code, out) = parity(&huge, &huge_other, &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(!out.contains("PASS"), "{out}");
    assert!(
        out.contains("ERROR peer/")
            && out.contains("base leg: the bridge's repl")
            && out.contains("head leg: the bridge's repl")
            && out.contains("larger than 10485760 bytes")
            && out.contains("raise it with --max-body BYTES"),
        "{out}"
    );
    // The head alone over it, recorded base: the head's error, not a non-2xx reply.
    let (code, out) = parity(&format!("rec:{}", cells.display()), &huge, &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("head leg: the bridge's repl") && !out.contains("base leg"),
        "{out}"
    );
    assert!(!out.contains("non-2xx") && !out.contains("PASS"), "{out}");
    // Raised, the texts are read and compared.
    let (code, out) = parity(&huge, &huge_other, &["--max-body", "40000000"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL peer/") && !out.contains("ERROR"),
        "{out}"
    );
    assert!(
        out.contains("(answered by peer bridge, model p-1)"),
        "{out}"
    );
}

/// Cells recorded with the bridge's key, replayed with it (`SIDEBRIDGE_KEY`): a build that
/// refuses that key, where the other leg (live or recorded) is answered, refuses every answer
/// the user would see and fails. It was skipped as "recorded without a key … record the cell
/// again", which the cells were not. Both legs refusing it alike is no evidence about either
/// (a wrong SIDEBRIDGE_KEY): skipped, naming the key.
#[test]
fn a_build_refusing_the_key_the_other_leg_accepts_fails() {
    let Some(py) = python("a_build_refusing_the_key_the_other_leg_accepts_fails") else {
        return;
    };
    let cells = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("recordings/sidebridge");
    let peer = peer_dir().join("peer.py");
    let leg = |key: &str| format!("cmd:{py} {} --key {key}", peer.display());
    let parity = |base: &str, head: &str| {
        let out = Command::new(BW)
            .args([
                "parity",
                "--allow-same-bridge",
                "--timeout-ms",
                "30s",
                "--base",
            ])
            .arg(base)
            .arg("--head")
            .arg(head)
            .arg(&cells)
            .env("SIDEBRIDGE_KEY", "s3cret")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    for base in [leg("s3cret"), format!("rec:{}", cells.display())] {
        let (code, out) = parity(&base, &leg("other"));
        assert_eq!(code, Some(1), "base {base}: {out}");
        assert!(
            out.contains("FAIL ") && !out.contains("SKIP") && !out.contains("recorded without"),
            "base {base}: {out}"
        );
    }
    let (code, out) = parity(&leg("other"), &leg("other"));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("SKIP") && out.contains("both legs") && out.contains("SIDEBRIDGE_KEY"),
        "{out}"
    );
    assert!(!out.contains("recorded without"), "{out}");
}

/// A bridge whose endpoint answers 307 to another path, recorded through the proxy by a client
/// that follows it as the app's HTTP client does: the hop and the request that followed it are
/// one exchange for the app, which sees only the final reply. The recorded 307 was a failed
/// reply (`non-2xx`, `dropped: empty body`, an error bubble the app never shows) and the
/// follow-up a second send of the message (sent again on replay), so such a recording failed
/// against any build answering directly, and against its own recording from one that does not.
#[test]
fn a_recorded_redirect_is_one_exchange_with_the_reply_it_led_to() {
    let Some(py) = python("a_recorded_redirect_is_one_exchange_with_the_reply_it_led_to") else {
        return;
    };
    let texts = [
        "please keep this word: plum",
        "which word did I give you?",
        "repeat your last answer",
        "farewell",
    ];
    let plain = tempfile::tempdir().unwrap();
    record_chat(py, plain.path(), &texts, &[]);
    let redirected = tempfile::tempdir().unwrap();
    record_chat(py, redirected.path(), &texts, &["--oddity", "redirect-307"]);
    let peer = peer_dir().join("peer.py").display().to_string();
    let s = |x: &std::path::Path| x.display().to_string();
    let run = |args: Vec<String>| {
        let out = Command::new(BW)
            .args(args)
            .env_remove("SIDEBRIDGE_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(vec![
        "replay".into(),
        "sidebridge".into(),
        s(redirected.path()),
        "--".into(),
        py.into(),
        peer.clone(),
    ]);
    assert_eq!(code, Some(0), "replay: {out}");
    for (base, head) in [
        (
            format!("rec:{}", s(redirected.path())),
            format!("cmd:{py} {peer}"),
        ),
        (
            format!("rec:{}", s(plain.path())),
            format!("rec:{}", s(redirected.path())),
        ),
    ] {
        let (code, out) = run(vec![
            "parity".into(),
            "--base".into(),
            base.clone(),
            "--head".into(),
            head.clone(),
            s(plain.path()),
        ]);
        assert_eq!(code, Some(0), "parity {base} {head}: {out}");
        assert!(out.contains("1 passed, 0 failed"), "{out}");
        assert!(!out.contains("Failed to communicate"), "{out}");
    }
}

/// SB-A4's probe key (`any-key-the-user-typed`, which `check sidebridge` sends a bridge with no
/// key) is bridgewire's own text, no one's secret: the recording proxy keeps it as sent, so
/// parity replays that chat with it and compares it. It was recorded `[redacted]`, and parity
/// then skipped the chat as "recorded with the bridge's key; set SIDEBRIDGE_KEY", which no key
/// could answer. A key a user typed is still redacted.
#[test]
fn a_keyless_bridges_probe_key_is_recorded_as_sent_and_compared() {
    let Some(py) = python("a_keyless_bridges_probe_key_is_recorded_as_sent_and_compared") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bridge = spawn_url(Command::new(py).arg(peer_dir().join("peer.py")));
    let proxy = spawn_url(
        Command::new(BW)
            .args(["record", "sidebridge", "--upstream", &bridge.url])
            .args(["--bridge", "peer", "--dir"])
            .arg(tmp.path()),
    );
    for (chat, key) in [
        (
            "0A1B2C3D-0000-4000-8000-0000000000A4",
            "any-key-the-user-typed",
        ),
        ("0A1B2C3D-0000-4000-8000-0000000000A5", "users-own-key-5"),
    ] {
        let body = format!(r#"{{"sidebridge":"1.0","chatId":"{chat}","history":[]}}"#);
        assert_eq!(post(&proxy.url, &[("x-sidebridge-key", key)], &body), 200);
    }
    drop(proxy);
    drop(bridge);
    let text = common::files::text_under(tmp.path());
    assert!(text.contains("any-key-the-user-typed"), "{text}");
    assert!(
        !text.contains("users-own-key-5"),
        "a user's key reached a lane"
    );
    let parity = |head: &str| {
        common::proc::code_and_stdout(
            Command::new(BW)
                .args(["parity", "--timeout-ms", "30s", "--cell", "0000000000A4"])
                .arg("--base")
                .arg(format!("rec:{}", tmp.path().display()))
                .arg("--head")
                .arg(format!(
                    "cmd:{py} {} {head}",
                    peer_dir().join("peer.py").display()
                ))
                .arg(tmp.path()),
        )
    };
    let (code, out) = parity("");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 passed, 0 failed, 0 skipped"), "{out}");
    let (code, out) = parity("--flaw reject-unexpected-key");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("sent with the key SB-A4 sends a bridge that has none"),
        "{out}"
    );
}

//! A bb provider bridge in Node (`tests/peers/bb-node/bridge.js`, standard library only),
//! written from the protocol document by an audit that never read bridgewire's code: not ours.
//! Correct by default; every legal but unusual switch it lists (`ODD=`, read from its own
//! `--list`, so a switch added there is tested here) passes `check bb`, and each flaw
//! (`FLAW=`) fails exactly its rule, naming the cause, with nothing else failing. The flaws
//! bridgewire does not catch yet are listed in [`NOT_CAUGHT`] with the reason, and a test
//! keeps that list honest (each still passes; one caught now must move to [`FLAWS`]).

mod common;

use common::need::node;
use serde_json::Value;
use std::process::Command;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-node/bridge.js");
const FIXTURE: &str = "[bb.fixture]\npromptInput = \"hello\"\nzeroWorkPromptInput = \"/noop\"\n\
interruptiblePromptInput = \"/hold\"\n\
icons = { pluginId = \"bbnode\", names = [\"terminal\", \"file\", \"search\", \"chat\", \"puzzle\"] }\n";

/// Legal switches whose check is not all-pass for a reason the spec gives: the capability
/// they turn off leaves a rule with nothing to judge (not run, which passes the run).
const ODD_NOT_RUN: &[(&str, &[&str])] = &[
    (
        "minimal-caps",
        &[
            "session/resume-identity",
            "session/resume-id-uniqueness",
            "recovery/session-archived",
            "session/fork-identity",
        ],
    ),
    ("fork-none", &["session/fork-identity"]),
];

/// Switches that are not legal, though listed among the legal ones: `rpc-batch` sends JSON-RPC
/// batches (JSON arrays), which the bb protocol, one message per line, does not have; it is a
/// flaw row below.
const ODD_NOT_LEGAL: &[&str] = &["rpc-batch"];

/// (switch, the one rule it fails, a phrase of that verdict's detail). `ODD=` switches are
/// marked with a leading `odd:`.
const FLAWS: &[(&str, &str, &str)] = &[
    (
        "drop-unknown",
        "rpc/unknown-method",
        "request was silently dropped",
    ),
    (
        "unknown-code",
        "rpc/unknown-method",
        "expected error -32601, got error -32600",
    ),
    (
        "invalid-code",
        "rpc/invalid-params",
        "expected error -32602, got error -32603",
    ),
    (
        "invalid-drop",
        "rpc/invalid-params",
        "thread/stop {} unanswered",
    ),
    (
        "nonjson-exit",
        "rpc/non-json-ignored",
        "(bridge exited (exit status 3))",
    ),
    (
        "answer-responses",
        "rpc/response-not-request",
        "the stray response (id 999999) was answered with error -32600",
    ),
    (
        "version-1",
        "handshake/initialize",
        "protocolVersion 1, expected 2",
    ),
    (
        "no-grammar",
        "handshake/initialize",
        "grammar versions [2, 2] do not intersect",
    ),
    (
        "skills-undeclared",
        "skills/configure-declared",
        "must answer -32601, got result {}",
    ),
    (
        "commands-broken",
        "commands/list-declared",
        "yet commands/list answered error -32000",
    ),
    (
        "no-accept",
        "turn/lifecycle",
        "but no input.accepted carried the turn/start's clientRequestId",
    ),
    (
        "wrong-accept",
        "turn/lifecycle",
        "but no input.accepted carried the turn/start's clientRequestId",
    ),
    (
        "noop-hangs",
        "turn/settles-without-activity",
        "the zero-work turn never settled",
    ),
    // Passed before: the refused prompt's turn opened and settled.
    (
        "reject-but-open",
        "turn/settles-without-activity",
        "and was then refused: error -32000 provider refused the prompt; a prompt the provider never took must not open a turn",
    ),
    (
        "stop-after-result",
        "stop/interrupt-settles-before-result",
        "arrived after the stop response",
    ),
    (
        "stop-completed",
        "stop/interrupt-settles-interrupted",
        "settled with status \"completed\"",
    ),
    (
        "stop-leaves-items",
        "stop/interrupt-closes-items",
        "1 item(s) still open (command ",
    ),
    (
        "after-stop",
        "stop/nothing-after-stop",
        "after the thread/stop answer at message",
    ),
    (
        "release-fabricates",
        "stop/release-not-interrupted",
        "a release stop fabricated an interruption",
    ),
    (
        "stop-hang",
        "stop/interrupt-settles-before-result",
        "interrupt thread/stop unanswered",
    ),
    (
        "background-leak",
        "stop/release-not-interrupted",
        "1 background item(s) still pending",
    ),
    (
        "identity-late",
        "session/identity-before-deltas",
        "came after a thread/delta for it",
    ),
    (
        "identity-wrong",
        "session/identity-echoes-handle",
        "names \"bbnode_",
    ),
    (
        "fork-same-handle",
        "session/fork-identity",
        "thread/fork for \"thr_conformance_1_fork\" answered providerThreadId",
    ),
    (
        "no-reset",
        "session/resume-id-uniqueness",
        "no session.reset came",
    ),
    (
        "delta-outside-turn",
        "turn/delta-outside-turn",
        "no turn is open and it carries no noTurnFallback",
    ),
    (
        "unvouched-turn",
        "turn/vouched-key-opened",
        "scoped by providerTurnId \"provider-internal-turn-7\"",
    ),
    (
        "wrong-thread",
        "thread/delta-echoes-thread-id",
        "under a threadId the runtime never named (first: \"thr_conformance_1-x\"",
    ),
    ("invalid-delta", "events/schema-valid", "(item.textDelta)"),
    ("ext-no-presentation", "events/schema-valid", "(item.open)"),
    ("detail-too-long", "events/schema-valid", "(item.open)"),
    ("usage-null", "events/schema-valid", "(usage)"),
    (
        "icon-undeclared",
        "presentation/icon-namespaced-declared",
        "glyph \"bbnode/rocket\"",
    ),
    (
        "output-before-open",
        "item/opens-before-delta",
        "is not open",
    ),
    (
        "archived-no-hint",
        "recovery/session-archived",
        "rejected-with-hint: the archived resume was rejected without error.data.recovery",
    ),
    (
        "both-hints",
        "recovery/session-archived",
        "one-hint: the rejection carried error.data.recovery and a provider/recovery notification",
    ),
    (
        "hint-foreign",
        "recovery/hint-names-hosted-thread",
        "names thread \"thr_not_hosted\"",
    ),
    // A SHOULD before (a warning, exit 0): the document's musts are all lowercase.
    (
        "stray-stdout",
        "transport/stdout-protocol-only",
        "5 stdout line(s) were not protocol traffic",
    ),
    ("no-jsonrpc", "rpc/jsonrpc-envelope", "version: "),
    (
        "result-and-error",
        "rpc/jsonrpc-envelope",
        "result-or-error: 5 response(s) carry both",
    ),
    // Four rules failed before, each on its own answer, and the probes' skips said the bridge
    // "drops unknown methods".
    (
        "id-as-string",
        "rpc/jsonrpc-envelope",
        "answers-a-request: 4 response(s) carry their request's numeric id as a string",
    ),
    // Two lifecycle rules failed before ("never settled"), the envelope passing.
    (
        "odd:rpc-batch",
        "rpc/jsonrpc-envelope",
        "one-message-per-line: 18 line(s) are JSON arrays",
    ),
];

/// Flaws `check bb` does not catch, each with why: a test checks each still passes, so one
/// caught later fails here and moves to [`FLAWS`].
const NOT_CAUGHT: &[(&str, &str)] = &[
    (
        "counter-handle",
        "handles minted from a per-process counter are unique within one process: telling them apart needs a second bridge process, which check bb does not start",
    ),
    (
        "leak-child",
        "a provider child left running after thread/stop: check bb does not watch the bridge's processes per thread (bridgewire kills and names what outlives the bridge at its exit)",
    ),
    (
        "no-exit",
        "not a protocol must: check bb ends the bridge itself (replay bb says when a bridge does not exit after stdin closes)",
    ),
];

/// Flaws that fail two rules, each for a fault of its own the spec names apart.
const TWO_RULES: &[(&str, [&str; 2])] = &[
    // A handle shared by every session: a start and a fork each announce it again.
    (
        "same-handle",
        ["session/start-identity", "session/fork-identity"],
    ),
    // A held turn blocks the other thread, whose turn then runs after its release.
    (
        "threads-coupled",
        ["session/threads-independent", "stop/nothing-after-stop"],
    ),
];

/// A check's exit code and the verdicts that are not `pass`, as (id, status, detail).
type Outcome = (Option<i32>, Vec<(String, String, String)>);

/// `check bb` on the Node bridge with `env` set.
fn check(env: &[(&str, &str)]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bridgewire.toml"), FIXTURE).unwrap();
    let mut c = Command::new(BRIDGEWIRE);
    c.args(["check", "bb", "--format", "json", "--timeout-ms", "5000"])
        .args(["--", "node", BRIDGE])
        .env_remove("ODD")
        .env_remove("FLAW")
        .current_dir(dir.path());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{env:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let short = doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] != "pass")
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (s("id"), s("status"), s("detail"))
        })
        .collect();
    (out.status.code(), short)
}

/// The bridge's switches of one kind (`ODD` or `FLAW`), from its own `--list`.
fn listed(kind: &str) -> Vec<String> {
    let out = Command::new("node")
        .args([BRIDGE, "--list"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut on = false;
    let mut names = Vec::new();
    for line in text.lines() {
        if line.ends_with(':') && !line.starts_with(' ') {
            on = line == format!("{kind}:");
            continue;
        }
        if on && let Some(name) = line.strip_prefix("  ") {
            names.push(name.split_whitespace().next().unwrap().to_string());
        }
    }
    assert!(!names.is_empty(), "{kind}: nothing listed in\n{text}");
    names
}

/// The default and every legal switch pass: nothing fails, nothing is skipped, and only what
/// [`ODD_NOT_RUN`] names is not run. `stop-session-ended` (an interrupt settled by
/// `session.ended` alone, as the real Claude bridge's recording does) failed
/// stop/interrupt-closes-items before ("2 item(s) still open"), though session.ended settles
/// them.
#[test]
fn every_legal_switch_passes_check_bb() {
    if !node("every_legal_switch_passes_check_bb") {
        return;
    }
    let odd: Vec<String> = std::iter::once(String::new())
        .chain(
            listed("ODD")
                .into_iter()
                .filter(|o| !ODD_NOT_LEGAL.contains(&o.as_str())),
        )
        .collect();
    let jobs: Vec<Box<dyn FnOnce() -> Outcome + Send>> = odd
        .iter()
        .map(|o| Box::new(move || check(&[("ODD", o)])) as Box<dyn FnOnce() -> Outcome + Send>)
        .collect();
    let mut problems = Vec::new();
    for (o, (code, short)) in odd.iter().zip(common::proc::three_at_a_time(jobs)) {
        let allowed: &[&str] = ODD_NOT_RUN
            .iter()
            .find(|(n, _)| n == o)
            .map_or(&[], |(_, r)| r);
        let unexpected: Vec<_> = short
            .iter()
            .filter(|(id, st, _)| !(st == "not-run" && allowed.contains(&id.as_str())))
            .collect();
        if code != Some(0) || !unexpected.is_empty() {
            problems.push(format!("ODD={o}: exit {code:?}: {unexpected:#?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each flaw fails exactly its rule, naming the cause; nothing else fails (a skip names the
/// cause it was not judged for). Every listed flaw is in one table.
#[test]
fn each_flaw_fails_its_rule_alone() {
    if !node("each_flaw_fails_its_rule_alone") {
        return;
    }
    let listed = listed("FLAW");
    let tabled: Vec<&str> = FLAWS
        .iter()
        .map(|f| f.0)
        .chain(NOT_CAUGHT.iter().map(|f| f.0))
        .chain(TWO_RULES.iter().map(|f| f.0))
        .filter(|f| !f.starts_with("odd:"))
        .collect();
    for f in &listed {
        assert!(tabled.contains(&f.as_str()), "FLAW={f} is in no table");
    }
    let env_of = |f: &'static str| match f.strip_prefix("odd:") {
        Some(o) => ("ODD", o),
        None => ("FLAW", f),
    };
    let mut jobs: Vec<Box<dyn FnOnce() -> Outcome + Send>> = Vec::new();
    for &(f, _, _) in FLAWS {
        jobs.push(Box::new(move || check(&[env_of(f)])));
    }
    for &(f, _) in NOT_CAUGHT {
        jobs.push(Box::new(move || check(&[env_of(f)])));
    }
    for &(f, _) in TWO_RULES {
        jobs.push(Box::new(move || check(&[env_of(f)])));
    }
    let mut results = common::proc::three_at_a_time(jobs).into_iter();
    let mut problems = Vec::new();
    for &(f, rule, phrase) in FLAWS {
        let (code, short) = results.next().unwrap();
        let fails: Vec<_> = short.iter().filter(|v| v.1 == "fail").collect();
        let ok = code == Some(1)
            && fails.len() == 1
            && fails[0].0 == rule
            && fails[0].2.contains(phrase);
        if !ok {
            problems.push(format!(
                "{f}: exit {code:?}, want {rule} alone naming {phrase:?}: {short:#?}"
            ));
        }
    }
    for &(f, why) in NOT_CAUGHT {
        let (code, short) = results.next().unwrap();
        if code != Some(0) {
            problems.push(format!(
                "{f} is caught now (it was not: {why}): move it to FLAWS: {short:#?}"
            ));
        }
    }
    for &(f, rules) in TWO_RULES {
        let (code, short) = results.next().unwrap();
        let mut fails: Vec<&str> = short
            .iter()
            .filter(|v| v.1 == "fail")
            .map(|v| v.0.as_str())
            .collect();
        fails.sort_unstable();
        let mut want = rules.to_vec();
        want.sort_unstable();
        if code != Some(1) || fails != want {
            problems.push(format!("{f}: exit {code:?}, want {want:?}: {short:#?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `tests/peers/coverage.tsv`'s `node:` entries are true of the tables here: a failing entry
/// (`node:<flaw>`) is a [`FLAWS`] row failing that rule; a passing one (`node:odd:<switch>`) is a
/// legal switch, which [`every_legal_switch_passes_check_bb`] runs.
#[test]
fn the_coverage_map_names_node_rows_that_fail_and_pass_each_rule() {
    use common::coverage::{Entry, lines_for_catalogue};
    let mut problems = Vec::new();
    let mut named = 0;
    for (line, _level) in lines_for_catalogue("bb") {
        for (e, fails) in line
            .fails
            .iter()
            .map(|e| (e, true))
            .chain(line.passes.iter().map(|e| (e, false)))
        {
            let Entry::Named(name) = e else { continue };
            let Some(row) = name.strip_prefix("node:") else {
                continue;
            };
            named += 1;
            let ok = if fails {
                FLAWS.iter().any(|(f, r, _)| *f == row && *r == line.rule)
            } else {
                row.strip_prefix("odd:").is_some_and(|o| {
                    !ODD_NOT_LEGAL.contains(&o)
                        && !ODD_NOT_RUN
                            .iter()
                            .any(|(n, rules)| *n == o && rules.contains(&line.rule.as_str()))
                })
            };
            if !ok {
                problems.push(format!(
                    "{}: node row {row:?} does not {} {}",
                    line.at,
                    if fails { "fail" } else { "pass" },
                    line.rule
                ));
            }
        }
    }
    assert!(named > 0, "coverage.tsv names no node: row");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

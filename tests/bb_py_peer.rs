//! `check bb` against a bb bridge that is not ours (`tests/fixtures/py_bb_bridge.py`, Python
//! stdlib, written from the protocol document): each deliberate flaw fails exactly its rule
//! (the complete set of verdicts that are not `pass` is asserted per row: a rule the flaw makes
//! unjudgeable is skipped or not run, naming the cause); the variant that is correct in unusual
//! but legal ways passes every rule. `tests/peers/coverage.tsv` (`bb` lines) is held to these
//! tables.

mod common;

use common::need::python;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const PEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_bb_bridge.py"
);

/// The fixture: the peer's `/noop` and `/hold` prompts and its icon names (glyph `py/plan`).
const FIXTURE: &str = "[bb.fixture]\npromptInput = \"hello\"\nzeroWorkPromptInput = \"/noop\"\ninterruptiblePromptInput = \"/hold\"\nicons = { pluginId = \"py\", names = [\"plan\", \"message\"] }\n";

/// One `check bb` run: exit code and `id → (status, detail)`.
fn run(py: &str, env: &[(&str, &str)]) -> (Option<i32>, BTreeMap<String, (String, String)>) {
    run_with(py, env, FIXTURE, &["--timeout-ms", "3000"])
}

fn run_with(
    py: &str,
    env: &[(&str, &str)],
    fixture: &str,
    args: &[&str],
) -> (Option<i32>, BTreeMap<String, (String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("bridgewire.toml");
    std::fs::write(&fx, fixture).unwrap();
    let mut cmd = Command::new(BRIDGEWIRE);
    cmd.args(["check", "bb", "--format", "json"])
        .args(args)
        .arg("--fixture")
        .arg(&fx)
        .args(["--", py, PEER])
        .env_remove("PY_BB_FLAW")
        .env_remove("PY_BB_ODDITY")
        .env_remove("PY_BB_GRAMMAR")
        .current_dir(dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let verdicts = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                (
                    v["status"].as_str().unwrap().to_string(),
                    v["detail"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect();
    (out.status.code(), verdicts)
}

/// A row: the peer's environment and every verdict that is not `pass`, with a phrase its
/// detail must hold (the cause, named).
struct Row {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    not_pass: &'static [(&'static str, &'static str, &'static str)],
}

const PREREQ_START: &str = "prerequisite session/start-identity failed";
const REFUSED: &str = "could not be judged: the runtime refused";
const FOREIGN: &str = "thread/delta message(s) under a threadId the runtime never named (first: \"x-thr_conformance_1\" at message 8; see thread/delta-echoes-thread-id)";

/// The rules not run for a bridge without sessionRestore (the runtime never sends thread/resume).
const NOT_RUN_WITHOUT_RESTORE: &[(&str, &str, &str)] = &[
    (
        "session/resume-identity",
        "not-run",
        "capabilities.sessionRestore",
    ),
    (
        "session/resume-id-uniqueness",
        "not-run",
        "capabilities.sessionRestore",
    ),
    (
        "recovery/session-archived",
        "not-run",
        "capabilities.sessionRestore",
    ),
];

/// `also` and the rules not run without sessionRestore.
fn without_restore(
    also: &'static [(&'static str, &'static str, &'static str)],
) -> &'static [(&'static str, &'static str, &'static str)] {
    // Leaked once per row: the table is static data.
    Box::leak(
        also.iter()
            .chain(NOT_RUN_WITHOUT_RESTORE)
            .copied()
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn flaw(name: &'static str) -> &'static [(&'static str, &'static str)] {
    // Leaked once per row: the table is static data.
    Box::leak(Box::new([("PY_BB_FLAW", name)]))
}

fn rows() -> Vec<Row> {
    let f = |name: &'static str,
             not_pass: &'static [(&'static str, &'static str, &'static str)]| Row {
        name,
        env: flaw(name),
        not_pass,
    };
    vec![
        Row {
            name: "oddity",
            env: &[("PY_BB_ODDITY", "1")],
            not_pass: &[],
        },
        Row {
            name: "oddity-wire",
            env: &[("PY_BB_ODDITY", "wire")],
            not_pass: &[],
        },
        // No sessionRestore (the default) and `protocolVersion: 2.0`: the rules that send
        // thread/resume are not run, as the runtime never sends it to such a bridge; every
        // other rule passes (before, the kit sent it anyway, and the rules after it failed on a
        // released thread; 2.0 was read as 0). Found by an independent bb bridge.
        // The protocol's held-turn signal (`turn.mainRun`), one message of its own and one in
        // the message that settles the turn: every rule passes (before, events/schema-valid
        // failed on the kind, which bb's grammar-v3 validation rejects, and the settling
        // message was refused whole).
        Row {
            name: "held",
            env: &[("PY_BB_ODDITY", "held")],
            not_pass: &[],
        },
        // The answer's text in other chunks: the bridge's choice, every rule passes.
        Row {
            name: "chunks",
            env: &[("PY_BB_ODDITY", "chunks")],
            not_pass: &[],
        },
        // A surrogate pair cut between two text chunks, each a lone surrogate escape (what
        // JavaScript's JSON.stringify writes for text sliced by UTF-16 index): JSON, which bb's
        // runtime takes and joins; every rule passes (before, the lines were "non-JSON", the
        // turns never settled and three rules failed).
        Row {
            name: "surrogate",
            env: &[("PY_BB_ODDITY", "surrogate")],
            not_pass: &[],
        },
        // Results before the identity notification (still before the deltas), vouched
        // provider turns with items of their own, unsolicited hints for hosted threads and for
        // none: every rule passes.
        Row {
            name: "keys",
            env: &[("PY_BB_ODDITY", "keys")],
            not_pass: &[],
        },
        // A background delegation left running past its turn, whose last progress and close
        // go out after the release stop and before its answer, as the protocol asks: every
        // rule passes (before, events/grammar failed them, the thread's state forgotten at the
        // stop instead of at its answer).
        Row {
            name: "bg",
            env: &[("PY_BB_ODDITY", "bg")],
            not_pass: &[],
        },
        // An explicit reopen (open, close, open and close again under one providerItemId),
        // which reuses the same bb id: every rule passes (before, session/resume-id-uniqueness
        // failed it as a repeated item id; --kit-only still does, as bb's kit).
        Row {
            name: "reopen",
            env: &[("PY_BB_ODDITY", "reopen")],
            not_pass: &[],
        },
        Row {
            name: "no-restore",
            env: &[("PY_BB_ODDITY", "no-restore")],
            not_pass: NOT_RUN_WITHOUT_RESTORE,
        },
        f(
            "early-text",
            &[(
                "turn/delta-outside-turn",
                "fail",
                "item.textDelta (key channel \"early\")",
            )],
        ),
        f(
            "interrupt-completed",
            &[(
                "stop/interrupt-settles-interrupted",
                "fail",
                "settled with status \"completed\"",
            )],
        ),
        f(
            "late-delta",
            &[(
                "stop/nothing-after-stop",
                "fail",
                "after the thread/stop answer",
            )],
        ),
        // Live, the kit's own scenario judges it (the wire judge's rule of that name is left
        // to it: one rule, one verdict).
        f(
            "stop-before-boundary",
            &[(
                "stop/interrupt-settles-before-result",
                "fail",
                "arrived after the stop response",
            )],
        ),
        f(
            "in-progress",
            &[(
                "events/schema-valid",
                "fail",
                "item.steps.1.status: \"inProgress\" is not allowed",
            )],
        ),
        f(
            "bad-creq",
            &[
                ("events/schema-valid", "fail", "clientRequestId: \"req_"),
                ("turn/lifecycle", "skipped", REFUSED),
                ("item/opens-before-delta", "skipped", REFUSED),
                ("presentation/icon-namespaced-declared", "skipped", REFUSED),
                ("session/resume-id-uniqueness", "skipped", REFUSED),
                ("turn/settles-without-activity", "skipped", REFUSED),
                ("session/threads-independent", "skipped", REFUSED),
                ("stop/interrupt-settles-before-result", "skipped", REFUSED),
                ("turn/delta-outside-turn", "skipped", REFUSED),
                (
                    "stop/interrupt-settles-interrupted",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                (
                    "stop/interrupt-closes-items",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                // Every turn's first message (its turn.open) was refused: no event at all.
                (
                    "events/grammar",
                    "not-run",
                    "no event was assembled to judge (the runtime refused",
                ),
            ],
        ),
        f(
            "unknown-wrong-code",
            &[
                (
                    "rpc/unknown-method",
                    "fail",
                    "expected error -32601, got error -32600",
                ),
                (
                    "skills/configure-declared",
                    "skipped",
                    "could not be judged apart from rpc/unknown-method",
                ),
                (
                    "commands/list-declared",
                    "skipped",
                    "could not be judged apart from rpc/unknown-method",
                ),
            ],
        ),
        f(
            "stop-empty-ok",
            &[(
                "rpc/invalid-params",
                "fail",
                "expected error -32602, got result {}",
            )],
        ),
        f(
            "non-json-eats-next",
            &[(
                "rpc/non-json-ignored",
                "fail",
                "alive probe after a non-JSON line unanswered",
            )],
        ),
        f(
            "answers-responses",
            &[(
                "rpc/response-not-request",
                "fail",
                "the stray response (id 999999) was answered",
            )],
        ),
        f(
            "protocol-1",
            &[
                (
                    "handshake/initialize",
                    "fail",
                    "protocolVersion 1, expected 2",
                ),
                (
                    "skills/configure-declared",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
                (
                    "commands/list-declared",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
                (
                    "session/fork-identity",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
            ],
        ),
        // Two handshake faults at once: each named in the one verdict.
        Row {
            name: "protocol-1-grammar-1",
            env: &[("PY_BB_FLAW", "protocol-1"), ("PY_BB_GRAMMAR", "1,1")],
            not_pass: &[
                (
                    "handshake/initialize",
                    "fail",
                    "2 faults: (1) protocolVersion 1, expected 2; (2) grammar versions [1, 1] do not intersect the runtime's [3, 3]",
                ),
                (
                    "skills/configure-declared",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
                (
                    "commands/list-declared",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
                (
                    "session/fork-identity",
                    "not-run",
                    "not reached: handshake/initialize did not pass",
                ),
            ],
        },
        f(
            "skills-undeclared-ok",
            &[(
                "skills/configure-declared",
                "fail",
                "must answer -32601, got result {}",
            )],
        ),
        f(
            "commands-declared-refused",
            &[(
                "commands/list-declared",
                "fail",
                "capabilities.commands.list is declared, yet commands/list answered error -32601",
            )],
        ),
        f(
            "start-no-identity",
            &[
                (
                    "session/start-identity",
                    "fail",
                    "thread/start result: missing providerThreadId",
                ),
                ("turn/lifecycle", "skipped", PREREQ_START),
                ("events/schema-valid", "skipped", PREREQ_START),
                ("item/opens-before-delta", "skipped", PREREQ_START),
                ("stop/release-not-interrupted", "skipped", PREREQ_START),
                ("session/resume-identity", "skipped", PREREQ_START),
                ("session/resume-id-uniqueness", "skipped", PREREQ_START),
                ("session/fork-identity", "skipped", PREREQ_START),
                ("turn/settles-without-activity", "skipped", PREREQ_START),
                ("recovery/session-archived", "skipped", PREREQ_START),
                ("session/threads-independent", "skipped", PREREQ_START),
                (
                    "stop/interrupt-settles-before-result",
                    "skipped",
                    PREREQ_START,
                ),
                (
                    "presentation/icon-namespaced-declared",
                    "not-run",
                    "not reached: session/start-identity did not pass",
                ),
                (
                    "stop/interrupt-settles-interrupted",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                (
                    "stop/interrupt-closes-items",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                // The identity names a handle no result returned: nothing to compare it with.
                (
                    "session/identity-echoes-handle",
                    "not-run",
                    "no thread/identity notification could be paired",
                ),
                (
                    "stop/nothing-after-stop",
                    "not-run",
                    "no thread/stop was answered",
                ),
                (
                    "events/grammar",
                    "not-run",
                    "no event was assembled to judge",
                ),
            ],
        ),
        f(
            "first-turn-unsettled",
            &[(
                "turn/lifecycle",
                "fail",
                "turn never settled (no turn/completed)",
            )],
        ),
        f(
            "orphan-output",
            &[(
                "item/opens-before-delta",
                "fail",
                "item/opens-before-delta on item/commandExecution/outputDelta",
            )],
        ),
        f(
            "undeclared-glyph",
            &[(
                "presentation/icon-namespaced-declared",
                "fail",
                "glyph \"py/undeclared\"",
            )],
        ),
        f(
            "release-interrupts",
            &[(
                "stop/release-not-interrupted",
                "fail",
                "a release stop fabricated an interruption",
            )],
        ),
        f(
            "resume-no-identity",
            &[
                (
                    "session/resume-identity",
                    "fail",
                    "thread/resume result: missing providerThreadId",
                ),
                (
                    "session/resume-id-uniqueness",
                    "skipped",
                    "prerequisite session/resume-identity failed",
                ),
                (
                    "recovery/session-archived",
                    "skipped",
                    "could not be judged apart from session/resume-identity",
                ),
            ],
        ),
        f(
            "resume-unsettled",
            &[(
                "session/resume-id-uniqueness",
                "fail",
                "second turn never settled",
            )],
        ),
        f(
            "fork-no-identity",
            &[(
                "session/fork-identity",
                "fail",
                "thread/fork result: missing providerThreadId",
            )],
        ),
        f(
            "noop-hangs",
            &[(
                "turn/settles-without-activity",
                "fail",
                "the zero-work turn never settled",
            )],
        ),
        f(
            "archived-no-hint",
            &[(
                "recovery/session-archived",
                "fail",
                "rejected-with-hint: the archived resume was rejected without error.data.recovery",
            )],
        ),
        // "Never send both for one event" (protocol, Recovery hints): found by an independent
        // bb bridge, which passed before.
        // "Acceptance rides input.accepted { clientRequestId } — mandatory": found by an
        // independent bb bridge, which passed before. Beyond the kit, in turn/lifecycle.
        f("no-accept", &[("turn/lifecycle", "fail", "turn ")]),
        f(
            "archived-hint-twice",
            &[(
                "recovery/session-archived",
                "fail",
                "one-hint: the rejection carried error.data.recovery and a provider/recovery notification",
            )],
        ),
        f(
            "threads-serialized",
            &[(
                "session/threads-independent",
                "fail",
                "the other thread's turn never completed",
            )],
        ),
        f(
            "interrupt-unsettled",
            &[
                (
                    "stop/interrupt-settles-before-result",
                    "fail",
                    "never settled (no turn/completed)",
                ),
                (
                    "stop/interrupt-settles-interrupted",
                    "skipped",
                    "could not be judged: the turn",
                ),
                (
                    "stop/interrupt-closes-items",
                    "skipped",
                    "could not be judged: the turn",
                ),
            ],
        ),
        // bb's host grammar over the live events (the offline sub-rule named first, as the
        // recorded `grammar` verdict names it).
        // Mid-flight reclassification is legal (protocol, Item lifecycle): the assembler settles
        // the item twice itself and bb's host drops the second, which is bb's pair, not the
        // bridge's fault. events/grammar passes naming it (it failed before: a false alarm an
        // independent bb bridge found); pins and recorded rules still count bb's drop.
        f("reclassify", &[]),
        // The repeated turn/started is the grammar's fault: session/resume-id-uniqueness
        // (which bb's kit fails for it too) passes, naming events/grammar.
        f(
            "vouched-twice",
            &[(
                "events/grammar",
                "fail",
                "turn/starts-once on turn/started: turn ",
            )],
        ),
        f(
            "vouched-settles-twice",
            &[(
                "events/grammar",
                "fail",
                "turn/settles-once on turn/completed: turn ",
            )],
        ),
        f(
            "vouched-unknown",
            &[(
                "events/grammar",
                "fail",
                "turn/known on turn/completed: turn ",
            )],
        ),
        // Found by an independent bb bridge (each passed every rule before).
        f(
            "foreign-vouch",
            &[("turn/vouched-key-opened", "fail", "item.open at message ")],
        ),
        f(
            "identity-late",
            &[(
                "session/identity-before-deltas",
                "fail",
                "thread/identity for thread \"thr_conformance_1\" at message ",
            )],
        ),
        f(
            "identity-mismatch",
            &[(
                "session/identity-echoes-handle",
                "fail",
                "-announced\", but the result at message ",
            )],
        ),
        f(
            "recovery-foreign",
            &[(
                "recovery/hint-names-hosted-thread",
                "fail",
                "provider/recovery (rateLimited) at message ",
            )],
        ),
        // Late and invalid: two faults, two verdicts (before, the refused message was seen by
        // neither rule).
        f(
            "late-invalid-delta",
            &[
                (
                    "events/schema-valid",
                    "fail",
                    "thread/delta message(s) invalid",
                ),
                (
                    "stop/nothing-after-stop",
                    "fail",
                    "(a message the runtime refuses, see events/schema-valid), after the thread/stop answer",
                ),
            ],
        ),
        // Invalid deltas only after the kit's events/schema-valid scenario: the rule is judged
        // at the end of the run, so it fails (before, it passed and only later rules were
        // skipped naming it).
        // Found by an independent bb bridge: the interrupted turn's plan item is never closed.
        f(
            "interrupt-leaves-items",
            &[(
                "stop/interrupt-closes-items",
                "fail",
                "item(s) still open (planSteps ",
            )],
        ),
        // Stray stdout lines: the runtime ignores them, but "bridges must guard stdout" (a
        // MUST like every other bb must; it was a SHOULD, exit 0).
        f(
            "stray-stdout",
            &[(
                "transport/stdout-protocol-only",
                "fail",
                "not JSON, 0 not UTF-8); first non-JSON line: py bridge 1.0 starting",
            )],
        ),
        // A held turn with a state the protocol does not give: the message is refused, and the
        // verdict names the state, not the kind (which check bb accepts outside --kit-only).
        Row {
            name: "held-bad-state",
            env: &[("PY_BB_ODDITY", "held"), ("PY_BB_FLAW", "held-bad-state")],
            not_pass: &[(
                "events/schema-valid",
                "fail",
                ": deltas[0] (turn.mainRun): state \"sleeping\", want \"idle\" or \"running\"",
            )],
        },
        // Deltas under a threadId the runtime never named (parity found it: bb's runtime routes
        // by the echoed id): one fault, one verdict. Before, five rules failed on their own
        // (turn never started, second turn never settled, …) and nothing named the id.
        Row {
            name: "thread-prefix",
            env: &[("PY_BB_THREAD_PREFIX", "x-")],
            not_pass: &[
                (
                    "thread/delta-echoes-thread-id",
                    "fail",
                    "under a threadId the runtime never named (first: \"x-thr_conformance_1\" at message ",
                ),
                ("turn/lifecycle", "skipped", FOREIGN),
                ("item/opens-before-delta", "skipped", FOREIGN),
                ("presentation/icon-namespaced-declared", "skipped", FOREIGN),
                ("session/resume-id-uniqueness", "skipped", FOREIGN),
                ("turn/settles-without-activity", "skipped", FOREIGN),
                ("session/threads-independent", "skipped", FOREIGN),
                ("stop/interrupt-settles-before-result", "skipped", FOREIGN),
                (
                    "stop/interrupt-settles-interrupted",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                (
                    "stop/interrupt-closes-items",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
            ],
        },
        // A refused turn/start whose turn runs all the same (passed before).
        f(
            "error-but-runs",
            &[(
                "turn/lifecycle",
                "fail",
                "turn/start answered error -32000 the provider is busy, yet turn ",
            )],
        ),
        // Handles that name another thread's session (spec: "It must name exactly one
        // provider session … never mint it from a per-process counter"): both passed before.
        f(
            "start-same-ptid",
            &[(
                "session/start-identity",
                "fail",
                "answered providerThreadId \"py-session-1\" at message ",
            )],
        ),
        f(
            "fork-same-ptid",
            &[("session/fork-identity", "fail", "announced first (message ")],
        ),
        // The resumed session reuses the first one's item ids: the one fault the uniqueness
        // rule exists for, still named when reopens are not (the repeat crosses the resume).
        f(
            "resume-no-reset",
            &[(
                "session/resume-id-uniqueness",
                "fail",
                "started twice, before the resume and again after it",
            )],
        ),
        // The same thread started again (no sessionRestore: the runtime never resumes) gets
        // its released session's handle: passed before (only another thread's counted).
        Row {
            name: "restart-same-ptid",
            env: &[("PY_BB_FLAW", "restart-same-ptid")],
            not_pass: without_restore(&[(
                "session/start-identity",
                "fail",
                "answered providerThreadId \"py-thr_conformance_1\" at message ",
            )]),
        },
        // Background delegations left pending by a release stop (the bg oddity without its
        // settlement at the stop): passed before.
        f(
            "bg-left-open",
            &[(
                "stop/release-not-interrupted",
                "fail",
                "background item(s) still pending on the thread (delegation ",
            )],
        ),
        // Not JSON-RPC 2.0 ("Line-delimited JSON-RPC 2.0 … in both directions"): every
        // response without jsonrpc, error responses with a result too, every response twice.
        // All three passed before.
        f(
            "no-jsonrpc",
            &[(
                "rpc/jsonrpc-envelope",
                "fail",
                "are not JSON-RPC 2.0 (first: the response to id 1 at message 0, with no jsonrpc member)",
            )],
        ),
        f(
            "result-and-error",
            &[(
                "rpc/jsonrpc-envelope",
                "fail",
                "carry both result and error (first: id 1 at message 0)",
            )],
        ),
        f(
            "double-response",
            &[(
                "rpc/jsonrpc-envelope",
                "fail",
                "(first: id 1 at message 0 and again at message 1)",
            )],
        ),
        f(
            "bad-delta-later",
            &[
                (
                    "events/schema-valid",
                    "fail",
                    "thread/delta message(s) invalid",
                ),
                ("session/resume-id-uniqueness", "skipped", REFUSED),
                ("session/threads-independent", "skipped", REFUSED),
            ],
        ),
    ]
}

/// The live rules of `rules/bb.json` (each gets a verdict on every run).
fn live_rules() -> Vec<String> {
    let v: Value = serde_json::from_str(include_str!("../rules/bb.json")).unwrap();
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"] == "live")
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Whether `rule` is a SHOULD in `rules/bb.json`.
fn should_level(rule: &str) -> bool {
    let v: Value = serde_json::from_str(include_str!("../rules/bb.json")).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == rule && r["level"] == "SHOULD")
}

fn check_row(py: &str, row: &Row, live: &[String]) -> Vec<String> {
    let (code, got) = run(py, row.env);
    let mut problems = Vec::new();
    let ids: Vec<&String> = got.keys().collect();
    if ids != live.iter().collect::<Vec<_>>() {
        problems.push(format!(
            "{}: verdicts for {ids:?}, want every live rule",
            row.name
        ));
    }
    for (id, (status, detail)) in &got {
        match row.not_pass.iter().find(|(r, _, _)| r == id) {
            None if status != "pass" => {
                problems.push(format!("{}: {id} {status} (want pass): {detail}", row.name))
            }
            None => {}
            Some((_, want, needle)) if status != want || !detail.contains(needle) => {
                problems.push(format!(
                    "{}: {id} {status} {detail:?}, want {want} naming {needle:?}",
                    row.name
                ))
            }
            Some(_) => {}
        }
    }
    // A SHOULD rule's failure warns (exit 0); MUST failures and skips fail the run.
    let want_code = if row
        .not_pass
        .iter()
        .any(|(r, s, _)| *s != "not-run" && !(*s == "fail" && should_level(r)))
    {
        1
    } else {
        0
    };
    if code != Some(want_code) {
        problems.push(format!("{}: exit {code:?}, want {want_code}", row.name));
    }
    problems
}

/// The clean peer passes every live rule (each judged), the oddity too, and each flaw row gets
/// exactly its verdicts. Rows run four at a time (each is a few seconds; hangs wait 3 s).
#[test]
fn python_bridge_flaws_fail_exactly_their_rules() {
    let Some(py) = python("python_bridge_flaws_fail_exactly_their_rules") else {
        return;
    };
    let live = live_rules();
    let clean = Row {
        name: "clean",
        env: &[],
        not_pass: &[],
    };
    let mut all = vec![clean];
    all.extend(rows());
    let problems = in_parallel(all.len(), |i| check_row(py, &all[i], &live));
    assert!(problems.is_empty(), "{problems:#?}");
}

/// One fault, one verdict: a vouched turn opened twice repeats its turn id, which bb's kit (no
/// grammar) fails as `session/resume-id-uniqueness`; the host drops the second `turn/started`
/// (`turn/starts-once`), so `events/grammar` owns it and the uniqueness rule passes naming it.
/// `--kit-only` gives bb's own verdict.
#[test]
fn a_turn_started_twice_is_the_grammars_fault_and_the_kits_under_kit_only() {
    let Some(py) = python("a_turn_started_twice_is_the_grammars_fault_and_the_kits_under_kit_only")
    else {
        return;
    };
    let env = flaw("vouched-twice");
    let (_, got) = run(py, env);
    let (status, detail) = &got["session/resume-id-uniqueness"];
    assert_eq!(status, "pass", "{detail}");
    assert!(
        detail.contains("(turn/starts-once): judged by events/grammar"),
        "{detail}"
    );
    let (_, kit) = run_with(py, env, FIXTURE, &["--timeout-ms", "3000", "--kit-only"]);
    assert!(!kit.contains_key("events/grammar"), "{kit:?}");
    let (status, detail) = &kit["session/resume-id-uniqueness"];
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.ends_with("started twice"), "{detail}");
    // The kit's own rule for the one sub-rule it judges keeps it: events/grammar passes,
    // naming what it left there.
    let (_, got) = run(py, flaw("orphan-output"));
    let (status, detail) = &got["events/grammar"];
    assert_eq!(status, "pass", "{detail}");
    assert!(
        detail.contains("left to item/opens-before-delta, which failed for that fault"),
        "{detail}"
    );
}

/// An explicit reopen reuses its bb id (protocol): no repeated id by default, the pass naming
/// it; bb's kit counts it as a repeat, and `--kit-only` gives the kit's verdict.
#[test]
fn an_explicit_reopen_is_no_repeated_id_but_the_kits_repeat_under_kit_only() {
    let Some(py) =
        python("an_explicit_reopen_is_no_repeated_id_but_the_kits_repeat_under_kit_only")
    else {
        return;
    };
    let env: &[(&str, &str)] = &[("PY_BB_ODDITY", "reopen")];
    let (_, got) = run(py, env);
    let (status, detail) = &got["session/resume-id-uniqueness"];
    assert_eq!(status, "pass", "{detail}");
    assert!(detail.contains("explicit reopen(s)"), "{detail}");
    let (_, kit) = run_with(py, env, FIXTURE, &["--timeout-ms", "3000", "--kit-only"]);
    let (status, detail) = &kit["session/resume-id-uniqueness"];
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.ends_with("started twice"), "{detail}");
}

/// A recorded row: a committed recording of the peer (`tests/peers/bb/<cells>/`, made by
/// `check bb` through `record bb` with the flaw or oddity named, cut to the main thread's cell)
/// replayed against the peer with `env`; every `recorded/` verdict that is not `pass`.
struct RecRow {
    name: &'static str,
    cells: &'static str,
    env: &'static [(&'static str, &'static str)],
    not_pass: &'static [(&'static str, &'static str, &'static str)],
}

/// The cell every committed recording holds.
const CELL: &str = "recorded/thr_conformance_1/";

fn rec_rows() -> Vec<RecRow> {
    let same = |name: &'static str,
                not_pass: &'static [(&'static str, &'static str, &'static str)]| {
        RecRow {
            name,
            cells: name,
            env: flaw(name),
            not_pass,
        }
    };
    let on_clean =
        |name: &'static str, not_pass: &'static [(&'static str, &'static str, &'static str)]| {
            RecRow {
                name,
                cells: "clean",
                env: flaw(name),
                not_pass,
            }
        };
    vec![
        RecRow {
            name: "clean",
            cells: "clean",
            env: &[],
            not_pass: &[],
        },
        // A legal oddity replays its own recording, and the clean recording too.
        RecRow {
            name: "oddity",
            cells: "oddity",
            env: &[("PY_BB_ODDITY", "1")],
            not_pass: &[],
        },
        // A surrogate pair cut between two text chunks (lone surrogate escapes, JSON serde
        // refuses): recorded, read and replayed as the character, not dropped as non-JSON.
        RecRow {
            name: "surrogate",
            cells: "surrogate",
            env: &[("PY_BB_ODDITY", "surrogate")],
            not_pass: &[],
        },
        // Legal, but other content than the clean recording holds (text outside a turn, a
        // second item, usage): the replay does not match that recording, and only the
        // comparison says so.
        RecRow {
            name: "oddity-on-clean",
            cells: "clean",
            env: &[("PY_BB_ODDITY", "1")],
            not_pass: &[(
                "matches-recording",
                "fail",
                "the replay differs from the recording as `parity --base rec: --head cmd:` compares them (base = the recording, head = this replay; base 24 events/5 rows, head 36 events/9 rows",
            )],
        },
        // Legal: the same text in other chunks ("Coalescing is assembler policy, not bridge
        // policy"): more events than the recording, the same content.
        RecRow {
            name: "chunks-on-clean",
            cells: "clean",
            env: &[("PY_BB_ODDITY", "chunks")],
            not_pass: &[],
        },
        // The same deltas saying something else: only the comparison with the recording
        // sees it (the counts, the grammar and the lifecycle are all the recording's).
        on_clean(
            "wrong-text",
            &[(
                "matches-recording",
                "fail",
                "the replay differs from the recording as `parity --base rec: --head cmd:` compares them",
            )],
        ),
        on_clean(
            "in-progress",
            &[
                (
                    "replays",
                    "fail",
                    "invalid thread/delta: deltas[0] (item.open): item.steps.1.status",
                ),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/replays failed",
                ),
            ],
        ),
        on_clean(
            "orphan-output",
            &[
                (
                    "grammar",
                    "fail",
                    "item/opens-before-delta on item/commandExecution/outputDelta",
                ),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/grammar failed",
                ),
            ],
        ),
        on_clean(
            "interrupt-unsettled",
            &[
                (
                    "turn-lifecycle",
                    "fail",
                    "replay 4 started/3 completed, recording 4/4",
                ),
                (
                    "replays",
                    "skipped",
                    "could not be judged apart from recorded/thr_conformance_1/turn-lifecycle",
                ),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/turn-lifecycle failed",
                ),
                // The wire rules judge the live traffic, which the stall cut short.
                (
                    "stop/interrupt-closes-items",
                    "skipped",
                    "never settled, so what it left open was not seen",
                ),
                (
                    "stop/interrupt-settles-before-result",
                    "skipped",
                    "could not be judged apart from the stall (the replay stalled: ",
                ),
                (
                    "stop/interrupt-settles-interrupted",
                    "skipped",
                    "never settled, so its status was not seen",
                ),
            ],
        ),
        // Cut after the first turn, so the flaw's every gate waits once, not a dozen times.
        RecRow {
            name: "no-deltas",
            cells: "clean-first-turn",
            env: flaw("no-deltas"),
            not_pass: &[
                (
                    "not-empty",
                    "fail",
                    "the recording assembled 8 events, the replay none",
                ),
                (
                    "turn-lifecycle",
                    "skipped",
                    "could not be judged apart from recorded/thr_conformance_1/not-empty",
                ),
                (
                    "replays",
                    "skipped",
                    "could not be judged apart from recorded/thr_conformance_1/not-empty",
                ),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/not-empty failed",
                ),
                // The wire rules judge the live traffic: no delta came.
                (
                    "turn/delta-outside-turn",
                    "not-run",
                    "no valid thread/delta was received to judge (the traffic was cut short: the replay stalled: ",
                ),
                (
                    "turn/vouched-key-opened",
                    "not-run",
                    "no valid thread/delta was received to judge (the traffic was cut short: the replay stalled: ",
                ),
                // The cut recording holds a release stop only.
                (
                    "stop/interrupt-settles-interrupted",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                (
                    "stop/interrupt-closes-items",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
                (
                    "stop/interrupt-settles-before-result",
                    "not-run",
                    "no thread/stop {intent: \"interrupt\"} reached an open turn",
                ),
            ],
        },
        same(
            "early-text",
            &[(
                "turn/delta-outside-turn",
                "fail",
                "item.textDelta (key channel \"early\")",
            )],
        ),
        same(
            "interrupt-completed",
            &[(
                "stop/interrupt-settles-interrupted",
                "fail",
                "settled with status \"completed\"",
            )],
        ),
        same(
            "late-delta",
            &[(
                "stop/nothing-after-stop",
                "fail",
                "after the thread/stop answer",
            )],
        ),
        same(
            "stop-before-boundary",
            &[(
                "stop/interrupt-settles-before-result",
                "fail",
                "after the stop's answer at live message ",
            )],
        ),
        same(
            "reclassify",
            &[
                ("grammar", "fail", "item/settles-once on item/completed"),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/grammar failed",
                ),
            ],
        ),
        same(
            "vouched-twice",
            &[
                ("grammar", "fail", "turn/starts-once on turn/started"),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/grammar failed",
                ),
            ],
        ),
        same(
            "vouched-settles-twice",
            &[
                ("grammar", "fail", "turn/settles-once on turn/completed"),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/grammar failed",
                ),
            ],
        ),
        same(
            "vouched-unknown",
            &[
                ("grammar", "fail", "turn/known on turn/completed"),
                (
                    "matches-recording",
                    "skipped",
                    "not compared: recorded/thr_conformance_1/grammar failed",
                ),
            ],
        ),
        same(
            "interrupt-leaves-items",
            &[(
                "stop/interrupt-closes-items",
                "fail",
                "item(s) still open (planSteps ",
            )],
        ),
        RecRow {
            name: "keys",
            cells: "keys",
            env: &[("PY_BB_ODDITY", "keys")],
            not_pass: &[],
        },
        same(
            "foreign-vouch",
            &[(
                "turn/vouched-key-opened",
                "fail",
                "item.open at live message ",
            )],
        ),
        same(
            "identity-late",
            &[(
                "session/identity-before-deltas",
                "fail",
                "thread/identity for thread \"thr_conformance_1\" at live message ",
            )],
        ),
        same(
            "identity-mismatch",
            &[(
                "session/identity-echoes-handle",
                "fail",
                "-announced\", but the result at live message ",
            )],
        ),
        // `check bb --recordings` judges the wire rules on this bridge's replay, not on the
        // recording (another run's traffic): a flawed bridge replaying a clean recording fails
        // the rule (it passed, judged on the recording), a correct bridge replaying a flawed
        // recording fails only matches-recording (the rule failed it too).
        RecRow {
            name: "interrupt-completed-on-clean",
            cells: "clean",
            env: flaw("interrupt-completed"),
            not_pass: &[
                (
                    "matches-recording",
                    "fail",
                    "the replay differs from the recording",
                ),
                (
                    "stop/interrupt-settles-interrupted",
                    "fail",
                    "settled with status \"completed\" at live message ",
                ),
            ],
        },
        RecRow {
            name: "clean-on-interrupt-completed",
            cells: "interrupt-completed",
            env: &[],
            not_pass: &[(
                "matches-recording",
                "fail",
                "the replay differs from the recording",
            )],
        },
        // Judged on the replay's live traffic, every hint the bridge sent: the first is the
        // turn/start hint naming a thread never started (the recording files it under that
        // thread's scope, no runtime lane there).
        same(
            "recovery-foreign",
            &[(
                "recovery/hint-names-hosted-thread",
                "fail",
                "provider/recovery (rateLimited) at live message ",
            )],
        ),
        // Legal: a held-turn recording (turn.mainRun, refused by bb's grammar-v3 validation,
        // here in the message that settles the turn) reads as the live check reads the bridge.
        RecRow {
            name: "held",
            cells: "held",
            env: &[("PY_BB_ODDITY", "held")],
            not_pass: &[],
        },
    ]
}

/// The recorded verdicts per cell (from `check bb`'s recorded-traffic rules).
const RECORDED: &[&str] = &[
    "replays",
    "events-schema-valid",
    "grammar",
    "turn-lifecycle",
    "not-empty",
    "matches-recording",
    "turn/delta-outside-turn",
    "stop/interrupt-settles-interrupted",
    "stop/interrupt-closes-items",
    "stop/interrupt-settles-before-result",
    "stop/nothing-after-stop",
    "turn/vouched-key-opened",
    "session/identity-before-deltas",
    "session/identity-echoes-handle",
    "recovery/hint-names-hosted-thread",
];

fn check_rec_row(py: &str, row: &RecRow) -> Vec<String> {
    let cells = format!(
        "{}/tests/peers/bb/{}",
        env!("CARGO_MANIFEST_DIR"),
        row.cells
    );
    let (_, got) = run_with(
        py,
        row.env,
        // Only the ordinary prompt: the live part of this run is not looked at, and the opt-in
        // scenarios would only add waits on a flawed peer.
        "[bb.fixture]\npromptInput = \"hello\"\n",
        &[
            // The live verdicts of this run are not looked at: short waits.
            "--timeout-ms",
            "1000",
            // Generous: the first wait includes the peer's start (a loaded 2-core box took
            // over 2.5 s once); the two rows that stall wait it out once each.
            "--replay-timeout-ms",
            "6000",
            "--recordings",
            &cells,
        ],
    );
    let mut problems = Vec::new();
    let ids: Vec<String> = got
        .keys()
        .filter(|k| k.starts_with("recorded/"))
        .cloned()
        .collect();
    let mut want: Vec<String> = RECORDED.iter().map(|r| format!("{CELL}{r}")).collect();
    want.sort();
    if ids != want {
        problems.push(format!(
            "recorded:{}: verdicts {ids:?}, want {want:?}",
            row.name
        ));
    }
    for id in &ids {
        let (status, detail) = &got[id];
        let rule = id.strip_prefix(CELL).unwrap_or(id);
        match row.not_pass.iter().find(|(r, _, _)| *r == rule) {
            None if status != "pass" => problems.push(format!(
                "recorded:{}: {id} {status} (want pass): {detail}",
                row.name
            )),
            Some((_, want, needle)) if status != want || !detail.contains(needle) => {
                problems.push(format!(
                    "recorded:{}: {id} {status} {detail:?}, want {want} naming {needle:?}",
                    row.name
                ))
            }
            _ => {}
        }
    }
    problems
}

/// Each committed recording, replayed against the peer it was recorded from (or the clean one
/// against a flawed peer), gets exactly its recorded verdicts.
#[test]
fn recordings_of_the_python_bridge_fail_exactly_their_recorded_rules() {
    let Some(py) = python("recordings_of_the_python_bridge_fail_exactly_their_recorded_rules")
    else {
        return;
    };
    let rows = rec_rows();
    let problems = in_parallel(rows.len(), |i| check_rec_row(py, &rows[i]));
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `replay bb` judges the wire rules on the replay's own traffic: the recording of the flaw
/// "stop answered before the interrupted turn's boundary", replayed against that flawed peer,
/// fails that wire verdict alone (every recorded rule and every other wire rule passes, the
/// timeline being the same); against the correct peer it passes. The recorded rules alone
/// passed it (`bb-replay` audit, MISS A).
#[test]
fn replay_judges_the_wire_rules_on_its_live_traffic() {
    let Some(py) = python("replay_judges_the_wire_rules_on_its_live_traffic") else {
        return;
    };
    let cell = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/peers/bb/stop-before-boundary/py/thr_conformance_1"
    );
    let replay = |flaw: Option<&str>| {
        let mut cmd = Command::new(BRIDGEWIRE);
        cmd.args(["replay", "bb", "--format", "json", cell, "--", py, PEER])
            .env_remove("PY_BB_FLAW")
            .env_remove("PY_BB_ODDITY");
        if let Some(f) = flaw {
            cmd.env("PY_BB_FLAW", f);
        }
        let out = cmd.output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let c = doc["cells"][0].clone();
        let not_pass: Vec<(String, String, String)> = c["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .chain(c["wireVerdicts"].as_array().unwrap())
            .filter(|v| v["status"] != "pass")
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap().to_string();
                (s("id"), s("status"), s("detail"))
            })
            .collect();
        (out.status.code(), c, not_pass)
    };
    const RULE: &str = "recorded/thr_conformance_1/stop/interrupt-settles-before-result";
    let (code, c, not_pass) = replay(Some("stop-before-boundary"));
    assert_eq!(code, Some(1), "{c:#}");
    assert_eq!(c["status"], "fail", "{c:#}");
    assert_eq!(not_pass.len(), 1, "{not_pass:#?}");
    let (id, status, detail) = &not_pass[0];
    assert_eq!((id.as_str(), status.as_str()), (RULE, "fail"));
    assert!(
        detail.contains("settled at live message ")
            && detail.contains("after the stop's answer at live message ")
            && detail.contains("(bridge→runtime)"),
        "{detail}"
    );
    assert!(
        c["wireVerdicts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["id"] == RULE),
        "{c:#}"
    );
    let (code, c, not_pass) = replay(None);
    assert_eq!(code, Some(0), "{c:#}");
    assert!(not_pass.is_empty(), "{not_pass:#?}");
}

/// Runs `f(0..n)` on three threads and gathers the problems.
fn in_parallel(n: usize, f: impl Fn(usize) -> Vec<String> + Sync) -> Vec<String> {
    in_parallel_on(3, n, f)
}

/// [`in_parallel`] on `threads` threads.
fn in_parallel_on(
    threads: usize,
    n: usize,
    f: impl Fn(usize) -> Vec<String> + Sync,
) -> Vec<String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let problems = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= n {
                        break;
                    }
                    let p = f(i);
                    problems.lock().unwrap().extend(p);
                }
            });
        }
    });
    problems.into_inner().unwrap()
}

/// A recording of held turns (`turn.mainRun`, which bb's grammar-v3 validation refuses whole)
/// read as a `rec:` leg is read as the live leg reads the bridge: its deltas are taken out and
/// listed, and the timeline compares equal with the same bridge live, held or not (the recorded
/// leg stalled with 0 events before). A malformed held turn live still stalls, naming its state.
#[test]
fn parity_reads_a_held_turn_recording_as_the_live_leg_reads_the_bridge() {
    let Some(py) = python("parity_reads_a_held_turn_recording_as_the_live_leg_reads_the_bridge")
    else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/held");
    let base = format!("rec:{cells}");
    let rows: [(String, i32, &[&str]); 3] = [
        (
            format!("cmd:env PY_BB_ODDITY=held {py} {PEER}"),
            0,
            &[
                "PASS py/thr_conformance_1",
                "extensions, not compared: base turn.mainRun ×5; head turn.mainRun ×5",
            ],
        ),
        (
            format!("cmd:{py} {PEER}"),
            0,
            &[
                "PASS py/thr_conformance_1",
                "extensions, not compared: base turn.mainRun ×5; head none",
            ],
        ),
        (
            format!("cmd:env PY_BB_ODDITY=held PY_BB_FLAW=held-bad-state {py} {PEER}"),
            1,
            &[
                "STALL py/thr_conformance_1",
                "(turn.mainRun): state \"sleeping\", want \"idle\" or \"running\"",
            ],
        ),
    ];
    for (head, want, needles) in rows {
        let (code, text) = parity(&[
            "--timeout-ms",
            "3000",
            "--base",
            &base,
            "--head",
            &head,
            cells,
        ]);
        assert_eq!(code, Some(want), "{head}:\n{text}");
        for n in needles {
            assert!(text.contains(n), "{head}: no {n:?} in\n{text}");
        }
    }
}

/// Two live legs whose commands differ but run one program once started (through `sh -c`,
/// with or without `exec`, or `python3 -u`) are refused before any cell runs: their
/// comparison could not show a difference (each ran and passed before). A leg whose program
/// gets another environment, and two bridges that start one helper program beside them, are
/// two programs and are compared.
#[test]
fn parity_refuses_legs_that_run_one_program_however_spelled() {
    let Some(py) = python("parity_refuses_legs_that_run_one_program_however_spelled") else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/clean");
    let plain = format!("cmd:{py} {PEER}");
    // (base, head, exit code, what the output must say)
    let rows: Vec<(String, String, i32, &str)> = vec![
        (
            plain.clone(),
            format!("cmd:sh -c 'exec {py} {PEER}'"),
            2,
            "both legs ran the same program once started",
        ),
        (
            plain.clone(),
            format!("cmd:sh -c '{py} {PEER}'"),
            2,
            "both legs ran the same program once started",
        ),
        (
            plain.clone(),
            format!("cmd:{py} -u {PEER}"),
            2,
            "both legs ran the same program once started",
        ),
        (
            plain.clone(),
            format!("cmd:sh -c 'PY_BB_ODDITY=wire exec {py} {PEER}'"),
            0,
            "1 passed, 0 failed",
        ),
        // The helper alone would read as one program: the bridges that started it differ.
        (
            format!("cmd:sh -c 'sleep 60 & exec {py} {PEER}'"),
            format!("cmd:sh -c 'sleep 60 & exec env PY_BB_ODDITY=wire {py} {PEER}'"),
            0,
            "1 passed, 0 failed",
        ),
    ];
    for (base, head, want, says) in rows {
        let (code, text) = parity(&[
            "--timeout-ms",
            "3000",
            "--base",
            &base,
            "--head",
            &head,
            cells,
        ]);
        assert_eq!(code, Some(want), "{base} / {head}:\n{text}");
        assert!(
            text.contains(says),
            "{base} / {head}: no {says:?} in\n{text}"
        );
        if want == 2 {
            assert!(!text.contains("PASS "), "no cell ran: {text}");
        }
    }
}

/// `parity` of the peer against itself with a difference: a leg is `cmd:env VAR=value python3
/// peer.py`, so the two legs run different commands (the same command on both legs is refused,
/// last row). `PY_BB_ODDITY=wire` spells the same timeline differently and passes; content
/// differences, legal or not, fail naming what differs.
#[test]
fn parity_normalizes_legal_spelling_and_names_each_difference() {
    let Some(py) = python("parity_normalizes_legal_spelling_and_names_each_difference") else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/clean");
    let base = format!("cmd:{py} {PEER}");
    let head = |var: &str| format!("cmd:env {var} {py} {PEER}");
    // (head, exit code, phrases the text output must hold)
    let rows: Vec<(String, i32, Vec<&str>)> = vec![
        (
            head("PY_BB_ODDITY=wire"),
            0,
            vec!["PASS py/thr_conformance_1", "1 passed, 0 failed"],
        ),
        // Legal, but a different timeline: parity reports it (and shows the head leg's
        // environment reached the peer).
        // Legal: held turns (turn.mainRun, which bb's grammar-v3 validation refuses) are the
        // same timeline; parity lists them instead of stalling on them.
        // Legal: the same text in other chunks ("Coalescing is assembler policy, not bridge
        // policy"): parity compares the text, not the chunking (it failed on it before).
        (
            head("PY_BB_ODDITY=chunks"),
            0,
            vec!["PASS py/thr_conformance_1", "1 passed, 0 failed"],
        ),
        (
            head("PY_BB_ODDITY=held"),
            0,
            vec![
                "PASS py/thr_conformance_1",
                "extensions, not compared: base none; head turn.mainRun ×",
            ],
        ),
        (
            head("PY_BB_ODDITY=1"),
            1,
            vec![
                "events only in head: provider/unhandled",
                "rawType\":\"py/aside",
            ],
        ),
        (
            head("PY_BB_FLAW=interrupt-completed"),
            1,
            vec!["/status: \"interrupted\" → \"completed\""],
        ),
        (
            head("PY_BB_FLAW=late-delta"),
            1,
            vec![
                "events only in head: provider/warning",
                "\"summary\":\"late\"",
            ],
        ),
        (
            head("PY_BB_FLAW=undeclared-glyph"),
            1,
            vec!["/item/presentation/icon/glyph: \"py/plan\" → \"py/undeclared\""],
        ),
        (
            head("PY_BB_FLAW=orphan-output"),
            1,
            vec![
                "grammar drop only in head: item/opens-before-delta:item/commandExecution/outputDelta",
            ],
        ),
        (
            head("PY_BB_FLAW=in-progress"),
            1,
            vec![
                "STALL py/thr_conformance_1",
                "head: invalid thread/delta",
                "\"inProgress\" is not allowed",
            ],
        ),
        // Deltas under another threadId reach no thread in bb's runtime (it routes by the id
        // the bridge echoes): the leg stalls naming it (it passed before: thread ids are
        // blanked for comparing).
        (
            head("PY_BB_THREAD_PREFIX=elsewhere-"),
            1,
            vec![
                "STALL py/thr_conformance_1",
                "thread/delta for threadId \"elsewhere-",
                "which the runtime never named",
            ],
        ),
        // Recovery hints are runtime-visible (provider/recovery): a build that starts sending
        // them behaves otherwise although its events are the same (it passed before).
        (
            head("PY_BB_FLAW=recovery-foreign"),
            1,
            vec![
                "FAIL py/thr_conformance_1",
                "wire only in head: notify provider/recovery rateLimited",
            ],
        ),
        (base.clone(), 2, vec!["both legs would run the same files"]),
    ];
    // A tool's own `id` inside its arguments is data, not an id the protocol mints: another
    // document id differs (it compared equal, interned like the item's id, before), while the
    // same call with its answer in other chunks still passes.
    let tool_base = format!("cmd:env PY_BB_TOOL_DOC=doc-1 {py} {PEER}");
    let tool_rows: Vec<(String, i32, Vec<&str>)> = vec![
        (
            format!("cmd:env PY_BB_TOOL_DOC=doc-2 {py} {PEER}"),
            1,
            vec!["/item/arguments/id: \"doc-1\" → \"doc-2\""],
        ),
        (
            format!("cmd:env PY_BB_TOOL_DOC=doc-1 PY_BB_ODDITY=chunks {py} {PEER}"),
            0,
            vec!["PASS py/thr_conformance_1"],
        ),
    ];
    let rows: Vec<(String, String, i32, Vec<&str>)> = rows
        .into_iter()
        .map(|(h, c, n)| (base.clone(), h, c, n))
        .chain(
            tool_rows
                .into_iter()
                .map(|(h, c, n)| (tool_base.clone(), h, c, n)),
        )
        .collect();
    let problems = in_parallel(rows.len(), |i| {
        let (base, head, want, needles) = &rows[i];
        let (code, text) = parity(&[
            "--timeout-ms",
            "3000",
            "--base",
            base,
            "--head",
            head,
            cells,
        ]);
        let mut p = Vec::new();
        if code != Some(*want) {
            p.push(format!("{head}: exit {code:?}, want {want}:\n{text}"));
        }
        for n in needles {
            if !text.contains(n) {
                p.push(format!("{head}: output lacks {n:?}:\n{text}"));
            }
        }
        p
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One `bridgewire parity` run (the peer's switches kept out of its environment): exit code and
/// output.
fn parity(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BRIDGEWIRE)
        .arg("parity")
        .args(args)
        .env_remove("PY_BB_FLAW")
        .env_remove("PY_BB_ODDITY")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    (out.status.code(), common::proc::output_text(&out))
}

/// Flaws of the peer a parity of `check-run` cannot see, each with why: what the runtime never
/// sends or never shows.
const PARITY_BLIND_FLAWS: &[(&str, &str)] = &[
    (
        "start-same-ptid",
        "each cell replays on a bridge of its own, so no second thread of the process announces the handle; parity blanks providerThreadId (every run mints its own)",
    ),
    (
        "fork-same-ptid",
        "parity blanks providerThreadId (every run mints its own), so a fork's handle equal to its source's reads as any other",
    ),
    (
        "no-jsonrpc",
        "parity compares what the messages say (timelines, answers), not their JSON-RPC envelope",
    ),
    (
        "result-and-error",
        "only refusals carry the extra \"result\": null, and parity compares the error they carry",
    ),
    (
        "double-response",
        "a replayed request is matched to its first answer; the second answers no pending request",
    ),
    (
        "resume-no-reset",
        "the replay resumes the recorded handle, not the one the live leg's start minted, so the resumed session's provider item ids differ from the first session's and none repeats",
    ),
    (
        "early-text",
        "a text delta outside a turn without noTurnFallback is dropped by the runtime: the same timeline",
    ),
    (
        "unknown-wrong-code",
        "the runtime sends no unknown method (check's probe, in `_process`, skipped)",
    ),
    (
        "stop-empty-ok",
        "the runtime names the thread it stops (check's probe, in `_process`, skipped)",
    ),
    (
        "non-json-eats-next",
        "the runtime writes no non-JSON line (check's probe, in `_process`, skipped)",
    ),
    (
        "answers-responses",
        "the runtime answers no request it was not sent (check's probe, in `_process`, skipped)",
    ),
    (
        "skills-undeclared-ok",
        "the runtime sends no skills/configure to a bridge that declares no skills",
    ),
    (
        "threads-serialized",
        "each cell replays on a bridge of its own: no turn is held on another thread",
    ),
    (
        "stray-stdout",
        "the runtime ignores stdout lines that are not protocol traffic",
    ),
    (
        "stop-before-boundary",
        "parity compares the timeline and the answers, not their order on the wire: a boundary after the stop's answer assembles the same timeline (replay bb's live wire rules fail it)",
    ),
];

/// Oddities of the peer a parity of `check-run` shows: legal, and another timeline or another
/// handshake (`1`: other content; `keys`: a provider turn and recovery hints of its own;
/// `no-restore`: no sessionRestore, so resumes are refused; `bg`: a background delegation per
/// turn; `reopen`: a reopened tool item per turn; `surrogate`: an emoji in the answer, streamed
/// as a cut surrogate pair: another answer text).
const PARITY_VISIBLE_ODDITIES: &[&str] = &["1", "keys", "no-restore", "bg", "reopen", "surrogate"];

/// The flaws and oddities the peer's header documents, in order.
fn documented(kind: &str) -> Vec<String> {
    let text = std::fs::read_to_string(PEER).unwrap();
    match kind {
        "flaw" => text
            .lines()
            .skip_while(|l| !l.starts_with("$PY_BB_FLAW names"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect(),
        _ => text
            .lines()
            .filter_map(|l| l.strip_prefix("$PY_BB_ODDITY="))
            .filter_map(|l| l.split_whitespace().next())
            .map(|w| w.trim_end_matches(':').to_string())
            .collect(),
    }
}

/// `parity` over `check-run` (every request `check bb` makes of the peer, recorded through
/// `record bb` by scripts/record-bb-check-run.sh) against each flaw and oddity the peer
/// documents, as `sidebridge_node_peer.rs` does for its server: every flaw fails (a cell, a
/// stall, or the handshake) but those named blind, with why; every oddity passes but those
/// named visible. A thread/start answered without providerThreadId, a refusal without its
/// recovery hint, deltas before the identity and another protocol version all passed before.
#[test]
fn parity_over_a_recorded_check_run_fails_each_flaw_the_runtime_would_see() {
    let Some(py) = python("parity_over_a_recorded_check_run_fails_each_flaw_the_runtime_would_see")
    else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/check-run");
    let thread_cells = std::fs::read_dir(format!("{cells}/py"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "_process")
        .count();
    let (flaws, oddities) = (documented("flaw"), documented("oddity"));
    let mut problems: Vec<String> = Vec::new();
    for (name, _) in PARITY_BLIND_FLAWS {
        if !flaws.iter().any(|f| f == name) {
            problems.push(format!("{name}: no such flaw"));
        }
    }
    for name in PARITY_VISIBLE_ODDITIES {
        if !oddities.iter().any(|o| o == name) {
            problems.push(format!("{name}: no such oddity"));
        }
    }
    // (environment of the head leg, whether parity must pass)
    let mut jobs: Vec<(String, bool)> = flaws
        .iter()
        .map(|f| {
            let env = if f == "held-bad-state" {
                format!("PY_BB_FLAW={f} PY_BB_ODDITY=held")
            } else {
                format!("PY_BB_FLAW={f}")
            };
            (env, PARITY_BLIND_FLAWS.iter().any(|(n, _)| n == f))
        })
        .collect();
    jobs.extend(oddities.iter().map(|o| {
        (
            format!("PY_BB_ODDITY={o}"),
            !PARITY_VISIBLE_ODDITIES.contains(&o.as_str()),
        )
    }));
    // Six at a time: most of a run is a stalled leg waiting out its timeout, not CPU.
    problems.extend(in_parallel_on(6, jobs.len(), |i| {
        let (env, expect_pass) = &jobs[i];
        let (base, head) = (
            format!("cmd:{py} {PEER}"),
            format!("cmd:env {env} {py} {PEER}"),
        );
        let (code, text) = parity(&[
            "--timeout-ms",
            "2000",
            "--base",
            &base,
            "--head",
            &head,
            cells,
        ]);
        let ok = if *expect_pass {
            code == Some(0)
                && text.contains(&format!("{thread_cells} passed, 0 failed, 1 skipped"))
                && text.contains("PASS handshake bb")
        } else {
            code == Some(1)
                && ["\nFAIL ", "\nSTALL ", "FAIL handshake bb"]
                    .iter()
                    .any(|w| text.contains(w))
        };
        if ok {
            Vec::new()
        } else {
            vec![format!(
                "head {env}: expected {}, exit {code:?}:\n{text}",
                if *expect_pass { "a pass" } else { "a failure" }
            )]
        }
    }));
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// An intended change is allowlisted beyond bb's two layers: what a bridge declares
/// (`handshake`, for every cell) and what it answers (`wire`, per cell). A handshake entry
/// against a build that declares the same masks nothing: stale, and the run fails naming it.
#[test]
fn handshake_and_wire_differences_are_allowlisted_and_stale_entries_fail() {
    let Some(py) = python("handshake_and_wire_differences_are_allowlisted_and_stale_entries_fail")
    else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/check-run");
    let dir = tempfile::tempdir().unwrap();
    let allow = dir.path().join("allow.json");
    std::fs::write(
        &allow,
        r##"[{"provider":"*","cell":"*","layer":"handshake","path":"/capabilities/commands","pr":"#1","reason":"declares commands"},
{"provider":"py","cell":"thr_conformance_1","layer":"wire","path":"/","pr":"#2","reason":"refusals carry no hint"}]"##,
    )
    .unwrap();
    let allow = allow.to_str().unwrap();
    let run = |head_env: &str, allowlist: bool| {
        let (base, head) = (
            format!("cmd:{py} {PEER}"),
            format!("cmd:env {head_env} {py} {PEER}"),
        );
        let mut args = vec![
            "--timeout-ms",
            "3000",
            "--base",
            &base,
            "--head",
            &head,
            cells,
        ];
        if allowlist {
            args.extend(["--allowlist", allow]);
        }
        parity(&args)
    };
    // Declares `commands` and answers the archived resume without its hint: two differences.
    let both = "PY_BB_FLAW=commands-declared-refused";
    let (code, text) = run(both, false);
    assert_eq!(code, Some(1), "{text}");
    // Only `_process` holds the recorded handshake, and it is not replayed: no warning that it
    // may stall on another bridge (it named `py/_process` before).
    assert!(!text.contains("recorded from another bridge"), "{text}");
    assert!(
        text.contains("FAIL handshake bb") && text.contains("/capabilities/commands: (absent) → "),
        "{text}"
    );
    let (code, text) = run(both, true);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("PASS handshake bb"), "{text}");
    let (code, text) = run("PY_BB_FLAW=archived-no-hint", false);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("wire only in head: answer thread/resume → error -32000\n"),
        "{text}"
    );
    // The wire entry hides it; the handshake entry, with no handshake difference, is stale.
    let (code, text) = run("PY_BB_FLAW=archived-no-hint", true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        !text.contains("wire only in")
            && text.contains("stale allowlist entry (#1) handshake")
            && !text.contains("stale allowlist entry (#2)"),
        "{text}"
    );
    // A build that declares the same: the handshake entry is stale, and the handshake line
    // says FAIL for it (it said PASS above a stale entry before). (A wire entry `/` masks a
    // cell's answers whatever they are, as bb's `/` does a layer: stale only where the cell
    // has none.)
    let (code, text) = run("PY_BB_ODDITY=wire", true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL handshake bb: both legs state the same handshake, but the allowlist")
            && !text.contains("PASS handshake bb")
            && text.contains("stale allowlist entry (#1) handshake /capabilities/commands"),
        "{text}"
    );
}

/// `parity --base rec:<cells> --head cmd:<bridge>` (the README's workflow) holds the head's
/// handshake against the one the cells were recorded with: `record-cells` keeps it in each
/// manifest, `record bb` in the process-scoped cell. A build that starts declaring `commands`
/// fails though every cell passes (it passed in silence before: only two live legs were
/// compared). Where a recorded leg holds no handshake, or two, the line says SKIP and why.
#[test]
fn a_recorded_leg_states_its_handshake_or_says_why_it_cannot() {
    let Some(py) = python("a_recorded_leg_states_its_handshake_or_says_why_it_cannot") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("own");
    let out = Command::new(BRIDGEWIRE)
        .args(["record-cells", "bb", "--out"])
        .arg(&own)
        .args(["--", py, PEER])
        .env_remove("PY_BB_FLAW")
        .env_remove("PY_BB_ODDITY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::proc::output_text(&out));
    let own = own.to_str().unwrap();
    let base = format!("rec:{own}");
    let declares = format!("cmd:env PY_BB_FLAW=commands-declared-refused {py} {PEER}");
    let (code, text) = parity(&["--base", &base, "--head", &declares, own]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL handshake bb: the legs' handshakes differ")
            && text.contains("  /capabilities/commands: (absent) → {\"list\":true}\n")
            && text.contains(&format!("  base: as recorded with 2 cell(s) of {base}\n"))
            && text.contains("2 passed, 0 failed"),
        "{text}"
    );
    // The cells came from the base leg's bridge: the FAIL line says so once, with what it
    // means for the head's replays, and no warning above it repeats it.
    assert!(
        text.contains(
            "  head: replays of these cells wait for the recorded bridge's answers and may stall\n"
        ) && !text.contains("recorded from another bridge"),
        "{text}"
    );
    let (code, text) = parity(&["--base", &base, "--head", &format!("cmd:{py} {PEER}"), own]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("PASS handshake bb"), "{text}");
    // bb's own check-run recording: the handshake is in its `_process` cell.
    let check_run = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/check-run");
    let rec = format!("rec:{check_run}");
    let (code, text) = parity(&["--base", &rec, "--head", &declares, check_run]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL handshake bb") && text.contains("/capabilities/commands: (absent)"),
        "{text}"
    );
    // Cells that hold no handshake (bb-ref's, recorded without a manifest or `_process`): not
    // compared, said on the line and in the summary; the cells still decide the exit.
    let bb_ref = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/bb-ref");
    let copy = dir.path().join("bb-ref-copy");
    common::files::copy_tree(std::path::Path::new(bb_ref), &copy);
    let (code, text) = parity(&[
        "--base",
        &format!("rec:{bb_ref}"),
        "--head",
        &format!("rec:{}", copy.display()),
        bb_ref,
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "SKIP handshake bb: not compared: none of rec:{bb_ref}'s 4 bb cell(s) holds its bridge's handshake"
        )) && text.contains("(4 cells); the handshakes were not compared"),
        "{text}"
    );
    // Cells recorded from two bridges that state different handshakes: which one would the
    // comparison take? Neither: not compared, naming a cell of each.
    let mixed = dir.path().join("mixed");
    common::files::copy_tree(std::path::Path::new(own), &mixed);
    let manifest = mixed.join("own/turn/manifest.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["bridge"]["handshake"]["capabilities"]["fork"] = Value::Bool(false);
    std::fs::write(&manifest, m.to_string()).unwrap();
    let mixed = mixed.to_str().unwrap();
    let (code, text) = parity(&[
        "--base",
        &format!("rec:{mixed}"),
        "--head",
        &format!("cmd:{py} {PEER}"),
        mixed,
    ]);
    assert!(
        text.contains(&format!(
            "SKIP handshake bb: not compared: rec:{mixed}'s cells were recorded from 2 bridges stating different handshakes"
        )),
        "exit {code:?}: {text}"
    );
}

/// Every flaw the peer's header documents has a row, and every flaw row names a documented
/// flaw (a row for a flaw the peer does not know would run the clean peer).
#[test]
fn every_documented_flaw_has_a_row() {
    let text = std::fs::read_to_string(PEER).unwrap();
    let doc = text
        .split("$PY_BB_FLAW names one deliberate flaw")
        .nth(1)
        .and_then(|t| t.split("$PY_BB_ODDITY").next())
        .expect("the peer's header lists its flaws");
    let documented: Vec<&str> = doc
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let flaw_of = |env: &[(&'static str, &'static str)]| {
        env.iter()
            .find(|(k, _)| *k == "PY_BB_FLAW")
            .map(|(_, v)| *v)
    };
    let mut named: Vec<&str> = rows().iter().filter_map(|r| flaw_of(r.env)).collect();
    named.extend(rec_rows().iter().filter_map(|r| flaw_of(r.env)));
    // Every committed recording is some recorded row's.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        // The whole check run, which parity replays against every flaw.
        if name == "check-run" {
            continue;
        }
        assert!(
            rec_rows().iter().any(|r| r.cells == name),
            "tests/peers/bb/{name} is no recorded row's recording"
        );
    }
    for d in &documented {
        assert!(named.contains(d), "flaw {d} has no row");
        assert!(
            text.contains(&format!("FLAW == \"{d}\"")) || text.contains(&format!("\"{d}\"")),
            "flaw {d} is documented but never tested in the peer"
        );
    }
    for n in &named {
        assert!(documented.contains(n), "row {n} names an undocumented flaw");
    }
}

/// `tests/peers/coverage.tsv` (`bb` lines) is true of the tables: each named failing row
/// expects that rule to fail; each passing row is a legal oddity expecting nothing but pass.
/// `recorded:NAME` names a recorded row: a `recorded/X` rule is its cell's `X` verdict; an
/// offline grammar rule (judged on replays and by `pins`) is its cell's `grammar` verdict
/// failing with that rule named. A live row named for an offline grammar rule that is no live
/// rule is its `events/grammar` verdict failing with that rule named.
#[test]
fn the_coverage_map_names_rows_that_fail_and_pass_each_rule() {
    use common::coverage::{Entry, lines_for_catalogue};
    let rows = rows();
    let recs = rec_rows();
    let cat: Value = serde_json::from_str(include_str!("../rules/bb.json")).unwrap();
    let mode = |id: &str, mode: &str| {
        cat.as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == id && r["mode"] == mode)
    };
    let offline = |id: &str| mode(id, "offline");
    // Whether a row's non-pass verdicts expect `rule` to fail with a detail starting `needle`.
    let expects_fail = |not_pass: &[(&str, &str, &str)], rule: &str, needle: &str| {
        not_pass
            .iter()
            .any(|(x, s, d)| *x == rule && *s == "fail" && d.starts_with(needle))
    };
    let mut problems = Vec::new();
    for (line, _level) in lines_for_catalogue("bb") {
        let id = line.rule.as_str();
        for e in &line.fails {
            let Entry::Named(name) = e else { continue };
            // The Perl and Node peers' rows, held by tests/bb_perl_peer.rs and tests/bb_node_peer.rs.
            if name.starts_with("perl:") || name.starts_with("node:") {
                continue;
            }
            if let Some(rec) = name.strip_prefix("recorded:") {
                let (rule, needle) = match id.strip_prefix("recorded/") {
                    Some(r) => (r, String::new()),
                    None if offline(id) => ("grammar", format!("{id} on ")),
                    None => {
                        problems.push(format!("{}: {id} is not judged on recordings", line.at));
                        continue;
                    }
                };
                match recs.iter().find(|r| r.name == rec) {
                    None => problems.push(format!("{}: no recorded row {rec:?}", line.at)),
                    Some(r) if !expects_fail(r.not_pass, rule, &needle) => problems.push(format!(
                        "{}: recorded row {rec:?} does not expect {rule} to fail {needle}",
                        line.at
                    )),
                    Some(_) => {}
                }
                continue;
            }
            let (rule, needle) = if offline(id) && !mode(id, "live") {
                ("events/grammar", format!("{id} on "))
            } else {
                (id, String::new())
            };
            match rows.iter().find(|r| r.name == name) {
                None => problems.push(format!("{}: no row {name:?}", line.at)),
                Some(r) if !expects_fail(r.not_pass, rule, &needle) => problems.push(format!(
                    "{}: row {name:?} does not expect {rule} to fail {needle}",
                    line.at
                )),
                Some(_) => {}
            }
        }
        for e in &line.passes {
            let Entry::Named(name) = e else { continue };
            if name.starts_with("perl:") || name.starts_with("node:") {
                continue;
            }
            let (env, not_pass) = match name.strip_prefix("recorded:") {
                Some(rec) => match recs.iter().find(|r| r.name == rec) {
                    Some(r) => (r.env, r.not_pass),
                    None => {
                        problems.push(format!("{}: no recorded row {rec:?}", line.at));
                        continue;
                    }
                },
                None => match rows.iter().find(|r| r.name == name) {
                    Some(r) => (r.env, r.not_pass),
                    None => {
                        problems.push(format!("{}: no row {name:?}", line.at));
                        continue;
                    }
                },
            };
            let odd = !env.is_empty() && env.iter().all(|(k, _)| *k == "PY_BB_ODDITY");
            if !odd || !not_pass.is_empty() {
                problems.push(format!(
                    "{}: row {name:?} is not a legal oddity expected to pass {id}",
                    line.at
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `replay bb` of the clean recording against the peer (not ours): the same text in other
/// chunks (`PY_BB_ODDITY=chunks`) passes every recorded rule though the event count differs;
/// the same deltas saying other text (`PY_BB_FLAW=wrong-text`) fail `matches-recording` alone,
/// naming the text, with the event count equal; and `parity --base rec: --head cmd:` says the
/// same of both (one comparison).
#[test]
fn replay_bb_judges_the_content_not_the_chunking() {
    let Some(py) = python("replay_bb_judges_the_content_not_the_chunking") else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/clean");
    let replay = |var: (&str, &str)| {
        let out = Command::new(BRIDGEWIRE)
            .args([
                "replay",
                "bb",
                "--format",
                "json",
                "--timeout-ms",
                "10000",
                cells,
            ])
            .args(["--", py, PEER])
            .env_remove("PY_BB_FLAW")
            .env_remove("PY_BB_ODDITY")
            .env(var.0, var.1)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), doc)
    };
    let statuses = |doc: &Value| -> Vec<(String, String)> {
        doc["cells"][0]["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["id"]
                        .as_str()
                        .unwrap()
                        .rsplit('/')
                        .next()
                        .unwrap()
                        .to_string(),
                    v["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let rules = [
        "replays",
        "events-schema-valid",
        "grammar",
        "turn-lifecycle",
        "not-empty",
        "matches-recording",
    ];

    let (code, doc) = replay(("PY_BB_ODDITY", "chunks"));
    let cell = &doc["cells"][0];
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(cell["status"], "pass", "{doc:#}");
    assert_eq!(
        statuses(&doc),
        rules.map(|r| (r.to_string(), "pass".to_string())),
        "{doc:#}"
    );
    assert_ne!(cell["events"], cell["recordingEvents"], "{doc:#}");
    assert_eq!(cell["onlyChunkingDiffers"], true, "{doc:#}");

    let (code, doc) = replay(("PY_BB_FLAW", "wrong-text"));
    let cell = &doc["cells"][0];
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(cell["status"], "fail", "{doc:#}");
    let want: Vec<(String, String)> = rules
        .iter()
        .map(|r| {
            let s = if *r == "matches-recording" {
                "fail"
            } else {
                "pass"
            };
            (r.to_string(), s.to_string())
        })
        .collect();
    assert_eq!(statuses(&doc), want, "{doc:#}");
    assert_eq!(cell["events"], cell["recordingEvents"], "{doc:#}");
    let detail = cell["verdicts"][5]["detail"].as_str().unwrap();
    assert!(
        detail.contains("(base = the recording, head = this replay;") && detail.contains("ECHO: "),
        "{detail}"
    );

    // parity over the same recording and the same bridges agrees.
    for (var, want, needle) in [
        ("PY_BB_ODDITY=chunks", 0, "PASS py/thr_conformance_1"),
        ("PY_BB_FLAW=wrong-text", 1, "FAIL py/thr_conformance_1"),
    ] {
        let (code, text) = parity(&[
            "--timeout-ms",
            "10000",
            "--base",
            &format!("rec:{cells}"),
            "--head",
            &format!("cmd:env {var} {py} {PEER}"),
            cells,
        ]);
        assert_eq!(code, Some(want), "{var}:\n{text}");
        assert!(text.contains(needle), "{var}: no {needle:?} in\n{text}");
    }
}

/// `replay bb --format json` of `cells` against the peer with `env`: exit code and document.
fn replay_doc(py: &str, cells: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value) {
    // A cut settling message leaves every later gate to time out: short waits (the start-up
    // is waited for 10 s whatever this says).
    let timeout = if env.iter().any(|(k, _)| *k == "PY_BB_CUT") {
        "3000"
    } else {
        "10000"
    };
    let mut cmd = Command::new(BRIDGEWIRE);
    cmd.args(["replay", "bb", "--format", "json", "--timeout-ms", timeout])
        .args(cells)
        .args(["--", py, PEER])
        .env_remove("PY_BB_FLAW")
        .env_remove("PY_BB_ODDITY")
        .env_remove("PY_BB_GRAMMAR")
        .env_remove("PY_BB_CUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), doc)
}

/// The cell directories under recording folders (those holding a runtime lane): an
/// independent count of the cells a replay selects.
fn cell_dirs(roots: &[&str]) -> usize {
    let mut n = 0;
    for root in roots {
        for provider in std::fs::read_dir(root).unwrap() {
            for cell in std::fs::read_dir(provider.unwrap().path()).unwrap() {
                n += cell.unwrap().path().join("runtime→bridge.ndjson").exists() as usize;
            }
        }
    }
    n
}

/// `replay bb` judges the bridge's live `initialize` answer with `check bb`'s
/// `handshake/initialize` (audit: protocolVersion 1 or grammarVersions [2, 2] passed): said
/// once for the run naming every cell it held for, each cell skipped naming it (bb's runtime
/// refuses the bridge at spawn), exit 1. A wider range that includes 3, and extra capabilities,
/// pass.
#[test]
fn replay_bb_judges_the_live_handshake_once() {
    let Some(py) = python("replay_bb_judges_the_live_handshake_once") else {
        return;
    };
    let roots = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/clean"),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/peers/bb/clean-first-turn"
        ),
    ];
    let n = cell_dirs(&roots);
    assert!(n >= 2, "two recordings, one cell each at least");
    for (env, needle) in [
        (
            ("PY_BB_FLAW", "protocol-1"),
            "protocolVersion 1, expected 2",
        ),
        (
            ("PY_BB_GRAMMAR", "2,2"),
            "grammar versions [2, 2] do not intersect the runtime's [3, 3]",
        ),
    ] {
        let (code, doc) = replay_doc(py, &roots, &[env]);
        assert_eq!(code, Some(1), "{env:?}: {doc:#}");
        let cells = doc["cells"].as_array().unwrap();
        assert_eq!(cells.len(), n, "{env:?}: {doc:#}");
        for c in cells {
            assert_eq!(c["status"], "skip", "{env:?}: {c:#}");
            assert!(
                c["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("not replayed past the handshake: handshake/initialize failed"),
                "{env:?}: {c:#}"
            );
        }
        let hs = doc["handshake"].as_array().unwrap();
        assert_eq!(hs.len(), 1, "one fault, one verdict: {env:?}: {doc:#}");
        assert_eq!(hs[0]["id"], "handshake/initialize");
        assert_eq!(hs[0]["status"], "fail", "{env:?}: {doc:#}");
        assert!(
            hs[0]["detail"].as_str().unwrap().contains(needle),
            "{env:?}: {doc:#}"
        );
        assert_eq!(hs[0]["cells"].as_array().unwrap().len(), n, "{doc:#}");
    }
    // The text form says it once, after the cells.
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb"])
        .args(roots)
        .args(["--", py, PEER])
        .env_remove("PY_BB_ODDITY")
        .env_remove("PY_BB_GRAMMAR")
        .env("PY_BB_FLAW", "protocol-1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("fail    handshake/initialize — protocolVersion 1"))
            .count(),
        1,
        "{text}"
    );
    assert!(!text.contains("FAIL py/"), "no cell fails for it: {text}");

    // Legal: a wider grammar range that includes 3; extra capabilities (and the rest of the
    // wire oddities, which spell the same timeline).
    for env in [("PY_BB_GRAMMAR", "2,4"), ("PY_BB_ODDITY", "wire")] {
        let (code, doc) = replay_doc(py, &roots, &[env]);
        assert_eq!(code, Some(0), "{env:?}: {doc:#}");
        for c in doc["cells"].as_array().unwrap() {
            assert_eq!(c["status"], "pass", "{env:?}: {c:#}");
        }
        let hs = doc["handshake"].as_array().unwrap();
        assert_eq!(hs.len(), 1, "{env:?}: {doc:#}");
        assert_eq!(hs[0]["status"], "pass", "{env:?}: {doc:#}");
        assert_eq!(hs[0]["cells"].as_array().unwrap().len(), n, "{doc:#}");
    }

    // The replay audit's bridge (not ours): every handshake fault is named in the one verdict
    // (audit: only the first was); its legal extra capabilities and fields pass.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-audit");
    let cell = format!("{dir}/audit/basic");
    for (mode, causes) in [
        (
            "bad-handshake",
            &[
                "initialize result is invalid: capabilities.fork: \"sometimes\" is not allowed",
                "protocolVersion 1, expected 2",
                "grammar versions [1, 1] do not intersect the runtime's [3, 3]",
            ][..],
        ),
        (
            "wrong-version",
            &[
                "protocolVersion 1, expected 2",
                "grammar versions [2, 2] do not intersect the runtime's [3, 3]",
            ][..],
        ),
        ("ext-fields", &[][..]),
    ] {
        let out = Command::new(BRIDGEWIRE)
            .args(["replay", "bb", "--format", "json", "--timeout-ms", "10000"])
            .arg(&cell)
            .args(["--", py, &format!("{dir}/bridge.py"), "--mode", mode])
            .env_remove("AUDIT_MODE")
            .env_remove("AUDIT_IOLOG")
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let hs = doc["handshake"].as_array().unwrap();
        assert_eq!(hs.len(), 1, "one verdict: {mode}: {doc:#}");
        if causes.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{mode}: {doc:#}");
            assert_eq!(hs[0]["status"], "pass", "{mode}: {doc:#}");
            assert_eq!(doc["cells"][0]["status"], "pass", "{mode}: {doc:#}");
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{mode}: {doc:#}");
        assert_eq!(hs[0]["status"], "fail", "{mode}: {doc:#}");
        let detail = hs[0]["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("{} faults: (1) ", causes.len())),
            "each cause once: {mode}: {detail}"
        );
        for (i, c) in causes.iter().enumerate() {
            assert!(
                detail.contains(&format!("({}) {c}", i + 1)),
                "{mode}: {c}: {detail}"
            );
        }
        assert_eq!(doc["cells"][0]["status"], "skip", "{mode}: {doc:#}");
    }
}

/// A bridge stdout line that is JSON cut short (`PY_BB_CUT=1`: each settling message loses its
/// last bytes, audit: only its consequence failed) is named as the cause: `replays` fails with
/// `bridge stdout line <n>: not JSON: …`, the turn counts and the comparison are skipped naming
/// it, nothing else fails. Stray text that is not JSON (`stray-stdout`, which `check bb`
/// judges) is no cut line and fails nothing.
#[test]
fn replay_bb_names_a_cut_stdout_line_as_the_cause() {
    let Some(py) = python("replay_bb_names_a_cut_stdout_line_as_the_cause") else {
        return;
    };
    let cells = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb/clean");
    let (code, doc) = replay_doc(py, &[cells], &[("PY_BB_CUT", "1")]);
    assert_eq!(code, Some(1), "{doc:#}");
    let c = &doc["cells"][0];
    assert!(!c["cutLines"].as_array().unwrap().is_empty(), "{c:#}");
    let not_pass: Vec<(&str, &str, &str)> = c["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(c["wireVerdicts"].as_array().unwrap())
        .filter(|v| v["status"] != "pass")
        .map(|v| {
            (
                v["id"].as_str().unwrap(),
                v["status"].as_str().unwrap(),
                v["detail"].as_str().unwrap(),
            )
        })
        .collect();
    let fails: Vec<_> = not_pass.iter().filter(|v| v.1 == "fail").collect();
    assert_eq!(fails.len(), 1, "one fault, one verdict: {not_pass:#?}");
    let (id, _, detail) = fails[0];
    assert_eq!(*id, "recorded/thr_conformance_1/replays");
    assert!(
        detail.starts_with("bridge stdout line ")
            && detail.contains(": not JSON: {\"jsonrpc\":\"2.0\",\"method\":\"thread/delta\"")
            && detail.contains("the JSON ends early"),
        "{detail}"
    );
    for (id, status, detail) in &not_pass {
        if *status != "fail" {
            assert!(
                detail.contains("bridge stdout line ") || detail.contains("/replays failed"),
                "{id} {status} names neither the cut line nor replays: {detail}"
            );
        }
    }

    let (code, doc) = replay_doc(py, &[cells], &[("PY_BB_FLAW", "stray-stdout")]);
    assert_eq!(code, Some(0), "{doc:#}");
    let c = &doc["cells"][0];
    assert_eq!(c["status"], "pass", "{c:#}");
    assert_eq!(c["cutLines"], serde_json::json!([]), "{c:#}");
}

/// The replay audit's Python bridge (with a provider; not ours) and its recorded cell: a bridge
/// that sends its provider an empty prompt (`--mode drop-prompt`) fails
/// `matches-recording` alone, quoting the recorded and the live request (the provider double
/// matches bridge→provider lines by method only, bb §6.11, and played the recorded answer all
/// the same); one that words its provider request otherwise and keeps the prompt
/// (`--mode prompt-wrapped`: content blocks under another field, a preamble) passes, as does one
/// whose ids differ run to run (`--mode fresh-ids`).
#[test]
fn replay_bb_fails_a_provider_request_that_lost_the_prompt() {
    let Some(py) = python("replay_bb_fails_a_provider_request_that_lost_the_prompt") else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-audit");
    let cell = format!("{dir}/audit/basic");
    let replay = |mode: &str| {
        let out = Command::new(BRIDGEWIRE)
            .args(["replay", "bb", "--format", "json", "--timeout-ms", "10000"])
            .arg(&cell)
            .args(["--", py, &format!("{dir}/bridge.py"), "--mode", mode])
            .env_remove("AUDIT_MODE")
            .env_remove("AUDIT_IOLOG")
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), doc["cells"][0].clone())
    };
    // The prompts the recording's runtime sent (independent of the replay).
    let prompts: Vec<String> = std::fs::read_to_string(format!("{cell}/runtime→bridge.ndjson"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| serde_json::from_str::<Value>(e["line"].as_str()?).ok())
        .filter(|m| m["method"] == "turn/start")
        .filter_map(|m| Some(m["params"]["input"][0]["text"].as_str()?.to_string()))
        .collect();
    assert!(!prompts.is_empty());

    let (code, c) = replay("drop-prompt");
    assert_eq!(code, Some(1), "{c:#}");
    let not_pass: Vec<&Value> = c["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(c["wireVerdicts"].as_array().unwrap())
        .filter(|v| v["status"] != "pass" && v["status"] != "not run")
        .collect();
    assert_eq!(not_pass.len(), 1, "one fault, one verdict: {not_pass:#?}");
    assert_eq!(not_pass[0]["id"], "recorded/basic/matches-recording");
    assert_eq!(not_pass[0]["status"], "fail");
    let detail = not_pass[0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the bridge's provider request lost the user's prompt: bridge→provider session/prompt: the recorded line carried the runtime's prompt ")
            && prompts.iter().any(|p| detail.contains(&format!("{p:?}")))
            && detail.contains("(recorded: ")
            && detail.contains("; live: ")
            && detail.contains(r#""text":"""#),
        "{detail}"
    );
    let lost: usize = c["doubles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["promptLost"].as_array().unwrap().len())
        .sum();
    assert_eq!(lost, prompts.len(), "each prompt lost once: {c:#}");

    let (code, c) = replay("prompt-wrapped");
    assert_eq!(code, Some(0), "{c:#}");
    assert_eq!(c["status"], "pass", "{c:#}");

    // What differs run to run by design (a providerThreadId minted per session, random
    // provider request ids) is no difference from the recording: ids and handles are
    // normalized, so `matches-recording` needs no second run to set them aside.
    let (code, c) = replay("fresh-ids");
    assert_eq!(code, Some(0), "{c:#}");
    assert_eq!(c["status"], "pass", "{c:#}");
}

/// A provider double the bridge kills (`--mode kill-no-cancel`: legal, the provider child is
/// the bridge's own) has reported the steps it played (audit: `stepsPlayed 0`); the replay
/// passes.
#[test]
fn a_provider_double_the_bridge_killed_reports_what_it_played() {
    let Some(py) = python("a_provider_double_the_bridge_killed_reports_what_it_played") else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-audit");
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "--format", "json", "--timeout-ms", "10000"])
        .arg(format!("{dir}/audit/interrupt"))
        .args([
            "--",
            py,
            &format!("{dir}/bridge.py"),
            "--mode",
            "kill-no-cancel",
        ])
        .env_remove("AUDIT_MODE")
        .env_remove("AUDIT_IOLOG")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let c = &doc["cells"][0];
    assert_eq!(out.status.code(), Some(0), "{c:#}");
    let doubles = c["doubles"].as_array().unwrap();
    assert!(!doubles.is_empty(), "{c:#}");
    for d in doubles {
        assert!(d["stepsPlayed"].as_u64().unwrap() > 0, "{c:#}");
    }
}

/// A replay ended by SIGTERM prints no verdict for the cell whose bridge the signal killed
/// (audit: `FAIL … bridge exited`), only the handler's summary, and exits 143.
#[test]
fn a_signal_ends_a_replay_without_a_cell_verdict() {
    let Some(py) = python("a_signal_ends_a_replay_without_a_cell_verdict") else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-audit");
    let mut child = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "--timeout-ms", "20000"])
        .arg(format!("{dir}/audit/interrupt"))
        .args(["--", py, &format!("{dir}/bridge.py"), "--mode", "hang"])
        .env_remove("AUDIT_MODE")
        .env_remove("AUDIT_IOLOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The bridge answers the handshake at once and then hangs on turn/start (20 s waits).
    std::thread::sleep(std::time::Duration::from_millis(3000));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let start = std::time::Instant::now();
    let out = loop {
        if child.try_wait().unwrap().is_some() {
            break child.wait_with_output().unwrap();
        }
        assert!(start.elapsed().as_secs() < 15, "no exit after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(143), "{stdout}{stderr}");
    assert!(
        stderr.contains("bridgewire replay bb: interrupted by signal 15"),
        "{stderr}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

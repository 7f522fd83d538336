//! The wire rules (`src/bb/wire.rs`) offline and with `--kit-only`: a recording with a violation
//! bb's kit would absorb is counted as invalid by `pins` and fails its `recorded/<cell>/<rule>`
//! verdict, naming the lane position; `check bb --kit-only` gives bb's own verdicts.

use std::path::Path;
use std::process::Command;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");
const PROVIDER: &str = env!("CARGO_BIN_EXE_bb-ref-provider");

fn entry(dir: &str, seq: u64, line: &str) -> String {
    bridgewire::lane::Entry {
        ts: 1.0,
        run: 1.0,
        seq: seq as f64,
        dir: dir.into(),
        line: line.into(),
        extra: Default::default(),
    }
    .to_line()
}

fn delta(deltas: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"thread/delta","params":{{"threadId":"thr_1","deltas":[{deltas}]}}}}"#
    )
}

/// Writes one cell from `(dir, line)` pairs in order.
fn cell(root: &Path, name: &str, lines: &[(&str, String)]) {
    let d = root.join("prov").join(name);
    std::fs::create_dir_all(&d).unwrap();
    for dir in ["runtime→bridge", "bridge→runtime"] {
        let text: String = lines
            .iter()
            .enumerate()
            .filter(|(_, (d, _))| *d == dir)
            .map(|(i, (d, l))| entry(d, i as u64 + 1, l) + "\n")
            .collect();
        if !text.is_empty() {
            std::fs::write(d.join(format!("{dir}.ndjson")), text).unwrap();
        }
    }
}

const RT: &str = "runtime→bridge";
const BR: &str = "bridge→runtime";

fn turn_start(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"turn/start","params":{{"threadId":"thr_1","providerThreadId":"p","input":[],"clientRequestId":"creq_2222222223","options":{{}}}}}}"#
    )
}

fn stop(id: u64, intent: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"thread/stop","params":{{"threadId":"thr_1","providerThreadId":"p","intent":"{intent}","activeTurnId":null}}}}"#
    )
}

fn answer(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
}

#[test]
fn pins_count_wire_violations_as_invalid_and_name_them() {
    let t = tempfile::tempdir().unwrap();
    let open = delta(
        r#"{"kind":"input.accepted","clientRequestId":"creq_2222222223"},{"kind":"turn.open"}"#,
    );
    // The legal odd one: text outside a turn carrying its noTurnFallback, a claiming boundary on
    // an idle thread, an interrupt settled "interrupted" before the answer.
    cell(
        t.path(),
        "legal",
        &[
            (
                BR,
                delta(
                    r#"{"kind":"item.textDelta","key":{"channel":"a"},"channel":"agentMessage","text":"x","noTurnFallback":{"raw":{"jsonrpc":"2.0","method":"m"},"rawType":"m"}},{"kind":"turn.boundary","status":"completed","claimIfIdle":true}"#,
                ),
            ),
            (RT, turn_start(1)),
            (BR, open.clone()),
            (BR, answer(1)),
            (RT, stop(2, "interrupt")),
            (
                BR,
                delta(r#"{"kind":"turn.boundary","status":"interrupted"}"#),
            ),
            (BR, answer(2)),
        ],
    );
    cell(
        t.path(),
        "early-text",
        &[
            (RT, turn_start(1)),
            (
                BR,
                delta(
                    r#"{"kind":"item.textDelta","key":{"channel":"assistant"},"channel":"agentMessage","text":"early"}"#,
                ),
            ),
            (BR, open.clone()),
            (BR, answer(1)),
            (
                BR,
                delta(r#"{"kind":"turn.boundary","status":"completed"}"#),
            ),
        ],
    );
    cell(
        t.path(),
        "without-early-text",
        &[
            (RT, turn_start(1)),
            (BR, open.clone()),
            (BR, answer(1)),
            (
                BR,
                delta(r#"{"kind":"turn.boundary","status":"completed"}"#),
            ),
        ],
    );
    cell(
        t.path(),
        "interrupt-completed",
        &[
            (RT, turn_start(1)),
            (BR, open.clone()),
            (BR, answer(1)),
            (RT, stop(2, "interrupt")),
            (
                BR,
                delta(r#"{"kind":"turn.boundary","status":"completed"}"#),
            ),
            (BR, answer(2)),
        ],
    );
    cell(
        t.path(),
        "after-stop",
        &[
            (RT, turn_start(1)),
            (BR, open),
            (BR, answer(1)),
            (
                BR,
                delta(r#"{"kind":"turn.boundary","status":"completed"}"#),
            ),
            (RT, stop(2, "release")),
            (BR, answer(2)),
            (BR, delta(r#"{"kind":"provider.warning","summary":"late"}"#)),
        ],
    );
    let text = pins_update(t.path());
    for (cell, needle) in [
        (
            "early-text",
            "turn/delta-outside-turn: item.textDelta (key channel \"assistant\") at bridge→runtime run 1 seq 2 on thread \"thr_1\"",
        ),
        (
            "interrupt-completed",
            "stop/interrupt-settles-interrupted: the turn interrupted by thread/stop at runtime→bridge run 1 seq 4 (thread \"thr_1\") settled with status \"completed\" at bridge→runtime run 1 seq 5",
        ),
        (
            "after-stop",
            "stop/nothing-after-stop: thread/delta for thread \"thr_1\" at bridge→runtime run 1 seq 7, after the thread/stop answer at bridge→runtime run 1 seq 6",
        ),
    ] {
        assert!(text.contains(needle), "{cell}: {needle}\n{text}");
    }
    assert!(
        !text.contains("error: prov/legal"),
        "the legal cell raised something:\n{text}"
    );
    let pins: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("row-counts.json")).unwrap()).unwrap();
    // The dropped text made no event: the same cell without it counts the same.
    assert_eq!(pins["prov/early-text"], pins["prov/without-early-text"]);
    // Check mode fails on the three, not on the legal one.
    let out = Command::new(BRIDGEWIRE)
        .arg("pins")
        .arg(t.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PASS prov/legal"), "{stdout}");
    assert!(stdout.contains("2 passed, 3 failed"), "{stdout}");
}

/// `pins --update` on `root`: stdout and stderr together.
fn pins_update(root: &Path) -> String {
    let out = Command::new(BRIDGEWIRE)
        .args(["pins", "--update"])
        .arg(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

fn check(extra: &[&str], mode: &str) -> (Option<i32>, serde_json::Value) {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("bridgewire.toml");
    let out = Command::new(BRIDGEWIRE)
        .args(["check", "bb", "--format", "json", "--fixture"])
        .arg(&fx)
        .args(extra)
        .arg("--")
        .arg(BRIDGE)
        .env("BB_REF_PROVIDER_COMMAND", PROVIDER)
        .env("BB_REF_BRIDGE_BREAK", mode)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn kit_only_gives_bbs_own_verdicts() {
    // A violation only bridgewire sees: the kit passes it, bridgewire fails it.
    let (code, report) = check(&[], "delta-outside-turn");
    assert_eq!(code, Some(1));
    let failed: Vec<&str> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "fail")
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["turn/delta-outside-turn"]);
    let (code, report) = check(&["--kit-only"], "delta-outside-turn");
    assert_eq!(code, Some(0), "{report:#}");
    let ids: Vec<&str> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    for beyond in bridgewire::rule::catalogue()
        .iter()
        .filter(|r| r.protocol == "bb" && r.beyond_kit)
    {
        assert!(
            !ids.contains(&beyond.id.as_str()),
            "{} under --kit-only",
            beyond.id
        );
    }
    // bb's kit only sees assembled events: a refused thread/delta passes events/schema-valid.
    let (code, _) = check(&["--kit-only"], "plan-step-in-progress");
    assert_eq!(code, Some(0));
}

fn thread_start(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"thread/start","params":{{"threadId":"thr_1","cwd":"/","options":{{}},"instructionMode":"append"}}}}"#
    )
}

fn identity() -> String {
    r#"{"jsonrpc":"2.0","method":"thread/identity","params":{"threadId":"thr_1","providerThreadId":"p"}}"#.into()
}

fn hint(thread: Option<&str>) -> String {
    let thread = thread
        .map(|t| format!(r#""threadId":"{t}","#))
        .unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","method":"provider/recovery","params":{{{thread}"kind":"rateLimited","message":"slow down","retryable":false}}}}"#
    )
}

/// The wire rules found by an independent bb bridge: vouched keys, identity order, hints for
/// threads the process hosts, and a late message the runtime refuses. Each has a hand-made
/// cell that breaks it (named by `pins` with its lane position) and one legal cell that is
/// unusual in every one of these ways and raises nothing.
#[test]
fn vouched_keys_identity_order_hosted_hints_and_refused_late_deltas() {
    let t = tempfile::tempdir().unwrap();
    let open = delta(
        r#"{"kind":"input.accepted","clientRequestId":"creq_2222222223"},{"kind":"turn.open"}"#,
    );
    let side = r#"{"type":"planSteps","steps":[]}"#;
    let reset = delta(r#"{"kind":"session.reset"}"#);
    let settle = delta(r#"{"kind":"turn.boundary","status":"completed"}"#);
    // Legal: the result before the identity (still before the deltas), a vouched provider turn
    // with an item of its own, hints for the hosted thread (one while its release is pending)
    // and one naming no thread.
    cell(
        t.path(),
        "legal",
        &[
            (RT, thread_start(1)),
            (
                BR,
                r#"{"jsonrpc":"2.0","id":1,"result":{"providerThreadId":"p"}}"#.into(),
            ),
            (BR, identity()),
            (BR, reset.clone()),
            (RT, turn_start(2)),
            (BR, open.clone()),
            (BR, answer(2)),
            (
                BR,
                delta(&format!(
                    r#"{{"kind":"turn.open","providerTurnId":"k1"}},{{"kind":"item.open","providerTurnId":"k1","key":{{"providerItemId":"s"}},"item":{side}}},{{"kind":"item.close","providerTurnId":"k1","key":{{"providerItemId":"s"}},"status":"completed","item":{side}}},{{"kind":"turn.boundary","providerTurnId":"k1","status":"completed"}}"#
                )),
            ),
            (BR, hint(Some("thr_1"))),
            (BR, hint(None)),
            (BR, settle.clone()),
            (RT, stop(3, "release")),
            (BR, hint(Some("thr_1"))),
            (BR, answer(3)),
        ],
    );
    cell(
        t.path(),
        "foreign-key",
        &[
            (RT, turn_start(1)),
            (BR, open.clone()),
            (BR, answer(1)),
            (
                BR,
                delta(&format!(
                    r#"{{"kind":"item.open","providerTurnId":"internal-7","key":{{"providerItemId":"s"}},"item":{side}}}"#
                )),
            ),
            (BR, settle.clone()),
        ],
    );
    cell(
        t.path(),
        "identity-late",
        &[
            (RT, thread_start(1)),
            (BR, reset.clone()),
            (BR, identity()),
            (
                BR,
                r#"{"jsonrpc":"2.0","id":1,"result":{"providerThreadId":"p"}}"#.into(),
            ),
        ],
    );
    cell(
        t.path(),
        "hint-after-release",
        &[
            (RT, thread_start(1)),
            (BR, identity()),
            (
                BR,
                r#"{"jsonrpc":"2.0","id":1,"result":{"providerThreadId":"p"}}"#.into(),
            ),
            (RT, stop(2, "release")),
            (BR, answer(2)),
            (BR, hint(Some("thr_1"))),
        ],
    );
    cell(
        t.path(),
        "refused-after-stop",
        &[
            (RT, turn_start(1)),
            (BR, open),
            (BR, answer(1)),
            (BR, settle),
            (RT, stop(2, "release")),
            (BR, answer(2)),
            (BR, delta(r#"{"kind":"py.late"}"#)),
        ],
    );
    let text = pins_update(t.path());
    for (cell, needle) in [
        (
            "foreign-key",
            "turn/vouched-key-opened: item.open at bridge→runtime run 1 seq 4 on thread \"thr_1\" is scoped by providerTurnId \"internal-7\", which the bridge never opened with turn.open",
        ),
        (
            "identity-late",
            "session/identity-before-deltas: thread/identity for thread \"thr_1\" at bridge→runtime run 1 seq 3 came after a thread/delta for it at bridge→runtime run 1 seq 2",
        ),
        (
            "hint-after-release",
            "recovery/hint-names-hosted-thread: provider/recovery (rateLimited) at bridge→runtime run 1 seq 6 names thread \"thr_1\", which this process does not host",
        ),
        (
            "refused-after-stop",
            "stop/nothing-after-stop: thread/delta for thread \"thr_1\" at bridge→runtime run 1 seq 7 (a message the runtime refuses, see events/schema-valid)",
        ),
    ] {
        assert!(text.contains(needle), "{cell}: {needle}\n{text}");
    }
    assert!(
        !text.contains("error: prov/legal"),
        "the legal cell raised something:\n{text}"
    );
    assert!(text.contains("ADD  prov/legal"), "{text}");
}

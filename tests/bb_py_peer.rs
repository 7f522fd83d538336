//! `check bb` against a bb bridge that is not ours (`tests/fixtures/py_bb_bridge.py`, Python
//! stdlib, written from the protocol document): each deliberate flaw fails exactly its rule
//! (a rule that could not be judged because of it is skipped, naming the cause); the variant
//! that is correct in unusual but legal ways gets exactly the clean bridge's verdicts.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const PEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_bb_bridge.py"
);

fn run(env: &[(&str, &str)]) -> BTreeMap<String, (String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("bridgewire.toml");
    std::fs::write(
        &fx,
        "[bb.fixture]\npromptInput = \"hello\"\nzeroWorkPromptInput = \"/noop\"\ninterruptiblePromptInput = \"/hold\"\n",
    )
    .unwrap();
    let mut cmd = Command::new(BRIDGEWIRE);
    cmd.args([
        "check",
        "bb",
        "--format",
        "json",
        "--timeout-ms",
        "3000",
        "--fixture",
    ])
    .arg(&fx)
    .args(["--", "python3", PEER])
    .env_remove("PY_BB_FLAW")
    .env_remove("PY_BB_ODDITY")
    .current_dir(dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    report["verdicts"]
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
        .collect()
}

#[test]
fn python_bridge_flaws_fail_exactly_their_rules() {
    let clean = run(&[]);
    let failed: Vec<&String> = clean
        .iter()
        .filter(|(_, (s, _))| s == "fail" || s == "skipped")
        .map(|(id, _)| id)
        .collect();
    assert!(
        failed.is_empty(),
        "the clean peer fails {failed:?}: {clean:#?}"
    );
    for rule in [
        "turn/delta-outside-turn",
        "stop/interrupt-settles-interrupted",
        "stop/nothing-after-stop",
        "events/schema-valid",
    ] {
        assert_eq!(clean[rule].0, "pass", "{rule} is judged on the clean peer");
    }

    let oddity = run(&[("PY_BB_ODDITY", "1")]);
    let statuses = |m: &BTreeMap<String, (String, String)>| -> BTreeMap<String, String> {
        m.iter().map(|(k, (s, _))| (k.clone(), s.clone())).collect()
    };
    assert_eq!(statuses(&oddity), statuses(&clean), "{oddity:#?}");

    let table: &[(&str, &str, &str)] = &[
        (
            "early-text",
            "turn/delta-outside-turn",
            "item.textDelta (key channel \"early\")",
        ),
        (
            "interrupt-completed",
            "stop/interrupt-settles-interrupted",
            "settled with status \"completed\"",
        ),
        (
            "late-delta",
            "stop/nothing-after-stop",
            "after the thread/stop answer",
        ),
        (
            "in-progress",
            "events/schema-valid",
            "item.steps.1.status: \"inProgress\" is not allowed",
        ),
        ("bad-creq", "events/schema-valid", "clientRequestId: \"req_"),
    ];
    let mut problems = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = table
            .iter()
            .map(|(flaw, rule, needle)| {
                s.spawn(move || (flaw, rule, needle, run(&[("PY_BB_FLAW", flaw)])))
            })
            .collect();
        for h in handles {
            let (flaw, rule, needle, got) = h.join().unwrap();
            for (id, (status, detail)) in &got {
                let was = &clean[id].0;
                if id == rule {
                    if status != "fail" || !detail.contains(needle) {
                        problems.push(format!("{flaw}: {id} {status} {detail}"));
                    }
                } else if status != was
                    && !(status == "skipped" && detail.contains("could not be judged"))
                    && !(status == "skipped" && id == "item/opens-before-delta")
                    && !(status == "not-run" && id == "stop/interrupt-settles-interrupted")
                {
                    problems.push(format!("{flaw}: {id} {was} → {status} {detail}"));
                }
            }
        }
    });
    assert!(problems.is_empty(), "{problems:#?}");
}

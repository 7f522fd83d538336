//! Side Bridge end to end: the reference bridge (a separate process, real HTTP) against
//! `bridgewire check sidebridge`, every break mode against its rule, bad input bounded, the
//! recording proxy, pins and replay on recorded cells.

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const REF: &str = env!("CARGO_BIN_EXE_sidebridge-ref");
const KEY: &str = "s3cret-key";

fn check(extra: &[&str], bridge: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let mut cmd = Command::new(BW);
    cmd.args(["check", "sidebridge", "--format", "json"])
        .args(extra);
    if !bridge.is_empty() {
        cmd.arg("--").arg(REF).args(bridge);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bridgewire");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

fn verdicts(v: &Value) -> Vec<(String, String, String)> {
    v["verdicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["id"].as_str().unwrap_or_default().to_string(),
                        x["status"].as_str().unwrap_or_default().to_string(),
                        x["detail"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn failed(v: &Value) -> BTreeSet<String> {
    verdicts(v)
        .into_iter()
        .filter(|(_, s, _)| s != "pass")
        .map(|(id, _, _)| id)
        .collect()
}

fn catalogue() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/sidebridge.json"
    ))
    .unwrap();
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

#[test]
fn reference_bridge_passes_every_rule() {
    let (with_key, a) = check(&["--key", KEY], &["--key", KEY], &[]);
    let (without_key, b) = check(&[], &[], &[]);
    assert_eq!(
        with_key.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&with_key.stdout)
    );
    assert_eq!(
        without_key.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&without_key.stdout)
    );
    assert!(failed(&a).is_empty() && failed(&b).is_empty());
    // Together the two runs judge every catalogue rule: A1–A3/A5 need a key, A4 needs none.
    let seen: BTreeSet<String> = verdicts(&a)
        .into_iter()
        .chain(verdicts(&b))
        .map(|x| x.0)
        .collect();
    let all: BTreeSet<String> = catalogue()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, all);
    assert!(verdicts(&a).iter().all(|x| x.0 != "SB-A4"));
    assert!(
        verdicts(&b)
            .iter()
            .all(|x| !["SB-A1", "SB-A2", "SB-A3", "SB-A5"].contains(&x.0.as_str()))
    );
    // Every client profile renders every reply of the reference bridge.
    for p in a["profiles"].as_array().unwrap() {
        for prof in ["app", "gamma", "beta", "alpha", "app-dev"] {
            assert_eq!(p[prof]["renders"], true, "{p}");
        }
    }
}

/// (break mode, the rule it breaks, whether it breaks that rule alone). Where a flaw also
/// breaks rules built on the same reply (e.g. a non-UUID id makes the reply undecodable, so
/// SB-D1 fails with SB-D2), `alone` is false and only the target is asserted.
const BREAKS: &[(&str, &str, bool)] = &[
    ("bad-session-start", "SB-H1", false),
    ("slow-start", "SB-H2", false),
    ("slash-redirect", "SB-H3", true),
    ("no-allow-header", "SB-H4", true),
    ("accept-missing-key", "SB-A1", true),
    ("accept-wrong-key", "SB-A2", false),
    ("parse-before-auth", "SB-A3", true),
    ("reject-unexpected-key", "SB-A4", true),
    ("double-answer", "SB-R1", true),
    ("crash-on-empty", "SB-R2", true),
    ("lowercase-ids", "SB-R3", true),
    ("reject-unknown-from", "SB-R4", true),
    ("raw-body-scan", "SB-R5", false),
    ("stateless", "SB-R6", true),
    ("strict-keys", "SB-R7", true),
    ("exact-version", "SB-R8", true),
    ("html-errors", "SB-R10", false),
    ("leak-errors", "SB-R10", true),
    ("require-known-chat", "SB-R11", true),
    ("crash-on-ended", "SB-R12", true),
    ("latin1", "SB-D1", true),
    ("bad-ids", "SB-D2", false),
    ("from-bot", "SB-D3", true),
    ("reuse-user-id", "SB-D4", true),
    ("relative-sources", "SB-D5", true),
    ("string-options", "SB-D6", false),
    ("empty-content", "SB-D7", true),
    ("no-sources", "SB-D8", true),
    ("html-unsupported-version", "SB-D9", true),
    ("silent-end", "SB-S1", true),
    ("always-send-options", "SB-S2", true),
    ("forget-options-on-reopen", "SB-S3", true),
    ("global-memory", "SB-S4", false),
];

#[test]
fn every_rule_that_can_fail_has_a_break_mode() {
    let listed = Command::new(REF).arg("--list-breaks").output().unwrap();
    let modes: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect();
    for (m, _, _) in BREAKS {
        assert!(modes.contains(*m), "{m} is not a sidebridge-ref break mode");
    }
    for r in catalogue() {
        let id = r["id"].as_str().unwrap();
        if r["level"] == "INFO" {
            continue; // INFO rules record and never fail.
        }
        assert!(BREAKS.iter().any(|b| b.1 == id), "{id} has no failing case");
    }
}

#[test]
fn each_break_mode_fails_its_rule() {
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = BREAKS
            .chunks(BREAKS.len().div_ceil(4))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|(mode, rule, alone)| {
                            let keyed = *mode != "reject-unexpected-key";
                            let mut extra = vec!["--timeout", "1"];
                            let mut bridge = vec!["--break", *mode];
                            if keyed {
                                extra.extend(["--key", KEY]);
                                bridge.extend(["--key", KEY]);
                            }
                            let (out, v) =
                                check(&extra, &bridge, &[("SIDEBRIDGE_REF_DELAY_MS", "1500")]);
                            (*mode, *rule, *alone, out.status.code(), failed(&v), v)
                        })
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
    for (mode, rule, alone, code, failed, v) in &results {
        if *code != Some(1) {
            problems.push(format!("{mode}: exit {code:?}"));
        }
        if !failed.contains(*rule) {
            problems.push(format!("{mode}: {rule} did not fail (failed: {failed:?})"));
        }
        if *alone && failed.len() != 1 {
            problems.push(format!(
                "{mode}: expected only {rule} to fail, got {failed:?}"
            ));
        }
        // The failing verdict names a reason.
        let detail = verdicts(v)
            .into_iter()
            .find(|x| x.0 == *rule)
            .map(|x| x.2)
            .unwrap_or_default();
        if detail.is_empty() {
            problems.push(format!("{mode}: {rule} failed without a reason"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn per_profile_verdicts_name_the_profile_and_reason() {
    let (_, v) = check(
        &["--key", KEY],
        &["--key", KEY, "--break", "no-sources"],
        &[],
    );
    let replies = v["profiles"].as_array().unwrap();
    let hello = replies
        .iter()
        .find(|p| p["reply"] == "conversation/hello")
        .unwrap();
    assert_eq!(hello["app"]["renders"], true);
    assert_eq!(hello["alpha"]["renders"], false);
    assert!(
        hello["alpha"]["reason"]
            .as_str()
            .unwrap()
            .contains("sources")
    );
    let (_, v) = check(&["--key", KEY], &["--key", KEY, "--break", "from-bot"], &[]);
    let hello = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reply"] == "conversation/hello")
        .unwrap()
        .clone();
    assert_eq!(hello["beta"]["renders"], true);
    assert!(hello["alpha"]["reason"].as_str().unwrap().contains("bot"));
}

#[test]
fn bad_input_ends_in_named_verdicts_within_bounds() {
    let cases: &[(&[&str], &[&str], &str)] = &[
        (&["--url", "http://127.0.0.1:1/"], &[], "connection refused"),
        (&[], &["--break", "html-everything"], "not JSON"),
        (&[], &["--break", "truncated-body"], "truncated body"),
        (
            &["--timeout", "0.3"],
            &["--break", "endless-body"],
            "no complete reply within",
        ),
        (&[], &["--break", "huge-body"], "body larger than"),
        (&[], &["--break", "slash-redirect"], "301"),
    ];
    for (extra, bridge, needle) in cases {
        let t = Instant::now();
        let (out, v) = check(extra, bridge, &[]);
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{bridge:?} took {:?}",
            t.elapsed()
        );
        assert_eq!(out.status.code(), Some(1), "{bridge:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        let any = verdicts(&v)
            .iter()
            .any(|x| x.1 == "fail" && x.2.contains(needle));
        assert!(
            any,
            "{bridge:?}: no failing verdict mentions {needle:?}: {v}"
        );
    }
}

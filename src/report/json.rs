//! The JSON report. `format_version` bumps on any incompatible change; fields are only added
//! within a version. Schema: `rules/schema/report.schema.json`.
//!
//! ```text
//! {
//!   "format_version": 1,
//!   "tool": {"name": "bridgewire", "version": "0.1.0"},
//!   "protocol": "bb",                       // which kit ran
//!   "target": "bb-ref-bridge --x",          // the checked command line (lossy UTF-8)
//!   "started_at": "2026-01-01T00:00:00.000Z",
//!   "duration_ms": 250, "timeout_ms": 5000, // run time; the per-wait bound
//!   "fixture": "bridgewire.toml" | null,    // the fixture file read, if any
//!   "target_exit": "exit status 3" | null,  // when the target exited on its own
//!   "target_pid": 1234 | null,              // also its process group, killed at the end
//!   "notes": ["1 non-UTF-8 stdout line(s)"],// transport anomalies
//!   "stderr_tail": "...",                   // last 64 KiB of the target's stderr, lossy
//!   "interrupted": "SIGINT" | null,         // the run was cut short: partial results
//!   "policy": {"strict": false, "require_all": false},
//!   "summary": {"passed": 19, "failed": 1, "skipped": 0, "warned": 0, "not_run": 0, "ok": false},
//!   "not_run": [{"id": "session/fork", "reason": "no fixture: set [bb.fixture] fork"}],
//!   "verdicts": [{"id": "turn/lifecycle", "status": "pass" | "fail" | "skipped" | "not-run",
//!                 "level": "MUST" | "SHOULD" | "INFO",
//!                 "outcome": "passed" | "failed" | "warned" | "skipped" | "not-run",
//!                 "detail": "...", "title": "<catalogue description>",
//!                 "section": "<spec section>", "duration_ms": 12,   // when known
//!                 "subchecks": [{"name", "status", "evidence"}],   // when the rule has them
//!                 "context": ["→ <line sent>", "← <line received>"]}]  // non-pass only
//! }
//! ```
//!
//! Rules that do not apply produce no entry in `verdicts`. A `skipped` verdict fails the run
//! (`summary.ok` is false). Wire lines in `context` are clipped; a line that was not UTF-8 is
//! shown as `<non-UTF-8 line, N bytes, starting base64:...>`, never with replaced bytes.

use super::Report;
use crate::rule::Outcome;
use serde_json::{Value, json};

pub const FORMAT_VERSION: u32 = 1;

pub fn to_value(r: &Report) -> Value {
    let s = r.summary();
    let verdicts: Vec<Value> = r
        .verdicts
        .iter()
        .map(|v| {
            let level = r.level(v);
            let mut o = json!({
                "id": v.id,
                "status": v.status.key(),
                "level": level.label(),
                "outcome": match Outcome::of(v.status, level, r.policy) {
                    Outcome::Passed => "passed",
                    Outcome::Failed => "failed",
                    Outcome::Warned => "warned",
                    Outcome::Skipped => "skipped",
                    Outcome::NotRun => "not-run",
                },
                "detail": v.detail,
            });
            if !v.subchecks.is_empty() {
                o["subchecks"] = json!(
                    v.subchecks
                        .iter()
                        .map(|c| json!({"name": c.name, "status": c.status.key(), "evidence": c.evidence}))
                        .collect::<Vec<_>>()
                );
            }
            if let Some(rule) = r.rule(&v.id) {
                o["title"] = json!(rule.description);
                o["section"] = json!(rule.section);
            }
            if let Some(ms) = v.duration_ms {
                o["duration_ms"] = json!(ms);
            }
            if !v.context.is_empty() {
                o["context"] = json!(v.context);
            }
            o
        })
        .collect();
    json!({
        "format_version": FORMAT_VERSION,
        "tool": {"name": "bridgewire", "version": env!("CARGO_PKG_VERSION")},
        "protocol": r.meta.protocol,
        "target": r.meta.target,
        "started_at": r.meta.started_at,
        "duration_ms": r.meta.duration_ms,
        "timeout_ms": r.meta.timeout_ms,
        "fixture": r.meta.fixture,
        "target_exit": r.meta.target_exit,
        "target_pid": r.meta.target_pid,
        "notes": r.meta.notes,
        "stderr_tail": r.meta.stderr_tail,
        "interrupted": r.meta.interrupted,
        "policy": {"strict": r.policy.strict, "require_all": r.policy.require_all},
        "summary": {
            "passed": s.passed, "failed": s.failed, "skipped": s.skipped,
            "warned": s.warned, "not_run": s.not_run, "ok": s.ok(),
        },
        "not_run": r.not_run().map(|v| json!({"id": v.id, "reason": v.detail})).collect::<Vec<_>>(),
        "verdicts": verdicts,
    })
}

pub fn render(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(r)).expect("JSON values serialize");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_its_schema() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../rules/schema/report.schema.json")).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let doc = super::to_value(&super::super::sample());
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
        let mut bad = doc.clone();
        bad["verdicts"][0]["status"] = "maybe".into();
        assert!(!v.is_valid(&bad));
    }

    #[test]
    fn versioned_and_complete() {
        let v = super::to_value(&super::super::sample());
        assert_eq!(v["format_version"], 1);
        assert_eq!(v["summary"]["ok"], false);
        assert_eq!(v["verdicts"][1]["status"], "fail");
        assert_eq!(v["verdicts"][1]["context"][1], "← <stdout closed>");
        assert!(v["verdicts"][0]["title"].is_string());
        assert!(v["verdicts"][0].get("context").is_none());
    }
}

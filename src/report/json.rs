//! The JSON report. `format_version` bumps on any incompatible change; fields are only added
//! within a version.

use super::Report;
use serde_json::{Value, json};

pub const FORMAT_VERSION: u32 = 1;

pub fn to_value(r: &Report) -> Value {
    let s = r.summary();
    let verdicts: Vec<Value> = r
        .verdicts
        .iter()
        .map(|v| {
            let mut o = json!({"id": v.id, "status": v.status.label(), "detail": v.detail});
            if let Some(t) = r.title(&v.id) {
                o["title"] = json!(t);
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
        "summary": {"passed": s.passed, "failed": s.failed, "skipped": s.skipped, "ok": s.ok()},
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

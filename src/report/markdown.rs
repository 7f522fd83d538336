//! A Markdown summary for CI step summaries (`$GITHUB_STEP_SUMMARY`).

use super::Report;
use crate::rule::Status;
use std::fmt::Write;

/// Escapes text for a table cell.
pub fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\n', "<br>")
}

pub fn render(r: &Report) -> String {
    let s = r.summary();
    let mut out = String::new();
    let icon = if s.ok() { "✅" } else { "❌" };
    let _ = writeln!(
        out,
        "## {icon} bridgewire check {} — {}\n",
        r.meta.protocol,
        s.line()
    );
    let _ = writeln!(out, "Target: `{}`  ", r.meta.target.replace('`', "'"));
    let _ = writeln!(
        out,
        "Started {} · {} ms · per-wait timeout {} ms\n",
        r.meta.started_at, r.meta.duration_ms, r.meta.timeout_ms
    );
    let _ = writeln!(out, "| Status | Rule | Detail |\n| --- | --- | --- |");
    for v in &r.verdicts {
        let st = match v.status {
            Status::Pass => "✅ pass",
            Status::Fail => "❌ fail",
            Status::Skipped => "⚠️ skipped",
        };
        let _ = writeln!(out, "| {st} | `{}` | {} |", v.id, cell(&v.detail));
    }
    if let Some(v) = r.verdicts.iter().find(|v| v.status == Status::Fail)
        && !v.context.is_empty()
    {
        let _ = writeln!(
            out,
            "\n<details><summary>Wire frames around <code>{}</code></summary>\n\n```text",
            v.id
        );
        for l in &v.context {
            let _ = writeln!(out, "{}", l.replace("```", "'''"));
        }
        let _ = writeln!(out, "```\n\n</details>");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_and_escaping() {
        let md = super::render(&super::super::sample());
        assert!(
            md.contains("| ❌ fail | `turn/lifecycle` | turn never settled (no turn/completed) |")
        );
        assert!(md.contains("1 passed, 1 failed, 1 skipped"));
        assert_eq!(super::cell("a|b\nc"), "a\\|b<br>c");
    }
}

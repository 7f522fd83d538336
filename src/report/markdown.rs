//! A Markdown summary for CI step summaries (`$GITHUB_STEP_SUMMARY`).

use super::Report;
use crate::rule::{Outcome, Status};
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
    if let Some(sig) = &r.meta.interrupted {
        let _ = writeln!(
            out,
            "**Interrupted by {sig}: partial results ({} verdicts reached).**\n",
            r.verdicts.len()
        );
    }
    let _ = writeln!(out, "Target: `{}`  ", r.meta.target.replace('`', "'"));
    let _ = writeln!(
        out,
        "Started {} · {} ms{}\n",
        r.meta.started_at,
        r.meta.duration_ms,
        super::wait_bound(r.meta.timeout_ms)
    );
    let _ = writeln!(
        out,
        "| Status | Level | Rule | Detail |\n| --- | --- | --- | --- |"
    );
    for v in &r.verdicts {
        let level = r.level(v);
        let st = match Outcome::of(v.status, level, r.policy) {
            Outcome::Passed => "✅ pass",
            Outcome::Failed => "❌ fail",
            Outcome::Warned => "⚠️ warn",
            Outcome::Skipped => "⚠️ skipped",
            Outcome::NotRun => "⏭️ not run",
        };
        let mut detail = cell(&v.detail);
        for c in &v.subchecks {
            detail.push_str("<br>");
            detail.push_str(&cell(super::terminal::subcheck_line(c).trim_start()));
        }
        let _ = writeln!(out, "| {st} | {} | `{}` | {detail} |", level.label(), v.id);
    }
    let not_run: Vec<_> = r.not_run().collect();
    if !not_run.is_empty() {
        let _ = writeln!(out, "\n**Not run ({}):**\n", not_run.len());
        for v in not_run {
            let _ = writeln!(out, "- `{}` — {}", v.id, cell(&v.detail));
        }
    }
    let failures: Vec<_> = r.failures().collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\n**Failures ({}):**\n", failures.len());
        for v in failures {
            let _ = write!(out, "- `{}` — {}", v.id, cell(&v.detail));
            if let Some(c) = r.citation(&v.id) {
                let _ = write!(out, "<br>rule: {}", cell(&c));
            }
            out.push('\n');
        }
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
            md.contains(
                "| ❌ fail | MUST | `turn/lifecycle` | turn never settled (no turn/completed) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| ⚠️ warn | SHOULD | `handshake-auth` |"),
            "{md}"
        );
        assert!(md.contains("- `session/fork` — no fixture"), "{md}");
        assert!(md.contains("1 passed, 1 failed, 1 skipped, 1 warned, 1 not run"));
        assert_eq!(super::cell("a|b\nc"), "a\\|b<br>c");
        assert!(md.contains("**Failures (3):**"), "{md}");
        assert!(md.contains("(bb-tooling.md#96-lifecycle-rules)"), "{md}");
    }
}

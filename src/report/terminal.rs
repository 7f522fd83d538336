//! The terminal report: one line per verdict in bb's text form, the wire frames around the
//! first failing rule, what the target did, and the closing `N passed, N failed` line.

use super::Report;
use crate::rule::Status;
use std::fmt::Write;

/// Stderr lines of the target shown after a failure.
const STDERR_LINES: usize = 10;

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    for v in &r.verdicts {
        out.push_str(&verdict_lines(r, v));
    }
    out.push_str(&tail(r));
    out
}

/// One verdict as printed when it is reached: its line, then its sub-checks.
pub fn verdict_lines(r: &Report, v: &crate::rule::Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", v.line_at(r.level(v)));
    for c in &v.subchecks {
        let _ = writeln!(out, "{}", subcheck_line(c));
    }
    out
}

/// Everything after the verdict lines: the frames around the first failure, what the target
/// did, the rules that did not run, the failures re-listed with the rule text and spec
/// section, and the closing `N passed, N failed` line (always last).
pub fn tail(r: &Report) -> String {
    let mut out = String::new();
    let first_bad = r.verdicts.iter().find(|v| v.status == Status::Fail);
    if let Some(v) = first_bad
        && !v.context.is_empty()
    {
        let _ = writeln!(out, "\nfirst failure: {} — wire frames:", v.id);
        for l in &v.context {
            let _ = writeln!(out, "  {l}");
        }
    }
    let ok = r.summary().ok();
    if !ok && let Some(e) = &r.meta.target_exit {
        let _ = writeln!(out, "\ntarget: {e}");
    }
    // Notes name what the target did that no verdict judges (a line over 1 MiB, an id
    // written 5.0): shown whether or not the run passed.
    if ok && !r.meta.notes.is_empty() {
        out.push('\n');
    }
    for n in &r.meta.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if !ok {
        let lines: Vec<&str> = r.meta.stderr_tail.lines().collect();
        if !lines.is_empty() {
            let _ = writeln!(
                out,
                "target stderr (last {} lines):",
                STDERR_LINES.min(lines.len())
            );
            for l in &lines[lines.len().saturating_sub(STDERR_LINES)..] {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
    let not_run: Vec<_> = r.not_run().collect();
    if !not_run.is_empty() {
        let _ = writeln!(out, "\nnot run ({}):", not_run.len());
        for v in not_run {
            let _ = writeln!(out, "  {} — {}", v.id, v.detail);
        }
    }
    let failures: Vec<_> = r.failures().collect();
    if !failures.is_empty() {
        // Warned and skipped verdicts are re-listed too: the header counts each kind, so a run
        // with "0 failed" does not show a "failures" list.
        let count = |o: crate::rule::Outcome| {
            failures
                .iter()
                .filter(|v| crate::rule::Outcome::of(v.status, r.level(v), r.policy) == o)
                .count()
        };
        let kinds: Vec<String> = [
            (crate::rule::Outcome::Failed, "failed"),
            (crate::rule::Outcome::Warned, "warned"),
            (crate::rule::Outcome::Skipped, "skipped"),
        ]
        .into_iter()
        .map(|(o, name)| (count(o), name))
        .filter(|(n, _)| *n > 0)
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
        let _ = writeln!(out, "\nnot passed ({}):", kinds.join(", "));
        for v in failures {
            let _ = writeln!(out, "  {}", v.line_at(r.level(v)));
            if let Some(c) = r.citation(&v.id) {
                let _ = writeln!(out, "          rule: {c}");
            }
        }
    }
    if let Some(sig) = &r.meta.interrupted {
        let _ = writeln!(
            out,
            "\ninterrupted by {sig}: partial results ({} verdicts reached)",
            r.verdicts.len()
        );
    }
    let _ = writeln!(out, "{}", r.summary().line());
    out
}

/// A sub-check under its rule: a mark, the name, the evidence.
pub fn subcheck_line(c: &crate::rule::SubCheck) -> String {
    let mark = match c.status {
        Status::Pass => "ok  ",
        Status::Fail => "FAIL",
        Status::Skipped => "skip",
        Status::NotRun => "----",
    };
    if c.evidence.is_empty() {
        format!("          {mark} {}", c.name)
    } else {
        format!("          {mark} {} — {}", c.name, c.evidence)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_context_and_summary() {
        let text = super::render(&super::super::sample());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pass    rpc/unknown-method");
        assert_eq!(
            lines[1],
            "fail    turn/lifecycle — turn never settled (no turn/completed)"
        );
        assert_eq!(
            lines[2],
            "skipped session/resume-identity — thread/resume unanswered"
        );
        assert!(text.contains("first failure: turn/lifecycle"));
        assert!(text.contains("  ← <stdout closed>"));
        assert!(text.contains("target: exit status 3"));
        assert!(text.contains("warn    handshake-auth (SHOULD) — forged-jwt: connected"));
        assert!(text.contains("          FAIL forged-jwt — connected with a forged JWT"));
        assert!(text.contains("          ok   valid-jwt — welcome received"));
        assert!(text.contains("not run (1):\n  session/fork — no fixture: set [bb.fixture] fork"));
        // Failures are re-listed at the end, citing the catalogue's rule text and section.
        let relist = text
            .split("not passed (1 failed, 1 warned, 1 skipped):\n")
            .nth(1)
            .expect(&text);
        assert!(
            relist.starts_with("  fail    turn/lifecycle — turn never settled"),
            "{text}"
        );
        assert!(
            relist.contains("rule: ") && relist.contains("(bb-tooling.md#96-lifecycle-rules)"),
            "{text}"
        );
        assert_eq!(
            *lines.last().unwrap(),
            "1 passed, 1 failed, 1 skipped, 1 warned, 1 not run"
        );
    }
}

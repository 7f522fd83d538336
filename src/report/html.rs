//! A self-contained single-file HTML report (inline CSS, no scripts, no external assets).

use super::Report;
use crate::rule::{Outcome, Status};
use std::fmt::Write;

pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
.pass{color:#176f2c}.fail{color:#b00020;font-weight:bold}.skipped,.warn{color:#a35a00;font-weight:bold}.not-run{color:#666}\
pre{background:#f6f6f6;padding:8px;overflow:auto;white-space:pre-wrap}code{font-family:ui-monospace,monospace}";

pub fn render(r: &Report) -> String {
    let s = r.summary();
    let mut o = String::new();
    let title = format!("bridgewire check {} — {}", r.meta.protocol, s.line());
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>\n",
        escape(&title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", escape(&title));
    if let Some(sig) = &r.meta.interrupted {
        let _ = writeln!(
            o,
            "<p class=\"fail\">Interrupted by {}: partial results ({} verdicts reached).</p>",
            escape(sig),
            r.verdicts.len()
        );
    }
    let _ = writeln!(
        o,
        "<p>Target: <code>{}</code><br>Started {} · {} ms{}{}</p>",
        escape(&r.meta.target),
        escape(&r.meta.started_at),
        r.meta.duration_ms,
        super::wait_bound(r.meta.timeout_ms),
        r.meta
            .fixture
            .as_ref()
            .map(|f| format!(" · fixture <code>{}</code>", escape(f)))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "<table><tr><th>Status</th><th>Level</th><th>Rule</th><th>Detail</th></tr>"
    );
    for v in &r.verdicts {
        let level = r.level(v);
        let (class, st) = match Outcome::of(v.status, level, r.policy) {
            Outcome::Warned => ("warn", "warn"),
            _ => (v.status.key(), v.status.label()),
        };
        let mut detail = escape(&v.detail);
        if !v.subchecks.is_empty() {
            detail.push_str("<ul>");
            for c in &v.subchecks {
                let _ = write!(
                    detail,
                    "<li class=\"{}\">{}</li>",
                    c.status.key(),
                    escape(super::terminal::subcheck_line(c).trim_start())
                );
            }
            detail.push_str("</ul>");
        }
        if v.status != Status::Pass && !v.context.is_empty() {
            let _ = write!(
                detail,
                "<details><summary>wire frames</summary><pre>{}</pre></details>",
                escape(&v.context.join("\n"))
            );
        }
        let title = r.citation(&v.id).map(|t| escape(&t)).unwrap_or_default();
        if v.status != Status::Pass
            && let Some(c) = r.citation(&v.id)
        {
            let _ = write!(detail, "<br><small>rule: {}</small>", escape(&c));
        }
        let _ = writeln!(
            o,
            "<tr><td class=\"{class}\">{st}</td><td>{}</td><td><code title=\"{title}\">{}</code></td><td>{detail}</td></tr>",
            level.label(),
            escape(&v.id)
        );
    }
    let _ = writeln!(o, "</table>");
    if let Some(e) = &r.meta.target_exit {
        let _ = writeln!(o, "<p>Target: {}</p>", escape(e));
    }
    for n in &r.meta.notes {
        let _ = writeln!(o, "<p>Note: {}</p>", escape(n));
    }
    if !r.meta.stderr_tail.is_empty() {
        let _ = writeln!(
            o,
            "<h2>Target stderr (tail)</h2><pre>{}</pre>",
            escape(&r.meta.stderr_tail)
        );
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn self_contained_and_escaped() {
        let h = super::render(&super::super::sample());
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert!(!h.contains("<script") && !h.contains("http://") && !h.contains("https://"));
        assert!(h.contains("bridge --x &lt;&amp;&gt;"));
        assert!(h.contains("class=\"fail\""));
        assert!(h.contains("class=\"warn\">warn</td><td>SHOULD</td>"), "{h}");
        assert!(h.contains("class=\"not-run\">not run</td>"), "{h}");
    }
}

//! JUnit XML: one suite per check (`bridgewire check <protocol>`: deterministic, the target
//! with its ports and paths is a property), one case per rule id with its time, its evidence
//! (sub-checks, wire frames) and, on failure, the rule's text and spec section. A kit
//! `skipped` verdict is a failure of type `skipped` (it fails the run, §9.1).

use super::Report;
use crate::rule::Outcome;
use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

pub fn render(r: &Report) -> String {
    let mut report = quick_junit::Report::new("bridgewire");
    let mut suite = TestSuite::new(format!("bridgewire check {}", r.meta.protocol));
    suite.set_time(Duration::from_millis(r.meta.duration_ms));
    suite.add_property(("target", r.meta.target.as_str()));
    suite.add_property(("timeout_ms", r.meta.timeout_ms.to_string().as_str()));
    if let Some(sig) = &r.meta.interrupted {
        suite.add_property(("interrupted", sig.as_str()));
    }
    if let Some(f) = &r.meta.fixture {
        suite.add_property(("fixture", f.as_str()));
    }
    for v in &r.verdicts {
        let level = r.level(v);
        let mut evidence: Vec<String> = v
            .subchecks
            .iter()
            .map(super::terminal::subcheck_line)
            .map(|l| l.trim_start().to_string())
            .collect();
        evidence.extend(v.context.iter().cloned());
        let outcome = Outcome::of(v.status, level, r.policy);
        let status = match outcome {
            Outcome::Passed | Outcome::Warned => TestCaseStatus::success(),
            Outcome::NotRun if !r.policy.require_all => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(v.detail.clone());
                s
            }
            Outcome::Failed | Outcome::Skipped | Outcome::NotRun => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_type(v.status.key());
                s.set_message(format!("[{}] {}", level.label(), v.detail));
                let mut text = evidence.clone();
                if let Some(c) = r.citation(&v.id) {
                    text.insert(0, format!("rule: {c}"));
                }
                if !text.is_empty() {
                    s.set_description(text.join("\n"));
                }
                s
            }
        };
        let mut case = TestCase::new(v.id.clone(), status);
        case.set_classname(format!("{}.{}", r.meta.protocol, level.label()));
        if let Some(ms) = v.duration_ms {
            case.set_time(Duration::from_millis(ms));
        }
        if outcome == Outcome::Warned {
            case.set_system_out(format!("warning [{}]: {}", level.label(), v.detail));
        } else if outcome == Outcome::Passed && !evidence.is_empty() {
            case.set_system_out(evidence.join("\n"));
        }
        suite.add_test_case(case);
    }
    if !r.meta.stderr_tail.is_empty() {
        suite.set_system_err(r.meta.stderr_tail.clone());
    }
    report.add_test_suite(suite);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- junit serialization failed: {e} -->\n"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_case_per_verdict_skips_fail() {
        let x = super::render(&super::super::sample());
        assert!(x.contains("tests=\"5\""), "{x}");
        assert!(x.contains("failures=\"2\""), "{x}");
        assert!(x.contains("skipped=\"1\""), "{x}");
        assert!(x.contains("warning [SHOULD]: forged-jwt"), "{x}");
        assert!(x.contains("classname=\"bb.SHOULD\""), "{x}");
        assert!(x.contains("name=\"turn/lifecycle\""));
        assert!(x.contains("type=\"skipped\""));
        assert!(x.contains("bridge --x &lt;&amp;&gt;"), "{x}");
        assert!(x.contains("name=\"bridgewire check bb\""), "{x}");
        assert!(x.contains("rule: "), "{x}");
    }
}

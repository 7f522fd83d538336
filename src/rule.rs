//! Rules and verdicts: the protocol-neutral result model every checker produces.
//!
//! The catalogue lives in `rules/<protocol>.json` as data (id, level, spec section, mode,
//! opt-in fixture, one-line description) and is embedded in the binary. Code holds only the
//! checks; a test keeps the two in step (every catalogue id has a check and every check id is
//! in the catalogue).
//!
//! Outcomes follow bb's kit: `pass`, `fail`, `skipped` (with a reason; a skipped rule fails the
//! report), and "not applicable", which produces no verdict at all.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skipped,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skipped => "skipped",
        }
    }
}

/// One rule's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The rule id exactly as the spec spells it (`turn/lifecycle`, `streaming-replace`).
    pub id: String,
    pub status: Status,
    /// Why it failed or was skipped (empty on pass, or a short note).
    pub detail: String,
    /// Frames around the first failing assertion, when the checker has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
}

impl Verdict {
    pub fn pass(id: &str) -> Verdict {
        Verdict {
            id: id.into(),
            status: Status::Pass,
            detail: String::new(),
            context: Vec::new(),
        }
    }
    pub fn fail(id: &str, detail: impl Into<String>) -> Verdict {
        Verdict {
            id: id.into(),
            status: Status::Fail,
            detail: detail.into(),
            context: Vec::new(),
        }
    }
    pub fn skipped(id: &str, detail: impl Into<String>) -> Verdict {
        Verdict {
            id: id.into(),
            status: Status::Skipped,
            detail: detail.into(),
            context: Vec::new(),
        }
    }
    pub fn with_context(mut self, context: Vec<String>) -> Verdict {
        self.context = context;
        self
    }

    /// bb's text form: status left-justified in 7 columns, the id, ` — detail`.
    pub fn line(&self) -> String {
        if self.detail.is_empty() {
            format!("{:<7} {}", self.status.label(), self.id)
        } else {
            format!("{:<7} {} — {}", self.status.label(), self.id, self.detail)
        }
    }
}

/// A catalogue entry (`rules/<protocol>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleInfo {
    pub id: String,
    pub protocol: String,
    /// `MUST`, `SHOULD` or `INFO`.
    pub level: String,
    /// Where the spec says it, e.g. `bb-provider-bridge-protocol.md#transport`.
    pub section: String,
    /// `live`, `recorded` or `offline`.
    pub mode: String,
    /// The opt-in fixture key, when the rule only runs with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixture: Option<String>,
    pub description: String,
}

/// The embedded catalogue files, one per protocol.
pub const CATALOGUE_FILES: &[(&str, &str)] = &[
    ("bb", include_str!("../rules/bb.json")),
    ("sidebridge", include_str!("../rules/sidebridge.json")),
    ("bridle", include_str!("../rules/bridle.json")),
];

/// Every catalogue entry, in file order.
pub fn catalogue() -> Vec<RuleInfo> {
    CATALOGUE_FILES
        .iter()
        .flat_map(|(name, text)| {
            serde_json::from_str::<Vec<RuleInfo>>(text)
                .unwrap_or_else(|e| panic!("rules/{name}.json is invalid: {e}"))
        })
        .collect()
}

/// Totals over verdicts; a skipped verdict counts as failed, as in bb's kit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Summary {
    pub fn of(verdicts: &[Verdict]) -> Summary {
        let mut s = Summary::default();
        for v in verdicts {
            match v.status {
                Status::Pass => s.passed += 1,
                Status::Fail => s.failed += 1,
                Status::Skipped => s.skipped += 1,
            }
        }
        s
    }

    pub fn ok(&self) -> bool {
        self.failed == 0 && self.skipped == 0
    }

    /// The closing line CI runners read: `N passed, N failed[, N skipped]`.
    pub fn line(&self) -> String {
        if self.skipped > 0 {
            format!(
                "{} passed, {} failed, {} skipped",
                self.passed, self.failed, self.skipped
            )
        } else {
            format!("{} passed, {} failed", self.passed, self.failed)
        }
    }
}

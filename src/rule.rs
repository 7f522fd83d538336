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
    /// The rule ran but could not judge (the bridge did not enter the scenario, an earlier
    /// step failed). Fails the run, as in bb's kit.
    Skipped,
    /// The rule could not run at all: no fixture for its scenario, a feature the bridge does
    /// not declare. The detail names what to set. Fails the run only under `--require-all`.
    #[serde(rename = "not-run")]
    NotRun,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skipped => "skipped",
            Status::NotRun => "not run",
        }
    }

    /// The machine form (`pass`, `fail`, `skipped`, `not-run`) used in JSON and CSS classes.
    pub fn key(self) -> &'static str {
        match self {
            Status::NotRun => "not-run",
            s => s.label(),
        }
    }
}

/// How much a rule's failure weighs (RFC 2119 words, as the catalogue spells them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// A failure fails the run.
    Must,
    /// A failure is a warning, and fails the run only under `--strict`.
    Should,
    /// Never fails the run; reported for information.
    Info,
}

impl Level {
    pub fn label(self) -> &'static str {
        match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::Info => "INFO",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "MUST" => Some(Level::Must),
            "SHOULD" => Some(Level::Should),
            "INFO" => Some(Level::Info),
            _ => None,
        }
    }
}

/// One named assertion inside a rule. A rule runs all of its sub-checks and reports each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubCheck {
    pub name: String,
    pub status: Status,
    /// What was seen (or why it could not be judged).
    #[serde(default)]
    pub evidence: String,
}

impl SubCheck {
    pub fn new(name: impl Into<String>, status: Status, evidence: impl Into<String>) -> SubCheck {
        SubCheck {
            name: name.into(),
            status,
            evidence: evidence.into(),
        }
    }
    pub fn pass(name: impl Into<String>, evidence: impl Into<String>) -> SubCheck {
        SubCheck::new(name, Status::Pass, evidence)
    }
    pub fn fail(name: impl Into<String>, evidence: impl Into<String>) -> SubCheck {
        SubCheck::new(name, Status::Fail, evidence)
    }
    pub fn skipped(name: impl Into<String>, evidence: impl Into<String>) -> SubCheck {
        SubCheck::new(name, Status::Skipped, evidence)
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
    /// The rule's level; `None` means "as the catalogue says" (MUST when uncatalogued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
    /// Every sub-check the rule ran, in order, each with its own verdict and evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subchecks: Vec<SubCheck>,
    /// How long the rule took (wall time from the previous verdict to this one), when the
    /// checker measured it. Reported per JUnit case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl Verdict {
    fn new(id: &str, status: Status, detail: String) -> Verdict {
        Verdict {
            id: id.into(),
            status,
            detail,
            context: Vec::new(),
            level: None,
            subchecks: Vec::new(),
            duration_ms: None,
        }
    }
    pub fn pass(id: &str) -> Verdict {
        Verdict::new(id, Status::Pass, String::new())
    }
    pub fn fail(id: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(id, Status::Fail, detail.into())
    }
    pub fn skipped(id: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(id, Status::Skipped, detail.into())
    }
    /// A rule that could not run; `detail` says what to set (e.g. the fixture key).
    pub fn not_run(id: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(id, Status::NotRun, detail.into())
    }
    /// A verdict decided by its sub-checks: fail if any failed (the detail names each failed
    /// one with its evidence), else skipped if none passed and some were skipped, else pass.
    /// Not-run sub-checks are listed but decide nothing.
    pub fn from_subchecks(id: &str, subchecks: Vec<SubCheck>) -> Verdict {
        let failed: Vec<String> = subchecks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| {
                if c.evidence.is_empty() {
                    c.name.clone()
                } else {
                    format!("{}: {}", c.name, c.evidence)
                }
            })
            .collect();
        let passed = subchecks.iter().any(|c| c.status == Status::Pass);
        let skipped: Vec<String> = subchecks
            .iter()
            .filter(|c| c.status == Status::Skipped)
            .map(|c| format!("{}: {}", c.name, c.evidence))
            .collect();
        let mut v = if !failed.is_empty() {
            Verdict::fail(id, failed.join("; "))
        } else if !passed && !skipped.is_empty() {
            Verdict::skipped(id, skipped.join("; "))
        } else if !passed {
            Verdict::not_run(id, "no sub-check could run")
        } else {
            Verdict::pass(id)
        };
        v.subchecks = subchecks;
        v
    }
    /// Like [`Verdict::from_subchecks`], but the rule passes only on evidence for all of it: a
    /// skipped sub-check makes it skipped (the detail names that sub-check and why) even when
    /// others passed; a failed one still fails it.
    pub fn from_all_subchecks(id: &str, subchecks: Vec<SubCheck>) -> Verdict {
        let v = Verdict::from_subchecks(id, subchecks);
        if v.status == Status::Pass
            && let Some(c) = v.subchecks.iter().find(|c| c.status == Status::Skipped)
        {
            let detail = format!("{}: {}", c.name, c.evidence);
            let subs = v.subchecks.clone();
            return Verdict::skipped(id, detail).with_subchecks(subs);
        }
        v
    }
    pub fn with_context(mut self, context: Vec<String>) -> Verdict {
        self.context = context;
        self
    }
    pub fn with_level(mut self, level: Level) -> Verdict {
        self.level = Some(level);
        self
    }
    pub fn with_subchecks(mut self, subchecks: Vec<SubCheck>) -> Verdict {
        self.subchecks = subchecks;
        self
    }
    pub fn with_duration(mut self, d: std::time::Duration) -> Verdict {
        self.duration_ms = Some(d.as_millis() as u64);
        self
    }

    /// bb's text form: status left-justified in 7 columns, the id, ` — detail`. A level other
    /// than MUST is shown after the id, and a SHOULD/INFO failure reads `warn`.
    pub fn line(&self) -> String {
        self.line_at(self.level.unwrap_or(Level::Must))
    }

    /// [`Verdict::line`] with the level resolved by the caller (e.g. from the catalogue).
    pub fn line_at(&self, level: Level) -> String {
        let label = if self.status == Status::Fail && level != Level::Must {
            "warn"
        } else {
            self.status.label()
        };
        let tag = if level == Level::Must {
            String::new()
        } else {
            format!(" ({})", level.label())
        };
        if self.detail.is_empty() {
            format!("{label:<7} {}{tag}", self.id)
        } else {
            format!("{label:<7} {}{tag} — {}", self.id, self.detail)
        }
    }
}

/// How verdicts decide the exit status.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// SHOULD failures fail the run (`--strict`).
    pub strict: bool,
    /// Rules that could not run fail the run (`--require-all`).
    pub require_all: bool,
}

/// What one verdict means for the run under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    /// A SHOULD failure (not strict) or an INFO failure.
    Warned,
    Skipped,
    NotRun,
}

impl Outcome {
    pub fn of(status: Status, level: Level, policy: Policy) -> Outcome {
        match (status, level) {
            (Status::Pass, _) => Outcome::Passed,
            (Status::Fail, Level::Must) => Outcome::Failed,
            (Status::Fail, Level::Should) if policy.strict => Outcome::Failed,
            (Status::Fail, _) => Outcome::Warned,
            (Status::Skipped, _) => Outcome::Skipped,
            (Status::NotRun, _) => Outcome::NotRun,
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
    /// A rule bb's own kit does not have (bridgewire's addition); `check bb --kit-only` leaves
    /// these out and gives bb's own verdicts.
    #[serde(
        default,
        rename = "beyondKit",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub beyond_kit: bool,
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

/// The catalogue, parsed once.
pub fn catalogue_cached() -> &'static [RuleInfo] {
    static CATALOGUE: std::sync::OnceLock<Vec<RuleInfo>> = std::sync::OnceLock::new();
    CATALOGUE.get_or_init(catalogue)
}

/// A rule's level: the verdict's own, else the catalogue's for `protocol`, else MUST.
pub fn level_of(protocol: &str, v: &Verdict) -> Level {
    v.level.unwrap_or_else(|| {
        catalogue_cached()
            .iter()
            .find(|r| r.id == v.id && r.protocol == protocol)
            .and_then(|r| Level::parse(&r.level))
            .unwrap_or(Level::Must)
    })
}

/// Totals over verdicts. A skipped verdict fails the run, as in bb's kit; a not-run one only
/// under `require_all`; a SHOULD failure only under `strict`; an INFO failure never.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// SHOULD failures (not strict) and INFO failures.
    pub warned: usize,
    pub not_run: usize,
    /// Whether not-run verdicts fail the run.
    pub require_all: bool,
}

impl Summary {
    /// Totals with every verdict's own level (MUST when unset) and the default policy.
    pub fn of(verdicts: &[Verdict]) -> Summary {
        Summary::of_with(
            verdicts,
            |v| v.level.unwrap_or(Level::Must),
            Policy::default(),
        )
    }

    /// Totals with levels resolved by `level` and decided by `policy`.
    pub fn of_with(
        verdicts: &[Verdict],
        level: impl Fn(&Verdict) -> Level,
        policy: Policy,
    ) -> Summary {
        let mut s = Summary {
            require_all: policy.require_all,
            ..Summary::default()
        };
        for v in verdicts {
            match Outcome::of(v.status, level(v), policy) {
                Outcome::Passed => s.passed += 1,
                Outcome::Failed => s.failed += 1,
                Outcome::Warned => s.warned += 1,
                Outcome::Skipped => s.skipped += 1,
                Outcome::NotRun => s.not_run += 1,
            }
        }
        s
    }

    pub fn ok(&self) -> bool {
        self.failed == 0 && self.skipped == 0 && !(self.require_all && self.not_run > 0)
    }

    /// The closing line CI runners read: `N passed, N failed[, N skipped][, N warned][, N not
    /// run]`.
    pub fn line(&self) -> String {
        let mut line = format!("{} passed, {} failed", self.passed, self.failed);
        if self.skipped > 0 {
            line.push_str(&format!(", {} skipped", self.skipped));
        }
        if self.warned > 0 {
            line.push_str(&format!(", {} warned", self.warned));
        }
        if self.not_run > 0 {
            line.push_str(&format!(", {} not run", self.not_run));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_decide_outcomes() {
        let vs = vec![
            Verdict::pass("a"),
            Verdict::fail("b", "x"),
            Verdict::fail("c", "y").with_level(Level::Should),
            Verdict::fail("d", "z").with_level(Level::Info),
            Verdict::not_run("e", "set [x.fixture] y"),
            Verdict::skipped("f", "no"),
        ];
        let lvl = |v: &Verdict| v.level.unwrap_or(Level::Must);
        let s = Summary::of_with(&vs, lvl, Policy::default());
        assert_eq!(
            (s.passed, s.failed, s.warned, s.not_run, s.skipped),
            (1, 1, 2, 1, 1)
        );
        assert_eq!(
            s.line(),
            "1 passed, 1 failed, 1 skipped, 2 warned, 1 not run"
        );
        let strict = Summary::of_with(
            &vs,
            lvl,
            Policy {
                strict: true,
                require_all: false,
            },
        );
        assert_eq!((strict.failed, strict.warned), (2, 1));
        let only_not_run = [Verdict::pass("a"), Verdict::not_run("e", "k")];
        assert!(Summary::of_with(&only_not_run, lvl, Policy::default()).ok());
        let all = Policy {
            strict: false,
            require_all: true,
        };
        assert!(!Summary::of_with(&only_not_run, lvl, all).ok());
        assert_eq!(vs[2].line(), "warn    c (SHOULD) — y");
        assert_eq!(vs[4].line(), "not run e — set [x.fixture] y");
    }

    #[test]
    fn subchecks_decide_and_are_all_kept() {
        let v = Verdict::from_subchecks(
            "r",
            vec![
                SubCheck::pass("one", "ok"),
                SubCheck::fail("two", "got 400"),
                SubCheck::skipped("three", "hub closed"),
                SubCheck::fail("four", "got 200"),
            ],
        );
        assert_eq!(v.status, Status::Fail);
        assert_eq!(v.detail, "two: got 400; four: got 200");
        assert_eq!(v.subchecks.len(), 4);
        // All of it or nothing: a skipped sub-check beside a passing one leaves it skipped.
        let all = Verdict::from_all_subchecks(
            "r",
            vec![
                SubCheck::pass("a", "ok"),
                SubCheck::skipped("b", "not seen"),
            ],
        );
        assert_eq!(all.status, Status::Skipped);
        assert_eq!(all.detail, "b: not seen");
        assert_eq!(all.subchecks.len(), 2);
        assert_eq!(
            Verdict::from_subchecks("r", all.subchecks.clone()).status,
            Status::Pass
        );
        let failed = Verdict::from_all_subchecks(
            "r",
            vec![SubCheck::skipped("a", "x"), SubCheck::fail("b", "y")],
        );
        assert_eq!(failed.status, Status::Fail);
        let s = Verdict::from_subchecks("r", vec![SubCheck::skipped("a", "b")]);
        assert_eq!(s.status, Status::Skipped);
        assert_eq!(Verdict::from_subchecks("r", vec![]).status, Status::NotRun);
    }
}

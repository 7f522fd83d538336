//! Break modes: deliberate, single flaws that make named conformance rules fail.
//!
//! The table of modes, the rules each one breaks and how, lives in the crate's module doc
//! (`main.rs`). This module only parses and answers "is mode X on?".

use std::sync::OnceLock;

/// One deliberate flaw. See the table in `main.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    DropUnknownMethod,
    DropInvalidParams,
    CrashOnNonJson,
    ErrorOnResponse,
    NoGrammarVersions,
    WrongProtocolVersion,
    SkillsUndeclaredAccepted,
    CommandsDeclaredRefused,
    StartNoIdentity,
    NoTurnCompleted,
    InvalidEvent,
    DeltaBeforeOpen,
    ReleaseInterrupts,
    ResumeReusesIds,
    ForkNoIdentity,
    ZeroWorkHangs,
    ArchivedNoHint,
    ThreadsSerialized,
    StopBeforeSettle,
    UndeclaredIcon,
    StrayStdout,
    CrashMidTurn,
    RewordFinalMessage,
    PlanStepInProgress,
    MalformedClientRequestId,
    DeltaOutsideTurn,
    InterruptCompletes,
    DeltaAfterStop,
    SearchReclassified,
}

/// Every mode with its command-line / environment spelling.
pub const ALL: &[(&str, Break)] = &[
    ("drop-unknown-method", Break::DropUnknownMethod),
    ("drop-invalid-params", Break::DropInvalidParams),
    ("crash-on-non-json", Break::CrashOnNonJson),
    ("error-on-response", Break::ErrorOnResponse),
    ("no-grammar-versions", Break::NoGrammarVersions),
    ("wrong-protocol-version", Break::WrongProtocolVersion),
    (
        "skills-undeclared-accepted",
        Break::SkillsUndeclaredAccepted,
    ),
    ("commands-declared-refused", Break::CommandsDeclaredRefused),
    ("start-no-identity", Break::StartNoIdentity),
    ("no-turn-completed", Break::NoTurnCompleted),
    ("invalid-event", Break::InvalidEvent),
    ("delta-before-open", Break::DeltaBeforeOpen),
    ("release-interrupts", Break::ReleaseInterrupts),
    ("resume-reuses-ids", Break::ResumeReusesIds),
    ("fork-no-identity", Break::ForkNoIdentity),
    ("zero-work-hangs", Break::ZeroWorkHangs),
    ("archived-no-hint", Break::ArchivedNoHint),
    ("threads-serialized", Break::ThreadsSerialized),
    ("stop-before-settle", Break::StopBeforeSettle),
    ("undeclared-icon", Break::UndeclaredIcon),
    ("stray-stdout", Break::StrayStdout),
    ("crash-mid-turn", Break::CrashMidTurn),
    ("reword-final-message", Break::RewordFinalMessage),
    ("plan-step-in-progress", Break::PlanStepInProgress),
    (
        "malformed-client-request-id",
        Break::MalformedClientRequestId,
    ),
    ("delta-outside-turn", Break::DeltaOutsideTurn),
    ("interrupt-completes", Break::InterruptCompletes),
    ("delta-after-stop", Break::DeltaAfterStop),
    ("search-reclassified", Break::SearchReclassified),
];

static ACTIVE: OnceLock<Vec<Break>> = OnceLock::new();

/// Parses a comma-separated list of mode names (blank entries are ignored).
pub fn parse_list(list: &str) -> Result<Vec<Break>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            ALL.iter()
                .find(|(spelling, _)| *spelling == name)
                .map(|(_, mode)| *mode)
                .ok_or_else(|| {
                    let known: Vec<&str> = ALL.iter().map(|(s, _)| *s).collect();
                    format!("unknown break mode `{name}` (known: {})", known.join(", "))
                })
        })
        .collect()
}

/// Installs the active set once, at startup.
pub fn install(modes: Vec<Break>) {
    let _ = ACTIVE.set(modes);
}

/// Whether `mode` is active in this process.
pub fn on(mode: Break) -> bool {
    ACTIVE.get().is_some_and(|modes| modes.contains(&mode))
}

//! The exit-code table. Every subcommand ends through one of these (except `record`, which
//! exits exactly as the recorded process did).

/// Everything passed.
pub const OK: u8 = 0;
/// A verdict failed: a rule failed or was skipped (`check`), a pin differs, a parity diff, a stale
/// allowlist entry, an invalid protocol message in a recording.
pub const FAILED: u8 = 1;
/// Invalid input: bad usage, unreadable or malformed recordings or config, a `check` target
/// that cannot be started, a report file that cannot be written.
pub const INVALID_INPUT: u8 = 2;
/// Nothing was selected: no cells matched, a `check` produced no verdict, or a `rules` filter
/// matched no catalogue entry.
pub const NOTHING_SELECTED: u8 = 4;

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

/// How a `replay` ends, the same for every protocol: an unusable recording is invalid input
/// (as for `pins`, `lanes` and `parity`), then any failed cell fails the run, and a run in which
/// every selected cell was skipped compared nothing, which is said on stderr rather than passed.
pub fn of_replay(protocol: &str, unusable: usize, failed: usize, passed: usize) -> u8 {
    if unusable > 0 {
        INVALID_INPUT
    } else if failed > 0 {
        FAILED
    } else if passed == 0 {
        eprintln!(
            "bridgewire replay {protocol}: no cell was replayed and compared (skipped above)"
        );
        NOTHING_SELECTED
    } else {
        OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_exit_ranks_unusable_over_failed_over_nothing_compared() {
        assert_eq!(of_replay("t", 1, 1, 0), INVALID_INPUT);
        assert_eq!(of_replay("t", 0, 1, 0), FAILED);
        assert_eq!(of_replay("t", 0, 0, 0), NOTHING_SELECTED);
        assert_eq!(of_replay("t", 0, 0, 3), OK);
    }
}

//! Recorded-traffic rules (reference §9.8): one cell replay (exact plan) → six verdicts under
//! `recorded/<cell>/`. One fault, one verdict: each passes or fails, except where one fault
//! would fail two of them (bb's kit fails both):
//!
//! * a stall that is the bridge's own fault ([`bridge_fault`]: it exited, left a request
//!   unanswered, sent an invalid delta, flooded, made a provider double answer generically)
//!   fails `replays`, and `turn-lifecycle`/`not-empty` are skipped naming `replays` when they
//!   would fail;
//! * when every stall is a gate wait ([`is_gate_wait`]: turns or events the replay never
//!   produced), `replays` is skipped naming `turn-lifecycle`/`not-empty` when those fail;
//! * `turn-lifecycle` is skipped naming `not-empty` when the replay produced no events;
//! * `matches-recording` is skipped naming the failing rule whenever another of these failed
//!   (the lists are then incomplete).
//!
//! | Rule | Pass condition |
//! | --- | --- |
//! | `replays` | zero stalls |
//! | `events-schema-valid` | every replayed event is a ThreadEvent ([`event_schema_check`]: the ThreadEvent JSON Schema; swap with [`recorded_verdicts_with`]) |
//! | `grammar` | the replay's **own** grammar violation list is empty (bb re-checks the already filtered events, which can hardly fail; §16.4) |
//! | `turn-lifecycle` | replay `turn/started`/`turn/completed` counts equal the recording's offline counts, and started == completed |
//! | `not-empty` | the recording assembled 0 events, or the replay produced at least one |
//! | `matches-recording` | the replay's normalized events (streamed text coalesced), rows, grammar layer and wire outcomes equal the recording's own view, as `parity --base rec:<cells> --head cmd:<bridge>` compares them ([`compare_with_recording`]) |

use super::player::ReplayResult;
use crate::cell::Cell;
use crate::parity;
use crate::protocol::{EventSink, GrammarDrop};
use crate::rule::Verdict;
use serde_json::Value;

/// The recording's own counts (offline assembly of the merged view, §4.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OfflineCounts {
    pub events: usize,
    pub turn_started: usize,
    pub turn_completed: usize,
    pub grammar_drops: usize,
}

#[derive(Default)]
struct TurnSink(OfflineCounts);

impl EventSink for TurnSink {
    fn event(&mut self, event: Value) {
        self.0.events += 1;
        match event["type"].as_str() {
            Some("turn/started") => self.0.turn_started += 1,
            Some("turn/completed") => self.0.turn_completed += 1,
            _ => {}
        }
    }
    fn grammar_drop(&mut self, _drop: GrammarDrop) {
        self.0.grammar_drops += 1;
    }
    fn invalid(&mut self, _message: String) {}
}

/// Offline counts of a cell's merged view. `accept_main_run`: read `turn.mainRun` deltas as
/// the live replay does ([`super::assemble_judged_held`]) instead of as bb's tooling.
pub fn offline_counts(cell: &Cell, accept_main_run: bool) -> OfflineCounts {
    let mut sink = TurnSink::default();
    let mut merged = cell.merged();
    if accept_main_run {
        super::assemble_judged_held(cell, &mut merged, &mut sink, &mut 0);
    } else {
        cell.protocol.model().assemble(cell, &mut merged, &mut sink);
    }
    sink.0
}

/// The wire rules ([`super::wire`]) judged on a live replay's own traffic (what the runtime
/// side wrote and what the bridge answered, in the order they crossed), as
/// `recorded/<cell>/<rule>` verdicts. A replay that stalled lacks the rest of its traffic: a
/// rule that could not judge names the stall, and one that only misses what never came is
/// skipped naming it ([`super::wire::WireJudge::stalled`]), not failed.
pub fn live_wire_verdicts(
    cell: &Cell,
    name: &str,
    replay: &ReplayResult,
    accept_main_run: bool,
) -> Vec<Verdict> {
    struct Ignore;
    impl EventSink for Ignore {
        fn event(&mut self, _: Value) {}
        fn grammar_drop(&mut self, _: GrammarDrop) {}
        fn invalid(&mut self, _: String) {}
    }
    let mut entries = replay
        .crossed()
        .enumerate()
        .map(|(i, (runtime, line))| crate::lane::Entry {
            ts: 0.0,
            run: 0.0,
            seq: (i + 1) as f64,
            dir: if runtime {
                "runtime→bridge"
            } else {
                "bridge→runtime"
            }
            .to_string(),
            line: line.to_string(),
            extra: Default::default(),
        });
    let mut main_runs = 0;
    let mut judge = super::assemble_judged_live(
        cell,
        &mut entries,
        &mut Ignore,
        accept_main_run.then_some(&mut main_runs),
    );
    // A cut line lost what it carried, as a stall loses the rest: named first.
    let stalls: Vec<String> = cut_cause(replay, true)
        .into_iter()
        .chain(replay.stalls.iter().cloned())
        .collect();
    if let Some(first) = stalls.first() {
        let more = stalls.len() - 1;
        judge.stalled = Some(if more > 0 {
            format!("the replay stalled: {first} (and {more} more)")
        } else {
            format!("the replay stalled: {first}")
        });
    }
    judge.verdicts(|rule| format!("recorded/{name}/{rule}"))
}

/// The ThreadEvent check behind `events-schema-valid`: `Err(message)` when invalid.
pub type EventCheck = fn(&Value) -> Result<(), String>;

/// The default check: the ThreadEvent JSON Schema of `rules/schema/bb-thread-event.schema.json`
/// (the conformance kit's, after a JSON round trip as bb does), after the structural check.
pub fn event_schema_check(event: &Value) -> Result<(), String> {
    event_structure_check(event)?;
    let v: Value = serde_json::from_str(&event.to_string()).unwrap_or(Value::Null);
    super::conformance::THREAD_EVENT.check(&v)
}

/// Structural check only: an object with a non-empty string `type`, a string `threadId` when
/// present, and, when `scope` is present, an object whose `kind` is a string and whose
/// `turnId` (if any) is a string.
pub fn event_structure_check(event: &Value) -> Result<(), String> {
    let Some(obj) = event.as_object() else {
        return Err("not an object".into());
    };
    match obj.get("type") {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(_) => return Err("type must be a non-empty string".into()),
        None => return Err("type is missing".into()),
    }
    if let Some(t) = obj.get("threadId")
        && !t.is_string()
    {
        return Err("threadId must be a string".into());
    }
    if let Some(scope) = obj.get("scope") {
        let Some(s) = scope.as_object() else {
            return Err("scope must be an object".into());
        };
        if !s.get("kind").is_some_and(Value::is_string) {
            return Err("scope.kind must be a string".into());
        }
        if let Some(t) = s.get("turnId")
            && !t.is_string()
        {
            return Err("scope.turnId must be a string".into());
        }
    }
    Ok(())
}

/// Whether a stall is a **gate wait**: the replay waited for `turn/started`/`turn/completed`
/// or for events the bridge never produced (the pacing gates before a request, and the planned
/// events before closing). Those are the consequence of what `turn-lifecycle`/`not-empty`
/// judge. Every other stall is the bridge's own fault: it exited, left a request unanswered
/// (`earlier requests before …`, `the last responses`, `initialize response`), never went
/// quiet, sent an invalid or misaddressed `thread/delta`, flooded its output, made a provider
/// double answer generically, or asked something the recording never answered.
pub fn is_gate_wait(stall: &str) -> bool {
    let Some(label) = stall.strip_prefix("timed out waiting for ") else {
        return false;
    };
    let turn_gate =
        label.contains(" turn/started and ") && label.contains(" turn/completed before ");
    let events_gate = label.contains(" events before ") && !label.starts_with("all ");
    let planned =
        label.starts_with("all ") && label.ends_with(" planned events before closing the bridge");
    turn_gate || events_gate || planned
}

/// The cut stdout lines ([`ReplayResult::cut_lines`]) as the cause of what went wrong, when
/// anything did (`consequence`, or a stall): the first named, the others counted.
pub fn cut_cause(replay: &ReplayResult, consequence: bool) -> Option<String> {
    let first = replay.cut_lines.first()?;
    if !consequence && replay.stalls.is_empty() {
        return None;
    }
    let more = replay.cut_lines.len() - 1;
    Some(if more > 0 {
        format!("{first} (and {more} more cut line(s))")
    } else {
        first.clone()
    })
}

/// The first stall that is the bridge's own fault ([`is_gate_wait`]), if any.
pub fn bridge_fault(stalls: &[String]) -> Option<&str> {
    stalls.iter().map(String::as_str).find(|s| !is_gate_wait(s))
}

/// The replay compared with the recording's own view exactly as `bridgewire parity --base
/// rec:<cells> --head cmd:<bridge>` compares a bb cell: the recorded leg assembled offline
/// ([`parity::assemble_offline`]), the replay as a live leg ([`super::live::live_replay_of`],
/// [`parity::leg_run_of`]), both restricted to the live view, then [`parity::compare_cell`]
/// (normalized events folded by the bb model, so text in other chunks is the same text; rows;
/// grammar layer; wire outcomes). No allowlist. The recording's own wire faults (which parity
/// lists as its leg's stalls and the `recorded/<wire rule>` verdicts judge) are set aside, so
/// a recording of a flawed bridge is still compared with a replay of it.
pub fn compare_with_recording(
    cell: &Cell,
    replay: &ReplayResult,
    offline: &OfflineCounts,
) -> parity::CellParity {
    let mut base = parity::assemble_offline(cell);
    base.stalls.clear();
    let live = ReplayResult {
        events: replay.events.clone(),
        grammar_violations: replay.grammar_violations.clone(),
        stalls: replay.stalls.clone(),
        main_runs: replay.main_runs,
        wire: replay.wire.clone(),
        wire_in_cell: replay.wire_in_cell.clone(),
        ..Default::default()
    };
    let mut head = parity::leg_run_of(cell, super::live::live_replay_of(live));
    let recorded = offline.events as u64;
    for run in [&mut base, &mut head] {
        run.recorded_events.get_or_insert(recorded);
        if run.error.is_none() {
            parity::restrict_to_live_view(run, cell);
        }
    }
    parity::compare_cell(&cell.key, cell.protocol.model(), base, head, &[], None)
}

/// Whether a replay's event count differs from the recording's only in how text was chunked:
/// the comparison passed (the folded lists are equal) while the counts differ.
pub fn only_chunking_differs(c: &parity::CellParity) -> bool {
    c.passed() && c.base.events != c.head.events
}

/// How many lines of the comparison a failing `matches-recording` detail quotes.
const MATCH_LINES: usize = 24;

/// The `matches-recording` verdict of a comparison ([`compare_with_recording`]).
fn matches_verdict(id: &str, c: &parity::CellParity) -> Verdict {
    let lines = parity::render_cell(c);
    match c.outcome() {
        parity::Outcome::Pass => Verdict::pass(id),
        parity::Outcome::Skip | parity::Outcome::Error => {
            Verdict::skipped(id, format!("not compared: {}", lines.join("; ").trim()))
        }
        parity::Outcome::Fail | parity::Outcome::Stall => {
            let head = lines.first().cloned().unwrap_or_default();
            let counts = head.split_once(": ").map_or(head.as_str(), |(_, r)| r);
            let mut detail = format!(
                "the replay differs from the recording as `parity --base rec: --head cmd:` compares them (base = the recording, head = this replay; {counts})"
            );
            let rest: Vec<&String> = lines.iter().skip(1).collect();
            for l in rest.iter().take(MATCH_LINES) {
                detail.push_str("\n    ");
                detail.push_str(l.trim_start());
            }
            if rest.len() > MATCH_LINES {
                detail.push_str(&format!(
                    "\n    … {} more line(s) (`bridgewire parity --base rec:<cells> --head cmd:<bridge>` shows them all)",
                    rest.len() - MATCH_LINES
                ));
            }
            Verdict::fail(id, detail)
        }
    }
}

/// The six recorded rules for one replay, with the default event check. `matches`: the
/// replay compared with the recording ([`compare_with_recording`]); `None` skips
/// `matches-recording` saying it was not compared.
pub fn recorded_verdicts(
    cell: &str,
    replay: &ReplayResult,
    offline: &OfflineCounts,
    matches: Option<&parity::CellParity>,
) -> Vec<Verdict> {
    recorded_verdicts_with(cell, replay, offline, matches, event_schema_check)
}

/// [`recorded_verdicts`] with a caller-supplied ThreadEvent check.
pub fn recorded_verdicts_with(
    cell: &str,
    replay: &ReplayResult,
    offline: &OfflineCounts,
    matches: Option<&parity::CellParity>,
    check: EventCheck,
) -> Vec<Verdict> {
    let id = |r: &str| format!("recorded/{cell}/{r}");
    let mut out = Vec::new();

    // One fault, one verdict. A stall that is the bridge's own fault (it exited, left a
    // request unanswered, sent an invalid delta, flooded…) fails `replays`, and the count
    // rules it cut short are skipped naming it. Otherwise a replay with no events is
    // not-empty's fault, one whose turn counts differ turn-lifecycle's; the pacing gates that
    // then wait for those turns or events in vain are consequences, not a second fault of
    // `replays` (bb reports both).
    let (s, c) = (replay.count("turn/started"), replay.count("turn/completed"));
    let no_events = offline.events > 0 && replay.events.is_empty();
    let turns_differ = !(s == offline.turn_started && c == offline.turn_completed && s == c);
    // A bridge stdout line that is JSON cut short is a message the runtime lost: when the
    // replay went wrong (a stall, turns or events missing, content differing) it is named as
    // the bridge's own fault, first; the rules it cut short are skipped naming `replays`.
    // Without a consequence it fails nothing (what it carried was not needed).
    let differs = matches
        .is_some_and(|m| matches!(m.outcome(), parity::Outcome::Fail | parity::Outcome::Stall));
    let mut stalls = replay.stalls.clone();
    if let Some(cut) = cut_cause(replay, no_events || turns_differ || differs) {
        stalls.insert(0, cut);
    }
    let fault = bridge_fault(&stalls);
    let owner = if no_events {
        Some("not-empty")
    } else if turns_differ {
        Some("turn-lifecycle")
    } else {
        None
    };
    let because_replays = |what: &str| {
        format!(
            "could not be judged apart from recorded/{cell}/replays: the bridge's own fault cut the replay short ({}); {what}",
            fault.unwrap_or_default()
        )
    };
    out.push(match owner {
        _ if stalls.is_empty() => Verdict::pass(&id("replays")),
        Some(owner) if fault.is_none() => Verdict::skipped(
            &id("replays"),
            format!(
                "could not be judged apart from recorded/{cell}/{owner}: every stall waited for turns or events the replay never produced (see {owner}): {}",
                stalls.join("; ")
            ),
        ),
        _ => Verdict::fail(&id("replays"), stalls.join("; ")),
    });

    let bad = replay.events.iter().enumerate().find_map(|(i, e)| {
        check(e).err().map(|m| {
            format!(
                "event {i} ({}) failed: {m}",
                e["type"].as_str().unwrap_or("?")
            )
        })
    });
    out.push(match bad {
        None => Verdict::pass(&id("events-schema-valid")),
        Some(d) => Verdict::fail(&id("events-schema-valid"), d),
    });

    out.push(match replay.grammar_violations.first() {
        None => Verdict::pass(&id("grammar")),
        Some(v) => Verdict::fail(&id("grammar"), v.describe()).with_context(
            replay
                .grammar_violations
                .iter()
                .skip(1)
                .map(GrammarDrop::describe)
                .collect(),
        ),
    });

    out.push(if !turns_differ {
        Verdict::pass(&id("turn-lifecycle"))
    } else if fault.is_some() {
        Verdict::skipped(
            &id("turn-lifecycle"),
            because_replays(&format!(
                "replay {s} started/{c} completed, recording {}/{}",
                offline.turn_started, offline.turn_completed
            )),
        )
    } else if no_events {
        Verdict::skipped(
            &id("turn-lifecycle"),
            format!(
                "could not be judged apart from recorded/{cell}/not-empty: the replay produced no events (recording {}/{} turns; see not-empty)",
                offline.turn_started, offline.turn_completed
            ),
        )
    } else {
        Verdict::fail(
            &id("turn-lifecycle"),
            format!(
                "replay {s} started/{c} completed, recording {}/{}",
                offline.turn_started, offline.turn_completed
            ),
        )
    });

    let empty = format!(
        "the recording assembled {} events, the replay none",
        offline.events
    );
    out.push(if !no_events {
        Verdict::pass(&id("not-empty"))
    } else if fault.is_some() {
        Verdict::skipped(&id("not-empty"), because_replays(&empty))
    } else {
        Verdict::fail(&id("not-empty"), empty)
    });

    // The comparison needs complete, valid lists: after any other recorded rule failed it
    // would only repeat that fault as differences.
    let failed = out
        .iter()
        .find(|v| v.status == crate::rule::Status::Fail)
        .map(|v| v.id.clone());
    let m = id("matches-recording");
    // What the bridge asked its provider is matched by key only (bb §6.11), so its wording is
    // free; the runtime's prompt the recorded request carried is not: losing it is a fault of
    // its own, whatever else failed (the double played the recorded answer all the same).
    let lost: Vec<&String> = replay
        .doubles
        .iter()
        .flat_map(|d| d.prompt_lost.iter())
        .collect();
    if let Some(first) = lost.first() {
        let more = if lost.len() > 1 {
            format!(" (and {} more line(s))", lost.len() - 1)
        } else {
            String::new()
        };
        out.push(Verdict::fail(
            &m,
            format!("the bridge's provider request lost the user's prompt: {first}{more}"),
        ));
        return out;
    }
    out.push(match (failed, matches) {
        (Some(rule), _) => Verdict::skipped(
            &m,
            format!(
                "not compared: {rule} failed, so the replay's lists are incomplete or invalid (one fault, one verdict)"
            ),
        ),
        (None, None) => Verdict::skipped(
            &m,
            "not compared: the replay was not compared with the recording here",
        ),
        (None, Some(c)) => matches_verdict(&m, c),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Status;
    use serde_json::json;

    #[test]
    fn verdicts_pass_and_fail() {
        let ok = ReplayResult {
            events: vec![
                json!({"type": "turn/started", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}}),
                json!({"type": "turn/completed", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}}),
            ],
            ..Default::default()
        };
        let off = OfflineCounts {
            events: 2,
            turn_started: 1,
            turn_completed: 1,
            grammar_drops: 0,
        };
        let same = compared("py/resume", false);
        let v = recorded_verdicts_with("resume", &ok, &off, Some(&same), event_structure_check);
        assert_eq!(v.len(), 6);
        assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
        assert_eq!(v[0].id, "recorded/resume/replays");

        let bad = ReplayResult {
            events: vec![json!({"type": "turn/started", "scope": "turn"})],
            stalls: vec!["a".into(), "b".into()],
            grammar_violations: vec![GrammarDrop {
                rule: "item/settles-once".into(),
                reason: "again".into(),
                event_type: "item/completed".into(),
            }],
            ..Default::default()
        };
        let v = recorded_verdicts_with("resume", &bad, &off, Some(&same), event_structure_check);
        assert!(v[..3].iter().all(|v| v.status == Status::Fail), "{v:?}");
        // Stalls "a" and "b" are no gate waits: the bridge's own fault, which the turn counts
        // it cut short are skipped naming.
        assert_eq!(v[3].status, Status::Skipped, "{v:?}");
        assert_eq!(v[4].status, Status::Pass, "one replayed event is not empty");
        assert_eq!(v[5].status, Status::Skipped);
        assert!(
            v[5].detail.contains("recorded/resume/replays failed"),
            "{}",
            v[5].detail
        );
        assert_eq!(v[0].detail, "a; b");
        assert_eq!(
            v[1].detail,
            "event 0 (turn/started) failed: scope must be an object"
        );
        assert_eq!(v[2].detail, "item/settles-once on item/completed: again");
        assert_eq!(
            v[3].detail,
            "could not be judged apart from recorded/resume/replays: the bridge's own fault cut the replay short (a); replay 1 started/0 completed, recording 1/1"
        );
        let empty = ReplayResult::default();
        let v = recorded_verdicts("x", &empty, &off, None);
        assert_eq!(
            v[4].detail,
            "the recording assembled 2 events, the replay none"
        );
    }

    /// A comparison that passed, or one whose head (the replay) held a problem (fails).
    fn compared(key: &str, differs: bool) -> parity::CellParity {
        let mut c = parity::CellParity::skip(key, "");
        c.skipped = None;
        if differs {
            c.problems.push("head: text differs".into());
        }
        c
    }

    fn counts(events: usize, turns: usize) -> OfflineCounts {
        OfflineCounts {
            events,
            turn_started: turns,
            turn_completed: turns,
            grammar_drops: 0,
        }
    }

    fn turn_events() -> Vec<Value> {
        vec![
            json!({"type": "turn/started", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}}),
            json!({"type": "turn/completed", "threadId": "", "scope": {"kind": "turn", "turnId": "t1"}}),
        ]
    }

    fn statuses(v: &[Verdict]) -> Vec<(&str, Status)> {
        v.iter()
            .map(|v| (v.id.rsplit('/').next().unwrap(), v.status))
            .collect()
    }

    #[test]
    fn stalls_are_gate_waits_or_the_bridges_own_fault() {
        for gate in [
            "timed out waiting for 1 turn/started and 0 turn/completed before turn/start",
            "timed out waiting for 8 events before thread/stop",
            "timed out waiting for all 12 planned events before closing the bridge",
        ] {
            assert!(is_gate_wait(gate), "{gate}");
        }
        for own in [
            "timed out waiting for earlier requests before turn/start",
            "timed out waiting for the last responses",
            "timed out waiting for initialize response",
            "timed out waiting for the stream to settle",
            "bridge exited while waiting for 1 turn/started and 0 turn/completed before turn/start",
            "bridge exited while waiting for 8 events before thread/stop",
            "invalid thread/delta: deltas[0] (item.open): item.steps.1.status",
            "thread/delta for threadId \"x\", which the runtime never named",
            "bridge output over 67108864 bytes; later lines not kept",
            "oversized bridge line (9 bytes)",
            "provider double #1 answered 2 request(s) generically",
            "no recorded answer for bridge request tool/call (7)",
            "bridge did not exit after stdin closed; killed",
        ] {
            assert!(!is_gate_wait(own), "{own}");
        }
        let stalls = vec![
            "timed out waiting for 8 events before thread/stop".to_string(),
            "timed out waiting for the last responses".to_string(),
        ];
        assert_eq!(
            bridge_fault(&stalls),
            Some("timed out waiting for the last responses")
        );
        assert_eq!(bridge_fault(&stalls[..1]), None);
    }

    /// The bridge's own fault fails `replays` alone: the count rules it cut short and the
    /// comparison are skipped naming it.
    #[test]
    fn a_bridges_own_stall_fails_replays_alone() {
        let off = counts(6, 2);
        // Hung on turn/start: no events, a request never answered.
        let hang = ReplayResult {
            stalls: vec![
                "timed out waiting for earlier requests before turn/start".into(),
                "timed out waiting for the last responses".into(),
            ],
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &hang,
            &off,
            Some(&compared("p/c", true)),
            event_structure_check,
        );
        assert_eq!(
            statuses(&v),
            [
                ("replays", Status::Fail),
                ("events-schema-valid", Status::Pass),
                ("grammar", Status::Pass),
                ("turn-lifecycle", Status::Skipped),
                ("not-empty", Status::Skipped),
                ("matches-recording", Status::Skipped),
            ]
        );
        for v in &v[3..5] {
            assert!(
                v.detail.starts_with("could not be judged apart from recorded/c/replays: the bridge's own fault cut the replay short (timed out waiting for earlier requests before turn/start)"),
                "{}",
                v.detail
            );
        }
        assert!(
            v[4].detail
                .ends_with("the recording assembled 6 events, the replay none")
        );
        assert!(
            v[5].detail.contains("recorded/c/replays failed"),
            "{}",
            v[5].detail
        );

        // Crashed mid-turn: one turn started, none completed, the bridge exited.
        let crash = ReplayResult {
            events: turn_events()[..1].to_vec(),
            stalls: vec!["bridge exited while waiting for 1 turn/started and 1 turn/completed before turn/start".into()],
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &crash,
            &off,
            Some(&compared("p/c", true)),
            event_structure_check,
        );
        assert_eq!(v[0].status, Status::Fail);
        assert_eq!(v[3].status, Status::Skipped, "{}", v[3].detail);
        assert!(
            v[3].detail
                .contains("replay 1 started/0 completed, recording 2/2")
        );
        assert_eq!(v[4].status, Status::Pass);
        assert_eq!(v[5].status, Status::Skipped);
    }

    /// Stalls that only waited for turns or events keep today's verdicts: the count rule fails,
    /// `replays` is skipped naming it, and so is the comparison.
    #[test]
    fn gate_waits_leave_the_fault_to_the_count_rules() {
        let off = counts(6, 2);
        let none = ReplayResult {
            stalls: vec![
                "timed out waiting for 1 turn/started and 0 turn/completed before turn/start"
                    .into(),
            ],
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &none,
            &off,
            Some(&compared("p/c", true)),
            event_structure_check,
        );
        assert_eq!(
            statuses(&v),
            [
                ("replays", Status::Skipped),
                ("events-schema-valid", Status::Pass),
                ("grammar", Status::Pass),
                ("turn-lifecycle", Status::Skipped),
                ("not-empty", Status::Fail),
                ("matches-recording", Status::Skipped),
            ]
        );
        assert!(
            v[0].detail
                .starts_with("could not be judged apart from recorded/c/not-empty")
        );
        assert!(
            v[5].detail.contains("recorded/c/not-empty failed"),
            "{}",
            v[5].detail
        );
    }

    /// A stdout line cut short is named as the cause when the replay went wrong (`replays`
    /// fails naming it, the count rule it cut short is skipped naming `replays`), and fails
    /// nothing when nothing went wrong.
    #[test]
    fn a_cut_stdout_line_is_the_cause_only_of_what_went_wrong() {
        let off = counts(4, 2);
        let cut = "bridge stdout line 7: not JSON: {\"jsonrpc\" (cut)".to_string();
        let short = ReplayResult {
            events: turn_events()[..1].to_vec(),
            stalls: vec![
                "timed out waiting for 1 turn/started and 1 turn/completed before turn/start"
                    .into(),
            ],
            cut_lines: vec![cut.clone()],
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &short,
            &off,
            Some(&compared("p/c", true)),
            event_structure_check,
        );
        assert_eq!(
            statuses(&v),
            [
                ("replays", Status::Fail),
                ("events-schema-valid", Status::Pass),
                ("grammar", Status::Pass),
                ("turn-lifecycle", Status::Skipped),
                ("not-empty", Status::Pass),
                ("matches-recording", Status::Skipped),
            ]
        );
        assert!(v[0].detail.starts_with(&cut), "{}", v[0].detail);
        assert!(v[3].detail.contains(&cut), "{}", v[3].detail);
        let fine = ReplayResult {
            events: turn_events(),
            cut_lines: vec![cut],
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &fine,
            &counts(2, 1),
            Some(&compared("p/c", false)),
            event_structure_check,
        );
        assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
    }

    /// With every other rule passing, the comparison decides `matches-recording` alone.
    #[test]
    fn matches_recording_alone_judges_the_content() {
        let off = counts(2, 1);
        let ok = ReplayResult {
            events: turn_events(),
            ..Default::default()
        };
        let v = recorded_verdicts_with(
            "c",
            &ok,
            &off,
            Some(&compared("p/c", true)),
            event_structure_check,
        );
        assert!(v[..5].iter().all(|v| v.status == Status::Pass), "{v:?}");
        assert_eq!(v[5].id, "recorded/c/matches-recording");
        assert_eq!(v[5].status, Status::Fail);
        assert!(
            v[5].detail.starts_with("the replay differs from the recording as `parity --base rec: --head cmd:` compares them (base = the recording, head = this replay; "),
            "{}",
            v[5].detail
        );
        assert!(
            v[5].detail.contains("\n    head: text differs"),
            "{}",
            v[5].detail
        );
        let v = recorded_verdicts_with(
            "c",
            &ok,
            &off,
            Some(&compared("p/c", false)),
            event_structure_check,
        );
        assert_eq!(v[5].status, Status::Pass);
        // Not compared: skipped, never silently dropped.
        let v = recorded_verdicts_with("c", &ok, &off, None, event_structure_check);
        assert_eq!(v.len(), 6);
        assert_eq!(v[5].status, Status::Skipped);
    }
}

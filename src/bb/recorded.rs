//! Recorded-traffic rules (reference §9.8): one cell replay (exact plan) → five verdicts under
//! `recorded/<cell>/`. Each passes or fails, except where one fault would fail two of them
//! (bb's kit fails both): `replays` is skipped naming `turn-lifecycle`/`not-empty` when its
//! stalls only waited for turns or events those rules fail, `turn-lifecycle` is skipped naming
//! `not-empty` when the replay produced no events.
//!
//! | Rule | Pass condition |
//! | --- | --- |
//! | `replays` | zero stalls |
//! | `events-schema-valid` | every replayed event is a ThreadEvent ([`event_schema_check`]: the ThreadEvent JSON Schema; swap with [`recorded_verdicts_with`]) |
//! | `grammar` | the replay's **own** grammar violation list is empty (bb re-checks the already filtered events, which can hardly fail; §16.4) |
//! | `turn-lifecycle` | replay `turn/started`/`turn/completed` counts equal the recording's offline counts, and started == completed |
//! | `not-empty` | the recording assembled 0 events, or the replay produced at least one |

use super::player::ReplayResult;
use crate::cell::Cell;
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

/// The wire rules ([`super::wire`]) judged offline on a cell's merged view, as
/// `recorded/<cell>/<rule>` verdicts (a stop rule with nothing to judge is *not run*).
pub fn wire_verdicts(cell: &Cell, name: &str, accept_main_run: bool) -> Vec<Verdict> {
    struct Ignore;
    impl EventSink for Ignore {
        fn event(&mut self, _: Value) {}
        fn grammar_drop(&mut self, _: GrammarDrop) {}
        fn invalid(&mut self, _: String) {}
    }
    let judge = if accept_main_run {
        super::assemble_judged_held(cell, &mut cell.merged(), &mut Ignore, &mut 0)
    } else {
        super::assemble_judged(cell, &mut cell.merged(), &mut Ignore)
    };
    judge.verdicts(|rule| format!("recorded/{name}/{rule}"))
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
    if let Some(first) = replay.stalls.first() {
        let more = replay.stalls.len() - 1;
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

/// The five recorded rules for one replay, with the default event check.
pub fn recorded_verdicts(
    cell: &str,
    replay: &ReplayResult,
    offline: &OfflineCounts,
) -> Vec<Verdict> {
    recorded_verdicts_with(cell, replay, offline, event_schema_check)
}

/// [`recorded_verdicts`] with a caller-supplied ThreadEvent check.
pub fn recorded_verdicts_with(
    cell: &str,
    replay: &ReplayResult,
    offline: &OfflineCounts,
    check: EventCheck,
) -> Vec<Verdict> {
    let id = |r: &str| format!("recorded/{cell}/{r}");
    let mut out = Vec::new();

    // One fault, one verdict: a replay with no events is not-empty's fault, one whose turn
    // counts differ turn-lifecycle's; the pacing gates that then wait for those turns or
    // events in vain are consequences, not a second fault of `replays` (bb reports both).
    let (s, c) = (replay.count("turn/started"), replay.count("turn/completed"));
    let no_events = offline.events > 0 && replay.events.is_empty();
    let turns_differ = !(s == offline.turn_started && c == offline.turn_completed && s == c);
    let only_gates = replay
        .stalls
        .iter()
        .all(|st| st.starts_with("timed out waiting for "));
    let owner = if no_events {
        Some("not-empty")
    } else if turns_differ {
        Some("turn-lifecycle")
    } else {
        None
    };
    out.push(match owner {
        _ if replay.stalls.is_empty() => Verdict::pass(&id("replays")),
        Some(owner) if only_gates => Verdict::skipped(
            &id("replays"),
            format!(
                "could not be judged apart from recorded/{cell}/{owner}: every stall waited for turns or events the replay never produced (see {owner}): {}",
                replay.stalls.join("; ")
            ),
        ),
        _ => Verdict::fail(&id("replays"), replay.stalls.join("; ")),
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

    out.push(
        if !turns_differ {
            Verdict::pass(&id("turn-lifecycle"))
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
        },
    );

    out.push(if offline.events == 0 || !replay.events.is_empty() {
        Verdict::pass(&id("not-empty"))
    } else {
        Verdict::fail(
            &id("not-empty"),
            format!(
                "the recording assembled {} events, the replay none",
                offline.events
            ),
        )
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
        let v = recorded_verdicts_with("resume", &ok, &off, event_structure_check);
        assert_eq!(v.len(), 5);
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
        let v = recorded_verdicts_with("resume", &bad, &off, event_structure_check);
        assert!(v[..4].iter().all(|v| v.status == Status::Fail), "{v:?}");
        assert_eq!(v[4].status, Status::Pass, "one replayed event is not empty");
        assert_eq!(v[0].detail, "a; b");
        assert_eq!(
            v[1].detail,
            "event 0 (turn/started) failed: scope must be an object"
        );
        assert_eq!(v[2].detail, "item/settles-once on item/completed: again");
        assert_eq!(v[3].detail, "replay 1 started/0 completed, recording 1/1");
        let empty = ReplayResult::default();
        let v = recorded_verdicts("x", &empty, &off);
        assert_eq!(
            v[4].detail,
            "the recording assembled 2 events, the replay none"
        );
    }
}

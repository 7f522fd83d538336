//! The thread-event grammar (reference §13): what bb's host refuses at its event intake.
//!
//! State is kept per event `threadId`; the assembler stamps every event with `""`, so in tooling
//! one state covers a whole cell. A violating event is dropped ("grammar drop").

use super::event::EventView;
use crate::jsonref::Field;
use crate::protocol::GrammarDrop;
use crate::util::CappedSet;
use crate::util::{FastMap, FastSet};

const ITEM_CAP: usize = 512;

pub const RULES: &[&str] = &[
    "turn/starts-once",
    "turn/settles-once",
    "turn/known",
    "item/settles-once",
    "item/opens-before-delta",
];

const STREAMING_BY_ITEM_ID: &[&str] = &[
    "item/agentMessage/delta",
    "item/plan/delta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/textDelta",
    "item/mcpToolCall/progress",
    "item/toolCall/progress",
];

const SETTLING: &[&str] = &[
    "item/completed",
    "item/backgroundTask/completed",
    "item/delegation/completed",
];

struct ThreadGrammar {
    open_items: CappedSet,
    settled_items: CappedSet,
    started_turns: FastSet<String>,
    completed_turns: FastSet<String>,
}

impl Default for ThreadGrammar {
    fn default() -> Self {
        ThreadGrammar {
            open_items: CappedSet::new(ITEM_CAP),
            settled_items: CappedSet::new(ITEM_CAP),
            started_turns: FastSet::default(),
            completed_turns: FastSet::default(),
        }
    }
}

#[derive(Default)]
pub struct Grammar {
    threads: FastMap<String, ThreadGrammar>,
}

impl Grammar {
    pub fn new() -> Grammar {
        Grammar::default()
    }

    /// Forgets a thread (after a release stop).
    pub fn clear_thread(&mut self, thread_id: &str) {
        self.threads.remove(thread_id);
    }

    /// Whether a state is kept for `thread`.
    pub fn knows(&self, thread: &str) -> bool {
        self.threads.contains_key(thread)
    }

    /// Threads with a state.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Checks and applies one event; `Err` means the event must be dropped.
    pub fn accept<E: EventView>(&mut self, event: &E) -> Result<(), GrammarDrop> {
        let thread = event.thread_id().unwrap_or("");
        self.accept_on(thread, event)
    }

    /// [`Grammar::accept`] with the event's state taken from `thread` instead of its
    /// `threadId` (which the assembler stamps `""`): the live check keeps one state per thread
    /// the bridge named, as the host does.
    pub fn accept_on<E: EventView>(&mut self, thread: &str, event: &E) -> Result<(), GrammarDrop> {
        let ty = event.ty().unwrap_or("");
        if !self.threads.contains_key(thread) {
            // Not `entry`: that would allocate the key for every event.
            self.threads
                .insert(thread.to_string(), ThreadGrammar::default());
        }
        let st = self.threads.get_mut(thread).expect("inserted above");
        let turn = event.turn_id();
        let drop = |rule: &str, reason: String| GrammarDrop {
            rule: rule.to_string(),
            reason,
            event_type: ty.to_string(),
        };
        match ty {
            "turn/started" => {
                let Some(t) = turn else { return Ok(()) };
                if st.completed_turns.contains(t) {
                    return Err(drop(
                        "turn/starts-once",
                        format!("turn {t} already completed"),
                    ));
                }
                if st.started_turns.contains(t) {
                    return Err(drop(
                        "turn/starts-once",
                        format!("turn {t} is already open"),
                    ));
                }
                st.started_turns.insert(t.to_string());
            }
            "turn/completed" => {
                let Some(t) = turn else { return Ok(()) };
                if st.completed_turns.contains(t) {
                    return Err(drop(
                        "turn/settles-once",
                        format!("turn {t} already completed"),
                    ));
                }
                if !st.started_turns.contains(t) {
                    return Err(drop("turn/known", format!("turn {t} never started")));
                }
                st.started_turns.remove(t);
                st.completed_turns.insert(t.to_string());
            }
            "item/started" => {
                let id = event.field("item").f("id").as_str().unwrap_or("");
                st.open_items.insert(id);
                st.settled_items.remove(id);
            }
            t if SETTLING.contains(&t) => {
                let id = event.field("item").f("id").as_str().unwrap_or("");
                if st.settled_items.contains(id) {
                    return Err(drop(
                        "item/settles-once",
                        format!("item {id} already settled"),
                    ));
                }
                st.open_items.remove(id);
                st.settled_items.insert(id);
            }
            t if STREAMING_BY_ITEM_ID.contains(&t) => {
                let id = event.field("itemId").as_str().unwrap_or("");
                if !st.open_items.contains(id) {
                    return Err(drop(
                        "item/opens-before-delta",
                        format!("item {id} is not open"),
                    ));
                }
            }
            "item/backgroundTask/progress" | "item/delegation/progress" => {
                let id = event.field("item").f("id").as_str().unwrap_or("");
                if !st.open_items.contains(id) {
                    return Err(drop(
                        "item/opens-before-delta",
                        format!("item {id} is not open"),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn ev(ty: &str, turn: &str, extra: Value) -> Value {
        let mut e = json!({"type": ty, "threadId": "", "scope": {"kind": "turn", "turnId": turn}});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    }

    #[test]
    fn each_rule_fires() {
        let mut g = Grammar::new();
        assert_eq!(
            g.accept(&ev("turn/completed", "t0", json!({})))
                .unwrap_err()
                .rule,
            "turn/known"
        );
        g.accept(&ev("turn/started", "t1", json!({}))).unwrap();
        assert_eq!(
            g.accept(&ev("turn/started", "t1", json!({})))
                .unwrap_err()
                .rule,
            "turn/starts-once"
        );
        assert_eq!(
            g.accept(&ev(
                "item/agentMessage/delta",
                "t1",
                json!({"itemId": "i1"})
            ))
            .unwrap_err()
            .rule,
            "item/opens-before-delta"
        );
        g.accept(&ev("item/started", "t1", json!({"item": {"id": "i1"}})))
            .unwrap();
        g.accept(&ev(
            "item/agentMessage/delta",
            "t1",
            json!({"itemId": "i1"}),
        ))
        .unwrap();
        g.accept(&ev("item/completed", "t1", json!({"item": {"id": "i1"}})))
            .unwrap();
        assert_eq!(
            g.accept(&ev("item/completed", "t1", json!({"item": {"id": "i1"}})))
                .unwrap_err()
                .rule,
            "item/settles-once"
        );
        g.accept(&ev("turn/completed", "t1", json!({}))).unwrap();
        assert_eq!(
            g.accept(&ev("turn/completed", "t1", json!({})))
                .unwrap_err()
                .rule,
            "turn/settles-once"
        );
        assert_eq!(
            g.accept(&ev("turn/started", "t1", json!({})))
                .unwrap_err()
                .rule,
            "turn/starts-once"
        );
    }
}

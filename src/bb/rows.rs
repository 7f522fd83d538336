//! bb rows: bridgewire's own projection of events to what a user would see.
//!
//! bb's UI timeline projection is a large UI module (reference §14) that bridgewire does not
//! reproduce; its `rows` pins are kept apart (`bb-row-counts.json`). bridgewire's rows are
//! defined here instead, one row per top-level timeline entry a user would see:
//!
//! | row `kind` | made from | notes |
//! | --- | --- | --- |
//! | `userMessage` | `turn/input/accepted`; `item/completed` of a `userMessage` item | one per accepted input |
//! | `turn` | `turn/started` of an unvouched turn (no `parentToolCallId`) | `status` from its `turn/completed`; `children` = its work items |
//! | `agentMessage` | `item/started`/`item/completed` of an `agentMessage` | upserted by item id; hidden while its text is empty |
//! | `task` | thread-scoped background task / delegation events | upserted by item id |
//! | `error` | `provider/error` | |
//! | `warning` | `provider/warning` | |
//! | `unhandled` | `provider/unhandled` | |
//! | `notice` | `thread/compacted`, `thread/context/cleared`, `provider/modelFallback` | |
//!
//! Work items (every other item type) become `children` of their turn's row, upserted by item id,
//! unless their presentation says `suppress: true`. Events of a vouched child turn attach to the
//! newest turn row. Usage, context-window, identity, name, rate-limit, diff and extension-state
//! events make no row.

use crate::protocol::RowProjector;
use serde_json::{Value, json};
use std::collections::HashMap;

#[derive(Default)]
pub struct BbRows {
    rows: Vec<Value>,
    turn_rows: HashMap<String, usize>,
    /// item id → (row index, child index when the item is a turn child)
    items: HashMap<String, (usize, Option<usize>)>,
    last_turn_row: Option<usize>,
}

impl BbRows {
    fn turn_row(&mut self, event: &Value) -> usize {
        let turn = event["scope"]["turnId"].as_str().unwrap_or("");
        if let Some(&i) = self.turn_rows.get(turn) {
            return i;
        }
        if let Some(i) = self.last_turn_row {
            return i;
        }
        self.rows
            .push(json!({"kind": "turn", "turnId": turn, "status": "running", "children": []}));
        let i = self.rows.len() - 1;
        self.turn_rows.insert(turn.to_string(), i);
        self.last_turn_row = Some(i);
        i
    }

    fn upsert_item(&mut self, event: &Value, item: &Value) {
        let id = item["id"].as_str().unwrap_or("").to_string();
        let ty = item["type"].as_str().unwrap_or("");
        if item["presentation"]["suppress"] == true {
            return;
        }
        match ty {
            "agentMessage" => {
                let text = item["text"].as_str().unwrap_or("");
                let row = json!({"kind": "agentMessage", "itemId": id, "text": text});
                match self.items.get(&id) {
                    Some(&(i, None)) => self.rows[i] = row,
                    _ if text.is_empty() => {}
                    _ => {
                        self.rows.push(row);
                        self.items.insert(id, (self.rows.len() - 1, None));
                    }
                }
            }
            "userMessage" => {
                let text = item["content"][0]["text"].clone();
                self.rows
                    .push(json!({"kind": "userMessage", "itemId": id, "text": text}));
                self.items.insert(id, (self.rows.len() - 1, None));
            }
            _ => {
                let child = json!({
                    "kind": "item",
                    "itemType": ty,
                    "itemId": id,
                    "status": item.get("status").cloned().unwrap_or(Value::Null),
                    "label": item["presentation"]["label"].clone(),
                });
                match self.items.get(&id).copied() {
                    Some((r, Some(c))) => self.rows[r]["children"][c] = child,
                    Some((r, None)) => self.rows[r] = child,
                    None => {
                        let r = self.turn_row(event);
                        let children = self.rows[r]["children"].as_array_mut().expect("turn row");
                        children.push(child);
                        let c = children.len() - 1;
                        self.items.insert(id, (r, Some(c)));
                    }
                }
            }
        }
    }
}

impl RowProjector for BbRows {
    fn push(&mut self, event: &Value) {
        let ty = event["type"].as_str().unwrap_or("");
        match ty {
            "turn/input/accepted" => self.rows.push(json!({
                "kind": "userMessage",
                "clientRequestId": event["clientRequestId"].clone(),
            })),
            "turn/started" if event.get("parentToolCallId").is_none() => {
                let turn = event["scope"]["turnId"].as_str().unwrap_or("").to_string();
                self.rows.push(json!({"kind": "turn", "turnId": turn, "status": "running", "children": []}));
                let i = self.rows.len() - 1;
                self.turn_rows.insert(turn, i);
                self.last_turn_row = Some(i);
            }
            "turn/completed" => {
                let turn = event["scope"]["turnId"].as_str().unwrap_or("");
                if let Some(&i) = self.turn_rows.get(turn) {
                    self.rows[i]["status"] = event["status"].clone();
                }
            }
            "item/started" | "item/completed" => self.upsert_item(event, &event["item"]),
            "item/backgroundTask/completed" | "item/delegation/completed" | "item/backgroundTask/progress"
            | "item/delegation/progress" => {
                let item = &event["item"];
                let id = item["id"].as_str().unwrap_or("").to_string();
                let row = json!({"kind": "task", "itemType": item["type"].clone(), "itemId": id, "status": item.get("status").cloned().unwrap_or(Value::Null)});
                match self.items.get(&id).copied() {
                    Some((r, None)) => self.rows[r] = row,
                    Some((r, Some(c))) => self.rows[r]["children"][c]["status"] = row["status"].clone(),
                    None => {
                        self.rows.push(row);
                        self.items.insert(id, (self.rows.len() - 1, None));
                    }
                }
            }
            "provider/error" => self.rows.push(json!({"kind": "error", "message": event["message"].clone()})),
            "provider/warning" => self.rows.push(json!({"kind": "warning", "summary": event.get("summary").cloned().unwrap_or(Value::Null)})),
            "provider/unhandled" => self.rows.push(json!({"kind": "unhandled", "rawType": event["rawType"].clone()})),
            "thread/compacted" | "thread/context/cleared" | "provider/modelFallback" => {
                self.rows.push(json!({"kind": "notice", "type": ty}))
            }
            _ => {}
        }
    }

    fn finish(self: Box<Self>) -> Vec<Value> {
        self.rows
    }
}

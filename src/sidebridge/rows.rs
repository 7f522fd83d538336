//! Side Bridge rows: the messages the current app would display for a chat.
//!
//! * a session start restores the saved chat: its `history` messages are upserted;
//! * a non-empty send adds the user's message;
//! * a reply's messages are upserted by id (ids compare case-insensitively; a reused id
//!   replaces the earlier bubble in place), empty `content` is skipped;
//! * a reply the app cannot decode adds a `system` error bubble after a send, nothing after a
//!   session start;
//! * options are applied after the messages: after `endSession`, nothing more is shown until
//!   the next session start (the client would not send).
//!
//! Row: `{"id","from","content"[,"sources"]}`.

use crate::protocol::RowProjector;
use serde_json::{Value, json};

#[derive(Default)]
pub struct SideBridgeRows {
    rows: Vec<Value>,
    ended: bool,
    last_kind: String,
    bubbles: usize,
}

impl SideBridgeRows {
    fn upsert(&mut self, m: &Value) {
        if m["content"].as_str().is_none_or(str::is_empty) {
            return;
        }
        let id = m["id"].as_str().unwrap_or_default().to_ascii_uppercase();
        let mut row = json!({"id": id, "from": m["from"], "content": m["content"]});
        if let Some(s) = m
            .get("sources")
            .filter(|s| s.as_array().is_some_and(|a| !a.is_empty()))
        {
            row["sources"] = s.clone();
        }
        match self.rows.iter_mut().find(|r| r["id"] == row["id"]) {
            Some(slot) => *slot = row,
            None => self.rows.push(row),
        }
    }
}

impl RowProjector for SideBridgeRows {
    fn push(&mut self, e: &Value) {
        match e["type"].as_str() {
            Some("request") => {
                let kind = e["kind"].as_str().unwrap_or_default().to_string();
                if kind == "sessionStart" {
                    self.ended = false;
                    if let Some(h) = e["history"].as_array() {
                        for m in h {
                            self.upsert(m);
                        }
                    }
                } else if kind == "send"
                    && !self.ended
                    && let Some(ms) = e["messages"].as_array()
                {
                    for m in ms {
                        self.upsert(m);
                    }
                }
                self.last_kind = kind;
            }
            Some("reply") if !self.ended => {
                if let Some(ms) = e["messages"].as_array() {
                    for m in ms {
                        self.upsert(m);
                    }
                    if e["options"]["endSession"] == true {
                        self.ended = true;
                    }
                } else if self.last_kind == "send" {
                    self.bubbles += 1;
                    let why = e["dropped"].as_str().or(e["error"].as_str()).unwrap_or("");
                    self.rows.push(json!({
                        "id": format!("error-bubble-{}", self.bubbles),
                        "from": "system",
                        "content": format!("Failed to communicate with Side Bridge: {why}"),
                    }));
                }
            }
            _ => {}
        }
    }

    fn finish(self: Box<Self>) -> Vec<Value> {
        self.rows
    }
}

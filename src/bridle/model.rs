//! The offline Bridle model: a cell's merged lane entries → events (+ grammar drops).
//!
//! One event per Socket.IO packet or HTTP exchange line, in `(run, seq)` order:
//!
//! ```text
//! {"dir": "hub→browser", "event": "stream", "data": {…}}          an EVENT packet
//! {"dir": "browser→hub", "packet": "connect", "nsp": "/ws/client"}  CONNECT/DISCONNECT/CONNECT_ERROR
//! {"dir": "http→hub", "http": {"method": …, "path": …, "body": …}}  the HTTP API
//! ```
//!
//! Engine.IO control frames (open, ping, pong, upgrade, noop) are transport, not events. The
//! grammar drops, per direction and messageId, a `stream`/`stream_end` after that message's
//! `stream_end` (`stream-after-end`) and a `stream` whose text does not extend the previous one
//! (`streaming-replace`); a binary frame is dropped as `binary-frame`. A text frame that does not
//! decode is reported as invalid, with its lane position.

use super::rules::parts_text;
use super::wire::{SioType, decode_frame};
use crate::cell::Cell;
use crate::lane::Entry;
use crate::protocol::{EventSink, GrammarDrop, Model, Protocol, RowProjector};
use serde_json::{Value, json};
use std::collections::HashMap;

/// How Bridle events and rows are normalized: ids interned, `ts` zeroed.
pub const BRIDLE_RULES: crate::normalize::Rules<'static> = crate::normalize::Rules {
    id_fields: &["messageId", "clientId", "agentId", "sid", "id"],
    blank_fields: &[],
    removed_fields: &[],
    time_fields: &["ts"],
};

pub struct BridleModel;

/// Per (direction, messageId) stream state.
#[derive(Default)]
struct Grammar {
    last: HashMap<(String, String), String>,
    ended: HashMap<(String, String), bool>,
}

impl Grammar {
    fn accept(&mut self, dir: &str, name: &str, data: &Value) -> Result<(), GrammarDrop> {
        if name != "stream" && name != "stream_end" {
            return Ok(());
        }
        let key = (
            dir.to_string(),
            data["messageId"].as_str().unwrap_or("").to_string(),
        );
        let drop = |rule: &str, reason: String| GrammarDrop {
            rule: rule.into(),
            reason,
            event_type: name.into(),
        };
        if self.ended.get(&key).copied().unwrap_or(false) {
            return Err(drop(
                "stream-after-end",
                format!("{name} after stream_end of messageId {:?}", key.1),
            ));
        }
        let text = data["text"].as_str().unwrap_or("").to_string();
        if let Some(prev) = self.last.get(&key)
            && name == "stream"
            && !text.starts_with(prev.as_str())
        {
            return Err(drop(
                "streaming-replace",
                format!("stream {text:?} does not extend {prev:?}"),
            ));
        }
        if name == "stream_end" {
            self.ended.insert(key.clone(), true);
        }
        self.last.insert(key, text);
        Ok(())
    }
}

/// The event for one lane entry (None for transport-only frames).
pub fn event_of(entry: &Entry) -> Result<Option<Value>, String> {
    let dir = entry.dir.as_str();
    if dir == "http→hub" || dir == "hub→http" {
        let v: Value =
            serde_json::from_str(&entry.line).map_err(|e| format!("invalid HTTP line: {e}"))?;
        return Ok(Some(json!({ "dir": dir, "http": v })));
    }
    if entry.line.starts_with("binary:") {
        return Err("binary".into());
    }
    let (_, sio) = decode_frame(&entry.line).map_err(|e| format!("invalid frame: {e}"))?;
    let Some(p) = sio else {
        return Ok(None);
    };
    if let Some((name, data)) = p.event_parts() {
        return Ok(Some(json!({ "dir": dir, "event": name, "data": data })));
    }
    let packet = match p.kind {
        SioType::Connect => "connect",
        SioType::Disconnect => "disconnect",
        SioType::ConnectError => "connect_error",
        _ => return Ok(None),
    };
    Ok(Some(json!({ "dir": dir, "packet": packet, "nsp": p.nsp })))
}

/// Runs events in the model's shape (a live leg's view) through the same grammar the recorded
/// leg's assembly applies: the kept events and each drop's `<rule>:<eventType>`.
pub fn grammar_pass(events: Vec<Value>) -> (Vec<Value>, Vec<String>) {
    let mut grammar = Grammar::default();
    let mut kept = Vec::with_capacity(events.len());
    let mut drops = Vec::new();
    for ev in events {
        let verdict = match (ev["dir"].as_str(), ev.get("event").and_then(Value::as_str)) {
            (Some(dir), Some(name)) => grammar.accept(dir, name, &ev["data"]),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => kept.push(ev),
            Err(d) => drops.push(d.layer_key()),
        }
    }
    (kept, drops)
}

impl Model for BridleModel {
    fn protocol(&self) -> Protocol {
        Protocol::Bridle
    }

    fn assemble(
        &self,
        _cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        let mut grammar = Grammar::default();
        for entry in entries {
            match event_of(&entry) {
                Ok(None) => {}
                Ok(Some(ev)) => {
                    let verdict = match ev.get("event").and_then(Value::as_str) {
                        Some(name) => grammar.accept(&entry.dir, name, &ev["data"]),
                        None => Ok(()),
                    };
                    match verdict {
                        Ok(()) => sink.event(ev),
                        Err(d) => sink.grammar_drop(d),
                    }
                }
                Err(e) if e == "binary" => sink.grammar_drop(GrammarDrop {
                    rule: "binary-frame".into(),
                    reason: "a binary frame in a JSON protocol".into(),
                    event_type: "binary".into(),
                }),
                Err(e) => sink.invalid(format!(
                    "{} run {} seq {}: {e}",
                    entry.dir,
                    crate::jsjson::format_f64(entry.run),
                    crate::jsjson::format_f64(entry.seq)
                )),
            }
        }
    }

    fn row_projector(&self) -> Box<dyn RowProjector> {
        Box::<BridleRows>::default()
    }

    fn event_rules(&self) -> crate::normalize::Rules<'static> {
        BRIDLE_RULES
    }

    fn row_rules(&self) -> crate::normalize::Rules<'static> {
        BRIDLE_RULES
    }
}

/// Rows: the chat bubbles a browser shows, from the browser-side lanes. `stream` replaces the
/// answer bubble of its messageId (streaming-replace), `stream_end` settles it; notes (`kind`,
/// or any message between `typing` and `stream_end`) fold into one work-log row per turn above
/// the answer; a plain message with no turn open is an answer bubble.
#[derive(Default)]
pub struct BridleRows {
    rows: Vec<Value>,
    turn_open: bool,
    /// Index of this turn's work-log row.
    worklog: Option<usize>,
    /// messageId → row index of the streaming answer.
    answers: HashMap<String, usize>,
}

/// `thinking` or `tool` for a note: its kind, else `→`-prefixed text reads as tool.
pub fn note_kind(data: &Value) -> &'static str {
    match data["kind"].as_str() {
        Some("tool") => "tool",
        Some("thinking") => "thinking",
        _ if data["text"]
            .as_str()
            .unwrap_or("")
            .trim_start()
            .starts_with('→') =>
        {
            "tool"
        }
        _ => "thinking",
    }
}

impl BridleRows {
    fn answer(&mut self, data: &Value, streaming: bool) {
        let id = data["messageId"].as_str().unwrap_or("").to_string();
        let text = data["text"].as_str().unwrap_or("");
        let parts = match data.get("parts") {
            Some(p @ Value::Array(_)) => p.clone(),
            _ => super::text_parts(text),
        };
        let row = json!({ "role": "assistant", "id": id, "text": text, "parts": parts,
                          "streaming": streaming });
        match self.answers.get(&id) {
            Some(&i) if !id.is_empty() => self.rows[i] = row,
            _ => {
                self.answers.insert(id, self.rows.len());
                self.rows.push(row);
            }
        }
    }
}

impl RowProjector for BridleRows {
    fn push(&mut self, ev: &Value) {
        let (Some(dir), Some(name)) = (ev["dir"].as_str(), ev["event"].as_str()) else {
            return;
        };
        let data = &ev["data"];
        match (dir, name) {
            ("browser→hub", "message") => {
                let text = data["text"].as_str().unwrap_or("");
                self.rows.push(json!({
                    "role": "user",
                    "text": text,
                    "parts": super::parts_of(data),
                }));
            }
            ("hub→browser", "typing") => {
                self.turn_open = true;
                self.worklog = None;
            }
            ("hub→browser", "message") => {
                let is_note = data.get("kind").is_some_and(|k| !k.is_null()) || self.turn_open;
                if is_note {
                    let note = json!({ "kind": note_kind(data),
                                       "text": parts_text(&data["parts"])
                                           .filter(|t| !t.is_empty())
                                           .unwrap_or_else(|| data["text"].as_str().unwrap_or("").to_string()) });
                    match self.worklog {
                        Some(i) => {
                            if let Some(n) = self.rows[i]["notes"].as_array_mut() {
                                n.push(note);
                            }
                        }
                        None => {
                            self.worklog = Some(self.rows.len());
                            self.rows
                                .push(json!({ "role": "worklog", "notes": [note] }));
                        }
                    }
                } else {
                    self.answer(data, false);
                }
            }
            ("hub→browser", "stream") => self.answer(data, true),
            ("hub→browser", "stream_end") => {
                self.answer(data, false);
                self.turn_open = false;
                self.worklog = None;
            }
            _ => {}
        }
    }

    fn finish(self: Box<Self>) -> Vec<Value> {
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(dir: &str, name: &str, data: Value) -> Value {
        json!({ "dir": dir, "event": name, "data": data })
    }

    #[test]
    fn rows_replace_streams_and_fold_notes() {
        let mut r: Box<dyn RowProjector> = Box::<BridleRows>::default();
        let t =
            |s: &str| json!({"text": s, "parts": [{"type": "text", "text": s}], "messageId": "m1"});
        for e in [
            ev("browser→hub", "message", json!({"text": "hi"})),
            ev("hub→browser", "typing", json!({})),
            ev(
                "hub→browser",
                "message",
                json!({"text": "pondering", "kind": "thinking"}),
            ),
            ev("hub→browser", "message", json!({"text": "→ searchWeb"})),
            ev("hub→browser", "stream", t("Hel")),
            ev("hub→browser", "stream", t("Hello")),
            ev("hub→browser", "stream_end", t("Hello!")),
            ev(
                "hub→browser",
                "message",
                json!({"text": "later", "messageId": "m2"}),
            ),
        ] {
            r.push(&e);
        }
        let rows = r.finish();
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[0]["role"], "user");
        assert_eq!(
            rows[1],
            json!({"role": "worklog", "notes": [
                {"kind": "thinking", "text": "pondering"}, {"kind": "tool", "text": "→ searchWeb"}]})
        );
        assert_eq!(rows[2]["text"], "Hello!");
        assert_eq!(rows[2]["streaming"], false);
        assert_eq!(rows[3]["text"], "later");
    }

    #[test]
    fn grammar_drops_deltas_and_late_streams() {
        let mut g = Grammar::default();
        let d = |s: &str| json!({"text": s, "messageId": "m"});
        assert!(g.accept("hub→browser", "stream", &d("Hel")).is_ok());
        assert_eq!(
            g.accept("hub→browser", "stream", &d("lo"))
                .unwrap_err()
                .rule,
            "streaming-replace"
        );
        assert!(g.accept("hub→browser", "stream_end", &d("Hello")).is_ok());
        assert_eq!(
            g.accept("hub→browser", "stream", &d("Hello"))
                .unwrap_err()
                .rule,
            "stream-after-end"
        );
    }
}

//! A model's sink that keeps everything it is handed, in order (events, grammar drops, invalid
//! messages): what the tests compare between two assembly paths.

use bridgewire::protocol::{EventSink, GrammarDrop};
use serde_json::Value;

#[derive(Debug, Default, PartialEq)]
pub struct Record {
    pub events: Vec<Value>,
    pub drops: Vec<GrammarDrop>,
    pub invalid: Vec<String>,
}

impl EventSink for Record {
    fn event(&mut self, event: Value) {
        self.events.push(event);
    }
    fn grammar_drop(&mut self, drop: GrammarDrop) {
        self.drops.push(drop);
    }
    fn invalid(&mut self, message: String) {
        self.invalid.push(message);
    }
}

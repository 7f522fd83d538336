//! The protocols bridgewire speaks, and the small pure interface the core calls for each.
//!
//! The core (pins, parity, offline rules, dumps) is written once against [`Model`]: a cell's
//! merged entries go in, assembled events and grammar drops come out, and rows are projected
//! from events. I/O (spawning, proxying, replay) stays concrete inside each protocol module.

use crate::cell::Cell;
use crate::lane::Entry;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Bb,
    Bridle,
    SideBridge,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Bb, Protocol::Bridle, Protocol::SideBridge];

    /// The id used on the command line, in `rules/` and as the recordings sub-folder.
    pub fn id(self) -> &'static str {
        match self {
            Protocol::Bb => "bb",
            Protocol::Bridle => "bridle",
            Protocol::SideBridge => "sidebridge",
        }
    }

    pub fn from_id(id: &str) -> Option<Protocol> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    /// The lane directions, in tie-break (concatenation) order.
    pub fn directions(self) -> &'static [&'static str] {
        match self {
            Protocol::Bb => &crate::lane::BB_DIRECTIONS,
            Protocol::Bridle => &[
                "browser→hub",
                "hub→browser",
                "agent→hub",
                "hub→agent",
                "http→hub",
                "hub→http",
            ],
            Protocol::SideBridge => &["client→bridge", "bridge→client"],
        }
    }

    /// The protocol whose direction set contains `dir`.
    pub fn of_direction(dir: &str) -> Option<Protocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.directions().contains(&dir))
    }

    pub fn model(self) -> &'static dyn Model {
        match self {
            Protocol::Bb => &crate::bb::BbModel,
            Protocol::Bridle => &crate::bridle::model::BridleModel,
            Protocol::SideBridge => &crate::sidebridge::SideBridgeModel,
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// An event the grammar refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarDrop {
    pub rule: String,
    pub reason: String,
    pub event_type: String,
}

impl GrammarDrop {
    /// bb's grammar-layer string, `<rule>:<eventType>`.
    pub fn layer_key(&self) -> String {
        format!("{}:{}", self.rule, self.event_type)
    }
}

/// Where assembly delivers its results, one at a time (cells can be gigabytes).
pub trait EventSink {
    /// An event that passed the grammar.
    fn event(&mut self, event: Value);
    fn grammar_drop(&mut self, drop: GrammarDrop);
    /// A protocol message that failed validation (e.g. an invalid `thread/delta`); named with
    /// its lane position.
    fn invalid(&mut self, message: String);
}

/// Builds rows (what a user would see) from events, incrementally.
pub trait RowProjector {
    fn push(&mut self, event: &Value);
    fn finish(self: Box<Self>) -> Vec<Value>;
}

/// The pure per-protocol half the core calls.
pub trait Model: Sync {
    fn protocol(&self) -> Protocol;
    /// Assembles a cell's merged view (entries in `(run, seq)` order) into `sink`.
    fn assemble(
        &self,
        cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    );
    fn row_projector(&self) -> Box<dyn RowProjector>;
    /// Counted as `unhandled` in pins.
    fn is_unhandled(&self, _event: &Value) -> bool {
        false
    }
    /// How events are normalized for comparison (ids interned, times zeroed).
    fn event_rules(&self) -> crate::normalize::Rules<'static> {
        crate::normalize::BB_EVENTS
    }
    fn row_rules(&self) -> crate::normalize::Rules<'static> {
        crate::normalize::BB_ROWS
    }
    fn normalize_events(&self, events: Vec<Value>) -> Vec<Value> {
        crate::normalize::normalize_list(events, self.event_rules())
    }
    fn normalize_rows(&self, rows: Vec<Value>) -> Vec<Value> {
        crate::normalize::normalize_list(rows, self.row_rules())
    }
}

//! An assembled ThreadEvent before it is a JSON tree, and the read-only view the grammar, the
//! wire judge and the rows take of an event in either form.
//!
//! As a `Value`, every event is an `IndexMap` of four fixed keys plus its own (a String per key,
//! a hash table, SipHash of each added key), and its scope another: about a fifth of `pins`'
//! instructions went to building and dropping those trees, which nothing reads whole unless a
//! dump or a live comparison asks for them. An [`Event`] keeps the fixed part as plain fields
//! and its own members in a short vector; [`Event::into_value`] gives exactly the tree the
//! assembler built before (same keys, same order), so dumps, parity and the live checks see
//! what they saw. The assembler builds only `Event`s: there is one copy of its rules.

use crate::jsonref::Field;
use serde_json::{Map, Value, json};

/// An event's `scope`.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// `{"kind": "thread"}`.
    Thread,
    /// `{"kind": "turn", "turnId": …}`.
    Turn(String),
}

/// An event's own members (after `type`, `threadId`, `providerThreadId` and `scope`), in
/// order; setting a member already there replaces its value in place, as a `Map` does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(Vec<(&'static str, Value)>);

impl Fields {
    pub fn new() -> Fields {
        Fields(Vec::new())
    }

    pub fn insert(&mut self, key: &'static str, value: Value) {
        debug_assert!(!HEADER.contains(&key), "{key} is an event header");
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }
}

impl<const N: usize> From<[(&'static str, Value); N]> for Fields {
    fn from(pairs: [(&'static str, Value); N]) -> Fields {
        let mut f = Fields(Vec::with_capacity(N + 1));
        for (k, v) in pairs {
            f.insert(k, v);
        }
        f
    }
}

/// The members every event starts with, in order.
const HEADER: [&str; 4] = ["type", "threadId", "providerThreadId", "scope"];

/// One assembled event: `{type, threadId: "", providerThreadId, scope, ...fields}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub ty: &'static str,
    pub scope: Scope,
    /// `""` but for `thread/identity`; `None`: no such member (`thread/started`).
    pub provider_thread_id: Option<Value>,
    pub fields: Fields,
}

static NULL: Value = Value::Null;

impl Event {
    pub fn new(ty: &'static str, scope: Scope, fields: Fields) -> Event {
        Event {
            ty,
            scope,
            provider_thread_id: Some(Value::String(String::new())),
            fields,
        }
    }

    /// The JSON tree, as the assembler built it when its events were trees.
    pub fn into_value(self) -> Value {
        let t = &*TEMPLATES;
        let scope = match self.scope {
            Scope::Thread => t.thread_scope.clone(),
            Scope::Turn(id) => {
                let mut m = t.turn_scope.clone();
                if let Some(v) = m.values_mut().nth(1) {
                    *v = Value::String(id);
                }
                Value::Object(m)
            }
        };
        let mut e = match self.provider_thread_id {
            Some(p) => {
                let mut e = t.event.clone();
                let mut values = e.values_mut();
                if let Some(v) = values.next() {
                    *v = Value::String(self.ty.to_string());
                }
                if let Some(v) = values.nth(1) {
                    *v = p;
                }
                if let Some(v) = values.next() {
                    *v = scope;
                }
                e
            }
            None => {
                let mut e = Map::new();
                e.insert("type".into(), Value::String(self.ty.to_string()));
                e.insert("threadId".into(), json!(""));
                e.insert("scope".into(), scope);
                e
            }
        };
        e.extend(self.fields.0.into_iter().map(|(k, v)| (k.to_string(), v)));
        Value::Object(e)
    }

    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }
}

/// Objects every event tree starts from, built once: a clone copies the keys' stored hashes,
/// so the events of a cell (10⁵ of them in a big one) do not hash `type`, `threadId`, `scope`,
/// `kind`, … with SipHash again and again (serde_json's `Map` keeps insertion order in an
/// `IndexMap` with the std hasher).
struct Templates {
    /// `{type, threadId: "", providerThreadId: "", scope}`, the values to set.
    event: Map<String, Value>,
    /// `{"kind": "turn", "turnId": ""}`.
    turn_scope: Map<String, Value>,
    /// `{"kind": "thread"}`.
    thread_scope: Value,
}

static TEMPLATES: std::sync::LazyLock<Templates> = std::sync::LazyLock::new(|| {
    let mut event = Map::with_capacity(4);
    event.insert("type".into(), Value::Null);
    event.insert("threadId".into(), json!(""));
    event.insert("providerThreadId".into(), json!(""));
    event.insert("scope".into(), Value::Null);
    let Value::Object(turn_scope) = json!({"kind": "turn", "turnId": ""}) else {
        unreachable!("an object")
    };
    Templates {
        event,
        turn_scope,
        thread_scope: json!({"kind": "thread"}),
    }
});

/// What the grammar, the wire judge and the rows read of an event: the same answers from an
/// [`Event`] and from its tree (or a live bridge's event as it came).
pub trait EventView {
    /// `type`, when a string.
    fn ty(&self) -> Option<&str>;
    /// `threadId`, when a string.
    fn thread_id(&self) -> Option<&str>;
    /// `scope.turnId`, when a string.
    fn turn_id(&self) -> Option<&str>;
    /// A member other than the four above (`Null` when absent).
    fn field(&self, key: &str) -> &Value;
}

impl EventView for Value {
    fn ty(&self) -> Option<&str> {
        self.f("type").as_str()
    }
    fn thread_id(&self) -> Option<&str> {
        self.f("threadId").as_str()
    }
    fn turn_id(&self) -> Option<&str> {
        self.f("scope").f("turnId").as_str()
    }
    fn field(&self, key: &str) -> &Value {
        self.f(key)
    }
}

impl EventView for Event {
    fn ty(&self) -> Option<&str> {
        Some(self.ty)
    }
    fn thread_id(&self) -> Option<&str> {
        Some("")
    }
    fn turn_id(&self) -> Option<&str> {
        match &self.scope {
            Scope::Turn(t) => Some(t),
            Scope::Thread => None,
        }
    }
    fn field(&self, key: &str) -> &Value {
        debug_assert!(!HEADER.contains(&key), "{key} is read by its own accessor");
        self.fields
            .0
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&NULL, |(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree keeps the header order, a replaced member its first place, and both views
    /// read the same answers.
    #[test]
    fn the_tree_and_the_views_agree() {
        let mut f = Fields::from([("item", json!({"id": "i1"})), ("status", json!("a"))]);
        f.insert("delta", json!("x"));
        f.insert("status", json!("b"));
        let e = Event::new("item/completed", Scope::Turn("t1".into()), f);
        let v = e.to_value();
        assert_eq!(
            v.to_string(),
            r#"{"type":"item/completed","threadId":"","providerThreadId":"","scope":{"kind":"turn","turnId":"t1"},"item":{"id":"i1"},"status":"b","delta":"x"}"#
        );
        for key in ["item", "status", "delta", "missing"] {
            assert_eq!(e.field(key), v.field(key), "{key}");
        }
        assert_eq!(
            (e.ty(), e.turn_id(), e.thread_id()),
            (v.ty(), v.turn_id(), v.thread_id())
        );
        let mut started = Event::new("thread/started", Scope::Thread, Fields::new());
        started.provider_thread_id = None;
        let v = started.to_value();
        assert_eq!(
            v.to_string(),
            r#"{"type":"thread/started","threadId":"","scope":{"kind":"thread"}}"#
        );
        assert_eq!((started.turn_id(), v.turn_id()), (None, None));
        let mut identity = Event::new("thread/identity", Scope::Thread, Fields::new());
        identity.provider_thread_id = Some(json!("p"));
        assert_eq!(
            identity.into_value().to_string(),
            r#"{"type":"thread/identity","threadId":"","providerThreadId":"p","scope":{"kind":"thread"}}"#
        );
    }
}

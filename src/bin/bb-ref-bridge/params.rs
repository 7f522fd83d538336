//! Request-parameter validation.
//!
//! A request whose params fail validation is answered `-32602 Invalid params for <method>`
//! with the issues as `data` — never dropped (a dropped request is an undebuggable timeout
//! on the runtime side). Issues follow the zod shape bb's schemas produce:
//! `{code, path, message}`.

use serde_json::{Map, Value, json};

/// Collects issues while reading fields from a params object.
pub struct Check<'a> {
    object: Option<&'a Map<String, Value>>,
    issues: Vec<Value>,
}

impl<'a> Check<'a> {
    pub fn new(params: &'a Value) -> Self {
        let mut check = Self {
            object: params.as_object(),
            issues: Vec::new(),
        };
        if check.object.is_none() {
            check.issue("invalid_type", None, "Expected object");
        }
        check
    }

    fn issue(&mut self, code: &str, key: Option<&str>, message: &str) {
        let path: Vec<&str> = key.into_iter().collect();
        self.issues
            .push(json!({"code": code, "path": path, "message": message}));
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.object.and_then(|o| o.get(key))
    }

    /// A required non-empty string.
    pub fn string(&mut self, key: &str) -> String {
        match self.get(key) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) => {
                self.issue("too_small", Some(key), "Expected a non-empty string");
                String::new()
            }
            None => {
                if self.object.is_some() {
                    self.issue("invalid_type", Some(key), "Required");
                }
                String::new()
            }
            Some(_) => {
                self.issue("invalid_type", Some(key), "Expected string");
                String::new()
            }
        }
    }

    /// An optional string; absent and `null` both read as `None`.
    pub fn opt_string(&mut self, key: &str) -> Option<String> {
        match self.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.issue("invalid_type", Some(key), "Expected string or null");
                None
            }
        }
    }

    /// A required string from a fixed set.
    pub fn one_of(&mut self, key: &str, allowed: &[&str]) -> String {
        let value = self.string(key);
        if !value.is_empty() && !allowed.contains(&value.as_str()) {
            let message = format!("Expected one of {}", allowed.join(", "));
            self.issue("invalid_enum_value", Some(key), &message);
        }
        value
    }

    /// A required array.
    pub fn array(&mut self, key: &str) -> Vec<Value> {
        match self.get(key) {
            Some(Value::Array(items)) => items.clone(),
            None => {
                if self.object.is_some() {
                    self.issue("invalid_type", Some(key), "Required");
                }
                Vec::new()
            }
            Some(_) => {
                self.issue("invalid_type", Some(key), "Expected array");
                Vec::new()
            }
        }
    }

    /// An optional array (absent or `null` → empty).
    pub fn opt_array(&mut self, key: &str) -> Vec<Value> {
        match self.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                self.issue("invalid_type", Some(key), "Expected array");
                Vec::new()
            }
        }
    }

    /// An optional object.
    pub fn opt_object(&mut self, key: &str) {
        match self.get(key) {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(_) => self.issue("invalid_type", Some(key), "Expected object"),
        }
    }

    /// A required positive integer.
    pub fn positive_int(&mut self, key: &str) -> u64 {
        match self.get(key).and_then(Value::as_u64) {
            Some(n) if n > 0 => n,
            _ => {
                self.issue("invalid_type", Some(key), "Expected a positive integer");
                0
            }
        }
    }

    /// The collected issues, or `Ok` when there are none.
    pub fn finish(self) -> Result<(), Vec<Value>> {
        if self.issues.is_empty() {
            Ok(())
        } else {
            Err(self.issues)
        }
    }
}

/// Joins the text parts of a prompt `input[]` (`{type: "text", text}` items; anything else
/// is ignored, as this provider only takes text).
pub fn input_text(input: &[Value]) -> String {
    input
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|item| item.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

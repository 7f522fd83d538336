//! A fast yes/no check of a value against a JSON Schema, for the `thread/delta` params schema
//! that `pins` validates on every delta line.
//!
//! The general validator (`jsonschema`) spent about a fifth of `pins`' time on this schema: every
//! delta walks an `allOf` of 27 `if kind == … then …` branches, and every item shape another 17.
//! This module compiles the same schema document into a small tree of the keywords it uses
//! (anything else is refused at compile time, so a schema edit can never be silently
//! unchecked) and turns each such `allOf` of `if {properties: {P: {const: C}}, required: [P]}
//! then S` branches into one lookup of `P`'s value. It only answers valid/invalid: the
//! messages still come from `jsonschema` (see [`super::delta::validate_params`]), which is
//! also the oracle the tests compare this against (`tests/delta_validator.rs`).
//!
//! Semantics follow JSON Schema 2020-12 as `jsonschema` applies them: keywords that do not
//! apply to an instance's type pass it; `integer` includes floats without a fraction; `const`
//! and `enum` compare numbers mathematically; string lengths count code points; `pattern` is a
//! search, not a full match.

use crate::jsonref::{JsonView, Kind, Num};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A compiled schema.
pub struct FastSchema {
    nodes: Vec<Node>,
    root: usize,
}

#[derive(Default)]
struct Node {
    checks: Vec<Check>,
}

const T_NULL: u8 = 1;
const T_BOOL: u8 = 2;
const T_INTEGER: u8 = 4;
const T_NUMBER: u8 = 8;
const T_STRING: u8 = 16;
const T_ARRAY: u8 = 32;
const T_OBJECT: u8 = 64;

enum Check {
    Type(u8),
    Required(Vec<String>),
    /// Each named property's node, looked up by the instance's member names (foldhash: a
    /// binary search of the names cost a memcmp call per probe, on every member of every
    /// delta).
    Properties(crate::util::FastMap<String, usize>),
    Enum(Vec<Value>),
    /// An `enum` of strings only (the 27 delta kinds, the 19 error codes): a lookup instead of
    /// a comparison with each; anything but a string equals none of them.
    EnumStrings(crate::util::FastSet<String>),
    Const(Value),
    MinLength(usize),
    MaxLength(usize),
    Pattern(Regex),
    Not(usize),
    Minimum(f64),
    MinItems(usize),
    Items(usize),
    AnyOf(Vec<usize>),
    AllOf(Vec<usize>),
    IfThen {
        cond: usize,
        then: usize,
    },
    /// An `allOf` of `if {properties: {prop: {const: "<s>"}}, required: [prop]} then S`: the
    /// branches whose string matches `instance[prop]` apply (every branch on a non-object,
    /// where the `if` holds vacuously).
    Dispatch {
        prop: String,
        /// foldhash, not SipHash: one lookup per delta and per item shape.
        by_value: crate::util::FastMap<String, Vec<usize>>,
        all: Vec<usize>,
    },
    Ref(usize),
}

/// Why a schema document cannot be compiled here.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct CompileError {
    pub path: String,
    pub what: String,
}

/// Keywords that carry no validation.
const ANNOTATIONS: &[&str] = &["$schema", "$id", "$defs", "title", "description"];

struct Compiler<'s> {
    doc: &'s Value,
    nodes: Vec<Node>,
    defs: HashMap<String, usize>,
}

impl FastSchema {
    /// Compiles `doc` (local `#/$defs/…` references only).
    pub fn compile(doc: &Value) -> Result<FastSchema, CompileError> {
        let mut c = Compiler {
            doc,
            nodes: Vec::new(),
            defs: HashMap::new(),
        };
        let root = c.node(doc, "#")?;
        let mut schema = FastSchema {
            nodes: c.nodes,
            root,
        };
        schema.skip_bare_refs();
        Ok(schema)
    }

    /// A node that is nothing but a `$ref` validates as its target: every use is pointed at
    /// the end of such a chain. Each `$ref` compiles to two hops (the definition's slot, then
    /// the definition), taken on every use, for every delta.
    fn skip_bare_refs(&mut self) {
        let nodes = &self.nodes;
        let end = |mut n: usize| {
            // Bounded: a cycle of bare references is left as it is.
            for _ in 0..nodes.len() {
                match nodes[n].checks.as_slice() {
                    [Check::Ref(m)] => n = *m,
                    _ => break,
                }
            }
            n
        };
        let to: Vec<usize> = (0..nodes.len()).map(end).collect();
        for node in &mut self.nodes {
            for check in &mut node.checks {
                match check {
                    Check::Ref(n) | Check::Not(n) | Check::Items(n) => *n = to[*n],
                    Check::AnyOf(ns) | Check::AllOf(ns) => ns.iter_mut().for_each(|n| *n = to[*n]),
                    Check::IfThen { cond, then } => {
                        *cond = to[*cond];
                        *then = to[*then];
                    }
                    Check::Properties(props) => props.values_mut().for_each(|n| *n = to[*n]),
                    Check::Dispatch { by_value, all, .. } => {
                        by_value.values_mut().flatten().for_each(|n| *n = to[*n]);
                        all.iter_mut().for_each(|n| *n = to[*n]);
                    }
                    _ => {}
                }
            }
        }
        self.root = to[self.root];
    }

    /// Whether `instance` (a `Value` or a borrowed [`JsonRef`](crate::jsonref::JsonRef))
    /// is valid.
    pub fn is_valid<J: JsonView>(&self, instance: &J) -> bool {
        self.valid(self.root, instance)
    }

    fn valid<J: JsonView>(&self, node: usize, v: &J) -> bool {
        self.nodes[node].checks.iter().all(|c| self.check(c, v))
    }

    fn check<J: JsonView>(&self, c: &Check, v: &J) -> bool {
        match c {
            Check::Type(mask) => type_bits(v) & mask != 0,
            Check::Required(names) => !v.is_object() || names.iter().all(|n| v.get(n).is_some()),
            // From the instance's side (it has a few keys, the schema many): each key is
            // looked up in the properties.
            Check::Properties(props) => v.all_members(|name, value| {
                props.get(name).is_none_or(|&node| self.valid(node, value))
            }),
            Check::Enum(options) => options.iter().any(|o| json_equal(v, o)),
            Check::EnumStrings(options) => v.as_str().is_some_and(|s| options.contains(s)),
            Check::Const(expected) => json_equal(v, expected),
            Check::MinLength(n) => match v.kind() {
                // A non-empty string has a character: counting them is for longer minimums.
                Kind::String(s) => s.len() >= *n && (*n <= 1 || s.chars().count() >= *n),
                _ => true,
            },
            Check::MaxLength(n) => match v.kind() {
                Kind::String(s) => s.len() <= *n || s.chars().count() <= *n,
                _ => true,
            },
            Check::Pattern(re) => match v.kind() {
                Kind::String(s) => re.is_match(s),
                _ => true,
            },
            Check::Not(node) => !self.valid(*node, v),
            Check::Minimum(min) => match v.kind() {
                Kind::Number(n) => match n {
                    Num::U(u) => u as f64 >= *min,
                    Num::I(i) => i as f64 >= *min,
                    Num::F(f) => f >= *min,
                },
                _ => true,
            },
            Check::MinItems(n) => match v.kind() {
                Kind::Array(a) => a.len() >= *n,
                _ => true,
            },
            Check::Items(node) => match v.kind() {
                Kind::Array(a) => a.iter().all(|item| self.valid(*node, item)),
                _ => true,
            },
            Check::AnyOf(nodes) => nodes.iter().any(|n| self.valid(*n, v)),
            Check::AllOf(nodes) => nodes.iter().all(|n| self.valid(*n, v)),
            Check::IfThen { cond, then } => !self.valid(*cond, v) || self.valid(*then, v),
            Check::Dispatch {
                prop,
                by_value,
                all,
            } => {
                if v.is_object() {
                    match v.get(prop).and_then(JsonView::as_str) {
                        Some(s) => by_value
                            .get(s)
                            .is_none_or(|nodes| nodes.iter().all(|n| self.valid(*n, v))),
                        None => true,
                    }
                } else {
                    all.iter().all(|n| self.valid(*n, v))
                }
            }
            Check::Ref(node) => self.valid(*node, v),
        }
    }
}

fn type_bits<J: JsonView>(v: &J) -> u8 {
    match v.kind() {
        Kind::Null => T_NULL,
        Kind::Bool(_) => T_BOOL,
        Kind::Number(n) => {
            if n.is_integer() {
                T_NUMBER | T_INTEGER
            } else {
                T_NUMBER
            }
        }
        Kind::String(_) => T_STRING,
        Kind::Array(_) => T_ARRAY,
        Kind::Object => T_OBJECT,
    }
}

/// JSON equality as JSON Schema defines it: numbers by value (`1 == 1.0`).
pub fn json_equal<J: JsonView>(a: &J, b: &Value) -> bool {
    match (a.kind(), b) {
        (Kind::Number(x), Value::Number(y)) => {
            let y = Num::of_number(y);
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Kind::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Kind::Object, Value::Object(y)) => {
            a.member_count() == y.len()
                && a.all_members(|k, a| y.get(k).is_some_and(|b| json_equal(a, b)))
        }
        (Kind::Null, Value::Null) => true,
        (Kind::Bool(x), Value::Bool(y)) => x == *y,
        (Kind::String(x), Value::String(y)) => x == y,
        _ => false,
    }
}

impl Compiler<'_> {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn err(path: &str, what: impl Into<String>) -> CompileError {
        CompileError {
            path: path.to_string(),
            what: what.into(),
        }
    }

    fn def(&mut self, reference: &str, path: &str) -> Result<usize, CompileError> {
        if let Some(&i) = self.defs.get(reference) {
            return Ok(i);
        }
        let name = reference
            .strip_prefix("#/$defs/")
            .ok_or_else(|| Self::err(path, format!("unsupported $ref {reference}")))?;
        let target = self
            .doc
            .get("$defs")
            .and_then(|d| d.get(name))
            .ok_or_else(|| Self::err(path, format!("$ref to a missing definition {reference}")))?;
        // Reserve the slot first, so a recursive definition refers to itself.
        let slot = self.push(Node::default());
        self.defs.insert(reference.to_string(), slot);
        let compiled = self.node(target, reference)?;
        self.nodes[slot].checks.push(Check::Ref(compiled));
        Ok(slot)
    }

    fn node(&mut self, schema: &Value, path: &str) -> Result<usize, CompileError> {
        let obj = match schema {
            Value::Object(o) => o,
            Value::Bool(true) => return Ok(self.push(Node::default())),
            _ => return Err(Self::err(path, "a schema must be an object or true")),
        };
        let mut checks = Vec::new();
        let uint = |k: &str, v: &Value| {
            v.as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| Self::err(path, format!("{k} must be a non-negative integer")))
        };
        for (k, v) in obj {
            let at = format!("{path}/{k}");
            let check = match k.as_str() {
                k if ANNOTATIONS.contains(&k) => continue,
                "type" => Check::Type(type_mask(v).ok_or_else(|| Self::err(&at, "bad type"))?),
                "required" => Check::Required(
                    v.as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|s| s.as_str().map(str::to_string))
                                .collect::<Option<Vec<_>>>()
                        })
                        .ok_or_else(|| Self::err(&at, "required must list strings"))?,
                ),
                "properties" => {
                    let props = v
                        .as_object()
                        .ok_or_else(|| Self::err(&at, "properties must be an object"))?;
                    let mut out = crate::util::FastMap::default();
                    for (name, s) in props {
                        out.insert(name.clone(), self.node(s, &format!("{at}/{name}"))?);
                    }
                    Check::Properties(out)
                }
                "enum" => {
                    let options = v
                        .as_array()
                        .ok_or_else(|| Self::err(&at, "enum must be an array"))?;
                    match options
                        .iter()
                        .map(|o| o.as_str().map(str::to_string))
                        .collect::<Option<crate::util::FastSet<String>>>()
                    {
                        Some(strings) if options.len() > 4 => Check::EnumStrings(strings),
                        _ => Check::Enum(options.clone()),
                    }
                }
                "const" => Check::Const(v.clone()),
                "minLength" => Check::MinLength(uint(k, v)?),
                "maxLength" => Check::MaxLength(uint(k, v)?),
                "minItems" => Check::MinItems(uint(k, v)?),
                "pattern" => Check::Pattern(
                    v.as_str()
                        .and_then(|p| Regex::new(p).ok())
                        .ok_or_else(|| Self::err(&at, "pattern must be a regex"))?,
                ),
                "minimum" => Check::Minimum(
                    v.as_f64()
                        .ok_or_else(|| Self::err(&at, "minimum must be a number"))?,
                ),
                "not" => Check::Not(self.node(v, &at)?),
                "items" => Check::Items(self.node(v, &at)?),
                "$ref" => Check::Ref(
                    self.def(
                        v.as_str()
                            .ok_or_else(|| Self::err(&at, "$ref must be a string"))?,
                        &at,
                    )?,
                ),
                "anyOf" | "allOf" => {
                    let list = v
                        .as_array()
                        .ok_or_else(|| Self::err(&at, format!("{k} must be an array")))?;
                    if k == "allOf"
                        && let Some(d) = self.dispatch(list, &at)?
                    {
                        d
                    } else {
                        let mut nodes = Vec::new();
                        for (i, s) in list.iter().enumerate() {
                            nodes.push(self.node(s, &format!("{at}/{i}"))?);
                        }
                        if k == "anyOf" {
                            Check::AnyOf(nodes)
                        } else {
                            Check::AllOf(nodes)
                        }
                    }
                }
                "if" => {
                    let Some(then) = obj.get("then") else {
                        continue; // an `if` without `then` or `else` asserts nothing
                    };
                    Check::IfThen {
                        cond: self.node(v, &at)?,
                        then: self.node(then, &format!("{path}/then"))?,
                    }
                }
                "then" => {
                    if !obj.contains_key("if") {
                        continue; // ignored without `if`
                    }
                    continue; // compiled with `if`
                }
                other => {
                    return Err(Self::err(
                        &at,
                        format!("keyword {other:?} is not supported by the fast validator"),
                    ));
                }
            };
            checks.push(check);
        }
        Ok(self.push(Node { checks }))
    }

    /// `allOf: [{if: {properties: {P: {const: "c"}}, required: [P]}, then: S}, …]` with one `P`.
    fn dispatch(&mut self, list: &[Value], at: &str) -> Result<Option<Check>, CompileError> {
        let mut prop: Option<&str> = None;
        let mut branches: Vec<(&str, &Value)> = Vec::new();
        for s in list {
            let Some((p, c, then)) = const_branch(s) else {
                return Ok(None);
            };
            if prop.is_some_and(|q| q != p) {
                return Ok(None);
            }
            prop = Some(p);
            branches.push((c, then));
        }
        let Some(prop) = prop else {
            return Ok(None);
        };
        let mut by_value: crate::util::FastMap<String, Vec<usize>> = Default::default();
        let mut all = Vec::new();
        for (i, (c, then)) in branches.into_iter().enumerate() {
            let n = self.node(then, &format!("{at}/{i}/then"))?;
            by_value.entry(c.to_string()).or_default().push(n);
            all.push(n);
        }
        Ok(Some(Check::Dispatch {
            prop: prop.to_string(),
            by_value,
            all,
        }))
    }
}

/// `{if: {properties: {P: {const: "c"}}, required: [P]}, then: S}` → `(P, c, S)`.
fn const_branch(s: &Value) -> Option<(&str, &str, &Value)> {
    let o = s.as_object()?;
    if o.len() != 2 {
        return None;
    }
    let cond = o.get("if")?.as_object()?;
    let then = o.get("then")?;
    if cond.len() != 2 {
        return None;
    }
    let props: &Map<String, Value> = cond.get("properties")?.as_object()?;
    let required = cond.get("required")?.as_array()?;
    if props.len() != 1 || required.len() != 1 {
        return None;
    }
    let (p, c) = props.iter().next()?;
    let c = c.as_object()?;
    if c.len() != 1 || required[0].as_str() != Some(p.as_str()) {
        return None;
    }
    Some((p, c.get("const")?.as_str()?, then))
}

fn type_mask(v: &Value) -> Option<u8> {
    let one = |s: &str| {
        Some(match s {
            "null" => T_NULL,
            "boolean" => T_BOOL,
            "integer" => T_INTEGER,
            "number" => T_NUMBER | T_INTEGER,
            "string" => T_STRING,
            "array" => T_ARRAY,
            "object" => T_OBJECT,
            _ => return None,
        })
    };
    match v {
        Value::String(s) => one(s),
        Value::Array(a) => a.iter().try_fold(0u8, |m, t| Some(m | one(t.as_str()?)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords_behave_as_json_schema_says() {
        let s = FastSchema::compile(&json!({
            "type": "object",
            "required": ["k"],
            "properties": {
                "k": {"enum": ["a", "b"]},
                "n": {"type": "integer", "minimum": 1},
                "s": {"type": "string", "minLength": 2, "maxLength": 3, "not": {"pattern": "x"}},
                "l": {"type": "array", "minItems": 1, "items": {"type": ["string", "null"]}}
            },
            "allOf": [
                {"if": {"properties": {"k": {"const": "a"}}, "required": ["k"]}, "then": {"required": ["n"]}},
                {"if": {"properties": {"k": {"const": "b"}}, "required": ["k"]}, "then": {"required": ["s"]}}
            ]
        }))
        .unwrap();
        for (v, ok) in [
            (json!({"k": "a", "n": 1}), true),
            (json!({"k": "a", "n": 1.0}), true),
            (json!({"k": "a", "n": 1.5}), false),
            (json!({"k": "a", "n": 0}), false),
            (json!({"k": "a"}), false),
            (json!({"k": "b", "s": "éé"}), true),
            (json!({"k": "b", "s": "é"}), false),
            (json!({"k": "b", "s": "éééé"}), false),
            (json!({"k": "b", "s": "ax"}), false),
            (json!({"k": "c"}), false),
            (json!({"k": "b", "s": "ab", "l": []}), false),
            (json!({"k": "b", "s": "ab", "l": [null, "x"]}), true),
            (json!({"k": "b", "s": "ab", "l": [1]}), false),
            (json!([]), false),
        ] {
            assert_eq!(s.is_valid(&v), ok, "{v}");
        }
        let e = FastSchema::compile(&json!({"uniqueItems": true}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("uniqueItems"), "{e}");
    }
}

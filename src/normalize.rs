//! Normalization of event and row lists before comparison (reference §7).
//!
//! Applied to a whole list at once, because interned id tokens are assigned in first-seen order
//! over the list with one table shared by all id fields:
//!
//! * `providerCheckpointId` is removed;
//! * `threadId`, `providerThreadId` become `""` unless null;
//! * string values of id fields become `#1`, `#2`, …;
//! * time fields holding a number or a string become `0`, at any depth.

use serde_json::{Map, Value};
use std::collections::HashMap;

pub const EVENT_ID_FIELDS: &[&str] = &["turnId", "itemId", "id", "parentToolCallId"];

pub const ROW_ID_FIELDS: &[&str] = &[
    "turnId",
    "itemId",
    "id",
    "parentToolCallId",
    "toolCallId",
    "callId",
    "requestId",
    "messageId",
    "rowId",
    "agentId",
    "taskId",
    "backgroundTaskId",
    "sourceItemId",
    "interactionId",
];

pub const TIME_FIELDS: &[&str] = &[
    "createdAt",
    "updatedAt",
    "startedAt",
    "completedAt",
    "startedAtMs",
    "completedAtMs",
    "timestamp",
    "ts",
    "resetsAtMs",
    "resetsAt",
    "expiresAt",
];

/// What a time in epoch seconds becomes where times keep their unit ([`Rules::keep_time_type`]);
/// it stays itself when normalized again, as the other units' labels do ([`time_unit`]).
pub const EPOCH_SECONDS: &str = "<epoch seconds>";
/// A time in epoch microseconds, where times keep their unit.
pub const EPOCH_MICROSECONDS: &str = "<epoch microseconds>";
/// A time in epoch nanoseconds, where times keep their unit.
pub const EPOCH_NANOSECONDS: &str = "<epoch nanoseconds>";
/// A number that reads as no time since 1970 in any unit (below 1e8 but not 0, or negative: a
/// clock since start, a counter), where times keep their unit.
pub const NOT_EPOCH_TIME: &str = "<not an epoch time>";

/// The label of a number read as a time that is not in epoch milliseconds (`None`: it is, from
/// 1e11 to 1e14, 1973 to 5138, or it is 0, what a time in milliseconds becomes): seconds from
/// 1e8 (1973 in seconds) to 1e11 (5138 in seconds), microseconds from 1e14 to 1e17,
/// nanoseconds beyond; below 1e8 (other than 0) or negative, no epoch time. The ranges follow
/// from one another by factors of 1000, so each label names the one unit that reads as a date
/// between 1973 and 5138.
pub fn time_unit(t: f64) -> Option<&'static str> {
    match t {
        t if t == 0.0 || (1e11..1e14).contains(&t) => None,
        t if (1e8..1e11).contains(&t) => Some(EPOCH_SECONDS),
        t if (1e14..1e17).contains(&t) => Some(EPOCH_MICROSECONDS),
        t if t >= 1e17 => Some(EPOCH_NANOSECONDS),
        _ => Some(NOT_EPOCH_TIME),
    }
}

/// The labels [`time_unit`] gives: each stays itself when normalized again.
const TIME_UNIT_LABELS: [&str; 4] = [
    EPOCH_SECONDS,
    EPOCH_MICROSECONDS,
    EPOCH_NANOSECONDS,
    NOT_EPOCH_TIME,
];

/// What to normalize: the id fields to intern, plus fields blanked to `""`.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub id_fields: &'a [&'a str],
    pub blank_fields: &'a [&'a str],
    pub removed_fields: &'a [&'a str],
    pub time_fields: &'a [&'a str],
    /// A time keeps its JSON type and its unit: a number in epoch milliseconds becomes `0`,
    /// one in another unit its label ([`time_unit`]: [`EPOCH_SECONDS`], microseconds,
    /// nanoseconds, or no epoch time), and a string `""`. So two builds that write the same
    /// field as a number and as a text differ, and so do two that write milliseconds and
    /// seconds (a client reading milliseconds shows 1970) or microseconds (a date in the
    /// 58 000s). bb's §7 zeroes either (off for bb, whose
    /// reference example turns `"createdAt": "2026"` into `0`).
    pub keep_time_type: bool,
    /// Fields whose value is the provider's own JSON (a tool's `arguments` and `result`, an
    /// extension's `payload`): an `id` or a `threadId` inside it is the tool's data, not an id
    /// the protocol mints, so it is kept verbatim (two builds that pass another document id to a
    /// tool differ). Times inside are still zeroed: a tool's clock differs run to run.
    pub opaque_fields: &'a [&'a str],
}

/// bb's provider-owned JSON values in assembled events (`jsonValue` in the thread-delta
/// schema: a tool's `args`, which the assembler names `arguments`, its `result`, an extension
/// item's `payload`).
pub const BB_PROVIDER_PAYLOADS: &[&str] = &["arguments", "args", "result", "payload"];

pub const BB_EVENTS: Rules<'static> = Rules {
    id_fields: EVENT_ID_FIELDS,
    blank_fields: &["threadId", "providerThreadId"],
    removed_fields: &["providerCheckpointId"],
    time_fields: TIME_FIELDS,
    keep_time_type: false,
    opaque_fields: &[],
};

pub const BB_ROWS: Rules<'static> = Rules {
    id_fields: ROW_ID_FIELDS,
    ..BB_EVENTS
};

/// Normalizes a whole list (consumes and returns it).
pub fn normalize_list(list: Vec<Value>, rules: Rules<'_>) -> Vec<Value> {
    let mut n = Normalizer::new(rules);
    list.into_iter().map(|v| n.normalize(v)).collect()
}

/// Incremental normalizer: feed a list's elements in order (for streaming dumps).
pub struct Normalizer<'a> {
    rules: Rules<'a>,
    table: HashMap<String, usize>,
}

impl<'a> Normalizer<'a> {
    pub fn new(rules: Rules<'a>) -> Self {
        Normalizer {
            rules,
            table: HashMap::new(),
        }
    }

    pub fn normalize(&mut self, v: Value) -> Value {
        walk(v, self.rules, &mut self.table)
    }
}

fn walk(v: Value, rules: Rules<'_>, table: &mut HashMap<String, usize>) -> Value {
    match v {
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|i| walk(i, rules, table)).collect())
        }
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                let key = k.as_str();
                if rules.removed_fields.contains(&key) {
                    continue;
                }
                let nv = if rules.opaque_fields.contains(&key) {
                    let inside = Rules {
                        id_fields: &[],
                        blank_fields: &[],
                        removed_fields: &[],
                        opaque_fields: &[],
                        ..rules
                    };
                    walk(v, inside, table)
                } else if rules.blank_fields.contains(&key) {
                    if v.is_null() {
                        v
                    } else {
                        Value::String(String::new())
                    }
                } else if rules.id_fields.contains(&key) && v.is_string() {
                    let s = v.as_str().unwrap_or_default().to_string();
                    let next = table.len() + 1;
                    let n = *table.entry(s).or_insert(next);
                    Value::String(format!("#{n}"))
                } else if rules.time_fields.contains(&key) && (v.is_number() || v.is_string()) {
                    match (&v, rules.keep_time_type) {
                        (Value::String(s), true) if TIME_UNIT_LABELS.contains(&s.as_str()) => v,
                        (Value::String(_), true) => Value::String(String::new()),
                        (Value::Number(n), true) => match n.as_f64().and_then(time_unit) {
                            Some(label) => Value::String(label.into()),
                            None => Value::from(0),
                        },
                        _ => Value::from(0),
                    }
                } else {
                    walk(v, rules, table)
                };
                out.insert(k, nv);
            }
            Value::Object(out)
        }
        other => other,
    }
}

/// What a bridge's own words hold that differs run to run although nothing changed: the clock
/// and the process it writes into a text (`"provider failed at 2026-12-07T01:02:03Z after 41 ms
/// (pid 4242, log /tmp/bridge-Xa9/log)"`). Each becomes a label that stays itself when masked
/// again: a date or date-time (ISO 8601, a zone or fraction optional) or a clock time `<time>`,
/// a 13-digit epoch-milliseconds number `<time>`, a number with a time unit (`41 ms`, `1.5s`,
/// `3 seconds`) `<duration>`, a `pid` and its number `pid <pid>`, and the first folder under
/// the temporary directory (`/tmp/`, `/var/tmp/`, macOS `/var/folders/…/T/`, `$TMPDIR`: the
/// part `mkdtemp` randomizes) `<temp>`, the rest of the path kept. Everything else in the text
/// is compared: a bridge that words its error otherwise still differs. bb's §7 blanks time
/// fields only, so bb's own parity flags such a text on every run.
///
/// Only the strings under the keys a bridge words itself are masked ([`BRIDGE_WORDED_KEYS`]:
/// an error's or a warning's `message`, a replacement's `reason`, …), at any depth. The text of
/// an answer, a tool's output or a path in an item comes from the provider, which a replay
/// plays as recorded: a time or a duration there that changes is the bridge's doing, and is
/// compared.
pub fn mask_volatile_text(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(mask_volatile_text),
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if BRIDGE_WORDED_KEYS.contains(&key.as_str()) {
                    mask_worded(value);
                } else {
                    mask_volatile_text(value);
                }
            }
        }
        _ => {}
    }
}

/// The keys whose strings are a bridge's own words ([`mask_volatile_text`]): the fields of
/// bb's error and warning deltas, `session/replaced` and `provider/recovery`, and of a
/// JSON-RPC error.
pub const BRIDGE_WORDED_KEYS: &[&str] = &[
    "message",
    "reason",
    "error",
    "errorMessage",
    "detail",
    "warning",
    "stderr",
];

/// A value a bridge words itself (under a [`BRIDGE_WORDED_KEYS`] key, or a field a model knows
/// to be one): its strings masked, an object in it walked by key again.
pub fn mask_worded(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(masked) = masked_text(s) {
                *s = masked;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask_worded),
        Value::Object(_) => mask_volatile_text(v),
        _ => {}
    }
}

/// The label of a masked time, duration, pid and temporary folder ([`mask_volatile_text`]).
pub const TEXT_TIME: &str = "<time>";
pub const TEXT_DURATION: &str = "<duration>";
pub const TEXT_PID: &str = "<pid>";
pub const TEXT_TEMP: &str = "<temp>";

fn volatile_pattern() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let mut temp = String::from(
            r"(?:/private)?/(?:tmp|var/tmp)/[^/\s]+|(?:/private)?/var/folders/[^/\s]+/[^/\s]+/T/[^/\s]+",
        );
        if let Some(dir) = std::env::var_os("TMPDIR")
            .and_then(|d| d.into_string().ok())
            .map(|d| d.trim_end_matches('/').to_string())
            .filter(|d| d.len() > 1 && !d.contains(char::is_whitespace))
        {
            temp.push_str(&format!("|{}/[^/\\s]+", regex::escape(&dir)));
        }
        let pattern = format!(
            concat!(
                r"(?P<time>\b\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:[.,]\d+)?)?(?:Z|[+-]\d{{2}}(?::?\d{{2}})?)?)?",
                r"|\b\d{{1,2}}:\d{{2}}:\d{{2}}(?:[.,]\d+)?\b|\b1\d{{12}}\b)",
                r"|(?P<duration>\b\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|secs?|seconds?|milliseconds?|mins?|minutes?)\b)",
                r"|(?P<pid>(?i:\bpid\b)[\s:=#]*\d+)",
                r"|(?P<temp>{})",
            ),
            temp
        );
        regex::Regex::new(&pattern).expect("the volatile-text pattern compiles")
    })
}

/// `s` with its volatile words masked, `None` when it holds none.
fn masked_text(s: &str) -> Option<String> {
    let re = volatile_pattern();
    if !re.is_match(s) {
        return None;
    }
    Some(
        re.replace_all(s, |c: &regex::Captures<'_>| {
            if c.name("time").is_some() {
                TEXT_TIME.to_string()
            } else if c.name("duration").is_some() {
                TEXT_DURATION.to_string()
            } else if c.name("pid").is_some() {
                format!("pid {TEXT_PID}")
            } else {
                TEXT_TEMP.to_string()
            }
        })
        .into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_the_reference_example() {
        let before = json!({"type":"item/started","threadId":"x","providerThreadId":"p","scope":{"kind":"turn","turnId":"da3f9c0a1b-t1"},"item":{"type":"fileRead","id":"da3f9c0a1b-i4","path":"/w/README.md","status":"pending"},"providerCheckpointId":"c","createdAt":"2026","nested":{"ts":5,"id":"da3f9c0a1b-t1"}});
        let after = normalize_list(vec![before], BB_EVENTS);
        assert_eq!(
            crate::jsjson::to_string(&after[0]),
            r##"{"type":"item/started","threadId":"","providerThreadId":"","scope":{"kind":"turn","turnId":"#1"},"item":{"type":"fileRead","id":"#2","path":"/w/README.md","status":"pending"},"createdAt":0,"nested":{"ts":0,"id":"#1"}}"##
        );
    }

    #[test]
    fn normalizing_twice_changes_nothing_more_than_renumbering() {
        let list = vec![
            json!({"id": "a", "threadId": null}),
            json!({"id": "b", "itemId": "a"}),
        ];
        let once = normalize_list(list, BB_EVENTS);
        let twice = normalize_list(once.clone(), BB_EVENTS);
        assert_eq!(once, twice);
        assert_eq!(once[0]["threadId"], Value::Null);
    }

    #[test]
    fn a_time_keeps_its_type_only_where_the_rules_say() {
        let list = || {
            vec![
                json!({"ts": 5}),
                json!({"ts": "2026-12-04T10:00:00Z"}),
                json!({"ts": 1_796_400_000_000_i64}),
                json!({"ts": 1_796_400_000_i64}),
                json!({"ts": 1_796_400_000.25}),
                json!({"ts": 1_796_400_000_000.5}),
                json!({"ts": 1_796_400_000_000_000_i64}),
                json!({"ts": 1_796_400_000_000_000_000_i64}),
                json!({"ts": 0}),
                json!({"ts": -3}),
            ]
        };
        let typed = Rules {
            keep_time_type: true,
            time_fields: &["ts"],
            ..BB_EVENTS
        };
        let t = normalize_list(list(), typed);
        let ts: Vec<Value> = t.iter().map(|e| e["ts"].clone()).collect();
        assert_eq!(
            ts,
            [
                json!(NOT_EPOCH_TIME),
                json!(""),
                json!(0),
                json!(EPOCH_SECONDS),
                json!(EPOCH_SECONDS),
                json!(0),
                json!(EPOCH_MICROSECONDS),
                json!(EPOCH_NANOSECONDS),
                json!(0),
                json!(NOT_EPOCH_TIME),
            ]
        );
        // Normalized again, each stays what it became.
        assert_eq!(normalize_list(t.clone(), typed), t);
        let b = normalize_list(
            list(),
            Rules {
                time_fields: &["ts"],
                ..BB_EVENTS
            },
        );
        assert_eq!(b[0], b[1]);
    }

    #[test]
    fn a_bridges_clock_and_process_in_its_words_are_masked_and_the_rest_kept() {
        let mask = |s: &str| {
            let mut v = json!({ "message": s, "deep": [{ "error": { "message": s } }], "text": s });
            mask_volatile_text(&mut v);
            assert_eq!(v["message"], v["deep"][0]["error"]["message"]);
            // An answer's text is the provider's, played as recorded: compared as it is.
            assert_eq!(v["text"], s);
            v["message"].as_str().unwrap().to_string()
        };
        let a = mask(
            "provider failed at 2026-12-07T01:02:03Z after 41 ms (pid 4242, log /tmp/bb-Xa9/err.log)",
        );
        let b = mask(
            "provider failed at 2027-01-31T23:59:59.123+01:00 after 1.5s (pid=7, log /tmp/bb-Q77/err.log)",
        );
        assert_eq!(
            a,
            "provider failed at <time> after <duration> (pid <pid>, log <temp>/err.log)"
        );
        assert_eq!(a, b);
        // Masked again, each label stays itself.
        assert_eq!(mask(&a), a);
        // Another wording, another file, another unit of work: still different.
        assert_ne!(
            a,
            mask(
                "provider crashed at 2026-12-07T01:02:03Z after 41 ms (pid 4242, log /tmp/bb-Xa9/err.log)"
            )
        );
        assert_ne!(
            a,
            mask(
                "provider failed at 2026-12-07T01:02:03Z after 41 ms (pid 4242, log /tmp/bb-Xa9/out.log)"
            )
        );
        assert_eq!(
            mask("at 01:02:03.5 on 2026-12-07, 1796574126521"),
            "at <time> on <time>, <time>"
        );
        assert_eq!(
            mask("took 3 seconds, 250ms, 12us"),
            "took <duration>, <duration>, <duration>"
        );
        // Words that only look alike are kept.
        for kept in [
            "10 sections",
            "3 items",
            "version 1.2.3",
            "port 8080",
            "#12",
            "rapid 5",
            "/w/README.md",
        ] {
            assert_eq!(mask(kept), kept);
        }
        let mut n = json!(5);
        mask_volatile_text(&mut n);
        assert_eq!(n, json!(5));
    }
}

//! Validation of `thread/delta` params against grammar v3 (reference §11).
//!
//! Validation is bb's (its `threadDeltaNotificationParamsSchema`, written down as the JSON Schema
//! `rules/schema/bb-thread-delta-params.schema.json`): formats (`clientRequestId`, extension
//! kinds, key parts), enums (turn and item statuses, plan-step statuses, categories), required
//! and nullable fields. It is all-or-nothing per message, as bb's is: any error makes the whole
//! message invalid and it assembles into nothing. Unknown fields inside a delta are tolerated
//! (bb strips them; they never reach events, which are built from the known fields only).

use crate::jsonref::JsonView;
use serde_json::Value;
use std::sync::LazyLock;

/// U+001F, the assembler's key separator; key parts must not contain it.
pub const KEY_SEPARATOR: char = '\u{1f}';

pub const TURN_STATUSES: &[&str] = &["completed", "failed", "interrupted"];
pub const ITEM_STATUSES: &[&str] = &["pending", "completed", "failed", "interrupted"];
pub const PLAN_STEP_STATUSES: &[&str] = &["pending", "active", "completed", "failed"];
pub const TEXT_CHANNELS: &[&str] = &["agentMessage", "reasoningSummary", "reasoningText", "plan"];
pub const OUTPUT_CHANNELS: &[&str] = &["command", "fileChange"];
pub const ITEM_SHAPES: &[&str] = &[
    "command",
    "fileChange",
    "tool",
    "compaction",
    "agentMessage",
    "reasoning",
    "plan",
    "webSearch",
    "webFetch",
    "imageView",
    "imageGeneration",
    "backgroundTask",
    "fileRead",
    "search",
    "delegation",
    "planSteps",
    "extension",
];

/// Every delta kind of grammar v3.
pub const KINDS: &[&str] = &[
    "input.accepted",
    "input.provider",
    "turn.open",
    "turn.boundary",
    "item.open",
    "item.close",
    "item.progress",
    "item.textDelta",
    "item.textClose",
    "item.outputDelta",
    "command.outputSnapshot",
    "usage",
    "contextWindow",
    "context.compacted",
    "context.cleared",
    "turn.diff",
    "thread.started",
    "thread.identity",
    "thread.name",
    "extension.state",
    "provider.rateLimits",
    "provider.error",
    "provider.modelFallback",
    "provider.warning",
    "unhandled",
    "session.ended",
    "session.reset",
];

/// The compiled `rules/schema/bb-thread-delta-params.schema.json`: the general validator,
/// which names what is wrong.
pub static PARAMS_SCHEMA: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(super::conformance::schema::THREAD_DELTA_PARAMS)
        .expect("embedded schema is JSON");
    jsonschema::validator_for(&v).expect("embedded schema compiles")
});

/// The same schema compiled for a fast yes/no (every delta line of every cell goes through
/// it); `tests/delta_validator.rs` holds it to [`PARAMS_SCHEMA`]'s verdicts.
pub static PARAMS_FAST: LazyLock<super::schema_fast::FastSchema> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(super::conformance::schema::THREAD_DELTA_PARAMS)
        .expect("embedded schema is JSON");
    super::schema_fast::FastSchema::compile(&v).expect("embedded schema compiles")
});

/// Takes the well-formed `turn.mainRun { state: idle | running }` deltas out of `thread/delta`
/// params and says how many. The protocol text gives a bridge this delta for a held turn
/// ("Held turns"), but bb's grammar-v3 validation rejects the kind and refuses the whole
/// message; callers that follow the protocol text (check bb, replay, parity, outside
/// `--kit-only`) take it out before validating, and this grammar has no event for it.
pub fn take_main_runs(params: &mut serde_json::Value) -> usize {
    let Some(deltas) = params
        .get_mut("deltas")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return 0;
    };
    let before = deltas.len();
    deltas.retain(|d| {
        !(d["kind"] == "turn.mainRun" && matches!(d["state"].as_str(), Some("idle" | "running")))
    });
    before - deltas.len()
}

/// Why a `turn.mainRun` delta that [`take_main_runs`] left in place is invalid, when the
/// schema's `error` is about one: its kind is the protocol's ("Held turns"), so the fault is its
/// state, not the kind bb's grammar-v3 schema names. For callers that accept held turns, in
/// place of the schema's error.
pub fn held_turn_fault(params: &serde_json::Value, error: &str) -> Option<String> {
    if !error.contains("(turn.mainRun)") {
        return None;
    }
    let deltas = params.get("deltas")?.as_array()?;
    let (i, d) = deltas
        .iter()
        .enumerate()
        .find(|(_, d)| d["kind"] == "turn.mainRun")?;
    Some(format!(
        "deltas[{i}] (turn.mainRun): state {}, want \"idle\" or \"running\" (the protocol's held turns; the kind itself is accepted)",
        d.get("state")
            .map_or_else(|| "missing".to_string(), |s| s.to_string())
    ))
}

/// Validates `thread/delta` params as bb's runtime does (the JSON Schema in
/// `rules/schema/bb-thread-delta-params.schema.json`); on success returns the thread id and
/// the deltas. The error names the delta (`deltas[i] (kind)`), the field path inside it and
/// what was allowed.
pub fn validate_params<J: JsonView>(params: &J) -> Result<(&str, &[J]), String> {
    if !PARAMS_FAST.is_valid(params) {
        // Rare: the general validator names the first error.
        let params = params.to_value();
        let e = PARAMS_SCHEMA
            .iter_errors(&params)
            .next()
            .map(|e| describe(&params, &e))
            .unwrap_or_else(|| "invalid params".into());
        return Err(e);
    }
    let thread_id = params["threadId"].as_str().expect("schema: a string");
    let deltas = params["deltas"].as_array().expect("schema: an array");
    for (i, d) in deltas.iter().enumerate() {
        // JSON Schema counts code points; bb's limit is JavaScript string length (UTF-16).
        if let Some(detail) = d["presentation"]["detail"].as_str()
            && detail.encode_utf16().count() > 280
        {
            let kind = d["kind"].as_str().unwrap_or("?");
            return Err(format!(
                "deltas[{i}] ({kind}): presentation.detail: {} UTF-16 units, at most 280 allowed",
                detail.encode_utf16().count()
            ));
        }
    }
    Ok((thread_id, deltas))
}

/// One schema error as `deltas[i] (kind): field.path: what was wrong`.
pub fn describe(instance: &Value, e: &jsonschema::ValidationError<'_>) -> String {
    let path: Vec<String> = e
        .instance_path()
        .to_string()
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (prefix, rest) = match path.as_slice() {
        [d, i, rest @ ..] if d == "deltas" => {
            let kind = i
                .parse::<usize>()
                .ok()
                .and_then(|i| instance["deltas"][i]["kind"].as_str())
                .unwrap_or("?");
            (format!("deltas[{i}] ({kind}): "), rest.to_vec())
        }
        other => (String::new(), other.to_vec()),
    };
    let field = rest.join(".");
    let at = |msg: String| {
        if field.is_empty() {
            format!("{prefix}{msg}")
        } else {
            format!("{prefix}{field}: {msg}")
        }
    };
    // The protocol text says only "a raw provider event"; bb's schema (the runtime's) types it
    // as a JSON-RPC message, which a bridge for a non-JSON-RPC provider may not expect.
    let raw_note = if rest.last().is_some_and(|r| r == "raw") {
        " (bb's runtime validates raw as its provider's JSON-RPC message: {jsonrpc: \"2.0\", method, id?, params?}; wrap another provider's event in one)"
    } else {
        ""
    };
    format!("{}{raw_note}", describe_kind(e, &prefix, &field, &at))
}

fn describe_kind(
    e: &jsonschema::ValidationError<'_>,
    prefix: &str,
    field: &str,
    at: &dyn Fn(String) -> String,
) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    match e.kind() {
        K::Required { property } => {
            let p = property.as_str().unwrap_or("?");
            if field.is_empty() {
                format!("{prefix}missing {p}")
            } else {
                format!("{prefix}missing {field}.{p}")
            }
        }
        K::Enum { options } => at(format!(
            "{} is not allowed; allowed values: {}",
            e.instance(),
            options
        )),
        K::Constant { expected_value } => at(format!(
            "{} is not allowed; the only allowed value is {expected_value}",
            e.instance()
        )),
        K::Pattern { pattern } => at(format!(
            "{} does not have the required format {pattern}",
            e.instance()
        )),
        K::Not { .. } => at(format!(
            "{} must not contain U+001F (the assembler's key separator)",
            e.instance()
        )),
        _ => at(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_valid_and_names_the_bad_delta() {
        let ok = json!({"threadId":"t","deltas":[{"kind":"turn.open"},{"kind":"item.textDelta","key":{"channel":"assistant"},"channel":"agentMessage","text":"hi","extra":1}]});
        assert!(validate_params(&ok).is_ok());
        let bad = json!({"threadId":"t","deltas":[{"kind":"turn.open"},{"kind":"item.close","key":{},"item":{"type":"command","command":"ls","cwd":"/"}}]});
        let err = validate_params(&bad).unwrap_err();
        assert_eq!(err, "deltas[1] (item.close): missing status");
        let unknown = json!({"threadId":"t","deltas":[{"kind":"turn.mainRun","state":"idle"}]});
        let e = validate_params(&unknown).unwrap_err();
        assert!(
            e.starts_with("deltas[0] (turn.mainRun): kind: \"turn.mainRun\" is not allowed; allowed values: [\"input.accepted\""),
            "{e}"
        );
        // A raw provider event that is not a JSON-RPC message: the error says what bb wants.
        let raw = json!({"threadId":"t","deltas":[{"kind":"unhandled","raw":{"type":"x"},"rawType":"x","vouchedTurn":false}]});
        let e = validate_params(&raw).unwrap_err();
        assert!(
            e.starts_with("deltas[0] (unhandled): missing raw.jsonrpc (bb's runtime validates raw as its provider's JSON-RPC message"),
            "{e}"
        );
        let sep =
            json!({"threadId":"t","deltas":[{"kind":"turn.open","providerTurnId":"a\u{1f}b"}]});
        assert!(validate_params(&sep).is_err());
        assert!(validate_params(&json!({"threadId":"","deltas":[]})).is_err());
    }

    /// bb's formats and enums, named with the field path and the allowed values.
    #[test]
    fn bb_strict_formats_and_enums() {
        let e = validate_params(&json!({"threadId":"t","deltas":[{"kind":"input.accepted","clientRequestId":"creq_1"}]})).unwrap_err();
        assert_eq!(
            e,
            "deltas[0] (input.accepted): clientRequestId: \"creq_1\" does not have the required format ^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}$"
        );
        assert!(validate_params(&json!({"threadId":"t","deltas":[{"kind":"input.accepted","clientRequestId":"creq_2222222223"}]})).is_ok());
        let plan = |status: &str| json!({"threadId":"t","deltas":[{"kind":"item.open","key":{"providerItemId":"p"},"item":{"type":"planSteps","steps":[{"step":"a","status":"completed"},{"step":"b","status":status}]}}]});
        let e = validate_params(&plan("inProgress")).unwrap_err();
        assert_eq!(
            e,
            "deltas[0] (item.open): item.steps.1.status: \"inProgress\" is not allowed; allowed values: [\"pending\",\"active\",\"completed\",\"failed\"]"
        );
        assert!(validate_params(&plan("active")).is_ok());
        for (bad, needle) in [
            (
                json!({"kind":"turn.boundary","status":"cancelled"}),
                "status: \"cancelled\" is not allowed",
            ),
            (
                json!({"kind":"item.close","key":{},"status":"declined","item":{"type":"compaction"}}),
                "status: \"declined\"",
            ),
            (
                json!({"kind":"extension.state","extensionKind":"Echo/Mood","payload":{}}),
                "extensionKind",
            ),
            (
                json!({"kind":"provider.warning","category":"loud"}),
                "category",
            ),
            (
                json!({"kind":"unhandled","raw":{"method":"x"},"rawType":"x","vouchedTurn":false}),
                "missing raw.jsonrpc",
            ),
            (
                json!({"kind":"item.open","key":{},"item":{"type":"tool","tool":"t"},"presentation":{"icon":{"glyph":"g"}}}),
                "missing presentation.label",
            ),
            (
                json!({"kind":"item.open","key":{},"item":{"type":"extension","kind":"a/b","payload":1}}),
                "missing presentation",
            ),
        ] {
            let e = validate_params(&json!({"threadId":"t","deltas":[bad]})).unwrap_err();
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
        let long = "😀".repeat(141);
        let e = validate_params(&json!({"threadId":"t","deltas":[{"kind":"item.open","key":{},"item":{"type":"tool","tool":"t"},"presentation":{"label":{"pending":"a","completed":"b"},"icon":{"glyph":"g"},"detail":long}}]})).unwrap_err();
        assert!(e.contains("282 UTF-16 units"), "{e}");
    }
}

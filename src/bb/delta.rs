//! Validation of `thread/delta` params against grammar v3 (reference §11).
//!
//! Validation is all-or-nothing per message, as bb's schema is: an unknown `kind`, a missing
//! required field or a wrong type makes the whole message invalid and it assembles into nothing.
//! Unknown fields inside a delta are tolerated (and never reach events, which are built from the
//! known fields only).

use serde_json::{Map, Value};

/// U+001F, the assembler's key separator; key parts must not contain it.
pub const KEY_SEPARATOR: char = '\u{1f}';

pub const TURN_STATUSES: &[&str] = &["completed", "failed", "interrupted", "cancelled"];
pub const ITEM_STATUSES: &[&str] = &[
    "pending",
    "completed",
    "failed",
    "interrupted",
    "declined",
    "cancelled",
];
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

type R = Result<(), String>;

/// Validates `thread/delta` params; on success returns the thread id and the deltas.
pub fn validate_params(params: &Value) -> Result<(&str, &Vec<Value>), String> {
    let obj = params.as_object().ok_or("params must be an object")?;
    let thread_id = match obj.get("threadId") {
        Some(Value::String(s)) if !s.is_empty() => s.as_str(),
        Some(_) => return Err("threadId must be a non-empty string".into()),
        None => return Err("missing threadId".into()),
    };
    let deltas = match obj.get("deltas") {
        Some(Value::Array(a)) => a,
        _ => return Err("deltas must be an array".into()),
    };
    for (i, d) in deltas.iter().enumerate() {
        validate_delta(d).map_err(|e| {
            let kind = d.get("kind").and_then(Value::as_str).unwrap_or("?");
            format!("deltas[{i}] ({kind}): {e}")
        })?;
    }
    Ok((thread_id, deltas))
}

fn validate_delta(d: &Value) -> R {
    let o = d.as_object().ok_or("a delta must be an object")?;
    let kind = o
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("missing kind")?;
    match kind {
        "input.accepted" => {
            req_str(o, "clientRequestId")?;
            opt_key_part(o, "providerTurnId")
        }
        "input.provider" => {
            req_nonempty(o, "text")?;
            opt_key_part(o, "parentRef")
        }
        "turn.open" => {
            opt_key_part(o, "providerTurnId")?;
            opt_key_part(o, "parentRef")
        }
        "turn.boundary" => {
            req_enum(o, "status", TURN_STATUSES)?;
            if let Some(e) = o.get("error") {
                let e = e.as_object().ok_or("error must be an object")?;
                req_str(e, "message")?;
            }
            opt_nonempty(o, "providerCheckpointId")?;
            opt_bool(o, "claimIfIdle")?;
            opt_key_part(o, "providerTurnId")
        }
        "item.open" => {
            key(o)?;
            let shape = item_shape(o.get("item").ok_or("missing item")?)?;
            if let Some(p) = o.get("presentation") {
                presentation(p)?;
            } else if shape == "extension" {
                return Err("an extension item requires presentation".into());
            }
            opt_enum(o, "attach", &["open", "currentOrLast"])?;
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "item.close" => {
            key(o)?;
            req_enum(o, "status", ITEM_STATUSES)?;
            opt_str(o, "resultText")?;
            opt_num(o, "exitCode")?;
            opt_str(o, "aggregatedOutput")?;
            opt_enum(o, "approvalStatus", &["denied"])?;
            let shape = item_shape(o.get("item").ok_or("missing item")?)?;
            if let Some(p) = o.get("presentation") {
                presentation(p)?;
            } else if shape == "extension" {
                return Err("an extension item requires presentation".into());
            }
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "item.progress" => {
            key(o)?;
            opt_str(o, "message")?;
            if let Some(s) = o.get("snapshot") {
                let shape = item_shape(s)?;
                if shape != "backgroundTask" && shape != "delegation" {
                    return Err("snapshot must be a backgroundTask or delegation shape".into());
                }
            }
            opt_bool(o, "flush")?;
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "item.textDelta" => {
            key(o)?;
            req_enum(o, "channel", TEXT_CHANNELS)?;
            req_str(o, "text")?;
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "item.textClose" => {
            key(o)?;
            req_enum(o, "channel", TEXT_CHANNELS)?;
            opt_str(o, "text")?;
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "item.outputDelta" => {
            key(o)?;
            req_enum(o, "channel", OUTPUT_CHANNELS)?;
            req_str(o, "text")?;
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "command.outputSnapshot" => {
            key(o)?;
            req_str(o, "text")?;
            fallback(o)
        }
        "usage" => {
            req_obj(o, "total")?;
            req_obj(o, "last")?;
            req_num_or_null(o, "modelContextWindow")?;
            opt_key_part(o, "providerTurnId")
        }
        "contextWindow" => {
            if let Some(s) = o.get("snapshot")
                && !s.is_object()
            {
                return Err("snapshot must be an object".into());
            }
            req_num_or_null(o, "used")?;
            if o.contains_key("size") {
                req_num_or_null(o, "size")?;
            }
            req_bool(o, "estimated")?;
            req_enum(o, "attach", &["open", "currentOrLast"])?;
            opt_key_part(o, "providerTurnId")
        }
        "context.compacted" => {
            opt_key_part(o, "providerTurnId")?;
            fallback(o)
        }
        "context.cleared" | "thread.started" | "session.ended" | "session.reset" => Ok(()),
        "turn.diff" => {
            req_str(o, "diff")?;
            opt_key_part(o, "providerTurnId")
        }
        "thread.identity" => req_nonempty(o, "providerThreadId"),
        "thread.name" => req_nonempty(o, "name"),
        "extension.state" => {
            namespaced(o, "extensionKind")?;
            if !o.contains_key("payload") {
                return Err("missing payload".into());
            }
            Ok(())
        }
        "provider.rateLimits" => {
            if !o.contains_key("rateLimits") {
                return Err("missing rateLimits".into());
            }
            Ok(())
        }
        "provider.error" => {
            req_str(o, "message")?;
            opt_str(o, "detail")?;
            opt_bool(o, "willRetry")?;
            opt_str(o, "category")?;
            opt_bool(o, "settlesTurn")?;
            opt_bool(o, "threadScoped")?;
            opt_key_part(o, "providerTurnId")
        }
        "provider.modelFallback" => {
            req_nonempty(o, "originalModel")?;
            req_nonempty(o, "fallbackModel")?;
            req_enum(o, "reason", &["refusal", "provider"])?;
            req_str(o, "message")
        }
        "provider.warning" => {
            opt_str(o, "summary")?;
            opt_str(o, "details")?;
            opt_str(o, "category")?;
            opt_bool(o, "vouchedTurn")
        }
        "unhandled" => {
            if !o.contains_key("raw") {
                return Err("missing raw".into());
            }
            req_str(o, "rawType")?;
            req_bool(o, "vouchedTurn")?;
            opt_bool(o, "onlyIfNoTurn")?;
            opt_key_part(o, "parentRef")?;
            opt_key_part(o, "providerTurnId")
        }
        other => Err(format!("unknown kind {other:?}")),
    }
}

fn key(o: &Map<String, Value>) -> R {
    let k = o
        .get("key")
        .and_then(Value::as_object)
        .ok_or("key must be an object")?;
    for part in ["providerItemId", "channel", "parentRef"] {
        opt_key_part(k, part)?;
    }
    Ok(())
}

fn fallback(o: &Map<String, Value>) -> R {
    if let Some(f) = o.get("noTurnFallback") {
        let f = f.as_object().ok_or("noTurnFallback must be an object")?;
        if !f.contains_key("raw") {
            return Err("noTurnFallback.raw missing".into());
        }
        req_str(f, "rawType")?;
    }
    Ok(())
}

fn presentation(p: &Value) -> R {
    let p = p.as_object().ok_or("presentation must be an object")?;
    if let Some(d) = p.get("detail") {
        let d = d.as_str().ok_or("presentation.detail must be a string")?;
        if d.encode_utf16().count() > 280 {
            return Err("presentation.detail exceeds 280 characters".into());
        }
    }
    if let Some(icon) = p.get("icon") {
        let icon = icon
            .as_object()
            .ok_or("presentation.icon must be an object")?;
        req_str(icon, "glyph")?;
    }
    opt_str(p, "title")?;
    opt_bool(p, "suppress")
}

/// Validates an item shape; returns its type.
pub fn item_shape(item: &Value) -> Result<&str, String> {
    let o = item.as_object().ok_or("item must be an object")?;
    let ty = o
        .get("type")
        .and_then(Value::as_str)
        .ok_or("item.type missing")?;
    let r: R = match ty {
        "command" => req_str(o, "command").and(req_str(o, "cwd")),
        "fileChange" => {
            let changes = o
                .get("changes")
                .and_then(Value::as_array)
                .ok_or("fileChange.changes must be an array")?;
            for c in changes {
                let c = c.as_object().ok_or("a change must be an object")?;
                req_str(c, "path")?;
                req_enum(c, "kind", &["add", "update", "delete"])?;
            }
            Ok(())
        }
        "tool" => req_str(o, "tool").and(opt_str(o, "server")),
        "compaction" => Ok(()),
        "agentMessage" => req_str(o, "text"),
        "reasoning" => str_array(o, "summary").and(str_array(o, "content")),
        "plan" => req_str(o, "text"),
        "webSearch" => {
            let q = o
                .get("queries")
                .and_then(Value::as_array)
                .ok_or("webSearch.queries must be an array")?;
            if q.is_empty() {
                Err("webSearch.queries needs at least one query".into())
            } else {
                Ok(())
            }
        }
        "webFetch" => req_str(o, "url").and(str_or_null(o, "pattern")),
        "imageView" => req_str(o, "path"),
        "imageGeneration" => str_or_null(o, "prompt")
            .and(str_or_null(o, "path"))
            .and(str_or_null(o, "error"))
            .and(req_bool(o, "transparentBackground")),
        "backgroundTask" => req_nonempty(o, "familyId")
            .and(req_str(o, "taskType"))
            .and(req_str(o, "description"))
            .and(req_str(o, "status"))
            .and(req_str(o, "taskStatus"))
            .and(req_bool(o, "skipTranscript")),
        "fileRead" => req_str(o, "path"),
        "search" => req_enum(o, "mode", &["content", "path", "list"]).and(req_str(o, "query")),
        "delegation" => req_key_part(o, "childRef")
            .and(req_str(o, "label"))
            .and(req_bool(o, "background")),
        "planSteps" => o
            .get("steps")
            .and_then(Value::as_array)
            .map(|_| ())
            .ok_or_else(|| "planSteps.steps must be an array".to_string()),
        "extension" => {
            namespaced(o, "kind")?;
            if o.contains_key("payload") {
                Ok(())
            } else {
                Err("extension.payload missing".into())
            }
        }
        other => Err(format!("unknown item type {other:?}")),
    };
    r.map_err(|e| format!("item {ty}: {e}"))?;
    Ok(ty)
}

fn namespaced(o: &Map<String, Value>, f: &str) -> R {
    let s = req_string(o, f)?;
    match s.split_once('/') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok(()),
        _ => Err(format!("{f} must be <pluginId>/<name>")),
    }
}

fn req_string<'a>(o: &'a Map<String, Value>, f: &str) -> Result<&'a str, String> {
    match o.get(f) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("{f} must be a string")),
        None => Err(format!("missing {f}")),
    }
}
fn req_str(o: &Map<String, Value>, f: &str) -> R {
    req_string(o, f).map(|_| ())
}
fn req_nonempty(o: &Map<String, Value>, f: &str) -> R {
    if req_string(o, f)?.is_empty() {
        Err(format!("{f} must not be empty"))
    } else {
        Ok(())
    }
}
fn opt_str(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        None | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(format!("{f} must be a string")),
    }
}
fn opt_nonempty(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        None => Ok(()),
        Some(Value::String(s)) if !s.is_empty() => Ok(()),
        Some(_) => Err(format!("{f} must be a non-empty string")),
    }
}
fn str_or_null(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        Some(Value::String(_)) | Some(Value::Null) => Ok(()),
        Some(_) => Err(format!("{f} must be a string or null")),
        None => Err(format!("missing {f}")),
    }
}
fn str_array(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(()),
        _ => Err(format!("{f} must be an array of strings")),
    }
}
fn opt_bool(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(format!("{f} must be a boolean")),
    }
}
fn req_bool(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(format!("{f} must be a boolean")),
        None => Err(format!("missing {f}")),
    }
}
fn opt_num(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        None | Some(Value::Number(_)) => Ok(()),
        Some(_) => Err(format!("{f} must be a number")),
    }
}
fn req_num_or_null(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        Some(Value::Number(_)) | Some(Value::Null) => Ok(()),
        Some(_) => Err(format!("{f} must be a number or null")),
        None => Err(format!("missing {f}")),
    }
}
fn req_obj(o: &Map<String, Value>, f: &str) -> R {
    match o.get(f) {
        Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(format!("{f} must be an object")),
        None => Err(format!("missing {f}")),
    }
}
fn req_enum(o: &Map<String, Value>, f: &str, allowed: &[&str]) -> R {
    let s = req_string(o, f)?;
    if allowed.contains(&s) {
        Ok(())
    } else {
        Err(format!("{f} must be one of {allowed:?}, not {s:?}"))
    }
}
fn opt_enum(o: &Map<String, Value>, f: &str, allowed: &[&str]) -> R {
    if o.contains_key(f) {
        req_enum(o, f, allowed)
    } else {
        Ok(())
    }
}
fn req_key_part(o: &Map<String, Value>, f: &str) -> R {
    let s = req_string(o, f)?;
    if s.is_empty() || s.contains(KEY_SEPARATOR) {
        Err(format!("{f} must be a non-empty string without U+001F"))
    } else {
        Ok(())
    }
}
fn opt_key_part(o: &Map<String, Value>, f: &str) -> R {
    if o.contains_key(f) {
        req_key_part(o, f)
    } else {
        Ok(())
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
        assert!(
            validate_params(&unknown)
                .unwrap_err()
                .contains("unknown kind")
        );
        let sep =
            json!({"threadId":"t","deltas":[{"kind":"turn.open","providerTurnId":"a\u{1f}b"}]});
        assert!(validate_params(&sep).is_err());
        assert!(validate_params(&json!({"threadId":"","deltas":[]})).is_err());
    }
}

//! bb: `thread/delta` validation (`src/bb/delta.rs`, bb's JSON Schema) and the JSON-RPC
//! helpers the player and provider double classify lines with (`src/bb/msg.rs`).

use super::{config, json, text};
use bridgewire::bb::delta::{KINDS, validate_params};
use bridgewire::bb::msg::{Kind, classify_line, id_text};
use bridgewire::rpc_scan::scan;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Delta-shaped objects: a real kind and fields drawn from the schema's names, each with a
/// value of a plausible or arbitrary type.
fn delta() -> impl Strategy<Value = Value> {
    let field = prop::sample::select(vec![
        "itemKey",
        "itemShape",
        "itemStatus",
        "turnStatus",
        "channel",
        "delta",
        "text",
        "status",
        "clientRequestId",
        "presentation",
        "usage",
        "providerId",
        "reason",
        "extensionKind",
        "state",
        "planStep",
        "steps",
        "keyPart",
        "id",
        "snapshot",
        "message",
        "model",
    ]);
    let value = prop_oneof![
        4 => json(2),
        2 => prop::sample::select(vec!["completed", "failed", "interrupted", "pending", "active",
            "agentMessage", "command", "plan", "tool", "x\u{1f}y"]).prop_map(|s| json!(s)),
        1 => "[a-z]{1,8}:[a-z0-9]{1,8}".prop_map(|s| json!(s)),
        1 => text(300).prop_map(|t| json!({"detail": t, "title": "t"})),
    ];
    (
        prop::sample::select(KINDS.to_vec()),
        prop::collection::vec((field, value), 0..6),
    )
        .prop_map(|(kind, fields)| {
            let mut m = Map::new();
            m.insert("kind".into(), json!(kind));
            for (k, v) in fields {
                m.insert(k.into(), v);
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(config())]

    /// Any params: valid or one named error (bounded), never a panic; what passes has a string
    /// `threadId` and the deltas it was given.
    #[test]
    fn delta_validation_is_total(params in prop_oneof![
        json(3),
        (prop_oneof![text(12).prop_map(Value::String), json(1)],
         prop::collection::vec(delta(), 0..4))
            .prop_map(|(t, d)| json!({"threadId": t, "deltas": d})),
    ]) {
        match validate_params(&params) {
            Ok((thread, deltas)) => {
                prop_assert_eq!(Some(thread), params["threadId"].as_str());
                prop_assert_eq!(Some(deltas), params["deltas"].as_array().map(Vec::as_slice));
            }
            Err(e) => prop_assert!(e.len() < 4096, "an error of {} bytes", e.len()),
        }
    }

    /// Any line: the player's classification never panics, and on valid JSON it agrees with
    /// the recorder's scan about requests, responses and notifications.
    #[test]
    fn message_classification_agrees_with_the_scan(line in prop_oneof![
        text(60),
        json(3).prop_map(|v| v.to_string()),
        (prop::option::of(prop_oneof![text(6).prop_map(Value::String), any::<i32>().prop_map(Value::from), json(1)]),
         prop::option::of(prop_oneof![text(6).prop_map(Value::String), json(1)]))
            .prop_map(|(id, method)| {
                let mut m = Map::new();
                if let Some(id) = id { m.insert("id".into(), id); }
                if let Some(method) = method { m.insert("method".into(), method); }
                Value::Object(m).to_string()
            }),
    ]) {
        let (obj, kind) = classify_line(&line);
        if let Kind::Request { id, .. } | Kind::Response { id } = &kind {
            let _ = id_text(id);
        }
        if obj.is_some()
            && let Some(info) = scan(line.as_bytes())
        {
            match &kind {
                Kind::Request { id, method } => {
                    prop_assert!(info.is_request(), "{}", line);
                    prop_assert_eq!(info.method.as_deref(), Some(method.as_str()));
                    let scanned = info.id_key.as_deref().unwrap();
                    let text = id_text(id).unwrap();
                    prop_assert!(scanned.ends_with(&text), "{} vs {}", scanned, text);
                }
                // A string method with a non-string/number id: a notification to both.
                Kind::Notification { .. } => prop_assert_eq!(
                    info.method.as_deref(),
                    obj.as_ref().unwrap().get("method").and_then(Value::as_str),
                    "{}",
                    line
                ),
                _ => {}
            }
        }
    }
}

/// `record bb`'s line splitter (`src/bb/recorder.rs`): the bytes a bridge or runtime writes,
/// in reads of any size.
mod line_splitter {
    use super::super::{bytes, config};
    use bridgewire::bb::recorder::{LineSplitter, Piece};
    use proptest::prelude::*;

    fn split(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
        let mut sp = LineSplitter::default();
        let mut lines = Vec::new();
        for c in chunks {
            sp.feed(c, |p| match p {
                Piece::Line(l) => lines.push(l.to_vec()),
                Piece::Oversized(n) => panic!("a line of {n} bytes is not over 64 MiB"),
            });
        }
        (lines, sp.finish())
    }

    proptest! {
        #![proptest_config(config())]

        /// Any stream cut into any reads gives the lines of the whole stream (`\n` ends a
        /// line, one `\r` before it is dropped, the unterminated tail comes last, as it came).
        #[test]
        fn lines_do_not_depend_on_how_reads_split_them(
            stream in prop_oneof![bytes(600), prop::collection::vec(prop::sample::select(b"ab\r\n".to_vec()), 0..200)],
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            at.push(0);
            at.push(stream.len());
            at.sort_unstable();
            let chunks: Vec<&[u8]> = at.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
            let (lines, tail) = split(&chunks);
            let mut want: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
            let last = want.pop().unwrap().to_vec(); // the tail is kept as it came
            let want: Vec<Vec<u8>> = want
                .into_iter()
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
                .collect();
            prop_assert_eq!(lines, want);
            prop_assert_eq!(tail.unwrap_or_default(), last);
        }
    }
}

//! The other readers of untrusted text: the parity allowlist (`src/allowlist.rs`), the TOML
//! configuration (`src/config.rs`, with its `[sidebridge]` fixture section), base64.

use super::{bytes, config, json, text};
use bridgewire::util::{base64_decode, base64_encode};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        Just("**".to_string()),
        "[a-z0-9]{1,4}",
        text(4),
    ]
}

fn allowlist_entry() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("*".to_string()), "[a-z]{1,4}"],
        prop_oneof![Just("events"), Just("rows"), Just("bogus")],
        prop::collection::vec(segment(), 0..6),
        prop_oneof![Just("#12".to_string()), text(4)],
        text(10),
    )
        .prop_map(|(provider, layer, segs, pr, reason)| {
            json!({"provider": provider, "cell": "*", "layer": layer,
                   "path": format!("/{}", segs.join("/")), "pr": pr, "reason": reason})
        })
}

proptest! {
    #![proptest_config(config())]

    /// Allowlists: any text parses or is refused naming the file; parsed entries mask any
    /// list without a panic, never adding a slot.
    #[test]
    fn allowlists_parse_and_mask(
        doc in prop_oneof![
            text(80),
            json(3).prop_map(|v| v.to_string()),
            prop::collection::vec(allowlist_entry(), 0..4).prop_map(|e| Value::Array(e).to_string()),
        ],
        list in prop::collection::vec(json(4), 0..5),
    ) {
        match bridgewire::allowlist::parse(&doc, "allow.json") {
            Ok(entries) => {
                for e in entries {
                    let mut l = list.clone();
                    let before = l.len();
                    let removed = e.mask(&mut l);
                    prop_assert!(l.len() <= before);
                    let _ = (removed, e.describe());
                }
            }
            Err(e) => prop_assert!(e.to_string().starts_with("allow.json: ")),
        }
    }

    /// Configuration files: any text is a config or one error naming the file, never a panic.
    #[test]
    fn config_files_of_any_text(doc in prop_oneof![
        text(120),
        bytes(120).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (prop::sample::select(vec!["bb", "sidebridge", "bridle", "record", "pins", "parity", "x"]),
         prop::collection::vec(("[a-zA-Z]{1,10}", prop_oneof![
            "[a-z ]{0,10}".prop_map(|s| format!("{s:?}")),
            any::<i64>().prop_map(|n| n.to_string()),
            Just("true".to_string()),
            Just("[\"a\", 1]".to_string()),
            Just("{ send = \"x\", expect = \"(\" }".to_string()),
            Just("[\"remember\", { send = \"hi\", expect = \"y+\" }]".to_string()),
         ]), 0..5))
            .prop_map(|(section, kv)| {
                let mut s = format!("[{section}]\n");
                for (k, v) in kv {
                    s.push_str(&format!("{k} = {v}\n"));
                }
                s
            }),
    ]) {
        if let Err(e) = bridgewire::config::Config::parse(&doc, Path::new("bridgewire.toml")) {
            prop_assert!(e.starts_with("bridgewire.toml"), "{}", e);
        }
    }

    /// base64 (lanes' `lineBase64`, envelopes' `bodyBase64`): any bytes round-trip, any text
    /// decodes or is refused, never more bytes out than in.
    #[test]
    fn base64_round_trips(b in bytes(300), t in text(100)) {
        prop_assert_eq!(base64_decode(&base64_encode(&b)), Some(b));
        if let Some(out) = base64_decode(&t) {
            prop_assert!(out.len() <= t.len());
        }
    }
}

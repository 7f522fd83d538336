//! The recorder's JSON-RPC scan (`src/rpc_scan.rs`): any bytes, any depth, and agreement with
//! serde_json on valid JSON for every field it extracts.

use super::{bytes, config, deep_nesting, json, key, text};
use bridgewire::jsjson::format_f64;
use bridgewire::rpc_scan::{IdKey, RpcInfo, any_key, scan, scan_line, value_end};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// What a full parse says the scan should find.
fn expected(v: &Value) -> Option<RpcInfo> {
    let o = v.as_object()?;
    let id_key = match o.get("id") {
        Some(Value::String(s)) => Some(format!("string:{s}")),
        Some(Value::Number(n)) => Some(format!("number:{}", format_f64(n.as_f64().unwrap()))),
        _ => None,
    };
    let method = o.get("method").and_then(Value::as_str).map(str::to_string);
    let thread_id = o
        .get("params")
        .and_then(Value::as_object)
        .and_then(|p| p.get("threadId"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Some(RpcInfo {
        id_key,
        method,
        thread_id,
    })
}

fn any_key_in(v: &Value, pred: &dyn Fn(&str) -> bool) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| pred(k) || any_key_in(v, pred)),
        Value::Array(a) => a.iter().any(|v| any_key_in(v, pred)),
        _ => false,
    }
}

/// JSON-RPC-shaped objects: the extracted fields in every type, among other keys.
fn rpc_object() -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        text(10).prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Value::from),
        json(2),
    ];
    let method = prop_oneof![text(10).prop_map(Value::String), json(1)];
    let params = prop_oneof![
        (
            prop::option::of(prop_oneof![text(10).prop_map(Value::String), json(1)]),
            json(2)
        )
            .prop_map(|(tid, other)| {
                let mut m = Map::new();
                m.insert("x".into(), other);
                if let Some(t) = tid {
                    m.insert("threadId".into(), t);
                }
                Value::Object(m)
            }),
        json(2),
    ];
    (
        prop::option::of(id),
        prop::option::of(method),
        prop::option::of(params),
        prop::collection::vec((key(), json(3)), 0..4),
    )
        .prop_map(|(id, method, params, mut members)| {
            for (k, v) in [("id", id), ("method", method), ("params", params)] {
                if let Some(v) = v {
                    members.retain(|(other, _)| other != k);
                    members.push((k.to_string(), v));
                }
            }
            members
        })
        .prop_shuffle()
        .prop_map(|members| Value::Object(members.into_iter().collect()))
}

/// Keys with an escape (`"\u0069d"`) are compared raw by the scan (documented: "only matters for
/// exotic spellings"); the agreement properties use keys that print without one.
fn plain_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let k: String = k
                        .chars()
                        .filter(|&c| c >= ' ' && c != '"' && c != '\\')
                        .collect();
                    (k, plain_keys(v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(plain_keys).collect()),
        other => other,
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes: no panic; `value_end` stays inside the line.
    #[test]
    fn scan_survives_any_bytes(b in prop_oneof![
        bytes(512),
        rpc_object().prop_flat_map(|v| {
            let s = v.to_string().into_bytes();
            let n = s.len();
            (Just(s), 0..n.max(1), any::<u8>())
        }).prop_map(|(mut s, i, c)| { if !s.is_empty() { s[i] = c; } s }),
    ]) {
        let _ = scan(&b);
        let _ = any_key(&b, &|k| k == "id");
        for start in [0, b.len() / 2, b.len()] {
            if let Some(end) = value_end(&b, start) {
                prop_assert!(end >= start && end <= b.len());
            }
        }
    }

    /// Any nesting depth (35 000 levels crashed `record bb`): no stack overflow, and the scan
    /// of a well-formed deep value agrees with its structure.
    #[test]
    fn scan_survives_any_depth(deep in deep_nesting(), wrap in any::<bool>()) {
        let line = if wrap {
            let mut l = br#"{"id":1,"method":"m","params":{"threadId":"t","x":"#.to_vec();
            l.extend_from_slice(&deep);
            l.extend_from_slice(b"}}");
            l
        } else {
            deep.clone()
        };
        let info = scan(&line);
        let _ = any_key(&line, &|_| false);
        let well_formed = value_end(&deep, 0) == Some(deep.len());
        if wrap && well_formed {
            prop_assert!(info.is_some(), "a well-formed deep value is skipped, not refused");
        }
        if !wrap && deep[0] == b'[' {
            prop_assert_eq!(info, None, "a bare array is not a message");
        } else if wrap && let Some(info) = info {
            prop_assert_eq!(info.thread_id.as_deref(), Some("t"));
            prop_assert!(info.is_request());
        }
    }

    /// Valid JSON (compact or spaced): the scan finds exactly what serde_json finds.
    #[test]
    fn scan_agrees_with_serde_json(v in rpc_object().prop_map(plain_keys), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
        let got = scan(text.as_bytes());
        prop_assert_eq!(got, expected(&v), "{}", text);
        prop_assert_eq!(value_end(text.as_bytes(), 0), Some(text.len()));
        for probe in ["id", "threadId", "token", "x"] {
            prop_assert_eq!(any_key(text.as_bytes(), &|k| k == probe), any_key_in(&v, &|k| k == probe));
        }
    }

    /// The recorder's fused pass (`scan_line`) answers exactly as `scan` and `any_key` do, on
    /// any bytes, mutated messages and deep values.
    #[test]
    fn the_fused_scan_agrees_with_scan_and_any_key(b in prop_oneof![
        bytes(512),
        rpc_object().prop_map(|v| v.to_string().into_bytes()),
        rpc_object().prop_flat_map(|v| {
            let s = v.to_string().into_bytes();
            let n = s.len();
            (Just(s), 0..n.max(1), any::<u8>())
        }).prop_map(|(mut s, i, c)| { if !s.is_empty() { s[i] = c; } s }),
        deep_nesting(),
    ]) {
        for probe in ["id", "threadId", "token", "x"] {
            let fused = scan_line(&b, &mut |k: &str| k == probe);
            prop_assert_eq!(fused.key_hit, any_key(&b, &|k| k == probe));
            let want = scan(&b);
            let got = fused.rpc.map(|r| RpcInfo {
                id_key: r.id.as_ref().map(|id| match id {
                    IdKey::Number(bits) => format!(
                        "number:{}",
                        bridgewire::jsjson::format_f64(f64::from_bits(*bits))
                    ),
                    IdKey::String(s) => format!("string:{s}"),
                }),
                method: if r.has_method {
                    want.as_ref().and_then(|w| w.method.clone()).or(Some(String::new()))
                } else {
                    None
                },
                thread_id: r.thread_id.map(|t| t.into_owned()),
            });
            prop_assert_eq!(got, want);
        }
    }

    /// Duplicated members and keys spelled with escapes (`"\u0069d"`): serde_json, like JS
    /// `JSON.parse`, takes the last of duplicated keys under any spelling; so does the scan,
    /// and the fused pass with it.
    #[test]
    fn scan_takes_the_last_of_duplicated_keys_under_any_spelling(
        v in rpc_object().prop_map(plain_keys),
        dups in prop::collection::vec(
            (prop::sample::select(vec!["id", "method", "params"]), json(2)),
            0..3,
        ),
        threadids in prop::collection::vec(prop_oneof![text(6).prop_map(Value::String), json(1)], 0..3),
        escape in prop::collection::vec(any::<bool>(), 8),
    ) {
        // Each key spelled plainly or with its first letter escaped.
        let spell = |k: &str, n: usize| -> String {
            let mut c = k.chars();
            match c.next() {
                Some(first) if escape[n % escape.len()] && (first as u32) < 0x10000 => format!("\"\\u{:04x}{}\"", first as u32, c.as_str()),
                _ => Value::String(k.to_string()).to_string(),
            }
        };
        let mut members: Vec<(String, Value)> = v.as_object().unwrap().clone().into_iter().collect();
        members.extend(dups.into_iter().map(|(k, v)| (k.to_string(), v)));
        // A params object with threadId given more than once.
        if !threadids.is_empty() {
            let inner: Vec<String> = threadids
                .iter()
                .enumerate()
                .map(|(n, t)| format!("{}:{t}", spell("threadId", n + 3)))
                .collect();
            members.push(("params".into(), Value::Null));
            let text = format!("{{{}}}", inner.join(","));
            members.last_mut().unwrap().1 = serde_json::from_str(&text).unwrap();
            // Written below from `text` itself, so the duplicates stay in the bytes.
            let body: Vec<String> = members[..members.len() - 1]
                .iter()
                .enumerate()
                .map(|(n, (k, v))| format!("{}:{v}", spell(k, n)))
                .chain(std::iter::once(format!("{}:{text}", spell("params", 7))))
                .collect();
            let line = format!("{{{}}}", body.join(","));
            let full: Value = serde_json::from_str(&line).unwrap();
            prop_assert_eq!(scan(line.as_bytes()), expected(&full), "{}", line);
            return Ok(());
        }
        let body: Vec<String> = members
            .iter()
            .enumerate()
            .map(|(n, (k, v))| format!("{}:{v}", spell(k, n)))
            .collect();
        let line = format!("{{{}}}", body.join(","));
        let full: Value = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(scan(line.as_bytes()), expected(&full), "{}", line);
        let fused = scan_line(line.as_bytes(), &mut |_| false).rpc.map(|r| r.id);
        let want = scan(line.as_bytes()).map(|i| i.id_key);
        prop_assert_eq!(
            fused.map(|id| id.map(|id| match id {
                IdKey::Number(bits) => format!("number:{}", format_f64(f64::from_bits(bits))),
                IdKey::String(s) => format!("string:{s}"),
            })),
            want
        );
    }

    /// Any JSON value at the top level: objects scan to what serde_json finds, everything else
    /// is refused.
    #[test]
    fn scan_refuses_what_is_not_an_object(v in json(3).prop_map(plain_keys)) {
        let text = v.to_string();
        prop_assert_eq!(scan(text.as_bytes()), expected(&v));
    }
}

/// The same lines through JS `JSON.parse` (node, when present): id, method and
/// `params.threadId` as the scan reads them, duplicated keys and escaped spellings included.
#[test]
fn scan_reads_duplicated_keys_as_json_parse_does() {
    let lines = [
        r#"{"id":1,"id":2,"method":"m"}"#,
        r#"{"id":1,"\u0069d":2,"method":"m"}"#,
        r#"{"\u0069d":"a","id":"b","method":"m","\u006dethod":7}"#,
        r#"{"id":"x","method":"m","params":{"threadId":"a","thread\u0049d":"b"}}"#,
        r#"{"id":3,"params":{"threadId":"a"},"p\u0061rams":{"x":1}}"#,
        r#"{"method":"n","params":{"threadId":"a"},"params":{"threadId":"c"}}"#,
    ];
    let script = r#"
        const out = [];
        for (const l of require('fs').readFileSync(0, 'utf8').split('\n').filter(Boolean)) {
            const v = JSON.parse(l);
            const id = typeof v.id === 'string' ? 'string:' + v.id
                : typeof v.id === 'number' ? 'number:' + String(v.id) : null;
            const method = typeof v.method === 'string' ? v.method : null;
            const p = v.params;
            const tid = p && typeof p === 'object' && !Array.isArray(p)
                && typeof p.threadId === 'string' ? p.threadId : null;
            out.push([id, method, tid]);
        }
        process.stdout.write(JSON.stringify(out));
    "#;
    if !crate::common::need::node("scan_reads_duplicated_keys_as_json_parse_does") {
        return;
    }
    let child = std::process::Command::new("node")
        .args(["-e", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let mut child = child.expect("spawn node (it ran `node --version`)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(lines.join("\n").as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let js: Vec<(Option<String>, Option<String>, Option<String>)> =
        serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(js.len(), lines.len());
    for (line, (id, method, tid)) in lines.iter().zip(js) {
        let got = scan(line.as_bytes()).unwrap();
        assert_eq!(
            (got.id_key, got.method, got.thread_id),
            (id, method, tid),
            "{line}"
        );
    }
}

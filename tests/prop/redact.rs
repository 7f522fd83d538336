//! Redaction's passes over untrusted lines (`src/redact.rs`): the structural pass (serde and
//! the byte-level pass for lines serde cannot read), known values, JWT shapes, URLs. Any input:
//! no panic, output bounded by the input, a planted secret gone.

use super::{bytes, config, deep_nesting, json, key, text};
use bridgewire::redact::{Secrets, may_need_redaction, redact_jwt_shapes, redact_line, redact_url};
use proptest::prelude::*;
use serde_json::{Value, json};

/// How much longer redaction may make a line: every replaced value becomes `"[redacted]"`
/// (12 bytes, where the shortest JSON string it replaces is 2), and re-serialization may widen
/// a number (`1e20` → `100000000000000000000`).
fn bound(input: usize) -> usize {
    6 * input + 64
}

/// Lines with secrets at any depth and in any container, valid or not, deep or not.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => bytes(400),
        3 => json(4).prop_map(|v| v.to_string().into_bytes()),
        2 => (json(2), "[a-z0-9]{8,16}", key()).prop_map(|(v, secret, k)| {
            json!({"params": {"env": {"API_TOKEN": secret, k: v}, "apiKey": secret, "url": format!("http://h/?token={secret}")}})
                .to_string().into_bytes()
        }),
        1 => deep_nesting().prop_map(|d| {
            let mut l = br#"{"apiKey":"sekrit-value-1","x":"#.to_vec();
            l.extend(d);
            l.push(b'}');
            l
        }),
        1 => (bytes(40), "[a-z0-9]{8,16}").prop_map(|(junk, s)| {
            let mut l = format!(r#"{{"token":"{s}","b":""#).into_bytes();
            l.extend(junk);
            l.extend_from_slice(b"\"}");
            l
        }),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Every pass of a per-recording set, over any line: no panic, output bounded.
    #[test]
    fn redaction_is_total_and_bounded(lines in prop::collection::vec(line(), 1..4)) {
        let secrets = Secrets::new();
        for l in &lines {
            let _ = may_need_redaction(l);
            for out in [secrets.redact_bytes(l), secrets.redact_framed(l), secrets.redact_known(l),
                        redact_jwt_shapes(l, &secrets)].into_iter().flatten() {
                prop_assert!(out.len() <= bound(l.len()), "{} → {} bytes", l.len(), out.len());
            }
            if let Ok(t) = std::str::from_utf8(l) {
                if let Some(out) = redact_line(t) {
                    prop_assert!(out.len() <= bound(t.len()));
                }
                let out = secrets.redact_text(t);
                prop_assert!(out.len() <= bound(t.len()));
                if let Some(out) = redact_url(t) {
                    prop_assert!(out.len() <= bound(t.len()));
                }
            }
        }
    }

    /// A secret planted under a secret key, at any depth, beside a string of any bytes (not
    /// UTF-8, raw control characters: lines serde cannot read), is gone from what is written,
    /// and once learned it is gone from every later line too.
    #[test]
    fn planted_secrets_are_removed(
        secret in "[a-z0-9]{10,16}",
        around in json(2),
        depth in 0usize..300,
        junk in bytes(20),
    ) {
        let junk: Vec<u8> = junk.into_iter().filter(|&c| c != b'"' && c != b'\\').collect();
        let mut line = Vec::new();
        for _ in 0..depth {
            line.extend_from_slice(b"{\"a\":[");
        }
        line.extend_from_slice(format!(r#"{{"x":{around},"junk":""#).as_bytes());
        line.extend(junk);
        line.extend(format!(r#"","apiKey":"{secret}"}}"#).into_bytes());
        for _ in 0..depth {
            line.extend_from_slice(b"]}");
        }
        let secrets = Secrets::new();
        let out = secrets.redact_bytes(&line).unwrap_or_else(|| line.clone());
        prop_assert!(memchr::memmem::find(&out, secret.as_bytes()).is_none(),
            "secret kept in {}", String::from_utf8_lossy(&out));
        prop_assert!(out.len() <= bound(line.len()));
        // Learned for later lines: within the structural pass's depth (see `known_gaps`).
        if 2 * depth < 64 {
            let later = format!("plain text {secret} again").into_bytes();
            let out = secrets.redact_bytes(&later).unwrap_or(later);
            prop_assert!(memchr::memmem::find(&out, secret.as_bytes()).is_none());
        }
    }

    /// Known values: any set of learned values, any text; no learned value survives and the
    /// output stays bounded (values shorter than 8 units are never learned).
    #[test]
    fn known_values_are_replaced_everywhere(
        values in prop::collection::vec(text(20), 0..6),
        hay in text(200),
    ) {
        let secrets = Secrets::new();
        for v in &values {
            secrets.learn(v);
        }
        let mut hay = hay;
        for v in &values {
            hay.push_str(v);
        }
        let out = secrets.redact_known(hay.as_bytes()).unwrap_or_else(|| hay.clone().into_bytes());
        prop_assert!(out.len() <= bound(hay.len()));
        secrets.learn_json(&Value::String(hay));
    }
}

mod gaps_and_regressions {
    use super::*;

    /// Redacts `line` with fresh secrets and fails if `secret` is still in the output.
    fn assert_redacted(line: &[u8], secret: &[u8]) {
        let out = Secrets::new()
            .redact_bytes(line)
            .unwrap_or_else(|| line.to_vec());
        assert!(
            memchr::memmem::find(&out, secret).is_none(),
            "secret kept in {}",
            String::from_utf8_lossy(&out)
        );
    }

    /// Found by `planted_secrets_are_removed` (shrunk input: a valid object followed by one
    /// byte, `0x0e`): the byte-level pass gave up on trailing bytes and the line was written
    /// with its `apiKey` in clear. Fixed (`bytes_pass` applies what it found, fail closed); a
    /// regression test, not a gap, since.
    #[test]
    fn a_secret_before_trailing_bytes_is_redacted() {
        assert_redacted(b"{\"x\":null,\"apiKey\":\"a0aaaaa00a\"}\x0e", b"a0aaaaa00a");
    }

    /// Found the same way: the key pre-filter (`rpc_scan::any_key`, and the recorder's fused
    /// `scan_line` that must agree with it) answered "no key" for a line that is not one JSON
    /// value (a second value after the first, a malformed member after the secret), so these
    /// lines never reached the byte-level pass. Fixed (such a line with any string goes to the
    /// full pass); a regression test since.
    #[test]
    fn a_secret_in_a_line_that_is_not_one_json_value_is_redacted() {
        for line in [
            &b"{\"a\":1}{\"apiKey\":\"a0aaaaa00a\"}"[..],
            b"{\"apiKey\":\"a0aaaaa00a\", oops}",
        ] {
            assert_redacted(line, b"a0aaaaa00a");
        }
    }

    /// Found by `planted_secrets_are_removed` (shrunk: `apiKey` under 33 `{"a":[` levels): a
    /// secret deeper than the structural pass's depth (64) is redacted in its line (the
    /// subtree is replaced whole) but was not learned, so it was written in clear in later
    /// lines. Fixed (a secret-named key is learned past the depth bound too); a regression
    /// test since.
    #[test]
    fn a_deep_secret_is_learned_for_later_lines() {
        let line = format!(
            r#"{}{{"x":null,"junk":"","apiKey":"0aa0aaaaa0"}}{}"#,
            r#"{"a":["#.repeat(33),
            "]}".repeat(33)
        );
        let secrets = Secrets::new();
        let out = secrets.redact_bytes(line.as_bytes()).unwrap();
        assert!(memchr::memmem::find(&out, b"0aa0aaaaa0").is_none());
        let later = b"plain text 0aa0aaaaa0 again";
        let out = secrets.redact_bytes(later).unwrap_or(later.to_vec());
        assert!(
            memchr::memmem::find(&out, b"0aa0aaaaa0").is_none(),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}

//! Property tests (proptest) for every decoder of untrusted bytes (issue 15, deliverable 4).
//!
//! Each property runs [`cases`] cases: `PROPTEST_CASES` when set, else [`DEFAULT_CASES`]
//! (10 000, the "Done when" count per decoder; the whole binary stays within the CI
//! budget in a debug build). A few properties that touch the disk or the network run a tenth
//! of that ([`io_cases`]). A failure prints its shrunk input; every bug found this way keeps a
//! plain `#[test]` with that input beside its property (`regressions` in each module).
//!
//! Common properties: no panic on any input; outputs and errors bounded by the input (no
//! unbounded allocation, caps honoured); round-trips where the format has an encoder.

mod bb;
mod bridle;
#[path = "../common/mod.rs"]
mod common;
mod lane;
mod misc;
mod models;
mod redact;
mod rpc_scan;
mod sidebridge;

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};

/// Cases per property when `PROPTEST_CASES` is not set.
pub const DEFAULT_CASES: u32 = 10_000;

pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Properties whose every case creates files or connections.
pub fn io_cases() -> u32 {
    (cases() / 10).max(1)
}

pub fn config() -> Config {
    config_with(cases())
}

pub fn io_config() -> Config {
    config_with(io_cases())
}

fn config_with(cases: u32) -> Config {
    Config {
        cases,
        // Regressions are kept as plain #[test]s, not as files written next to the sources.
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    }
}

/// A scratch folder for properties that write files: in memory (`/dev/shm`) when there is one,
/// so a case costs no disk I/O.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new()
            .prefix("bridgewire-prop-")
            .tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

/// Arbitrary bytes with a bias towards the ones decoders branch on.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let interesting = prop_oneof![
        4 => any::<u8>(),
        2 => prop::sample::select(
            b"{}[]\",:\\/\r\n -0123456789eE.+tfnul\x00\x1f\x7f\x80\xbf\xc3\xe2\xf0\xff".to_vec()
        ),
    ];
    prop::collection::vec(interesting, 0..max)
}

/// Strings with the characters JSON and the wire formats treat specially.
pub fn text(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        6 => any::<char>(),
        3 => prop::char::range(' ', '~'),
        2 => prop::sample::select(vec![
            '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1f}', '\u{7f}', '\u{2028}', '\u{2029}',
            '\u{fffd}', 'é', '→', '😀', ',', '-', '{', '[', '0', '9',
        ]),
    ];
    prop::collection::vec(ch, 0..max).prop_map(|v| v.into_iter().collect())
}

/// Finite doubles of every magnitude, plus the integers and fractions lanes hold.
pub fn finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        (0u64..(1u64 << 53)).prop_map(|n| n as f64),
        (0u32..100_000, 1u32..100).prop_map(|(n, d)| n as f64 + 1.0 / d as f64),
        Just(0.0),
        Just(-0.0),
        Just(1e21),
        Just(1e-7),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
    ]
}

/// Arbitrary JSON values (numbers either integers or non-integral doubles, so a value survives
/// a print/parse round trip unchanged).
pub fn json(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|x| if x.is_finite() && x.fract() != 0.0 {
                x
            } else {
                0.25
            })
            .prop_map(Value::from),
        text(12).prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Object keys: short words, a few the decoders look for, and arbitrary text.
pub fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z]{1,6}",
        2 => prop::sample::select(vec![
            "id", "method", "params", "threadId", "jsonrpc", "result", "error", "token",
            "apiKey", "authorization", "env", "headers", "url", "0", "42", "sid", "line",
        ])
        .prop_map(str::to_string),
        1 => text(8),
    ]
}

/// `[[[…` / `{"k":{"k":…` openers, `depth` deep, closed or not, possibly mismatched.
pub fn deep_nesting() -> impl Strategy<Value = Vec<u8>> {
    (
        // Mostly shallow (cheap), now and then past every recursion limit (35 000 levels
        // crashed `record bb`).
        prop_oneof![8 => 1usize..256, 2 => 256usize..8192, 1 => 8192usize..40_000],
        any::<bool>(),
        0u8..4,
        prop::collection::vec(any::<bool>(), 1..8),
    )
        .prop_map(|(depth, objects, close, pattern)| {
            let mut out = Vec::with_capacity(depth * 6);
            let mut closers = Vec::with_capacity(depth);
            for i in 0..depth {
                if objects && pattern[i % pattern.len()] {
                    out.extend_from_slice(b"{\"k\":");
                    closers.push(b'}');
                } else {
                    out.push(b'[');
                    closers.push(b']');
                }
            }
            out.push(b'1');
            match close {
                0 => {}                                        // unclosed
                1 => out.extend(closers.iter().rev()),         // well formed
                2 => out.extend(closers.iter().rev().skip(1)), // one short
                _ => out.extend(closers.iter().map(|_| b']')), // mismatched for objects
            }
            out
        })
}

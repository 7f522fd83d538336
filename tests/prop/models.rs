//! The offline protocol models (`Model::assemble`, row projection, normalization) over cells
//! of any content: the committed recordings (`recordings/`) mutated at random (JSON values
//! replaced, keys dropped, bytes flipped, entries dropped, duplicated or reordered), plus
//! generated Side Bridge envelopes. A lane file can hold anything; no cell may crash a model.

use super::{bytes, config, json, text};
use bridgewire::cell::Cell;
use bridgewire::lane::Entry;
use bridgewire::lane::read::LaneReader;
use bridgewire::protocol::{EventSink, GrammarDrop, Protocol};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Every committed recorded cell: (protocol, provider/cell key, entries in (run, seq) order).
static SEEDS: LazyLock<Vec<(Protocol, String, Vec<Entry>)>> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings");
    let mut cells: std::collections::BTreeMap<PathBuf, Vec<PathBuf>> = Default::default();
    for e in walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
    {
        if e.path().extension().is_some_and(|x| x == "ndjson") {
            let dir = e.path().parent().unwrap().to_path_buf();
            cells.entry(dir).or_default().push(e.path().to_path_buf());
        }
    }
    let mut out = Vec::new();
    for (dir, files) in cells {
        let mut entries = Vec::new();
        let mut protocol = None;
        for f in files {
            let stem = f
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .replace(".current", "");
            protocol = protocol.or(Protocol::of_direction(&stem));
            entries.extend(LaneReader::open(&f, None).unwrap().filter_map(Result::ok));
        }
        entries.sort_by_key(Entry::key);
        let key = dir
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if let Some(p) = protocol {
            out.push((p, key, entries));
        }
    }
    assert!(out.len() >= 10, "the committed recordings are the seeds");
    out
});

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the value at a path of a line's JSON (or drop the key).
    Value {
        entry: usize,
        path: Vec<usize>,
        with: Option<Value>,
    },
    /// Replace one byte of a line.
    Byte {
        entry: usize,
        at: usize,
        byte: u8,
    },
    Drop(usize),
    Duplicate(usize),
    Swap(usize, usize),
    /// A member `"<key>":<value>` put first in the `at`-th object of a line (a key given twice
    /// when the object has it already).
    DupKey {
        entry: usize,
        at: usize,
        key: &'static str,
        value: Value,
    },
    /// An entry of any text in one of the protocol's directions.
    Insert {
        at: usize,
        dir: usize,
        line: String,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let idx = any::<usize>();
    prop_oneof![
        6 => (idx, prop::collection::vec(any::<usize>(), 0..6), prop::option::of(json(2)))
            .prop_map(|(entry, path, with)| Mutation::Value { entry, path, with }),
        2 => (idx, any::<usize>(), any::<u8>()).prop_map(|(entry, at, byte)| Mutation::Byte { entry, at, byte }),
        1 => idx.prop_map(Mutation::Drop),
        1 => idx.prop_map(Mutation::Duplicate),
        1 => (idx, any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        2 => (idx, any::<usize>(), prop::sample::select(DUP_KEYS.to_vec()), prop_oneof![
                prop::sample::select(bridgewire::bb::delta::KINDS.to_vec()).prop_map(|k| json!(k)),
                json(1),
            ])
            .prop_map(|(entry, at, key, value)| Mutation::DupKey { entry, at, key, value }),
        1 => (idx, any::<usize>(), prop_oneof![text(40), bytes(60).prop_map(|b| String::from_utf8_lossy(&b).into_owned())])
            .prop_map(|(at, dir, line)| Mutation::Insert { at, dir, line }),
    ]
}

/// Keys the offline bb pass reads.
const DUP_KEYS: &[&str] = &[
    "kind",
    "method",
    "params",
    "threadId",
    "deltas",
    "key",
    "providerItemId",
    "channel",
    "text",
    "item",
    "type",
    "status",
    "providerTurnId",
    "noTurnFallback",
    "snapshot",
    "flush",
];

fn set_at(v: &mut Value, path: &[usize], with: Option<Value>) {
    let (first, rest) = match path.split_first() {
        Some(x) => x,
        None => {
            *v = with.unwrap_or(Value::Null);
            return;
        }
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(first % m.len()).unwrap().clone();
            if rest.is_empty() && with.is_none() {
                m.shift_remove(&k);
            } else {
                set_at(m.get_mut(&k).unwrap(), rest, with);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = first % a.len();
            if rest.is_empty() && with.is_none() {
                a.remove(i);
            } else {
                set_at(&mut a[i], rest, with);
            }
        }
        _ => *v = with.unwrap_or(Value::Null),
    }
}

fn apply(p: Protocol, entries: &mut Vec<Entry>, m: &Mutation) {
    if entries.is_empty() {
        return;
    }
    let n = entries.len();
    match m {
        Mutation::Value { entry, path, with } => {
            let e = &mut entries[entry % n];
            // Lines may nest JSON in a string (a Socket.IO frame after its prefix): mutate the
            // JSON part, keep the prefix.
            let start = e.line.find(['{', '[']).unwrap_or(e.line.len());
            if let Ok(mut v) = serde_json::from_str::<Value>(&e.line[start..]) {
                set_at(&mut v, path, with.clone());
                e.line = format!("{}{}", &e.line[..start], v);
            }
        }
        Mutation::Byte { entry, at, byte } => {
            let e = &mut entries[entry % n];
            let mut b = e.line.clone().into_bytes();
            if !b.is_empty() {
                let i = at % b.len();
                b[i] = *byte;
            }
            e.line = String::from_utf8_lossy(&b).into_owned();
        }
        Mutation::DupKey {
            entry,
            at,
            key,
            value,
        } => {
            let e = &mut entries[entry % n];
            let opens: Vec<usize> = e.line.match_indices('{').map(|(i, _)| i).collect();
            if !opens.is_empty() {
                let i = opens[at % opens.len()] + 1;
                e.line.insert_str(i, &format!("{}:{value},", json!(key)));
            }
        }
        Mutation::Drop(i) => {
            entries.remove(i % n);
        }
        Mutation::Duplicate(i) => {
            let e = entries[i % n].clone();
            entries.insert(i % n, e);
        }
        Mutation::Swap(a, b) => entries.swap(a % n, b % n),
        Mutation::Insert { at, dir, line } => {
            let mut e = entries[at % n].clone();
            let dirs = p.directions();
            e.dir = dirs[dir % dirs.len()].to_string();
            e.line = line.clone();
            entries.insert(at % n, e);
        }
    }
}

#[derive(Default)]
struct Collect {
    events: Vec<Value>,
    drops: usize,
    invalid: usize,
}

impl EventSink for Collect {
    fn event(&mut self, event: Value) {
        self.events.push(event);
    }
    fn grammar_drop(&mut self, _: GrammarDrop) {
        self.drops += 1;
    }
    fn invalid(&mut self, message: String) {
        assert!(
            message.len() < 64 * 1024,
            "an invalid-message note of {} bytes",
            message.len()
        );
        self.invalid += 1;
    }
}

/// Runs the whole offline pipeline of `p` over `entries`.
fn run_model(p: Protocol, key: &str, entries: Vec<Entry>) -> Collect {
    let model = p.model();
    let cell = Cell {
        protocol: p,
        key: key.to_string(),
        path: PathBuf::from("/nonexistent"),
        lanes: Vec::new(),
        current: Vec::new(),
    };
    let mut sink = Collect::default();
    model.assemble(&cell, &mut entries.into_iter(), &mut sink);
    let mut rows = model.row_projector();
    for e in &sink.events {
        rows.push(e);
        let _ = model.is_unhandled(e);
    }
    let rows = rows.finish();
    let _ = model.normalize_rows(rows);
    sink.events = model.normalize_events(std::mem::take(&mut sink.events));
    sink
}

use crate::common::sink::Record;

/// `Model::assemble` (the `Value` path) and `Model::assemble_fast` (what `pins` runs) over the
/// same entries: the same events, grammar drops and messages, in the same order.
fn assert_fast_path_agrees(p: Protocol, key: &str, entries: &[Entry]) {
    let model = p.model();
    let cell = Cell {
        protocol: p,
        key: key.to_string(),
        path: PathBuf::from("/nonexistent"),
        lanes: Vec::new(),
        current: Vec::new(),
    };
    let (mut slow, mut fast) = (Record::default(), Record::default());
    model.assemble(&cell, &mut entries.iter().cloned(), &mut slow);
    model.assemble_fast(&cell, &mut entries.iter().cloned(), &mut fast);
    // Debug text, not `==`: it also holds each object's key order.
    let (slow, fast) = (format!("{slow:?}"), format!("{fast:?}"));
    assert!(
        slow == fast,
        "{key}: the fast path differs\nvalue path: {slow}\nfast path:  {fast}"
    );
}

/// Side Bridge exchanges: requests with a `chatId` and messages, replies with messages.
fn sidebridge_entries() -> impl Strategy<Value = Vec<Entry>> {
    let message = (prop::sample::select(vec!["user", "assistant", "system", "x"]), text(20), "[A-F0-9-]{0,12}")
        .prop_map(|(from, content, id)| json!({"id": id, "from": from, "content": content, "sources": []}))
        .boxed();
    let body = prop_oneof![
        (
            "[a-f0-9-]{0,12}",
            prop::collection::vec(message.clone(), 0..3)
        )
            .prop_map(|(chat, msgs)| json!({"chatId": chat, "messages": msgs}).to_string()),
        prop::collection::vec(message, 0..3).prop_map(|m| json!({"messages": m}).to_string()),
        json(3).prop_map(|v| v.to_string()),
        text(30),
    ];
    let envelope = (0u64..4, any::<bool>(), body, prop_oneof![Just(200u16), any::<u16>()])
        .prop_map(|(x, request, body, status)| {
            let (dir, line) = if request {
                ("client→bridge", json!({"exchange": x, "method": "POST", "path": "/", "headers": [["content-type", "application/json"]], "body": body}))
            } else {
                ("bridge→client", json!({"exchange": x, "status": status, "headers": [], "body": body, "elapsedMs": 3}))
            };
            (dir, line.to_string())
        });
    prop::collection::vec(
        prop_oneof![5 => envelope, 1 => text(40).prop_map(|t| ("client→bridge", t))],
        0..12,
    )
    .prop_map(|lines| {
        lines
            .into_iter()
            .enumerate()
            .map(|(i, (dir, line))| Entry {
                ts: 1.0,
                run: 1.0,
                seq: i as f64 + 1.0,
                dir: dir.to_string(),
                line,
                extra: Default::default(),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config())]

    /// A recorded cell with up to 8 random mutations: every model assembles, projects rows
    /// and normalizes without a panic.
    #[test]
    fn models_survive_mutated_recordings(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 0..8),
    ) {
        let (p, key, entries) = &SEEDS[seed.index(SEEDS.len())];
        let mut entries = entries.clone();
        for m in &mutations {
            apply(*p, &mut entries, m);
        }
        let _ = run_model(*p, key, entries);
    }

    /// The same mutated cells through the fast path `pins` uses and the `Value` path: the same
    /// events, drops and messages (duplicate keys, invalid deltas, broken lines included).
    #[test]
    fn fast_path_is_the_value_path_on_mutated_recordings(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 0..8),
    ) {
        let (p, key, entries) = &SEEDS[seed.index(SEEDS.len())];
        let mut entries = entries.clone();
        for m in &mutations {
            apply(*p, &mut entries, m);
        }
        assert_fast_path_agrees(*p, key, &entries);
    }

    /// Generated Side Bridge exchanges of any content.
    #[test]
    fn sidebridge_model_survives_any_exchanges(entries in sidebridge_entries()) {
        let _ = run_model(Protocol::SideBridge, "app/chat", entries);
    }
}

/// The seeds are real: unmutated, every committed cell assembles to some events.
#[test]
fn unmutated_seeds_assemble() {
    let mut with_events = 0;
    for (p, key, entries) in SEEDS.iter() {
        let got = run_model(*p, key, entries.clone());
        with_events += usize::from(!got.events.is_empty());
    }
    assert!(
        with_events * 2 >= SEEDS.len(),
        "{with_events} of {} cells gave events",
        SEEDS.len()
    );
}

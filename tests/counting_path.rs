//! `pins` counts through `Model::assemble_fast` (a borrowed reading of each delta line); every
//! other command, and this test's oracle, goes through `Model::assemble` (`Value` trees). Over
//! every committed cell, the shared bb corpus when it is there, and hand-made hostile cells,
//! both paths must hand their sink the same events (key order included), grammar drops and
//! messages, and `pins::compute` must report the lane errors and warnings the lanes hold, and
//! count the same rows as it builds for a dump.
//! `pins` itself reads lazy entries (`Model::assemble_lazy`: lines kept escaped, each delta line
//! parsed from its escaped form in one pass): held to the fast path the same way.
//! (`tests/prop/models.rs` runs the same comparison over randomly mutated cells.)

use bridgewire::cell::Cell;
use bridgewire::lane::Entry;
mod common;

use common::sink::Record;
use serde_json::{Value, json};
use std::path::Path;

/// Both paths over one cell; the Debug text (it keeps each object's key order) of what each
/// handed its sink, with the lane report.
/// The fast path is run twice: over entries (`assemble_fast`) and over lazy entries, whose
/// lines stay escaped and are parsed in one pass where they can be (`assemble_lazy`, what
/// `pins` runs); the two must agree before either is compared with the value path.
fn both(cell: &Cell) -> (String, String) {
    let model = cell.protocol.model();
    let run = |path: u8| {
        let mut sink = Record::default();
        let mut merged = if path == 2 {
            cell.merged_lazy()
        } else {
            cell.merged()
        };
        match path {
            0 => model.assemble(cell, &mut merged, &mut sink),
            1 => model.assemble_fast(cell, &mut merged, &mut sink),
            _ => model.assemble_lazy(
                cell,
                &mut std::iter::from_fn(|| merged.next_lazy()),
                &mut sink,
            ),
        }
        let report = merged.into_report();
        let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
        format!(
            "{sink:?}\nlane errors {errors:?}\nwarnings {:?}",
            report.warnings
        )
    };
    let (fast, lazy) = (run(1), run(2));
    assert!(
        fast == lazy,
        "{}: the lazy path differs\nfast path: {fast}\nlazy path: {lazy}",
        cell.key
    );
    (run(0), fast)
}

/// Compares the paths over every cell below `root`; returns (cells, cells with events,
/// cells with invalid messages or drops).
fn compare_all(root: &Path) -> (usize, usize, usize) {
    let cells = bridgewire::cell::discover(root).unwrap();
    let (mut with_events, mut with_faults) = (0, 0);
    for cell in &cells {
        let (slow, fast) = both(cell);
        assert!(
            slow == fast,
            "{}: the fast path differs\nvalue path: {slow}\nfast path:  {fast}",
            cell.key
        );
        let outcome = bridgewire::pins::compute(cell, None);
        // Without a dump the rows are counted, not built: the same count as the built rows.
        let dump = tempfile::tempdir().unwrap();
        let built = bridgewire::pins::compute(cell, Some(dump.path()));
        assert_eq!(
            outcome.counts, built.counts,
            "{}: counted rows differ from the built ones",
            cell.key
        );
        with_events += usize::from(outcome.counts.events > 0);
        with_faults +=
            usize::from(!outcome.invalid.is_empty() || !outcome.grammar_drops.is_empty());
    }
    (cells.len(), with_events, with_faults)
}

#[test]
fn fast_path_is_the_value_path_on_every_committed_cell() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings");
    let (cells, with_events, _) = compare_all(&root);
    assert!(
        cells >= 14 && with_events * 2 >= cells,
        "{cells} cells, {with_events} with events"
    );
}

/// The shared bb corpus of the development machine (`BRIDGEWIRE_BB_CORPUS`, default
/// `/work/shared/corpus/bb`); skipped, and said so, where it is not.
#[test]
fn fast_path_is_the_value_path_on_the_shared_corpus() {
    let root = std::env::var_os("BRIDGEWIRE_BB_CORPUS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/work/shared/corpus/bb".into());
    if !root.is_dir() {
        eprintln!("skipped: no bb corpus at {}", root.display());
        return;
    }
    let (cells, with_events, _) = compare_all(&root);
    assert!(
        cells > 0 && with_events > 0,
        "{cells} cells, {with_events} with events"
    );
}

fn entry(seq: u64, dir: &str, line: String) -> String {
    Entry {
        ts: 1.0e12 + seq as f64,
        run: 1.0e12,
        seq: seq as f64,
        dir: dir.into(),
        line,
        extra: Default::default(),
    }
    .to_line()
}

fn delta(deltas: Value) -> String {
    json!({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": "t1", "deltas": deltas}})
        .to_string()
}

/// Cells made to hold what the corpus rarely does: invalid deltas, grammar drops, unhandled
/// events, duplicate keys, escapes, non-UTF-8 bytes, a cut last line, a wrong `dir`, stops.
#[test]
fn fast_path_is_the_value_path_on_hostile_cells() {
    let t = tempfile::tempdir().unwrap();
    let br = "bridge→runtime";
    let rt = "runtime→bridge";
    let lines: Vec<(&str, Vec<u8>)> = vec![
        (br, delta(json!([{"kind": "session.reset"}])).into()),
        (rt, json!({"jsonrpc": "2.0", "id": 1, "method": "turn/start", "params": {"threadId": "t1", "input": [], "clientRequestId": "creq_2222222222"}}).to_string().into()),
        (br, delta(json!([
            {"kind": "input.accepted", "clientRequestId": "creq_2222222222"},
            {"kind": "turn.open"},
            {"kind": "item.open", "key": {"providerItemId": "c1"}, "item": {"type": "command", "command": "ls \"é\"\n", "cwd": "/w"}},
            {"kind": "item.outputDelta", "key": {"providerItemId": "c1"}, "channel": "command", "text": "a\u{1}b\\c"},
            {"kind": "item.close", "key": {"providerItemId": "c1"}, "status": "completed", "exitCode": 0, "item": {"type": "command", "command": "ls", "cwd": "/w"}},
            {"kind": "item.close", "key": {"providerItemId": "c1"}, "status": "completed", "exitCode": 0, "item": {"type": "command", "command": "ls", "cwd": "/w"}},
            {"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "hi \u{1F600}"},
            {"kind": "unhandled", "vouchedTurn": true, "rawType": "x", "raw": {"jsonrpc": "2.0", "method": "m", "params": {"a": [1, 2.5, -3, null, true]}}},
            {"kind": "item.textClose", "key": {"channel": "assistant"}, "channel": "agentMessage"},
            {"kind": "turn.boundary", "status": "completed"}
        ])).into()),
        // Grammar drops: a vouched turn completed twice; a delta outside any turn.
        (br, delta(json!([
            {"kind": "turn.boundary", "status": "completed", "providerTurnId": "p1"},
            {"kind": "turn.boundary", "status": "completed", "providerTurnId": "p1"},
            {"kind": "item.outputDelta", "key": {"providerItemId": "zz"}, "channel": "command", "text": "x", "noTurnFallback": {"rawType": "r", "raw": {"jsonrpc": "2.0", "method": "r"}}},
            {"kind": "item.outputDelta", "key": {"providerItemId": "zz"}, "channel": "command", "text": "x"}
        ])).into()),
        // Invalid params: unknown kind, bad status, missing threadId, a long detail.
        (br, delta(json!([{"kind": "nope"}])).into()),
        (br, delta(json!([{"kind": "turn.boundary", "status": "weird"}])).into()),
        (br, json!({"jsonrpc": "2.0", "method": "thread/delta", "params": {"deltas": []}}).to_string().into()),
        (br, delta(json!([{"kind": "item.open", "key": {}, "item": {"type": "tool", "tool": "t"}, "presentation": {"label": {"pending": "a", "completed": "b"}, "icon": {"glyph": "g"}, "detail": "é".repeat(300)}}])).into()),
        // Duplicate keys: the last value wins, in the first position.
        (br, br#"{"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"nope","kind":"turn.open"},{"kind":"turn.boundary","status":"weird","status":"completed"}],"threadId":"t2"}}"#.to_vec()),
        (br, br#"{"method":"thread/delta","method":"other","params":{"threadId":"t1","deltas":[{"kind":"turn.open"}]}}"#.to_vec()),
        (br, br#"{"method":"x","method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"turn.open"}]},"params":{"threadId":"t1","deltas":[{"kind":"turn.open","providerTurnId":"q"}]}}"#.to_vec()),
        // Escapes in the line and in keys; a number of every kind.
        (br, br#"{"method":"thread\/delta","params":{"threadId":"t\u0031","deltas":[{"kind":"usage","total":{"inputTokens":18446744073709551615,"x":-0,"y":1e2,"z":-9223372036854775808},"last":null,"modelContextWindow":1.5},{"k\u0069nd":"turn.open"}]}}"#.to_vec()),
        // For the one-pass read of escaped lines: escapes of every kind inside strings
        // (surrogates left to serde_json), spaces between tokens, a pretty-printed line (its
        // newlines are escapes of the lane's own), numbers of every shape, deep nesting on
        // both sides of the one-pass reader's limit, trailing text, and escaped method names.
        (br, br#"{"method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"item.textDelta","key":{"channel":"a\"b\\c\/d\u00e9\u0000"},"channel":"agentMessage","text":"\ud83d\ude00 \ud800 \b\f\n\r\t"}]}}"#.to_vec()),
        (br, br#" { "method" : "thread/delta" , "params" : { "threadId" : "t1" , "deltas" : [ { "kind" : "turn.open" } , { "kind":"usage","total":{"a":1.5,"b":-2,"c":0.0,"d":1E+2,"e":12345678901234567890,"f":-0.0,"g":1e-400} } ] } } "#.to_vec()),
        (br, serde_json::to_string_pretty(&json!({"method": "thread/delta", "params": {"threadId": "t1", "deltas": [{"kind": "turn.open"}]}})).unwrap().into()),
        (br, format!(r#"{{"method":"thread/delta","params":{{"threadId":"t1","x":{}{},"deltas":[{{"kind":"turn.open"}}]}}}}"#, "[".repeat(70), "]".repeat(70)).into()),
        (br, format!(r#"{{"method":"thread/delta","params":{{"threadId":"t1","x":{}{},"deltas":[{{"kind":"turn.open"}}]}}}}"#, "[".repeat(130), "]".repeat(130)).into()),
        (br, br#"{"method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"turn.open"}]}} x"#.to_vec()),
        (br, br#"{"method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"turn.open","n":01}]}}"#.to_vec()),
        (br, br#"{"method":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"turn.open","n":1e400}]}}"#.to_vec()),
        (br, br#"{"\u006dethod":"thread/delta","params":{"threadId":"t1","deltas":[{"kind":"turn.open"}]}}"#.to_vec()),
        (br, br#"{"method":"thread\u002fdelta","params":{"threadId":"t1","deltas":[{"kind":"turn.open"}]}}"#.to_vec()),
        (br, br#"{"id":3,"result":{"a":"thread\/delta"}}"#.to_vec()),
        // Not JSON, not an object, a response, a stop and its answer.
        (br, b"{\"method\":\"thread/delta\",".to_vec()),
        (br, b"[\"thread/delta\"]".to_vec()),
        (rt, json!({"jsonrpc": "2.0", "id": 7, "method": "thread/stop", "params": {"threadId": "t1", "intent": "release"}}).to_string().into()),
        (br, json!({"jsonrpc": "2.0", "id": 7, "result": {}}).to_string().into()),
        (br, delta(json!([{"kind": "turn.open"}, {"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "plan", "text": "p"}])).into()),
    ];
    let cell = t.path().join("claude-code/hostile");
    std::fs::create_dir_all(&cell).unwrap();
    let mut files: std::collections::BTreeMap<&str, Vec<u8>> = Default::default();
    for (i, (dir, line)) in lines.into_iter().enumerate() {
        let text = entry(i as u64 + 1, dir, String::from_utf8(line).unwrap());
        let f = files.entry(dir).or_default();
        f.extend_from_slice(text.as_bytes());
        f.push(b'\n');
    }
    let b = files.get_mut(br).unwrap();
    // A line that is not UTF-8, one whose `dir` is wrong, one that is not an entry, and a cut
    // last line.
    b.extend_from_slice(b"{\"ts\":1,\"run\":1,\"seq\":90,\"dir\":\"bridge\xe2\x86\x92runtime\",\"line\":\"\xff\"}\n");
    b.extend_from_slice(entry(91, rt, "{}".into()).as_bytes());
    b.extend_from_slice(b"\n{\"ts\":1}\n");
    // Escapes the lane itself would not write (`\/`, `\u0022`): the line is unescaped first.
    b.extend_from_slice(r#"{"ts":1,"run":1000000000000,"seq":93,"dir":"bridge→runtime","line":"{\"method\":\"thread\/delta\",\"params\":{\"threadId\":\"t1\",\"deltas\":[{\"kind\":\u0022turn.open\"}]}}"}"#.as_bytes());
    b.push(b'\n');
    b.extend_from_slice(&entry(92, br, delta(json!([{"kind": "turn.open"}]))).as_bytes()[..40]);
    for (dir, bytes) in &files {
        std::fs::write(cell.join(format!("{dir}.ndjson")), bytes).unwrap();
    }
    let (cells, with_events, with_faults) = compare_all(t.path());
    assert_eq!((cells, with_events, with_faults), (1, 1, 1));
    let outcome =
        bridgewire::pins::compute(&bridgewire::cell::discover(t.path()).unwrap()[0], None);
    assert!(
        outcome.counts.unhandled > 0 && outcome.counts.grammar_drops > 0,
        "{outcome:?}"
    );
    assert!(outcome.invalid.len() >= 4, "{:?}", outcome.invalid);
    assert!(outcome.lane_errors.len() >= 3, "{:?}", outcome.lane_errors);
    assert!(!outcome.warnings.is_empty(), "{:?}", outcome.warnings);
}

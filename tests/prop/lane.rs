//! Lane entries: the reader (`src/lane/read.rs`), the writer's encoding (`src/lane/write.rs`),
//! `Entry::to_line`, scope names and JS number printing (`src/jsjson.rs`).

use super::{bytes, config, finite_f64, io_config, json, text};
use bridgewire::jsjson::format_f64;
use bridgewire::lane::read::{LaneError, LaneErrorKind, LaneReader, parse_entry, peek_key};
use bridgewire::lane::write::{LaneWriter, Line, encode_entry};
use bridgewire::lane::{Entry, scope_dir_name};
use proptest::prelude::*;
use serde_json::{Map, Value};
use std::io::{BufReader, Cursor};
use std::path::Path;

const DIRS: [&str; 5] = [
    "runtime→bridge",
    "bridge→runtime",
    "provider→bridge",
    "bridge→provider",
    "d\"\\\n",
];

fn dir() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(DIRS.to_vec()).prop_map(str::to_string),
        1 => text(8),
    ]
}

/// The bytes of a recorded line: any bytes (often not UTF-8) or any text.
fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(200),
        text(60).prop_map(String::into_bytes),
        super::json(3).prop_map(|v| v.to_string().into_bytes()),
    ]
}

fn encoded(ts: f64, run: f64, seq: u64, dir: &str, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_entry(&mut out, &format_f64(ts), &format_f64(run), seq, dir, b);
    out
}

/// A lane-like file: well-formed entries, broken ones, blank lines, CRLF, raw bytes.
fn lane_file() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => (line_bytes(), 1u64..1000).prop_map(|(b, seq)| {
            let mut e = encoded(1.0, 2.0, seq, "bridge→runtime", &b);
            e.pop();
            e
        }),
        2 => (line_bytes(), 1u64..1000, any::<prop::sample::Index>(), any::<u8>()).prop_map(
            |(b, seq, at, byte)| {
                // One byte of a good entry replaced.
                let mut e = encoded(1.0, 2.0, seq, "bridge→runtime", &b);
                e.pop();
                let i = at.index(e.len());
                e[i] = byte;
                e
            }
        ),
        1 => Just(Vec::new()),
        1 => Just(b"\r".to_vec()),
        1 => Just(b"  \t ".to_vec()),
        2 => bytes(300),
    ];
    (prop::collection::vec(piece, 0..8), any::<bool>()).prop_map(|(pieces, trailing)| {
        let mut out = pieces.join(&b'\n');
        if trailing && !out.is_empty() {
            out.push(b'\n');
        }
        out
    })
}

fn read(input: &[u8], cap: usize, max_line: usize) -> Vec<Result<Entry, LaneError>> {
    LaneReader::new(
        BufReader::with_capacity(cap, Cursor::new(input.to_vec())),
        Path::new("lane.ndjson"),
        Some("bridge→runtime"),
    )
    .with_max_line(max_line)
    .collect()
}

fn check_reader_bounds(input: &[u8], max_line: usize, got: &[Result<Entry, LaneError>]) {
    let lines = input.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    assert!(got.len() as u64 <= lines, "more items than lines");
    let mut last_line = 0;
    let mut line_of = Vec::new();
    for (i, r) in got.iter().enumerate() {
        match r {
            Ok(e) => {
                // A decoded string is never longer than its JSON text.
                assert!(e.line.len() <= input.len().min(max_line));
                assert!(e.dir.len() <= input.len().min(max_line));
                line_of.push(None);
            }
            Err(err) => {
                assert!(
                    err.line > last_line && err.line <= lines,
                    "line {} of {lines}",
                    err.line
                );
                last_line = err.line;
                line_of.push(Some(err.line));
                match &err.kind {
                    LaneErrorKind::TooLong(len, max) => {
                        assert_eq!(*max, max_line);
                        assert!(*len > max_line && *len <= input.len());
                    }
                    LaneErrorKind::TruncatedLastLine => {
                        assert_eq!(i, got.len() - 1, "a cut line is the last");
                        assert_ne!(input.last(), Some(&b'\n'));
                    }
                    LaneErrorKind::Json(m) => assert!(m.len() < 512, "bounded message"),
                    LaneErrorKind::Io(_) => panic!("no I/O error from memory"),
                    _ => {}
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes: no panic, one item per non-blank line at most, line numbers increasing and
    /// in range, every cap honoured, and the same result whatever the read buffer's size.
    #[test]
    fn reader_survives_any_bytes(
        input in prop_oneof![lane_file(), bytes(1024)],
        cap in 1usize..64,
        max_line in prop::sample::select(vec![16usize, 100, 1 << 20]),
    ) {
        let got = read(&input, cap, max_line);
        check_reader_bounds(&input, max_line, &got);
        let reference = read(&input, 64 * 1024, max_line);
        prop_assert_eq!(format!("{got:?}"), format!("{reference:?}"));
    }

    /// A lane cut at any byte (a recorder killed mid-write): every whole line loads as
    /// written; the cut line is an entry or the cut-line warning, never an error.
    #[test]
    fn cut_lanes_load_with_at_most_the_warning(
        lines in prop::collection::vec(line_bytes(), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut file = Vec::new();
        let mut ends = Vec::new();
        for (i, b) in lines.iter().enumerate() {
            file.extend(encoded(1.0, 2.0, i as u64 + 1, "bridge→runtime", b));
            ends.push(file.len());
        }
        let cut = cut.index(file.len() + 1);
        let got = read(&file[..cut], 4096, 1 << 20);
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        for (i, r) in got.iter().enumerate() {
            match r {
                Ok(e) => {
                    prop_assert!(i <= whole);
                    prop_assert_eq!(&e.raw_bytes(), &lines[i]);
                }
                Err(e) => {
                    prop_assert!(e.is_warning(), "{}", e);
                    prop_assert_eq!(i, whole);
                }
            }
        }
        prop_assert!(got.len() >= whole && got.len() <= whole + 1);
    }

    /// Writer encoding → reader: the exact bytes come back (via `lineBase64` when not UTF-8),
    /// and re-encoding the entry gives back the written bytes (the format is canonical).
    #[test]
    fn written_entries_round_trip(
        b in line_bytes(),
        ts in 0u64..(1u64 << 53),
        run in 0u64..(1u64 << 53),
        seq in 0u64..(1u64 << 53), // seqs are doubles when read (bb's are JS numbers)
        dir in dir(),
    ) {
        let (ts, run) = (ts as f64, run as f64);
        let line = encoded(ts, run, seq, &dir, &b);
        prop_assert_eq!(line.last(), Some(&b'\n'));
        prop_assert_eq!(memchr::memchr(b'\n', &line), Some(line.len() - 1), "one line");
        let e = parse_entry(&line[..line.len() - 1], Some(&dir)).unwrap();
        prop_assert_eq!((e.ts, e.run, e.seq), (ts, run, seq as f64));
        prop_assert_eq!(&e.dir, &dir);
        prop_assert_eq!(&e.raw_bytes(), &b);
        match std::str::from_utf8(&b) {
            Ok(t) => {
                prop_assert_eq!(&e.line, t);
                prop_assert!(e.extra.is_empty());
            }
            Err(_) => {
                prop_assert_eq!(&e.line, &String::from_utf8_lossy(&b));
                prop_assert!(e.extra.contains_key("lineBase64"));
            }
        }
        prop_assert_eq!(format!("{}\n", e.to_line()).into_bytes(), line.clone());
        prop_assert_eq!(peek_key(&line).map(|k| (k.run, k.seq)), Some((run, seq as f64)));
    }

    /// Any entry (any finite doubles, any strings, extra keys of any JSON): `to_line` then
    /// `parse_entry` gives the entry back, and printing it again gives the same bytes.
    #[test]
    fn entry_lines_round_trip(
        ts in finite_f64(),
        run in finite_f64(),
        seq in finite_f64(),
        dir in dir(),
        line in text(40),
        extra in prop::collection::vec((super::key(), json(2)), 0..4),
    ) {
        let extra: Map<String, Value> = extra
            .into_iter()
            .filter(|(k, _)| !["ts", "run", "seq", "dir", "line"].contains(&k.as_str()))
            .collect();
        let e = Entry { ts, run, seq, dir, line, extra };
        let text = e.to_line();
        let back = parse_entry(text.as_bytes(), None).unwrap();
        // -0 prints as 0, as JavaScript prints it.
        prop_assert_eq!((back.ts, back.run, back.seq), (e.ts + 0.0, e.run + 0.0, e.seq + 0.0));
        prop_assert_eq!(&back.dir, &e.dir);
        prop_assert_eq!(&back.line, &e.line);
        prop_assert_eq!(&back.extra, &e.extra);
        prop_assert_eq!(back.to_line(), text);
    }

    /// The sortedness pre-scan's fast key read agrees with the full parse whenever it answers,
    /// whatever order the keys come in.
    #[test]
    fn peek_key_agrees_with_the_full_parse(
        order in Just(vec!["ts", "run", "seq", "dir", "line"]).prop_shuffle(),
        with_run in any::<bool>(),
        ts in finite_f64(),
        run in finite_f64(),
        seq in finite_f64(),
    ) {
        let mut o = String::from("{");
        for k in order.iter().filter(|&&k| with_run || k != "run") {
            if o.len() > 1 {
                o.push(',');
            }
            let v = match *k {
                "ts" => format_f64(ts),
                "run" => format_f64(run),
                "seq" => format_f64(seq),
                "dir" => "\"bridge→runtime\"".to_string(),
                _ => "\"{}\"".to_string(),
            };
            o.push_str(&format!("\"{k}\":{v}"));
        }
        o.push('}');
        let full = parse_entry(o.as_bytes(), None).unwrap().key();
        if let Some(k) = peek_key(o.as_bytes()) {
            prop_assert_eq!((k.run, k.seq), (full.run, full.seq), "{}", o);
        }
    }

    /// Duplicated keys after bb's layout (plain or spelled with an escape, with or without
    /// spaces): the full parse takes the last one, and so does the fast read or it declines.
    #[test]
    fn peek_key_takes_the_last_of_duplicated_keys(
        run in finite_f64(),
        seq in finite_f64(),
        dups in prop::collection::vec(
            (
                prop_oneof![
                    Just("run"), Just("seq"), Just("r\\u0075n"), Just("\\u0073eq"),
                    Just("ts"), Just("dir2"),
                ],
                finite_f64(),
                any::<bool>(),
            ),
            0..3,
        ),
    ) {
        let mut o = format!(
            "{{\"ts\":1,\"run\":{},\"seq\":{},\"dir\":\"bridge→runtime\",\"line\":\"{{}}\"",
            format_f64(run),
            format_f64(seq)
        );
        for (k, v, spaced) in &dups {
            let sp = if *spaced { " " } else { "" };
            o.push_str(&format!(",{sp}\"{k}\"{sp}:{sp}{}", format_f64(*v)));
        }
        o.push('}');
        let full = parse_entry(o.as_bytes(), None).unwrap().key();
        if let Some(k) = peek_key(o.as_bytes()) {
            prop_assert_eq!((k.run, k.seq), (full.run, full.seq), "{}", o);
        }
    }

    /// Any bytes: the fast key read never panics.
    #[test]
    fn peek_key_survives_any_bytes(b in prop_oneof![bytes(200), lane_file()]) {
        let _ = peek_key(&b);
    }

    /// Thread ids come from the wire: any id maps to one safe folder name.
    #[test]
    fn scope_names_stay_inside_the_recording(id in prop_oneof![text(40), "[._/-]{0,6}", text(400)]) {
        let name = scope_dir_name(Some(&id));
        prop_assert!(!name.is_empty() && name.len() <= 217, "{:?}", name);
        prop_assert!(!name.contains('/') && !name.contains('\0'));
        prop_assert!(name != "_process" && name != "." && name != "..");
        prop_assert!(!name.starts_with('_'));
    }

    /// JS number printing: the printed text parses back to the same double.
    #[test]
    fn js_numbers_read_back(x in finite_f64()) {
        let s = format_f64(x);
        prop_assert!(s.len() <= 25, "{}", s);
        let back: f64 = serde_json::from_str(&s).unwrap();
        prop_assert_eq!(back, x + 0.0);
    }
}

proptest! {
    #![proptest_config(io_config())]

    /// `LaneWriter` → files → `LaneReader`: every line of a batch is in its scope's file, in
    /// order, with consecutive seqs and its exact bytes.
    #[test]
    fn lane_files_round_trip(
        lines in prop::collection::vec(
            (prop::option::of(prop::sample::select(vec!["t1", "a b", "_process", ""])),
             prop::sample::select(DIRS[..4].to_vec()),
             line_bytes()),
            1..12),
    ) {
        let dir = super::scratch_dir();
        let mut w = LaneWriter::with_run(dir.path(), 7).unwrap();
        let batch: Vec<Line> = lines
            .iter()
            .map(|(s, d, b)| Line { scope: *s, dir: d, bytes: b, conn: None })
            .collect();
        w.append_batch(&batch);
        prop_assert_eq!(w.failures(), 0);
        let mut files = std::collections::BTreeMap::new();
        for (i, (s, d, b)) in lines.iter().enumerate() {
            files
                .entry((scope_dir_name(*s), *d))
                .or_insert_with(Vec::new)
                .push((i as f64 + 1.0, b.clone()));
        }
        for ((scope, d), want) in files {
            let path = dir.path().join(&scope).join(format!("{d}.ndjson"));
            let got: Vec<(f64, Vec<u8>)> = LaneReader::open(&path, Some(d))
                .unwrap()
                .map(|r| r.map(|e| { assert_eq!(e.run, 7.0); (e.seq, e.raw_bytes()) }))
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(got, want);
        }
    }
}

/// JS number printing agrees with JavaScript itself: `cases()` doubles, one `node` process.
#[test]
fn js_numbers_print_as_node_does() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    if !crate::common::need::node("js_numbers_print_as_node_does") {
        return;
    }
    let mut runner = TestRunner::deterministic();
    let strategy = finite_f64();
    let xs: Vec<f64> = (0..super::cases())
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    let input: String = xs
        .iter()
        .map(|x| format!("{:016x}\n", x.to_bits()))
        .collect();
    let script = "const b=Buffer.alloc(8);let o='';\
        for(const h of require('fs').readFileSync(0,'utf8').split('\\n')){if(!h)continue;\
        b.writeBigUInt64BE(BigInt('0x'+h));o+=String(b.readDoubleBE(0))+'\\n';}\
        process.stdout.write(o);";
    let mut child = std::process::Command::new("node")
        .args(["-e", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(input.as_bytes()).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let js: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(js.len(), xs.len());
    for (x, want) in xs.iter().zip(js) {
        assert_eq!(format_f64(*x), want, "bits {:016x}", x.to_bits());
    }
}

mod regressions {
    use super::*;

    /// Shrunk from `peek_key_agrees_with_the_full_parse`: with `run` after `seq`, the fast key
    /// read took run 0, so a lane whose entries were out of (run, seq) order passed the
    /// sortedness pre-scan and was merged out of order.
    #[test]
    fn a_run_after_seq_is_not_read_as_run_zero() {
        let line = r#"{"ts":0,"seq":0,"run":1e+21,"dir":"bridge→runtime","line":"{}"}"#.as_bytes();
        let full = parse_entry(line, None).unwrap().key();
        assert_eq!((full.run, full.seq), (1e21, 0.0));
        if let Some(k) = peek_key(line) {
            assert_eq!((k.run, k.seq), (full.run, full.seq));
        }
    }

    /// The same bug seen through a cell: two lanes in (run, seq) order by their fast keys but
    /// not by their real ones must still merge in (run, seq) order.
    #[test]
    fn a_lane_sorted_only_by_the_fast_key_merges_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let lane = dir.path().join("bridge→runtime.ndjson");
        std::fs::write(
            &lane,
            concat!(
                r#"{"ts":1,"seq":5,"dir":"bridge→runtime","line":"second","run":1}"#,
                "\n",
                r#"{"ts":1,"run":1,"seq":3,"dir":"bridge→runtime","line":"first"}"#,
                "\n"
            ),
        )
        .unwrap();
        let lanes = [bridgewire::lane::merge::LaneFile {
            dir: "bridge→runtime".into(),
            path: lane,
        }];
        let merged: Vec<String> = bridgewire::lane::merge::MergedEntries::open(&lanes)
            .map(|e| e.line)
            .collect();
        assert_eq!(merged, ["first", "second"]);
    }
}

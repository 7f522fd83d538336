//! `record bb` forwards in two ways: from a pipe without copying through user space
//! (`tee(2)` + `splice(2)`), and by reading and writing for anything else (a file, a socket) or
//! when the kernel refuses a splice (an output opened for appending). Both must forward exactly
//! the bytes read and record exactly the same lanes. The bridge is coreutils' `cat`, which
//! echoes every line, so both runtime lanes are recorded.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BOUND: Duration = Duration::from_secs(120);

/// Lines of every shape the framing cares about: JSON-RPC in several scopes, CRLF endings, non-UTF-8 bytes, control characters and escapes, empty lines,
/// a line longer than the recorder's pipes and read buffer (1 MiB), and no final newline.
fn wire() -> Vec<u8> {
    let mut w = Vec::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..6000u64 {
        let thread = format!("thr_{}", next() % 5);
        let len = (next() % 300) as usize;
        let text: String = (0..len)
            .map(|k| {
                [
                    'a', 'b', ' ', '"', '\\', '\t', '\u{1}', 'é', '\u{2028}', 'z',
                ][(k + i as usize) % 10]
            })
            .collect();
        // As a JSON string: escaped as JSON escapes it.
        let json_text = serde_json::to_string(&text).unwrap();
        let kind = if i % 2000 == 1000 { 9 } else { next() % 9 };
        match kind {
            0 => w.extend_from_slice(
                format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"turn/start","params":{{"threadId":"{thread}","t":{json_text}}}}}"#
                )
                .as_bytes(),
            ),
            1 => w.extend_from_slice(
                // A response to no request: with `cat` echoing requests back, which direction
                // files a request first is a race, and that would make scopes differ by run.
                format!(r#"{{"jsonrpc":"2.0","id":"r{i}","result":{{"ok":true}}}}"#).as_bytes(),
            ),
            2 => {
                w.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"bin\",\"params\":\"\xff\xfe");
                w.extend_from_slice(text.as_bytes());
                w.extend_from_slice(b"\"}\r");
            }
            3 => w.extend_from_slice(b"\r"), // an empty CRLF line
            9 => {
                // Longer than a pipe and a read: framed across chunks.
                w.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"big\",\"params\":{\"threadId\":\"thr_big\",\"s\":\"");
                for _ in 0..(3 << 20) / 18 {
                    w.extend_from_slice(b"0123456789abcdef\\\"");
                }
                w.extend_from_slice(b"\"}}");
            }
            _ => w.extend_from_slice(
                format!(
                    r#"{{"jsonrpc":"2.0","method":"thread/delta","params":{{"threadId":"{thread}","text":{json_text}}}}}"#
                )
                .as_bytes(),
            ),
        }
        w.push(b'\n');
    }
    w.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"unterminated\"}");
    w
}

#[derive(Debug, Clone, Copy)]
enum Input {
    File,
    Pipe,
    Socket,
}

#[derive(Debug, Clone, Copy)]
enum Output {
    File,
    /// Opened with `O_APPEND`: the kernel refuses to splice into it, so the recorder falls
    /// back to writing after its first attempt.
    AppendFile,
    Pipe,
}

/// Runs `record bb -- cat` with `wire` on stdin; returns (stdout bytes, recordings folder).
fn run(t: &Path, wire: &[u8], input: Input, output: Output) -> (Vec<u8>, PathBuf) {
    let name = format!("{input:?}-{output:?}");
    let rec = t.join(&name);
    let in_path = t.join(format!("{name}.in"));
    let out_path = t.join(format!("{name}.out"));
    let mut cmd = Command::new(BRIDGEWIRE);
    cmd.args(["record", "bb", "--dir"])
        .arg(&rec)
        .args(["--", "cat"])
        .stderr(Stdio::inherit());
    let mut feeder: Option<Box<dyn Write + Send>> = None;
    match input {
        Input::File => {
            std::fs::write(&in_path, wire).unwrap();
            cmd.stdin(std::fs::File::open(&in_path).unwrap());
        }
        Input::Pipe => {
            cmd.stdin(Stdio::piped());
        }
        Input::Socket => {
            let (ours, theirs) = UnixStream::pair().unwrap();
            cmd.stdin(Stdio::from(OwnedFd::from(theirs)));
            feeder = Some(Box::new(ours));
        }
    }
    match output {
        Output::File => {
            cmd.stdout(std::fs::File::create(&out_path).unwrap());
        }
        Output::AppendFile => {
            std::fs::File::create(&out_path).unwrap();
            let f = std::fs::OpenOptions::new()
                .append(true)
                .open(&out_path)
                .unwrap();
            cmd.stdout(f);
        }
        Output::Pipe => {
            cmd.stdout(Stdio::piped());
        }
    }
    let mut child = cmd.spawn().unwrap();
    if let Some(stdin) = child.stdin.take() {
        feeder = Some(Box::new(stdin));
    }
    let writer = feeder.map(|mut w| {
        let wire = wire.to_vec();
        std::thread::spawn(move || {
            // Uneven pieces, so lines are cut between the recorder's reads.
            let mut at = 0;
            let mut k = 1usize;
            while at < wire.len() {
                let n = (k * 7919 % 200_000 + 1).min(wire.len() - at);
                if w.write_all(&wire[at..at + n]).is_err() {
                    break;
                }
                at += n;
                k += 1;
            }
        })
    });
    let reader = child.stdout.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        })
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: record bb did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{name}: {status}");
    if let Some(w) = writer {
        w.join().unwrap();
    }
    let out = match reader {
        Some(r) => r.join().unwrap(),
        None => std::fs::read(&out_path).unwrap(),
    };
    (out, rec)
}

/// Every lane file (relative path) with its entries minus `ts`, `run` and `seq` (which differ
/// between runs: the two directions take seqs from one counter in whatever order they run),
/// byte for byte as written.
fn lanes(root: &Path) -> Vec<(PathBuf, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(root).sort_by_file_name() {
        let e = e.unwrap();
        if !e.file_type().is_file() {
            continue;
        }
        let text = std::fs::read(e.path()).unwrap();
        assert!(text.ends_with(b"\n"), "{}: a cut entry", e.path().display());
        let mut last_seq = 0f64;
        let entries = text[..text.len() - 1]
            .split(|&b| b == b'\n')
            .map(|l| {
                let v: serde_json::Value = serde_json::from_slice(l).unwrap();
                let seq = v["seq"].as_f64().unwrap();
                assert!(seq > last_seq, "{}: seqs in order", e.path().display());
                last_seq = seq;
                let at = memchr::memmem::find(l, b",\"dir\":").expect("an entry has a dir");
                l[at..].to_vec()
            })
            .collect();
        out.push((e.path().strip_prefix(root).unwrap().to_path_buf(), entries));
    }
    out
}

/// The recorded lines of one direction in seq order, as bytes (`lineBase64` when present).
fn recorded_lines(root: &Path, dir: &str) -> Vec<Vec<u8>> {
    let mut all: Vec<(f64, Vec<u8>)> = Vec::new();
    for e in walkdir::WalkDir::new(root) {
        let e = e.unwrap();
        if e.file_name().to_string_lossy() != format!("{dir}.ndjson") {
            continue;
        }
        for r in bridgewire::lane::read::LaneReader::open(e.path(), Some(dir)).unwrap() {
            let entry = r.unwrap();
            let bytes = match entry.extra.get("lineBase64").and_then(|b| b.as_str()) {
                Some(b) => bridgewire::util::base64_decode(b).unwrap(),
                None => entry.line.into_bytes(),
            };
            all.push((entry.seq, bytes));
        }
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    all.into_iter().map(|(_, b)| b).collect()
}

#[test]
fn pipe_file_and_socket_ends_forward_the_same_bytes_and_record_the_same_lanes() {
    let t = tempfile::tempdir().unwrap();
    let wire = wire();
    // What bb's framing makes of the wire, computed here: `\n` ends a line, one `\r` before it
    // is dropped, the unterminated tail is a line too.
    let expected: Vec<Vec<u8>> = wire
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .collect();

    let (out, reference) = run(t.path(), &wire, Input::File, Output::File);
    assert!(out == wire, "file → file: stdout differs from stdin");
    for dir in ["runtime→bridge", "bridge→runtime"] {
        let got = recorded_lines(&reference, dir);
        assert_eq!(got.len(), expected.len(), "file → file: {dir} line count");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(g == e, "file → file: {dir} line {i} differs");
        }
    }
    let reference_lanes = lanes(&reference);
    assert!(
        reference_lanes.len() >= 2 * 7,
        "lines went to several scopes: {:?}",
        reference_lanes.iter().map(|l| &l.0).collect::<Vec<_>>()
    );

    for (input, output) in [
        (Input::Pipe, Output::Pipe),
        (Input::Pipe, Output::File),
        (Input::Pipe, Output::AppendFile),
        (Input::File, Output::Pipe),
        (Input::Socket, Output::Pipe),
    ] {
        let (out, rec) = run(t.path(), &wire, input, output);
        assert!(
            out == wire,
            "{input:?} → {output:?}: stdout differs from stdin"
        );
        let got = lanes(&rec);
        assert_eq!(
            got.iter().map(|l| &l.0).collect::<Vec<_>>(),
            reference_lanes.iter().map(|l| &l.0).collect::<Vec<_>>(),
            "{input:?} → {output:?}: lane files"
        );
        for ((path, entries), (_, want)) in got.iter().zip(&reference_lanes) {
            assert_eq!(
                entries.len(),
                want.len(),
                "{input:?} → {output:?}: {path:?}"
            );
            for (i, (g, w)) in entries.iter().zip(want).enumerate() {
                assert!(
                    g == w,
                    "{input:?} → {output:?}: {path:?} entry {i} differs:\n{}\n{}",
                    String::from_utf8_lossy(&g[..g.len().min(300)]),
                    String::from_utf8_lossy(&w[..w.len().min(300)])
                );
            }
        }
    }
}

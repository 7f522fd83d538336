//! `record bb` / `record child` end to end over real pipes: lanes scoped as bb scopes them,
//! every crossed line kept, exit status and signals passed through.

use assert_cmd::Command;
use bridgewire::lane::Entry;
use bridgewire::lane::read::LaneReader;
use std::path::Path;

const PY_BRIDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/py_bridge.py");

fn read(path: &Path, dir: &str) -> Vec<Entry> {
    LaneReader::open(path, Some(dir))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|r| r.unwrap())
        .collect()
}

fn lines(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|e| e.line.as_str()).collect()
}

#[test]
fn tees_both_runtime_lanes_scoped_per_thread() {
    let t = tempfile::tempdir().unwrap();
    let input = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        "this is { not json",
        r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"thr_a"}}"#,
        r#"{"jsonrpc":"2.0","id":"3","method":"thread/stop","params":{"threadId":"../../x"}}"#,
    ]
    .join("\n")
        + "\n";
    let out = Command::cargo_bin("bridgewire")
        .unwrap()
        .args(["record", "bb", "--dir"])
        .arg(t.path())
        .args(["--provider", "py", "--", "python3", PY_BRIDGE])
        .env("PY_BRIDGE_EXIT", "7")
        .write_stdin(input)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "the bridge's exit status passes through"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        4,
        "the runtime sees every bridge line: {stdout}"
    );

    let root = t.path().join("py");
    let p_rt = read(
        &root.join("_process/runtime→bridge.ndjson"),
        "runtime→bridge",
    );
    assert_eq!(
        lines(&p_rt),
        [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "this is { not json"
        ]
    );
    let p_br = read(
        &root.join("_process/bridge→runtime.ndjson"),
        "bridge→runtime",
    );
    assert_eq!(lines(&p_br), [r#"{"jsonrpc":"2.0","id":1,"result":{}}"#]);
    let a_br = read(&root.join("thr_a/bridge→runtime.ndjson"), "bridge→runtime");
    assert_eq!(
        a_br.len(),
        2,
        "identity and the response land in the request's scope"
    );
    assert!(a_br[1].line.contains(r#""id":2"#));
    // A hostile thread id stays inside the recording folder.
    let x = read(
        &root.join("..-..-x/runtime→bridge.ndjson"),
        "runtime→bridge",
    );
    assert_eq!(x.len(), 1);
    let x_br = read(
        &root.join("..-..-x/bridge→runtime.ndjson"),
        "bridge→runtime",
    );
    assert!(x_br[0].line.contains(r#""id":"3""#));
    // One seq counter across lanes, one run.
    let a_rt = read(&root.join("thr_a/runtime→bridge.ndjson"), "runtime→bridge");
    let mut all: Vec<&Entry> = p_rt
        .iter()
        .chain(&p_br)
        .chain(&a_rt)
        .chain(&a_br)
        .chain(&x)
        .chain(&x_br)
        .collect();
    all.sort_by(|a, b| a.seq.total_cmp(&b.seq));
    let seqs: Vec<f64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=8).map(|n| n as f64).collect::<Vec<_>>());
    assert!(all.iter().all(|e| e.run == all[0].run));
    // A runtime line is recorded before the bridge can answer it.
    let init_req = p_rt[0].seq;
    assert!(p_br[0].seq > init_req);
}

#[test]
fn a_bridge_killed_mid_run_keeps_every_line_and_its_signal() {
    let t = tempfile::tempdir().unwrap();
    let input = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        r#"{"jsonrpc":"2.0","method":"die"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"never-answered"}"#,
    ]
    .join("\n")
        + "\n";
    let out = Command::cargo_bin("bridgewire")
        .unwrap()
        .args(["record", "bb", "--dir"])
        .arg(t.path())
        .args(["--", "python3", PY_BRIDGE])
        .write_stdin(input)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "bridgewire ends as the bridge did: {:?}",
        out.status
    );
    let br = read(
        &t.path().join("_process/bridge→runtime.ndjson"),
        "bridge→runtime",
    );
    assert_eq!(
        lines(&br),
        [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"dying"}"#
        ]
    );
    let rt = read(
        &t.path().join("_process/runtime→bridge.ndjson"),
        "runtime→bridge",
    );
    assert!(rt.len() >= 2, "every runtime line that crossed is kept");
}

#[test]
fn record_child_shares_the_seq_counter_and_scopes_by_thread() {
    let t = tempfile::tempdir().unwrap();
    let bw = assert_cmd::cargo::cargo_bin("bridgewire");
    // The provider: answers its one request, via `record child`.
    let provider = serde_json::json!([
        bw.to_str().unwrap(),
        "record",
        "child",
        "--",
        "python3",
        "-c",
        "import sys\nfor l in sys.stdin:\n    print('{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}', flush=True)"
    ]);
    let input =
        r#"{"jsonrpc":"2.0","id":1,"method":"spawn-provider","params":{"threadId":"thr_p"}}"#
            .to_string()
            + "\n";
    let out = Command::cargo_bin("bridgewire")
        .unwrap()
        .args(["record", "bb", "--dir"])
        .arg(t.path())
        .args(["--", "python3", PY_BRIDGE])
        .env("PY_BRIDGE_PROVIDER", provider.to_string())
        .write_stdin(input)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scope = t.path().join("thr_p");
    let to_p = read(&scope.join("bridge→provider.ndjson"), "bridge→provider");
    let from_p = read(&scope.join("provider→bridge.ndjson"), "provider→bridge");
    let rt = read(&scope.join("runtime→bridge.ndjson"), "runtime→bridge");
    let br = read(&scope.join("bridge→runtime.ndjson"), "bridge→runtime");
    assert_eq!(
        lines(&to_p),
        [r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#]
    );
    assert_eq!(
        lines(&from_p),
        [r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#]
    );
    // Cause before effect across all four lanes, on one counter.
    assert!(rt[0].seq < to_p[0].seq && to_p[0].seq < from_p[0].seq && from_p[0].seq < br[0].seq);
    assert_eq!(to_p[0].run, rt[0].run);
}

#[test]
fn record_child_without_a_recorder_is_a_plain_pipe() {
    let out = Command::cargo_bin("bridgewire")
        .unwrap()
        .args(["record", "child", "--", "sh", "-c", "cat; exit 3"])
        .env_remove("BRIDGEWIRE_RECORD_SOCKET")
        .write_stdin("a\nb")
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"a\nb");
}

#[test]
fn secrets_are_redacted_unless_asked_not_to() {
    let input = r#"{"jsonrpc":"2.0","id":1,"method":"thread/start","params":{"threadId":"thr_s","options":{"envVars":{"GH_TOKEN":"ghp_0123456789"}},"note":"ghp_0123456789"}}"#.to_string() + "\n";
    for (flag, redacted) in [(None, true), (Some("--no-redact"), false)] {
        let t = tempfile::tempdir().unwrap();
        let mut cmd = Command::cargo_bin("bridgewire").unwrap();
        cmd.args(["record", "bb", "--dir"]).arg(t.path());
        if let Some(f) = flag {
            cmd.arg(f);
        }
        let out = cmd
            .args(["--", "python3", PY_BRIDGE])
            .write_stdin(input.clone())
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        assert!(out.status.success());
        let rt = read(
            &t.path().join("thr_s/runtime→bridge.ndjson"),
            "runtime→bridge",
        );
        assert_eq!(
            rt[0].line.contains("ghp_0123456789"),
            !redacted,
            "{}",
            rt[0].line
        );
        if redacted {
            assert!(rt[0].line.contains(r#""GH_TOKEN":"[redacted]""#));
            assert!(
                rt[0].line.contains(r#""note":"[redacted]""#),
                "cross-referenced"
            );
        }
    }
}

/// issue 15 item 1: one line of 35 000 nested `[` aborted `record bb` with a stack overflow
/// (exit 134) from either direction, taking the bridge down. It is now recorded as its bytes and
/// forwarded, and the run goes on.
#[test]
fn a_line_nested_35000_deep_is_recorded_from_either_direction() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"n","params":{{"threadId":"thr_d","x":{}{}}}}}"#,
        "[".repeat(35_000),
        "]".repeat(35_000)
    );
    let bare = "[".repeat(35_000);
    let after = r#"{"jsonrpc":"2.0","method":"after"}"#;
    // (bridge command, runtime input): `cat` carries the lines runtime→bridge and back; the
    // Python bridge writes them itself, bridge→runtime only.
    let emit = format!(
        "import sys\nsys.stdout.write({:?})\nsys.stdout.flush()\n",
        format!("{deep}\n{bare}\n{after}\n")
    );
    let cases: [(Vec<&str>, String, &[&str]); 2] = [
        (
            vec!["cat"],
            format!("{deep}\n{bare}\n{after}\n"),
            &["runtime→bridge", "bridge→runtime"],
        ),
        (
            vec!["python3", "-c", emit.as_str()],
            String::new(),
            &["bridge→runtime"],
        ),
    ];
    for (bridge, input, dirs) in cases {
        let t = tempfile::tempdir().unwrap();
        let out = Command::cargo_bin("bridgewire")
            .unwrap()
            .args(["record", "bb", "--dir"])
            .arg(t.path())
            .arg("--")
            .args(&bridge)
            .write_stdin(input)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{bridge:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout, format!("{deep}\n{bare}\n{after}\n"), "{bridge:?}");
        for dir in dirs {
            let scoped = read(&t.path().join(format!("thr_d/{dir}.ndjson")), dir);
            assert_eq!(lines(&scoped), [deep.as_str()], "{bridge:?} {dir}");
            let process = read(&t.path().join(format!("_process/{dir}.ndjson")), dir);
            assert_eq!(lines(&process), [bare.as_str(), after], "{bridge:?} {dir}");
        }
    }
}

/// Every byte a recording holds: each lane file's text plus the decoded `lineBase64` values.
fn recorded_bytes(root: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        if !e.file_type().is_file() {
            continue;
        }
        let text = std::fs::read(e.path()).unwrap();
        for l in text.split(|&b| b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(l)
                && let Some(b) = v["lineBase64"].as_str()
            {
                all.extend(bridgewire::util::base64_decode(b).unwrap());
                all.push(b'\n');
            }
        }
        all.extend(text);
    }
    all
}

/// issue 15 item 3: `record bb` left a documented secret key unredacted nested deeper than
/// 128, on a line with one invalid UTF-8 byte (in both `line` and `lineBase64`), in an
/// `env: [{name, value}]` list, and in a later line that repeats a value redacted earlier.
#[test]
fn secrets_are_redacted_at_any_depth_in_any_bytes_and_in_later_lines() {
    let mut input: Vec<u8> = Vec::new();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"n","params":{{"x":{}{{"apiKey":"sk-deep-0000001"}}{}}}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    input.extend_from_slice(deep.as_bytes());
    input.push(b'\n');
    input.extend_from_slice(br#"{"jsonrpc":"2.0","method":"n","params":{"note":"bad "#);
    input.push(0xff);
    input.extend_from_slice(br#"","apiKey":"sk-nonutf8-0000002"}}"#);
    input.push(b'\n');
    input.extend_from_slice(
        br#"{"jsonrpc":"2.0","id":1,"method":"spawn","params":{"env":[{"name":"GH_TOKEN","value":"ghp_listform_0000003"}]}}"#,
    );
    input.push(b'\n');
    input.extend_from_slice(
        br#"{"jsonrpc":"2.0","method":"log","params":{"text":"token was ghp_listform_0000003 and sk-deep-0000001"}}"#,
    );
    input.push(b'\n');
    let t = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("bridgewire")
        .unwrap()
        .args(["record", "bb", "--dir"])
        .arg(t.path())
        .args(["--", "cat"])
        .write_stdin(input)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success());
    let recorded = recorded_bytes(t.path());
    assert!(!recorded.is_empty());
    let text = String::from_utf8_lossy(&recorded);
    for secret in [
        "sk-deep-0000001",
        "sk-nonutf8-0000002",
        "ghp_listform_0000003",
    ] {
        assert!(!text.contains(secret), "{secret} reached disk:\n{text}");
    }
    // The runtime still got every byte as sent.
    assert!(String::from_utf8_lossy(&out.stdout).contains("sk-nonutf8-0000002"));
}

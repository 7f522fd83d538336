//! `bridgewire package`: raw `record bb` output of a bridge that is not bridgewire's becomes
//! cells with manifests (bb §2.3–2.4), redacted on the way; `_process` keeps the model/list run;
//! the packaged cells pin and replay against the same bridge.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const PY_BRIDGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_chat_bridge.py"
);
const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123";

fn bw(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(BW)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn raw_recordings_become_redacted_cells_with_manifests() {
    let t = tempfile::tempdir().unwrap();
    let raw = t.path().join("raw");
    let mut rec = Command::new(BW)
        .args(["record", "bb", "--dir"])
        .arg(&raw)
        .args(["--provider", "py", "--", "python3", PY_BRIDGE])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2,"client":{"name":"t","version":"0"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"thr_a","cwd":"/w"}}"#.to_string(),
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{{"threadId":"thr_a","input":[{{"type":"text","text":"my token is {TOKEN}"}}],"clientRequestId":"creq_abcdefghjk","options":{{}}}}}}"#
        ),
        r#"{"jsonrpc":"2.0","id":4,"method":"model/list","params":{}}"#.to_string(),
    ];
    {
        let stdin = rec.stdin.as_mut().unwrap();
        for l in &lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(800));
    drop(rec.stdin.take());
    assert!(rec.wait().unwrap().success());

    let table = t.path().join("cells.tsv");
    fs::write(
        &table,
        "py\tgreet\tthr_a\tone turn\n\npy\tmodel-list\t_process\n",
    )
    .unwrap();
    let out = t.path().join("recordings");
    let (code, stdout, stderr) = bw(
        &[
            "package",
            "--raw",
            raw.to_str().unwrap(),
            "--cells",
            table.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--versions",
            r#"{"py":"py-chat 2"}"#,
        ],
        t.path(),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2 cells packaged under"), "{stdout}");
    assert!(stdout.contains("providers: py"), "{stdout}");

    let m: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("py/greet/manifest.json")).unwrap())
            .unwrap();
    let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        &keys[..10],
        [
            "provider",
            "cell",
            "threadId",
            "scope",
            "cliVersion",
            "recordedAt",
            "description",
            "note",
            "bridgeRuns",
            "lines"
        ]
    );
    assert_eq!(m["threadId"], "thr_a");
    assert_eq!(m["scope"], "thread");
    assert_eq!(m["cliVersion"], "py-chat 2");
    assert_eq!(m["note"], "one turn");
    assert_eq!(m["bridgeRuns"], 1);
    // The counts are the lane files' own line counts.
    for (dir, n) in m["lines"].as_object().unwrap() {
        let lane = out.join("py/greet").join(format!("{dir}.ndjson"));
        let have = fs::read_to_string(&lane)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        assert_eq!(n.as_u64().unwrap() as usize, have, "{dir}");
    }
    let p: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("py/model-list/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(p["scope"], "process");
    assert_eq!(p["threadId"], serde_json::Value::Null);
    assert_eq!(p["description"], "process-scoped model/list probe");

    // Redacted on the way: the token in the prompt is gone from every file.
    for cell in ["greet", "model-list"] {
        for f in fs::read_dir(out.join("py").join(cell)).unwrap() {
            let text = fs::read_to_string(f.unwrap().path()).unwrap();
            assert!(!text.contains(TOKEN), "{cell}: {text}");
        }
    }
    assert!(
        fs::read_to_string(out.join("py/greet/runtime→bridge.ndjson"))
            .unwrap()
            .contains("ghp_REDACTED")
    );

    // The cells pin and replay: the recording against the bridge it came from.
    let (code, o, e) = bw(&["pins", "--update", out.to_str().unwrap()], t.path());
    assert_eq!(code, 0, "{o}{e}");
    let (code, o, e) = bw(
        &[
            "parity",
            "--base",
            &format!("rec:{}", out.display()),
            "--head",
            &format!("cmd:python3 {PY_BRIDGE}"),
            "--cell",
            "greet",
            out.to_str().unwrap(),
        ],
        t.path(),
    );
    assert_eq!(code, 0, "{o}{e}");
    assert!(o.contains("1 passed, 0 failed"), "{o}");
}

#[test]
fn a_bad_table_is_named_with_its_line() {
    let t = tempfile::tempdir().unwrap();
    let table = t.path().join("cells.tsv");
    fs::write(&table, "py\tgreet\tthr_a\npy\tonly-two-fields\n").unwrap();
    let (code, _, err) = bw(
        &[
            "package",
            "--raw",
            t.path().to_str().unwrap(),
            "--cells",
            table.to_str().unwrap(),
            "--out",
            t.path().join("o").to_str().unwrap(),
        ],
        t.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cells.tsv:2: expected"), "{err}");
}

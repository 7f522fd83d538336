//! `bridgewire redact` over checked-in recordings of every protocol: secrets planted in every
//! lane (inside the recorded messages: home paths, e-mail addresses, Authorization headers,
//! token shapes, secret env values, a value named with --secret) are all gone afterwards, a
//! second run changes nothing, and a secret the passes cannot reach (outside `line`) makes it
//! refuse (exit 3) naming the file and line, writing nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

/// What is planted, and the text that must not survive.
const PLANTED: &[(&str, &str)] = &[
    ("cwd", "/home/alice/project"),
    ("dashed", "-home-alice-project"),
    ("mail", "alice.smith@corp.example.org"),
    ("gh", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ("anthropic", "sk-ant-api03-abcdefghijklmnopqrstuvwx"),
    ("openai", "sk-proj0123456789abcdefghijkl"),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlc2lnbmF0dXJl",
    ),
    ("bearer", "Bearer abcdefghijklmnopqrstuvwxyz0123456789"),
    ("slack", "xoxb-0123456789-abcdefghijklmnopqrst"),
    ("known", "correct-horse-battery-staple"),
];

fn lanes(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in walk(root) {
        if e.extension().is_some_and(|x| x == "ndjson") {
            out.push(e);
        }
    }
    out.sort();
    out
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(p).unwrap() {
        let e = e.unwrap().path();
        if e.is_dir() {
            out.extend(walk(&e));
        } else {
            out.push(e);
        }
    }
    out
}

/// One cell of each protocol from the bundled recordings, with a planted entry appended to
/// every lane (its `line` a JSON message carrying every secret, an env map and a header).
fn planted_tree(t: &Path) -> PathBuf {
    let root = t.join("recordings");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings");
    for cell in [
        "bb-ref/bb-ref/fork",
        "sidebridge/sidebridge-ref",
        "bridle/ref-hub/bot-1__alice",
    ] {
        let from = src.join(cell);
        let from = if from.is_dir()
            && fs::read_dir(&from)
                .unwrap()
                .any(|e| e.unwrap().path().is_dir())
        {
            // A bridge folder: take its first cell.
            let mut dirs: Vec<PathBuf> = fs::read_dir(&from)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_dir())
                .collect();
            dirs.sort();
            dirs.remove(0)
        } else {
            from
        };
        let to = root.join(cell);
        fs::create_dir_all(&to).unwrap();
        for f in fs::read_dir(&from).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "ndjson") {
                fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    let mut msg = serde_json::Map::new();
    for (k, v) in PLANTED {
        msg.insert((*k).into(), (*v).into());
    }
    msg.insert(
        "options".into(),
        serde_json::json!({"envVars": {"GITHUB_TOKEN": "plain-env-secret-value-1", "PATH": "/bin"}}),
    );
    msg.insert(
        "headers".into(),
        serde_json::json!({"Authorization": "Basic YWxpY2U6cGFzc3dvcmQ="}),
    );
    msg.insert("ls".into(), " drwxr-xr-x 2 alice alice 4096 ".into());
    let lanes = lanes(&root);
    assert!(lanes.len() >= 8, "{lanes:?}");
    for lane in &lanes {
        let dir = lane.file_stem().unwrap().to_string_lossy().into_owned();
        let entry = serde_json::json!({"ts": 1, "run": 1, "seq": 999999, "dir": dir,
            "line": serde_json::Value::Object(msg.clone()).to_string()});
        let mut text = fs::read_to_string(lane).unwrap();
        text.push_str(&format!("{entry}\n"));
        fs::write(lane, text).unwrap();
    }
    root
}

fn redact(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BW).arg("redact").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn survivors(root: &Path) -> Vec<String> {
    let mut hits = Vec::new();
    for f in walk(root) {
        let text = fs::read_to_string(&f).unwrap();
        for (what, secret) in PLANTED.iter().chain([
            &("env", "plain-env-secret-value-1"),
            &("basic", "YWxpY2U6cGFzc3dvcmQ="),
            &("owner", "alice alice"),
        ]) {
            if text.contains(secret) {
                hits.push(format!("{}: {what}", f.display()));
            }
        }
    }
    hits
}

#[test]
fn no_planted_secret_survives_in_any_lane_and_a_second_run_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let root = planted_tree(t.path());
    assert!(!survivors(&root).is_empty(), "the plant worked");
    let out = t.path().join("redacted");
    let (code, stdout, stderr) = redact(&[
        root.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--home",
        "/home/alice",
        "--secret",
        "correct-horse-battery-staple",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("0 survivors"), "{stdout}");
    assert_eq!(survivors(&out), Vec::<String>::new());
    assert_eq!(lanes(&out).len(), lanes(&root).len());
    // The cells still load: every lane entry is still an entry.
    for lane in lanes(&out) {
        for line in fs::read_to_string(&lane).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v["line"].is_string(), "{}: {line}", lane.display());
        }
    }
    // Idempotent: redacting the redacted tree in place changes no byte.
    let before: Vec<(PathBuf, Vec<u8>)> = walk(&out)
        .into_iter()
        .map(|p| (p.clone(), fs::read(p).unwrap()))
        .collect();
    let (code, stdout, stderr) = redact(&[out.to_str().unwrap(), "--home", "/home/alice"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (p, bytes) in before {
        assert_eq!(fs::read(&p).unwrap(), bytes, "{} changed", p.display());
    }
}

#[test]
fn a_secret_the_passes_cannot_reach_is_refused_and_named() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("rec/p/c");
    fs::create_dir_all(&root).unwrap();
    let lane = root.join("runtime→bridge.ndjson");
    // The token sits in an entry field, outside `line`: the passes leave entry fields alone.
    fs::write(
        &lane,
        "{\"ts\":1,\"run\":1,\"seq\":1,\"dir\":\"runtime→bridge\",\"line\":\"{}\"}\n\
         {\"ts\":2,\"run\":1,\"seq\":2,\"dir\":\"runtime→bridge\",\"line\":\"{}\",\"note\":\"ghp_abcdefghijklmnopqrstuvwxyz0123\"}\n",
    )
    .unwrap();
    let before = fs::read(&lane).unwrap();
    let (code, stdout, stderr) = redact(&[
        t.path().join("rec").to_str().unwrap(),
        "--home",
        "/home/alice",
    ]);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stderr.starts_with("SECRETS STILL PRESENT"), "{stderr}");
    assert!(
        stderr.contains("runtime→bridge.ndjson:2: GitHub token `ghp_abcdefghijklmnopqrst`"),
        "{stderr}"
    );
    assert_eq!(fs::read(&lane).unwrap(), before, "nothing written");
}

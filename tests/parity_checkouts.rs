//! Parity between two checkouts of a bridge that is not bridgewire's: each `ref:` leg runs the
//! bridge *of its own checkout* (working directory and relative paths inside it), one changed
//! reply fails on exactly that event, the same ref twice passes, and a config that would run
//! the same file on both legs is refused before anything runs. Cells come from
//! `record-cells`, so this is also the record-own-cells → `pins --update` → parity flow.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");
const PY_SIDE_BRIDGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_side_bridge.py"
);
const NODE_HUB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/node_hub.js");
const NODE_MODULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/node_modules");
const PY_BRIDGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_chat_bridge.py"
);

fn bw(args: &[&str], cwd: &Path) -> (i32, String, String) {
    assert!(
        Path::new(NODE_MODULES).join("socket.io").is_dir(),
        "run `npm ci --prefix tests/node` first (the Node hub peer needs socket.io)"
    );
    let out = Command::new(BW)
        .args(args)
        .current_dir(cwd)
        .env("NODE_PATH", NODE_MODULES)
        .output()
        .expect("run bridgewire");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn git(repo: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// A bridge that is not bridgewire's, in a version v2 and a version v3 that changes one reply.
struct Peer {
    protocol: &'static str,
    source: &'static str,
    /// The file name in the scratch repository, and the `[parity] bridge` command running it.
    file: &'static str,
    bridge: &'static str,
    /// The text v3 changes, and what it becomes.
    from: &'static str,
    to: &'static str,
    /// How many events v3 changes over the default scenarios (`turn`: one prompt; `resume`:
    /// two prompts), and why.
    changed: usize,
    /// Whether the protocol's handshake names the bridge (so v3 is reported up front).
    identity: bool,
}

const PEERS: &[Peer] = &[
    Peer {
        protocol: "bb",
        source: PY_BRIDGE,
        file: "bridge.py",
        bridge: "python3 bridge.py",
        from: "VERSION = \"2\"\nREPLY = \"All done.\"",
        to: "VERSION = \"3\"\nREPLY = \"All done, and then some.\"",
        changed: 3, // one final agent message per prompt
        identity: true,
    },
    Peer {
        protocol: "sidebridge",
        source: PY_SIDE_BRIDGE,
        file: "bridge.py",
        bridge: "python3 bridge.py",
        from: "REPLY = \"You said\"",
        to: "REPLY = \"You wrote\"",
        changed: 3, // one reply per prompt
        identity: false,
    },
    Peer {
        protocol: "bridle",
        source: NODE_HUB,
        file: "hub.js",
        bridge: "node hub.js",
        from: "const SUFFIX = \"\";",
        to: "const SUFFIX = \" (v3)\";",
        changed: 3, // one relayed answer per prompt
        identity: false,
    },
];

fn source(p: &Peer, v3: bool) -> String {
    let text = fs::read_to_string(p.source).unwrap();
    assert!(text.contains(p.from), "{}: no {:?}", p.source, p.from);
    if v3 { text.replace(p.from, p.to) } else { text }
}

/// A scratch repository: v2, then v3 changing one reply. Returns (repo, cells) with the cells
/// recorded from v2's own bridge by `record-cells` and pinned.
fn scratch(t: &Path, p: &Peer) -> (PathBuf, PathBuf) {
    let repo = t.join("repo");
    fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    fs::write(
        repo.join("bridgewire.toml"),
        format!("[parity]\nbridge = \"{}\"\n", p.bridge),
    )
    .unwrap();
    fs::write(repo.join(p.file), source(p, false)).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "v2"]);
    git(&repo, &["tag", "v2"]);
    let cells = t.join("cells");
    let mut args = vec![
        "record-cells",
        p.protocol,
        "--provider",
        "own",
        "--out",
        cells.to_str().unwrap(),
        "--",
    ];
    args.extend(p.bridge.split(' '));
    let (code, out, err) = bw(&args, &repo);
    assert_eq!(code, 0, "{}: {out}{err}", p.protocol);
    let (code, out, err) = bw(&["pins", "--update", cells.to_str().unwrap()], &repo);
    assert_eq!(code, 0, "{out}{err}");
    fs::write(repo.join(p.file), source(p, true)).unwrap();
    git(&repo, &["commit", "-qam", "v3"]);
    git(&repo, &["tag", "v3"]);
    (repo, cells)
}

fn worktrees(repo: &Path) -> usize {
    let list = Command::new("git")
        .args(["worktree", "list"])
        .current_dir(repo)
        .output()
        .unwrap();
    String::from_utf8_lossy(&list.stdout).lines().count()
}

/// Record own cells → pins → parity with the recording passes; v2 against v3 fails on exactly
/// the changed events; v3 against v3 passes: for each protocol.
#[test]
fn each_ref_runs_its_own_bridge_and_one_changed_reply_is_one_event() {
    // Each protocol has its own scratch repository and cells, and its legs mostly wait: the
    // three run at once (a panic in one fails the test, naming its protocol).
    std::thread::scope(|s| {
        for p in PEERS {
            s.spawn(move || refs_of_one_protocol(p));
        }
    });
}

fn refs_of_one_protocol(p: &Peer) {
    let t = tempfile::tempdir().unwrap();
    let (repo, cells) = scratch(t.path(), p);
    let cells = cells.to_str().unwrap();
    let ctx = p.protocol;

    // The recorded bridge against its own cells: pins hold, parity with the recording passes.
    let (code, out, err) = bw(&["pins", cells], &repo);
    assert_eq!(code, 0, "{ctx}: {out}{err}");
    let (code, out, err) = bw(
        &[
            "parity",
            "--base",
            &format!("rec:{cells}"),
            "--head",
            "ref:v2",
            cells,
        ],
        &repo,
    );
    assert_eq!(code, 0, "{ctx}: {out}{err}");
    assert!(out.contains("2 passed, 0 failed"), "{ctx}: {out}");

    // v2 against v3, run from a working tree at v3: the caller's file is v3, so a leg that
    // ran the caller's file would pass.
    let (code, out, err) = bw(
        &["parity", "--base", "ref:v2", "--head", "ref:v3", cells],
        &repo,
    );
    assert_eq!(code, 1, "{ctx}: {out}{err}");
    assert_eq!(
        out.matches("\nFAIL ").count() + usize::from(out.starts_with("FAIL ")),
        2,
        "{ctx}: {out}"
    );
    let only = |side: &str| -> Vec<&str> {
        out.lines()
            .filter(|l| l.starts_with(&format!("  events only in {side}")))
            .collect()
    };
    assert_eq!(only("base").len(), p.changed, "{ctx}: {out}");
    assert_eq!(only("head").len(), p.changed, "{ctx}: {out}");
    assert!(!out.contains("id differs"), "{ctx}: {out}");
    if p.identity {
        // The head leg is a different build than the cells' bridge: said before any cell.
        let warn = out
            .find("recorded from another bridge than the head leg's")
            .expect("identity warning");
        assert!(warn < out.find("FAIL ").unwrap(), "{out}");
        assert!(
            !out.contains("than the base leg's"),
            "v2 recorded them: {out}"
        );
    }

    // The same commit on both legs (two names of it): refused, nothing built (both ran and
    // passed before); on purpose, two worktrees, two copies of the files, no difference.
    let (code, out, err) = bw(
        &["parity", "--base", "ref:v3", "--head", "ref:HEAD", cells],
        &repo,
    );
    assert_eq!(code, 2, "{ctx}: {out}{err}");
    assert!(err.contains("both legs are commit "), "{ctx}: {err}");
    assert!(!out.contains("PASS"), "{ctx}: {out}");
    let (code, out, err) = bw(
        &[
            "parity",
            "--allow-same-bridge",
            "--base",
            "ref:v3",
            "--head",
            "ref:v3",
            cells,
        ],
        &repo,
    );
    assert_eq!(code, 0, "{ctx}: {out}{err}");
    assert!(out.contains("2 passed, 0 failed"), "{ctx}: {out}");
    assert_eq!(worktrees(&repo), 1, "{ctx}: worktrees are removed");
}

#[test]
fn a_config_that_runs_the_same_file_on_both_legs_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared_bridge.py");
    fs::copy(PY_BRIDGE, &shared).unwrap();
    let mut legs = Vec::new();
    for name in ["a", "b"] {
        let dir = t.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("bridgewire.toml"),
            format!("[parity]\nbridge = \"python3 {}\"\n", shared.display()),
        )
        .unwrap();
        legs.push(format!("dir:{}", dir.display()));
    }
    let cells = t.path().join("cells");
    fs::create_dir_all(cells.join("x/y")).unwrap();
    fs::write(
        cells.join("x/y/runtime→bridge.ndjson"),
        "{\"ts\":1,\"run\":1,\"seq\":1,\"dir\":\"runtime→bridge\",\"line\":\"{}\"}\n",
    )
    .unwrap();
    let (code, out, err) = bw(
        &[
            "parity",
            "--base",
            &legs[0],
            "--head",
            &legs[1],
            cells.to_str().unwrap(),
        ],
        t.path(),
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("both legs would run the same files"), "{err}");
    assert!(err.contains(&shared.display().to_string()), "{err}");
    assert!(!out.contains("PASS") && !out.contains("FAIL"), "{out}");
}

#[test]
fn a_leg_that_cannot_start_exits_2_with_the_cause_first() {
    let t = tempfile::tempdir().unwrap();
    let (repo, cells) = scratch(t.path(), &PEERS[0]);
    let cells = cells.to_str().unwrap();
    let (code, out, err) = bw(
        &[
            "parity",
            "--base",
            "ref:v2",
            "--head",
            "cmd:./no-such-bridge --flag",
            cells,
        ],
        &repo,
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.starts_with("error: the head leg cannot start: `./no-such-bridge --flag` cannot start"),
        "{err}"
    );
    assert!(out.is_empty(), "no cell ran: {out}");
    assert_eq!(worktrees(&repo), 1, "the base worktree is removed");

    // Every cell skipped: nothing was compared, exit 2, the cause on the first line.
    let (code, out, err) = bw(
        &[
            "parity",
            "--base",
            &format!("rec:{cells}"),
            "--head",
            "ref:v2",
            "--cell",
            "turn",
            cells,
        ],
        &repo,
    );
    assert_eq!(code, 0, "{out}{err}");
    fs::write(
        Path::new(cells).join("own/turn/manifest.json"),
        r#"{"scope":"process"}"#,
    )
    .unwrap();
    let (code, out, err) = bw(
        &[
            "parity",
            "--base",
            &format!("rec:{cells}"),
            "--head",
            "ref:v2",
            "--cell",
            "turn",
            cells,
        ],
        &repo,
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.starts_with("error: nothing was compared: every cell was skipped"),
        "{out}"
    );
}

/// SIGINT or SIGTERM while a `ref:` leg is being built removes the worktrees it added.
#[test]
fn an_interrupted_run_leaves_no_worktree_behind() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    fs::write(
        repo.join("bridgewire.toml"),
        "[parity]\nbuild = \"touch built; sleep 60\"\nbridge = \"python3 bridge.py\"\n",
    )
    .unwrap();
    fs::copy(PY_BRIDGE, repo.join("bridge.py")).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "v1"]);
    let cells = t.path().join("cells/x/y");
    fs::create_dir_all(&cells).unwrap();
    fs::write(
        cells.join("runtime→bridge.ndjson"),
        "{\"ts\":1,\"run\":1,\"seq\":1,\"dir\":\"runtime→bridge\",\"line\":\"{}\"}\n",
    )
    .unwrap();
    for sig in [libc_sig::SIGINT, libc_sig::SIGTERM] {
        let mut cmd = Command::new(BW);
        let mut child = common::proc::sigint_as_default(&mut cmd)
            .args([
                "parity",
                "--allow-same-bridge",
                "--base",
                "ref:HEAD",
                "--head",
                "ref:HEAD",
            ])
            .arg(t.path().join("cells"))
            .current_dir(&repo)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait (bounded) until both builds run, i.e. both worktrees exist.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while worktrees(&repo) < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "no worktrees appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = Command::new("kill")
            .args([format!("-{sig}"), child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "bridgewire did not exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}");
        assert_eq!(worktrees(&repo), 1, "signal {sig}: worktrees removed");
    }
}

mod libc_sig {
    pub const SIGINT: i32 = 2;
    pub const SIGTERM: i32 = 15;
}

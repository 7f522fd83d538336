//! `bridgewire parity` with live legs: the reference bridge against itself, against a variant
//! that changes one event, with an allowlist, and as two git refs of a scratch repository.

use assert_cmd::Command;
use std::fs;
use std::path::Path;

const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");

fn recordings() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("recordings/bb-ref")
        .display()
        .to_string()
}

fn parity(base: &str, head: &str, extra: &[&str], cwd: Option<&Path>) -> (i32, String) {
    let mut cmd = Command::cargo_bin("bridgewire").unwrap();
    // The same command on both legs is a determinism check, asked for on purpose.
    cmd.args([
        "parity",
        "--base",
        base,
        "--head",
        head,
        "--allow-same-bridge",
    ])
    .args(extra)
    .arg(recordings());
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let out = cmd
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn variant() -> String {
    format!("cmd:env BB_REF_BRIDGE_BREAK=reword-final-message {BRIDGE}")
}

#[test]
fn the_reference_bridge_against_itself_passes() {
    let (code, out) = parity(
        &format!("cmd:{BRIDGE}"),
        &format!("cmd:{BRIDGE}"),
        &[],
        None,
    );
    assert_eq!(code, 0, "{out}");
    let cells = fs::read_dir(Path::new(&recordings()).join("bb-ref"))
        .unwrap()
        .count();
    assert!(
        out.contains(&format!("{cells} passed, 0 failed, 0 skipped")),
        "{out}"
    );
}

#[test]
fn a_variant_fails_on_exactly_the_changed_event_and_the_allowlist_masks_it() {
    let t = tempfile::tempdir().unwrap();
    let (code, out) = parity(
        &format!("cmd:{BRIDGE}"),
        &variant(),
        &["--cell", "turn-tools"],
        None,
    );
    assert_eq!(code, 1, "{out}");
    let base_only: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  events only in base"))
        .collect();
    let head_only: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  events only in head"))
        .collect();
    assert_eq!((base_only.len(), head_only.len()), (1, 1), "{out}");
    assert!(
        base_only[0].contains("item/completed:agentMessage"),
        "{out}"
    );
    assert!(
        out.contains("(reworded)\""),
        "the entry diff shows the change: {out}"
    );

    let allow = t.path().join("allow.json");
    fs::write(
        &allow,
        r##"[{"provider":"bb-ref","cell":"turn-tools","layer":"events","path":"/*/item/text","pr":"#12","reason":"final message reworded"},
            {"provider":"bb-ref","cell":"turn-tools","layer":"rows","path":"/*/text","pr":"#12","reason":"final message reworded"}]"##,
    )
    .unwrap();
    let (code, out) = parity(
        &format!("cmd:{BRIDGE}"),
        &variant(),
        &[
            "--cell",
            "turn-tools",
            "--allowlist",
            allow.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}");

    // The same allowlist against two identical legs: the entries still mask (the texts exist
    // on both legs), so nothing is stale. An entry for a field no event has is stale.
    fs::write(
        &allow,
        r##"[{"provider":"bb-ref","cell":"turn-tools","layer":"events","path":"/*/item/nonexistent","pr":"#13","reason":"gone"}]"##,
    )
    .unwrap();
    let (code, out) = parity(
        &format!("cmd:{BRIDGE}"),
        &format!("cmd:{BRIDGE}"),
        &[
            "--cell",
            "turn-tools",
            "--allowlist",
            allow.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("stale allowlist entry (#13) events /*/item/nonexistent — gone"),
        "{out}"
    );
}

#[test]
fn two_git_refs_of_a_scratch_repository() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path();
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git")
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
    };
    git(&["init", "-q"]);
    // The build step writes the bridge script, as a real build would produce its binary.
    fs::write(
        repo.join("bridgewire.toml"),
        "[parity]\nbuild = \"sh build.sh\"\nbridge = \"./out/bridge.sh\"\n",
    )
    .unwrap();
    let build = |mode: &str| {
        format!(
            "mkdir -p out\nprintf '#!/bin/sh\\nBB_REF_BRIDGE_BREAK={mode} exec {BRIDGE}\\n' > out/bridge.sh\nchmod +x out/bridge.sh\n"
        )
    };
    fs::write(repo.join("build.sh"), build("")).unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "base"]);
    git(&["tag", "v1"]);
    fs::write(repo.join("build.sh"), build("reword-final-message")).unwrap();
    git(&["commit", "-qam", "reword"]);

    let (code, out) = parity("ref:v1", "ref:v1", &["--cell", "fork"], Some(repo));
    assert_eq!(code, 0, "{out}");
    let (code, out) = parity("ref:v1", "ref:HEAD", &["--cell", "fork"], Some(repo));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL bb-ref/fork"), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("  events only in head"))
            .count(),
        1,
        "{out}"
    );
    // The worktrees are gone afterwards.
    let list = std::process::Command::new("git")
        .args(["worktree", "list"])
        .current_dir(repo)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&list.stdout).lines().count(),
        1,
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
}

/// Parity is protocol-generic: Side Bridge cells replay live on both legs too.
#[test]
fn side_bridge_cells_compare_live() {
    let sb = env!("CARGO_BIN_EXE_sidebridge-ref");
    let cells = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/sidebridge");
    let run = |head: &str| {
        let out = Command::cargo_bin("bridgewire")
            .unwrap()
            .args([
                "parity",
                "--allow-same-bridge",
                "--base",
                &format!("cmd:{sb} --key s3cret"),
                "--head",
                head,
            ])
            .arg(&cells)
            .env("SIDEBRIDGE_KEY", "s3cret")
            .timeout(std::time::Duration::from_secs(300))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&format!("cmd:{sb} --key s3cret"));
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(&format!("cmd:{sb} --key s3cret --break from-bot"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("/messages/0/from: \"assistant\" → "),
        "the entry diff names the changed sender: {out}"
    );
}

/// Bridle cells replay live on both legs: the hub against itself passes (agent-only cells
/// replay the agent's connect and register), a hub that streams deltas instead of
/// accumulations fails.
#[test]
fn bridle_cells_compare_live() {
    let hub = env!("CARGO_BIN_EXE_bridle-ref-hub");
    let cells = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/bridle");
    let run = |head: &str| {
        let out = Command::cargo_bin("bridgewire")
            .unwrap()
            .args([
                "parity",
                "--allow-same-bridge",
                "--base",
                &format!("cmd:{hub} --listen 127.0.0.1:0"),
                "--head",
                head,
            ])
            .arg(&cells)
            .timeout(std::time::Duration::from_secs(300))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&format!("cmd:{hub} --listen 127.0.0.1:0"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("PASS ref-hub/bot-1__agent: "), "{out}");
    let (code, out) = run(&format!(
        "cmd:{hub} --listen 127.0.0.1:0 --break delta-stream"
    ));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL ref-hub/bot-1__alice"), "{out}");
}

/// A live leg that answers every request but emits no events is an empty replay, named with
/// what the recording assembles.
#[test]
fn a_bridge_that_emits_nothing_is_an_empty_replay() {
    let silent = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/py_bridge.py");
    let (code, out) = parity(
        &format!("cmd:{BRIDGE}"),
        &format!("cmd:python3 {silent}"),
        &["--cell", "turn-tools", "--timeout-ms", "1500"],
        None,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("head 0 events"), "{out}");
    assert!(
        out.contains("  head empty replay: the recording assembles "),
        "{out}"
    );
}

/// The core names no protocol: parity reaches each one through `Protocol::live()`.
#[test]
fn parity_names_no_protocol() {
    for file in ["src/parity.rs", "src/cli/parity_cmd.rs"] {
        let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let words: Vec<&str> = lower
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            for name in [
                "bb",
                "bridle",
                "sidebridge",
                "sidebridgelive",
                "bblive",
                "bridlelive",
            ] {
                assert!(
                    !words.contains(&name) && !lower.contains("side bridge"),
                    "{file}:{}: names a protocol: {line}",
                    n + 1
                );
            }
        }
    }
}

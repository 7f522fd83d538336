//! Fixture honesty: `check bb` finds its configuration from the project under test (never from
//! an unrelated directory), prints where it came from, lists the rules it could not run with
//! the key to set, and `--require-all` turns those into a failure.

use std::path::Path;
use std::process::{Command, Output};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");
const PROVIDER: &str = env!("CARGO_BIN_EXE_bb-ref-provider");

fn check(cwd: &Path, extra: &[&str]) -> Output {
    Command::new(BRIDGEWIRE)
        .args(["check", "bb", "--format", "json"])
        .args(extra)
        .args(["--", BRIDGE])
        .env("BB_REF_PROVIDER_COMMAND", PROVIDER)
        .env_remove("BB_REF_BRIDGE_BREAK")
        .current_dir(cwd)
        .output()
        .expect("run bridgewire")
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Catalogue rules of bb's live mode that need a fixture key (from the catalogue itself).
fn fixture_rules() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/bb.json")).unwrap();
    let rules: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    rules
        .iter()
        .filter(|r| r["mode"] == "live")
        .filter_map(|r| {
            Some((
                r["id"].as_str()?.to_string(),
                r["fixture"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[test]
fn without_a_fixture_the_opt_in_rules_are_listed_as_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = check(dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config: none"), "{stderr}");
    let r = report(&out);
    let not_run: Vec<(String, String)> = r["not_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                v["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let wanted = fixture_rules();
    assert!(!wanted.is_empty());
    for (id, key) in &wanted {
        let (_, why) = not_run
            .iter()
            .find(|(n, _)| n == id)
            .unwrap_or_else(|| panic!("{id} is not listed as not run: {not_run:?}"));
        assert!(why.contains(key) && why.contains("[bb.fixture]"), "{why}");
    }
    // Not run does not fail by default …
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // … and fails under --require-all.
    let strict = check(dir.path(), &["--require-all"]);
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(report(&strict)["summary"]["ok"], false);
    // The text summary names them too.
    let text = Command::new(BRIDGEWIRE)
        .args(["check", "bb", "--", BRIDGE])
        .env("BB_REF_PROVIDER_COMMAND", PROVIDER)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("not run ({}):", not_run.len())),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .unwrap()
            .ends_with(&format!("{} not run", not_run.len())),
        "{text}"
    );
}

#[test]
fn the_config_is_found_up_to_the_repository_root_and_no_further() {
    let t = tempfile::tempdir().unwrap();
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bridgewire.toml")).unwrap();
    // Above the repository: must not be read.
    std::fs::write(t.path().join("bridgewire.toml"), &fixture).unwrap();
    let repo = t.path().join("bridge");
    let sub = repo.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let out = check(&sub, &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("config: none"));
    assert!(!report(&out)["not_run"].as_array().unwrap().is_empty());

    // At the repository root: found from a subdirectory, its path printed.
    std::fs::write(repo.join("bridgewire.toml"), &fixture).unwrap();
    let out = check(&sub, &["--require-all"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let path = repo.join("bridgewire.toml");
    assert!(
        stderr.contains(&format!("config: {}", path.display())),
        "{stderr}"
    );
    let r = report(&out);
    assert_eq!(r["fixture"], path.display().to_string());
    assert_eq!(r["not_run"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    // --config wins over discovery.
    let empty = t.path().join("empty.toml");
    std::fs::write(&empty, "[parity]\nbridge = \"x\"\n").unwrap();
    let out = check(&sub, &["--config", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(--config)"), "{stderr}");
    assert!(!stderr.contains("unknown key"), "{stderr}");
    assert!(!report(&out)["not_run"].as_array().unwrap().is_empty());
}

//! `record bb` redacts what the bridge was given: a bridge that echoes its own `--api-key` or a
//! secret-named environment variable (here in a log notification, under a key that names no
//! secret) must not leave it in a lane. The bridge is a Python stdlib program, not ours; the
//! same bridge echoing an ordinary long option value (`--model …`) keeps it (no over-redaction).

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::proc::run_with_input;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

/// Prints one log notification naming its arguments and `GH_TOKEN`, then one per stdin line,
/// until stdin ends.
const BRIDGE: &str = r#"
import json, os, sys
args = sys.argv[1:]
def arg(name):
    return args[args.index(name) + 1]
def say(text):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "log", "params": {"message": text}}) + "\n")
    sys.stdout.flush()
say("starting: key %s, token %s, model %s" % (arg("--api-key"), os.environ.get("GH_TOKEN"), arg("--model")))
for line in sys.stdin:
    say("still here with %s" % arg("--api-key"))
"#;

#[test]
fn a_bridge_echoing_its_own_key_or_token_leaves_neither_in_a_lane() {
    let key = format!("sk-own-{}", uuid::Uuid::new_v4().simple());
    let token = format!("ghp_{}", uuid::Uuid::new_v4().simple());
    let model = "gpt-4o-mini-2024-07-18";
    let tmp = tempfile::tempdir().unwrap();
    // Bounded: stdout is read off-thread, a hung recorder is killed and named.
    let (status, out) = run_with_input(
        Command::new(BW)
            .args(["record", "bb", "--provider", "py", "--dir"])
            .arg(tmp.path())
            .args([
                "--",
                "python3",
                "-c",
                BRIDGE,
                "--api-key",
                &key,
                "--model",
                model,
            ])
            .env("GH_TOKEN", &token)
            .stderr(Stdio::null()),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\n",
        Duration::from_secs(60),
    );
    assert!(status.success(), "{status}");
    // The consumer gets the bridge's bytes as they are; only the lanes are redacted.
    assert!(out.contains(&key) && out.contains("still here"), "{out}");
    let lanes = common::files::text_under(tmp.path());
    assert!(
        lanes.contains("starting: key") && lanes.contains("still here"),
        "{lanes}"
    );
    assert!(
        !lanes.contains(&key),
        "the bridge's own --api-key reached a lane"
    );
    assert!(
        !lanes.contains(&token),
        "the bridge's GH_TOKEN reached a lane"
    );
    assert!(
        lanes.contains(model),
        "an ordinary option value was redacted too"
    );
}

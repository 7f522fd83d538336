//! `parity` for Side Bridge against a server that is not ours: `tests/peers/sidebridge-audit/`
//! (Python stdlib, written from the spec alone by an audit of bridgewire's parity), with the two
//! chats it recorded without a key (`cells/`). The recorded leg against a build with each switch
//! (`--v NAME`): what the app cannot see passes, what it shows fails naming it; a build that
//! asks a key of every chat is skipped saying so, one that refuses one chat while it answers
//! another is a difference; two legs that run or reach one server are refused.

use std::path::PathBuf;
use std::process::{Command, Stdio};

mod common;

const BW: &str = env!("CARGO_BIN_EXE_bridgewire");

fn peer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sidebridge-audit")
}

fn parity(base: &str, head: &str) -> (Option<i32>, String) {
    let out = Command::new(BW)
        .args([
            "parity",
            "--timeout-ms",
            "20s",
            "--base",
            base,
            "--head",
            head,
        ])
        .arg(peer().join("cells"))
        .env_remove("SIDEBRIDGE_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("bridgewire runs");
    (out.status.code(), common::proc::output_text(&out))
}

fn recorded() -> String {
    format!("rec:{}", peer().join("cells").display())
}

fn build(py: &str, switches: &str) -> String {
    let server = peer().join("server.py");
    match switches {
        "" => format!("cmd:{py} {}", server.display()),
        v => format!("cmd:{py} {} --v {v}", server.display()),
    }
}

/// (switch, the exit code, what the output must say). A switch the app cannot see passes; one
/// it shows fails naming it.
const ROWS: &[(&str, i32, &str)] = &[
    ("", 0, "2 passed, 0 failed, 0 skipped"),
    ("keyorder", 0, "2 passed, 0 failed, 0 skipped"),
    ("extra", 0, "2 passed, 0 failed, 0 skipped"),
    ("upper-ids,seq-ids", 0, "2 passed, 0 failed, 0 skipped"),
    (
        "sources-empty,explicit-false,null-options",
        0,
        "2 passed, 0 failed, 0 skipped",
    ),
    (
        "status-202,header-case,close",
        0,
        "2 passed, 0 failed, 0 skipped",
    ),
    (
        "chunked,gzip,pretty,escape-slash",
        0,
        "2 passed, 0 failed, 0 skipped",
    ),
    ("banner2", 0, "2 passed, 0 failed, 0 skipped"),
    ("text-differs", 1, "/messages/0/content: "),
    ("from-bot", 1, "\"from\":\"unknown\""),
    ("global-memory", 1, "/messages/0/content: "),
    ("send-401", 1, "/status: \"2xx\" → \"non-2xx\""),
    // One chat refused whole while the other is answered, both sent without a key: skipped
    // before as "this build asks for a key", with the run passing (exit 0).
    ("chat2-refuse", 1, "it refused this chat, not a missing key"),
    ("chat2-401", 1, "it refused this chat, not a missing key"),
    // The server exits at the first `bye`: the chats that then got no reply say why (they
    // showed only the transport errors before).
    (
        "crash-bye",
        1,
        "the bridge exited during the replay (exit status: 3)",
    ),
    // Every chat refused: the build asks a key the recording never had; nothing compared.
    (
        "status-401",
        2,
        "the cell was recorded without a key and this build asks for one",
    ),
];

#[test]
fn the_recorded_chats_against_each_build_of_a_server_not_ours() {
    let Some(py) =
        common::need::python("the_recorded_chats_against_each_build_of_a_server_not_ours")
    else {
        return;
    };
    let problems: Vec<String> = common::verdicts::two_at_a_time(ROWS, |(switches, code, says)| {
        let (got, out) = parity(&recorded(), &build(py, switches));
        let ok = got == Some(*code) && out.contains(says);
        (!ok)
            .then(|| format!("--v {switches:?}: exit {got:?}, want {code} saying {says:?}:\n{out}"))
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Two legs that run one program (spelled through `env`) or reach one running server (two
/// commands printing its address, in two wordings) are refused before any chat is replayed;
/// both ran and passed before.
#[test]
fn legs_that_run_or_reach_one_server_are_refused() {
    let Some(py) = common::need::python("legs_that_run_or_reach_one_server_are_refused") else {
        return;
    };
    let plain = build(py, "");
    let through_env = format!("cmd:env {}", plain.trim_start_matches("cmd:"));
    let (code, out) = parity(&plain, &through_env);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("both legs would run the same files"), "{out}");

    let server = common::proc::Proc::spawn({
        let mut c = Command::new(py);
        c.arg(peer().join("server.py"));
        c
    });
    let url = server.first_line().trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let prints =
        |line: &str, tag: &str| format!("cmd:sh -c 'echo \"{line}\"; exec sleep 60' {tag}");
    let (code, out) = parity(
        &prints(&url, "base"),
        &prints(&format!("listening on {url}"), "head"),
    );
    assert_eq!(code, Some(2), "{out}");
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    assert!(
        out.contains("both legs would talk to the same sidebridge server")
            && out.contains(&format!("both reach {hostport}")),
        "{out}"
    );
    assert!(!out.contains("PASS "), "no chat ran: {out}");
}

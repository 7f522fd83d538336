//! `parity` for Side Bridge against a server that is not ours: `tests/peers/sidebridge-audit/`
//! (Python stdlib, written from the spec alone by an audit of bridgewire's parity), with the two
//! chats it recorded without a key (`cells/`). The recorded leg against a build with each switch
//! (`--v NAME`): what the app cannot see passes, what it shows fails naming it; a build that
//! asks a key of every chat is skipped saying so, one that refuses one chat while it answers
//! another is a difference; two legs that run or reach one server are refused. And
//! `replay sidebridge` against it: a flaw shown on the first start only (`flaky,f-*`) still
//! fails the second run's set-aside, a `--url` bridge's second replay hides no flaw of the first,
//! a bridge that exits is one verdict naming the exit, damaged recordings (hand-damaged copies of
//! `cells/`) exit 2 naming the file, and a keyed cell replayed without `--key` is skipped.

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
        // `flaky,f-*`: the flaw on the server's first start only, the mark file its own.
        .env(
            "FLAKY_MARK",
            std::env::temp_dir().join(format!(
                "bw-audit-flaky-{}-{}",
                std::process::id(),
                head.len()
            )),
        )
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
    // A UTF-8 byte order mark before every reply's JSON: the app's decoder (Foundation's
    // JSONDecoder) skips it.
    ("bom", 0, "2 passed, 0 failed, 0 skipped"),
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
    // A `from` changed on the server's first start only: the second run (the restart) gave
    // the right one, and the change was set aside as varying (a pass); `from` is no wording.
    ("flaky,f-from-system", 1, "not set aside: "),
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
    // The same program once started, spelled otherwise (both ran and passed before); with
    // another environment it is another build, compared.
    let server = peer().join("server.py");
    for head in [
        format!("cmd:sh -c 'exec {py} {}'", server.display()),
        format!("cmd:{py} -u {}", server.display()),
    ] {
        let (code, out) = parity(&plain, &head);
        assert_eq!(code, Some(2), "{head}: {out}");
        assert!(
            out.contains("each leg started a server of its own")
                && out.contains("both run the same program"),
            "{head}: {out}"
        );
    }
    let other_env = format!("cmd:sh -c 'FOO=1 exec {py} {}'", server.display());
    let (code, out) = parity(&plain, &other_env);
    assert_eq!(code, Some(0), "{out}");

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
        out.contains("both legs would reach the same sidebridge server")
            && out.contains(&format!("both reach {hostport}")),
        "{out}"
    );
    assert!(!out.contains("PASS "), "no chat ran: {out}");
}

/// `replay sidebridge` of the recorded chats against one build of the server, `env` set for
/// it (FLAKY_MARK), `flags` before the recordings: its exit code and stdout + stderr.
fn replay(
    cells: &std::path::Path,
    flags: &[&str],
    server: Option<(&str, &str)>,
    env: &[(&str, &std::path::Path)],
) -> (Option<i32>, String) {
    let mut c = Command::new(BW);
    c.args(["replay", "sidebridge", "--startup-timeout", "30"])
        .args(flags)
        .arg(cells)
        .env_remove("SIDEBRIDGE_KEY")
        .env_remove("SB_KEY")
        .stdin(Stdio::null());
    if let Some((py, switches)) = server {
        c.arg("--").arg(py).arg(peer().join("server.py"));
        if !switches.is_empty() {
            c.args(["--v", switches]);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("bridgewire runs");
    (out.status.code(), common::proc::output_text(&out))
}

/// The second replay (of a cell whose replay differs) sets aside only what a model's wording
/// changes between two runs of one build: a build whose flaw shows on its first start only (a
/// `from` that changed, an extra answer, an error bubble) passed before, its flaw set aside as
/// "varying"; now it fails, naming what the two replays differ in beside the wording. A build
/// whose answers only carry a random tag still passes, the tag set aside and named.
#[test]
fn replay_sets_aside_wording_only_and_a_flaky_flaw_still_fails() {
    let Some(py) =
        common::need::python("replay_sets_aside_wording_only_and_a_flaky_flaw_still_fails")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rows: &[(&str, i32, &[&str])] = &[
        (
            "flaky,f-from-system",
            1,
            &["not set aside: ", "/messages/0/from"],
        ),
        ("flaky,f-double", 1, &["not set aside: ", " /messages"]),
        (
            "flaky,f-error-answer",
            1,
            &["not set aside: ", "/messages/0/from"],
        ),
        (
            "random-tag",
            0,
            &[
                "2 passed, 0 failed",
                "set aside in the recording and the replay as their kind: events #3 /messages/0/content",
            ],
        ),
    ];
    let problems: Vec<String> = common::verdicts::two_at_a_time(rows, |(switches, code, says)| {
        let mark = tmp
            .path()
            .join(format!("mark-{}", switches.replace(',', "_")));
        let (got, out) = replay(
            &peer().join("cells"),
            &[],
            Some((py, switches)),
            &[("FLAKY_MARK", &mark)],
        );
        let ok = got == Some(*code) && says.iter().all(|s| out.contains(s));
        (!ok).then(|| format!("--v {switches}: exit {got:?}, want {code} saying {says:?}:\n{out}"))
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// With `--url` the second replay runs on a bridge that has seen the chats: it is sent on new
/// chat ids, and an event whose shape changed is not set aside. A bridge with one memory for
/// every chat (chat A recalls chat B's word) that also re-ends chats it ended passed before,
/// its wrong recall set aside as reworded; the same bridge without the memory flaw passes.
#[test]
fn replay_url_second_run_does_not_hide_a_flaw_of_the_first() {
    let Some(py) = common::need::python("replay_url_second_run_does_not_hide_a_flaw_of_the_first")
    else {
        return;
    };
    for (switches, code, says) in [
        (
            "end-again,random-tag,global-memory",
            1,
            "+      \"content\": \"The word was",
        ),
        ("end-again,random-tag", 0, "2 passed, 0 failed"),
    ] {
        let server = common::proc::Proc::spawn({
            let mut c = Command::new(py);
            c.arg(peer().join("server.py")).args(["--v", switches]);
            c
        });
        let url = server.first_line().trim().to_string();
        let (got, out) = replay(&peer().join("cells"), &["--url", &url], None, &[]);
        assert!(
            got == Some(code) && out.contains(says),
            "--v {switches}: exit {got:?}, want {code} saying {says:?}:\n{out}"
        );
        assert!(out.contains("the second on new chat ids"), "{out}");
    }
}

/// A bridge that exits (status 3) at the first `bye` is one verdict naming the exit, in the
/// chat whose request met it; the other chat is not replayed, naming the exit and that chat
/// (before: one transport error per chat, the exit never named).
#[test]
fn replay_names_a_bridge_that_exits_once() {
    let Some(py) = common::need::python("replay_names_a_bridge_that_exits_once") else {
        return;
    };
    let (code, out) = replay(&peer().join("cells"), &[], Some((py, "crash-bye")), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the bridge exited (exit status: 3) during this cell: its request #"),
        "{out}"
    );
    assert!(
        out.contains("not replayed: the bridge exited (exit status: 3) during audit/"),
        "{out}"
    );
    assert!(
        out.contains("0 passed, 1 failed, 1 skipped") && !out.contains("connection refused"),
        "{out}"
    );
}

/// A bridge that exits at the first `bye` after chat B's earlier answers already differed from
/// the recording (every `from` unknown): B fails naming that difference and the exit that left
/// its last request unsent (it was skipped before, its difference never shown); the same exit
/// with B's answers as recorded leaves B skipped, naming the chat that met the exit, and says
/// what it answered matched.
#[test]
fn replay_fails_a_difference_seen_before_the_bridge_exited() {
    let Some(py) = common::need::python("replay_fails_a_difference_seen_before_the_bridge_exited")
    else {
        return;
    };
    let (code, out) = replay(
        &peer().join("cells"),
        &[],
        Some((py, "crash-bye,from-bot")),
        &[],
    );
    assert_eq!(code, Some(1), "{out}");
    // Every chat of the recording that the exit did not meet fails on its own difference.
    let chats = std::fs::read_dir(peer().join("cells/audit"))
        .unwrap()
        .count();
    assert!(out.contains(&format!("0 passed, {chats} failed")), "{out}");
    assert!(
        out.contains("+      \"from\": \"unknown\"")
            && out.contains(
                "(compared up to the exit: the bridge exited (exit status: 3) during audit/"
            )
            && out.contains("before the exit, event "),
        "{out}"
    );
    assert!(!out.contains("SKIP "), "{out}");
    let (code, out) = replay(&peer().join("cells"), &[], Some((py, "crash-bye")), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("; what it answered before the exit matches the recording")
            && !out.contains("before the exit, event "),
        "{out}"
    );
}

/// A UTF-8 byte order mark before every reply's JSON (the audit's F12): the app's decoder,
/// Foundation's JSONDecoder, skips it, so the replay passes (it failed every chat before,
/// "not JSON … \u{feff}"); a reply the app cannot decode still fails.
#[test]
fn replay_passes_a_leading_byte_order_mark_as_the_app_decodes_it() {
    let Some(py) =
        common::need::python("replay_passes_a_leading_byte_order_mark_as_the_app_decodes_it")
    else {
        return;
    };
    let chats = std::fs::read_dir(peer().join("cells/audit"))
        .unwrap()
        .count();
    let (code, out) = replay(&peer().join("cells"), &[], Some((py, "bom")), &[]);
    assert!(
        code == Some(0) && out.contains(&format!("{chats} passed, 0 failed")),
        "{out}"
    );
    let (code, out) = replay(&peer().join("cells"), &[], Some((py, "bom,latin1")), &[]);
    assert!(
        code == Some(1) && out.contains("body is not UTF-8"),
        "{out}"
    );
}

/// Hand-damaged copies of the recorded chats: a reply lane deleted, the request lane emptied,
/// one reply line deleted are errors naming the file (exit 2, "invalid input"), never a pass
/// (before: PASS, or "PASS (0 exchanges)", or the exchange silently not compared); a cut last
/// request line is a warning naming file:line and the cell says it was not replayed. A cell
/// recorded with the key, replayed without --key, is skipped naming --key (before: it was sent
/// without the key and the refusal blamed on the build).
#[test]
fn replay_refuses_damaged_recordings_and_skips_keyed_cells_without_a_key() {
    let Some(py) = common::need::python(
        "replay_refuses_damaged_recordings_and_skips_keyed_cells_without_a_key",
    ) else {
        return;
    };
    let long = "audit/D07244E3-6BF1-45F4-BE10-FFC883A47B24";
    let short = "audit/37B7876E-F839-4BBD-B5D3-72635C49D43B";
    let tmp = tempfile::tempdir().unwrap();
    type Damage = fn(&std::path::Path);
    let cases: &[(&str, Damage, i32, &[&str])] = &[
        (
            "nolane",
            |c| std::fs::remove_file(c.join("bridge→client.ndjson")).unwrap(),
            2,
            &["ERROR audit/D07244E3", "bridge→client.ndjson: missing"],
        ),
        (
            "empty",
            |c| std::fs::write(c.join("client→bridge.ndjson"), "").unwrap(),
            2,
            &[
                "ERROR audit/D07244E3",
                "client→bridge.ndjson: no request recorded",
            ],
        ),
        (
            "dropreply",
            |c| {
                let p = c.join("bridge→client.ndjson");
                let text = std::fs::read_to_string(&p).unwrap();
                let kept: Vec<&str> = text
                    .lines()
                    .enumerate()
                    .filter(|(i, _)| *i != 2)
                    .map(|(_, l)| l)
                    .collect();
                std::fs::write(&p, kept.join("\n") + "\n").unwrap();
            },
            2,
            &[
                "ERROR audit/D07244E3",
                "bridge→client.ndjson: no reply recorded for exchange",
            ],
        ),
        (
            "trunc",
            |c| {
                let p = c.join("client→bridge.ndjson");
                let text = std::fs::read_to_string(&p).unwrap();
                let body = text.trim_end_matches('\n');
                let cut = body.len() - 40;
                std::fs::write(&p, &body[..cut]).unwrap();
            },
            0,
            &[
                "warning: audit/D07244E3",
                "client→bridge.ndjson:9) is cut short",
                "it was not replayed",
                "PASS audit/D07244E3-6BF1-45F4-BE10-FFC883A47B24 (8 exchanges)",
            ],
        ),
    ];
    for (name, damage, code, says) in cases {
        let root = tmp.path().join(name);
        common::files::copy_tree(&peer().join("cells"), &root);
        damage(&root.join(long));
        let (got, out) = replay(&root, &[], Some((py, "")), &[]);
        assert!(
            got == Some(*code) && says.iter().all(|s| out.contains(s)),
            "{name}: exit {got:?}, want {code} saying {says:?}:\n{out}"
        );
        assert!(
            !out.contains("PASS audit/D07244E3") || *code == 0,
            "{name}: {out}"
        );
    }

    // One chat's requests carry the key (as `record sidebridge --key` writes it).
    let root = tmp.path().join("keyed");
    common::files::copy_tree(&peer().join("cells"), &root);
    let lane = root.join(short).join("client→bridge.ndjson");
    let text = std::fs::read_to_string(&lane).unwrap();
    let keyed = text.replace(
        r#"[\"content-type\",\"application/json\"]"#,
        r#"[\"content-type\",\"application/json\"],[\"x-sidebridge-key\",\"[redacted]\"]"#,
    );
    assert_ne!(keyed, text);
    std::fs::write(&lane, keyed).unwrap();
    let (got, out) = replay(&root, &[], Some((py, "")), &[]);
    assert!(
        got == Some(0)
            && out.contains(&format!("SKIP {short}: not replayed"))
            && out.contains("--key")
            && out.contains("1 passed, 0 failed, 1 skipped"),
        "{out}"
    );
}

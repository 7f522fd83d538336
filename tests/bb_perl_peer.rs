//! A bb provider bridge in Perl (`tests/peers/bb-perl/bridge.pl`, core modules only, written
//! from the protocol document): not ours, not Python, not Node. Correct by default; its legal
//! but unusual modes (insignificant whitespace, sorted keys, `\u00e9` escapes, `2.0` numbers,
//! lines split across many writes, deltas before a response, extensions, stderr chatter that is
//! not UTF-8, a 4 MiB line, `\r\n` ends) pass `check bb`, `replay bb` and `parity`; its flaws
//! fail exactly their rule. Its `stamp` mode writes its clock, the time a prompt took, its pid
//! and its temp folder into a failed prompt's `provider.error`: replay and parity mask them
//! (the hand-made cell `tests/fixtures/bb-perl-cells/perl/failed` holds another run's), while
//! another wording (`reworded`) still fails. Rows run concurrently.

mod common;

use common::need::{perl, python};
use serde_json::Value;
use std::process::Command;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BRIDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-perl/bridge.pl");
const PROVIDER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/peers/bb-audit/provider.py"
);
const AUDIT_CELLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/bb-audit/audit");
const PERL_CELLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bb-perl-cells");

/// The legal modes, each passing alone and together (but `dribble` and `long-line`, whose
/// 4 MiB line is only slow to write in 5-byte pieces or as `escapes` in pure Perl).
const ODD: &[&str] = &[
    "spaces",
    "keyorder",
    "escapes",
    "floats",
    "dribble",
    "interleave",
    "ext",
    "chatter",
    "long-line",
    "crlf",
    "spaces,keyorder,escapes,floats,interleave,ext,chatter,crlf",
];

/// `check bb` on the Perl bridge in `mode`: the verdicts that are not `pass`, as (id, status,
/// detail).
fn check_all(py: &str, mode: &str) -> Vec<(String, String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("bridgewire.toml");
    std::fs::write(
        &fx,
        "[bb.fixture]\npromptInput = \"hello é\"\ninterruptiblePromptInput = \"slow please\"\n",
    )
    .unwrap();
    let out = Command::new(BRIDGEWIRE)
        .args([
            "check",
            "bb",
            "--format",
            "json",
            "--timeout-ms",
            "3000",
            "--fixture",
        ])
        .arg(&fx)
        .args(["--", BRIDGE, "--mode", mode])
        .env("BB_REF_PROVIDER_COMMAND", format!("{py} {PROVIDER}"))
        .env_remove("PERL_BB_MODE")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{mode}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] != "pass")
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (s("id"), s("status"), s("detail"))
        })
        .collect()
}

/// `check bb`'s rows: (mode, the one rule it fails and a phrase of its detail); `None`: every
/// rule passes. `tests/peers/coverage.tsv` names them `perl:<mode>`.
fn check_rows() -> Vec<(&'static str, Option<(&'static str, &'static str)>)> {
    let mut rows: Vec<_> = std::iter::once("stamp")
        .chain(ODD.iter().copied())
        .map(|m| (m, None))
        .collect();
    rows.extend([
        // The kit reads the error; turn/lifecycle no longer judges the turn refused as well.
        ("both", Some(("rpc/jsonrpc-envelope", "result-or-error: "))),
        // Passed before: the runtime holds no request for it.
        (
            "unknown-id",
            Some((
                "rpc/jsonrpc-envelope",
                "answers-a-request: 4 response(s) to an id the runtime never sent (first: id 987654321",
            )),
        ),
        (
            "settle-twice",
            Some(("turn/delta-outside-turn", "no turn is open to settle")),
        ),
        // One fault, one verdict: the first rule left unanswered once the bridge went deaf
        // carries the stop (an alive probe went unanswered too); before, 5 rules failed.
        (
            "deaf-after-turn",
            Some((
                "stop/release-not-interrupted",
                "release thread/stop unanswered; the bridge, still running, has stopped answering",
            )),
        ),
        // The exit meets the first thread/stop, `rpc/invalid-params`' `{}`: every later rule
        // is skipped naming it, and the lifecycle rules after session/start-identity (itself
        // skipped so) say that it was not judged, not that it failed.
        (
            "exit-on-stop",
            Some((
                "rpc/invalid-params",
                "thread/stop {} unanswered (bridge exited (exit status 3))",
            )),
        ),
    ]);
    rows
}

/// The rows whose fault leaves the rules after it without answers: they are skipped naming the
/// rule that carries it (at least one is, with this phrase), none fails beside it, and none
/// names a prerequisite as failed when it was skipped. A rule over the whole wire that found
/// nothing to judge, or passed only because nothing of its kind was sent, is skipped naming
/// the stop too: every skip names it or a prerequisite, and a rule not run is so for want of a
/// fixture or a declared capability, or unreached behind a rule that did not pass.
const STOPS: &[(&str, &str)] = &[
    (
        "deaf-after-turn",
        "the bridge had stopped answering during ",
    ),
    ("exit-on-stop", "the bridge had exited during "),
];

/// `tests/peers/coverage.tsv`'s `perl:` entries are true of [`check_rows`]: a failing entry's
/// row fails that rule, a passing one is a legal row (every rule passes).
#[test]
fn the_coverage_map_names_perl_rows_that_fail_and_pass_each_rule() {
    use common::coverage::{Entry, lines_for_catalogue};
    let rows = check_rows();
    let mut problems = Vec::new();
    let mut named = 0;
    for (line, _level) in lines_for_catalogue("bb") {
        let entries = line
            .fails
            .iter()
            .map(|e| (e, true))
            .chain(line.passes.iter().map(|e| (e, false)));
        for (e, fails) in entries {
            let Entry::Named(name) = e else { continue };
            let Some(mode) = name.strip_prefix("perl:") else {
                continue;
            };
            named += 1;
            match rows.iter().find(|(m, _)| *m == mode) {
                None => problems.push(format!("{}: no Perl row {mode:?}", line.at)),
                Some((_, Some((rule, _)))) if fails && *rule == line.rule => {}
                Some((_, None)) if !fails => {}
                Some(r) => problems.push(format!(
                    "{}: Perl row {mode:?} ({r:?}) does not {} {}",
                    line.at,
                    if fails { "fail" } else { "pass" },
                    line.rule
                )),
            }
        }
    }
    assert!(named > 0, "coverage.tsv names no perl: row");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn check_bb_passes_the_perl_bridge_odd_and_fails_each_flaw_once() {
    let (Some(_), Some(py)) = (
        perl("check_bb_passes_the_perl_bridge_odd_and_fails_each_flaw_once"),
        python("check_bb_passes_the_perl_bridge_odd_and_fails_each_flaw_once"),
    ) else {
        return;
    };
    let rows: Vec<(String, Option<(&str, &str)>)> = check_rows()
        .into_iter()
        .map(|(m, w)| (m.to_string(), w))
        .collect();
    let jobs: Vec<Box<dyn FnOnce() -> Vec<String> + Send>> = rows
        .into_iter()
        .map(|(mode, want)| {
            Box::new(move || {
                let all = check_all(py, &mode);
                let got: Vec<_> = all.iter().filter(|v| v.1 != "not-run").cloned().collect();
                let ok = match want {
                    None => got.is_empty(),
                    Some((id, phrase)) if STOPS.iter().any(|(m, _)| *m == mode) => {
                        let fails: Vec<_> = got.iter().filter(|g| g.1 == "fail").collect();
                        let naming = STOPS
                            .iter()
                            .find(|(m, _)| *m == mode)
                            .map(|(_, n)| format!("{n}{id}"))
                            .unwrap_or_default();
                        let skipped =
                            |rule: &str| got.iter().any(|g| g.0 == rule && g.1 == "skipped");
                        let misnamed = got.iter().any(|g| {
                            g.2.strip_prefix("prerequisite ")
                                .and_then(|r| r.strip_suffix(" failed"))
                                .is_some_and(skipped)
                        });
                        let unnamed: Vec<_> = all
                            .iter()
                            .filter(|g| match g.1.as_str() {
                                "skipped" => {
                                    !g.2.contains(naming.trim_end_matches(id))
                                        && !g.2.starts_with("prerequisite ")
                                }
                                "not-run" => {
                                    !["no fixture", "not reached: ", "the bridge does not declare"]
                                        .iter()
                                        .any(|p| g.2.starts_with(p))
                                }
                                _ => false,
                            })
                            .collect();
                        unnamed.is_empty()
                            && fails.len() == 1
                            && fails[0].0 == id
                            && fails[0].2.contains(phrase)
                            && got
                                .iter()
                                .any(|g| g.1 == "skipped" && g.2.contains(&naming))
                            && !misnamed
                    }
                    Some((id, phrase)) => {
                        got.len() == 1
                            && got[0].0 == id
                            && got[0].1 == "fail"
                            && got[0].2.contains(phrase)
                    }
                };
                if ok {
                    Vec::new()
                } else {
                    vec![format!("{mode}: expected {want:?}, got {got:#?}")]
                }
            }) as Box<dyn FnOnce() -> Vec<String> + Send>
        })
        .collect();
    let problems: Vec<String> = common::proc::three_at_a_time(jobs)
        .into_iter()
        .flatten()
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `replay bb` of the committed cells with the Perl bridge in `mode`: (exit, document).
fn replay(mode: &str) -> (Option<i32>, Value) {
    let out = Command::new(BRIDGEWIRE)
        .args(["replay", "bb", "--format", "json", "--timeout-ms", "10000"])
        .arg(format!("{AUDIT_CELLS}/basic"))
        .arg(format!("{AUDIT_CELLS}/interrupt"))
        .arg(format!("{PERL_CELLS}/perl/failed"))
        .args(["--", BRIDGE, "--mode", mode])
        .env_remove("PERL_BB_MODE")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{mode}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), doc)
}

/// A failed prompt's error text with the bridge's clock, duration, pid and temp folder in it
/// (`stamp`: another run's are recorded) matches the recording (before: `matches-recording`
/// failed on `/message`); another wording, or the provider's message alone, does not. Every
/// legal mode passes every cell (before: `floats`, a response id written `3.0`, failed
/// `matches-recording` as answers the recording had and the replay lacked).
#[test]
fn replay_bb_masks_the_bridges_clock_in_its_words_and_not_its_wording() {
    if perl("replay_bb_masks_the_bridges_clock_in_its_words_and_not_its_wording").is_none() {
        return;
    }
    let modes: Vec<String> = ["stamp".to_string()]
        .into_iter()
        .chain(ODD.iter().map(|m| format!("stamp,{m}")))
        .chain(["stamp,reworded".to_string(), String::new()])
        .collect();
    let jobs: Vec<Box<dyn FnOnce() -> Vec<String> + Send>> = modes
        .into_iter()
        .map(|mode| {
            Box::new(move || {
                let (code, doc) = replay(&mode);
                let cells = doc["cells"].as_array().cloned().unwrap_or_default();
                let mut problems = Vec::new();
                if cells.len() != 3 {
                    problems.push(format!("{mode}: {} cells: {doc:#}", cells.len()));
                }
                let reworded = mode.contains("reworded") || !mode.contains("stamp");
                for c in &cells {
                    let failed_cell = c["cell"].as_str().unwrap_or("").ends_with("failed")
                        || c.to_string().contains("perl/failed");
                    let not_pass: Vec<&Value> = c["verdicts"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .chain(c["wireVerdicts"].as_array().into_iter().flatten())
                        .filter(|v| v["status"] != "pass" && v["status"] != "not run")
                        .collect();
                    let want_fail = reworded && failed_cell;
                    let ok = if want_fail {
                        not_pass.len() == 1
                            && not_pass[0]["id"] == "recorded/failed/matches-recording"
                            && not_pass[0]["detail"]
                                .as_str()
                                .is_some_and(|d| d.contains("/message: \"provider failed at <time> after <duration> (pid <pid>, log <temp>/err.log): model overloaded\" → "))
                    } else {
                        not_pass.is_empty() && c["status"] == "pass"
                    };
                    if !ok {
                        problems.push(format!("{mode}: {c:#}"));
                    }
                }
                let want_code = if reworded { Some(1) } else { Some(0) };
                if code != want_code {
                    problems.push(format!("{mode}: exit {code:?}"));
                }
                problems
            }) as Box<dyn FnOnce() -> Vec<String> + Send>
        })
        .collect();
    let problems: Vec<String> = common::proc::three_at_a_time(jobs)
        .into_iter()
        .flatten()
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `parity` of the correct Perl bridge against its odd build passes every cell and the
/// handshake (before: `floats` failed the handshake as `/capabilities/grammarVersions/0: 3 →
/// 3`); against the reworded build it fails the one cell whose error text changed, naming it.
#[test]
fn parity_of_the_perl_bridge_passes_the_odd_build_and_fails_the_reworded_one() {
    if perl("parity_of_the_perl_bridge_passes_the_odd_build_and_fails_the_reworded_one").is_none() {
        return;
    }
    let cells_dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        (AUDIT_CELLS, "audit"),
        (&format!("{PERL_CELLS}/perl")[..], "perl"),
    ] {
        let copied = Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(cells_dir.path().join(to))
            .status()
            .unwrap();
        assert!(copied.success());
    }
    let root = cells_dir.path().to_path_buf();
    let parity = move |head: &str| {
        let out = Command::new(BRIDGEWIRE)
            .args([
                "parity",
                "--format",
                "json",
                "--timeout-ms",
                "10000",
                "--base",
            ])
            .arg(format!("cmd:{BRIDGE} --mode stamp"))
            .arg("--head")
            .arg(format!("cmd:{BRIDGE} --mode stamp,{head}"))
            .arg(&root)
            .env_remove("PERL_BB_MODE")
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{head}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), doc)
    };
    let odd = ODD[ODD.len() - 1];
    let (r1, r2) = std::thread::scope(|s| {
        let a = s.spawn(|| parity(odd));
        let b = s.spawn(|| parity("reworded"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let outcomes = |doc: &Value| -> Vec<(String, String)> {
        doc["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["cell"].as_str().unwrap().to_string(),
                    c["outcome"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (code, doc) = r1;
    assert_eq!(code, Some(0), "{doc:#}");
    assert!(outcomes(&doc).iter().all(|(_, o)| o == "pass"), "{doc:#}");
    assert_eq!(doc["handshakes"][0]["outcome"], "pass", "{doc:#}");
    let (code, doc) = r2;
    assert_eq!(code, Some(1), "{doc:#}");
    for (cell, outcome) in outcomes(&doc) {
        let want = if cell == "perl/failed" {
            "fail"
        } else {
            "pass"
        };
        assert_eq!(outcome, want, "{cell}: {doc:#}");
    }
    assert!(
        doc.to_string()
            .contains("provider crashed at <time> after <duration>"),
        "{doc:#}"
    );
}

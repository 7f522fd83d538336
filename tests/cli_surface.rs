//! One command-line surface: every help screen lists its exit codes, and the flags several
//! commands share (`--cell`, `--rule`, `--format`, `--junit`/`--markdown`/`--html`, `-j`,
//! `--partition`, `--config`, `--strict`, `--require-all`) look and parse the same wherever
//! they appear. The command tree is walked, not listed, so a new command is covered at once.

mod common;

use std::collections::BTreeMap;

/// Every command (not the root), with its words.
fn commands() -> Vec<(String, clap::Command)> {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
            path.push(sub.get_name().to_string());
            out.push((path.join(" "), sub.clone()));
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut root = bridgewire::cli::command();
    root.build();
    let mut out = Vec::new();
    walk(&root, &mut Vec::new(), &mut out);
    out
}

#[test]
fn every_help_screen_lists_exit_codes() {
    let all = commands();
    assert!(all.len() > 10, "{}", all.len());
    let mut missing = Vec::new();
    for (name, cmd) in &all {
        let mut c = cmd.clone();
        let short = c.render_help().to_string();
        let long = c.render_long_help().to_string();
        if !short.contains("Exit codes:") || !long.contains("Exit codes:") {
            missing.push(name.clone());
        }
    }
    let mut root = bridgewire::cli::command();
    assert!(root.render_help().to_string().contains("Exit codes:"));
    assert!(missing.is_empty(), "help without exit codes: {missing:?}");
}

/// What a shared flag looks like to a user: its short form, value name, whether it takes a
/// value, and its accepted values.
fn shape(a: &clap::Arg) -> String {
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_string())
        .collect();
    format!(
        "short={:?} value={:?} takes_value={} values={values:?}",
        a.get_short(),
        a.get_value_names()
            .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        a.get_action().takes_values(),
    )
}

#[test]
fn shared_flags_have_one_shape() {
    let shared = [
        "cell",
        "rule",
        "junit",
        "markdown",
        "config",
        "strict",
        "require-all",
        "jobs",
        "partition",
        "url-pattern",
        "max-reply-time",
    ];
    let mut seen: BTreeMap<&str, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (name, cmd) in commands() {
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if let Some(flag) = shared.iter().find(|f| **f == long) {
                seen.entry(flag)
                    .or_default()
                    .entry(shape(a))
                    .or_default()
                    .push(name.clone());
            }
            if long == "format" {
                let values: Vec<String> = a
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                assert!(
                    values.iter().any(|v| v == "text") && values.iter().any(|v| v == "json"),
                    "{name}: --format takes {values:?}, not text and json"
                );
            }
            if long == "jobs" {
                assert_eq!(a.get_short(), Some('j'), "{name}: --jobs without -j");
            }
        }
    }
    let mut problems = Vec::new();
    for (flag, shapes) in &seen {
        if shapes.len() > 1 {
            problems.push(format!("--{flag} differs: {shapes:#?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn bridgewire(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_bridgewire"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn pinned_cells(args: &[&str]) -> Vec<String> {
    let out = bridgewire(args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cell"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn partitions_split_the_cells_of_a_recordings_folder_exactly() {
    let all = pinned_cells(&["pins", "--format", "json", "recordings/bb"]);
    assert!(all.len() >= 2, "{all:?}");
    let mut seen = Vec::new();
    for m in 1..=3 {
        let shard = format!("hash:{m}/3");
        seen.extend(pinned_cells(&[
            "pins",
            "--format",
            "json",
            "--partition",
            &shard,
            "recordings/bb",
        ]));
    }
    seen.sort();
    let mut want = all.clone();
    want.sort();
    assert_eq!(seen, want);
    let bad = bridgewire(&["pins", "--partition", "hash:4/3", "recordings/bb"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("hash:M/N"));
}

#[test]
fn durations_take_units_and_bare_milliseconds_everywhere() {
    // A bad unit is a usage error naming the value, in every command with a duration flag.
    for args in [
        &["check", "bb", "--timeout", "5parsecs", "--", "true"][..],
        &[
            "parity",
            "--base",
            "x",
            "--head",
            "y",
            "--timeout-ms",
            "5parsecs",
        ][..],
        &[
            "replay",
            "bb",
            "--timeout-ms",
            "5parsecs",
            "x",
            "--",
            "true",
        ][..],
    ] {
        let out = bridgewire(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unknown unit `parsecs`"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every duration flag of every command accepts `15s` and a bare number.
    let mut flags = 0;
    for (name, cmd) in commands() {
        for a in cmd.get_arguments() {
            let is_duration = a
                .get_value_names()
                .is_some_and(|v| v.iter().any(|n| n == "DURATION"));
            if !is_duration {
                continue;
            }
            let long = a.get_long().unwrap();
            flags += 1;
            for value in ["15s", "750ms", "1500"] {
                let probe = clap::Command::new("probe").arg(
                    clap::Arg::new("d")
                        .long("d")
                        .value_parser(a.get_value_parser().clone()),
                );
                let r = probe.try_get_matches_from(["probe", "--d", value]);
                assert!(r.is_ok(), "{name} --{long} {value}: {r:?}");
            }
        }
    }
    assert!(flags >= 10, "only {flags} duration flags found");
}

/// Every `--url-pattern` reads its regex while the arguments are read: a broken one is a usage
/// error naming the flag (exit 2) before any bridge starts, in every command that has it; a
/// good one parses. Walked, so a new command with the flag is covered at once; and run.
#[test]
fn every_url_pattern_is_checked_before_anything_starts() {
    let mut with = Vec::new();
    for (name, cmd) in commands() {
        let Some(a) = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some("url-pattern"))
        else {
            continue;
        };
        for (value, ok) in [(r"serving on (\S+)", true), ("serving on (", false)] {
            let probe = clap::Command::new("probe").arg(
                clap::Arg::new("p")
                    .long("p")
                    .value_parser(a.get_value_parser().clone()),
            );
            let r = probe.try_get_matches_from(["probe", "--p", value]);
            assert_eq!(r.is_ok(), ok, "{name} --url-pattern {value:?}: {r:?}");
        }
        with.push(name);
    }
    with.sort();
    assert!(with.len() >= 5, "only {with:?} take --url-pattern");
    // Run: the bridge command would start nothing (`false`), and is never reached.
    for args in [
        &["check", "sidebridge", "--url-pattern", "(", "--", "false"][..],
        &["record", "sidebridge", "--url-pattern", "(", "--", "false"][..],
        &[
            "replay",
            "sidebridge",
            "--url-pattern",
            "(",
            "recordings",
            "--",
            "false",
        ][..],
    ] {
        let out = bridgewire(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--url-pattern"), "{args:?}: {err}");
    }
}

/// A flag that reads a secret from the environment (`JWT_SECRET`, `BRIDLE_API_KEY`,
/// `SIDEBRIDGE_KEY`, …) never shows its value: clap prints `[env: NAME=value]` in `--help`
/// unless told not to, and help goes to the terminal (and to CI logs) past every redaction.
/// Walked, so a new flag is covered at once; and run, with planted values.
#[test]
fn no_help_screen_shows_a_secret_from_the_environment() {
    let mut shown = Vec::new();
    let mut secret_flags = Vec::new();
    for (name, cmd) in commands() {
        for a in cmd.get_arguments() {
            let Some(env) = a.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            if bridgewire::redact::is_secret_env_name(env) {
                secret_flags.push((name.clone(), env.to_string()));
                if !a.is_hide_env_values_set() {
                    shown.push(format!("{name} --{}", a.get_id()));
                }
            }
        }
    }
    assert!(secret_flags.len() >= 4, "{secret_flags:?}");
    assert!(shown.is_empty(), "help would show the value of: {shown:?}");
    for (name, env) in &secret_flags {
        let planted = format!("planted-{}-value", env.to_lowercase());
        let mut args: Vec<&str> = name.split(' ').collect();
        args.push("--help");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bridgewire"))
            .args(&args)
            .env(env, &planted)
            .output()
            .unwrap();
        let text = common::proc::output_text(&out);
        assert!(text.contains(env.as_str()), "{name}: {text}");
        assert!(
            !text.contains(&planted),
            "{name} --help shows {env}: {text}"
        );
    }
}

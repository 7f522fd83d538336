//! One command-line surface: every help screen lists its exit codes, and the flags several
//! commands share (`--cell`, `--rule`, `--format`, `--junit`/`--markdown`/`--html`, `-j`,
//! `--partition`, `--config`, `--strict`, `--require-all`) look and parse the same wherever
//! they appear. The command tree is walked, not listed, so a new command is covered at once.

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

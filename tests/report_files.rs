//! Every `check` subcommand writes the same report files (JUnit, Markdown, HTML) on request.

use std::process::Command;

fn junit_failures(path: &std::path::Path) -> usize {
    let xml = std::fs::read_to_string(path).unwrap();
    let head = xml
        .lines()
        .find(|l| l.contains("<testsuites"))
        .unwrap()
        .to_string();
    let n = head
        .split("failures=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    n.parse().unwrap()
}

#[test]
fn side_bridge_and_bridle_checks_write_junit_markdown_and_html() {
    let t = tempfile::tempdir().unwrap();
    let bw = env!("CARGO_BIN_EXE_bridgewire");
    let sb = env!("CARGO_BIN_EXE_sidebridge-ref");
    let files = |stem: &str| {
        let p = |ext: &str| t.path().join(format!("{stem}.{ext}"));
        (p("xml"), p("md"), p("html"))
    };
    let run = |args: &[&str], stem: &str| {
        let (x, m, h) = files(stem);
        // Report flags go before `--` (what follows it is the peer's command).
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        let st = Command::new(bw)
            .args(&args[..split])
            .arg("--junit")
            .arg(&x)
            .arg("--markdown")
            .arg(&m)
            .arg("--html")
            .arg(&h)
            .args(&args[split..])
            .output()
            .unwrap();
        (st.status.code(), x, m, h)
    };
    // Side Bridge: the reference passes, a broken build fails, and the files say so.
    let (code, x, m, h) = run(
        &["check", "sidebridge", "--", sb, "--listen", "127.0.0.1:0"],
        "sb-ok",
    );
    assert_eq!(code, Some(0));
    assert_eq!(junit_failures(&x), 0);
    assert!(
        std::fs::read_to_string(&m)
            .unwrap()
            .contains("bridgewire check sidebridge")
    );
    assert!(std::fs::read_to_string(&h).unwrap().contains("<html"));
    let (code, x, _, _) = run(
        &[
            "check",
            "sidebridge",
            "--",
            sb,
            "--listen",
            "127.0.0.1:0",
            "--break",
            "from-bot",
        ],
        "sb-bad",
    );
    assert_eq!(code, Some(1));
    assert!(junit_failures(&x) > 0);
    // Bridle agent check (the quick one): same files.
    let (code, x, m, _) = run(
        &[
            "check",
            "bridle",
            "agent",
            "--wait-ms",
            "2345",
            "--",
            env!("CARGO_BIN_EXE_bridle-ref-agent"),
        ],
        "agent",
    );
    assert_eq!(code, Some(0));
    assert_eq!(junit_failures(&x), 0);
    let md = std::fs::read_to_string(&m).unwrap();
    assert!(md.contains("bridgewire check bridle"), "{md}");
    // The header gives the run's own bound on each wait (it said 0 ms for every Bridle run).
    assert!(md.contains("per-wait timeout 2345 ms"), "{md}");
}

//! The copy-paste CI templates (docs/ci/) work: `scripts/test-ci-templates.sh` runs their shell
//! steps locally in a scratch project, and the job publishes a JUnit file and a Markdown
//! summary whether the bridge passes or fails (and fails the job when it fails).

use std::process::Command;

fn run_templates(expect: &str, envs: &[(&str, &str)]) -> (bool, String) {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{root}/scripts/test-ci-templates.sh"))
        .env("BRIDGEWIRE_BIN", env!("CARGO_BIN_EXE_bridgewire"))
        .env("BRIDGE", env!("CARGO_BIN_EXE_bb-ref-bridge"))
        .env(
            "BB_REF_PROVIDER_COMMAND",
            env!("CARGO_BIN_EXE_bb-ref-provider"),
        )
        .env("CONFIG", format!("{root}/bridgewire.toml"))
        .env("EXPECT_JOB", expect)
        .env("STEP_TIMEOUT", "120")
        .env_remove("BB_REF_BRIDGE_BREAK");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_passing_bridge_passes_the_job_and_publishes_reports() {
    let (ok, text) = run_templates("pass", &[]);
    assert!(ok, "{text}");
    assert_eq!(
        text.matches("job passed; reports published").count(),
        2,
        "{text}"
    );
}

#[test]
fn a_failing_bridge_fails_the_job_and_still_publishes_reports() {
    let (ok, text) = run_templates("fail", &[("BB_REF_BRIDGE_BREAK", "no-turn-completed")]);
    assert!(ok, "{text}");
    assert_eq!(
        text.matches("job failed; reports published").count(),
        2,
        "{text}"
    );
}

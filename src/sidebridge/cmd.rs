//! The `check`, `record` and `replay` subcommands for Side Bridge (the CLI calls these).

use super::profiles::Profile;
use super::rules::{CheckConfig, CheckReport};
use super::spawn::{self, BridgeProcess};
use super::transport::Limits;
use crate::cli::exit;
use crate::rule::{Status, Summary};
use serde_json::json;
use std::ffi::OsString;
use std::time::Duration;

/// Where the bridge under test is.
#[derive(Debug, Clone)]
pub struct BridgeSpec {
    pub url: Option<String>,
    pub command: Vec<OsString>,
    pub key: Option<String>,
    pub startup: Duration,
}

impl BridgeSpec {
    /// Resolves to a URL, starting the command (or the bundled reference bridge) if needed.
    pub fn resolve(&self) -> anyhow::Result<(String, Option<BridgeProcess>)> {
        if let Some(u) = &self.url {
            return Ok((u.clone(), None));
        }
        let command = if self.command.is_empty() {
            let Some(exe) = spawn::bundled_reference() else {
                anyhow::bail!(
                    "no --url, no bridge command, and the bundled sidebridge-ref is not beside this executable"
                );
            };
            let mut c = vec![exe, "--listen".into(), "127.0.0.1:0".into()];
            if let Some(k) = &self.key {
                c.push("--key".into());
                c.push(k.into());
            }
            c
        } else {
            self.command.clone()
        };
        let p = spawn::spawn(&command, self.startup)?;
        Ok((p.url.clone(), Some(p)))
    }
}

pub struct CheckOptions {
    pub bridge: BridgeSpec,
    pub limits: Limits,
    pub warn_after: Duration,
    pub seed: u64,
    pub give_up_after: usize,
    pub json: bool,
    pub verbose: bool,
    pub reports: crate::report::ReportFiles,
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn check(o: &CheckOptions) -> u8 {
    let started = crate::util::now_ms();
    let (url, _guard) = match o.bridge.resolve() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bridgewire check sidebridge: {e:#}");
            return exit::INVALID_INPUT;
        }
    };
    let cfg = CheckConfig {
        url: url.clone(),
        key: o.bridge.key.clone(),
        limits: o.limits,
        warn_after: o.warn_after,
        seed: o.seed,
        give_up_after: o.give_up_after,
    };
    let report = match runtime().block_on(super::rules::check(&cfg)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bridgewire check sidebridge: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let summary = Summary::of(&report.verdicts);
    let files = crate::report::ReportFiles::simple_report(
        "sidebridge",
        &url,
        started,
        report.verdicts.clone(),
    );
    if let Err(e) = o.reports.write(&files) {
        eprintln!("bridgewire check sidebridge: {e}");
        return exit::INVALID_INPUT;
    }
    if o.json {
        println!(
            "{}",
            crate::jsjson::to_string_pretty(&report_json(&url, &report, summary)).trim_end()
        );
    } else {
        print_text(&url, &report, o.verbose);
        println!("{}", summary.line());
    }
    if summary.ok() { exit::OK } else { exit::FAILED }
}

fn print_text(url: &str, r: &CheckReport, verbose: bool) {
    println!("sidebridge {url}");
    for v in &r.verdicts {
        println!("{}", v.line());
    }
    let na: Vec<String> = crate::rule::catalogue()
        .into_iter()
        .filter(|c| c.protocol == "sidebridge" && !r.verdicts.iter().any(|v| v.id == c.id))
        .map(|c| c.id)
        .collect();
    if !na.is_empty() {
        println!(
            "not applicable: {} ({})",
            na.join(", "),
            if na.iter().any(|i| i == "SB-A4") {
                "--key given: the bridge has a key"
            } else {
                "no --key: the bridge is taken to have none"
            }
        );
    }
    println!(
        "profiles ({} replies to the emulated client):",
        r.profiles.len()
    );
    for p in Profile::ALL {
        let outcomes: Vec<(&str, &Result<usize, String>)> = r
            .profiles
            .iter()
            .filter_map(|v| {
                v.outcomes
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, o)| (v.label.as_str(), o))
            })
            .collect();
        let dropped: Vec<_> = outcomes.iter().filter(|(_, o)| o.is_err()).collect();
        match dropped.first() {
            None => println!(
                "  {:<8} every reply would render ({})",
                p.id(),
                p.describe()
            ),
            Some((label, Err(e))) => println!(
                "  {:<8} {} of {} replies would be dropped ({}); first: {label}: {e}",
                p.id(),
                dropped.len(),
                outcomes.len(),
                p.describe()
            ),
            Some(_) => {}
        }
    }
    if verbose {
        for v in &r.profiles {
            if let Some((_, Ok(n))) = v.outcomes.first()
                && v.outcomes.iter().all(|(_, o)| o.as_ref().ok() == Some(n))
            {
                println!(
                    "  reply {}: would render {n} message(s) in every profile",
                    v.label
                );
                continue;
            }
            let parts: Vec<String> = v
                .outcomes
                .iter()
                .map(|(p, o)| match o {
                    Ok(n) => format!("{}: would render {n} message(s)", p.id()),
                    Err(e) => format!("{}: would be dropped ({e})", p.id()),
                })
                .collect();
            println!("  reply {}: {}", v.label, parts.join("; "));
        }
    }
}

fn report_json(url: &str, r: &CheckReport, s: Summary) -> serde_json::Value {
    json!({
        "format_version": 1,
        "protocol": "sidebridge",
        "url": url,
        "verdicts": r.verdicts.iter().map(|v| json!({
            "id": v.id,
            "status": v.status.label(),
            "detail": v.detail,
        })).collect::<Vec<_>>(),
        "profiles": r.profiles.iter().map(|v| {
            let mut o = serde_json::Map::new();
            o.insert("reply".into(), json!(v.label));
            for (p, out) in &v.outcomes {
                o.insert(p.id().into(), match out {
                    Ok(n) => json!({"renders": true, "messages": n}),
                    Err(e) => json!({"renders": false, "reason": e}),
                });
            }
            serde_json::Value::Object(o)
        }).collect::<Vec<_>>(),
        "summary": {"passed": s.passed, "failed": s.failed, "skipped": s.skipped},
    })
}

/// Failed rule ids of a report (for tests and scripts).
pub fn failed_ids(r: &CheckReport) -> Vec<String> {
    r.verdicts
        .iter()
        .filter(|v| v.status != Status::Pass)
        .map(|v| v.id.clone())
        .collect()
}

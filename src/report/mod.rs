//! Reports over verdicts: protocol-neutral, one run = metadata + `Vec<Verdict>`.
//!
//! * [`terminal`]: bb's text form, the frames around the first failure, the summary line;
//! * [`json`]: a versioned machine-readable document (`format_version`);
//! * [`junit`]: JUnit XML, one suite per protocol/target, one case per rule id;
//! * [`markdown`]: a table for CI step summaries;
//! * [`html`]: one self-contained file.
//!
//! A kit `skipped` verdict fails the run (reference §9.1), so JUnit reports it as a failure of
//! type `skipped`, not as a JUnit skip.

pub mod html;
pub mod json;
pub mod junit;
pub mod live;
pub mod markdown;
pub mod terminal;

use crate::rule::{Level, Policy, Status, Summary, Verdict};

/// The header's " · per-wait timeout N ms", or nothing for a run that set no bound on its
/// waits (offline passes such as pins): a 0 there read as "no time at all".
pub fn wait_bound(timeout_ms: u64) -> String {
    if timeout_ms == 0 {
        String::new()
    } else {
        format!(" · per-wait timeout {timeout_ms} ms")
    }
}

/// What was run, for the report headers.
#[derive(Debug, Clone, Default)]
pub struct RunMeta {
    /// `bb`, `bridle`, …
    pub protocol: String,
    /// What was checked: the bridge command line.
    pub target: String,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    pub duration_ms: u64,
    /// Per-wait timeout.
    pub timeout_ms: u64,
    /// The fixture file, if one was read.
    pub fixture: Option<String>,
    /// How the target ended (`exit status 3`), when it exited on its own.
    pub target_exit: Option<String>,
    /// Transport anomalies seen over the run.
    pub notes: Vec<String>,
    /// The tail of the target's stderr.
    pub stderr_tail: String,
    /// The target's pid (= its process group id, killed at the end of the run).
    pub target_pid: Option<u32>,
    /// Set when the run was cut short by a signal (`SIGINT`, `SIGTERM`): the report is partial.
    pub interrupted: Option<String>,
}

/// One run's report.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub meta: RunMeta,
    pub verdicts: Vec<Verdict>,
    /// How verdicts decide the exit (`--strict`, `--require-all`).
    pub policy: Policy,
}

impl Report {
    pub fn summary(&self) -> Summary {
        Summary::of_with(&self.verdicts, |v| self.level(v), self.policy)
    }

    /// A verdict's level: its own, else the catalogue's, else MUST.
    pub fn level(&self, v: &Verdict) -> Level {
        crate::rule::level_of(&self.meta.protocol, v)
    }

    /// The rules that could not run, with why (listed in every report format).
    pub fn not_run(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.status == Status::NotRun)
    }

    /// The catalogue title (description) of a rule, if catalogued.
    pub fn title(&self, id: &str) -> Option<String> {
        self.rule(id).map(|r| r.description.clone())
    }

    /// A rule's catalogue entry (its live-mode entry first). A recorded rule reported per
    /// cell (`recorded/<cell>/grammar`) resolves to its generic entry (`recorded/grammar`).
    pub fn rule(&self, id: &str) -> Option<&'static crate::rule::RuleInfo> {
        let cat = crate::rule::catalogue_cached();
        let find = |id: &str| {
            cat.iter()
                .find(|r| r.id == id && r.protocol == self.meta.protocol && r.mode == "live")
                .or_else(|| {
                    cat.iter()
                        .find(|r| r.id == id && r.protocol == self.meta.protocol)
                })
        };
        find(id).or_else(|| {
            let rest = id.strip_prefix("recorded/")?;
            let (_, tail) = rest.rsplit_once('/')?;
            find(&format!("recorded/{tail}"))
        })
    }

    /// `<rule text> (<spec section>)` for a rule, when catalogued: what failure lines cite.
    pub fn citation(&self, id: &str) -> Option<String> {
        self.rule(id)
            .map(|r| format!("{} ({})", r.description, r.section))
    }

    /// Verdicts that fail the run or warn, in order (re-listed at the end of every report).
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| {
            matches!(
                crate::rule::Outcome::of(v.status, self.level(v), self.policy),
                crate::rule::Outcome::Failed
                    | crate::rule::Outcome::Skipped
                    | crate::rule::Outcome::Warned
            )
        })
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the Unix epoch.
pub fn rfc3339_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
pub(crate) fn sample() -> Report {
    use crate::rule::Verdict;
    Report {
        meta: RunMeta {
            protocol: "bb".into(),
            target: "bridge --x <&>".into(),
            started_at: rfc3339_utc(0),
            duration_ms: 12,
            timeout_ms: 5000,
            fixture: Some("bridgewire.toml".into()),
            target_exit: Some("exit status 3".into()),
            notes: vec!["1 non-JSON stdout line(s), first: oops".into()],
            stderr_tail: "boom\n".into(),
            target_pid: Some(42),
            interrupted: None,
        },
        verdicts: vec![
            Verdict::pass("rpc/unknown-method"),
            Verdict::fail("turn/lifecycle", "turn never settled (no turn/completed)")
                .with_context(vec!["→ {\"id\":1}".into(), "← <stdout closed>".into()]),
            Verdict::skipped("session/resume-identity", "thread/resume unanswered"),
            Verdict::not_run("session/fork", "no fixture: set [bb.fixture] fork"),
            Verdict::from_subchecks(
                "handshake-auth",
                vec![
                    crate::rule::SubCheck::pass("valid-jwt", "welcome received"),
                    crate::rule::SubCheck::fail("forged-jwt", "connected with a forged JWT"),
                ],
            )
            .with_level(Level::Should),
        ],
        policy: Policy::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}

/// Writes a report file `0600` (it may quote what crossed the wire).
pub fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    write_report_file(path, text, crate::lane::write::DEFAULT_FILE_MODE)
}

/// Writes a report file with `mode` (a regular file that exists is truncated and gets `mode`
/// too; a device such as `/dev/stdout` is written as it is); missing folders are created with
/// the matching search bits.
pub fn write_report_file(path: &std::path::Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = mode & 0o777;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        crate::lane::write::create_dirs(dir, crate::lane::write::dir_mode(mode))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    if f.metadata()?.is_file() {
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    f.write_all(text.as_bytes())
}

/// A report with every string passed through the process-wide known-secret set
/// ([`crate::redact::global`]): wire frames structurally (learning), then every known value.
pub fn redact_report(report: &Report) -> Report {
    let g = crate::redact::global();
    let r = |s: &str| g.redact_text(s).into_owned();
    let mut out = report.clone();
    out.verdicts = out.verdicts.iter().map(redact_verdict).collect();
    let m = &mut out.meta;
    m.target = r(&m.target);
    m.stderr_tail = r(&m.stderr_tail);
    m.notes = m.notes.iter().map(|n| r(n)).collect();
    m.fixture = m.fixture.as_deref().map(r);
    out
}

/// A verdict with its frames, detail and evidence passed through [`crate::redact::global`]
/// (frames first: what they redact is learned for the rest).
pub fn redact_verdict(v: &Verdict) -> Verdict {
    let g = crate::redact::global();
    let r = |s: &str| g.redact_text(s).into_owned();
    let mut v = v.clone();
    v.context = v.context.iter().map(|c| r(c)).collect();
    v.detail = r(&v.detail);
    for c in &mut v.subchecks {
        c.evidence = r(&c.evidence);
        c.name = r(&c.name);
    }
    v
}

/// The report files every `check` subcommand can write besides its stdout report.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReportFiles {
    /// Also write a JUnit XML report (a suite per protocol, a case per rule).
    #[arg(long, value_name = "PATH")]
    pub junit: Option<std::path::PathBuf>,
    /// Also write a Markdown summary (for CI step summaries).
    #[arg(long, value_name = "PATH")]
    pub markdown: Option<std::path::PathBuf>,
    /// Also write a self-contained HTML report.
    #[arg(long, value_name = "PATH")]
    pub html: Option<std::path::PathBuf>,
    /// Permission bits of the report files, in octal (default 600; folders created for them
    /// get the matching search bits).
    #[arg(long = "mode", value_name = "OCTAL", value_parser = crate::cli::parse_mode)]
    pub mode: Option<u32>,
}

impl ReportFiles {
    /// Writes every requested file; the first failure is returned, naming the path.
    pub fn write(&self, report: &Report) -> Result<(), String> {
        type Render = fn(&Report) -> String;
        let files: [(&Option<std::path::PathBuf>, Render); 3] = [
            (&self.junit, junit::render),
            (&self.markdown, markdown::render),
            (&self.html, html::render),
        ];
        for (path, render) in files {
            if let Some(p) = path {
                let mode = self.mode.unwrap_or(crate::lane::write::DEFAULT_FILE_MODE);
                write_report_file(p, &render(&redact_report(report)), mode)
                    .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
            }
        }
        Ok(())
    }

    /// A report of `verdicts` for a check that has no richer run metadata.
    pub fn simple_report(
        protocol: &str,
        target: &str,
        started_ms: i64,
        verdicts: Vec<Verdict>,
    ) -> Report {
        Report {
            meta: RunMeta {
                protocol: protocol.into(),
                target: target.into(),
                started_at: rfc3339_utc(started_ms),
                duration_ms: (crate::util::now_ms() - started_ms).max(0) as u64,
                ..Default::default()
            },
            verdicts,
            policy: Policy::default(),
        }
    }
}

//! `bridgewire parity`.

use super::{ParityArgs, exit};
use crate::cell::Cell;
use crate::parity::{self, CellParity, LegRunner, LegSpec};
use rayon::prelude::*;
use std::path::PathBuf;

/// A prepared leg; keeps worktrees alive until the run ends.
struct Prepared {
    runner: Box<dyn LegRunner>,
    _worktree: Option<parity::Worktree>,
}

fn prepare(spec: &LegSpec, side: &'static str, timeout_ms: u64) -> Prepared {
    let label = |s: &str| format!("{side} ({s})");
    match spec {
        LegSpec::Recordings(root) => Prepared {
            runner: Box::new(parity::RecordingsLeg { root: root.clone() }),
            _worktree: None,
        },
        LegSpec::Dump(root) => Prepared {
            runner: Box::new(parity::DumpLeg {
                root: root.clone(),
                side,
            }),
            _worktree: None,
        },
        LegSpec::Command(words) => Prepared {
            runner: Box::new(parity::LiveLeg {
                label: label(&words.join(" ")),
                command: words.clone(),
                timeout_ms,
            }),
            _worktree: None,
        },
        LegSpec::Checkout(dir) => {
            match parity::build_checkout(dir, std::time::Duration::from_secs(1200)) {
                Ok(command) => Prepared {
                    runner: Box::new(parity::LiveLeg {
                        label: label(&dir.display().to_string()),
                        command,
                        timeout_ms,
                    }),
                    _worktree: None,
                },
                Err(e) => Prepared {
                    runner: Box::new(parity::BrokenLeg {
                        label: label(&dir.display().to_string()),
                        error: e,
                    }),
                    _worktree: None,
                },
            }
        }
        LegSpec::GitRef(rev) => match parity::Worktree::add(rev) {
            Ok(wt) => {
                match parity::build_checkout(&wt.path, std::time::Duration::from_secs(1200)) {
                    Ok(command) => Prepared {
                        runner: Box::new(parity::LiveLeg {
                            label: label(rev),
                            command,
                            timeout_ms,
                        }),
                        _worktree: Some(wt),
                    },
                    Err(e) => Prepared {
                        runner: Box::new(parity::BrokenLeg {
                            label: label(rev),
                            error: e,
                        }),
                        _worktree: Some(wt),
                    },
                }
            }
            Err(e) => Prepared {
                runner: Box::new(parity::BrokenLeg {
                    label: label(rev),
                    error: e,
                }),
                _worktree: None,
            },
        },
    }
}

pub fn run(a: &ParityArgs) -> u8 {
    let (base_spec, head_spec) = match (LegSpec::parse(&a.base), LegSpec::parse(&a.head)) {
        (Ok(b), Ok(h)) => (b, h),
        (Err(e), _) => {
            eprintln!("error: --base: {e}");
            return exit::INVALID_INPUT;
        }
        (_, Err(e)) => {
            eprintln!("error: --head: {e}");
            return exit::INVALID_INPUT;
        }
    };
    // The allowlist is validated before anything runs.
    let allow = match &a.allowlist {
        Some(p) => match crate::allowlist::load(p) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::INVALID_INPUT;
            }
        },
        None => Vec::new(),
    };
    if let Some(d) = &a.dump_dir
        && let Err(e) = std::fs::create_dir_all(d)
    {
        eprintln!("error: {}: {e}", d.display());
        return exit::INVALID_INPUT;
    }
    // The cells to compare: from the recordings given, or (dump legs) from the base dump.
    let mut targets: Vec<(String, Option<Cell>)> = Vec::new();
    let roots: Vec<PathBuf> = if a.recordings.is_empty() {
        match (&base_spec, &head_spec) {
            (LegSpec::Dump(d), _) => {
                targets = parity::DumpLeg::keys(d)
                    .into_iter()
                    .map(|k| (k, None))
                    .collect();
                Vec::new()
            }
            (LegSpec::Recordings(d), _) => vec![d.clone()],
            _ => vec![PathBuf::from("recordings")],
        }
    } else {
        a.recordings.clone()
    };
    for root in &roots {
        match crate::cell::discover(root) {
            Ok(cells) => targets.extend(cells.into_iter().map(|c| (c.key.clone(), Some(c)))),
            Err(e) => {
                eprintln!("error: {e}");
                return exit::INVALID_INPUT;
            }
        }
    }
    targets.retain(|(key, _)| {
        let (provider, cell) = key.split_once('/').unwrap_or(("", key));
        a.provider.as_deref().is_none_or(|p| p == provider)
            && a.cell.as_deref().is_none_or(|c| c == cell)
    });
    if targets.is_empty() {
        eprintln!("error: no matching recordings");
        return exit::INVALID_INPUT;
    }
    // SIGINT/SIGTERM: legs' process trees, worktrees and temporary folders go; exit 130/143.
    crate::signals::install();
    let compared = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = targets.len();
    let seen = compared.clone();
    let _summary = crate::signals::on_signal(move |sig| {
        eprintln!(
            "bridgewire parity: interrupted by signal {sig}: {} of {total} cells compared; worktrees and temporary folders removed",
            seen.load(std::sync::atomic::Ordering::SeqCst)
        );
    });
    let (base, head) = rayon::join(
        || prepare(&base_spec, "base", a.timeout_ms),
        || prepare(&head_spec, "head", a.timeout_ms),
    );
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(a.jobs.unwrap_or(0))
        .build()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let results: Vec<CellParity> = pool.install(|| {
        targets
            .par_iter()
            .map(|(key, cell)| {
                let r = compare_one(key, cell.as_ref(), &*base.runner, &*head.runner, &allow, a);
                compared.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                r
            })
            .collect()
    });
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut out = String::new();
    for r in &results {
        for line in parity::render_cell(r) {
            out.push_str(&line);
            out.push('\n');
        }
        if r.skipped.is_some() {
            skipped += 1;
        } else if r.passed() {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    print!("{out}");
    println!(
        "\n{passed} passed, {failed} failed, {skipped} skipped ({} cells)",
        results.len()
    );
    if failed > 0 { exit::FAILED } else { exit::OK }
}

fn compare_one(
    key: &str,
    cell: Option<&Cell>,
    base: &dyn LegRunner,
    head: &dyn LegRunner,
    allow: &[crate::allowlist::Entry],
    a: &ParityArgs,
) -> CellParity {
    let model = cell
        .map(|c| c.protocol.model())
        .unwrap_or(crate::protocol::Protocol::Bb.model());
    let skip = |reason: &str| CellParity {
        key: key.to_string(),
        skipped: Some(reason.to_string()),
        base: Default::default(),
        head: Default::default(),
        events: Default::default(),
        rows: Default::default(),
        grammar: Default::default(),
        stale: Vec::new(),
        problems: Vec::new(),
    };
    if key.rsplit('/').next() == Some("_process") {
        return skip("process-scoped recording (no thread events to compare)");
    }
    let (mut b, mut h) = rayon::join(|| base.run(key, cell), || head.run(key, cell));
    if let Some(reason) = b.skip.as_ref().or(h.skip.as_ref()) {
        return skip(reason);
    }
    // The empty-replay check needs what the recording itself assembles; only live legs can
    // come back empty by failing, so recorded and dump legs skip this extra assembly.
    if let Some(c) = cell.filter(|_| base.replays_live() || head.replays_live()) {
        let recorded = crate::pins::compute(c, None).counts.events;
        b.recorded_events.get_or_insert(recorded);
        h.recorded_events.get_or_insert(recorded);
    }
    parity::compare_cell(key, model, b, h, allow, a.dump_dir.as_deref())
}

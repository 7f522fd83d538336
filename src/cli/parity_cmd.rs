//! `bridgewire parity`.

use super::{ParityArgs, exit};
use crate::cell::Cell;
use crate::parity::{self, CellParity, LegRunner, LegSpec, Outcome};
use crate::protocol::BridgeCommand;
use rayon::prelude::*;
use std::path::PathBuf;

/// A prepared leg; keeps worktrees alive until the run ends.
struct Prepared {
    runner: Box<dyn LegRunner>,
    _worktree: Option<parity::Worktree>,
}

/// Prepares a leg, or says why it cannot start (a failed build, a missing program, an unknown
/// ref): such a leg ends the run before any cell, with exit 2.
fn prepare(spec: &LegSpec, side: &'static str, a: &ParityArgs) -> Result<Prepared, String> {
    let (timeout_ms, max_body) = (a.timeout_ms, a.max_body);
    let label = |s: &str| format!("{side} ({s})");
    let live = |label: String, bridge: BridgeCommand, worktree| -> Result<Prepared, String> {
        let bridge = BridgeCommand {
            address_pattern: a.url_pattern.clone().map(crate::protocol::AddressPattern),
            ..bridge
        };
        if let Some(why) = parity::cannot_start(&bridge) {
            return Err(format!("`{}` cannot start: {why}", bridge.display()));
        }
        Ok(Prepared {
            runner: Box::new(parity::LiveLeg {
                label,
                bridge,
                timeout_ms,
                max_body,
                max_reply: std::time::Duration::from_secs_f64(a.max_reply_time),
            }),
            _worktree: worktree,
        })
    };
    match spec {
        LegSpec::Recordings(root) => Ok(Prepared {
            runner: Box::new(parity::RecordingsLeg { root: root.clone() }),
            _worktree: None,
        }),
        LegSpec::Dump(root) => Ok(Prepared {
            runner: Box::new(parity::DumpLeg {
                root: root.clone(),
                side,
            }),
            _worktree: None,
        }),
        LegSpec::Command(words) => live(
            label(&words.join(" ")),
            BridgeCommand::new(words.clone()),
            None,
        ),
        LegSpec::Checkout(dir) => {
            let bridge = parity::build_checkout(dir, std::time::Duration::from_secs(1200))?;
            live(label(&dir.display().to_string()), bridge, None)
        }
        LegSpec::GitRef(rev) => {
            let wt = parity::Worktree::add(rev)?;
            let bridge = parity::build_checkout(&wt.path, std::time::Duration::from_secs(1200))
                .map_err(|e| format!("ref {rev}: {e}"))?;
            live(label(rev), bridge, Some(wt))
        }
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
    let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    // Two recordings legs of one folder assemble the same lanes twice: every cell would pass
    // whatever the recordings hold, so it is refused like two live legs of one bridge.
    if let (LegSpec::Recordings(b), LegSpec::Recordings(h)) = (&base_spec, &head_spec)
        && !a.allow_same_bridge
        && canon(b) == canon(h)
    {
        eprintln!(
            "error: both legs read the same recordings ({}), so the comparison could not \
show a difference; pass --allow-same-bridge to compare a folder with itself on purpose.",
            canon(b).display()
        );
        return exit::INVALID_INPUT;
    }
    // Two dump legs of one folder read `<stem>.base.*` and `<stem>.head.*` (a parity dump);
    // a stem with only `<stem>.events.json` (a pins dump) would be read by both legs alike.
    if let (LegSpec::Dump(b), LegSpec::Dump(h)) = (&base_spec, &head_spec)
        && !a.allow_same_bridge
        && canon(b) == canon(h)
    {
        let shared: Vec<String> = parity::DumpLeg::keys(b)
            .into_iter()
            .filter(|stem| {
                ["base", "head"]
                    .iter()
                    .any(|side| !b.join(format!("{stem}.{side}.events.json")).exists())
            })
            .collect();
        if let Some(first) = shared.first() {
            eprintln!(
                "error: both legs would read the same lists from {} for {} cell(s) (e.g. \
{first}.events.json, with no .base/.head pair), so the comparison could not show a difference; \
pass --allow-same-bridge to compare them with themselves on purpose.",
                canon(b).display(),
                shared.len()
            );
            return exit::INVALID_INPUT;
        }
    }
    // Two refs of one commit check out the same files twice: the same self-comparison.
    if let (LegSpec::GitRef(b), LegSpec::GitRef(h)) = (&base_spec, &head_spec)
        && !a.allow_same_bridge
        && let (Some(cb), Some(ch)) = (parity::git_commit(b), parity::git_commit(h))
        && cb == ch
    {
        eprintln!(
            "error: both legs are commit {cb} (ref:{b} and ref:{h}): two checkouts of one \
commit run the same files, so the comparison could not show a difference; pass \
--allow-same-bridge to compare a build with itself on purpose (a determinism check)."
        );
        return exit::INVALID_INPUT;
    }
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
    // A dump folder bridgewire creates is private (`--mode`); its files take its bits.
    if let Some(d) = &a.dump_dir
        && let Err(e) = crate::lane::write::create_dirs(
            d,
            crate::lane::write::dir_mode(
                a.reports
                    .mode
                    .unwrap_or(crate::lane::write::DEFAULT_FILE_MODE),
            ),
        )
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
    // An entry that names a provider or cell these recordings do not have can never mask
    // anything: stale before any cell runs (a typo in a cell name would otherwise pass
    // silently, as no cell ever applies it).
    let nowhere: Vec<&crate::allowlist::Entry> = allow
        .iter()
        .filter(|e| {
            !targets.iter().any(|(key, _)| {
                let (provider, cell) = key.split_once('/').unwrap_or(("", key));
                e.applies(provider, cell)
            })
        })
        .collect();
    if !nowhere.is_empty() {
        for e in nowhere {
            eprintln!(
                "error: stale allowlist entry {} (provider {:?}, cell {:?}): no cell of these recordings has that name, so it can mask nothing",
                e.describe(),
                e.provider,
                e.cell
            );
        }
        return exit::INVALID_INPUT;
    }
    targets.retain(|(key, _)| {
        let (provider, _) = key.split_once('/').unwrap_or(("", key));
        a.provider.as_deref().is_none_or(|p| p == provider)
            && a.cell.as_deref().is_none_or(|c| key.contains(c))
            && a.partition.includes(key)
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
        || prepare(&base_spec, "base", a),
        || prepare(&head_spec, "head", a),
    );
    let (base, head) = match (base, head) {
        (Ok(b), Ok(h)) => (b, h),
        (b, h) => {
            for (side, r) in [("base", &b), ("head", &h)] {
                if let Err(e) = r {
                    eprintln!("error: the {side} leg cannot start: {e}");
                }
            }
            return exit::INVALID_INPUT;
        }
    };
    if let (Some(b), Some(h)) = (base.runner.bridge(), head.runner.bridge())
        && let Some(runs) = parity::same_bridge(b, h)
        && !a.allow_same_bridge
    {
        eprintln!(
            "error: both legs would run the same files with the same arguments, so the \
comparison could not show a difference:\n  base: {}\n  head: {}\n  both run: {runs}\n\
For dir:/ref: legs, make [parity] bridge name the checkout's own files (a path relative to the \
checkout, e.g. `python3 bridge.py`); to compare a bridge with itself on purpose (a determinism \
check), pass --allow-same-bridge.",
            b.display(),
            h.display(),
        );
        return exit::INVALID_INPUT;
    }
    // Who each live leg is, against who the cells were recorded from: said before any wait.
    let mut protocols: Vec<crate::protocol::Protocol> = targets
        .iter()
        .filter_map(|(_, c)| c.as_ref().map(|c| c.protocol))
        .collect();
    protocols.sort();
    protocols.dedup();
    // Two commands that differ may still reach one server (both print the address of one
    // running hub): the same self-comparison, refused alike.
    if let (Some(b), Some(h)) = (base.runner.bridge(), head.runner.bridge())
        && !a.allow_same_bridge
    {
        let timeout = std::time::Duration::from_millis(a.timeout_ms);
        for &p in &protocols {
            if let Some(why) = p.live().same_server(b, h, timeout) {
                eprintln!(
                    "error: both legs would reach the same {p} server or run the same program, so \
the comparison could not show a difference:\n  base: {}\n  head: {}\n  {why}\nGive each leg its own server and build; to \
compare a server with itself on purpose (a determinism check), pass --allow-same-bridge.",
                    b.display(),
                    h.display(),
                );
                return exit::INVALID_INPUT;
            }
        }
    }
    let mut notes = Vec::new();
    // Per protocol and live leg, the warning that cells were recorded from another bridge:
    // printed after the handshakes are compared, unless a FAIL handshake line says the same.
    let mut foreign_notes: Vec<(crate::protocol::Protocol, &str, String)> = Vec::new();
    // Per protocol, each live leg's handshake: compared between the legs below.
    let mut identities: Vec<(crate::protocol::Protocol, &str, crate::protocol::Identity)> =
        Vec::new();
    for (side, leg) in [("base", &base), ("head", &head)] {
        let Some(bridge) = leg.runner.bridge() else {
            continue;
        };
        for &p in &protocols {
            let live = p.live();
            // A start-up is waited for at least START_WAIT: a short --timeout-ms bounds the
            // replay's waits, and must not refuse a leg whose interpreter starts slowly on a
            // busy machine (python3 under load took over 2 s to answer initialize).
            let wait =
                std::time::Duration::from_millis(a.timeout_ms).max(crate::protocol::START_WAIT);
            let found = match live.identify(bridge, wait) {
                Ok(Some(id)) => id,
                Ok(None) => continue,
                Err(e) => {
                    eprintln!("error: the {side} leg cannot start: {e}");
                    return exit::INVALID_INPUT;
                }
            };
            let identity = found.text.clone();
            identities.push((p, side, found));
            // A process-scoped cell is not replayed, so it cannot stall on another bridge.
            let foreign: Vec<(String, String)> = targets
                .iter()
                .filter(|(k, _)| !process_scoped(k))
                .filter_map(|(k, c)| c.as_ref().filter(|c| c.protocol == p).map(|c| (k, c)))
                .filter_map(|(k, c)| {
                    // The recording's own handshake is read again when the manifest's identity
                    // differs: a manifest written by an older bridgewire fingerprinted the
                    // handshake another way.
                    let in_lanes = live.recorded_identity(c).map(|i| i.text);
                    let recorded =
                        crate::cells::manifest_identity(c).or_else(|| in_lanes.clone())?;
                    (recorded != identity && in_lanes.is_none_or(|r| r != identity))
                        .then(|| (k.clone(), recorded))
                })
                .collect();
            if let Some((_, recorded)) = foreign.first() {
                foreign_notes.push((p, side, format!(
                    "warning: {} of the {p} cells were recorded from another bridge than the {side} leg's \
(recorded: {recorded}; {side}: {identity}); their replays wait for that bridge's answers and may \
stall. Record your own cells with `bridgewire record-cells {p}`. Cells: {}",
                    foreign.len(),
                    foreign
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .take(8)
                        .collect::<Vec<_>>()
                        .join(", ")
                        + if foreign.len() > 8 { ", …" } else { "" }
                )));
            }
        }
    }
    // Two commands that differ may still run one program once started (`sh -c 'exec …'`, a
    // wrapper script, `python3 -u`): read from the trees that answered the handshakes.
    if !a.allow_same_bridge {
        for &p in &protocols {
            let running = |side: &str| {
                identities
                    .iter()
                    .find(|(q, s, _)| *q == p && *s == side)
                    .map(|(_, _, i)| &i.running)
                    .filter(|r| !r.is_empty())
            };
            if let (Some(b), Some(h)) = (running("base"), running("head"))
                && b == h
                && let (Some(bc), Some(hc)) = (base.runner.bridge(), head.runner.bridge())
            {
                refuse_same_program(&p.to_string(), bc, hc, b);
                return exit::INVALID_INPUT;
            }
        }
    }
    // Each protocol whose bridges state a handshake: what the runtime acts on, compared between
    // the legs (a live leg's as started, a recorded leg's as its cells were recorded), or why not.
    let mut handshakes: Vec<(crate::protocol::Protocol, parity::HandshakeParity)> = protocols
        .iter()
        .filter(|p| p.live().states_handshake())
        .map(|&p| {
            (p, {
                let cells_of: Vec<&str> = targets
                    .iter()
                    .filter(|(_, c)| c.as_ref().is_some_and(|c| c.protocol == p))
                    .map(|(k, _)| k.as_str())
                    .collect();
                let of = |side: &str,
                      leg: &Prepared|
             -> Result<(crate::protocol::Identity, Option<String>), String> {
                if let Some((_, _, i)) = identities.iter().find(|(q, s, _)| *q == p && *s == side) {
                    return Ok((i.clone(), None));
                }
                let label = leg.runner.label();
                let Some(root) = leg.runner.recordings_root() else {
                    return Err(format!("the {side} leg ({label}) holds no handshake"));
                };
                let cells: Vec<crate::cell::Cell> = cells_of
                    .iter()
                    .filter_map(|k| crate::cell::Cell::at(root, &root.join(k)))
                    .collect();
                let (id, n) = parity::recorded_handshake(&label, &cells, p.live())?;
                Ok((
                    id,
                    Some(format!("{side}: as recorded with {n} cell(s) of {label}")),
                ))
            };
                let (b, h) = match (of("base", &base), of("head", &head)) {
                    (Ok(b), Ok(h)) => (b, h),
                    (Err(why), _) | (_, Err(why)) => {
                        return (
                            p,
                            parity::HandshakeParity::not_compared(&p.to_string(), why),
                        );
                    }
                };
                let mut providers: Vec<&str> = cells_of
                    .iter()
                    .map(|k| k.split_once('/').map_or("", |(p, _)| p))
                    .collect();
                providers.dedup();
                let mut compared =
                    parity::compare_handshakes(&p.to_string(), &providers, &b.0, &h.0, &allow);
                compared.sources = [b.1, h.1].into_iter().flatten().collect();
                compared
            })
        })
        .collect();
    // A live leg set against the recorded leg its cells came from: when their handshakes
    // differ, the FAIL handshake line already says the cells were recorded from another
    // bridge; it gains the warning's consequence instead of a second message above it.
    for (p, side, note) in foreign_notes {
        let other = if side == "base" { &head } else { &base };
        let said = other.runner.bridge().is_none()
            && other.runner.recordings_root().is_some()
            && handshakes
                .iter_mut()
                .find(|(q, h)| *q == p && !h.differences.is_empty())
                .map(|(_, h)| {
                    h.sources.push(format!(
                        "{side}: replays of these cells wait for the recorded bridge's answers and may stall"
                    ))
                })
                .is_some();
        if !said {
            notes.push(note);
        }
    }
    let handshakes: Vec<parity::HandshakeParity> = handshakes.into_iter().map(|(_, h)| h).collect();
    let json = a.format == super::Format::Json;
    let notes: Vec<String> = notes
        .iter()
        .map(|n| crate::redact::printable(n).into_owned())
        .collect();
    for n in &notes {
        if json {
            eprintln!("{n}");
        } else {
            println!("{n}");
        }
    }
    let started_ms = crate::util::now_ms();
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
    // Cells of a protocol whose recordings are one conversation with a server (chats that
    // one server holds side by side) are replayed together on one bridge per live leg, both
    // legs at once; the others each on a bridge of their own, cells in parallel.
    // What each recording assembles, read once for both: its unreadable entries (named per
    // cell before any bridge starts, and kept out of a shared replay) and its event count
    // (the empty-replay check). Only a live leg needs it.
    let live_legs = base.runner.replays_live() || head.runner.replays_live();
    let assembled: Vec<Option<crate::pins::CellOutcome>> = pool.install(|| {
        targets
            .par_iter()
            .map(|(key, c)| {
                c.as_ref()
                    .filter(|_| live_legs && !process_scoped(key))
                    .map(|c| crate::pins::compute(c, None))
            })
            .collect()
    });
    let (base_runs, head_runs) = pool.install(|| {
        rayon::join(
            || replayed_together(&targets, &assembled, &protocols, &*base.runner),
            || replayed_together(&targets, &assembled, &protocols, &*head.runner),
        )
    });
    // The leg run a second time on a cell whose lists differ (see parity::Control): none in a
    // determinism check (both legs one bridge), where every difference is the point.
    let one_bridge = matches!(
        (base.runner.bridge(), head.runner.bridge()),
        (Some(b), Some(h)) if parity::same_bridge(b, h).is_some()
    );
    let second: Option<(&'static str, &dyn LegRunner)> = if a.no_second_run || one_bridge {
        None
    } else if base.runner.replays_live() {
        Some(("base", &*base.runner))
    } else if head.runner.replays_live() {
        Some(("head", &*head.runner))
    } else {
        None
    };
    let (mut results, kept): (Vec<CellParity>, Vec<Option<parity::ComparedLists>>) =
        pool.install(|| {
            targets
                .par_iter()
                .zip(assembled.par_iter())
                .zip(base_runs.into_par_iter().zip(head_runs.into_par_iter()))
                .map(|(((key, cell), computed), pre)| {
                    let r = compare_one(
                        key,
                        cell.as_ref(),
                        computed.as_ref(),
                        (&*base.runner, &*head.runner),
                        pre,
                        &allow,
                        a,
                        second.is_some(),
                    );
                    compared.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    r
                })
                .unzip()
        });
    if let Some((side, leg)) = second {
        let mixed = !base.runner.replays_live() || !head.runner.replays_live();
        pool.install(|| {
            second_runs(
                &targets,
                &assembled,
                (side, leg),
                mixed,
                kept,
                &mut results,
                &allow,
            )
        });
    }
    let count = |o: Outcome| results.iter().filter(|r| r.outcome() == o).count();
    let (passed, failed, stalled, errors, skipped) = (
        count(Outcome::Pass),
        count(Outcome::Fail),
        count(Outcome::Stall),
        count(Outcome::Error),
        count(Outcome::Skip),
    );
    // Nothing compared: the cause comes first, before the per-cell lines.
    let nothing = passed + failed + stalled == 0;
    if nothing {
        let cause = results
            .iter()
            .find_map(|r| r.errors.first().cloned())
            .or_else(|| {
                results
                    .iter()
                    .find_map(|r| r.skipped.clone())
                    .map(|s| format!("every cell was skipped (first: {s})"))
            })
            .unwrap_or_else(|| "no cell was compared".into());
        if json {
            eprintln!("error: nothing was compared: {cause}");
        } else {
            println!("error: nothing was compared: {cause}");
        }
    }
    // A malformed recording is invalid input (exit 2), as `pins` says for the same lane.
    let invalid_input = results.iter().any(|r| r.invalid_input);
    let handshake_failed = handshakes.iter().any(|h| h.failed());
    let code = if nothing || invalid_input {
        exit::INVALID_INPUT
    } else if failed + stalled + errors > 0 || handshake_failed {
        exit::FAILED
    } else {
        exit::OK
    };
    let target = format!("{} vs {}", base.runner.label(), head.runner.label());
    let mut report = crate::report::ReportFiles::simple_report(
        "parity",
        &target,
        started_ms,
        results
            .iter()
            .map(parity::verdict)
            .chain(handshakes.iter().map(|h| h.verdict()))
            .collect(),
    );
    report.meta.timeout_ms = a.timeout_ms;
    if let Err(e) = a.reports.write(&report) {
        eprintln!("error: {e}");
        return exit::INVALID_INPUT;
    }
    if json {
        let doc = serde_json::json!({
            "format_version": 1,
            "base": base.runner.label(),
            "head": head.runner.label(),
            "notes": notes,
            "cells": results.iter().map(parity::cell_json).collect::<Vec<_>>(),
            "handshakes": handshakes.iter().map(|h| h.json()).collect::<Vec<_>>(),
            "summary": {"passed": passed, "failed": failed, "stalled": stalled,
                "notRun": errors, "skipped": skipped, "cells": results.len()},
        });
        let doc = crate::jsjson::to_string_pretty(&doc);
        println!("{}", crate::redact::printable(doc.trim_end()));
        return code;
    }
    let mut out = String::new();
    for r in &results {
        for line in parity::render_cell(r) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    for h in &handshakes {
        for line in h.render() {
            out.push_str(&line);
            out.push('\n');
        }
    }
    print!("{}", crate::redact::printable(&out));
    let mut tail = format!("\n{passed} passed, {failed} failed");
    if stalled > 0 {
        tail.push_str(&format!(", {stalled} stalled"));
    }
    if errors > 0 {
        tail.push_str(&format!(", {errors} not run (leg error)"));
    }
    tail.push_str(&format!(", {skipped} skipped ({} cells)", results.len()));
    if handshake_failed {
        tail.push_str("; the handshakes differ");
    } else if handshakes.iter().any(|h| h.not_compared.is_some()) {
        tail.push_str("; the handshakes were not compared");
    }
    println!("{tail}");
    code
}

/// Whether a cell is compared at all: a process-scoped recording holds no conversation.
fn process_scoped(key: &str) -> bool {
    key.rsplit('/').next() == Some("_process")
}

/// Per target, the leg's run of it when its protocol replays its cells together on one
/// bridge ([`LegRunner::run_together`]); `None` where the cell is run alone (or not at all:
/// process-scoped, or an unreadable recording, named per cell before any bridge starts).
/// `assembled` is each target's offline assembly (`None`: not to be replayed live).
fn replayed_together(
    targets: &[(String, Option<Cell>)],
    assembled: &[Option<crate::pins::CellOutcome>],
    protocols: &[crate::protocol::Protocol],
    leg: &dyn LegRunner,
) -> Vec<Option<parity::LegRun>> {
    let mut out: Vec<Option<parity::LegRun>> = targets.iter().map(|_| None).collect();
    if !leg.replays_live() {
        return out;
    }
    for &p in protocols {
        let (at, cells): (Vec<usize>, Vec<&Cell>) = targets
            .iter()
            .zip(assembled)
            .enumerate()
            .filter_map(|(i, ((_, c), assembled))| {
                c.as_ref()
                    .filter(|c| c.protocol == p)
                    .filter(|_| assembled.as_ref().is_some_and(|o| o.lane_errors.is_empty()))
                    .map(|c| (i, c))
            })
            .unzip();
        if cells.is_empty() {
            continue;
        }
        if let Some(runs) = leg.run_together(&cells) {
            for (i, r) in at.into_iter().zip(runs) {
                out[i] = Some(r);
            }
        }
    }
    out
}

/// Runs the `second` leg once more on each cell whose lists differed (`kept` holds both legs'
/// lists of those as first compared) and, where values differ between its two runs, compares
/// the cell again with them set aside ([`parity::Control`]). Cells of a protocol that replays its cells together are
/// replayed together again, as in the first run.
fn second_runs(
    targets: &[(String, Option<Cell>)],
    assembled: &[Option<crate::pins::CellOutcome>],
    (side, leg): (&'static str, &dyn LegRunner),
    mixed: bool,
    kept: Vec<Option<parity::ComparedLists>>,
    results: &mut [CellParity],
    allow: &[crate::allowlist::Entry],
) {
    let mut protocols: Vec<crate::protocol::Protocol> = targets
        .iter()
        .zip(&kept)
        .filter(|(_, k)| k.is_some())
        .filter_map(|((_, c), _)| c.as_ref().map(|c| c.protocol))
        .collect();
    if protocols.is_empty() {
        return;
    }
    protocols.sort();
    protocols.dedup();
    let together = replayed_together(targets, assembled, &protocols, leg);
    let controls: Vec<Option<parity::Control>> = targets
        .par_iter()
        .zip(together.into_par_iter())
        .zip(kept.par_iter())
        .map(|(((key, cell), together), kept)| {
            let (cell, first) = (cell.as_ref()?, kept.as_ref()?);
            let mut again = together.unwrap_or_else(|| leg.run(key, Some(cell)));
            let unfinished = again
                .error
                .clone()
                .or_else(|| again.skip.clone())
                .or_else(|| again.stalls.first().map(|s| format!("stall: {s}")));
            if let Some(why) = unfinished {
                return Some(parity::Control::NotFinished { side, why });
            }
            if mixed {
                parity::restrict_to_live_view(&mut again, cell);
            }
            let model = cell.protocol.model();
            let varying = parity::varying_between(model, (key, allow), side, first, again);
            Some(if varying.is_empty() {
                parity::Control::Same { side }
            } else {
                parity::Control::Varies(varying)
            })
        })
        .collect();
    for (((result, control), kept), (_, cell)) in
        results.iter_mut().zip(controls).zip(kept).zip(targets)
    {
        let (Some(control), Some(lists), Some(cell)) = (control, kept, cell) else {
            continue;
        };
        if let parity::Control::Varies(v) = &control
            && v.count() > 0
        {
            // Its lists compared again with the varying values set aside; what the first
            // comparison found beside them (refusals, spec problems, grammar) stands.
            parity::recompare(result, lists, cell.protocol.model(), v);
        }
        result.control = Some(control);
    }
}

/// Compares one cell; with `keep_lists`, also returns both legs' lists as compared when they
/// differ (for [`second_runs`]).
#[allow(clippy::too_many_arguments)]
fn compare_one(
    key: &str,
    cell: Option<&Cell>,
    // The recording's offline assembly, when a live leg replays it.
    computed: Option<&crate::pins::CellOutcome>,
    (base, head): (&dyn LegRunner, &dyn LegRunner),
    (pre_base, pre_head): (Option<parity::LegRun>, Option<parity::LegRun>),
    allow: &[crate::allowlist::Entry],
    a: &ParityArgs,
    keep_lists: bool,
) -> (CellParity, Option<parity::ComparedLists>) {
    let model = cell
        .map(|c| c.protocol.model())
        .unwrap_or(crate::protocol::Protocol::DEFAULT.model());
    let skip = |reason: &str| (CellParity::skip(key, reason), None);
    if process_scoped(key) {
        return skip(model.process_scope_skip());
    }
    // The empty-replay check needs what the recording itself assembles; only live legs can
    // come back empty by failing, so recorded and dump legs skip this extra assembly.
    let live = cell.filter(|_| base.replays_live() || head.replays_live());
    if let Some(computed) = &computed
        && !computed.lane_errors.is_empty()
    {
        // A live leg replays this recording: its unreadable entries are bad input, named
        // here once (file:line) before any bridge is started.
        let errors = computed
            .lane_errors
            .iter()
            .map(|e| format!("unreadable recording: {e}"))
            .collect();
        return (CellParity::invalid_input(key, errors), None);
    }
    let (mut b, mut h) = rayon::join(
        || pre_base.unwrap_or_else(|| base.run(key, cell)),
        || pre_head.unwrap_or_else(|| head.run(key, cell)),
    );
    if let Some(reason) = b.skip.as_ref().or(h.skip.as_ref()) {
        return skip(reason);
    }
    // Both legs refusing the credentials alike would compare equal on evidence neither bridge
    // gave; one leg refused where the other was answered is a difference, compared below.
    if let (Some(reason), Some(_)) = (&b.refused, &h.refused) {
        return skip(&format!("both legs: {reason}"));
    }
    let refused: Vec<String> = [("base", &b.refused), ("head", &h.refused)]
        .into_iter()
        .filter_map(|(side, r)| r.as_ref().map(|r| format!("{side} leg: {r}")))
        .collect();
    if let (Some(c), Some(computed)) = (live, &computed) {
        let recorded = computed.counts.events;
        b.recorded_events.get_or_insert(recorded);
        h.recorded_events.get_or_insert(recorded);
        // A live leg sees one side of the wire: the other leg is compared on that view too.
        // So is the live leg itself, when the other is a recording: what a replay cannot
        // reproduce of a recording is seen the same on both (a value that counts peers the
        // replay plays apart, by its type). Two live legs, played alike, compare whole.
        let mixed = !base.replays_live() || !head.replays_live();
        for run in [&mut b, &mut h] {
            if mixed && run.error.is_none() {
                parity::restrict_to_live_view(run, c);
            }
        }
    }
    let (mut result, lists) =
        parity::compare_cell_keeping(key, model, b, h, allow, a.dump_dir.as_deref());
    // The cause first in the cell's text: the refusals are what the diff then shows.
    result.problems.extend(refused);
    // Only lists that differ (with both legs complete) are worth a second run.
    (result, lists.filter(|_| keep_lists))
}

/// Says that both live legs ran one program once started, although their commands differ.
fn refuse_same_program(
    protocol: &str,
    base: &crate::protocol::BridgeCommand,
    head: &crate::protocol::BridgeCommand,
    running: &[crate::proc::RunningProcess],
) {
    eprintln!(
        "error: both legs ran the same program once started (the same executable, arguments, \
files and environment), so the comparison could not show a difference:\n  base: {}\n  head: {}\n  \
both ran: {}\nA leg that differs only in what it reads at run time (a file both commands name \
but change between legs) is compared with --allow-same-bridge; so is a {protocol} bridge \
compared with itself on purpose (a determinism check).",
        base.display(),
        head.display(),
        running
            .iter()
            .map(|r| r.command.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
}

//! `bridgewire pins`.

use super::{Format, PinsArgs, exit};
use crate::pins::{self, CellOutcome, PinStatus};
use rayon::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;

/// Cells computed at once: a chunk's outcomes are printed and dropped before the next.
const CHUNK: usize = 256;

/// The JSON report written cell by cell, exactly as the whole document would be pretty-printed
/// (`{"format_version": 1, "cells": [...], "summary": {...}}`).
#[derive(Default)]
struct JsonCells {
    started: bool,
}

impl JsonCells {
    fn push(&mut self, cell: &Value) {
        let mut s = String::from(if self.started {
            ",\n    "
        } else {
            "{\n  \"format_version\": 1,\n  \"cells\": [\n    "
        });
        self.started = true;
        crate::jsjson::write_pretty_at(&mut s, cell, 2);
        let _ = std::io::stdout().lock().write_all(s.as_bytes());
    }

    fn finish(self, passed: u64, failed: u64) {
        let head = if self.started {
            "\n  ],\n"
        } else {
            "{\n  \"format_version\": 1,\n  \"cells\": [],\n"
        };
        println!(
            "{head}  \"summary\": {{\n    \"passed\": {passed},\n    \"failed\": {failed}\n  }}\n}}"
        );
    }
}

pub fn run(a: &PinsArgs) -> u8 {
    if a.review {
        let all = if a.accept {
            Some(super::pins_review::Decision::Accept)
        } else if a.reject {
            Some(super::pins_review::Decision::Reject)
        } else {
            None
        };
        return super::pins_review::review(&a.recordings, a.cell.as_deref(), all);
    }
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(a.jobs.unwrap_or(0))
        .build()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot start workers: {e}");
            return exit::INVALID_INPUT;
        }
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
        eprintln!("error: {}: cannot create dump dir: {e}", d.display());
        return exit::INVALID_INPUT;
    }
    let mut worst = exit::OK;
    let started_ms = crate::util::now_ms();
    // Report files list every cell, so their verdicts are kept only when one is asked for;
    // otherwise a check keeps counts only (memory stays flat however many cells there are).
    let mut verdicts: Vec<crate::rule::Verdict> = Vec::new();
    let keep_verdicts =
        a.reports.junit.is_some() || a.reports.markdown.is_some() || a.reports.html.is_some();
    // Recordings folders with a failing cell, for the command that accepts the new counts.
    let mut to_update: Vec<String> = Vec::new();
    let mut json = JsonCells::default();
    let (mut passed, mut failed) = (0u64, 0u64);
    let mut selected_any = false;
    for root in &a.recordings {
        // Cells come in key order from a walk that holds no listing of the folder; each chunk
        // is computed in parallel (while the next is walked), printed, and merged against the
        // pins file read as a sorted stream; the new pins file and the pending changes are
        // written as streams too: memory does not grow with the number of cells.
        let mut walk = match pins::SortedCells::new(root) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                worst = worst.max(exit::INVALID_INPUT);
                continue;
            }
        };
        let selected =
            |k: &str| a.cell.as_deref().is_none_or(|f| k.contains(f)) && a.partition.includes(k);
        let mut walked_any = false;
        let mut chunk = next_chunk(&mut walk, &selected, &mut walked_any);
        if !walked_any {
            eprintln!(
                "error: {}",
                crate::cell::DiscoverError::NotRecordings(root.to_path_buf())
            );
            worst = worst.max(exit::INVALID_INPUT);
            continue;
        }
        if chunk.is_empty() {
            continue;
        }
        selected_any = true;
        let pins_path = pins::pins_path(root);
        let mut pins_unreadable = false;
        let mut pinned = if pins_path.exists() {
            match pins::PinCursor::open(&pins_path) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    worst = worst.max(exit::INVALID_INPUT);
                    pins_unreadable = true;
                    pins::PinCursor::empty()
                }
            }
        } else {
            pins::PinCursor::empty()
        };
        let text = a.format == Format::Text;
        let filtered = a.cell.is_some() || a.partition.partition.is_some();
        let mut fresh = a.update.then(|| pins::ObjectStream::new(&pins_path));
        let mut pending =
            (!a.update).then(|| pins::ObjectStream::new(&super::pins_review::pending_path(root)));
        let mut unloaded: Vec<String> = Vec::new();
        // Pins whose recording is gone, reported after the cells.
        let mut gone: Vec<Box<str>> = Vec::new();
        // Takes the pins before `key` (all of them with `None`): kept by a filtered update,
        // gone when no cell filter is set.
        let pins_before = |key: Option<&str>,
                           pinned: &mut pins::PinCursor,
                           fresh: &mut Option<pins::ObjectStream>,
                           pending: &mut Option<pins::ObjectStream>,
                           gone: &mut Vec<Box<str>>,
                           pins_unreadable: &mut bool,
                           worst: &mut u8| {
            while let Some(k) = pinned.peek_key() {
                if key.is_some_and(|key| k >= key) {
                    break;
                }
                let (k, pin) = match pinned.advance() {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("error: {e:#}");
                        *worst = (*worst).max(exit::INVALID_INPUT);
                        *pins_unreadable = true;
                        break;
                    }
                };
                if let Some(f) = fresh
                    && filtered
                    && let Some(c) = pin.counts
                {
                    // Keep pins of cells outside the filter (or the shard).
                    f.push(&k, &pins::counts_block(c));
                }
                if a.cell.is_none() && a.partition.includes(&k) {
                    if let Some(p) = pending {
                        p.push(&k, "null");
                    }
                    gone.push(k);
                }
            }
        };
        loop {
            let (outcomes, next): (Vec<CellOutcome>, Vec<crate::cell::Cell>) = pool.install(|| {
                rayon::join(
                    || {
                        chunk
                            .par_iter()
                            .map(|c| pins::compute(c, a.dump_dir.as_deref()))
                            .collect()
                    },
                    || next_chunk(&mut walk, &selected, &mut walked_any),
                )
            });
            for o in &outcomes {
                for w in &o.warnings {
                    eprintln!("warning: {}: {w}", o.key);
                }
                for e in &o.lane_errors {
                    eprintln!("error: {}: {e}", o.key);
                }
                for i in &o.invalid {
                    eprintln!("error: {}: {i}", o.key);
                }
            }
            for o in &outcomes {
                pins_before(
                    Some(&o.key),
                    &mut pinned,
                    &mut fresh,
                    &mut pending,
                    &mut gone,
                    &mut pins_unreadable,
                    &mut worst,
                );
                let pin = match pinned.peek_key() {
                    Some(k) if k == o.key => match pinned.advance() {
                        Ok(p) => p.map(|p| p.1),
                        Err(e) => {
                            eprintln!("error: {e:#}");
                            worst = worst.max(exit::INVALID_INPUT);
                            pins_unreadable = true;
                            None
                        }
                    },
                    _ => None,
                };
                let pin = pin.as_ref();
                let status = pins::check(o.counts, pin.and_then(|p| p.counts));
                let bad_input = !o.lane_errors.is_empty();
                if bad_input {
                    unloaded.push(o.key.clone());
                }
                let ok = matches!(status, PinStatus::Match | PinStatus::Improved { .. })
                    && o.invalid.is_empty()
                    && !bad_input;
                if bad_input {
                    worst = worst.max(exit::INVALID_INPUT);
                }
                let c = o.counts;
                let counts = format!(
                    "events {}, rows {}, unhandled {}, grammarDrops {}",
                    c.events, c.rows, c.unhandled, c.grammar_drops
                );
                let detail = match &status {
                    PinStatus::Match => String::new(),
                    PinStatus::Improved { pinned } => format!(
                        " (improved: {}; --update lowers the pin)",
                        pins::describe_change(*pinned, c)
                    ),
                    PinStatus::Mismatch { pinned } => {
                        format!(": {}", pins::describe_change(*pinned, c))
                    }
                    PinStatus::NotPinned => format!(": not pinned ({counts})"),
                };
                if a.update {
                    if let Some(f) = &mut fresh {
                        f.push(&o.key, &pins::counts_block(c));
                    }
                    if text {
                        let verb = match status {
                            PinStatus::Match => "KEEP",
                            PinStatus::NotPinned => "ADD ",
                            _ => "SET ",
                        };
                        println!(
                            "{verb} {}{}",
                            o.key,
                            if matches!(status, PinStatus::Match) {
                                String::new()
                            } else {
                                detail.clone()
                            }
                        );
                    }
                    if !o.invalid.is_empty() {
                        worst = worst.max(exit::FAILED);
                    }
                } else {
                    if keep_verdicts {
                        verdicts.push(if ok {
                            crate::rule::Verdict::pass(&o.key)
                        } else {
                            crate::rule::Verdict::fail(
                                &o.key,
                                format!(
                                    "{}{detail}{}{}",
                                    o.key,
                                    if o.invalid.is_empty() {
                                        String::new()
                                    } else {
                                        format!(
                                            "; {} invalid message(s): {}",
                                            o.invalid.len(),
                                            o.invalid.join("; ")
                                        )
                                    },
                                    if o.lane_errors.is_empty() {
                                        String::new()
                                    } else {
                                        format!("; unreadable: {}", o.lane_errors.join("; "))
                                    }
                                ),
                            )
                        });
                    }
                    if ok {
                        passed += 1;
                    } else {
                        failed += 1;
                        worst = worst.max(exit::FAILED);
                        if matches!(status, PinStatus::Mismatch { .. } | PinStatus::NotPinned)
                            && !bad_input
                        {
                            if let Some(p) = &mut pending {
                                p.push(&o.key, &pins::counts_block(c));
                            }
                            let r = root.display().to_string();
                            if !to_update.contains(&r) {
                                to_update.push(r);
                            }
                        }
                    }
                    if text {
                        let extra = if o.invalid.is_empty() {
                            String::new()
                        } else {
                            format!(" [{} invalid message(s)]", o.invalid.len())
                        };
                        if matches!(status, PinStatus::Match) {
                            println!(
                                "{} {}: {counts}{extra}",
                                if ok { "PASS" } else { "FAIL" },
                                o.key
                            );
                        } else {
                            println!(
                                "{} {}{detail}{extra}",
                                if ok { "PASS" } else { "FAIL" },
                                o.key
                            );
                        }
                    }
                }
                if !text {
                    json.push(&json!({
                "recordings": root.display().to_string(),
                "cell": o.key,
                "counts": c.to_json(),
                "pinned": pin.map_or(Value::Null, pins::Pin::to_json),
                "status": match status { PinStatus::Match => "match", PinStatus::Improved{..} => "improved", PinStatus::Mismatch{..} => "mismatch", PinStatus::NotPinned => "not-pinned" },
                "invalid": o.invalid,
                "grammarDrops": o.grammar_drops.iter().map(|d| json!({"rule": d.rule, "eventType": d.event_type, "reason": d.reason})).collect::<Vec<_>>(),
                "laneErrors": o.lane_errors,
                "warnings": o.warnings,
            }));
                }
            }
            if next.is_empty() {
                break;
            }
            chunk = next;
        }
        pins_before(
            None,
            &mut pinned,
            &mut fresh,
            &mut pending,
            &mut gone,
            &mut pins_unreadable,
            &mut worst,
        );
        drop(pinned);
        // Pins whose recording is gone (only meaningful without a --cell filter).
        for key in &gone {
            if a.update {
                if text {
                    println!("DROP {key}: pinned but no recording");
                }
            } else {
                failed += 1;
                worst = worst.max(exit::FAILED);
                if keep_verdicts {
                    verdicts.push(crate::rule::Verdict::fail(key, "pinned but no recording"));
                }
                let r = root.display().to_string();
                if !to_update.contains(&r) {
                    to_update.push(r);
                }
                if text {
                    println!("FAIL {key}: pinned but no recording");
                }
            }
        }
        if let Some(p) = pending {
            // An update settles everything a review would have: the update removes the file.
            if let Err(e) = p.finish(false) {
                eprintln!(
                    "warning: {}: cannot keep the pending changes: {e}",
                    super::pins_review::pending_path(root).display()
                );
            }
        } else {
            super::pins_review::write_pending(root, &BTreeMap::new());
        }
        // New pins only from recordings that loaded: counts of a cell whose lanes could not be
        // read (or a pins file that could not be read) would pin the damage.
        if let Some(f) = fresh {
            if !unloaded.is_empty() || pins_unreadable {
                f.abandon();
                eprintln!(
                    "error: {}: not updated: {}",
                    pins_path.display(),
                    if pins_unreadable {
                        "the pins file itself could not be read (fix or delete it)".to_string()
                    } else {
                        format!(
                            "{} cell(s) failed to load ({}); fix the recordings first",
                            unloaded.len(),
                            unloaded.join(", ")
                        )
                    }
                );
                worst = worst.max(exit::INVALID_INPUT);
            } else {
                let n = f.len();
                if let Err(e) = f.finish(true) {
                    eprintln!("error: {}: cannot write pins: {e}", pins_path.display());
                    worst = worst.max(exit::INVALID_INPUT);
                } else if text {
                    println!("wrote {n} pins to {}", pins_path.display());
                }
            }
        }
    }
    if !selected_any && worst == exit::OK {
        eprintln!("error: no cells selected");
        return exit::NOTHING_SELECTED;
    }
    if !a.update {
        let target = a
            .recordings
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let report =
            crate::report::ReportFiles::simple_report("pins", &target, started_ms, verdicts);
        if let Err(e) = a.reports.write(&report) {
            eprintln!("error: {e}");
            worst = worst.max(exit::INVALID_INPUT);
        }
    }
    match a.format {
        Format::Text => {
            if !a.update {
                println!("{passed} passed, {failed} failed");
                if !to_update.is_empty() {
                    let cell = a
                        .cell
                        .as_deref()
                        .map(|c| format!(" --cell {}", shell_word(c)))
                        .unwrap_or_default();
                    let roots = to_update
                        .iter()
                        .map(|r| shell_word(r))
                        .collect::<Vec<_>>()
                        .join(" ");
                    println!(
                        "If the new counts are intended, update the pins with:\n  bridgewire pins --update{cell} {roots}\n\
or review them cell by cell (kept in row-counts.pending.json):\n  bridgewire pins --review {roots}"
                    );
                }
            }
        }
        Format::Json => json.finish(passed, failed),
    }
    worst
}

/// The next cells of the walk that `selected` keeps, up to [`CHUNK`]; fewer only at its end.
fn next_chunk(
    walk: &mut pins::SortedCells,
    selected: &(dyn Fn(&str) -> bool + Sync),
    walked_any: &mut bool,
) -> Vec<crate::cell::Cell> {
    let mut out = Vec::with_capacity(CHUNK);
    for c in walk.by_ref() {
        *walked_any = true;
        if selected(&c.key) {
            out.push(c);
            if out.len() == CHUNK {
                break;
            }
        }
    }
    out
}

/// A word as a shell would need it quoted to read it back.
fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@+,".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

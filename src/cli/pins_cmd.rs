//! `bridgewire pins`.

use super::{Format, PinsArgs, exit};
use crate::pins::{self, CellOutcome, Counts, PinStatus};
use rayon::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

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
    if let Some(d) = &a.dump_dir
        && let Err(e) = std::fs::create_dir_all(d)
    {
        eprintln!("error: {}: cannot create dump dir: {e}", d.display());
        return exit::INVALID_INPUT;
    }
    let mut worst = exit::OK;
    let started_ms = crate::util::now_ms();
    let mut verdicts: Vec<crate::rule::Verdict> = Vec::new();
    // Recordings folders with a failing cell, for the command that accepts the new counts.
    let mut to_update: Vec<String> = Vec::new();
    let mut json_cells = Vec::new();
    let (mut passed, mut failed) = (0u64, 0u64);
    let mut selected_any = false;
    for root in &a.recordings {
        let cells = match crate::cell::discover(root) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                worst = worst.max(exit::INVALID_INPUT);
                continue;
            }
        };
        let cells: Vec<_> = cells
            .into_iter()
            .filter(|c| a.cell.as_deref().is_none_or(|f| c.key.contains(f)))
            .filter(|c| a.partition.includes(&c.key))
            .collect();
        if cells.is_empty() {
            continue;
        }
        selected_any = true;
        let outcomes: Vec<CellOutcome> = pool.install(|| {
            cells
                .par_iter()
                .map(|c| pins::compute(c, a.dump_dir.as_deref()))
                .collect()
        });
        let pins_path = pins::pins_path(root);
        let mut pins_unreadable = false;
        let pinned: BTreeMap<String, Value> = if pins_path.exists() {
            match pins::load(&pins_path) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    worst = worst.max(exit::INVALID_INPUT);
                    pins_unreadable = true;
                    BTreeMap::new()
                }
            }
        } else {
            BTreeMap::new()
        };
        let text = a.format == Format::Text;
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
        let mut fresh: BTreeMap<String, Counts> = BTreeMap::new();
        // Changes a check found, kept for `pins --review`.
        let mut pending: BTreeMap<String, Option<Counts>> = BTreeMap::new();
        for o in &outcomes {
            let pin = pinned.get(&o.key).and_then(Counts::from_json);
            let status = pins::check(o.counts, pin);
            let bad_input = !o.lane_errors.is_empty();
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
                fresh.insert(o.key.clone(), c);
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
                if ok {
                    passed += 1;
                } else {
                    failed += 1;
                    worst = worst.max(exit::FAILED);
                    if matches!(status, PinStatus::Mismatch { .. } | PinStatus::NotPinned)
                        && !bad_input
                    {
                        pending.insert(o.key.clone(), Some(c));
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
            json_cells.push(json!({
                "recordings": root.display().to_string(),
                "cell": o.key,
                "counts": c.to_json(),
                "pinned": pinned.get(&o.key).cloned().unwrap_or(Value::Null),
                "status": match status { PinStatus::Match => "match", PinStatus::Improved{..} => "improved", PinStatus::Mismatch{..} => "mismatch", PinStatus::NotPinned => "not-pinned" },
                "invalid": o.invalid,
                "grammarDrops": o.grammar_drops.iter().map(|d| json!({"rule": d.rule, "eventType": d.event_type, "reason": d.reason})).collect::<Vec<_>>(),
                "laneErrors": o.lane_errors,
                "warnings": o.warnings,
            }));
        }
        // Pins whose recording is gone (only meaningful without a --cell filter).
        if a.cell.is_none() {
            for key in pinned.keys().filter(|k| a.partition.includes(k)) {
                if !outcomes.iter().any(|o| &o.key == key) {
                    if a.update {
                        if text {
                            println!("DROP {key}: pinned but no recording");
                        }
                    } else {
                        failed += 1;
                        worst = worst.max(exit::FAILED);
                        verdicts.push(crate::rule::Verdict::fail(key, "pinned but no recording"));
                        pending.insert(key.clone(), None);
                        let r = root.display().to_string();
                        if !to_update.contains(&r) {
                            to_update.push(r);
                        }
                        if text {
                            println!("FAIL {key}: pinned but no recording");
                        }
                    }
                }
            }
        }
        if !a.update {
            super::pins_review::write_pending(root, &pending);
        } else {
            // An update settles everything a review would have.
            super::pins_review::write_pending(root, &BTreeMap::new());
        }
        // New pins only from recordings that loaded: counts of a cell whose lanes could not be
        // read (or a pins file that could not be read) would pin the damage.
        let unloaded: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.lane_errors.is_empty())
            .map(|o| o.key.as_str())
            .collect();
        if a.update && (!unloaded.is_empty() || pins_unreadable) {
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
        } else if a.update {
            let mut all = fresh;
            if a.cell.is_some() || a.partition.partition.is_some() {
                // Keep pins of cells outside the filter (or the shard).
                for (k, v) in &pinned {
                    if let Some(c) = Counts::from_json(v) {
                        all.entry(k.clone()).or_insert(c);
                    }
                }
            }
            if let Err(e) = std::fs::write(&pins_path, pins::render(&all)) {
                eprintln!("error: {}: cannot write pins: {e}", pins_path.display());
                worst = worst.max(exit::INVALID_INPUT);
            } else if text {
                println!("wrote {} pins to {}", all.len(), pins_path.display());
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
        Format::Json => {
            let doc = json!({"format_version": 1, "cells": json_cells, "summary": {"passed": passed, "failed": failed}});
            println!("{}", crate::jsjson::to_string_pretty(&doc).trim_end());
        }
    }
    worst
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

//! `bridgewire pins`.

use super::{Format, PinsArgs, exit};
use crate::pins::{self, CellOutcome, Counts, PinStatus};
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
        // Only the keys are kept (sorted); each cell is loaded when its chunk comes up, and its
        // outcome printed and dropped: memory does not grow with the folder's bytes.
        let keys = match pins::discover_keys(root) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("error: {e}");
                worst = worst.max(exit::INVALID_INPUT);
                continue;
            }
        };
        let keys: Vec<Box<str>> = keys
            .into_iter()
            .filter(|k| a.cell.as_deref().is_none_or(|f| k.contains(f)))
            .filter(|k| a.partition.includes(k))
            .collect();
        if keys.is_empty() {
            continue;
        }
        selected_any = true;
        let pins_path = pins::pins_path(root);
        let mut pins_unreadable = false;
        let pinned: BTreeMap<Box<str>, pins::Pin> = if pins_path.exists() {
            match pins::load_compact(&pins_path) {
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
        // New counts by index into `keys` (in key order): compact, whatever the folder's size.
        let mut fresh: Vec<(u32, Counts)> = Vec::new();
        let mut unloaded: Vec<String> = Vec::new();
        // Changes a check found, kept for `pins --review`.
        let mut pending: BTreeMap<String, Option<Counts>> = BTreeMap::new();
        for (chunk_no, chunk) in keys.chunks(CHUNK).enumerate() {
            let outcomes: Vec<(usize, CellOutcome)> = pool.install(|| {
                chunk
                    .par_iter()
                    .enumerate()
                    .filter_map(|(i, k)| {
                        crate::cell::Cell::at(root, &root.join(&**k))
                            .map(|c| (chunk_no * CHUNK + i, c))
                    })
                    .map(|(i, c)| (i, pins::compute(&c, a.dump_dir.as_deref())))
                    .collect()
            });
            for (_, o) in &outcomes {
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
            for (index, o) in &outcomes {
                let pin = pinned.get(o.key.as_str());
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
                    fresh.push((*index as u32, c));
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
        }
        // Pins whose recording is gone (only meaningful without a --cell filter).
        if a.cell.is_none() {
            for key in pinned.keys().filter(|k| a.partition.includes(k)) {
                if keys.binary_search_by(|k| (**k).cmp(&**key)).is_err() {
                    if a.update {
                        if text {
                            println!("DROP {key}: pinned but no recording");
                        }
                    } else {
                        failed += 1;
                        worst = worst.max(exit::FAILED);
                        if keep_verdicts {
                            verdicts
                                .push(crate::rule::Verdict::fail(key, "pinned but no recording"));
                        }
                        pending.insert(key.to_string(), None);
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
            let mut all: Vec<(&str, Counts)> = fresh
                .iter()
                .map(|&(i, c)| (&*keys[i as usize], c))
                .collect();
            if a.cell.is_some() || a.partition.partition.is_some() {
                // Keep pins of cells outside the filter (or the shard); a fresh count wins.
                all.extend(
                    pinned
                        .iter()
                        .filter_map(|(k, p)| p.counts.map(|c| (&**k, c))),
                );
                all.sort_by(|x, y| x.0.cmp(y.0)); // stable: fresh counts stay first
                all.dedup_by(|later, first| later.0 == first.0);
            }
            if let Err(e) = pins::write_pins(&pins_path, &all) {
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
        Format::Json => json.finish(passed, failed),
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

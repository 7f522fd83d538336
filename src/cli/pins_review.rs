//! Pins you review, like insta: a failing `pins` check keeps the new counts beside the pins
//! (`row-counts.pending.json`: cell → new counts, or `null` for a pin whose recording is gone);
//! `pins --review` shows `old → new` per pending cell and accepts or rejects each, interactively
//! (`a`ccept, `r`eject, `s`kip, on stdin) or all at once with `--accept` / `--reject` (with
//! `--cell` to pick). Accepted cells move into `row-counts.json`; rejected ones are dropped from
//! the pending file; the pending file goes when nothing is left.

use crate::pins::{self, Counts};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

pub const PENDING_FILE: &str = "row-counts.pending.json";

pub fn pending_path(recordings: &Path) -> PathBuf {
    recordings.join(PENDING_FILE)
}

/// Writes the pending changes of one recordings folder (replacing earlier ones); none → the
/// file is removed.
pub fn write_pending(recordings: &Path, pending: &BTreeMap<String, Option<Counts>>) {
    let path = pending_path(recordings);
    if pending.is_empty() {
        let _ = std::fs::remove_file(&path);
        return;
    }
    let map: Map<String, Value> = pending
        .iter()
        .map(|(k, c)| (k.clone(), c.map_or(Value::Null, |c| c.to_json())))
        .collect();
    if let Err(e) = std::fs::write(&path, crate::jsjson::to_string_pretty(&Value::Object(map))) {
        eprintln!(
            "warning: {}: cannot keep the pending changes: {e}",
            path.display()
        );
    }
}

/// What to do with the pending cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Reject,
    Skip,
}

/// `pins --review`: returns the exit code.
pub fn review(recordings: &[PathBuf], cell: Option<&str>, all: Option<Decision>) -> u8 {
    let stdin = std::io::stdin();
    let mut answers = stdin.lock().lines();
    let mut any = false;
    for root in recordings {
        let ppath = pending_path(root);
        if !ppath.exists() {
            continue;
        }
        let pending = match pins::load(&ppath) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {e:#}");
                return super::exit::INVALID_INPUT;
            }
        };
        let pins_file = pins::pins_path(root);
        let mut current: BTreeMap<String, Counts> = if pins_file.exists() {
            match pins::load(&pins_file) {
                Ok(p) => p
                    .iter()
                    .filter_map(|(k, v)| Counts::from_json(v).map(|c| (k.clone(), c)))
                    .collect(),
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return super::exit::INVALID_INPUT;
                }
            }
        } else {
            BTreeMap::new()
        };
        let mut left: BTreeMap<String, Option<Counts>> = BTreeMap::new();
        let mut changed = false;
        for (key, v) in &pending {
            let new = Counts::from_json(v);
            if cell.is_some_and(|c| !key.contains(c)) {
                left.insert(key.clone(), new);
                continue;
            }
            any = true;
            let shown = match (current.get(key), new) {
                (Some(old), Some(new)) => pins::describe_change(*old, new),
                (None, Some(new)) => {
                    format!("new pin: {}", crate::jsjson::to_string(&new.to_json()))
                }
                (Some(_), None) => "pin removed (no recording)".into(),
                (None, None) => "nothing".into(),
            };
            println!("{key}: {shown}");
            let decision = match all {
                Some(d) => d,
                None => {
                    print!("  accept, reject or skip? [a/r/s] ");
                    use std::io::Write;
                    let _ = std::io::stdout().flush();
                    match answers
                        .next()
                        .and_then(|l| l.ok())
                        .as_deref()
                        .map(str::trim)
                    {
                        Some("a") | Some("accept") => Decision::Accept,
                        Some("r") | Some("reject") => Decision::Reject,
                        _ => Decision::Skip,
                    }
                }
            };
            match decision {
                Decision::Accept => {
                    match new {
                        Some(c) => current.insert(key.clone(), c),
                        None => current.remove(key),
                    };
                    changed = true;
                    println!("  accepted");
                }
                Decision::Reject => println!("  rejected"),
                Decision::Skip => {
                    left.insert(key.clone(), new);
                    println!("  kept pending");
                }
            }
        }
        if changed && let Err(e) = std::fs::write(&pins_file, pins::render(&current)) {
            eprintln!("error: {}: {e}", pins_file.display());
            return super::exit::INVALID_INPUT;
        }
        write_pending(root, &left);
    }
    if !any {
        println!("no pending pin changes");
    }
    super::exit::OK
}

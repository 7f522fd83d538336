//! One test per recorded cell (`harness = false`, libtest-mimic), so cells can be filtered by
//! name and sharded: `cargo nextest run --test cells --partition hash:1/4`.
//!
//! Listing is cheap (directory names only); every trial loads its cell when it runs.
//!
//! * `<protocol>::<provider>::<cell>::pins` — the cell's offline counts (`pins::compute`) against
//!   its recordings folder's `row-counts.json` (events and rows equal; unhandled and
//!   grammarDrops may only go down). For `recordings/bb` also against `bb-row-counts.json`,
//!   bb's own pins (an independent source): events equal, unhandled and grammarDrops not above.
//!   Any invalid protocol message (e.g. an invalid `thread/delta`) fails. Cells of every
//!   protocol get this trial.
//! * `<protocol>::<provider>::<cell>::replay` — bb cells with a runtime lane whose bridge is
//!   known (provider `bb-ref` → `bb-ref-bridge`): a live replay through the reference bridge
//!   and the provider double, which must show no stall, all recorded rules passing, and the
//!   offline merged view's event count.
//! * `<root>::row-counts::no-stale-pins` — every pin of a recordings folder names a cell.

use bridgewire::bb::player::{self, ReplayOptions};
use bridgewire::bb::recorded;
use bridgewire::cell::{self, Cell};
use bridgewire::pins::{self, Counts, PinStatus};
use bridgewire::rule::Status;
use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");
const BB_REF_BRIDGE: &str = env!("CARGO_BIN_EXE_bb-ref-bridge");

/// The bridge that replays a provider's cells, when there is one.
fn known_bridge(provider: &str) -> Option<&'static str> {
    (provider == "bb-ref").then_some(BB_REF_BRIDGE)
}

fn recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings")
}

fn pin_of(path: &Path, key: &str) -> Result<Option<Counts>, Failed> {
    let pins = pins::load(path).map_err(|e| Failed::from(format!("{e:#}")))?;
    Ok(pins.get(key).and_then(Counts::from_json))
}

fn pins_trial(root: &Path, cell: &Cell) -> Result<(), Failed> {
    let outcome = pins::compute(cell, None);
    if let Some(e) = outcome.lane_errors.first() {
        return Err(format!("unreadable lane: {e}").into());
    }
    if let Some(i) = outcome.invalid.first() {
        return Err(format!(
            "{} invalid protocol message(s); first: {i}",
            outcome.invalid.len()
        )
        .into());
    }
    let actual = outcome.counts;
    match pins::check(actual, pin_of(&pins::pins_path(root), &cell.key)?) {
        PinStatus::Match | PinStatus::Improved { .. } => {}
        PinStatus::NotPinned => {
            return Err(format!(
                "{} not pinned in {} (bridgewire pins --update)",
                cell.key,
                pins::pins_path(root).display()
            )
            .into());
        }
        PinStatus::Mismatch { pinned } => {
            return Err(format!("{}: {}", cell.key, pins::describe_change(pinned, actual)).into());
        }
    }
    let bb_pins = root.join("bb-row-counts.json");
    if bb_pins.is_file() {
        let Some(bb) = pin_of(&bb_pins, &cell.key)? else {
            return Err(format!("{} has no pin in bb-row-counts.json", cell.key).into());
        };
        if actual.events != bb.events
            || actual.unhandled > bb.unhandled
            || actual.grammar_drops > bb.grammar_drops
        {
            return Err(format!(
                "{} against bb's own pins: events {} (bb {}), unhandled {} (bb {}), grammarDrops {} (bb {})",
                cell.key,
                actual.events,
                bb.events,
                actual.unhandled,
                bb.unhandled,
                actual.grammar_drops,
                bb.grammar_drops
            )
            .into());
        }
    }
    Ok(())
}

fn replay_trial(cell: &Cell, bridge: &str) -> Result<(), Failed> {
    let opts = ReplayOptions {
        double_exe: Some(PathBuf::from(BRIDGEWIRE)),
        ..ReplayOptions::default()
    };
    let r = player::replay_cell(cell, &[bridge.into()], &opts)
        .map_err(|e| Failed::from(format!("{}: {e}", cell.key)))?;
    let offline = recorded::offline_counts(cell, true);
    let matches = recorded::compare_with_recording(cell, &r, &offline);
    let mut problems: Vec<String> =
        recorded::recorded_verdicts(cell.provider_and_name().1, &r, &offline, Some(&matches))
            .into_iter()
            .filter(|v| v.status != Status::Pass)
            .map(|v| v.line())
            .collect();
    if r.events.len() != offline.events {
        problems.push(format!(
            "replay assembled {} events, the recording {}",
            r.events.len(),
            offline.events
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}:\n  {}\nstderr:\n{}",
            cell.key,
            problems.join("\n  "),
            r.stderr
        )
        .into())
    }
}

fn stale_trial(root: &Path, cells: &[Cell]) -> Result<(), Failed> {
    let path = pins::pins_path(root);
    if !path.is_file() {
        return Ok(());
    }
    let pins = pins::load(&path).map_err(|e| Failed::from(format!("{e:#}")))?;
    let stale: Vec<&String> = pins
        .keys()
        .filter(|k| !cells.iter().any(|c| &c.key == *k))
        .collect();
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!("pinned but no recording: {stale:?}").into())
    }
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    let mut roots: Vec<PathBuf> = std::fs::read_dir(recordings())
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    roots.sort();
    for root in roots {
        let Ok(cells) = cell::discover(&root) else {
            continue;
        };
        let root_name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        {
            let (root, cells) = (root.clone(), cells.clone());
            trials.push(Trial::test(
                format!("{root_name}::row-counts::no-stale-pins"),
                move || stale_trial(&root, &cells),
            ));
        }
        for c in cells {
            let (provider, name) = c.provider_and_name();
            let stem = format!("{}::{provider}::{}", c.protocol, name.replace('/', "::"));
            let replayable = c.protocol == bridgewire::protocol::Protocol::Bb
                && c.lanes.iter().any(|l| l.dir == "runtime→bridge");
            let bridge = known_bridge(provider).filter(|_| replayable);
            {
                let (root, c) = (root.clone(), c.clone());
                trials.push(Trial::test(format!("{stem}::pins"), move || {
                    pins_trial(&root, &c)
                }));
            }
            if let Some(bridge) = bridge {
                trials.push(Trial::test(format!("{stem}::replay"), move || {
                    replay_trial(&c, bridge)
                }));
            }
        }
    }
    libtest_mimic::run(&args, trials).exit();
}

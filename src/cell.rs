//! Cells: one recorded scenario = the lanes of one scope directory.
//!
//! A directory is a cell iff it holds at least one lane file of a known direction
//! (`<dir>.ndjson`); a `<dir>.current.ndjson` file alone does not make a cell (bb §2.1). Cells
//! are keyed by their path relative to the recordings root, `/`-joined: `claude-code/resume`.

use crate::lane::CURRENT_SUFFIX;
use crate::lane::merge::{LaneFile, MergedEntries};
use crate::protocol::Protocol;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Cell {
    pub protocol: Protocol,
    /// `<provider>/<cell>` (or just `<cell>` at depth one).
    pub key: String,
    pub path: PathBuf,
    /// Recorded lanes present, in the protocol's direction order.
    pub lanes: Vec<LaneFile>,
    /// `.current` re-recorded lanes present.
    pub current: Vec<LaneFile>,
}

impl Cell {
    /// The provider (first key segment) and cell name (the rest).
    pub fn provider_and_name(&self) -> (&str, &str) {
        self.key.split_once('/').unwrap_or(("", &self.key))
    }

    /// Loads one directory as a cell, if it is one.
    ///
    /// bb's rule is that a `.current` file alone does not make a cell; bridgewire accepts such a
    /// directory too (the shared corpus ships only re-recorded lanes), since its merged view is
    /// well defined.
    pub fn at(root: &Path, path: &Path) -> Option<Cell> {
        Cell::scan(root, path).0
    }

    /// [`Cell::at`], and whether the directory has directories in it (`true` when it cannot
    /// be read): a walk need not read a leaf twice.
    pub fn scan(root: &Path, path: &Path) -> (Option<Cell>, bool) {
        let Ok(entries) = std::fs::read_dir(path) else {
            return (None, true);
        };
        let mut below = false;
        // Which direction files are present, per protocol and direction index: one pass over
        // the directory, no per-direction allocation (this runs once per cell of a folder of
        // hundreds of thousands).
        let mut present = [[(false, false); 8]; Protocol::ALL.len()];
        for e in entries.filter_map(|e| e.ok()) {
            if !below && e.file_type().is_ok_and(|t| t.is_dir()) {
                below = true;
            }
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".ndjson") else {
                continue;
            };
            let (dir, current) = match stem.strip_suffix(CURRENT_SUFFIX) {
                Some(d) => (d, true),
                None => (stem, false),
            };
            for (p, protocol) in Protocol::ALL.iter().enumerate() {
                if let Some(i) = protocol.directions().iter().position(|d| *d == dir) {
                    if !e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                        break;
                    }
                    let slot = &mut present[p][i];
                    if current {
                        slot.1 = true;
                    } else {
                        slot.0 = true;
                    }
                    break;
                }
            }
        }
        let Some(p) = present
            .iter()
            .position(|dirs| dirs.iter().any(|&(lane, cur)| lane || cur))
        else {
            return (None, below);
        };
        let protocol = Protocol::ALL[p];
        let mut lanes = Vec::new();
        let mut current = Vec::new();
        for (i, d) in protocol.directions().iter().enumerate() {
            let (lane, cur) = present[p][i];
            if lane {
                lanes.push(LaneFile {
                    dir: d.to_string(),
                    path: path.join(format!("{d}.ndjson")),
                });
            }
            if cur {
                current.push(LaneFile {
                    dir: d.to_string(),
                    path: path.join(format!("{d}{CURRENT_SUFFIX}.ndjson")),
                });
            }
        }
        let Ok(rel) = path.strip_prefix(root) else {
            return (None, below);
        };
        let key = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let cell = Cell {
            protocol,
            key: if key.is_empty() { ".".into() } else { key },
            path: path.to_path_buf(),
            lanes,
            current,
        };
        (Some(cell), below)
    }

    /// The merged view (bb §2.5): recorded lanes, with each lane that has a `.current`
    /// re-recording replaced by it, ordered by `(run, seq)`.
    pub fn merged(&self) -> MergedEntries {
        MergedEntries::open(&self.merged_lanes())
    }

    /// [`Cell::merged`] for [`MergedEntries::next_lazy`] (lines kept escaped where they can be).
    pub fn merged_lazy(&self) -> MergedEntries {
        MergedEntries::open_lazy(&self.merged_lanes())
    }

    fn merged_lanes(&self) -> Vec<LaneFile> {
        let mut lanes: Vec<LaneFile> = self
            .lanes
            .iter()
            .filter(|l| !self.current.iter().any(|c| c.dir == l.dir))
            .cloned()
            .collect();
        lanes.extend(self.current.iter().cloned());
        lanes
    }

    /// The recorded view: the raw lanes only.
    pub fn recorded(&self) -> MergedEntries {
        MergedEntries::open(&self.lanes)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("{}: no such directory", .0.display())]
    Missing(PathBuf),
    #[error("{}: not a recordings folder (no lane files of any known direction below it)", .0.display())]
    NotRecordings(PathBuf),
}

/// Every cell below `root` (or `root` itself), in walk order, one at a time. Symlinks are not
/// followed, so a hostile tree cannot loop or escape. Errors if `root` is not a folder.
pub fn walk(root: &Path) -> Result<impl Iterator<Item = Cell> + '_, DiscoverError> {
    if !root.is_dir() {
        return Err(DiscoverError::Missing(root.to_path_buf()));
    }
    Ok(walkdir::WalkDir::new(root)
        .follow_links(false)
        .max_depth(6)
        .sort_by_file_name()
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_dir())
        .filter_map(move |e| Cell::at(root, e.path())))
}

/// Finds every cell below `root` (or `root` itself), sorted by key.
pub fn discover(root: &Path) -> Result<Vec<Cell>, DiscoverError> {
    let mut cells: Vec<Cell> = walk(root)?.collect();
    if cells.is_empty() {
        return Err(DiscoverError::NotRecordings(root.to_path_buf()));
    }
    cells.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(cells)
}

//! Reading what a run wrote.

use std::path::Path;

/// Every file under `root` as text (invalid UTF-8 replaced), concatenated in walk order: the
/// lanes a test searches.
pub fn text_under(root: &Path) -> String {
    walkdir::WalkDir::new(root)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned())
        .collect()
}

/// Copies the tree at `from` to `to` (a copy of bundled recordings a test may change).
pub fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from).into_iter().flatten() {
        let rel = e.path().strip_prefix(from).unwrap();
        if e.file_type().is_dir() {
            std::fs::create_dir_all(to.join(rel)).unwrap();
        } else {
            std::fs::copy(e.path(), to.join(rel)).unwrap();
        }
    }
}

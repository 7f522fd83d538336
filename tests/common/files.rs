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

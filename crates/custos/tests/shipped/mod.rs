//! The monitoring files shipped in deploy/ (rules, dashboards), for the
//! tests that check each metric they name is one a command serves.

// Each test crate that includes this module uses only some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A file of deploy/ by its path there (`grafana/custos-ingest.json`).
pub fn deployed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name)
}

/// The metric names a rule file or dashboard mentions (`custos_*`,
/// `process_*`), sorted, each once.
pub fn metric_names(files: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text =
                std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| {
                    (w.starts_with("custos_") && w.len() > "custos_".len())
                        || w.starts_with("process_")
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

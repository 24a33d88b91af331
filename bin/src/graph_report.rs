//! `--graph DIR` of `ttmesh run` and `ttmesh decode`: the command's work runs inside a NORMAL
//! graph capture whose report lands in DIR/report.json whatever the work's outcome (a failed
//! run's graph ends in its error node). A directory that cannot be created is refused before
//! anything runs.

use std::path::Path;

use ttmesh::graph::{self, RunMode};
use ttmesh::MeshDevice;

/// Runs `work` (inside a capture when `dir` is given) and writes the report. The work's own
/// error comes first; a report that could not be written is an error of its own.
pub fn capture_to_dir<T>(
    dir: Option<&Path>,
    mesh: &MeshDevice,
    work: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let Some(dir) = dir else { return work() };
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "--graph {}: cannot create the directory ({e}); pass a writable directory",
            dir.display()
        )
    })?;
    let path = dir.join("report.json");
    graph::begin_graph_capture(RunMode::Normal);
    let result = work();
    let written = graph::end_graph_capture_to_file(&path, mesh)
        .map(|g| {
            eprintln!(
                "graph: {} nodes written to {}",
                g.nodes.len(),
                path.display()
            )
        })
        .map_err(|e| format!("--graph {}: {e}", dir.display()));
    let value = result?;
    written?;
    Ok(value)
}

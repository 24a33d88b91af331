//! ttmesh-report: turns a graph-capture report file (`end_graph_capture_to_file`, `ttmesh run
//! --graph`, `ttmesh decode --graph`) into the folder TT-NN's report tools read: `db.sqlite`
//! (operations, tensors, buffers, devices, errors, ...), `config.json` and
//! `cluster_descriptor.yaml`, which ttnn-visualizer opens, and optionally the call graph as SVG.
//!
//! Owns: the report database schema and the mapping from graph nodes to its rows. Must not
//! touch: capture itself (the `ttmesh` crate's `graph` module records and writes the report
//! file; this crate only reads it) or any device.

mod cluster_yaml;
mod error;
pub mod model;
mod sqlite;
mod svg;

use std::path::{Path, PathBuf};

pub use cluster_yaml::cluster_descriptor_yaml;
pub use error::ReportError;
pub use model::{build, ReportModel};
pub use svg::call_graph_svg;

/// What `import` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportSummary {
    pub out_dir: PathBuf,
    pub operations: usize,
    pub tensors: usize,
    pub errors: usize,
    pub files: Vec<String>,
}

/// How `import` treats an existing, non-empty output folder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Also write `call_graph.svg`.
    pub svg: bool,
    /// Replace a non-empty output folder (otherwise it is an error).
    pub replace: bool,
}

/// Reads `report_path` and writes the visualizer folder `out_dir`. The folder is built beside
/// `out_dir` under a temporary name and renamed into place at the end, so a failure leaves
/// nothing half-written.
pub fn import(
    report_path: &Path,
    out_dir: &Path,
    options: ImportOptions,
) -> Result<ImportSummary, ReportError> {
    let report = ttmesh::graph::read_report(report_path)?;
    let model = model::build(&report);
    let existing = match std::fs::read_dir(out_dir) {
        Ok(mut entries) => Some(entries.next().is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(ReportError::NotADirectory(out_dir.into()))
        }
        Err(source) => {
            return Err(ReportError::Io {
                path: out_dir.into(),
                source,
            })
        }
    };
    if existing == Some(true) && !options.replace {
        return Err(ReportError::OutDirNotEmpty(out_dir.into()));
    }
    let name = out_dir
        .file_name()
        .ok_or_else(|| ReportError::NotADirectory(out_dir.into()))?
        .to_string_lossy()
        .to_string();
    let parent = match out_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let staging = parent.join(format!(".{name}.importing{}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io { path, source }
    };
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir(&staging).map_err(io(&staging))?;
    let result = write_folder(&staging, out_dir, &report, &model, options.svg, report_path);
    let files = match result {
        Ok(files) => files,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    let finish = || -> Result<(), ReportError> {
        if existing.is_some() {
            // An empty folder, or one the caller said to replace: moved aside, then removed.
            let old = parent.join(format!(".{name}.replaced{}", std::process::id()));
            std::fs::rename(out_dir, &old).map_err(io(out_dir))?;
            if let Err(e) = std::fs::rename(&staging, out_dir) {
                let _ = std::fs::rename(&old, out_dir);
                return Err(io(out_dir)(e));
            }
            let _ = std::fs::remove_dir_all(&old);
            Ok(())
        } else {
            std::fs::rename(&staging, out_dir).map_err(io(out_dir))
        }
    };
    if let Err(e) = finish() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    Ok(ImportSummary {
        out_dir: out_dir.into(),
        operations: model.operations.len(),
        tensors: model.tensors.len(),
        errors: model
            .operations
            .iter()
            .filter(|o| o.error.is_some())
            .count(),
        files,
    })
}

/// Writes the files into `dir` (the staging folder); paths written into them name `final_dir`,
/// where the folder will be once renamed.
fn write_folder(
    dir: &Path,
    final_dir: &Path,
    report: &ttmesh::graph::Report,
    model: &ReportModel,
    svg: bool,
    report_path: &Path,
) -> Result<Vec<String>, ReportError> {
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|source| ReportError::Io { path, source })
    };
    let db = dir.join("db.sqlite");
    sqlite::write_database(&db, report, model)
        .map_err(|source| ReportError::Database { path: db, source })?;
    let mut files = vec!["db.sqlite".to_string()];
    let report_name = report_path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "ttmesh".into());
    let config = serde_json::json!({
        "report_name": report_name,
        "enable_logging": false,
        "enable_graph_report": true,
        "enable_detailed_buffer_report": !report.buffer_pages.is_empty(),
        "enable_detailed_tensor_report": false,
        "enable_comparison_mode": false,
        "enable_fast_runtime_mode": false,
        "throw_exception_on_fallback": false,
        "root_report_path": final_dir.parent().map(|p| p.display().to_string()),
        "report_path": final_dir.display().to_string(),
        "producer": report.metadata.get("producer"),
    });
    write(
        "config.json",
        &serde_json::to_string_pretty(&config).unwrap_or_default(),
    )?;
    files.push("config.json".into());
    if let Some(yaml) = cluster_descriptor_yaml(&report.cluster_descriptor) {
        write("cluster_descriptor.yaml", &yaml)?;
        files.push("cluster_descriptor.yaml".into());
    }
    if svg {
        write("call_graph.svg", &call_graph_svg(model, &report_name))?;
        files.push("call_graph.svg".into());
    }
    Ok(files)
}

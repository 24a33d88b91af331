use std::path::PathBuf;

/// Why a report could not be imported. Nothing is left half-written in any case.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The report file is missing, not JSON, another version or damaged (the message names
    /// the file and what to do).
    #[error(transparent)]
    Read(#[from] ttmesh::MeshError),
    #[error("{0}: the output folder exists and is not empty; choose a new folder, or pass --replace to overwrite it")]
    OutDirNotEmpty(PathBuf),
    #[error("{0}: not a folder; give the path of a folder to create (e.g. out/visualizer)")]
    NotADirectory(PathBuf),
    #[error("{path}: {source}; check the folder exists and is writable")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot write the report database: {source}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
}

use ttmesh_ccl::CclError;
use ttmesh_chip::ChipError;
use ttmesh_fabric::FabricError;
use ttmesh_topologies::TopologyError;

#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("{0}")]
    Config(String),
    #[error("chip {chip}: {source}")]
    Chip { chip: u32, source: ChipError },
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Fabric(#[from] FabricError),
    #[error(transparent)]
    Ccl(#[from] CclError),
    #[error("{op}: {detail}")]
    Invalid { op: String, detail: String },
    /// Graph capture used out of order (end without begin, ...).
    #[error("graph capture: {0}")]
    GraphCapture(String),
    #[error("graph report {path}: {source}")]
    ReportIo {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("graph report {path}: {detail}")]
    ReportFormat {
        path: std::path::PathBuf,
        detail: String,
    },
}

pub type Result<T, E = MeshError> = std::result::Result<T, E>;

/// Attaches the chip id to a chip error.
pub(crate) fn on_chip(chip: u32) -> impl FnOnce(ChipError) -> MeshError {
    move |source| MeshError::Chip { chip, source }
}

pub(crate) fn invalid(op: &str, detail: impl Into<String>) -> MeshError {
    MeshError::Invalid {
        op: op.into(),
        detail: detail.into(),
    }
}

/// An error and every cause below it, as one line (each cause once: a message that already
/// quotes its source is not repeated). A fault's link, say, is often named only by a source.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s += ": ";
            s += &t;
        }
        cur = c.source();
    }
    s
}

//! The crate's one error enum: bad input names the value and the choices.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StressError {
    #[error("unknown {what} '{value}'; choose from {choices}")]
    UnknownName {
        what: &'static str,
        value: String,
        choices: String,
    },
    #[error("{flag} {value}: {why}")]
    BadValue {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error(transparent)]
    Mesh(#[from] ttmesh::MeshError),
    #[error(transparent)]
    Fabric(#[from] ttmesh_fabric::FabricError),
    #[error(transparent)]
    Topology(#[from] ttmesh_topologies::TopologyError),
    #[error("soak: {0}")]
    Soak(String),
}

pub type Result<T, E = StressError> = std::result::Result<T, E>;

pub(crate) fn bad(flag: &'static str, value: impl ToString, why: impl Into<String>) -> StressError {
    StressError::BadValue {
        flag,
        value: value.to_string(),
        why: why.into(),
    }
}

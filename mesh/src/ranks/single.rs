//! Without the `mpi` feature: a mesh is always wholly in this process. The same names as
//! `over_mpi.rs`, so the mesh's code has one shape; no value of `MeshRanks` exists.

use std::sync::Arc;
use std::time::Duration;

use ttmesh_fabric::{ChipMemory, Fabric, FabricSpec};

use crate::error::Result;

pub(crate) enum MeshRanks {}

impl MeshRanks {
    pub fn for_open(
        _bindings_file: Option<&std::path::Path>,
        _cluster: &ttmesh_topologies::ClusterGraph,
    ) -> Result<Option<MeshRanks>> {
        Ok(None)
    }
    pub fn rank(&self) -> u32 {
        match *self {}
    }
    pub fn size(&self) -> u32 {
        match *self {}
    }
    pub fn is_local(&self, _chip: u32) -> bool {
        match *self {}
    }
    pub fn fabric(
        &mut self,
        _spec: FabricSpec,
        _memories: Vec<Arc<dyn ChipMemory>>,
    ) -> std::result::Result<Fabric, ttmesh_fabric::FabricError> {
        match *self {}
    }
    pub fn attach(&self, _fabric: &Arc<Fabric>) {
        match *self {}
    }
    pub fn exchange(
        &self,
        _what: &str,
        _data: Vec<u8>,
        _timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        match *self {}
    }
    pub fn close(&self) {
        match *self {}
    }
}

/// Nothing to end: no MPI in this build.
pub fn end_of_job(_result: &std::result::Result<(), String>) {}

/// Without MPI there is one process: its own `data`.
pub fn exchange_in_job(
    _what: &str,
    data: Vec<u8>,
    _timeout: Duration,
) -> std::result::Result<Vec<Vec<u8>>, String> {
    Ok(vec![data])
}

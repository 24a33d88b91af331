//! What a topology descriptor implies for the mesh that opens it: a mesh graph descriptor
//! declares each dimension `LINE` or `RING`, and that picks the fabric config.

use ttmesh_fabric::FabricConfig;
use ttmesh_topologies::{ClusterGraph, DimKind};

use crate::{MeshConfig, Result};

/// The fabric config a mesh graph descriptor's `dim_types` imply, or None for a descriptor
/// that declares none (TOML, `line-N`, `mesh-RxC`, ...). A grid of 2 or more rows and columns
/// gets `FABRIC_2D`, or the torus its `RING` dims close (`dim_types` `[rows, cols]`: a `RING`
/// on cols closes every row, X; on rows every column, Y); a single row or column gets
/// `FABRIC_1D_RING` when it is a ring, else `FABRIC_1D` (also for one chip).
pub fn implied_fabric_config(cluster: &ClusterGraph) -> Option<FabricConfig> {
    let [rows_kind, cols_kind] = cluster.dim_kinds()?;
    let (rows, cols) = cluster.mesh_shape();
    let wrap_x = cols_kind == DimKind::Ring;
    let wrap_y = rows_kind == DimKind::Ring;
    Some(if rows > 1 && cols > 1 {
        match (wrap_x, wrap_y) {
            (false, false) => FabricConfig::Fabric2D,
            (true, false) => FabricConfig::Fabric2DTorusX,
            (false, true) => FabricConfig::Fabric2DTorusY,
            (true, true) => FabricConfig::Fabric2DTorusXY,
        }
    } else if wrap_x || wrap_y {
        FabricConfig::Fabric1DRing
    } else {
        FabricConfig::Fabric1D
    })
}

impl MeshConfig {
    /// The defaults, opening `topology` with the fabric its descriptor implies
    /// ([`implied_fabric_config`]), else `FABRIC_1D`. Errors when the topology cannot be loaded.
    pub fn described(topology: &str) -> Result<MeshConfig> {
        let cluster = ttmesh_topologies::load(topology)?;
        Ok(MeshConfig {
            topology: topology.to_string(),
            fabric_config: implied_fabric_config(&cluster).unwrap_or(FabricConfig::Fabric1D),
            ..MeshConfig::default()
        })
    }
}

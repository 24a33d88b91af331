//! Mesh mappers and composers as Python hands them over (`ShardTensorToMesh`,
//! `ReplicateTensorToMesh`, `create_mesh_mapper`, `ConcatMeshToTensor`, ...): parsed once into
//! the library's mappers, with a dim that does not exist named as the argument's error.

use pyo3::prelude::*;
use ttmesh::{
    ConcatMesh2dToTensor, ConcatMeshToTensor, HostTensor, MeshComposer, MeshMapper,
    MeshShape as RShape, ReplicateTensorToMesh, ShardTensor2dMesh, ShardTensorToMesh,
};

use crate::errors::{type_error, value_error};
use crate::memory::type_name;

/// What to do with a host tensor on a mesh (from a `mesh_mapper` or a host tensor's placement).
#[derive(Clone, Debug)]
pub enum Mapper {
    Replicate,
    Shard(usize),
    TwoD([Option<usize>; 2]),
    /// Parts already split per chip (a multi-device host tensor).
    Parts(Vec<HostTensor>),
}

impl MeshMapper for Mapper {
    fn map(&self, host: &HostTensor, shape: RShape) -> ttmesh::Result<Vec<HostTensor>> {
        match self {
            Mapper::Replicate => ReplicateTensorToMesh.map(host, shape),
            Mapper::Shard(d) => ShardTensorToMesh(*d).map(host, shape),
            Mapper::TwoD(d) => ShardTensor2dMesh(*d).map(host, shape),
            Mapper::Parts(p) => Ok(p.clone()),
        }
    }
    fn map_distinct<'a>(
        &self,
        host: &'a HostTensor,
        shape: RShape,
    ) -> ttmesh::Result<ttmesh::DistinctParts<'a>> {
        match self {
            Mapper::Replicate => ReplicateTensorToMesh.map_distinct(host, shape),
            Mapper::Shard(d) => ShardTensorToMesh(*d).map_distinct(host, shape),
            Mapper::TwoD(d) => ShardTensor2dMesh(*d).map_distinct(host, shape),
            Mapper::Parts(p) => Ok(ttmesh::DistinctParts::one_per_chip(p.clone())),
        }
    }
}

/// How to join per-chip tensors (a `mesh_composer`).
#[derive(Clone, Copy, Debug)]
pub enum Composer {
    Concat(usize),
    Concat2d([usize; 2]),
}

impl Composer {
    pub(crate) fn compose(
        &self,
        parts: Vec<HostTensor>,
        shape: RShape,
    ) -> ttmesh::Result<HostTensor> {
        match self {
            Composer::Concat(d) => ConcatMeshToTensor(*d).compose(parts, shape),
            Composer::Concat2d(d) => ConcatMesh2dToTensor(*d).compose(parts, shape),
        }
    }
}

fn norm_dim(arg: &str, dim: isize, rank: usize) -> PyResult<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(value_error(format!(
            "{arg}: dim {dim} is out of range for a tensor of rank {rank}; use -{rank}..{}",
            rank.saturating_sub(1)
        )));
    }
    Ok(d as usize)
}

/// `("replicate",)`, `("shard", dim)` or `("2d", dim_or_none, dim_or_none)` (from the Python
/// mapper classes) for a tensor of `rank` dims.
pub fn parse_mapper(spec: &Bound<'_, PyAny>, rank: usize) -> PyResult<Mapper> {
    let t: Vec<Bound<'_, PyAny>> = spec.extract().map_err(|_| {
        type_error(format!(
            "mesh_mapper must be a ttnn mesh mapper (ttnn.ShardTensorToMesh, ttnn.ReplicateTensorToMesh, ttnn.ShardTensor2dMesh, ttnn.create_mesh_mapper(...)), not {}",
            type_name(spec)
        ))
    })?;
    let kind: String = t
        .first()
        .map(|k| k.extract())
        .transpose()?
        .unwrap_or_default();
    let dim = |i: usize| -> PyResult<Option<usize>> {
        match t.get(i) {
            Some(v) if !v.is_none() => Ok(Some(norm_dim("mesh_mapper", v.extract()?, rank)?)),
            _ => Ok(None),
        }
    };
    match kind.as_str() {
        "replicate" => Ok(Mapper::Replicate),
        "shard" => {
            Ok(Mapper::Shard(dim(1)?.ok_or_else(|| {
                value_error("mesh_mapper: shard needs a dim")
            })?))
        }
        "2d" => Ok(Mapper::TwoD([dim(1)?, dim(2)?])),
        _ => Err(type_error(format!(
            "mesh_mapper: unknown mapper kind {kind:?}"
        ))),
    }
}

/// `("concat", dim)` or `("concat2d", dim0, dim1)`.
pub fn parse_composer(spec: &Bound<'_, PyAny>, rank: usize) -> PyResult<Composer> {
    let t: Vec<Bound<'_, PyAny>> = spec.extract().map_err(|_| {
        type_error(format!(
            "mesh_composer must be a ttnn mesh composer (ttnn.ConcatMeshToTensor, ttnn.ConcatMesh2dToTensor, ttnn.create_mesh_composer(...)), not {}",
            type_name(spec)
        ))
    })?;
    let kind: String = t
        .first()
        .map(|k| k.extract())
        .transpose()?
        .unwrap_or_default();
    let dim = |i: usize| -> PyResult<usize> {
        let v: isize = t
            .get(i)
            .ok_or_else(|| value_error("mesh_composer: a dim is missing"))?
            .extract()?;
        norm_dim("mesh_composer", v, rank)
    };
    match kind.as_str() {
        "concat" => Ok(Composer::Concat(dim(1)?)),
        "concat2d" => Ok(Composer::Concat2d([dim(1)?, dim(2)?])),
        _ => Err(type_error(format!(
            "mesh_composer: unknown composer kind {kind:?}"
        ))),
    }
}

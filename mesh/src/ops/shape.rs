//! The data-movement ops on mesh tensors: each chip moves its own shard's values (same order
//! on every chip, so outputs share one address). Shapes are per chip: with tensor parallelism
//! a chip's `[1, 1, B, n * d]` holds its own heads. Nothing is read on the host, so these run
//! inside a captured mesh trace. See `ttmesh_chip::ops::{reshape, slice, concat, transpose,
//! permute}` for the exact semantics and errors.

use ttmesh_chip::ops as chip_ops;

use super::{lockstep_op, MeshOpOptions};
use crate::error::Result;
use crate::tensor::MeshTensor;

/// `reshape(x, new_shape)`: same values in the same row-major order, new shape of equal volume
/// (e.g. `[1, 1, B, n * d]` <-> `[1, B, n, d]`). See [`chip_ops::reshape`].
pub fn reshape(x: &MeshTensor, new_shape: &[usize], opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[x], opts, |t, o| chip_ops::reshape(t[0], new_shape, o))
}

/// `slice(x, begins, ends)`: the block `begins[k]..ends[k]` of every dim of each chip's shard.
/// See [`chip_ops::slice`].
pub fn slice(
    x: &MeshTensor,
    begins: &[usize],
    ends: &[usize],
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    lockstep_op(&[x], opts, |t, o| chip_ops::slice(t[0], begins, ends, o))
}

/// `concat(parts, dim)`: each chip's shards one after another along `dim` (negative counts
/// from the end). See [`chip_ops::concat`].
pub fn concat(parts: &[&MeshTensor], dim: i64, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(parts, opts, |t, o| chip_ops::concat(t, dim, o))
}

/// `transpose(x, dim0, dim1)`: swaps two dims of each chip's shard. See [`chip_ops::transpose`].
pub fn transpose(x: &MeshTensor, dim0: i64, dim1: i64, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[x], opts, |t, o| chip_ops::transpose(t[0], dim0, dim1, o))
}

/// `permute(x, dims)`: output dim `k` is input dim `dims[k]`. See [`chip_ops::permute`].
pub fn permute(x: &MeshTensor, dims: &[i64], opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[x], opts, |t, o| chip_ops::permute(t[0], dims, o))
}

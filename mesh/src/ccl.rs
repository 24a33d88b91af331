//! Collectives on mesh tensors: each runs along the lines a `cluster_axis` picks (every column,
//! every row, or one line through all chips), as device programs over the fabric, so they are
//! captured in traces like any op.

/// Which thread runs a collective's steps (measured in docs/performance.md).
pub use ttmesh_ccl::{set_step_runner, StepRunner};
use ttmesh_ccl::{CclConfig, CclLine, LockstepAlloc, Topology};
use ttmesh_chip::tensor::{Tensor, TensorSpec};
use ttmesh_chip::{CqId, MemoryConfig};

use crate::error::{invalid, Result};
use crate::lockstep;
use crate::tensor::MeshTensor;

/// TT-NN's collective arguments.
#[derive(Clone, Debug, Default)]
pub struct CclArgs {
    /// 0 = along columns, 1 = along rows, None = all chips of the mesh.
    pub cluster_axis: Option<usize>,
    pub topology: Option<Topology>,
    pub num_links: usize,
    pub memory_config: Option<MemoryConfig>,
    pub output: Option<MeshTensor>,
    pub cq: CqId,
}

fn normalize_dim(t: &MeshTensor, dim: isize, op: &str) -> Result<usize> {
    let rank = t.shape().len() as isize;
    let d = if dim < 0 { rank + dim } else { dim };
    if d < 0 || d >= rank {
        return Err(invalid(
            op,
            format!("dim {dim} is out of range for rank {rank}"),
        ));
    }
    Ok(d as usize)
}

type LineOp<'a> = dyn Fn(
        &[Tensor],
        &CclLine,
        &CclConfig,
        Option<&[Tensor]>,
        &LockstepAlloc<'_>,
    ) -> ttmesh_ccl::Result<Vec<Tensor>>
    + 'a;

/// Outputs and scratch of a collective: allocated in lockstep on the line's chips.
fn allocate_on_line(
    inputs: &[Tensor],
    spec: &TensorSpec,
) -> std::result::Result<Vec<Tensor>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(lockstep::allocate(
        &format_args!("collective buffer {spec}"),
        inputs.iter().map(|t| t.chip()),
        spec,
    )?)
}

fn run_lines(
    t: &MeshTensor,
    op: &'static str,
    args: &CclArgs,
    f: &LineOp<'_>,
) -> Result<MeshTensor> {
    crate::graph::device_operation(Some(ttnn_name(op)), &[t], || {
        run_lines_on_mesh(t, op, args, f)
    })
}

/// The name TT-NN's graph gives a collective.
fn ttnn_name(op: &str) -> &'static str {
    match op {
        "all_gather" => "ttnn::all_gather",
        "reduce_scatter" => "ttnn::reduce_scatter",
        _ => "ttnn::all_reduce",
    }
}

fn run_lines_on_mesh(
    t: &MeshTensor,
    op: &'static str,
    args: &CclArgs,
    f: &LineOp<'_>,
) -> Result<MeshTensor> {
    let mesh = t.mesh().clone();
    mesh.require_fabric(op)?;
    if let Some(o) = &args.output {
        // Remote writes land at the output's address on this mesh's chips: it must be theirs.
        if !std::sync::Arc::ptr_eq(&o.mesh().inner, &mesh.inner) {
            return Err(invalid(
                op,
                "the preallocated output lives on a different mesh than the input; allocate it on the input's mesh",
            ));
        }
    }
    let mut out: Vec<Option<Tensor>> = vec![None; mesh.num_devices()];
    for (line, idx) in mesh.ccl_lines(args.cluster_axis)? {
        // Results follow mesh order (the mappers' order), not the path the line takes: rank
        // each position's chip by its mesh index.
        let chunk_order = idx
            .iter()
            .map(|&i| idx.iter().filter(|&&j| j < i).count())
            .collect();
        let cfg = CclConfig {
            topology: args.topology,
            num_links: args.num_links.max(1),
            memory_config: args.memory_config.clone(),
            cq: args.cq,
            chunk_order,
        };
        let inputs: Vec<Tensor> = idx.iter().map(|&i| t.shards()[i].clone()).collect();
        let outputs: Option<Vec<Tensor>> = args
            .output
            .as_ref()
            .map(|o| idx.iter().map(|&i| o.shards()[i].clone()).collect());
        let res = f(&inputs, &line, &cfg, outputs.as_deref(), &allocate_on_line)?;
        for (i, r) in idx.into_iter().zip(res) {
            out[i] = Some(r);
        }
    }
    let shards = out
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| invalid(op, "a chip of the mesh is on no line"))?;
    MeshTensor::from_shards(&mesh, shards)
}

/// Output `shape[dim] *= n` on every chip (n = chips per line), blocks in mesh order, so a
/// tensor sharded with `ShardTensorToMesh(dim)` gathers back to the original.
pub fn all_gather(t: &MeshTensor, dim: isize, args: &CclArgs) -> Result<MeshTensor> {
    let d = normalize_dim(t, dim, "all_gather")?;
    let fabric = t.mesh().require_fabric("all_gather")?.clone();
    run_lines(t, "all_gather", args, &|ins, line, cfg, outs, alloc| {
        ttmesh_ccl::all_gather(ins, d, line, &fabric, cfg, outs, alloc)
    })
}

/// Output `shape[dim] /= n`: the chips of each line, in mesh order, hold chunks 0..n of the
/// line's sum (so `ConcatMeshToTensor(dim)` over a line composes the whole sum).
pub fn reduce_scatter(t: &MeshTensor, dim: isize, args: &CclArgs) -> Result<MeshTensor> {
    let d = normalize_dim(t, dim, "reduce_scatter")?;
    let fabric = t.mesh().require_fabric("reduce_scatter")?.clone();
    run_lines(t, "reduce_scatter", args, &|ins, line, cfg, outs, alloc| {
        ttmesh_ccl::reduce_scatter(ins, d, line, &fabric, cfg, outs, alloc)
    })
}

/// Sum over each line, result on every chip of it.
pub fn all_reduce(t: &MeshTensor, args: &CclArgs) -> Result<MeshTensor> {
    let fabric = t.mesh().require_fabric("all_reduce")?.clone();
    run_lines(t, "all_reduce", args, &|ins, line, cfg, outs, alloc| {
        ttmesh_ccl::all_reduce(ins, line, &fabric, cfg, outs, alloc)
    })
}

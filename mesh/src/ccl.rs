//! Collectives on mesh tensors: each runs along the lines a `cluster_axis` picks (every column,
//! every row, or one line through all chips), as device programs over the fabric, so they are
//! captured in traces like any op.
//!
//! Over the whole of a 2D mesh on a 2D fabric (`cluster_axis` None, both axes longer than one
//! chip) a collective runs along one axis and then the other, every line of an axis at once:
//! all_gather along rows then columns, reduce_scatter and all_reduce along columns then rows
//! ([`whole_mesh_axes`]). The orders make the result mesh order, as one line through all chips
//! would: a row's gather is blocks `r*cols..(r+1)*cols`, then the columns stack the rows; a
//! column's scatter leaves chip `(r, c)` chunk `r` of `rows`, and the row's splits that into
//! `cols`, so chunk `r*cols + c` of the whole. A large all_reduce whose rows or columns split
//! into whole tiles over a row instead scatters along the rows, reduces each chunk along the
//! columns and gathers back along the rows ([`SCATTERED_ALL_REDUCE_BYTES`]). On a 1D fabric,
//! None stays one line through all chips (the fabric's 1D routes follow lines only).

/// Which thread runs a collective's steps (measured in docs/performance.md).
pub use ttmesh_ccl::{set_step_runner, StepRunner};
use ttmesh_ccl::{CclConfig, CclLine, LockstepAlloc, Topology};
use ttmesh_chip::tensor::{Layout, Tensor, TensorSpec};
use ttmesh_chip::{CqId, MemoryConfig};

use crate::device::MeshDevice;
use crate::error::{invalid, Result};
use crate::lockstep;
use crate::tensor::MeshTensor;

/// TT-NN's collective arguments.
#[derive(Clone, Debug, Default)]
pub struct CclArgs {
    /// 0 = along columns, 1 = along rows, None = all chips of the mesh.
    pub cluster_axis: Option<usize>,
    /// Linear or Ring; None picks Ring where the line is a ring the fabric carries as one.
    pub topology: Option<Topology>,
    /// Parallel links to spread each hop's slots over; 0 = chosen for the mesh (one link, TT-NN's
    /// old default; the newer TT-NN picks it, as here, when not given).
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

/// One collective on the mesh: along the lines of `args.cluster_axis`, or over the whole of a
/// 2D mesh on a 2D fabric as one axis then the other (`axes`, in that order), the first
/// phase's result an intermediate freed once the second is enqueued (queue order keeps it
/// until the second has read it).
fn run_lines(
    t: &MeshTensor,
    op: &'static str,
    args: &CclArgs,
    axes: [usize; 2],
    f: &LineOp<'_>,
) -> Result<MeshTensor> {
    crate::graph::device_operation(Some(ttnn_name(op)), &[t], || {
        let Some(axes) = whole_mesh_axes(t.mesh(), args.cluster_axis, axes) else {
            return run_lines_on_mesh(t, op, args, f);
        };
        let along = |axis: usize, output: Option<MeshTensor>| CclArgs {
            cluster_axis: Some(axis),
            output,
            ..args.clone()
        };
        let first = run_lines_on_mesh(t, op, &along(axes[0], None), f)?;
        run_lines_on_mesh(&first, op, &along(axes[1], args.output.clone()), f)
    })
}

/// The two axes a whole-mesh collective runs along, in order, or None when it runs on lines
/// as asked: an axis given, a mesh of one row or column, or a 1D fabric (whose routes follow
/// lines, so one line through all chips serves). `order` is the collective's own (see the
/// module doc).
pub fn whole_mesh_axes(
    mesh: &MeshDevice,
    cluster_axis: Option<usize>,
    order: [usize; 2],
) -> Option<[usize; 2]> {
    let s = mesh.shape();
    (cluster_axis.is_none() && s.rows > 1 && s.cols > 1 && mesh.fabric_config().is_2d())
        .then_some(order)
}

/// all_gather's order over a whole 2D mesh: rows, then columns.
pub const ALL_GATHER_AXES: [usize; 2] = [1, 0];
/// reduce_scatter's and all_reduce's order over a whole 2D mesh: columns, then rows.
pub const REDUCE_AXES: [usize; 2] = [0, 1];

/// Chips a collective over `cluster_axis` splits a dim over: a line's, or the whole mesh's.
fn chips_along(mesh: &MeshDevice, cluster_axis: Option<usize>) -> Result<usize> {
    let s = mesh.shape();
    match cluster_axis {
        Some(0) => Ok(s.rows),
        Some(1) => Ok(s.cols),
        Some(a) => Err(bad_axis(mesh, a)),
        None => Ok(s.rows * s.cols),
    }
}

/// The error for a `cluster_axis` the mesh does not have.
pub(crate) fn bad_axis(mesh: &MeshDevice, axis: usize) -> crate::error::MeshError {
    invalid(
        "ccl",
        format!(
            "cluster_axis {axis} does not exist on the {} mesh; use 0 (along columns, {} chips), 1 (along rows, {} chips) or None (all {} chips)",
            mesh.shape(),
            mesh.shape().rows,
            mesh.shape().cols,
            mesh.num_devices()
        ),
    )
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

/// Output `shape[dim] *= n` on every chip (n = chips per line, or of the whole mesh), blocks in
/// mesh order, so a tensor sharded with `ShardTensorToMesh(dim)` gathers back to the original.
pub fn all_gather(t: &MeshTensor, dim: isize, args: &CclArgs) -> Result<MeshTensor> {
    let d = normalize_dim(t, dim, "all_gather")?;
    let fabric = t.mesh().require_fabric("all_gather")?.clone();
    run_lines(
        t,
        "all_gather",
        args,
        ALL_GATHER_AXES,
        &|ins, line, cfg, outs, alloc| {
            ttmesh_ccl::all_gather(ins, d, line, &fabric, cfg, outs, alloc)
        },
    )
}

/// A reduce_scatter's `dim` must split into one equal chunk per chip it runs over (checked here
/// for the whole mesh too, before the first phase runs, so nothing is half done).
fn check_splits(t: &MeshTensor, dim: usize, cluster_axis: Option<usize>) -> Result<()> {
    let n = chips_along(t.mesh(), cluster_axis)?;
    let size = t.shape()[dim];
    if size.is_multiple_of(n) {
        return Ok(());
    }
    let over = match cluster_axis {
        Some(a) => format!("the {n} chips along cluster_axis {a}"),
        None => format!(
            "the {n} chips of the {} mesh (cluster_axis None)",
            t.mesh().shape()
        ),
    };
    Err(invalid(
        "reduce_scatter",
        format!(
            "dim {dim} of {:?} ({size}) does not split into equal chunks over {over}; pad dim {dim} to a multiple of {n}, or pick a cluster_axis whose chip count divides it",
            t.shape()
        ),
    ))
}

/// Output `shape[dim] /= n`: the chips of each line, in mesh order, hold chunks 0..n of the
/// line's sum (so `ConcatMeshToTensor(dim)` over a line composes the whole sum). Over a whole
/// 2D mesh on a 2D fabric, chip `i` (mesh order) holds chunk `i` of the sum of all chips.
pub fn reduce_scatter(t: &MeshTensor, dim: isize, args: &CclArgs) -> Result<MeshTensor> {
    let d = normalize_dim(t, dim, "reduce_scatter")?;
    let fabric = t.mesh().require_fabric("reduce_scatter")?.clone();
    check_splits(t, d, args.cluster_axis)?;
    run_lines(
        t,
        "reduce_scatter",
        args,
        REDUCE_AXES,
        &|ins, line, cfg, outs, alloc| {
            ttmesh_ccl::reduce_scatter(ins, d, line, &fabric, cfg, outs, alloc)
        },
    )
}

/// Sum over each line (or the whole mesh), result on every chip of it.
pub fn all_reduce(t: &MeshTensor, args: &CclArgs) -> Result<MeshTensor> {
    let fabric = t.mesh().require_fabric("all_reduce")?.clone();
    let reduce: &LineOp<'_> =
        &|ins, line, cfg, outs, alloc| ttmesh_ccl::all_reduce(ins, line, &fabric, cfg, outs, alloc);
    let Some(dim) = scattered_all_reduce_dim(t, args) else {
        return run_lines(t, "all_reduce", args, REDUCE_AXES, reduce);
    };
    // Large, and a dim splits into whole tiles over a row: scatter along the rows, reduce each
    // chip's chunk along the columns, gather back along the rows (see the constant).
    crate::graph::device_operation(Some(ttnn_name("all_reduce")), &[t], || {
        let along = |axis: usize, output: Option<MeshTensor>| CclArgs {
            cluster_axis: Some(axis),
            output,
            ..args.clone()
        };
        let chunks = run_lines_on_mesh(
            t,
            "all_reduce",
            &along(1, None),
            &|ins, line, cfg, outs, alloc| {
                ttmesh_ccl::reduce_scatter(ins, dim, line, &fabric, cfg, outs, alloc)
            },
        )?;
        let sums = run_lines_on_mesh(&chunks, "all_reduce", &along(0, None), reduce)?;
        drop(chunks);
        run_lines_on_mesh(
            &sums,
            "all_reduce",
            &along(1, args.output.clone()),
            &|ins, line, cfg, outs, alloc| {
                ttmesh_ccl::all_gather(ins, dim, line, &fabric, cfg, outs, alloc)
            },
        )
    })
}

/// From this many bytes per chip, a whole-mesh all_reduce on a 2D fabric runs as reduce_scatter
/// along the rows, all_reduce of each chip's chunk along the columns and all_gather back along
/// the rows: each chip's links carry about 1.9x the tensor instead of the 3.25x of two
/// all_reduces (on a Galaxy). Measured on a Galaxy, bf16, one run each under load: 0.44-0.81x
/// the time of two all_reduces from 512 KiB to 16 MiB, but 4x at 36 KiB, where a third launch
/// and a sub-tile chunk cost more than the bytes saved.
pub const SCATTERED_ALL_REDUCE_BYTES: u64 = 512 << 10;

/// The dim a whole-mesh all_reduce scatters along the rows, if it takes that path: the tensor
/// is at least [`SCATTERED_ALL_REDUCE_BYTES`] per chip, in tiles, and its rows (dim -2) or
/// columns (dim -1) split into whole tiles over a row's chips.
pub fn scattered_all_reduce_dim(t: &MeshTensor, args: &CclArgs) -> Option<usize> {
    whole_mesh_axes(t.mesh(), args.cluster_axis, REDUCE_AXES)?;
    let spec = t.spec();
    if spec.layout != Layout::Tile || spec.buffer_size() < SCATTERED_ALL_REDUCE_BYTES {
        return None;
    }
    let (rank, n) = (spec.shape.len(), t.mesh().shape().cols);
    (rank.saturating_sub(2)..rank)
        .find(|&d| spec.shape[d].is_multiple_of(n * ttmesh_chip::format::TILE_WIDTH))
}

//! Ops that rearrange values without changing them: reshape, slice, concat, transpose, permute.
//!
//! Each is one kernel that decodes its inputs' pages into logical (row-major) order, moves the
//! values through index arithmetic, and encodes the output's pages: tile padding never leaks
//! into the result, whatever the last two dims become. Everything the move depends on (shapes,
//! offsets, dims) is part of the program's key, and nothing else is read on the host, so a
//! captured trace replays the op on whatever data its input buffers hold.
//!
//! Values keep their bits (BFLOAT16, FLOAT32, UINT32; TILE or ROW_MAJOR). BFLOAT8_B is refused:
//! moving a value into another 16-value block would re-quantize it.

use std::sync::Arc;

use super::io::{read_logical, recycle_f32, write_logical};
use super::{default_memory_config, run_op, OpLaunch, OpOptions};
use crate::error::{ChipError, Result};
use crate::program::{Kernel, KernelContext, KernelCost};
use crate::tensor::{HostData, Tensor, TensorSpec};

/// How the output's values come from the inputs', in logical row-major order.
#[derive(Clone, Debug)]
enum Move {
    /// Same order, new shape.
    Same,
    /// Output element `i` is input element `base + sum_k i_k * strides[k]` (slice, permute).
    Gather { base: usize, strides: Vec<usize> },
    /// Each input in turn fills the next range of output dim `dim`.
    Concat { dim: usize },
}

struct ShapeKernel {
    name: &'static str,
    inputs: Vec<TensorSpec>,
    out: TensorSpec,
    plan: Move,
}

impl Kernel for ShapeKernel {
    fn name(&self) -> &str {
        self.name
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let out_addr = addr[self.inputs.len()];
        let data = match &self.plan {
            Move::Same => read_logical(ctx, &self.inputs[0], addr[0])?,
            Move::Gather { base, strides } => {
                let shape = &self.out.shape;
                match read_logical(ctx, &self.inputs[0], addr[0])? {
                    HostData::F32(src) => {
                        let out = gather(&src, *base, strides, shape);
                        recycle_f32(src);
                        HostData::F32(out)
                    }
                    HostData::U32(src) => HostData::U32(gather(&src, *base, strides, shape)),
                }
            }
            Move::Concat { dim } => {
                let shape = &self.out.shape;
                let dst_strides = row_major_strides(shape);
                let mut out: Option<HostData> = None;
                let mut offset = 0;
                for (spec, &a) in self.inputs.iter().zip(addr) {
                    let part = read_logical(ctx, spec, a)?;
                    let dst = out.get_or_insert_with(|| zeros_like(&part, self.out.volume()));
                    let src_strides = row_major_strides(&spec.shape);
                    let at = offset * dst_strides[*dim];
                    match (&part, dst) {
                        (HostData::F32(s), HostData::F32(d)) => {
                            strided_copy(s, (0, &src_strides), d, (at, &dst_strides), &spec.shape)
                        }
                        (HostData::U32(s), HostData::U32(d)) => {
                            strided_copy(s, (0, &src_strides), d, (at, &dst_strides), &spec.shape)
                        }
                        _ => return Err(mixed_kinds(ctx, self.name)),
                    }
                    offset += spec.shape[*dim];
                    if let HostData::F32(v) = part {
                        recycle_f32(v);
                    }
                }
                out.ok_or_else(|| mixed_kinds(ctx, self.name))?
            }
        };
        write_logical(ctx, &self.out, out_addr, &data)?;
        if let HostData::F32(v) = data {
            recycle_f32(v);
        }
        Ok(())
    }
    fn cost(&self) -> KernelCost {
        let read: u64 = self.inputs.iter().map(|s| s.buffer_size()).sum();
        KernelCost {
            dram_bytes: (read + self.out.buffer_size()) as f64,
            ..Default::default()
        }
    }
}

fn mixed_kinds(ctx: &KernelContext, kernel: &str) -> ChipError {
    ChipError::Kernel {
        kernel: kernel.into(),
        chip: ctx.chip,
        reason: "inputs decode to different value kinds (float and UINT32)".into(),
    }
}

fn zeros_like(d: &HostData, n: usize) -> HostData {
    match d {
        HostData::F32(_) => HostData::F32(vec![0.0; n]),
        HostData::U32(_) => HostData::U32(vec![0; n]),
    }
}

/// Gathers the `shape`-sized strided view of `src` into a new row-major buffer.
fn gather<T: Copy + Default>(src: &[T], base: usize, strides: &[usize], shape: &[usize]) -> Vec<T> {
    let mut dst = vec![T::default(); shape.iter().product()];
    strided_copy(
        src,
        (base, strides),
        &mut dst,
        (0, &row_major_strides(shape)),
        shape,
    );
    dst
}

/// Row-major strides of `shape`.
fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for k in (1..shape.len()).rev() {
        strides[k - 1] = strides[k] * shape[k];
    }
    strides
}

/// Copies the `shape`-sized block at `src` (offset `base`, `strides` per dim) to the block at
/// `dst`, walking the leading dims with an odometer and the last dim as one run.
fn strided_copy<T: Copy>(
    src: &[T],
    (src_base, src_strides): (usize, &[usize]),
    dst: &mut [T],
    (dst_base, dst_strides): (usize, &[usize]),
    shape: &[usize],
) {
    let n = shape.len();
    if n == 0 || shape.contains(&0) {
        return;
    }
    let (run, ss, ds) = (shape[n - 1], src_strides[n - 1], dst_strides[n - 1]);
    let mut index = vec![0usize; n - 1];
    let (mut s, mut d) = (src_base, dst_base);
    loop {
        if ss == 1 && ds == 1 {
            dst[d..d + run].copy_from_slice(&src[s..s + run]);
        } else {
            for i in 0..run {
                dst[d + i * ds] = src[s + i * ss];
            }
        }
        // Next index of the leading dims, last fastest.
        let mut k = n - 1;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            index[k] += 1;
            s += src_strides[k];
            d += dst_strides[k];
            if index[k] < shape[k] {
                break;
            }
            s -= src_strides[k] * shape[k];
            d -= dst_strides[k] * shape[k];
            index[k] = 0;
        }
    }
}

fn shape_error(op: &str, detail: String) -> ChipError {
    ChipError::ShapeMismatch {
        op: op.into(),
        detail,
    }
}

/// The dtypes these ops move exactly, and no dtype change asked of them.
fn check_movable(op: &str, t: &Tensor, opts: &OpOptions) -> Result<()> {
    if t.dtype().is_block_float() {
        return Err(ChipError::Unsupported {
            op: op.into(),
            what: format!("{} {}", t.dtype(), t.name()),
            hint: format!(
                "moving {} values re-quantizes their blocks; typecast to BFLOAT16 first",
                t.dtype()
            ),
        });
    }
    match opts.dtype {
        Some(dt) if dt != t.dtype() => Err(ChipError::Unsupported {
            op: op.into(),
            what: format!("a dtype change ({} to {dt}) of {}", t.dtype(), t.name()),
            hint: "it moves values as they are; typecast before or after".into(),
        }),
        _ => Ok(()),
    }
}

/// A dim index in `-rank..rank` as `0..rank`.
fn dim_index(op: &str, t: &Tensor, dim: i64) -> Result<usize> {
    let rank = t.shape().len() as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank {
        return Err(shape_error(
            op,
            format!(
                "dim {dim} is out of range for {} of shape {:?} (rank {rank}); pass -{rank}..{rank}",
                t.name(),
                t.shape()
            ),
        ));
    }
    Ok(d as usize)
}

fn move_op(
    name: &'static str,
    inputs: Vec<&Tensor>,
    shape: Vec<usize>,
    plan: Move,
    opts: &OpOptions,
) -> Result<Tensor> {
    let first = inputs[0].spec();
    let out_spec = TensorSpec::new(
        shape,
        first.dtype,
        first.layout,
        default_memory_config(first, opts),
    );
    // The move is in the key: two slices of one input to one output shape differ only here.
    let attributes = match &plan {
        Move::Same => String::new(),
        Move::Gather { base, strides } => format!("base={base} strides={strides:?}"),
        Move::Concat { dim } => format!("dim={dim}"),
    };
    let launch = OpLaunch {
        name,
        attributes,
        inputs,
        output_spec: out_spec,
        extra_args: 0,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(ShapeKernel {
            name,
            inputs: ins.to_vec(),
            out: out.clone(),
            plan,
        }))
    })
}

/// `reshape(x, new_shape)`: the same values in the same logical (row-major) order, in a new
/// shape of the same volume, e.g. `[1, 1, B, heads * head_dim]` <-> `[1, B, heads, head_dim]`.
/// The output is a new tensor (TILE padding is redone for the new last two dims); layout,
/// dtype and (by default) memory config are `x`'s.
pub fn reshape(x: &Tensor, new_shape: &[usize], opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "reshape";
    check_movable(OP, x, opts)?;
    let volume = new_shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if new_shape.is_empty() || volume != Some(x.spec().volume()) {
        return Err(shape_error(
            OP,
            format!(
                "{} of shape {:?} holds {} values but the new shape {new_shape:?} holds {}; the volumes must match",
                x.name(),
                x.shape(),
                x.spec().volume(),
                volume.map_or("too many".to_string(), |v| v.to_string()),
            ),
        ));
    }
    move_op("Reshape", vec![x], new_shape.to_vec(), Move::Same, opts)
}

/// `slice(x, begins, ends)`: the block `begins[k]..ends[k]` of every dim (one entry per dim of
/// `x`), e.g. the K part of a fused QKV projection: `begins = [0, 0, 0, q]`,
/// `ends = [1, 1, B, q + k]`.
pub fn slice(x: &Tensor, begins: &[usize], ends: &[usize], opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "slice";
    check_movable(OP, x, opts)?;
    let shape = x.shape();
    let fits = begins.len() == shape.len()
        && ends.len() == shape.len()
        && (0..shape.len()).all(|k| begins[k] <= ends[k] && ends[k] <= shape[k]);
    if !fits {
        return Err(shape_error(
            OP,
            format!(
                "begins {begins:?} and ends {ends:?} do not fit {} of shape {shape:?}; give one begin and one end per dim with begin <= end <= size",
                x.name()
            ),
        ));
    }
    let strides = row_major_strides(shape);
    let base = (0..shape.len()).map(|k| begins[k] * strides[k]).sum();
    let out: Vec<usize> = (0..shape.len()).map(|k| ends[k] - begins[k]).collect();
    move_op("Slice", vec![x], out, Move::Gather { base, strides }, opts)
}

/// `concat(parts, dim)`: the parts one after another along `dim` (negative counts from the
/// end). All parts share rank, dtype, layout and every other dim.
pub fn concat(parts: &[&Tensor], dim: i64, opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "concat";
    let Some(first) = parts.first() else {
        return Err(shape_error(
            OP,
            "no tensors given; pass at least one".into(),
        ));
    };
    let d = dim_index(OP, first, dim)?;
    let mut shape = first.shape().to_vec();
    shape[d] = 0;
    for t in parts {
        check_movable(OP, t, opts)?;
        let s = t.shape();
        if s.len() != first.shape().len()
            || (0..s.len()).any(|k| k != d && s[k] != first.shape()[k])
        {
            return Err(shape_error(
                OP,
                format!(
                    "{} of shape {s:?} does not match {} of shape {:?} outside dim {d}; every other dim must be equal",
                    t.name(),
                    first.name(),
                    first.shape()
                ),
            ));
        }
        if t.dtype() != first.dtype() || t.spec().layout != first.spec().layout {
            return Err(ChipError::Unsupported {
                op: OP.into(),
                what: format!(
                    "{} ({} {:?}) with {} ({} {:?})",
                    t.name(),
                    t.dtype(),
                    t.spec().layout,
                    first.name(),
                    first.dtype(),
                    first.spec().layout
                ),
                hint: "give parts of one dtype and layout; typecast or to_layout first".into(),
            });
        }
        shape[d] += s[d];
    }
    move_op(
        "Concat",
        parts.to_vec(),
        shape,
        Move::Concat { dim: d },
        opts,
    )
}

/// `permute(x, dims)`: output dim `k` is input dim `dims[k]` (negative counts from the end),
/// e.g. `[0, 2, 1, 3]` turns `[1, B, heads, d]` into `[1, heads, B, d]`.
pub fn permute(x: &Tensor, dims: &[i64], opts: &OpOptions) -> Result<Tensor> {
    permute_as("permute", "Permute", x, dims, opts)
}

/// `transpose(x, dim0, dim1)`: swaps two dims (negative counts from the end).
pub fn transpose(x: &Tensor, dim0: i64, dim1: i64, opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "transpose";
    let (a, b) = (dim_index(OP, x, dim0)?, dim_index(OP, x, dim1)?);
    let mut dims: Vec<i64> = (0..x.shape().len() as i64).collect();
    dims.swap(a, b);
    permute_as(OP, "Transpose", x, &dims, opts)
}

fn permute_as(
    op: &str,
    name: &'static str,
    x: &Tensor,
    dims: &[i64],
    opts: &OpOptions,
) -> Result<Tensor> {
    check_movable(op, x, opts)?;
    let rank = x.shape().len();
    let mut seen = vec![false; rank];
    let mut order = Vec::with_capacity(rank);
    for &d in dims {
        let k = dim_index(op, x, d)?;
        if std::mem::replace(&mut seen[k], true) {
            break;
        }
        order.push(k);
    }
    if order.len() != rank || dims.len() != rank {
        return Err(shape_error(
            op,
            format!(
                "dims {dims:?} are not a permutation of the {rank} dims of {} (shape {:?}); name each dim once",
                x.name(),
                x.shape()
            ),
        ));
    }
    let in_strides = row_major_strides(x.shape());
    let shape = order.iter().map(|&k| x.shape()[k]).collect();
    let strides = order.iter().map(|&k| in_strides[k]).collect();
    move_op(
        name,
        vec![x],
        shape,
        Move::Gather { base: 0, strides },
        opts,
    )
}

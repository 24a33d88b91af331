//! The ops of an LLM decode step beyond matmul and the eltwise / row ops: token embedding,
//! rotary position embedding, KV-cache update, attention over the cache, and argmax.
//!
//! Everything that changes from token to token (token ids, positions) is an input tensor the
//! kernel reads when it runs, never an attribute of the program: one compiled program, and so
//! one captured trace, serves every step. Batch `B` is the number of users decoded together
//! (TT-NN decodes up to 32, one per row of a tile).
//!
//! A position at or beyond the KV cache's length makes the kernel fail with an error naming the
//! user, the position and the cache length (on hardware it would write outside the cache); the
//! host should stop before that. Token ids beyond the vocabulary read as a zero row.

use std::sync::Arc;

use super::io::{read_f32, write_logical};
use super::tiles::{read_row_major_row, read_u32, TileRows, TileScratch};
use super::{default_memory_config, run_op, OpLaunch, OpOptions};
use crate::compute;
use crate::error::{ChipError, Result};
use crate::program::{Kernel, KernelContext, KernelCost};
use crate::tensor::{DataType, HostData, Layout, Tensor, TensorSpec};

fn shape_error(op: &str, detail: String) -> ChipError {
    ChipError::ShapeMismatch {
        op: op.into(),
        detail,
    }
}

/// A float tensor in TILE layout.
fn check_tile_float(op: &str, t: &Tensor, role: &str) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(ChipError::Unsupported {
            op: op.into(),
            what: format!("{role} {} of dtype {}", t.name(), t.dtype()),
            hint: format!("{role} must be BFLOAT16, FLOAT32 or BFLOAT8_B; typecast it first"),
        });
    }
    if t.spec().layout != Layout::Tile {
        return Err(ChipError::Unsupported {
            op: op.into(),
            what: format!("ROW_MAJOR layout of {role} {}", t.name()),
            hint: "convert it with to_layout(Layout::Tile)".into(),
        });
    }
    Ok(())
}

/// One UINT32 value per user (token ids, positions), any shape and layout.
fn check_per_user(op: &str, t: &Tensor, users: usize, role: &str) -> Result<()> {
    if t.dtype() != DataType::UInt32 {
        return Err(ChipError::Unsupported {
            op: op.into(),
            what: format!("{role} {} of dtype {}", t.name(), t.dtype()),
            hint: format!("{role} must be a UINT32 tensor (HostTensor::from_u32), e.g. [1, 1, 1, B] ROW_MAJOR"),
        });
    }
    if t.spec().volume() != users {
        return Err(shape_error(
            op,
            format!(
                "{role} {} holds {} values but there are {users} users; pass one per user",
                t.name(),
                t.spec().volume()
            ),
        ));
    }
    Ok(())
}

/// `[1, B, H, d]`, the decode layout of queries and keys: returns (B, H, d).
fn decode_layout(op: &str, t: &Tensor, role: &str) -> Result<(usize, usize, usize)> {
    match t.shape() {
        &[1, b, h, d] => Ok((b, h, d)),
        s => Err(shape_error(
            op,
            format!(
                "{role} {} is {s:?}; it must be [1, B, heads, head_dim] (the decode layout)",
                t.name()
            ),
        )),
    }
}

/// `[B, H, max_seq, d]`, a KV cache: returns (B, H, max_seq, d).
fn cache_layout(op: &str, t: &Tensor, role: &str) -> Result<[usize; 4]> {
    match t.shape() {
        &[b, h, s, d] => Ok([b, h, s, d]),
        s => Err(shape_error(
            op,
            format!(
                "{role} {} is {s:?}; it must be [B, kv_heads, max_seq, head_dim]",
                t.name()
            ),
        )),
    }
}

/// The position of user `b`, or the kernel's error when it falls outside the cache.
fn position(
    ctx: &KernelContext,
    kernel: &str,
    positions: &[u32],
    b: usize,
    max_seq: usize,
) -> Result<usize> {
    let p = positions.get(b).copied().unwrap_or(u32::MAX) as usize;
    if p >= max_seq {
        return Err(ChipError::Kernel {
            kernel: kernel.into(),
            chip: ctx.chip,
            reason: format!(
                "user {b}'s position {p} is beyond the cache's {max_seq} rows (positions 0..{max_seq}); size the cache for the longest sequence, or stop before position {max_seq}"
            ),
        });
    }
    Ok(p)
}

struct EmbeddingKernel {
    ids: TensorSpec,
    weight: TensorSpec,
    out: TensorSpec,
    vocab: usize,
    hidden: usize,
}

impl Kernel for EmbeddingKernel {
    fn name(&self) -> &str {
        "Embeddings"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let ids = read_u32(ctx, &self.ids, addr[0])?;
        let h = self.hidden;
        let mut out = vec![0f32; ids.len() * h];
        if self.weight.layout == Layout::Tile {
            let table = TileRows::new(ctx, &self.weight, addr[1])?;
            let mut s = TileScratch::new();
            for (row, &id) in out.chunks_exact_mut(h).zip(&ids) {
                if (id as usize) < self.vocab {
                    table.read_rows(ctx, 0, id as usize, 1, row, &mut s)?;
                }
            }
        } else {
            let pages = self.weight.page_map(ctx.arch, addr[1] as u64)?;
            let mut scratch = Vec::new();
            for (row, &id) in out.chunks_exact_mut(h).zip(&ids) {
                if (id as usize) < self.vocab {
                    read_row_major_row(
                        ctx,
                        &pages,
                        self.weight.dtype,
                        id as usize,
                        row,
                        &mut scratch,
                    )?;
                }
            }
        }
        write_logical(ctx, &self.out, addr[2], &HostData::F32(out))
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            dram_bytes: 2.0 * self.out.buffer_size() as f64,
            ..Default::default()
        }
    }
}

/// `embedding(ids, weight)`: row `ids[b]` of the table for each of the B users.
///
/// - `ids`: UINT32, B values in any shape and layout (e.g. `[1, 1, 1, B]` ROW_MAJOR, or
///   argmax's output), read by the kernel when it runs.
/// - `weight`: `[vocab, hidden]` (or `[1, 1, vocab, hidden]`), TILE (BFLOAT16, FLOAT32,
///   BFLOAT8_B) or ROW_MAJOR (BFLOAT16, FLOAT32).
/// - output: `[1, 1, B, hidden]` TILE, the weight's dtype unless `opts.dtype` says otherwise.
///
/// An id at or beyond `vocab` gives a row of zeros (the device cannot refuse it; check ids on
/// the host where they come from the host).
pub fn embedding(ids: &Tensor, weight: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "embedding";
    if !weight.dtype().is_float() {
        return Err(ChipError::Unsupported {
            op: OP.into(),
            what: format!("weight {} of dtype {}", weight.name(), weight.dtype()),
            hint: "the embedding table must be BFLOAT16, FLOAT32 or BFLOAT8_B".into(),
        });
    }
    let ws = weight.spec();
    if ws.shape.len() < 2 || ws.batch() != 1 {
        return Err(shape_error(
            OP,
            format!(
                "weight {} is {:?}; it must be [vocab, hidden] or [1, 1, vocab, hidden]",
                weight.name(),
                ws.shape
            ),
        ));
    }
    let (vocab, hidden) = ws.height_width();
    let users = ids.spec().volume();
    check_per_user(OP, ids, users, "ids")?;
    let out_spec = TensorSpec::new(
        vec![1, 1, users, hidden],
        opts.dtype.unwrap_or(weight.dtype()),
        Layout::Tile,
        default_memory_config(ws, opts),
    );
    let launch = OpLaunch {
        name: "Embeddings",
        attributes: String::new(),
        inputs: vec![ids, weight],
        output_spec: out_spec,
        extra_args: 2,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(EmbeddingKernel {
            ids: ins[0].clone(),
            weight: ins[1].clone(),
            out: out.clone(),
            vocab,
            hidden,
        }))
    })
}

struct RotaryKernel {
    x: TensorSpec,
    cos: TensorSpec,
    sin: TensorSpec,
    positions: TensorSpec,
    out: TensorSpec,
    heads: usize,
    head_dim: usize,
    max_seq: usize,
}

impl Kernel for RotaryKernel {
    fn name(&self) -> &str {
        "RotaryEmbeddingLlama"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let mut x = read_f32(ctx, &self.x, addr[0])?;
        let cos_rows = TileRows::new(ctx, &self.cos, addr[1])?;
        let sin_rows = TileRows::new(ctx, &self.sin, addr[2])?;
        let positions = read_u32(ctx, &self.positions, addr[3])?;
        let d = self.head_dim;
        let (mut cos, mut sin) = (vec![0f32; d], vec![0f32; d]);
        let mut s = TileScratch::new();
        for (b, user) in x.chunks_exact_mut(self.heads * d).enumerate() {
            let p = position(ctx, self.name(), &positions, b, self.max_seq)?;
            cos_rows.read_rows(ctx, 0, p, 1, &mut cos, &mut s)?;
            sin_rows.read_rows(ctx, 0, p, 1, &mut sin, &mut s)?;
            for head in user.chunks_exact_mut(d) {
                compute::rotate_half(head, &cos, &sin)?;
            }
        }
        write_logical(ctx, &self.out, addr[4], &HostData::F32(x))
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            flops: 3.0 * self.x.volume() as f64,
            dram_bytes: (self.x.buffer_size() + self.out.buffer_size()) as f64,
            ..Default::default()
        }
    }
}

/// `rotary_embedding(x, cos_cache, sin_cache, positions)`: HF's rotary position embedding
/// ("rotate_half": pairs `(x[i], x[i + d/2])`, see [`compute::rotate_half`]) at each user's
/// position, read by the kernel when it runs.
///
/// - `x`: `[1, B, heads, head_dim]` TILE (the decode layout; heads pad to a tile's 32 rows).
/// - `cos_cache`, `sin_cache`: `[1, 1, max_seq, head_dim]` (or `[max_seq, head_dim]`) TILE,
///   precomputed on the host: `cos[p][i] = cos(p * theta_(i mod d/2))`,
///   `theta_j = base^(-2j/d)`.
/// - `positions`: UINT32, B values.
/// - output: `x`'s shape and dtype (or `opts.dtype`).
pub fn rotary_embedding(
    x: &Tensor,
    cos_cache: &Tensor,
    sin_cache: &Tensor,
    positions: &Tensor,
    opts: &OpOptions,
) -> Result<Tensor> {
    const OP: &str = "rotary_embedding";
    check_tile_float(OP, x, "x")?;
    check_tile_float(OP, cos_cache, "cos_cache")?;
    check_tile_float(OP, sin_cache, "sin_cache")?;
    let (users, heads, d) = decode_layout(OP, x, "x")?;
    if d % 2 == 1 {
        return Err(shape_error(
            OP,
            format!("head_dim {d} of x {} is odd; rotate_half pairs x[i] with x[i + d/2], so it must be even", x.name()),
        ));
    }
    for t in [cos_cache, sin_cache] {
        let s = t.spec();
        if s.shape.len() < 2 || s.batch() != 1 || s.height_width().1 != d {
            return Err(shape_error(
                OP,
                format!(
                    "{} is {:?}; the cos/sin caches must be [1, 1, max_seq, {d}] (head_dim {d} from x {})",
                    t.name(),
                    s.shape,
                    x.name()
                ),
            ));
        }
    }
    if cos_cache.shape() != sin_cache.shape() {
        return Err(shape_error(
            OP,
            format!(
                "cos_cache {:?} and sin_cache {:?} differ; build both for the same max_seq",
                cos_cache.shape(),
                sin_cache.shape()
            ),
        ));
    }
    check_per_user(OP, positions, users, "positions")?;
    let max_seq = cos_cache.spec().height_width().0;
    let out_spec = TensorSpec::new(
        x.shape().to_vec(),
        opts.dtype.unwrap_or(x.dtype()),
        Layout::Tile,
        default_memory_config(x.spec(), opts),
    );
    let launch = OpLaunch {
        name: "RotaryEmbeddingLlama",
        attributes: String::new(),
        inputs: vec![x, cos_cache, sin_cache, positions],
        output_spec: out_spec,
        extra_args: 2,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(RotaryKernel {
            x: ins[0].clone(),
            cos: ins[1].clone(),
            sin: ins[2].clone(),
            positions: ins[3].clone(),
            out: out.clone(),
            heads,
            head_dim: d,
            max_seq,
        }))
    })
}

struct UpdateCacheKernel {
    new: TensorSpec,
    positions: TensorSpec,
    cache: TensorSpec,
    dims: [usize; 4],
}

impl Kernel for UpdateCacheKernel {
    fn name(&self) -> &str {
        "PagedUpdateCache"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let [_, heads, max_seq, d] = self.dims;
        let new = read_f32(ctx, &self.new, addr[0])?;
        let positions = read_u32(ctx, &self.positions, addr[1])?;
        let cache = TileRows::new(ctx, &self.cache, addr[2])?;
        let mut s = TileScratch::new();
        for (b, user) in new.chunks_exact(heads * d).enumerate() {
            let p = position(ctx, self.name(), &positions, b, max_seq)?;
            for (h, row) in user.chunks_exact(d).enumerate() {
                cache.write_row(ctx, b * heads + h, p, row, &mut s)?;
            }
        }
        Ok(())
    }
    fn cost(&self) -> KernelCost {
        // Read-modify-write of one tile row per user and head.
        let [b, h, _, d] = self.dims;
        let tiles = (b * h * d.div_ceil(32)) as f64;
        KernelCost {
            dram_bytes: 2.0 * tiles * self.cache.dtype.tile_bytes() as f64,
            ..Default::default()
        }
    }
}

/// `update_cache(cache, new, positions)`: writes each user's new key (or value) rows into the
/// KV cache, in place, at the user's position read by the kernel when it runs.
///
/// - `cache`: `[B, kv_heads, max_seq, head_dim]` TILE, normally in DRAM; row
///   `positions[b]` of every head of user `b` is overwritten, nothing else changes.
/// - `new`: `[1, B, kv_heads, head_dim]` TILE (any float dtype; values round to the cache's).
/// - `positions`: UINT32, B values.
///
/// `opts` gives only the command queue: the cache is the output.
pub fn update_cache(
    cache: &Tensor,
    new: &Tensor,
    positions: &Tensor,
    opts: &OpOptions,
) -> Result<()> {
    const OP: &str = "update_cache";
    if opts.output.is_some() || opts.dtype.is_some() || opts.memory_config.is_some() {
        return Err(ChipError::InvalidConfig(format!(
            "{OP} writes into the cache {} in place; pass OpOptions with only cq set",
            cache.name()
        )));
    }
    check_tile_float(OP, cache, "cache")?;
    check_tile_float(OP, new, "new")?;
    let dims = cache_layout(OP, cache, "cache")?;
    let (users, heads, d) = decode_layout(OP, new, "new")?;
    if [users, heads, d] != [dims[0], dims[1], dims[3]] {
        return Err(shape_error(
            OP,
            format!(
                "new {} is {:?} but the cache {} is {:?}; new must be [1, {}, {}, {}]",
                new.name(),
                new.shape(),
                cache.name(),
                cache.shape(),
                dims[0],
                dims[1],
                dims[3]
            ),
        ));
    }
    check_per_user(OP, positions, users, "positions")?;
    let launch = OpLaunch {
        name: "PagedUpdateCache",
        attributes: String::new(),
        inputs: vec![new, positions],
        output_spec: cache.spec().clone(),
        extra_args: 2,
    };
    let into_cache = OpOptions {
        output: Some(cache.clone()),
        cq: opts.cq,
        ..Default::default()
    };
    run_op(launch, &into_cache, |ins, out| {
        Ok(Arc::new(UpdateCacheKernel {
            new: ins[0].clone(),
            positions: ins[1].clone(),
            cache: out.clone(),
            dims,
        }))
    })?;
    Ok(())
}

struct SdpaDecodeKernel {
    q: TensorSpec,
    k: TensorSpec,
    v: TensorSpec,
    positions: TensorSpec,
    out: TensorSpec,
    q_heads: usize,
    dims: [usize; 4],
    scale: f32,
}

/// Below this many cached values to attend over, the (user, KV head) pairs run on the calling
/// thread: a hand-off to the rayon pool costs more than small problems take.
const SDPA_PAR_MIN_VALUES: usize = 1 << 15;

impl Kernel for SdpaDecodeKernel {
    fn name(&self) -> &str {
        "ScaledDotProductAttentionDecode"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        use rayon::prelude::*;
        let [users, kv_heads, max_seq, d] = self.dims;
        let group = self.q_heads / kv_heads;
        let q = read_f32(ctx, &self.q, addr[0])?;
        let k_rows = TileRows::new(ctx, &self.k, addr[1])?;
        let v_rows = TileRows::new(ctx, &self.v, addr[2])?;
        let positions = read_u32(ctx, &self.positions, addr[3])?;
        let lens = (0..users)
            .map(|b| Ok(position(ctx, self.name(), &positions, b, max_seq)? + 1))
            .collect::<Result<Vec<usize>>>()?;
        // One task per (user, KV head): read its keys and values once, attend with each query
        // head of its group. The output of that task is `group` consecutive head rows.
        let mut out = vec![0f32; q.len()];
        let task = |(i, out): (usize, &mut [f32])| -> Result<()> {
            let (b, kv) = (i / kv_heads, i % kv_heads);
            let len = lens[b];
            let mut s = TileScratch::new();
            let (mut k, mut v) = (vec![0f32; len * d], vec![0f32; len * d]);
            k_rows.read_rows(ctx, i, 0, len, &mut k, &mut s)?;
            v_rows.read_rows(ctx, i, 0, len, &mut v, &mut s)?;
            let mut scores = Vec::with_capacity(len);
            for (g, o) in out.chunks_exact_mut(d).enumerate() {
                let h = b * self.q_heads + kv * group + g;
                compute::attend(&q[h * d..][..d], &k, &v, self.scale, &mut scores, o)?;
            }
            Ok(())
        };
        let work: usize = lens.iter().sum::<usize>() * kv_heads * d;
        let mut chunks = out.chunks_mut(group * d).enumerate();
        if work < SDPA_PAR_MIN_VALUES {
            chunks.try_for_each(&task)?;
        } else {
            chunks
                .collect::<Vec<_>>()
                .into_par_iter()
                .try_for_each(task)?;
        }
        write_logical(ctx, &self.out, addr[4], &HostData::F32(out))
    }
    fn cost(&self) -> KernelCost {
        // Worst case (every user at the last position): all of K and V read.
        let [users, _, max_seq, d] = self.dims;
        KernelCost {
            flops: 4.0 * (users * self.q_heads * max_seq * d) as f64,
            dram_bytes: (self.k.buffer_size() + self.v.buffer_size() + self.q.buffer_size()) as f64,
            ..Default::default()
        }
    }
}

/// `scaled_dot_product_attention_decode(q, k_cache, v_cache, positions, scale)`: one decode
/// step's attention. Query head `h` of user `b` attends over cache rows `0..=positions[b]`
/// (causal: later rows are ignored whatever they hold) of KV head `h / (q_heads / kv_heads)`
/// (grouped-query attention): `softmax(scale * q . K^T) . V`, scores and softmax in f32.
///
/// - `q`: `[1, B, q_heads, head_dim]` TILE.
/// - `k_cache`, `v_cache`: `[B, kv_heads, max_seq, head_dim]` TILE, `q_heads` a multiple of
///   `kv_heads`.
/// - `positions`: UINT32, B values, read by the kernel when it runs.
/// - `scale`: usually `1 / sqrt(head_dim)`.
/// - output: `[1, B, q_heads, head_dim]`, q's dtype (or `opts.dtype`).
pub fn scaled_dot_product_attention_decode(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    positions: &Tensor,
    scale: f32,
    opts: &OpOptions,
) -> Result<Tensor> {
    const OP: &str = "scaled_dot_product_attention_decode";
    check_tile_float(OP, q, "q")?;
    check_tile_float(OP, k_cache, "k_cache")?;
    check_tile_float(OP, v_cache, "v_cache")?;
    let (users, q_heads, d) = decode_layout(OP, q, "q")?;
    let dims = cache_layout(OP, k_cache, "k_cache")?;
    if v_cache.shape() != k_cache.shape() {
        return Err(shape_error(
            OP,
            format!(
                "v_cache {:?} and k_cache {:?} differ; both caches must be [B, kv_heads, max_seq, head_dim]",
                v_cache.shape(),
                k_cache.shape()
            ),
        ));
    }
    let [cache_users, kv_heads, _, cache_d] = dims;
    if cache_users != users || cache_d != d {
        return Err(shape_error(
            OP,
            format!(
                "q {} is {:?} but the caches are {:?}; they must agree on B ({users} vs {cache_users}) and head_dim ({d} vs {cache_d})",
                q.name(),
                q.shape(),
                k_cache.shape()
            ),
        ));
    }
    if q_heads % kv_heads != 0 {
        return Err(shape_error(
            OP,
            format!(
                "{q_heads} query heads do not split into groups over {kv_heads} KV heads; q_heads must be a multiple of kv_heads (pad the query heads with zero weights)"
            ),
        ));
    }
    if !scale.is_finite() {
        return Err(ChipError::InvalidConfig(format!(
            "{OP}: scale {scale} is not finite; use 1 / sqrt(head_dim)"
        )));
    }
    check_per_user(OP, positions, users, "positions")?;
    let out_spec = TensorSpec::new(
        q.shape().to_vec(),
        opts.dtype.unwrap_or(q.dtype()),
        Layout::Tile,
        default_memory_config(q.spec(), opts),
    );
    let launch = OpLaunch {
        name: "ScaledDotProductAttentionDecode",
        attributes: format!("scale={:08x}", scale.to_bits()),
        inputs: vec![q, k_cache, v_cache, positions],
        output_spec: out_spec,
        extra_args: 4,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(SdpaDecodeKernel {
            q: ins[0].clone(),
            k: ins[1].clone(),
            v: ins[2].clone(),
            positions: ins[3].clone(),
            out: out.clone(),
            q_heads,
            dims,
            scale,
        }))
    })
}

struct ArgmaxKernel {
    x: TensorSpec,
    out: TensorSpec,
    cols: usize,
}

impl Kernel for ArgmaxKernel {
    fn name(&self) -> &str {
        "ArgMax"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let x = read_f32(ctx, &self.x, addr[0])?;
        let ids = compute::argmax_rows(&x, self.cols)?;
        write_logical(ctx, &self.out, addr[1], &HostData::U32(ids))
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            flops: self.x.volume() as f64,
            dram_bytes: self.x.buffer_size() as f64,
            ..Default::default()
        }
    }
}

/// `argmax(x, dim)`: the index of the largest value along the last dim (`dim` must be -1 or
/// `rank - 1`), greedy sampling on the device. Ties go to the lowest index; a NaN counts as
/// the largest value (the first NaN wins), as in torch.
///
/// - `x`: any float tensor `[..., vocab]`, TILE or ROW_MAJOR (padding is never a candidate).
/// - output: UINT32 ROW_MAJOR, `x`'s shape without its last dim (`[1, 1, B]` for logits
///   `[1, 1, B, vocab]`; `[1]` for a rank-1 `x`): B values, usable directly as the next step's
///   `embedding` ids.
pub fn argmax(x: &Tensor, dim: i64, opts: &OpOptions) -> Result<Tensor> {
    const OP: &str = "argmax";
    if !x.dtype().is_float() {
        return Err(ChipError::Unsupported {
            op: OP.into(),
            what: format!("x {} of dtype {}", x.name(), x.dtype()),
            hint: "argmax reads BFLOAT16, FLOAT32 or BFLOAT8_B logits; typecast first".into(),
        });
    }
    let rank = x.shape().len() as i64;
    if dim != -1 && dim != rank - 1 {
        return Err(ChipError::Unsupported {
            op: OP.into(),
            what: format!("dim {dim} of x {} (rank {rank})", x.name()),
            hint: "argmax reduces the last dim only; pass dim = -1 (transpose first if needed)"
                .into(),
        });
    }
    if opts.dtype.is_some_and(|d| d != DataType::UInt32) {
        return Err(ChipError::Unsupported {
            op: OP.into(),
            what: format!("output dtype {}", opts.dtype.unwrap_or(DataType::UInt32)),
            hint: "argmax gives UINT32 indices; leave opts.dtype unset".into(),
        });
    }
    let mut shape = x.shape()[..x.shape().len().saturating_sub(1)].to_vec();
    if shape.is_empty() {
        shape.push(1);
    }
    let cols = *x.shape().last().unwrap_or(&1);
    let out_spec = TensorSpec::new(
        shape,
        DataType::UInt32,
        Layout::RowMajor,
        default_memory_config(x.spec(), opts),
    );
    let launch = OpLaunch {
        name: "ArgMax",
        attributes: String::new(),
        inputs: vec![x],
        output_spec: out_spec,
        extra_args: 1,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(ArgmaxKernel {
            x: ins[0].clone(),
            out: out.clone(),
            cols,
        }))
    })
}

//! The decode-step ops on mesh tensors: each chip runs the chip op on its own shards (same
//! order on every chip, so outputs share one address). Shapes and semantics are the chip ops'
//! (`ttmesh_chip::ops`), per chip: with tensor parallelism a chip's `q` holds its own heads and
//! its KV cache its own KV heads. Token ids and positions are replicated device tensors read by
//! the kernels when they run, so one captured mesh trace serves every decode step.

use ttmesh_chip::ops as chip_ops;

use super::{lockstep_op, per_chip, MeshOpOptions};
use crate::error::{invalid, Result};
use crate::tensor::MeshTensor;

/// `embedding(ids, weight)`: ids UINT32 (B values), weight `[vocab, hidden]` -> `[1, 1, B, hidden]`
/// TILE. Ids at or beyond `vocab` give zero rows. See [`chip_ops::embedding`].
pub fn embedding(
    ids: &MeshTensor,
    weight: &MeshTensor,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    lockstep_op(&[ids, weight], opts, |t, o| {
        chip_ops::embedding(t[0], t[1], o)
    })
}

/// `rotary_embedding(x, cos_cache, sin_cache, positions)`: x `[1, B, heads, head_dim]`, caches
/// `[1, 1, max_seq, head_dim]`, positions UINT32 (B values) -> x's shape, HF rotate_half.
/// See [`chip_ops::rotary_embedding`].
pub fn rotary_embedding(
    x: &MeshTensor,
    cos_cache: &MeshTensor,
    sin_cache: &MeshTensor,
    positions: &MeshTensor,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    lockstep_op(&[x, cos_cache, sin_cache, positions], opts, |t, o| {
        chip_ops::rotary_embedding(t[0], t[1], t[2], t[3], o)
    })
}

/// `update_cache(cache, new, positions)`, in place on every chip: cache
/// `[B, kv_heads, max_seq, head_dim]`, new `[1, B, kv_heads, head_dim]`, positions UINT32
/// (B values). `opts` may set only `cq`. See [`chip_ops::update_cache`].
pub fn update_cache(
    cache: &MeshTensor,
    new: &MeshTensor,
    positions: &MeshTensor,
    opts: &MeshOpOptions,
) -> Result<()> {
    if opts.output.is_some() || opts.dtype.is_some() || opts.memory_config.is_some() {
        return Err(invalid(
            "update_cache",
            "it writes into the cache in place; pass MeshOpOptions with only cq set",
        ));
    }
    // In place: each chip runs the op itself (a recorded launch would allocate an output).
    per_chip(&[cache, new, positions], |i, t| {
        chip_ops::update_cache(t[0], t[1], t[2], &opts.for_chip(i))?;
        Ok(t[0].clone())
    })?;
    Ok(())
}

/// `scaled_dot_product_attention_decode(q, k_cache, v_cache, positions, scale)`: q
/// `[1, B, q_heads, head_dim]`, caches `[B, kv_heads, max_seq, head_dim]` (GQA), user b attends
/// to rows `0..=positions[b]` -> q's shape. See [`chip_ops::scaled_dot_product_attention_decode`].
pub fn scaled_dot_product_attention_decode(
    q: &MeshTensor,
    k_cache: &MeshTensor,
    v_cache: &MeshTensor,
    positions: &MeshTensor,
    scale: f32,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    lockstep_op(&[q, k_cache, v_cache, positions], opts, |t, o| {
        chip_ops::scaled_dot_product_attention_decode(t[0], t[1], t[2], t[3], scale, o)
    })
}

/// `argmax(x, dim = -1)`: x `[..., vocab]` float -> UINT32 ROW_MAJOR `[...]` (ties to the lowest
/// index). See [`chip_ops::argmax`].
pub fn argmax(x: &MeshTensor, dim: i64, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[x], opts, |t, o| chip_ops::argmax(t[0], dim, o))
}

//! Laying attention heads out over `n` chips for tensor parallelism, exactly.
//!
//! Each chip gets `kv_slots_per_chip` KV-head slots, each serving `q_per_slot` query heads, so
//! a chip's attention needs only its own heads and its own KV cache. When the heads do not
//! divide over the chips, the model is padded: a query head with zero weights (and zero output
//! projection columns) adds exactly nothing, and a KV head whose query heads sit on several
//! chips is replicated to each of them. SmolLM2 (9 query heads over 3 KV heads) on 8 chips
//! becomes 16 query heads over 8 KV slots: 2 query heads and 1 KV head per chip, 6 chips
//! holding real heads and 2 only padding.

use std::borrow::Cow;

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::weights::{BlockWeights, LlamaWeights};

/// Where every padded head comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadLayout {
    /// The model's own head counts.
    pub head_count: usize,
    pub kv_head_count: usize,
    pub chips: usize,
    pub kv_slots_per_chip: usize,
    pub q_per_slot: usize,
    /// For each KV slot (chip-major), the model's KV head it copies, or `None` for padding.
    pub kv_source: Vec<Option<usize>>,
    /// For each padded query head (slot-major), the model's query head, or `None` for padding.
    pub q_source: Vec<Option<usize>>,
}

impl HeadLayout {
    /// The layout with the fewest padded heads of this shape: when there are at least as many
    /// KV heads as chips, every slot serves a whole GQA group (`ceil(kv / chips)` slots per
    /// chip); otherwise one slot per chip, each group split over as few chips as fit.
    pub fn plan(head_count: usize, kv_head_count: usize, chips: usize) -> Result<Self> {
        if chips == 0 {
            return Err(ModelError::Empty {
                what: "mesh (chips)",
            });
        }
        if kv_head_count == 0 || head_count == 0 || !head_count.is_multiple_of(kv_head_count) {
            return Err(ModelError::UnevenHeads {
                head_count,
                kv_head_count,
            });
        }
        let group = head_count / kv_head_count;
        let (kv_slots_per_chip, q_per_slot) = if kv_head_count >= chips {
            (kv_head_count.div_ceil(chips), group)
        } else {
            // Smallest q with kv_head_count * ceil(group / q) <= chips; q = group always fits.
            let q = (1..=group)
                .find(|&q| kv_head_count * group.div_ceil(q) <= chips)
                .unwrap_or(group);
            (1, q)
        };
        let slots = chips * kv_slots_per_chip;
        let slots_per_kv = group.div_ceil(q_per_slot);
        let mut kv_source = vec![None; slots];
        let mut q_source = vec![None; slots * q_per_slot];
        for kv in 0..kv_head_count {
            for t in 0..group {
                let slot = kv * slots_per_kv + t / q_per_slot;
                kv_source[slot] = Some(kv);
                q_source[slot * q_per_slot + t % q_per_slot] = Some(kv * group + t);
            }
        }
        Ok(Self {
            head_count,
            kv_head_count,
            chips,
            kv_slots_per_chip,
            q_per_slot,
            kv_source,
            q_source,
        })
    }

    pub fn padded_head_count(&self) -> usize {
        self.q_source.len()
    }

    pub fn padded_kv_head_count(&self) -> usize {
        self.kv_source.len()
    }

    /// Whether the layout changes nothing (the heads already divide over the chips).
    pub fn is_identity(&self) -> bool {
        let in_order = |v: &[Option<usize>]| v.iter().enumerate().all(|(i, s)| *s == Some(i));
        in_order(&self.kv_source) && in_order(&self.q_source)
    }
}

impl HeadLayout {
    /// A block's `wq` (`[head_count * head_dim][hidden]`) laid out by this layout: borrowed
    /// when the layout is the identity. One block at a time, so placement never holds a laid
    /// out copy of the whole model.
    pub fn query_rows<'a>(&self, wq: &'a [f32], head_dim: usize, hidden: usize) -> Cow<'a, [f32]> {
        match self.is_identity() {
            true => Cow::Borrowed(wq),
            false => Cow::Owned(gather_rows(wq, &self.q_source, head_dim, hidden)),
        }
    }

    /// A block's `wk` or `wv` (`[kv_head_count * head_dim][hidden]`) laid out by this layout.
    pub fn kv_rows<'a>(&self, w: &'a [f32], head_dim: usize, hidden: usize) -> Cow<'a, [f32]> {
        match self.is_identity() {
            true => Cow::Borrowed(w),
            false => Cow::Owned(gather_rows(w, &self.kv_source, head_dim, hidden)),
        }
    }

    /// A block's `wo` (`[hidden][head_count * head_dim]`) laid out by this layout.
    pub fn output_cols<'a>(&self, wo: &'a [f32], head_dim: usize, hidden: usize) -> Cow<'a, [f32]> {
        match self.is_identity() {
            true => Cow::Borrowed(wo),
            false => Cow::Owned(gather_cols(
                wo,
                &self.q_source,
                head_dim,
                hidden,
                self.head_count * head_dim,
            )),
        }
    }
}

/// Gathers blocks of `block` rows of `src` (`cols` wide) by `sources`, zeros for `None`.
fn gather_rows(src: &[f32], sources: &[Option<usize>], block: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; sources.len() * block * cols];
    for (dst, s) in sources.iter().enumerate() {
        if let Some(s) = s {
            let n = block * cols;
            out[dst * n..(dst + 1) * n].copy_from_slice(&src[s * n..(s + 1) * n]);
        }
    }
    out
}

/// Gathers blocks of `block` columns of `src` (`rows` rows of `src_cols`), zeros for `None`.
fn gather_cols(
    src: &[f32],
    sources: &[Option<usize>],
    block: usize,
    rows: usize,
    src_cols: usize,
) -> Vec<f32> {
    let cols = sources.len() * block;
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for (dst, s) in sources.iter().enumerate() {
            if let Some(s) = s {
                out[r * cols + dst * block..r * cols + (dst + 1) * block].copy_from_slice(
                    &src[r * src_cols + s * block..r * src_cols + (s + 1) * block],
                );
            }
        }
    }
    out
}

impl LlamaWeights {
    /// The same model with its heads laid out by `layout` (padded and replicated): its outputs
    /// equal this model's, up to f32 summation order in the output projection.
    pub fn with_head_layout(&self, layout: &HeadLayout) -> Result<LlamaWeights> {
        let c = &self.config;
        if (layout.head_count, layout.kv_head_count) != (c.head_count, c.kv_head_count) {
            return Err(ModelError::HeadLayoutMismatch {
                layout_heads: layout.head_count,
                layout_kv_heads: layout.kv_head_count,
                model_heads: c.head_count,
                model_kv_heads: c.kv_head_count,
            });
        }
        let (h, hd) = (c.hidden_size, c.head_dim);
        let blocks = self
            .blocks
            .iter()
            .map(|b| BlockWeights {
                attn_norm: b.attn_norm.clone(),
                wq: layout.query_rows(&b.wq, hd, h).into_owned(),
                wk: layout.kv_rows(&b.wk, hd, h).into_owned(),
                wv: layout.kv_rows(&b.wv, hd, h).into_owned(),
                wo: layout.output_cols(&b.wo, hd, h).into_owned(),
                ffn_norm: b.ffn_norm.clone(),
                w_gate: b.w_gate.clone(),
                w_up: b.w_up.clone(),
                w_down: b.w_down.clone(),
            })
            .collect();
        Ok(LlamaWeights {
            config: LlamaConfig {
                head_count: layout.padded_head_count(),
                kv_head_count: layout.padded_kv_head_count(),
                ..c.clone()
            },
            token_embedding: self.token_embedding.clone(),
            blocks,
            output_norm: self.output_norm.clone(),
            output: self.output.clone(),
        })
    }
}

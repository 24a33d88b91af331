//! The host f32 reference forward of a llama decoder, written independently of any device
//! code: plain loops, with `matrixmultiply` for the projections. It gives the token ids the
//! device's decode loop must reproduce.
//!
//! One decode step takes one token per user at that user's own position: embedding, then per
//! block `x += Wo · attention(RoPE(Wq · norm(x)), KV cache)` and
//! `x += W_down · (silu(W_gate · norm(x)) * (W_up · norm(x)))`, then the final norm and the LM
//! head (the token embedding when tied). RoPE is rotate_half (see [`crate::rope`]).

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{ModelError, Result};
use crate::rope::{apply_rope_half, rope_angles};
use crate::weights::{available_host_memory, LlamaWeights};

/// The decoder with a KV cache for `batch` users of up to `max_positions` positions each.
#[derive(Debug)]
pub struct HostReference {
    weights: Arc<LlamaWeights>,
    batch: usize,
    max_positions: usize,
    /// Per block: `[batch][kv_heads][max_positions][head_dim]`.
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
}

impl HostReference {
    pub fn new(weights: Arc<LlamaWeights>, batch: usize, max_positions: usize) -> Result<Self> {
        if batch == 0 {
            return Err(ModelError::Empty { what: "batch" });
        }
        if max_positions == 0 {
            return Err(ModelError::Empty {
                what: "KV cache positions",
            });
        }
        let c = &weights.config;
        if max_positions > c.context_length {
            return Err(ModelError::BeyondContext {
                positions: max_positions,
                context_length: c.context_length,
            });
        }
        let needed_bytes = c.kv_cache_bytes(batch, max_positions);
        if let Some(available_bytes) = available_host_memory() {
            if needed_bytes > available_bytes {
                return Err(ModelError::KvCacheMemory {
                    batch,
                    positions: max_positions,
                    needed_bytes,
                    available_bytes,
                });
            }
        }
        let cache_len = batch * c.kv_dim() * max_positions;
        let cache = vec![vec![0f32; cache_len]; c.block_count];
        Ok(Self {
            batch,
            max_positions,
            k_cache: cache.clone(),
            v_cache: cache,
            weights,
        })
    }

    pub fn weights(&self) -> &LlamaWeights {
        &self.weights
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// One decode step: user `b` feeds `tokens[b]` at `positions[b]` (writing that position of
    /// its KV cache and attending to positions `0..=positions[b]`). Returns the logits,
    /// `[batch][vocab]`.
    pub fn forward_decode(&mut self, tokens: &[u32], positions: &[usize]) -> Result<Vec<f32>> {
        let c = self.weights.config.clone();
        let w = Arc::clone(&self.weights);
        let b_count = self.batch;
        for got in [tokens.len(), positions.len()] {
            if got != b_count {
                return Err(ModelError::BatchMismatch {
                    got,
                    expected: b_count,
                });
            }
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab_size: c.vocab_size,
            });
        }
        if let Some(&position) = positions.iter().find(|&&p| p >= self.max_positions) {
            return Err(ModelError::PositionOutOfRange {
                position,
                max_positions: self.max_positions,
            });
        }

        let (h, hd) = (c.hidden_size, c.head_dim);
        let (q_dim, kv_dim) = (c.head_count * hd, c.kv_dim());
        let mut x = vec![0f32; b_count * h];
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            row.copy_from_slice(&w.token_embedding[t as usize * h..(t as usize + 1) * h]);
        }
        let angles: Vec<Vec<(f32, f32)>> = positions
            .iter()
            .map(|&p| rope_angles(p, hd, c.rope_base))
            .collect();

        for (layer, blk) in w.blocks.iter().enumerate() {
            let normed = rms_norm(&x, &blk.attn_norm, c.rms_norm_eps);
            let mut q = linear(&normed, &blk.wq, b_count, h, q_dim);
            let mut k = linear(&normed, &blk.wk, b_count, h, kv_dim);
            let v = linear(&normed, &blk.wv, b_count, h, kv_dim);
            for b in 0..b_count {
                apply_rope_half(&mut q[b * q_dim..(b + 1) * q_dim], hd, &angles[b]);
                apply_rope_half(&mut k[b * kv_dim..(b + 1) * kv_dim], hd, &angles[b]);
            }
            self.write_cache(layer, &k, &v, positions);
            let attn = self.attention(layer, &q, positions);
            let o = linear(&attn, &blk.wo, b_count, q_dim, h);
            add_in_place(&mut x, &o);

            let normed = rms_norm(&x, &blk.ffn_norm, c.rms_norm_eps);
            let gate = linear(&normed, &blk.w_gate, b_count, h, c.ffn_size);
            let up = linear(&normed, &blk.w_up, b_count, h, c.ffn_size);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| silu(g) * u).collect();
            let down = linear(&act, &blk.w_down, b_count, c.ffn_size, h);
            add_in_place(&mut x, &down);
        }
        let normed = rms_norm(&x, &w.output_norm, c.rms_norm_eps);
        Ok(linear(&normed, w.lm_head(), b_count, h, c.vocab_size))
    }

    /// Offset of `(user, kv_head, position)` in a block's cache.
    fn cache_at(&self, user: usize, kv_head: usize, position: usize) -> usize {
        let c = &self.weights.config;
        ((user * c.kv_head_count + kv_head) * self.max_positions + position) * c.head_dim
    }

    fn write_cache(&mut self, layer: usize, k: &[f32], v: &[f32], positions: &[usize]) {
        let c = self.weights.config.clone();
        for (user, &pos) in positions.iter().enumerate() {
            for g in 0..c.kv_head_count {
                let dst = self.cache_at(user, g, pos);
                let src = user * c.kv_dim() + g * c.head_dim;
                self.k_cache[layer][dst..dst + c.head_dim]
                    .copy_from_slice(&k[src..src + c.head_dim]);
                self.v_cache[layer][dst..dst + c.head_dim]
                    .copy_from_slice(&v[src..src + c.head_dim]);
            }
        }
    }

    /// Causal GQA attention of each user's query against its cache up to its position.
    fn attention(&self, layer: usize, q: &[f32], positions: &[usize]) -> Vec<f32> {
        let c = &self.weights.config;
        let hd = c.head_dim;
        let q_dim = c.head_count * hd;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0f32; self.batch * q_dim];
        let mut scores = Vec::with_capacity(self.max_positions);
        for (user, &pos) in positions.iter().enumerate() {
            for head in 0..c.head_count {
                let kv_head = head / c.group_size();
                let qh = &q[user * q_dim + head * hd..user * q_dim + (head + 1) * hd];
                let base = self.cache_at(user, kv_head, 0);
                let keys = &self.k_cache[layer][base..base + (pos + 1) * hd];
                let values = &self.v_cache[layer][base..base + (pos + 1) * hd];
                scores.clear();
                scores.extend(keys.chunks_exact(hd).map(|k| dot(qh, k) * scale));
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let o = &mut out[user * q_dim + head * hd..user * q_dim + (head + 1) * hd];
                for (p, v) in scores.iter().zip(values.chunks_exact(hd)) {
                    let weight = p / sum;
                    for (acc, &vi) in o.iter_mut().zip(v) {
                        *acc += weight * vi;
                    }
                }
            }
        }
        out
    }

    /// Greedy generation for a batch of one: feeds the prompt token by token through the
    /// decode step (prefill), then `n` greedy tokens. Returns the generated ids.
    pub fn generate(&mut self, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
        Ok(self.generate_batch(&[prompt], n)?.remove(0))
    }

    /// Greedy generation for every user at once, each with its own prompt (of any length): at
    /// each step a user still in its prompt feeds its next prompt token, the others their last
    /// generated token, each at its own position. Returns `n` generated ids per user.
    pub fn generate_batch(&mut self, prompts: &[&[u32]], n: usize) -> Result<Vec<Vec<u32>>> {
        if prompts.len() != self.batch {
            return Err(ModelError::BatchMismatch {
                got: prompts.len(),
                expected: self.batch,
            });
        }
        let vocab = self.weights.config.vocab_size;
        let max_positions = self.max_positions;
        greedy_decode(prompts, n, max_positions, |tokens, positions| {
            let logits = self.forward_decode(tokens, positions)?;
            Ok(logits.chunks_exact(vocab).map(argmax).collect())
        })
    }
}

/// The decode schedule every ttmesh model runs (the host reference and the device loop alike,
/// so their token ids are comparable): prefill token by token through the decode step, then
/// greedy decoding. At step `s` every user is at position `s`; a user still in its prompt feeds
/// its prompt token `s`, the others their last generated token. `step(tokens, positions)`
/// returns each user's greedy next token. Returns `n` generated ids per user.
pub fn greedy_decode(
    prompts: &[&[u32]],
    n: usize,
    max_positions: usize,
    mut step: impl FnMut(&[u32], &[usize]) -> Result<Vec<u32>>,
) -> Result<Vec<Vec<u32>>> {
    if prompts.is_empty() {
        return Err(ModelError::Empty { what: "batch" });
    }
    if prompts.iter().any(|p| p.is_empty()) {
        return Err(ModelError::Empty { what: "prompt" });
    }
    let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    let steps = longest + n.saturating_sub(1);
    if steps > max_positions {
        return Err(ModelError::PositionOutOfRange {
            position: steps - 1,
            max_positions,
        });
    }
    let mut generated: Vec<Vec<u32>> = vec![Vec::with_capacity(n); prompts.len()];
    for s in 0..steps {
        let tokens: Vec<u32> = prompts
            .iter()
            .zip(&generated)
            .map(|(p, g)| p.get(s).copied().or(g.last().copied()).unwrap_or(0))
            .collect();
        let positions = vec![s; prompts.len()];
        let next = step(&tokens, &positions)?;
        if next.len() != prompts.len() {
            return Err(ModelError::BatchMismatch {
                got: next.len(),
                expected: prompts.len(),
            });
        }
        for ((&t, p), g) in next.iter().zip(prompts).zip(&mut generated) {
            if s + 1 >= p.len() && g.len() < n {
                g.push(t);
            }
        }
    }
    Ok(generated)
}

/// Index of the largest value (the first one on ties), as greedy sampling picks.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Up to this many rows, `linear` streams the weights once with dot products (a decode step is
/// matrix-vector work, bound by reading the weights); above it sgemm's blocking pays off.
const DOT_ROWS_UP_TO: usize = 8;

/// `x · W^T` for `rows` rows of `x` (`[rows][k]`) and `W` `[n][k]`: `[rows][n]`.
fn linear(x: &[f32], w: &[f32], rows: usize, k: usize, n: usize) -> Vec<f32> {
    debug_assert_eq!(x.len(), rows * k);
    debug_assert_eq!(w.len(), n * k);
    let mut y = vec![0f32; rows * n];
    if rows <= DOT_ROWS_UP_TO {
        // out[r][j] = x[r] . w[j]; parallel over blocks of output columns (weight rows).
        const COLS_PER_TASK: usize = 64;
        let mut by_col = vec![0f32; n * rows];
        by_col
            .par_chunks_mut(COLS_PER_TASK * rows)
            .enumerate()
            .for_each(|(task, out)| {
                let first = task * COLS_PER_TASK;
                for (c, out_c) in out.chunks_exact_mut(rows).enumerate() {
                    let wj = &w[(first + c) * k..(first + c + 1) * k];
                    for (r, o) in out_c.iter_mut().enumerate() {
                        *o = dot(&x[r * k..(r + 1) * k], wj);
                    }
                }
            });
        for (j, col) in by_col.chunks_exact(rows).enumerate() {
            for (r, &v) in col.iter().enumerate() {
                y[r * n + j] = v;
            }
        }
        return y;
    }
    // SAFETY: the slices hold rows*k, n*k and rows*n values, and the strides address exactly
    // those (x row-major; W read transposed: element (p, j) of W^T is w[j * k + p]).
    unsafe {
        matrixmultiply::sgemm(
            rows,
            k,
            n,
            1.0,
            x.as_ptr(),
            k as isize,
            1,
            w.as_ptr(),
            1,
            k as isize,
            0.0,
            y.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    y
}

fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let h = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(h) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / h as f32;
        let inv = 1.0 / (mean_square + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(&v, &g)| v * inv * g));
    }
    out
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Dot product with eight independent partial sums (so the compiler can vectorise it; the
/// summation order is fixed, so results are repeatable).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

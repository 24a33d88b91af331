//! Rotary position embedding: the one convention ttmesh uses, and the conversion from GGUF's.
//!
//! ttmesh (the device op and every forward) uses the Hugging Face "rotate_half" convention: in
//! each head of dimension `d`, element `i` pairs with element `i + d/2` (for `i < d/2`), and the
//! pair is rotated by `position * theta_i` with `theta_i = base^(-2i/d)`:
//!
//! ```text
//! out[i]       = x[i] * cos - x[i + d/2] * sin
//! out[i + d/2] = x[i + d/2] * cos + x[i] * sin
//! ```
//!
//! llama.cpp's converter permutes the rows of `attn_q.weight` and `attn_k.weight` so that its
//! interleaved-pair RoPE (pairs `(x[2i], x[2i+1])`, same `theta_i`) computes the same attention:
//! within each head, HF row `a * d/2 + i` (`a` in {0, 1}) is stored as GGUF row `2i + a`. The
//! loader undoes that ([`unpermute_rows_from_gguf`]) so the weights are in HF order.

/// `cos` and `sin` of `position * theta_i` for `i < head_dim / 2`.
pub fn rope_angles(position: usize, head_dim: usize, base: f32) -> Vec<(f32, f32)> {
    (0..head_dim / 2)
        .map(|i| {
            // In f64 so the host reference's angles are exact to f32 precision at large positions.
            let theta = (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
            let angle = position as f64 * theta;
            (angle.cos() as f32, angle.sin() as f32)
        })
        .collect()
}

/// The cos and sin tables a device's rotary_embedding op reads, `[max_positions][head_dim]`
/// row-major each, in rotate_half order: `cos[p][i] = cos(p * theta_(i mod d/2))` (both halves of
/// a row hold the same angles), so `out = x * cos + rotate_half(x) * sin` with
/// `rotate_half(x) = (-x[d/2..], x[..d/2])`.
pub fn rope_tables(max_positions: usize, head_dim: usize, base: f32) -> (Vec<f32>, Vec<f32>) {
    let mut cos = Vec::with_capacity(max_positions * head_dim);
    let mut sin = Vec::with_capacity(max_positions * head_dim);
    for p in 0..max_positions {
        let angles = rope_angles(p, head_dim, base);
        for _half in 0..2 {
            cos.extend(angles.iter().map(|a| a.0));
            sin.extend(angles.iter().map(|a| a.1));
        }
    }
    (cos, sin)
}

/// Applies rotate_half RoPE in place to every head of `x` (`heads * head_dim` values).
pub fn apply_rope_half(x: &mut [f32], head_dim: usize, angles: &[(f32, f32)]) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        let (lo, hi) = head.split_at_mut(half);
        for ((a, b), &(cos, sin)) in lo.iter_mut().zip(hi.iter_mut()).zip(angles) {
            let (x0, x1) = (*a, *b);
            *a = x0 * cos - x1 * sin;
            *b = x1 * cos + x0 * sin;
        }
    }
}

/// Applies interleaved-pair RoPE (llama.cpp's "normal" mode, pairs `(2i, 2i+1)`) in place.
/// Only used to check the un-permutation; ttmesh's forwards use [`apply_rope_half`].
pub fn apply_rope_interleaved(x: &mut [f32], head_dim: usize, angles: &[(f32, f32)]) {
    for head in x.chunks_exact_mut(head_dim) {
        for (pair, &(cos, sin)) in head.chunks_exact_mut(2).zip(angles) {
            let (x0, x1) = (pair[0], pair[1]);
            pair[0] = x0 * cos - x1 * sin;
            pair[1] = x1 * cos + x0 * sin;
        }
    }
}

/// Index in GGUF order of HF-order row `hf_row` within a head of `head_dim` rows.
pub fn gguf_row_of_hf_row(hf_row: usize, head_dim: usize) -> usize {
    let half = head_dim / 2;
    let (a, i) = (hf_row / half, hf_row % half);
    2 * i + a
}

/// Which way [`reorder_rows`] moves rows.
#[derive(Clone, Copy)]
enum Direction {
    FromGguf,
    ToGguf,
}

/// Moves every head's rows between GGUF and HF order (`heads * head_dim` rows of `cols`).
fn reorder_rows(
    weights: &[f32],
    heads: usize,
    head_dim: usize,
    cols: usize,
    direction: Direction,
) -> Vec<f32> {
    assert_eq!(
        weights.len(),
        heads * head_dim * cols,
        "Q/K row reorder: shape checked by the loader or writer"
    );
    let mut out = vec![0f32; weights.len()];
    for h in 0..heads {
        for hf_row in 0..head_dim {
            let gguf = (h * head_dim + gguf_row_of_hf_row(hf_row, head_dim)) * cols;
            let hf = (h * head_dim + hf_row) * cols;
            let (src, dst) = match direction {
                Direction::FromGguf => (gguf, hf),
                Direction::ToGguf => (hf, gguf),
            };
            out[dst..dst + cols].copy_from_slice(&weights[src..src + cols]);
        }
    }
    out
}

/// Reorders the rows of a Q or K projection (`heads * head_dim` rows of `cols` values, row-major)
/// from GGUF order to HF order.
pub fn unpermute_rows_from_gguf(
    weights: &[f32],
    heads: usize,
    head_dim: usize,
    cols: usize,
) -> Vec<f32> {
    reorder_rows(weights, heads, head_dim, cols, Direction::FromGguf)
}

/// The inverse of [`unpermute_rows_from_gguf`]: HF order to GGUF order (for the writer).
pub fn permute_rows_to_gguf(
    weights: &[f32],
    heads: usize,
    head_dim: usize,
    cols: usize,
) -> Vec<f32> {
    reorder_rows(weights, heads, head_dim, cols, Direction::ToGguf)
}

//! Naive, obviously-correct f64 versions of every compute kernel, for tests (here and in the
//! chip's kernel tests). They compute in f64 and round once to f32 at the end, so they are the
//! "true" answer the f32 kernels are held to, within the tolerances each test states.
//!
//! They validate input like the fast kernels (same errors) but favour plainness over speed:
//! triple loops, index arithmetic, one pass per formula (matmul's loops are arranged for
//! speed, its sums are a triple loop's).

use super::{check_len, check_rows, checked_product, Activation, BinaryOp, ComputeError};

/// Batched matmul in f64 (same contract as [`super::matmul`]): each output element is the sum
/// over `p` in order of `a[i][p] * b[p][j]` in f64, rounded once to f32, as a plain triple
/// loop computes it (bit for bit). The loops are only arranged for speed, so a large host
/// reference takes seconds, not minutes: rows of the output in groups of `ROWS` (each B value
/// read serves the whole group), columns in blocks of `COLS` (the f64 sums stay in cache), the
/// groups spread over threads. Nothing here shares code with the device kernels (sgemm).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    a: &[f32],
    b: &[f32],
    batch_a: usize,
    batch_b: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f32>, ComputeError> {
    use rayon::prelude::*;
    const ROWS: usize = 8;
    const COLS: usize = 1024;
    let mut out = vec![0f32; super::check_matmul_operands(a, b, batch_a, batch_b, (m, k, n))?];
    if n == 0 {
        return Ok(out);
    }
    out.par_chunks_mut(ROWS * n)
        .enumerate()
        .for_each(|(group, out_rows)| {
            let first = group * ROWS;
            let rows = out_rows.len() / n;
            let mut sums = vec![0f64; rows * COLS];
            for j0 in (0..n).step_by(COLS) {
                let width = COLS.min(n - j0);
                sums.fill(0.0);
                for p in 0..k {
                    for r in 0..rows {
                        // Row `first + r` of the stacked output is row i of batch bi.
                        let row = first + r;
                        let bj = if batch_b == 1 { 0 } else { row / m };
                        let x = a[row * k + p] as f64;
                        let b_row = &b[(bj * k + p) * n + j0..][..width];
                        for (s, &y) in sums[r * COLS..][..width].iter_mut().zip(b_row) {
                            *s += x * y as f64;
                        }
                    }
                }
                for r in 0..rows {
                    for (o, s) in out_rows[r * n + j0..][..width]
                        .iter_mut()
                        .zip(&sums[r * COLS..][..width])
                    {
                        *o = *s as f32;
                    }
                }
            }
        });
    Ok(out)
}

/// One activation in f64.
pub fn activation(op: Activation, x: f64) -> f64 {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    // Gated ops tend to -0 at -inf; say so rather than computing -inf * 0.
    if x == f64::NEG_INFINITY && matches!(op, Activation::Gelu { .. } | Activation::Silu) {
        return -0.0;
    }
    match op {
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::Gelu { approximate: false } => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        Activation::Gelu { approximate: true } => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
        }
        Activation::Silu => x * sigmoid(x),
        Activation::Exp => x.exp(),
        Activation::Reciprocal => 1.0 / x,
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => x.tanh(),
        Activation::Sqrt => x.sqrt(),
        Activation::Neg => -x,
        Activation::Identity => x,
    }
}

/// [`activation`] over a slice, rounded to f32.
pub fn unary(op: Activation, data: &[f32]) -> Vec<f32> {
    data.iter()
        .map(|&x| activation(op, x as f64) as f32)
        .collect()
}

/// The error function in f64: Maclaurin series below 3, the erfc continued fraction above
/// (both converge fast there); accurate to about 1e-14.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    let r = if ax < 3.0 {
        // erf x = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
        let (mut term, mut sum) = (ax, ax);
        for n in 1..200 {
            term *= -ax * ax / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if ax.is_infinite() {
        1.0
    } else {
        // erfc x = e^(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + 2 / ...))))
        let mut f = ax;
        for k in (1..=80).rev() {
            f = ax + (k as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    r.copysign(x)
}

/// numpy broadcasting by index arithmetic: unravel each output index, clamp broadcast dims to
/// 0, ravel into each input.
pub fn binary_broadcast(
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
) -> Result<(Vec<f32>, Vec<usize>), ComputeError> {
    let out_shape = super::check_broadcast_operands(a, a_shape, b, b_shape)?;
    let numel = checked_product("binary_broadcast output", &out_shape)?;
    let ravel = |shape: &[usize], idx: &[usize]| -> usize {
        // shape is right-aligned against idx (the output's full index).
        let skip = idx.len() - shape.len();
        shape
            .iter()
            .zip(&idx[skip..])
            .fold(0, |acc, (&d, &i)| acc * d + if d == 1 { 0 } else { i })
    };
    let mut out = Vec::with_capacity(numel);
    let mut idx = vec![0usize; out_shape.len()];
    for linear in 0..numel {
        let mut rem = linear;
        for d in (0..out_shape.len()).rev() {
            idx[d] = rem % out_shape[d];
            rem /= out_shape[d];
        }
        let x = a[ravel(a_shape, &idx)] as f64;
        let y = b[ravel(b_shape, &idx)] as f64;
        out.push(match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
        } as f32);
    }
    Ok((out, out_shape))
}

/// Softmax per row in f64 (max-subtracted like the kernel, so -inf entries give 0).
pub fn softmax_last_dim(data: &[f32], cols: usize) -> Result<Vec<f32>, ComputeError> {
    check_rows("softmax_last_dim", data.len(), cols)?;
    let mut out = Vec::with_capacity(data.len());
    for row in data.chunks(cols.max(1)) {
        let max = row
            .iter()
            .map(|&x| x as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|&x| (x as f64 - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        out.extend(exps.iter().map(|e| (e / sum) as f32));
    }
    Ok(out)
}

/// RMS norm per row in f64: `x / sqrt(mean(x^2) + eps) * gamma`.
pub fn rms_norm_last_dim(
    data: &[f32],
    cols: usize,
    gamma: Option<&[f32]>,
    epsilon: f32,
) -> Result<Vec<f32>, ComputeError> {
    check_rows("rms_norm_last_dim", data.len(), cols)?;
    if let Some(g) = gamma {
        check_len("rms_norm_last_dim gamma (one per column)", cols, g.len())?;
    }
    let mut out = Vec::with_capacity(data.len());
    for row in data.chunks(cols.max(1)) {
        let mean_sq = row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / cols as f64;
        let rms = (mean_sq + epsilon as f64).sqrt();
        for (j, &x) in row.iter().enumerate() {
            let g = gamma.map_or(1.0, |g| g[j] as f64);
            out.push((x as f64 / rms * g) as f32);
        }
    }
    Ok(out)
}

/// Row-wise bias add in f64.
pub fn add_bias_rows(data: &[f32], cols: usize, bias: &[f32]) -> Result<Vec<f32>, ComputeError> {
    check_rows("add_bias_rows", data.len(), cols)?;
    check_len("add_bias_rows bias (one per column)", cols, bias.len())?;
    Ok(data
        .iter()
        .enumerate()
        .map(|(i, &x)| (x as f64 + bias[i % cols] as f64) as f32)
        .collect())
}

/// Sizes of a decode attention problem: KV cache `[batch, kv_heads, max_seq, head_dim]`,
/// queries `[batch, q_heads, head_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeDims {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub max_seq: usize,
    pub head_dim: usize,
}

fn position(positions: &[u32], b: usize, max_seq: usize) -> Result<usize, ComputeError> {
    let p = positions[b] as usize;
    if p >= max_seq {
        return Err(ComputeError::OutOfRange {
            what: "decode reference: position",
            index: p,
            limit: max_seq,
            fix: "positions must be below the cache length",
        });
    }
    Ok(p)
}

/// Token embedding: for each id, row `id` of `weight` (`vocab x hidden`, row-major); an id at
/// or above the vocabulary gives a row of zeros.
pub fn embedding(ids: &[u32], weight: &[f32], hidden: usize) -> Result<Vec<f32>, ComputeError> {
    check_rows("embedding weight", weight.len(), hidden)?;
    let vocab = weight.len().checked_div(hidden).unwrap_or(0);
    let mut out = vec![0f32; ids.len() * hidden];
    for (b, &id) in ids.iter().enumerate() {
        if (id as usize) < vocab {
            for j in 0..hidden {
                out[b * hidden + j] = weight[id as usize * hidden + j];
            }
        }
    }
    Ok(out)
}

/// HF rotary embedding in f64, literally `x * cos + rotate_half(x) * sin` with
/// `rotate_half(x) = cat(-x[d/2..], x[..d/2])`. `x` is `[batch, heads, d]` (the decode layout
/// `[1, B, H, d]`), `cos` / `sin` are `[max_seq, d]`, one position per user.
pub fn rotary_embedding(
    x: &[f32],
    [batch, heads, d]: [usize; 3],
    cos: &[f32],
    sin: &[f32],
    positions: &[u32],
) -> Result<Vec<f32>, ComputeError> {
    if d % 2 == 1 {
        return Err(ComputeError::OddWidth {
            what: "rotary_embedding head dim",
            cols: d,
        });
    }
    check_len(
        "rotary_embedding x",
        checked_product("rotary_embedding x", &[batch, heads, d])?,
        x.len(),
    )?;
    check_rows("rotary_embedding cos", cos.len(), d)?;
    check_len("rotary_embedding sin", cos.len(), sin.len())?;
    check_len("rotary_embedding positions", batch, positions.len())?;
    let max_seq = cos.len().checked_div(d).unwrap_or(0);
    let mut out = Vec::with_capacity(x.len());
    for b in 0..batch {
        let p = position(positions, b, max_seq)?;
        for h in 0..heads {
            let row = &x[(b * heads + h) * d..][..d];
            let rotated: Vec<f64> = (0..d)
                .map(|i| {
                    if i < d / 2 {
                        -(row[i + d / 2] as f64)
                    } else {
                        row[i - d / 2] as f64
                    }
                })
                .collect();
            for i in 0..d {
                let (c, s) = (cos[p * d + i] as f64, sin[p * d + i] as f64);
                out.push((row[i] as f64 * c + rotated[i] * s) as f32);
            }
        }
    }
    Ok(out)
}

/// The KV cache after writing `new` (`[batch, kv_heads, head_dim]`) at row `positions[b]` of
/// every head of user `b`.
pub fn update_cache(
    cache: &[f32],
    dims: DecodeDims,
    new: &[f32],
    positions: &[u32],
) -> Result<Vec<f32>, ComputeError> {
    let DecodeDims {
        batch,
        kv_heads,
        max_seq,
        head_dim: d,
        ..
    } = dims;
    check_len(
        "update_cache cache",
        checked_product("update_cache cache", &[batch, kv_heads, max_seq, d])?,
        cache.len(),
    )?;
    check_len("update_cache new", batch * kv_heads * d, new.len())?;
    check_len("update_cache positions", batch, positions.len())?;
    let mut out = cache.to_vec();
    for b in 0..batch {
        let p = position(positions, b, max_seq)?;
        for h in 0..kv_heads {
            for i in 0..d {
                out[((b * kv_heads + h) * max_seq + p) * d + i] = new[(b * kv_heads + h) * d + i];
            }
        }
    }
    Ok(out)
}

/// Decode attention in f64: query head `h` of user `b` attends (GQA: to KV head
/// `h / (q_heads / kv_heads)`) over cache rows `0..=positions[b]`, scores scaled by `scale`,
/// softmax, weighted sum of the values. Output `[batch, q_heads, head_dim]`.
pub fn sdpa_decode(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    dims: DecodeDims,
    positions: &[u32],
    scale: f32,
) -> Result<Vec<f32>, ComputeError> {
    let DecodeDims {
        batch,
        q_heads,
        kv_heads,
        max_seq,
        head_dim: d,
    } = dims;
    check_len("sdpa_decode q", batch * q_heads * d, q.len())?;
    let cache_len = checked_product("sdpa_decode cache", &[batch, kv_heads, max_seq, d])?;
    check_len("sdpa_decode k_cache", cache_len, k_cache.len())?;
    check_len("sdpa_decode v_cache", cache_len, v_cache.len())?;
    check_len("sdpa_decode positions", batch, positions.len())?;
    if kv_heads == 0 || q_heads % kv_heads != 0 {
        return Err(ComputeError::OutOfRange {
            what: "sdpa_decode: kv heads",
            index: kv_heads,
            limit: q_heads,
            fix: "the query heads must be a whole multiple of the KV heads",
        });
    }
    let group = q_heads / kv_heads;
    let mut out = Vec::with_capacity(q.len());
    for b in 0..batch {
        let p = position(positions, b, max_seq)?;
        for h in 0..q_heads {
            let slice = (b * kv_heads + h / group) * max_seq;
            let qr = &q[(b * q_heads + h) * d..][..d];
            let scores: Vec<f64> = (0..=p)
                .map(|j| {
                    let kr = &k_cache[(slice + j) * d..][..d];
                    scale as f64
                        * qr.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for i in 0..d {
                let acc: f64 = (0..=p)
                    .map(|j| weights[j] * v_cache[(slice + j) * d + i] as f64)
                    .sum();
                out.push((acc / total) as f32);
            }
        }
    }
    Ok(out)
}

/// Argmax of each row of `cols`: the first NaN if the row has one, else the first index
/// holding the row's maximum.
pub fn argmax_last_dim(data: &[f32], cols: usize) -> Result<Vec<u32>, ComputeError> {
    check_rows("argmax_last_dim", data.len(), cols)?;
    Ok(data
        .chunks(cols.max(1))
        .map(|row| {
            if let Some(i) = row.iter().position(|x| x.is_nan()) {
                return i as u32;
            }
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            row.iter().position(|&x| x == max).unwrap_or(0) as u32
        })
        .collect())
}

/// Row-major strides of `shape` (the last dim varies fastest).
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    strides
}

/// The multi-index of flat position `flat` in `shape` (row-major).
fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        index[k] = flat % shape[k];
        flat /= shape[k];
    }
    index
}

fn shapes_error(what: &'static str, detail: String) -> ComputeError {
    ComputeError::Shapes { what, detail }
}

/// `permute`: output dim `k` is input dim `dims[k]`, i.e. `out[i_0..i_n] = in[j]` with
/// `j[dims[k]] = i_k`. Each output element looks up its input element one at a time.
pub fn permute<T: Copy>(
    data: &[T],
    shape: &[usize],
    dims: &[usize],
) -> Result<Vec<T>, ComputeError> {
    check_len("permute", checked_product("permute", shape)?, data.len())?;
    let mut seen = vec![false; shape.len()];
    for &d in dims {
        if d >= shape.len() || std::mem::replace(&mut seen[d], true) {
            return Err(shapes_error(
                "permute",
                format!("dims {dims:?} are not a permutation of 0..{}", shape.len()),
            ));
        }
    }
    if dims.len() != shape.len() {
        return Err(shapes_error(
            "permute",
            format!("dims {dims:?} are not a permutation of 0..{}", shape.len()),
        ));
    }
    let out_shape: Vec<usize> = dims.iter().map(|&d| shape[d]).collect();
    let in_strides = strides_of(shape);
    Ok((0..data.len())
        .map(|flat| {
            let i = unflatten(flat, &out_shape);
            let src: usize = (0..dims.len()).map(|k| i[k] * in_strides[dims[k]]).sum();
            data[src]
        })
        .collect())
}

/// `slice`: the elements whose index lies in `begins[k]..ends[k]` on every dim, in order.
/// Walks the input and keeps what falls inside (the device gathers from the output side).
pub fn slice<T: Copy>(
    data: &[T],
    shape: &[usize],
    begins: &[usize],
    ends: &[usize],
) -> Result<Vec<T>, ComputeError> {
    check_len("slice", checked_product("slice", shape)?, data.len())?;
    let fits = begins.len() == shape.len()
        && ends.len() == shape.len()
        && (0..shape.len()).all(|k| begins[k] <= ends[k] && ends[k] <= shape[k]);
    if !fits {
        return Err(shapes_error(
            "slice",
            format!("begins {begins:?} and ends {ends:?} do not fit shape {shape:?}"),
        ));
    }
    Ok(data
        .iter()
        .enumerate()
        .filter(|(flat, _)| {
            let i = unflatten(*flat, shape);
            (0..shape.len()).all(|k| begins[k] <= i[k] && i[k] < ends[k])
        })
        .map(|(_, &v)| v)
        .collect())
}

/// `concat` along `dim`: for each index of the dims before `dim`, each part's block in turn.
pub fn concat<T: Copy>(parts: &[(&[T], &[usize])], dim: usize) -> Result<Vec<T>, ComputeError> {
    let Some((_, first)) = parts.first() else {
        return Err(shapes_error("concat", "no parts".into()));
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (data, shape) in parts {
        check_len("concat", checked_product("concat", shape)?, data.len())?;
        let same = shape.len() == first.len()
            && dim < shape.len()
            && (0..shape.len()).all(|k| k == dim || shape[k] == first[k]);
        if !same {
            return Err(shapes_error(
                "concat",
                format!("part {shape:?} does not match {first:?} outside dim {dim}"),
            ));
        }
        // One block per outer index: this part's dims from `dim` on.
        blocks.push(checked_product("concat", &shape[dim..])?);
    }
    let outer = checked_product("concat", &first[..dim])?;
    let mut out = Vec::new();
    for o in 0..outer {
        for ((data, _), &block) in parts.iter().zip(&blocks) {
            out.extend_from_slice(&data[o * block..(o + 1) * block]);
        }
    }
    Ok(out)
}

/// Checks `|got - want| <= atol + rtol * |want|` elementwise (NaN matches NaN, infinities
/// must match exactly). On failure the message names the worst element, for test output.
pub fn check_close(got: &[f32], want: &[f32], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs expected {}", got.len(), want.len()));
    }
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g as f64, w as f64);
        let excess = if g.is_nan() || w.is_nan() || g.is_infinite() || w.is_infinite() {
            // Both NaN, or the same infinity, is a match; anything else is maximally wrong.
            if (g.is_nan() && w.is_nan()) || g == w {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (g - w).abs() - (atol + rtol * w.abs())
        };
        if excess > 0.0 && !matches!(worst, Some((_, e)) if e >= excess) {
            worst = Some((i, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "element {i}: got {} but expected {} (rtol {rtol}, atol {atol})",
            got[i], want[i]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-3.5, -0.999_999_256_901_627_7),
            (6.0, 0.999_999_999_999_999_98),
        ] {
            assert!(
                (erf(x) - want).abs() < 1e-13,
                "erf({x}) = {} vs {want}",
                erf(x)
            );
        }
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
    }

    #[test]
    fn reference_matmul_and_broadcast_known() {
        let c = matmul(&[1., 2., 3., 4.], &[5., 6., 7., 8.], 1, 1, 2, 2, 2).unwrap();
        assert_eq!(c, vec![19., 22., 43., 50.]);
        let (out, shape) =
            binary_broadcast(BinaryOp::Add, &[1., 2.], &[2, 1], &[10., 20., 30.], &[3]).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(out, vec![11., 21., 31., 12., 22., 32.]);
    }

    #[test]
    fn check_close_can_fail() {
        assert!(check_close(&[1.0, f32::NAN], &[1.0, f32::NAN], 0.0, 0.0).is_ok());
        let err = check_close(&[1.0, 2.5], &[1.0, 2.0], 0.1, 0.0).unwrap_err();
        assert_eq!(err, "element 1: got 2.5 but expected 2 (rtol 0.1, atol 0)");
        assert!(check_close(&[f32::INFINITY], &[f32::MAX], 1.0, 1.0).is_err());
        assert!(check_close(&[1.0], &[1.0, 2.0], 1.0, 1.0).is_err());
    }

    /// The blocked, threaded matmul gives a plain triple loop's bits: odd row counts that
    /// split groups across batches, widths across column blocks, shared and batched B.
    #[test]
    fn matmul_gives_the_triple_loops_bits() {
        let value = |i: usize| ((i * 7919 % 2003) as f32 - 1001.0) / 97.0;
        for (batch_a, batch_b, m, k, n) in [
            (1, 1, 1, 1, 1),
            (3, 1, 5, 17, 1030),
            (3, 3, 9, 33, 2049),
            (2, 2, 8, 0, 7),
            (1, 1, 13, 64, 1024),
        ] {
            let a: Vec<f32> = (0..batch_a * m * k).map(value).collect();
            let b: Vec<f32> = (0..batch_b * k * n).map(|i| value(i + 5)).collect();
            let got = matmul(&a, &b, batch_a, batch_b, m, k, n).unwrap();
            let mut want = vec![0f32; batch_a * m * n];
            for bi in 0..batch_a {
                let bj = if batch_b == 1 { 0 } else { bi };
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0f64;
                        for p in 0..k {
                            acc += a[(bi * m + i) * k + p] as f64 * b[(bj * k + p) * n + j] as f64;
                        }
                        want[(bi * m + i) * n + j] = acc as f32;
                    }
                }
            }
            let same = got
                .iter()
                .zip(&want)
                .all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(
                same && got.len() == want.len(),
                "{batch_a}x{m}x{k}x{n} batch_b {batch_b}"
            );
        }
    }
}

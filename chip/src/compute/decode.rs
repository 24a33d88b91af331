//! The math of a decoder-only LLM's decode-step kernels that matmul and the row ops do not
//! cover: rotary position embedding (HF "rotate_half"), attention of one query row over cached
//! keys and values, and argmax over a row. f32 throughout, as the chip's kernels compute;
//! [`super::reference`] holds independent f64 versions.

use super::{check_len, check_rows, ComputeError};

/// Rotates one head row of `d` values in place by HF's "rotate_half" convention: the pairs are
/// `(x[i], x[i + d/2])`, and
/// `out[i] = x[i] cos[i] - x[i + d/2] sin[i]`, `out[i + d/2] = x[i + d/2] cos[i + d/2] + x[i] sin[i + d/2]`
/// (`cos`, `sin`: the `d` values of the row's position in the caches, `theta_i = base^(-2i/d)`
/// repeated over both halves).
pub fn rotate_half(row: &mut [f32], cos: &[f32], sin: &[f32]) -> Result<(), ComputeError> {
    let d = row.len();
    if d % 2 == 1 {
        return Err(ComputeError::OddWidth {
            what: "rotate_half head dim",
            cols: d,
        });
    }
    check_len("rotate_half cos row", d, cos.len())?;
    check_len("rotate_half sin row", d, sin.len())?;
    let h = d / 2;
    let (lo, hi) = row.split_at_mut(h);
    for i in 0..h {
        let (a, b) = (lo[i], hi[i]);
        lo[i] = a * cos[i] - b * sin[i];
        hi[i] = b * cos[i + h] + a * sin[i + h];
    }
    Ok(())
}

/// Attention of one query row `q` (`d` values) over `len = k.len() / d` cached rows:
/// `out = softmax(scale * q . k_j) . v`, the softmax max-subtracted, everything in f32.
/// `scores` is scratch (resized here). `len` must be at least 1.
pub fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<(), ComputeError> {
    let d = q.len();
    check_rows("attend keys", k.len(), d)?;
    check_len("attend values", k.len(), v.len())?;
    check_len("attend output", d, out.len())?;
    let len = k.len().checked_div(d).unwrap_or(0);
    if len == 0 {
        return Err(ComputeError::OutOfRange {
            what: "attend: cached rows",
            index: 0,
            limit: 0,
            fix: "attend over at least one cached row (position 0 attends to row 0)",
        });
    }
    scores.clear();
    scores.extend(k.chunks_exact(d).map(|kr| {
        let dot: f32 = kr.iter().zip(q).map(|(a, b)| a * b).sum();
        dot * scale
    }));
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for (p, vr) in scores.iter().zip(v.chunks_exact(d)) {
        let w = p * inv;
        out.iter_mut().zip(vr).for_each(|(o, x)| *o += w * x);
    }
    Ok(())
}

/// Index of the largest value of each row of `cols` values. Ties go to the lowest index; a NaN
/// counts as larger than any number (the first NaN wins), as in torch.argmax.
pub fn argmax_rows(data: &[f32], cols: usize) -> Result<Vec<u32>, ComputeError> {
    check_rows("argmax_rows", data.len(), cols)?;
    if cols > u32::MAX as usize {
        return Err(ComputeError::OutOfRange {
            what: "argmax_rows: row width",
            index: cols,
            limit: u32::MAX as usize,
            fix: "indices are UINT32; split the row",
        });
    }
    if data.is_empty() {
        return Ok(Vec::new());
    }
    Ok(data.chunks_exact(cols).map(argmax_row).collect())
}

/// The first NaN's index if there is one, else the first index of the largest value: the
/// same answer as a scan keeping the best so far (strictly greater moves it on, so ties keep
/// the lowest index, and a NaN beats any number), found in passes that vectorise (a decode
/// step's argmax runs over the whole vocabulary on every chip).
fn argmax_row(row: &[f32]) -> u32 {
    if let Some(i) = row.iter().position(|x| x.is_nan()) {
        return i as u32;
    }
    // Lane-wise maxima of 16 columns, then across lanes: no NaN is left, so the order in
    // which values are compared does not change the maximum (+0 and -0 compare equal below).
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = row.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    row.iter().position(|&x| x == max).unwrap_or(0) as u32
}

#[cfg(test)]
mod argmax_tests {
    use super::argmax_rows;

    /// The scan the passes must agree with.
    fn scan(row: &[f32]) -> u32 {
        let mut best = 0usize;
        for (i, &x) in row.iter().enumerate().skip(1) {
            let b = row[best];
            if !b.is_nan() && (x.is_nan() || x > b) {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn passes_agree_with_the_scan() {
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0,
            -1.0,
        ];
        for len in [1, 2, 15, 16, 17, 33, 100, 1000] {
            for _ in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 10 {
                        0 => specials[(next() % 7) as usize],
                        1..=3 => (next() % 4) as f32, // many ties
                        _ => (next() % 2000) as f32 / 100.0 - 10.0,
                    })
                    .collect();
                assert_eq!(argmax_rows(&row, len).unwrap(), vec![scan(&row)], "{row:?}");
            }
        }
        // All -inf: index 0, as the scan gives.
        assert_eq!(argmax_rows(&[f32::NEG_INFINITY; 40], 40).unwrap(), vec![0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::reference::{self, check_close};
    use proptest::prelude::*;

    /// Deterministic values in [-1, 1) (an LCG).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn rotate_half_known_values() {
        // d = 4: pairs (x0, x2) and (x1, x3); a 90-degree turn (cos 0, sin 1) maps (a, b) to (-b, a).
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rotate_half(&mut x, &[0.0; 4], &[1.0; 4]).unwrap();
        assert_eq!(x, [-3.0, -4.0, 1.0, 2.0]);
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rotate_half(&mut x, &[1.0; 4], &[0.0; 4]).unwrap();
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
        assert!(matches!(
            rotate_half(&mut [0.0; 3], &[0.0; 3], &[0.0; 3]),
            Err(ComputeError::OddWidth { cols: 3, .. })
        ));
    }

    #[test]
    fn attend_known_values() {
        // Two keys, q orthogonal to both: equal weights, the mean of the values.
        let mut out = [0.0f32; 2];
        let mut s = Vec::new();
        attend(
            &[0.0, 0.0],
            &[1.0, 0.0, 0.0, 1.0],
            &[2.0, 4.0, 6.0, 8.0],
            1.0,
            &mut s,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [4.0, 6.0]);
        // One key: the output is its value whatever the score.
        attend(
            &[5.0, 5.0],
            &[1.0, 1.0],
            &[3.0, -1.0],
            0.5,
            &mut s,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [3.0, -1.0]);
        assert!(attend(&[1.0], &[], &[], 1.0, &mut s, &mut [0.0]).is_err());
    }

    #[test]
    fn argmax_ties_and_nan() {
        assert_eq!(
            argmax_rows(&[1.0, 3.0, 3.0, 0.0, -1.0, -1.0], 3).unwrap(),
            vec![1, 0]
        );
        assert_eq!(
            argmax_rows(&[1.0, f32::NAN, 9.0, f32::NAN], 4).unwrap(),
            vec![1]
        );
        assert_eq!(
            argmax_rows(&[f32::NEG_INFINITY, f32::NEG_INFINITY], 2).unwrap(),
            vec![0]
        );
        assert!(argmax_rows(&[1.0; 5], 2).is_err());
    }

    proptest! {
        /// Tolerances against the f64 references: rotary 1e-6 absolute on inputs in [-1, 1];
        /// attention 1e-5 relative + 1e-6 absolute; argmax exact.
        #[test]
        fn decode_math_matches_reference(half in 1usize..40, len in 1usize..70, seed in any::<u64>()) {
            let d = 2 * half;
            let x = data(d, seed);
            let (cos, sin) = (data(d, seed ^ 1), data(d, seed ^ 2));
            let mut got = x.clone();
            rotate_half(&mut got, &cos, &sin).unwrap();
            let want = reference::rotary_embedding(&x, [1, 1, d], &cos, &sin, &[0]).unwrap();
            if let Err(e) = check_close(&got, &want, 0.0, 1e-6) { prop_assert!(false, "rotary: {}", e); }

            let (k, v) = (data(len * d, seed ^ 3), data(len * d, seed ^ 4));
            let mut out = vec![0f32; d];
            attend(&x, &k, &v, 0.3, &mut Vec::new(), &mut out).unwrap();
            let dims = reference::DecodeDims { batch: 1, q_heads: 1, kv_heads: 1, max_seq: len, head_dim: d };
            let want = reference::sdpa_decode(&x, &k, &v, dims, &[len as u32 - 1], 0.3).unwrap();
            if let Err(e) = check_close(&out, &want, 1e-5, 1e-6) { prop_assert!(false, "attend: {}", e); }

            prop_assert_eq!(argmax_rows(&k, d).unwrap(), reference::argmax_last_dim(&k, d).unwrap());
        }
    }
}

//! Row-wise kernels over the last dim: softmax, RMS norm, bias add. Rows are independent, so
//! large inputs split over rayon by whole rows.

use super::{check_len, check_rows, ComputeError, PAR_MIN_ELEMS};
use rayon::prelude::*;

/// Runs `f` on every row of `cols` elements, in parallel when the slice is large.
/// Caller has checked that `cols` divides `data.len()` (or data is empty).
fn each_row(data: &mut [f32], cols: usize, f: impl Fn(&mut [f32]) + Sync + Send) {
    if data.is_empty() {
        return;
    }
    if data.len() < PAR_MIN_ELEMS {
        data.chunks_mut(cols).for_each(f);
    } else {
        let rows_per_job = (PAR_MIN_ELEMS / 2 / cols).max(1);
        data.par_chunks_mut(cols)
            .with_min_len(rows_per_job)
            .for_each(f);
    }
}

/// Softmax over each row of `cols` elements, in place: `exp(x - max) / sum(exp(x - max))`.
/// Subtracting the row max keeps exp from overflowing. A row containing NaN, or all -inf,
/// becomes NaN (0/0), as in numpy and torch.
pub fn softmax_last_dim(data: &mut [f32], cols: usize) -> Result<(), ComputeError> {
    check_rows("softmax_last_dim", data.len(), cols)?;
    each_row(data, cols, |row| {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let mut sum = 0f32;
        for x in row.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|x| *x *= inv);
    });
    Ok(())
}

/// RMS norm over each row, in place: `x / sqrt(mean(x^2) + epsilon) * gamma` (gamma, if given,
/// has `cols` elements and scales each column).
pub fn rms_norm_last_dim(
    data: &mut [f32],
    cols: usize,
    gamma: Option<&[f32]>,
    epsilon: f32,
) -> Result<(), ComputeError> {
    check_rows("rms_norm_last_dim", data.len(), cols)?;
    if let Some(g) = gamma {
        check_len("rms_norm_last_dim gamma (one per column)", cols, g.len())?;
    }
    each_row(data, cols, |row| {
        let mean_sq = row.iter().map(|x| x * x).sum::<f32>() / cols as f32;
        let scale = 1.0 / (mean_sq + epsilon).sqrt();
        match gamma {
            Some(g) => row.iter_mut().zip(g).for_each(|(x, g)| *x = *x * scale * g),
            None => row.iter_mut().for_each(|x| *x *= scale),
        }
    });
    Ok(())
}

/// Adds `bias` (one value per column, `cols` long) to every row, in place: a linear layer's
/// bias after its matmul.
pub fn add_bias_rows(data: &mut [f32], cols: usize, bias: &[f32]) -> Result<(), ComputeError> {
    check_rows("add_bias_rows", data.len(), cols)?;
    check_len("add_bias_rows bias (one per column)", cols, bias.len())?;
    each_row(data, cols, |row| {
        row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::reference::{self, check_close};
    use proptest::prelude::*;

    #[test]
    fn softmax_known_values_and_stability() {
        let mut x = [0.0f32, 0.0, 1000.0, 1000.0];
        softmax_last_dim(&mut x, 2).unwrap();
        assert_eq!(x, [0.5; 4]); // no overflow at 1000
        let mut x = [1.0f32, 2.0, 3.0];
        softmax_last_dim(&mut x, 3).unwrap();
        // e^-2, e^-1, 1 over their sum
        check_close(&x, &[0.090_030_57, 0.244_728_48, 0.665_240_94], 1e-6, 0.0).unwrap();
        let mut x = [f32::NEG_INFINITY, 0.0];
        softmax_last_dim(&mut x, 2).unwrap();
        assert_eq!(x, [0.0, 1.0]);
    }

    #[test]
    fn rms_norm_and_bias_known_values() {
        let mut x = [3.0f32, 4.0];
        rms_norm_last_dim(&mut x, 2, Some(&[1.0, 2.0]), 0.0).unwrap();
        // rms = sqrt((9 + 16) / 2) = 3.5355339
        check_close(&x, &[0.848_528_1, 2.262_741_7], 1e-6, 0.0).unwrap();
        let mut x = [0.0f32; 3];
        rms_norm_last_dim(&mut x, 3, None, 1e-6).unwrap();
        assert_eq!(x, [0.0; 3]); // epsilon keeps 0/0 away
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        add_bias_rows(&mut x, 2, &[10.0, 20.0]).unwrap();
        assert_eq!(x, [11.0, 22.0, 13.0, 24.0]);
    }

    #[test]
    fn bad_row_widths_are_errors() {
        let mut x = [0.0f32; 6];
        let err = softmax_last_dim(&mut x, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "softmax_last_dim: 6 elements do not split into rows of 4; pass cols >= 1 that divides the slice length"
        );
        assert!(softmax_last_dim(&mut x, 0).is_err());
        assert!(softmax_last_dim(&mut [], 0).is_ok());
        assert!(rms_norm_last_dim(&mut x, 3, Some(&[1.0; 2]), 1e-5).is_err());
        let err = add_bias_rows(&mut x, 3, &[1.0; 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "add_bias_rows bias (one per column): expected 3 elements but got 2; pass a slice of exactly 3 elements"
        );
    }

    #[test]
    fn large_inputs_use_parallel_path_correctly() {
        let (rows, cols) = (300, 257);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 8.0)
            .collect();
        let gamma: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32 / 100.0).collect();
        let mut s = x.clone();
        softmax_last_dim(&mut s, cols).unwrap();
        check_close(
            &s,
            &reference::softmax_last_dim(&x, cols).unwrap(),
            1e-5,
            1e-7,
        )
        .unwrap();
        let mut r = x.clone();
        rms_norm_last_dim(&mut r, cols, Some(&gamma), 1e-5).unwrap();
        let want = reference::rms_norm_last_dim(&x, cols, Some(&gamma), 1e-5).unwrap();
        check_close(&r, &want, 1e-5, 1e-6).unwrap();
        let mut b = x.clone();
        add_bias_rows(&mut b, cols, &gamma).unwrap();
        check_close(
            &b,
            &reference::add_bias_rows(&x, cols, &gamma).unwrap(),
            1e-7,
            0.0,
        )
        .unwrap();
    }

    fn rows_data() -> impl Strategy<Value = (Vec<f32>, usize, Vec<f32>)> {
        (1usize..8, 1usize..300).prop_flat_map(|(rows, cols)| {
            (
                prop::collection::vec(-20f32..20.0, rows * cols),
                Just(cols),
                prop::collection::vec(-2f32..2.0, cols),
            )
        })
    }

    proptest! {
        /// Tolerances: softmax 1e-5 relative (+1e-7 absolute for tiny probabilities);
        /// rms_norm 1e-5 relative (+1e-6 absolute); bias add is exact.
        #[test]
        fn row_ops_match_reference((x, cols, gamma) in rows_data(), eps in 1e-6f32..1e-2, use_gamma in any::<bool>()) {
            let mut s = x.clone();
            softmax_last_dim(&mut s, cols).unwrap();
            let want = reference::softmax_last_dim(&x, cols).unwrap();
            if let Err(e) = check_close(&s, &want, 1e-5, 1e-7) { prop_assert!(false, "softmax: {}", e); }

            let g = use_gamma.then_some(gamma.as_slice());
            let mut r = x.clone();
            rms_norm_last_dim(&mut r, cols, g, eps).unwrap();
            let want = reference::rms_norm_last_dim(&x, cols, g, eps).unwrap();
            if let Err(e) = check_close(&r, &want, 1e-5, 1e-6) { prop_assert!(false, "rms_norm: {}", e); }

            let mut b = x.clone();
            add_bias_rows(&mut b, cols, &gamma).unwrap();
            let want = reference::add_bias_rows(&x, cols, &gamma).unwrap();
            prop_assert_eq!(b, want);
        }
    }
}

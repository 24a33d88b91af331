//! Batched matmul on matrixmultiply's sgemm: the chip's matmul kernel wraps this, so it must
//! cost no more than a bare sgemm call.

use super::{check_len, ComputeError};
use rayon::prelude::*;
use std::time::Instant;

/// matrixmultiply splits one sgemm over threads only when `m*k + k*n` reaches this (its
/// threading heuristic: 2 x 2^14). Smaller matrices run single-threaded, so a batch of them
/// is better spread over rayon instead.
const SGEMM_THREADS_FROM: usize = 2 << 14;

/// Batched row-major matmul: `out[i] = a[i] (m x k) * b[i or 0] (k x n)` for `i < batch_a`.
///
/// `batch_b` must be 1 (one B shared by every A, as for weights) or `batch_a`. Lengths must be
/// `a: batch_a*m*k`, `b: batch_b*k*n`, `out: batch_a*m*n`; `out` is overwritten. Accumulates in
/// f32; the summation order is sgemm's, so compare with [`super::reference::matmul`] within a
/// tolerance, not bitwise.
#[allow(clippy::too_many_arguments)] // mirrors BLAS: the dims are the interface
pub fn matmul(
    a: &[f32],
    b: &[f32],
    batch_a: usize,
    batch_b: usize,
    m: usize,
    k: usize,
    n: usize,
    out: &mut [f32],
) -> Result<(), ComputeError> {
    let out_len = super::check_matmul_operands(a, b, batch_a, batch_b, (m, k, n))?;
    check_len("matmul out", out_len, out.len())?;
    if out_len == 0 {
        return Ok(());
    }
    if k == 0 {
        out.fill(0.0); // an empty sum
        return Ok(());
    }
    if batch_b == 1 {
        // Stacked A matrices are one (batch_a*m) x k matrix times the shared B: one big sgemm
        // uses the threads best and pays the packing of B once.
        sgemm_row_major(a, b, batch_a * m, k, n, out);
        return Ok(());
    }
    let (a_sz, b_sz, c_sz) = (m * k, k * n, m * n);
    if a_sz + b_sz < SGEMM_THREADS_FROM {
        out.par_chunks_mut(c_sz)
            .zip(a.par_chunks(a_sz))
            .zip(b.par_chunks(b_sz))
            .for_each(|((c, a), b)| sgemm_row_major(a, b, m, k, n, c));
    } else {
        for ((c, a), b) in out.chunks_mut(c_sz).zip(a.chunks(a_sz)).zip(b.chunks(b_sz)) {
            sgemm_row_major(a, b, m, k, n, c);
        }
    }
    Ok(())
}

/// One row-major sgemm, `c = a * b`, lengths already checked by the caller.
fn sgemm_row_major(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, c: &mut [f32]) {
    debug_assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
    // SAFETY: the slices hold exactly m*k, k*n and m*n elements (checked by `matmul`), the
    // strides describe dense row-major matrices inside them, `c` is exclusively borrowed, and
    // beta = 0 means sgemm never reads `c`. The dims fit isize because the slices exist.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Measures [`matmul`] against a bare sgemm call on the same `n x n x n` problem, alternating
/// the two `reps` times each. Returns (matmul GFLOP/s, bare sgemm GFLOP/s); their ratio is
/// the cost of the wrapper. For benchmarks only: timings are noisy, never assert on them.
pub fn bench_matmul(n: usize, reps: usize) -> (f64, f64) {
    let reps = reps.max(1);
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
        .collect();
    let mut c = vec![0f32; n * n];
    // Warm both paths: thread pools, page faults on c.
    let _ = matmul(&a, &b, 1, 1, n, n, n, &mut c);
    sgemm_row_major(&a, &b, n, n, n, &mut c);
    let (mut ours, mut bare) = (0f64, 0f64);
    for _ in 0..reps {
        let t = Instant::now();
        let _ = matmul(&a, &b, 1, 1, n, n, n, &mut c);
        ours += t.elapsed().as_secs_f64();
        let t = Instant::now();
        sgemm_row_major(&a, &b, n, n, n, &mut c);
        bare += t.elapsed().as_secs_f64();
    }
    let flops = 2.0 * (n as f64).powi(3) * reps as f64;
    (flops / ours.max(1e-12) / 1e9, flops / bare.max(1e-12) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::reference::{self, check_close};
    use proptest::prelude::*;

    fn data(len: usize, seed: u64) -> Vec<f32> {
        // A small LCG: deterministic values in [-1, 1).
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn small_known_product() {
        // [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]
        let mut c = [0f32; 4];
        matmul(&[1., 2., 3., 4.], &[5., 6., 7., 8.], 1, 1, 2, 2, 2, &mut c).unwrap();
        assert_eq!(c, [19., 22., 43., 50.]);
        // Batched with its own B per batch; the second B is the identity.
        let mut c = [0f32; 8];
        let a = [1., 2., 3., 4., 1., 2., 3., 4.];
        let b = [5., 6., 7., 8., 1., 0., 0., 1.];
        matmul(&a, &b, 2, 2, 2, 2, 2, &mut c).unwrap();
        assert_eq!(c, [19., 22., 43., 50., 1., 2., 3., 4.]);
    }

    #[test]
    fn degenerate_dims() {
        let mut c = [7f32; 6];
        matmul(&[], &[], 1, 1, 2, 0, 3, &mut c).unwrap();
        assert_eq!(c, [0.0; 6]);
        matmul(&[], &[1.0; 3], 0, 1, 2, 1, 3, &mut []).unwrap();
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut c = [0f32; 4];
        let err = matmul(&[0.0; 4], &[0.0; 4], 1, 1, 2, 2, 2, &mut c[..3]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "matmul out: expected 4 elements but got 3; pass a slice of exactly 4 elements"
        );
        let err = matmul(&[0.0; 12], &[0.0; 8], 3, 2, 2, 2, 2, &mut [0.0; 12]).unwrap_err();
        assert_eq!(
            err,
            ComputeError::BatchMismatch {
                batch_a: 3,
                batch_b: 2
            }
        );
        assert!(matches!(
            matmul(&[0.0; 5], &[0.0; 4], 1, 1, 2, 2, 2, &mut c),
            Err(ComputeError::LengthMismatch {
                what: "matmul a",
                ..
            })
        ));
        assert!(matches!(
            matmul(&[], &[], usize::MAX, 1, 2, 2, 2, &mut c),
            Err(ComputeError::TooLarge { .. })
        ));
    }

    #[test]
    fn large_threaded_paths_match_reference() {
        // Big enough that sgemm threads (one matrix) and the per-batch loop (two) are used.
        for (batch_a, batch_b, m, k, n) in [
            (1, 1, 200, 256, 190),
            (2, 2, 130, 256, 140),
            (3, 1, 70, 64, 50),
        ] {
            let a = data(batch_a * m * k, 1);
            let b = data(batch_b * k * n, 2);
            let mut c = vec![0f32; batch_a * m * n];
            matmul(&a, &b, batch_a, batch_b, m, k, n, &mut c).unwrap();
            let want = reference::matmul(&a, &b, batch_a, batch_b, m, k, n).unwrap();
            check_close(&c, &want, 1e-4, 1e-4).unwrap();
        }
    }

    proptest! {
        /// Tolerance: |got - want| <= 1e-4 + 1e-4 |want| for inputs in [-1, 1] and k <= 256.
        #[test]
        fn matches_reference(
            batch_a in 1usize..5, broadcast_b in any::<bool>(),
            m in 1usize..40, k in 1usize..=256, n in 1usize..40, seed in any::<u64>(),
        ) {
            let batch_b = if broadcast_b { 1 } else { batch_a };
            let a = data(batch_a * m * k, seed);
            let b = data(batch_b * k * n, seed ^ 0x9E37);
            let mut c = vec![f32::NAN; batch_a * m * n];
            matmul(&a, &b, batch_a, batch_b, m, k, n, &mut c).unwrap();
            let want = reference::matmul(&a, &b, batch_a, batch_b, m, k, n).unwrap();
            if let Err(e) = check_close(&c, &want, 1e-4, 1e-4) {
                prop_assert!(false, "{}", e);
            }
        }
    }

    /// `cargo test --release -- --ignored --nocapture bench_matmul_side_by_side`
    #[test]
    #[ignore = "benchmark: prints figures, asserts nothing"]
    fn bench_matmul_side_by_side() {
        for (n, reps) in [(512, 20), (2048, 3)] {
            let (ours, bare) = bench_matmul(n, reps);
            println!(
                "matmul {n}^3: compute::matmul {ours:.1} GFLOP/s, bare sgemm {bare:.1} GFLOP/s, ratio {:.3}",
                ours / bare
            );
        }
    }
}

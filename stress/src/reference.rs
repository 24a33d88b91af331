//! Host references of the stress checks, written from the collectives' definitions with plain
//! index arithmetic (nothing from the device path): which chips form a line, concatenation in
//! mesh order, sums in f64 rounded once to the dtype, chunks in mesh order.
//!
//! Inputs are multiples of 1/4 in [-1, 1): every partial sum of up to 64 of them is k/4 with
//! |k| <= 256, exact in f32 and in bf16's 8 significant bits whatever the order (bf16 partial
//! sums are rounded at every hop), so bf16 and f32 results have one right answer, compared
//! bit for bit. bfloat8_b shares an exponent per 16 values; its reductions are compared within
//! one step of that block's mantissa per rounding.

use ttmesh::DataType;

/// Input values of chip `chip` for a case: `n` multiples of 1/4 in [-1, 1).
pub fn input_values(seed: u64, chip: usize, n: usize) -> Vec<f32> {
    let mut r = crate::cases::Rng::new(seed ^ (chip as u64).wrapping_mul(0x9E37_79B9));
    (0..n).map(|_| (r.below(8) as f32) / 4.0 - 1.0).collect()
}

/// Mesh indices of every line of a `rows x cols` mesh along `axis` (0: columns, 1: rows,
/// None: all chips), each in mesh order (results follow mesh order, not the path taken).
pub fn lines(rows: usize, cols: usize, axis: Option<usize>) -> Vec<Vec<usize>> {
    match axis {
        Some(0) => (0..cols)
            .map(|c| (0..rows).map(|r| r * cols + c).collect())
            .collect(),
        Some(_) => (0..rows)
            .map(|r| (0..cols).map(|c| r * cols + c).collect())
            .collect(),
        None => vec![(0..rows * cols).collect()],
    }
}

/// Outer (before `dim`), extent and inner (after `dim`) element counts.
fn split_at(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim],
        shape[dim + 1..].iter().product(),
    )
}

/// Per-chip data (mesh order) after an all_gather along `dim` on each line.
pub fn all_gather(
    data: &[Vec<f32>],
    shape: &[usize],
    dim: usize,
    lines: &[Vec<usize>],
) -> Vec<Vec<f32>> {
    let (outer, ext, inner) = split_at(shape, dim);
    let mut out = vec![Vec::new(); data.len()];
    for line in lines {
        let mut g = Vec::with_capacity(data[line[0]].len() * line.len());
        for o in 0..outer {
            for &chip in line {
                let block = ext * inner;
                g.extend_from_slice(&data[chip][o * block..(o + 1) * block]);
            }
        }
        for &chip in line {
            out[chip] = g.clone();
        }
    }
    out
}

/// Element-wise f64 sum over each line, given to every chip of it, rounded to `dtype`.
pub fn all_reduce(data: &[Vec<f32>], lines: &[Vec<usize>], dtype: DataType) -> Vec<Vec<f32>> {
    let mut out = vec![Vec::new(); data.len()];
    for line in lines {
        let s = line_sum(data, line, dtype);
        for &chip in line {
            out[chip] = s.clone();
        }
    }
    out
}

/// Sum over each line; the k-th chip of the line (mesh order) keeps chunk k along `dim`.
pub fn reduce_scatter(
    data: &[Vec<f32>],
    shape: &[usize],
    dim: usize,
    lines: &[Vec<usize>],
    dtype: DataType,
) -> Vec<Vec<f32>> {
    let (outer, ext, inner) = split_at(shape, dim);
    let mut out = vec![Vec::new(); data.len()];
    for line in lines {
        let s = line_sum(data, line, dtype);
        let chunk = ext / line.len();
        for (k, &chip) in line.iter().enumerate() {
            let mut c = Vec::with_capacity(s.len() / line.len());
            for o in 0..outer {
                let start = o * ext * inner + k * chunk * inner;
                c.extend_from_slice(&s[start..start + chunk * inner]);
            }
            out[chip] = c;
        }
    }
    out
}

/// NaN is never within.
fn within(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol
}

fn line_sum(data: &[Vec<f32>], line: &[usize], dtype: DataType) -> Vec<f32> {
    (0..data[line[0]].len())
        .map(|e| {
            round_to(
                dtype,
                line.iter().map(|&c| data[c][e] as f64).sum::<f64>() as f32,
            )
        })
        .collect()
}

/// Rounds to bf16 (nearest, ties to even) for bf16; bfloat8_b is compared with a tolerance.
pub fn round_to(dtype: DataType, v: f32) -> f32 {
    match dtype {
        DataType::BFloat16 => {
            let b = v.to_bits();
            let lsb = (b >> 16) & 1;
            f32::from_bits(b.wrapping_add(0x7FFF + lsb) & 0xFFFF_0000)
        }
        _ => v,
    }
}

/// Elements of `got` that differ from `want` (a chip whose length differs counts whole).
/// bf16 and f32 must be equal; bfloat8_b within `roundings` steps of its block's mantissa.
pub fn count_wrong(got: &[Vec<f32>], want: &[Vec<f32>], dtype: DataType, roundings: u32) -> u64 {
    let mut wrong = 0u64;
    for (g, w) in got.iter().zip(want) {
        if g.len() != w.len() {
            wrong += w.len().max(g.len()) as u64;
            continue;
        }
        for (gb, wb) in g.chunks(16).zip(w.chunks(16)) {
            let tol = if dtype == DataType::BFloat8B && roundings > 0 {
                let m = wb.iter().fold(0f32, |a, x| a.max(x.abs()));
                if m > 0.0 {
                    // bfloat8_b: 7 mantissa bits under the block's shared exponent.
                    (2f32).powi(m.log2().floor() as i32 - 6) * roundings as f32
                } else {
                    0.0
                }
            } else {
                0.0
            };
            wrong += gb
                .iter()
                .zip(wb)
                .filter(|(a, b)| !within(**a, **b, tol))
                .count() as u64;
        }
    }
    wrong + (want.len().abs_diff(got.len())) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_then_scatter_of_a_line() {
        // Two chips, shape [1, 4]: gather along dim 1, and the sum scattered back.
        let data = vec![vec![1.0, 2.0, 3.0, 4.0], vec![10.0, 20.0, 30.0, 40.0]];
        let l = lines(1, 2, None);
        let g = all_gather(&data, &[1, 4], 1, &l);
        assert_eq!(g[1], vec![1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]);
        let g0 = all_gather(&data, &[1, 4], 0, &l);
        assert_eq!(g0[0], g[0]);
        let rs = reduce_scatter(&data, &[1, 4], 1, &l, DataType::Float32);
        assert_eq!(rs, vec![vec![11.0, 22.0], vec![33.0, 44.0]]);
        let rs = reduce_scatter(&data, &[2, 2], 1, &l, DataType::Float32);
        assert_eq!(rs, vec![vec![11.0, 33.0], vec![22.0, 44.0]]);
        assert_eq!(
            lines(2, 3, Some(0)),
            vec![vec![0, 3], vec![1, 4], vec![2, 5]]
        );
        assert_eq!(lines(2, 3, Some(1)), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    }

    #[test]
    fn bf16_rounding_and_tolerance() {
        assert_eq!(round_to(DataType::BFloat16, 1.0 + 1.0 / 512.0), 1.0);
        assert_eq!(
            round_to(DataType::BFloat16, 1.0 + 3.0 / 512.0),
            1.0 + 1.0 / 64.0 * 0.5
        );
        let w = vec![vec![1.5f32; 16]];
        assert_eq!(count_wrong(&[vec![1.5; 16]], &w, DataType::BFloat16, 1), 0);
        assert_eq!(count_wrong(&[vec![1.51; 16]], &w, DataType::BFloat8B, 1), 0);
        assert_eq!(
            count_wrong(&[vec![1.51; 16]], &w, DataType::BFloat8B, 0),
            16
        );
        assert_eq!(count_wrong(&[vec![1.6; 16]], &w, DataType::BFloat8B, 1), 16);
        assert_eq!(count_wrong(&[vec![1.5; 15]], &w, DataType::Float32, 0), 16);
    }
}

//! TILE layout: the order in which a Tenstorrent chip stores a tensor's elements.
//!
//! The last two dims (H, W) are padded up to multiples of 32 and cut into 32x32 tiles, visited
//! row-major over the tile grid, one batch slice (all leading dims flattened) after another.
//! Inside a tile the four 16x16 faces come top-left, top-right, bottom-left, bottom-right, and
//! each face is row-major. This is the order the matrix engine consumes, so it is what pages of
//! a TILE tensor hold.

use super::TILE_WIDTH;
use super::{check_len, FormatError, FACE_ELEMS, FACE_HEIGHT, FACE_WIDTH, TILE_ELEMS, TILE_HEIGHT};

/// Below this many elements per rayon job, splitting costs more than it saves.
const MIN_ELEMS_PER_JOB: usize = 1 << 15;

/// Rounds (h, w) up to multiples of 32, the padded extent a TILE tensor occupies.
/// (Saturates instead of overflowing for absurd sizes; real shapes never get there.)
pub fn padded_hw(h: usize, w: usize) -> (usize, usize) {
    (round_up_tile(h), round_up_tile(w))
}

fn round_up_tile(x: usize) -> usize {
    x.div_ceil(TILE_HEIGHT).saturating_mul(TILE_HEIGHT)
}

/// Where logical element (row, col) of one batch slice lands in its TILE-layout slice, for a
/// tensor whose logical width is `width` (padding is accounted for here). Tiles are 32x32 so
/// height padding never shifts an index within a slice.
pub fn tiled_position(width: usize, row: usize, col: usize) -> usize {
    let tiles_per_row = width.div_ceil(TILE_WIDTH);
    let tile = (row / TILE_HEIGHT) * tiles_per_row + col / TILE_WIDTH;
    let (r, c) = (row % TILE_HEIGHT, col % TILE_WIDTH);
    let face = (r / FACE_HEIGHT) * 2 + c / FACE_WIDTH;
    tile * TILE_ELEMS + face * FACE_ELEMS + (r % FACE_HEIGHT) * FACE_WIDTH + c % FACE_WIDTH
}

/// Number of elements a tensor of `shape` occupies in TILE layout (padding included).
pub fn tiled_len(shape: &[usize]) -> Result<usize, FormatError> {
    Ok(Geometry::new("tiled_len", shape)?.tiled_len)
}

/// The numbers every conversion needs, computed once with overflow checks.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    h: usize,
    w: usize,
    /// Tile rows per batch slice.
    ht: usize,
    /// Tile columns.
    wt: usize,
    logical_len: usize,
    tiled_len: usize,
}

impl Geometry {
    fn new(what: &'static str, shape: &[usize]) -> Result<Self, FormatError> {
        let too_large = || FormatError::ShapeTooLarge {
            what,
            shape: shape.to_vec(),
        };
        let (batch, h, w) = match shape {
            [] => return Err(FormatError::EmptyShape { what }),
            [w] => (1, 1, *w),
            [lead @ .., h, w] => {
                let batch = lead
                    .iter()
                    .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                    .ok_or_else(too_large)?;
                (batch, *h, *w)
            }
        };
        let (ht, wt) = (h.div_ceil(TILE_HEIGHT), w.div_ceil(TILE_WIDTH));
        let logical_len = batch
            .checked_mul(h)
            .and_then(|x| x.checked_mul(w))
            .ok_or_else(too_large)?;
        let tiled_len = batch
            .checked_mul(ht)
            .and_then(|x| x.checked_mul(wt))
            .and_then(|x| x.checked_mul(TILE_ELEMS))
            .ok_or_else(too_large)?;
        Ok(Self {
            h,
            w,
            ht,
            wt,
            logical_len,
            tiled_len,
        })
    }

    /// Rayon jobs get at least this many "rows of tiles" so small tensors stay on one thread.
    fn min_bands_per_job(&self) -> usize {
        (MIN_ELEMS_PER_JOB / (self.wt * TILE_ELEMS).max(1)).max(1)
    }
}

/// Converts a logical row-major tensor of `shape` to TILE layout (see the module doc).
///
/// Rank 1 is read as `[1, W]`; dims before the last two are batch. Padding elements are
/// `T::default()`. Errors if `src.len()` is not the product of `shape` or `shape` is empty.
pub fn tilize<T: Copy + Default + Send + Sync>(
    src: &[T],
    shape: &[usize],
) -> Result<Vec<T>, FormatError> {
    let g = Geometry::new("tilize", shape)?;
    check_len("tilize source", g.logical_len, src.len())?;
    let mut out = vec![T::default(); g.tiled_len];
    if g.tiled_len == 0 {
        return Ok(out);
    }
    // One job unit = one row of tiles (32 logical rows) of one batch slice; they are disjoint
    // both in the output (contiguous) and in the source.
    let band = g.wt * TILE_ELEMS;
    let (min_len, elems) = (g.min_bands_per_job(), g.tiled_len);
    crate::par::chunks_indexed(&mut out, band, min_len, elems, |idx, dst| {
        let (b, tr) = (idx / g.ht, idx % g.ht);
        let slice = &src[b * g.h * g.w..(b + 1) * g.h * g.w];
        let rows = TILE_HEIGHT.min(g.h - tr * TILE_HEIGHT);
        for r in 0..rows {
            let src_row = &slice[(tr * TILE_HEIGHT + r) * g.w..][..g.w];
            let face_row = (r / FACE_HEIGHT) * 2;
            let dst_row = (r % FACE_HEIGHT) * FACE_WIDTH;
            // Each logical row splits into 16-element face rows; copy them whole.
            for (seg, chunk) in src_row.chunks(FACE_WIDTH).enumerate() {
                let (tc, fc) = (seg / 2, seg % 2);
                let off = tc * TILE_ELEMS + (face_row + fc) * FACE_ELEMS + dst_row;
                dst[off..off + chunk.len()].copy_from_slice(chunk);
            }
        }
    });
    Ok(out)
}

/// Exact inverse of [`tilize`]: TILE layout back to the logical row-major tensor of `shape`,
/// dropping the padding. Errors if `tiled.len()` is not the padded size of `shape`.
pub fn untilize<T: Copy + Default + Send + Sync>(
    tiled: &[T],
    shape: &[usize],
) -> Result<Vec<T>, FormatError> {
    let g = Geometry::new("untilize", shape)?;
    check_len(
        "untilize source (TILE layout, padded)",
        g.tiled_len,
        tiled.len(),
    )?;
    let mut out = vec![T::default(); g.logical_len];
    if g.logical_len == 0 {
        return Ok(out);
    }
    let slice_len = g.h * g.w;
    let band = g.wt * TILE_ELEMS;
    let min_len = g.min_bands_per_job();
    let elems = g.logical_len;
    crate::par::chunks_indexed(&mut out, slice_len, 1, elems, |b, out_slice| {
        // The last band of a slice may hold fewer than 32 rows; chunks() handles that.
        crate::par::chunks_indexed(out_slice, TILE_HEIGHT * g.w, min_len, elems, |tr, dst| {
            let src = &tiled[(b * g.ht + tr) * band..][..band];
            for (r, dst_row) in dst.chunks_mut(g.w).enumerate() {
                let face_row = (r / FACE_HEIGHT) * 2;
                let src_row = (r % FACE_HEIGHT) * FACE_WIDTH;
                for (seg, chunk) in dst_row.chunks_mut(FACE_WIDTH).enumerate() {
                    let (tc, fc) = (seg / 2, seg % 2);
                    let off = tc * TILE_ELEMS + (face_row + fc) * FACE_ELEMS + src_row;
                    chunk.copy_from_slice(&src[off..off + chunk.len()]);
                }
            }
        });
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Obviously-correct tilize: place each element by index arithmetic.
    fn naive_tilize(src: &[u32], shape: &[usize]) -> Vec<u32> {
        let (batch, h, w) = match shape {
            [w] => (1, 1, *w),
            _ => {
                let r = shape.len();
                (shape[..r - 2].iter().product(), shape[r - 2], shape[r - 1])
            }
        };
        let (hp, wp) = padded_hw(h, w);
        let mut out = vec![0u32; batch * hp * wp];
        for b in 0..batch {
            for row in 0..h {
                for col in 0..w {
                    out[b * hp * wp + tiled_position(w, row, col)] = src[(b * h + row) * w + col];
                }
            }
        }
        out
    }

    #[test]
    fn known_positions_in_one_tile() {
        let src: Vec<u32> = (1..=32 * 32).collect();
        let t = tilize(&src, &[32, 32]).unwrap();
        let at = |row: usize, col: usize| t.iter().position(|&v| v == (row * 32 + col + 1) as u32);
        assert_eq!(at(0, 0), Some(0));
        assert_eq!(at(0, 15), Some(15));
        assert_eq!(at(1, 0), Some(16));
        assert_eq!(at(0, 16), Some(256));
        assert_eq!(at(16, 0), Some(512));
        assert_eq!(at(16, 16), Some(768));
        assert_eq!(at(31, 31), Some(1023));
        assert_eq!(tiled_position(32, 0, 16), 256);
        assert_eq!(tiled_position(32, 16, 0), 512);
        assert_eq!(tiled_position(32, 31, 31), 1023);
    }

    #[test]
    fn known_positions_across_tiles_and_padding() {
        // 40 x 70: 2 x 3 tiles; element (0, 32) starts tile 1, (32, 0) starts tile 3.
        assert_eq!(tiled_position(70, 0, 32), 1024);
        assert_eq!(tiled_position(70, 32, 0), 3 * 1024);
        assert_eq!(tiled_position(70, 33, 65), 5 * 1024 + 16 + 1); // face 0, row 1, col 1
        let src: Vec<u32> = (1..=40 * 70).collect();
        let t = tilize(&src, &[40, 70]).unwrap();
        assert_eq!(t.len(), 64 * 96);
        assert_eq!(t[1024], 33); // (0, 32)
        assert_eq!(t[3 * 1024], 32 * 70 + 1); // (32, 0)
                                              // (0, 70) is padding in the first row of tile 2.
        assert_eq!(t[2 * 1024 + tiled_position(32, 0, 6)], 0);
        assert_eq!(untilize(&t, &[40, 70]).unwrap(), src);
    }

    #[test]
    fn rank1_is_one_row() {
        let src: Vec<u32> = (1..=40).collect();
        let t = tilize(&src, &[40]).unwrap();
        assert_eq!(t.len(), 2 * 1024);
        assert_eq!(&t[..16], &src[..16]);
        assert_eq!(&t[256..272], &src[16..32]);
        assert_eq!(&t[1024..1032], &src[32..40]);
        assert_eq!(untilize(&t, &[40]).unwrap(), src);
    }

    #[test]
    fn empty_and_bad_inputs_are_errors_not_panics() {
        assert_eq!(tilize::<u32>(&[], &[0, 5]).unwrap(), Vec::<u32>::new());
        assert_eq!(untilize::<u32>(&[], &[3, 0, 5]).unwrap(), Vec::<u32>::new());
        assert_eq!(
            tilize::<u32>(&[1], &[]).unwrap_err(),
            FormatError::EmptyShape { what: "tilize" }
        );
        let err = tilize(&[1u32, 2, 3], &[2, 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tilize source: expected 4 elements but got 3; pass a slice of exactly 4 elements"
        );
        assert!(matches!(
            untilize(&[0u32; 1023], &[2, 2]),
            Err(FormatError::LengthMismatch {
                expected: 1024,
                got: 1023,
                ..
            })
        ));
        assert!(matches!(
            tilize::<u32>(&[], &[usize::MAX, 2, 32, 32]),
            Err(FormatError::ShapeTooLarge { .. })
        ));
        assert_eq!(tiled_len(&[3, 33, 1]).unwrap(), 3 * 64 * 32);
    }

    #[test]
    fn large_tensor_uses_parallel_path_correctly() {
        let shape = [3, 130, 300];
        let n: usize = shape.iter().product();
        let src: Vec<u32> = (0..n as u32).collect();
        let t = tilize(&src, &shape).unwrap();
        assert_eq!(t, naive_tilize(&src, &shape));
        assert_eq!(untilize(&t, &shape).unwrap(), src);
    }

    fn shapes() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0usize..3, 1..=4).prop_flat_map(|kinds| {
            // Rank 1..4; last two dims often straddle tile edges, batch dims stay small.
            let r = kinds.len();
            kinds
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    if i + 2 >= r {
                        (1usize..80).boxed()
                    } else {
                        (1usize..4).boxed()
                    }
                })
                .collect::<Vec<_>>()
        })
    }

    proptest! {
        #[test]
        fn tilize_matches_naive_and_round_trips(shape in shapes()) {
            let n: usize = shape.iter().product();
            let src: Vec<u32> = (1..=n as u32).collect();
            let t = tilize(&src, &shape).unwrap();
            prop_assert_eq!(t.len(), tiled_len(&shape).unwrap());
            prop_assert_eq!(&t, &naive_tilize(&src, &shape));
            prop_assert_eq!(untilize(&t, &shape).unwrap(), src);
        }

        #[test]
        fn tilize_f32_round_trips_bitwise(shape in shapes(), seed in any::<u32>()) {
            let n: usize = shape.iter().product();
            let src: Vec<f32> = (0..n)
                .map(|i| f32::from_bits((i as u32).wrapping_mul(2654435761) ^ seed))
                .collect();
            let back = untilize(&tilize(&src, &shape).unwrap(), &shape).unwrap();
            let same = back.iter().zip(&src).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same);
        }
    }
}

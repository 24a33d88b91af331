//! Matmul of a few rows (a decode step: one row per user) by a large tiled B (a weight): B is
//! streamed tile by tile out of device memory and multiplied as it is decoded, so a step costs
//! one pass over B's bytes, as on the chip. Decoding B whole and handing it to sgemm would
//! cost three passes over it in f32 (decode, sgemm's packing, the kernel) for a handful of rows.
//!
//! Each output element sums over K in order on one thread, whatever the thread count: results
//! are repeatable run to run (they differ from sgemm's summation order in the last bits).

use rayon::prelude::*;

use super::io::TileReader;
use crate::error::Result;
use crate::format::{TILE_ELEMS, TILE_WIDTH};

/// At most this many rows (batch x M) take the streaming path; above it sgemm's blocking wins.
pub(crate) const STREAMING_MAX_ROWS: usize = 32;

/// Below this many B elements one thread does it all: a rayon hand-off costs more. Above it
/// too when the chips already fill the host (`device::kernels_may_fan_out`).
const PAR_MIN_B_ELEMS: usize = 1 << 16;

/// Column tiles per task: a task walks its band of B row by row of tiles, so consecutive reads
/// are consecutive pages (B's page order is row-major by tiles), and the next few are asked
/// for ahead (`PREFETCH_AHEAD`); walking one column of tiles at a time jumps a whole row of
/// pages per read.
const BAND_TILES: usize = 16;

/// Tiles of B asked into the cache ahead of the one being decoded. Consecutive pages sit in
/// different DRAM banks, each its own host allocation, so the hardware prefetchers lose the
/// stream at every page: decode's weight reads stalled on memory (the tile decode was 30% of
/// a decode step's CPU). Median traced step, SmolLM2-135M bf16, alternated runs: t3k 74-93 ms
/// without, 54-71 with 1 to 8 ahead; galaxy 285-319 ms without, 249-306 with 2, 223-230
/// with 4.
const PREFETCH_AHEAD: usize = 4;

/// `out (rows x n) = a (rows x k) * b (k x n)`, `b` read tile by tile from `b_tiles`.
pub(crate) fn matmul_streaming_b(
    a: &[f32],
    rows: usize,
    (k, n): (usize, usize),
    b_tiles: &TileReader<'_>,
    out: &mut [f32],
) -> Result<()> {
    debug_assert!(rows <= STREAMING_MAX_ROWS && a.len() == rows * k && out.len() == rows * n);
    let (kt_count, nt_count) = b_tiles.grid();
    // One band of column tiles: its partial sums, `[tile][row]` of 32 values each.
    let band = |scratch: &mut _, tile: &mut Box<[f32; TILE_ELEMS]>, first: usize| {
        let tiles = BAND_TILES.min(nt_count - first);
        let mut acc = vec![[0f32; TILE_WIDTH]; tiles * rows];
        // The tile PREFETCH_AHEAD reads after this one, in this band's order (row of tiles
        // by row of tiles).
        let ahead = |kt: usize, i: usize| {
            let at = kt * tiles + i + PREFETCH_AHEAD;
            (at < kt_count * tiles).then(|| (at / tiles, first + at % tiles))
        };
        // Each bank's read lock once for the band, not twice a tile; nothing in the loop waits.
        let mut reads = b_tiles.held_reads();
        for kt in 0..kt_count {
            let k0 = kt * TILE_WIDTH;
            for (i, acc_tile) in acc.chunks_exact_mut(rows.max(1)).enumerate().take(tiles) {
                if let Some(next) = ahead(kt, i) {
                    b_tiles.prefetch(&mut reads, next);
                }
                b_tiles.read(&mut reads, (kt, first + i), scratch, tile)?;
                accumulate_tile(acc_tile, a, k, k0, TILE_WIDTH.min(k - k0), tile);
            }
        }
        Ok::<_, crate::error::ChipError>((first, acc))
    };
    let init = || (b_tiles.scratch(), Box::new([0f32; TILE_ELEMS]));
    let firsts = (0..nt_count).step_by(BAND_TILES);
    let bands: Vec<(usize, Vec<[f32; TILE_WIDTH]>)> =
        if k * n < PAR_MIN_B_ELEMS || !crate::device::kernels_may_fan_out() {
            let (mut scratch, mut tile) = init();
            firsts
                .map(|first| band(&mut scratch, &mut tile, first))
                .collect::<Result<_>>()?
        } else {
            firsts
                .collect::<Vec<_>>()
                .into_par_iter()
                .map_init(init, |(scratch, tile), first| band(scratch, tile, first))
                .collect::<Result<_>>()?
        };
    if rows == 0 {
        return Ok(());
    }
    for (first, acc) in bands {
        for (i, acc_tile) in acc.chunks_exact(rows).enumerate() {
            let c0 = (first + i) * TILE_WIDTH;
            let width = TILE_WIDTH.min(n - c0);
            for (r, acc_row) in acc_tile.iter().enumerate() {
                out[r * n + c0..][..width].copy_from_slice(&acc_row[..width]);
            }
        }
    }
    Ok(())
}

/// `acc[r] += a[r, k0..k0 + kk_len] * tile[..kk_len]` for every row `r` of `acc`, with FMA
/// where the host has it (the same function, compiled twice).
fn accumulate_tile(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    tile: &[f32; TILE_ELEMS],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above), which is all the
        // target_feature function requires; it has no other preconditions.
        unsafe { accumulate_tile_avx2_fma(acc, a, k, k0, kk_len, tile) };
        return;
    }
    accumulate_tile_generic::<false>(acc, a, k, k0, kk_len, tile);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_tile_avx2_fma(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    tile: &[f32; TILE_ELEMS],
) {
    accumulate_tile_generic::<true>(acc, a, k, k0, kk_len, tile);
}

#[inline(always)]
fn accumulate_tile_generic<const FUSED: bool>(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    tile: &[f32; TILE_ELEMS],
) {
    for (r, acc_row) in acc.iter_mut().enumerate() {
        let a_run = &a[r * k + k0..][..kk_len];
        for (kk, &av) in a_run.iter().enumerate() {
            let b_row: &[f32; TILE_WIDTH] = tile[kk * TILE_WIDTH..][..TILE_WIDTH]
                .try_into()
                .expect("a tile row is 32 values");
            for c in 0..TILE_WIDTH {
                // Without the FMA feature mul_add is a library call: multiply, then add.
                acc_row[c] = if FUSED {
                    av.mul_add(b_row[c], acc_row[c])
                } else {
                    acc_row[c] + av * b_row[c]
                };
            }
        }
    }
}

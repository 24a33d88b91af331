//! Matmul of a few rows (a decode step: one row per user) by a large tiled B (a weight): B is
//! streamed tile by tile out of device memory and multiplied as it is decoded, so a step costs
//! one pass over B's bytes, as on the chip. Decoding B whole and handing it to sgemm would
//! cost three passes over it in f32 (decode, sgemm's packing, the kernel) for a handful of rows.
//!
//! Each output element sums over K in order on one thread, whatever the thread count: results
//! are repeatable run to run (they differ from sgemm's summation order in the last bits).

use rayon::prelude::*;

use super::io::{Bf16Rows, Bfp4Rows, Bfp8Rows, F32Rows, TileReader, TileRowDecode};
use crate::error::{ChipError, Result};
use crate::format::{BFP4_TILE_BYTES, BFP8_TILE_BYTES, TILE_ELEMS, TILE_HEIGHT, TILE_WIDTH};
use crate::tensor::DataType;

/// At most this many rows (batch x M) take the streaming path; above it sgemm's blocking wins.
pub(crate) const STREAMING_MAX_ROWS: usize = 32;

/// Up to this many rows, each tile of B is consumed a tile row at a time straight from its
/// page bytes (32 values decoded into registers, used by every row, dropped): no f32 copy of
/// the tile is written and read back, which was most of a batch-1 step's conversion cost.
/// Above it, the tile is decoded once into f32 and each row's sums stay in registers over it.
const ROW_AT_A_TIME_MAX_ROWS: usize = 8;

/// Below this many B elements one thread does it all: a rayon hand-off costs more. Above it
/// too when the chips already fill the host (`device::kernels_may_fan_out`).
const PAR_MIN_B_ELEMS: usize = 1 << 16;

/// Column tiles per task, at most: a task walks its band of B row by row of tiles, so consecutive reads
/// are consecutive pages (B's page order is row-major by tiles), and the next few are asked
/// for ahead (`PREFETCH_AHEAD`); walking one column of tiles at a time jumps a whole row of
/// pages per read.
const BAND_TILES: usize = 16;

/// Column tiles per band: at most `BAND_TILES`, narrower when the bands go to the pool so
/// that every thread gets an equal share. With 16 at most, 18 tile columns (a 576-wide
/// projection) over two threads went 16 + 2, and one thread did 8/9 of the work.
fn band_width(nt_count: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let bands = nt_count.div_ceil(BAND_TILES).div_ceil(threads) * threads;
    nt_count.div_ceil(bands.max(1)).max(1)
}

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
    let dtype = b_tiles.dtype();
    // One band of column tiles: its partial sums, `[tile][row]` of 32 values each.
    let on_pool = k * n >= PAR_MIN_B_ELEMS && crate::device::kernels_may_fan_out();
    let width = if on_pool {
        band_width(nt_count, rayon::current_num_threads())
    } else {
        BAND_TILES
    };
    let band = |scratch: &mut (Vec<u8>, Vec<f32>),
                tile: &mut Box<[f32; TILE_ELEMS]>,
                first: usize| {
        let tiles = width.min(nt_count - first);
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
                let kk_len = TILE_WIDTH.min(k - k0);
                if rows <= ROW_AT_A_TIME_MAX_ROWS {
                    b_tiles.with_page(&mut reads, (kt, first + i), &mut scratch.0, |page| {
                        accumulate_page(dtype, page, acc_tile, a, (k, k0, kk_len))
                    })??;
                } else {
                    b_tiles.read(&mut reads, (kt, first + i), scratch, tile)?;
                    accumulate_tile(acc_tile, a, k, k0, kk_len, tile);
                }
            }
        }
        Ok::<_, crate::error::ChipError>((first, acc))
    };
    let init = || (b_tiles.scratch(), Box::new([0f32; TILE_ELEMS]));
    let firsts = (0..nt_count).step_by(width);
    let bands: Vec<(usize, Vec<[f32; TILE_WIDTH]>)> = if !on_pool {
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
            multiply_add_row::<FUSED>(acc_row, av, b_row);
        }
    }
}

/// `acc[r] += a[r, k0..k0 + kk_len] * tile[..kk_len]` for every row `r` of `acc`, the tile
/// read a row at a time from its page bytes in `dtype`'s format. Each sum takes the same
/// terms in the same order as [`accumulate_tile`] on the decoded tile, so the same bits.
fn accumulate_page(
    dtype: DataType,
    page: &[u8],
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    at: (usize, usize, usize),
) -> Result<()> {
    match dtype {
        DataType::BFloat16 => accumulate_page_as::<Bf16Rows, 2048>(dtype, page, acc, a, at),
        DataType::Float32 => accumulate_page_as::<F32Rows, 4096>(dtype, page, acc, a, at),
        DataType::BFloat8B => {
            accumulate_page_as::<Bfp8Rows, BFP8_TILE_BYTES>(dtype, page, acc, a, at)
        }
        DataType::BFloat4B => {
            accumulate_page_as::<Bfp4Rows, BFP4_TILE_BYTES>(dtype, page, acc, a, at)
        }
        DataType::UInt32 => Err(ChipError::Data(
            "the streaming matmul got a UINT32 weight; matmul takes float tensors".into(),
        )),
    }
}

fn accumulate_page_as<D: TileRowDecode<N>, const N: usize>(
    dtype: DataType,
    page: &[u8],
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    (k, k0, kk_len): (usize, usize, usize),
) -> Result<()> {
    let page: &[u8; N] = page
        .get(..N)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| {
            ChipError::Data(format!(
            "a {dtype} tile page of {} bytes, expected {N}: the weight's pages are not whole tiles",
            page.len()
        ))
        })?;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("fma") {
            // SAFETY: the CPU supports AVX-512F and FMA (checked just above), which is all
            // the target_feature function requires; it has no other preconditions.
            unsafe { accumulate_rows_avx512_fma::<D, N>(acc, a, k, k0, kk_len, page) };
            return Ok(());
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: as above, for AVX2 and FMA.
            unsafe { accumulate_rows_avx2_fma::<D, N>(acc, a, k, k0, kk_len, page) };
            return Ok(());
        }
    }
    accumulate_rows_generic::<D, N, false>(acc, a, k, k0, kk_len, page);
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
unsafe fn accumulate_rows_avx512_fma<D: TileRowDecode<N>, const N: usize>(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    page: &[u8; N],
) {
    accumulate_rows_generic::<D, N, true>(acc, a, k, k0, kk_len, page);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_rows_avx2_fma<D: TileRowDecode<N>, const N: usize>(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    page: &[u8; N],
) {
    accumulate_rows_generic::<D, N, true>(acc, a, k, k0, kk_len, page);
}

#[inline(always)]
fn accumulate_rows_generic<D: TileRowDecode<N>, const N: usize, const FUSED: bool>(
    acc: &mut [[f32; TILE_WIDTH]],
    a: &[f32],
    k: usize,
    k0: usize,
    kk_len: usize,
    page: &[u8; N],
) {
    let mut b_row = [0f32; TILE_WIDTH];
    let kk_len = kk_len.min(TILE_HEIGHT);
    // One row (batch 1): its sums stay in registers over the whole tile.
    if let [acc_row] = acc {
        let mut sums = *acc_row;
        for (kk, &av) in a[k0..][..kk_len].iter().enumerate() {
            D::row(page, kk, &mut b_row);
            multiply_add_row::<FUSED>(&mut sums, av, &b_row);
        }
        *acc_row = sums;
        return;
    }
    for kk in 0..kk_len {
        D::row(page, kk, &mut b_row);
        for (r, acc_row) in acc.iter_mut().enumerate() {
            multiply_add_row::<FUSED>(acc_row, a[r * k + k0 + kk], &b_row);
        }
    }
}

/// `sums += av * b_row`, fused where the caller is compiled with FMA.
#[inline(always)]
fn multiply_add_row<const FUSED: bool>(
    sums: &mut [f32; TILE_WIDTH],
    av: f32,
    b_row: &[f32; TILE_WIDTH],
) {
    for c in 0..TILE_WIDTH {
        // Without the FMA feature mul_add is a library call: multiply, then add.
        sums[c] = if FUSED {
            av.mul_add(b_row[c], sums[c])
        } else {
            sums[c] + av * b_row[c]
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;

    /// Deterministic values in [-1, 1) (a small LCG: no dependency for a test's noise).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// One tile of `values` (row-major 32x32) as its page in `dtype`, and the page decoded back
    /// row-major: the f32 tile the decode-then-multiply path works on.
    fn page_and_tile(dtype: DataType, values: &[f32]) -> (Vec<u8>, [f32; TILE_ELEMS]) {
        let tiled = format::tilize(values, &[TILE_HEIGHT, TILE_WIDTH]).unwrap();
        let mut page = vec![0u8; dtype.tile_bytes() as usize];
        let mut back = vec![0f32; TILE_ELEMS];
        match dtype {
            DataType::BFloat16 => {
                let mut bits = vec![0u16; TILE_ELEMS];
                format::f32_to_bf16_bits(&tiled, &mut bits).unwrap();
                for (p, b) in page.chunks_exact_mut(2).zip(&bits) {
                    p.copy_from_slice(&b.to_le_bytes());
                }
                format::bf16_bits_to_f32(&bits, &mut back).unwrap();
            }
            DataType::Float32 => {
                for (p, v) in page.chunks_exact_mut(4).zip(&tiled) {
                    p.copy_from_slice(&v.to_le_bytes());
                }
                back.copy_from_slice(&tiled);
            }
            DataType::BFloat8B => {
                format::pack_bfp8_tile(&tiled, &mut page).unwrap();
                format::unpack_bfp8_tile(&page, &mut back).unwrap();
            }
            DataType::BFloat4B => {
                format::pack_bfp4_tile(&tiled, &mut page).unwrap();
                format::unpack_bfp4_tile(&page, &mut back).unwrap();
            }
            DataType::UInt32 => unreachable!("float formats only"),
        }
        let row_major = format::untilize(&back, &[TILE_HEIGHT, TILE_WIDTH]).unwrap();
        (page, row_major.try_into().unwrap())
    }

    /// Multiplying a tile a row at a time from its page gives the bits that decoding it to f32
    /// first gives, in every format, for one row and several, whole and partial K.
    #[test]
    fn row_at_a_time_matches_decoded_tile_bit_for_bit() {
        for (i, dtype) in [
            DataType::BFloat16,
            DataType::Float32,
            DataType::BFloat8B,
            DataType::BFloat4B,
        ]
        .into_iter()
        .enumerate()
        {
            let (page, tile) = page_and_tile(dtype, &values(i as u64, TILE_ELEMS));
            for rows in [1, 2, 3, ROW_AT_A_TIME_MAX_ROWS] {
                for (k, k0) in [(64, 32), (45, 32), (32, 0)] {
                    let kk_len = TILE_WIDTH.min(k - k0);
                    let a = values(100 + rows as u64, rows * k);
                    let start: Vec<[f32; TILE_WIDTH]> = values(7, rows * TILE_WIDTH)
                        .chunks_exact(TILE_WIDTH)
                        .map(|c| c.try_into().unwrap())
                        .collect();
                    let mut want = start.clone();
                    accumulate_tile(&mut want, &a, k, k0, kk_len, &tile);
                    let mut got = start;
                    accumulate_page(dtype, &page, &mut got, &a, (k, k0, kk_len)).unwrap();
                    let bits = |v: &[[f32; TILE_WIDTH]]| {
                        v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>()
                    };
                    assert_eq!(bits(&got), bits(&want), "{dtype} rows {rows} k {k}");
                }
            }
        }
    }

    #[test]
    fn bands_share_the_columns_equally_between_threads() {
        // (tile columns, threads) -> band width
        for (nt, threads, want) in [
            (18, 2, 9),
            (6, 2, 3),
            (48, 2, 12),
            (1536, 2, 16),
            (1, 2, 1),
            (18, 1, 9),
            (40, 3, 14),
        ] {
            assert_eq!(
                band_width(nt, threads),
                want,
                "{nt} columns, {threads} threads"
            );
        }
    }

    #[test]
    fn a_short_page_is_an_error_naming_the_format() {
        let mut acc = vec![[0f32; TILE_WIDTH]];
        let err = accumulate_page(
            DataType::BFloat16,
            &[0u8; 100],
            &mut acc,
            &[0.0; 32],
            (32, 0, 32),
        )
        .unwrap_err();
        assert!(err.to_string().contains("tile page of 100 bytes"), "{err}");
    }
}

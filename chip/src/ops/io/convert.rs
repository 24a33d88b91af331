//! Pure conversion between tile pages (four 16x16 faces, bf16 / f32 / bfloat8_b / bfloat4_b) and bands
//! of logical row-major f32 values: no device memory here. `io` reads and writes the pages;
//! these loops are compiled for AVX-512 or AVX2 where the host has them.

use crate::error::{ChipError, Result};
use crate::format::{
    self, BFP4_TILE_BYTES, BFP8_TILE_BYTES, FACE_ELEMS, FACE_WIDTH, TILE_HEIGHT, TILE_WIDTH,
};
use crate::tensor::DataType;

/// The 16-value face rows of tile column `tc` that hold logical columns: (face column, first
/// logical column, count).
fn face_cols(tc: usize, w: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..2).filter_map(move |fc| {
        let col = tc * 32 + fc * FACE_WIDTH;
        (col < w).then(|| (fc, col, FACE_WIDTH.min(w - col)))
    })
}

/// Element offset in a tile of face row `r` (0..32), face column `fc`.
fn face_offset(r: usize, fc: usize) -> usize {
    ((r / 16) * 2 + fc) * FACE_ELEMS + (r % 16) * FACE_WIDTH
}

/// Decodes one tile page into its place in a band of `rows` logical rows `w` wide.
#[inline(always)]
fn decode_tile(
    dtype: DataType,
    bytes: &[u8],
    tile: &mut [f32],
    band: &mut [f32],
    rows: usize,
    tc: usize,
    w: usize,
) -> Result<()> {
    let size = match dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        // Each 16-value block is one face row: unpacked straight into its place. A macro,
        // not a function taking the unpacker: each arm keeps its own inlined loop (see below).
        DataType::BFloat8B | DataType::BFloat4B => {
            macro_rules! unpack_rows {
                ($page:expr, $unpack:path) => {{
                    let page = $page;
                    let block: &mut [f32; FACE_WIDTH] =
                        (&mut tile[..FACE_WIDTH]).try_into().expect("a face row");
                    for r in 0..rows {
                        for (fc, col, n) in face_cols(tc, w) {
                            let j = face_offset(r, fc) / FACE_WIDTH;
                            let dst = &mut band[r * w + col..][..n];
                            match <&mut [f32; FACE_WIDTH]>::try_from(dst) {
                                Ok(dst) => $unpack(page, j, dst),
                                Err(_) => {
                                    $unpack(page, j, block);
                                    band[r * w + col..][..n].copy_from_slice(&block[..n]);
                                }
                            }
                        }
                    }
                }};
            }
            if dtype == DataType::BFloat8B {
                unpack_rows!(&bytes[..BFP8_TILE_BYTES], format::unpack_bfp8_block);
            } else {
                unpack_rows!(&bytes[..BFP4_TILE_BYTES], format::unpack_bfp4_block);
            }
            return Ok(());
        }
        DataType::UInt32 => return Err(not_float()),
    };
    // The value size is a const parameter, not a function passed in: a function item passed
    // as `impl Fn` was called through a shim per 16-value run that was never inlined, so never
    // compiled for AVX2 either (perf: `Fn::call`, SSE2 code).
    if size == 2 {
        decode_runs::<2>(bytes, band, rows, tc, w);
    } else {
        decode_runs::<4>(bytes, band, rows, tc, w);
    }
    Ok(())
}

#[inline(always)]
fn decode_runs<const SIZE: usize>(
    bytes: &[u8],
    band: &mut [f32],
    rows: usize,
    tc: usize,
    w: usize,
) {
    let (size, run) = (SIZE, decode_run::<SIZE>);
    if rows == TILE_HEIGHT && (tc + 1) * 32 <= w {
        // A whole tile: two 16-value runs per row, no edge checks.
        for r in 0..TILE_HEIGHT {
            let (left, right) = band[r * w + tc * 32..][..32].split_at_mut(16);
            run(&bytes[face_offset(r, 0) * size..][..16 * size], left);
            run(&bytes[face_offset(r, 1) * size..][..16 * size], right);
        }
        return;
    }
    for r in 0..rows {
        for (fc, col, n) in face_cols(tc, w) {
            run(
                &bytes[face_offset(r, fc) * size..][..n * size],
                &mut band[r * w + col..][..n],
            );
        }
    }
}

/// Decodes one row of a tile (32 values: its left face row, then its right) straight from
/// the tile's page bytes, for kernels that consume a tile a row at a time and so never write
/// the whole tile out in f32. `N` is the format's tile page size: a fixed-size page lets the
/// row's offsets go unchecked.
pub(in crate::ops) trait TileRowDecode<const N: usize> {
    /// Row `r` (0..32) of the tile in `page`.
    fn row(page: &[u8; N], r: usize, out: &mut [f32; TILE_WIDTH]);
}

/// bfloat16 tiles (2048-byte pages).
pub(in crate::ops) struct Bf16Rows;
/// float32 tiles (4096-byte pages).
pub(in crate::ops) struct F32Rows;
/// bfloat8_b tiles (1088-byte pages).
pub(in crate::ops) struct Bfp8Rows;
/// bfloat4_b tiles (576-byte pages).
pub(in crate::ops) struct Bfp4Rows;

/// The two halves of a tile row.
#[inline(always)]
fn halves(out: &mut [f32; TILE_WIDTH]) -> (&mut [f32; FACE_WIDTH], &mut [f32; FACE_WIDTH]) {
    let (left, right) = out.split_at_mut(FACE_WIDTH);
    (
        left.try_into().expect("16 values"),
        right.try_into().expect("16 values"),
    )
}

impl TileRowDecode<2048> for Bf16Rows {
    #[inline(always)]
    fn row(page: &[u8; 2048], r: usize, out: &mut [f32; TILE_WIDTH]) {
        let (left, right) = halves(out);
        decode_bf16_run(&page[face_offset(r, 0) * 2..][..32], left);
        decode_bf16_run(&page[face_offset(r, 1) * 2..][..32], right);
    }
}

impl TileRowDecode<4096> for F32Rows {
    #[inline(always)]
    fn row(page: &[u8; 4096], r: usize, out: &mut [f32; TILE_WIDTH]) {
        let (left, right) = halves(out);
        decode_f32_run(&page[face_offset(r, 0) * 4..][..64], left);
        decode_f32_run(&page[face_offset(r, 1) * 4..][..64], right);
    }
}

impl TileRowDecode<BFP8_TILE_BYTES> for Bfp8Rows {
    #[inline(always)]
    fn row(page: &[u8; BFP8_TILE_BYTES], r: usize, out: &mut [f32; TILE_WIDTH]) {
        let (left, right) = halves(out);
        format::unpack_bfp8_block(page, face_offset(r, 0) / FACE_WIDTH, left);
        format::unpack_bfp8_block(page, face_offset(r, 1) / FACE_WIDTH, right);
    }
}

impl TileRowDecode<BFP4_TILE_BYTES> for Bfp4Rows {
    #[inline(always)]
    fn row(page: &[u8; BFP4_TILE_BYTES], r: usize, out: &mut [f32; TILE_WIDTH]) {
        let (left, right) = halves(out);
        format::unpack_bfp4_block(page, face_offset(r, 0) / FACE_WIDTH, left);
        format::unpack_bfp4_block(page, face_offset(r, 1) / FACE_WIDTH, right);
    }
}

/// Decodes whole tiles `tc0..` of a full band (32 rows `w` wide) from their pages, `page`
/// bytes apart in `pages`, a logical row at a time (see [`Tiles::by_rows`]).
#[inline(always)]
fn decode_rows(
    dtype: DataType,
    pages: &[u8],
    page: usize,
    band: &mut [f32],
    w: usize,
    tc0: usize,
) -> Result<()> {
    match dtype {
        DataType::BFloat16 => decode_rows_of::<2>(pages, page, band, w, tc0),
        DataType::Float32 => decode_rows_of::<4>(pages, page, band, w, tc0),
        _ => return Err(not_float()),
    }
    Ok(())
}

#[inline(always)]
fn decode_rows_of<const SIZE: usize>(
    pages: &[u8],
    page: usize,
    band: &mut [f32],
    w: usize,
    tc0: usize,
) {
    let width = pages.len() / page * TILE_WIDTH;
    for r in 0..TILE_HEIGHT {
        let row = &mut band[r * w + tc0 * TILE_WIDTH..][..width];
        for (i, run) in row.chunks_exact_mut(FACE_WIDTH).enumerate() {
            let at = run_in_pages::<SIZE>(page, r, i);
            decode_run::<SIZE>(&pages[at..][..FACE_WIDTH * SIZE], run);
        }
    }
}

/// Byte offset, in a group of pages `page` bytes apart, of the `i`th 16-value run of logical
/// row `r` (run `i` is face column `i % 2` of the group's tile `i / 2`).
#[inline(always)]
fn run_in_pages<const SIZE: usize>(page: usize, r: usize, i: usize) -> usize {
    (i / 2) * page + face_offset(r, i % 2) * SIZE
}

/// Encodes whole tiles `tc0..` of a full band into their pages, `page` bytes apart in
/// `pages`, a logical row at a time: [`decode_rows`]' inverse.
#[inline(always)]
fn encode_rows(
    dtype: DataType,
    band: &[f32],
    w: usize,
    tc0: usize,
    pages: &mut [u8],
    page: usize,
) -> Result<()> {
    match dtype {
        DataType::BFloat16 => encode_rows_of::<2>(band, w, tc0, pages, page),
        DataType::Float32 => encode_rows_of::<4>(band, w, tc0, pages, page),
        _ => return Err(not_float()),
    }
    Ok(())
}

#[inline(always)]
fn encode_rows_of<const SIZE: usize>(
    band: &[f32],
    w: usize,
    tc0: usize,
    pages: &mut [u8],
    page: usize,
) {
    let width = pages.len() / page * TILE_WIDTH;
    for r in 0..TILE_HEIGHT {
        let row = &band[r * w + tc0 * TILE_WIDTH..][..width];
        for (i, run) in row.chunks_exact(FACE_WIDTH).enumerate() {
            let at = run_in_pages::<SIZE>(page, r, i);
            encode_run::<SIZE>(run, &mut pages[at..][..FACE_WIDTH * SIZE]);
        }
    }
}

// Face rows are runs of 16 values: fixed-size arrays let the compiler vectorise a run; a
// partial run (the tensor's right edge) takes the plain loop.

/// One run of values of `SIZE` bytes each (2: bf16, 4: f32).
#[inline(always)]
pub(in crate::ops) fn decode_run<const SIZE: usize>(src: &[u8], dst: &mut [f32]) {
    if SIZE == 2 {
        decode_bf16_run(src, dst)
    } else {
        decode_f32_run(src, dst)
    }
}

#[inline(always)]
fn decode_f32_run(src: &[u8], dst: &mut [f32]) {
    if let (Ok(s), Ok(d)) = (
        <&[u8; 64]>::try_from(src),
        <&mut [f32; 16]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[i] = f32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        }
        return;
    }
    for (d, x) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
    }
}

#[inline(always)]
fn decode_bf16_run(src: &[u8], dst: &mut [f32]) {
    if let (Ok(s), Ok(d)) = (
        <&[u8; 32]>::try_from(src),
        <&mut [f32; 16]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[i] = f32::from_bits((u16::from_le_bytes([s[2 * i], s[2 * i + 1]]) as u32) << 16);
        }
        return;
    }
    for (d, x) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits((u16::from_le_bytes([x[0], x[1]]) as u32) << 16);
    }
}

/// One run of values of `SIZE` bytes each (2: bf16, 4: f32).
#[inline(always)]
fn encode_run<const SIZE: usize>(src: &[f32], dst: &mut [u8]) {
    if SIZE == 2 {
        encode_bf16_run(src, dst)
    } else {
        encode_f32_run(src, dst)
    }
}

#[inline(always)]
fn encode_f32_run(src: &[f32], dst: &mut [u8]) {
    if let (Ok(s), Ok(d)) = (
        <&[f32; 16]>::try_from(src),
        <&mut [u8; 64]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[4 * i..4 * i + 4].copy_from_slice(&s[i].to_le_bytes());
        }
        return;
    }
    for (d, x) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

#[inline(always)]
fn encode_bf16_run(src: &[f32], dst: &mut [u8]) {
    if let (Ok(s), Ok(d)) = (
        <&[f32; 16]>::try_from(src),
        <&mut [u8; 32]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[2 * i..2 * i + 2].copy_from_slice(&bf16_bits(s[i]).to_le_bytes());
        }
        return;
    }
    for (d, x) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&bf16_bits(*x).to_le_bytes());
    }
}

/// f32 to bfloat16 bits, rounding to nearest even; NaN stays a (quiet) NaN. Bit for bit what
/// `half::bf16::from_f32` gives (tested below), written without branches.
#[inline]
fn bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16) as u16;
    let nan = ((x >> 16) | 0x40) as u16;
    if x & 0x7FFF_FFFF > 0x7F80_0000 {
        nan
    } else {
        rounded
    }
}

fn not_float() -> ChipError {
    ChipError::Data("the float tile path got a UINT32 tensor".into())
}

/// Encodes the tile at column `tc` of a band into page bytes; padding is zero.
#[inline(always)]
fn encode_tile(
    dtype: DataType,
    band: &[f32],
    rows: usize,
    tc: usize,
    w: usize,
    tile: &mut [f32],
    bytes: &mut [u8],
) -> Result<()> {
    let full = rows == TILE_HEIGHT && (tc + 1) * 32 <= w;
    let size = match dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        DataType::BFloat8B | DataType::BFloat4B => {
            if !full {
                tile.fill(0.0);
            }
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    tile[face_offset(r, fc)..][..n].copy_from_slice(&band[r * w + col..][..n]);
                }
            }
            if dtype == DataType::BFloat8B {
                format::pack_bfp8_tile(tile, &mut bytes[..BFP8_TILE_BYTES])?;
            } else {
                format::pack_bfp4_tile(tile, &mut bytes[..BFP4_TILE_BYTES])?;
            }
            return Ok(());
        }
        DataType::UInt32 => return Err(not_float()),
    };
    if !full {
        bytes.fill(0); // padding: zero bits are 0.0 in both formats
    }
    if size == 2 {
        encode_runs::<2>(band, bytes, rows, tc, w);
    } else {
        encode_runs::<4>(band, bytes, rows, tc, w);
    }
    Ok(())
}

#[inline(always)]
fn encode_runs<const SIZE: usize>(
    band: &[f32],
    bytes: &mut [u8],
    rows: usize,
    tc: usize,
    w: usize,
) {
    let (size, run) = (SIZE, encode_run::<SIZE>);
    if rows == TILE_HEIGHT && (tc + 1) * 32 <= w {
        for r in 0..TILE_HEIGHT {
            let (left, right) = band[r * w + tc * 32..][..32].split_at(16);
            run(left, &mut bytes[face_offset(r, 0) * size..][..16 * size]);
            run(right, &mut bytes[face_offset(r, 1) * size..][..16 * size]);
        }
        return;
    }
    for r in 0..rows {
        for (fc, col, n) in face_cols(tc, w) {
            run(
                &band[r * w + col..][..n],
                &mut bytes[face_offset(r, fc) * size..][..n * size],
            );
        }
    }
}

// Streaming kernels decode every byte of a weight per step, and every matmul decodes its
// operands and encodes its result: as SSE2 code the conversions (bf16 rounding above all) ran
// scalar and cost more than a 512 matmul's sgemm could spare.
format::simd_where_available! {
    /// [`decode_tile`], vectorised where the host allows.
    pub(super) fn decode_tile_fast(
        dtype: DataType, bytes: &[u8], tile: &mut [f32], band: &mut [f32], rows: usize,
        tc: usize, w: usize
    ) -> Result<()> = decode_tile
}

format::simd_where_available! {
    /// [`decode_rows`], vectorised where the host allows.
    pub(super) fn decode_rows_fast(
        dtype: DataType, pages: &[u8], page: usize, band: &mut [f32], w: usize, tc0: usize
    ) -> Result<()> = decode_rows
}

format::simd_where_available! {
    /// [`encode_rows`], vectorised where the host allows.
    pub(super) fn encode_rows_fast(
        dtype: DataType, band: &[f32], w: usize, tc0: usize, pages: &mut [u8], page: usize
    ) -> Result<()> = encode_rows
}

format::simd_where_available! {
    /// [`encode_tile`], vectorised where the host allows.
    pub(super) fn encode_tile_fast(
        dtype: DataType, band: &[f32], rows: usize, tc: usize, w: usize, tile: &mut [f32],
        bytes: &mut [u8]
    ) -> Result<()> = encode_tile
}

#[cfg(test)]
mod tests {
    use super::bf16_bits;

    #[test]
    fn bf16_bits_matches_half_everywhere() {
        let special = [
            0u32,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFFFF_FFFF,
            0x7F7F_FFFF,
            0x0000_8000,
            0x0001_8000,
            0x3F80_8000,
            0x3F81_8000,
        ];
        let sampled = (0..4_000_000u64).map(|i| (i * 1_073_741_789 % (1 << 32)) as u32);
        for bits in special.into_iter().chain(sampled) {
            let x = f32::from_bits(bits);
            assert_eq!(bf16_bits(x), half::bf16::from_f32(x).to_bits(), "{bits:#x}");
        }
    }
}

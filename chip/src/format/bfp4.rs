//! bfloat4_b: Tenstorrent's block floating point with one shared exponent per 16 values and
//! 4 bits per value, TT-NN's usual format for decode weights on Wormhole and Blackhole.
//!
//! A packed tile is 576 bytes: 64 shared-exponent bytes (one per 16-value block, a face row
//! in TILE order, as in bfloat8_b), then 512 bytes of 4-bit codes, two values per byte, the
//! first of a pair in the low nibble (the hardware packs eight codes per 32-bit word from the
//! low bits up, little-endian).
//!
//! A code is bit 3 = sign, bits 2..=0 = magnitude `m` in 0..=7 with value `m * 2^(E - 129)`,
//! i.e. `m / 4 * 2^(E - 127)`: the block max has the hidden 1 in bit 2 and 2 fraction bits.
//! The rule is bfloat8_b's with 3 magnitude bits instead of 7 (`bfp8.rs`: shared exponent the
//! largest in the block, round to nearest even, saturate, NaN and infinity blocks), so every
//! value is off by at most `2^-3 * max|x|` of its block.

use super::bfp8::{pack_block_codes, unpack_block_codes, whole_tiles, BLOCK};
use super::{check_len, FormatError, TILE_ELEMS};

/// Shared exponent bytes at the start of a packed tile (16 per face, one per face row).
pub const BFP4_EXPONENT_BYTES: usize = TILE_ELEMS / BLOCK;
/// Bytes of one packed bfloat4_b tile: 64 exponents + 512 bytes of codes.
pub const BFP4_TILE_BYTES: usize = BFP4_EXPONENT_BYTES + TILE_ELEMS / 2;

/// Magnitude bits of a code.
const MAG_BITS: u32 = 3;

/// Packs one tile (1024 f32 values in TILE order) into 576 bfloat4_b bytes.
pub fn pack_bfp4_tile(tile: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    check_len("pack_bfp4_tile input tile", TILE_ELEMS, tile.len())?;
    check_len("pack_bfp4_tile output bytes", BFP4_TILE_BYTES, out.len())?;
    let (exps, codes) = out.split_at_mut(BFP4_EXPONENT_BYTES);
    for ((block, exp), packed) in tile
        .chunks_exact(BLOCK)
        .zip(exps.iter_mut())
        .zip(codes.chunks_exact_mut(BLOCK / 2))
    {
        let mut c = [0u8; BLOCK];
        *exp = pack_block_codes::<MAG_BITS>(block, &mut c);
        for (p, pair) in packed.iter_mut().zip(c.chunks_exact(2)) {
            *p = pair[0] | (pair[1] << 4);
        }
    }
    Ok(())
}

/// Unpacks 576 bfloat4_b bytes into one tile of 1024 f32 values in TILE order. Every byte
/// pattern decodes to something, so this only checks lengths.
pub fn unpack_bfp4_tile(bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    check_len("unpack_bfp4_tile input bytes", BFP4_TILE_BYTES, bytes.len())?;
    check_len("unpack_bfp4_tile output tile", TILE_ELEMS, out.len())?;
    for (j, block) in out.chunks_exact_mut(BLOCK).enumerate() {
        let block: &mut [f32; BLOCK] = block.try_into().expect("16-value blocks");
        unpack_bfp4_block(bytes, j, block);
    }
    Ok(())
}

/// Unpacks block `j` (0..64: face `j / 16`, face row `j % 16`) of the 576 bytes of a packed
/// tile into 16 values.
#[inline(always)]
pub fn unpack_bfp4_block(tile_bytes: &[u8], j: usize, out: &mut [f32; BLOCK]) {
    let packed = &tile_bytes[BFP4_EXPONENT_BYTES + j * BLOCK / 2..][..BLOCK / 2];
    let mut c = [0u8; BLOCK];
    for (pair, &p) in c.chunks_exact_mut(2).zip(packed) {
        pair[0] = p & 0x0F;
        pair[1] = p >> 4;
    }
    unpack_block_codes::<MAG_BITS>(tile_bytes[j], &c, out);
}

/// Packs whole tiles (TILE order, `n * 1024` values) into `n * 576` bytes, in parallel.
pub fn pack_bfp4_tiles(tiles: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    let n = whole_tiles("pack_bfp4_tiles input", tiles.len())?;
    check_len(
        "pack_bfp4_tiles output bytes",
        n * BFP4_TILE_BYTES,
        out.len(),
    )?;
    crate::par::try_zip_chunks(
        out,
        BFP4_TILE_BYTES,
        tiles,
        TILE_ELEMS,
        tiles.len(),
        |o, t| pack_bfp4_tile(t, o),
    )
}

/// Unpacks `n * 576` bytes into `n * 1024` values (TILE order), in parallel.
pub fn unpack_bfp4_tiles(bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let n = whole_tiles("unpack_bfp4_tiles output", out.len())?;
    check_len(
        "unpack_bfp4_tiles input bytes",
        n * BFP4_TILE_BYTES,
        bytes.len(),
    )?;
    let elems = out.len();
    crate::par::try_zip_chunks(out, TILE_ELEMS, bytes, BFP4_TILE_BYTES, elems, |o, b| {
        unpack_bfp4_tile(b, o)
    })
}

/// Rounds whole tiles in place to the values bfloat4_b can hold (pack, then unpack).
pub fn quantize_bfp4(tiles: &mut [f32]) -> Result<(), FormatError> {
    whole_tiles("quantize_bfp4 input", tiles.len())?;
    let elems = tiles.len();
    crate::par::try_chunks(tiles, TILE_ELEMS, elems, |tile| {
        let mut packed = [0u8; BFP4_TILE_BYTES];
        pack_bfp4_tile(tile, &mut packed)?;
        unpack_bfp4_tile(&packed, tile)
    })
}

#[cfg(test)]
mod tests;

//! bfloat4_b: Tenstorrent's block floating point with one shared exponent per 16 values and
//! 4 bits per value (Wormhole and Blackhole pack it; tt-metal's LLM demos keep MLP weights in
//! it).
//!
//! A packed tile is 576 bytes: 64 shared-exponent bytes, then 512 bytes holding two values
//! each. Blocks are as in bfloat8_b ([`super::bfp8`]): block j is values `16*j .. 16*j + 16` of
//! the tile in TILE order, and exponent byte j belongs to it.
//!
//! # Encoding (exact rule)
//!
//! - Shared exponent `E` of a block = the largest IEEE biased exponent field among its 16 values
//!   (0 for zeros and subnormals), as bfloat8_b.
//! - Each value becomes one nibble: bit 3 = sign, bits 2..=0 = magnitude `m` in 0..=7, with
//!   value = `m * 2^(E - 129)`, i.e. `m / 4 * 2^(E - 127)`: the block max has the hidden 1 in
//!   bit 2 and 2 fraction bits.
//! - `m` = |x| / 2^(E-129) rounded to nearest, ties to even; 8 saturates to 7.
//! - Value `2i` of a block sits in the low nibble of its byte, value `2i + 1` in the high one
//!   (a ttmesh choice: the order inside a byte is not documented).
//!
//! Error bound: every value is off by at most half a step, `2^-3 * max|x|` of its block (a
//! saturated max by less than a step). NaN and infinity follow bfloat8_b's rule: `E = 255`,
//! magnitude 4 decodes to ±inf, magnitudes above 4 to NaN, below 4 to ±0.

use super::bfp8::{pack_block_codes, unpack_block_codes, whole_tiles, BLOCK};
use super::{check_len, FormatError, TILE_ELEMS};

/// Shared exponent bytes at the start of a packed tile (one per block of 16 values).
pub const BFP4_EXPONENT_BYTES: usize = TILE_ELEMS / BLOCK;
/// Bytes of one packed bfloat4_b tile: 64 exponents + 1024 nibbles.
pub const BFP4_TILE_BYTES: usize = BFP4_EXPONENT_BYTES + TILE_ELEMS / 2;

/// Packs one tile (1024 f32 values in TILE order) into 576 bfloat4_b bytes.
pub fn pack_bfp4_tile(tile: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    check_len("pack_bfp4_tile input tile", TILE_ELEMS, tile.len())?;
    check_len("pack_bfp4_tile output bytes", BFP4_TILE_BYTES, out.len())?;
    let (exps, data) = out.split_at_mut(BFP4_EXPONENT_BYTES);
    for ((block, exp), bytes) in tile
        .chunks_exact(BLOCK)
        .zip(exps.iter_mut())
        .zip(data.chunks_exact_mut(BLOCK / 2))
    {
        let mut nibbles = [0u8; BLOCK];
        *exp = pack_block(block, &mut nibbles);
        for (b, pair) in bytes.iter_mut().zip(nibbles.chunks_exact(2)) {
            *b = pair[0] | pair[1] << 4;
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

/// Unpacks block `j` (0..64) of the 576 bytes of a packed tile into 16 values.
#[inline(always)]
pub fn unpack_bfp4_block(tile_bytes: &[u8], j: usize, out: &mut [f32; BLOCK]) {
    let data = &tile_bytes[BFP4_EXPONENT_BYTES + j * BLOCK / 2..][..BLOCK / 2];
    let mut nibbles = [0u8; BLOCK];
    for (pair, &b) in nibbles.chunks_exact_mut(2).zip(data) {
        pair[0] = b & 0x0F;
        pair[1] = b >> 4;
    }
    unpack_block(tile_bytes[j], &nibbles, out);
}

/// Packs any number of whole tiles (TILE order, `n * 1024` values) into `n * 576` bytes, in
/// parallel.
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

/// Encodes one block of 16 values into 16 nibbles; returns its shared exponent byte.
fn pack_block(block: &[f32], nibbles: &mut [u8; BLOCK]) -> u8 {
    pack_block_codes::<3>(block, nibbles)
}

/// Decodes 16 nibbles with shared exponent `exp`.
#[inline(always)]
fn unpack_block(exp: u8, nibbles: &[u8; BLOCK], out: &mut [f32; BLOCK]) {
    unpack_block_codes::<3>(exp, nibbles, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Independent f64 statement of the rule: scale from the largest binary exponent in the
    /// block, round half to even, clamp to 7 steps.
    fn naive_quantize_block(block: &[f32]) -> Vec<f32> {
        let e_max = block
            .iter()
            .filter(|x| **x != 0.0)
            .map(|x| (x.abs() as f64).log2().floor() as i32)
            .max()
            .map(|e| e.max(-127));
        let Some(e_max) = e_max else {
            return block.to_vec();
        };
        let step = 2f64.powi(e_max - 2);
        block
            .iter()
            .map(|&x| {
                let m = (x.abs() as f64 / step).round_ties_even().min(7.0);
                let v = (m * step) as f32;
                if x.is_sign_negative() {
                    -v
                } else {
                    v
                }
            })
            .collect()
    }

    #[test]
    fn known_bytes() {
        let mut tile = vec![0f32; TILE_ELEMS];
        tile[0] = 1.0; // block 0: E = 127, m = 4
        tile[1] = -0.5; // m = 2, sign set
        tile[2] = 1.125; // halfway between m=4 and 5: ties to even -> 4
        tile[3] = 1.375; // halfway between 5 and 6 -> 6
        tile[4] = 0.1; // below half a step (0.125): zero
        tile[5] = 1.99; // rounds to 8, saturates to 7
        tile[16] = 3.0; // block 1: E = 128, m = 6
        let mut b = vec![0u8; BFP4_TILE_BYTES];
        pack_bfp4_tile(&tile, &mut b).unwrap();
        assert_eq!(&b[..3], &[127, 128, 0]);
        assert_eq!(&b[64..67], &[4 | (0x8 | 2) << 4, 4 | 6 << 4, 7 << 4]);
        assert_eq!(b[64 + 8], 6);
        let mut back = vec![0f32; TILE_ELEMS];
        unpack_bfp4_tile(&b, &mut back).unwrap();
        assert_eq!(&back[..6], &[1.0, -0.5, 1.0, 1.5, 0.0, 1.75]);
        assert_eq!(back[16], 3.0);
    }

    #[test]
    fn non_finite_blocks_keep_inf_and_nan() {
        let mut tile = vec![0f32; TILE_ELEMS];
        tile[0] = f32::INFINITY;
        tile[1] = f32::NAN;
        tile[2] = -f32::INFINITY;
        tile[3] = 5.0;
        let mut t = tile.clone();
        quantize_bfp4(&mut t).unwrap();
        assert_eq!(t[0], f32::INFINITY);
        assert!(t[1].is_nan());
        assert_eq!(t[2], f32::NEG_INFINITY);
        assert_eq!(t[3], 0.0);
    }

    #[test]
    fn lengths_are_checked() {
        let mut out = vec![0u8; BFP4_TILE_BYTES - 1];
        assert!(pack_bfp4_tile(&[0.0; TILE_ELEMS], &mut out).is_err());
        assert!(unpack_bfp4_tiles(&[0u8; 576], &mut [0.0; 1000]).is_err());
        assert_eq!(BFP4_TILE_BYTES, 576);
    }

    proptest! {
        #[test]
        fn matches_the_rule_on_every_block(v in prop::collection::vec(-1e6f32..1e6f32, TILE_ELEMS)) {
            let mut t = v.clone();
            quantize_bfp4(&mut t).unwrap();
            for (got, block) in t.chunks(BLOCK).zip(v.chunks(BLOCK)) {
                prop_assert_eq!(got.to_vec(), naive_quantize_block(block));
            }
            // Packing many tiles at once is the same as one by one.
            let mut many = vec![0u8; BFP4_TILE_BYTES];
            pack_bfp4_tiles(&v, &mut many).unwrap();
            let mut one = vec![0u8; BFP4_TILE_BYTES];
            pack_bfp4_tile(&v, &mut one).unwrap();
            prop_assert_eq!(many, one);
        }
    }
}

//! bfloat8_b: Tenstorrent's block floating point with one shared exponent per 16 values.
//!
//! A packed tile is 1088 bytes: 64 shared-exponent bytes, then 1024 mantissa bytes.
//! The input tile is in TILE order (faces, rows within a face), so "block j" is simply values
//! `16*j .. 16*j + 16`: one row of one face. Exponent byte j belongs to block j.
//!
//! # Encoding (exact rule)
//!
//! - Shared exponent `E` of a block = the largest IEEE biased exponent field among its 16 values
//!   (0 for zeros and subnormals).
//! - Each value becomes one byte: bit 7 = sign, bits 6..=0 = magnitude `m` in 0..=127, with
//!   value = `m * 2^(E - 133)`, i.e. `m / 64 * 2^(E - 127)`: the block max has the hidden 1 in
//!   bit 6 and 6 fraction bits; smaller values are shifted right to the same scale.
//! - `m` = |x| / 2^(E-133) rounded to nearest, ties to even; 128 (a max that rounds up) saturates
//!   to 127; values below half a step become (signed) zero.
//!
//! Error bound: with step `s = 2^(E-133)`, every value is off by at most `s/2`, except a
//! saturated block max, which is off by less than `s`; both are at most `2^-7 * max|x|` of its
//! block (the max is at least `64 s`, and a saturated one at least `127.5 s`). A block of only
//! subnormals (E = 0) has no hidden bit to normalise, so there the bound is `2^-133` absolute.
//! Values already of the form `m * 2^(E-133)` with a common `E` round-trip exactly (the encoder
//! may pick a finer `E`, which represents them too).
//!
//! # NaN and infinity (a ttmesh choice; hardware has no documented encoding)
//!
//! A block containing NaN or ±inf gets `E = 255`, mirroring IEEE: in such a block magnitude 64
//! decodes to ±inf, magnitudes above 64 to NaN, and anything below 64 to ±0. So infinities and
//! NaNs survive a round trip, and the finite values sharing their block flush to zero: relative
//! to an infinite block scale they underflow, as any small value does.

use super::{check_len, FormatError, TILE_ELEMS};

/// Bytes of one packed bfloat8_b tile: 64 exponents + 1024 mantissas (FACTS.md).
pub const BFP8_TILE_BYTES: usize = BFP8_EXPONENT_BYTES + TILE_ELEMS;
/// Shared exponent bytes at the start of a packed tile (16 per face, one per face row).
pub const BFP8_EXPONENT_BYTES: usize = TILE_ELEMS / BLOCK;

/// Values that share one exponent.
pub(super) const BLOCK: usize = 16;
/// Exponent byte marking a block that holds NaN or infinity.
pub(super) const NON_FINITE_EXP: u32 = 255;

/// Packs one tile (1024 f32 values in TILE order) into 1088 bfloat8_b bytes.
pub fn pack_bfp8_tile(tile: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    check_len("pack_bfp8_tile input tile", TILE_ELEMS, tile.len())?;
    check_len("pack_bfp8_tile output bytes", BFP8_TILE_BYTES, out.len())?;
    let (exps, mants) = out.split_at_mut(BFP8_EXPONENT_BYTES);
    for ((block, exp), mant) in tile
        .chunks_exact(BLOCK)
        .zip(exps.iter_mut())
        .zip(mants.chunks_exact_mut(BLOCK))
    {
        *exp = pack_block(block, mant);
    }
    Ok(())
}

/// Unpacks 1088 bfloat8_b bytes into one tile of 1024 f32 values in TILE order.
/// Every byte pattern decodes to something (no input is invalid), so this only checks lengths.
pub fn unpack_bfp8_tile(bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    check_len("unpack_bfp8_tile input bytes", BFP8_TILE_BYTES, bytes.len())?;
    check_len("unpack_bfp8_tile output tile", TILE_ELEMS, out.len())?;
    for (j, block) in out.chunks_exact_mut(BLOCK).enumerate() {
        let block: &mut [f32; BLOCK] = block.try_into().expect("16-value blocks");
        unpack_bfp8_block(bytes, j, block);
    }
    Ok(())
}

/// Unpacks block `j` (0..64: face `j / 16`, face row `j % 16`) of the 1088 bytes of a packed
/// tile into 16 values: the kernels' page reads put each block straight into its place in a
/// row-major result, with no tile-order copy between.
#[inline(always)]
pub fn unpack_bfp8_block(tile_bytes: &[u8], j: usize, out: &mut [f32; BLOCK]) {
    let mant: &[u8; BLOCK] = tile_bytes[BFP8_EXPONENT_BYTES + j * BLOCK..][..BLOCK]
        .try_into()
        .expect("16 mantissa bytes");
    unpack_block(tile_bytes[j], mant, out);
}

/// Packs any number of whole tiles (TILE order, `n * 1024` values) into `n * 1088` bytes,
/// in parallel.
pub fn pack_bfp8_tiles(tiles: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    let n = whole_tiles("pack_bfp8_tiles input", tiles.len())?;
    check_len(
        "pack_bfp8_tiles output bytes",
        n * BFP8_TILE_BYTES,
        out.len(),
    )?;
    crate::par::try_zip_chunks(
        out,
        BFP8_TILE_BYTES,
        tiles,
        TILE_ELEMS,
        tiles.len(),
        |o, t| pack_bfp8_tile(t, o),
    )
}

/// Unpacks `n * 1088` bytes into `n * 1024` values (TILE order), in parallel.
pub fn unpack_bfp8_tiles(bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let n = whole_tiles("unpack_bfp8_tiles output", out.len())?;
    check_len(
        "unpack_bfp8_tiles input bytes",
        n * BFP8_TILE_BYTES,
        bytes.len(),
    )?;
    let elems = out.len();
    crate::par::try_zip_chunks(out, TILE_ELEMS, bytes, BFP8_TILE_BYTES, elems, |o, b| {
        unpack_bfp8_tile(b, o)
    })
}

/// Rounds whole tiles in place to the values bfloat8_b can hold (pack, then unpack), which is
/// what storing a tensor as bfloat8_b does to it. `tiles.len()` must be a multiple of 1024.
pub fn quantize_bfp8(tiles: &mut [f32]) -> Result<(), FormatError> {
    whole_tiles("quantize_bfp8 input", tiles.len())?;
    let elems = tiles.len();
    crate::par::try_chunks(tiles, TILE_ELEMS, elems, |tile| {
        let mut packed = [0u8; BFP8_TILE_BYTES];
        pack_bfp8_tile(tile, &mut packed)?;
        unpack_bfp8_tile(&packed, tile)
    })
}

pub(super) fn whole_tiles(what: &'static str, len: usize) -> Result<usize, FormatError> {
    let n = len / TILE_ELEMS;
    // Report the nearest whole-tile length so the message says what to pass.
    check_len(what, n.max(1) * TILE_ELEMS, len).map(|()| n)
}

/// Encodes one block of 16 values as bfloat8_b; returns its shared exponent byte.
fn pack_block(block: &[f32], mant: &mut [u8]) -> u8 {
    let mant: &mut [u8; BLOCK] = mant.try_into().expect("16 mantissa bytes");
    pack_block_codes::<7>(block, mant)
}

/// The block float rule both formats share (bfloat8_b: `MAG_BITS` 7, bfloat4_b: 3): each
/// value becomes a code of a sign bit above `MAG_BITS` magnitude bits, the block's largest
/// exponent holding the hidden 1 in the top magnitude bit. Returns the shared exponent byte.
/// Non-finite blocks (exponent 255) keep signs, infinity as the "1.0" magnitude and NaN as it
/// with the next bit set (like a quiet NaN); their finite values become zero.
#[inline(always)]
pub(super) fn pack_block_codes<const MAG_BITS: u32>(block: &[f32], codes: &mut [u8; BLOCK]) -> u8 {
    let fraction_bits = MAG_BITS - 1;
    let inf_mag = 1u8 << fraction_bits;
    let nan_mag = inf_mag | inf_mag >> 1;
    let max_mag = ((1u32 << MAG_BITS) - 1) as f32;
    let field = |x: f32| (x.to_bits() >> 23) & 0xFF;
    let sign = |x: f32| ((x.to_bits() >> (31 - MAG_BITS)) & (1 << MAG_BITS)) as u8;
    let shared = block.iter().map(|&x| field(x)).max().unwrap_or(0);
    if shared == NON_FINITE_EXP {
        for (c, &x) in codes.iter_mut().zip(block) {
            *c = sign(x)
                | match (field(x) == NON_FINITE_EXP, x.is_nan()) {
                    (true, true) => nan_mag,
                    (true, false) => inf_mag,
                    (false, _) => 0,
                };
        }
        return NON_FINITE_EXP as u8;
    }
    // |x| / step = |x| * 2^(127 + fraction_bits - shared), done as two exact power-of-two
    // multiplies (one would overflow f32 for small `shared`). Each factor is at most 2^67,
    // and any value that can round to a nonzero magnitude stays normal in between, so y is
    // exact where it matters.
    let total = (127 + fraction_bits) as i32 - shared as i32;
    let (s1, s2) = (pow2(total / 2), pow2(total - total / 2));
    for (c, &x) in codes.iter_mut().zip(block) {
        let y = x.abs() * s1 * s2;
        // Adding and removing 2^23 rounds y (< 2^23) to an integer, ties to even, in the
        // default rounding mode; all of this vectorises, unlike per-lane integer shifts.
        let mag = ((y + ROUNDER) - ROUNDER).min(max_mag) as u8;
        *c = sign(x) | mag;
    }
    shared as u8
}

/// 2^23: the magnitude above which every f32 is an integer.
const ROUNDER: f32 = 8_388_608.0;

/// 2^e as f32 for |e| <= 126.
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// Decodes one block of 16 bfloat8_b mantissa bytes with shared exponent `exp`.
#[inline(always)]
fn unpack_block(exp: u8, mant: &[u8; BLOCK], out: &mut [f32; BLOCK]) {
    unpack_block_codes::<7>(exp, mant, out)
}

/// Decodes one block of 16 codes (see [`pack_block_codes`]) with shared exponent `exp`.
/// Fixed-size arrays so the finite path compiles to a few vector instructions (where the
/// caller is compiled for AVX2, eight values per instruction).
#[inline(always)]
pub(super) fn unpack_block_codes<const MAG_BITS: u32>(
    exp: u8,
    codes: &[u8; BLOCK],
    out: &mut [f32; BLOCK],
) {
    let fraction_bits = MAG_BITS - 1;
    let inf_mag = 1u8 << fraction_bits;
    let (sign_bit, mag_mask) = (1u8 << MAG_BITS, ((1u32 << MAG_BITS) - 1) as u8);
    let exp = u32::from(exp);
    if exp == NON_FINITE_EXP {
        for (o, &c) in out.iter_mut().zip(codes) {
            let mag = match c & mag_mask {
                m if m == inf_mag => f32::INFINITY,
                m if m > inf_mag => f32::NAN,
                _ => 0.0,
            };
            *o = if c & sign_bit != 0 { -mag } else { mag };
        }
        return;
    }
    // step = 2^(exp - 127 - fraction_bits): a normal f32 when that exponent is at least -126,
    // a subnormal power of two below. Either way m * step is exact (m has MAG_BITS bits), so
    // decoding never rounds.
    let step = if exp > fraction_bits {
        f32::from_bits((exp - fraction_bits) << 23)
    } else {
        f32::from_bits(1 << (exp + 22 - fraction_bits))
    };
    // The sign goes in as a bit (mag is never negative, so this is negation): a select per
    // lane, inlined into the streaming matmul's row loop, was vectorised into shuffles and
    // scalar multiplies.
    let codes = codes.map(u32::from);
    for (o, c) in out.iter_mut().zip(codes) {
        let mag = ((c & u32::from(mag_mask)) as f32 * step).to_bits();
        *o = f32::from_bits(mag | ((c & u32::from(sign_bit)) << (31 - MAG_BITS)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Independent f64 statement of the rule: scale from the largest binary exponent in the
    /// block, round half to even, clamp to 127 steps.
    fn naive_quantize_block(block: &[f32]) -> Vec<f32> {
        let e_max = block
            .iter()
            .filter(|x| **x != 0.0)
            .map(|x| (x.abs() as f64).log2().floor() as i32)
            .max()
            .map(|e| e.max(-127));
        let Some(e_max) = e_max else {
            return block.to_vec(); // all zeros keep their signs
        };
        let step = 2f64.powi(e_max - 6);
        block
            .iter()
            .map(|&x| {
                let m = (x.abs() as f64 / step).round_ties_even().min(127.0);
                let v = (m * step) as f32;
                if x.is_sign_negative() {
                    -v
                } else {
                    v
                }
            })
            .collect()
    }

    fn round_trip(tile: &[f32]) -> Vec<f32> {
        let mut t = tile.to_vec();
        quantize_bfp8(&mut t).unwrap();
        t
    }

    #[test]
    fn known_bytes() {
        let mut tile = vec![0f32; TILE_ELEMS];
        tile[0] = 1.0; // block 0: E = 127, m = 64
        tile[1] = -0.5; // m = 32, sign set
        tile[2] = 1.0 + 1.0 / 128.0; // halfway between m=64 and 65: ties to even -> 64
        tile[3] = 1.0 + 3.0 / 128.0; // halfway between 65 and 66 -> 66
        tile[4] = 1.0 / 256.0; // a quarter step: rounds to zero
        tile[5] = 1.999; // rounds to 128, saturates to 127
        tile[16] = 3.0; // block 1: E = 128, m = 96
        let mut b = vec![0u8; BFP8_TILE_BYTES];
        pack_bfp8_tile(&tile, &mut b).unwrap();
        assert_eq!(&b[..3], &[127, 128, 0]);
        assert_eq!(&b[64..70], &[64, 0x80 | 32, 64, 66, 0, 127]);
        assert_eq!(b[64 + 16], 96);
        let mut back = vec![0f32; TILE_ELEMS];
        unpack_bfp8_tile(&b, &mut back).unwrap();
        assert_eq!(
            &back[..6],
            &[1.0, -0.5, 1.0, 1.0 + 2.0 / 64.0, 0.0, 127.0 / 64.0]
        );
        assert_eq!(back[16], 3.0);
    }

    #[test]
    fn non_finite_values_survive_and_flush_their_block() {
        let mut tile = vec![1.5f32; TILE_ELEMS];
        tile[0] = f32::INFINITY;
        tile[1] = f32::NEG_INFINITY;
        tile[2] = f32::NAN;
        tile[3] = -7.0;
        let q = round_trip(&tile);
        assert_eq!(q[0], f32::INFINITY);
        assert_eq!(q[1], f32::NEG_INFINITY);
        assert!(q[2].is_nan());
        assert_eq!(q[3].to_bits(), (-0.0f32).to_bits());
        assert_eq!(q[4], 0.0);
        assert_eq!(q[16], 1.5); // the next block is unaffected
    }

    #[test]
    fn subnormals_and_extremes() {
        let mut tile = vec![0f32; TILE_ELEMS];
        tile[0] = f32::from_bits(0x0040_0000); // 2^-127, subnormal
        tile[1] = f32::from_bits(1); // 2^-149: far below half a step
        tile[16] = f32::MAX;
        tile[17] = -f32::MIN_POSITIVE;
        tile[32] = -0.0;
        let q = round_trip(&tile);
        assert_eq!(q[0], tile[0]);
        assert_eq!(q[1], 0.0);
        assert_eq!(q[16], f32::from_bits(0x7F7E_0000)); // 127/64 * 2^127, saturated
        assert_eq!(q[17].to_bits(), (-0.0f32).to_bits());
        assert_eq!(q[32].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn lengths_are_checked() {
        let mut out = vec![0u8; BFP8_TILE_BYTES];
        assert!(pack_bfp8_tile(&[0.0; 1000], &mut out).is_err());
        assert!(pack_bfp8_tile(&[0.0; 1024], &mut out[..1087]).is_err());
        assert!(unpack_bfp8_tile(&out, &mut [0.0; 1023]).is_err());
        let err = quantize_bfp8(&mut [0.0; 1500]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "quantize_bfp8 input: expected 1024 elements but got 1500; pass a slice of exactly 1024 elements"
        );
        let mut two = vec![0.5f32; 2 * TILE_ELEMS];
        let mut bytes = vec![0u8; 2 * BFP8_TILE_BYTES];
        pack_bfp8_tiles(&two, &mut bytes).unwrap();
        assert!(unpack_bfp8_tiles(&bytes[1..], &mut two).is_err());
        unpack_bfp8_tiles(&bytes, &mut two).unwrap();
        assert!(two.iter().all(|&x| x == 0.5));
    }

    /// A block's values: magnitudes spread over a few binades, random signs, some zeros.
    fn blocks() -> impl Strategy<Value = Vec<f32>> {
        (
            -140i32..127,
            prop::collection::vec((any::<u32>(), 0u32..12, any::<bool>()), TILE_ELEMS),
        )
            .prop_map(|(base, parts)| {
                parts
                    .into_iter()
                    .map(|(frac, drop, neg)| {
                        if drop == 11 {
                            return 0.0;
                        }
                        let v = (1.0 + (frac >> 9) as f64 / 8388608.0)
                            * 2f64.powi((base - drop as i32).max(-149));
                        let v = v as f32;
                        if neg {
                            -v
                        } else {
                            v
                        }
                    })
                    .collect()
            })
    }

    proptest! {
        #[test]
        fn matches_naive_rule_and_error_bound(tile in blocks()) {
            let q = round_trip(&tile);
            for (b, (xs, qs)) in tile.chunks(16).zip(q.chunks(16)).enumerate() {
                let want = naive_quantize_block(xs);
                for i in 0..16 {
                    prop_assert_eq!(qs[i].to_bits(), want[i].to_bits(),
                        "block {} value {} ({})", b, i, xs[i]);
                }
                let max = xs.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
                let bound = if max >= f32::MIN_POSITIVE as f64 {
                    max / 128.0
                } else {
                    2f64.powi(-133)
                };
                for (x, y) in xs.iter().zip(qs) {
                    prop_assert!((*x as f64 - *y as f64).abs() <= bound, "{} -> {}", x, y);
                }
            }
        }

        #[test]
        fn representable_values_round_trip_exactly(
            exps in prop::collection::vec(0i32..255, 64),
            mags in prop::collection::vec(-127i32..=127, TILE_ELEMS),
        ) {
            let tile: Vec<f32> = mags
                .iter()
                .enumerate()
                .map(|(i, &m)| (m as f64 * 2f64.powi(exps[i / 16] - 133)) as f32)
                .collect();
            let q = round_trip(&tile);
            for (x, y) in tile.iter().zip(&q) {
                prop_assert_eq!(x.to_bits(), y.to_bits());
            }
            // Decoding is a pure function of the bytes: repacking the result is stable.
            prop_assert_eq!(round_trip(&q), q);
        }

        #[test]
        fn any_bytes_decode_without_panicking(bytes in prop::collection::vec(any::<u8>(), BFP8_TILE_BYTES)) {
            let mut out = vec![0f32; TILE_ELEMS];
            unpack_bfp8_tile(&bytes, &mut out).unwrap();
            // Finite blocks decode to exactly m * 2^(E-133).
            for (j, &e) in bytes[..64].iter().enumerate().filter(|&(_, &e)| e != 255) {
                for i in 0..16 {
                    let m = bytes[64 + 16 * j + i];
                    let want = f64::from(m & 0x7F) * 2f64.powi(i32::from(e) - 133);
                    prop_assert_eq!(out[16 * j + i].abs() as f64, want);
                }
            }
        }
    }
}

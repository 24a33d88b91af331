//! Data formats of one emulated Tenstorrent chip: tile geometry, bfloat16, bfloat8_b and
//! bfloat4_b.
//!
//! Everything here is pure host arithmetic on slices: it knows nothing of device memory,
//! buffers or pages. The chip stores tensors in these layouts and converts at its edges.
//!
//! - [`tilize`] / [`untilize`]: logical row-major <-> TILE layout (32x32 tiles of four 16x16 faces).
//! - [`round_bf16`], [`f32_to_bf16_bits`], [`bf16_bits_to_f32`]: bfloat16 storage.
//! - [`pack_bfp8_tile`], [`unpack_bfp8_tile`], [`quantize_bfp8`]: bfloat8_b block floating point.
//! - [`pack_bfp4_tile`], [`unpack_bfp4_tile`], [`quantize_bfp4`]: bfloat4_b, its 4-bit sibling.
//! - [`widen_bf16`], [`add_f32`], [`sum_bf16`], ...: whole-slice conversions and sums
//!   (AVX-512 or AVX2 where the host has it; the bf16 sums rounded by AVX-512 BF16's own
//!   conversion where it has that, with the same bits).

/// Defines `fn $name(args) -> Ret` that runs `$generic(args)` compiled for AVX-512 (F, BW,
/// VL) or AVX2 when the host has them, and as baseline (SSE2) code otherwise: the same source
/// every way, so the same bits. `$generic` should be `#[inline(always)]` so its loops are
/// compiled into each copy. The chip's conversions and sums use it wherever every byte a
/// kernel moves passes through a loop. The bf16 add is compute-bound even on memory-bound
/// collectives (~0.6 cycles per element as AVX2): with AVX-512, all_reduce t3k 16 MiB went
/// 27.2 -> 25.1 ms, line-2 1 MiB 156 -> 140 us, t3k 36 KiB 131 -> 123 us (medians of 5).
macro_rules! simd_where_available {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $generic:path) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
            unsafe fn avx512($($arg: $ty),*) -> $ret {
                $generic($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn avx2($($arg: $ty),*) -> $ret {
                $generic($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::format::simd_allowed(2)
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                // SAFETY: the CPU supports these features (checked just above), the
                // target_feature function's only precondition.
                return unsafe { avx512($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::format::simd_allowed(1) && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above), the target_feature
                // function's only precondition.
                return unsafe { avx2($($arg),*) };
            }
            $generic($($arg),*)
        }
    };
}
pub(crate) use simd_where_available;

#[cfg(test)]
thread_local! {
    /// The widest copy of a `simd_where_available` function this test thread may run (3
    /// AVX-512 with its BF16 conversion, 2 AVX-512, 1 AVX2, 0 baseline), so tests check
    /// every copy the host can run.
    pub(crate) static SIMD_LEVEL: std::cell::Cell<u8> = const { std::cell::Cell::new(3) };
}

/// True if copies at `level` may run (always, outside this crate's tests).
#[inline(always)]
pub(crate) fn simd_allowed(level: u8) -> bool {
    #[cfg(test)]
    return SIMD_LEVEL.with(|l| l.get()) >= level;
    #[cfg(not(test))]
    {
        let _ = level;
        true
    }
}

/// Runs `f` once with each copy of the `simd_where_available` functions allowed in turn.
#[cfg(test)]
pub(crate) fn at_every_simd_level(mut f: impl FnMut(u8)) {
    for level in [0, 1, 2, 3] {
        SIMD_LEVEL.with(|l| l.set(level));
        f(level);
    }
    SIMD_LEVEL.with(|l| l.set(3));
}

mod bf16_native;
mod bfp4;
mod bfp8;
mod slices;
mod tile;

pub use bfp4::{
    pack_bfp4_tile, pack_bfp4_tiles, quantize_bfp4, unpack_bfp4_block, unpack_bfp4_tile,
    unpack_bfp4_tiles, BFP4_EXPONENT_BYTES, BFP4_TILE_BYTES,
};
pub use bfp8::{
    pack_bfp8_tile, pack_bfp8_tiles, quantize_bfp8, unpack_bfp8_block, unpack_bfp8_tile,
    unpack_bfp8_tiles, BFP8_EXPONENT_BYTES, BFP8_TILE_BYTES,
};
pub use slices::{
    add_bf16, add_bf16_and_narrow, add_bf16_to_f32, add_f32, narrow_bf16, sum_bf16,
    sum_bf16_to_f32, widen_bf16,
};
pub use tile::{padded_hw, tiled_len, tiled_position, tilize, untilize};

/// Rows of one tile.
pub const TILE_HEIGHT: usize = 32;
/// Columns of one tile.
pub const TILE_WIDTH: usize = 32;
/// Rows of one face (a tile is 2x2 faces).
pub const FACE_HEIGHT: usize = 16;
/// Columns of one face.
pub const FACE_WIDTH: usize = 16;
/// Elements in one tile.
pub const TILE_ELEMS: usize = TILE_HEIGHT * TILE_WIDTH;
/// Elements in one face.
pub const FACE_ELEMS: usize = FACE_HEIGHT * FACE_WIDTH;

/// Why a format conversion refused its input. Every variant names the thing and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A slice does not have the length the shape or format requires.
    #[error("{what}: expected {expected} elements but got {got}; pass a slice of exactly {expected} elements")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A tensor shape with no dimensions (tilize needs at least a width).
    #[error("{what}: shape is empty; give at least one dimension (rank 1 is read as [1, W])")]
    EmptyShape { what: &'static str },
    /// The element count of a shape does not fit in memory arithmetic.
    #[error(
        "{what}: shape {shape:?} has too many elements (overflows usize); use a smaller shape"
    )]
    ShapeTooLarge {
        what: &'static str,
        shape: Vec<usize>,
    },
}

/// Rounds an f32 to the nearest bfloat16 (ties to even) and back. NaN stays NaN, infinities stay
/// infinite, values beyond the bf16 range round to infinity, as IEEE rounding does.
#[inline]
pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// Converts f32 values to bfloat16 bit patterns (round to nearest even, NaN preserved).
/// `dst` must be exactly as long as `src`.
pub fn f32_to_bf16_bits(src: &[f32], dst: &mut [u16]) -> Result<(), FormatError> {
    check_len("f32_to_bf16_bits destination", src.len(), dst.len())?;
    // A plain zip loop: the compiler vectorises half's branch-light conversion well enough, and
    // it keeps the rounding rule in one place (half::bf16::from_f32).
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = half::bf16::from_f32(s).to_bits();
    }
    Ok(())
}

/// Widens bfloat16 bit patterns to f32 (exact). `dst` must be exactly as long as `src`.
pub fn bf16_bits_to_f32(src: &[u16], dst: &mut [f32]) -> Result<(), FormatError> {
    check_len("bf16_bits_to_f32 destination", src.len(), dst.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        // bf16 is the top half of an f32, so widening is a shift.
        *d = f32::from_bits(u32::from(s) << 16);
    }
    Ok(())
}

pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), FormatError> {
    if expected == got {
        Ok(())
    } else {
        Err(FormatError::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        // Just above the halfway point rounds up.
        assert_eq!(
            round_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)),
            1.0 + 2f32.powi(-7)
        );
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(round_bf16(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_bf16(f32::MAX), f32::INFINITY);
        assert_eq!(round_bf16(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn bf16_slices_round_trip_and_check_lengths() {
        let src = [1.0f32, -2.5, 3.140625, f32::NAN, 1.0 + 2f32.powi(-8)];
        let mut bits = [0u16; 5];
        f32_to_bf16_bits(&src, &mut bits).unwrap();
        assert_eq!(bits[0], 0x3F80);
        assert_eq!(bits[1], 0xC020);
        let mut back = [0f32; 5];
        bf16_bits_to_f32(&bits, &mut back).unwrap();
        for (b, s) in back.iter().zip(&src) {
            let want = round_bf16(*s);
            assert!(b.to_bits() == want.to_bits() || (b.is_nan() && want.is_nan()));
        }
        let err = f32_to_bf16_bits(&src, &mut [0u16; 4]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "f32_to_bf16_bits destination: expected 5 elements but got 4; pass a slice of exactly 5 elements"
        );
        assert!(bf16_bits_to_f32(&bits, &mut [0f32; 6]).is_err());
    }
}

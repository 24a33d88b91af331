//! The bf16 sums rounded by the CPU's own conversion (AVX-512 BF16's `vcvtne2ps2bf16`, one
//! instruction for 32 values) where the host has it. `slices`' loops round in software:
//! about ten vector instructions per 32 values for the add, the bias, the NaN check and the
//! narrowing, and on a small collective (32x576 bf16 on 8 chips, every value summed at 7
//! hops out of the L2) that loop was the largest single item in perf (17% of samples).
//!
//! The same bits as the software rounding: both round to nearest even and make a NaN quiet
//! keeping its top bits, but the instruction reads a subnormal f32 as zero, where the
//! software rounds it like any other value. A block of 32 whose sums hold a subnormal is
//! rounded in software instead (`vfpclassps` finds them), so no input gives other bits than
//! on a host without the instruction; the tests run both on every class of value.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Values per block: two vectors of 16 f32 narrowed into one of 32 bf16.
#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 32;

/// True if the host can run this module's kernels (and this crate's tests allow them).
#[inline(always)]
fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::simd_allowed(3)
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `dst[i] = bf16(x[i] + y[i])` (`slices::sum_bf16`'s definition) if the host has AVX-512
/// BF16; false, touching nothing, if not.
pub(super) fn sum_bf16(dst: &mut [u16], x: &[u16], y: &[u16]) -> bool {
    available() && {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has every feature the function enables (`available`).
        unsafe {
            sum_bf16_avx512bf16(dst, x, y)
        };
        true
    }
}

/// `dst[i] = bf16(sums[i] + add[i])` (`slices::add_bf16_and_narrow`'s definition) if the
/// host has AVX-512 BF16; false, touching nothing, if not.
pub(super) fn add_bf16_and_narrow(dst: &mut [u16], sums: &[f32], add: &[u16]) -> bool {
    available() && {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has every feature the function enables (`available`).
        unsafe {
            add_and_narrow_avx512bf16(dst, sums, add)
        };
        true
    }
}

/// Widens 16 bf16 values at `p` to f32 (exact: the bits move up 16 places).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn widen16(p: *const u16) -> __m512 {
    // SAFETY (caller): 16 values readable at `p`.
    let v = unsafe { _mm256_loadu_si256(p.cast()) };
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
}

/// Writes `lo` then `hi` rounded to bf16 at `out` (32 values), by the instruction unless a
/// value is subnormal.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
unsafe fn narrow32(lo: __m512, hi: __m512, out: *mut u16) {
    const SUBNORMAL: i32 = 0x20;
    let subnormal =
        _mm512_fpclass_ps_mask::<SUBNORMAL>(lo) | _mm512_fpclass_ps_mask::<SUBNORMAL>(hi);
    if subnormal == 0 {
        let bf: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        // SAFETY (caller): 32 values writable at `out`.
        unsafe { _mm512_storeu_si512(out.cast(), bf) };
        return;
    }
    let mut sums = [0f32; BLOCK];
    // SAFETY: `sums` holds 32 f32; (caller) 32 values writable at `out`.
    unsafe {
        _mm512_storeu_ps(sums.as_mut_ptr(), lo);
        _mm512_storeu_ps(sums.as_mut_ptr().add(16), hi);
        for (k, s) in sums.iter().enumerate() {
            *out.add(k) = super::slices::round_bf16(*s).to_le();
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
unsafe fn sum_bf16_avx512bf16(dst: &mut [u16], x: &[u16], y: &[u16]) {
    let n = dst.len().min(x.len()).min(y.len());
    let whole = n - n % BLOCK;
    let (d, xp, yp) = (dst.as_mut_ptr(), x.as_ptr(), y.as_ptr());
    for i in (0..whole).step_by(BLOCK) {
        // SAFETY: i + 32 <= n, within all three slices.
        unsafe {
            let lo = _mm512_add_ps(widen16(xp.add(i)), widen16(yp.add(i)));
            let hi = _mm512_add_ps(widen16(xp.add(i + 16)), widen16(yp.add(i + 16)));
            narrow32(lo, hi, d.add(i));
        }
    }
    super::slices::sum_bf16_software(&mut dst[whole..n], (&x[whole..n], &y[whole..n]));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
unsafe fn add_and_narrow_avx512bf16(dst: &mut [u16], sums: &[f32], add: &[u16]) {
    let n = dst.len().min(sums.len()).min(add.len());
    let whole = n - n % BLOCK;
    let (d, sp, ap) = (dst.as_mut_ptr(), sums.as_ptr(), add.as_ptr());
    for i in (0..whole).step_by(BLOCK) {
        // SAFETY: i + 32 <= n, within all three slices.
        unsafe {
            let lo = _mm512_add_ps(_mm512_loadu_ps(sp.add(i)), widen16(ap.add(i)));
            let hi = _mm512_add_ps(_mm512_loadu_ps(sp.add(i + 16)), widen16(ap.add(i + 16)));
            narrow32(lo, hi, d.add(i));
        }
    }
    super::slices::add_bf16_and_narrow_software(
        &mut dst[whole..n],
        (&sums[whole..n], &add[whole..n]),
    );
}

#[cfg(test)]
mod tests {
    use super::super::at_every_simd_level;
    use super::super::slices::{add_bf16_and_narrow_software, sum_bf16_software};

    /// bf16 bits of every class: zeros, subnormals, normals, infinities, NaNs; the
    /// subnormals come in runs longer than a block, so whole blocks of subnormal sums occur.
    fn awkward_bf16(len: usize) -> Vec<u16> {
        let mut v: Vec<u16> = (0..len as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u16)
            .collect();
        v.extend((1..0x80u16).chain((1..0x80).map(|b| b | 0x8000)));
        v.extend([
            0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x7F7F, 0x0080, 0x8080,
        ]);
        v
    }

    #[test]
    fn sums_have_the_software_bits_with_and_without_subnormals() {
        at_every_simd_level(|level| {
            let xs = awkward_bf16(5000);
            // y = 0 keeps x's subnormals subnormal; reversed x mixes every class.
            for ys in [vec![0u16; xs.len()], xs.iter().rev().copied().collect()] {
                for len in [xs.len(), 31, 33, 64, 100] {
                    let (x, y) = (&xs[..len], &ys[..len]);
                    let mut want = vec![0u16; len];
                    sum_bf16_software(&mut want, (x, y));
                    let mut got = vec![0u16; len];
                    let native = super::sum_bf16(&mut got, x, y);
                    assert!(level >= 3 || !native, "level {level} ran the instruction");
                    if !native {
                        continue; // below level 3, or a host without AVX-512 BF16
                    }
                    assert_eq!(got, want, "level {level}, {len} values");
                    let sums: Vec<f32> = x
                        .iter()
                        .map(|&b| f32::from_bits(u32::from(b) << 16))
                        .collect();
                    let mut narrowed = vec![0u16; len];
                    let mut narrowed_soft = vec![0u16; len];
                    assert!(super::add_bf16_and_narrow(&mut narrowed, &sums, y));
                    add_bf16_and_narrow_software(&mut narrowed_soft, (&sums, y));
                    assert_eq!(narrowed, narrowed_soft, "level {level}, {len} values");
                }
            }
        });
    }

    #[test]
    fn subnormal_sums_keep_their_bits() {
        // The instruction alone would give zero for these: the block is rounded in software.
        let xs: Vec<u16> = (1..=64).collect();
        let mut got = vec![0u16; xs.len()];
        if super::sum_bf16(&mut got, &xs, &vec![0; xs.len()]) {
            assert_eq!(got, xs);
        }
    }
}

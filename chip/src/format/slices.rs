//! Whole-slice conversions and sums other crates run on every byte they move (the
//! collectives' reduction): compiled for AVX2 where the host has it, since the baseline build
//! (SSE2) handles four floats per instruction and these loops run over every received piece.

/// `dst[i] = bf16 bits src[i]` widened to f32 (exact: the bits move up 16 places).
pub fn widen_bf16(src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above), the target_feature function's
        // only precondition.
        return unsafe { widen_bf16_avx2(src, dst) };
    }
    widen_bf16_any(src, dst)
}

/// `acc[i] += add[i]`, element by element (the order of a sum is the caller's: one add each).
pub fn add_f32(acc: &mut [f32], add: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: as above.
        return unsafe { add_f32_avx2(acc, add) };
    }
    add_f32_any(acc, add)
}

#[inline(always)]
fn widen_bf16_any(src: &[u16], dst: &mut [f32]) {
    for (f, b) in dst.iter_mut().zip(src) {
        *f = f32::from_bits((u16::from_le(*b) as u32) << 16);
    }
}

#[inline(always)]
fn add_f32_any(acc: &mut [f32], add: &[f32]) {
    for (a, b) in acc.iter_mut().zip(add) {
        *a += *b;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn widen_bf16_avx2(src: &[u16], dst: &mut [f32]) {
    widen_bf16_any(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_f32_avx2(acc: &mut [f32], add: &[f32]) {
    add_f32_any(acc, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_and_add_match_the_scalar_definitions() {
        let bits: Vec<u16> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 16) as u16)
            .collect();
        let mut wide = vec![0f32; 1000];
        widen_bf16(&bits, &mut wide);
        for (w, b) in wide.iter().zip(&bits) {
            assert_eq!(w.to_bits(), (*b as u32) << 16);
        }
        let finite: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        let mut acc: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
        let want: Vec<f32> = acc.iter().zip(&finite).map(|(a, b)| a + b).collect();
        add_f32(&mut acc, &finite);
        assert_eq!(acc, want);
    }
}

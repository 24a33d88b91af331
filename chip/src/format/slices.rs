//! Whole-slice conversions and sums other crates run on every byte they move (the
//! collectives' reduction): compiled for AVX-512 or AVX2 where the host has it, since the
//! baseline build (SSE2) handles four floats per instruction and these loops run over every
//! received piece.

/// Defines `pub fn $name(a, b)` whose loop `$body` is compiled for AVX-512 or AVX2 where the
/// host has it and for the baseline (`simd_where_available`), so all give the same bits.
macro_rules! slice_kernel {
    ($(#[$doc:meta])* $vis:vis $name:ident($a:ident: $ta:ty, $b:ident: $tb:ty) $body:block) => {
        $(#[$doc])*
        $vis fn $name($a: $ta, $b: $tb) {
            #[inline(always)]
            fn any($a: $ta, $b: $tb) $body
            super::simd_where_available! { fn dispatch($a: $ta, $b: $tb) -> () = any }
            dispatch($a, $b)
        }
    };
}

slice_kernel! {
    /// `dst[i] = bf16 bits src[i]` widened to f32 (exact: the bits move up 16 places).
    pub widen_bf16(src: &[u16], dst: &mut [f32]) {
        for (f, b) in dst.iter_mut().zip(src) {
            *f = wide(*b);
        }
    }
}

slice_kernel! {
    /// `acc[i] += add[i]`, element by element (the order of a sum is the caller's: one add
    /// each).
    pub add_f32(acc: &mut [f32], add: &[f32]) {
        for (a, b) in acc.iter_mut().zip(add) {
            *a += *b;
        }
    }
}

slice_kernel! {
    /// `acc[i] = bf16(acc[i] + add[i])`: two bf16 values added in f32 and rounded to nearest
    /// even, as a reduction that keeps its partial sums in bf16 does at every hop.
    pub add_bf16(acc: &mut [u16], add: &[u16]) {
        for (a, b) in acc.iter_mut().zip(add) {
            *a = round_bf16(wide(*a) + wide(*b)).to_le();
        }
    }
}

slice_kernel! {
    /// `sum_bf16` rounded in software.
    pub(super) sum_bf16_software(dst: &mut [u16], xy: (&[u16], &[u16])) {
        for (d, (x, y)) in dst.iter_mut().zip(xy.0.iter().zip(xy.1)) {
            *d = round_bf16(wide(*x) + wide(*y)).to_le();
        }
    }
}

slice_kernel! {
    /// `dst[i] = x[i] + y[i]`, both bf16 widened to f32 (exactly): a bf16 input and a bf16
    /// partial sum joining in an f32 sum, bit for bit `widen_bf16` of `x` then
    /// `add_bf16_to_f32` of `y`, in one pass.
    pub sum_bf16_to_f32(dst: &mut [f32], xy: (&[u16], &[u16])) {
        for (d, (x, y)) in dst.iter_mut().zip(xy.0.iter().zip(xy.1)) {
            *d = wide(*x) + wide(*y);
        }
    }
}

slice_kernel! {
    /// `add_bf16_and_narrow` rounded in software.
    pub(super) add_bf16_and_narrow_software(dst: &mut [u16], sums_add: (&[f32], &[u16])) {
        for (d, (s, a)) in dst.iter_mut().zip(sums_add.0.iter().zip(sums_add.1)) {
            *d = round_bf16(*s + wide(*a)).to_le();
        }
    }
}

slice_kernel! {
    /// `acc[i] += add[i]` widened from bf16 (a bf16 partial sum joining an f32 sum).
    pub add_bf16_to_f32(acc: &mut [f32], add: &[u16]) {
        for (a, b) in acc.iter_mut().zip(add) {
            *a += wide(*b);
        }
    }
}

slice_kernel! {
    /// `dst[i] = bf16(src[i])`, rounded to nearest even (NaN stays NaN), bit for bit
    /// `half::bf16::from_f32`.
    pub narrow_bf16(src: &[f32], dst: &mut [u16]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = round_bf16(*s).to_le();
        }
    }
}

/// `dst[i] = bf16(x[i] + y[i])`: `add_bf16` with its sum written elsewhere, so a reduction
/// that adds two operands it only reads (a chip's input and a received slot) writes its
/// result once instead of copying one operand first. Bit for bit `add_bf16` with `acc = x`
/// (the order matters only for two NaNs, whose payload comes from `x`). Rounded by the CPU
/// where it has AVX-512 BF16 (`bf16_native`), else in software; the same bits either way.
pub fn sum_bf16(dst: &mut [u16], xy: (&[u16], &[u16])) {
    if !super::bf16_native::sum_bf16(dst, xy.0, xy.1) {
        sum_bf16_software(dst, xy);
    }
}

/// `dst[i] = bf16(sums[i] + add[i])`: a last bf16 partial sum added to f32 sums and the
/// result rounded once, bit for bit `add_bf16_to_f32` then `narrow_bf16`, in one pass
/// (rounded like `sum_bf16`).
pub fn add_bf16_and_narrow(dst: &mut [u16], sums_add: (&[f32], &[u16])) {
    if !super::bf16_native::add_bf16_and_narrow(dst, sums_add.0, sums_add.1) {
        add_bf16_and_narrow_software(dst, sums_add);
    }
}

/// bf16 bits of `x`, rounded to nearest even; a NaN keeps its top bits and is made quiet.
/// Branch-free, so the loops around it vectorize.
#[inline(always)]
pub(super) fn round_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    // One unordered compare where the vector loops would otherwise mask and compare bits.
    let nan = x.is_nan();
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16;
    let quiet = (b >> 16) | 0x0040;
    (if nan { quiet } else { rounded }) as u16
}

/// The f32 a little-endian bf16 holds.
#[inline(always)]
fn wide(b: u16) -> f32 {
    f32::from_bits((u16::from_le(b) as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_and_add_match_the_scalar_definitions() {
        super::super::at_every_simd_level(|_| widen_and_add_once());
    }

    fn widen_and_add_once() {
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

    /// Bits that cover every class: zeros, subnormals, normals near each rounding tie,
    /// infinities, quiet and signalling NaNs of both signs, and the largest finite values.
    fn awkward_f32() -> Vec<f32> {
        let mut bits: Vec<u32> = (0..4000u32)
            .map(|i| i.wrapping_mul(2654435761) ^ (i << 7))
            .collect();
        bits.extend([
            0,
            0x8000_0000,
            1,
            0x8000,
            0x7FFF,
            0x1_8000,
            0x3F80_8000,
            0x3F81_8000,
            0x3F80_7FFF,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x7F7F_8000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFF80_0001,
            0xFFFF_FFFF,
            0x7FFF_FFFF,
        ]);
        bits.into_iter().map(f32::from_bits).collect()
    }

    #[test]
    fn narrowing_is_half_bit_for_bit() {
        super::super::at_every_simd_level(|level| {
            let src = awkward_f32();
            let mut got = vec![0u16; src.len()];
            narrow_bf16(&src, &mut got);
            for (x, g) in src.iter().zip(&got) {
                let want = half::bf16::from_f32(*x).to_bits();
                assert_eq!(*g, want, "level {level}: {:#010x}", x.to_bits());
            }
        });
    }

    #[test]
    fn bf16_sums_round_like_half_and_widen_exactly() {
        super::super::at_every_simd_level(|_| bf16_sums_once());
    }

    fn bf16_sums_once() {
        let xs: Vec<u16> = awkward_f32()
            .iter()
            .map(|x| (x.to_bits() >> 16) as u16)
            .collect();
        let ys: Vec<u16> = xs.iter().rev().copied().collect();
        let mut acc = xs.clone();
        add_bf16(&mut acc, &ys);
        let mut summed = vec![0u16; xs.len()];
        sum_bf16(&mut summed, (&xs, &ys));
        assert_eq!(summed, acc, "sum_bf16 is add_bf16 written elsewhere");
        let mut joined = vec![0f32; xs.len()];
        sum_bf16_to_f32(&mut joined, (&xs, &ys));
        let mut two_pass = vec![0f32; xs.len()];
        widen_bf16(&xs, &mut two_pass);
        add_bf16_to_f32(&mut two_pass, &ys);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&joined),
            bits(&two_pass),
            "sum_bf16_to_f32 is widen, then add"
        );
        let mut narrowed = vec![0u16; xs.len()];
        add_bf16_and_narrow(&mut narrowed, (&joined, &xs));
        add_bf16_to_f32(&mut two_pass, &xs);
        let mut want = vec![0u16; xs.len()];
        narrow_bf16(&two_pass, &mut want);
        assert_eq!(narrowed, want, "add_bf16_and_narrow is add, then narrow");
        let mut wide_acc: Vec<f32> = xs.iter().map(|&x| wide(x)).collect();
        add_bf16_to_f32(&mut wide_acc, &ys);
        for i in 0..xs.len() {
            let sum = wide(xs[i]) + wide(ys[i]);
            assert_eq!(acc[i], half::bf16::from_f32(sum).to_bits(), "element {i}");
            assert_eq!(wide_acc[i].to_bits(), sum.to_bits(), "element {i}");
        }
    }
}

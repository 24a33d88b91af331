//! Received bytes as whole elements: a fabric read hands a slot's bytes over in pieces that
//! may end inside an element, and the reductions add little-endian f32 or bf16 values from
//! them in place. Owns no memory and touches no chip.

/// Hands `f` little-endian bytes of whole `T` elements as `&[T]`: in place when aligned (as
/// chunk memory and allocations are), else copied into an aligned buffer, so the same
/// arithmetic runs either way. The page paths that call this run on little-endian hosts only.
fn as_elems<T: bytemuck::Pod>(bytes: &[u8], f: impl FnOnce(&[T])) {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(v) => f(v),
        Err(_) => {
            let copy: Vec<T> = bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned)
                .collect();
            f(&copy)
        }
    }
}

/// Adds little-endian f32 bytes (whole elements) into `acc`, element by element.
pub(crate) fn add_le_f32(acc: &mut [f32], bytes: &[u8]) {
    as_elems(bytes, |v| ttmesh_chip::format::add_f32(acc, v))
}

/// Writes `dst[i] = bf16(x[i] + y[i])` for little-endian bf16 bytes `x` (whole elements),
/// each rounded once.
pub(crate) fn sum_le_bf16(dst: &mut [u16], x: &[u8], y: &[u16]) {
    as_elems(x, |v| ttmesh_chip::format::sum_bf16(dst, (v, y)))
}

/// Writes `dst[i] = x[i] + y[i]` in f32 for little-endian bf16 bytes `x` (whole elements)
/// and bf16 partial sums `y`.
pub(crate) fn sum_le_bf16_to_f32(dst: &mut [f32], x: &[u8], y: &[u16]) {
    as_elems(x, |v| ttmesh_chip::format::sum_bf16_to_f32(dst, (v, y)))
}

/// Fills `out` (little-endian bf16 bytes, whole elements) with `sums[i] + add[i]` rounded
/// once: a last partial sum joining f32 sums, written straight into chip memory.
pub(crate) fn fill_le_bf16_from_f32(out: &mut [u8], sums: &[f32], add: &[u16]) {
    fill_as_u16(out, |o| {
        ttmesh_chip::format::add_bf16_and_narrow(o, (sums, add))
    })
}

/// Fills `out` (little-endian bf16 bytes, whole elements) with `x[i] + y[i]` rounded once,
/// or with `x` alone when there is no `y`: a sum written straight into chip memory.
pub(crate) fn fill_le_bf16(out: &mut [u8], x: &[u16], y: Option<&[u16]>) {
    fill_as_u16(out, |o| match y {
        Some(y) => ttmesh_chip::format::sum_bf16(o, (x, y)),
        None => o.copy_from_slice(&x[..o.len()]),
    })
}

/// Fills `out` (little-endian bf16 bytes, whole elements) with `x[i] + y[i]` rounded once,
/// for little-endian bf16 bytes `x` and `y`: a sum of two operands read in place (a chip's
/// input and its slot), written straight into chip memory.
pub(crate) fn fill_le_bf16_sum(out: &mut [u8], x: &[u8], y: &[u8]) {
    as_elems(x, |x| {
        as_elems(y, |y| {
            fill_as_u16(out, |o| ttmesh_chip::format::sum_bf16(o, (x, y)))
        })
    })
}

/// Hands `fill` the bytes of `out` as 16-bit words: in place when aligned (as chunk memory
/// is), else through an aligned buffer copied back.
fn fill_as_u16(out: &mut [u8], fill: impl FnOnce(&mut [u16])) {
    match bytemuck::try_cast_slice_mut::<u8, u16>(out) {
        Ok(o) => fill(o),
        Err(_) => {
            let mut o = vec![0u16; out.len() / 2];
            fill(&mut o);
            out.copy_from_slice(bytemuck::cast_slice(&o));
        }
    }
}

/// Adds little-endian bf16 bytes (whole elements) into f32 sums `acc`.
pub(crate) fn add_le_bf16_to_f32(acc: &mut [f32], bytes: &[u8]) {
    as_elems(bytes, |v| ttmesh_chip::format::add_bf16_to_f32(acc, v))
}

/// Turns byte pieces that arrive in order (`DeviceMemory::read_in_place`) into runs of whole
/// `elem`-byte elements for `f(first_element, bytes)`: a piece that ends inside an element
/// carries its bytes over to the next piece.
pub(crate) struct Elements<F> {
    elem: usize,
    carry: [u8; 4],
    carried: usize,
    next: usize,
    f: F,
}

impl<F: FnMut(usize, &[u8])> Elements<F> {
    pub(crate) fn new(elem: usize, f: F) -> Self {
        debug_assert!((1..=4).contains(&elem));
        Elements {
            elem,
            carry: [0; 4],
            carried: 0,
            next: 0,
            f,
        }
    }

    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        if self.carried > 0 {
            let take = (self.elem - self.carried).min(bytes.len());
            self.carry[self.carried..self.carried + take].copy_from_slice(&bytes[..take]);
            self.carried += take;
            bytes = &bytes[take..];
            if self.carried < self.elem {
                return;
            }
            (self.f)(self.next, &self.carry[..self.elem]);
            self.next += 1;
            self.carried = 0;
        }
        let whole = bytes.len() / self.elem * self.elem;
        if whole > 0 {
            (self.f)(self.next, &bytes[..whole]);
            self.next += whole / self.elem;
        }
        let rest = &bytes[whole..];
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carried = rest.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_fills_agree_aligned_or_not() {
        let x: Vec<u16> = (0..64u16).map(|i| 0x3F80 + i * 3).collect();
        let y: Vec<u16> = (0..64u16).map(|i| 0xBF00 + i * 5).collect();
        let sums: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 7.0).collect();
        // Byte 0 of `buf` is 2-aligned (a u16 Vec); byte 1 is not.
        let mut buf = vec![0u16; 65];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        let (xb, yb) = (bytemuck::cast_slice(&x), bytemuck::cast_slice(&y));
        for case in 0..4 {
            let fill = |o: &mut [u8]| match case {
                0 => fill_le_bf16(o, &x, Some(&y)),
                1 => fill_le_bf16(o, &x, None),
                2 => fill_le_bf16_sum(o, xb, yb),
                _ => fill_le_bf16_from_f32(o, &sums, &y),
            };
            fill(&mut bytes[..128]);
            let aligned = bytes[..128].to_vec();
            fill(&mut bytes[1..129]);
            assert_eq!(&bytes[1..129], &aligned[..], "case {case}");
        }
        fill_le_bf16(&mut bytes[..128], &x, None);
        assert_eq!(&bytes[..128], bytemuck::cast_slice::<u16, u8>(&x));
        // Operands read at odd addresses give the same sums.
        let summed = {
            let mut o = vec![0u16; 64];
            fill_le_bf16(bytemuck::cast_slice_mut(&mut o), &x, Some(&y));
            o
        };
        let mut odd = vec![0u8; 257];
        odd[1..129].copy_from_slice(xb);
        odd[129..257].copy_from_slice(yb);
        fill_le_bf16_sum(&mut bytes[..128], &odd[1..129], &odd[129..257]);
        assert_eq!(&bytes[..128], bytemuck::cast_slice::<u16, u8>(&summed));
    }

    #[test]
    fn elements_join_pieces_split_anywhere() {
        let vals: Vec<f32> = (0..40).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        for cuts in [
            vec![0, 160],
            vec![0, 1, 2, 3, 7, 64, 65, 160],
            vec![0, 5, 6, 159, 160],
        ] {
            let mut acc = vec![1.0f32; 40];
            let mut e = Elements::new(4, |at, b: &[u8]| add_le_f32(&mut acc[at..], b));
            for w in cuts.windows(2) {
                e.feed(&bytes[w[0]..w[1]]);
            }
            let want: Vec<f32> = vals.iter().map(|v| 1.0 + v).collect();
            assert_eq!(acc, want, "cut at {cuts:?}");
        }
    }
}

//! ggml tensor types and their dequantisation to f32.
//!
//! Block layouts (all little-endian, `d`/`m`/`dmin` are f16):
//! - Q8_0: 32 values, 34 bytes: `d`, 32 x i8; `x = d * q`.
//! - Q4_0: 32 values, 18 bytes: `d`, 16 bytes of nibbles; low nibbles are values 0..16, high
//!   nibbles values 16..32; `x = d * (q - 8)`.
//! - Q4_1: 32 values, 20 bytes: `d`, `m`, 16 bytes of nibbles as Q4_0; `x = d * q + m`.
//! - Q4_K: 256 values, 144 bytes: `d`, `dmin`, 12 bytes of eight packed 6-bit (scale, min)
//!   pairs, 128 bytes of nibbles. Each 64 values use two pairs: low nibbles with the first,
//!   high nibbles with the second; `x = d * scale * q - dmin * min`.
//! - Q6_K: 256 values, 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit high parts,
//!   16 x i8 scales, `d`; `x = d * scale * (q - 32)`, one scale per 16 values.

use half::{bf16, f16};

/// The ggml tensor types ttmesh can dequantise, with their GGUF type ids (named as ggml
/// names them).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q6_K,
    BF16,
}

impl GgmlType {
    /// The type for a GGUF type id; `Err` carries the name of a known but unsupported type.
    pub fn from_id(id: u32) -> Result<Self, &'static str> {
        Ok(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            12 => Self::Q4_K,
            14 => Self::Q6_K,
            30 => Self::BF16,
            other => return Err(type_name_of_id(other)),
        })
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 8,
            Self::Q4_K => 12,
            Self::Q6_K => 14,
            Self::BF16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        type_name_of_id(self.id())
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q8_0 => 32,
            Self::Q4_K | Self::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q4_K => 144,
            Self::Q6_K => 210,
        }
    }

    /// Bytes of `n` values, or `None` when `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let len = self.block_len() as u64;
        if !n.is_multiple_of(len) {
            return None;
        }
        (n / len).checked_mul(self.block_bytes() as u64)
    }
}

fn type_name_of_id(id: u32) -> &'static str {
    match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        _ => "unknown",
    }
}

fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Dequantises `bytes` (a whole number of blocks of `ty`) into `out`, which must hold
/// `bytes.len() / block_bytes * block_len` values. The caller checks the lengths.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    debug_assert_eq!(
        bytes.len() / ty.block_bytes() * ty.block_len(),
        out.len(),
        "dequantize_into: lengths checked by the caller"
    );
    let blocks = bytes
        .chunks_exact(ty.block_bytes())
        .zip(out.chunks_exact_mut(ty.block_len()));
    match ty {
        GgmlType::F32 => {
            for (b, o) in blocks {
                o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (b, o) in blocks {
                o[0] = f16_at(b, 0);
            }
        }
        GgmlType::BF16 => {
            for (b, o) in blocks {
                o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (b, o) in blocks {
                let d = f16_at(b, 0);
                for (x, &q) in o.iter_mut().zip(&b[2..34]) {
                    *x = d * f32::from(q as i8);
                }
            }
        }
        GgmlType::Q4_0 => {
            for (b, o) in blocks {
                let d = f16_at(b, 0);
                for (j, &q) in b[2..18].iter().enumerate() {
                    o[j] = d * (f32::from(q & 0x0f) - 8.0);
                    o[j + 16] = d * (f32::from(q >> 4) - 8.0);
                }
            }
        }
        GgmlType::Q4_1 => {
            for (b, o) in blocks {
                let d = f16_at(b, 0);
                let m = f16_at(b, 2);
                for (j, &q) in b[4..20].iter().enumerate() {
                    o[j] = d * f32::from(q & 0x0f) + m;
                    o[j + 16] = d * f32::from(q >> 4) + m;
                }
            }
        }
        GgmlType::Q4_K => {
            for (b, o) in blocks {
                dequantize_q4_k_block(b, o);
            }
        }
        GgmlType::Q6_K => {
            for (b, o) in blocks {
                dequantize_q6_k_block(b, o);
            }
        }
    }
}

/// The `j`-th (scale, min) pair of a K-quant's 12 packed bytes: pairs 0..4 are the low 6 bits
/// of bytes 0..4 and 4..8; pairs 4..8 take their low 4 bits from bytes 8..12 and their high 2
/// bits from the top bits of bytes 0..4 (scales) and 4..8 (mins).
fn k_scale_min(j: usize, s: &[u8]) -> (f32, f32) {
    if j < 4 {
        (f32::from(s[j] & 63), f32::from(s[j + 4] & 63))
    } else {
        let scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        let min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (f32::from(scale), f32::from(min))
    }
}

fn dequantize_q4_k_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for chunk in 0..4 {
        let (s1, m1) = k_scale_min(2 * chunk, scales);
        let (s2, m2) = k_scale_min(2 * chunk + 1, scales);
        let q = &qs[32 * chunk..32 * chunk + 32];
        let o = &mut out[64 * chunk..64 * chunk + 64];
        for l in 0..32 {
            o[l] = d * s1 * f32::from(q[l] & 0x0f) - dmin * m1;
            o[l + 32] = d * s2 * f32::from(q[l] >> 4) - dmin * m2;
        }
    }
}

fn dequantize_q6_k_block(b: &[u8], out: &mut [f32]) {
    let ql_all = &b[0..128];
    let qh_all = &b[128..192];
    let sc_all = &b[192..208];
    let d = f16_at(b, 208);
    for half_block in 0..2 {
        let ql = &ql_all[64 * half_block..64 * half_block + 64];
        let qh = &qh_all[32 * half_block..32 * half_block + 32];
        let sc = &sc_all[8 * half_block..8 * half_block + 8];
        let o = &mut out[128 * half_block..128 * half_block + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let scale = |k: usize| d * f32::from(sc[is + k] as i8);
            o[l] = scale(0) * q1 as f32;
            o[l + 32] = scale(2) * q2 as f32;
            o[l + 64] = scale(4) * q3 as f32;
            o[l + 96] = scale(6) * q4 as f32;
        }
    }
}

/// Quantises to Q8_0 the way ggml does (`d = max|x| / 127`, round to nearest), for the GGUF
/// writer. `values.len()` must be a multiple of 32.
pub fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / 32 * 34);
    for block in values.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |a, &x| a.max(x.abs()));
        let d = amax / 127.0;
        let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|&x| (x * inv).round() as i8 as u8));
    }
    out
}

/// Quantises to Q4_1 (`d = (max - min) / 15`, `m = min`, round to nearest), for the writer.
pub fn quantize_q4_1(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / 32 * 20);
    for block in values.chunks_exact(32) {
        let min = block.iter().copied().fold(f32::INFINITY, f32::min);
        let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / 15.0;
        let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
        let q = |x: f32| ((x - min) * inv).round().clamp(0.0, 15.0) as u8;
        for j in 0..16 {
            out.push(q(block[j]) | (q(block[j + 16]) << 4));
        }
    }
    out
}

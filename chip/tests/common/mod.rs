//! Helpers shared by the chip's integration tests: chips, deterministic data, uploads and the
//! tolerances each dtype is held to.
#![allow(dead_code)]

use std::sync::Arc;

use ttmesh_chip::format::round_bf16;
use ttmesh_chip::{
    ArchSpec, Chip, ChipConfig, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor,
};

pub fn chip() -> Arc<Chip> {
    Chip::open(ChipConfig::new(0, ArchSpec::wormhole_b0())).unwrap()
}

pub fn chip_with(f: impl FnOnce(&mut ChipConfig)) -> Arc<Chip> {
    let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
    f(&mut cfg);
    Chip::open(cfg).unwrap()
}

/// Deterministic values in [lo, hi) (an LCG; tests must be reproducible).
pub fn values(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// Uploads `data` and returns the tensor and the values the device actually holds (rounded to
/// the dtype: bf16 on the host, bfloat8_b per tile block on the device).
pub fn upload(
    chip: &Arc<Chip>,
    shape: &[usize],
    dtype: DataType,
    layout: Layout,
    mc: MemoryConfig,
    data: Vec<f32>,
) -> (Tensor, Vec<f32>) {
    let host = HostTensor::from_f32(shape.to_vec(), dtype, data).unwrap();
    let t = Tensor::from_host(&host, chip, layout, mc, CqId(0)).unwrap();
    let held = read(&t);
    (t, held)
}

pub fn read(t: &Tensor) -> Vec<f32> {
    t.to_host(CqId(0)).unwrap().to_f32_vec()
}

/// Checks `got` against the f64-computed `want` with the error a result stored as `dtype` may
/// carry on top of `atol` (the kernel's own f32 error):
/// - FLOAT32: `rtol_f32 * |want|`.
/// - BFLOAT16: rounding to bf16 is within half an ulp, `2^-8 |want|` (plus the f32 error before it).
/// - BFLOAT8_B: each value is within `2^-7` of the largest magnitude of its 16-value block (one
///   face row: 16 consecutive columns of one row, 16-aligned), see format::bfp8.
/// - BFLOAT4_B: the same with `2^-3` (format::bfp4).
pub fn check_stored(
    got: &[f32],
    want: &[f32],
    shape: &[usize],
    dtype: DataType,
    rtol_f32: f64,
    atol: f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs expected {}", got.len(), want.len()));
    }
    let w = *shape.last().unwrap_or(&1);
    for (i, (&g, &x)) in got.iter().zip(want).enumerate() {
        let (g64, x64) = (g as f64, x as f64);
        if g.is_nan() && x.is_nan() || g == x {
            continue;
        }
        let bound = match dtype {
            DataType::Float32 | DataType::UInt32 => rtol_f32 * x64.abs() + atol,
            DataType::BFloat16 => (2f64.powi(-8) + rtol_f32) * x64.abs() + atol,
            DataType::BFloat8B | DataType::BFloat4B => {
                let step = if dtype == DataType::BFloat8B { -7 } else { -3 };
                let row = i / w;
                let start = row * w + (i % w) / 16 * 16;
                let end = (start + 16).min(row * w + w);
                let max = want[start..end]
                    .iter()
                    .map(|v| v.abs() as f64)
                    .fold(0.0, f64::max);
                2f64.powi(step) * max * (1.0 + 1e-6) + rtol_f32 * x64.abs() + atol
            }
        };
        // Written so that a NaN difference fails too.
        let within = (g64 - x64).abs() <= bound;
        if !within {
            return Err(format!(
                "element {i}: got {g} but expected {x} ({dtype}, bound {bound:e})"
            ));
        }
    }
    Ok(())
}

/// Rounds values as storing them in `dtype` does on the host (bfloat8_b is rounded on the device).
pub fn as_dtype(v: &[f32], dtype: DataType) -> Vec<f32> {
    match dtype {
        DataType::BFloat16 => v.iter().map(|&x| round_bf16(x)).collect(),
        _ => v.to_vec(),
    }
}

/// Proptest cases: `n` for CI speed, or PROPTEST_CASES when set (for a deeper run).
pub fn cases(n: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(n)
}

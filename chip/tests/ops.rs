//! Every op on the device against its f64 host reference (`compute::reference`) over random
//! shapes and dtypes. Inputs are in [-1, 1) unless an op needs otherwise; the references take
//! the values the device really holds (bf16 / bfloat8_b rounded), so the only error left is the
//! kernel's f32 arithmetic and the rounding of the stored result, bounded in
//! `common::check_stored`: FLOAT32 rtol 1e-5 (softmax/rms_norm 2e-5), BFLOAT16 half an ulp
//! (2^-8 relative), BFLOAT8_B 2^-7 of the largest value of each 16-value block.

mod common;

use common::{check_stored, chip, read, upload, values};
use proptest::prelude::*;
use ttmesh_chip::compute::{reference, Activation, BinaryOp};
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::{DataType, Layout, MemoryConfig};

fn float_dtype() -> impl Strategy<Value = DataType> {
    prop_oneof![
        Just(DataType::Float32),
        Just(DataType::BFloat16),
        Just(DataType::BFloat8B)
    ]
}

fn mem() -> impl Strategy<Value = MemoryConfig> {
    prop_oneof![Just(MemoryConfig::DRAM), Just(MemoryConfig::L1)]
}

/// Decode-shaped matmuls (a few rows by a large shared weight) take the streaming kernel, over
/// the rayon pool when B is large; 33 rows take sgemm. Edges that are not whole tiles in K and N.
#[test]
fn decode_shaped_matmul_matches_reference() {
    let chip = chip();
    for (i, &(rows, k, n)) in [
        (1, 300, 700),
        (5, 64, 1100),
        (32, 200, 530),
        (33, 100, 300),
        (1, 40, 33),
    ]
    .iter()
    .enumerate()
    {
        for dtype in [
            DataType::Float32,
            DataType::BFloat16,
            DataType::BFloat8B,
            DataType::BFloat4B,
        ] {
            let seed = i as u64 * 31 + dtype as u64;
            let (a, av) = upload(
                &chip,
                &[1, 1, rows, k],
                dtype,
                Layout::Tile,
                MemoryConfig::L1,
                values(seed, rows * k, -1.0, 1.0),
            );
            let (b, bv) = upload(
                &chip,
                &[k, n],
                dtype,
                Layout::Tile,
                MemoryConfig::DRAM,
                values(seed ^ 1, k * n, -1.0, 1.0),
            );
            let out = ops::matmul(&a, &b, &MatmulConfig::default()).unwrap();
            let want = reference::matmul(&av, &bv, 1, 1, rows, k, n).unwrap();
            check_stored(&read(&out), &want, &[1, 1, rows, n], dtype, 1e-5, 1e-5)
                .unwrap_or_else(|e| panic!("{rows}x{k}x{n} {dtype}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(12), ..ProptestConfig::default() })]

    /// Batched matmul (B shared or per batch), optional bias, optional fused activation.
    #[test]
    fn matmul_matches_reference(batch in proptest::collection::vec(1usize..4, 0..3), shared_b in any::<bool>(),
                                m in 1usize..80, k in 1usize..80, n in 1usize..80, dtype in float_dtype(),
                                bias in any::<bool>(), act in 0u8..4, mc in mem(), seed in any::<u64>()) {
        let chip = chip();
        let batch_a: usize = batch.iter().product();
        let mut sa = batch.clone();
        sa.extend([m, k]);
        let mut sb = if shared_b { vec![] } else { batch.clone() };
        sb.extend([k, n]);
        let batch_b = if shared_b { 1 } else { batch_a };
        let (a, av) = upload(&chip, &sa, dtype, Layout::Tile, mc.clone(), values(seed, batch_a * m * k, -1.0, 1.0));
        let (b, bv) = upload(&chip, &sb, dtype, Layout::Tile, MemoryConfig::DRAM, values(seed ^ 1, batch_b * k * n, -1.0, 1.0));
        let activation = [None, Some(Activation::Relu), Some(Activation::Gelu { approximate: false }), Some(Activation::Silu)][act as usize];
        let (bias_t, bias_v) = if bias {
            let (t, v) = upload(&chip, &[1, n], dtype, Layout::Tile, MemoryConfig::L1, values(seed ^ 2, n, -1.0, 1.0));
            (Some(t), Some(v))
        } else {
            (None, None)
        };
        let out = ops::matmul(&a, &b, &MatmulConfig { bias: bias_t, activation, ..Default::default() }).unwrap();
        let mut want = reference::matmul(&av, &bv, batch_a, batch_b, m, k, n).unwrap();
        if let Some(bv) = &bias_v {
            want = reference::add_bias_rows(&want, n, bv).unwrap();
        }
        if let Some(act) = activation {
            want = reference::unary(act, &want);
        }
        let mut so = batch.clone();
        so.extend([m, n]);
        prop_assert_eq!(out.shape(), &so[..]);
        prop_assert_eq!(out.dtype(), dtype);
        check_stored(&read(&out), &want, &so, dtype, 1e-5, 1e-5).map_err(TestCaseError::fail)?;
    }

    /// add / subtract / multiply with numpy broadcasting, either operand broadcast, TILE or ROW_MAJOR.
    #[test]
    fn binary_broadcast_matches_reference(shape in proptest::collection::vec(1usize..24, 1..5), mask in any::<u8>(), drop_lead in 0usize..3,
                                          swap in any::<bool>(), op in 0u8..3, dtype in float_dtype(), row_major in any::<bool>(), seed in any::<u64>()) {
        let chip = chip();
        let layout = if row_major && dtype != DataType::BFloat8B { Layout::RowMajor } else { Layout::Tile };
        let mut other: Vec<usize> = shape.iter().enumerate().map(|(i, &d)| if mask >> i & 1 == 1 { 1 } else { d }).collect();
        other.drain(..drop_lead.min(other.len() - 1));
        let (sa, sb) = if swap { (other, shape.clone()) } else { (shape.clone(), other) };
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let (a, av) = upload(&chip, &sa, dtype, layout, MemoryConfig::DRAM, values(seed, na, -1.0, 1.0));
        let (b, bv) = upload(&chip, &sb, dtype, layout, MemoryConfig::L1, values(seed ^ 7, nb, -1.0, 1.0));
        let bop = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul][op as usize];
        let out = ops::binary(bop, &a, &b, &OpOptions::default()).unwrap();
        let (want, shape_out) = reference::binary_broadcast(bop, &av, &sa, &bv, &sb).unwrap();
        prop_assert_eq!(out.shape(), &shape_out[..]);
        check_stored(&read(&out), &want, &shape_out, dtype, 1e-6, 0.0).map_err(TestCaseError::fail)?;
    }

    /// relu, gelu, silu, exp, reciprocal (and sigmoid, tanh) on every float dtype.
    #[test]
    fn unary_matches_reference(shape in proptest::collection::vec(1usize..40, 1..4), op in 0u8..7, dtype in float_dtype(), seed in any::<u64>()) {
        let chip = chip();
        let n: usize = shape.iter().product();
        let act = [Activation::Relu, Activation::Gelu { approximate: false }, Activation::Silu, Activation::Exp,
                   Activation::Reciprocal, Activation::Sigmoid, Activation::Tanh][op as usize];
        let data: Vec<f32> = match act {
            // Away from 0, where 1/x is well conditioned; signs mixed.
            Activation::Reciprocal => values(seed, n, 0.25, 4.0).into_iter().enumerate().map(|(i, x)| if i % 3 == 0 { -x } else { x }).collect(),
            _ => values(seed, n, -4.0, 4.0),
        };
        let (a, av) = upload(&chip, &shape, dtype, Layout::Tile, MemoryConfig::L1, data);
        let out = match act {
            Activation::Relu => ops::relu(&a, &OpOptions::default()),
            Activation::Gelu { .. } => ops::gelu(&a, &OpOptions::default()),
            Activation::Silu => ops::silu(&a, &OpOptions::default()),
            Activation::Exp => ops::exp(&a, &OpOptions::default()),
            Activation::Reciprocal => ops::reciprocal(&a, &OpOptions::default()),
            Activation::Sigmoid => ops::sigmoid(&a, &OpOptions::default()),
            _ => ops::tanh(&a, &OpOptions::default()),
        }.unwrap();
        check_stored(&read(&out), &reference::unary(act, &av), &shape, dtype, 1e-5, 1e-6).map_err(TestCaseError::fail)?;
    }

    /// Softmax and RMS norm (with and without gamma) over the last dim.
    #[test]
    fn softmax_and_rms_norm_match_reference(lead in 1usize..4, h in 1usize..70, w in 1usize..90, bf16 in any::<bool>(),
                                            gamma in any::<bool>(), seed in any::<u64>()) {
        let chip = chip();
        let dtype = if bf16 { DataType::BFloat16 } else { DataType::Float32 };
        let shape = [lead, h, w];
        let (a, av) = upload(&chip, &shape, dtype, Layout::Tile, MemoryConfig::DRAM, values(seed, lead * h * w, -3.0, 3.0));
        let sm = ops::softmax(&a, &OpOptions::default()).unwrap();
        check_stored(&read(&sm), &reference::softmax_last_dim(&av, w).unwrap(), &shape, dtype, 2e-5, 1e-7).map_err(TestCaseError::fail)?;
        let (g, gv) = upload(&chip, &[w], dtype, Layout::RowMajor, MemoryConfig::L1, values(seed ^ 3, w, 0.5, 2.0));
        let rn = ops::rms_norm(&a, if gamma { Some(&g) } else { None }, 1e-5, &OpOptions::default()).unwrap();
        let want = reference::rms_norm_last_dim(&av, w, if gamma { Some(&gv) } else { None }, 1e-5).unwrap();
        check_stored(&read(&rn), &want, &shape, dtype, 2e-5, 1e-6).map_err(TestCaseError::fail)?;
    }

    /// Typecast between every pair of dtypes.
    #[test]
    fn typecast_rounds_like_the_target_dtype(shape in proptest::collection::vec(1usize..50, 1..4), from in 0u8..4, to in 0u8..4, seed in any::<u64>()) {
        let chip = chip();
        let dts = [DataType::Float32, DataType::BFloat16, DataType::BFloat8B, DataType::UInt32];
        let (from, to) = (dts[from as usize], dts[to as usize]);
        let n: usize = shape.iter().product();
        let (a, av) = if from == DataType::UInt32 {
            let host = ttmesh_chip::HostTensor::from_u32(shape.clone(), (0..n as u32).map(|i| i.wrapping_mul(2654435761) % 100_000).collect()).unwrap();
            let t = ttmesh_chip::Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::DRAM, ttmesh_chip::CqId(0)).unwrap();
            let v = read(&t);
            (t, v)
        } else {
            upload(&chip, &shape, from, Layout::Tile, MemoryConfig::DRAM, values(seed, n, -300.0, 300.0))
        };
        let out = ops::typecast(&a, to, &OpOptions::default()).unwrap();
        prop_assert_eq!(out.dtype(), to);
        let got = read(&out);
        match to {
            // To UINT32: round to nearest, negatives clamp to 0.
            DataType::UInt32 => {
                let want: Vec<f32> = av.iter().map(|&x| if x <= 0.0 { 0.0 } else { x.round() }).collect();
                prop_assert_eq!(got, want);
            }
            DataType::Float32 => prop_assert_eq!(got, av),
            DataType::BFloat16 => {
                let want: Vec<f32> = av.iter().map(|&x| ttmesh_chip::format::round_bf16(x)).collect();
                prop_assert_eq!(got, want);
            }
            DataType::BFloat8B | DataType::BFloat4B => check_stored(&got, &av, &shape, to, 0.0, 0.0).map_err(TestCaseError::fail)?,
        }
    }
}

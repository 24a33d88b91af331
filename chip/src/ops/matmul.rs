//! Matmul: batched, optional bias, optional fused activation; f32 accumulation.

use std::sync::Arc;

use super::io::{read_f32, read_two_f32, recycle_f32, take_f32, write_logical, TileReader};
use super::matmul_streaming::{matmul_streaming_b, STREAMING_MAX_ROWS};
use super::{default_memory_config, run_op, unsupported_dtype, OpLaunch, OpOptions};
use crate::arch::MathFidelity;
use crate::compute::{self, Activation};
use crate::error::{ChipError, Result};
use crate::program::{Kernel, KernelContext, KernelCost};
use crate::tensor::{DataType, HostData, Layout, Tensor, TensorSpec};

#[derive(Clone, Debug, Default)]
pub struct MatmulConfig {
    pub bias: Option<Tensor>,
    pub activation: Option<Activation>,
    pub math_fidelity: MathFidelity,
    pub options: OpOptions,
}

struct MatmulKernel {
    a: TensorSpec,
    b: TensorSpec,
    bias: Option<TensorSpec>,
    out: TensorSpec,
    activation: Option<Activation>,
    math_fidelity: MathFidelity,
    dims: Dims,
}

#[derive(Clone, Copy, Debug)]
struct Dims {
    batch_a: usize,
    batch_b: usize,
    m: usize,
    k: usize,
    n: usize,
}

impl Kernel for MatmulKernel {
    fn name(&self) -> &str {
        "Matmul"
    }

    fn execute(&self, ctx: &KernelContext, addresses: &[u32]) -> Result<()> {
        let d = self.dims;
        let rows = d.batch_a * d.m;
        // Both paths overwrite every element, so a recycled buffer will do.
        let mut out = take_f32(rows * d.n);
        let streaming = if d.batch_b == 1 && rows <= STREAMING_MAX_ROWS {
            TileReader::new(ctx, &self.b, addresses[1])?
        } else {
            None
        };
        if let Some(b_tiles) = streaming {
            let a = read_f32(ctx, &self.a, addresses[0])?;
            matmul_streaming_b(&a, rows, (d.k, d.n), &b_tiles, &mut out)?;
            recycle_f32(a);
        } else {
            let (a, b) = read_two_f32(ctx, (&self.a, addresses[0]), (&self.b, addresses[1]))?;
            compute::matmul(&a, &b, d.batch_a, d.batch_b, d.m, d.k, d.n, &mut out)?;
            recycle_f32(a);
            recycle_f32(b);
        }
        let out_addr = *addresses.last().unwrap_or(&0);
        if let Some(bias_spec) = &self.bias {
            let bias = read_f32(ctx, bias_spec, addresses[2])?;
            compute::add_bias_rows(&mut out, d.n, &bias)?;
        }
        if let Some(act) = self.activation {
            compute::unary_inplace(act, &mut out);
        }
        let out = HostData::F32(out);
        write_logical(ctx, &self.out, out_addr, &out)?;
        if let HostData::F32(v) = out {
            recycle_f32(v);
        }
        Ok(())
    }

    fn cost(&self) -> KernelCost {
        let d = self.dims;
        let bytes = |s: &TensorSpec| s.buffer_size() as f64;
        KernelCost {
            flops: 2.0 * (d.batch_a * d.m * d.k * d.n) as f64,
            dram_bytes: bytes(&self.a) + bytes(&self.b) + bytes(&self.out),
            matmul_tiles: (d.batch_a * d.m.div_ceil(32) * d.k.div_ceil(32) * d.n.div_ceil(32))
                as f64,
            math_fidelity: self.math_fidelity,
            ..Default::default()
        }
    }
}

/// `a [..., M, K] x b [..., K, N]` (b's batch 1 or equal to a's) `+ bias [N]`, then activation.
pub fn matmul(a: &Tensor, b: &Tensor, config: &MatmulConfig) -> Result<Tensor> {
    for t in [a, b].into_iter().chain(config.bias.as_ref()) {
        if t.dtype() == DataType::UInt32 {
            return Err(unsupported_dtype("matmul", t));
        }
        if t.spec().layout != Layout::Tile {
            return Err(ChipError::Unsupported {
                op: "matmul".into(),
                what: format!("ROW_MAJOR layout of {}", t.name()),
                hint: "matmul works on tiles; convert with to_layout(Layout::Tile)".into(),
            });
        }
    }
    let (sa, sb) = (a.shape(), b.shape());
    if sa.len() < 2 || sb.len() < 2 {
        return Err(ChipError::ShapeMismatch {
            op: "matmul".into(),
            detail: format!("inputs need rank >= 2, got {:?} and {:?}", sa, sb),
        });
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (kb, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    let batch_a: usize = sa[..sa.len() - 2].iter().product();
    let batch_b: usize = sb[..sb.len() - 2].iter().product();
    if k != kb {
        return Err(ChipError::ShapeMismatch {
            op: "matmul".into(),
            detail: format!(
                "inner dims differ: {} is {:?}, {} is {:?} (K {} vs {})",
                a.name(),
                sa,
                b.name(),
                sb,
                k,
                kb
            ),
        });
    }
    if batch_b != 1 && batch_b != batch_a {
        return Err(ChipError::ShapeMismatch {
            op: "matmul".into(),
            detail: format!(
                "batch of {} ({batch_b}) must be 1 or equal a's ({batch_a})",
                b.name()
            ),
        });
    }
    if let Some(bias) = &config.bias {
        let bs = bias.shape();
        if bs.last() != Some(&n) || bs.iter().rev().skip(1).any(|&d| d != 1) {
            return Err(ChipError::ShapeMismatch {
                op: "matmul".into(),
                detail: format!(
                    "bias {} must be [N] or [1, .., 1, N] with N = {n}",
                    bias.name()
                ),
            });
        }
    }
    let mut out_shape = sa[..sa.len() - 1].to_vec();
    out_shape.push(n);
    let opts = &config.options;
    let out_spec = TensorSpec::new(
        out_shape,
        opts.dtype.unwrap_or(a.dtype()),
        Layout::Tile,
        default_memory_config(a.spec(), opts),
    );
    let mut inputs = vec![a, b];
    if let Some(bias) = &config.bias {
        inputs.push(bias);
    }
    let dims = Dims {
        batch_a,
        batch_b,
        m,
        k,
        n,
    };
    let activation = config.activation;
    let math_fidelity = config.math_fidelity;
    let launch = OpLaunch {
        name: "Matmul",
        attributes: format!(
            "{:?} {:?} bias={}",
            activation,
            config.math_fidelity,
            config.bias.is_some()
        ),
        inputs,
        output_spec: out_spec,
        extra_args: 6,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(MatmulKernel {
            a: ins[0].clone(),
            b: ins[1].clone(),
            bias: ins.get(2).cloned(),
            out: out.clone(),
            activation,
            math_fidelity,
            dims,
        }))
    })
}

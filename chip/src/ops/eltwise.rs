//! Elementwise and row-wise ops: binary with broadcasting, unary activations, softmax, rms_norm.

use std::sync::Arc;

use super::io::{read_f32, write_logical};
use super::{default_memory_config, run_op, unsupported_dtype, OpLaunch, OpOptions};
use crate::compute::{self, Activation, BinaryOp};
use crate::error::{ChipError, Result};
use crate::program::{Kernel, KernelContext, KernelCost};
use crate::tensor::{DataType, HostData, Tensor, TensorSpec};

struct BinaryKernel {
    op: BinaryOp,
    a: TensorSpec,
    b: TensorSpec,
    out: TensorSpec,
}

impl Kernel for BinaryKernel {
    fn name(&self) -> &str {
        "BinaryNg"
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let a = read_f32(ctx, &self.a, addr[0])?;
        let b = read_f32(ctx, &self.b, addr[1])?;
        let (out, _) = compute::binary_broadcast(self.op, &a, &self.a.shape, &b, &self.b.shape)?;
        write_logical(ctx, &self.out, addr[2], &HostData::F32(out))
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            flops: self.out.volume() as f64,
            dram_bytes: (self.a.buffer_size() + self.b.buffer_size() + self.out.buffer_size())
                as f64,
            ..Default::default()
        }
    }
}

fn check_float(op: &str, t: &Tensor) -> Result<()> {
    if t.dtype() == DataType::UInt32 {
        Err(unsupported_dtype(op, t))
    } else {
        Ok(())
    }
}

/// `op(a, b)` with numpy broadcasting; the output takes a's layout.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    let name = match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "subtract",
        BinaryOp::Mul => "multiply",
    };
    check_float(name, a)?;
    check_float(name, b)?;
    let shape =
        compute::broadcast_shape(a.shape(), b.shape()).map_err(|e| ChipError::ShapeMismatch {
            op: name.into(),
            detail: format!("{} and {} do not broadcast: {e}", a.name(), b.name()),
        })?;
    let out_spec = TensorSpec::new(
        shape,
        opts.dtype.unwrap_or(a.dtype()),
        a.spec().layout,
        default_memory_config(a.spec(), opts),
    );
    let launch = OpLaunch {
        name: "BinaryNg",
        attributes: format!("{op:?}"),
        inputs: vec![a, b],
        output_spec: out_spec,
        extra_args: 2,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(BinaryKernel {
            op,
            a: ins[0].clone(),
            b: ins[1].clone(),
            out: out.clone(),
        }))
    })
}

pub fn add(a: &Tensor, b: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    binary(BinaryOp::Add, a, b, opts)
}
pub fn sub(a: &Tensor, b: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    binary(BinaryOp::Sub, a, b, opts)
}
pub fn mul(a: &Tensor, b: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    binary(BinaryOp::Mul, a, b, opts)
}

/// Row-wise and pointwise kernels share one shape: read one tensor, transform, write.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RowOp {
    Unary(Activation),
    Softmax,
    RmsNorm { epsilon: f32, has_gamma: bool },
}

struct RowKernel {
    op: RowOp,
    input: TensorSpec,
    gamma: Option<TensorSpec>,
    out: TensorSpec,
}

impl Kernel for RowKernel {
    fn name(&self) -> &str {
        match self.op {
            RowOp::Unary(_) => "Unary",
            RowOp::Softmax => "Softmax",
            RowOp::RmsNorm { .. } => "RMSNorm",
        }
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        let mut x = read_f32(ctx, &self.input, addr[0])?;
        let cols = *self.input.shape.last().unwrap_or(&1);
        match self.op {
            RowOp::Unary(act) => compute::unary_inplace(act, &mut x),
            RowOp::Softmax => compute::softmax_last_dim(&mut x, cols)?,
            RowOp::RmsNorm { epsilon, .. } => {
                let gamma = match &self.gamma {
                    Some(g) => Some(read_f32(ctx, g, addr[1])?),
                    None => None,
                };
                compute::rms_norm_last_dim(&mut x, cols, gamma.as_deref(), epsilon)?;
            }
        }
        write_logical(
            ctx,
            &self.out,
            *addr.last().unwrap_or(&0),
            &HostData::F32(x),
        )
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            flops: 4.0 * self.input.volume() as f64,
            dram_bytes: (self.input.buffer_size() + self.out.buffer_size()) as f64,
            ..Default::default()
        }
    }
}

fn row_op(
    name: &'static str,
    op: RowOp,
    a: &Tensor,
    gamma: Option<&Tensor>,
    opts: &OpOptions,
) -> Result<Tensor> {
    check_float(name, a)?;
    let mut inputs = vec![a];
    if let Some(g) = gamma {
        check_float(name, g)?;
        let cols = *a.shape().last().unwrap_or(&1);
        if g.spec().volume() != cols {
            return Err(ChipError::ShapeMismatch {
                op: name.into(),
                detail: format!(
                    "gamma {} must hold one value per column ({cols}) of {}",
                    g.name(),
                    a.name()
                ),
            });
        }
        inputs.push(g);
    }
    let out_spec = TensorSpec::new(
        a.shape().to_vec(),
        opts.dtype.unwrap_or(a.dtype()),
        a.spec().layout,
        default_memory_config(a.spec(), opts),
    );
    let launch = OpLaunch {
        name,
        attributes: format!("{op:?}"),
        inputs,
        output_spec: out_spec,
        extra_args: 1,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(RowKernel {
            op,
            input: ins[0].clone(),
            gamma: ins.get(1).cloned(),
            out: out.clone(),
        }))
    })
}

pub fn unary(op: Activation, a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    row_op("Unary", RowOp::Unary(op), a, None, opts)
}
pub fn relu(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Relu, a, opts)
}
pub fn gelu(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Gelu { approximate: false }, a, opts)
}
pub fn silu(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Silu, a, opts)
}
pub fn exp(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Exp, a, opts)
}
pub fn reciprocal(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Reciprocal, a, opts)
}
pub fn sigmoid(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Sigmoid, a, opts)
}
pub fn tanh(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    unary(Activation::Tanh, a, opts)
}

/// Softmax over the last dim.
pub fn softmax(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    row_op("Softmax", RowOp::Softmax, a, None, opts)
}

/// RMS norm over the last dim, optionally scaled by `gamma` (one value per column).
pub fn rms_norm(
    a: &Tensor,
    gamma: Option<&Tensor>,
    epsilon: f32,
    opts: &OpOptions,
) -> Result<Tensor> {
    row_op(
        "RMSNorm",
        RowOp::RmsNorm {
            epsilon,
            has_gamma: gamma.is_some(),
        },
        a,
        gamma,
        opts,
    )
}

//! Data movement: typecast, layout and memory-config changes, reshard, copy. One kernel reads
//! the input's logical values and writes them in the output's spec.

use std::sync::Arc;

use super::io::{copy_pages, read_logical, write_logical};
use super::{run_op, OpLaunch, OpOptions};
use crate::error::{ChipError, Result};
use crate::program::{Kernel, KernelContext, KernelCost};
use crate::tensor::{DataType, HostData, Layout, MemoryConfig, Tensor, TensorSpec};

struct MoveKernel {
    name: &'static str,
    input: TensorSpec,
    out: TensorSpec,
}

impl Kernel for MoveKernel {
    fn name(&self) -> &str {
        self.name
    }
    fn execute(&self, ctx: &KernelContext, addr: &[u32]) -> Result<()> {
        // Same dtype and layout: the pages move as they are, only their places change.
        if self.input.dtype == self.out.dtype && self.input.layout == self.out.layout {
            return copy_pages(ctx, &self.input, addr[0], &self.out, addr[1]);
        }
        let data = read_logical(ctx, &self.input, addr[0])?;
        let data = match (data, self.out.dtype) {
            (HostData::F32(v), DataType::UInt32) => HostData::U32(
                v.into_iter()
                    .map(|x| {
                        if x.is_nan() || x <= 0.0 {
                            0
                        } else {
                            x.round() as u32
                        }
                    })
                    .collect(),
            ),
            (HostData::U32(v), dt) if dt != DataType::UInt32 => {
                HostData::F32(v.into_iter().map(|x| x as f32).collect())
            }
            (d, _) => d,
        };
        write_logical(ctx, &self.out, addr[1], &data)
    }
    fn cost(&self) -> KernelCost {
        KernelCost {
            dram_bytes: (self.input.buffer_size() + self.out.buffer_size()) as f64,
            ..Default::default()
        }
    }
}

fn move_op(
    name: &'static str,
    a: &Tensor,
    out_spec: TensorSpec,
    opts: &OpOptions,
) -> Result<Tensor> {
    let launch = OpLaunch {
        name,
        attributes: String::new(),
        inputs: vec![a],
        output_spec: out_spec,
        extra_args: 0,
    };
    run_op(launch, opts, |ins, out| {
        Ok(Arc::new(MoveKernel {
            name,
            input: ins[0].clone(),
            out: out.clone(),
        }))
    })
}

fn spec_with(a: &Tensor, f: impl FnOnce(&mut TensorSpec)) -> TensorSpec {
    let mut s = a.spec().clone();
    f(&mut s);
    s
}

/// Converts values to another dtype (floats round to the new format; to UINT32 rounds and clamps at 0).
pub fn typecast(a: &Tensor, dtype: DataType, opts: &OpOptions) -> Result<Tensor> {
    if dtype.is_block_float() && a.spec().layout != Layout::Tile {
        return Err(ChipError::Unsupported {
            op: "typecast".into(),
            what: format!("{dtype} output from ROW_MAJOR {}", a.name()),
            hint: format!("{dtype} exists only in TILE layout; convert with to_layout first"),
        });
    }
    let spec = spec_with(a, |s| {
        s.dtype = dtype;
        if let Some(mc) = &opts.memory_config {
            s.memory_config = mc.clone();
        }
    });
    move_op("Typecast", a, spec, opts)
}

/// Moves a tensor to another memory config (DRAM <-> L1, interleaved <-> sharded).
pub fn to_memory_config(
    a: &Tensor,
    memory_config: &MemoryConfig,
    opts: &OpOptions,
) -> Result<Tensor> {
    let spec = spec_with(a, |s| {
        s.memory_config = memory_config.clone();
        if let Some(dt) = opts.dtype {
            s.dtype = dt;
        }
    });
    move_op("InterleavedToSharded", a, spec, opts)
}

/// Reshards into `memory_config`, writing into `output` when given (the seed's in-place reshard).
pub fn reshard(
    a: &Tensor,
    memory_config: &MemoryConfig,
    output: Option<&Tensor>,
    cq: crate::device::CqId,
) -> Result<Tensor> {
    let spec = spec_with(a, |s| s.memory_config = memory_config.clone());
    let opts = OpOptions {
        output: output.cloned(),
        cq,
        ..Default::default()
    };
    move_op("Reshard", a, spec, &opts)
}

/// Tilizes or untilizes on the device.
pub fn to_layout(a: &Tensor, layout: Layout, opts: &OpOptions) -> Result<Tensor> {
    if layout == Layout::RowMajor && a.dtype().is_block_float() {
        return Err(ChipError::Unsupported {
            op: "to_layout".into(),
            what: format!("ROW_MAJOR from {} {}", a.dtype(), a.name()),
            hint: "typecast to BFLOAT16 first".into(),
        });
    }
    let spec = spec_with(a, |s| {
        s.layout = layout;
        if let Some(mc) = &opts.memory_config {
            s.memory_config = mc.clone();
        }
    });
    move_op(
        if layout == Layout::Tile {
            "Tilize"
        } else {
            "Untilize"
        },
        a,
        spec,
        opts,
    )
}

/// Copies `a` into `opts.output` (or a new tensor of the same spec).
pub fn copy(a: &Tensor, opts: &OpOptions) -> Result<Tensor> {
    let spec = match &opts.output {
        Some(o) => {
            if o.shape() != a.shape() {
                return Err(ChipError::ShapeMismatch {
                    op: "copy".into(),
                    detail: format!("{} and {} differ in shape", a.name(), o.name()),
                });
            }
            o.spec().clone()
        }
        None => a.spec().clone(),
    };
    move_op("Copy", a, spec, opts)
}

//! Ops as kernels on the chip's memory. Each op validates its inputs, computes the output spec,
//! finds or compiles its program (the program cache), allocates the output (or takes the one
//! given), and enqueues one launch whose runtime args carry the buffer addresses. The kernel
//! runs on the dispatcher, reading and writing device pages. Host references live in
//! `crate::compute::reference`.

mod data_movement;
mod decode;
mod eltwise;
mod io;
mod launch;
mod matmul;
mod matmul_streaming;
mod shape;
mod tiles;

pub use data_movement::{copy, reshard, to_layout, to_memory_config, typecast};
pub use decode::{
    argmax, embedding, rotary_embedding, scaled_dot_product_attention_decode, update_cache,
};
pub use eltwise::{
    add, binary, exp, gelu, mul, reciprocal, relu, rms_norm, sigmoid, silu, softmax, sub, tanh,
    unary,
};
pub use io::{read_logical, write_logical};
pub use launch::{launch, Launch, LaunchRecord, LaunchSplit, RecordedLaunch};
pub(crate) use launch::{run_op, OpLaunch};
pub use matmul::{matmul, MatmulConfig};
pub use shape::{concat, permute, reshape, slice, transpose};

use crate::device::CqId;
use crate::error::ChipError;
use crate::program::CoreSplit;
use crate::tensor::{DataType, MemoryConfig, Tensor, TensorSpec};

/// Options every op takes (TT-NN's `memory_config`, `dtype`, `output_tensor`, `queue_id`).
#[derive(Clone, Debug, Default)]
pub struct OpOptions {
    /// Write into this tensor instead of allocating one (traces need fixed outputs).
    pub output: Option<Tensor>,
    pub memory_config: Option<MemoryConfig>,
    pub dtype: Option<DataType>,
    pub cq: CqId,
    /// Where to leave the launch the op derives, to repeat it on identical chips.
    pub record: Option<LaunchRecord>,
}

impl OpOptions {
    pub fn on_cq(cq: CqId) -> OpOptions {
        OpOptions {
            cq,
            ..Default::default()
        }
    }
    pub fn into_output(output: &Tensor) -> OpOptions {
        OpOptions {
            output: Some(output.clone()),
            ..Default::default()
        }
    }
}

/// Default output memory config: the input's if interleaved, DRAM interleaved otherwise.
/// A given output tensor decides it when `memory_config` is not set (TT-NN's rule).
pub(crate) fn default_memory_config(input: &TensorSpec, opts: &OpOptions) -> MemoryConfig {
    let given = opts.output.as_ref().map(|o| o.spec().memory_config.clone());
    opts.memory_config.clone().or(given).unwrap_or_else(|| {
        if input.memory_config.is_sharded() {
            MemoryConfig::DRAM
        } else {
            input.memory_config.clone()
        }
    })
}

/// Work split of an op over the compute grid: output pages spread over up to all cores.
pub(crate) fn split_over_grid(
    chip_cores: u32,
    units: u64,
    extra_args: u16,
    operands: usize,
) -> CoreSplit {
    let cores = (units.max(1)).min(chip_cores as u64) as u32;
    CoreSplit {
        cores,
        units_per_core: units.div_ceil(cores as u64) as u32,
        args_per_core: operands as u16 + 2 + extra_args,
    }
}

/// Error for a dtype an op cannot take.
pub(crate) fn unsupported_dtype(op: &str, t: &Tensor) -> ChipError {
    ChipError::Unsupported {
        op: op.into(),
        what: format!("dtype {} of {}", t.dtype(), t.name()),
        hint: "typecast it to BFLOAT16 or FLOAT32 first".into(),
    }
}

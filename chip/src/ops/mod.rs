//! Ops as kernels on the chip's memory. Each op validates its inputs, computes the output spec,
//! finds or compiles its program (the program cache), allocates the output (or takes the one
//! given), and enqueues one launch whose runtime args carry the buffer addresses. The kernel
//! runs on the dispatcher, reading and writing device pages. Host references live in
//! `crate::compute::reference`.

mod data_movement;
mod decode;
mod eltwise;
mod io;
mod matmul;
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
pub use matmul::{matmul, MatmulConfig};

use std::sync::Arc;

use crate::device::CqId;
use crate::error::{ChipError, Result};
use crate::program::{program_key, Access, CoreSplit, Kernel, OperandInfo, Program};
use crate::tensor::{DataType, MemoryConfig, Tensor, TensorSpec};

/// Options every op takes (TT-NN's `memory_config`, `dtype`, `output_tensor`, `queue_id`).
#[derive(Clone, Debug, Default)]
pub struct OpOptions {
    /// Write into this tensor instead of allocating one (traces need fixed outputs).
    pub output: Option<Tensor>,
    pub memory_config: Option<MemoryConfig>,
    pub dtype: Option<DataType>,
    pub cq: CqId,
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

/// Everything an op hands to the common launch path.
pub(crate) struct OpLaunch<'a> {
    pub name: &'static str,
    /// Attributes that change the program (hashed into the cache key with the specs).
    pub attributes: String,
    pub inputs: Vec<&'a Tensor>,
    pub output_spec: TensorSpec,
    pub extra_args: u16,
}

pub(crate) fn run_op(
    launch: OpLaunch<'_>,
    opts: &OpOptions,
    make_kernel: impl FnOnce(&[TensorSpec], &TensorSpec) -> Result<Arc<dyn Kernel>>,
) -> Result<Tensor> {
    let first = launch
        .inputs
        .first()
        .ok_or_else(|| ChipError::InvalidConfig(format!("{} needs inputs", launch.name)))?;
    let chip = first.chip().clone();
    let mut addresses = Vec::with_capacity(launch.inputs.len() + 1);
    let mut ids = Vec::with_capacity(launch.inputs.len() + 1);
    for t in &launch.inputs {
        if t.chip().id() != chip.id() || !Arc::ptr_eq(t.chip(), &chip) {
            return Err(ChipError::InvalidConfig(format!(
                "{}: {} is on another chip than {}; move it first",
                launch.name,
                t.name(),
                first.name()
            )));
        }
        let (address, id) = t.buffer("used as an input")?;
        addresses.push(address as u32);
        ids.push(id);
    }
    // Named only on failure: no string is built on the dispatch path.
    if launch.output_spec.validate(chip.arch(), "").is_err() {
        launch
            .output_spec
            .validate(chip.arch(), &format!("{} output", launch.name))?;
    }
    let output = match &opts.output {
        Some(out) => {
            if out.spec() != &launch.output_spec {
                return Err(ChipError::ShapeMismatch {
                    op: launch.name.into(),
                    detail: format!(
                        "the output tensor given is {} but the op produces {}; pass an output with that spec",
                        out.name(),
                        launch.output_spec
                    ),
                });
            }
            if !Arc::ptr_eq(out.chip(), &chip) {
                return Err(ChipError::InvalidConfig(format!(
                    "{}: output {} is on another chip",
                    launch.name,
                    out.name()
                )));
            }
            out.clone()
        }
        None => Tensor::allocate(&chip, launch.output_spec.clone())?,
    };
    let (out_address, out_id) = output.buffer("written as an output")?;
    addresses.push(out_address as u32);
    ids.push(out_id);

    // Hashing references hashes the specs themselves: the key is what it was with owned
    // specs, without cloning them on every dispatch.
    let in_specs: Vec<&TensorSpec> = launch.inputs.iter().map(|t| t.spec()).collect();
    let key = program_key(&(
        launch.name,
        &launch.attributes,
        &in_specs,
        &launch.output_spec,
    ));
    let capturing = chip.is_capturing(opts.cq);
    let program = chip.program_cache().get_or_compile(
        key,
        !capturing,
        || {
            format!(
                "{}({}) on {:?}",
                launch.name,
                launch.attributes,
                in_specs.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            )
        },
        || {
            let arch = chip.arch().clone();
            let owned: Vec<TensorSpec> = in_specs.iter().map(|s| (*s).clone()).collect();
            let kernel = make_kernel(&owned, &launch.output_spec)?;
            let mut operands = Vec::new();
            for (t, access) in launch
                .inputs
                .iter()
                .map(|t| (t, Access::Read))
                .chain(std::iter::once((&&output, Access::Write)))
            {
                let req = t.spec().allocation_request(&arch)?;
                let per_bank = chip
                    .with_allocator(|a| a.per_bank_size(&req))
                    .map(|x| x.0)?;
                operands.push(OperandInfo {
                    buffer_type: t.spec().memory_config.buffer_type,
                    access,
                    per_bank_size: per_bank,
                });
            }
            let split = split_over_grid(
                arch.num_compute_cores(),
                launch.output_spec.num_pages(),
                launch.extra_args,
                operands.len(),
            );
            Ok(Program::new(kernel, operands, split, Vec::new()))
        },
    )?;
    chip.enqueue_program(opts.cq, &program, &addresses, &ids)?;
    Ok(output)
}

/// Error for a dtype an op cannot take.
pub(crate) fn unsupported_dtype(op: &str, t: &Tensor) -> ChipError {
    ChipError::Unsupported {
        op: op.into(),
        what: format!("dtype {} of {}", t.dtype(), t.name()),
        hint: "typecast it to BFLOAT16 or FLOAT32 first".into(),
    }
}

//! Every chip op on mesh tensors (applied to each chip's tensor, in the same order on every
//! chip, so outputs share one address), and tensor-parallel matmuls.

use ttmesh_chip::compute::Activation;
use ttmesh_chip::ops::{self as chip_ops, OpOptions};
use ttmesh_chip::tensor::Tensor;
use ttmesh_chip::{CqId, DataType, Layout, MathFidelity, MemoryConfig};

use crate::ccl::{self, CclArgs};
use crate::error::{invalid, on_chip, Result};
use crate::tensor::MeshTensor;

mod decode;
pub use decode::{
    argmax, embedding, rotary_embedding, scaled_dot_product_attention_decode, update_cache,
};

/// TT-NN's per-op options for mesh tensors.
#[derive(Clone, Debug, Default)]
pub struct MeshOpOptions {
    pub output: Option<MeshTensor>,
    pub memory_config: Option<MemoryConfig>,
    pub dtype: Option<DataType>,
    pub cq: CqId,
}

impl MeshOpOptions {
    fn for_chip(&self, i: usize) -> OpOptions {
        OpOptions {
            output: self.output.as_ref().map(|o| o.shards[i].clone()),
            memory_config: self.memory_config.clone(),
            dtype: self.dtype,
            cq: self.cq,
        }
    }
}

/// Runs `f` on every chip with that chip's tensors; checks the inputs share one mesh.
pub fn per_chip(
    inputs: &[&MeshTensor],
    f: impl Fn(usize, &[&Tensor]) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    per_chip_into(inputs, None, f)
}

/// [`per_chip`] with a preallocated output, which must live on the inputs' mesh: a chip would
/// otherwise write at an address another mesh's allocator handed out.
fn per_chip_into(
    inputs: &[&MeshTensor],
    output: Option<&MeshTensor>,
    f: impl Fn(usize, &[&Tensor]) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    let first = inputs
        .first()
        .ok_or_else(|| invalid("mesh op", "no inputs"))?;
    let mesh = first.mesh.clone();
    for t in inputs {
        if !std::sync::Arc::ptr_eq(&t.mesh.inner, &mesh.inner) {
            return Err(invalid(
                "mesh op",
                "inputs live on different meshes; move them to one mesh first",
            ));
        }
    }
    if let Some(o) = output {
        if !std::sync::Arc::ptr_eq(&o.mesh.inner, &mesh.inner) {
            return Err(invalid(
                "mesh op",
                "the preallocated output lives on a different mesh than the inputs; allocate it on the inputs' mesh",
            ));
        }
    }
    let mut out = Vec::with_capacity(mesh.num_devices());
    for i in 0..mesh.num_devices() {
        let ins: Vec<&Tensor> = inputs.iter().map(|t| &t.shards[i]).collect();
        out.push(f(i, &ins).map_err(on_chip(mesh.chips()[i].id()))?);
    }
    MeshTensor::from_shards(&mesh, out)
}

#[derive(Clone, Debug, Default)]
pub struct MeshMatmulConfig {
    pub bias: Option<MeshTensor>,
    pub activation: Option<Activation>,
    pub math_fidelity: MathFidelity,
    pub options: MeshOpOptions,
}

pub fn matmul(a: &MeshTensor, b: &MeshTensor, cfg: &MeshMatmulConfig) -> Result<MeshTensor> {
    let mut inputs = vec![a, b];
    if let Some(bias) = &cfg.bias {
        inputs.push(bias);
    }
    per_chip_into(&inputs, cfg.options.output.as_ref(), |i, t| {
        let c = chip_ops::MatmulConfig {
            bias: t.get(2).map(|b| (*b).clone()),
            activation: cfg.activation,
            math_fidelity: cfg.math_fidelity,
            options: cfg.options.for_chip(i),
        };
        chip_ops::matmul(t[0], t[1], &c)
    })
}

macro_rules! binary_ops {
    ($($name:ident),*) => {$(
        pub fn $name(a: &MeshTensor, b: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
            per_chip_into(&[a, b], opts.output.as_ref(), |i, t| chip_ops::$name(t[0], t[1], &opts.for_chip(i)))
        }
    )*};
}
binary_ops!(add, sub, mul);

macro_rules! unary_ops {
    ($($name:ident),*) => {$(
        pub fn $name(a: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
            per_chip_into(&[a], opts.output.as_ref(), |i, t| chip_ops::$name(t[0], &opts.for_chip(i)))
        }
    )*};
}
unary_ops!(relu, gelu, silu, exp, reciprocal, sigmoid, tanh, softmax, copy);

pub fn unary(op: Activation, a: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
    per_chip_into(&[a], opts.output.as_ref(), |i, t| {
        chip_ops::unary(op, t[0], &opts.for_chip(i))
    })
}

pub fn rms_norm(
    a: &MeshTensor,
    gamma: Option<&MeshTensor>,
    epsilon: f32,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    match gamma {
        Some(g) => per_chip_into(&[a, g], opts.output.as_ref(), |i, t| {
            chip_ops::rms_norm(t[0], Some(t[1]), epsilon, &opts.for_chip(i))
        }),
        None => per_chip_into(&[a], opts.output.as_ref(), |i, t| {
            chip_ops::rms_norm(t[0], None, epsilon, &opts.for_chip(i))
        }),
    }
}

pub fn typecast(a: &MeshTensor, dtype: DataType, opts: &MeshOpOptions) -> Result<MeshTensor> {
    per_chip_into(&[a], opts.output.as_ref(), |i, t| {
        chip_ops::typecast(t[0], dtype, &opts.for_chip(i))
    })
}

pub fn to_memory_config(
    a: &MeshTensor,
    mc: &MemoryConfig,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    per_chip_into(&[a], opts.output.as_ref(), |i, t| {
        chip_ops::to_memory_config(t[0], mc, &opts.for_chip(i))
    })
}

pub fn to_layout(a: &MeshTensor, layout: Layout, opts: &MeshOpOptions) -> Result<MeshTensor> {
    per_chip_into(&[a], opts.output.as_ref(), |i, t| {
        chip_ops::to_layout(t[0], layout, &opts.for_chip(i))
    })
}

pub fn reshard(
    a: &MeshTensor,
    mc: &MemoryConfig,
    output: Option<&MeshTensor>,
    cq: CqId,
) -> Result<MeshTensor> {
    per_chip_into(&[a], output, |i, t| {
        chip_ops::reshard(t[0], mc, output.map(|o| &o.shards[i]), cq)
    })
}

/// Column-parallel linear: `x` replicated, `w` sharded on its last (output) dim; every chip
/// computes its slice of the output. With `gather`, the slices are all-gathered on the last dim.
pub fn column_parallel_matmul(
    x: &MeshTensor,
    w: &MeshTensor,
    cfg: &MeshMatmulConfig,
    gather: Option<&CclArgs>,
) -> Result<MeshTensor> {
    let y = matmul(x, w, cfg)?;
    match gather {
        Some(args) => ccl::all_gather(&y, -1, args),
        None => Ok(y),
    }
}

/// Row-parallel linear: `x` sharded on its last dim, `w` sharded on its rows (input dim); the
/// per-chip partial products are summed with all_reduce.
pub fn row_parallel_matmul(
    x: &MeshTensor,
    w: &MeshTensor,
    cfg: &MeshMatmulConfig,
    reduce: &CclArgs,
) -> Result<MeshTensor> {
    let partial = matmul(
        x,
        w,
        &MeshMatmulConfig {
            bias: None,
            ..cfg.clone()
        },
    )?;
    let reduced = ccl::all_reduce(&partial, reduce)?;
    match &cfg.bias {
        Some(b) => add(&reduced, b, &cfg.options),
        None => Ok(reduced),
    }
}

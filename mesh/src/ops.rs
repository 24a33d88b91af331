//! Every chip op on mesh tensors (applied to each chip's tensor, in the same order on every
//! chip, so outputs share one address), and tensor-parallel matmuls.

use ttmesh_chip::compute::Activation;
use ttmesh_chip::ops::{self as chip_ops, LaunchRecord, OpOptions};
use ttmesh_chip::tensor::Tensor;
use ttmesh_chip::{CqId, DataType, Layout, MathFidelity, MemoryConfig};

use crate::ccl::{self, CclArgs};
use crate::error::{invalid, on_chip, Result};
use crate::tensor::MeshTensor;
use crate::MeshDevice;

mod decode;
mod shape;
pub use decode::{
    argmax, embedding, rotary_embedding, scaled_dot_product_attention_decode, update_cache,
};
pub use shape::{concat, permute, reshape, slice, transpose};

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
            record: None,
        }
    }
}

/// Runs `f` on every chip with that chip's tensors; checks the inputs share one mesh.
pub fn per_chip(
    inputs: &[&MeshTensor],
    f: impl Fn(usize, &[&Tensor]) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    crate::graph::device_operation(None, inputs, || per_chip_untraced(inputs, f))
}

fn per_chip_untraced(
    inputs: &[&MeshTensor],
    f: impl Fn(usize, &[&Tensor]) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    let mesh = same_mesh(inputs, None)?;
    let mut out = Vec::with_capacity(mesh.num_devices());
    for i in 0..mesh.num_devices() {
        let ins: Vec<&Tensor> = inputs.iter().map(|t| &t.shards[i]).collect();
        out.push(f(i, &ins).map_err(on_chip(mesh.chips()[i].id()))?);
    }
    MeshTensor::from_shards(&mesh, out)
}

/// The mesh the inputs (and a preallocated output) share. The output must live there: a chip
/// would otherwise write at an address another mesh's allocator handed out.
fn same_mesh(inputs: &[&MeshTensor], output: Option<&MeshTensor>) -> Result<MeshDevice> {
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
    Ok(mesh)
}

/// Issues one chip op to every chip of the mesh. The op runs in full on the first chip, which
/// records its launch; the other chips (identical, holding tensors of the same specs) repeat
/// that launch with their own tensors, so checks, output spec, attributes and program key are
/// derived once per mesh op. An op that does not launch exactly once runs in full on each chip.
fn lockstep_op(
    inputs: &[&MeshTensor],
    opts: &MeshOpOptions,
    f: impl Fn(&[&Tensor], &OpOptions) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    crate::graph::device_operation(None, inputs, || lockstep_op_on_chips(inputs, opts, f))
}

fn lockstep_op_on_chips(
    inputs: &[&MeshTensor],
    opts: &MeshOpOptions,
    f: impl Fn(&[&Tensor], &OpOptions) -> ttmesh_chip::Result<Tensor>,
) -> Result<MeshTensor> {
    let mesh = same_mesh(inputs, opts.output.as_ref())?;
    let chips = mesh.chips();
    let shards = |i: usize| -> Vec<&Tensor> { inputs.iter().map(|t| &t.shards[i]).collect() };
    let record = LaunchRecord::default();
    let first = shards(0);
    let mut first_opts = opts.for_chip(0);
    first_opts.record = Some(record.clone());
    let mut out = Vec::with_capacity(chips.len());
    out.push(f(&first, &first_opts).map_err(on_chip(chips[0].id()))?);
    let recorded = record.take(&first);
    for (i, chip) in chips.iter().enumerate().skip(1) {
        let ins = shards(i);
        let t = match &recorded {
            Some(launch) => launch.launch_on(&ins, opts.output.as_ref().map(|o| &o.shards[i])),
            None => f(&ins, &opts.for_chip(i)),
        };
        out.push(t.map_err(on_chip(chip.id()))?);
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
    lockstep_op(&inputs, &cfg.options, |t, opts| {
        let c = chip_ops::MatmulConfig {
            bias: t.get(2).map(|b| (*b).clone()),
            activation: cfg.activation,
            math_fidelity: cfg.math_fidelity,
            options: opts.clone(),
        };
        chip_ops::matmul(t[0], t[1], &c)
    })
}

macro_rules! binary_ops {
    ($($name:ident),*) => {$(
        pub fn $name(a: &MeshTensor, b: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
            lockstep_op(&[a, b], opts, |t, o| chip_ops::$name(t[0], t[1], o))
        }
    )*};
}
binary_ops!(add, sub, mul);

macro_rules! unary_ops {
    ($($name:ident),*) => {$(
        pub fn $name(a: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
            lockstep_op(&[a], opts, |t, o| chip_ops::$name(t[0], o))
        }
    )*};
}
unary_ops!(relu, gelu, silu, exp, reciprocal, sigmoid, tanh, softmax, copy);

pub fn unary(op: Activation, a: &MeshTensor, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[a], opts, |t, o| chip_ops::unary(op, t[0], o))
}

pub fn rms_norm(
    a: &MeshTensor,
    gamma: Option<&MeshTensor>,
    epsilon: f32,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    match gamma {
        Some(g) => lockstep_op(&[a, g], opts, |t, o| {
            chip_ops::rms_norm(t[0], Some(t[1]), epsilon, o)
        }),
        None => lockstep_op(&[a], opts, |t, o| {
            chip_ops::rms_norm(t[0], None, epsilon, o)
        }),
    }
}

pub fn typecast(a: &MeshTensor, dtype: DataType, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[a], opts, |t, o| chip_ops::typecast(t[0], dtype, o))
}

pub fn to_memory_config(
    a: &MeshTensor,
    mc: &MemoryConfig,
    opts: &MeshOpOptions,
) -> Result<MeshTensor> {
    lockstep_op(&[a], opts, |t, o| chip_ops::to_memory_config(t[0], mc, o))
}

pub fn to_layout(a: &MeshTensor, layout: Layout, opts: &MeshOpOptions) -> Result<MeshTensor> {
    lockstep_op(&[a], opts, |t, o| chip_ops::to_layout(t[0], layout, o))
}

pub fn reshard(
    a: &MeshTensor,
    mc: &MemoryConfig,
    output: Option<&MeshTensor>,
    cq: CqId,
) -> Result<MeshTensor> {
    let opts = MeshOpOptions {
        output: output.cloned(),
        cq,
        ..Default::default()
    };
    lockstep_op(&[a], &opts, |t, o| {
        chip_ops::reshard(t[0], mc, o.output.as_ref(), o.cq)
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

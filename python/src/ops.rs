//! TT-NN's ops on device tensors, under TT-NN's names. The Python layer (`ttmesh.ttnn`) gives
//! each its keywords and defaults and calls these positionally.

use std::sync::Arc;

use pyo3::prelude::*;
use ttmesh::ops::{MeshMatmulConfig, MeshOpOptions};
use ttmesh::{Activation, CqId, MeshTensor};

use crate::device::DeviceState;
use crate::enums::DataType;
use crate::errors::{chip_work, value_error};
use crate::memory::opt_memory_config;
use crate::tensor::Tensor;

/// The device tensors of an op's inputs, checked to live on one open mesh (named by argument).
pub fn inputs<'a>(
    what: &str,
    args: &[(&str, &'a Tensor)],
) -> PyResult<(Vec<&'a MeshTensor>, &'a Arc<DeviceState>)> {
    let mut out = Vec::with_capacity(args.len());
    let mut first: Option<(&str, &'a Arc<DeviceState>)> = None;
    for (name, t) in args {
        let (mt, s) = t.device_tensor_of(what, name)?;
        match first {
            None => first = Some((name, s)),
            Some((fname, fs)) if !Arc::ptr_eq(fs, s) => {
                return Err(value_error(format!(
                    "{what}: {name} is on {}, but {fname} is on {}; move both to one device (ttnn.to_torch then ttnn.from_torch(..., device=))",
                    s.label(),
                    fs.label()
                )))
            }
            _ => {}
        }
        out.push(mt);
    }
    let (_, state) = first.ok_or_else(|| value_error(format!("{what}: no input tensors")))?;
    Ok((out, state))
}

/// TT-NN's `memory_config`, `dtype`, `output_tensor`, `queue_id` as mesh op options; the output
/// must be on the inputs' mesh.
pub fn options(
    what: &str,
    state: &Arc<DeviceState>,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output: Option<&Tensor>,
    cq: u8,
) -> PyResult<MeshOpOptions> {
    let output = match output {
        None => None,
        Some(o) => {
            let (mt, s) = o.device_tensor_of(what, "output_tensor")?;
            if !Arc::ptr_eq(s, state) {
                return Err(value_error(format!(
                    "{what}: output_tensor is on {}, the inputs on {}; allocate it on the inputs' device",
                    s.label(),
                    state.label()
                )));
            }
            Some(mt.clone())
        }
    };
    Ok(MeshOpOptions {
        output,
        memory_config: match memory_config {
            // The common case, without building the argument's name for an error.
            None => None,
            Some(m) => opt_memory_config(&format!("{what}: memory_config"), Some(m))?,
        },
        dtype: dtype.map(|d| d.chip()),
        cq: CqId(cq),
    })
}

/// The INT32 marker an output keeps: inputs of INT32 give INT32 when the output is integer.
fn int32_out(inputs: &[&Tensor], out: &MeshTensor) -> bool {
    out.spec().dtype == ttmesh::DataType::UInt32 && inputs.iter().any(|t| t.int32)
}

fn activation(name: &str) -> PyResult<Activation> {
    Ok(match name {
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu { approximate: false },
        "gelu_approx" => Activation::Gelu { approximate: true },
        "silu" => Activation::Silu,
        "exp" => Activation::Exp,
        "reciprocal" => Activation::Reciprocal,
        "sigmoid" => Activation::Sigmoid,
        "tanh" => Activation::Tanh,
        "sqrt" => Activation::Sqrt,
        "neg" => Activation::Neg,
        "identity" => Activation::Identity,
        other => {
            return Err(value_error(format!(
                "unknown activation {other:?}: ttmesh's chips have relu, gelu, silu, exp, reciprocal, sigmoid, tanh, sqrt, neg"
            )))
        }
    })
}

pub fn unary_of(
    py: Python<'_>,
    op: &str,
    a: &Tensor,
    memory_config: Option<&Bound<'_, PyAny>>,
    output: Option<&Tensor>,
    cq: u8,
) -> PyResult<Tensor> {
    let (ins, state) = inputs(op, &[("input_tensor", a)])?;
    let opts = options(op, state, memory_config, None, output, cq)?;
    let x = ins[0];
    let out = if op == "softmax" {
        chip_work(py, || ttmesh::ops::softmax(x, &opts))?
    } else {
        let act = activation(op)?;
        chip_work(py, || ttmesh::ops::unary(act, x, &opts))?
    };
    let int32 = int32_out(&[a], &out);
    Ok(Tensor::on_device(out, state, int32))
}

#[allow(clippy::too_many_arguments)]
pub fn binary_of(
    py: Python<'_>,
    op: &str,
    a: &Tensor,
    b: &Tensor,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output: Option<&Tensor>,
    cq: u8,
) -> PyResult<Tensor> {
    let (ins, state) = inputs(op, &[("input_tensor_a", a), ("input_tensor_b", b)])?;
    let opts = options(op, state, memory_config, dtype, output, cq)?;
    let (x, y) = (ins[0], ins[1]);
    let out = chip_work(py, || match op {
        "add" => ttmesh::ops::add(x, y, &opts),
        "sub" => ttmesh::ops::sub(x, y, &opts),
        _ => ttmesh::ops::mul(x, y, &opts),
    })?;
    let int32 = int32_out(&[a, b], &out);
    Ok(Tensor::on_device(out, state, int32))
}

#[allow(clippy::too_many_arguments)]
pub fn matmul_of(
    py: Python<'_>,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    activation_name: Option<&str>,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output: Option<&Tensor>,
    cq: u8,
) -> PyResult<Tensor> {
    let mut args = vec![("input_tensor_a", a), ("input_tensor_b", b)];
    if let Some(bias) = bias {
        args.push(("bias", bias));
    }
    let (ins, state) = inputs("matmul", &args)?;
    let cfg = MeshMatmulConfig {
        bias: ins.get(2).map(|t| (*t).clone()),
        activation: activation_name.map(activation).transpose()?,
        options: options("matmul", state, memory_config, dtype, output, cq)?,
        ..Default::default()
    };
    let (x, y) = (ins[0], ins[1]);
    let out = chip_work(py, || ttmesh::ops::matmul(x, y, &cfg))?;
    Ok(Tensor::on_device(out, state, false))
}

#[pyfunction]
#[pyo3(signature = (op, input_tensor, memory_config, output_tensor, queue_id))]
pub fn unary(
    py: Python<'_>,
    op: &str,
    input_tensor: &Bound<'_, Tensor>,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    unary_of(
        py,
        op,
        input_tensor.get(),
        memory_config,
        output_tensor.map(|o| o.get()),
        queue_id,
    )
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (op, a, b, memory_config, dtype, output_tensor, queue_id))]
pub fn binary(
    py: Python<'_>,
    op: &str,
    a: &Bound<'_, Tensor>,
    b: &Bound<'_, Tensor>,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    binary_of(
        py,
        op,
        a.get(),
        b.get(),
        memory_config,
        dtype,
        output_tensor.map(|o| o.get()),
        queue_id,
    )
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (a, b, bias, activation, memory_config, dtype, output_tensor, queue_id))]
pub fn matmul(
    py: Python<'_>,
    a: &Bound<'_, Tensor>,
    b: &Bound<'_, Tensor>,
    bias: Option<&Bound<'_, Tensor>>,
    activation: Option<&str>,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    matmul_of(
        py,
        a.get(),
        b.get(),
        bias.map(|t| t.get()),
        activation,
        memory_config,
        dtype,
        output_tensor.map(|o| o.get()),
        queue_id,
    )
}

/// Runs a mesh op on `args` with TT-NN's per-op options; the output keeps an INT32 marker.
#[allow(clippy::too_many_arguments)]
fn run_op<F>(
    py: Python<'_>,
    what: &str,
    args: &[(&str, &Tensor)],
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    output: Option<&Bound<'_, Tensor>>,
    cq: u8,
    f: F,
) -> PyResult<Tensor>
where
    F: FnOnce(&[&MeshTensor], &MeshOpOptions) -> ttmesh::Result<MeshTensor> + Send,
{
    let (ins, state) = inputs(what, args)?;
    let opts = options(
        what,
        state,
        memory_config,
        dtype,
        output.map(|o| o.get()),
        cq,
    )?;
    let out = chip_work(py, || f(&ins, &opts))?;
    let tensors: Vec<&Tensor> = args.iter().map(|(_, t)| *t).collect();
    let int32 = int32_out(&tensors, &out);
    Ok(Tensor::on_device(out, state, int32))
}

#[pyfunction]
#[pyo3(signature = (input_tensor, epsilon, weight, memory_config, output_tensor, queue_id))]
pub fn rms_norm(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    epsilon: f32,
    weight: Option<&Bound<'_, Tensor>>,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let mut args = vec![("input_tensor", input_tensor.get())];
    if let Some(w) = weight {
        args.push(("weight", w.get()));
    }
    run_op(
        py,
        "rms_norm",
        &args,
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::rms_norm(t[0], t.get(1).copied(), epsilon, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, dtype, memory_config, output_tensor, queue_id))]
pub fn typecast(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    dtype: DataType,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let mut out = run_op(
        py,
        "typecast",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::typecast(t[0], dtype.chip(), o),
    )?;
    out.int32 = dtype == DataType::INT32;
    Ok(out)
}

#[pyfunction]
#[pyo3(signature = (input_tensor, memory_config, dtype, output_tensor, queue_id))]
pub fn to_memory_config(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    memory_config: &Bound<'_, PyAny>,
    dtype: Option<DataType>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let mc = opt_memory_config("to_memory_config: memory_config", Some(memory_config))?
        .ok_or_else(|| {
            value_error("to_memory_config: memory_config is required (e.g. ttnn.L1_MEMORY_CONFIG)")
        })?;
    run_op(
        py,
        "to_memory_config",
        &[("input_tensor", input_tensor.get())],
        None,
        dtype,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::to_memory_config(t[0], &mc, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, layout, memory_config, dtype, queue_id))]
pub fn to_layout(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    layout: crate::enums::Layout,
    memory_config: Option<&Bound<'_, PyAny>>,
    dtype: Option<DataType>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let t = input_tensor.get();
    if let Some(host) = t.with_host_layout(py, layout.chip())? {
        return Ok(host);
    }
    run_op(
        py,
        "to_layout",
        &[("input_tensor", t)],
        memory_config,
        dtype,
        None,
        queue_id,
        |t, o| ttmesh::ops::to_layout(t[0], layout.chip(), o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, memory_config, output_tensor, queue_id))]
pub fn reshard(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    memory_config: &Bound<'_, PyAny>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let mc =
        opt_memory_config("reshard: memory_config", Some(memory_config))?.ok_or_else(|| {
            value_error("reshard: memory_config is required (a sharded ttnn.MemoryConfig)")
        })?;
    let (ins, state) = inputs("reshard", &[("input_tensor", input_tensor.get())])?;
    let out = match output_tensor {
        Some(o) => Some(
            options("reshard", state, None, None, Some(o.get()), queue_id)?
                .output
                .expect("given"),
        ),
        None => None,
    };
    let x = ins[0];
    let r = chip_work(py, || {
        ttmesh::ops::reshard(x, &mc, out.as_ref(), CqId(queue_id))
    })?;
    Ok(Tensor::on_device(r, state, input_tensor.get().int32))
}

#[pyfunction]
#[pyo3(signature = (input_tensor, shape, memory_config, queue_id))]
pub fn reshape(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    shape: Vec<usize>,
    memory_config: Option<&Bound<'_, PyAny>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "reshape",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        None,
        queue_id,
        |t, o| ttmesh::ops::reshape(t[0], &shape, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, starts, ends, memory_config, queue_id))]
pub fn slice(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    starts: Vec<usize>,
    ends: Vec<usize>,
    memory_config: Option<&Bound<'_, PyAny>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "slice",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        None,
        queue_id,
        |t, o| ttmesh::ops::slice(t[0], &starts, &ends, o),
    )
}

#[pyfunction]
#[pyo3(signature = (tensors, dim, memory_config, output_tensor, queue_id))]
pub fn concat(
    py: Python<'_>,
    tensors: Vec<Bound<'_, Tensor>>,
    dim: i64,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let names: Vec<String> = (0..tensors.len())
        .map(|i| format!("tensors[{i}]"))
        .collect();
    let args: Vec<(&str, &Tensor)> = names
        .iter()
        .map(String::as_str)
        .zip(tensors.iter().map(|t| t.get()))
        .collect();
    run_op(
        py,
        "concat",
        &args,
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::concat(t, dim, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, dim1, dim2, memory_config, queue_id))]
pub fn transpose(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    dim1: i64,
    dim2: i64,
    memory_config: Option<&Bound<'_, PyAny>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "transpose",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        None,
        queue_id,
        |t, o| ttmesh::ops::transpose(t[0], dim1, dim2, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, dims, memory_config, queue_id))]
pub fn permute(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    dims: Vec<i64>,
    memory_config: Option<&Bound<'_, PyAny>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "permute",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        None,
        queue_id,
        |t, o| ttmesh::ops::permute(t[0], &dims, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, weight, memory_config, output_tensor, queue_id))]
pub fn embedding(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    weight: &Bound<'_, Tensor>,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "embedding",
        &[
            ("input_tensor", input_tensor.get()),
            ("weight", weight.get()),
        ],
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::embedding(t[0], t[1], o),
    )
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (input_tensor, cos_cache, sin_cache, positions, memory_config, output_tensor, queue_id))]
pub fn rotary_embedding(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    cos_cache: &Bound<'_, Tensor>,
    sin_cache: &Bound<'_, Tensor>,
    positions: &Bound<'_, Tensor>,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "rotary_embedding",
        &[
            ("input_tensor", input_tensor.get()),
            ("cos_cache", cos_cache.get()),
            ("sin_cache", sin_cache.get()),
            ("positions", positions.get()),
        ],
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::rotary_embedding(t[0], t[1], t[2], t[3], o),
    )
}

#[pyfunction]
#[pyo3(signature = (cache, input_tensor, positions, queue_id))]
pub fn update_cache(
    py: Python<'_>,
    cache: &Bound<'_, Tensor>,
    input_tensor: &Bound<'_, Tensor>,
    positions: &Bound<'_, Tensor>,
    queue_id: u8,
) -> PyResult<()> {
    let (ins, _) = inputs(
        "update_cache",
        &[
            ("cache_tensor", cache.get()),
            ("input_tensor", input_tensor.get()),
            ("update_idxs_tensor", positions.get()),
        ],
    )?;
    let opts = MeshOpOptions {
        cq: CqId(queue_id),
        ..Default::default()
    };
    chip_work(py, || {
        ttmesh::ops::update_cache(ins[0], ins[1], ins[2], &opts)
    })
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, positions, scale, memory_config, output_tensor, queue_id))]
pub fn sdpa_decode(
    py: Python<'_>,
    q: &Bound<'_, Tensor>,
    k_cache: &Bound<'_, Tensor>,
    v_cache: &Bound<'_, Tensor>,
    positions: &Bound<'_, Tensor>,
    scale: f32,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "scaled_dot_product_attention_decode",
        &[
            ("input_tensor_q", q.get()),
            ("input_tensor_k", k_cache.get()),
            ("input_tensor_v", v_cache.get()),
            ("cur_pos_tensor", positions.get()),
        ],
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::scaled_dot_product_attention_decode(t[0], t[1], t[2], t[3], scale, o),
    )
}

#[pyfunction]
#[pyo3(signature = (input_tensor, dim, memory_config, output_tensor, queue_id))]
pub fn argmax(
    py: Python<'_>,
    input_tensor: &Bound<'_, Tensor>,
    dim: i64,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    run_op(
        py,
        "argmax",
        &[("input_tensor", input_tensor.get())],
        memory_config,
        None,
        output_tensor,
        queue_id,
        |t, o| ttmesh::ops::argmax(t[0], dim, o),
    )
}

/// `all_gather`, `reduce_scatter` or `all_reduce` (`dim` unused by the last) along the lines
/// `cluster_axis` picks.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (op, input_tensor, dim, cluster_axis, num_links, topology, memory_config, output_tensor, queue_id))]
pub fn collective(
    py: Python<'_>,
    op: &str,
    input_tensor: &Bound<'_, Tensor>,
    dim: isize,
    cluster_axis: Option<usize>,
    num_links: usize,
    topology: Option<crate::enums::Topology>,
    memory_config: Option<&Bound<'_, PyAny>>,
    output_tensor: Option<&Bound<'_, Tensor>>,
    queue_id: u8,
) -> PyResult<Tensor> {
    let (ins, state) = inputs(op, &[("input_tensor", input_tensor.get())])?;
    let opts = options(
        op,
        state,
        memory_config,
        None,
        output_tensor.map(|o| o.get()),
        queue_id,
    )?;
    let args = ttmesh::ccl::CclArgs {
        cluster_axis,
        topology: topology.map(|t| match t {
            crate::enums::Topology::Ring => ttmesh::Topology::Ring,
            crate::enums::Topology::Linear => ttmesh::Topology::Linear,
        }),
        num_links,
        memory_config: opts.memory_config,
        output: opts.output,
        cq: opts.cq,
    };
    let x = ins[0];
    let out = chip_work(py, || match op {
        "all_gather" => ttmesh::ccl::all_gather(x, dim, &args),
        "reduce_scatter" => ttmesh::ccl::reduce_scatter(x, dim, &args),
        _ => ttmesh::ccl::all_reduce(x, &args),
    })
    .map_err(|e| fabric_hint(e, &state.mesh))?;
    Ok(Tensor::on_device(out, state, false))
}

/// A collective on a mesh opened without a fabric: TT-NN programs turn it on with
/// `set_fabric_config` before opening, so say that.
fn fabric_hint(e: PyErr, mesh: &ttmesh::MeshDevice) -> PyErr {
    if mesh.fabric_config() == ttmesh::FabricConfig::Disabled {
        Python::attach(|py| {
            let msg = format!(
                "{}\nhint: call ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D) before ttnn.open_mesh_device",
                e.value(py)
            );
            pyo3::exceptions::PyRuntimeError::new_err(msg)
        })
    } else {
        e
    }
}

/// `a + b`, `a - b`, `a * b` (and reflected, `2 * a`): through `ttnn.add` / `sub` / `mul`, so
/// numbers become device scalars the same way; `NotImplemented` for anything else.
pub fn operator(
    slf: &Bound<'_, Tensor>,
    op: &str,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let is_number = !other.is_instance_of::<pyo3::types::PyBool>()
        && (other.is_instance_of::<pyo3::types::PyFloat>()
            || other.is_instance_of::<pyo3::types::PyInt>());
    if let Ok(t) = other.cast::<Tensor>() {
        let (a, b) = if reflected {
            (t.get(), slf.get())
        } else {
            (slf.get(), t.get())
        };
        let out = binary_of(py, op, a, b, None, None, None, 0)?;
        return Ok(Py::new(py, out)?.into_any());
    }
    if !is_number {
        return Ok(py.NotImplemented());
    }
    let ttnn = py.import("ttmesh.ttnn")?;
    if reflected && op == "sub" {
        // n - a = -(a - n)
        let diff = ttnn.getattr("sub")?.call1((slf, other))?;
        return Ok(ttnn.getattr("neg")?.call1((diff,))?.unbind());
    }
    Ok(ttnn.getattr(op)?.call1((slf, other))?.unbind())
}

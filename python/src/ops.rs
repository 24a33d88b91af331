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
        let (mt, s) = t.device_tensor(&format!("{what}: {name}"))?;
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
            let (mt, s) = o.device_tensor(&format!("{what}: output_tensor"))?;
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
        memory_config: opt_memory_config(&format!("{what}: memory_config"), memory_config)?,
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

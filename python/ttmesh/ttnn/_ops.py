"""Ops under TT-NN's names, keywords and defaults. Each checks its Python arguments and calls
the native op positionally; the native side checks the tensors (device, mesh) and runs the op
on every chip of the mesh with the GIL released."""

import contextlib

from ttmesh import _ttmesh as _n

Tensor = _n.Tensor

_queue = [0]


@contextlib.contextmanager
def command_queue(cq_id):
    """``with ttnn.command_queue(1):`` ops inside the block that are given no ``queue_id`` /
    ``cq_id`` go to command queue ``cq_id``."""
    if isinstance(cq_id, bool) or not isinstance(cq_id, int) or cq_id not in (0, 1):
        raise ValueError(f"command_queue: cq_id must be 0 or 1, not {cq_id!r}")
    _queue.append(cq_id)
    try:
        yield
    finally:
        _queue.pop()


def _cq(queue_id, cq_id=None):
    q = queue_id if queue_id is not None else cq_id
    if q is None:
        return _queue[-1]
    if isinstance(q, bool) or not isinstance(q, int) or q < 0 or q > 255:
        raise ValueError(f"queue_id must be 0 or 1 (a command queue the device was opened with), not {q!r}")
    return q


def _tensor(fn, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"ttnn.{fn}: {name} must be a ttnn.Tensor, not {type(t).__name__}")
    return t


def _out(fn, output_tensor):
    return None if output_tensor is None else _tensor(fn, "output_tensor", output_tensor)


def _unary(op):
    def f(input_tensor, *, memory_config=None, output_tensor=None, queue_id=None, cq_id=None):
        return _n.unary(op, _tensor(op, "input_tensor", input_tensor), memory_config, _out(op, output_tensor), _cq(queue_id, cq_id))

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"TT-NN's ``ttnn.{op}(input_tensor, *, memory_config=None, output_tensor=None, queue_id=0)``."
    return f


relu = _unary("relu")
silu = _unary("silu")
exp = _unary("exp")
reciprocal = _unary("reciprocal")
sigmoid = _unary("sigmoid")
tanh = _unary("tanh")
sqrt = _unary("sqrt")
neg = _unary("neg")


def gelu(input_tensor, *, fast_and_approximate_mode=False, memory_config=None, output_tensor=None, queue_id=None, cq_id=None):
    op = "gelu_approx" if fast_and_approximate_mode else "gelu"
    return _n.unary(op, _tensor("gelu", "input_tensor", input_tensor), memory_config, _out("gelu", output_tensor), _cq(queue_id, cq_id))


def softmax(input_tensor, dim=-1, *, memory_config=None, compute_kernel_config=None, numeric_stable=True, output_tensor=None, queue_id=None, cq_id=None):
    t = _tensor("softmax", "input_tensor", input_tensor)
    rank = len(t.shape)
    if dim not in (-1, rank - 1):
        raise ValueError(f"ttnn.softmax: ttmesh's chips reduce over the last dim only; got dim={dim} for rank {rank} (transpose first, or pass dim=-1)")
    return _n.unary("softmax", t, memory_config, _out("softmax", output_tensor), _cq(queue_id, cq_id))


def _binary(op):
    def f(input_tensor_a, input_tensor_b, *, memory_config=None, dtype=None, output_tensor=None, activations=None, queue_id=None, cq_id=None, **kwargs):
        _reject(op, kwargs, {"use_legacy", "input_tensor_a_activations", "input_tensor_b_activations", "sub_core_grids"})
        if activations:
            raise ValueError(f"ttnn.{op}: fused activations are not emulated; apply the activation as its own op")
        a = _tensor(op, "input_tensor_a", input_tensor_a)
        b = input_tensor_b if isinstance(input_tensor_b, Tensor) else _scalar(op, input_tensor_b, a)
        return _n.binary(op, a, b, memory_config, dtype, _out(op, output_tensor), _cq(queue_id, cq_id))

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"TT-NN's ``ttnn.{op}(input_tensor_a, input_tensor_b, *, memory_config=None, dtype=None, output_tensor=None, queue_id=0)``."
    return f


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
subtract = sub
multiply = mul


_scalars = {}


def _scalar(op, value, like):
    """A scalar operand as a one-element device tensor of ``like``'s dtype, broadcast by the
    chip's binary op. The chips have no scalar form of add/sub/mul, so the value is written to
    the device once per (device, value, dtype) and reused: a program that runs its ops once
    before trace capture (as capture requires) then captures them with no write."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"ttnn.{op}: input_tensor_b must be a ttnn.Tensor or a number, not {type(value).__name__}")
    device = like.device()
    if device is None:
        raise ValueError(f"ttnn.{op}: input_tensor_a is on the host: move it to the device first")
    key = (hash(device), float(value), like.dtype, like.layout)
    t = _scalars.get(key)
    if t is None or not t.is_allocated() or not device.is_open:
        for k in [k for k, v in _scalars.items() if not v.device().is_open]:
            del _scalars[k]
        import numpy as np  # noqa: PLC0415

        from . import _tensor as tensors  # noqa: PLC0415

        dtype = like.dtype if like.dtype not in (tensors.bfloat8_b, tensors.bfloat4_b) else tensors.bfloat16
        t = tensors.from_torch(np.full([1] * len(like.shape), value, dtype=np.float32), dtype=dtype, layout=like.layout, device=device)
        _scalars[key] = t
    return t


def _reject(fn, kwargs, ignored):
    bad = sorted(k for k in kwargs if k not in ignored)
    if bad:
        raise TypeError(f"ttnn.{fn}() got unexpected keyword argument(s): {', '.join(bad)}")


_ACTIVATIONS = {None: None, "relu": "relu", "gelu": "gelu", "silu": "silu", "sigmoid": "sigmoid", "tanh": "tanh"}


def _matmul(fn, a, b, bias, transpose_a, transpose_b, memory_config, dtype, activation, optional_output_tensor, queue_id):
    a = _tensor(fn, "input_tensor_a", a)
    b = _tensor(fn, "input_tensor_b", b)
    if bias is not None:
        _tensor(fn, "bias", bias)
    if transpose_a:
        a = transpose(a, -2, -1)
    if transpose_b:
        b = transpose(b, -2, -1)
    act = activation
    if isinstance(act, (tuple, list)):
        act = act[0] if act else None
    if act is not None and not isinstance(act, str):
        act = getattr(act, "name", str(act)).lower()
    if act not in _ACTIVATIONS:
        raise ValueError(f"ttnn.{fn}: activation {activation!r} is not fused by ttmesh's matmul; use one of relu, gelu, silu, sigmoid, tanh, or apply it as an op")
    return _n.matmul(a, b, bias, _ACTIVATIONS[act], memory_config, dtype, _out(fn, optional_output_tensor), queue_id)


def matmul(
    input_tensor_a,
    input_tensor_b,
    *,
    transpose_a=False,
    transpose_b=False,
    memory_config=None,
    dtype=None,
    program_config=None,
    activation=None,
    compute_kernel_config=None,
    core_grid=None,
    output_tile=None,
    optional_output_tensor=None,
    queue_id=None,
    cq_id=None,
    **kwargs,
):
    """TT-NN's ``ttnn.matmul``: ``a @ b`` (batched over leading dims)."""
    _reject("matmul", kwargs, {"global_cb", "sub_device_id"})
    return _matmul("matmul", input_tensor_a, input_tensor_b, None, transpose_a, transpose_b, memory_config, dtype, activation, optional_output_tensor, _cq(queue_id, cq_id))


def linear(
    input_tensor_a,
    input_tensor_b,
    *,
    bias=None,
    transpose_a=False,
    transpose_b=False,
    memory_config=None,
    dtype=None,
    program_config=None,
    activation=None,
    compute_kernel_config=None,
    core_grid=None,
    output_tile=None,
    optional_output_tensor=None,
    queue_id=None,
    cq_id=None,
    **kwargs,
):
    """TT-NN's ``ttnn.linear``: ``a @ b + bias``, then the activation."""
    _reject("linear", kwargs, {"global_cb", "sub_device_id"})
    return _matmul("linear", input_tensor_a, input_tensor_b, bias, transpose_a, transpose_b, memory_config, dtype, activation, optional_output_tensor, _cq(queue_id, cq_id))


def _ints(fn, name, v):
    try:
        out = [int(x) for x in v]
    except TypeError:
        raise TypeError(f"ttnn.{fn}: {name} must be a sequence of ints, not {type(v).__name__}") from None
    return out


def transpose(input_tensor, dim1, dim2, *, memory_config=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.transpose(input_tensor, dim1, dim2)``."""
    _reject("transpose", kwargs, {"pad_value"})
    return _n.transpose(_tensor("transpose", "input_tensor", input_tensor), int(dim1), int(dim2), memory_config, _cq(queue_id, cq_id))


def permute(input_tensor, dims, *, memory_config=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.permute(input_tensor, dims)``: output dim k is input dim dims[k]."""
    _reject("permute", kwargs, {"pad_value"})
    return _n.permute(_tensor("permute", "input_tensor", input_tensor), _ints("permute", "dims", dims), memory_config, _cq(queue_id, cq_id))


def reshape(input_tensor, shape, *args, memory_config=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.reshape(input_tensor, shape)`` (same values, row-major, new shape; -1
    takes what is left)."""
    t = _tensor("reshape", "input_tensor", input_tensor)
    dims = _ints("reshape", "shape", shape)
    if dims.count(-1) > 1:
        raise ValueError(f"ttnn.reshape: at most one -1 in shape, got {dims}")
    if -1 in dims:
        vol = 1
        for d in t.shape:
            vol *= d
        known = 1
        for d in dims:
            if d != -1:
                known *= d
        if known == 0 or vol % known:
            raise ValueError(f"ttnn.reshape: shape {dims} does not fit {list(t.shape)}")
        dims[dims.index(-1)] = vol // known
    if any(d < 0 for d in dims):
        raise ValueError(f"ttnn.reshape: dims must be >= 0 (or one -1), got {dims}")
    return _n.reshape(t, dims, memory_config, _cq(queue_id, cq_id))


def slice(input_tensor, starts, ends, steps=None, *, slice_dim=None, num_devices=None, memory_config=None, queue_id=None, cq_id=None, **kwargs):  # noqa: A001 (TT-NN's name)
    """TT-NN's ``ttnn.slice(input_tensor, starts, ends, steps=None)`` (steps of 1 only)."""
    t = _tensor("slice", "input_tensor", input_tensor)
    if steps is not None and any(int(s) != 1 for s in steps):
        raise ValueError(f"ttnn.slice: ttmesh's slice takes steps of 1 only, got {list(steps)}")
    rank = len(t.shape)
    b, e = _ints("slice", "starts", starts), _ints("slice", "ends", ends)
    if len(b) != rank or len(e) != rank:
        raise ValueError(f"ttnn.slice: starts and ends need one value per dim ({rank}), got {b} and {e}")
    b = [x + t.shape[k] if x < 0 else x for k, x in enumerate(b)]
    e = [x + t.shape[k] if x < 0 else x for k, x in enumerate(e)]
    return _n.slice(t, b, e, memory_config, _cq(queue_id, cq_id))


def concat(tensors, dim=0, *, memory_config=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.concat(tensors, dim=0)``."""
    ts = [_tensor("concat", f"tensors[{i}]", t) for i, t in enumerate(tensors)]
    return _n.concat(ts, int(dim), memory_config, _out("concat", output_tensor), _cq(queue_id, cq_id))


def rms_norm(input_tensor, *, epsilon=1e-12, weight=None, bias=None, residual_input_tensor=None, memory_config=None, program_config=None, compute_kernel_config=None, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.rms_norm(input_tensor, *, epsilon=1e-12, weight=None)`` over the last dim."""
    t = _tensor("rms_norm", "input_tensor", input_tensor)
    if bias is not None or residual_input_tensor is not None:
        raise ValueError("ttnn.rms_norm: bias and residual_input_tensor are not emulated; add them with ttnn.add")
    w = None if weight is None else _tensor("rms_norm", "weight", weight)
    return _n.rms_norm(t, float(epsilon), w, memory_config, None, _cq(queue_id, cq_id))


def typecast(input_tensor, dtype, *, memory_config=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.typecast(input_tensor, dtype)``."""
    return _n.typecast(_tensor("typecast", "input_tensor", input_tensor), dtype, memory_config, _out("typecast", output_tensor), _cq(queue_id, cq_id))


def to_memory_config(input_tensor, memory_config, dtype=None, *, output_tensor=None, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.to_memory_config(input_tensor, memory_config, dtype=None)``."""
    return _n.to_memory_config(_tensor("to_memory_config", "input_tensor", input_tensor), memory_config, dtype, _out("to_memory_config", output_tensor), _cq(queue_id, cq_id))


def to_layout(input_tensor, layout, dtype=None, memory_config=None, *, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.to_layout(input_tensor, layout, dtype=None, memory_config=None)``; on a
    host tensor it only changes how the values will be laid out on the device."""
    return _n.to_layout(_tensor("to_layout", "input_tensor", input_tensor), layout, memory_config, dtype, _cq(queue_id, cq_id))


def reshard(input_tensor, output_memory_config, output_tensor=None, *, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.reshard(input_tensor, output_memory_config, output_tensor=None)``."""
    return _n.reshard(_tensor("reshard", "input_tensor", input_tensor), output_memory_config, _out("reshard", output_tensor), _cq(queue_id, cq_id))


def clone(input_tensor, *, memory_config=None, dtype=None, queue_id=None, cq_id=None):
    t = _tensor("clone", "input_tensor", input_tensor)
    return _n.to_memory_config(t, memory_config if memory_config is not None else t.memory_config(), dtype, None, _cq(queue_id, cq_id))


def embedding(input_tensor, weight, *, pad_token=None, layout=None, embeddings_type=None, dtype=None, output_tensor=None, memory_config=None, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.embedding(input_tensor, weight)``: UINT32 ids (B values), weight
    ``[vocab, hidden]`` -> ``[1, 1, B, hidden]`` in TILE layout (ttmesh's kernel gives TILE;
    ids at or past vocab give zero rows)."""
    return _n.embedding(_tensor("embedding", "input_tensor", input_tensor), _tensor("embedding", "weight", weight), memory_config, _out("embedding", output_tensor), _cq(queue_id, cq_id))


def argmax(input_tensor, dim=None, *, keepdim=False, use_multicore=False, memory_config=None, output_tensor=None, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.argmax(input_tensor, dim=None)`` over the last dim: UINT32 ROW_MAJOR."""
    t = _tensor("argmax", "input_tensor", input_tensor)
    rank = len(t.shape)
    d = -1 if dim is None else int(dim)
    if d not in (-1, rank - 1):
        raise ValueError(f"ttnn.argmax: ttmesh's argmax reduces the last dim; got dim={dim} for rank {rank}")
    if keepdim:
        raise ValueError("ttnn.argmax: keepdim=True is not emulated; reshape the result")
    return _n.argmax(t, -1, memory_config, _out("argmax", output_tensor), _cq(queue_id, cq_id))


def update_cache(cache_tensor, input_tensor, update_index, batch_offset=0, *, queue_id=None, cq_id=None):
    """TT-NN's ``ttnn.update_cache(cache, input, update_index)``: ``update_index`` is a device
    UINT32 tensor of per-user positions (ttmesh's form, traceable) or an int (one position for
    every user; written to the device first, so not inside a trace capture)."""
    cache = _tensor("update_cache", "cache_tensor", cache_tensor)
    new = _tensor("update_cache", "input_tensor", input_tensor)
    if batch_offset:
        raise ValueError("ttnn.update_cache: batch_offset is not emulated; pass 0")
    pos = _positions("update_cache", update_index, new.shape[1], cache.device())
    _n.update_cache(cache, new, pos, _cq(queue_id, cq_id))
    return cache


def _positions(fn, index, users, device):
    if isinstance(index, Tensor):
        return index
    if isinstance(index, int) and not isinstance(index, bool):
        from . import _tensor as tensors  # noqa: PLC0415

        import numpy as np  # noqa: PLC0415

        return tensors.from_torch(np.full([users], index, dtype=np.uint32), dtype=tensors.uint32, device=device)
    raise TypeError(f"ttnn.{fn}: the position must be a device ttnn.Tensor of UINT32 positions or an int, not {type(index).__name__}")


def all_gather(input_tensor, dim, cluster_axis=None, mesh_device=None, *, num_links=None, memory_config=None, topology=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.all_gather(input_tensor, dim, cluster_axis=None, ...)``: along each line
    of the mesh ``cluster_axis`` picks (0 columns, 1 rows, None all devices) ``shape[dim] *= n``."""
    _reject("all_gather", kwargs, {"subdevice_id", "sub_device_id", "use_optimal_ccl_for_llama", "barrier_semaphore", "chunks_per_sync", "num_workers_per_link", "num_buffers_per_channel"})
    return _collective("all_gather", input_tensor, dim, cluster_axis, num_links, topology, memory_config, output_tensor, _cq(queue_id, cq_id))


def reduce_scatter(input_tensor, dim, cluster_axis=None, mesh_device=None, *, num_links=None, memory_config=None, topology=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.reduce_scatter(input_tensor, dim, ...)``: the sum over each line, ``shape[dim] /= n``."""
    _reject("reduce_scatter", kwargs, {"subdevice_id", "sub_device_id", "math_op", "barrier_semaphore", "chunks_per_sync", "num_workers_per_link", "num_buffers_per_channel", "intermediate_memory_config"})
    return _collective("reduce_scatter", input_tensor, dim, cluster_axis, num_links, topology, memory_config, output_tensor, _cq(queue_id, cq_id))


def all_reduce(input_tensor, cluster_axis=None, mesh_device=None, *, num_links=None, memory_config=None, topology=None, output_tensor=None, queue_id=None, cq_id=None, **kwargs):
    """TT-NN's ``ttnn.all_reduce(input_tensor, cluster_axis=None, ...)``: the sum over each line on every device of it."""
    _reject("all_reduce", kwargs, {"subdevice_id", "sub_device_id", "math_op", "barrier_semaphores", "rs_global_semaphores", "ag_global_semaphores"})
    return _collective("all_reduce", input_tensor, 0, cluster_axis, num_links, topology, memory_config, output_tensor, _cq(queue_id, cq_id))


def _collective(op, input_tensor, dim, cluster_axis, num_links, topology, memory_config, output_tensor, cq):
    t = _tensor(op, "input_tensor", input_tensor)
    if cluster_axis is not None and cluster_axis not in (0, 1):
        raise ValueError(f"ttnn.{op}: cluster_axis must be 0 (along columns), 1 (along rows) or None (all devices), not {cluster_axis!r}")
    # None (TT-NN's newer default): the links and the topology are chosen for the mesh.
    if num_links is None:
        num_links = 0
    elif isinstance(num_links, bool) or not isinstance(num_links, int) or num_links < 1:
        raise ValueError(f"ttnn.{op}: num_links must be an int >= 1 or None (chosen for the mesh), not {num_links!r}")
    if topology is not None and not isinstance(topology, _n.Topology):
        raise TypeError(f"ttnn.{op}: topology must be ttnn.Topology.Ring or ttnn.Topology.Linear, not {topology!r}")
    return _n.collective(op, t, int(dim), cluster_axis, num_links, topology, memory_config, _out(op, output_tensor), cq)

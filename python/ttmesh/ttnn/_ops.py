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
        b = _tensor(op, "input_tensor_b", input_tensor_b)
        return _n.binary(op, a, b, memory_config, dtype, _out(op, output_tensor), _cq(queue_id, cq_id))

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"TT-NN's ``ttnn.{op}(input_tensor_a, input_tensor_b, *, memory_config=None, dtype=None, output_tensor=None, queue_id=0)``."
    return f


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
subtract = sub
multiply = mul


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


def transpose(input_tensor, dim1, dim2, *, memory_config=None, queue_id=None, cq_id=None):
    raise NotImplementedError("transpose is bound in the next group")

"""Ops under TT-NN's names with TT-NN's keywords; results against numpy references."""

import math

import numpy as np
import pytest

from conftest import to_np

import ttmesh.ttnn as ttnn


def dev(device, x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT):
    return ttnn.from_torch(x, dtype=dtype, layout=layout, device=device, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


UNARY = {
    "relu": (ttnn.relu, lambda x: np.maximum(x, 0)),
    "silu": (ttnn.silu, lambda x: x / (1 + np.exp(-x))),
    "exp": (ttnn.exp, np.exp),
    "sigmoid": (ttnn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (ttnn.tanh, np.tanh),
    "neg": (ttnn.neg, lambda x: -x),
    "reciprocal": (ttnn.reciprocal, lambda x: 1 / x),
    "gelu": (ttnn.gelu, lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(device, rng, name):
    x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32) + (3 if name == "reciprocal" else 0)
    op, ref = UNARY[name]
    out = op(dev(device, x), memory_config=ttnn.L1_MEMORY_CONFIG)
    assert out.memory_config().buffer_type == ttnn.BufferType.L1
    np.testing.assert_allclose(to_np(out), ref(x), rtol=1e-5, atol=1e-5)


def test_sqrt_gelu_approx_softmax(device, rng):
    x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
    np.testing.assert_allclose(to_np(ttnn.sqrt(dev(device, np.abs(x)))), np.sqrt(np.abs(x)), rtol=1e-6)
    approx = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(to_np(ttnn.gelu(dev(device, x), fast_and_approximate_mode=True)), approx, rtol=1e-5, atol=1e-5)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(to_np(ttnn.softmax(dev(device, x), dim=-1)), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="last dim"):
        ttnn.softmax(dev(device, x), dim=2)


BINARY = {
    "add": (ttnn.add, np.add),
    "sub": (ttnn.sub, np.subtract),
    "mul": (ttnn.mul, np.multiply),
    "subtract": (ttnn.subtract, np.subtract),
    "multiply": (ttnn.multiply, np.multiply),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcast_and_output(device, rng, name):
    op, ref = BINARY[name]
    a = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
    b = rng.standard_normal((1, 1, 1, 64), dtype=np.float32)
    out = op(dev(device, a), dev(device, b), memory_config=ttnn.DRAM_MEMORY_CONFIG, queue_id=0)
    np.testing.assert_array_equal(to_np(out), ref(a, b))
    pre = ttnn.allocate_tensor_on_device(ttnn.TensorSpec(a.shape, ttnn.float32, ttnn.TILE_LAYOUT), device)
    addr = pre.buffer_address()
    got = op(dev(device, a), dev(device, b), output_tensor=pre)
    assert got.buffer_address() == addr
    np.testing.assert_array_equal(to_np(pre), ref(a, b))


def test_matmul_linear(device, rng):
    a = rng.standard_normal((2, 1, 32, 64), dtype=np.float32)
    b = rng.standard_normal((2, 1, 64, 96), dtype=np.float32)
    bias = rng.standard_normal((1, 1, 1, 96), dtype=np.float32)
    np.testing.assert_allclose(to_np(ttnn.matmul(dev(device, a), dev(device, b))), a @ b, rtol=1e-5, atol=1e-4)
    bt = np.swapaxes(b, -1, -2).copy()
    np.testing.assert_allclose(to_np(ttnn.matmul(dev(device, a), dev(device, bt), transpose_b=True)), a @ b, rtol=1e-5, atol=1e-4)
    out = ttnn.linear(dev(device, a), dev(device, b), bias=dev(device, bias), activation="relu", memory_config=ttnn.L1_MEMORY_CONFIG)
    np.testing.assert_allclose(to_np(out), np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-4)
    with pytest.raises(RuntimeError, match="matmul"):
        ttnn.matmul(dev(device, a), dev(device, a))  # 64 against 32: inner dims differ
    with pytest.raises(ValueError, match="activation"):
        ttnn.linear(dev(device, a), dev(device, b), activation="mish")


def test_rms_norm(device, rng):
    x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
    w = rng.standard_normal((1, 1, 1, 64), dtype=np.float32)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * w
    out = ttnn.rms_norm(dev(device, x), epsilon=1e-5, weight=dev(device, w, layout=ttnn.ROW_MAJOR_LAYOUT))
    np.testing.assert_allclose(to_np(out), ref, rtol=1e-4, atol=1e-5)


def test_shape_ops(device, rng):
    x = rng.standard_normal((1, 2, 32, 64), dtype=np.float32)
    t = dev(device, x)
    np.testing.assert_array_equal(to_np(ttnn.transpose(t, -2, -1)), np.swapaxes(x, -2, -1))
    np.testing.assert_array_equal(to_np(ttnn.permute(t, (0, 2, 1, 3))), x.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(to_np(ttnn.reshape(t, (1, 1, 64, -1))), x.reshape(1, 1, 64, 64))
    np.testing.assert_array_equal(to_np(ttnn.slice(t, [0, 1, 0, 32], [1, 2, 32, 64])), x[:, 1:2, :, 32:64])
    np.testing.assert_array_equal(to_np(ttnn.concat([t, t], dim=-1)), np.concatenate([x, x], -1))
    np.testing.assert_array_equal(to_np(ttnn.clone(t)), x)


def test_argmax_embedding(device, rng):
    logits = rng.standard_normal((1, 1, 32, 256), dtype=np.float32)
    got = to_np(ttnn.argmax(dev(device, logits), dim=-1))
    np.testing.assert_array_equal(got.reshape(-1), logits.argmax(-1).reshape(-1))
    table = rng.standard_normal((50, 64), dtype=np.float32)
    ids = np.array([3, 0, 49, 7], dtype=np.uint32)
    emb = ttnn.embedding(ttnn.from_torch(ids, dtype=ttnn.uint32, device=device), dev(device, table, layout=ttnn.ROW_MAJOR_LAYOUT))
    np.testing.assert_array_equal(to_np(emb).reshape(4, 64), table[ids])


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def test_decode_ops(device, rng):
    users, heads, kv_heads, head_dim, max_seq = 2, 4, 2, 32, 64
    pos = np.array([5, 17], dtype=np.uint32)
    tpos = ttnn.from_torch(pos, dtype=ttnn.uint32, device=device)
    # rotary embedding
    x = rng.standard_normal((1, users, heads, head_dim), dtype=np.float32)
    cos = rng.standard_normal((1, 1, max_seq, head_dim), dtype=np.float32)
    sin = rng.standard_normal((1, 1, max_seq, head_dim), dtype=np.float32)
    got = ttnn.experimental.rotary_embedding(dev(device, x), dev(device, cos), dev(device, sin), tpos)
    want = x * cos[0, 0, pos][None, :, None, :] + rotate_half(x) * sin[0, 0, pos][None, :, None, :]
    np.testing.assert_allclose(to_np(got), want, rtol=1e-5, atol=1e-5)
    # cache update, then decode attention against the updated caches
    k = rng.standard_normal((users, kv_heads, max_seq, head_dim), dtype=np.float32)
    v = rng.standard_normal((users, kv_heads, max_seq, head_dim), dtype=np.float32)
    tk, tv = dev(device, k), dev(device, v)
    new_k = rng.standard_normal((1, users, kv_heads, head_dim), dtype=np.float32)
    ttnn.experimental.paged_update_cache(tk, dev(device, new_k), update_idxs_tensor=tpos)
    for b in range(users):
        k[b, :, pos[b]] = new_k[0, b]
    np.testing.assert_array_equal(to_np(tk), k)
    ttnn.update_cache(tv, dev(device, new_k), tpos)
    for b in range(users):
        v[b, :, pos[b]] = new_k[0, b]
    q = rng.standard_normal((1, users, heads, head_dim), dtype=np.float32)
    scale = 0.125
    got = ttnn.transformer.scaled_dot_product_attention_decode(dev(device, q), tk, tv, cur_pos_tensor=tpos, scale=scale)
    want = np.zeros_like(q)
    group = heads // kv_heads
    for b in range(users):
        for h in range(heads):
            kk, vv = k[b, h // group, : pos[b] + 1], v[b, h // group, : pos[b] + 1]
            s = kk @ q[0, b, h] * scale
            p = np.exp(s - s.max())
            want[0, b, h] = (p / p.sum()) @ vv
    np.testing.assert_allclose(to_np(got), want, rtol=1e-4, atol=1e-5)


def test_creation_and_configs(device):
    z = ttnn.zeros((1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    np.testing.assert_array_equal(to_np(z), np.zeros((1, 1, 32, 32), np.float32))
    o = ttnn.ones_like(z)
    assert o.layout == ttnn.TILE_LAYOUT and o.device() == device
    np.testing.assert_array_equal(to_np(o), np.ones((1, 1, 32, 32), np.float32))
    f = ttnn.full([2, 32], 3.0, dtype=ttnn.float32, device=device)
    np.testing.assert_array_equal(to_np(f), np.full((2, 32), 3.0, np.float32))
    e = ttnn.empty((1, 1, 32, 32), ttnn.bfloat16, ttnn.TILE_LAYOUT, device, ttnn.L1_MEMORY_CONFIG)
    assert e.memory_config() == ttnn.L1_MEMORY_CONFIG
    np.testing.assert_array_equal(to_np(ttnn.arange(0, 32, 1, dtype=ttnn.float32)), np.arange(32, dtype=np.float32))
    cfg = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi4, fp32_dest_acc_en=True)
    pc = ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig(compute_with_storage_grid_size=(8, 8), in0_block_w=1)
    a = ttnn.ones((1, 1, 32, 32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    np.testing.assert_array_equal(to_np(ttnn.matmul(a, a, compute_kernel_config=cfg, program_config=pc)), np.full((1, 1, 32, 32), 32, np.float32))
    device.enable_program_cache()
    assert device.num_program_cache_entries() > 0

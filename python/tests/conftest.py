"""Fixtures for ttmesh's own Python tests (tt-metal's fixtures are the pytest plugin's)."""

import numpy as np
import pytest

import ttmesh.ttnn as ttnn


@pytest.fixture
def device():
    d = ttnn.open_device(device_id=0)
    yield d
    ttnn.close_device(d)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def bf16(x):
    """numpy float32 values rounded to bfloat16 (round to nearest even), as the device holds them."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def to_np(tensor, **kwargs):
    """ttnn.to_torch's values as a numpy array, whether it gave numpy (torch absent) or torch
    (bfloat16 widened to float32)."""
    out = ttnn.to_torch(tensor, **kwargs)
    if isinstance(out, np.ndarray):
        return out
    if str(out.dtype) == "torch.bfloat16":
        out = out.float()
    return out.numpy()

"""What the seed documents leave out, written once for every seed program here.

The seeds show TT-NN patterns around a model they elide (``run_model``), configs they name but
do not define (``sharded_dram_mem_config``, ...) and input they do not make (``host_tensor``).
This module gives those names small stand-ins built from the same kinds of ops, so each seed
program can be written exactly as its document writes it, and checks every result against a
float64 numpy reference written independently of the device path.

The model is ``relu(x @ w1) @ w2`` with a wide intermediate (64 x 4096) and a small output, and
it frees its own input once consumed, as TT-NN models do: that is what lets seed 001's L1-input
trick put a fresh input at the address the trace recorded.
"""

from __future__ import annotations

import numpy as np
import ttnn
from models.common.utility_functions import comp_allclose
from tests.ttnn.utils_for_testing import (
    assert_with_pcc,  # tt-metal's path; ttmesh.testing here
)

SHAPE = [64, 64]
HIDDEN = 4096
# The device the pytest-form seeds declare: @pytest.mark.parametrize("device_params", [...]).
SEED_DEVICE_PARAMS = {"l1_small_size": 24576, "trace_region_size": 800768, "num_command_queues": 2}


def seed_device(program_globals):
    """``(device, opened_here)``: the plugin's ``device`` fixture when the program runs inside
    a pytest test (it is passed in as a global), else chip 0 opened as the seeds' tests open it."""
    given = program_globals.get("device")
    if given is not None:
        return given, False
    return ttnn.open_device(device_id=0, **SEED_DEVICE_PARAMS), True


def finish(device, opened_here):
    ttnn.synchronize_device(device)
    if opened_here:
        ttnn.close_device(device)


def values(seed: int, shape, scale: float = 1.0) -> np.ndarray:
    """Deterministic float32 values in [-scale, scale)."""
    rng = np.random.default_rng(seed)
    return (rng.random(shape, dtype=np.float64) * 2.0 - 1.0).astype(np.float32) * np.float32(scale)


def host_input(i: int) -> np.ndarray:
    """The input of iteration ``i``: different each time, so a stale read shows."""
    return values(1000 + i, SHAPE)


def to_host_tensor(array: np.ndarray):
    """A host ttnn tensor (what the seeds call ``host_tensor``)."""
    return ttnn.from_torch(array, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT)


def _sharded(layout, buffer_type, shard_shape):
    """Sharded over two cores (L1) or two banks (DRAM) in a row."""
    cores = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(1, 0))})
    spec = ttnn.ShardSpec(cores, shard_shape, ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(layout, buffer_type, spec)


def sharded_dram_mem_config():
    """The persistent input: DRAM, height-sharded over 2 banks."""
    return _sharded(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.DRAM, [32, 64])


def sharded_l1_mem_config():
    """The model's input: L1, height-sharded over 2 cores."""
    return _sharded(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, [32, 64])


def output_sharded_dram_mem_config():
    """The persistent output: DRAM, width-sharded over 2 banks."""
    return _sharded(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.DRAM, [64, 32])


class Model:
    """``relu(x @ w1) @ w2``; ``run`` is the seeds' ``run_model``."""

    def __init__(self, device):
        self.w1_values = values(1, [SHAPE[1], HIDDEN])
        self.w2_values = values(2, [HIDDEN, SHAPE[1]], scale=1.0 / 64.0)
        self.w1 = ttnn.from_torch(
            self.w1_values, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )
        self.w2 = ttnn.from_torch(
            self.w2_values, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )

    def run(self, input_l1_tensor):
        hidden = ttnn.matmul(input_l1_tensor, self.w1, memory_config=ttnn.L1_MEMORY_CONFIG, activation="relu")
        ttnn.deallocate(input_l1_tensor)
        output = ttnn.matmul(hidden, self.w2, memory_config=ttnn.L1_MEMORY_CONFIG)
        ttnn.deallocate(hidden)
        return output

    def reference(self, x: np.ndarray) -> np.ndarray:
        hidden = np.maximum(x.astype(np.float64) @ self.w1_values.astype(np.float64), 0.0)
        return hidden @ self.w2_values.astype(np.float64)


def check(host_output_tensor, expected: np.ndarray, what: str) -> None:
    """The device's result equals the float64 reference (f32 sums of 4096 products)."""
    got = ttnn.to_torch(host_output_tensor)
    assert_with_pcc(expected, got, pcc=0.9999)
    close, message = comp_allclose(expected, got, rtol=1e-3, atol=1e-3)
    assert close, f"{what}: {message}"
    print(f"ok: {what}")

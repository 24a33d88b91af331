"""Devices: open/close with TT-NN's keywords, the system's ids, closed devices."""

import numpy as np
import pytest

from conftest import to_np

import ttmesh.ttnn as ttnn


def test_open_device_keywords_and_close():
    d = ttnn.open_device(device_id=0, l1_small_size=8192, trace_region_size=100000, num_command_queues=2, worker_l1_size=0)
    try:
        assert d.get_num_devices() == 1
        assert list(d.shape) == [1, 1]
        assert d.get_device_ids() == [0]
        cfg = d.allocator().get_config()
        assert cfg.trace_region_size == 100000
        assert cfg.l1_small_size == 8192
    finally:
        ttnn.close_device(d)
    assert not d.is_open
    ttnn.close_device(d)  # twice is fine


def test_one_op_round_trips_numpy(device, rng):
    a = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
    b = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
    ta = ttnn.from_torch(a, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    tb = ttnn.from_torch(b, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    out = to_np(ttnn.add(ta, tb))
    np.testing.assert_array_equal(out, a + b)


def test_system_ids():
    assert ttnn.get_num_devices() == 8
    assert ttnn.get_device_ids() == list(range(8))


def test_open_device_bad_arguments():
    with pytest.raises(ValueError, match="device_id 99 does not exist"):
        ttnn.open_device(device_id=99)
    with pytest.raises(TypeError, match="trace_region_size must be an int"):
        ttnn.open_device(device_id=0, trace_region_size="big")
    with pytest.raises(ValueError, match="num_command_queues must be 1 or 2"):
        ttnn.open_device(device_id=0, num_command_queues=3)


def test_closed_device_is_named(rng):
    d = ttnn.open_device(device_id=0)
    t = ttnn.from_torch(rng.standard_normal((32, 32), dtype=np.float32), layout=ttnn.TILE_LAYOUT, device=d)
    ttnn.close_device(d)
    with pytest.raises(RuntimeError, match="was closed"):
        ttnn.relu(t)
    with pytest.raises(RuntimeError, match="was closed"):
        to_np(t)

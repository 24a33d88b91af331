"""Metal Trace, events and command queues as TT-NN programs use them: traced equals
untraced, tt-metal's errors, seed 001's persistent input, both record_event forms."""

import numpy as np
import pytest

from conftest import to_np

import ttmesh.ttnn as ttnn


def host(x, dtype=ttnn.bfloat16):
    return ttnn.from_torch(x, dtype=dtype, layout=ttnn.TILE_LAYOUT)


def model(x, w):
    return ttnn.relu(ttnn.matmul(x, w))


def test_trace_equals_untraced_single_device(rng):
    device = ttnn.open_device(device_id=0, l1_small_size=24576, trace_region_size=800768)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 64, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        inp = ttnn.from_torch(np.zeros((1, 1, 32, 64), np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device, memory_config=ttnn.DRAM_MEMORY_CONFIG)
        model(inp, w)  # compile
        tid = ttnn.begin_trace_capture(device, cq_id=0)
        assert isinstance(tid, ttnn.MeshTraceId) and tid == int(tid)
        out = model(inp, w)
        ttnn.end_trace_capture(device, tid, cq_id=0)
        ttnn.synchronize_device(device)
        # Seed 004's reads: the region from get_config, live traces from the TRACE statistics.
        assert device.allocator().get_config().trace_region_size == 800768
        trace_stats = device.allocator().get_statistics(ttnn.BufferType.TRACE)
        assert trace_stats.total_allocated_bytes > 0
        assert device.get_trace_buffers_size() == trace_stats.total_allocated_bytes * 12  # 12 DRAM banks
        assert trace_stats.largest_free_block_bytes < trace_stats.total_allocatable_size_bytes
        for _ in range(3):
            x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
            ttnn.copy_host_to_device_tensor(host(x), inp)
            ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
            ttnn.synchronize_device(device)
            traced = to_np(out)
            untraced = to_np(model(inp, w))
            np.testing.assert_array_equal(traced, untraced)
        ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
        ttnn.release_trace(device, tid)
        assert device.get_trace_buffers_size() == 0
        stats = device.allocator().get_statistics(ttnn.BufferType.TRACE)
        assert stats.total_allocated_bytes == 0
    finally:
        ttnn.close_device(device)


def test_trace_errors_carry_tt_metal_text(rng):
    device = ttnn.open_device(device_id=0, trace_region_size=0)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 64, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        inp = ttnn.from_torch(np.ones((1, 1, 32, 64), np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        model(inp, w)
        tid = ttnn.begin_trace_capture(device, cq_id=0)
        model(inp, w)
        with pytest.raises(RuntimeError, match="Writes are not supported during trace capture"):
            ttnn.copy_host_to_device_tensor(host(np.ones((1, 1, 32, 64), np.float32)), inp)
        with pytest.raises(RuntimeError, match=r"Creating trace buffers of size \d+B on device \d+, but only 0B is allocated for trace region"):
            ttnn.end_trace_capture(device, tid, cq_id=0)
    finally:
        ttnn.close_device(device)


def model_frees_input(x, w):
    """A model whose first op consumes its L1 input and frees it (as TT-CNN models do)."""
    y = ttnn.relu(x, memory_config=ttnn.L1_MEMORY_CONFIG)
    ttnn.deallocate(x)
    return ttnn.matmul(y, w, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def test_persistent_input_at_recorded_address(rng):
    """Seed 001's L1-input pattern: the model frees its input, so an input allocated inside the
    capture lands at the address the trace recorded."""
    device = ttnn.open_device(device_id=0, trace_region_size=800768)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 64, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
        input_l1 = host(x).to(device, ttnn.L1_MEMORY_CONFIG)
        output = model_frees_input(input_l1, w)
        input_l1 = host(x).to(device, ttnn.L1_MEMORY_CONFIG)
        input_trace_addr = input_l1.buffer_address()
        spec = input_l1.spec
        output.deallocate(force=True)
        tid = ttnn.begin_trace_capture(device, cq_id=0)
        output = model_frees_input(input_l1, w)
        input_l1 = ttnn.allocate_tensor_on_device(spec, device)
        assert input_trace_addr == input_l1.buffer_address()
        ttnn.end_trace_capture(device, tid, cq_id=0)
        ttnn.copy_host_to_device_tensor(host(x), input_l1)
        ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
        wh = to_np(w)
        xb = to_np(ttnn.from_torch(x, dtype=ttnn.bfloat16))
        np.testing.assert_allclose(to_np(output), np.maximum(xb, 0) @ wh, rtol=2e-2, atol=5e-2)
    finally:
        ttnn.close_device(device)


def test_two_cqs_events_and_command_queue(rng):
    """Seed 003's pattern: writes on CQ 1, ops and trace on CQ 0, ordered by events (both of
    TT-NN's record_event forms)."""
    device = ttnn.open_device(device_id=0, trace_region_size=800768, num_command_queues=2)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 64, 64), dtype=np.float32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
        spec = ttnn.TensorSpec((1, 1, 32, 64), ttnn.float32, ttnn.TILE_LAYOUT, ttnn.DRAM_MEMORY_CONFIG)
        inp = ttnn.allocate_tensor_on_device(spec, device)
        model(inp, w)
        tid = ttnn.begin_trace_capture(device, cq_id=0)
        out = model(inp, w)
        ttnn.end_trace_capture(device, tid, cq_id=0)
        op_event = ttnn.record_event(device, 0)
        wh = to_np(w)
        for i in range(3):
            x = rng.standard_normal((1, 1, 32, 64), dtype=np.float32)
            ttnn.wait_for_event(1, op_event)
            ttnn.copy_host_to_device_tensor(ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT), inp, cq_id=1)
            write_event = ttnn.create_event(device)
            ttnn.record_event(1, write_event)
            ttnn.wait_for_event(0, write_event)
            ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
            op_event = ttnn.record_event(device, cq_id=0)
            ttnn.event_synchronize(op_event)
            np.testing.assert_allclose(to_np(out), np.maximum(x @ wh, 0), rtol=1e-5, atol=1e-4)
        with ttnn.command_queue(1):
            y = ttnn.relu(inp)
        ttnn.synchronize_device(device)
        np.testing.assert_array_equal(to_np(y), np.maximum(to_np(inp), 0))
        with pytest.raises(TypeError, match="event must come from"):
            ttnn.wait_for_event(0, "event")
        with pytest.raises(ValueError, match="command_queue"):
            with ttnn.command_queue(2):
                pass
    finally:
        ttnn.close_device(device)


def test_multichip_trace_with_all_reduce_equals_untraced(rng):
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(2, 4), trace_region_size=200000)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 256, 64), dtype=np.float32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=mesh, mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=2))
        x = rng.standard_normal((1, 1, 32, 256), dtype=np.float32)
        inp = ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=mesh, mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=3))

        def step():
            return ttnn.all_reduce(ttnn.matmul(inp, w))

        untraced = to_np(ttnn.get_device_tensors(step())[0])
        tid = ttnn.begin_trace_capture(mesh, cq_id=0)
        out = step()
        ttnn.end_trace_capture(mesh, tid, cq_id=0)
        ttnn.execute_trace(mesh, tid, cq_id=0, blocking=True)
        for part in ttnn.get_device_tensors(out):
            np.testing.assert_array_equal(to_np(part), untraced)
        wh = to_np(w, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=2))
        np.testing.assert_allclose(untraced, x @ wh, rtol=1e-4, atol=1e-4)
        ttnn.release_trace(mesh, tid)
    finally:
        ttnn.close_mesh_device(mesh)
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)

"""Seed 004 (Trace Buffers in TT-Metal): a tensor-parallel model captured on a T3K, its TRACE
buffers watched through the three phases (capture, 1000 replays, release).

`dump_trace_buffer_stats` is the seed's helper from `dump_trace_info` (not shown there): the
stand-in prints what the seed's Quick Reference calls give. With `--hold READY_FILE`, the
program stops after the replays with the mesh open, writes READY_FILE (its pid and the trace
buffer bytes it sees) and waits until READY_FILE is removed: meanwhile another process can run
`ttmesh monitor --once --json --pid PID` and see every chip's TRACE bytes (the test does).
"""

import json
import os
import sys
import time

import numpy as np
import ttnn
from tests.ttnn.utils_for_testing import assert_with_pcc

N_CHIPS, LAYERS, WIDTH = 8, 4, 256
HOLD_TIMEOUT_SECONDS = 60.0
hold_file = sys.argv[sys.argv.index("--hold") + 1] if "--hold" in sys.argv else None
device_params = {"trace_region_size": 30000000}  # the seed's fixture parameter: 30 MB per device


def dump_trace_buffer_stats(mesh_device, stage=""):
    """The trace buffers' bytes per device and the TRACE allocator's statistics (per bank),
    read with the seed's own Quick Reference calls."""
    trace_size = mesh_device.get_trace_buffers_size()
    stats = mesh_device.allocator().get_statistics(ttnn.BufferType.TRACE)
    print(f"{stage} Trace buffers: {trace_size / (1024 ** 2):.2f} MB per device; TRACE bank: "
          f"{stats.total_allocated_bytes:,} B allocated, {stats.largest_free_block_bytes:,} B largest free block")
    return trace_size


def bf16(values):
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


# Under pytest the plugin's t3k_mesh_device fixture passes the mesh in; alone, open it here.
mesh_device = globals().get("mesh_device")
opened_here = mesh_device is None
if opened_here:
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    mesh_device = ttnn.open_mesh_device(ttnn.MeshShape(1, N_CHIPS), **device_params)

rng = np.random.default_rng(4)
x_values = rng.standard_normal([32, WIDTH]).astype(np.float32)
weight_values = [(rng.standard_normal([WIDTH, WIDTH]) / 16).astype(np.float32) for _ in range(LAYERS)]
x = ttnn.from_torch(x_values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh_device,
                    mesh_mapper=ttnn.ReplicateTensorToMesh(mesh_device))
# Column-parallel layers: each chip holds WIDTH / 8 output columns, all_gather joins them.
weights = [ttnn.from_torch(w, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh_device,
                           mesh_mapper=ttnn.ShardTensorToMesh(mesh_device, dim=1)) for w in weight_values]


def model(activation):
    for weight in weights:
        activation = ttnn.all_gather(ttnn.matmul(activation, weight), dim=1)
    return activation


input = x  # the seed's name for the model's input
model(input)  # compile every op once: a capture needs them in the program cache
before = dump_trace_buffer_stats(mesh_device, stage="[BEFORE CAPTURE]")

# --- seed 004, as written (Phase 1: Capture) --------------------------------------------------
trace_id = ttnn.begin_trace_capture(mesh_device, cq_id=0)
output = model(input)
ttnn.end_trace_capture(mesh_device, trace_id, cq_id=0)
# --- end of the seed --------------------------------------------------------------------------

after_capture = dump_trace_buffer_stats(mesh_device, stage="[AFTER CAPTURE]")
assert before == 0 and after_capture > 0, (before, after_capture)

device = mesh_device  # the Quick Reference's names
allocator = device.allocator()
# --- seed 004, as written (Quick Reference) ---------------------------------------------------
config = device.allocator().get_config()
print(f"Trace region: {config.trace_region_size / (1024**2):.2f} MB")
trace_size = device.get_trace_buffers_size()
print(f"Trace buffers: {trace_size / (1024**2):.2f} MB")
stats = allocator.get_statistics(ttnn.BufferType.TRACE)
print(f"Allocated: {stats.total_allocated_bytes:,} bytes")
print(f"Free: {stats.largest_free_block_bytes:,} bytes")
# --- end of the seed --------------------------------------------------------------------------
assert config.trace_region_size == device_params["trace_region_size"]
assert trace_size == after_capture and stats.total_allocated_bytes > 0

# --- seed 004, as written (Phase 2: Execution, repeated) --------------------------------------
for _ in range(1000):
    ttnn.execute_trace(mesh_device, trace_id, blocking=False)
# --- end of the seed --------------------------------------------------------------------------
ttnn.synchronize_device(mesh_device)
after_replays = dump_trace_buffer_stats(mesh_device, stage="[AFTER 1000 REPLAYS]")
assert after_replays == after_capture, "replays must not allocate TRACE buffers"

expected = bf16(x_values)
for w in weight_values:
    expected = bf16(expected @ bf16(w))  # each layer's output is stored in bf16
per_chip = np.asarray(ttnn.to_torch(output, mesh_composer=ttnn.ConcatMeshToTensor(mesh_device, dim=0)),
                      dtype=np.float64).reshape(N_CHIPS, 32, WIDTH)
for chip in range(N_CHIPS):
    assert_with_pcc(expected, per_chip[chip], pcc=0.99)
print(f"ok: every chip's output equals the {LAYERS}-layer reference after 1000 replays")

if hold_file:
    # Another process reads the monitor now: say what we see, then wait to be released.
    with open(hold_file + ".tmp", "w") as ready:
        json.dump({"pid": os.getpid(), "trace_buffers_size": after_replays, "chips": N_CHIPS}, ready)
    os.replace(hold_file + ".tmp", hold_file)
    deadline = time.monotonic() + HOLD_TIMEOUT_SECONDS
    while os.path.exists(hold_file):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{hold_file} was not removed within {HOLD_TIMEOUT_SECONDS} s; remove it to let the program finish")
        time.sleep(0.05)

# --- seed 004, as written (Phase 3: Cleanup) --------------------------------------------------
ttnn.release_trace(mesh_device, trace_id)
# --- end of the seed --------------------------------------------------------------------------
after_release = dump_trace_buffer_stats(mesh_device, stage="[AFTER RELEASE]")
assert after_release == 0, after_release

if opened_here:
    ttnn.close_mesh_device(mesh_device)
    ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
print("PASS seed 004 trace buffer lifecycle")

"""Seed 000 (tt-enable-tracing), single device: the "Prerequisites" and "Basic Pattern" blocks.

Run as `python -m ttmesh seed000_trace_basic.py`. The seed captures without running its ops
once first, but a capture needs every op compiled already (program cache hit; seed 001 says
so: "we must ... have already compiled the target operations before we capture them"). So
this program runs the two ops once before capturing (marked "added"); with --as-written it
does not, and ttmesh stops at the capture with the program-cache error and its fix.
"""

import sys

import numpy as np
import ttnn
from tests.ttnn.utils_for_testing import assert_with_pcc

as_written = "--as-written" in sys.argv[1:]
rng = np.random.default_rng(0)
dummy_input = np.zeros([32, 256], dtype=np.float32)
weight_values = rng.standard_normal([256, 128]).astype(np.float32)
batch_values = [rng.standard_normal([32, 256]).astype(np.float32) for _ in range(3)]

# --- seed 000, as written (Prerequisites: single device) --------------------------------------
device = ttnn.open_device(device_id=0, trace_region_size=100000000)
# --- end of the seed --------------------------------------------------------------------------

weights = ttnn.from_torch(weight_values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
batches = [ttnn.from_torch(b, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT) for b in batch_values]

# --- seed 000, as written (Basic Pattern) ----------------------------------------------------
# 1. Pre-allocate all tensors that will be used in the trace
trace_input = ttnn.from_torch(dummy_input, dtype=ttnn.bfloat16,
                               layout=ttnn.TILE_LAYOUT, device=device,
                               memory_config=ttnn.DRAM_MEMORY_CONFIG)
# --- end of the seed --------------------------------------------------------------------------

if not as_written:
    # added: compile the two ops once, as a capture requires
    ttnn.relu(ttnn.matmul(trace_input, weights))

# --- seed 000, as written (Basic Pattern, continued) ------------------------------------------
# 2. Capture the trace (runs the ops once to record them)
trace_id = ttnn.begin_trace_capture(device, cq_id=0)
result = ttnn.matmul(trace_input, weights)
result = ttnn.relu(result)
ttnn.end_trace_capture(device, trace_id, cq_id=0)
ttnn.synchronize_device(device)

# 3. Replay with new inputs (no dispatch overhead)
results = []  # added: keep each replay's output to check it
for batch in batches:
    batch_host_tensor = batch  # the seed names the loop variable `batch` and copies `batch_host_tensor`
    ttnn.copy_host_to_device_tensor(batch_host_tensor, trace_input)
    ttnn.execute_trace(device, trace_id, cq_id=0, blocking=False)
    ttnn.synchronize_device(device)
    results.append(ttnn.to_torch(result))  # added
# --- end of the seed --------------------------------------------------------------------------


def bf16(values):
    """Round to bfloat16 as the device stores the inputs (truncate the low 16 bits, round half to even)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


for i, got in enumerate(results):
    expected = np.maximum(bf16(batch_values[i]) @ bf16(weight_values), 0.0)
    assert_with_pcc(expected, got, pcc=0.999)
    print(f"ok: replay {i} equals relu(batch @ weights)")
ttnn.release_trace(device, trace_id)
ttnn.close_device(device)
print("PASS seed 000 single-device trace")

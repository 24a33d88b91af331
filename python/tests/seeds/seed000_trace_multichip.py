"""Seed 000 (tt-enable-tracing), multi-chip: a T3K with FABRIC_1D, a traced matmul whose
partial products are summed by all_reduce, replayed with blocking=True.

As in seed000_trace_basic.py, the ops run once before the capture ("added"); --as-written
skips that and shows ttmesh's program-cache error.
"""

import sys

import numpy as np
import ttnn
from tests.ttnn.utils_for_testing import assert_with_pcc

as_written = "--as-written" in sys.argv[1:]
N_CHIPS = 8
rng = np.random.default_rng(0)
x_values = rng.standard_normal([32, 64 * N_CHIPS]).astype(np.float32)
w_values = rng.standard_normal([64 * N_CHIPS, 128]).astype(np.float32)

# --- seed 000, as written (Prerequisites: multi-device mesh) ----------------------------------
ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
mesh_device = ttnn.open_mesh_device(ttnn.MeshShape(1, N_CHIPS),
                                     trace_region_size=100000000)
# --- end of the seed --------------------------------------------------------------------------

# Tensor parallel over the inner dim: chip i holds x[:, Ki] and w[Ki, :], so its matmul is a
# partial product and all_reduce sums them into x @ w on every chip.
x_sharded = ttnn.from_torch(x_values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh_device,
                            mesh_mapper=ttnn.ShardTensorToMesh(mesh_device, dim=1))
w_sharded = ttnn.from_torch(w_values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh_device,
                            mesh_mapper=ttnn.ShardTensorToMesh(mesh_device, dim=0))

if not as_written:
    # added: compile the two ops once, as a capture requires
    ttnn.all_reduce(ttnn.matmul(x_sharded, w_sharded))

# --- seed 000, as written (Multi-Chip Traces) -------------------------------------------------
trace_id = ttnn.begin_trace_capture(mesh_device, cq_id=0)
partial = ttnn.matmul(x_sharded, w_sharded)
reduced = ttnn.all_reduce(partial)
ttnn.end_trace_capture(mesh_device, trace_id, cq_id=0)

ttnn.execute_trace(mesh_device, trace_id, cq_id=0, blocking=True)
# --- end of the seed --------------------------------------------------------------------------

per_chip = ttnn.to_torch(reduced, mesh_composer=ttnn.ConcatMeshToTensor(mesh_device, dim=0))
per_chip = np.asarray(per_chip, dtype=np.float64).reshape(N_CHIPS, 32, 128)
# The reference sums the same bf16-rounded inputs in float64; bf16 partial sums on the device
# lose a little, so the check is a correlation, per chip.
def bf16(values):
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


expected = bf16(x_values) @ bf16(w_values)
for chip in range(N_CHIPS):
    assert_with_pcc(expected, per_chip[chip], pcc=0.999)
print(f"ok: all {N_CHIPS} chips hold x @ w after the traced all_reduce")
# A second replay with new activations written into the same sharded tensor.
x2_values = rng.standard_normal([32, 64 * N_CHIPS]).astype(np.float32)
ttnn.copy_host_to_device_tensor(
    ttnn.from_torch(x2_values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                    mesh_mapper=ttnn.ShardTensorToMesh(mesh_device, dim=1)),
    x_sharded,
)
ttnn.execute_trace(mesh_device, trace_id, cq_id=0, blocking=True)
per_chip = np.asarray(ttnn.to_torch(reduced, mesh_composer=ttnn.ConcatMeshToTensor(mesh_device, dim=0)),
                      dtype=np.float64).reshape(N_CHIPS, 32, 128)
for chip in range(N_CHIPS):
    assert_with_pcc(bf16(x2_values) @ bf16(w_values), per_chip[chip], pcc=0.999)
print("ok: the replay with new activations")
ttnn.release_trace(mesh_device, trace_id)
ttnn.close_mesh_device(mesh_device)
ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
print("PASS seed 000 multi-chip trace on a T3K with FABRIC_1D")

"""Run under `mpirun -np 2` (.ci/run does): rank 1 opens the mesh with a trace region too small
for the capture, so its end_trace_capture fails on its own chips. Every rank must fail there
too, naming rank 1, and keep no trace, and the ranks must stay in step (the synchronize after
it meets on both). Prints one line per rank; exits non-zero if a rank kept the trace."""

import os
import sys

import numpy as np
import ttnn

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 8), trace_region_size=100000 if rank == 0 else 64)
x = ttnn.from_torch(np.ones((32, 64 * 8), np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                    device=mesh, mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=1))
ttnn.relu(x)
tid = ttnn.begin_trace_capture(mesh, cq_id=0)
ttnn.relu(x)
try:
    ttnn.end_trace_capture(mesh, tid, cq_id=0)
    sys.exit(f"rank {rank}: end_trace_capture succeeded although rank 1's failed")
except (RuntimeError, ValueError) as e:  # a chip's error, or the check across ranks'
    expected = "trace region" if rank == 1 else "rank 1 failed on its own chips"
    if expected not in str(e):
        sys.exit(f"rank {rank}: end_trace_capture failed without saying {expected!r}: {e}")
ttnn.synchronize_device(mesh)
ttnn.close_mesh_device(mesh)
print(f"rank {rank}: the capture failed on every rank, which stayed in step")

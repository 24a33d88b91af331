"""Host dispatch cost of TT-NN programs driven from Python, beside the same workloads driven
from Rust (mesh/examples/dispatch_host_time.rs), in one run:

- an untraced op (ttnn.relu on one bf16 tile), host time per call;
- execute_trace of a one-op trace (blocking=False), host time per call;
- a 1,000-op program (a chain of relus) untraced vs traced, host time including the wait.

Usage: target/python/bin/python python/bench/dispatch.py [--quick] [--mesh 1x1,2x4]
Needs `bash scripts/python-setup.sh` first; builds the Rust example with cargo if needed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import ttmesh.ttnn as ttnn

PROGRAM_OPS = 1000
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def rust_figures(shape, iters):
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "ttmesh", "--example", "dispatch_host_time", "--", shape, str(iters)]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_figures(shape, iters):
    rows, cols = (int(v) for v in shape.split("x"))
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(rows, cols), trace_region_size=16 << 20)
    try:
        x = ttnn.from_torch(np.full((1, 1, 32, 32), 0.5, np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh)
        relu = ttnn.relu
        for _ in range(100):
            relu(x)
        ttnn.synchronize_device(mesh)
        t = time.perf_counter()
        for _ in range(iters):
            relu(x)
        op_us = (time.perf_counter() - t) * 1e6 / iters
        ttnn.synchronize_device(mesh)

        tid = ttnn.begin_trace_capture(mesh, cq_id=0)
        out = relu(x)
        ttnn.end_trace_capture(mesh, tid, cq_id=0)
        ttnn.execute_trace(mesh, tid, cq_id=0, blocking=True)
        execute = ttnn.execute_trace
        t = time.perf_counter()
        for _ in range(iters):
            execute(mesh, tid, cq_id=0, blocking=False)
        execute_trace_us = (time.perf_counter() - t) * 1e6 / iters
        ttnn.synchronize_device(mesh)
        ttnn.release_trace(mesh, tid)
        del out

        def program():
            y = relu(x)
            for _ in range(PROGRAM_OPS - 1):
                y = relu(y)
            return y

        program()
        ttnn.synchronize_device(mesh)
        t = time.perf_counter()
        program()
        ttnn.synchronize_device(mesh)
        program_untraced_us = (time.perf_counter() - t) * 1e6
        tid = ttnn.begin_trace_capture(mesh, cq_id=0)
        y = program()
        ttnn.end_trace_capture(mesh, tid, cq_id=0)
        ttnn.execute_trace(mesh, tid, cq_id=0, blocking=True)
        t = time.perf_counter()
        ttnn.execute_trace(mesh, tid, cq_id=0, blocking=True)
        program_traced_us = (time.perf_counter() - t) * 1e6
        ttnn.release_trace(mesh, tid)
        del y
        return {"op_us": op_us, "execute_trace_us": execute_trace_us, "program_untraced_us": program_untraced_us, "program_traced_us": program_traced_us}
    finally:
        ttnn.close_mesh_device(mesh)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    p.add_argument("--mesh", default="1x1,2x4", help="mesh shapes, comma-separated (default 1x1,2x4)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept (default 3)")
    args = p.parse_args()
    iters = 200 if args.quick else 2000
    repeat = 1 if args.quick else args.repeat
    print(f"host time per call, best of {repeat}; {iters} calls per loop; TT-NN's own Python dispatch is 36-84 us per op (FACTS.md)")
    print(f"{'mesh':<5} {'what':<34} {'rust':>11} {'python':>11} {'py - rust':>11} {'py / rust':>9}")
    for shape in args.mesh.split(","):
        runs_r = [rust_figures(shape, iters) for _ in range(repeat)]
        runs_p = [python_figures(shape, iters) for _ in range(repeat)]
        rows = [
            ("untraced op (relu, 1 tile), us", "op_us"),
            ("execute_trace (1-op trace), us", "execute_trace_us"),
            (f"{PROGRAM_OPS}-op program untraced, us", "program_untraced_us"),
            (f"{PROGRAM_OPS}-op program traced, us", "program_traced_us"),
        ]
        for label, key in rows:
            r = min(x[key] for x in runs_r)
            py = min(x[key] for x in runs_p)
            print(f"{shape:<5} {label:<34} {r:>11.2f} {py:>11.2f} {py - r:>11.2f} {py / r:>8.2f}x")
        pu = min(x["program_untraced_us"] for x in runs_p)
        pt = min(x["program_traced_us"] for x in runs_p)
        print(f"{shape:<5} {'python: program untraced / traced':<34} {'':>11} {pu / pt:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Seed 002 (TT-NN Graph Tracing): every Python block of the document, in its order.

Run in an empty folder as `python -m ttmesh seed002_graph_capture.py`; it leaves
my_report.json (the add) and report.json (with buffer pages) there, which
`python -m ttnn.graph_report my_report.json ./visualizer_db/` then imports (the test does).
The document's operations are `ttnn.add(tensor_a, tensor_b)` and "your operations here"; the
stand-ins are adds and a multiply on small bf16 tensors, and the sample trace's broadcast add.
"""

import json

import numpy as np
import ttnn

ADD_OPERATION = "BinaryNgDeviceOperation"  # what TT-NN 0.81's graph names ttnn.add and ttnn.multiply
device = ttnn.open_device(device_id=0)
rng = np.random.default_rng(2)


def device_tensor(shape):
    return ttnn.from_torch(rng.standard_normal(shape).astype(np.float32), dtype=ttnn.bfloat16,
                           layout=ttnn.TILE_LAYOUT, device=device)


tensor_a = device_tensor([1, 1, 64, 64])
tensor_b = device_tensor([1, 1, 64, 64])
tensor_c = device_tensor([1, 1, 64, 64])

# --- Quick Start, Python (5 lines) ------------------------------------------------------------
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
result = ttnn.add(tensor_a, tensor_b)  # Your operations here
graph = ttnn.graph.end_graph_capture()
print(graph)  # List of traced nodes
# ----------------------------------------------------------------------------------------------
assert graph[0]["node_type"] == "capture_start" and graph[-1]["node_type"] == "capture_end"
names = [n["params"]["name"] for n in graph if n["node_type"] == "function_start"]
# TT-NN 0.81 records ttnn.add as its device operation (the document's sample, from an older
# TT-NN, shows "ttnn::add" above it); ttmesh records what 0.81 does.
assert names[0] == ADD_OPERATION, names
print(f"ok: quick start captured {len(graph)} nodes, functions {names}")

# --- Save to File (for ttnn-visualizer) -------------------------------------------------------
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
# ... your operations ...
result = ttnn.add(tensor_a, tensor_b)
product = ttnn.multiply(result, tensor_c)
ttnn.graph.end_graph_capture_to_file("my_report.json")
# ----------------------------------------------------------------------------------------------
with open("my_report.json") as report_file:
    report = json.load(report_file)
for key in ("version", "graph", "devices", "metadata"):
    assert key in report, f"my_report.json has no {key!r}: {sorted(report)}"
print(f"ok: my_report.json has {sorted(report)}")

# --- Run Modes --------------------------------------------------------------------------------
# Fast analysis without device
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NO_DISPATCH)
planned = ttnn.add(tensor_a, tensor_b)
no_dispatch_graph = ttnn.graph.end_graph_capture()
# Real execution with actual addresses
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
computed = ttnn.add(tensor_a, tensor_b)
graph = ttnn.graph.end_graph_capture()
# ----------------------------------------------------------------------------------------------
assert any(n["node_type"] == "buffer_allocate" for n in no_dispatch_graph)
print("ok: NO_DISPATCH allocated buffers without running")

# --- Extracting Operation Durations -----------------------------------------------------------
for node in graph:
    if node["node_type"] == "function_end" and "duration_ns" in node:
        name = node["params"]["name"]
        duration_ms = node["duration_ns"] / 1_000_000
        print(f"{name}: {duration_ms:.2f} ms")


# --- Tracking Memory Usage --------------------------------------------------------------------
def get_peak_memory(graph):
    total_buffer = 0
    peak_buffer = 0

    for node in graph:
        if node["node_type"] == "buffer_allocate":
            total_buffer += int(node["params"]["size"])
            peak_buffer = max(peak_buffer, total_buffer)
        elif node["node_type"] == "buffer_deallocate":
            # Get size from connected buffer node
            buffer_id = node["connections"][0]
            buffer_node = graph[buffer_id]
            total_buffer -= int(buffer_node["params"]["size"])

    return peak_buffer
# ----------------------------------------------------------------------------------------------


peak = get_peak_memory(graph)
# One bf16 64x64 output (4 tiles of 2048 B) is allocated by the add.
assert peak >= 4 * 2048, peak
print(f"ok: peak buffer memory of the add {peak} B")

# --- Stack Trace Capture ----------------------------------------------------------------------
# Enable before capture
ttnn.graph.enable_stack_traces()

ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
# ... your operations ...
result = ttnn.add(tensor_a, tensor_b)
graph = ttnn.graph.end_graph_capture()

# Disable when done (removes overhead)
ttnn.graph.disable_stack_traces()

# Check status
if ttnn.graph.is_stack_trace_enabled():
    print("Stack traces enabled")
# ----------------------------------------------------------------------------------------------
assert not ttnn.graph.is_stack_trace_enabled()
starts = [n for n in graph if n["node_type"] == "function_start" and n["stacking_level"] == 1]
assert starts and all(n["stack_trace"] for n in starts), starts[:1]
print("ok: the operations' function_start nodes carry stack_trace")

# --- Buffer Page Capture ----------------------------------------------------------------------
ttnn.graph.enable_buffer_pages()

ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
# ... your operations ...
l1_result = ttnn.add(tensor_a, tensor_b, memory_config=ttnn.L1_MEMORY_CONFIG)
ttnn.graph.end_graph_capture_to_file("report.json")

ttnn.graph.disable_buffer_pages()
# ----------------------------------------------------------------------------------------------
with open("report.json") as report_file:
    pages = json.load(report_file).get("buffer_pages", [])
assert pages, "report.json has no buffer_pages"
for key in ("device_id", "address", "core_x", "core_y", "bank_id", "page_index", "page_address", "page_size", "buffer_type"):
    assert key in pages[0], f"buffer page has no {key!r}: {pages[0]}"
print(f"ok: report.json has {len(pages)} buffer pages")

# --- Operation Arguments ----------------------------------------------------------------------
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
# ... your operations ...
result = ttnn.add(tensor_a, tensor_b)
graph = ttnn.graph.end_graph_capture()

for node in graph:
    if node["node_type"] == "function_start" and "arguments" in node:
        print(f"{node['params']['name']}: {node['arguments']}")
# ----------------------------------------------------------------------------------------------


def some_operation(tensor):
    return ttnn.add(tensor, tensor)


# --- Debugging Hanging Operations -------------------------------------------------------------
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
try:
    result = some_operation(tensor_a)
    ttnn._ttnn.device.synchronize_device(device)
except Exception as e:  # noqa: F841 (the seed names it and does not use it)
    graph = ttnn.graph.end_graph_capture()
    print(f"Operation hung. Captured trace: {graph}")
    raise
# ----------------------------------------------------------------------------------------------
graph = ttnn.graph.end_graph_capture()
print("ok: the timeout pattern ran (nothing hung)")

# --- Levelized Graph --------------------------------------------------------------------------
# For ttnn::add(a, ttnn::multiply(b, c)), as the document's example.
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
result = ttnn.add(tensor_a, ttnn.multiply(tensor_b, tensor_c))
graph = ttnn.graph.end_graph_capture()

# Extract with max_level=1 (top-level operations only)
levelized = ttnn.graph.extract_levelized_graph(graph)

# Or expand to see internal operations
levelized = ttnn.graph.extract_levelized_graph(graph, max_level=2)

for vertex in levelized:
    print(f"{vertex['name']} (level {vertex['stacking_level']})")
    print(f"  inputs: {vertex['in_edges']}")
    print(f"  outputs: {vertex['out_edges']}")
    print(f"  internals: {vertex['internals']}")
# ----------------------------------------------------------------------------------------------
level_one = ttnn.graph.extract_levelized_graph(graph)
for key in ("counter", "stacking_level", "name", "in_edges", "out_edges", "internals", "output_shape", "arguments"):
    assert all(key in vertex for vertex in level_one), f"a vertex has no {key!r}"
level_one_names = [v["name"] for v in level_one]
# Both ops are binary_ng device operations in TT-NN 0.81; the multiply is the first.
operations = sorted((v for v in level_one if not v["name"].startswith("tensor[")), key=lambda v: v["counter"])
assert [v["name"] for v in operations] == [ADD_OPERATION, ADD_OPERATION], level_one_names
multiply_vertex, add_vertex = operations
# multiply feeds add: the edge is there both ways; add's other input is tensor a.
assert multiply_vertex["counter"] in add_vertex["in_edges"], add_vertex
assert add_vertex["counter"] in multiply_vertex["out_edges"], multiply_vertex
assert len(multiply_vertex["in_edges"]) == 2 and len(add_vertex["in_edges"]) == 2
assert all(v["stacking_level"] == 1 for v in level_one)
assert len(levelized) >= len(level_one)
print(f"ok: levelized graph, level 1 {level_one_names}")

# --- Reference: Sample Trace (broadcast add) --------------------------------------------------
wide = device_tensor([4, 3, 32, 32])
narrow = device_tensor([1, 3, 32, 32])
ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
broadcast = ttnn.add(wide, narrow)
graph = ttnn.graph.end_graph_capture()
assert list(broadcast.shape) == [4, 3, 32, 32], broadcast.shape
top = [n["params"]["name"] for n in graph if n["node_type"] == "function_start"]
# binary_ng broadcasts by itself in TT-NN 0.81 (the document's older sample repeats first).
assert top[0] == ADD_OPERATION and "ttnn::repeat" not in top, top
print(f"ok: sample trace functions {top}")

ttnn.close_device(device)
print("PASS seed 002 graph capture")

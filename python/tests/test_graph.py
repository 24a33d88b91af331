"""ttnn.graph: capture, TT-NN's node schema, the extract calls, NO_DISPATCH, stack traces,
buffer pages, reports."""

import json

import numpy as np
import pytest

import ttmesh.ttnn as ttnn


def test_capture_nodes_and_extracts(device, rng):
    a = ttnn.from_torch(rng.standard_normal((1, 1, 32, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    b = ttnn.from_torch(rng.standard_normal((1, 1, 32, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device, memory_config=ttnn.L1_MEMORY_CONFIG)
    ttnn.add(a, b)
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    out = ttnn.relu(ttnn.add(a, b, memory_config=ttnn.L1_MEMORY_CONFIG))
    graph = ttnn.graph.end_graph_capture()
    assert graph[0]["node_type"] == "capture_start" and graph[-1]["node_type"] == "capture_end"
    for i, node in enumerate(graph):
        assert node["counter"] == i
        assert set(node) >= {"arguments", "connections", "counter", "input_tensors", "node_type", "params", "stacking_level"}
    kinds = {n["node_type"] for n in graph}
    assert {"function_start", "function_end", "tensor", "buffer_allocate"} <= kinds
    calls = ttnn.graph.extract_calltrace(graph)
    assert len(calls) >= 2
    durations = [n for n in graph if n["node_type"] == "function_end" and "duration_ns" in n]
    assert durations
    peak = ttnn.graph.extract_peak_L1_memory_usage(graph)
    assert peak >= 32 * 64 * 2  # the add's L1 output, at least
    outs = ttnn.graph.extract_output_tensors(graph)
    assert outs and outs[-1]["address"] == out.buffer_address()
    lv = ttnn.graph.extract_levelized_graph(graph)
    ops = [v for v in lv if not v["name"].startswith("tensor[")]
    assert [v["stacking_level"] for v in ops] == [1, 1]
    assert ops[0]["counter"] in ops[1]["in_edges"]  # relu consumes the add's output
    assert len([v for v in lv if v["name"].startswith("tensor[")]) == 2  # a and b
    lv2 = ttnn.graph.extract_levelized_graph(graph, max_level=2)
    assert len(lv2) >= len(lv)
    # A plain list (e.g. reloaded from JSON) works too.
    assert ttnn.graph.extract_levelized_graph(json.loads(json.dumps(graph))) == lv
    per_chip = ttnn.graph.peak_memory_per_chip(graph)
    assert per_chip and all(v["L1"] >= 0 for v in per_chip.values())


def test_no_dispatch_allocates_but_runs_nothing(device, rng):
    x = rng.standard_normal((1, 1, 32, 32), dtype=np.float32)
    a = ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    ttnn.relu(a)
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NO_DISPATCH)
    big = ttnn.allocate_tensor_on_device(ttnn.TensorSpec((1, 1, 4096, 4096), ttnn.bfloat16, ttnn.TILE_LAYOUT), device)
    ttnn.relu(a)
    graph = ttnn.graph.end_graph_capture()
    assert any(n["node_type"] == "buffer_allocate" and int(n["params"]["size"]) == 4096 * 4096 * 2 for n in graph)
    del big


def test_stack_traces_buffer_pages_and_report(device, rng, tmp_path):
    a = ttnn.from_torch(rng.standard_normal((1, 1, 32, 32), dtype=np.float32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    ttnn.relu(a)
    ttnn.graph.enable_stack_traces()
    assert ttnn.graph.is_stack_trace_enabled()
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    ttnn.relu(a)
    graph = ttnn.graph.end_graph_capture()
    ttnn.graph.disable_stack_traces()
    assert not ttnn.graph.is_stack_trace_enabled()
    assert any("stack_trace" in n for n in graph if n["node_type"] == "function_start")
    ttnn.graph.enable_python_stack_traces()
    ttnn.graph.disable_python_stack_traces()
    ttnn.graph.enable_buffer_pages()
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    ttnn.relu(a, memory_config=ttnn.L1_MEMORY_CONFIG)
    report = tmp_path / "my_report.json"
    nodes = ttnn.graph.end_graph_capture_to_file(report)
    ttnn.graph.disable_buffer_pages()
    data = json.loads(report.read_text())
    assert {"version", "graph", "devices", "metadata", "cluster_descriptor", "buffer_pages"} <= set(data)
    assert len(data["graph"]) == len(nodes)
    assert data["devices"]


def test_graph_errors():
    with pytest.raises(RuntimeError, match="end_graph_capture without begin_graph_capture"):
        ttnn.graph.end_graph_capture()
    with pytest.raises(TypeError, match="run_mode"):
        ttnn.graph.begin_graph_capture("NORMAL")
    with pytest.raises(ValueError, match="not a captured graph"):
        ttnn.graph.extract_levelized_graph([{"node_type": 3}])

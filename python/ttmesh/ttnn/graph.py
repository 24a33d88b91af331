"""``ttnn.graph``: TT-NN's graph capture on ttmesh (``ttmesh::graph``).

``end_graph_capture()`` returns TT-NN's list of node dicts (node_type, params, connections,
stacking_level, ...); the ``extract_*`` calls take that list."""

import json

from ttmesh import _ttmesh as _n

RunMode = _n.RunMode


class CapturedGraph(list):
    """The nodes as TT-NN's JSON (a list of dicts), keeping the native graph (which knows the
    chips every buffer lives on) for the extract calls and reports."""

    _native = None


def _native_of(graph):
    native = getattr(graph, "_native", None)
    if native is not None:
        return native
    if not isinstance(graph, (list, tuple)):
        raise TypeError(f"ttnn.graph: expected the graph ttnn.graph.end_graph_capture() returned, not {type(graph).__name__}")
    return _n.graph_from_json(json.dumps(list(graph)))


def _wrap(native):
    out = CapturedGraph(json.loads(native.to_json()))
    out._native = native
    return out


def begin_graph_capture(run_mode=RunMode.NORMAL):
    """Starts a capture (nested in any open one). NO_DISPATCH: buffers are allocated and
    commands encoded, nothing runs and no data is written."""
    if not isinstance(run_mode, RunMode):
        raise TypeError(f"begin_graph_capture: run_mode must be ttnn.graph.RunMode.NORMAL or NO_DISPATCH, not {run_mode!r}")
    _n.begin_graph_capture(run_mode)


def end_graph_capture():
    """Ends the innermost capture and returns its nodes."""
    return _wrap(_n.end_graph_capture())


def end_graph_capture_to_file(report_path, device=None):
    """Ends the innermost capture and writes its report (``ttmesh report import`` and
    ttnn-visualizer read it); the devices section describes ``device``, else the device opened
    last that is still open. Returns the nodes."""
    from . import _device  # noqa: PLC0415

    native = _n.end_graph_capture()
    native.write_report(str(report_path), device if device is not None else _device.last_open_device())
    return _wrap(native)


def extract_calltrace(graph):
    """The names of the functions called, in order (every function_start)."""
    return [n["params"]["name"] for n in graph if n["node_type"] == "function_start"]


def _l1_live_sizes(graph):
    """(live L1 buffer bytes after each event, ...) from buffer_allocate / buffer_deallocate."""
    total = 0
    for n in graph:
        if n["node_type"] == "buffer_allocate" and n["params"].get("type") == "L1":
            total += int(n["params"]["size"])
            yield total
        elif n["node_type"] == "buffer_deallocate":
            buf = graph[n["connections"][0]] if n["connections"] else None
            if buf is not None and buf["params"].get("type") == "L1":
                total -= int(buf["params"]["size"])
                yield total


def extract_peak_L1_memory_usage(graph):
    """The largest sum of live L1 buffer bytes the graph reaches (over all banks of a device)."""
    return max(_l1_live_sizes(graph), default=0)


def extract_output_tensors(graph):
    """The tensors the last top-level op returned: dicts with shape, dtype, layout, address,
    buffer_type and tensor_id, as the graph's tensor nodes give them."""
    last_end = None
    for n in graph:
        if n["node_type"] == "function_end" and n["stacking_level"] == 1:
            last_end = n
    if last_end is None:
        return []
    out = []
    for c in last_end["connections"]:
        node = graph[c]
        if node["node_type"] == "tensor":
            out.append(dict(node["params"]))
    return out


def extract_levelized_graph(graph, max_level=1):
    """TT-NN's levelized graph: vertices (counter, stacking_level, name, in_edges, out_edges,
    internals, output_shape, arguments) for the ops of levels 1..max_level."""
    return json.loads(_native_of(graph).levelized(int(max_level)))


def peak_memory_per_chip(graph):
    """ttmesh's addition: per chip id, peak bytes per bank of DRAM, L1, L1_SMALL and TRACE."""
    return _native_of(graph).peak_memory_per_chip()


def enable_stack_traces():
    _n.set_stack_traces(True)


def disable_stack_traces():
    _n.set_stack_traces(False)


enable_python_stack_traces = enable_stack_traces
disable_python_stack_traces = disable_stack_traces


def is_stack_trace_enabled():
    return _n.is_stack_trace_enabled()


def enable_buffer_pages():
    """Per-page placement of L1 buffers in reports of captures begun after this."""
    _n.set_buffer_pages(True)


def disable_buffer_pages():
    _n.set_buffer_pages(False)

"""The modeled device profile (ttmesh.profile, TTMESH_PROFILE) and the graph-report import
for ttnn-visualizer, from Python."""

import csv
import json
import sqlite3

import numpy as np
import pytest

import ttmesh
import ttmesh.ttnn as ttnn
from ttmesh.ttnn import graph_report


def run_ops(device, rng):
    a = ttnn.from_torch(rng.standard_normal((1, 1, 64, 64), dtype=np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    for _ in range(3):
        a = ttnn.relu(ttnn.matmul(a, a))
    ttnn.synchronize_device(device)


def test_profile_context_writes_the_folder(device, rng, tmp_path):
    run_ops(device, rng)
    with ttmesh.profile(tmp_path / "prof", device=device, host_model="python", iterations=3, quiet=True) as p:
        run_ops(device, rng)
    names = {f.split("/")[-1] for f in p.files}
    assert names == {"ops_perf_results.csv", "profile_log_device.csv", "trace.json", "timeline.svg", "calibration.toml", "summary.json"}
    assert p.predicted is None  # nothing was captured into a trace
    with open(tmp_path / "prof" / "ops_perf_results.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"OP CODE", "DEVICE ID", "DEVICE KERNEL DURATION [ns]", "HOST DURATION [ns]"} <= set(rows[0])
    assert isinstance(p.summary, dict) and p.text
    json.loads((tmp_path / "prof" / "trace.json").read_text())
    with pytest.raises(ValueError, match="host model|host_model|unknown"):
        ttmesh.profile(tmp_path / "p2", device=device, host_model="fortran").__enter__()


def test_a_traced_block_gets_the_prediction_plan_decode_makes(rng, tmp_path):
    device = ttnn.open_device(device_id=0, trace_region_size=800768)
    try:
        w = ttnn.from_torch(rng.standard_normal((1, 1, 1024, 1024), dtype=np.float32), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=device)
        x = ttnn.from_torch(np.zeros((1, 1, 32, 1024), np.float32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        ttnn.relu(ttnn.matmul(x, w))  # compile
        with ttmesh.profile(tmp_path / "prof", device=device, quiet=True) as p:
            tid = ttnn.begin_trace_capture(device, cq_id=0)
            ttnn.relu(ttnn.matmul(x, w))
            ttnn.end_trace_capture(device, tid, cq_id=0)
            for _ in range(2):
                ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
        ttnn.release_trace(device, tid)
    finally:
        ttnn.close_device(device)
    pred = p.predicted
    assert pred is not None and pred["chips"] == 1 and pred["ops_per_chip"] == 2
    assert pred["token_us"] > 0 and "predicted on the hardware" in p.text
    ops = [o["op"].split(" ")[0] for o in pred["top_ops"]]
    assert "Matmul" in ops, ops
    saved = json.loads((tmp_path / "prof" / "summary.json").read_text())
    assert saved["predicted"] == pred


def test_profile_from_the_environment(monkeypatch, rng, tmp_path):
    monkeypatch.setenv("TTMESH_PROFILE", str(tmp_path / "envprof"))
    d = ttnn.open_device(device_id=0)
    run_ops(d, rng)
    ttnn.close_device(d)
    assert (tmp_path / "envprof" / "ops_perf_results.csv").exists()


def test_graph_report_import(device, rng, tmp_path):
    run_ops(device, rng)
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    run_ops(device, rng)
    report = tmp_path / "my_report.json"
    ttnn.graph.end_graph_capture_to_file(report)
    out = tmp_path / "visualizer_db"
    s = graph_report.import_report(report, out, svg=True)
    assert s["operations"] >= 6 and (out / "db.sqlite").exists() and (out / "call_graph.svg").exists()
    with sqlite3.connect(out / "db.sqlite") as db:
        assert db.execute("select count(*) from operations").fetchone()[0] == s["operations"]
    with pytest.raises((RuntimeError, ValueError), match="empty|replace|exists"):
        graph_report.import_report(report, out)
    assert graph_report.main([str(report), str(out), "--replace"]) == 0
    assert graph_report.main([str(tmp_path / "missing.json"), str(tmp_path / "o2")]) == 1

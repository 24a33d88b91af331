"""`python -m ttnn.graph_report` (ttmesh.graph_report_cli) on a report of a collective.

The seed 002 test imports a single chip's report; this one imports a 1x2 mesh's all_reduce,
refuses what it must, and takes the seed's folder-of-reports form.
"""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import ttmesh.ttnn as ttnn
from ttmesh.graph_report_cli import GraphReportError, reports_in

PYTHON_DIR = Path(__file__).resolve().parents[1]


def graph_report(args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(PYTHON_DIR), env.get("PYTHONPATH", "")] if p)
    return subprocess.run(
        [sys.executable, "-m", "ttmesh", "-m", "ttnn.graph_report", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def all_reduce_report(tmp_path_factory):
    """end_graph_capture_to_file of one all_reduce on a 1x2 mesh (FABRIC_1D)."""
    path = tmp_path_factory.mktemp("graph") / "all_reduce.json"
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 2))
    try:
        x = ttnn.from_torch(
            np.ones((2, 32, 64), np.float32),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=mesh,
            mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=0),
        )
        ttnn.all_reduce(x)
        ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
        ttnn.all_reduce(x)
        ttnn.graph.end_graph_capture_to_file(str(path))
    finally:
        ttnn.close_mesh_device(mesh)
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
    return path


def test_imports_a_report_into_the_visualizer_folder(all_reduce_report, tmp_path):
    result = graph_report(["--svg", str(all_reduce_report), "out"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("out: ") and " operations, " in result.stdout, result.stdout
    for name in ("db.sqlite", "config.json", "cluster_descriptor.yaml", "call_graph.svg"):
        assert (tmp_path / "out" / name).is_file(), name
    with sqlite3.connect(tmp_path / "out" / "db.sqlite") as db:
        names = [row[0] for row in db.execute("SELECT name FROM operations")]
        devices = db.execute("SELECT COUNT(*) FROM devices").fetchone()[0]
    # TT-NN 0.81.1 names it by its device operation (AllReduceAsyncDeviceOperation).
    assert len(names) == 1 and "allreduce" in names[0].lower().replace("_", ""), names
    assert devices == 2


def test_a_non_empty_out_dir_is_refused_unless_replace(all_reduce_report, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = graph_report([str(all_reduce_report), "out"], cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    assert graph_report([str(all_reduce_report), "out", "--replace"], cwd=tmp_path).returncode == 0


def test_a_missing_report_is_named(tmp_path):
    result = graph_report(["nope.json", "out"], cwd=tmp_path)
    assert result.returncode == 1
    assert "report 'nope.json' does not exist" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_of_reports_gives_one_folder_each(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    assert reports_in(tmp_path, Path("out")) == [
        (tmp_path / "a.json", Path("out/a")),
        (tmp_path / "b.json", Path("out/b")),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GraphReportError, match="holds no \\*.json report files"):
        reports_in(empty, Path("out"))

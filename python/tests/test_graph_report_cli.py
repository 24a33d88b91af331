"""`python -m ttnn.graph_report` (ttmesh.graph_report_cli) on a report the ttmesh command wrote.

The seed 002 test imports the Python program's own report; this one needs only the ttmesh
command (`ttmesh run --graph`), so the importer is checked on its own.
"""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ttmesh.graph_report_cli import GraphReportError, reports_in, ttmesh_command

PYTHON_DIR = Path(__file__).resolve().parents[1]


def graph_report(args, cwd, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(PYTHON_DIR), env.get("PYTHONPATH", "")] if p)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "ttmesh", "-m", "ttnn.graph_report", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    """A report of `ttmesh run` on an n300 (an all_reduce among its ops)."""
    folder = tmp_path_factory.mktemp("graph")
    subprocess.run(
        [ttmesh_command(), "run", "--mesh", "n300", "--iters", "1", "--graph", str(folder)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return folder / "report.json"


def test_imports_a_report_into_the_visualizer_folder(run_report, tmp_path):
    result = graph_report(["--svg", str(run_report), "out"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("out: ") and " operations, " in result.stdout, result.stdout
    for name in ("db.sqlite", "config.json", "cluster_descriptor.yaml", "call_graph.svg"):
        assert (tmp_path / "out" / name).is_file(), name
    with sqlite3.connect(tmp_path / "out" / "db.sqlite") as db:
        names = [row[0] for row in db.execute("SELECT name FROM operations")]
    assert "ttnn::all_reduce" in names, names


def test_a_non_empty_out_dir_is_refused_unless_replace(run_report, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = graph_report([str(run_report), "out"], cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    assert graph_report([str(run_report), "out", "--replace"], cwd=tmp_path).returncode == 0


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


def test_a_missing_ttmesh_command_says_how_to_build_it(tmp_path):
    result = graph_report(
        [str(tmp_path / "r.json"), "out"],
        cwd=tmp_path,
        env_extra={"TTMESH_BIN": str(tmp_path / "no-such-ttmesh")},
    )
    assert result.returncode == 1
    # The missing report is named first: nothing is run for a report that is not there.
    assert "does not exist" in result.stderr
    (tmp_path / "r.json").write_text("{}")
    result = graph_report(
        [str(tmp_path / "r.json"), "out"],
        cwd=tmp_path,
        env_extra={"TTMESH_BIN": str(tmp_path / "no-such-ttmesh")},
    )
    assert result.returncode == 1
    assert "cargo build --release -p ttmesh-cli" in result.stderr

"""The five seed documents' programs, run as their users would run them on ttmesh.

Each program in seeds/ is a TT-NN script (`import ttnn`) that checks its own results against
numpy references and prints PASS; here each runs in a fresh interpreter under
`python -m ttmesh`, in an empty folder. Also: seed 000 exactly as written stops with the
program-cache error, seed 002's report goes through `python -m ttnn.graph_report` into the
folder ttnn-visualizer opens, seed 004's TRACE bytes show in `ttmesh monitor` from another
process, and the seeds' pytest form runs under the plugin.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SEEDS = TESTS / "seeds"
PYTHON_DIR = TESTS.parent
REPO = PYTHON_DIR.parent
SEED_TIMEOUT_SECONDS = 300

pytest.importorskip("ttmesh.ttnn", reason="ttmesh's native module is not built: run scripts/python-setup.sh")


def ttmesh_command():
    """The `ttmesh` command: $TTMESH_BIN, this checkout's release build, or on PATH."""
    for candidate in (
        os.environ.get("TTMESH_BIN"),
        str(REPO / "target" / "release" / "ttmesh"),
        shutil.which("ttmesh"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("the ttmesh command was not found: cargo build --release -p ttmesh-cli (or set TTMESH_BIN)")


def environment():
    env = dict(os.environ)
    env["TTMESH_SYSTEM"] = "t3k"  # the seeds' machine (seed 000 and 004 open a 1x8 T3K mesh)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(PYTHON_DIR), env.get("PYTHONPATH", "")] if p)
    return env


def ttmesh_python(args, cwd, timeout=SEED_TIMEOUT_SECONDS):
    """`python -m ttmesh ARGS` in ``cwd``; the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "ttmesh", *args],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_passed(result, banner):
    assert result.returncode == 0, (
        f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    assert banner in result.stdout, result.stdout


SCRIPTS = {
    "seed000_trace_basic.py": "PASS seed 000 single-device trace",
    "seed000_trace_multichip.py": "PASS seed 000 multi-chip trace on a T3K with FABRIC_1D",
    "seed001_trace_dram_input.py": "PASS seed 001 trace, DRAM input",
    "seed001_trace_l1_input.py": "PASS seed 001 trace, L1 input at the recorded address",
    "seed001_2cq_writes.py": "PASS seed 001 two CQs, CQ 1 writes",
    "seed001_2cq_writes_reads.py": "PASS seed 001 two CQs, CQ 1 writes and reads",
    "seed001_trace_2cq_writes.py": "PASS seed 001 trace with two CQs, CQ 1 writes",
    "seed001_trace_2cq_writes_reads.py": "PASS seed 001 trace with two CQs, CQ 1 writes and reads",
    "seed002_graph_capture.py": "PASS seed 002 graph capture",
    "seed003_trace_dram_input.py": "PASS seed 003 trace, DRAM input",
    "seed003_trace_l1_input.py": "PASS seed 003 trace, L1 input at the recorded address",
    "seed004_trace_lifecycle.py": "PASS seed 004 trace buffer lifecycle",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_seed_program_runs_under_python_m_ttmesh(script, tmp_path):
    assert_passed(ttmesh_python([str(SEEDS / script)], cwd=tmp_path), SCRIPTS[script])


def test_every_seed_program_is_listed():
    on_disk = {p.name for p in SEEDS.glob("seed0*.py")}
    assert on_disk == set(SCRIPTS), on_disk ^ set(SCRIPTS)


@pytest.mark.parametrize("script", ["seed000_trace_basic.py", "seed000_trace_multichip.py"])
def test_seed000_as_written_stops_at_the_capture_with_the_fix(script, tmp_path):
    # Seed 000 captures ops it never ran: TT-NN needs them compiled first (program cache hit).
    result = ttmesh_python([str(SEEDS / script), "--as-written"], cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RuntimeError" in result.stderr
    assert "Program cache miss during trace capture" in result.stderr
    assert "run the model once untraced first" in result.stderr
    # The traceback starts in the seed program, at the op that missed the cache.
    assert f'File "{SEEDS / script}"' in result.stderr
    assert "ttmesh/__main__.py" not in result.stderr


def test_seed001_l1_input_lands_at_the_recorded_address(tmp_path):
    result = ttmesh_python([str(SEEDS / "seed001_trace_l1_input.py")], cwd=tmp_path)
    assert_passed(result, "PASS")
    line = next(l for l in result.stdout.splitlines() if l.startswith("input_trace_addr "))
    recorded, reallocated = line.removeprefix("input_trace_addr ").split(" == buffer_address() ")
    assert int(recorded) == int(reallocated) > 0


def operations_in(db_path: Path):
    with sqlite3.connect(db_path) as db:
        return [row[0] for row in db.execute("SELECT name FROM operations ORDER BY operation_id")]


def test_seed002_report_imports_into_the_visualizer_folder(tmp_path):
    assert_passed(ttmesh_python([str(SEEDS / "seed002_graph_capture.py")], cwd=tmp_path), "PASS seed 002")
    # As seed 002 writes it: python -m ttnn.graph_report my_report.json ./visualizer_db/
    result = ttmesh_python(["-m", "ttnn.graph_report", "my_report.json", "./visualizer_db/"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "visualizer_db"
    for name in ("db.sqlite", "config.json", "cluster_descriptor.yaml"):
        assert (folder / name).is_file(), f"{name} missing from {sorted(os.listdir(folder))}"
    operations = operations_in(folder / "db.sqlite")
    # TT-NN 0.81 names both ops (add, multiply) by their device operation, and so does ttmesh.
    assert operations == ["BinaryNgDeviceOperation", "BinaryNgDeviceOperation"], operations
    # --svg, and a folder of reports (one visualizer folder per report).
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("my_report.json", "report.json"):
        (tmp_path / name).rename(reports / name)
    result = ttmesh_python(["-m", "ttnn.graph_report", "--svg", "reports", "./per_report/"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "per_report" / "my_report" / "call_graph.svg").is_file()
    assert operations_in(tmp_path / "per_report" / "report" / "db.sqlite") == ["BinaryNgDeviceOperation"]


def test_graph_report_refuses_a_missing_report(tmp_path):
    result = ttmesh_python(["-m", "ttnn.graph_report", "nope.json", "out"], cwd=tmp_path)
    assert result.returncode == 1
    assert "report 'nope.json' does not exist" in result.stderr


@pytest.mark.skipif(
    os.environ.get("TTMESH_VISUALIZER_CHECK") != "1",
    reason="set TTMESH_VISUALIZER_CHECK=1 to open the folder in the real ttnn-visualizer (PyPI, Chromium)",
)
def test_seed002_folder_opens_in_ttnn_visualizer(tmp_path):
    assert_passed(ttmesh_python([str(SEEDS / "seed002_graph_capture.py")], cwd=tmp_path), "PASS seed 002")
    assert (
        ttmesh_python(["-m", "ttnn.graph_report", "my_report.json", "visualizer_db"], cwd=tmp_path).returncode
        == 0
    )
    check = subprocess.run(
        ["bash", "scripts/ttnn-visualizer-check.sh", str(tmp_path / "visualizer_db")],
        cwd=REPO,
        env={**os.environ, "EXPECT_OP": "BinaryNgDeviceOperation"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_seed004_monitor_in_another_process_sees_each_chips_trace_bytes(tmp_path):
    ttmesh = ttmesh_command()
    ready = tmp_path / "ready.json"
    program = subprocess.Popen(
        [sys.executable, "-m", "ttmesh", str(SEEDS / "seed004_trace_lifecycle.py"), "--hold", str(ready)],
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + SEED_TIMEOUT_SECONDS
        while not ready.exists():
            assert program.poll() is None, (
                "the program ended before holding the mesh: " + program.stderr.read()
            )
            assert time.monotonic() < deadline, "the program did not reach its hold point"
            time.sleep(0.1)
        held = json.loads(ready.read_text())
        snapshot = subprocess.run(
            [ttmesh, "monitor", "--once", "--json", "--pid", str(program.pid)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert snapshot.returncode == 0, snapshot.stderr
        view = json.loads(snapshot.stdout)
        [process] = [p for p in view["processes"] if p["pid"] == program.pid]
        assert process["mesh_shape"] == [1, 8]
        chips = process["chips"]
        assert len(chips) == 8
        for chip in chips:
            trace = chip["trace"]
            # Every chip holds the same trace: the bytes the program itself reads, and a TRACE
            # region allocation (whole pages over every bank) at least that large.
            assert trace["trace_bytes"] == held["trace_buffers_size"] > 0, chip
            assert trace["allocated"] >= trace["trace_bytes"], chip
            assert trace["traces"] == 1 and trace["replays"] >= 1000, chip
        assert len({chip["trace"]["allocated"] for chip in chips}) == 1, chips
    finally:
        if ready.exists():
            ready.unlink()
        try:
            stdout, stderr = program.communicate(timeout=SEED_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            program.kill()
            stdout, stderr = program.communicate()
    assert program.returncode == 0, stderr
    assert "PASS seed 004" in stdout


def test_the_seeds_pytest_form_runs_under_the_plugin(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "ttmesh.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            # python/tests/conftest.py (the package's own tests) has a `device` fixture of its
            # own that would shadow the plugin's here: conftests above the seeds are not read.
            "--confcutdir",
            str(SEEDS),
            str(SEEDS / "tt_metal_style_seeds.py"),
        ],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=SEED_TIMEOUT_SECONDS * 3,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "9 passed" in result.stdout, result.stdout

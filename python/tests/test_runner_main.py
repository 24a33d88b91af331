"""`python -m ttmesh`: a script runs as `python SCRIPT.py` runs it, with ttnn aliased.

These scripts do not import ttnn, so they need no native module; the alias itself is checked
in-process against a stand-in package, and against the real ttmesh.ttnn when it is built.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ttmesh._aliases import Aliases

PYTHON_DIR = Path(__file__).resolve().parents[1]


def run_ttmesh(args, cwd, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "ttmesh", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_script_sees_argv_path_and_main_as_python_gives_them(tmp_path):
    folder = tmp_path / "prog"
    folder.mkdir()
    write(folder / "helper_mod.py", "VALUE = 41\n")
    write(
        folder / "show.py",
        """
        import os, sys
        import helper_mod  # found because the script's folder is sys.path[0]
        print("argv", sys.argv)
        print("name", __name__)
        print("file", __file__ == os.path.abspath(__file__))
        print("path0", sys.path[0])
        print("main", sys.modules["__main__"].__dict__ is globals())
        print("value", helper_mod.VALUE + 1)
        """,
    )
    result = run_ttmesh(["prog/show.py", "a", "--b", "c d"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "argv ['prog/show.py', 'a', '--b', 'c d']"
    assert lines[1] == "name __main__"
    assert lines[2] == "file True"
    assert lines[3] == f"path0 {folder}"
    assert lines[4] == "main True"
    assert lines[5] == "value 42"


@pytest.mark.parametrize(
    "ending, code, stderr_has",
    [
        ("raise SystemExit(3)", 3, None),
        ("import sys; sys.exit('bad input')", 1, "bad input"),
        ("pass", 0, None),
    ],
)
def test_exit_codes_are_pythons(tmp_path, ending, code, stderr_has):
    script = write(tmp_path / "exit.py", f"print('ran')\n{ending}\n")
    result = run_ttmesh([str(script)], cwd=tmp_path)
    assert result.returncode == code
    assert result.stdout == "ran\n"
    if stderr_has:
        assert stderr_has in result.stderr


def test_traceback_starts_in_the_script(tmp_path):
    script = write(
        tmp_path / "fails.py",
        """
        def inner():
            raise ValueError("the program's own error")

        inner()
        """,
    )
    result = run_ttmesh(["fails.py"], cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith(f'  File "{script}", line 5, in <module>')
    assert lines[-1] == "ValueError: the program's own error"
    assert "ttmesh" not in result.stderr and "runpy" not in result.stderr


def test_syntax_error_is_reported_without_runner_frames(tmp_path):
    write(tmp_path / "broken.py", "def f(:\n")
    result = run_ttmesh(["broken.py"], cwd=tmp_path)
    assert result.returncode == 1
    assert "SyntaxError" in result.stderr
    assert "__main__.py" not in result.stderr


def test_keyboard_interrupt_exits_as_python_does(tmp_path):
    write(tmp_path / "interrupted.py", "raise KeyboardInterrupt\n")
    result = run_ttmesh(["interrupted.py"], cwd=tmp_path)
    # The interpreter dies of SIGINT after an uncaught KeyboardInterrupt.
    assert result.returncode in (-2, 130)
    assert result.stderr.rstrip().endswith("KeyboardInterrupt")


def test_missing_script_and_bad_usage(tmp_path):
    result = run_ttmesh(["nope.py"], cwd=tmp_path)
    assert result.returncode == 2
    assert "can't open file" in result.stderr and "nope.py" in result.stderr
    assert run_ttmesh([], cwd=tmp_path).returncode == 2
    result = run_ttmesh(["--frobnicate"], cwd=tmp_path)
    assert result.returncode == 2 and "--frobnicate" in result.stderr
    assert "usage: python -m ttmesh" in run_ttmesh(["--help"], cwd=tmp_path).stdout


def test_dash_m_and_dash_c(tmp_path):
    write(tmp_path / "mod_main.py", "import sys\nprint(__name__, sys.argv[1:])\n")
    result = run_ttmesh(["-m", "mod_main", "x", "y"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "__main__ ['x', 'y']\n"
    result = run_ttmesh(["-c", "import sys; print(sys.argv)", "z"], cwd=tmp_path)
    assert result.stdout == "['-c', 'z']\n"


def test_tt_metal_helper_imports_resolve_inside_a_run(tmp_path):
    write(
        tmp_path / "uses_helpers.py",
        """
        from tests.ttnn.utils_for_testing import assert_with_pcc
        from models.utility_functions import comp_pcc, comp_allclose
        from models.common.utility_functions import comp_equal, is_wormhole_b0
        import numpy as np
        x = np.arange(8.0)
        assert_with_pcc(x, x)
        print(comp_pcc(x, x), comp_equal(x, x)[0], comp_allclose(x, x)[0], is_wormhole_b0())
        """,
    )
    result = run_ttmesh(["uses_helpers.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "(True, 1.0) True True True\n"


def test_a_users_own_tests_package_wins(tmp_path):
    (tmp_path / "tests" / "ttnn").mkdir(parents=True)
    write(tmp_path / "tests" / "__init__.py", "")
    write(tmp_path / "tests" / "ttnn" / "__init__.py", "")
    write(
        tmp_path / "tests" / "ttnn" / "utils_for_testing.py", "def assert_with_pcc(*a):\n    return 'mine'\n"
    )
    write(tmp_path / "tests" / "mine.py", "OWN = True\n")
    write(
        tmp_path / "own.py",
        """
        from tests.ttnn.utils_for_testing import assert_with_pcc
        from tests.mine import OWN
        from models.utility_functions import comp_pcc  # not theirs: falls back to ttmesh
        print(assert_with_pcc(), OWN, comp_pcc([1.0, 2.0], [1.0, 2.0])[0])
        """,
    )
    result = run_ttmesh(["own.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "mine True True\n"


def test_ttnn_alias_gives_the_target_modules_themselves(tmp_path, monkeypatch):
    package = tmp_path / "fake_ttnn_target"
    package.mkdir()
    # `native` is a module object that only exists as an attribute, as a native extension's
    # submodules do; `import ttnn.native` must still give it.
    write(
        package / "__init__.py",
        "import types\nNAME = 'fake'\nfrom . import graph\nnative = types.ModuleType('native')\nnative.X = 1\n",
    )
    write(package / "graph.py", "def begin_graph_capture():\n    return 'begun'\n")
    write(package / "graph_report.py", "IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Aliases(ttnn_target="fake_ttnn_target"):
        import fake_ttnn_target
        import ttnn
        import ttnn.graph
        import ttnn.graph_report

        assert ttnn is fake_ttnn_target
        assert ttnn.graph is sys.modules["fake_ttnn_target.graph"]
        assert ttnn.graph.begin_graph_capture() == "begun"
        assert sys.modules["ttnn.graph_report"] is sys.modules["fake_ttnn_target.graph_report"]
        import ttnn.native

        assert ttnn.native is fake_ttnn_target.native and ttnn.native.X == 1
        with pytest.raises(ModuleNotFoundError, match="No module named 'ttnn.nonexistent'"):
            import ttnn.nonexistent  # noqa: F401
    # Uninstalled: the stand-in is gone (a session-wide alias, e.g. the pytest plugin's
    # entry point, may still map ttnn to ttmesh.ttnn; it never maps it to the stand-in).
    assert sys.modules.get("ttnn") is not fake_ttnn_target
    assert sys.modules.get("ttnn.graph") is not sys.modules["fake_ttnn_target.graph"]


def test_real_ttnn_resolves_to_ttmesh_inside_a_run(tmp_path):
    pytest.importorskip("ttmesh.ttnn", reason="the native module is not built")
    write(
        tmp_path / "which.py",
        "import ttnn, ttnn.graph, ttnn.graph_report, ttmesh.ttnn\n"
        "print(ttnn is ttmesh.ttnn, ttnn.graph is ttmesh.ttnn.graph, callable(ttnn.graph_report.main))\n",
    )
    result = run_ttmesh(["which.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True True True\n"


def test_ctrl_c_during_a_ttnn_program_ends_it_as_python_would(tmp_path):
    pytest.importorskip("ttmesh.ttnn", reason="the native module is not built")
    import signal
    import time

    write(
        tmp_path / "forever.py",
        """
        import numpy as np
        import ttnn

        device = ttnn.open_device(device_id=0)
        x = ttnn.from_torch(np.ones((64, 64), np.float32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
        print("running", flush=True)
        while True:
            x = ttnn.relu(x)
        """,
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")])
    program = subprocess.Popen(
        [sys.executable, "-m", "ttmesh", "forever.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout.readline() == "running\n"
        time.sleep(0.2)
        program.send_signal(signal.SIGINT)
        _, stderr = program.communicate(timeout=60)
    finally:
        if program.poll() is None:
            program.kill()
    # As `python forever.py`: killed by SIGINT, a traceback from the script, KeyboardInterrupt.
    assert program.returncode == -signal.SIGINT, stderr
    assert stderr.startswith("Traceback (most recent call last):\n"), stderr
    assert f'File "{tmp_path / "forever.py"}"' in stderr.splitlines()[1], stderr
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr


def test_a_folder_with_main_runs_as_python_runs_it(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    write(app / "helper_mod.py", "VALUE = 7\n")
    write(app / "__main__.py", "import sys, helper_mod\nprint(sys.argv[1:], helper_mod.VALUE, __name__)\n")
    result = run_ttmesh(["app", "x"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['x'] 7 __main__\n"


def test_system_option_picks_the_machine(tmp_path):
    write(tmp_path / "which.py", "import os, ttmesh\nprint(ttmesh.system(), os.environ['TTMESH_SYSTEM'])\n")
    result = run_ttmesh(["--system", "n300", "which.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "n300 n300\n"
    assert run_ttmesh(["--system=galaxy", "which.py"], cwd=tmp_path).stdout == "galaxy galaxy\n"
    result = run_ttmesh(["--system", "nope", "which.py"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith('error: --system: unknown topology "nope"')
    assert run_ttmesh(["--system", "n300"], cwd=tmp_path).returncode == 2

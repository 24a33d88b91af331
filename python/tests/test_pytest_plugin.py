"""ttmesh.pytest_plugin: tt-metal's fixtures, checked against a recording stand-in for ttnn.

Each case runs pytest in a subprocess on a small test file. The stand-in (installed as
``ttmesh.ttnn`` by the case's conftest, so ``import ttnn`` reaches it through the plugin's
alias) writes every device call to calls.log, which the case then reads back; the plugin's
logic is checked without the native module. The seeds' tests exercise it on the real one.
"""

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PYTHON_DIR = Path(__file__).resolve().parents[1]

FAKE_TTNN = """
import json, os

def _log(*call):
    with open(os.path.join(os.environ["FAKE_TTNN_DIR"], "calls.log"), "a") as f:
        f.write(json.dumps(call) + "\\n")

class FabricConfig:
    DISABLED = "DISABLED"
    FABRIC_1D = "FABRIC_1D"
    FABRIC_1D_RING = "FABRIC_1D_RING"

class MeshShape:
    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
    def dims(self):
        return [self.rows, self.cols]

class Handle:
    def __init__(self, kind, shape=None):
        self.kind, self.shape = kind, shape

def set_fabric_config(config):
    _log("set_fabric_config", config)

def open_device(device_id, **kwargs):
    _log("open_device", device_id, kwargs)
    return Handle("device")

def close_device(handle):
    _log("close_device", handle.kind)

def open_mesh_device(mesh_shape, **kwargs):
    _log("open_mesh_device", mesh_shape.dims(), kwargs)
    return Handle("mesh", mesh_shape.dims())

def close_mesh_device(handle):
    _log("close_mesh_device", handle.shape)

def synchronize_device(handle):
    _log("synchronize_device", handle.kind)

def get_device_ids():
    return list(range(8))
"""

CONFTEST = """
import sys, fake_ttnn
sys.modules["ttmesh.ttnn"] = fake_ttnn
"""


@pytest.fixture
def run_plugin(pytester, monkeypatch):
    """Run pytest with the plugin on ``test_source``; return (outcomes, calls)."""
    pytester.makepyfile(fake_ttnn=FAKE_TTNN)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("FAKE_TTNN_DIR", str(pytester.path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PYTHON_DIR), str(pytester.path)]))

    def run(test_source, *args):
        pytester.makepyfile(test_source)
        result = pytester.runpytest_subprocess("-p", "ttmesh.pytest_plugin", "-p", "no:cacheprovider", *args)
        log = pytester.path / "calls.log"
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return result, calls

    return run


def test_device_gets_device_params_and_is_closed(run_plugin):
    result, calls = run_plugin(
        """
        import pytest, ttnn

        @pytest.mark.parametrize("device_params", [{"l1_small_size": 24576, "trace_region_size": 800768, "num_command_queues": 2, "worker_l1_size": 1000}], indirect=True)
        def test_one(device):
            assert device.kind == "device"
        """
    )
    result.assert_outcomes(passed=1)
    assert calls == [
        [
            "open_device",
            0,
            {
                "l1_small_size": 24576,
                "trace_region_size": 800768,
                "num_command_queues": 2,
                "worker_l1_size": 1000,
            },
        ],
        ["synchronize_device", "device"],
        ["close_device", "device"],
    ]


def test_device_is_closed_when_the_test_fails(run_plugin):
    result, calls = run_plugin(
        """
        def test_fails(device):
            assert False, "the test's own failure"
        """
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the test's own failure*"])
    assert calls == [["open_device", 0, {}], ["synchronize_device", "device"], ["close_device", "device"]]


def test_unknown_device_param_names_the_key_and_the_known_ones(run_plugin):
    result, calls = run_plugin(
        """
        import pytest

        @pytest.mark.parametrize("device_params", [{"trace_region_sise": 1}], indirect=True)
        def test_typo(device):
            pass
        """
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*DeviceParamsError: device_params key 'trace_region_sise' is not known to ttmesh; the known keys are "
            "l1_small_size, trace_region_size, num_command_queues, worker_l1_size, fabric_config, dispatch_core_axis*"
        ]
    )
    assert calls == []


def test_fabric_config_is_set_before_the_mesh_opens_and_reset_after(run_plugin):
    result, calls = run_plugin(
        """
        import pytest, ttnn

        @pytest.mark.parametrize("device_params", [{"fabric_config": ttnn.FabricConfig.FABRIC_1D, "trace_region_size": 4096}], indirect=True)
        def test_t3k(t3k_mesh_device):
            assert t3k_mesh_device.shape == [1, 8]

        @pytest.mark.parametrize("device_params", [{"fabric_config": True}], indirect=True)
        def test_true_means_1d(n300_mesh_device):
            assert n300_mesh_device.shape == [1, 2]
        """
    )
    result.assert_outcomes(passed=2)
    assert calls == [
        ["set_fabric_config", "FABRIC_1D"],
        ["open_mesh_device", [1, 8], {"trace_region_size": 4096}],
        ["synchronize_device", "mesh"],
        ["close_mesh_device", [1, 8]],
        ["set_fabric_config", "DISABLED"],
        ["set_fabric_config", "FABRIC_1D"],
        ["open_mesh_device", [1, 2], {}],
        ["synchronize_device", "mesh"],
        ["close_mesh_device", [1, 2]],
        ["set_fabric_config", "DISABLED"],
    ]


def test_mesh_device_params(run_plugin):
    result, calls = run_plugin(
        """
        import pytest

        @pytest.mark.parametrize("mesh_device", [(2, 4), 4, 100, pytest.param(None, id="all")], indirect=True)
        def test_shapes(mesh_device):
            pass

        def test_default(mesh_device):
            assert mesh_device.shape == [1, 8]

        @pytest.mark.parametrize("mesh_device", [(4, 4)], indirect=True)
        def test_too_many(mesh_device):
            pass

        @pytest.mark.parametrize("mesh_device", ["t3k"], indirect=True)
        def test_bad(mesh_device):
            pass
        """,
        "-rs",
    )
    result.assert_outcomes(passed=5, skipped=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*MeshDeviceParamError: mesh_device parameter 't3k' is neither (rows, cols) nor a chip count*",
            "*the mesh 4x4 needs 16 devices and 8 are available*",
        ]
    )
    opened = [call[1] for call in calls if call[0] == "open_mesh_device"]
    # A count opens min(count, available) chips in a row, as tt-metal's fixture does.
    assert opened == [[2, 4], [1, 4], [1, 8], [1, 8], [1, 8]]
    assert [call[1] for call in calls if call[0] == "close_mesh_device"] == opened


def test_seeds_and_the_rest_of_the_conftest(run_plugin):
    result, _ = run_plugin(
        """
        import random
        import numpy as np

        def test_seeded(reset_seeds):
            first = (random.random(), np.random.rand())
            random.seed(213919); np.random.seed(213919)
            assert first == (random.random(), np.random.rand())

        def test_defaults(function_level_defaults, use_program_cache, is_ci_env):
            assert is_ci_env in (True, False)

        def test_arch(silicon_arch_name, silicon_arch_wormhole_b0):
            assert silicon_arch_name == "wormhole_b0"

        def test_blackhole_only(silicon_arch_name, silicon_arch_blackhole):
            pass
        """
    )
    result.assert_outcomes(passed=3, skipped=1)


def test_helpers_import_under_tt_metal_paths(run_plugin):
    result, _ = run_plugin(
        """
        from tests.ttnn.utils_for_testing import assert_with_pcc, check_with_pcc
        from models.common.utility_functions import comp_pcc, comp_allclose, comp_equal
        from models.utility_functions import comp_pcc as old_comp_pcc
        from tests.tt_eager.python_api_testing.sweep_tests.comparison_funcs import comp_pcc as sweep_comp_pcc
        import numpy as np

        def test_helpers():
            x = np.arange(10.0)
            assert_with_pcc(x, x)
            assert comp_pcc is old_comp_pcc is sweep_comp_pcc
            assert comp_equal(x, x)[0] and comp_allclose(x, x)[0]
        """
    )
    result.assert_outcomes(passed=1)


def test_fixtures_on_the_real_module(pytester, monkeypatch):
    pytest.importorskip("ttmesh.ttnn", reason="the native module is not built")
    monkeypatch.setenv("PYTHONPATH", str(PYTHON_DIR))
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import ttnn
        from tests.ttnn.utils_for_testing import assert_with_pcc

        @pytest.mark.parametrize("device_params", [{"l1_small_size": 24576, "trace_region_size": 800768, "num_command_queues": 2}], indirect=True)
        def test_device(device):
            x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
            t = ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
            assert_with_pcc(x, ttnn.to_torch(ttnn.add(t, t)) / 2)

        @pytest.mark.parametrize("mesh_device", [(2, 4), (1, 8), 2], indirect=True)
        def test_mesh(mesh_device):
            assert mesh_device.get_num_devices() in (8, 2)

        @pytest.mark.parametrize("device_params", [{"fabric_config": ttnn.FabricConfig.FABRIC_1D}], indirect=True)
        def test_t3k(t3k_mesh_device):
            assert t3k_mesh_device.get_num_devices() == 8

        def test_closes_its_device_itself(device):
            ttnn.close_device(device)

        held = []

        def test_fails_with_the_device_open(device):
            held.append(device)
            assert False, "failing on purpose"

        def test_the_failed_tests_device_was_closed():
            assert held and not held[0].is_open
        """
    )
    result = pytester.runpytest_subprocess("-p", "ttmesh.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=1)


def test_a_nested_session_leaves_the_outer_sessions_alias(pytester, request):
    if not request.config.pluginmanager.has_plugin("ttmesh.pytest_plugin"):
        pytest.skip("this session runs without the plugin (its entry point is not installed)")
    pytest.importorskip("ttmesh.ttnn", reason="the native module is not built")
    pytester.makepyfile("import ttnn\n\ndef test_inner():\n    assert ttnn.get_num_devices() > 0\n")
    pytester.runpytest_inprocess("-p", "ttmesh.pytest_plugin", "-p", "no:cacheprovider").assert_outcomes(
        passed=1
    )
    import ttmesh.ttnn
    import ttnn

    assert ttnn is ttmesh.ttnn


def test_ttmesh_system_option(pytester, monkeypatch):
    pytest.importorskip("ttmesh.ttnn", reason="the native module is not built")
    monkeypatch.setenv("PYTHONPATH", str(PYTHON_DIR))
    pytester.makepyfile(
        """
        def test_n300(mesh_device):
            assert mesh_device.get_num_devices() == 2
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "ttmesh.pytest_plugin", "-p", "no:cacheprovider", "--ttmesh-system", "n300"
    )
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess(
        "-p", "ttmesh.pytest_plugin", "-p", "no:cacheprovider", "--ttmesh-system", "nope"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*--ttmesh-system: unknown topology "nope"*'])

"""tt-metal's pytest fixtures on ttmesh: ``pytest -p ttmesh.pytest_plugin`` (or the entry point).

A test written for tt-metal runs unmodified: ``import ttnn`` is ``ttmesh.ttnn`` for the
session, the fixtures its conftest gives are here with the same names and parameters, and the
helper modules tests import (``tests.ttnn.utils_for_testing``, ``models.utility_functions``,
``models.common.utility_functions``) fall back to ``ttmesh.testing`` where the project has none
of its own (see ``ttmesh._aliases``). A project's own conftest fixtures of the same names win
over these, as pytest always lets a conftest override a plugin.

Fixtures:

* ``device_params``: ``{}`` or the dict given by ``@pytest.mark.parametrize("device_params",
  [{...}], indirect=True)``; keys ``l1_small_size``, ``trace_region_size``,
  ``num_command_queues``, ``worker_l1_size``, ``fabric_config`` (a ``ttnn.FabricConfig``, or
  ``True`` for FABRIC_1D as tt-metal's model conftests take it) and ``dispatch_core_axis``
  (accepted and ignored: ttmesh has no dispatch cores on the worker grid). Any other key is an
  error naming it.
* ``device``: chip 0 opened with those params; closed after the test, also when it failed.
* ``mesh_device``: indirect param ``(rows, cols)`` or a chip count (``1 x N``); without one, all
  the devices ``ttnn.get_device_ids()`` reports. More chips than that: skipped, as tt-metal
  skips.
* ``t3k_mesh_device`` (1 x 8), ``n300_mesh_device`` (1 x 2).
* ``--ttmesh-system NAME``: the machine the fixtures open (default ``$TTMESH_SYSTEM`` or t3k).
* ``reset_seeds``, ``function_level_defaults``, ``use_program_cache``, ``silicon_arch_name``,
  ``silicon_arch_wormhole_b0``, ``silicon_arch_blackhole``, ``is_ci_env``.
"""

from __future__ import annotations

import os
import random

import pytest

from ttmesh._aliases import Aliases
from ttmesh._run import select_system

# device_params keys and the open_device / open_mesh_device keyword each becomes.
OPEN_KEYWORDS = ("l1_small_size", "trace_region_size", "num_command_queues", "worker_l1_size")
# Keys tt-metal's conftest consumes itself rather than passing on.
CONFTEST_KEYWORDS = ("fabric_config", "dispatch_core_axis")
KNOWN_DEVICE_PARAMS = OPEN_KEYWORDS + CONFTEST_KEYWORDS

# The seed tt-metal's reset_seeds fixture gives torch, numpy and random.
TT_METAL_TEST_SEED = 213919

# Each pytest session's own aliases (a nested session, as pytester runs, installs and removes
# its own and leaves the outer one's in place).
_ALIASES_KEY = pytest.StashKey[Aliases]()


class DeviceParamsError(ValueError):
    """A device_params value ttmesh cannot honour; the message names the key and the fix."""


class MeshDeviceParamError(ValueError):
    """A mesh_device parameter that is neither (rows, cols) nor a chip count."""


def pytest_addoption(parser):
    parser.addoption(
        "--ttmesh-system",
        default=None,
        help="the emulated machine the device fixtures open (n150, n300, t3k, galaxy, p150, p300, "
        "line-N, ring-N or a cluster TOML); default $TTMESH_SYSTEM or t3k",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # Before any conftest runs: a project's root conftest often imports ttnn at the top.
    _install_aliases(early_config)


def pytest_configure(config):
    # Reached also when the plugin is registered late (pytest_plugins in a conftest).
    _install_aliases(config)
    system = config.getoption("--ttmesh-system", default=None)
    if system:
        try:
            select_system(system)
        except RuntimeError as error:
            raise pytest.UsageError(f"--ttmesh-system: {error}") from error


def pytest_unconfigure(config):
    aliases = config.stash.get(_ALIASES_KEY, None)
    if aliases is not None:
        aliases.uninstall()
        del config.stash[_ALIASES_KEY]


def _install_aliases(config) -> None:
    if _ALIASES_KEY not in config.stash:
        config.stash[_ALIASES_KEY] = Aliases().install()


def _ttnn():
    import ttnn  # ttmesh.ttnn through the alias

    return ttnn


# ---------------------------------------------------------------------------------------------
# device_params


def validated_device_params(params) -> dict:
    """A copy of ``params`` after checking every key is one ttmesh knows."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise DeviceParamsError(
            f"device_params must be a dict such as {{'trace_region_size': 800768}}, "
            f"not {type(params).__name__} {params!r}"
        )
    unknown = sorted(str(key) for key in params if key not in KNOWN_DEVICE_PARAMS)
    if unknown:
        raise DeviceParamsError(
            f"device_params key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(key) for key in unknown)} "
            f"{'are' if len(unknown) > 1 else 'is'} not known to ttmesh; the known keys are "
            f"{', '.join(KNOWN_DEVICE_PARAMS)}: remove it or spell it as one of these"
        )
    return dict(params)


@pytest.fixture(scope="function")
def device_params(request):
    return validated_device_params(getattr(request, "param", {}))


def _split_device_params(params: dict):
    """``(open keywords, fabric config or None)``; dispatch_core_axis is dropped."""
    opened = {key: params[key] for key in OPEN_KEYWORDS if key in params}
    fabric_config = params.get("fabric_config")
    if fabric_config is True:
        fabric_config = _ttnn().FabricConfig.FABRIC_1D
    elif fabric_config is False:
        fabric_config = None
    return opened, fabric_config


class _FabricScope:
    """Sets the fabric config before a device opens and puts it back to DISABLED after."""

    def __init__(self, fabric_config):
        self.fabric_config = fabric_config

    def __enter__(self):
        if self.fabric_config is not None:
            _ttnn().set_fabric_config(self.fabric_config)
        return self

    def __exit__(self, *exc_info):
        if self.fabric_config is not None:
            ttnn = _ttnn()
            ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def _close_after(close, synchronize, handle):
    """Synchronize then close; close happens even if synchronizing fails (a failed test's
    device may hold a fault), and the synchronize error is the one reported. A device the
    test closed itself is left alone."""
    is_open = getattr(handle, "is_open", True)
    if not (is_open() if callable(is_open) else is_open):
        return
    try:
        synchronize(handle)
    finally:
        close(handle)


# ---------------------------------------------------------------------------------------------
# devices


@pytest.fixture(scope="function")
def device(request, device_params):
    ttnn = _ttnn()
    opened, fabric_config = _split_device_params(device_params)
    with _FabricScope(fabric_config):
        handle = ttnn.open_device(device_id=0, **opened)
        if hasattr(ttnn, "SetDefaultDevice"):
            ttnn.SetDefaultDevice(handle)
        try:
            yield handle
        finally:
            _close_after(ttnn.close_device, ttnn.synchronize_device, handle)


def mesh_shape_of(param, available: int):
    """``(rows, cols)`` for a mesh_device parameter; None means use every available device."""
    if param is None:
        return 1, available
    if isinstance(param, bool):
        raise MeshDeviceParamError(
            f"mesh_device parameter {param!r} is a bool: give (rows, cols) or a chip count"
        )
    if isinstance(param, int):
        if param < 1:
            raise MeshDeviceParamError(f"mesh_device chip count {param} must be at least 1")
        # tt-metal opens min(requested, available) chips in a row for a count.
        return 1, min(param, available)
    if (
        isinstance(param, (tuple, list))
        and len(param) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in param)
    ):
        return int(param[0]), int(param[1])
    shape = getattr(param, "dims", None)
    if callable(shape):  # a ttnn.MeshShape
        return mesh_shape_of(tuple(shape()), available)
    raise MeshDeviceParamError(
        f"mesh_device parameter {param!r} is neither (rows, cols) nor a chip count: use e.g. "
        f"@pytest.mark.parametrize('mesh_device', [(1, 8)], indirect=True) or [8]"
    )


def _open_mesh(device_params, rows: int, cols: int):
    ttnn = _ttnn()
    available = len(ttnn.get_device_ids())
    if rows * cols > available:
        pytest.skip(f"the mesh {rows}x{cols} needs {rows * cols} devices and {available} are available")
    opened, fabric_config = _split_device_params(device_params)
    with _FabricScope(fabric_config):
        mesh = ttnn.open_mesh_device(mesh_shape=ttnn.MeshShape(rows, cols), **opened)
        try:
            yield mesh
        finally:
            _close_after(ttnn.close_mesh_device, ttnn.synchronize_device, mesh)


@pytest.fixture(scope="function")
def mesh_device(request, device_params):
    ttnn = _ttnn()
    rows, cols = mesh_shape_of(getattr(request, "param", None), len(ttnn.get_device_ids()))
    yield from _open_mesh(device_params, rows, cols)


@pytest.fixture(scope="function")
def t3k_mesh_device(request, device_params):
    yield from _open_mesh(device_params, 1, 8)


@pytest.fixture(scope="function")
def n300_mesh_device(request, device_params):
    yield from _open_mesh(device_params, 1, 2)


# ---------------------------------------------------------------------------------------------
# the rest of tt-metal's conftest that TT-NN tests commonly request


@pytest.fixture(scope="function")
def reset_seeds():
    random.seed(TT_METAL_TEST_SEED)
    try:
        import numpy

        numpy.random.seed(TT_METAL_TEST_SEED)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(TT_METAL_TEST_SEED)
    except ImportError:
        pass
    yield


@pytest.fixture(scope="function")
def function_level_defaults(reset_seeds):
    yield


@pytest.fixture(scope="function")
def use_program_cache():
    # TT-NN now always caches programs, as ttmesh does; the fixture stays for old tests.
    yield


@pytest.fixture(scope="session")
def silicon_arch_name():
    from ttmesh._utility_functions import _arch_name

    return _arch_name()


@pytest.fixture(scope="session")
def silicon_arch_wormhole_b0(silicon_arch_name):
    if not silicon_arch_name.startswith("wormhole"):
        pytest.skip(f"needs wormhole_b0; ttmesh emulates {silicon_arch_name}")
    return True


@pytest.fixture(scope="session")
def silicon_arch_blackhole(silicon_arch_name):
    if not silicon_arch_name.startswith("blackhole"):
        pytest.skip(f"needs blackhole; ttmesh emulates {silicon_arch_name}")
    return True


@pytest.fixture(scope="function")
def is_ci_env():
    return os.getenv("CI") == "true"

"""The small non-comparison helpers tt-metal tests import from ``models.utility_functions``.

Served (with ``ttmesh.testing``'s comparisons) as ``models.utility_functions`` and
``models.common.utility_functions`` when no real module of that name exists. ttmesh emulates
Wormhole B0 unless the device or ``ttnn.get_arch_name()`` says otherwise.
"""

from __future__ import annotations

import sys

__all__ = [
    "is_wormhole_b0",
    "is_blackhole",
    "is_grayskull",
    "skip_for_grayskull",
    "skip_for_wormhole_b0",
    "skip_for_blackhole",
    "divup",
    "nearest_32",
    "roundup32",
    "torch_random",
]


def _arch_name(device=None) -> str:
    """Lower-case arch name of ``device``, else of the loaded ttnn module, else wormhole_b0."""
    if device is not None and hasattr(device, "arch"):
        return str(device.arch()).rsplit(".", 1)[-1].lower()
    ttnn = sys.modules.get("ttmesh.ttnn")
    if ttnn is not None and hasattr(ttnn, "get_arch_name"):
        return str(ttnn.get_arch_name()).lower()
    return "wormhole_b0"


def is_wormhole_b0(device=None) -> bool:
    return _arch_name(device).startswith("wormhole")


def is_blackhole(device=None) -> bool:
    return _arch_name(device).startswith("blackhole")


def is_grayskull(device=None) -> bool:
    return _arch_name(device).startswith("grayskull")


def _skip_if(condition: bool, reason: str):
    import pytest  # only tests use these marks

    return pytest.mark.skipif(condition, reason=reason)


def skip_for_grayskull(reason_str: str = "not working for Grayskull"):
    return _skip_if(is_grayskull(), reason_str)


def skip_for_wormhole_b0(reason_str: str = "not working for Wormhole B0"):
    return _skip_if(is_wormhole_b0(), reason_str)


def skip_for_blackhole(reason_str: str = "not working for Blackhole"):
    return _skip_if(is_blackhole(), reason_str)


def divup(a: int, b: int) -> int:
    return (a + b - 1) // b


def nearest_32(x: int) -> int:
    return divup(x, 32) * 32


roundup32 = nearest_32


def torch_random(shape, low, high, dtype):
    """Uniform values in [low, high) as a torch tensor of ``dtype`` (needs torch)."""
    import torch

    return torch.zeros(shape, dtype=torch.float32).uniform_(low, high).to(dtype)

"""Comparison helpers TT-NN tests import, written on numpy alone.

tt-metal's tests compare a device result against a host (torch) reference with a Pearson
correlation (``comp_pcc`` / ``assert_with_pcc``), exact equality (``comp_equal``) or a
tolerance (``comp_allclose``). These functions take the same arguments and return the same
shapes of result, so a test written for tt-metal runs unmodified; they accept torch tensors,
numpy arrays, anything ``numpy.asarray`` takes, and ttmesh's own tensors (read back to host).

Under ``python -m ttmesh`` and ``pytest -p ttmesh.pytest_plugin`` they are also importable as
``tests.ttnn.utils_for_testing``, ``models.utility_functions`` and
``models.common.utility_functions`` (see ``ttmesh._aliases``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "comp_pcc",
    "comp_equal",
    "comp_allclose",
    "comp_allclose_and_pcc",
    "check_with_pcc",
    "check_with_pcc_without_tensor_printout",
    "assert_with_pcc",
    "assert_equal",
    "assert_allclose",
    "to_numpy",
]


def to_numpy(value) -> np.ndarray:
    """A float64 host copy of a torch tensor, numpy array, ttmesh tensor or nested list."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False)
    module = type(value).__module__ or ""
    if module.startswith("torch"):
        # bfloat16 has no numpy dtype: widen on the torch side first.
        import torch  # only reached when the caller already holds a torch tensor

        return value.detach().to(torch.float64).cpu().numpy()
    if module.startswith("ttmesh") and hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float64)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"cannot compare a {type(value).__name__}: pass a torch tensor, a numpy array "
            f"or a ttmesh tensor (read device tensors back with ttnn.to_torch first)"
        ) from err


def _pair(golden, calculated):
    """Both operands as float64 arrays of one size (shapes may differ, as tt-metal allows)."""
    golden_array = to_numpy(golden)
    calculated_array = to_numpy(calculated)
    if golden_array.size != calculated_array.size:
        raise ValueError(
            f"golden has {golden_array.size} elements (shape {list(golden_array.shape)}) but "
            f"calculated has {calculated_array.size} (shape {list(calculated_array.shape)}): "
            f"compare tensors of the same size"
        )
    return golden_array.reshape(-1), calculated_array.reshape(-1)


def _pcc(golden: np.ndarray, calculated: np.ndarray) -> float:
    """Pearson correlation with tt-metal's conventions for the degenerate cases."""
    golden_nan = np.isnan(golden)
    calculated_nan = np.isnan(calculated)
    if golden_nan.all() and calculated_nan.all():
        return 1.0
    if golden_nan.all() or calculated_nan.all():
        return 0.0
    # A tensor of zeros correlates with nothing but another tensor of zeros.
    if bool(np.any(golden != 0)) != bool(np.any(calculated != 0)):
        return 0.0
    # NaN and infinities are compared as numbers (NaN as 0, inf as the largest float), as
    # tt-metal does, so a stray inf lowers the score instead of poisoning it.
    golden = np.nan_to_num(golden)
    calculated = np.nan_to_num(calculated)
    if np.array_equal(golden, calculated):
        return 1.0
    golden_centered = golden - golden.mean()
    calculated_centered = calculated - calculated.mean()
    golden_norm = math.sqrt(float(np.dot(golden_centered, golden_centered)))
    calculated_norm = math.sqrt(float(np.dot(calculated_centered, calculated_centered)))
    if golden_norm == 0.0 or calculated_norm == 0.0:
        # A constant tensor has no correlation: it matches only itself (handled above).
        return 0.0
    value = float(np.dot(golden_centered, calculated_centered)) / (golden_norm * calculated_norm)
    if not math.isfinite(value):
        return 0.0
    return max(-1.0, min(1.0, value))


def comp_pcc(golden, calculated, pcc: float = 0.99):
    """``(passed, pcc_value)``: whether the Pearson correlation of the two reaches ``pcc``."""
    golden_flat, calculated_flat = _pair(golden, calculated)
    value = _pcc(golden_flat, calculated_flat)
    return value >= pcc, value


def _largest(values: np.ndarray) -> float:
    """The largest value that is not NaN, or NaN when there is none."""
    kept = values[~np.isnan(values)]
    return float(kept.max()) if kept.size else math.nan


def _deltas(golden: np.ndarray, calculated: np.ndarray):
    """Largest absolute and relative (to ``calculated``) differences."""
    with np.errstate(divide="ignore", invalid="ignore"):
        absolute = np.abs(golden - calculated)
        relative = absolute / np.abs(calculated)
    return _largest(absolute), _largest(relative)


def _delta_message(golden: np.ndarray, calculated: np.ndarray) -> str:
    atol, rtol = _deltas(golden, calculated)
    return f"Max ATOL Delta: {atol}, Max RTOL Delta: {rtol}"


def comp_equal(golden, calculated):
    """``(equal, message)``: exact equality, with the largest absolute and relative deltas."""
    golden_flat, calculated_flat = _pair(golden, calculated)
    equal = bool(np.array_equal(golden_flat, calculated_flat, equal_nan=True))
    return equal, _delta_message(golden_flat, calculated_flat)


def comp_allclose(golden, calculated, rtol: float = 1e-05, atol: float = 1e-08):
    """``(close, message)``: ``|golden - calculated| <= atol + rtol * |calculated|`` everywhere."""
    golden_flat, calculated_flat = _pair(golden, calculated)
    close = bool(np.allclose(golden_flat, calculated_flat, rtol=rtol, atol=atol, equal_nan=True))
    return close, _delta_message(golden_flat, calculated_flat)


def comp_allclose_and_pcc(golden, calculated, rtol: float = 1e-05, atol: float = 1e-08, pcc=0.99):
    """``(passed, message)``: both ``comp_allclose`` and ``comp_pcc`` hold."""
    close, close_message = comp_allclose(golden, calculated, rtol=rtol, atol=atol)
    correlated, value = comp_pcc(golden, calculated, pcc)
    return close and correlated, f"{close_message}, PCC: {value}"


def check_with_pcc(expected_pytorch_result, actual_pytorch_result, pcc: float = 0.9999):
    """``(passed, pcc_value)`` after checking the shapes match (no assertion)."""
    expected_shape = list(np.shape(to_numpy(expected_pytorch_result)))
    actual_shape = list(np.shape(to_numpy(actual_pytorch_result)))
    if expected_shape != actual_shape:
        return False, f"shape mismatch: expected {expected_shape}, actual {actual_shape}"
    return comp_pcc(expected_pytorch_result, actual_pytorch_result, pcc)


check_with_pcc_without_tensor_printout = check_with_pcc


def _summary(name: str, array: np.ndarray) -> str:
    if array.size == 0:
        return f"{name}: empty"
    return (
        f"{name}: shape {list(array.shape)}, min {np.nanmin(array):.6g}, "
        f"max {np.nanmax(array):.6g}, mean {np.nanmean(array):.6g}"
    )


def assert_with_pcc(expected_pytorch_result, actual_pytorch_result, pcc: float = 0.9999):
    """Assert equal shapes and a Pearson correlation of at least ``pcc``; returns ``(True, value)``."""
    expected = to_numpy(expected_pytorch_result)
    actual = to_numpy(actual_pytorch_result)
    assert list(expected.shape) == list(actual.shape), (
        f"list(expected_pytorch_result.shape)={list(expected.shape)} vs "
        f"list(actual_pytorch_result.shape)={list(actual.shape)}"
    )
    passed, value = comp_pcc(expected, actual, pcc)
    assert passed, (
        f"PCC {value} is below the required {pcc}\n"
        f"{_summary('expected', expected)}\n{_summary('actual', actual)}"
    )
    return passed, value


def assert_equal(expected_pytorch_result, actual_pytorch_result):
    """Assert equal shapes and equal values."""
    expected = to_numpy(expected_pytorch_result)
    actual = to_numpy(actual_pytorch_result)
    assert list(expected.shape) == list(actual.shape), (
        f"shape mismatch: expected {list(expected.shape)}, actual {list(actual.shape)}"
    )
    equal, message = comp_equal(expected, actual)
    assert equal, message
    return equal, message


def assert_allclose(expected_pytorch_result, actual_pytorch_result, rtol=1e-05, atol=1e-08):
    """Assert equal shapes and values within ``atol + rtol * |actual|``."""
    expected = to_numpy(expected_pytorch_result)
    actual = to_numpy(actual_pytorch_result)
    assert list(expected.shape) == list(actual.shape), (
        f"shape mismatch: expected {list(expected.shape)}, actual {list(actual.shape)}"
    )
    close, message = comp_allclose(expected, actual, rtol=rtol, atol=atol)
    assert close, message
    return close, message

"""ttmesh.testing: the comparison helpers, checked against values worked out by hand."""

import math

import numpy as np
import pytest
from ttmesh.testing import (
    assert_allclose,
    assert_equal,
    assert_with_pcc,
    check_with_pcc,
    comp_allclose,
    comp_allclose_and_pcc,
    comp_equal,
    comp_pcc,
)


def test_pcc_of_identical_tensors_is_one():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert comp_pcc(x, x.copy()) == (True, 1.0)


def test_pcc_matches_the_textbook_formula():
    golden = np.array([1.0, 2.0, 3.0, 4.0])
    calculated = np.array([1.0, 3.0, 2.0, 5.0])
    # centred: (-1.5, -0.5, 0.5, 1.5) and (-1.75, 0.25, -0.75, 2.25): cov 5.5, var 5.0 and 8.75
    expected = 5.5 / math.sqrt(5.0 * 8.75)
    passed, value = comp_pcc(golden, calculated, pcc=0.5)
    assert passed
    assert value == pytest.approx(expected, abs=1e-12)
    assert comp_pcc(golden, calculated, pcc=0.99) == (False, pytest.approx(expected))


def test_pcc_is_invariant_to_scale_and_offset_but_not_sign():
    rng = np.random.default_rng(7)
    x = rng.standard_normal(1000)
    assert comp_pcc(x, 3.0 * x + 1.0)[1] == pytest.approx(1.0)
    assert comp_pcc(x, -x)[1] == pytest.approx(-1.0)
    assert not comp_pcc(x, -x)[0]


def test_pcc_degenerate_cases_follow_tt_metal():
    nan = np.full(4, np.nan)
    assert comp_pcc(nan, nan) == (True, 1.0)
    assert comp_pcc(nan, np.ones(4)) == (False, 0.0)
    assert comp_pcc(np.zeros(4), np.array([0.0, 1.0, 0.0, 0.0])) == (False, 0.0)
    assert comp_pcc(np.zeros(4), np.zeros(4)) == (True, 1.0)
    # Two different constants: no correlation to speak of.
    assert comp_pcc(np.full(4, 2.0), np.full(4, 3.0)) == (False, 0.0)


def test_pcc_noise_lowers_the_score():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4096)
    noisy = x + 0.5 * rng.standard_normal(4096)
    passed, value = comp_pcc(x, noisy, pcc=0.99)
    assert not passed
    # var(x) = 1, var(noise) = 0.25: the expected correlation is 1 / sqrt(1.25).
    assert value == pytest.approx(1 / math.sqrt(1.25), abs=0.01)


def test_sizes_that_differ_are_refused_with_both_shapes():
    with pytest.raises(ValueError, match=r"shape \[2, 2\].*shape \[5\]"):
        comp_pcc(np.zeros((2, 2)), np.zeros(5))


def test_unconvertible_input_names_its_type():
    with pytest.raises(TypeError, match="cannot compare a object"):
        comp_pcc(object(), np.zeros(1))


def test_assert_with_pcc_checks_shape_then_pcc():
    x = np.linspace(-1, 1, 64).reshape(8, 8)
    assert assert_with_pcc(x, x) == (True, 1.0)
    with pytest.raises(AssertionError, match="list\\(expected_pytorch_result.shape\\)=\\[8, 8\\]"):
        assert_with_pcc(x, x.reshape(64))
    with pytest.raises(AssertionError, match="below the required 0.9999"):
        assert_with_pcc(x, x[::-1])


def test_check_with_pcc_does_not_raise():
    x = np.ones((2, 3))
    assert check_with_pcc(x, np.ones((3, 2)))[0] is False
    assert check_with_pcc(np.arange(6.0), np.arange(6.0)) == (True, 1.0)


def test_comp_equal_reports_the_largest_deltas():
    equal, message = comp_equal(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    assert equal and message == "Max ATOL Delta: 0.0, Max RTOL Delta: 0.0"
    equal, message = comp_equal(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    assert not equal
    assert message == "Max ATOL Delta: 2.0, Max RTOL Delta: 0.5"
    assert comp_equal(np.array([np.nan]), np.array([np.nan]))[0]


def test_comp_allclose_uses_atol_and_rtol():
    golden = np.array([1.0, 100.0])
    calculated = np.array([1.05, 101.0])
    assert not comp_allclose(golden, calculated)[0]
    assert comp_allclose(golden, calculated, rtol=0.0, atol=1.0)[0]
    assert comp_allclose(golden, calculated, rtol=0.05, atol=0.0)[0]
    assert not comp_allclose(golden, calculated, rtol=0.0, atol=0.5)[0]
    passed, message = comp_allclose_and_pcc(golden, calculated, rtol=0.05, atol=0.0)
    assert passed and "PCC: " in message


def test_assert_equal_and_allclose():
    assert_equal([1, 2, 3], np.array([1.0, 2.0, 3.0]))
    with pytest.raises(AssertionError, match="Max ATOL Delta: 1.0"):
        assert_equal([1, 2, 3], [1, 2, 4])
    assert_allclose([1.0], [1.0 + 1e-9])
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_allclose([1.0], [[1.0]])


def test_torch_tensors_are_accepted_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    x = torch.arange(16, dtype=torch.bfloat16).reshape(4, 4)
    assert comp_pcc(x, x.float()) == (True, 1.0)
    assert_with_pcc(x, x.float() + 1)

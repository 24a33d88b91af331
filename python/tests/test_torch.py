"""from_torch / to_torch with real torch tensors (skipped when torch does not import: the
setup script installs it only with TTMESH_PYTHON_TORCH=1)."""

import numpy as np
import pytest

import ttmesh.ttnn as ttnn

torch = pytest.importorskip("torch", reason="torch is not importable (TTMESH_PYTHON_TORCH=1 bash scripts/python-setup.sh installs it)")


def test_torch_round_trip_dtypes(device):
    torch.manual_seed(0)
    x = torch.randn(1, 1, 32, 64)
    t = ttnn.from_torch(x, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    out = ttnn.to_torch(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert torch.equal(out, x.to(torch.bfloat16))
    xb = x.to(torch.bfloat16)
    tb = ttnn.from_torch(xb, layout=ttnn.TILE_LAYOUT, device=device)  # dtype inferred
    assert tb.dtype == ttnn.bfloat16
    assert torch.equal(ttnn.to_torch(tb), xb)
    f = ttnn.to_torch(ttnn.from_torch(x, dtype=ttnn.float32, device=device))
    assert f.dtype == torch.float32 and torch.equal(f, x)
    i = torch.arange(-16, 16, dtype=torch.int32).reshape(1, 32)
    ti = ttnn.from_torch(i, device=device)
    assert ti.dtype == ttnn.int32 and torch.equal(ttnn.to_torch(ti), i)
    u = ttnn.to_torch(ttnn.from_torch(np.arange(32, dtype=np.uint32), dtype=ttnn.uint32, device=device))
    assert u.dtype == torch.int32 and u.tolist() == list(range(32))


def test_torch_matmul_against_torch(device):
    torch.manual_seed(1)
    a = torch.randn(1, 1, 64, 32)
    b = torch.randn(1, 1, 32, 96)
    ta = ttnn.from_torch(a, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    tb = ttnn.from_torch(b, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    got = ttnn.to_torch(ttnn.matmul(ta, tb))
    assert torch.allclose(got, a @ b, rtol=1e-5, atol=1e-4)
    assert ttnn.to_torch(ta, torch_rank=2).shape == (64, 32)

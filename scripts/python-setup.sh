#!/usr/bin/env bash
# Makes the Python environment for ttmesh's TT-NN front: a virtual environment at
# target/python with numpy, pytest and maturin (pinned), and the `ttmesh` package built from
# python/ (the Rust extension ttmesh._ttmesh in release mode, the pure-Python ttmesh.ttnn
# beside it). Idempotent: a second run reinstalls nothing that is there and rebuilds only what
# changed (cargo's incremental build), so it takes seconds. Prints what it did.
#
#   bash scripts/python-setup.sh            # numpy only: from_torch/to_torch take and give numpy
#   TTMESH_PYTHON_TORCH=1 bash scripts/python-setup.sh   # also torch, into the same venv
#   TTMESH_PYTHON_MPI=1 bash scripts/python-setup.sh     # with MPI (after scripts/mpi-setup.sh)
#   target/python/bin/python -c 'import ttmesh.ttnn as ttnn; print(ttnn.get_num_devices())'
#
# torch: decided 2026-11-27, asked of pip (`pip install --dry-run --report`): PyPI has no
# CPU-only torch for Linux. Its torch 2.15.0 wheel requires the CUDA libraries (nvidia-cublas,
# nvidia-cudnn-cu13, ... triton: about 5.4 GB, about 4 minutes here), and the wheel alone fails
# at import (libcublasLt.so not found); CPU-only builds live only on PyTorch's own index, which
# is not a registry this project may use. So torch is installed only when TTMESH_PYTHON_TORCH=1
# (once into this venv under target/, which later runs reuse), never by default or in CI: the
# package works with numpy alone (from_torch takes numpy arrays, to_torch returns them when
# torch does not import), and its tests run the torch paths only when torch imports.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/python
python=${PYTHON:-python3}
pytest_pin="pytest==9.2.0"
maturin_pin="maturin==1.16.0"
torch_pin="torch==2.15.0"

say() { echo "python-setup: $*"; }

if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv with $($python --version 2>&1)"
  "$python" -m venv "$venv"
else
  say "$venv exists ($("$venv/bin/python" --version 2>&1))"
fi
# numpy's newest release per Python (2.5 needs 3.12, 2.4 3.11, 2.2 3.10).
case $("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') in
  3.9) numpy_pin="numpy==2.0.2" ;;
  3.10) numpy_pin="numpy==2.2.6" ;;
  3.11) numpy_pin="numpy==2.4.6" ;;
  *) numpy_pin="numpy==2.5.5" ;;
esac
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)

# Installs the pinned requirement unless that exact version is there already.
need() {
  local req=$1 name=${1%%==*} want=${1##*==} have
  have=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    say "$name $have already installed"
  else
    say "installing $req (had: ${have:-none})"
    "${pip[@]}" install "$req"
  fi
}
need "$numpy_pin"
need "$pytest_pin"
need "$maturin_pin"
if [ "${TTMESH_PYTHON_TORCH:-0}" = 1 ]; then
  need "$torch_pin"
fi

# The extension: maturin builds python/Cargo.toml (the workspace's ttmesh-python) into the
# workspace's target/ and installs ttmesh into the venv. `develop` links the pure-Python
# package in place (edits to python/ttmesh/*.py take effect without a rebuild) and copies the
# extension beside it as python/ttmesh/_ttmesh.abi3.so (ignored by git).
# TTMESH_PYTHON_MPI=1 builds it with the `mpi` feature (after scripts/mpi-setup.sh), so a
# program under mpirun opens one mesh over the ranks.
features=()
if [ "${TTMESH_PYTHON_MPI:-0}" = 1 ]; then
  features=(--features mpi)
fi
say "building and installing ttmesh (maturin develop --release ${features[*]})"
start=$(date +%s)
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --release --manifest-path python/Cargo.toml "${features[@]}" --quiet 2>&1 |
  grep -v "^\(🔗\|🐍\|📦\|🛠\|✏\)" |
  # With MPI the extension links libmpi, which sits in the system's library path: it needs
  # no rpath, so maturin's warning that it cannot set one (no patchelf) says nothing here.
  grep -v "Failed to set rpath.*patchelf" || true
"$venv/bin/python" -c 'import ttmesh.ttnn as ttnn, ttmesh; print("python-setup: import ttmesh.ttnn ok; system", ttmesh.system(), "with", ttnn.get_num_devices(), "devices")'
torch_state=$("$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "imports")' 2>/dev/null || echo "torch not importable: numpy only (TTMESH_PYTHON_TORCH=1 installs it)")
say "$torch_state"
say "done in $(( $(date +%s) - start )) s of build; run the tests with: $venv/bin/python -m pytest python/tests -q"

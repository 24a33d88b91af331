#!/usr/bin/env bash
# Installs what the `mpi` cargo feature needs to build and run: OpenMPI (openmpi-bin for
# mpirun, libopenmpi-dev for the headers and libmpi) and what the rsmpi bindings' build uses to
# generate them (libclang for bindgen, pkg-config to find OpenMPI). Idempotent: installs only
# what is missing. Exits 0 having installed everything, or non-zero saying what is missing and
# why (`.ci/run` then skips the MPI runs with that message rather than failing the build).
# Usage: scripts/mpi-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(openmpi-bin libopenmpi-dev libclang-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    echo "mpi-setup: missing ${missing[*]}; run as root on a Debian/Ubuntu host, or install them yourself" >&2
    exit 1
  fi
  mkdir -p target
  log=target/mpi-apt.log
  echo "mpi-setup: installing ${missing[*]} (log: $log)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q && \
         DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } > "$log" 2>&1; then
    echo "mpi-setup: apt-get could not install ${missing[*]}; see $log" >&2
    exit 1
  fi
fi
for tool in mpirun mpicc pkg-config; do
  command -v "$tool" > /dev/null || { echo "mpi-setup: $tool is still missing after install" >&2; exit 1; }
done
pkg-config --exists ompi || { echo "mpi-setup: pkg-config does not find OpenMPI (ompi.pc)" >&2; exit 1; }
echo "mpi-setup: ready ($(mpirun --version 2>&1 | head -1))"

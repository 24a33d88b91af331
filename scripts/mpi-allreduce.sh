#!/usr/bin/env bash
# Measures OpenMPI's MPI_Allreduce (float sum) between processes on this host, at the sizes
# and rank counts `ttmesh bench ccl` times the emulated all_reduce, and writes them to
# target/mpi-allreduce.tsv (ranks, bytes, us), which the benchmark prints beside its own
# figures. Installs openmpi-bin and libopenmpi-dev with apt when mpicc is missing; if apt
# cannot, it says so and exits 0 (the benchmark then shows the figures in its source).
# Usage: scripts/mpi-allreduce.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/mpi-allreduce.tsv
quick=${1:-}
if ! command -v mpicc > /dev/null || ! command -v mpirun > /dev/null; then
  mkdir -p target
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev > target/mpi-apt.log 2>&1; }
  if ! { [ "$(id -u)" = 0 ] && { install || { apt-get update -qq > /dev/null 2>&1 && install; }; }; }; then
    echo "mpi: WARNING: could not install OpenMPI (see target/mpi-apt.log); no live MPI figures"
    exit 0
  fi
fi
mkdir -p target/mpi
mpicc -O2 -o target/mpi/allreduce_timing scripts/mpi/allreduce_timing.c
run() { # ranks iters bytes...
  local n=$1 iters=$2; shift 2
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
    --mca btl self,vader target/mpi/allreduce_timing "$iters" "$@"
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
if [ "$quick" = --quick ]; then
  run 8 50 36864 >> "$tmp"
  # `bench ranks`: all_reduce across 2 ranks at 36 KiB and 16 MiB.
  run 2 50 36864 >> "$tmp"
  run 2 3 16777216 >> "$tmp"
else
  for n in 2 4 8; do run "$n" 100 4096 36864 262144 >> "$tmp"; done
  run 32 30 4096 36864 262144 >> "$tmp"
  for n in 2 4 8; do run "$n" 10 1048576 >> "$tmp"; run "$n" 3 16777216 >> "$tmp"; done
fi
mv "$tmp" "$out"
trap - EXIT
echo "mpi: MPI_Allreduce on $(nproc) cores, written to $out:"
cat "$out"

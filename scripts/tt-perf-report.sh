#!/usr/bin/env bash
# Reads the ops reports of `ttmesh run --profile` and of a prediction (`plan decode --predict
# --profile`) with Tenstorrent's own tool, tt-perf-report (PyPI, pinned), installed in a virtual
# environment under target/. It must exit 0 and list our ops with their device times. Only an
# unreachable PyPI is a warning; anything else fails.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.4.1
venv=target/tt-perf-report-venv
dir=target/ci-profile
if [ ! -x "$venv/bin/tt-perf-report" ]; then
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q "tt-perf-report==$version"; then
    if ! "$venv/bin/pip" download -q --no-deps -d "$venv/probe" "tt-perf-report==$version" 2>/dev/null; then
      echo "ci: WARNING: PyPI unreachable; tt-perf-report check skipped"
      exit 0
    fi
    echo "ci: tt-perf-report $version is on PyPI but did not install" >&2
    exit 1
  fi
fi
# Runs tt-perf-report on the ops report in $1 and checks every op code of ours is listed with a
# device time.
read_report() {
  local dir=$1 what=$2
  "$venv/bin/tt-perf-report" "$dir/ops_perf_results.csv" --no-color --no-advice > "$dir/tt-perf-report.txt"
  for op in $(cut -d, -f1 "$dir/ops_perf_results.csv" | tail -n +2 | sort -u); do
    grep -Eq "$op.* [0-9,]+ μs" "$dir/tt-perf-report.txt" \
      || { cat "$dir/tt-perf-report.txt"; echo "ci: tt-perf-report does not list $op of $what with a device time" >&2; exit 1; }
  done
  grep -E 'device ops' "$dir/tt-perf-report.txt"
  echo "ci: tt-perf-report $version read $(($(wc -l < "$dir/ops_perf_results.csv") - 1)) rows of $what"
}
rm -rf "$dir"
target/release/ttmesh run --iters 3 --profile "$dir" > /dev/null
read_report "$dir" "ttmesh's ops report (run --profile)"
# The predicted token of a model placed by shape alone (Llama-3.2-1B's shapes on an n150) is
# written in the same columns; tt-perf-report must read it as it reads a measured one.
predicted=target/ci-predict-profile
rm -rf "$predicted"
target/release/ttmesh plan decode --predict --mesh n150 --hidden 2048 --ffn 8192 --layers 16 \
  --heads 32 --kv-heads 8 --vocab 128256 --context 129 --batch 1 --dtype bfp8_b \
  --profile "$predicted" > /dev/null
read_report "$predicted" "the predicted ops report (plan decode --predict --profile)"

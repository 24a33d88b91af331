#!/usr/bin/env bash
# Reads the ops report of `ttmesh run --profile` with Tenstorrent's own tool, tt-perf-report
# (PyPI, pinned), installed in a virtual environment under target/. It must exit 0 and list
# our ops with their device times. Only an unreachable PyPI is a warning; anything else fails.
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
rm -rf "$dir"
target/release/ttmesh run --iters 3 --profile "$dir" > /dev/null
"$venv/bin/tt-perf-report" "$dir/ops_perf_results.csv" --no-color --no-advice > "$dir/tt-perf-report.txt"
# Every op code of our report appears in its table with a device time.
for op in $(cut -d, -f1 "$dir/ops_perf_results.csv" | tail -n +2 | sort -u); do
  grep -Eq "$op.* [0-9]+ μs" "$dir/tt-perf-report.txt" \
    || { cat "$dir/tt-perf-report.txt"; echo "ci: tt-perf-report does not list $op with a device time" >&2; exit 1; }
done
grep -E 'device ops' "$dir/tt-perf-report.txt"
echo "ci: tt-perf-report $version read $(($(wc -l < "$dir/ops_perf_results.csv") - 1)) rows of ttmesh's ops report"

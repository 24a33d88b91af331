#!/usr/bin/env bash
# The real consumer of `ttmesh report import`: ttnn-visualizer (PyPI, pinned) opens our folder,
# and its HTTP API must give back our operations and tensors. Then headless Chromium renders
# its operations view: the page must name every operation (a frontend error shows there, not
# in the API), and a screenshot goes to target/artifacts/ for people to look at.
#
#   bash scripts/ttnn-visualizer-check.sh [REPORT_FOLDER [PERFORMANCE_FOLDER]]
#
# Without REPORT_FOLDER it makes one: `ttmesh run --mesh n300 --graph --profile` and `ttmesh
# report import`; the run's profile folder is the performance report, opened in the same
# instance (memory and per-op device time in one report), and a prediction's profile folder
# (`plan decode --predict --profile`) is opened as a performance report of its own. The
# performance API must give back every op of our ops report with its device time. A registry that cannot be reached (pip, apt) is a WARNING and exit 0, as in
# scripts/fetch-model.sh; a visualizer that runs but cannot read our folder is exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
version=0.108.0
venv=target/visualizer-venv
artifacts=target/artifacts
mkdir -p "$artifacts"
ttmesh=${TTMESH:-target/release/ttmesh}

performance=
predicted=
if [ $# -ge 1 ]; then
  folder=$(cd "$1" && pwd)
  if [ $# -ge 2 ]; then performance=$(cd "$2" && pwd); fi
  expect_op=${EXPECT_OP:-}
else
  work=$(mktemp -d)
  "$ttmesh" run --mesh n300 --iters 1 --graph "$work/graph" --profile "$work/performance" > /dev/null
  "$ttmesh" report import "$work/graph/report.json" "$work/visualizer" --svg
  folder=$work/visualizer
  performance=$work/performance
  predicted=$work/predicted
  "$ttmesh" plan decode --predict --mesh n300 --hidden 2048 --ffn 8192 --layers 16 --heads 32 \
    --kv-heads 8 --vocab 128256 --context 129 --dtype bfp8_b --profile "$predicted" > /dev/null
  expect_op=${EXPECT_OP:-AllReduceAsyncDeviceOperation}
fi

if [ ! -x "$venv/bin/ttnn-visualizer" ] || ! "$venv/bin/pip" show ttnn-visualizer 2>/dev/null | grep -q "^Version: $version$"; then
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q "ttnn-visualizer==$version"; then
    echo "ci: WARNING: could not install ttnn-visualizer==$version from PyPI; the visualizer check is skipped"
    exit 0
  fi
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log=$artifacts/ttnn-visualizer-server.log
data=$(mktemp -d)
# The launcher runs gunicorn as a child and does not stop it when it is itself stopped, so
# it is started in a session of its own and the whole process group is stopped on exit
# (politely, then by force after 10 s): no server outlives the check.
USAGE_RECORDING_DISABLED=true APP_DATA_DIRECTORY=$data REPORT_DATA_DIRECTORY=$data/reports \
  LAUNCH_BROWSER_ON_START=false FLASK_ENV=production \
  setsid "$venv/bin/ttnn-visualizer" --host 127.0.0.1 --port "$port" > "$log" 2>&1 &
server=$!
stop_server() {
  kill -TERM -- "-$server" 2>/dev/null || true
  for _ in $(seq 40); do
    kill -0 -- "-$server" 2>/dev/null || break
    sleep 0.25
  done
  kill -KILL -- "-$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$data" "${work:-}" "${profile:-}"
}
trap stop_server EXIT

base=http://127.0.0.1:$port
for _ in $(seq 120); do
  curl -sf "$base/api/up" > /dev/null && break
  kill -0 $server 2>/dev/null || { cat "$log"; echo "ci: ttnn-visualizer exited before serving"; exit 1; }
  sleep 0.5
done
curl -sf "$base/api/up" > /dev/null || { tail -n 40 "$log"; echo "ci: ttnn-visualizer did not start within 60 s"; exit 1; }

# Opens local report folders (JSON fields, as `--profiler-path` / `--performance-path` would)
# and prints the instance id.
open_instance() {
  curl -sf -X POST -H 'Content-Type: application/json' -d "$1" "$base/api/instance/local-paths" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["instance_id"])' \
    || { tail -n 40 "$log" >&2; echo "ci: ttnn-visualizer refused to open $1" >&2; exit 1; }
}
# The performance view's data for a performance folder opened in instance $1: the ops report
# as tt-perf-report's table, the device log's zones and its arch line, every one HTTP 200, and
# every op code of our ops report listed with a device time.
check_performance() {
  local instance=$1 dir=$2 what=$3 name code
  for endpoint in performance/perf-results performance/perf-results/report performance/device-log \
      performance/device-log/meta performance/device-log/zone/BRISC-KERNEL; do
    name=$(echo "$endpoint" | tr / -)
    code=$(curl -s -o "$artifacts/ttnn-visualizer-$what-$name.json" -w '%{http_code}' \
      "$base/api/$endpoint?instanceId=$instance")
    [ "$code" = 200 ] || { tail -n 40 "$log"; echo "ci: ttnn-visualizer's /api/$endpoint gave HTTP $code on $dir"; exit 1; }
  done
  python3 - "$dir" "$artifacts" "$what" <<'EOF'
import csv, json, sys
folder, artifacts, what = sys.argv[1:4]
load = lambda name: json.load(open(f"{artifacts}/ttnn-visualizer-{what}-{name}.json"))
ours = list(csv.DictReader(open(f"{folder}/ops_perf_results.csv")))
report = load("performance-perf-results-report")["report"]
meta = load("performance-device-log-meta")
zones = load("performance-device-log-zone-BRISC-KERNEL")
arch = ours[0]["DEVICE ARCH"]
problems = []
timed = {r["op_code"].split(" ")[0] for r in report if float(r.get("device_time") or 0) > 0}
missing = sorted({r["OP CODE"] for r in ours} - timed)
if missing:
    problems.append(f"ops without a device time in the performance report: {missing}")
if meta.get("architecture") != arch:
    problems.append(f"device log arch {meta} against the ops report's {arch}")
if not zones["rows"]:
    problems.append("the device log has no BRISC-KERNEL zone")
if problems:
    sys.exit(f"ci: ttnn-visualizer read {folder} ({what}) wrongly:\n  " + "\n  ".join(problems))
print(f"ttnn-visualizer performance view of the {what}: {len(report)} op rows with device times, "
      f"{len({r['OP CODE'] for r in ours})} op codes, {meta['architecture']} at {meta['frequency']} MHz")
EOF
}

# Open our folder as a local report, as `--profiler-path` would, with the run's performance
# folder beside it when there is one.
if [ -n "$performance" ]; then
  instance=$(open_instance "{\"profiler_path\": \"$folder\", \"performance_path\": \"$performance\"}")
else
  instance=$(open_instance "{\"profiler_path\": \"$folder\"}")
fi

curl -sf "$base/api/operations?instanceId=$instance" > "$artifacts/ttnn-visualizer-operations.json" \
  || { tail -n 40 "$log"; echo "ci: ttnn-visualizer could not list our operations"; exit 1; }
curl -sf "$base/api/tensors?instanceId=$instance" > "$artifacts/ttnn-visualizer-tensors.json" \
  || { tail -n 40 "$log"; echo "ci: ttnn-visualizer could not list our tensors"; exit 1; }
curl -sf "$base/api/devices?instanceId=$instance" > "$artifacts/ttnn-visualizer-devices.json" \
  || { tail -n 40 "$log"; echo "ci: ttnn-visualizer could not list our devices"; exit 1; }

# Every other view's data must load too (HTTP 200), not only the lists.
for endpoint in operations/1 operation-buffers buffers buffer-pages cluster-descriptor \
    report-metadata errors config tensors/1 devices; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/api/$endpoint?instanceId=$instance")
  [ "$code" = 200 ] || { tail -n 40 "$log"; echo "ci: ttnn-visualizer's /api/$endpoint gave HTTP $code on our folder"; exit 1; }
done

python3 - "$folder/db.sqlite" "$artifacts" "$expect_op" <<'EOF'
import json, sqlite3, sys
db, artifacts, expect = sys.argv[1], sys.argv[2], sys.argv[3]
ops = json.load(open(f"{artifacts}/ttnn-visualizer-operations.json"))
tensors = json.load(open(f"{artifacts}/ttnn-visualizer-tensors.json"))
devices = json.load(open(f"{artifacts}/ttnn-visualizer-devices.json"))
con = sqlite3.connect(db)
want_ops = [r[0] for r in con.execute("SELECT name FROM operations ORDER BY operation_id")]
want_tensors = con.execute("SELECT count(*) FROM tensors").fetchone()[0]
want_devices = con.execute("SELECT count(*) FROM devices").fetchone()[0]
got_ops = [o["name"] for o in ops]
problems = []
if got_ops != want_ops:
    problems.append(f"operations: visualizer gave {got_ops}, our database has {want_ops}")
if len(tensors) != want_tensors:
    problems.append(f"tensors: visualizer gave {len(tensors)}, our database has {want_tensors}")
if len(devices) != want_devices:
    problems.append(f"devices: visualizer gave {len(devices)}, our database has {want_devices}")
if expect and expect not in got_ops:
    problems.append(f"operation {expect} missing from {got_ops}")
with_inputs = sum(1 for o in ops if o.get("inputs"))
if problems:
    sys.exit("ci: ttnn-visualizer read our folder wrongly:\n  " + "\n  ".join(problems))
print(f"ttnn-visualizer {len(got_ops)} operations ({with_inputs} with input tensors), "
      f"{len(tensors)} tensors, {len(devices)} devices read back through its HTTP API")
EOF

# The same instance's performance view (memory and device time in one report), and a
# prediction's profile as a performance report of its own.
if [ -n "$performance" ]; then
  check_performance "$instance" "$performance" run
fi
if [ -n "$predicted" ]; then
  check_performance "$(open_instance "{\"performance_path\": \"$predicted\"}")" "$predicted" prediction
fi

# A picture of the operations view, for people (CI keeps target/artifacts/).
if ! command -v chromium > /dev/null; then
  apt-get install -y -qq chromium > /dev/null 2>&1 || { apt-get update -qq > /dev/null 2>&1 && apt-get install -y -qq chromium > /dev/null 2>&1; } \
    || { echo "ci: WARNING: could not install chromium from apt; no screenshot"; exit 0; }
fi
profile=$(mktemp -d)
rm -f "$artifacts/ttnn-visualizer-operations.png" "$artifacts/ttnn-visualizer-operations.html"
timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --window-size=1400,900 --virtual-time-budget=15000 \
  --screenshot="$root/$artifacts/ttnn-visualizer-operations.png" \
  "$base/operations?instanceId=$instance" > /dev/null 2>&1 \
  || echo "ci: WARNING: chromium could not take the screenshot"
[ -f "$artifacts/ttnn-visualizer-operations.png" ] && echo "screenshot: $artifacts/ttnn-visualizer-operations.png"
# The performance view of the same report (memory and device time in one), for people.
if [ -n "$performance" ]; then
  rm -f "$artifacts/ttnn-visualizer-performance.png"
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size=1400,900 --virtual-time-budget=15000 \
    --screenshot="$root/$artifacts/ttnn-visualizer-performance.png" \
    "$base/performance?instanceId=$instance" > /dev/null 2>&1 \
    || echo "ci: WARNING: chromium could not take the performance view's screenshot"
  [ -f "$artifacts/ttnn-visualizer-performance.png" ] && echo "screenshot: $artifacts/ttnn-visualizer-performance.png"
fi

# The page itself, not only its API: the operations view as the browser rendered it must say
# how many operations it shows and name every one of ours (a frontend that chokes on a field
# of ours, a captured graph say, renders an error page instead).
timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --window-size=1400,900 --virtual-time-budget=15000 \
  --dump-dom "$base/operations?instanceId=$instance" > "$artifacts/ttnn-visualizer-operations.html" 2> /dev/null \
  || { echo "ci: WARNING: chromium could not render the operations view; page not checked"; exit 0; }
python3 - "$folder/db.sqlite" "$artifacts/ttnn-visualizer-operations.html" <<'EOF'
import html, re, sqlite3, sys
names = [r[0] for r in sqlite3.connect(sys.argv[1]).execute("SELECT name FROM operations")]
page = html.unescape(open(sys.argv[2], encoding="utf-8").read())
shown = f"Showing {len(names)} operations"
missing = sorted({n for n in names if n not in page})
if shown not in page or missing:
    error = re.search(r"An error occurred:[^<]*", page)
    sys.exit(f"ci: ttnn-visualizer's operations page (saved as {sys.argv[2]}) lacks "
             + (f"'{shown}' " if shown not in page else "") + (f"{missing}" if missing else "")
             + (f"; it says '{error.group(0)}'" if error else ""))
print(f"ttnn-visualizer operations page: {shown}, every name rendered")
EOF
exit 0

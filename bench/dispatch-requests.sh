#!/usr/bin/env bash
# What one dispatch request on a call costs the dispatcher's process (issue 23: timeouts chosen,
# not inherited): each call's device read, claim, push mark and outcome against DynamoDB Local
# through the DynamoDB adapter as deployed, one call at a time (latency on loopback) and 64 at
# once (CPU per request under load). bench/bins/src/bin/bench-dispatch-requests.rs does the work;
# docs/benchmarks.md ("DynamoDB requests and slow replies") quotes the figures. Not a test, and not run by CI.
#
#   bench/dispatch-requests.sh                 # 1,000 calls (4,000 requests) each way
#   BENCH_CALLS=300 bench/dispatch-requests.sh
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

build_release -p koe-bench --bin bench-dispatch-requests
scripts/dynamodb-local.sh fetch >&2
MACHINE="$(machine_line)"
log "$MACHINE"
"$BIN/bench-dispatch-requests" --calls "${BENCH_CALLS:-1000}" --concurrency 64 \
  | grep '^RESULT ' | sed 's/^RESULT //' >"$WORK/result.txt"
echo "$MACHINE"
python3 - "$WORK/result.txt" <<'PY'
import sys
r = dict(kv.split("=", 1) for kv in open(sys.argv[1]).read().split())
cpu = float(r["cpu_us_per_request"])
print(f"| client CPU per request (this machine, one core) | at 256 MB (0.145 vCPU) | at 1,769 MB | loopback p50 / p99 / max (one at a time) | 64 at once: p50 / p99 / max |")
print("| ---: | ---: | ---: | ---: | ---: |")
print(f'| {cpu:.0f} µs (under load {float(r["loaded_cpu_us_per_request"]):.0f} µs) | {cpu / 0.145 / 1000:.1f} ms | {cpu / 1000:.2f} ms '
      f'| {r["p50_ms"]} / {r["p99_ms"]} / {r["max_ms"]} ms | {r["loaded_p50_ms"]} / {r["loaded_p99_ms"]} / {r["loaded_max_ms"]} ms |')
PY

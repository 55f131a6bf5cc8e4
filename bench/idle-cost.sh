#!/usr/bin/env bash
# What second precision costs when nothing is due, and per call: the release `dispatch` binary
# under the Lambda Runtime API stand-in, invoked with the schedule's event as the every-minute
# rule does (a cold start, then warm idle minutes), on DynamoDB Local behind the limits proxy
# (which charges each request's units as DynamoDB does), then a minute with calls due 10-20 s
# ahead, then a run that stays while creates for seconds before its last call read its watch.
# bench/bins/src/bin/bench-idle-cost.rs does the work; bench/monthly-cost.py writes the whole
# monthly bill of docs/scale.md ("What a month costs") from its figures. Not a test, and not
# run by CI (CI checks the bill against the kept line, bench/idle-cost.last.json).
#
#   bench/idle-cost.sh                 # 30 idle minutes, 50 calls
#   BENCH_IDLE=100 BENCH_CALLS=200 bench/idle-cost.sh
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

build_release -p koe-functions --bin dispatch -p koe-bench --bin bench-idle-cost
log "$(machine_line)"
"$BIN/bench-idle-cost" "$BIN/dispatch" "${BENCH_IDLE:-30}" "${BENCH_CALLS:-50}" | tee "$WORK/out.txt"
# The measured line is kept: monthly-cost.py --check (CI) prices it without DynamoDB Local.
tail -n1 "$WORK/out.txt" >bench/idle-cost.last.json
python3 bench/monthly-cost.py --write

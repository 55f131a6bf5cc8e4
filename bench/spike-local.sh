#!/usr/bin/env bash
# The 07:00 spike through the real path: koe-local's release build with STORE=dynamodb on
# DynamoDB Local (the real SDK, HTTP, DynamoDB Local's own answers), BENCH_CALLS devices (200)
# registered and their calls created over HTTP 75 s ahead, all due in one second; each push's
# lateness read from koe-local's own push log line (bench/bins/src/bin/bench-spike-local.rs).
# BENCH_RUNS runs (5) with nothing between koe-local and DynamoDB Local, then as many with the
# limits proxy between them (DynamoDB's per-partition and per-table limits scaled 1:20, so 200
# calls stand for 4,000). Nothing pinned: the machine's cores are shared as on a quiet dev box.
# Not a test: it prints a table (docs/scale.md, "Through the real path").
#
#   bench/spike-local.sh
#   BENCH_CALLS=500 BENCH_RUNS=1 BENCH_LIMITS=off bench/spike-local.sh
#   BENCH_TIMELINE=/tmp/timeline.csv ...   # each run's DynamoDB requests around its second
#   BENCH_SECOND_OF_MINUTE=14 ...          # the creates straddle a minute: a woken run shares them
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

CALLS="${BENCH_CALLS:-200}"
RUNS="${BENCH_RUNS:-5}"
read -ra LIMITS <<<"${BENCH_LIMITS:-off scaled}"
build_release -p koe-local -p koe-bench --bin bench-spike-local

MACHINE="$(machine_line)"
log "$MACHINE"
scripts/dynamodb-local.sh fetch >&2
start_dynamodb_local
: >"$WORK/results.txt"
for limits in "${LIMITS[@]}"; do
  for run in $(seq 1 "$RUNS"); do
    log "run $run of $RUNS: $CALLS calls in one second, limits $limits (about 2 minutes)"
    extra=()
    [[ -n "${BENCH_SECOND_OF_MINUTE:-}" ]] && extra+=(--second-of-minute "$BENCH_SECOND_OF_MINUTE")
    [[ -n "${BENCH_TIMELINE:-}" ]] && extra+=(--timeline "${BENCH_TIMELINE%.csv}-$limits-$run.csv")
    "$BIN/bench-spike-local" --koe-local "$BIN/koe-local" --calls "$CALLS" --limits "$limits" \
      ${extra[@]+"${extra[@]}"} 2> >(tee "$WORK/spike.err" >&2) | tee -a "$WORK/results.txt" >&2 \
      || die "bench-spike-local failed: $(tail -n 5 "$WORK/spike.err")"
  done
done
sed -i 's/^RESULT //' "$WORK/results.txt"

echo "$MACHINE"
echo "koe-local release, STORE=dynamodb, DynamoDB Local (in memory); calls created 75 s ahead over HTTP;"
echo "limits scaled: the limits proxy (1,000 WCU/s and 3,000 RCU/s per partition, a new table's 4,000 WRU/s, × 0.05)"
echo
results_table '| limits | calls | p50 | p99 | max | early | twice | no push | statuses | store retries | throttled | calls per run |' \
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |' <<'PY'
return (f'| {r["limits"]} | {r["created"]} | {r["p50_ms"]} ms | {r["p99_ms"]} ms | {r["max_ms"]} ms '
      f'| {r["early"]} | {r["duplicates"]} | {r["missed"]} | {r["statuses"]} | {r["store_retries"]} '
      f'| {r["throttled"]} | {r["runs_claiming"]} |')
PY

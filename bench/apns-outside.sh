#!/usr/bin/env bash
# Issue 58's scenario through koe-local's release build, BENCH_RUNS times (5) on each store
# (memory, then DynamoDB Local): 80 devices, every 20th token dead, each with a call due in one
# second, created over HTTP 25 s ahead; the strict APNs stand-in as the outside server was
# (150 ms answers, a limit of 1 after each 410, a graceful GOAWAY on the 30th push taken, then
# deaf, closed 1.15 s later). Prints per run: live calls received once, received twice, calls
# recorded failed/missed/claimed that the server never received, calls wrong, the p99 and max
# of arrivals after their second (bench/bins/src/bin/bench-apns-outside.rs; the stand-in's
# sources: docs/benchmarks.md). Not a test, and not run by CI; about 35 s a run.
#
#   bench/apns-outside.sh
#   BENCH_RUNS=1 BENCH_STORES=memory bench/apns-outside.sh --go-away-at 10   # the binary's flags
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

RUNS="${BENCH_RUNS:-5}"
read -ra STORES <<<"${BENCH_STORES:-memory dynamodb}"
build_release -p koe-local -p koe-bench --bin koe-local --bin bench-apns-outside
MACHINE="$(machine_line)"
log "$MACHINE"
if [[ " ${STORES[*]} " == *" dynamodb "* ]]; then
  scripts/dynamodb-local.sh fetch >&2
  DDB_STATE_DIR="$CACHE/bench-dynamodb-local"
  KOE_TEST_DYNAMODB_ENDPOINT="$(KOE_STATE_DIR="$DDB_STATE_DIR" scripts/dynamodb-local.sh start)"
  export KOE_TEST_DYNAMODB_ENDPOINT
fi
: >"$WORK/results.txt"
failed=0
for store in "${STORES[@]}"; do
  for run in $(seq 1 "$RUNS"); do
    log "run $run of $RUNS on the $store store"
    "$BIN/bench-apns-outside" --koe-local "$BIN/koe-local" --store "$store" "$@" \
      | tee -a "$WORK/results.txt" >&2 || failed=$((failed + 1))
  done
done
sed -i 's/^RESULT //' "$WORK/results.txt"
echo "$MACHINE"
echo "koe-local release; strict APNs stand-in (StrictSettings::outside), GOAWAY on the 30th push taken"
echo
results_table '| store | live | live once | twice | never received, recorded failed/missed/claimed | wrong | p99 | max | GOAWAYs | connections | statuses |' \
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |' <<'PY'
return (f'| {r["store"]} | {r["live"]} | {r["live_once"]} | {r["twice"]} | {r["never_received_recorded_bad"]} '
      f'| {r["wrong"]} | {r["p99_ms"]} ms | {r["max_ms"]} ms | {r["go_aways"]} | {r["connections"]} | {r["statuses"]} |')
PY
[[ "$failed" -eq 0 ]] || die "$failed run(s) had a wrong call (stderr names them)"

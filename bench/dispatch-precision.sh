#!/usr/bin/env bash
# Dispatch precision: 1,000 and 10,000 reservations due in one UTC minute (spread evenly over its
# seconds), sent by koe-local's own dispatcher loop on the real clock with a stand-in APNs that
# takes 20 ms per push (bench/bins/src/bin/bench-dispatch.rs), on the memory store and on DynamoDB
# Local. Prints a table of lateness (push time minus scheduledAt), duplicates and misses, and
# draws the lateness distribution into docs/benchmarks-dispatch-lateness.png. Not a test.
#
#   bench/dispatch-precision.sh                    # about 8 minutes: each case waits for its minute
#   BENCH_CALLS="1000" BENCH_STORES="memory" bench/dispatch-precision.sh
#
# The dispatcher runs alone on core 1, DynamoDB Local on core 0. Installs matplotlib into
# ~/.cache/koe/venv-bench and fetches DynamoDB Local (scripts/dynamodb-local.sh) if missing.
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

read -ra CALLS <<<"${BENCH_CALLS:-1000 10000}"
read -ra STORES <<<"${BENCH_STORES:-memory dynamodb}"
PUSH_MS=20
PLOT="${BENCH_PLOT:-docs/benchmarks-dispatch-lateness.png}"
ensure_matplotlib
build_release -p koe-bench --bin bench-dispatch -p koe-testkit --bin create-local-tables

MACHINE="$(machine_line)"
log "$MACHINE"
: >"$WORK/results.txt"
for store in "${STORES[@]}"; do
  if [[ "$store" == dynamodb ]]; then
    scripts/dynamodb-local.sh fetch >&2
    start_dynamodb_local
  fi
  for n in "${CALLS[@]}"; do
    log "$n reservations on $store (waits for the next free minute, then the whole minute)"
    ${SUT_PIN[@]+"${SUT_PIN[@]}"} "$BIN/bench-dispatch" --store "$store" --calls "$n" \
      --push-ms "$PUSH_MS" --csv "$WORK/lateness-$store-$n.csv" \
      >"$WORK/dispatch-$store-$n.log" 2>"$WORK/dispatch-$store-$n.err" \
      || die "bench-dispatch failed: $(tail -n 5 "$WORK/dispatch-$store-$n.err")"
    grep '^RESULT ' "$WORK/dispatch-$store-$n.err" | sed 's/^RESULT //' >>"$WORK/results.txt"
    tail -n 1 "$WORK/results.txt" >&2
  done
done

mkdir -p "$(dirname "$PLOT")"
"$VENV/bin/python" bench/plot-lateness.py "$PLOT" "$WORK"/lateness-*.csv
echo "$MACHINE"
echo "pinning: ${PINNING/proxy/dispatcher}; stand-in APNs ${PUSH_MS} ms per push; plot: $PLOT"
echo
results_table '| store | due in one minute | sent | p50 | p99 | max | early | duplicates | misses | not `sent` in store | process peak RSS |' \
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |' <<'PY'
return (f'| {r["store"]} | {int(r["calls"]):,} | {int(r["sent"]):,} | {r["p50_ms"]} ms | {r["p99_ms"]} ms '
      f'| {r["max_ms"]} ms | {r["early"]} | {r["duplicates"]} | {r["misses"]} | {r["not_sent_in_store"]} '
      f'| {r["peak_rss_mib"]} MiB |')
PY

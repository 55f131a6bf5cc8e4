#!/usr/bin/env bash
# Dispatch at production scale (issue 12): N calls due in the same second, and a realistic 07:00
# spike (80 % in its first second, the rest over the minute), through the dispatcher as deployed
# for big minutes (a coordinating run splitting the window into parts of 5,000 calls, each part
# in a process of its own, as its own Lambda invocation would run),
# on the limits models: DynamoDB's per-partition limits (1,000 WCU/s, 3,000 RCU/s per partition
# key, on the table and on each index; testkit/src/dynamodb/limited_store/mod.rs) and APNs's
# (1,000 streams per connection, 120 ± 30 ms a push; testkit/src/push/limited/mod.rs).
# bench/bins/src/bin/bench-dispatch-scale/ does one case; this prints the table docs/scale.md
# quotes and draws docs/benchmarks-dispatch-scale.png. Not a test, and not run by CI.
#
#   bench/dispatch-scale.sh                       # 1,000 / 10,000 / 100,000 in one second + spike
#   BENCH_CALLS="1000 10000" BENCH_SPIKE= bench/dispatch-scale.sh
#
# What the models leave out: docs/benchmarks.md ("The limits models", "APNs connection pool").
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

read -ra CALLS <<<"${BENCH_CALLS:-1000 10000 100000}"
read -ra SPIKE <<<"${BENCH_SPIKE-100000}"
# The same second through the real path beside it: koe-local's release build on DynamoDB Local
# (the real SDK and HTTP; bench/spike-local.sh has its five-run table), at these sizes.
read -ra REAL <<<"${BENCH_REAL-200 1000}"
PLOT="${BENCH_PLOT:-docs/benchmarks-dispatch-scale.png}"
ensure_matplotlib
build_release -p koe-bench --bin bench-dispatch-scale --bin bench-spike-local -p koe-local

MACHINE="$(machine_line)"
log "$MACHINE"
: >"$WORK/results.txt"
run_case() { # <calls> <second|spike>
  local n="$1" kind="$2" flag=()
  [[ "$kind" == spike ]] && flag=(--spike)
  log "$n calls, $kind"
  "$BIN/bench-dispatch-scale" --calls "$n" ${flag[@]+"${flag[@]}"} \
    --csv "$WORK/lateness-$kind-$n.csv" >"$WORK/scale-$kind-$n.log" 2>"$WORK/scale-$kind-$n.err" \
    || die "bench-dispatch-scale failed: $(tail -n 5 "$WORK/scale-$kind-$n.err")"
  grep '^RESULT ' "$WORK/scale-$kind-$n.log" | sed 's/^RESULT //' | tee -a "$WORK/results.txt" >&2
}
for n in "${CALLS[@]}"; do run_case "$n" second; done
for n in ${SPIKE[@]+"${SPIKE[@]}"}; do run_case "$n" spike; done
if [[ ${#REAL[@]} -gt 0 ]]; then
  scripts/dynamodb-local.sh fetch >&2
  start_dynamodb_local
  for n in "${REAL[@]}"; do
    log "$n calls, one second, through koe-local on DynamoDB Local (about 2 minutes)"
    "$BIN/bench-spike-local" --koe-local "$BIN/koe-local" --calls "$n" --limits off \
      2>"$WORK/real-$n.err" | sed 's/^RESULT //' | tee -a "$WORK/results.txt" >&2 \
      || die "bench-spike-local failed: $(tail -n 5 "$WORK/real-$n.err")"
  done
fi

mkdir -p "$(dirname "$PLOT")"
GOAL_MS=1000 TITLE="koe dispatcher on the limits models: when each push left (had an APNs stream), after its second" \
  "$VENV/bin/python" bench/plot-lateness.py "$PLOT" "$WORK"/lateness-*.csv
echo "$MACHINE"
echo "models: DynamoDB 1,000 WCU/s and 3,000 RCU/s per partition key (table and index), 1 s burst, no adaptive capacity;"
echo "        APNs 1,000 streams per connection, 120 ± 30 ms; parts of 5,000 calls, 8 APNs connections each; plot: $PLOT"
echo
results_table '| path | calls | due | parts | p50 | p99 | max | early | duplicates | misses | throttled | WCU / RCU per call | hottest partition | APNs connections | USD per 1,000 calls |' \
  '| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |' <<'PY'
g = lambda k: r.get(k, "–")
real = r.get("path") == "koe-local"
path = "koe-local, DynamoDB Local" if real else "limits model"
due = "07:00 spike" if r.get("spike") == "true" else "one second"
per_call = "–" if real else f'{r["wcu_per_call"]} / {r["rcu_per_call"]}'
hottest = "–" if real else f'{r["hottest_write_per_s"]} WCU/s'
return (f'| {path} | {int(r["calls"]):,} | {due} | {r.get("parts", 1)} | {r["p50_ms"]} ms | {r["p99_ms"]} ms | {r["max_ms"]} ms '
      f'| {r["early"]} | {r["duplicates"]} | {r["missed"]} | {r["throttled"]} '
      f'| {per_call} | {hottest} | {g("apns_connections")} | {g("usd_per_1000")} |')
PY

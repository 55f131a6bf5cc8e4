#!/usr/bin/env bash
# A slow-reply window around a crowded second (issue 23): N calls due in one second through the
# dispatcher as deployed for big minutes (bench/dispatch-scale.sh's set-up: a coordinating run,
# parts of 5,000 calls in processes of their own, the limits models of DynamoDB and APNs), once
# as the baseline and once with a share of DynamoDB's replies held: each request the dispatcher
# makes inside the window is carried out at once and, with probability F, answered H ms later
# (past the adapter's attempt timeout, a store error; testkit/src/dynamodb/held_replies.rs).
# Prints the markdown table docs/benchmarks.md quotes ("DynamoDB requests and slow replies"). Not a test, and not run by CI.
#
#   bench/slow-replies.sh                          # 10,000 calls; 20 % held 1.5 s, -1.5 s..+3.5 s
#   BENCH_CALLS=5000 BENCH_HELD="0.2 0.5" bench/slow-replies.sh
#   CARGO_TARGET_DIR=~/.cache/koe/target-bench-release bench/slow-replies.sh   # a target dir of your own
#
# Cases: the baseline (nothing held), then one per fraction in BENCH_HELD (default 0.2), each
# with BENCH_HOLD_MS (1500) and BENCH_WINDOW_MS (-1500,3500: ms around the second). BENCH_ARGS
# passes more options to every case, e.g. "--store-concurrency 5000" (instead of each role's
# DISPATCH_STORE_CONCURRENCY default: the coordinator 202, a part 1,400).
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

CALLS="${BENCH_CALLS:-10000}"
read -ra HELD <<<"${BENCH_HELD:-0.2}"
HOLD_MS="${BENCH_HOLD_MS:-1500}"
WINDOW_MS="${BENCH_WINDOW_MS:--1500,3500}"
read -ra EXTRA <<<"${BENCH_ARGS:-}"

build_release -p koe-bench --bin bench-dispatch-scale

MACHINE="$(machine_line)"
log "$MACHINE"
: >"$WORK/results.txt"
run_case() { # <held fraction>
  local held="$1" name="held-$1"
  log "$CALLS calls in one second, $held of the replies held ${HOLD_MS} ms in ${WINDOW_MS} ms"
  "$BIN/bench-dispatch-scale" --calls "$CALLS" --held "$held" --hold-ms "$HOLD_MS" \
    --window-ms "$WINDOW_MS" ${EXTRA[@]+"${EXTRA[@]}"} >"$WORK/$name.log" 2>"$WORK/$name.err" \
    || die "bench-dispatch-scale failed: $(tail -n 5 "$WORK/$name.err")"
  grep '^RESULT ' "$WORK/$name.log" | sed 's/^RESULT //' | tee -a "$WORK/results.txt" >&2
}
run_case 0
for held in "${HELD[@]}"; do run_case "$held"; done

echo "$MACHINE"
echo "models: DynamoDB 1,000 WCU/s and 3,000 RCU/s per partition key (table and index), 1 s burst;"
echo "        APNs 1,000 streams per connection, 120 ± 30 ms; parts of 5,000 calls in processes of their own;"
echo "        held replies: carried out at once, answered late; dispatch requests one attempt of 500 ms,"
echo "        selection reads 3 attempts of 1 s within 3 s (SDK backoff)"
if [[ ${#EXTRA[@]} -gt 0 ]]; then echo "options: ${EXTRA[*]}"; fi
echo
results_table '| calls | replies held | rang once | rang twice | never rang | p50 | p99 | max | requests resolved | failed | released | replies held (timed out) | WCU / RCU per call |' \
  '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |' <<'PY'
if float(r["held"]) > 0:
    start, end = (int(v) / 1000 for v in r["window_ms"].split(","))
    held = f'{float(r["held"]):.0%} for {int(r["hold_ms"]) / 1000:g} s, {start:+g} s to {end:+g} s'
else:
    held = "none (baseline)"
return (f'| {int(r["calls"]):,} | {held} | {int(r["once"]):,} | {r["twice"]} | {r["never"]} '
      f'| {r["p50_ms"]} ms | {r["p99_ms"]} ms | {r["max_ms"]} ms | {int(r["resolved"]):,} '
      f'| {r["failed"]} | {r["released"]} | {int(r["held_replies"]):,} ({int(r["held_timeouts"]):,}) '
      f'| {r["wcu_per_call"]} / {r["rcu_per_call"]} |')
PY

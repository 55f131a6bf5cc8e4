#!/usr/bin/env bash
# Confirmed calls against phones that silently drop pushes (issue 30): N calls due in one second
# through one dispatcher run on the limits models (DynamoDB's per-partition limits, which count
# each request's units; the stand-in APNs, which answers every push 200), to simulated phones
# that never get a share of the pushes (APNs took them, the phone did not ring) and confirm the
# others 100 to 300 ms after APNs answered, through the store's confirm_call as
# POST /calls/confirm makes it. Once with devices without confirmsCalls (one push each, nothing
# confirmed), once with it (a push not confirmed within CALL_CONFIRM_WAIT_MS goes again, up to
# CALL_MAX_PUSHES). bench/bins/src/bin/bench-confirm-drops.rs does one case; this prints the table
# docs/benchmarks.md quotes ("Confirmed calls against dropped pushes"). Not a test, and not run
# by CI.
#
#   bench/confirm-drops.sh                         # 1,000 calls, 10 % of pushes dropped
#   BENCH_CALLS=5000 BENCH_DROP=0.3 bench/confirm-drops.sh
#   CARGO_TARGET_DIR=~/.cache/koe/target-bench-release bench/confirm-drops.sh   # a target dir of your own
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

CALLS="${BENCH_CALLS:-1000}"
DROP="${BENCH_DROP:-0.1}"

build_release -p koe-bench --bin bench-confirm-drops

MACHINE="$(machine_line)"
log "$MACHINE"
: >"$WORK/results.txt"
run_case() { # <name> [--confirms]
  local name="$1"
  shift
  log "$CALLS calls in one second, $DROP of the pushes dropped by the phones, $name"
  "$BIN/bench-confirm-drops" --calls "$CALLS" --drop "$DROP" "$@" >"$WORK/$name.log" \
    2>"$WORK/$name.err" || die "bench-confirm-drops failed: $(tail -n 5 "$WORK/$name.err")"
  grep '^RESULT ' "$WORK/$name.log" | sed 's/^RESULT //' | tee -a "$WORK/results.txt" >&2
}
run_case without
run_case with --confirms

echo "$MACHINE"
echo "models: DynamoDB 1,000 WCU/s and 3,000 RCU/s per partition key (units counted per request);"
echo "        APNs answers 200 after 120 ± 30 ms; each push dropped by the phone with probability $DROP,"
echo "        a push that reaches it confirmed 100 to 300 ms after APNs answered (store's confirm_call);"
echo "        CALL_CONFIRM_WAIT_MS 5000, CALL_MAX_PUSHES 3 (defaults)"
echo
python3 - "$WORK/results.txt" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
base = next((r for r in rows if r["confirms"] == "false"), None)
print("| devices | rang on the phone within 15 s | known to the backend within 15 s | final statuses | pushes per call | confirmation latency p50 / p99 | WCU / RCU per call | extra units per call |")
print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
for r in rows:
    confirms = r["confirms"] == "true"
    statuses = ", ".join(f'{int(r[s]):,} {s}' for s in ("rang", "unconfirmed", "sent", "failed", "missed") if int(r[s]))
    latency = f'{r["confirm_p50_ms"]} / {r["confirm_p99_ms"]} ms' if confirms else "–"
    extra = "–"
    if confirms and base:
        extra = (f'{float(r["wcu_per_call"]) - float(base["wcu_per_call"]):+.2f} WCU, '
                 f'{float(r["rcu_per_call"]) - float(base["rcu_per_call"]):+.2f} RCU')
    print(f'| {"with" if confirms else "without"} `confirmsCalls` '
          f'| {float(r["rang_15s"]):.1%} | {float(r["known_rang_15s"]):.1%} | {statuses} '
          f'| {float(r["pushes_per_call"]):.2f} | {latency} '
          f'| {r["wcu_per_call"]} / {r["rcu_per_call"]} | {extra} |')
PY

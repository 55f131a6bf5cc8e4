#!/usr/bin/env bash
# Sustained load on koe-local (release): GET /health, GET /api/info and POST /agent round 1, on
# the memory store and on DynamoDB Local, with wrk at 64 connections. Not a test: it prints a
# table (throughput, latency, errors, koe-local's CPU per request and peak RSS).
#
#   bench/load.sh                          # 15 s per endpoint and store
#   BENCH_SECONDS=30 BENCH_CONNECTIONS=128 bench/load.sh
#
# koe-local runs alone on core 1; wrk, the stand-in OpenAI (answering at once) and DynamoDB Local
# share core 0. Round 1 sends a fresh deviceId per request and AGENT_DAILY_LIMIT is 100000, so
# the daily limit never answers 429; every request counts one use in the store. Installs wrk
# (Debian) and fetches DynamoDB Local (scripts/dynamodb-local.sh) if missing.
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

SECS="${BENCH_SECONDS:-15}"
CONNS="${BENCH_CONNECTIONS:-64}"
RESULTS="$WORK/results.jsonl"
API_KEY=bench-key

ensure_wrk
build_release -p koe-local
build_release -p koe-bench --bin bench-standin-openai -p koe-testkit --bin create-local-tables
scripts/dynamodb-local.sh fetch >&2

MACHINE="$(machine_line)"
log "$MACHINE"
start_standin 0

run_store() {
  local store="$1" chat agent pid
  chat="$(free_port)"
  agent="$(free_port)"
  start_bg "koe-local-$store" env OPENAI_BASE_URL="$STANDIN_URL" OPENAI_API_KEY=sk-bench \
    AGENT_API_KEYS="$API_KEY" AGENT_DAILY_LIMIT=100000 STORE="$store" \
    CHAT_ADDR="127.0.0.1:$chat" AGENT_ADDR="127.0.0.1:$agent" LOCAL_DISPATCHER=false \
    ${SUT_PIN[@]+"${SUT_PIN[@]}"} "$BIN/koe-local"
  pid=$STARTED_PID
  wait_http "http://127.0.0.1:$chat/health" 30

  export WRK_METHOD=GET
  unset WRK_BODY WRK_BODY_TEMPLATE WRK_API_KEY
  run_wrk "$CONNS" 2 "http://127.0.0.1:$chat/health" >/dev/null # warm-up
  measure "GET /health ($store)" "$pid" "$CONNS" "$SECS" "http://127.0.0.1:$chat/health"
  measure "GET /api/info ($store)" "$pid" "$CONNS" "$SECS" "http://127.0.0.1:$chat/api/info"

  export WRK_METHOD=POST WRK_API_KEY="$API_KEY"
  export WRK_BODY_TEMPLATE='{"message":"What is on my calendar tomorrow?","capabilities":["calendar"],"deviceId":"%s","timezone":"Asia/Tokyo"}'
  run_wrk "$CONNS" 2 "http://127.0.0.1:$agent/agent" >/dev/null # warm-up
  measure "POST /agent round 1 ($store)" "$pid" "$CONNS" "$SECS" "http://127.0.0.1:$agent/agent"
  unset WRK_BODY_TEMPLATE WRK_API_KEY
  stop_pid "$pid"
  FAIL_OPEN["$store"]="$(grep -c 'fail-open' "$WORK/koe-local-$store.log" || true)"
  ERROR_LINES["$store"]="$(grep -c '"level":"ERROR"' "$WORK/koe-local-$store.log" || true)"
  rm -f "$WORK/koe-local-$store.log"
}

declare -A FAIL_OPEN ERROR_LINES
run_store memory
start_dynamodb_local
run_store dynamodb

echo "$MACHINE"
echo "pinning: $PINNING; $CONNS connections, ${SECS} s per row"
echo
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| endpoint (store) | req/s | p50 | p99 | max | errors | koe-local CPU µs/req | peak RSS |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    w = r["wrk"]
    errors = w["connect"] + w["read"] + w["write"] + w["status"] + w["timeout"]
    ms = lambda us: f"{us / 1000:.2f} ms"
    cpu = f'{r["cpu_s"] * 1e6 / w["requests"]:.0f}' if w["requests"] else "–"
    print(f'| {r["label"]} | {w["requests"] / (w["duration_us"] / 1e6):,.0f} | {ms(w["p50_us"])} '
          f'| {ms(w["p99_us"])} | {ms(w["max_us"])} | {errors} | {cpu} | {r["rss_mib"]} MiB |')
EOF
echo
for store in memory dynamodb; do
  echo "- $store: ${FAIL_OPEN[$store]} fail-open usage counts, ${ERROR_LINES[$store]} error log lines"
done

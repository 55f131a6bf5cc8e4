#!/usr/bin/env bash
# Chat proxy overhead: koe-local's POST /api/chat next to LiteLLM's proxy (POST /chat/completions),
# both in front of the same stand-in OpenAI server that answers after exactly 50 ms, driven by the
# same load generator (wrk) at 1, 32 and 256 connections. Not a test: it prints a table.
#
#   bench/chat-overhead.sh                 # 15 s per level
#   BENCH_SECONDS=30 bench/chat-overhead.sh
#   BENCH_SKIP_LITELLM=1 bench/chat-overhead.sh   # koe-local only
#
# Each proxy runs alone on core 1 (wrk and the stand-in on core 0), so its throughput is its
# throughput per core; "req/CPU-s" divides the requests by the CPU time the proxy really used.
# Overhead = the proxied latency minus the stand-in's 50 ms; the "stand-in alone" rows (wrk
# straight to the stand-in) show what the load generator and loopback add by themselves. The
# summary gives koe-local's requests/s at 256 connections as a share of the stand-in alone's,
# and its CPU per request (goals: at least 95 %, at most 0.2 ms at 32 connections).
# Installs wrk (Debian) and LiteLLM (pinned, venv in ~/.cache/koe/venv-litellm) if missing.
set -euo pipefail
# shellcheck source=bench/perf-lib.sh
source "$(dirname "$0")/perf-lib.sh"

SECONDS_PER_LEVEL="${BENCH_SECONDS:-15}"
LEVELS=(1 32 256)
DELAY_MS=50
# 1.82.6: pinned, and before the releases that were published by an attacker (1.82.7, 1.82.8).
LITELLM_VERSION="1.82.6"
LITELLM_VENV="$CACHE/venv-litellm"
RESULTS="$WORK/results.jsonl"
PROMPT="Hello, what is on my calendar today?"

ensure_wrk
if [[ -z "${BENCH_SKIP_LITELLM:-}" ]] \
  && ! "$LITELLM_VENV/bin/python" -c "import litellm, importlib.metadata as m; assert m.version('litellm') == '$LITELLM_VERSION'" 2>/dev/null; then
  log "installing litellm[proxy]==$LITELLM_VERSION into $LITELLM_VENV"
  python3 -m venv "$LITELLM_VENV" >&2
  "$LITELLM_VENV/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" >&2
fi
build_release -p koe-local
build_release -p koe-bench --bin bench-standin-openai

MACHINE="$(machine_line)"
log "$MACHINE"
start_standin "$DELAY_MS"

# 1. The stand-in alone (OpenAI's request shape).
export WRK_METHOD=POST
export WRK_BODY="{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":100}"
for c in "${LEVELS[@]}"; do
  measure "stand-in alone" "$STANDIN_PID" "$c" "$SECONDS_PER_LEVEL" "$STANDIN_URL/chat/completions"
done

# 2. koe-local (release), as configured by default apart from the provider: JSON access log on.
KOE_PORT="$(free_port)"
start_bg koe-local env OPENAI_BASE_URL="$STANDIN_URL" OPENAI_API_KEY=sk-bench \
  CHAT_ADDR="127.0.0.1:$KOE_PORT" AGENT_ADDR="127.0.0.1:$(free_port)" LOCAL_DISPATCHER=false \
  ${SUT_PIN[@]+"${SUT_PIN[@]}"} "$BIN/koe-local"
KOE_PID=$STARTED_PID
wait_http "http://127.0.0.1:$KOE_PORT/health" 30
export WRK_BODY="{\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"model\":\"gpt-4o-mini\",\"maxTokens\":100}"
run_wrk 32 3 "http://127.0.0.1:$KOE_PORT/api/chat" >/dev/null # warm-up, not counted
for c in "${LEVELS[@]}"; do
  measure "koe-local" "$KOE_PID" "$c" "$SECONDS_PER_LEVEL" "http://127.0.0.1:$KOE_PORT/api/chat"
done
stop_pid "$KOE_PID"

# 3. LiteLLM's proxy: the same stand-in as an OpenAI-compatible provider, no database, logging off.
if [[ -z "${BENCH_SKIP_LITELLM:-}" ]]; then
  start_litellm
  export WRK_BODY="{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":100}"
  run_wrk 32 3 "http://127.0.0.1:$LITELLM_PORT/chat/completions" >/dev/null # warm-up
  for c in "${LEVELS[@]}"; do
    measure "LiteLLM $LITELLM_VERSION" "$LITELLM_PID" "$c" "$SECONDS_PER_LEVEL" \
      "http://127.0.0.1:$LITELLM_PORT/chat/completions"
  done
  stop_pid "$LITELLM_PID"
fi

echo "$MACHINE"
echo "pinning: $PINNING; ${SECONDS_PER_LEVEL} s per level; stand-in delay ${DELAY_MS} ms"
echo
python3 - "$RESULTS" "$DELAY_MS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
delay_us = float(sys.argv[2]) * 1000
print("| proxy | conns | req/s | p50 − 50 ms | p99 − 50 ms | max | errors | CPU s | req/CPU-s | peak RSS |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    w = r["wrk"]
    secs = w["duration_us"] / 1e6
    errors = w["connect"] + w["read"] + w["write"] + w["status"] + w["timeout"]
    per_cpu = f'{w["requests"] / r["cpu_s"]:,.0f}' if r["cpu_s"] > 0 else "–"
    ms = lambda us: f"{us / 1000:.2f} ms"
    print(f'| {r["label"]} | {r["conns"]} | {w["requests"] / secs:,.0f} | {ms(w["p50_us"] - delay_us)} '
          f'| {ms(w["p99_us"] - delay_us)} | {ms(w["max_us"])} | {errors} | {r["cpu_s"]:.1f} '
          f'| {per_cpu} | {r["rss_mib"]} MiB |')
koe = {r["conns"]: r for r in rows if r["label"] == "koe-local"}
alone = {r["conns"]: r for r in rows if r["label"] == "stand-in alone"}
peer = {r["conns"]: r for r in rows if r["label"].startswith("LiteLLM")}
rate = lambda r: r["wrk"]["requests"] / (r["wrk"]["duration_us"] / 1e6)
per_cpu = lambda r: r["wrk"]["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else float("nan")
cpu_ms = lambda r: r["cpu_s"] * 1000 / r["wrk"]["requests"] if r["wrk"]["requests"] else float("nan")
# The goals (docs/benchmarks.md), side by side from this one run.
print()
if 256 in koe and 256 in alone:
    share = 100 * rate(koe[256]) / rate(alone[256])
    print(f"- koe-local at 256 connections: {share:.1f} % of the stand-in alone's requests/s "
          f"({rate(koe[256]):,.0f} of {rate(alone[256]):,.0f}; goal ≥ 95 %)")
for c in (32, 256):
    if c in koe:
        goal = "; goal ≤ 0.2 ms" if c == 32 else ""
        print(f"- koe-local's CPU per request at {c} connections: {cpu_ms(koe[c]):.3f} ms{goal}")
if koe and peer:
    for c in sorted(set(koe) & set(peer)):
        print(f"- {c} connections: koe-local {rate(koe[c]) / rate(peer[c]):.1f}x LiteLLM's requests/s, "
              f"{per_cpu(koe[c]) / per_cpu(peer[c]):.1f}x its requests per CPU-second")
EOF

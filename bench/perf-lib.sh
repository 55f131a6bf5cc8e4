# Helpers shared by the bench/*.sh scripts
# (sourced, not run). They build release binaries into the shared target dir, install what they
# need (wrk from Debian, Python venvs under ~/.cache/koe), pin processes to cores, and read CPU
# time and peak RSS from /proc.
# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
REPO="$(pwd)"
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
# shellcheck source=scripts/build-cache.sh
source "$REPO/scripts/build-cache.sh"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/koe-bench.XXXXXX")"
STARTED_PIDS=()

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The proxy under test gets one core, the load generator and stand-ins the other, so the
# throughput of a proxy is its throughput per core. With a single core nothing is pinned.
# SUT_PIN / LOAD_PIN are command prefixes (taskset execs, so a pid stays the program's own).
if [[ "$(nproc)" -ge 2 ]]; then
  SUT_PIN=(taskset -c 1)
  LOAD_PIN=(taskset -c 0)
  PINNING="the proxy under test on core 1; load generator, stand-ins and DynamoDB Local on core 0"
else
  SUT_PIN=()
  LOAD_PIN=()
  PINNING="one core: nothing pinned"
fi

cleanup() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${STARTED_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "${DDB_STATE_DIR:-}" ]]; then
    KOE_STATE_DIR="$DDB_STATE_DIR" scripts/dynamodb-local.sh stop || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ensure_wrk() {
  command -v wrk >/dev/null && return
  log "installing wrk (Debian package)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; } >&2 \
    || die "wrk is needed: apt-get install wrk"
}

# cargo build --release of the given packages/binaries (one invocation each, so koe-local is built
# exactly as `cargo build --release -p koe-local` builds it). BENCH_NO_BUILD=1 measures the
# binaries already in the target dir (e.g. built before waiting for a quiet machine).
build_release() {
  if [[ -n "${BENCH_NO_BUILD:-}" ]]; then
    log "BENCH_NO_BUILD: using the release binaries in $BIN as they are"
    return 0
  fi
  claim_build_cache
  BIN="$CARGO_TARGET_DIR/release"
  log "cargo build --release $* (into $CARGO_TARGET_DIR)"
  cargo build --release --locked "$@" >&2
}

machine_line() {
  local model mem
  model="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  mem="$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  printf 'machine: %s cores, %s, %s RAM, load average %s (1/5/15 min) at %s\n' \
    "$(nproc)" "$model" "$mem" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(date -u +%FT%TZ)"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL [seconds]: until the URL answers 2xx.
wait_http() {
  local url="$1" limit="${2:-60}" i
  for ((i = 0; i < limit * 10; i++)); do
    curl -sf -o /dev/null --max-time 1 "$url" && return 0
    sleep 0.1
  done
  die "$url did not answer within ${limit}s"
}

# The pid and all its descendants.
tree_pids() {
  local pid="$1" child
  echo "$pid"
  # shellcheck disable=SC2013  # the file is a list of pids separated by spaces
  for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
    tree_pids "$child"
  done
}

# CPU seconds (user + system) used so far by a process tree.
cpu_secs() {
  local ticks=0 pid t
  for pid in $(tree_pids "$1"); do
    t="$(awk '{print $14 + $15}' /proc/"$pid"/stat 2>/dev/null || echo 0)"
    ticks=$((ticks + t))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}'
}

# Peak RSS (VmHWM) of a process tree, in MiB.
peak_rss_mib() {
  local kib=0 pid k
  for pid in $(tree_pids "$1"); do
    k="$(awk '/VmHWM/ {print $2}' /proc/"$pid"/status 2>/dev/null || echo 0)"
    kib=$((kib + ${k:-0}))
  done
  awk -v k="$kib" 'BEGIN {printf "%.1f", k / 1024}'
}

# run_wrk CONNECTIONS SECONDS URL: one bounded wrk run on the load core; prints its JSON line.
# The request comes from WRK_* variables (bench/wrk-report.lua).
run_wrk() {
  local conns="$1" secs="$2" url="$3" out
  out="$(${LOAD_PIN[@]+"${LOAD_PIN[@]}"} wrk -t 1 -c "$conns" -d "${secs}s" --timeout 10s \
    -s "$REPO/bench/wrk-report.lua" "$url")" || die "wrk failed: $out"
  grep '^WRK ' <<<"$out" | sed 's/^WRK //'
}

# measure LABEL PID CONNECTIONS SECONDS URL: run_wrk plus the CPU the process tree PID used during
# it and its peak RSS afterwards; appends one JSON line to $RESULTS.
measure() {
  local label="$1" pid="$2" conns="$3" secs="$4" url="$5" before after json
  before="$(cpu_secs "$pid")"
  json="$(run_wrk "$conns" "$secs" "$url")"
  after="$(cpu_secs "$pid")"
  printf '{"label":"%s","conns":%s,"cpu_s":%s,"rss_mib":%s,"wrk":%s}\n' \
    "$label" "$conns" "$(awk -v a="$after" -v b="$before" 'BEGIN {printf "%.2f", a - b}')" \
    "$(peak_rss_mib "$pid")" "$json" >>"$RESULTS"
  log "$label c=$conns: $json"
}

# start_bg NAME CMD...: starts CMD in the background (output in $WORK/NAME.log), records its pid
# in STARTED_PID and in the list cleanup stops.
start_bg() {
  local name="$1"
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  STARTED_PID=$!
  STARTED_PIDS+=("$STARTED_PID")
}

stop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# The stand-in OpenAI server on the load core; sets STANDIN_URL (its OPENAI_BASE_URL).
start_standin() {
  local delay="$1" port
  port="$(free_port)"
  start_bg standin ${LOAD_PIN[@]+"${LOAD_PIN[@]}"} "$BIN/bench-standin-openai" --addr "127.0.0.1:$port" --delay-ms "$delay"
  STANDIN_PID=$STARTED_PID
  STANDIN_URL="http://127.0.0.1:$port/v1"
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q serving "$WORK/standin.log" 2>/dev/null && return 0
    sleep 0.1
  done
  die "stand-in did not start: $(cat "$WORK/standin.log")"
}

# DynamoDB Local (scripts/dynamodb-local.sh, its own state dir) on the load core, and fresh
# tables from template.yaml; exports what koe-local's STORE=dynamodb needs.
start_dynamodb_local() {
  DDB_STATE_DIR="$CACHE/bench-dynamodb-local"
  export AWS_REGION=ap-northeast-1 AWS_ACCESS_KEY_ID=koetest AWS_SECRET_ACCESS_KEY=koetest
  AWS_ENDPOINT_URL_DYNAMODB="$(KOE_STATE_DIR="$DDB_STATE_DIR" ${LOAD_PIN[@]+"${LOAD_PIN[@]}"} scripts/dynamodb-local.sh start)"
  export AWS_ENDPOINT_URL_DYNAMODB KOE_TEST_DYNAMODB_ENDPOINT="$AWS_ENDPOINT_URL_DYNAMODB"
  eval "$("$BIN/create-local-tables")"
  export DEVICES_TABLE CALLS_TABLE AGENT_USAGE_TABLE
}

# LiteLLM's proxy ($LITELLM_VENV) with the stand-in at STANDIN_URL as its OpenAI-compatible
# provider, no database, logging off; sets LITELLM_PORT and LITELLM_PID once it is live.
start_litellm() {
  LITELLM_PORT="$(free_port)"
  cat >"$WORK/litellm.yaml" <<EOF
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: $STANDIN_URL
      api_key: sk-bench
litellm_settings:
  set_verbose: false
  turn_off_message_logging: true
  telemetry: false
EOF
  cat >"$WORK/litellm-log.json" <<'EOF'
{"version": 1, "disable_existing_loggers": false,
 "handlers": {"null": {"class": "logging.NullHandler"}},
 "loggers": {"uvicorn": {"handlers": ["null"], "level": "ERROR", "propagate": false},
             "uvicorn.error": {"handlers": ["null"], "level": "ERROR", "propagate": false},
             "uvicorn.access": {"handlers": ["null"], "level": "ERROR", "propagate": false}}}
EOF
  start_bg litellm env LITELLM_LOG=ERROR LITELLM_LOCAL_MODEL_COST_MAP=True \
    ${SUT_PIN[@]+"${SUT_PIN[@]}"} "$LITELLM_VENV/bin/litellm" --config "$WORK/litellm.yaml" \
    --host 127.0.0.1 --port "$LITELLM_PORT" --num_workers 1 --telemetry False \
    --log_config "$WORK/litellm-log.json"
  LITELLM_PID=$STARTED_PID
  wait_http "http://127.0.0.1:$LITELLM_PORT/health/liveliness" 180
}

# ensure_matplotlib: sets VENV to a venv ($CACHE/venv-bench) that has matplotlib, for the plots.
ensure_matplotlib() {
  VENV="$CACHE/venv-bench"
  if ! "$VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
    log "installing matplotlib into $VENV"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q 'matplotlib==3.10.*' >&2
  fi
}

# results_table HEADER ALIGN: prints $WORK/results.txt (a record of key=value pairs a line) as a
# Markdown table under the rows HEADER and ALIGN. The Python on stdin is the body of `row(r)`: it
# returns the table row of the record `r` (a dict).
results_table() {
  python3 -c "import sys
def row(r):
$(sed 's/^/    /')
print(sys.argv[2])
print(sys.argv[3])
for line in open(sys.argv[1]):
    print(row(dict(kv.split('=', 1) for kv in line.split())))" "$WORK/results.txt" "$1" "$2"
}

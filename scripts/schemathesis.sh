#!/usr/bin/env bash
# Schemathesis against koe-local, driven by openapi.yaml: every operation of both APIs gets
# generated requests (the spec's examples, its coverage cases, fuzzed positive and negative
# data, and stateful sequences such as PUT /devices -> POST /calls -> GET/DELETE /calls). Every
# check is on (`--checks all`): each answer must have a documented status, content type,
# headers and body schema, and nothing may be a 5xx. The one exception is GET /api/error, which
# always answers 500 by design (scripts/schemathesis.toml).
#
#   scripts/schemathesis.sh      prints the run and then `schemathesis: N cases run ...`
#
# The setup:
#   - koe-local on free loopback ports. The provider is the stand-in OpenAI (testkit's
#     `standin-openai`), whose completions are valid for structured output too, so every
#     valid /api/chat and /agent request gets a 200. The in-process dispatcher is off. The
#     daily agent limit is 2, so the spec's example device also meets 429 DAILY_LIMIT_EXCEEDED
#     (and its headers are checked).
#   - With KOE_TEST_DYNAMODB_ENDPOINT set (scripts/test.sh sets it), koe-local runs on
#     DynamoDB Local, in tables of its own made from template.yaml. Without it, koe-local uses
#     the memory store.
#   - The chat API is run with the `chat` tag at CHAT_ADDR. The agent API is run with the `agent`
#     tag at AGENT_ADDR, with the API key. POST /internal/dispatch (`dispatch` tag, AGENT_ADDR)
#     is run without a token: no OIDC issuer is configured, so it must answer the documented 401.
#   - scripts/schemathesis-hooks.py changes the two values a schema cannot constrain
#     (scheduledAt's window relative to now, IANA zone names) into accepted ones, so the
#     positive_data_acceptance check stays strict.
#   - The run is deterministic and bounded: fixed seed, at most N examples per operation
#     (KOE_SCHEMATHESIS_SEED, KOE_SCHEMATHESIS_MAX_EXAMPLES), no example database. About 1,700
#     cases in about 30 s on 2 cores.
#
# Installs schemathesis (pinned below) into a venv under ~/.cache/koe and builds koe-local,
# standin-openai and create-local-tables into $CARGO_TARGET_DIR (default ~/.cache/koe/target).
set -euo pipefail

readonly SCHEMATHESIS_VERSION="4.32.5"

cd "$(dirname "$0")/.."
ROOT="$PWD"
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
claim_build_cache
SEED="${KOE_SCHEMATHESIS_SEED:-20260101}"
MAX_EXAMPLES="${KOE_SCHEMATHESIS_MAX_EXAMPLES:-100}"
API_KEY="schemathesis-key-0123456789"
# The step-id signing key koe-local runs with; the hooks sign round 2's step ids with it.
export KOE_SCHEMATHESIS_STEP_KEY="schemathesis-step-key-0123456789abcdef"

log() { printf 'schemathesis.sh: %s\n' "$*" >&2; }

# --- tools -------------------------------------------------------------------------------------
VENV="$CACHE/venv-schemathesis-$SCHEMATHESIS_VERSION"
install_schemathesis() {
  if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "version $SCHEMATHESIS_VERSION\$"; then
    log "installing schemathesis==$SCHEMATHESIS_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
}
locked "$VENV" install_schemathesis
# KOE_TOOLS_INSTALL_ONLY: install and stop (scripts/test.sh installs every tool at once, early).
[ -z "${KOE_TOOLS_INSTALL_ONLY:-}" ] || exit 0
log "building koe-local, standin-openai and create-local-tables"
cargo build --quiet --locked -p koe-local --bin koe-local \
  -p koe-testkit --bin standin-openai --bin create-local-tables
BIN="$CARGO_TARGET_DIR/debug"

# --- processes ---------------------------------------------------------------------------------
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Waits (at most 30 s) until $1 has a line matching $2 and prints the first such line.
wait_for_line() {
  local file="$1" pattern="$2" pid="$3" i
  for ((i = 0; i < 300; i++)); do
    if grep -m1 -E "$pattern" "$file" 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  log "no '$pattern' from pid $pid; its output:"
  cat "$file" >&2 || true
  return 1
}

"$BIN/standin-openai" 127.0.0.1:0 >"$WORK/openai.out" 2>"$WORK/openai.err" &
PIDS+=($!)
OPENAI_URL="$(wait_for_line "$WORK/openai.out" '^http://' "${PIDS[-1]}")"

STORE_VARS=(STORE=memory)
if [[ -n "${KOE_TEST_DYNAMODB_ENDPOINT:-}" ]]; then
  # DynamoDB Local scopes tables per access key and region: the same for both commands.
  AWS_VARS=(AWS_ENDPOINT_URL_DYNAMODB="$KOE_TEST_DYNAMODB_ENDPOINT" AWS_REGION=ap-northeast-1
    AWS_ACCESS_KEY_ID=koeschemathesis AWS_SECRET_ACCESS_KEY=koeschemathesis)
  TABLES="$(env "${AWS_VARS[@]}" "$BIN/create-local-tables")"
  STORE_VARS=(STORE=dynamodb "${AWS_VARS[@]}")
  while read -r _ assignment; do STORE_VARS+=("$assignment"); done <<<"$TABLES"
  log "koe-local on DynamoDB Local at $KOE_TEST_DYNAMODB_ENDPOINT"
else
  log "koe-local on the memory store (KOE_TEST_DYNAMODB_ENDPOINT is not set)"
fi

env "${STORE_VARS[@]}" \
  OPENAI_BASE_URL="$OPENAI_URL" OPENAI_API_KEY=sk-standin AGENT_API_KEYS="$API_KEY" \
  AGENT_STEP_KEY="$KOE_SCHEMATHESIS_STEP_KEY" \
  AGENT_DAILY_LIMIT=2 LOCAL_DISPATCHER=false CHAT_ADDR=127.0.0.1:0 AGENT_ADDR=127.0.0.1:0 \
  RUST_LOG=info "$BIN/koe-local" >"$WORK/koe-local.log" 2>&1 &
PIDS+=($!)
LISTENING="$(wait_for_line "$WORK/koe-local.log" '"koe-local listening"' "${PIDS[-1]}")"
CHAT_URL="http://$(sed -E 's/.*"chat_addr":"([^"]+)".*/\1/' <<<"$LISTENING")"
AGENT_URL="http://$(sed -E 's/.*"agent_addr":"([^"]+)".*/\1/' <<<"$LISTENING")"
log "koe-local: chat API $CHAT_URL, agent API $AGENT_URL; provider $OPENAI_URL"

# --- runs --------------------------------------------------------------------------------------
export SCHEMATHESIS_HOOKS="$ROOT/scripts/schemathesis-hooks.py"
TOTAL=0
FAILED=()
SUMMARY=()
# run NAME URL TAG [extra args...]
run() {
  local name="$1" url="$2" tag="$3" out status cases
  shift 3
  out="$WORK/$name.out"
  printf '\n--- schemathesis: %s (tag %s) at %s\n' "$name" "$tag" "$url"
  status=0
  # In $WORK, so that nothing it writes (.hypothesis, reports) lands in the repository.
  (cd "$WORK" && "$VENV/bin/schemathesis" --no-color --config-file "$ROOT/scripts/schemathesis.toml" \
    run "$ROOT/openapi.yaml" --url "$url" --include-tag "$tag" \
    --checks all --seed "$SEED" --max-examples "$MAX_EXAMPLES" --generation-database none \
    --request-timeout 30 --workers 1 "$@") >"$out" 2>&1 || status=$?
  # The report from its summary on: the phases above it are long and say nothing more.
  sed -n '/^=* \(FAILURES\|WARNINGS\|SUMMARY\) =*$/,$p' "$out"
  cases="$(sed -nE 's/^ *([0-9]+) generated.*/\1/p' "$out" | tail -1)"
  if [[ "$status" -ne 0 || -z "$cases" ]]; then
    [[ -n "$cases" ]] || cat "$out"
    FAILED+=("$name")
  fi
  cases="${cases:-0}"
  TOTAL=$((TOTAL + cases))
  SUMMARY+=("$name $cases")
}

run chat "$CHAT_URL" chat
run agent "$AGENT_URL" agent -H "X-Api-Key: $API_KEY"
run dispatch "$AGENT_URL" dispatch

# What koe-local answered, from its access log (one "request" line per answer).
STATUSES="$(grep '"message":"request"' "$WORK/koe-local.log" | sed -nE 's/.*"status":([0-9]+).*/\1/p' \
  | sort | uniq -c | awk '{ printf "%s%s x %s", sep, $2, $1; sep = ", " }')"
printf '\nkoe-local answered: %s\n' "$STATUSES"
if ((${#FAILED[@]})); then
  log "koe-local's last log lines:"
  tail -n 40 "$WORK/koe-local.log" >&2 || true
fi
printf '\nschemathesis: %d cases run (%s), seed %s, at most %s examples per operation; %s\n' \
  "$TOTAL" "$(IFS=,; sed 's/,/, /g' <<<"${SUMMARY[*]}")" "$SEED" "$MAX_EXAMPLES" \
  "$( ((${#FAILED[@]})) && echo "FAILED: ${FAILED[*]}" || echo "no failures")"
((${#FAILED[@]} == 0))

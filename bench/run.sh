#!/usr/bin/env bash
# Cold start and peak memory of every Lambda binary next to a minimal lambda_http function
# (bench/hello), each started 20 times against a Lambda Runtime API stand-in on loopback.
#   bench/run.sh            build (host release profile) and measure
#   BENCH_RUNS=50 bench/run.sh --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# (arguments go to bench/bench.py: --env KEY=VALUE adds a variable to every function's).
# Prints one table: per function the median init and cold-start (start -> response) times, the
# ratio to hello, peak RSS, the host binary size and, when scripts/lambda-build.sh has built them,
# the arm64 zip sizes. Host (x86_64) builds: start-up work is the same as on arm64.
# Not a test: timings depend on the machine; the goals are in docs/benchmarks.md.
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# hello must be built exactly like the functions, or the comparison means nothing.
profile() { sed -n '/^\[profile.release\]/,/^\[/p' "$1" | grep -v '^\[' | grep -v '^$'; }
if ! diff <(profile Cargo.toml) <(profile bench/hello/Cargo.toml) >/dev/null; then
  echo "bench/hello/Cargo.toml's [profile.release] differs from Cargo.toml's: copy it over" >&2
  exit 1
fi

FUNCTIONS=$(ls functions/src/bin | sed 's/\.rs$//')
echo "==> cargo build --release (functions, bench/hello) into $CARGO_TARGET_DIR" >&2
cargo build --release --locked -p koe-functions
cargo build --release --locked --manifest-path bench/hello/Cargo.toml

# hello's arm64 zip too, when scripts/lambda-build.sh has installed cargo-lambda (its zips of the
# functions are read from the same place).
LAMBDA_TARGET_DIR="${KOE_LAMBDA_TARGET_DIR:-$CACHE/target-lambda}"
if [ -x "$CACHE/venv-lambda/bin/cargo-lambda" ]; then
  PATH="$CACHE/venv-lambda/bin:$PATH" CARGO_TARGET_DIR="$LAMBDA_TARGET_DIR" \
    cargo lambda build --release --arm64 --locked \
    --output-format zip --manifest-path bench/hello/Cargo.toml
fi

# shellcheck disable=SC2086
python3 bench/bench.py --runs "${BENCH_RUNS:-20}" --zips "$LAMBDA_TARGET_DIR/lambda" "$@" \
  "$CARGO_TARGET_DIR/release" hello $FUNCTIONS

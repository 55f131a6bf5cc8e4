#!/usr/bin/env bash
# The real AWS SAM CLI, pinned, from PyPI into ~/.cache/koe/venv-sam (installed on first use,
# about a minute), run in the repository root: `sam validate --lint` (run by scripts/test.sh)
# and `sam build` (the arm64 build every deploy starts with; it runs cargo lambda per function,
# so cargo-lambda and zig from scripts/lambda-build.sh's venv are put on PATH, and the compiled
# dependencies stay in ~/.cache/koe/target-lambda across builds and clones). Neither needs AWS
# credentials; the region defaults to samconfig.toml's.
#   scripts/sam.sh validate --lint
#   scripts/sam.sh build                  # docs/benchmarks.md, "Build profile and build times", has how long
#   scripts/sam.sh deploy --config-env dev   # first checks the concurrency quota (scripts/concurrency-check.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
SAM_VERSION=1.170.0
VENV="$CACHE/venv-sam"
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
pip_venv "$VENV" sam "$SAM_VERSION" aws-sam-cli
# KOE_TOOLS_INSTALL_ONLY: install and stop (scripts/test.sh installs every tool at once, early).
[ -z "${KOE_TOOLS_INSTALL_ONLY:-}" ] || exit 0
export SAM_CLI_TELEMETRY=0
export AWS_REGION="${AWS_REGION:-ap-northeast-1}"
if [ "${1:-}" = build ]; then
  # cargo-lambda and zig as scripts/lambda-build.sh installs them (it builds nothing when asked
  # for no function: KOE_LAMBDA_INSTALL_ONLY).
  KOE_LAMBDA_INSTALL_ONLY=1 scripts/lambda-build.sh >&2
  export PATH="$CACHE/venv-lambda/bin:$PATH"
  export CARGO_TARGET_DIR="${KOE_LAMBDA_TARGET_DIR:-$CACHE/target-lambda}"
  claim_build_cache
fi
if [ "${1:-}" = deploy ]; then
  # Stops before CloudFormation when the account's concurrency quota cannot hold the stack's
  # reservations (a failed first create), saying what to set.
  PYTHON="$VENV/bin/python" scripts/concurrency-check.sh "$@"
fi
exec "$VENV/bin/sam" "$@"

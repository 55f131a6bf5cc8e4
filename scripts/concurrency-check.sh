#!/usr/bin/env bash
# Before `sam deploy` (scripts/sam.sh runs it): the concurrency the stack reserves against the
# account's Lambda concurrency quota in the deploy's region (`aws lambda get-account-settings`).
# Lambda keeps 100 unreserved, so a stack reserving more than quota - 100 fails in
# CloudFormation half-way through its first create; this stops before it, naming the quota and
# what to set. Reservations of other stacks in the account are not counted.
#   scripts/concurrency-check.sh --config-env dev
# KOE_SAMCONFIG: another samconfig.toml (tests); PYTHON: a python with PyYAML (sam.sh: SAM's).
set -euo pipefail

cd "$(dirname "$0")/.."
ENV=default
while [ "$#" -gt 0 ]; do
  case "$1" in
    --config-env) ENV="$2"; shift 2 ;;
    --config-env=*) ENV="${1#*=}"; shift ;;
    *) shift ;;
  esac
done
SAMCONFIG="${KOE_SAMCONFIG:-samconfig.toml}"
read -r region reserved functions < <("${PYTHON:-python3}" scripts/reserved-concurrency.py \
  template.yaml "$SAMCONFIG" "$ENV") || exit 1
region="${region:-${AWS_REGION:-ap-northeast-1}}"
[ "$reserved" -gt 0 ] || exit 0
if ! quota="$(aws lambda get-account-settings --region "$region" \
  --query 'AccountLimit.ConcurrentExecutions' --output text)"; then
  echo "scripts/concurrency-check.sh: could not read the account's Lambda concurrency quota (above)" >&2
  exit 1
fi
needed=$((reserved + 100))
if [ "$quota" -lt "$needed" ]; then
  cat >&2 <<EOF
scripts/sam.sh: not deployed. The stack reserves $reserved concurrent executions ($functions), and
Lambda keeps 100 of the account's unreserved: it needs a concurrency quota of at least $needed in
$region, and the account's quota ("Concurrent executions", AWS Lambda, Service Quotas) is $quota.
Either ask Service Quotas for $needed or more, or add ReserveConcurrency=false to
parameter_overrides of [$ENV.deploy.parameters] in samconfig.toml (no function reserves any;
docs/deploy.md) and deploy again.
EOF
  exit 1
fi
echo "concurrency: the stack reserves $reserved of the quota of $quota in $region (100 stay unreserved)" >&2

#!/usr/bin/env bash
# Fails if a workspace member declares a dependency other than as `name.workspace = true` (or
# `name = { workspace = true }`): features, versions and paths are said once, in the root
# Cargo.toml's [workspace.dependencies], so that every cargo command of the test command
# resolves one feature set per dependency and no test binary rebuilds what another built.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while read -r manifest; do
  # Lines of the [*dependencies] tables that are not a bare workspace reference.
  found="$(awk '
    /^\[.*dependencies\./ { print FILENAME ":" FNR ": " $0; next }
    /^\[/ { deps = ($0 ~ /dependencies\]$/) ; next }
    deps && NF && $0 !~ /^#/ && $0 !~ /^[A-Za-z0-9_-]+\.workspace = true$/ &&
      $0 !~ /^[A-Za-z0-9_-]+ = \{ workspace = true \}$/ { print FILENAME ":" FNR ": " $0 }
  ' "$manifest")"
  if [ -n "$found" ]; then
    printf '%s\n' "$found" >&2
    bad=1
  fi
done < <(cargo metadata --no-deps --offline --format-version 1 |
  python3 -c 'import json, sys; [print(p["manifest_path"]) for p in json.load(sys.stdin)["packages"]]')
if [ "$bad" -ne 0 ]; then
  echo "one-feature-set.sh: declare these in the root Cargo.toml's [workspace.dependencies]" \
    "(with the union of the features every crate needs) and use \`name.workspace = true\`" >&2
  exit 1
fi

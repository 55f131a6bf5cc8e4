#!/usr/bin/env bash
# checkov (pinned, from PyPI into ~/.cache/koe/venv-checkov) on template.yaml, CloudFormation
# framework: fails on any check that fails and is not skipped. Each deliberate choice is a
# skip in the resource's Metadata (checkov: skip: id, comment), its one-line reason also in
# docs/security.md, "Choices we made" (shared/tests/it/template_choices.rs holds them equal).
#   scripts/checkov.sh
set -euo pipefail

CHECKOV_VERSION=3.3.30
cd "$(dirname "$0")/.."
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh
VENV="${KOE_CACHE_DIR:-$HOME/.cache/koe}/venv-checkov"
pip_venv "$VENV" checkov "$CHECKOV_VERSION" checkov -qx
# KOE_TOOLS_INSTALL_ONLY: install and stop (scripts/test.sh installs every tool at once, early).
[ -z "${KOE_TOOLS_INSTALL_ONLY:-}" ] || exit 0
exec "$VENV/bin/checkov" -f template.yaml --framework cloudformation --compact --quiet \
  --skip-download

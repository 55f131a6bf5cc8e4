#!/usr/bin/env bash
# Two common client generators on openapi.yaml, as an app team would run them: the run fails
# when either leaves out a documented response or schema, or the TypeScript does not type-check.
#
#   scripts/client-generators.sh   prints `client-generators: ...` counts; exit 1 on any loss
#
#   - openapi-python-client (pinned below): generates a client (no post hooks). Lost are the
#     responses it says it omits ("response will be omitted"), the schemas it says it removes
#     ("resulted in the removal of"), and any operation's status the generated module does not
#     parse (`response.status_code == N`); any other warning it prints fails too, and so does a
#     module that does not import or an `Error` whose unknown `code` does not parse.
#   - openapi-typescript (pinned below) writes the types, and `tsc --strict --noEmit` checks
#     them together with a file naming every component schema and every operation's status
#     and content type (`operations[id]["responses"][N]["content"][type]`): a name the
#     generator left out is a type error there, counted as lost.
#
# Installs both into ~/.cache/koe (a venv, an npm prefix; once, under scripts/build-cache.sh's
# `locked`). KOE_TOOLS_INSTALL_ONLY: install and stop (scripts/test.sh installs early).
set -euo pipefail

readonly PYTHON_CLIENT_VERSION="0.29.1"
readonly OPENAPI_TYPESCRIPT_VERSION="7.13.0"
readonly TYPESCRIPT_VERSION="5.9.3"

cd "$(dirname "$0")/.."
ROOT="$PWD"
CACHE="${KOE_CACHE_DIR:-$HOME/.cache/koe}"
# shellcheck source=scripts/build-cache.sh
source scripts/build-cache.sh

log() { printf 'client-generators.sh: %s\n' "$*" >&2; }

VENV="$CACHE/venv-openapi-python-client-$PYTHON_CLIENT_VERSION"
install_python_client() {
  if ! "$VENV/bin/openapi-python-client" --version 2>/dev/null |
    grep -q "version: $PYTHON_CLIENT_VERSION\$"; then
    log "installing openapi-python-client==$PYTHON_CLIENT_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
      "openapi-python-client==$PYTHON_CLIENT_VERSION"
  fi
}
NPM_PREFIX="$CACHE/npm-openapi-typescript-$OPENAPI_TYPESCRIPT_VERSION-typescript-$TYPESCRIPT_VERSION"
install_typescript() {
  if [ "$("$NPM_PREFIX/node_modules/.bin/openapi-typescript" --version 2>/dev/null)" != "v$OPENAPI_TYPESCRIPT_VERSION" ] ||
    [ "$("$NPM_PREFIX/node_modules/.bin/tsc" --version 2>/dev/null)" != "Version $TYPESCRIPT_VERSION" ]; then
    log "installing openapi-typescript@$OPENAPI_TYPESCRIPT_VERSION and typescript@$TYPESCRIPT_VERSION into $NPM_PREFIX"
    rm -rf "$NPM_PREFIX"
    mkdir -p "$NPM_PREFIX"
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --loglevel=error \
      "openapi-typescript@$OPENAPI_TYPESCRIPT_VERSION" "typescript@$TYPESCRIPT_VERSION" >&2
  fi
}
locked "$VENV" install_python_client
locked "$NPM_PREFIX" install_typescript
[ -z "${KOE_TOOLS_INSTALL_ONLY:-}" ] || exit 0

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# --- openapi-python-client -------------------------------------------------------------------
printf 'post_hooks: []\n' >"$WORK/python-client.yaml"
PY_RC=0
(cd "$WORK" && "$VENV/bin/openapi-python-client" generate --path "$ROOT/openapi.yaml" \
  --config "$WORK/python-client.yaml" --meta none --output-path "$WORK/koe_client" \
  >"$WORK/python.log" 2>&1) || PY_RC=$?
# Every module imports, and an error code this spec does not list parses (the set is open).
[ "$PY_RC" -eq 0 ] && "$VENV/bin/python" - "$WORK" >>"$WORK/python.log" 2>&1 <<'EOF' || PY_RC=1
import importlib, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import koe_client
for module in pkgutil.walk_packages(koe_client.__path__, "koe_client."):
    importlib.import_module(module.name)
from koe_client.models import Error
later = {"code": "A_CODE_ADDED_LATER", "message": "m", "error": "m"}
assert Error.from_dict(later).code == "A_CODE_ADDED_LATER", "an unknown code does not parse"
EOF

# --- openapi-typescript + tsc --strict ---------------------------------------------------------
TS_RC=0
mkdir -p "$WORK/ts"
"$NPM_PREFIX/node_modules/.bin/openapi-typescript" "$ROOT/openapi.yaml" -o "$WORK/ts/schema.ts" \
  >"$WORK/ts.log" 2>&1 || TS_RC=$?

# --- the counts --------------------------------------------------------------------------------
"$VENV/bin/python" - "$ROOT/openapi.yaml" "$WORK" "$PY_RC" "$TS_RC" \
  "$NPM_PREFIX/node_modules/.bin/tsc" "$PYTHON_CLIENT_VERSION" "$OPENAPI_TYPESCRIPT_VERSION" <<'EOF'
import json, os, re, subprocess, sys
from ruamel.yaml import YAML

spec_path, work, py_rc, ts_rc, tsc, py_version, ts_version = sys.argv[1:]
spec = YAML(typ="safe").load(open(spec_path, encoding="utf-8"))
methods = ["get", "put", "post", "delete", "patch"]

def resolve(response):
    ref = response.get("$ref")
    return spec["components"]["responses"][ref.rsplit("/", 1)[1]] if ref else response

operations = []  # (operationId, tag, "METHOD path", [(status, [content types])])
for path, item in spec["paths"].items():
    for method in methods:
        if method in item:
            op = item[method]
            statuses = [(str(s), sorted(resolve(r).get("content", {})))
                        for s, r in op["responses"].items()]
            operations.append((op["operationId"], op["tags"][0], f"{method.upper()} {path}", statuses))
schemas = sorted(spec["components"]["schemas"])
responses = sum(len(s) for *_, s in operations)
failures = []

# openapi-python-client: what it says it left out, and what its modules do not parse.
log = open(os.path.join(work, "python.log"), encoding="utf-8").read()
said_omitted = log.count("response will be omitted")
removed = []
for block in log.split("resulted in the removal of:")[1:]:
    for line in block.strip().splitlines():
        if not line.startswith("/components/schemas/"):
            break
        removed.append(line.rsplit("/", 1)[1])
warnings = log.count("WARNING parsing") + log.count("Unable to process schema")
snake = lambda s: re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
not_parsed = []
for op_id, tag, name, statuses in operations:
    module = os.path.join(work, "koe_client", "api", snake(tag), snake(op_id) + ".py")
    text = open(module, encoding="utf-8").read() if os.path.exists(module) else ""
    parsed = set(re.findall(r"response\.status_code == (\d+)", text))
    not_parsed += [f"{name} {s}" for s, _ in statuses if s not in parsed]
kept = responses - len(not_parsed)
print(f"client-generators: openapi.yaml: {len(operations)} operations, {responses} responses, "
      f"{len(schemas)} component schemas")
print(f"client-generators: openapi-python-client {py_version}: {kept} of {responses} responses "
      f"parsed, {said_omitted} said omitted, {len(removed)} schemas removed, {warnings} warnings")
if int(py_rc) != 0:
    failures.append("openapi-python-client did not generate a client whose modules import and parse an unknown code (its log below)")
if not_parsed:
    failures.append("responses the Python client does not parse: " + ", ".join(not_parsed))
if said_omitted or warnings:
    failures.append(f"openapi-python-client warned {warnings} times, omitting {said_omitted} responses (its log below)")
if removed:
    failures.append("schemas openapi-python-client removed: " + ", ".join(removed))

# openapi-typescript: every schema and response named in a file tsc --strict checks.
ts_dir = os.path.join(work, "ts")
lines = ['import type { components, operations } from "./schema";']
names = {}
for s in schemas:
    names[len(lines) + 1] = f"schema {s}"
    lines.append(f"export type S{len(lines)} = components[\"schemas\"][{json.dumps(s)}];")
for op_id, _, name, statuses in operations:
    for status, types in statuses:
        at = f"operations[{json.dumps(op_id)}][\"responses\"][{status}]"
        for t in types or [None]:
            names[len(lines) + 1] = f"{name} {status}" + (f" {t}" if t else "")
            lines.append(f"export type R{len(lines)} = {at}" + (f"[\"content\"][{json.dumps(t)}];" if t else ";"))
lost, ts_errors = set(), []
if int(ts_rc) == 0:
    open(os.path.join(ts_dir, "check.ts"), "w", encoding="utf-8").write("\n".join(lines) + "\n")
    run = subprocess.run([tsc, "--strict", "--noEmit", "--target", "es2022", "--module", "es2022",
                          "--moduleResolution", "bundler", "schema.ts", "check.ts"],
                         cwd=ts_dir, capture_output=True, text=True)
    for line in run.stdout.splitlines():
        m = re.match(r"check\.ts\((\d+),", line)
        if m and int(m.group(1)) in names:
            lost.add(names[int(m.group(1))])
        elif re.match(r"\S+\(\d+,\d+\): error", line):
            ts_errors.append(line)
    if run.returncode != 0 and not lost and not ts_errors:
        ts_errors.append(run.stdout + run.stderr)
else:
    failures.append("openapi-typescript failed: " + open(os.path.join(work, "ts.log")).read())
checked = len(names)
print(f"client-generators: openapi-typescript {ts_version}: {checked - len(lost)} of {checked} "
      f"schemas and response contents typed, {len(lost)} missing; tsc --strict: "
      f"{len(ts_errors)} other errors")
if lost:
    failures.append("missing from the TypeScript types: " + ", ".join(sorted(lost)))
if ts_errors:
    failures.append("tsc --strict:\n" + "\n".join(ts_errors))
if failures:
    if int(py_rc) != 0 or said_omitted or warnings or removed:
        print("--- openapi-python-client's log ---\n" + log, file=sys.stderr)
    for f in failures:
        print(f"client-generators: FAILED: {f}", file=sys.stderr)
    sys.exit(1)
print("client-generators: ok: both generators keep every response and schema")
EOF

#!/usr/bin/env bash
# Regenerates every client's code from protos/ (Python, Go, TypeScript).
# --check: regenerate into temporary directories and fail if anything committed is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}" scripts/gen_protos.sh "$@"
client/go/gen.sh "$@"
(cd client/ts && [[ -d node_modules ]] || npm ci --no-audit --no-fund --prefer-offline >/dev/null)
client/ts/gen.sh "$@"

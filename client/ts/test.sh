#!/usr/bin/env bash
# Installs the pinned dependencies from the lockfile, checks that the
# generated code is current, then type-checks and runs the tests (against a
# real ctxwarden server: CTXWARDEN_BIN, default <repo>/.venv/bin/ctxwarden).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --prefer-offline
./gen.sh --check
npm test

#!/usr/bin/env bash
# Installs the pinned dependencies from the lockfile, checks that the
# generated code is current, then type-checks and runs the tests (against a
# real ctxwarden server: CTXWARDEN_BIN, default <repo>/.venv/bin/ctxwarden).
# compat/agents-core-0.20 has its own lockfile: @openai/agents-core 0.20
# (the history-transaction API) needs openai 7, which declares Node >= 22, so
# it stays out of the main dev dependencies (0 engine warnings there; npm
# prints one for openai in that directory on Node 20, where it runs).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --prefer-offline
./gen.sh --check
npm test
(cd compat/agents-core-0.20 && npm ci --no-audit --no-fund --prefer-offline)
npm run test:compat

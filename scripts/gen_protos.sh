#!/usr/bin/env bash
# Regenerates the Python code for the ctxwarden.v1 contract from protos/.
# Usage: scripts/gen_protos.sh [--check]   (--check: fail if committed code is stale)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
# protoc finds the mypy plugins next to the interpreter.
export PATH="$(dirname "$(command -v "$PY")"):$PATH"
out_dir="server"
if [[ "${1:-}" == "--check" ]]; then
  out_dir="$(mktemp -d)"
  trap 'rm -rf "$out_dir"' EXIT
fi
mkdir -p "$out_dir/ctxwarden/v1"
"$PY" -m grpc_tools.protoc -I protos \
  --python_out="$out_dir" --grpc_python_out="$out_dir" \
  --mypy_out="$out_dir" --mypy_grpc_out="$out_dir" \
  protos/ctxwarden/v1/*.proto
if [[ "${1:-}" == "--check" ]]; then
  for f in "$out_dir"/ctxwarden/v1/*; do
    name="$(basename "$f")"
    if ! cmp -s "$f" "server/ctxwarden/v1/$name"; then
      echo "generated code is stale: server/ctxwarden/v1/$name (run scripts/gen_protos.sh)" >&2
      exit 1
    fi
  done
  echo "generated code is up to date"
fi

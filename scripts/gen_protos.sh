#!/usr/bin/env bash
# Regenerates the Python code for the ctxwarden.v1 contract from protos/, twice:
#   server/ctxwarden/v1/                  for the server (package ctxwarden.v1)
#   client/python/ctxwarden_client/v1/    for the client (package ctxwarden_client.v1),
#                                         so the client distribution needs no server code
# The client's copy is the same protoc output with its Python imports moved to
# ctxwarden_client.v1; the serialized descriptors are identical, so both copies
# can be imported in one process (they register the same .proto files).
# Usage: scripts/gen_protos.sh [--check]   (--check: fail if committed code is stale)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
# protoc finds the mypy plugins next to the interpreter.
export PATH="$(dirname "$(command -v "$PY")"):$PATH"
check=false
if [[ "${1:-}" == "--check" ]]; then
  check=true
fi

server_dir="server/ctxwarden/v1"
client_dir="client/python/ctxwarden_client/v1"
# What the client needs: the messages and the ContextService stub (the other
# *_pb2_grpc modules are empty: those .proto files define no service).
client_files=(
  context_service_pb2.py context_service_pb2.pyi
  context_service_pb2_grpc.py context_service_pb2_grpc.pyi
  message_pb2.py message_pb2.pyi
  session_pb2.py session_pb2.pyi
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/protoc" "$work/server" "$work/client"
"$PY" -m grpc_tools.protoc -I protos \
  --python_out="$work/protoc" --grpc_python_out="$work/protoc" \
  --mypy_out="$work/protoc" --mypy_grpc_out="$work/protoc" \
  protos/ctxwarden/v1/*.proto
cp "$work"/protoc/ctxwarden/v1/* "$work/server/"
for name in "${client_files[@]}"; do
  # Only Python module paths move: 'ctxwarden.v1.X_pb2' names and
  # 'from ctxwarden.v1 import'. Proto names (ctxwarden.v1.Session, the
  # /ctxwarden.v1.ContextService/... method paths) and the .proto file names
  # in the descriptors stay as they are.
  sed -E \
    -e 's/^from ctxwarden\.v1 import /from ctxwarden_client.v1 import /' \
    -e "s/'ctxwarden\.v1\.([A-Za-z0-9_]+_pb2)'/'ctxwarden_client.v1.\1'/" \
    -e 's#generated code in ctxwarden/v1/#generated code in ctxwarden_client/v1/#' \
    "$work/protoc/ctxwarden/v1/$name" >"$work/client/$name"
done

if ! $check; then
  mkdir -p "$server_dir" "$client_dir"
  cp "$work"/server/* "$server_dir/"
  cp "$work"/client/* "$client_dir/"
  exit 0
fi

stale=0
compare() {  # compare GENERATED_DIR COMMITTED_DIR
  local f name
  for f in "$1"/*; do
    name="$(basename "$f")"
    if ! cmp -s "$f" "$2/$name"; then
      echo "generated code is stale: $2/$name (run scripts/gen_protos.sh)" >&2
      stale=1
    fi
  done
  # Generated modules nothing generates any more.
  for f in "$2"/*_pb2*.py "$2"/*_pb2*.pyi; do
    [[ -e "$f" ]] || continue
    if [[ ! -e "$1/$(basename "$f")" ]]; then
      echo "generated code is stale: $f is not generated any more (delete it)" >&2
      stale=1
    fi
  done
}
compare "$work/server" "$server_dir"
compare "$work/client" "$client_dir"
if [[ $stale -ne 0 ]]; then
  exit 1
fi
echo "generated code is up to date (server and client)"

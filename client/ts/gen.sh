#!/usr/bin/env bash
# Generates the TypeScript code for the ctxwarden.v1 contract (and the vendored
# google.rpc status / error details) into src/gen/ with protoc-gen-es.
#
# Usage: ./gen.sh [--check]
#   --check  regenerate into a temp dir and fail if src/gen/ differs.
#
# protoc: the Python venv's grpc_tools (which bundles the well-known types),
# override with PROTOC="path/to/protoc" (a plain protoc must find the
# well-known types on its own include path). The plugin is the pinned
# @bufbuild/protoc-gen-es from node_modules/.bin (run `npm ci` first). Nothing
# is downloaded.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

plugin="$here/node_modules/.bin/protoc-gen-es"
if [[ ! -x "$plugin" ]]; then
  echo "gen.sh: $plugin not found: run 'npm ci' in client/ts first" >&2
  exit 1
fi
if [[ -n "${PROTOC:-}" ]]; then
  read -r -a protoc <<<"$PROTOC"
else
  protoc=("${PYTHON:-$repo/.venv/bin/python}" -m grpc_tools.protoc)
fi

out="src/gen"
if [[ "${1:-}" == "--check" ]]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--check]" >&2
  exit 2
else
  rm -rf "$out"
fi
mkdir -p "$out"

# Sorted, relative paths: the output depends only on the inputs and the
# pinned plugin version.
mapfile -t own < <(cd "$repo/protos" && LC_ALL=C ls ctxwarden/v1/*.proto)
mapfile -t vendored < <(cd protos-vendor && LC_ALL=C ls google/rpc/*.proto)

"${protoc[@]}" -I "$repo/protos" \
  --plugin=protoc-gen-es="$plugin" \
  --es_out="$out" \
  --es_opt=target=ts,import_extension=js \
  "${own[@]}"
"${protoc[@]}" -I protos-vendor \
  --plugin=protoc-gen-es="$plugin" \
  --es_out="$out" \
  --es_opt=target=ts,import_extension=js \
  "${vendored[@]}"

if [[ "${1:-}" == "--check" ]]; then
  if ! diff -r -u src/gen "$out" >&2; then
    echo "gen.sh: generated code in client/ts/src/gen is stale (run client/ts/gen.sh)" >&2
    exit 1
  fi
  echo "generated code is up to date"
fi

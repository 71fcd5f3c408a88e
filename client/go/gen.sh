#!/usr/bin/env bash
# Regenerates the Go code for the ctxwarden.v1 contract from ../../protos into
# ctxwardenv1/ (*.pb.go with protoc-gen-go, *_grpc.pb.go with protoc-gen-go-grpc).
#
# Usage: client/go/gen.sh [--check]
#   --check  regenerate into a temporary directory and fail if the committed
#            files in ctxwardenv1/ differ (or are missing / extra).
#
# Tools:
#   protoc              the repo venv's pinned grpcio-tools (pyproject [gen] extra):
#                       $PYTHON -m grpc_tools.protoc, PYTHON defaulting to <repo>/.venv/bin/python
#   protoc-gen-go,      the versions pinned in tools.sh, installed by `go install PKG@VERSION`
#   protoc-gen-go-grpc  from the Go module proxy into a cache (see tools.sh) when missing
# Pinned protoc and plugins, a sorted proto list and a fixed include path: same
# inputs, same bytes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
module="github.com/ctxwarden/ctxwarden/client/go"
pkg_dir="ctxwardenv1"
# shellcheck source=tools.sh
source "$here/tools.sh"

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

PY="${PYTHON:-$repo/.venv/bin/python}"
if ! "$PY" -c "import grpc_tools.protoc" >/dev/null 2>&1; then
  echo "gen.sh: $PY cannot import grpc_tools (pip install -e '.[gen]' in the repo venv)" >&2
  exit 1
fi
GEN_GO="$(go_tool "$PROTOC_GEN_GO_PKG" "$PROTOC_GEN_GO_VERSION")" || exit 1
GEN_GO_GRPC="$(go_tool "$PROTOC_GEN_GO_GRPC_PKG" "$PROTOC_GEN_GO_GRPC_VERSION")" || exit 1

out_root="$here"
if [[ $check -eq 1 ]]; then
  out_root="$(mktemp -d)"
  trap 'rm -rf "$out_root"' EXIT
else
  # Start clean so a proto file that was removed leaves no stale Go file behind.
  rm -f "$here/$pkg_dir"/*.pb.go
fi
mkdir -p "$out_root/$pkg_dir"

cd "$repo/protos"
mapfile -t protos < <(LC_ALL=C ls ctxwarden/v1/*.proto | LC_ALL=C sort)
# python -m grpc_tools.protoc adds its bundled google/protobuf/*.proto to the include path.
"$PY" -m grpc_tools.protoc -I . \
  --plugin=protoc-gen-go="$GEN_GO" \
  --plugin=protoc-gen-go-grpc="$GEN_GO_GRPC" \
  --go_out="$out_root" --go_opt=module="$module" \
  --go-grpc_out="$out_root" --go-grpc_opt=module="$module" \
  "${protos[@]}"

if [[ $check -eq 1 ]]; then
  status=0
  if ! diff -r -u "$here/$pkg_dir" "$out_root/$pkg_dir" >/dev/null 2>&1; then
    diff -r -q "$here/$pkg_dir" "$out_root/$pkg_dir" >&2 || true
    echo "generated Go code is stale: client/go/$pkg_dir (run client/go/gen.sh)" >&2
    status=1
  fi
  [[ $status -eq 0 ]] && echo "generated Go code is up to date"
  exit $status
fi
echo "generated: $(cd "$here" && ls "$pkg_dir"/*.pb.go | tr '\n' ' ')"

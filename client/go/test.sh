#!/usr/bin/env bash
# Checks and tests the Go client in module mode:
#   gen.sh --check, go.mod/go.sum tidy, gofmt, go vet, go test -race (starts real
#   ctxwarden servers from <repo>/.venv/bin/ctxwarden or $CTXWARDEN_BIN),
#   govulncheck, go build of the examples; then tidy, gofmt, go vet and
#   go test -race of the framework adapter modules adk/ and langchaingo/.
# Extra arguments go to `go test` (e.g. -v, -run TestRunExample).
#
# Needs Go (the version of go.mod's go line or newer), gcc for -race, and the Go
# module proxy (GOPROXY) for the modules of go.sum and the pinned tools of
# tools.sh, which are installed into a cache on first use.
#
# govulncheck reads the Go vulnerability database, https://vuln.go.dev by default.
#   CTXWARDEN_GOVULNCHECK=auto     (default) when that database cannot be reached, say
#                                  so ("govulncheck: SKIPPED") and go on; findings fail
#   CTXWARDEN_GOVULNCHECK=require  an unreachable database fails too
#   CTXWARDEN_GOVULNCHECK=off      do not run it
#   CTXWARDEN_GOVULNDB=URL         another database (govulncheck -db: an https mirror,
#                                  or file:///DIR of a local copy)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools.sh
source "$here/tools.sh"

if ! command -v go >/dev/null 2>&1; then
  echo "test.sh: go is not installed (https://go.dev/doc/install)" >&2
  exit 1
fi
vulncheck="${CTXWARDEN_GOVULNCHECK:-auto}"
case "$vulncheck" in
  auto | require | off) ;;
  *) echo "test.sh: CTXWARDEN_GOVULNCHECK must be auto, require or off, not $vulncheck" >&2; exit 2 ;;
esac
export GO111MODULE=on GOWORK=off CGO_ENABLED=1
cc="$(go env CC)"
if ! command -v "${cc%% *}" >/dev/null 2>&1; then
  echo "test.sh: go test -race needs cgo and a C compiler ($cc): apt-get install -y gcc" >&2
  exit 1
fi
cd "$here"

protobuf="$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
echo "== $(go version); grpc-go $(go list -m -f '{{.Version}}' google.golang.org/grpc), protobuf $protobuf"
if [[ "$protobuf" != "$PROTOC_GEN_GO_VERSION" ]]; then
  echo "test.sh: go.mod has google.golang.org/protobuf $protobuf but tools.sh pins protoc-gen-go" \
    "$PROTOC_GEN_GO_VERSION: keep them equal (then run gen.sh)" >&2
  exit 1
fi
echo "== gen.sh --check"
"$here/gen.sh" --check
echo "== go mod tidy -diff"
if ! go mod tidy -diff; then
  echo "go.mod / go.sum are not tidy: run go mod tidy in client/go" >&2
  exit 1
fi
echo "== gofmt -l"
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "gofmt needed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "== go vet ./..."
go vet ./...
echo "== go test -race ./..."
go test -race -count=1 "$@" ./...

if [[ "$vulncheck" == off ]]; then
  echo "== govulncheck: off (CTXWARDEN_GOVULNCHECK=off)"
else
  govulncheck="$(go_tool "$GOVULNCHECK_PKG" "$GOVULNCHECK_VERSION")"
  db_args=()
  [[ -n "${CTXWARDEN_GOVULNDB:-}" ]] && db_args=(-db "$CTXWARDEN_GOVULNDB")
  echo "== govulncheck $GOVULNCHECK_VERSION ${db_args[*]:+${db_args[*]} }./..."
  errors="$(mktemp)"
  trap 'rm -f "$errors"' EXIT
  rc=0
  "$govulncheck" "${db_args[@]}" ./... 2>"$errors" || rc=$?
  if [[ $rc -ne 0 ]] && grep -q 'fetching vulnerabilities' "$errors" && [[ "$vulncheck" == auto ]]; then
    # Exit 1 with this message: the database did not answer (no network to it).
    echo "govulncheck: SKIPPED: the vulnerability database is unreachable: $(cat "$errors")" >&2
    echo "  (CTXWARDEN_GOVULNCHECK=require makes this fail; CTXWARDEN_GOVULNDB=URL names another database)" >&2
  elif [[ $rc -ne 0 ]]; then
    cat "$errors" >&2
    echo "govulncheck failed (exit $rc; 3 means vulnerabilities were found)" >&2
    exit 1
  fi
fi

echo "== go build ./example/..."
go build ./example/...

# The framework adapters: nested modules of their own (adk: Google ADK Go,
# langchaingo: LangChainGo), each requiring this module through a replace.
for adapter in adk langchaingo; do
  echo "== $adapter: go mod tidy -diff, gofmt -l, go vet, go test -race"
  (
    cd "$here/$adapter"
    if ! go mod tidy -diff; then
      echo "$adapter/go.mod / go.sum are not tidy: run go mod tidy in client/go/$adapter" >&2
      exit 1
    fi
    unformatted="$(gofmt -l .)"
    if [[ -n "$unformatted" ]]; then
      echo "gofmt needed:" >&2
      echo "$unformatted" >&2
      exit 1
    fi
    go vet ./...
    go test -race -count=1 "$@" ./...
  )
done
echo "ok: Go client checks passed"

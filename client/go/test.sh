#!/usr/bin/env bash
# Checks and tests the Go client offline, in GOPATH mode, against the Go
# packages Debian installs under /usr/share/gocode:
#   gen.sh --check, gofmt, go vet, go test (starts real ctxwarden servers from
#   <repo>/.venv/bin/ctxwarden or $CTXWARDEN_BIN), go build of the example.
# Extra arguments go to `go test` (e.g. -race, -v, -run TestRunExample).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
import_path="github.com/ctxwarden/ctxwarden/client/go"
sys_gopath="${CTXWARDEN_SYS_GOPATH:-/usr/share/gocode}"
apt_cmd="apt-get install -y golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev golang-google-genproto-dev protoc-gen-go protoc-gen-go-grpc"

if ! command -v go >/dev/null 2>&1; then
  echo "test.sh: go is not installed; install the Debian packages with:" >&2
  echo "  $apt_cmd" >&2
  exit 1
fi
missing=()
for pkg in google.golang.org/grpc google.golang.org/protobuf \
  google.golang.org/genproto/googleapis/rpc/errdetails github.com/golang/protobuf/proto; do
  [[ -d "$sys_gopath/src/$pkg" ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "test.sh: missing Go packages under $sys_gopath/src: ${missing[*]}; install them with:" >&2
  echo "  $apt_cmd" >&2
  exit 1
fi
# grpc-go marshals through github.com/golang/protobuf. Its v1.3 (Debian package
# golang-github-golang-protobuf-1-3-dev, the default pick of golang-google-grpc-dev)
# predates the APIv2 runtime and panics on protoc-gen-go v1.2x messages;
# v1.5 (golang-github-golang-protobuf-1-5-dev) is built on it.
if ! grep -qs '"google.golang.org/protobuf/' "$sys_gopath"/src/github.com/golang/protobuf/proto/*.go; then
  echo "test.sh: $sys_gopath has github.com/golang/protobuf v1.3, which cannot marshal the" >&2
  echo "generated (APIv2) messages; install v1.5 (it replaces v1.3):" >&2
  echo "  apt-get install -y golang-github-golang-protobuf-1-5-dev" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gopath/src/$(dirname "$import_path")"
ln -s "$here" "$work/gopath/src/$import_path"

export GO111MODULE=off GOFLAGS= GOPROXY=off
export GOPATH="$work/gopath:$sys_gopath"
if [[ -z "${GOCACHE:-}" && -z "${HOME:-}" && -z "${XDG_CACHE_HOME:-}" ]]; then
  export GOCACHE="$work/gocache"
fi
# grpc-go < 1.40 (Debian ships 1.33) ignores service-config retry policies
# unless this is set; TestRetryUnavailable exercises Dial's retry policy.
export GRPC_GO_RETRY=on

echo "== $(go version); grpc-go $(sed -n 's/^const Version = "\(.*\)"/\1/p' "$sys_gopath/src/google.golang.org/grpc/version.go")"
echo "== gen.sh --check"
"$here/gen.sh" --check

# Work through the symlink so the go tool sees the import path.
cd "$work/gopath/src/$import_path"
echo "== gofmt"
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "gofmt needed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "== go vet ./..."
go vet ./...
echo "== go test ./..."
go test -count=1 "$@" ./...
echo "== go build ./example"
go build -o "$work/example" ./example
echo "ok: Go client checks passed"

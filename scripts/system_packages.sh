#!/usr/bin/env bash
# The system (Debian) packages the test suite needs beyond what scripts/test.sh installs into
# .venv and node_modules itself.
#
# Usage: scripts/system_packages.sh          print the missing ones, one per line (exit 0)
#        scripts/system_packages.sh --check  name the missing ones and the apt-get command
#                                            that installs them on stderr; exit 1 if any
#        scripts/system_packages.sh --all    print every package the suite needs
#
#   python3-venv                           the .venv (Python >= 3.11)
#   mariadb-server                         mariadbd and mariadb-install-db for the private
#                                          server of the database outage tests (needed when
#                                          CTXWARDEN_TEST_MYSQL_URL is set)
#   postgresql                             initdb and postgres for the private server of the
#                                          PostgreSQL outage tests (needed when
#                                          CTXWARDEN_TEST_POSTGRES_URL is set)
#   galera-4 rsync                         the Galera cluster tests (scripts/galera.sh; needed
#                                          when CTXWARDEN_TEST_GALERA is set)
#   golang-go golang-google-grpc-dev       the Go client's tests, offline in GOPATH mode
#   golang-github-golang-protobuf-1-5-dev  (v1.5: the v1.3 grpc-go pulls in by default
#   golang-google-protobuf-dev              cannot marshal APIv2 messages)
#   golang-google-genproto-dev
#   protoc-gen-go protoc-gen-go-grpc       the Go code freshness check (client/go/gen.sh)
#   kubectl                                tests/deploy renders the manifests with kustomize
#                                          (kubectl >= 1.27, from the Kubernetes apt repository)
#   nodejs npm                             the contract check (buf), the TypeScript client and
#                                          the pi parity tests (Node >= 20.18.1)
#   chromium chromium-driver               the web console's browser tests (Playwright drives
#                                          /usr/bin/chromium; it downloads no browser)
set -euo pipefail

all=(python3-venv mariadb-server postgresql galera-4 rsync golang-go golang-google-grpc-dev
  golang-github-golang-protobuf-1-5-dev golang-google-protobuf-dev golang-google-genproto-dev
  protoc-gen-go protoc-gen-go-grpc kubectl nodejs npm chromium chromium-driver)
min_node=20.18.1

mode="${1:-}"
case "$mode" in
  "" | --check) ;;
  --all) printf '%s\n' "${all[@]}"; exit 0 ;;
  *) echo "usage: $0 [--check | --all]" >&2; exit 2 ;;
esac

gocode="${CTXWARDEN_SYS_GOPATH:-/usr/share/gocode}/src"
need=()
have() { command -v "$1" >/dev/null 2>&1; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [[ ! -x "$repo/.venv/bin/python" ]]; then
  "${PYTHON_BIN:-python3}" -c "import ensurepip, venv" >/dev/null 2>&1 || need+=(python3-venv)
fi
if [[ -n "${CTXWARDEN_TEST_MYSQL_URL:-}" ]]; then
  if ! { have mariadbd || [[ -x /usr/sbin/mariadbd ]]; } || ! have mariadb-install-db; then
    need+=(mariadb-server)
  fi
fi
if [[ -n "${CTXWARDEN_TEST_POSTGRES_URL:-}" ]]; then
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
fi
if [[ -n "${CTXWARDEN_TEST_GALERA:-}" ]]; then
  if ! { have mariadbd || [[ -x /usr/sbin/mariadbd ]]; } || ! have mariadb-install-db; then
    [[ " ${need[*]} " == *" mariadb-server "* ]] || need+=(mariadb-server)
  fi
  [[ -r "${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}" ]] || need+=(galera-4)
  have rsync || need+=(rsync)
fi
have go || need+=(golang-go)
[[ -d "$gocode/google.golang.org/grpc" ]] || need+=(golang-google-grpc-dev)
# github.com/golang/protobuf v1.5 is built on google.golang.org/protobuf; v1.3 is not.
grep -qs '"google.golang.org/protobuf/' "$gocode"/github.com/golang/protobuf/proto/*.go ||
  need+=(golang-github-golang-protobuf-1-5-dev)
[[ -d "$gocode/google.golang.org/protobuf/proto" ]] || need+=(golang-google-protobuf-dev)
[[ -d "$gocode/google.golang.org/genproto/googleapis/rpc/errdetails" ]] ||
  need+=(golang-google-genproto-dev)
have protoc-gen-go || need+=(protoc-gen-go)
have protoc-gen-go-grpc || need+=(protoc-gen-go-grpc)
have kubectl || need+=(kubectl)
old_node=""
if ! have node; then
  need+=(nodejs)
else
  node_version="$(node -p 'process.versions.node' 2>/dev/null || echo 0)"
  if [[ "$(printf '%s\n' "$min_node" "$node_version" | sort -V | head -n1)" != "$min_node" ]]; then
    need+=(nodejs)
    old_node="$node_version"
  fi
fi
have npm || need+=(npm)
[[ -x /usr/bin/chromium ]] || need+=(chromium)
have chromedriver || need+=(chromium-driver)

if [[ "$mode" != --check ]]; then
  if (( ${#need[@]} )); then printf '%s\n' "${need[@]}"; fi
  exit 0
fi
(( ${#need[@]} )) || exit 0
echo "missing system packages: ${need[*]}" >&2
if [[ -n "$old_node" ]]; then
  echo "  (node $old_node is too old: the tests need Node >= $min_node)" >&2
fi
echo "install them with (as root, after apt-get update):" >&2
echo "  apt-get install -y ${need[*]}" >&2
exit 1

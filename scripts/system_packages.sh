#!/usr/bin/env bash
# The system (Debian) packages the test suite needs beyond what scripts/test.sh installs into
# .venv, node_modules and the Go module cache itself, and the toolchains the machine must bring.
#
# Usage: scripts/system_packages.sh          print the missing Debian packages, one per line (exit 0)
#        scripts/system_packages.sh --check  name what is missing (packages and the apt-get
#                                            command that installs them, toolchains and where
#                                            they come from) on stderr; exit 1 if anything is
#        scripts/system_packages.sh --all    print every Debian package the suite needs
#
# Debian packages (scripts/services.sh installs the database ones and starts the servers):
#   python3-venv                 the .venv (Python >= 3.11)
#   mariadb-server               the MariaDB server behind CTXWARDEN_TEST_MYSQL_URL, and
#                                mariadbd/mariadb-install-db for the private servers of the
#                                database outage tests
#   postgresql                   the PostgreSQL server behind CTXWARDEN_TEST_POSTGRES_URL, and
#                                initdb/postgres for the private server of its outage tests
#   galera-4 rsync               the Galera cluster tests (scripts/galera.sh; with
#                                CTXWARDEN_TEST_GALERA set)
#   chromium chromium-driver     the web console's browser tests (Playwright drives
#                                /usr/bin/chromium; it downloads no browser)
# Toolchains that come with the machine (not Debian packages; named when missing):
#   go >= 1.26                   the Go client, in module mode (go.dev/dl; modules from the proxy)
#   node >= 20.18.1 with npm     the contract check (buf), the TypeScript client, the pi parity
#                                tests (nodejs.org or NodeSource packages; Debian 12's is 18)
#   kubectl >= 1.27              tests/deploy renders the manifests with kustomize
#                                (the Kubernetes apt repository)
#   java >= 17 with mvn          the Java client and its Spring AI and LangChain4j adapters
#                                (client/java; artifacts from Maven Central)
set -euo pipefail

all=(python3-venv mariadb-server postgresql galera-4 rsync chromium chromium-driver)
min_node=20.18.1
min_go=1.26
min_kubectl=1.27

mode="${1:-}"
case "$mode" in
  "" | --check) ;;
  --all) printf '%s\n' "${all[@]}"; exit 0 ;;
  *) echo "usage: $0 [--check | --all]" >&2; exit 2 ;;
esac

need=()
tools=()
have() { command -v "$1" >/dev/null 2>&1; }
at_least() { [[ "$(printf '%s\n' "$1" "$2" | sort -V | head -n1)" == "$1" ]]; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [[ ! -x "$repo/.venv/bin/python" ]]; then
  "${PYTHON_BIN:-python3}" -c "import ensurepip, venv" >/dev/null 2>&1 || need+=(python3-venv)
fi
has_mariadb() { { have mariadbd || [[ -x /usr/sbin/mariadbd ]]; } && have mariadb-install-db; }
if [[ -n "${CTXWARDEN_TEST_MYSQL_URL:-}" || -n "${CTXWARDEN_TEST_GALERA:-}" ]]; then
  has_mariadb || need+=(mariadb-server)
fi
if [[ -n "${CTXWARDEN_TEST_POSTGRES_URL:-}" ]]; then
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
fi
if [[ -n "${CTXWARDEN_TEST_GALERA:-}" ]]; then
  [[ -r "${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}" ]] || need+=(galera-4)
  have rsync || need+=(rsync)
fi
# A partial run (CTXWARDEN_TEST_PARTS, e.g. python; see docs/testing.md) needs only its parts'
# toolchains and no Chromium (the console's browser tests skip without it); a full run, as in
# CI, needs everything.
parts=",${CTXWARDEN_TEST_PARTS:-python,ts,go,java},"
if [[ -z "${CTXWARDEN_TEST_PARTS:-}" ]]; then
  [[ -x /usr/bin/chromium ]] || need+=(chromium)
  have chromedriver || need+=(chromium-driver)
fi

if [[ "$parts" != *",go,"* ]]; then
  :
elif ! have go; then
  tools+=("go >= $min_go (not found; https://go.dev/dl)")
else
  go_version="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
  at_least "$min_go" "${go_version:-0}" || tools+=("go >= $min_go (found $go_version)")
fi
if ! have node; then
  tools+=("node >= $min_node (not found; nodejs.org or NodeSource)")
else
  node_version="$(node -p 'process.versions.node' 2>/dev/null || echo 0)"
  at_least "$min_node" "$node_version" || tools+=("node >= $min_node (found $node_version)")
fi
have npm || tools+=("npm (comes with node)")
if ! have kubectl; then
  tools+=("kubectl >= $min_kubectl (not found; the Kubernetes apt repository)")
else
  kubectl_version="$(kubectl version --client 2>/dev/null | sed -n 's/^Client Version: v\([0-9.]*\).*/\1/p')"
  at_least "$min_kubectl" "${kubectl_version:-0}" ||
    tools+=("kubectl >= $min_kubectl (found ${kubectl_version:-unknown})")
fi

if [[ "$parts" != *",java,"* ]]; then
  :
elif ! have java || ! have mvn; then
  tools+=("java >= 17 and mvn (client/java)")
else
  java_major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
  (( ${java_major:-0} >= 17 )) || tools+=("java >= 17 (found ${java_major:-unknown})")
fi

if [[ "$mode" != --check ]]; then
  if (( ${#need[@]} )); then printf '%s\n' "${need[@]}"; fi
  exit 0
fi
(( ${#need[@]} + ${#tools[@]} )) || exit 0
if (( ${#need[@]} )); then
  echo "missing system packages: ${need[*]}" >&2
  echo "install them with (as root, after apt-get update), or run scripts/services.sh for the databases:" >&2
  echo "  apt-get install -y ${need[*]}" >&2
fi
for tool in "${tools[@]}"; do echo "missing toolchain: $tool" >&2; done
exit 1

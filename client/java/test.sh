#!/usr/bin/env bash
# Builds and tests the Java client and its adapters: mvn -B -ntp verify in client/java (code generated
# from ../../protos, then JUnit 5 tests against real ctxwarden servers started from
# $CTXWARDEN_BIN or <repo>/.venv/bin/ctxwarden).
#
# Needs a JDK 17+ and Maven 3.8+. Maven first runs offline (-o), which succeeds when the local
# repository already has every plugin and dependency; when something is missing it runs again
# with Maven Central. CTXWARDEN_MAVEN_OFFLINE=0 skips the offline try. Extra arguments go to
# Maven (e.g. -Dtest=ClientTest -Dsurefire.failIfNoSpecifiedTests=false).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test.sh: $tool is not installed (a JDK 17+ and Maven 3.8+: apt-get install -y openjdk-17-jdk-headless maven)" >&2
    exit 1
  fi
done
echo "== $(java -version 2>&1 | head -1); $(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g')"

mvn_args=(-B -ntp -Dstyle.color=never verify "$@")
if [[ "${CTXWARDEN_MAVEN_OFFLINE:-1}" != "0" ]]; then
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  echo "== mvn -o ${mvn_args[*]}"
  if mvn -o "${mvn_args[@]}" 2>&1 | tee "$log"; then
    echo "ok: Java client checks passed"
    exit 0
  fi
  # Only a missing artifact is worth a second, online run; a test failure is final.
  if ! grep -qE "offline mode|has not been downloaded from it before|Could not resolve|could not be resolved|Cannot access" "$log"; then
    exit 1
  fi
  echo "== something is missing from the local Maven repository: resolving from Maven Central"
fi
echo "== mvn ${mvn_args[*]}"
mvn "${mvn_args[@]}"
echo "ok: Java client checks passed"

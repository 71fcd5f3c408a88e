#!/usr/bin/env bash
# Installs (from Debian's packages) and starts the database servers the test suite and the
# README use, on loopback:
#   mysql+aiomysql://root@127.0.0.1:3306/test            MariaDB, root over TCP, no password
#   postgresql+asyncpg://postgres@127.0.0.1:5432/test     PostgreSQL, trust on loopback
#
# Idempotent: a server that already answers is left alone (never stopped or restarted);
# otherwise what is missing is installed (mariadb-server, galera-4, rsync, postgresql) and
# the server is started and prepared for the URL above. Waits until both answer, then says
# in one line each what it did. Needs root for the installation and the first start.
#
# Usage: scripts/services.sh [mariadb] [postgres]     (both by default)
set -euo pipefail

WAIT_SECONDS="${SERVICES_WAIT_SECONDS:-60}"
MYSQL_PORT=3306
PG_PORT=5432

die() { echo "services.sh: $*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

apt_updated=0
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  [[ "$(id -u)" == 0 ]] || die "install ${missing[*]} first (as root: apt-get install -y ${missing[*]})"
  if ((apt_updated == 0)); then
    apt-get update -qq >/dev/null || die "apt-get update failed"
    apt_updated=1
  fi
  # policy-rc.d keeps the packages' maintainer scripts from starting servers themselves:
  # this script starts them, the same way on every machine.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/tmp/services-apt.log 2>&1 || {
    ((created_policy)) && rm -f "$policy"
    die "apt-get install ${missing[*]} failed; see /tmp/services-apt.log"
  }
  ((created_policy)) && rm -f "$policy"
  installed+=("${missing[@]}")
}

wait_for() {
  local what="$1"; shift
  local deadline=$((SECONDS + WAIT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what did not answer within ${WAIT_SECONDS}s"
    sleep 0.5
  done
}

# -- MariaDB -------------------------------------------------------------------------------

mysql_tcp_ok() {
  mariadb --protocol=tcp --host=127.0.0.1 --port="$MYSQL_PORT" --user=root \
    --connect-timeout=2 -e "SELECT 1" test
}

mariadb_service() {
  local started=1
  installed=()
  if have mariadb && mysql_tcp_ok >/dev/null 2>&1; then
    echo "mariadb: already answering at 127.0.0.1:$MYSQL_PORT (left alone)"
    return 0
  fi
  apt_install mariadb-server mariadb-client galera-4 rsync
  if mariadb-admin --protocol=socket --user=root ping >/dev/null 2>&1 ||
    mariadb-admin --protocol=tcp --host=127.0.0.1 --port="$MYSQL_PORT" ping >/dev/null 2>&1; then
    started=0 # running, but not yet ready for root over TCP: only prepare it
  else
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    if [[ ! -d /var/lib/mysql/mysql ]]; then
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/tmp/services-mariadb-init.log 2>&1 ||
        die "mariadb-install-db failed; see /tmp/services-mariadb-init.log"
    fi
    # Detached from this shell: the server outlives the script.
    setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --port="$MYSQL_PORT" \
      >>/tmp/services-mariadb.log 2>&1 </dev/null &
    wait_for "MariaDB (socket)" mariadb-admin --protocol=socket --user=root ping
  fi
  # Debian's root@localhost logs in through the unix socket only; the URLs log in over TCP
  # without a password (a loopback test server, never a production one).
  mariadb --protocol=socket --user=root <<'SQL' || die "could not prepare root over TCP (socket login failed)"
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
CREATE DATABASE IF NOT EXISTS test;
SQL
  wait_for "MariaDB (root over TCP)" mysql_tcp_ok
  local did="prepared root over TCP and database test"
  ((started)) && did="started, $did"
  ((${#installed[@]})) && did="installed ${installed[*]}; $did"
  echo "mariadb: $did at 127.0.0.1:$MYSQL_PORT"
}

# -- PostgreSQL ----------------------------------------------------------------------------

pg_tcp_ok() {
  psql "host=127.0.0.1 port=$PG_PORT user=postgres dbname=test connect_timeout=2" -Atqc "SELECT 1"
}

pg_version() { ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n1; }

postgres_service() {
  local started=1 changed_hba=0
  installed=()
  if have psql && pg_tcp_ok >/dev/null 2>&1; then
    echo "postgres: already answering at 127.0.0.1:$PG_PORT (left alone)"
    return 0
  fi
  [[ -n "$(pg_version)" ]] || apt_install postgresql
  have psql || apt_install postgresql-client
  local version conf_dir hba
  version="$(pg_version)"
  conf_dir="/etc/postgresql/$version/main"
  [[ -d "$conf_dir" ]] || pg_createcluster "$version" main >/dev/null ||
    die "pg_createcluster $version main failed"
  hba="$conf_dir/pg_hba.conf"
  # Trust on loopback, ahead of Debian's scram-sha-256 lines (the first match wins).
  if ! grep -q '^# ctxwarden: trust on loopback' "$hba"; then
    local tmp
    tmp="$(mktemp)"
    {
      echo "# ctxwarden: trust on loopback (test server; scripts/services.sh)"
      echo "host    all             all             127.0.0.1/32            trust"
      echo "host    all             all             ::1/128                 trust"
      cat "$hba"
    } >"$tmp"
    cat "$tmp" >"$hba" && rm -f "$tmp"
    changed_hba=1
  fi
  if pg_isready --host=127.0.0.1 --port="$PG_PORT" --quiet 2>/dev/null; then
    started=0
    # Running already: a reload (not a restart) picks up the new pg_hba.conf.
    ((changed_hba)) && su postgres -c "psql -Atqc 'SELECT pg_reload_conf()'" >/dev/null
  else
    pg_ctlcluster "$version" main start || die "pg_ctlcluster $version main start failed"
  fi
  wait_for "PostgreSQL" pg_isready --host=127.0.0.1 --port="$PG_PORT" --quiet
  psql "host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres" -Atqc \
    "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
    psql "host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres" -qc "CREATE DATABASE test" ||
    die "could not create database test"
  wait_for "PostgreSQL (postgres over TCP)" pg_tcp_ok
  local did="trust on loopback and database test"
  ((started)) && did="started $version/main, $did"
  ((${#installed[@]})) && did="installed ${installed[*]}; $did"
  echo "postgres: $did at 127.0.0.1:$PG_PORT"
}

want=("$@")
((${#want[@]})) || want=(mariadb postgres)
for service in "${want[@]}"; do
  case "$service" in
    mariadb | mysql) mariadb_service ;;
    postgres | postgresql) postgres_service ;;
    *) die "unknown service '$service' (mariadb, postgres)" ;;
  esac
done

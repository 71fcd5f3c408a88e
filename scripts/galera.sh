#!/usr/bin/env bash
# A private 3-node MariaDB Galera cluster on loopback ports, for tests and trials.
#
# Usage: scripts/galera.sh start  DIR [NODE...]  start the cluster (or only the named nodes,
#                                                1-3): the first start initialises DIR,
#                                                picks free ports and bootstraps node 1;
#                                                later a stopped or killed node rejoins
#        scripts/galera.sh stop   DIR [NODE...]  shut nodes down cleanly (all by default)
#        scripts/galera.sh kill   DIR NODE...    SIGKILL nodes (a crash, for failover tests)
#        scripts/galera.sh status DIR            one line per node: port, pid, wsrep state
#        scripts/galera.sh urls   DIR            the SQLAlchemy URL of each node, one a line
#
# Everything lives under DIR: node<N>/data, node<N>/error.log, node<N>/server.pid and
# DIR/ports (the ports chosen on the first start, kept across restarts). The servers run
# with --no-defaults (no system configuration applies), listen on 127.0.0.1 only, use
# root without a password and small buffers (a test machine, not production). State
# transfers use rsync (SST) or the gcache (IST after a short absence); no network access.
#
# Environment: GALERA_SYNC_WAIT (wsrep_sync_wait of every node, default 1: a read waits
# until the node has applied every write committed anywhere before it, see the
# operations guide), GALERA_PROVIDER (default /usr/lib/galera/libgalera_smm.so),
# GALERA_TIMEOUT (seconds a node may take to reach Synced, default 120), GALERA_USER (the
# user the servers run as when started by root, default mysql).
set -euo pipefail

NODES=(1 2 3)
PROVIDER="${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}"
TIMEOUT="${GALERA_TIMEOUT:-120}"
SYNC_WAIT="${GALERA_SYNC_WAIT:-1}"

die() { echo "galera.sh: $*" >&2; exit 1; }
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

find_bin() {
  local name="$1"; shift
  command -v "$name" 2>/dev/null && return 0
  local p
  for p in "$@"; do [[ -x "$p" ]] && { echo "$p"; return 0; }; done
  die "$name not found: install the Debian packages mariadb-server and galera-4"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# As root, the servers run as an unprivileged user (GALERA_USER, default mysql): the rsync
# daemon of a state transfer started by root drops to "nobody" and could not write the
# joiner's data directory.
RUN_AS=""
if [[ "$(id -u)" == 0 ]]; then RUN_AS="${GALERA_USER:-mysql}"; fi
user_args() { if [[ -n "$RUN_AS" ]]; then echo "--user=$RUN_AS"; fi; }

# -- per-node helpers --------------------------------------------------------------------

load_ports() {
  [[ -f "$DIR/ports" ]] || return 1
  # shellcheck disable=SC1091
  source "$DIR/ports"
}

make_ports() {
  # Four ports per node: SQL, group communication, IST, SST (rsync).
  local n out=""
  for n in "${NODES[@]}"; do
    out+="SQL_$n=$(free_port) GCOMM_$n=$(free_port) IST_$n=$(free_port) SST_$n=$(free_port)"$'\n'
  done
  printf '%s' "$out" | tr ' ' '\n' >"$DIR/ports"
}

port() { local var="$1_$2"; echo "${!var}"; }
node_dir() { echo "$DIR/node$1"; }
alive() {  # a process that is not a zombie (a killed node may wait a while to be reaped)
  local stat
  stat="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [[ -n "$stat" && "$stat" != Z* ]]
}
pid_of() {
  local f; f="$(node_dir "$1")/server.pid"
  [[ -s "$f" ]] && alive "$(cat "$f")" && cat "$f"
}

sql() {  # sql NODE STATEMENT: one value-per-line answer, or nothing when the node does not answer
  mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P"$(port SQL "$1")" -uroot \
    --connect-timeout=2 -N -B -e "$2" 2>/dev/null
}

wsrep_state() {  # "Synced 3", "Joining 2", ... or "down"
  local out
  out="$(sql "$1" "SELECT
      (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
        WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
      (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
        WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE')")" || true
  if [[ -z "$out" ]]; then echo down; else echo "$out" | tr '\t' ' '; fi
}

gcomm_address() {
  local n list=()
  for n in "${NODES[@]}"; do list+=("127.0.0.1:$(port GCOMM "$n")"); done
  local IFS=,
  echo "gcomm://${list[*]}"
}

server_args() {
  local n="$1" d; d="$(node_dir "$n")"
  local opts="gmcast.listen_addr=tcp://127.0.0.1:$(port GCOMM "$n");ist.recv_addr=127.0.0.1:$(port IST "$n")"
  # A killed node is evicted within ~3 s (defaults: 5 s suspect, 15 s inactive), so the
  # survivors' commits stall only briefly; small gcache and group-communication buffers.
  opts+=";evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT2S"
  opts+=";evs.inactive_timeout=PT3S;evs.install_timeout=PT3S"
  opts+=";gcache.size=64M;gcs.fc_limit=64"
  # shellcheck disable=SC2046
  printf '%s\n' --no-defaults $(user_args) \
    "--datadir=$d/data" "--socket=$d/mariadb.sock" "--port=$(port SQL "$n")" \
    --bind-address=127.0.0.1 "--pid-file=$d/mariadbd.pid" "--log-error=$d/error.log" \
    "--tmpdir=$d/tmp" --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --skip-name-resolve --performance-schema=OFF --innodb-buffer-pool-size=32M \
    --innodb-log-file-size=32M --innodb-flush-log-at-trx-commit=2 --max-connections=200 \
    --binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
    --wsrep-on=ON "--wsrep-provider=$PROVIDER" "--wsrep-provider-options=$opts" \
    --wsrep-cluster-name=ctxwarden-test "--wsrep-cluster-address=$(gcomm_address)" \
    "--wsrep-node-name=node$n" "--wsrep-node-address=127.0.0.1:$(port GCOMM "$n")" \
    "--wsrep-node-incoming-address=127.0.0.1:$(port SQL "$n")" \
    --wsrep-sst-method=rsync "--wsrep-sst-receive-address=127.0.0.1:$(port SST "$n")" \
    --wsrep-slave-threads=2 "--wsrep-sync-wait=$SYNC_WAIT"
}

recover_position() {
  # After a crash grastate.dat says seqno -1: read the last committed position from InnoDB,
  # so the node can catch up from a donor's gcache (IST) instead of a full copy (SST).
  local n="$1" d; d="$(node_dir "$n")"
  grep -qs '^seqno: *-1' "$d/data/grastate.dat" || return 0
  local log="$d/recover.log"
  mapfile -t args < <(server_args "$n")
  "$MARIADBD" "${args[@]}" --wsrep-recover "--log-error=$log" >/dev/null 2>&1 || true
  sed -n 's/.*WSREP: Recovered position: *\([^ ]*\).*/\1/p' "$log" | tail -n1
}

wait_synced() {
  local n="$1" deadline=$((SECONDS + TIMEOUT)) state
  while :; do
    state="$(wsrep_state "$n")"
    [[ "$state" == Synced* ]] && return 0
    if [[ -z "$(pid_of "$n")" ]]; then
      tail -n 30 "$(node_dir "$n")/error.log" >&2 || true
      die "node $n exited before it was Synced (log above: $(node_dir "$n")/error.log)"
    fi
    ((SECONDS < deadline)) || die "node $n not Synced within ${TIMEOUT}s (state: $state)"
    sleep 0.2
  done
}

start_node() {
  local n="$1" bootstrap="$2" d; d="$(node_dir "$n")"
  if [[ -n "$(pid_of "$n")" ]]; then
    echo "node $n already running (pid $(pid_of "$n"))"
    return 0
  fi
  mkdir -p "$d/data" "$d/tmp"
  [[ -z "$RUN_AS" ]] || chown -R "$RUN_AS" "$DIR"
  local extra=()
  if [[ "$bootstrap" == yes ]]; then
    if [[ ! -d "$d/data/mysql" ]]; then
      "$INSTALL_DB" --no-defaults $(user_args) --auth-root-authentication-method=normal \
        --skip-test-db "--datadir=$d/data" --innodb-log-file-size=32M \
        --innodb-buffer-pool-size=32M --skip-name-resolve >"$d/install.log" 2>&1 ||
        { cat "$d/install.log" >&2; die "mariadb-install-db failed for node $n"; }
    fi
    # A private cluster restarted from scratch: node 1 may always found it anew.
    if [[ -f "$d/data/grastate.dat" ]]; then
      sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' "$d/data/grastate.dat"
    fi
    extra+=(--wsrep-new-cluster)
  fi
  local position
  position="$(recover_position "$n")"
  [[ -n "$position" ]] && extra+=("--wsrep-start-position=$position")
  mapfile -t args < <(server_args "$n")
  # setsid: its own session, so a Ctrl-C in the caller's terminal never reaches it.
  setsid "$MARIADBD" "${args[@]}" "${extra[@]}" </dev/null >>"$d/error.log" 2>&1 &
  echo $! >"$d/server.pid"
  wait_synced "$n"
  [[ "$bootstrap" == yes ]] && sql "$n" "CREATE DATABASE IF NOT EXISTS test CHARACTER SET utf8mb4"
  echo "node $n Synced on 127.0.0.1:$(port SQL "$n") (pid $(pid_of "$n"))"
}

stop_node() {
  local n="$1" signal="$2" pid
  pid="$(pid_of "$n")" || true
  [[ -n "$pid" ]] || return 0
  kill "-$signal" "$pid"
  local deadline=$((SECONDS + TIMEOUT))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  echo "node $n stopped ($signal)"
}

selected() {  # the node numbers given, or all of them
  if (($#)); then
    local n
    for n in "$@"; do [[ " ${NODES[*]} " == *" $n "* ]] || die "no node $n (nodes: ${NODES[*]})"; done
    echo "$@"
  else
    echo "${NODES[@]}"
  fi
}

# -- commands ----------------------------------------------------------------------------

(($# >= 2)) || usage
cmd="$1"
DIR="$(mkdir -p "$2" && cd "$2" && pwd)"
shift 2

case "$cmd" in
  start)
    MARIADBD="$(find_bin mariadbd /usr/sbin/mariadbd /usr/libexec/mariadbd)"
    INSTALL_DB="$(find_bin mariadb-install-db)"
    [[ -r "$PROVIDER" ]] || die "Galera provider $PROVIDER not found: install galera-4"
    command -v rsync >/dev/null || die "rsync not found (the state transfer method)"
    load_ports || make_ports
    load_ports
    running=0
    for n in "${NODES[@]}"; do [[ -n "$(pid_of "$n")" ]] && running=$((running + 1)); done
    read -ra todo <<<"$(selected "$@")"
    if ((running == 0)); then
      start_node "${todo[0]}" yes
      todo=("${todo[@]:1}")
    fi
    # The joiners start together (a donor busy with one state transfer makes the next
    # joiner wait for it, or serves it from another node).
    jobs=()
    for n in "${todo[@]}"; do
      start_node "$n" no &
      jobs+=($!)
    done
    failed=0
    for j in "${jobs[@]}"; do wait "$j" || failed=1; done
    ((failed == 0)) || die "a node did not join the cluster"
    ;;
  stop | kill)
    load_ports || exit 0
    [[ "$cmd" == kill && $# == 0 ]] && die "kill needs the node numbers"
    signal=TERM
    [[ "$cmd" == kill ]] && signal=KILL
    # Reverse order on a full stop: node 1, stopped last, is the one safe to bootstrap.
    for n in $(selected "$@" | tr ' ' '\n' | sort -rn); do stop_node "$n" "$signal"; done
    ;;
  status)
    load_ports || die "no cluster in $DIR (run: $0 start $DIR)"
    for n in "${NODES[@]}"; do
      echo "node$n 127.0.0.1:$(port SQL "$n") pid=$(pid_of "$n" || echo -) $(wsrep_state "$n")"
    done
    ;;
  urls)
    load_ports || die "no cluster in $DIR (run: $0 start $DIR)"
    for n in "${NODES[@]}"; do echo "mysql+aiomysql://root@127.0.0.1:$(port SQL "$n")/test"; done
    ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for local tests, on 127.0.0.1:${PG_PORT:-15432}.
#
#   postgres.sh start    install Debian's postgresql if missing, fresh cluster, db "exactly"
#   postgres.sh stop     fast shutdown (immediate after 30s)
#   postgres.sh status   exit 0 when running and accepting connections
#   postgres.sh dsn      print the connection URL
#   postgres.sh psql     run psql against the "exactly" database (extra args passed on)
#   postgres.sh logs     tail the server log
#
# See deploy/local/README.md for the environment knobs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

PG_PORT="${PG_PORT:-15432}"
PG_DB="${PG_DB:-exactly}"
PG_OS_USER="${PG_OS_USER:-postgres}"
# 1: TLS on (ssl=on, a server certificate for 127.0.0.1 signed by the run dir's
# CA, lib.sh tls_ca); clients choose with sslmode (the DSN below disables it).
PG_TLS="${PG_TLS:-1}"

RUN="$EXACTLY_RUN_DIR/pg"
DATA="$RUN/data"
SOCK="$RUN/sock"
LOGFILE="$RUN/postgres.log"

DSN="postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"

# has_tools DIR: DIR holds every server and client program these scripts use.
has_tools() {
	local t
	for t in initdb pg_ctl postgres pg_isready psql; do
		[[ -x "$1/$t" ]] || return 1
	done
}

# find_bin: the directory holding initdb, pg_ctl, pg_isready and psql. Debian keeps
# them off PATH, in /usr/lib/postgresql/<major>/bin; what PATH has may be symlinks
# or wrappers, so it is only the last resort (followed to the real directory).
find_bin() {
	local d
	if [[ -n "${PG_BIN:-}" ]]; then
		has_tools "$PG_BIN" || die "PG_BIN=$PG_BIN lacks one of initdb pg_ctl postgres pg_isready psql"
		echo "$PG_BIN"
		return 0
	fi
	# Newest installed major version first.
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
		if has_tools "$d"; then
			echo "$d"
			return 0
		fi
	done
	if command -v pg_ctl >/dev/null 2>&1; then
		d="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
		if has_tools "$d"; then
			echo "$d"
			return 0
		fi
	fi
	return 1
}

ensure_installed() {
	BIN="$(find_bin || true)"
	if [[ -z "$BIN" ]]; then
		local start
		start="$(now)"
		apt_install postgresql
		BIN="$(find_bin || true)"
		[[ -n "$BIN" ]] || die "postgresql installed but initdb/pg_ctl still not found"
		log "installed PostgreSQL in $(elapsed "$start")s"
	fi
	if [[ "$(id -u)" -eq 0 ]] && ! id -u "$PG_OS_USER" >/dev/null 2>&1; then
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash "$PG_OS_USER"
	fi
}

# as_pg CMD...: run CMD as the cluster owner. initdb and pg_ctl refuse root, so
# root runs them as $PG_OS_USER; anyone else runs them as themselves.
as_pg() {
	if [[ "$(id -u)" -eq 0 ]]; then
		(cd "$RUN" && runuser -u "$PG_OS_USER" -- "$@")
	else
		(cd "$RUN" && "$@")
	fi
}

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres -U postgres -t 2; }

running() {
	[[ -f "$DATA/postmaster.pid" ]] || return 1
	as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || return 1
	ready
}

# stop_cluster: stop the cluster in $DATA; false when none was running.
stop_cluster() {
	[[ -f "$DATA/postmaster.pid" ]] || return 1
	as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || return 1
	if ! as_pg "$BIN/pg_ctl" -D "$DATA" stop -s -m fast -w -t 30; then
		log "fast shutdown did not finish in 30s: immediate shutdown"
		as_pg "$BIN/pg_ctl" -D "$DATA" stop -s -m immediate -w -t 30
	fi
}

cmd_start() {
	local start i
	start="$(now)"
	mkdir -p "$RUN"
	ensure_installed
	if [[ "$(id -u)" -eq 0 ]]; then
		chown "$PG_OS_USER:" "$RUN"
		runuser -u "$PG_OS_USER" -- test -w "$RUN" ||
			die "$PG_OS_USER cannot write $RUN (is a parent directory private?); set EXACTLY_RUN_DIR"
	fi
	if running; then
		log "PostgreSQL already running on 127.0.0.1:$PG_PORT ($DSN)"
		return 0
	fi
	if stop_cluster; then log "stopped a stale PostgreSQL from an earlier run"; fi
	warn_ephemeral "$PG_PORT" "set PG_PORT below it"
	if port_open "$PG_PORT"; then
		die "port $PG_PORT is held by another process; free it or set PG_PORT"
	fi

	rm -rf "$DATA" "$SOCK"
	mkdir -p "$SOCK"
	[[ "$(id -u)" -ne 0 ]] || chown "$PG_OS_USER:" "$SOCK"
	if ! as_pg "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --no-locale \
		>"$RUN/initdb.log" 2>&1; then
		cat "$RUN/initdb.log" >&2
		die "initdb failed"
	fi
	cat >>"$DATA/postgresql.conf" <<EOF

# Added by deploy/local/postgres.sh: throwaway local cluster.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$SOCK'
max_connections = 200
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
# Debezium's Postgres connector reads changes by logical replication (pgoutput).
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
EOF
	if [[ "$PG_TLS" == "1" ]]; then
		tls_cert server "$RUN/tls"
		[[ "$(id -u)" -ne 0 ]] || chown -R "$PG_OS_USER:" "$RUN/tls"
		cat >>"$DATA/postgresql.conf" <<EOF
# TLS: connect with sslmode=verify-full&sslrootcert=$TLS_CA_FILE
ssl = on
ssl_cert_file = '$RUN/tls/server.crt'
ssl_key_file = '$RUN/tls/server.key'
EOF
	fi
	# A port that was free at the check above can still be taken when the
	# postmaster binds it (another start racing us, or an outgoing
	# connection's local port): retry that case a few times, nothing else.
	local size
	for ((i = 1; ; i++)); do
		size="$(stat -c %s "$LOGFILE" 2>/dev/null || echo 0)"
		as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOGFILE" -s -w -t 60 start && break
		if ((i < 5)) && tail -c "+$((size + 1))" "$LOGFILE" | grep -q 'Address already in use'; then
			log "PostgreSQL could not bind 127.0.0.1:$PG_PORT (address in use): retry $i of 4 in 2s"
			sleep 2
			continue
		fi
		tail -n 40 "$LOGFILE" >&2 || true
		die "pg_ctl start failed"
	done
	for ((i = 0; i < 150; i++)); do
		ready && break
		sleep 0.2
	done
	ready || die "PostgreSQL not accepting connections after 30s (log $LOGFILE)"
	"$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
		-c "CREATE DATABASE \"$PG_DB\"" >/dev/null
	log "PostgreSQL $("$BIN/postgres" -V | awk '{ print $3 }') started on 127.0.0.1:$PG_PORT in $(elapsed "$start")s; log $LOGFILE"
}

cmd_stop() {
	local start
	start="$(now)"
	BIN="$(find_bin || true)"
	if [[ -z "$BIN" || ! -d "$RUN" ]]; then
		log "PostgreSQL not running"
		return 0
	fi
	if stop_cluster; then
		log "PostgreSQL stopped in $(elapsed "$start")s"
	else
		log "PostgreSQL not running"
	fi
}

cmd_status() {
	BIN="$(find_bin || true)"
	if [[ -n "$BIN" && -d "$RUN" ]] && running; then
		echo "PostgreSQL running on 127.0.0.1:$PG_PORT ($DSN); log $LOGFILE"
		return 0
	fi
	echo "PostgreSQL not running"
	return 1
}

cmd_psql() {
	BIN="$(find_bin)" || die "PostgreSQL is not installed"
	exec "$BIN/psql" -X "$DSN" "$@"
}

cmd_logs() {
	[[ -f "$LOGFILE" ]] || die "no log yet at $LOGFILE"
	tail -n "${1:-200}" "$LOGFILE"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
dsn) echo "$DSN" ;;
psql) shift; cmd_psql "$@" ;;
logs) shift; cmd_logs "$@" ;;
*)
	echo "usage: $0 start|stop|status|dsn|psql [args]|logs [N]" >&2
	exit 2
	;;
esac

#!/usr/bin/env bash
# Throwaway Confluent-compatible schema registry (Apicurio Registry, in-memory
# storage) for local tests, on 127.0.0.1:${REGISTRY_PORT:-8081}.
#
#   registry.sh fetch    download the pinned Apicurio Registry from Maven Central (cached)
#   registry.sh start    start it (idempotent: a running one is kept, with its schemas)
#   registry.sh stop     SIGTERM, up to 30s for a clean exit, then SIGKILL
#   registry.sh status   exit 0 when running and answering
#   registry.sh url      print the Confluent-compatible API URL (EXACTLY_REGISTRY_URL)
#   registry.sh logs     tail the registry log (logs -f to follow)
#
# Storage is in memory: a restart forgets every schema, and IDs start over at 1.
# Several instances can run at once with distinct REGISTRY_PORT and
# EXACTLY_RUN_DIR. See deploy/local/README.md for the environment knobs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# 2.6.x, not 3.x: Apicurio 3.x is compiled for Java 21 (class file 65), and the
# machines have Java 17. 2.6.13.Final serves the same Confluent API (ccompat
# v7), keeps schema IDs as content IDs like Confluent's registry, and starts in
# about 2.5 s. io.apicurio:apicurio-registry-app:<v>:tar.gz:all is a Quarkus
# application: the runner jar and its lib/.
REGISTRY_VERSION=2.6.13.Final
ARTIFACT="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all"

REGISTRY_PORT="${REGISTRY_PORT:-8081}"
REGISTRY_HEAP_OPTS="${REGISTRY_HEAP_OPTS:--Xms64m -Xmx384m}"
REGISTRY_START_TIMEOUT="${REGISTRY_START_TIMEOUT:-120}"
REGISTRY_JAVA="${REGISTRY_JAVA:-java}"
API_PATH=/apis/ccompat/v7

REG_HOME="$EXACTLY_CACHE_DIR/apicurio-registry-$REGISTRY_VERSION"
RUNNER="$REG_HOME/apicurio-registry-app-$REGISTRY_VERSION-runner.jar"
MARKER="$REG_HOME/.complete"

RUN="$EXACTLY_RUN_DIR/registry"
LOGFILE="$RUN/registry.log"
PIDFILE="$RUN/registry.pid"
# On the java command line, so that stop finds this run dir's registry only.
TAG="-Dexactly.registry.run=$RUN"

fetched() { [[ -f "$MARKER" && "$(cat "$MARKER")" == "$ARTIFACT" && -f "$RUNNER" ]]; }

cmd_fetch() {
	fetched && return 0
	require_mvn
	fetch_locked "$REG_HOME" fetched fetch_app
}

# fetch_app: the registry application into $REG_HOME, by Maven's dependency
# plugin.
fetch_app() {
	local start tmp
	start="$(now)"
	log "fetching $ARTIFACT from Maven Central into $REG_HOME"
	rm -f "$MARKER"
	tmp="$REG_HOME/dl.tmp"
	rm -rf "$tmp"
	mvn_quiet "$REG_HOME/fetch.log" "mvn dependency:copy $ARTIFACT" "$DEP_PLUGIN:copy" -Dartifact="$ARTIFACT" \
		-DoutputDirectory="$tmp" -Dmdep.overWriteIfNewer=true
	local tgz="$tmp/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz"
	[[ -f "$tgz" ]] || die "dependency:copy finished but $tgz is missing"
	# Keep only what runs the registry; the tarball itself stays in ~/.m2.
	find "$REG_HOME" -mindepth 1 -maxdepth 1 ! -name dl.tmp ! -name .lock ! -name fetch.log -exec rm -rf {} +
	tar -xzf "$tgz" -C "$REG_HOME" || die "could not unpack $tgz"
	rm -rf "$tmp"
	[[ -f "$RUNNER" ]] || die "unpacked $ARTIFACT but $RUNNER is missing"
	echo "$ARTIFACT" >"$MARKER"
	log "fetched Apicurio Registry $REGISTRY_VERSION in $(elapsed "$start")s"
}

# http_status PATH: the HTTP status of GET 127.0.0.1:$REGISTRY_PORT/PATH, or
# nothing. Plain bash, so that neither curl nor wget is needed.
http_status() {
	# shellcheck disable=SC2016 # $1 and $2 belong to the inner bash
	timeout 3 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nAccept: application/json\r\n\r\n" "$2" "$1" >&3
		IFS=" " read -r _ code _ <&3 && printf "%s" "$code"
	' _ "$REGISTRY_PORT" "$1" 2>/dev/null || true
}

# answering: the Confluent API lists subjects (so storage is up too).
answering() { [[ "$(http_status "$API_PATH/subjects")" == 200 ]]; }

# ours PID: PID is a registry started from this run dir.
ours() { pid_alive "$1" && [[ " $(pid_cmdline "$1")" == *" $TAG "* ]]; }

# our_pids: every live registry started from this run dir (pid file or not).
our_pids() { pids_with_arg "$TAG" ours; }

running() {
	local pid
	pid="$(pidfile_pid)"
	[[ -n "$pid" ]] && ours "$pid" && answering
}

stop_pid() { stop_process "the registry" "$1"; }

# stop_all: stop every process of this run dir; false when there was none.
stop_all() { stop_all_of our_pids; }

cmd_stop() { stop_all_logged registry; }

cmd_url() { echo "http://127.0.0.1:$REGISTRY_PORT$API_PATH"; }

cmd_status() {
	if running; then
		echo "registry running (pid $(pidfile_pid)) at $(cmd_url); log $LOGFILE"
		return 0
	fi
	echo "registry not running"
	return 1
}

fail_start() { fail_start_of "the registry" "$1"; }

# java_major: the feature version of $REGISTRY_JAVA (17 for "17.0.15").
java_major() {
	"$REGISTRY_JAVA" -XshowSettings:properties -version 2>&1 |
		awk -F'= ' '/java.specification.version/ { print $2; exit }'
}

cmd_start() {
	local start major
	start="$(now)"
	if running; then
		log "registry already running (pid $(pidfile_pid)) at $(cmd_url)"
		return 0
	fi
	cmd_fetch
	require_java "$REGISTRY_JAVA"
	major="$(java_major)"
	if ! [[ "$major" =~ ^[0-9]+$ ]] || ((major < 17)); then
		die "Apicurio Registry $REGISTRY_VERSION needs Java 17+, $REGISTRY_JAVA is '${major:-unknown}'"
	fi
	if stop_all; then log "stopped a stale registry from an earlier run"; fi
	require_free "$REGISTRY_PORT" "free it or set REGISTRY_PORT"

	mkdir -p "$RUN"
	rm -f "$LOGFILE"
	# The working directory takes Narayana's ObjectStore (transaction logs).
	rm -rf "$RUN/work"
	mkdir -p "$RUN/work"

	local -a opts
	read -r -a opts <<<"$REGISTRY_HEAP_OPTS"
	# Serial GC and C1 only: a test registry serves few requests, and on two
	# cores this starts faster and holds less memory than the defaults. The
	# JDBC pool of the in-memory H2 database shrinks from 20 connections to 2.
	detach "$PIDFILE" "$LOGFILE" "$RUN/work" \
		"$REGISTRY_JAVA" "${opts[@]}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
		"$TAG" \
		-Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$REGISTRY_PORT" \
		-Dquarkus.datasource.jdbc.initial-size=2 -Dquarkus.datasource.jdbc.min-size=2 \
		-Dquarkus.datasource.jdbc.max-size=20 \
		-Dregistry.ccompat.legacy-id-mode.enabled=false \
		-jar "$RUNNER"

	await_start "$PIDFILE" "$REGISTRY_START_TIMEOUT" 0.1 1 fail_start "the registry process exited" \
		"not ready after ${REGISTRY_START_TIMEOUT}s" answering
	log "Apicurio Registry $REGISTRY_VERSION started (pid $STARTED_PID) at $(cmd_url) in $(elapsed "$start")s; log $LOGFILE"
}

cmd_logs() { tail_log "$LOGFILE" "$@"; }

case "${1:-}" in
fetch) cmd_fetch ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
url) cmd_url ;;
logs) shift; cmd_logs "$@" ;;
*)
	echo "usage: $0 fetch|start|stop|status|url|logs [-f|N]" >&2
	exit 2
	;;
esac

# shellcheck shell=bash
# Shared helpers for deploy/local/*.sh. Sourced, never executed.

EXACTLY_RUN_DIR="${EXACTLY_RUN_DIR:-/tmp/exactly-local}"
EXACTLY_CACHE_DIR="${EXACTLY_CACHE_DIR:-${HOME:-/root}/.cache/exactly}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now: wall clock in seconds with sub-second precision.
now() { printf '%s' "${EPOCHREALTIME:-$(date +%s)}"; }
# elapsed START: seconds since START, two decimals.
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	# shellcheck disable=SC2016 # $1 belongs to the inner bash
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# pid_alive PID: true when PID is a live (non-zombie) process.
pid_alive() {
	local pid="$1" state
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	state="$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null || true)"
	[[ "$state" != "Z" ]]
}

# pid_cmdline PID: the process's command line, arguments separated by spaces.
pid_cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }

# port_pids PORT: pids listening on 127.0.0.1:PORT (or any address), one a line.
port_pids() {
	ss -H -ltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true
}

# as_root CMD...: run CMD as root (directly, or through sudo when not root).
as_root() {
	if [[ "$(id -u)" -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

# apt_install PKG...: apt-get update, then install PKG... non-interactively.
# Waits for the dpkg lock instead of failing when another apt run holds it.
apt_install() {
	local -a opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
	log "apt-get install $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" install -y -qq --no-install-recommends "$@"
}

# TLS for the local services: one throwaway CA per run dir signs the server
# certificates of Kafka's SASL_SSL listener and of PostgreSQL. Clients trust
# $TLS_CA_FILE (exported as EXACTLY_CA_FILE by up.sh).
TLS_DIR="$EXACTLY_RUN_DIR/tls"
TLS_CA_FILE="$TLS_DIR/ca.pem"

# tls_ca: make the CA once per run dir (kept across restarts, so that a
# client's CA file stays valid).
tls_ca() {
	command -v openssl >/dev/null 2>&1 || apt_install openssl
	mkdir -p "$TLS_DIR"
	(
		flock 9
		[[ -s "$TLS_CA_FILE" && -s "$TLS_DIR/ca.key" ]] && exit 0
		openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=exactly local test CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
			-keyout "$TLS_DIR/ca.key" -out "$TLS_CA_FILE.tmp" >"$TLS_DIR/openssl.log" 2>&1 ||
			{ cat "$TLS_DIR/openssl.log" >&2; exit 1; }
		chmod 600 "$TLS_DIR/ca.key"
		mv "$TLS_CA_FILE.tmp" "$TLS_CA_FILE"
	) 9>"$TLS_DIR/.lock" || die "could not make the local CA (openssl)"
	chmod 755 "$TLS_DIR"
	chmod 644 "$TLS_CA_FILE"
}

# tls_cert NAME DIR: a fresh server certificate for 127.0.0.1 and localhost,
# signed by the CA: DIR/NAME.key (unencrypted PKCS#8) and DIR/NAME.crt.
tls_cert() {
	local name="$1" dir="$2"
	tls_ca
	mkdir -p "$dir"
	rm -f "$dir/$name.key" "$dir/$name.crt"
	if ! { openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$dir/$name.key" -out "$dir/$name.csr" &&
		openssl x509 -req -days 365 -in "$dir/$name.csr" -CA "$TLS_CA_FILE" -CAkey "$TLS_DIR/ca.key" -CAcreateserial \
			-extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n') \
			-out "$dir/$name.crt"; } >"$dir/$name.openssl.log" 2>&1; then
		cat "$dir/$name.openssl.log" >&2
		die "could not make the $name certificate (openssl)"
	fi
	chmod 600 "$dir/$name.key"
	rm -f "$dir/$name.csr"
}

# stop_process NAME PID: SIGTERM, wait up to 30s, then SIGKILL.
stop_process() {
	local name="$1" pid="$2"
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	wait_gone "$pid" 300 && return 0
	log "$name (pid $pid) still alive after 30s: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	wait_gone "$pid" 50 && return 0
	die "could not kill pid $pid"
}

# wait_gone PID TENTHS: true once PID is gone, polling every 0.1s for up to
# TENTHS tenths of a second; false when it is still alive then.
wait_gone() {
	local i
	for ((i = 0; i < $2; i++)); do
		pid_alive "$1" || return 0
		sleep 0.1
	done
	return 1
}

# stop_all_of LISTER: stop_pid every pid that the function LISTER prints,
# then remove $PIDFILE; false when there was none.
stop_all_of() {
	local pid stopped=1
	for pid in $("$1"); do
		stop_pid "$pid"
		stopped=0
	done
	rm -f "$PIDFILE"
	return "$stopped"
}

# stop_all_logged LABEL: stop_all, then log "LABEL stopped in Ns" or "LABEL
# not running".
stop_all_logged() {
	local start
	start="$(now)"
	if stop_all; then
		log "$1 stopped in $(elapsed "$start")s"
	else
		log "$1 not running"
	fi
}

# pids_with_arg ARG PRED...: the live pids, one a line, with an argument
# exactly equal to ARG on their command line and for which PRED... PID is true.
pids_with_arg() {
	local arg="$1" f p
	shift
	# Cheap pre-filter: processes with an argument exactly equal to ARG.
	for f in $(grep -lsxzF -- "$arg" /proc/[0-9]*/cmdline 2>/dev/null || true); do
		p="${f#/proc/}"
		p="${p%/cmdline}"
		if "$@" "$p"; then echo "$p"; fi
	done
	return 0
}

# is_broker PROPS PID: PID is a live Kafka broker started on the server
# properties file PROPS.
is_broker() { pid_alive "$2" && [[ "$(pid_cmdline "$2")" == *"kafka.Kafka $1"* ]]; }

# pidfile_pid: the pid in $PIDFILE, or nothing.
pidfile_pid() { cat "$PIDFILE" 2>/dev/null || true; }

# fail_start_of WHO REASON: log that WHO did not start and why, the end of
# $LOGFILE, SIGKILL every pid our_pids prints, remove $PIDFILE, exit 1.
fail_start_of() {
	log "$1 did not start: $2; last lines of $LOGFILE:"
	tail -n 60 "$LOGFILE" >&2 || true
	local pid
	for pid in $(our_pids); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$PIDFILE"
	exit 1
}

# require_java JAVA: die unless the java command JAVA is on PATH.
require_java() {
	command -v "$1" >/dev/null 2>&1 || die "java not found (apt-get install -y openjdk-17-jre-headless)"
}

# warn_ephemeral PORT HINT: warn when PORT lies in Linux's ephemeral port
# range (net.ipv4.ip_local_port_range, 32768-60999 by default), from which
# the kernel picks the local port of every outgoing connection: one of them
# can take the port between a free-port check and the bind, and the start
# then fails with "address already in use".
warn_ephemeral() {
	local lo hi
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
	if (($1 >= lo && $1 <= hi)); then
		log "WARNING: port $1 is in the ephemeral port range $lo-$hi, where an outgoing connection can take it before the bind; $2"
	fi
}

# require_free PORT HINT: die, naming what holds it, when PORT is taken;
# warn when it is in the ephemeral range (warn_ephemeral).
require_free() {
	warn_ephemeral "$1" "$2"
	if port_open "$1"; then
		die "port $1 is held by another process ($(port_pids "$1" | while read -r p; do pid_cmdline "$p" | cut -c1-120; done)); $2"
	fi
}

# fetch_locked DIR FETCHED FETCH: make DIR, then run FETCH under the lock
# DIR/.lock unless FETCHED is true by then: one fetch at a time, and a second
# caller waits, then finds the first one's result.
fetch_locked() {
	mkdir -p "$1"
	exec 8>"$1/.lock"
	flock 8
	if ! "$2"; then "$3"; fi
	exec 8>&-
}

# DEP_PLUGIN is Maven's dependency plugin, pinned, that fetches the broker jars
# (kafka.sh) and the registry (registry.sh) from Maven Central.
# shellcheck disable=SC2034 # read by the scripts that source this file
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

# require_mvn: die when Maven, which fetches the pinned jars, is missing.
require_mvn() {
	command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install -y maven)"
}

# mvn_quiet LOG WHAT ARGS...: mvn ARGS... with its output in LOG; on failure
# the end of LOG and die "WHAT failed".
mvn_quiet() {
	local out="$1" what="$2"
	shift 2
	if ! mvn -B -q -Dstyle.color=never "$@" >"$out" 2>&1; then
		tail -n 40 "$out" >&2
		die "$what failed (full output: $out)"
	fi
}

# detach PIDFILE LOG DIR CMD...: run CMD... in DIR in the background, in a
# session of its own (setsid: it outlives the shell and Ctrl-C that started
# it), stdout and stderr appended to LOG. The inner bash writes its own pid
# to PIDFILE, then execs CMD, so the pid is CMD's.
detach() {
	local pf="$1" out="$2" dir="$3"
	shift 3
	# shellcheck disable=SC2016 # $$, $0, $1 and $@ belong to the inner bash
	nohup setsid bash -c 'echo $$ >"$0"; cd "$1" || exit 1; shift; exec "$@"' "$pf" "$dir" \
		"$@" </dev/null >>"$out" 2>&1 &
}

# logged_since FILE LINES TEXT: FILE holds TEXT after its first LINES lines.
logged_since() { tail -n "+$(($2 + 1))" "$1" 2>/dev/null | grep -q "$3"; }

# await_start PIDFILE TIMEOUT INTERVAL NOPID FAIL EXITED LATE READY...: poll
# every INTERVAL seconds until PIDFILE names a live process and READY...
# succeeds, then set STARTED_PID to that pid. FAIL REASON must not return; it
# is called with "no pid file after 10s" (only when NOPID is 1), with EXITED
# when the process has died, and with LATE after TIMEOUT seconds.
await_start() {
	local pf="$1" timeout="$2" interval="$3" nopid="$4" fail="$5" exited="$6" late="$7" pid deadline launched=$SECONDS
	shift 7
	deadline=$((SECONDS + timeout))
	while :; do
		pid="$(cat "$pf" 2>/dev/null || true)"
		if [[ -z "$pid" && "$nopid" == 1 ]] && ((SECONDS - launched > 10)); then
			"$fail" "no pid file after 10s"
		fi
		if [[ -n "$pid" ]] && ! pid_alive "$pid"; then
			"$fail" "$exited"
		fi
		if [[ -n "$pid" ]] && "$@"; then
			break
		fi
		((SECONDS < deadline)) || "$fail" "$late"
		sleep "$interval"
	done
	# shellcheck disable=SC2034 # read by the caller
	STARTED_PID="$pid"
}

# tail_log FILE [-f|N]: the last N (default 200) lines of FILE, or follow it.
tail_log() {
	[[ -f "$1" ]] || die "no log yet at $1"
	if [[ "${2:-}" == "-f" ]]; then
		exec tail -n 100 -F "$1"
	fi
	tail -n "${2:-200}" "$1"
}

# extra_props VAR FILE: the server properties in FILE, named by the
# environment variable VAR, to append to a generated file (later lines win);
# nothing when FILE is empty.
extra_props() {
	[[ -n "$2" ]] || return 0
	[[ -f "$2" ]] || die "$1=$2 is not a file"
	printf '\n# From %s=%s (later lines win)\n' "$1" "$2"
	cat "$2"
	printf '\n'
}

# log4j2_conf SCRIPT LOGGER=LEVEL...: a log4j2 configuration that logs to
# the console at INFO, with each named logger at its level, written by SCRIPT.
log4j2_conf() {
	local script="$1" l
	shift
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/local/$script -->
<Configuration status="WARN">
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="STDOUT"/></Root>
EOF
	for l in "$@"; do
		printf '    <Logger name="%s" level="%s"/>\n' "${l%=*}" "${l##*=}"
	done
	printf '  </Loggers>\n</Configuration>\n'
}

# kafka_log4j_conf SCRIPT: the log4j2 configuration of a local Kafka JVM
# (console, INFO, chatty loggers at WARN), written by SCRIPT.
kafka_log4j_conf() {
	log4j2_conf "$1" kafka.request.logger=WARN org.apache.kafka.clients=WARN \
		state.change.logger=WARN kafka.authorizer.logger=WARN
}

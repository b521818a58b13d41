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
	local name="$1" pid="$2" i
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) still alive after 30s: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
	die "could not kill pid $pid"
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

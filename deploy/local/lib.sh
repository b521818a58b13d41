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

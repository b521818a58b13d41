#!/usr/bin/env bash
# Start everything the tests need: kcat, PostgreSQL, Kafka and a schema registry,
# and fetch Kafka Connect with Debezium (the tests start their own workers). Idempotent.
# Writes $EXACTLY_RUN_DIR/env (source it to get EXACTLY_BROKERS, PG_DSN, ...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# step NAME CMD...: run CMD and say how long it took.
step() {
	local name="$1" start
	shift
	start="$(now)"
	"$@"
	log "step $name took $(elapsed "$start")s"
}

# tools: install what is missing from Debian, in one apt run.
tools() {
	local -a missing=()
	command -v kcat >/dev/null 2>&1 || missing+=(kcat)
	command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
	command -v mvn >/dev/null 2>&1 || missing+=(maven)
	# The integration tests run a real Prometheus against the dashboard and
	# the alert rules, and build the container image with buildah.
	{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
	command -v buildah >/dev/null 2>&1 || missing+=(buildah)
	if ((${#missing[@]})); then
		apt_install "${missing[@]}"
	fi
}

# sq VALUE: VALUE single-quoted for a shell.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

write_env() {
	local env="$EXACTLY_RUN_DIR/env" pg_dsn kafka_libs kcat
	pg_dsn="$(bash "$HERE/postgres.sh" dsn)"
	kafka_libs="$(bash "$HERE/kafka.sh" libs)"
	kcat="$(command -v kcat)"
	mkdir -p "$EXACTLY_RUN_DIR"
	{
		echo "# Written by deploy/local/up.sh on $(date -Is)"
		echo "export EXACTLY_BROKERS=$(sq "127.0.0.1:${KAFKA_PORT:-9092}")"
		echo "export PG_DSN=$(sq "$pg_dsn")"
		echo "export KAFKA_LIBS=$(sq "$kafka_libs")"
		echo "export KCAT=$(sq "$kcat")"
		# Kafka's SASL_SSL listener (SCRAM-SHA-512, and PLAIN for kcat) and the
		# CA of its and PostgreSQL's certificates.
		local k v
		while IFS='=' read -r k v; do
			case "$k" in
			SASL_BROKERS) echo "export EXACTLY_SASL_BROKERS=$(sq "$v")" ;;
			SASL_USER) echo "export KAFKA_USER=$(sq "$v")" ;;
			SASL_PASSWORD) echo "export KAFKA_PASSWORD=$(sq "$v")" ;;
			esac
		done < <(bash "$HERE/kafka.sh" sasl-env)
		[[ ! -f "$TLS_CA_FILE" ]] || echo "export EXACTLY_CA_FILE=$(sq "$TLS_CA_FILE")"
		echo "export EXACTLY_REGISTRY_URL=$(sq "$(bash "$HERE/registry.sh" url)")"
		# Kafka Connect: the worker's jars and plugin.path (connect.sh starts workers).
		echo "export CONNECT_LIBS=$(sq "$(bash "$HERE/connect.sh" libs)")"
		echo "export CONNECT_PLUGIN_PATH=$(sq "$(bash "$HERE/connect.sh" plugin-path)")"
	} >"$env.tmp"
	mv "$env.tmp" "$env"
	ENV_FILE="$env"
}

total="$(now)"
step tools tools
step postgres bash "$HERE/postgres.sh" start
step kafka bash "$HERE/kafka.sh" start
step registry bash "$HERE/registry.sh" start
step connect bash "$HERE/connect.sh" fetch
write_env
log "all up in $(elapsed "$total")s"
cat >&2 <<MSG

Kafka, PostgreSQL and the schema registry are running. To use them from
this shell:

    source $ENV_FILE

Stop them with: bash $HERE/down.sh
MSG

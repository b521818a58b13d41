#!/usr/bin/env bash
# The cluster profile of the integration tests (a step of test.sh): for each
# transaction.version in CLUSTER_TVS (default "2 1", KIP-890's protocol and
# the older one), start a fresh three-node cluster (cluster.sh), run the
# TestCluster* tests against it, and stop it. Needs PostgreSQL and kcat from
# up.sh (PG_DSN, KCAT in the environment). The cluster is stopped on exit,
# Ctrl-C included. CLUSTER_GOTESTFLAGS (e.g. "-v") is passed to go test.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
cd "$HERE/../.."

trap 'bash "$HERE/cluster.sh" stop || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -a flags=()
read -r -a flags <<<"${CLUSTER_GOTESTFLAGS:-}"
rc=0
for tv in ${CLUSTER_TVS:-2 1}; do
	start="$(now)"
	bash "$HERE/cluster.sh" start --tv "$tv"
	log "==> cluster tests, transaction.version=$tv"
	if EXACTLY_CLUSTER=1 EXACTLY_CLUSTER_TV="$tv" EXACTLY_BROKERS="$(bash "$HERE/cluster.sh" brokers)" \
		go test -race -count=1 -tags integration -timeout 30m -run '^TestCluster' "${flags[@]}" ./integration/; then
		log "<== cluster tests, transaction.version=$tv: ok ($(elapsed "$start")s)"
	else
		log "<== cluster tests, transaction.version=$tv: FAILED ($(elapsed "$start")s)"
		rc=1
	fi
	bash "$HERE/cluster.sh" stop
done
exit "$rc"

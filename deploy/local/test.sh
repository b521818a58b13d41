#!/usr/bin/env bash
# THE project test command: bash deploy/local/test.sh
#
# Starts Kafka and PostgreSQL (up.sh; it also fetches Kafka Connect and Debezium
# for the tests' own Connect workers), then checks that go.mod is tidy, runs go vet
# and staticcheck, builds for windows and darwin, runs the unit tests, the
# integration tests against them, and the cluster profile (cluster-test.sh: the
# TestCluster* tests on a three-node cluster per transaction.version), and
# stops everything again on exit (down.sh, cluster.sh stop) unless
# EXACTLY_KEEP_UP=1 (the cluster is always stopped). Every step runs even if
# an earlier one failed; the exit code is non-zero when any step failed.
# GOTESTFLAGS (e.g. "-v -run TestX") is passed to the unit and integration
# runs; CLUSTER_GOTESTFLAGS to the cluster step.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
cd "$HERE/../.."

declare -a failed=() passed=()

STEP_PID=""

cleanup() {
	local rc=$?
	# Interrupted mid-step: end that step's whole process group (go and its test binaries).
	if [[ -n "$STEP_PID" ]]; then
		kill -TERM -- "-$STEP_PID" 2>/dev/null || true
		wait "$STEP_PID" 2>/dev/null || true
	fi
	bash "$HERE/cluster.sh" stop 2>/dev/null || true
	# Workers that a killed test left (the tests start their own).
	bash "$HERE/connect.sh" stop --all 2>/dev/null || true
	if [[ "${EXACTLY_KEEP_UP:-0}" == "1" ]]; then
		log "EXACTLY_KEEP_UP=1: leaving Kafka and PostgreSQL running (bash deploy/local/down.sh stops them)"
	else
		bash "$HERE/down.sh" || true
	fi
	log "steps ok: ${passed[*]:-none}; steps failed: ${failed[*]:-none}"
	if ((rc == 0)); then log "TESTS PASSED"; else log "TESTS FAILED (exit $rc)"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || die "go not found on PATH"

# run NAME CMD...: run one step, record its result, never abort the script.
run() {
	local name="$1" start rc=0
	shift
	start="$(now)"
	log "==> $name: $*"
	# Own process group, waited on in the background: a signal to this script
	# is handled at once (not after the step), and cleanup can end the step.
	setsid -w "$@" &
	STEP_PID=$!
	wait "$STEP_PID" || rc=$?
	STEP_PID=""
	if ((rc == 0)); then
		passed+=("$name")
		log "<== $name ok ($(elapsed "$start")s)"
	else
		failed+=("$name")
		log "<== $name FAILED with exit code $rc ($(elapsed "$start")s)"
	fi
}

bash "$HERE/up.sh"
# shellcheck disable=SC1091 # written by up.sh
. "$EXACTLY_RUN_DIR/env"

declare -a gotestflags=()
read -r -a gotestflags <<<"${GOTESTFLAGS:-}"

run tidy go mod tidy -diff
run vet go vet ./...
# staticcheck at a pinned release (2026.2.2, module v0.8.2, which supports
# Go 1.26), fetched through the module proxy, over the plain and the
# integration build. A deliberate exception carries a
# //lint:ignore CHECK reason on the line above it.
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
run staticcheck bash -c "go run $STATICCHECK ./... && go run $STATICCHECK -tags integration ./..."
# The packages build (and vet) for the other platforms a user may embed them
# on: OS calls live in _unix.go / _windows.go files.
run cross-build bash -c 'GOOS=windows go build ./... && GOOS=darwin go build ./... && GOOS=windows go vet ./... && GOOS=darwin go vet ./...'
# Unit tests run on kfake and must not see the real broker: EXACTLY_BROKERS
# would replace the kfake address in every topology file they load.
run unit env -u EXACTLY_BROKERS go test -race -count=1 "${gotestflags[@]}" ./...
# Fuzz the value boundaries (JSON <-> CEL <-> JSON, JSON <-> Avro) for a bounded
# number of inputs each; plain `go test` above already ran their seed corpora.
# The bound is a count (Nx), not a duration: a duration races Go's fuzz
# coordinator at the deadline and fails with a bare "context deadline
# exceeded" and no crasher under load (go.dev/issue/75804, fixed in Go 1.27).
fuzz() {
	local pkg="$1" target rc=0
	shift
	for target in "$@"; do
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "${EXACTLY_FUZZTIME:-50000x}" "$pkg" || rc=1
	done
	return "$rc"
}
run fuzz bash -c "$(declare -f fuzz); fuzz ./processor/transform/ FuzzJSONCELJSON && fuzz ./serde/ FuzzJSONAvroJSON FuzzAppendDouble FuzzTopLevelField FuzzValidJSON"
if [[ -d integration ]] && find integration -name '*_test.go' -print -quit | grep -q .; then
	# The cluster profile (TestCluster*) needs the three-node cluster: its own step.
	run integration go test -race -count=1 -tags integration -timeout 50m -skip '^TestCluster' "${gotestflags[@]}" ./integration/... ./processor/internal/pgsink/
	# Internal code asked of the real broker (TestBroker*); the package's
	# other tests ran in the unit step.
	run broker-internal go test -race -count=1 -tags integration -run '^TestBroker' "${gotestflags[@]}" ./processor/internal/stage/
	run cluster bash "$HERE/cluster-test.sh"
else
	log "################################################################"
	log "## SKIPPING INTEGRATION TESTS: ./integration has no *_test.go ##"
	log "## (nothing ran against the real Kafka and PostgreSQL)        ##"
	log "################################################################"
fi

((${#failed[@]} == 0))

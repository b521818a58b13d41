#!/usr/bin/env bash
# Stop the Kafka Connect workers, the schema registry, Kafka and PostgreSQL. Fine to run when nothing runs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

rc=0
bash "$HERE/connect.sh" stop --all || rc=1
bash "$HERE/registry.sh" stop || rc=1
bash "$HERE/kafka.sh" stop || rc=1
bash "$HERE/postgres.sh" stop || rc=1
exit "$rc"

#!/usr/bin/env bash
# Stop the schema registry, Kafka and PostgreSQL started by up.sh. Fine to run when nothing runs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

rc=0
bash "$HERE/registry.sh" stop || rc=1
bash "$HERE/kafka.sh" stop || rc=1
bash "$HERE/postgres.sh" stop || rc=1
exit "$rc"

#!/usr/bin/env bash
# The file channel's crash test, full length: the real agent (built from
# cmd/sluice) with a file channel on two data dirs under steady load is
# killed with SIGKILL at 20 random moments (some during its start, in
# replay) and restarted on the same dirs; every event acknowledged to the
# sender must be delivered, duplicates stay within the sink batches in
# flight at the kills. SLUICE_CRASH_KILLS=N changes the number of kills.
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE_LONG=1 exec go test -run='^TestCrashKill9$' -count=1 -v -timeout 15m ./internal/crashtest/ "$@"

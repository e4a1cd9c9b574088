#!/usr/bin/env bash
# Crash tests of the real agent (built from cmd/sluice), full length.
#
#   scripts/crash-test.sh [kill]   20 SIGKILLs of an agent with a file channel on two data dirs under steady
#                                  load (some during its start, in replay), each followed by a restart on the
#                                  same dirs. SLUICE_CRASH_KILLS=N changes the number of kills.
#   scripts/crash-test.sh mixed    30 random actions under the same load: SIGKILL then a restart, SIGTERM (exit
#                                  status 0 expected) then a restart, or SIGHUP after changing the file
#                                  channel's capacity (the channel is replaced and reopens its files).
#                                  SLUICE_CRASH_ACTIONS=N changes the number of actions.
#   scripts/crash-test.sh all      both
#
# Every event acknowledged to the sender must be delivered (acknowledged-lost must be 0); duplicates stay within
# the sink batches in flight at the kills, stops and reloads. Extra arguments go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=kill
case "${1:-}" in
kill | mixed | all)
	mode=$1
	shift
	;;
esac
case $mode in
kill) run='^TestCrashKill9$' ;;
mixed) run='^TestCrashMixed$' ;;
all) run='^(TestCrashKill9|TestCrashMixed)$' ;;
esac
SLUICE_LONG=1 exec go test -run="$run" -count=1 -v -timeout 30m ./internal/systemtest/crash/ "$@"

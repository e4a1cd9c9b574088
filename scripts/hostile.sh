#!/usr/bin/env bash
# Runs the hostile inputs of issue 13 against a freshly built agent (every
# network source at its default limits) and prints the table: input, response,
# peak RSS (VmHWM) and whether an honest client was served meanwhile. Each row
# runs against a fresh agent, then all of them at once against one; it fails
# when a row breaks a limit (the RSS bound of docs/operations.md "Limits", an
# honest client refused, a log not throttled, a loss not counted).
# Takes about a minute and a half; needs Linux (/proc) and ~8000 open files.
# Extra arguments go to `go test`. SLUICE_AGENT_BIN=path runs another binary
# (an older build, to compare) instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:--buildvcs=false}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
status=0
SLUICE_HOSTILE=1 SLUICE_HOSTILE_REPORT="$report" \
  go test -count=1 -timeout 30m -run 'TestHostileTable' -v ./internal/systemtest/hostile/ "$@" | grep -Ev '^\s+hostile_test.go:[0-9]+: $|^(=== RUN|--- PASS|PASS|ok )' || status=$?
[ -s "$report" ] && cat "$report"
exit $status

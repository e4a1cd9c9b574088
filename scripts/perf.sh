#!/usr/bin/env bash
# Regenerates every figure in docs/PERFORMANCE.md: runs each `sluice bench`
# preset and every opt-in performance test (SLUICE_PERF=1), and prints their
# tables. Takes about 30 minutes (the 10-minute latency preset is most of it).
#
#   scripts/perf.sh            everything
#   scripts/perf.sh --quick    the 30 s latency preset instead of the 10-minute one
#
# Environment:
#   PERF_OUT=DIR          where the JSON reports and SVG charts go (default /tmp/sluice-perf)
#   KAFKA_BROKERS=H:P     a Kafka cluster for the avro-kafka preset (default: kfake, in process)
#   PERF_PACKAGES="..."   only these packages' perf tests (default: every package that has one)
# Run it on a quiet machine; note the machine and its load beside the figures.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=false
[ "${1:-}" = "--quick" ] && quick=true
out=${PERF_OUT:-/tmp/sluice-perf}
mkdir -p "$out"
bin="$out/sluice"
status=0

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== build"
# -tags kfake: the avro-kafka preset's in-process broker (not in the agent's build).
go build -tags kfake -o "$bin" ./cmd/sluice || exit 1

# The lowrate preset measures a private rsyslog beside sluice (its own config
# and ports on loopback; nothing of the system's rsyslog is used or started).
if ! [ -x /usr/sbin/rsyslogd ]; then
  echo "== installing rsyslog (Debian) for the lowrate preset"
  if command -v apt-get >/dev/null; then
    (apt-get install -y -q rsyslog >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q rsyslog >/dev/null 2>&1; }) ||
      echo "(could not install rsyslog: the lowrate preset will fail on its rsyslog row)"
  fi
fi

preset() {
  local name=$1; shift
  echo
  echo "== sluice bench $name $*"
  if ! "$bin" bench "$name" --quiet --svg "$out/$name.svg" "$@" | tee "$out/$name.txt"; then
    echo "(preset $name failed or lost events)"; status=1
  fi
}

if $quick; then preset latency-200-short; else preset latency-200; fi
preset latency-200-avro-short
preset memory-vs-file
# Issue 17: memory and file channel in interleaved rounds, each agent a
# process of its own (CPU seconds, peak RSS, ratios); then 200 events/s for
# 60 s through memory, file and a private rsyslog.
preset file-vs-memory-tcp
preset file-vs-memory-roll
preset lowrate
# A real cluster when given, else the in-process fake broker.
preset avro-kafka --kafka-brokers "${KAFKA_BROKERS:-kfake}"

# Every package with opt-in performance tests, found by their switch, so a
# new one is run without editing this script.
pkgs=${PERF_PACKAGES:-$(grep -rl --include='*_test.go' 'SLUICE_PERF' internal cmd 2>/dev/null | xargs -r -n1 dirname | sort -u | sed 's|^|./|')}
for p in $pkgs; do
  echo
  echo "== SLUICE_PERF=1 go test -run Perf -v -count=1 $p"
  # t.Log lines and results only; the full log is kept in $out.
  log="$out/$(echo "$p" | tr '/.' '__').log"
  if ! SLUICE_PERF=1 go test -run 'Perf' -v -count=1 -timeout 60m "$p" >"$log" 2>&1; then
    status=1
  fi
  grep -E '^\s+[A-Za-z0-9_]+_test\.go:[0-9]+:|^\s{4,}\S|^--- (PASS|FAIL|SKIP)|^(ok|FAIL)\s' "$log"
done

echo
echo "== charts and reports in $out"
exit $status

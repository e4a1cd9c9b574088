#!/usr/bin/env bash
# The peers harness's W2 through one sluice agent, with the counts that hold up on a loaded machine: lines per put
# commit and per fdatasync (from the agent's /metrics), its CPU time and context switches per line (/proc), besides
# lines/s. Issue 27; docs/perf/issue-27.md.
#
#   LOADGEN=path/to/loadgen scripts/harness-counts.sh SLUICE_BINARY memory|file [LINES] [EXTRA_PROPERTIES_FILE]
#
# LOADGEN is the harness's load generator (../shared/bench: `cd loadgen && go build`). The agent's config is
# examples/bench-harness-{memory,file}.properties, the harness's own; EXTRA_PROPERTIES_FILE is appended to it (for
# instance `a1.sources.r1.batchSize = 1000`). LINES defaults to 1000000 (4 connections, 256 bytes each). Prints one
# line; run several binaries or channels interleaved and compare medians.
set -euo pipefail
bin=$1 channel=$2 count=${3:-1000000} extra=${4:-}
: "${LOADGEN:?set LOADGEN to the loadgen binary of the peers harness}"
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
agent=
trap 'if [ -n "$agent" ]; then kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null; fi; rm -rf "$work"' EXIT
ports=$("$LOADGEN" port -n 3)
inport=$(echo "$ports" | sed -n 1p) outport=$(echo "$ports" | sed -n 2p) httpport=$(echo "$ports" | sed -n 3p)
sed -e "s|\${bench.in.port:-44444}|$inport|" -e "s|\${bench.out.port:-44445}|$outport|" \
	-e "s|\${bench.data.dir:-/tmp/sluice-bench}|$work|" \
	"$here/examples/bench-harness-$channel.properties" >"$work/agent.properties"
[ -n "$extra" ] && cat "$extra" >>"$work/agent.properties"
"$LOADGEN" recv -listen "127.0.0.1:$outport" -expect "$count" -timeout 300s -linger 0s >"$work/recv.out" 2>&1 &
recv=$!
"$bin" agent -f "$work/agent.properties" -n a1 --log-level warn --no-reload-conf --http "127.0.0.1:$httpport" >"$work/agent.log" 2>&1 &
agent=$!
"$LOADGEN" wait -port "$inport" >/dev/null
sleep 1
cpu() { awk '{print $14 + $15}' "/proc/$agent/stat"; }
switches() { cat /proc/"$agent"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
c0=$(cpu) s0=$(switches)
"$LOADGEN" send -addr "127.0.0.1:$inport" -conns 4 -count "$count" -size 256 >"$work/send.out" 2>&1
wait "$recv" || { echo "the receiver did not get every line:" >&2; cat "$work/recv.out" >&2; exit 1; }
c1=$(cpu) s1=$(switches)
metrics=$(curl -s "http://127.0.0.1:$httpport/metrics")
python3 - "$metrics" "$count" "$((c1 - c0))" "$((s1 - s0))" "$(getconf CLK_TCK)" "$work/recv.out" "$channel" <<'PY'
import json, sys
m, n, ticks, sw, hz = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
recv = dict(l.strip().split("=", 1) for l in open(sys.argv[6]) if "=" in l)
commits = int(m["SOURCE.r1"]["AppendBatchAcceptedCount"])
syncs = int(m["CHANNEL.c1"].get("LogSyncCount") or 0)
print(f"{sys.argv[7]:6} lines/s {float(recv['e2e_lps']):9.0f}  CPU {ticks / hz * 1e6 / n:.3f} us/line  "
      f"switches {sw * 1000 / n:.1f}/1000 lines  lines/put commit {n / commits:.0f}  "
      f"lines/fdatasync {n / syncs if syncs else 0:.0f}")
PY

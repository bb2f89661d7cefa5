#!/usr/bin/env bash
# Busy polling against blocking on a completion channel (perftest's -e), measured in one run:
# `bypass perf write-lat` and `send-lat`, 8 bytes, two processes on UDP loopback, spin and -e
# in interleaved rounds; prints each round's t_typical and CPU_Util (system-wide, /proc/stat,
# as perftest's --cpu_util), then the medians and ranges.
#
# Usage: scripts/events-vs-spin.sh [ROUNDS (5)] [ITERS (20000)]
# Env: BYPASS (the CLI; default: a release build, built if missing), PORT (TCP, default 18610).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} iters=${2:-20000} port=${PORT:-18610}
bin=${BYPASS:-}
if [ -z "$bin" ]; then
    cargo build --release -q -p bypass --bin bypass
    bin=$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/bypass
fi

one() { # TOOL [OPTIONS]: one two-process run; prints "t_typical cpu"
    local tool=$1 server rc=0; shift
    port=$((port + 1))
    "$bin" perf "$tool" -d udp:127.0.0.1:4791 -p "$port" -s 8 -n "$iters" --cpu_util "$@" >/dev/null 2>&1 &
    server=$!
    sleep 0.3
    "$bin" perf "$tool" -d udp:127.0.0.2:4791 -p "$port" -s 8 -n "$iters" --cpu_util "$@" 127.0.0.1 2>/dev/null \
        | awk '$1 == 8 { print $5, $NF }' || rc=$?
    wait "$server" || rc=$?
    return "$rc"
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for tool in write-lat send-lat; do
    for r in $(seq "$rounds"); do
        echo "$tool spin $(one "$tool")" | tee -a "$results"
        echo "$tool events $(one "$tool" -e)" | tee -a "$results"
    done
done
echo "median (range) over $rounds rounds:"
for tool in write-lat send-lat; do
    for mode in spin events; do
        awk -v t="$tool" -v m="$mode" '$1 == t && $2 == m { print $3, $4 }' "$results" | python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
lat, cpu = [r[0] for r in rows], [r[1] for r in rows]
print(f"  {sys.argv[1]:9} {sys.argv[2]:6}  t_typical {statistics.median(lat):7.2f} us ({min(lat):.2f}-{max(lat):.2f})"
      f"   CPU {statistics.median(cpu):6.2f} % ({min(cpu):.2f}-{max(cpu):.2f})")' "$tool" "$mode"
    done
done

#!/usr/bin/env bash
# User-space instructions per 8-byte RDMA WRITE exchange of the in-process sim (the figure
# quoted in docs/perf.md for `bypass perf write-lat`), counted by callgrind.
#
# `bypass perf write-lat -s 8` runs two simulated NICs on a threaded fabric with inline
# doorbells: the posting thread rings a doorbell and the devices act on it in that thread, so
# one exchange (post, the peer's ping, its completion) is that thread's work. The script runs
# it twice, with -n 20000 and -n 10000, counts the posting thread (the thread that executed
# most) in each, and divides the difference by 10000: set-up and teardown cancel out.
# Instruction counts do not depend on how busy the host is; the engine thread's timing moves
# the figure slightly.
#
# Built for baseline x86-64 (valgrind 3.19 cannot decode AVX-512).
# Usage: scripts/callgrind-sim.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/callgrind}"
RUSTFLAGS="-C target-cpu=x86-64 -g" cargo build --release --bin bypass
bin="$CARGO_TARGET_DIR/release/bypass"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# busiest N: the instruction total of the thread that executed most in run N.
busiest() {
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/run$1.cg" \
    "$bin" perf write-lat -s 8 -n "$1" >/dev/null 2>"$out/run$1.log"
  local best=0 t n
  for t in "$out"/run"$1".cg-*; do
    n="$(grep '^summary:' "$t" | awk '{print $2}')"
    case "$n" in '' | *[!0-9]*) continue ;; esac
    [ "$n" -gt "$best" ] && best="$n"
  done
  echo "$best"
}

long="$(busiest 20000)"
short="$(busiest 10000)"
[ "$long" -gt "$short" ] || { echo "the longer run counted no more than the shorter: $long <= $short" >&2; exit 1; }
echo "write-lat: ($long - $short) instructions / 10000 exchanges = $(( (long - short) / 10000 )) per 8-byte WRITE exchange (posting thread)"

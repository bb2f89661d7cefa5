#!/usr/bin/env bash
# User-space instructions of the UDP link, counted by callgrind (the figures docs/perf.md
# records for the UDP link; instruction counts do not depend on how busy the host is).
#
#   round trip: `bypass perf compare-udp --only rtt -n 2000 --rounds 1 --rtt-threads 1` (both
#               NICs in one thread: no empty polls counted), collecting only in the
#               WRITE ping-pong's own functions (spin_yield, End::post_write, End::drain: the
#               posting thread drives both NICs there, doorbells, link pumps and all); total /
#               2016 round trips (2000 + the 16 warm-up ones).
#   bandwidth:  `bypass perf compare-udp --only bw --runs 1 --rounds 1 --bw-iters 50` with
#               --separate-threads, collecting in write_bw_rate (the posting thread, which
#               builds and sends most of the WRITE packets); per packet it built, counted as
#               the calls of HostMemory::base from the gather path (one payload piece per
#               packet here), with the CRC (crc32fast) shown apart (the source buffer is
#               filled before, outside the count). This figure varies from run to run:
#               which packets the engine thread sends instead depends on timing.
#
# Built for baseline x86-64 (valgrind 3.19 cannot decode AVX-512); under valgrind crc32fast
# takes its 128-bit PCLMULQDQ path, so the CRC share is larger than on the real CPU.
# Usage: scripts/callgrind-udp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/callgrind}"
RUSTFLAGS="-C target-cpu=x86-64 -g" cargo build --release --bin bypass
bin="$CARGO_TARGET_DIR/release/bypass"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

total() { callgrind_annotate "$1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }

valgrind --tool=callgrind --callgrind-out-file="$out/rtt.cg" \
  --toggle-collect='*spin_yield*' --toggle-collect='*pair*End*post_write*' \
  --toggle-collect='*End*drain*' \
  "$bin" perf compare-udp --only rtt -n 2000 --rounds 1 --rtt-threads 1 >/dev/null 2>"$out/rtt.log"
rtt="$(total "$out/rtt.cg")"
# Far fewer than a few thousand a round trip means the toggles above no longer name the
# functions the ping-pong runs in (renamed, or inlined away): the figure would be wrong.
case "$rtt" in '' | *[!0-9]*) rtt=0 ;; esac
[ "$((rtt / 2016))" -ge 2000 ] || { echo "round trip: only $rtt instructions collected: check the --toggle-collect symbols" >&2; exit 1; }
echo "round trip: $rtt instructions / 2016 round trips = $((rtt / 2016)) per 8-byte WRITE round trip"

valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/bw.cg" \
  --toggle-collect='*write_bw_rate*' \
  "$bin" perf compare-udp --only bw --runs 1 --rounds 1 --bw-iters 50 >/dev/null 2>"$out/bw.log"
# The posting thread: the one that collected most.
f="" all=0
for t in "$out"/bw.cg-*; do
  n="$(total "$t")"
  case "$n" in '' | *[!0-9]*) continue ;; esac # a thread that collected nothing
  if [ "${n:-0}" -gt "$all" ]; then f="$t" all="$n"; fi
done
# (awk reads to the end: an early exit would kill callgrind_annotate with SIGPIPE, which
# pipefail turns into a silent stop of this script.)
# One call of Burst::write_headers per packet built: the sum of its callers' call counts.
pkts="$(callgrind_annotate --tree=caller "$f" | awk '
  /^ *$/ { n = 0; next }
  /^ *[0-9,]+ .*< / { c = $0; sub(/.*\(/, "", c); sub(/x\).*/, "", c); gsub(",", "", c); n += c; next }
  /\* +\?\?\?:bypass_sim::frame::Burst::write_headers / && !found { print n; found = 1 }
  { n = 0 }')"
crc="$(callgrind_annotate "$f" | awk '/pclmulqdq::calculate/ {gsub(",", "", $1); s += $1} END {print s + 0}')"
[ -n "$pkts" ] && [ "$pkts" -gt 0 ] || { echo "could not count the packets built" >&2; exit 1; }
# 50 WRITEs of 1 MiB are 12,800 packets of 4 KiB; the posting thread builds most of them (the
# engine thread the rest). Far fewer means the count above no longer finds one call per packet
# (the gather path changed shape; it counted HostMemory::base under push_burst until inlining
# folded push_burst into UdpWire::round): a figure divided by it would be wrong, so stop.
[ "$pkts" -ge 3200 ] && [ "$pkts" -le 12800 ] || {
  echo "counted $pkts packets built by the posting thread, not 3,200..12,800: the count (calls of Burst::write_headers) no longer matches the gather path" >&2
  exit 1
}
echo "bandwidth: $(( all / pkts )) instructions per 4 KiB WRITE packet on the posting thread ($pkts packets): $(( crc / pkts )) CRC, $(( (all - crc) / pkts )) the rest"

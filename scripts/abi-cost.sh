#!/usr/bin/env bash
# abi-cost.sh - what the C ABI costs: perftest's ib_write_lat / ib_write_bw over bypass's
# drop-in libibverbs.so.1 next to `bypass perf write-lat` / `write-bw` (the Rust API), both
# two processes on UDP loopback, same sizes and iterations, release builds, in one run.
#
#   scripts/abi-cost.sh [--runs N] [--iters N] [--lat-size B] [--bw-size B] [--no-build] [--bin DIR]
#
# Each run measures, alternating which form goes first: the client's t_typical (the median
# one-way latency perftest prints) of an RDMA WRITE ping-pong of --lat-size bytes (default 2),
# and the client's BW average of --bw-size WRITEs (default 65536; TX depth 128, every 100th
# signalled in both). Prints every run, then per test the medians and ranges (min..max) of
# both forms and the ratio of the medians (C over Rust for latency, Rust over C for bandwidth:
# above 1 is what the C ABI costs; the target is <= 1.05). Exits 1 when a run fails.
#
#   --runs N     runs (default 5)        --iters N    iterations of each test (default 5000)
#   --no-build   use what is built       --bin DIR    folder with `bypass` and `abi/` (the
#                                                     drop-ins) instead of $CARGO_TARGET_DIR/release
# Environment: PERFTEST_OLD_POST=1 runs perftest with --use_old_post_send (default 0: the
# extended post, perftest's own default; see
# scripts/verbs-programs.sh); AC_UDP_PORT=47940, AC_TCP_PORT=18680 (one more per program run).
# AC_NICE=N runs both sides under `nice -n N` (e.g. -10 on a machine busy with other work: both
# forms alike; needs root for N < 0). Server: udp:127.0.0.1:PORT, client udp:127.0.0.2:PORT. Needs perftest, ss, awk, sort.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
# shellcheck source=scripts/abi-install.sh
source "$ROOT/scripts/abi-install.sh"

RUNS=5
ITERS=5000
LAT_SIZE=2
BW_SIZE=65536
BUILD=1
BIN=
while [ $# -gt 0 ]; do
    case $1 in
        --runs) RUNS=${2:?}; shift ;;
        --iters) ITERS=${2:?}; shift ;;
        --lat-size) LAT_SIZE=${2:?}; shift ;;
        --bw-size) BW_SIZE=${2:?}; shift ;;
        --no-build) BUILD=0 ;;
        --bin) BIN=${2:?}; BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
UDP=${AC_UDP_PORT:-47940}
TCP=${AC_TCP_PORT:-18680}
OLD=()
[ "${PERFTEST_OLD_POST:-0}" = 1 ] && OLD=(--use_old_post_send)
command -v ib_write_lat >/dev/null || { echo "abi-cost: perftest is not installed" >&2; exit 2; }
command -v ss >/dev/null || { echo "abi-cost: ss (iproute2) is not installed" >&2; exit 2; }

if [ -z "$BIN" ]; then
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
    if [ "$BUILD" = 1 ]; then
        cargo build --release -p bypass -p bypass-ibverbs -p bypass-standin-mlx5 \
            -p bypass-standin-efa || exit 1
    fi
    install_abi_libs "$BIN" "$BIN/abi" >/dev/null || exit 1
fi
[ -x "$BIN/bypass" ] && [ -f "$BIN/abi/libibverbs.so.1" ] \
    || { echo "abi-cost: $BIN/bypass or $BIN/abi/libibverbs.so.1 is missing" >&2; exit 2; }
LOG=$(mktemp -d /tmp/abi-cost.XXXXXX)

SPID=
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

SEQ=0
# one FORM TEST SIZE SEQ: runs server and client; prints the client's figure (t_typical or BW
# average), or nothing when either side failed.
one() {
    local form=$1 test=$2 size=$3 seq=$4 port out
    port=$((TCP + seq))
    out=$LOG/$seq-$form-$test
    local srv=() cli=()
    if [ "$form" = rust ]; then
        srv=("$BIN/bypass" perf "$test" -d "udp:127.0.0.1:$UDP" -p "$port" -n "$ITERS" -s "$size")
        cli=("${srv[@]}")
        cli[4]=udp:127.0.0.2:$UDP
        cli+=(127.0.0.1)
    else
        srv=(env "LD_LIBRARY_PATH=$BIN/abi" "BYPASS_DEVICE=udp:127.0.0.1:$UDP" "ib_${test/-/_}"
            -x 0 -F -p "$port" -n "$ITERS" -s "$size" "${OLD[@]}")
        cli=("${srv[@]}")
        cli[2]=BYPASS_DEVICE=udp:127.0.0.2:$UDP
        cli+=(127.0.0.1)
    fi
    if [ -n "${AC_NICE:-}" ]; then
        srv=(nice -n "$AC_NICE" "${srv[@]}")
        cli=(nice -n "$AC_NICE" "${cli[@]}")
    fi
    timeout 120 "${srv[@]}" >"$out.server" 2>&1 &
    SPID=$!
    local i
    for i in $(seq 200); do
        ss -ltnH "sport = :$port" | grep -q . && break
        sleep 0.05
    done
    timeout 120 "${cli[@]}" >"$out.client" 2>&1
    local rc=$?
    wait "$SPID" || rc=1
    SPID=
    [ $rc -eq 0 ] || { echo "abi-cost: $form $test failed (see $out.*)" >&2; return 1; }
    local col=5
    [ "$test" = write-bw ] && col=4
    awk -v n="$ITERS" -v c=$col '$2 == n && $1 ~ /^[0-9]+$/ { print $c; exit }' "$out.client"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo ".." hi }'; }

declare -A VALS=()
FAIL=0
echo "abi-cost: $RUNS runs, $ITERS iterations, write-lat ${LAT_SIZE} B, write-bw ${BW_SIZE} B, bin $BIN, perftest ${OLD[*]:-(extended post)}${AC_NICE:+, nice $AC_NICE}"
echo "abi-cost: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-4s %-10s %14s %14s\n' run test rust "C (perftest)"
for r in $(seq "$RUNS"); do
    for test in write-lat write-bw; do
        size=$LAT_SIZE
        [ "$test" = write-bw ] && size=$BW_SIZE
        order=(rust c)
        [ $((r % 2)) = 0 ] && order=(c rust)
        declare -A got=()
        for form in "${order[@]}"; do
            SEQ=$((SEQ + 1))
            v=$(one "$form" "$test" "$size" "$SEQ")
            if [ -z "$v" ]; then
                FAIL=1
                v=-
            else
                VALS[$form-$test]+="$v "
            fi
            got[$form]=$v
        done
        printf '%-4s %-10s %14s %14s\n' "$r" "$test" "${got[rust]}" "${got[c]}"
        unset got
    done
done
echo
printf '%-10s %-8s %-22s %-22s %s\n' test unit "rust median (range)" "C median (range)" "C ABI cost"
for test in write-lat write-bw; do
    rm=$(tr ' ' '\n' <<<"${VALS[rust-$test]:-}" | grep . | median)
    cm=$(tr ' ' '\n' <<<"${VALS[c-$test]:-}" | grep . | median)
    rr=$(tr ' ' '\n' <<<"${VALS[rust-$test]:-}" | grep . | range)
    cr=$(tr ' ' '\n' <<<"${VALS[c-$test]:-}" | grep . | range)
    if [ "$test" = write-lat ]; then
        unit=us ratio=$(awk -v a="$cm" -v b="$rm" 'BEGIN { if (b > 0) printf "%.3f", a / b }')
    else
        unit=MiB/s ratio=$(awk -v a="$rm" -v b="$cm" 'BEGIN { if (b > 0) printf "%.3f", a / b }')
    fi
    printf '%-10s %-8s %-22s %-22s %s\n' "$test" "$unit" "$rm ($rr)" "$cm ($cr)" "x$ratio"
done
echo "abi-cost: outputs in $LOG"
exit $FAIL

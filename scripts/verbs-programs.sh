#!/usr/bin/env bash
# verbs-programs.sh - unmodified rdma-core programs (ibverbs-utils, perftest) over bypass's
# drop-in libibverbs.so.1, two processes on UDP loopback.
#
#   scripts/verbs-programs.sh [--debug] [--no-build] [--only REGEX] [-k]
#
# Builds the drop-ins (release unless --debug), installs them under their sonames
# (scripts/abi-install.sh -> $CARGO_TARGET_DIR/PROFILE/abi), runs scripts/abi-check.sh on that
# folder (ldd -r over every consumer; must pass), then runs, as LD_LIBRARY_PATH=that folder:
#   - ibv_devices, ibv_devinfo -v: bypass0 listed; the capabilities `bypass devinfo` prints for
#     the same device (max_qp, max_qp_wr, max_cq, max_cqe, max_mr, max_pd, atomic_cap, fw_ver,
#     phys_port_cnt, max_msg_sz, the part id, port state, active_mtu, every GID) must equal
#     what ibv_devinfo prints (max_inline_data is not in ibv_device_attr: not compared);
#   - ibv_rc_pingpong -g 0 (default, -e, -s 65536, -m 1024), ibv_ud/srq/uc_pingpong -g 0: both
#     sides exit 0 and print their "N iters in S seconds = U usec/iter" line (N = iterations);
#   - perftest ib_{send,write,read,atomic}_{lat,bw}: both sides exit 0; each side that prints
#     results (all but the passive server of read/atomic lat) prints the table's header and a
#     data row for the size run.
# The server is BYPASS_DEVICE=udp:127.0.0.1:UDP, the client udp:127.0.0.2:UDP connecting to
# 127.0.0.1 over TCP. Prints a summary table (program, options, result, figure); exits 0 only
# if every check passed. Each run's output is kept in $VP_LOG (printed at the end).
#
# Environment:
#   PERFTEST_OLD_POST=0  (default) perftest takes its default path, the extended post
#                        (ibv_qp_ex, ibv_wr_*); 1 runs it with --use_old_post_send (ibv_post_send)
#   VP_UDP_PORT=47920    the UDP port of both devices (not 4791: other runs may hold it)
#   VP_TCP_PORT=18620    first TCP port of the out-of-band exchanges (one more per run)
#   VP_TIMEOUT=120       seconds each program may run
#   VP_ITERS=1000        perftest iterations (-n); pingpong uses its default 1000 (-n too)
#   VP_LOG=DIR           where outputs go (default: a new mktemp -d folder)
# -k keeps going after the ABI check fails. Needs ss (iproute2) to wait for the server's
# port, /usr/bin/python3 (the devinfo comparison), ibverbs-utils and perftest.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
# shellcheck source=scripts/abi-install.sh
source "$ROOT/scripts/abi-install.sh"

PROFILE=release
BUILD=1
ONLY=
KEEP_GOING=0
while [ $# -gt 0 ]; do
    case $1 in
        --debug) PROFILE=debug ;;
        --no-build) BUILD=0 ;;
        --only) [ $# -ge 2 ] || { echo "--only needs a regex" >&2; exit 2; }; ONLY=$2; shift ;;
        -k) KEEP_GOING=1 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

PERFTEST_OLD_POST=${PERFTEST_OLD_POST:-0}
UDP=${VP_UDP_PORT:-47920}
TCP=${VP_TCP_PORT:-18620}
TMO=${VP_TIMEOUT:-120}
ITERS=${VP_ITERS:-1000}
LOG=${VP_LOG:-$(mktemp -d /tmp/verbs-programs.XXXXXX)}
mkdir -p "$LOG"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PDIR=$TARGET/$PROFILE
ABI=$PDIR/abi
BYPASS=$PDIR/bypass
PY=/usr/bin/python3
OLD=
[ "$PERFTEST_OLD_POST" = 1 ] && OLD=" old-post"
SERVER_DEV=udp:127.0.0.1:$UDP
CLIENT_DEV=udp:127.0.0.2:$UDP

need() { command -v "$1" >/dev/null || { echo "verbs-programs: $1 is not installed ($2)" >&2; exit 2; }; }
need ibv_rc_pingpong "apt-get install ibverbs-utils"
need ib_write_lat "apt-get install perftest"
need ss "apt-get install iproute2"
[ -x $PY ] || { echo "verbs-programs: $PY is missing" >&2; exit 2; }

# --- the servers this script started; killed (by pid) on every exit ---------------------
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- results -----------------------------------------------------------------------------
ROWS=()
FAILED=0
row() { # row PROGRAM OPTIONS RESULT FIGURE
    ROWS+=("$(printf '%-16s %-28s %-5s %s' "$1" "$2" "$3" "$4")")
    [ "$3" = ok ] || FAILED=$((FAILED + 1))
    printf '%-16s %-28s %-5s %s\n' "$1" "$2" "$3" "$4"
}
selected() { [ -z "$ONLY" ] || [[ "$1" =~ $ONLY ]]; }

# A UDP port held by someone else would mix two runs' packets: refuse rather than kill.
busy=$(ss -lunH "sport = :$UDP" 2>/dev/null)
if [ -n "$busy" ]; then
    echo "verbs-programs: UDP port $UDP is in use (set VP_UDP_PORT):" >&2
    echo "$busy" >&2
    exit 2
fi

# --- build, install, ABI check -----------------------------------------------------------
if [ "$BUILD" = 1 ]; then
    flag=()
    [ "$PROFILE" = release ] && flag=(--release)
    echo "verbs-programs: cargo build ${flag[*]} (bypass, bypass-ibverbs, standins)"
    cargo build "${flag[@]}" -p bypass -p bypass-ibverbs -p bypass-standin-mlx5 \
        -p bypass-standin-efa || exit 1
fi
install_abi_libs "$PDIR" "$ABI" >/dev/null || exit 1
export LD_LIBRARY_PATH=$ABI
if "$ROOT/scripts/abi-check.sh" "$ABI" >"$LOG/abi-check.out" 2>&1; then
    row abi-check "ldd -r, all consumers" ok "$(grep -oE '[0-9]+ passed' "$LOG/abi-check.out")"
else
    tail -20 "$LOG/abi-check.out"
    row abi-check "ldd -r, all consumers" FAIL "$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$LOG/abi-check.out")"
    [ "$KEEP_GOING" = 1 ] || exit 1
fi

# --- ibv_devices, ibv_devinfo against bypass devinfo --------------------------------------
if selected devinfo; then
    BYPASS_DEVICE=$SERVER_DEV timeout "$TMO" ibv_devices >"$LOG/ibv_devices.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -qE '^[[:space:]]+bypass0[[:space:]]+[0-9a-f]{16}$' "$LOG/ibv_devices.out"; then
        row ibv_devices "" ok "bypass0 $(awk '$1 == "bypass0" { print $2 }' "$LOG/ibv_devices.out")"
    else
        row ibv_devices "" FAIL "rc=$rc, bypass0 not listed"
    fi
    BYPASS_DEVICE=$SERVER_DEV timeout "$TMO" ibv_devinfo -v >"$LOG/ibv_devinfo.out" 2>&1
    rc1=$?
    timeout "$TMO" "$BYPASS" devinfo -d "$SERVER_DEV" >"$LOG/bypass_devinfo.out" 2>&1
    rc2=$?
    if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
        row ibv_devinfo "-v vs bypass devinfo" FAIL "ibv_devinfo rc=$rc1, bypass devinfo rc=$rc2"
    elif cmp=$($PY - "$LOG/ibv_devinfo.out" "$LOG/bypass_devinfo.out" "$LOG/ibv_devices.out" <<'EOF'
# Compares the fields both tools print; prints "N fields equal" or the differences (exit 1).
import ipaddress, re, sys
ibv, byp, devs = (open(p).read() for p in sys.argv[1:4])
def field(text, name, first=True):
    m = re.findall(r'^\s*' + re.escape(name) + r':\s*(.*?)\s*$', text, re.M)
    return (m[0] if first else m) if m else None
def num(s):
    return int(s.split()[0], 0) if s is not None else None
def name(s):  # "ATOMIC_HCA (1)" -> "ATOMIC_HCA"
    return s.split()[0] if s else None
def paren(s):  # "PORT_ACTIVE (4)" / "ACTIVE (4)" -> 4
    m = re.search(r'\((\d+)\)', s or '')
    return int(m.group(1)) if m else None
def gids(text):
    out = {}
    for i, g in re.findall(r'GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)', text):
        out[int(i)] = ipaddress.ip_address(g)
    return out
pairs = [(k, num(field(ibv, k)), num(field(byp, k)))
         for k in ('max_qp', 'max_qp_wr', 'max_cq', 'max_cqe', 'max_mr', 'max_pd',
                   'phys_port_cnt', 'max_msg_sz')]
pairs += [
    ('atomic_cap', name(field(ibv, 'atomic_cap')), name(field(byp, 'atomic_cap'))),
    ('fw_ver', field(ibv, 'fw_ver'), field(byp, 'fw_ver')),
    ('vendor_part_id', num(field(ibv, 'vendor_part_id')), num(field(byp, 'vendor_part_id'))),
    ('hw_ver', num(field(ibv, 'hw_ver')), num(field(byp, 'hw_ver'))),
    ('port state', paren(field(ibv, 'state')), paren(field(byp, 'state'))),
    ('active_mtu', num(field(ibv, 'active_mtu')), num(field(byp, 'active_mtu'))),
    ('GIDs', gids(ibv), gids(byp)),
]
guid = field(ibv, 'node_guid')
listed = re.search(r'^\s*bypass0\s+([0-9a-f]{16})$', devs, re.M)
pairs.append(('node_guid (ibv_devices)', guid.replace(':', '') if guid else None,
              listed.group(1) if listed else None))
bad = [f'{k}: ibv_devinfo {a!r} != bypass {b!r}' for k, a, b in pairs if a is None or a != b]
if not gids(ibv):
    bad.append('no GID printed')
if bad:
    print('; '.join(bad))
    sys.exit(1)
print(f'{len(pairs)} fields equal')
EOF
    ); then
        row ibv_devinfo "-v vs bypass devinfo" ok "$cmp"
    else
        row ibv_devinfo "-v vs bypass devinfo" FAIL "$cmp"
    fi
fi

# --- two-process runs ---------------------------------------------------------------------
# wait_listen PORT PID: waits (up to 20 s) until PID listens on TCP PORT; false if it died.
wait_listen() {
    local i
    for i in $(seq 200); do
        ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# pair NAME OPTS -- ARGS...: server `NAME ARGS -p PORT`, client `NAME ARGS -p PORT 127.0.0.1`;
# sets RC_S RC_C, OUT_S OUT_C (their output files).
SEQ=0
pair() {
    local prog=$1 tag=$2 port
    shift 2
    SEQ=$((SEQ + 1))
    port=$((TCP + SEQ))
    OUT_S="$LOG/$SEQ-$prog.server"
    OUT_C="$LOG/$SEQ-$prog.client"
    echo "# $prog $* -p $port  ($tag)" >"$OUT_S"
    cp "$OUT_S" "$OUT_C"
    BYPASS_DEVICE=$SERVER_DEV timeout "$TMO" "$prog" "$@" -p "$port" >>"$OUT_S" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    if wait_listen "$port" "$spid"; then
        BYPASS_DEVICE=$CLIENT_DEV timeout "$TMO" "$prog" "$@" -p "$port" 127.0.0.1 >>"$OUT_C" 2>&1
        RC_C=$?
    else
        echo "verbs-programs: the server never listened on TCP $port" >>"$OUT_C"
        RC_C=99
    fi
    wait "$spid"
    RC_S=$?
    local keep=() p
    for p in "${PIDS[@]}"; do
        [ "$p" = "$spid" ] || keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

# pingpong PROG OPTS...: both sides print "1000 iters in S seconds = U usec/iter".
pingpong() {
    local prog=$1 opts="${*:2}" iters=1000 why=
    selected "$prog $opts" || return 0
    pair "$prog" "$opts" "${@:2}"
    for side in S C; do
        local rc out
        if [ $side = S ]; then rc=$RC_S out=$OUT_S; else rc=$RC_C out=$OUT_C; fi
        [ "$rc" -eq 0 ] || why+="${side,,}: rc=$rc "
        grep -qE "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter$" "$out" \
            || why+="${side,,}: no '$iters iters in' line "
    done
    if [ -z "$why" ]; then
        row "$prog" "$opts" ok "$(grep -oE '[0-9.]+ usec/iter' "$OUT_C")"
    else
        row "$prog" "$opts" FAIL "$why(see $OUT_C)"
    fi
}

# perftest PROG SERVER_PRINTS OPTS...: both sides exit 0; the client (and the server when
# SERVER_PRINTS=1) prints the table header and a data row; the figure is the client's
# t_typical (lat) or BW average (bw).
perftest() {
    local prog=$1 server_prints=$2 opts="${*:3}" why= header figure
    selected "$prog $opts" || return 0
    local extra=(-x 0 -F -n "$ITERS")
    [ "$PERFTEST_OLD_POST" = 1 ] && extra+=(--use_old_post_send)
    pair "$prog" "$opts" "${extra[@]}" "${@:3}"
    case $prog in
        *_lat) header='#bytes #iterations +t_min\[usec\]' ;;
        *) header='#bytes +#iterations +BW peak\[MB/sec\] +BW average\[MB/sec\]' ;;
    esac
    local data="^ *[0-9]+ +$ITERS +[0-9.]+ +[0-9.]+"
    for side in S C; do
        local rc out
        if [ $side = S ]; then rc=$RC_S out=$OUT_S; else rc=$RC_C out=$OUT_C; fi
        [ "$rc" -eq 0 ] || why+="${side,,}: rc=$rc "
        [ $side = S ] && [ "$server_prints" = 0 ] && continue
        grep -qE " $header" "$out" || why+="${side,,}: no table header "
        grep -qE "$data" "$out" || why+="${side,,}: no data row "
    done
    if [ -z "$why" ]; then
        case $prog in
            *_lat) figure="$(grep -E "$data" "$OUT_C" | awk '{ print $5 }' | head -1) us typical" ;;
            *) figure="$(grep -E "$data" "$OUT_C" | awk '{ print $4 }' | head -1) MB/s avg" ;;
        esac
        row "$prog" "${opts:+$opts }-n $ITERS$OLD" ok "$figure"
    else
        row "$prog" "${opts:+$opts }-n $ITERS$OLD" FAIL "$why(see $OUT_C)"
    fi
}

pingpong ibv_rc_pingpong -g 0
pingpong ibv_rc_pingpong -g 0 -e
pingpong ibv_rc_pingpong -g 0 -s 65536
pingpong ibv_rc_pingpong -g 0 -m 1024
pingpong ibv_ud_pingpong -g 0
pingpong ibv_srq_pingpong -g 0
pingpong ibv_uc_pingpong -g 0

for t in send write read atomic; do
    server_prints=1
    case $t in read | atomic) server_prints=0 ;; esac # the passive side prints no results
    perftest "ib_${t}_lat" $server_prints
    perftest "ib_${t}_bw" 1
done
[ -n "$OLD" ] && echo "perftest ran with --use_old_post_send (PERFTEST_OLD_POST=1)"

echo
echo "verbs-programs: $PROFILE build, server $SERVER_DEV, client $CLIENT_DEV, outputs in $LOG"
printf '%-16s %-28s %-5s %s\n' program options result figure
for r in "${ROWS[@]}"; do
    echo "$r"
done
echo "verbs-programs: ${#ROWS[@]} checks, $FAILED failed"
[ "$FAILED" -eq 0 ]

#!/usr/bin/env bash
# ucx-tests.sh - UCX and OpenMPI, unmodified (Debian's ucx-utils 1.13.1, openmpi-bin 4.1.4),
# over bypass's drop-in libibverbs.so.1 on two processes joined by UDP loopback (RoCE v2).
#
#   scripts/ucx-tests.sh [--install] [--release] [--no-build] [--keep-logs] [DIR]
#
# Steps (each must pass; the script fails on the first that does not, printing its logs):
#   1. ucx_info -d sees bypass0:1 with rc_verbs and ud_verbs.
#   2. ucx_perftest server (udp:127.0.3.1) and client (udp:127.0.3.2), UCX_TLS=ud_v then
#      rc_v, UCX_NET_DEVICES=bypass0:1: tag_lat, tag_bw (64 KiB), and on rc_v ucp_put_lat /
#      ucp_get (RDMA WRITE / READ). Each prints its "Final:" line.
#   3. mpirun -np 2 --mca pml ucx, UCX_TLS=ud_v then rc_v: a C program (compiled with mpicc
#      in a temporary folder) ping-pongs 8 B..1 MiB checking every byte, then allreduces
#      100k longs and checks the sums. Each rank takes its own BYPASS_DEVICE from a wrapper
#      that chooses by OMPI_COMM_WORLD_RANK.
#
# UCX ignores an IB device unless /dev/infiniband/<dev_name> is a character device it can
# open (ucx src/uct/ib/base/ib_md.c uct_ib_device_is_accessible) and reads each GID's type
# from /sys/class/infiniband/<dev>/ports/N/gid_attrs/types/I (RoCE v1 if absent: wrong for
# bypass). The script re-runs itself in a private mount namespace (unshare -m, so root) and
# there puts a tmpfs over /dev and over /sys/class whose entries are symlinks to the real
# ones (reached through rbind mounts in a temporary folder), adds /dev/infiniband/uverbs0
# (a bind of /dev/null) and /sys/class/infiniband/bypass0/ports/1/gid_attrs/{types,ndevs}/0
# ("RoCE v2", "lo"). Nothing outside the namespace changes; the namespace ends with the
# script and the temporary folder is removed. See docs/ucx.md.
#
#   DIR         folder with the drop-in libraries (install_abi_libs, scripts/abi-install.sh);
#               default ${CARGO_TARGET_DIR:-target}/{debug|release}/abi, built and filled first
#               unless --no-build
#   --install   apt-get install what is missing (ucx-utils openmpi-bin libopenmpi-dev; root),
#               unless SKIP_INSTALL=1
#   --release   use (and build) the release profile
#   --keep-logs keep the logs folder (its path is printed)
#
# Addresses 127.0.3.1 and 127.0.3.2 (RoCE port 4791) and the perftest port UCX_TESTS_PORT
# (default 13411) must be free. Needs ucx_perftest/ucx_info (ucx-utils), mpirun/mpicc
# (openmpi-bin, libopenmpi-dev), unshare (util-linux), ss (iproute2). When one is missing,
# or the script is not root, it fails, unless BYPASS_REQUIRE_ORACLES is unset: then it prints
# "skipped: ..." and exits 0.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SELF="$ROOT/scripts/ucx-tests.sh"

# --- inside the namespace: build the device files, then run the steps -----------------------

# ns_setup STASH: the /dev and /sys/class views described above (mount namespace only).
ns_setup() {
    local stash=$1 e p
    mount -t tmpfs bypass-ucx-stash "$stash"
    mkdir "$stash/sys" "$stash/dev"
    mount --rbind /sys "$stash/sys"
    mount --rbind /dev "$stash/dev"
    mount -t tmpfs -o mode=755 bypass-ucx-class /sys/class
    for e in "$stash"/sys/class/*; do ln -s "$e" "/sys/class/${e##*/}"; done
    mount -t tmpfs -o mode=755 bypass-ucx-dev /dev
    for e in "$stash"/dev/*; do
        if [ -L "$e" ]; then cp -P "$e" /dev/; else ln -s "$e" "/dev/${e##*/}"; fi
    done
    mkdir /dev/infiniband /sys/class/infiniband
    touch /dev/infiniband/uverbs0
    mount --bind "$stash/dev/null" /dev/infiniband/uverbs0
    p=/sys/class/infiniband/bypass0/ports/1/gid_attrs
    mkdir -p "$p/types" "$p/ndevs"
    echo "RoCE v2" >"$p/types/0"
    echo lo >"$p/ndevs/0"
    [ -c /dev/infiniband/uverbs0 ] || { echo "ucx-tests: /dev/infiniband/uverbs0 is not a character device" >&2; return 1; }
}

LOGS= FAILED=0 SERVER_PID=

fail() {
    echo "ucx-tests: FAIL: $*" >&2
    FAILED=1
}

show_log() {
    echo "----- $1 (last 30 lines)" >&2
    tail -n 30 "$1" >&2 || true
}

# wait_listen PORT PID: until something listens on PORT (or PID exits: 1), 30 s at most.
wait_listen() {
    local i
    for ((i = 0; i < 300; i++)); do
        if ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}

# perftest TLS TEST [ARGS...]: one ucx_perftest server/client pair; prints the Final line.
perftest() {
    local tls=$1 test=$2 name
    shift 2
    name="perftest-$tls-$test"
    local env=(UCX_TLS="$tls" UCX_NET_DEVICES=bypass0:1)
    env "${env[@]}" BYPASS_DEVICE=udp:127.0.3.1 timeout 120 ucx_perftest -p "$PORT" \
        >"$LOGS/$name.server" 2>&1 &
    SERVER_PID=$!
    if ! wait_listen "$PORT" "$SERVER_PID"; then
        fail "$name: the server never listened on port $PORT"
        show_log "$LOGS/$name.server"
        stop_server
        return
    fi
    local rc=0
    env "${env[@]}" BYPASS_DEVICE=udp:127.0.3.2 timeout 120 ucx_perftest 127.0.3.1 -p "$PORT" -t "$test" "$@" \
        >"$LOGS/$name.client" 2>&1 || rc=$?
    local src=0
    wait "$SERVER_PID" || src=$?
    SERVER_PID=
    local final
    final=$(grep '^Final:' "$LOGS/$name.client" || true)
    if [ "$rc" != 0 ] || [ "$src" != 0 ] || [ -z "$final" ]; then
        fail "$name: client exit $rc, server exit $src"
        show_log "$LOGS/$name.client"
        show_log "$LOGS/$name.server"
        return
    fi
    printf '%-26s %s\n' "$name" "$final"
}

# mpi TLS: the two-rank ping-pong and allreduce over --mca pml ucx.
mpi() {
    local tls=$1 rc=0 log="$LOGS/mpi-$1.log"
    UCX_TLS=$tls UCX_NET_DEVICES=bypass0:1 timeout 300 mpirun --allow-run-as-root --oversubscribe \
        -np 2 --mca pml ucx --mca btl self --mca osc ucx \
        -x UCX_TLS -x UCX_NET_DEVICES -x LD_LIBRARY_PATH \
        "$MPIDIR/rankdev.sh" "$MPIDIR/pingpong" 200 >"$log" 2>&1 || rc=$?
    if [ "$rc" != 0 ] || ! grep -q '^PASS' "$log"; then
        fail "mpi $tls: mpirun exit $rc"
        show_log "$log"
        return
    fi
    sed "s/^/mpi-$tls: /" "$log" | grep -E 'pingpong|allreduce|PASS'
}

build_mpi() {
    MPIDIR="$LOGS/mpi"
    mkdir -p "$MPIDIR"
    cat >"$MPIDIR/rankdev.sh" <<'EOF'
#!/bin/sh
# One bypass UDP device per rank.
case "$OMPI_COMM_WORLD_RANK" in
0) BYPASS_DEVICE=udp:127.0.3.1 ;;
1) BYPASS_DEVICE=udp:127.0.3.2 ;;
*) echo "rankdev.sh: rank $OMPI_COMM_WORLD_RANK has no address" >&2; exit 2 ;;
esac
export BYPASS_DEVICE
exec "$@"
EOF
    chmod +x "$MPIDIR/rankdev.sh"
    cat >"$MPIDIR/pingpong.c" <<'EOF'
/* Two ranks: ping-pong (rank 1 adds one to every byte, rank 0 checks), then allreduce. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    static const int sizes[] = {8, 4096, 65536, 1 << 20};
    int rank, size, bad = 0, iters = argc > 1 ? atoi(argv[1]) : 200;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        fprintf(stderr, "needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s], it = n >= (1 << 20) ? 5 : n >= 65536 ? iters / 10 + 1 : iters;
        unsigned char *buf = malloc(n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++) {
            unsigned char v = (unsigned char)(i * 7 + s);
            if (rank == 0) {
                for (int k = 0; k < n; k++)
                    buf[k] = (unsigned char)(v + k);
                MPI_Send(buf, n, MPI_BYTE, 1, i, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_BYTE, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int k = 0; k < n; k++)
                    bad += buf[k] != (unsigned char)(v + k + 1);
            } else {
                MPI_Recv(buf, n, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int k = 0; k < n; k++)
                    buf[k]++;
                MPI_Send(buf, n, MPI_BYTE, 0, i, MPI_COMM_WORLD);
            }
        }
        double dt = MPI_Wtime() - t0;
        if (rank == 0)
            printf("pingpong %8d B x %4d: %10.1f us half round trip, %8.2f MB/s\n", n, it,
                   dt / it / 2 * 1e6, 2.0 * n * it / dt / 1e6);
        free(buf);
    }
    enum { N = 100000 };
    long *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++)
        in[i] = rank + 1 + i;
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0;
    for (int i = 0; i < N; i++)
        bad += out[i] != 3 + 2L * i;
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("allreduce %d longs: %.1f us\n", N, dt * 1e6);
        printf("%s: %d mismatched bytes or sums\n", all ? "FAIL" : "PASS", all);
    }
    MPI_Finalize();
    return all != 0;
}
EOF
    mpicc -O2 -o "$MPIDIR/pingpong" "$MPIDIR/pingpong.c"
}

inside() {
    local stash=$1
    LOGS=$2
    ns_setup "$stash"
    trap stop_server EXIT
    PORT=${UCX_TESTS_PORT:-13411}

    local info="$LOGS/ucx_info.log"
    BYPASS_DEVICE=udp:127.0.3.1 timeout 60 ucx_info -d >"$info" 2>&1 || true
    local t
    for t in rc_verbs ud_verbs; do
        if ! grep -A1 "Transport: $t" "$info" | grep -q 'Device: bypass0:1'; then
            fail "ucx_info -d lists no $t on bypass0:1"
            show_log "$info"
        fi
    done
    [ "$FAILED" = 0 ] || return 1
    echo "ucx_info: bypass0:1 has rc_verbs and ud_verbs"

    perftest ud_v tag_lat -n 2000
    perftest ud_v tag_bw -s 65536 -n 200
    perftest rc_v tag_lat -n 2000
    perftest rc_v tag_bw -s 65536 -n 200
    perftest rc_v ucp_put_lat -n 2000
    perftest rc_v ucp_get -s 65536 -n 200
    [ "$FAILED" = 0 ] || return 1

    build_mpi
    mpi ud_v
    mpi rc_v
    [ "$FAILED" = 0 ]
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit $?
fi

# --- outside: check the tools, build, enter the namespace --------------------------------------

PROFILE=debug BUILD=1 KEEP=0 INSTALL=0 DIR=
while [ $# -gt 0 ]; do
    case $1 in
        --install) INSTALL=1 ;;
        --release) PROFILE=release ;;
        --no-build) BUILD=0 ;;
        --keep-logs) KEEP=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) DIR=$1 ;;
    esac
    shift
done

if [ "$INSTALL" = 1 ] && [ "${SKIP_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
    pkgs=()
    command -v ucx_perftest >/dev/null 2>&1 || pkgs+=(ucx-utils)
    command -v mpirun >/dev/null 2>&1 || pkgs+=(openmpi-bin)
    command -v mpicc >/dev/null 2>&1 || pkgs+=(libopenmpi-dev)
    if [ ${#pkgs[@]} -gt 0 ]; then
        echo "ucx-tests: installing ${pkgs[*]}"
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}"
    fi
fi

missing=()
for tool in ucx_perftest:ucx-utils ucx_info:ucx-utils mpirun:openmpi-bin mpicc:libopenmpi-dev \
    unshare:util-linux ss:iproute2 timeout:coreutils; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool%%:*} (apt-get install ${tool#*:})")
done
[ "$(id -u)" = 0 ] || missing+=("root (a private mount namespace for /dev/infiniband and /sys/class/infiniband)")
if [ ${#missing[@]} -gt 0 ]; then
    if [ -n "${BYPASS_REQUIRE_ORACLES:-}" ]; then
        echo "ucx-tests: FAIL: missing ${missing[*]}" >&2
        exit 1
    fi
    echo "skipped: ucx-tests needs ${missing[*]}"
    exit 0
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "$DIR" ]; then
    DIR=$TARGET/$PROFILE/abi
    if [ "$BUILD" = 1 ]; then
        flag=()
        [ "$PROFILE" = release ] && flag=(--release)
        (cd "$ROOT" && cargo build "${flag[@]}" -p bypass-ibverbs -p bypass-standin-mlx5 -p bypass-standin-efa)
        # shellcheck source=scripts/abi-install.sh
        source "$ROOT/scripts/abi-install.sh"
        install_abi_libs "$TARGET/$PROFILE" "$DIR" >/dev/null
    fi
fi
[ -f "$DIR/libibverbs.so.1" ] || { echo "ucx-tests: $DIR/libibverbs.so.1 is missing" >&2; exit 2; }
export LD_LIBRARY_PATH
LD_LIBRARY_PATH=$(realpath "$DIR")

STASH=$(mktemp -d /tmp/bypass-ucx-ns.XXXXXX)
LOGDIR=$(mktemp -d /tmp/bypass-ucx-logs.XXXXXX)
cleanup() {
    rmdir "$STASH" 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then echo "ucx-tests: logs in $LOGDIR"; else rm -rf "$LOGDIR"; fi
}
trap cleanup EXIT
rc=0
unshare --mount --propagation private bash "$SELF" --inside "$STASH" "$LOGDIR" || rc=$?
if [ "$rc" = 0 ]; then echo "ucx-tests: PASS"; else echo "ucx-tests: FAIL" >&2; fi
exit "$rc"

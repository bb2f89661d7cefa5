#!/usr/bin/env bash
# rxe-interop.sh - bypass pingpong against rdma-core's ibv_rc_pingpong on Linux Soft-RoCE in the
# QEMU guest. Kept as a name for `scripts/guest-test.sh rxe`, which does it (one guest boot,
# both roles, 1 B/4 KiB/64 KiB x MTU 1024/4096, rxe's counters, a pcap checked by tshark and
# scapy): see that script for what it checks and its environment (ITERS here is RXE_ITERS).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -n "${ITERS:-}" ] && export RXE_ITERS=$ITERS
exec "$ROOT/scripts/guest-test.sh" rxe

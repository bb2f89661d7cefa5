#!/usr/bin/env bash
# Guest job of scripts/rxe-interop.sh: brings up Soft-RoCE (rdma_rxe) on eth0 and runs
# rdma-core's ibv_rc_pingpong against `bypass pingpong` on the host side of the tap link.
#
#   rxe-pingpong.sh client HOST_IP CONFIG...   the guest connects to a bypass server
#   rxe-pingpong.sh server CONFIG...           the guest serves, bypass connects
#
# Each CONFIG is one option string with commas for spaces ("-s,4096,-m,1024"); every run uses -g 1 (rxe's
# IPv4-mapped RoCEv2 GID) and -n ${ITERS:-20}. Prints "GUEST_RC <config> <rc>" per run and
# rxe's counters at the end; exits non-zero if any run failed.
set -u
ROLE=$1; shift
HOST_IP=
if [ "$ROLE" = client ]; then HOST_IP=$1; shift; fi
modprobe rdma_rxe && modprobe ib_uverbs || exit 3
ip link set eth0 mtu 9000
rdma link add rxe0 type rxe netdev eth0 || exit 3
echo "rxe0 GID[1] = $(cat /sys/class/infiniband/rxe0/ports/1/gids/1)"
fail=0
for c in "$@"; do
  cfg=${c//,/ }
  echo "=== guest $ROLE: ibv_rc_pingpong -d rxe0 -g 1 -n ${ITERS:-20} $cfg $HOST_IP"
  # A client gives the host's server a moment to come up (it listens before this boots).
  [ "$ROLE" = client ] && sleep 1
  # shellcheck disable=SC2086
  timeout 90 ibv_rc_pingpong -d rxe0 -g 1 -n "${ITERS:-20}" $cfg $HOST_IP
  rc=$?
  echo "GUEST_RC $c $rc"
  [ $rc = 0 ] || fail=1
done
echo "=== rxe counters"
rdma statistic show link rxe0/1
exit $fail

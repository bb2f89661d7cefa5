# Guest job: perftest on Linux Soft-RoCE (rdma_rxe on eth0) against perftest on bypass's
# libibverbs.so.1 on the host side of the tap (scripts/guest-test.sh rxe-perftest drives the
# host side; run-guest.sh --net tap:NETNS:TAP). The guest's root is the host's /, so the
# perftest binaries here are Debian's, on Debian's libibverbs and rxe provider.
# Usage (inside the guest): bash jobs/rxe-perftest.sh SYNC_DIR PLAN_FILE
#   PLAN_FILE: one run a line, "N ROLE PORT TIMEOUT TEST ARGS...", ROLE = the guest's role
#   (client: bypass serves; server: bypass connects); the guest runs
#   `TEST -d rxe0 -x 1 -p PORT ARGS... [HOST_IP]` (perftest wants the same ARGS on both sides).
#   SYNC_DIR (under $LAB/xfer, shared read-write with the host): the handshake per run, as in
#   rxe-interop.sh — the guest waits for go-N (the host's server listens) before it connects,
#   or writes ready-N once its own server listens — and the results: guest-rc-N, guest-N.log,
#   rxe-hw-counters-N (sysfs hw_counters after run N, "name value" a line, cumulative),
#   rxe-hw-counters and rxe-counters (`rdma statistic show link rxe0/1`) at the end.
# Exits 0 when every run had rc=0, 1 otherwise, 3 when rxe could not be brought up.
set -u
SYNC=${1:?usage: rxe-perftest.sh SYNC_DIR PLAN_FILE}; PLAN=${2:?PLAN_FILE}
HOST_IP=10.99.0.1
# MTU 4096 needs an Ethernet MTU above 4096 + headers (rxe_net.c rxe_set_mtu).
ip link set eth0 mtu 9000 || exit 3
modprobe rdma_rxe && modprobe ib_uverbs || exit 3
rdma link add rxe0 type rxe netdev eth0 || exit 3
for _ in $(seq 1 50); do [ -e /sys/class/infiniband/rxe0/ports/1/gids/1 ] && break; sleep 0.1; done
echo "rxe-perftest: rxe0 up: gid[1]=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1) $(ibv_devinfo -d rxe0 | grep -E 'active_mtu|state' | tr -s ' \t' ' ' | tr '\n' ' ')"
wait_file() { # FILE SECONDS
  local n=$(( $2 * 10 ))
  while [ "$n" -gt 0 ]; do [ -e "$1" ] && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}
counters() { # the sysfs counters, one "name value" a line
  local f
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "$(basename "$f") $(cat "$f")"; done
}
counters > "$SYNC/rxe-hw-counters-0"
fail=0
while read -r N ROLE PORT TMO TEST ARGS; do
  [ -n "${N:-}" ] || continue
  s=$(date +%s.%N)
  # shellcheck disable=SC2086 # ARGS is a list of perftest options
  if [ "$ROLE" = client ]; then
    if wait_file "$SYNC/go-$N" "$TMO"; then
      timeout "$TMO" stdbuf -oL "$TEST" -d rxe0 -x 1 -p "$PORT" $ARGS "$HOST_IP" > "$SYNC/guest-$N.log" 2>&1
      rc=$?
    else
      echo "the host's bypass $TEST server never listened" > "$SYNC/guest-$N.log"; rc=124
    fi
  else
    timeout "$TMO" stdbuf -oL "$TEST" -d rxe0 -x 1 -p "$PORT" $ARGS > "$SYNC/guest-$N.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do ss -ltnH "sport = :$PORT" | grep -q . && break; sleep 0.1; done
    touch "$SYNC/ready-$N"
    wait "$pid"; rc=$?
  fi
  counters > "$SYNC/rxe-hw-counters-$N"
  # written whole, then renamed: the host reads it as soon as it exists
  echo "$rc" > "$SYNC/.guest-rc-$N" && mv "$SYNC/.guest-rc-$N" "$SYNC/guest-rc-$N"
  [ "$rc" = 0 ] || fail=1
  echo "rxe-perftest: run $N guest=$ROLE $TEST $ARGS rc=$rc in $(echo "$(date +%s.%N) - $s" | bc) s"
done < "$PLAN"
rdma statistic show link rxe0/1 > "$SYNC/rxe-counters" 2>&1
counters > "$SYNC/rxe-hw-counters"
cat "$SYNC/rxe-counters"
touch "$SYNC/guest-done"
exit "$fail"

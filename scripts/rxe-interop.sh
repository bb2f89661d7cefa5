#!/usr/bin/env bash
# rxe-interop.sh - bypass pingpong (a simulated NIC on a UDP socket) against rdma-core's
# ibv_rc_pingpong on Linux Soft-RoCE (rdma_rxe) in the QEMU guest of scripts/guest/, in both
# roles, for message sizes 1 B, 4 KiB, 64 KiB at path MTU 1024 and 4096.
#
# Needs root (a network namespace with the guest's tap device: scripts/guest/netns-setup.sh)
# and a prepared guest (scripts/guest/build-guest.sh; scripts/guest-test.sh prepares it).
# Host side: 10.99.0.1 in netns $NETNS; guest eth0: 10.99.0.2. Exits non-zero when any run
# on either side fails. Env: NETNS (bypass-udp), TAP (tapbu0), ITERS (20), LAB, GUEST_DIR
# (default scripts/guest).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GUEST=${GUEST_DIR:-$ROOT/scripts/guest}
NETNS=${NETNS:-bypass-udp}; TAP=${TAP:-tapbu0}; ITERS=${ITERS:-20}
export ITERS
CONFIGS=("-s 1 -m 1024" "-s 4096 -m 1024" "-s 65536 -m 1024" "-s 1 -m 4096" "-s 4096 -m 4096" "-s 65536 -m 4096")
# run-guest.sh hands its command to `bash -c` as one string: configs travel comma-joined.
GUEST_CONFIGS=()
for cfg in "${CONFIGS[@]}"; do GUEST_CONFIGS+=("${cfg// /,}"); done
[ -x "$GUEST/run-guest.sh" ] || { echo "rxe-interop: $GUEST/run-guest.sh is missing (the guest harness)" >&2; exit 2; }
cargo build --release --manifest-path "$ROOT/Cargo.toml" -p bypass --bin bypass || exit 1
BIN="$ROOT/target/release/bypass"
"$GUEST/netns-setup.sh" up "$NETNS" "$TAP" >/dev/null || exit 2
trap '"$GUEST/netns-setup.sh" down "$NETNS"' EXIT
ip -n "$NETNS" link set "$TAP" mtu 9000
HOSTLOG=$(mktemp); fail=0

echo "### bypass serves, the guest's ibv_rc_pingpong connects"
(
  for cfg in "${CONFIGS[@]}"; do
    echo "=== host server: bypass pingpong -d udp:10.99.0.1 -n $ITERS $cfg"
    # shellcheck disable=SC2086
    timeout 120 ip netns exec "$NETNS" "$BIN" pingpong -d udp:10.99.0.1 -n "$ITERS" $cfg
    echo "HOST_RC ${cfg// /,} $?"
  done
) >"$HOSTLOG" 2>&1 &
HP=$!
(cd "$ROOT" && "$GUEST/run-guest.sh" --net "tap:$NETNS:$TAP" --timeout 600 \
  -- bash scripts/guest/jobs/rxe-pingpong.sh client 10.99.0.1 "${GUEST_CONFIGS[@]}") || fail=1
wait $HP; cat "$HOSTLOG"
awk '$1 == "HOST_RC" && $NF != 0 { bad = 1 } END { exit !bad }' "$HOSTLOG" && fail=1

echo "### the guest's ibv_rc_pingpong serves, bypass connects"
(
  # Wait until the guest answers ARP (a refused TCP connect is retried; no route is not).
  for _ in $(seq 1 240); do
    ip netns exec "$NETNS" bash -c 'echo > /dev/udp/10.99.0.2/9' 2>/dev/null
    ip -n "$NETNS" neigh show 10.99.0.2 | grep -q lladdr && break
    sleep 0.5
  done
  for cfg in "${CONFIGS[@]}"; do
    echo "=== host client: bypass pingpong -d udp:10.99.0.1 -n $ITERS $cfg 10.99.0.2"
    sleep 1
    # shellcheck disable=SC2086
    timeout 120 ip netns exec "$NETNS" "$BIN" pingpong -d udp:10.99.0.1 -n "$ITERS" $cfg 10.99.0.2
    echo "HOST_RC ${cfg// /,} $?"
  done
) >"$HOSTLOG" 2>&1 &
HP=$!
(cd "$ROOT" && "$GUEST/run-guest.sh" --net "tap:$NETNS:$TAP" --timeout 600 \
  -- bash scripts/guest/jobs/rxe-pingpong.sh server "${GUEST_CONFIGS[@]}") || fail=1
wait $HP; cat "$HOSTLOG"
awk '$1 == "HOST_RC" && $NF != 0 { bad = 1 } END { exit !bad }' "$HOSTLOG" && fail=1
rm -f "$HOSTLOG"
echo "rxe-interop: $([ $fail = 0 ] && echo ok || echo FAILED)"
exit $fail

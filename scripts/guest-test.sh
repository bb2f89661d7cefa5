#!/usr/bin/env bash
# guest-test.sh - tests that need a real Linux kernel, run in the QEMU guest of scripts/guest/.
#
#   scripts/guest-test.sh vfio     the VFIO backend on QEMU's edu device behind an intel
#                                  vIOMMU (driver/tests/vfio_edu.rs, then vfio_dmabuf.rs:
#                                  udmabufs, dma-heap buffers and memfds; then tests/verbs_dmabuf.rs:
#                                  a udmabuf registered on the sim; the #[ignore]d tests)
#   scripts/guest-test.sh msix     the VFIO backend's MSI-X path: QEMU's ivshmem-doorbell device
#                                  (4 MSI-X vectors; host side scripts/guest/ivshmem-server.py),
#                                  each vector raised by its doorbell and seen on its own eventfd
#                                  (driver/tests/vfio_msix.rs, the #[ignore]d tests)
#   scripts/guest-test.sh rxe      interop with Linux Soft-RoCE: the guest's rdma-core
#                                  ibv_rc_pingpong on rxe0 against `bypass pingpong -d udp:…` in
#                                  a network namespace holding the guest's tap, both roles,
#                                  sizes 1 B / 4 KiB / 64 KiB, MTU 1024 / 4096; then rxe's
#                                  counters (nothing retried, every packet bypass sent received)
#                                  and a pcap of one run (tshark decodes it; scapy checks the
#                                  ICRC of every packet both ways)
#   scripts/guest-test.sh rxe-perftest
#                                  perftest (ib_write_bw, ib_read_lat, ib_atomic_lat, ib_send_bw)
#                                  on the guest's rxe0 against the same tools on bypass's
#                                  libibverbs.so.1 (udp:, in its own namespace), bypass as server
#                                  then as client; rxe's counters per run and every run's pcap
#                                  (tshark: opcodes, PSNs, no NAK or malformed packet; scapy: ICRC)
#
# Builds the test binary here, prepares the guest kernel if needed (scripts/guest/build-guest.sh;
# with --install-host-pkgs when qemu is missing, which needs root and apt), boots the guest
# (its root file system is this machine's /, read-only, so the binary runs at the same path),
# runs the binary there and exits with its exit code: non-zero when any guest test fails or the
# guest does not come up.
# Env: LAB (default /var/tmp/bypass-guest), GUEST_TIMEOUT (default 900 s); rxe: RXE_ITERS
# (exchanges per run, default 50), RXE_KEEP=1 (keep the logs and pcap),
# RXE_RUNS (the runs to do, e.g. "3 9"; default all 12), RXE_PCAP_RUN (the run recorded, default 2),
# RXE_RUN_TIMEOUT (seconds one run may take on either side, default 120),
# RXE_PROFILE (release or debug: the bypass build, default release), RXE_NETNS / RXE_TAP (default bypass-rxe / bprxe0),
# RXE_QP_TIMEOUT (bypass pingpong's -u, default 18),
# RXE_ATTEMPTS (default 5: an attempt failed only by retransmissions with no loss is repeated);
# rxe-perftest: RXE_RUNS (of 1-8), RXE_RUN_TIMEOUT, RXE_PROFILE, RXE_ATTEMPTS, RXE_KEEP as for rxe,
# RXE_PF_ITERS (iterations per run, default 100), RXE_PF_OLD_POST (default 0: bypass's side posts
# through ibv_qp_ex, perftest's default; 1 adds --use_old_post_send), RXE_PF_NETNS / RXE_PF_TAP
# (default bypass-rxepf / bprxepf0, apart from rxe's so the two can run at once).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GUEST="$ROOT/scripts/guest"
LAB=${LAB:-/var/tmp/bypass-guest}
export LAB
MODE=${1:-}

ensure_guest() {
  local kver
  kver=$(cat "$LAB/default-kver" 2>/dev/null || true)
  if command -v qemu-system-x86_64 >/dev/null && [ -n "$kver" ] \
     && [ -f "$LAB/kernel/$kver/boot/vmlinuz-$kver" ] && [ -f "$LAB/initramfs-$kver.cpio.gz" ] \
     && [ "$(cat "$LAB/initramfs-$kver.stamp" 2>/dev/null)" = "$(sha256sum "$GUEST/build-guest.sh" | cut -d' ' -f1)" ]; then
    return 0
  fi
  echo "guest-test: preparing the guest under $LAB"
  if ! command -v qemu-system-x86_64 >/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "guest-test: qemu-system-x86_64 is missing; run as root or: sudo $GUEST/build-guest.sh --install-host-pkgs" >&2; exit 2; }
    apt-get update
    "$GUEST/build-guest.sh" --install-host-pkgs
  else
    "$GUEST/build-guest.sh"
  fi
}

test_binary() { # package test-target: prints the path of the built test executable
  cargo test --manifest-path "$ROOT/Cargo.toml" -p "$1" --test "$2" --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]: print(m["executable"])' "$2" | tail -n 1
}

build_guest_test() { # test-target: sets BIN (the driver's test binary) and CLI (bypass, debug), prepares the guest
  BIN=$(test_binary bypass-driver "$1")
  [ -x "$BIN" ] || { echo "guest-test: building the $1 test binary failed" >&2; exit 1; }
  cargo build --manifest-path "$ROOT/Cargo.toml" -p bypass --bin bypass
  CLI=$(cargo metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/bypass
  [ -x "$CLI" ] || { echo "guest-test: building the bypass CLI failed" >&2; exit 1; }
  ensure_guest
}

# --- rxe: the guest's ibv_rc_pingpong (Linux Soft-RoCE) against bypass pingpong -------------
RXE_NETNS=${RXE_NETNS:-bypass-rxe}; RXE_TAP=${RXE_TAP:-bprxe0}; RXE_ITERS=${RXE_ITERS:-50}
RXE_PCAP_RUN=${RXE_PCAP_RUN:-2}; RXE_RUN_TIMEOUT=${RXE_RUN_TIMEOUT:-120}
HOST_IP=10.99.0.1; GUEST_IP=10.99.0.2

rxe_cleanup() {
  local rc=$?
  [ -n "${HOST_PID:-}" ] && kill "$HOST_PID" 2>/dev/null
  # the guest runs in its own process group (setsid): this ends qemu too
  [ -n "${GUEST_PID:-}" ] && kill -- "-$GUEST_PID" 2>/dev/null && wait "$GUEST_PID" 2>/dev/null
  "$GUEST/netns-setup.sh" down "$RXE_NETNS" >/dev/null 2>&1 || true
  if [ -n "${SYNC:-}" ] && [ -d "$SYNC" ]; then
    if [ "$rc" = 0 ] && [ "${RXE_KEEP:-0}" != 1 ]; then rm -rf "$SYNC"; else echo "guest-test: rxe logs kept in $SYNC" >&2; fi
  fi
  exit "$rc"
}

wait_file() { # FILE SECONDS: 0 once FILE exists; 1 on timeout or when the guest is gone
  local n=$(( $2 * 10 ))
  while [ "$n" -gt 0 ]; do
    [ -e "$1" ] && return 0
    kill -0 "$GUEST_PID" 2>/dev/null || { [ -e "$1" ] && return 0; return 1; }
    sleep 0.1; n=$((n - 1))
  done
  return 1
}

# Every packet of the pcap decodes as RoCEv2 (tshark: InfiniBand BTH with an opcode and a PSN,
# between the two addresses, to UDP 4791, no expert warning), each side's request PSNs follow
# one another with no gap (nothing was lost; returns 2 when a PSN was resent, a retransmission
# the caller treats as rxe's retransmission counters: the attempt is repeated), every ACK names a PSN
# the other side sent, and every packet carries the ICRC scapy computes for it (the packets rxe
# sent are recorded with the IP ID the UDP link recovered, so this checks both directions).
with_attempts() { # MODE FUNCTION WHY: runs FUNCTION in a subshell up to RXE_ATTEMPTS (5)
  # times, repeating only an attempt whose one failure is a retransmission with nothing lost
  # (exit 3, WHY says what showed it); exits with its code (3 on the last attempt: 1).
  local mode=$1 fn=$2 why=$3 attempts=${RXE_ATTEMPTS:-5} attempt rc
  for attempt in $(seq 1 "$attempts"); do
    rc=0
    ("$fn") || rc=$?
    if [ "$rc" = 3 ] && [ "$attempt" -lt "$attempts" ]; then
      echo "guest-test: $mode attempt $attempt of $attempts: every run passed but $why (above); again"
      continue
    fi
    [ "$rc" = 3 ] && rc=1
    echo "guest-test: $mode rc=$rc after $attempt attempt(s)"
    exit "$rc"
  done
}

host_side() { # N ROLE PORT TMO GUEST_TOOL CMD...: runs bypass's side of run N; its exit code
  # ROLE is the guest's. As the server (guest role client) CMD starts first and the guest is
  # told to connect once CMD listens on TCP PORT; a server whose client never comes (the guest
  # died) is stopped. As the client CMD connects to the guest's GUEST_TOOL once it is ready,
  # with the guest's address appended. Output goes to $SYNC/host-N.log.
  local n=$1 role=$2 port=$3 tmo=$4 tool=$5 rc=0
  shift 5
  if [ "$role" = client ]; then
    "$@" > "$SYNC/host-$n.log" 2>&1 &
    HOST_PID=$!
    for _ in $(seq 1 100); do
      ip netns exec "$RXE_NETNS" ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1
    done
    touch "$SYNC/go-$n"
    while kill -0 "$HOST_PID" 2>/dev/null; do
      kill -0 "$GUEST_PID" 2>/dev/null || { sleep 1; kill "$HOST_PID" 2>/dev/null; break; }
      sleep 0.2
    done
    wait "$HOST_PID" || rc=$?
    HOST_PID=
  elif wait_file "$SYNC/ready-$n" "$tmo"; then
    "$@" "$GUEST_IP" > "$SYNC/host-$n.log" 2>&1 || rc=$?
  else
    echo "the guest's $tool server never listened" > "$SYNC/host-$n.log"; rc=124
  fi
  return "$rc"
}

rxe_check_pcap() { # PCAP
  local pcap=$1 fields
  fields="$SYNC/pcap-fields"
  if ! tshark -n -r "$pcap" -T fields -E separator=' ' -e ip.src -e ip.dst -e udp.dstport \
         -e infiniband.bth.opcode -e infiniband.bth.psn -e _ws.expert.severity \
         > "$fields" 2> "$SYNC/tshark.err"; then
    echo "guest-test: tshark could not read $pcap:" >&2; cat "$SYNC/tshark.err" >&2; return 1
  fi
  awk -v h="$HOST_IP" -v g="$GUEST_IP" '
    { n++; ops[$4]++ }
    !((($1 == h && $2 == g) || ($1 == g && $2 == h)) && $3 == 4791 && $4 != "" && $5 != "" && $6 == "") {
      print "guest-test: packet " NR " is not RoCEv2 between " h " and " g " (src dst dport opcode psn expert): " $0; bad = 1; next }
    $4 == 17 { if (!(($2, $5) in sent)) { print "guest-test: packet " NR ": ACK of PSN " $5 " that " $2 " never sent"; bad = 1 }; next }
    { psn = $5 + 0
      if (($1, $5) in sent) {
        print "guest-test: packet " NR ": " $1 " resent PSN " psn " (a retransmission)"; resent = 1; next }
      if (($1) in last && psn != (last[$1] + 1) % 16777216) {
        print "guest-test: packet " NR ": " $1 " sent PSN " psn " after " last[$1] " (a gap: a PSN never sent)"; bad = 1 }
      last[$1] = psn; sent[$1, $5] = 1 }
    END {
      if (n == 0) { print "guest-test: the pcap holds no packet"; exit 1 }
      printf "guest-test: tshark: %d packets decode as RoCEv2, opcodes:", n
      for (o in ops) printf " %s×%s", ops[o], o
      print ""
      exit bad ? 1 : (resent ? 2 : 0)
    }' "$fields"
  local order=$?
  [ "$order" = 0 ] || [ "$order" = 2 ] || return 1
  python3 - "$pcap" <<'PY'
import sys
from scapy.utils import rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP
bad = 0
pkts = rdpcap(sys.argv[1])
for i, p in enumerate(pkts, 1):
    if BTH not in p:
        print(f"guest-test: packet {i}: scapy finds no BTH: {p.summary()}"); bad += 1; continue
    wire = bytes(p[IP])[-4:]
    calc = p[BTH].compute_icrc(b"")
    if wire != calc:
        print(f"guest-test: packet {i} ({p[IP].src} -> {p[IP].dst}, opcode {p[BTH].opcode}, psn {p[BTH].psn:#x}): ICRC {wire.hex()} on the wire, scapy computes {calc.hex()}"); bad += 1
print(f"guest-test: scapy: {len(pkts) - bad} of {len(pkts)} packets carry the right ICRC")
sys.exit(1 if bad else 0)
PY
  [ $? = 0 ] || return 1
  return "$order"
}

# The retries in each PCAP, one line per pcap: "RUN STALE OTHER" (RUN from run-RUN.pcap). A
# retry is a side sending requests again: its first resent PSN starts one (rxe_comp.c counts
# each as one completer_retry_err). An rxe retry is STALE when it resends a PSN sooner than
# the 67.1 ms retransmit timeout (timeout 14, 4.096 us << 14, as ibv_rc_pingpong and perftest
# set it) after first sending it: no timer of that packet can have expired yet, so the timer
# that fired was one an earlier, acknowledged message armed (rxe_req.c arms it on every send
# and never stops it). Such a retry loses nothing and says nothing of bypass's latency; every
# other retry, bypass's or rxe's, is OTHER.
rxe_retries() { # PCAP...
  local f
  for f in "$@"; do
    tshark -n -r "$f" -T fields -E separator=, -e frame.time_relative -e ip.src \
        -e infiniband.bth.opcode -e infiniband.bth.psn 2>/dev/null \
    | awk -F, -v run="$(basename "$f" .pcap)" -v h="$HOST_IP" '
      { t = $1 * 1000; op = $3 + 0; k = $2 SUBSEP $4 }
      op >= 13 && op <= 18 { next }  # READ responses and ACKs
      { again = (k in sent)
        if (again && !resending[$2]) { if ($2 != h && t - sent[k] < 67.1) stale++; else other++ }
        resending[$2] = again
        if (!again) sent[k] = t }
      END { sub(/^run-/, "", run); print run, stale + 0, other + 0 }'
  done
}

# Why a side retransmitted, from each run's pcap: every retransmission with how long ago the
# packet first went out and how long the peer had been silent, and how fast bypass acknowledged
# the requests that asked for an ACK. Printed when rxe's counters show retransmissions.
rxe_explain_retransmissions() {
  local f
  for f in "$SYNC"/run-*.pcap; do
    tshark -n -r "$f" -T fields -e frame.time_relative -e ip.src -e infiniband.bth.opcode \
        -e infiniband.bth.psn -e infiniband.bth.a 2>/dev/null \
    | awk -v run="$(basename "$f" .pcap)" -v h="$HOST_IP" -v g="$GUEST_IP" '
      function who(a) { return a == h ? "bypass" : "rxe" }
      { t = $1 * 1000; src = $2; peer = (src == h) ? g : h }
      $3 == 17 { if (src == h && ($4 in askt)) { d = t - askt[$4]; n++; if (d > mx) mx = d; delete askt[$4] }
                 heard[src] = t; next }
      { if ((src) in last && $4 + 0 != (last[src] + 1) % 16777216)
          printf "guest-test: %s: %s resent PSN %s %.1f ms after first sending it; %s had been silent for %.1f ms\n",
            run, who(src), $4, t - sent[src, $4], who(peer), t - heard[peer]
        if (!((src, $4) in sent)) sent[src, $4] = t
        last[src] = $4 + 0; heard[src] = t
        if (src == g && $5 == 1) askt[$4] = t }
      END { if (n) printf "guest-test: %s: bypass answered %d AckReq packets of rxe, slowest after %.2f ms\n", run, n, mx }'
  done
}

rxe_interop() {
  # A release build: the guest (TCG) is slow already, and a debug bypass on a loaded host
  # can answer a 64 KiB message late enough for rxe's 67 ms retransmit timer to fire.
  local profile=${RXE_PROFILE:-release}
  cargo build --manifest-path "$ROOT/Cargo.toml" -p bypass --bin bypass $([ "$profile" = release ] && echo --release)
  CLI=$(cargo metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$profile/bypass
  [ -x "$CLI" ] || { echo "guest-test: building the bypass CLI failed" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "guest-test: rxe needs root (a network namespace and a tap device)" >&2; exit 2; }
  ensure_guest
  # the guest's root is this machine's /: rdma-core's tools must be installed here
  if ! command -v ibv_rc_pingpong >/dev/null || ! command -v rdma >/dev/null || ! command -v tshark >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ibverbs-utils rdma-core iproute2 tshark
  fi
  python3 -c 'import scapy.contrib.roce' 2>/dev/null \
    || { echo "guest-test: rxe checks the pcap with scapy: pip install scapy==2.8.0 (scripts/test.sh does)" >&2; exit 2; }
  local start; start=$(date +%s)
  SYNC="$LAB/xfer/rxe-$$"; HOST_PID=; GUEST_PID=
  trap rxe_cleanup EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$LAB/xfer"; rm -rf "$SYNC"; mkdir -m 777 "$SYNC"
  "$GUEST/netns-setup.sh" down "$RXE_NETNS"
  "$GUEST/netns-setup.sh" up "$RXE_NETNS" "$RXE_TAP" >/dev/null
  # MTU 4096 needs Ethernet frames above 4096 + headers on both ends of the tap
  ip -n "$RXE_NETNS" link set "$RXE_TAP" mtu 9000
  # from here on every failure is counted and reported, not fatal
  set +e
  # The plan: N GUEST_ROLE SIZE MTU ITERS PORT; a fresh TCP port per run.
  local n=0 role size mtu
  : > "$SYNC/plan"
  for role in client server; do for mtu in 1024 4096; do for size in 1 4096 65536; do
    n=$((n + 1))
    case " ${RXE_RUNS:-$n} " in *" $n "*) echo "$n $role $size $mtu $RXE_ITERS $((18515 + n)) $RXE_RUN_TIMEOUT" >> "$SYNC/plan" ;; esac
  done; done; done
  echo "guest-test: booting the guest (--net tap:$RXE_NETNS:$RXE_TAP) for $(wc -l < "$SYNC/plan") runs"
  (cd "$ROOT" && exec setsid "$GUEST/run-guest.sh" --net "tap:$RXE_NETNS:$RXE_TAP" --timeout "${GUEST_TIMEOUT:-900}" \
     -- bash "$GUEST/jobs/rxe-interop.sh" "$SYNC" "$SYNC/plan") > "$SYNC/guest.out" 2>&1 &
  GUEST_PID=$!
  local N ROLE SIZE MTU ITERS PORT hrc pcap_opt fail=0 cfail=0
  local -a PP
  local done_runs=0 planned; planned=$(wc -l < "$SYNC/plan")
  while read -r N ROLE SIZE MTU ITERS PORT TMO; do
    # -u: bypass's QP waits 4.096 us << RXE_QP_TIMEOUT (18: 1.07 s) for rxe's ACK before
    # resending, not ibv_rc_pingpong's 67 ms: rxe on the TCG guest can stall that long on a
    # loaded host without anything being lost (rxe-perftest does the same with perftest's -u).
    PP=(ip netns exec "$RXE_NETNS" timeout "$TMO" "$CLI" pingpong -d "udp:$HOST_IP" -c
        -s "$SIZE" -m "$MTU" -n "$ITERS" -p "$PORT" -u "${RXE_QP_TIMEOUT:-18}")
    # every run is recorded (kept with the logs when something fails); RXE_PCAP_RUN's is checked
    pcap_opt=(--pcap "$SYNC/run-$N.pcap")
    hrc=0
    host_side "$N" "$ROLE" "$PORT" "$TMO" ibv_rc_pingpong "${PP[@]}" "${pcap_opt[@]}" || hrc=$?
    echo "$hrc" > "$SYNC/host-rc-$N"
    wait_file "$SYNC/guest-rc-$N" "$((TMO + 20))" || true
    done_runs=$((done_runs + 1))
    echo "guest-test: run $N ($done_runs of $planned): bypass $([ "$ROLE" = client ] && echo server || echo client) vs ibv_rc_pingpong $ROLE, size $SIZE, MTU $MTU, $ITERS iters: bypass rc=$hrc, rxe rc=$(cat "$SYNC/guest-rc-$N" 2>/dev/null || echo none)"
    grep -h "usec/iter" "$SYNC/host-$N.log" | sed 's/^/    bypass: /'
    grep -h "usec/iter" "$SYNC/guest-$N.log" 2>/dev/null | sed 's/^/    rxe:    /'
    sed -n 's/^link [^ ]*: /    bypass link: /p' "$SYNC/host-$N.log"
    if [ "$hrc" != 0 ] || [ "$(cat "$SYNC/guest-rc-$N" 2>/dev/null)" != 0 ]; then
      fail=1
      sed 's/^/    bypass| /' "$SYNC/host-$N.log"; sed 's/^/    rxe|    /' "$SYNC/guest-$N.log" 2>/dev/null
    fi
  done < "$SYNC/plan"
  local grc=0
  wait "$GUEST_PID" || grc=$?
  GUEST_PID=
  sed 's/^/    guest| /' "$SYNC/guest.out"
  [ "$grc" = 0 ] || { echo "guest-test: the guest job exited with $grc" >&2; fail=1; }
  # rxe's counters: nothing retransmitted, no sequence error, no RNR, no retry exhausted; and
  # every packet bypass sent was received by rxe (rxe drops a packet with a bad ICRC without
  # counting it: rxe_recv.c rxe_rcv bumps rcvd_pkts only after rxe_icrc_check) and vice versa.
  # rxe's retries on its stale timer (rxe_retries) are allowed, stale_ok=1, when the pcaps show
  # no other retry and rxe's completer_retry_err counts exactly those.
  local retries stale other stale_ok=0
  retries=$(rxe_retries "$SYNC"/run-*.pcap)
  stale=$(awk '{s += $2} END {print s + 0}' <<< "$retries")
  other=$(awk '{s += $3} END {print s + 0}' <<< "$retries")
  if [ "$stale" -gt 0 ] && [ "$other" = 0 ] && [ -f "$SYNC/rxe-hw-counters" ] \
      && [ "$(awk '$1 == "completer_retry_err" {print $2}' "$SYNC/rxe-hw-counters")" = "$stale" ]; then
    stale_ok=1
  fi
  if [ -f "$SYNC/rxe-hw-counters" ]; then
    local sent_by_bypass rcvd_by_bypass
    sent_by_bypass=$(sed -n 's/.*: tx \([0-9]*\) pkts.*/\1/p' "$SYNC"/host-*.log | awk '{s += $1} END {print s + 0}')
    rcvd_by_bypass=$(sed -n 's/.*, rx \([0-9]*\) pkts.*/\1/p' "$SYNC"/host-*.log | awk '{s += $1} END {print s + 0}')
    echo "guest-test: rxe0 counters: $(tr '\n' ' ' < "$SYNC/rxe-hw-counters")"
    echo "guest-test: bypass sent $sent_by_bypass packets and received $rcvd_by_bypass"
    if ! awk -v sent="$sent_by_bypass" -v rcvd="$rcvd_by_bypass" -v stale_ok="$stale_ok" '
        { c[$1] = $2 }
        END {
          bad = 0
          split("duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed", z, " ")
          for (i in z) if ((z[i] in c) && c[z[i]] != 0) {
            if (z[i] == "completer_retry_err" && stale_ok == 1) {
              print "guest-test: rxe counter completer_retry_err = " c[z[i]] ": each a retry on rxe'"'"'s stale timer (the pcaps show it resending sooner than its 67 ms timeout), allowed"; continue }
            print "guest-test: rxe counter " z[i] " = " c[z[i]] ", want 0"; bad = 1 }
          if (c["rcvd_pkts"] != sent) { print "guest-test: rxe received " c["rcvd_pkts"] " packets, bypass sent " sent " (rxe drops a bad ICRC silently)"; bad = 1 }
          if (c["sent_pkts"] != rcvd) { print "guest-test: rxe sent " c["sent_pkts"] " packets, bypass received " rcvd; bad = 1 }
          exit bad
        }' "$SYNC/rxe-hw-counters" >&2; then
      cfail=1
      echo "guest-test: retransmissions with no packet lost and no sequence error mean a side's retransmit timer (rxe's: ibv_rc_pingpong's timeout 14, 67 ms; bypass's: -u RXE_QP_TIMEOUT) fired before the ACK came, or rxe's timer left from an earlier message fired (rxe_req.c arms it and never stops it); the pcaps say which:" >&2
      rxe_explain_retransmissions >&2
    fi
  else
    echo "guest-test: the guest wrote no rxe counters" >&2; fail=1
  fi
  if [ -f "$SYNC/run-$RXE_PCAP_RUN.pcap" ]; then
    # 2: every check passed but a side retransmitted a PSN it had sent (no gap): the same
    # kind of failure as a retransmission rxe counted, which a new attempt may not repeat.
    local pc=0
    rxe_check_pcap "$SYNC/run-$RXE_PCAP_RUN.pcap" || pc=$?
    # A resent PSN is allowed when every retry in the run was rxe's on its stale timer.
    if [ "$pc" = 2 ] && [ "$stale_ok" = 1 ] && grep -Eq "^$RXE_PCAP_RUN [1-9][0-9]* 0\$" <<< "$retries"; then
      echo "guest-test: run $RXE_PCAP_RUN: every resent PSN is a retry on rxe's stale timer, allowed"
      pc=0
    fi
    case "$pc" in 0) ;; 2) cfail=1 ;; *) fail=1 ;; esac
  elif grep -q "^$RXE_PCAP_RUN " "$SYNC/plan"; then
    echo "guest-test: run $RXE_PCAP_RUN wrote no pcap" >&2; fail=1
  fi
  [ "$fail" = 0 ] && [ "$cfail" = 1 ] && fail=3
  echo "guest-test: rxe $([ "$fail" = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
  return "$fail"
}

# --- rxe-perftest: perftest on the guest's rxe against perftest on bypass's libibverbs.so.1 ---
# The plan: four perftest tools, bypass as server (guest client) then as client (guest server).
# The same options go to both sides (perftest's rule); each line is "TOOL OPTIONS". Sizes and
# iteration counts are small: the guest is TCG. -F: a guest's CPU frequency is not its max.
# -o 16 (outstanding READ/atomics): perftest sets its QP's max_rd_atomic to the peer's count
# (rxe offers 128, bypass 16), which bypass's modify to RTS refuses above its own 16.
RXE_PF_ITERS=${RXE_PF_ITERS:-100}
# -u 18 (QP timeout 4.096 us << 18, 1.07 s, not perftest's 67 ms) and -t 4: rxe on the TCG
# guest takes in at most ~1600 packets of 4 KiB a second, so 128 PSNs in flight (rxe's window,
# which bypass keeps too) outlast a 67 ms timer even when the host is idle, and every go-back-N
# resend of the window adds to the queue rxe is still draining (a run measured with -t 16 and
# the default timer: 8064 duplicates, then a run that never finished); the guest also stalls
# for 50-300 ms at a time on a busy host. The check of retransmissions stays strict.
rxe_pf_tests() { # ROLE (the guest's): prints one "TOOL OPTIONS" a line
  local atomic=FETCH_AND_ADD c="-F -u 18"
  [ "$1" = server ] && atomic=CMP_AND_SWAP
  echo "ib_write_bw $c -m 4096 -s 65536 -t 4 -n $RXE_PF_ITERS"
  echo "ib_read_lat $c -m 1024 -s 4096 -o 16 -n $RXE_PF_ITERS"
  echo "ib_atomic_lat $c -m 1024 -A $atomic -o 16 -n $RXE_PF_ITERS"
  echo "ib_send_bw $c -m 1024 -s 4096 -t 4 -n $RXE_PF_ITERS"
}

# One run's pcap, in tshark: every packet decodes as RoCEv2 (InfiniBand BTH with an opcode and a
# PSN, between the two addresses, to UDP 4791, no expert warning: nothing malformed); the tool's
# opcodes are all there (WRITE + ACK, READ request + READ response, atomic + ATOMIC ACK, SEND +
# ACK); each requester's PSNs follow one another (a READ request reserves one PSN per response
# packet: RETH length over the path MTU); every response names a PSN the other side's requests
# hold. Returns 0, 1 (a failure) or 2 (a side resent a PSN: a retransmission, no gap).
rxe_pf_check_pcap() { # PCAP TOOL MTU
  local pcap=$1 tool=$2 mtu=$3 fields="$SYNC/pcap-fields"
  if ! tshark -n -r "$pcap" -T fields -E separator=, -E occurrence=f -e ip.src -e ip.dst -e udp.dstport \
         -e infiniband.bth.opcode -e infiniband.bth.psn -e infiniband.reth.dmalen -e infiniband.aeth.syndrome \
         -e _ws.expert.severity -e _ws.malformed > "$fields" 2> "$SYNC/tshark.err"; then
    echo "guest-test: tshark could not read $pcap:" >&2; cat "$SYNC/tshark.err" >&2; return 1
  fi
  # tshark leaves an absent field empty (hence ',': awk would merge runs of spaces)
  awk -F, -v h="$HOST_IP" -v g="$GUEST_IP" -v tool="$tool" -v mtu="$mtu" -v run="$(basename "$pcap" .pcap)" '
    function name(o) { return o <= 5 ? "SEND" : o <= 11 ? "WRITE" : o == 12 ? "READ_REQ" : o <= 16 ? "READ_RESP" : o == 17 ? "ACK" : o == 18 ? "ATOMIC_ACK" : o <= 20 ? "ATOMIC" : "op" o }
    { n++ }
    !((($1 == h && $2 == g) || ($1 == g && $2 == h)) && $3 == 4791 && $4 != "" && $5 != "" && $8 == "" && $9 == "") {
      print "guest-test: " run ": packet " NR " is not clean RoCEv2 between " h " and " g " (src,dst,dport,opcode,psn,len,aeth,expert,malformed): " $0; bad = 1; next }
    { op = $4 + 0; psn = $5 + 0; ops[name(op)]++ }
    # an AETH syndrome (decimal) of 0x20 and up is an RNR NAK or a NAK (IBA 9.7.5.2.1)
    $7 != "" && $7 + 0 >= 32 { print "guest-test: " run ": packet " NR ": " name(op) " from " $1 " carries the NAK syndrome " $7; bad = 1 }
    op >= 13 && op <= 18 {  # a response: READ response, ACK, ATOMIC ACK
      if (!(($2, psn) in held)) { print "guest-test: " run ": packet " NR ": " name(op) " of PSN " psn " that " $2 " never sent"; bad = 1 }
      next }
    { if (($1, psn) in held) {
        print "guest-test: " run ": packet " NR ": " $1 " resent PSN " psn " (a retransmission)"; resent = 1; next }
      if (($1) in nxt && psn != nxt[$1]) {
        print "guest-test: " run ": packet " NR ": " $1 " sent PSN " psn ", expected " nxt[$1] " (a gap)"; bad = 1 }
      k = 1
      if (op == 12) { k = int(($6 + mtu - 1) / mtu); if (k < 1) k = 1 }
      for (i = 0; i < k; i++) held[$1, (psn + i) % 16777216] = 1
      nxt[$1] = (psn + k) % 16777216 }
    END {
      if (n == 0) { print "guest-test: " run ": the pcap holds no packet"; exit 1 }
      if (tool == "ib_write_bw") split("WRITE ACK", want, " ")
      if (tool == "ib_read_lat") split("READ_REQ READ_RESP", want, " ")
      if (tool == "ib_atomic_lat") split("ATOMIC ATOMIC_ACK", want, " ")
      if (tool == "ib_send_bw") split("SEND ACK", want, " ")
      for (i in want) if (!(want[i] in ops)) { print "guest-test: " run ": no " want[i] " packet in the pcap of " tool; bad = 1 }
      line = ""
      for (o in ops) line = line " " ops[o] "×" o
      print "guest-test: " run ": tshark: " n " packets decode as RoCEv2:" line
      exit bad ? 1 : (resent ? 2 : 0)
    }' "$fields"
}

# The ICRC of every packet of every pcap, recomputed by scapy (rxe's packets are recorded with
# the IPv4 ID bypass's link recovered, so this checks both directions).
rxe_pf_check_icrc() { # PCAP...
  python3 - "$@" <<'PY'
import sys
from scapy.utils import rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP
bad = total = 0
for path in sys.argv[1:]:
    for i, p in enumerate(rdpcap(path), 1):
        total += 1
        if BTH not in p:
            print(f"guest-test: {path} packet {i}: scapy finds no BTH: {p.summary()}"); bad += 1; continue
        wire, calc = bytes(p[IP])[-4:], p[BTH].compute_icrc(b"")
        if wire != calc:
            print(f"guest-test: {path} packet {i} ({p[IP].src} -> {p[IP].dst}, opcode {p[BTH].opcode}, psn {p[BTH].psn:#x}): ICRC {wire.hex()} on the wire, scapy computes {calc.hex()}"); bad += 1
print(f"guest-test: scapy: {total - bad} of {total} packets carry the right ICRC")
sys.exit(1 if bad else 0)
PY
}

# Why a side retransmitted, from each run's pcap (READ-aware, unlike rxe's: a READ request's
# PSN is followed by its response packets' PSNs): each resent request with how long ago it
# first went out and how long the peer had been silent, and how fast bypass answered rxe's
# requests that asked for a response. Printed when the counters or a pcap show a resend.
rxe_pf_explain() {
  local f
  for f in "$SYNC"/run-*.pcap; do
    tshark -n -r "$f" -T fields -E separator=, -e frame.time_relative -e ip.src -e infiniband.bth.opcode \
        -e infiniband.bth.psn -e infiniband.bth.a 2>/dev/null \
    | awk -F, -v run="$(basename "$f" .pcap)" -v h="$HOST_IP" '
      function who(a) { return a == h ? "bypass" : "rxe" }
      { t = $1 * 1000; src = $2; op = $3 + 0; k = src SUBSEP $4 }
      op >= 13 && op <= 18 {  # a response
        if (src == h && ($4 in askt)) { d = t - askt[$4]; n++; if (d > mx) mx = d; delete askt[$4] }
        heard[src] = t; next }
      { peer = ""; for (a in heard) if (a != src) peer = a
        if (k in sent)
          printf "guest-test: %s: %s resent PSN %s (opcode %d) %.1f ms after first sending it; %s had been silent for %.1f ms\n",
            run, who(src), $4, op, t - sent[k], peer == "" ? "the peer" : who(peer), peer == "" ? t : t - heard[peer]
        else sent[k] = t
        heard[src] = t
        if (src != h && ($5 == 1 || op == 12 || op >= 19)) askt[$4] = t }
      END { if (n) printf "guest-test: %s: bypass answered %d requests of rxe, slowest after %.2f ms\n", run, n, mx }'
  done
}

rxe_pf_has_table() { # LOG TOOL ROLE: the result row a side of TOOL prints (see rxe_perftest)
  [ -f "$1" ] || return 1
  if [ "$3" = server ] && [ "${2%_lat}" != "$2" ]; then
    grep -q "remote address:" "$1"
  else
    grep -h -A1 '#bytes' "$1" | grep -qE '^ *[0-9]+ +[0-9]+ '
  fi
}

rxe_perftest() {
  # bypass's libibverbs.so.1 and the stand-in providers perftest links, release-built (the
  # guest is slow already; a debug link answers late enough for rxe's timer to fire).
  local profile=${RXE_PROFILE:-release} tdir abi
  cargo build --manifest-path "$ROOT/Cargo.toml" -p bypass-ibverbs -p bypass-standin-mlx5 -p bypass-standin-efa \
    $([ "$profile" = release ] && echo --release)
  tdir=$(cargo metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$profile
  # shellcheck source=abi-install.sh
  abi=$(source "$ROOT/scripts/abi-install.sh" && install_abi_libs "$tdir") \
    || { echo "guest-test: installing bypass's C libraries failed" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "guest-test: rxe-perftest needs root (a network namespace and a tap device)" >&2; exit 2; }
  ensure_guest
  # the guest's root is this machine's /: perftest and rdma-core's tools must be installed here
  if ! command -v ib_write_bw >/dev/null || ! command -v rdma >/dev/null || ! command -v tshark >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends perftest ibverbs-utils rdma-core iproute2 tshark
  fi
  python3 -c 'import scapy.contrib.roce' 2>/dev/null \
    || { echo "guest-test: rxe-perftest checks the pcaps with scapy: pip install scapy==2.8.0 (scripts/test.sh does)" >&2; exit 2; }
  # bypass's side posts the way perftest does by default, through ibv_qp_ex (ibv_wr_*);
  # RXE_PF_OLD_POST=1 makes it use ibv_post_send (--use_old_post_send) instead.
  local host_extra=()
  [ "${RXE_PF_OLD_POST:-0}" = 1 ] && host_extra=(--use_old_post_send)
  local start; start=$(date +%s)
  SYNC="$LAB/xfer/rxe-perftest-$$"; HOST_PID=; GUEST_PID=
  trap rxe_cleanup EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$LAB/xfer"; rm -rf "$SYNC"; mkdir -m 777 "$SYNC"
  "$GUEST/netns-setup.sh" down "$RXE_NETNS"
  "$GUEST/netns-setup.sh" up "$RXE_NETNS" "$RXE_TAP" >/dev/null
  ip -n "$RXE_NETNS" link set "$RXE_TAP" mtu 9000
  set +e
  # N GUEST_ROLE PORT TIMEOUT TOOL OPTIONS; a fresh TCP port per run
  local n=0 role t
  : > "$SYNC/plan"
  for role in client server; do
    while read -r t; do
      n=$((n + 1))
      case " ${RXE_RUNS:-$n} " in *" $n "*) echo "$n $role $((18515 + n)) $RXE_RUN_TIMEOUT $t" >> "$SYNC/plan" ;; esac
    done < <(rxe_pf_tests "$role")
  done
  echo "guest-test: booting the guest (--net tap:$RXE_NETNS:$RXE_TAP) for $(wc -l < "$SYNC/plan") perftest runs (bypass side: ${host_extra[*]:-extended post})"
  (cd "$ROOT" && exec setsid "$GUEST/run-guest.sh" --net "tap:$RXE_NETNS:$RXE_TAP" --timeout "${GUEST_TIMEOUT:-900}" \
     -- bash "$GUEST/jobs/rxe-perftest.sh" "$SYNC" "$SYNC/plan") > "$SYNC/guest.out" 2>&1 &
  GUEST_PID=$!
  local N ROLE PORT TMO TOOL OPTS hrc grc_n fail=0 cfail=0 pc mtu
  local -a PF
  local done_runs=0 planned; planned=$(wc -l < "$SYNC/plan")
  while read -r N ROLE PORT TMO TOOL OPTS; do
    # shellcheck disable=SC2206 # OPTS is a list of perftest options
    PF=(ip netns exec "$RXE_NETNS" env LD_LIBRARY_PATH="$abi" BYPASS_DEVICE="udp:$HOST_IP"
        BYPASS_PCAP="$SYNC/run-$N.pcap" timeout "$TMO" stdbuf -oL "$TOOL" -d bypass0 -x 0 -p "$PORT" $OPTS "${host_extra[@]}")
    hrc=0
    host_side "$N" "$ROLE" "$PORT" "$TMO" "$TOOL" "${PF[@]}" || hrc=$?
    wait_file "$SYNC/guest-rc-$N" "$((TMO + 20))" || true
    grc_n=$(cat "$SYNC/guest-rc-$N" 2>/dev/null || echo none)
    done_runs=$((done_runs + 1))
    echo "guest-test: run $N ($done_runs of $planned): bypass $([ "$ROLE" = client ] && echo server || echo client) vs rxe $ROLE: $TOOL $OPTS: bypass rc=$hrc, rxe rc=$grc_n"
    # perftest's table: the header line and the row under it. Both sides of a BW test print
    # it; a latency test's passive side (the server) measures nothing and prints only the
    # connection (atomic_lat.c / read_lat.c return after the handshake): it must show the
    # remote address it connected to.
    grep -h -A1 "#bytes" "$SYNC/host-$N.log" | sed 's/^/    bypass: /'
    grep -h -A1 "#bytes" "$SYNC/guest-$N.log" 2>/dev/null | sed 's/^/    rxe:    /'
    if [ "$hrc" != 0 ] || [ "$grc_n" != 0 ] \
       || ! rxe_pf_has_table "$SYNC/host-$N.log" "$TOOL" "$([ "$ROLE" = client ] && echo server || echo client)" \
       || ! rxe_pf_has_table "$SYNC/guest-$N.log" "$TOOL" "$ROLE"; then
      fail=1
      echo "guest-test: run $N failed (an exit code, or no result table on a side)" >&2
      sed 's/^/    bypass| /' "$SYNC/host-$N.log"; sed 's/^/    rxe|    /' "$SYNC/guest-$N.log" 2>/dev/null
    fi
    if [ -f "$SYNC/run-$N.pcap" ]; then
      mtu=$(sed -n 's/.*-m \([0-9]*\).*/\1/p' <<< "$OPTS")
      pc=0
      rxe_pf_check_pcap "$SYNC/run-$N.pcap" "$TOOL" "${mtu:-1024}" || pc=$?
      # Resent PSNs that are all rxe's retries on its stale timer are allowed (rxe_retries; the
      # counter check below holds completer_retry_err to the same count).
      if [ "$pc" = 2 ] && rxe_retries "$SYNC/run-$N.pcap" | grep -Eq "^$N [1-9][0-9]* 0\$"; then
        echo "guest-test: run $N: every resent PSN is a retry on rxe's stale timer, allowed"
        pc=0
      fi
      case "$pc" in 0) ;; 2) cfail=1 ;; *) fail=1 ;; esac
    else
      echo "guest-test: run $N wrote no pcap" >&2; fail=1
    fi
  done < "$SYNC/plan"
  local grc=0
  wait "$GUEST_PID" || grc=$?
  GUEST_PID=
  sed 's/^/    guest| /' "$SYNC/guest.out"
  [ "$grc" = 0 ] || { echo "guest-test: the guest job exited with $grc" >&2; fail=1; }
  local pcaps=("$SYNC"/run-*.pcap)
  [ -f "${pcaps[0]}" ] && { rxe_pf_check_icrc "${pcaps[@]}" || fail=1; }
  # rxe's counters: no retransmission, sequence error, RNR or retry exhaustion, per run (the
  # guest snapshots them after each), and every packet bypass recorded sending was received by
  # rxe (rxe drops a bad ICRC uncounted: rxe_recv.c rxe_rcv) and vice versa.
  if [ -f "$SYNC/rxe-hw-counters" ]; then
    local sent_by_bypass rcvd_by_bypass snaps=("$SYNC/rxe-hw-counters-0")
    for N in $(cut -d' ' -f1 "$SYNC/plan"); do [ -f "$SYNC/rxe-hw-counters-$N" ] && snaps+=("$SYNC/rxe-hw-counters-$N"); done
    sent_by_bypass=$(for f in "${pcaps[@]}"; do tshark -n -r "$f" -Y "ip.src == $HOST_IP" 2>/dev/null | wc -l; done | awk '{s += $1} END {print s + 0}')
    rcvd_by_bypass=$(for f in "${pcaps[@]}"; do tshark -n -r "$f" -Y "ip.src == $GUEST_IP" 2>/dev/null | wc -l; done | awk '{s += $1} END {print s + 0}')
    echo "guest-test: rxe0 counters: $(tr '\n' ' ' < "$SYNC/rxe-hw-counters")"
    echo "guest-test: the pcaps hold $sent_by_bypass packets bypass sent and $rcvd_by_bypass it received"
    # completer_retry_err may rise in a run by exactly its retries on rxe's stale timer when
    # its pcap shows no other retry (rxe_retries).
    if ! awk -v sent="$sent_by_bypass" -v rcvd="$rcvd_by_bypass" -v retries="$(rxe_retries "${pcaps[@]}" | tr '\n' ' ')" '
        BEGIN { n = split(retries, w, " "); for (j = 1; j + 2 <= n; j += 3) { st[w[j]] = w[j + 1]; ot[w[j]] = w[j + 2] } }
        FNR == 1 { f++ } { c[f, $1] = $2; names[$1] = 1 }
        END {
          bad = 0
          split("duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed", z, " ")
          for (r = 2; r <= f; r++) for (i in z) if ((z[i] in names) && c[r, z[i]] != c[r - 1, z[i]]) {
            run = ARGV[r]; sub(/.*-/, "", run); rose = c[r, z[i]] - c[r - 1, z[i]]
            if (z[i] == "completer_retry_err" && (run in st) && ot[run] == 0 && rose == st[run]) {
              printf "guest-test: rxe counter completer_retry_err rose by %d in run %s: each a retry on rxe'"'"'s stale timer, allowed\n", rose, run; continue }
            printf "guest-test: rxe counter %s rose by %d in %s, want 0\n", z[i], rose, ARGV[r]; bad = 1 }
          for (r = 2; r <= f; r++) { run = ARGV[r]; sub(/.*-/, "", run)
            if (st[run] > 0 && c[r, "completer_retry_err"] - c[r - 1, "completer_retry_err"] != st[run]) {
              printf "guest-test: run %s: the pcap shows %d retries on rxe'"'"'s stale timer, its completer_retry_err rose by %d\n", run, st[run], c[r, "completer_retry_err"] - c[r - 1, "completer_retry_err"]; bad = 1 } }
          if (c[f, "rcvd_pkts"] - c[1, "rcvd_pkts"] != sent) { print "guest-test: rxe received " c[f, "rcvd_pkts"] - c[1, "rcvd_pkts"] " packets, bypass sent " sent " (rxe drops a bad ICRC silently)"; bad = 1 }
          if (c[f, "sent_pkts"] - c[1, "sent_pkts"] != rcvd) { print "guest-test: rxe sent " c[f, "sent_pkts"] - c[1, "sent_pkts"] " packets, bypass received " rcvd; bad = 1 }
          exit bad
        }' "${snaps[@]}" >&2; then
      cfail=1
      echo "guest-test: retransmissions with no packet lost mean a side's retransmit timer (perftest's timeout 14, 67 ms) fired before the response came, or rxe's timer left from an earlier message fired (rxe_req.c arms it and never stops it); the pcaps say which:" >&2
      rxe_pf_explain >&2
    fi
  else
    echo "guest-test: the guest wrote no rxe counters" >&2; fail=1
  fi
  [ "$fail" = 0 ] && [ "$cfail" = 1 ] && fail=3
  echo "guest-test: rxe-perftest $([ "$fail" = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
  return "$fail"
}

case "$MODE" in
  vfio)
    build_guest_test vfio_edu
    MORE=$(test_binary bypass-driver vfio_dmabuf)
    [ -x "$MORE" ] || { echo "guest-test: building the vfio_dmabuf test binary failed" >&2; exit 1; }
    # the sim's own dma-buf path (mmap + DMA_BUF_IOCTL_SYNC) on a real udmabuf: its one
    # #[ignore]d test needs /dev/udmabuf, which the guest has and the host does not
    SIMBUF=$(test_binary bypass verbs_dmabuf)
    [ -x "$SIMBUF" ] || { echo "guest-test: building the verbs_dmabuf test binary failed" >&2; exit 1; }
    MORE="$MORE $SIMBUF"
    echo "guest-test: running $BIN and $MORE in the guest (--iommu intel --edu)"
    start=$(date +%s)
    rc=0
    (cd "$ROOT" && "$GUEST/run-guest.sh" --iommu intel --edu --net none --timeout "${GUEST_TIMEOUT:-900}" \
      -- BYPASS_CLI="$CLI" BYPASS_MORE_TESTS="$MORE" bash "$GUEST/jobs/vfio-edu.sh" "$BIN" --ignored --test-threads=1 --nocapture) || rc=$?
    echo "guest-test: vfio rc=$rc in $(( $(date +%s) - start )) s"
    exit "$rc"
    ;;
  msix)
    build_guest_test vfio_msix
    # The device's host side: shared memory and one eventfd per vector (Debian has no
    # ivshmem-server). It must listen before QEMU starts, and goes when QEMU disconnects.
    SOCK=$(mktemp -u "${TMPDIR:-/tmp}/bypass-ivshmem.XXXXXX")
    exec 3< <(exec python3 "$GUEST/ivshmem-server.py" "$SOCK" 4)
    SERVER_PID=$!
    trap 'kill "$SERVER_PID" 2>/dev/null || true; rm -f "$SOCK"' EXIT
    read -r -t 10 ready <&3 && [ "$ready" = ready ] \
      || { echo "guest-test: ivshmem-server.py did not start" >&2; exit 1; }
    echo "guest-test: running $BIN in the guest (--iommu intel, ivshmem-doorbell with 4 MSI-X vectors)"
    start=$(date +%s)
    rc=0
    (cd "$ROOT" && "$GUEST/run-guest.sh" --iommu intel --net none --timeout "${GUEST_TIMEOUT:-900}" \
      --qemu -chardev --qemu "socket,path=$SOCK,id=ivs" --qemu -device --qemu ivshmem-doorbell,chardev=ivs,vectors=4 \
      -- BYPASS_CLI="$CLI" bash "$GUEST/jobs/vfio-ivshmem.sh" "$BIN" --ignored --test-threads=1 --nocapture) || rc=$?
    echo "guest-test: msix rc=$rc in $(( $(date +%s) - start )) s"
    exit "$rc"
    ;;
  rxe)
    # One attempt is strict: every run exits 0, the pcap checks pass and rxe's counters show no
    # retransmission but rxe's retries on its own stale timer, which the pcaps prove (a PSN
    # resent sooner than the 67 ms timeout after its first send: rxe_retries) and which
    # completer_retry_err must count exactly. A TCG guest on a busy host can also stall for
    # longer than rxe's or bypass's 67 ms retransmit timer, so an attempt whose only failure
    # is another retransmission with no packet lost (exit 3, explained from the pcaps above)
    # is repeated, up to RXE_ATTEMPTS (default 5) in all. Any other failure — a run
    # that does not exit 0, a packet count that differs (an ICRC drop), a bad pcap — fails at
    # once.
    with_attempts rxe rxe_interop "rxe's counters show retransmissions with no packet lost"
    ;;
  rxe-perftest)
    # The retry policy of rxe (above): only an attempt whose one failure is a retransmission
    # with nothing lost (exit 3) is repeated; the number of attempts is printed.
    RXE_NETNS=${RXE_PF_NETNS:-bypass-rxepf}; RXE_TAP=${RXE_PF_TAP:-bprxepf0}
    with_attempts rxe-perftest rxe_perftest "a side retransmitted with no packet lost"
    ;;
  *)
    sed -n '2,/^set -e/{/^#/p}' "$0" >&2
    exit 2
    ;;
esac

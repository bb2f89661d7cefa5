#!/usr/bin/env bash
# The test command of bypass (see README.md): installs what the tests need and is missing,
# then runs every suite with the conformance oracles required, so that nothing passes by
# skipping.
#
# What it installs, and why:
#   gcc, libibverbs-dev  compiles a C program against rdma-core's <infiniband/mlx5dv.h> to
#                        compare WQE/CQE bytes with ours (hw/tests/mlx5dv_oracle.rs)
#   tshark               decodes the RoCEv2 packets we emit as InfiniBand/RRoCE
#                        (hw/tests/roce_tshark.rs)
#   scapy==2.8.0 (pip)   recomputes the ICRC of every packet we emit and builds packets
#                        whose ICRC we must accept (hw/tests/roce_scapy.rs)
#
#   iproute2, nftables  two network namespaces joined by a veth pair with 5 % loss (netem, or an
#                        nftables random-drop rule on kernels without netem) for the two-process
#                        UDP test (tests/netns_udp_loss.rs; it needs root)
#
#   ibverbs-utils, perftest, python3-pyverbs
#                        unmodified rdma-core consumers run over bypass's drop-in
#                        libibverbs.so.1 (scripts/verbs-programs.sh; scripts/abi-check.sh
#                        checks that every one of them, pyverbs' modules included, loads)
#
#   cargo-fuzz           (by scripts/fuzz.sh) short fuzz runs of every target of sim/fuzz and
#                        verbs-api/fuzz (commands, wqes, rx_packets, udp_link, exchange_json,
#                        pingpong_text), each from its committed seeds
#   nightly miri         (by scripts/miri.sh: rustup's nightly toolchain with the miri and
#                        rust-src components) the UB checker over the pure unsafe code
#   qemu-system-x86 (bookworm-backports), busybox-static, kmod, cpio, util-linux (setpriv,
#                        prlimit) and a Debian guest kernel, by scripts/guest/build-guest.sh:
#                        the VFIO backend's tests run on a real kernel in a QEMU guest
#                        (scripts/guest-test.sh vfio; driver/tests/vfio_edu.rs)
#   rdma-core, ibverbs-utils (by scripts/guest/build-guest.sh, or scripts/guest-test.sh rxe):
#                        the guest (whose root is this machine's /) runs rdma-core's
#                        ibv_rc_pingpong on Linux Soft-RoCE against bypass pingpong
#                        (scripts/guest-test.sh rxe)
#
# Environment: SKIP_INSTALL=1 skips the install step (for a machine already set up);
# FUZZ_SECONDS (default 20) is how long each fuzz target runs, 0 to skip fuzzing.
set -euo pipefail

cd "$(dirname "$0")/.."

SCAPY_VERSION=2.8.0

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_missing() {
    local pkgs=()
    command -v gcc >/dev/null 2>&1 || pkgs+=(gcc libc6-dev)
    [ -f /usr/include/infiniband/mlx5dv.h ] || pkgs+=(libibverbs-dev)
    command -v tshark >/dev/null 2>&1 || pkgs+=(tshark)
    command -v python3 >/dev/null 2>&1 || pkgs+=(python3 python3-pip)
    command -v ip >/dev/null 2>&1 || pkgs+=(iproute2)
    command -v nft >/dev/null 2>&1 || pkgs+=(nftables)
    command -v ibv_rc_pingpong >/dev/null 2>&1 || pkgs+=(ibverbs-utils)
    command -v ib_write_lat >/dev/null 2>&1 || pkgs+=(perftest)
    [ -d /usr/lib/python3/dist-packages/pyverbs ] || pkgs+=(python3-pyverbs)
    if [ ${#pkgs[@]} -gt 0 ]; then
        echo "scripts/test.sh: installing ${pkgs[*]}"
        as_root apt-get update
        # tshark asks whether non-root users may capture; answer no, without a prompt.
        echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections 2>/dev/null || true
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}"
    fi
    if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
        echo "scripts/test.sh: installing qemu and the guest's tools (scripts/guest/build-guest.sh)"
        as_root apt-get update
        as_root env LAB="${LAB:-/var/tmp/bypass-guest}" scripts/guest/build-guest.sh --install-host-pkgs
    fi
    if ! python3 -c "import scapy, sys; sys.exit(scapy.VERSION != '$SCAPY_VERSION')" 2>/dev/null; then
        echo "scripts/test.sh: installing scapy==$SCAPY_VERSION"
        python3 -m pip install --quiet "scapy==$SCAPY_VERSION" \
            || python3 -m pip install --quiet --break-system-packages "scapy==$SCAPY_VERSION"
    fi
}

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    install_missing
fi

export BYPASS_REQUIRE_ORACLES=1
cargo test --workspace --all-targets
cargo test --workspace --doc
# The fault soak at full size: 100k messages per loss/duplicate/reorder/corruption setting
# (tests/fault_soak.rs; a plain `cargo test` runs 3k per setting).
BYPASS_SOAK_MESSAGES=100000 cargo test -p bypass --test fault_soak
# Load and exhaustion over time: 64 RC QP pairs with seeded drop/duplicate/reorder/corrupt
# faults, mixed verbs checked end to end, pairs torn down and recreated every 2k messages;
# fails on wrong data, object counts not back to start, or RSS growth after warm-up
# (src/sim/soak/; the 10-minute figures are in docs/perf.md).
cargo run --release -- sim soak --duration 60s --qps 64

# rdma-core's own python test suite (python3-pyverbs, installed when missing) against the
# drop-in libibverbs.so.1 on the sim: fails when fewer tests pass than
# tests/pyverbs/expected-pass records (what each skip means: docs/pyverbs.md).
scripts/pyverbs-tests.sh

# The VFIO backend on a real kernel: QEMU guest with an intel vIOMMU and the edu device.
scripts/guest-test.sh vfio

# The VFIO backend's MSI-X path: QEMU's ivshmem-doorbell device with 4 vectors, each raised by
# its doorbell and seen on its own eventfd, no other (driver/tests/vfio_msix.rs).
scripts/guest-test.sh msix

# Interop with Linux Soft-RoCE: the guest's ibv_rc_pingpong on rxe against bypass pingpong over
# the UDP link (both roles, 1 B/4 KiB/64 KiB, MTU 1024/4096; rxe's counters; a pcap checked
# by tshark and scapy). Needs a release build of bypass.
scripts/guest-test.sh rxe

# perftest on the guest's rxe against perftest on bypass's libibverbs.so.1 over the UDP link
# (ib_write_bw, ib_read_lat, ib_atomic_lat, ib_send_bw; both roles; rxe's counters; every
# run's pcap checked by tshark and scapy).
scripts/guest-test.sh rxe-perftest

# Unmodified rdma-core programs over bypass's drop-in libibverbs.so.1 (release build): the ABI
# check (ldd -r over every consumer), ibv_devices/ibv_devinfo against `bypass devinfo`, the
# four ibv_*_pingpong and perftest's eight ib_* tests, two processes on UDP loopback, perftest
# on its default path, the extended post (ibv_wr_*).
scripts/verbs-programs.sh

# UCX and OpenMPI, unmodified, over the drop-in libibverbs.so.1: ucx_perftest on ud_verbs and
# rc_verbs, and a two-rank ping-pong and allreduce (pml ucx), two processes on UDP loopback in
# a private mount namespace (docs/ucx.md; root; installs ucx-utils and OpenMPI if missing).
scripts/ucx-tests.sh --install

# Miri over the pure code that does pointer work: hw's byte views, the driver's rings, WQE
# writer, poller and QP table, the verbs pool bitmap and outstanding table (scripts/miri.sh;
# installs nightly's miri component when missing). Undefined behaviour fails the run.
scripts/miri.sh

# The sim's committed fuzz seeds are what sim/examples/fuzz_seeds.rs makes of the targets'
# worlds (a wqes seed names MR addresses of Pair::lean's memory layout): a change to a world
# that leaves its seeds stale fails here, not as a quiet loss of coverage.
seeds_now="$(mktemp -d)"
cargo run -q -p bypass-sim --example fuzz_seeds -- "$seeds_now"
diff -r "$seeds_now" sim/fuzz/seeds
rm -rf "$seeds_now"

fuzz_seconds="${FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" != 0 ]; then
    scripts/fuzz.sh "$fuzz_seconds"
fi

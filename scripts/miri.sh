#!/usr/bin/env bash
# Runs the unsafe-heavy pure code of bypass under Miri (the Rust UB checker): byte views,
# pointer arithmetic over rings and tables, and the lock-free bookkeeping the data path
# relies on. Any report of undefined behaviour fails the run; fix it at its root.
#
#   scripts/miri.sh
#
# What runs, and why these (Miri cannot run FFI, ioctl, mmap'ed BARs, sockets or the sim's
# multi-threaded fabrics; a test of those carries `#[cfg_attr(miri, ignore)]` with its
# reason):
#   bypass-hw (lib)        every wire/WQE/CQE/command view over bytes (zerocopy, setters)
#   bypass-driver (lib)    the QP table and its cache (qp_table), the pin table, barriers,
#                          SQ/RQ rings and the WQE writer (wq, wqe), CQE polling (poll), QP
#                          geometry and states, bfreg layout (uar), post limits (post); not
#                          mtt_pages (safe arithmetic, proptest: file I/O and too slow here)
#   bypass-verbs (lib)     the memory pool's chunk bitmap (chunks, pool), the outstanding
#                          table (outstanding), request lowering (lower), shared leases,
#                          endpoint parsing
#
# Installs the nightly toolchain (minimal profile) and its miri and rust-src components when
# missing, then `cargo +nightly miri setup` (a one-time sysroot build).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "scripts/miri.sh: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^miri'; then
    echo "scripts/miri.sh: adding miri to nightly"
    rustup component add miri rust-src --toolchain nightly
fi
cargo +nightly miri setup

# Miri's default checks (Stacked Borrows, data races, leaks, alignment) stay on; isolation
# stays on too, so a test that reads the environment, clock or files shows up as an error to
# be marked, not as a silent pass.
miri() {
    echo "scripts/miri.sh: cargo +nightly miri test $*"
    cargo +nightly miri test "$@"
}

miri -p bypass-hw --lib
miri -p bypass-driver --lib -- \
    barrier qp_table pin_table wq:: wqe:: poll:: qp_geometry qp_states uar:: post::
miri -p bypass-verbs --lib -- \
    outstanding:: pool:: chunks:: lower:: shared:: endpoint::

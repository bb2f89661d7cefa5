#!/usr/bin/env bash
# gpu-check.sh - RDMA to and from GPU memory through two simulated NICs, on a machine with a GPU.
#
#   scripts/gpu-check.sh [BYPASS]
#
# Runs a prebuilt bypass binary (BYPASS, default $BYPASS_BIN or target/release/bypass; build
# it elsewhere with `cargo build --release` and carry it over: this script builds nothing and
# needs no cargo). It prints every command line before running it, then runs:
#   1. `bypass gpu info`        the CUDA devices, their PCI bus ids and dma-buf support;
#   2. `bypass gpu check`       GPU memory on GPU 0 (and GPU 1 if present) exported as
#                               dma-bufs and registered on two in-process sim NICs: RDMA WRITE
#                               and READ GPU->GPU, GPU->host and host->GPU, and SEND, every
#                               byte copied back to the host and compared; then GPU->GPU RDMA
#                               WRITE bandwidth on the sim against cuMemcpyDtoD of the same
#                               size in the same run (median of 5 rounds each, and the ratio);
#   3. `bypass ping --ramp -d sim --threaded`   the bring-up ramp, whose stage 4 is GPU memory.
# Exit: 0 all passed; 77 no GPU here (no /dev/nvidia0, no libcuda, or CUDA_ERROR_NO_DEVICE:
# the automake "skipped" code); 2 usage (no such binary); otherwise the failing command's code.
# Extra arguments for `gpu check` can be passed in GPU_CHECK_ARGS (e.g. "--size 4194304").
# GPU_CHECK_NO_DEVNODE=1 skips the /dev/nvidia0 test: for tests that point LD_LIBRARY_PATH at
# a stand-in libcuda (standins/cuda, standins/cuda-host) on a machine without a GPU.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-${BYPASS_BIN:-$ROOT/target/release/bypass}}

if [[ ! -x "$BIN" ]]; then
    echo "gpu-check: $BIN is not an executable bypass binary: build it with 'cargo build --release' and pass its path (this script builds nothing)" >&2
    exit 2
fi
if [[ ! -e /dev/nvidia0 && "${GPU_CHECK_NO_DEVNODE:-0}" != 1 ]]; then
    echo "gpu-check: skipped: no /dev/nvidia0 (no NVIDIA GPU, or its driver is not loaded)"
    exit 77
fi

# run CMD...: prints the exact command line, runs it, and returns its exit code.
run() {
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    "$@"
}

run "$BIN" gpu info
rc=$?
if [[ $rc -ne 0 ]]; then
    # gpu info exits 1 on any error; gpu check tells a missing GPU (77) from a failure.
    echo "gpu-check: gpu info failed (exit $rc); gpu check says whether that means no GPU"
fi
# shellcheck disable=SC2086 # GPU_CHECK_ARGS is a list of words on purpose
run "$BIN" gpu check ${GPU_CHECK_ARGS:-}
rc=$?
if [[ $rc -eq 77 ]]; then
    echo "gpu-check: skipped: bypass found no usable GPU (see above)"
    exit 77
elif [[ $rc -ne 0 ]]; then
    echo "gpu-check: FAILED: gpu check exited $rc"
    exit "$rc"
fi
run "$BIN" ping --ramp -d sim --threaded
rc=$?
if [[ $rc -ne 0 ]]; then
    echo "gpu-check: FAILED: ping --ramp exited $rc"
    exit "$rc"
fi
echo "gpu-check: ok"

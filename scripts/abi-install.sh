#!/usr/bin/env bash
# abi-install.sh - puts bypass's drop-in C libraries under their sonames in one folder, the
# LD_LIBRARY_PATH that unmodified rdma-core consumers (ibverbs-utils, perftest, pyverbs) run
# with. Meant to be sourced (scripts/abi-check.sh does); run directly it installs once:
#
#   source scripts/abi-install.sh; install_abi_libs TARGETDIR [DEST]
#   scripts/abi-install.sh [TARGETDIR [DEST]]
#
# TARGETDIR is a cargo profile folder (default ${CARGO_TARGET_DIR:-target}/debug) holding what
# `cargo build -p bypass-standin-mlx5 -p bypass-standin-efa` built; DEST defaults to
# TARGETDIR/abi. Each ABI_LIBS entry `CARGO_FILE:SONAME` is copied TARGETDIR/CARGO_FILE ->
# DEST/SONAME (through a temporary name and mv, so a process that has the old file mapped keeps
# it); a missing CARGO_FILE is an error naming the package to build. Touches nothing outside
# DEST.

ABI_LIBS=(
    "libibverbs.so:libibverbs.so.1" # bypass-ibverbs (ibverbs)
    "libmlx5.so:libmlx5.so.1"   # bypass-standin-mlx5 (standins/mlx5)
    "libefa.so:libefa.so.1"     # bypass-standin-efa (standins/efa)
)

# install_abi_libs TARGETDIR [DEST]: copies every ABI_LIBS entry; prints DEST; returns 1 if one
# is missing.
install_abi_libs() {
    local target=${1:?usage: install_abi_libs TARGETDIR [DEST]}
    local dest=${2:-$target/abi} entry from soname
    mkdir -p "$dest" || return 1
    for entry in "${ABI_LIBS[@]}"; do
        from=${entry%%:*}
        soname=${entry#*:}
        if [ ! -f "$target/$from" ]; then
            echo "install_abi_libs: $target/$from is missing (cargo build the crate that makes $soname)" >&2
            return 1
        fi
        cp "$target/$from" "$dest/.$soname.tmp" && mv -f "$dest/.$soname.tmp" "$dest/$soname" || return 1
    done
    echo "$dest"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    ROOT=$(cd "$(dirname "$0")/.." && pwd)
    install_abi_libs "${1:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}" ${2:+"$2"}
fi

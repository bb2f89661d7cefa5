#!/usr/bin/env bash
# Runs every cargo-fuzz target of the sim for SECONDS each (default 60) and fails on any
# finding. The machine has only stable Rust; cargo-fuzz needs nightly flags, which
# RUSTC_BOOTSTRAP=1 enables on stable.
#
#   scripts/fuzz.sh [SECONDS]
#
# Installs cargo-fuzz (from crates.io) if it is missing. Findings land in
# sim/fuzz/artifacts/<target>/; replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> sim/fuzz/artifacts/<target>/<file>   (in sim/fuzz)
set -euo pipefail
cd "$(dirname "$0")/../sim/fuzz"

seconds="${1:-60}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "scripts/fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
    echo "scripts/fuzz.sh: fuzzing $target for ${seconds}s"
    log="$(mktemp)"
    if ! cargo fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=4096 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "scripts/fuzz.sh: $target found a failure (see sim/fuzz/artifacts/$target/)" >&2
        exit 1
    fi
    grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/scripts\/fuzz.sh: $target: /"
    rm -f "$log"
done

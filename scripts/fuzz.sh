#!/usr/bin/env bash
# Runs every cargo-fuzz target of the fuzz crates (FUZZ_DIRS, default "sim/fuzz
# verbs-api/fuzz"), one after the other, each from a temporary corpus seeded with the
# crate's seeds/<target>/ (committed seeds are never changed), and fails on any finding.
#
#   scripts/fuzz.sh [SECONDS]      each target for SECONDS (default 60); prints runs and exec/s
#   scripts/fuzz.sh --long [RUNS]  each target to RUNS executions (default 10,000,000; stops
#                                  early after FUZZ_MAX_SECONDS if set); prints executions,
#                                  time, exec/s, coverage (cov, ft), corpus size and findings
#
# Environment: FUZZ_DIRS (the crates), FUZZ_TARGETS (only these targets, space-separated),
# FUZZ_KEEP=DIR (keep each target's final corpus in DIR/<target>). A crate's options/<target>
# file, if present, holds extra libFuzzer flags for that target, one per line. Builds go to
# CARGO_TARGET_DIR (default target/fuzz, shared by the crates). The machine has only stable
# Rust; cargo-fuzz needs nightly flags, which RUSTC_BOOTSTRAP=1 enables on stable. Installs
# cargo-fuzz (from crates.io) if it is missing. Findings land in <crate>/artifacts/<target>/;
# replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> artifacts/<target>/<file>   (in the crate)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

long=0
if [ "${1:-}" = "--long" ]; then
    long=1
    runs="${2:-10000000}"
else
    seconds="${1:-60}"
fi
dirs="${FUZZ_DIRS:-sim/fuzz verbs-api/fuzz}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/fuzz}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "scripts/fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# A value from libFuzzer's final stats line (`stat::NAME: VALUE`) in log $1.
final_stat() { grep -E "^stat::$2:" "$1" | tail -n 1 | awk '{print $2}' || true; }
# A field (cov, ft, corp) of the last status line (`#N DONE cov: ... ft: ... corp: N/...`).
field() { grep -E '^#[0-9]+' "$1" | tail -n 1 | sed -E "s/.* $2: ([0-9]+).*/\1/" || true; }

failed=0
for dir in $dirs; do
    cd "$root/$dir"
    start=$(date +%s)
    if ! built="$(cargo fuzz build 2>&1)"; then
        echo "$built"
        exit 1
    fi
    echo "scripts/fuzz.sh: built $dir in $(( $(date +%s) - start ))s"
    for target in $(cargo fuzz list); do
        if [ -n "${FUZZ_TARGETS:-}" ] && ! [[ " $FUZZ_TARGETS " == *" $target "* ]]; then
            continue
        fi
        corpus="$(mktemp -d)"
        if [ -d "seeds/$target" ]; then
            cp seeds/"$target"/* "$corpus"/
        fi
        log="$(mktemp)"
        mkdir -p "artifacts/$target"
        before=$(find "artifacts/$target" -type f | wc -l)
        if [ "$long" = 1 ]; then
            limit=(-runs="$runs")
            if [ -n "${FUZZ_MAX_SECONDS:-}" ]; then
                limit+=(-max_total_time="$FUZZ_MAX_SECONDS")
            fi
            echo "scripts/fuzz.sh: fuzzing $dir $target to ${runs} runs"
        else
            limit=(-max_total_time="$seconds")
            echo "scripts/fuzz.sh: fuzzing $dir $target for ${seconds}s"
        fi
        extra=()
        if [ -f "options/$target" ]; then
            mapfile -t extra < <(grep -Ev '^[[:space:]]*(#|$)' "options/$target")
        fi
        t0=$(date +%s)
        ok=1
        cargo fuzz run "$target" "$corpus" -- "${limit[@]}" "${extra[@]}" -timeout=10 \
            -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 || ok=0
        took=$(( $(date +%s) - t0 ))
        found=$(( $(find "artifacts/$target" -type f | wc -l) - before ))
        execs="$(final_stat "$log" number_of_executed_units)"
        rate="$(final_stat "$log" average_exec_per_sec)"
        if [ "$ok" = 0 ] || [ "$found" != 0 ]; then
            tail -n 60 "$log"
            echo "scripts/fuzz.sh: $target found a failure (see $dir/artifacts/$target/)" >&2
            failed=1
        fi
        if [ "$long" = 1 ]; then
            echo "scripts/fuzz.sh: $target: executions ${execs:-?} in ${took}s (${rate:-?} exec/s)," \
                "cov $(field "$log" cov), ft $(field "$log" ft), corpus $(find "$corpus" -type f | wc -l)," \
                "findings $found"
        else
            grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/scripts\/fuzz.sh: $target: /;s/$/ (${rate:-?} exec\/s)/"
        fi
        if [ -n "${FUZZ_KEEP:-}" ]; then
            mkdir -p "$FUZZ_KEEP/$target"
            cp "$corpus"/* "$FUZZ_KEEP/$target"/ 2>/dev/null || true
        fi
        rm -rf "$corpus" "$log"
    done
done
exit "$failed"

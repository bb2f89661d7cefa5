#!/usr/bin/env bash
# abi-check.sh - do unmodified rdma-core consumers load against bypass's drop-in libraries?
#
#   scripts/abi-check.sh [--install] [--libs "ibverbs mlx5 efa"] [-v] [DIR]
#
# For every consumer binary it runs `LD_LIBRARY_PATH=DIR ldd -r BINARY` (the loader binds every
# symbol, as the BIND_NOW consumers do at start) and fails the binary on any "undefined symbol",
# "not found" or "no version information available" line, and when a library named in --libs
# (default: ibverbs mlx5 efa, i.e. libibverbs.so.1, libmlx5.so.1, libefa.so.1) that the binary
# needs resolves anywhere but DIR (e.g. Debian's copy in /usr/lib). Prints one line per binary
# and a summary; exits 0 only if every binary passes, 1 otherwise, 2 on usage errors.
#
#   DIR        folder holding the drop-ins under their sonames; default
#              ${CARGO_TARGET_DIR:-target}/debug/abi
#   --install  first fill DIR with install_abi_libs (scripts/abi-install.sh) from
#              ${CARGO_TARGET_DIR:-target}/debug (build the crates first)
#   --libs L   which drop-ins must come from DIR; e.g. --libs "mlx5 efa" before libibverbs
#              exports everything (then Debian's libibverbs is the one loaded)
#   -v         print every offending ldd line (default: the first 5 per binary)
#
# Consumers: /usr/bin/ibv_* (ibverbs-utils), /usr/bin/ib_* (perftest) and pyverbs' extension
# modules (/usr/lib/python3/dist-packages/pyverbs/**/*.so, python3-pyverbs); non-ELF files are
# skipped; a consumer package that is not installed fails the check (nothing passes unchecked).
# ABI_CHECK_CONSUMERS (space-separated paths) replaces that list. Needs ldd (libc-bin).
# Reads only; writes nothing except DIR with --install.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/abi-install.sh
source "$ROOT/scripts/abi-install.sh"

PROFILE_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/debug
LIBS="ibverbs mlx5 efa"
INSTALL=0
VERBOSE=0
DIR=
while [ $# -gt 0 ]; do
    case $1 in
        --install) INSTALL=1 ;;
        --libs) [ $# -ge 2 ] || { echo "--libs needs a list" >&2; exit 2; }; LIBS=$2; shift ;;
        -v) VERBOSE=1 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) [ -z "$DIR" ] || { echo "one DIR only" >&2; exit 2; }; DIR=$1 ;;
    esac
    shift
done
DIR=${DIR:-$PROFILE_DIR/abi}

if [ "$INSTALL" = 1 ]; then
    install_abi_libs "$PROFILE_DIR" "$DIR" >/dev/null || exit 1
fi
[ -d "$DIR" ] || { echo "abi-check: $DIR does not exist (try --install)" >&2; exit 2; }
REALDIR=$(realpath "$DIR")
command -v ldd >/dev/null || { echo "abi-check: ldd is not installed" >&2; exit 2; }

MISSING=()
if [ -n "${ABI_CHECK_CONSUMERS:-}" ]; then
    read -r -a CONSUMERS <<<"$ABI_CHECK_CONSUMERS"
else
    shopt -s nullglob
    CONSUMERS=(/usr/bin/ibv_*)
    [ ${#CONSUMERS[@]} -gt 0 ] || MISSING+=("/usr/bin/ibv_* (apt-get install ibverbs-utils)")
    PERFTEST=(/usr/bin/ib_*)
    [ ${#PERFTEST[@]} -gt 0 ] || MISSING+=("/usr/bin/ib_* (apt-get install perftest)")
    CONSUMERS+=("${PERFTEST[@]}")
    shopt -u nullglob
    PYVERBS=/usr/lib/python3/dist-packages/pyverbs
    if [ -d $PYVERBS ]; then
        mapfile -t -O "${#CONSUMERS[@]}" CONSUMERS < <(find $PYVERBS -name '*.so' | sort)
    else
        MISSING+=("$PYVERBS (apt-get install python3-pyverbs)")
    fi
fi

is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

pass=0 fail=0 skipped=0
declare -A BAD_BY_KIND=()
for bin in "${CONSUMERS[@]}"; do
    if [ ! -e "$bin" ]; then
        MISSING+=("$bin")
        continue
    fi
    if ! is_elf "$bin"; then
        skipped=$((skipped + 1))
        continue
    fi
    out=$(LD_LIBRARY_PATH="$REALDIR" ldd -r "$bin" 2>&1)
    rc=$?
    problems=()
    while IFS= read -r line; do
        [ -n "$line" ] && problems+=("$line")
    done < <(grep -E 'undefined symbol|not found|no version information available' <<<"$out")
    from_dir=()
    for lib in $LIBS; do
        path=$(awk -v so="lib$lib.so.1" '$1 == so && $2 == "=>" { print $3 }' <<<"$out")
        [ -n "$path" ] || continue # the binary does not need it
        if [ "$path" = "not" ]; then
            continue # already reported as "not found"
        fi
        if [ "$(dirname "$(realpath "$path")")" != "$REALDIR" ]; then
            problems+=("lib$lib.so.1 resolved to $path, not $REALDIR")
        else
            from_dir+=("lib$lib")
        fi
    done
    if [ $rc -ne 0 ] && [ ${#problems[@]} -eq 0 ]; then
        problems+=("ldd exited $rc: $(head -1 <<<"$out")")
    fi
    if [ ${#problems[@]} -eq 0 ]; then
        pass=$((pass + 1))
        printf 'ok    %s (%s from DIR)\n' "$bin" "${from_dir[*]:-none}"
    else
        fail=$((fail + 1))
        printf 'FAIL  %s: %d problem(s)\n' "$bin" "${#problems[@]}"
        shown=${#problems[@]}
        [ "$VERBOSE" = 1 ] || [ "$shown" -le 5 ] || shown=5
        for p in "${problems[@]:0:$shown}"; do
            printf '        %s\n' "$(sed 's/^[[:space:]]*//' <<<"$p")"
        done
        [ "$shown" -eq ${#problems[@]} ] || printf '        ... %d more (-v shows all)\n' $((${#problems[@]} - shown))
        for p in "${problems[@]}"; do
            case $p in
                *"undefined symbol"*) k=undefined ;;
                *"not found"*) k=not-found ;;
                *"no version information"*) k=no-version ;;
                *"resolved to"*) k=wrong-lib ;;
                *) k=other ;;
            esac
            BAD_BY_KIND[$k]=$((${BAD_BY_KIND[$k]:-0} + 1))
        done
    fi
done

echo "abi-check: DIR=$REALDIR libs from DIR: $LIBS"
echo "abi-check: $pass passed, $fail failed, $skipped skipped (not ELF) of ${#CONSUMERS[@]} consumers"
for m in "${MISSING[@]}"; do
    echo "abi-check: MISSING consumer $m"
done
if [ $fail -gt 0 ]; then
    summary=
    for k in "${!BAD_BY_KIND[@]}"; do summary+=" $k=${BAD_BY_KIND[$k]}"; done
    echo "abi-check: problem lines by kind:$summary"
    # The symbols missing most often, across binaries: what libibverbs must export next.
    echo "abi-check: undefined symbols (binaries needing each):"
    for bin in "${CONSUMERS[@]}"; do
        is_elf "$bin" && LD_LIBRARY_PATH="$REALDIR" ldd -r "$bin" 2>&1 | grep -oE $'undefined symbol: [^ ,\t]+(, version [^ \t]+)?' | sort -u
    done | sed 's/undefined symbol: //' | sort | uniq -c | sort -rn | head -40 | sed 's/^/    /'
    exit 1
fi
[ ${#MISSING[@]} -eq 0 ] || exit 1
exit 0

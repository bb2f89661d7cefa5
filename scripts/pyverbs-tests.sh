#!/usr/bin/env bash
# pyverbs-tests.sh - rdma-core's own python test suite (python3-pyverbs) against bypass's
# drop-in libibverbs.so.1 on the in-process sim.
#
#   scripts/pyverbs-tests.sh [--no-build] [--record] [-v] [MODULE...]
#
# Copies the tests Debian ships in /usr/share/doc/rdma-core/tests (gunzipping the .gz ones) to
# a temporary folder, keeping only the test modules it runs: the package's __init__.py imports
# every test_*.py in its folder, and the vendor ones (mlx5, efa, cuda) need their provider
# libraries, so they are left out of the copy (the helper modules such as mlx5_base.py stay:
# utils.py imports them). Each module then runs in its own process,
#
#   BYPASS_DEVICE=sim LD_LIBRARY_PATH=ABI /usr/bin/python3 tests/run_tests.py --dev bypass0 \
#       -v tests.MODULE
#
# so a crash costs one module, and the script prints pass / skip / fail per module and in
# total (fail = failures + errors + unexpected successes; a module that dies before unittest's
# summary counts as crashed). It fails (exit 1) when the total pass count is below the one
# recorded in tests/pyverbs/expected-pass; --record writes the current total there instead.
#
#   MODULE...   run only these (default: MODULES below), failing on any failure or crash
#               instead of checking the recorded count
#   --no-build  do not build; use the libraries already in ABI
#   --record    write the total pass count to tests/pyverbs/expected-pass
#   -v          print each failing/erroring test's traceback (default: only its name)
#
# Environment: ABI (default ${CARGO_TARGET_DIR:-target}/debug/abi) is where the drop-ins are
# installed (scripts/abi-install.sh); PYVERBS_TIMEOUT (default 300) bounds each module in
# seconds; PYVERBS_LOG_DIR is where the per-module logs go (default
# ${CARGO_TARGET_DIR:-target}/pyverbs-logs, emptied first). SKIP_INSTALL=1 skips installing
# python3-pyverbs.
# What each remaining skip and failure means: docs/pyverbs.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/abi-install.sh
source "$ROOT/scripts/abi-install.sh"

SRC=/usr/share/doc/rdma-core/tests
PY=/usr/bin/python3
EXPECTED_FILE=$ROOT/tests/pyverbs/expected-pass
PROFILE_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/debug
ABI=${ABI:-$PROFILE_DIR/abi}
TIMEOUT=${PYVERBS_TIMEOUT:-300}

# Every module of rdma-core 44's suite that is not vendor-specific. The ones bypass cannot run
# (rdmacm, flow, rss: a kernel device or raw packet QPs) stay in the list: they skip, and a
# change that makes one run shows in the counts.
MODULES=(
    test_device test_pd test_mr test_cq test_cq_events test_qp test_addr
    test_atomic test_cqex test_qpex test_relaxed_ordering test_fork test_odp
    test_parent_domain test_shared_pd test_tag_matching test_rdmacm test_flow test_rss_traffic
)

BUILD=1
RECORD=0
VERBOSE=0
CHOSEN=()
while [ $# -gt 0 ]; do
    case $1 in
        --no-build) BUILD=0 ;;
        --record) RECORD=1 ;;
        -v) VERBOSE=1 ;;
        -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
        test_*) CHOSEN+=("$1") ;;
        *) echo "pyverbs-tests.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ ${#CHOSEN[@]} -gt 0 ]; then
    if [ "$RECORD" = 1 ]; then
        echo "pyverbs-tests.sh: --record counts the whole default list; give no MODULE" >&2
        exit 2
    fi
    MODULES=("${CHOSEN[@]}")
fi

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ ! -d "$SRC" ] || ! "$PY" -c 'import pyverbs.device' 2>/dev/null; then
    if [ "${SKIP_INSTALL:-0}" = 1 ]; then
        echo "pyverbs-tests.sh: python3-pyverbs is missing ($SRC, $PY -c 'import pyverbs') and SKIP_INSTALL=1" >&2
        exit 1
    fi
    echo "pyverbs-tests.sh: installing python3-pyverbs"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pyverbs
fi

if [ "$BUILD" = 1 ]; then
    cargo build -p bypass-ibverbs -p bypass-standin-mlx5 -p bypass-standin-efa
    install_abi_libs "$PROFILE_DIR" "$ABI" >/dev/null
fi
for lib in libibverbs.so.1 libmlx5.so.1 libefa.so.1; do
    if [ ! -f "$ABI/$lib" ]; then
        echo "pyverbs-tests.sh: $ABI/$lib is missing (run without --no-build, or set ABI)" >&2
        exit 1
    fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bypass-pyverbs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/tests"
for f in "$SRC"/*; do
    name=$(basename "$f")
    case $name in
        test_*) ;;                            # copied below, only those that run
        *.gz) gunzip -c "$f" >"$WORK/tests/${name%.gz}" ;;
        *) cp "$f" "$WORK/tests/$name" ;;
    esac
done
for m in "${MODULES[@]}"; do
    if [ -f "$SRC/$m.py" ]; then
        cp "$SRC/$m.py" "$WORK/tests/"
    elif [ -f "$SRC/$m.py.gz" ]; then
        gunzip -c "$SRC/$m.py.gz" >"$WORK/tests/$m.py"
    else
        echo "pyverbs-tests.sh: $SRC has no module $m" >&2
        exit 1
    fi
done

LOGS=${PYVERBS_LOG_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/pyverbs-logs}
mkdir -p "$LOGS"
rm -f "$LOGS"/test_*.log

# count FIELD LINE: the number after FIELD= in unittest's summary line (0 if absent).
count() {
    local v
    v=$(sed -n "s/.*[(, ]$1=\([0-9]*\).*/\1/p" <<<"$2")
    echo "${v:-0}"
}

total_pass=0 total_skip=0 total_fail=0 crashed=()
printf '%-24s %5s %5s %5s %5s\n' module ran pass skip fail
for m in "${MODULES[@]}"; do
    log=$LOGS/$m.log
    rc=0
    (cd "$WORK" && env BYPASS_DEVICE=sim LD_LIBRARY_PATH="$ABI" \
        timeout "$TIMEOUT" "$PY" tests/run_tests.py --dev bypass0 -v "tests.$m") >"$log" 2>&1 || rc=$?
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -1)
    summary=$(grep -E '^(OK|FAILED)( \(.*\))?$' "$log" | tail -1 || true)
    if [ -z "$ran" ] || [ -z "$summary" ]; then
        printf '%-24s %5s %5s %5s %5s  crashed (exit %s): %s\n' "$m" - - - - "$rc" "$log"
        crashed+=("$m")
        continue
    fi
    skip=$(count skipped "$summary")
    fail=$(( $(count failures "$summary") + $(count errors "$summary") \
        + $(count 'unexpected successes' "$summary") ))
    xfail=$(count 'expected failures' "$summary")
    pass=$((ran - skip - fail - xfail))
    printf '%-24s %5d %5d %5d %5d\n' "$m" "$ran" "$pass" "$skip" "$fail"
    grep -E '^(FAIL|ERROR): ' "$log" | sed 's/^/    /' || true
    if [ "$VERBOSE" = 1 ] && [ "$fail" -gt 0 ]; then
        sed -n '/^======/,/^Ran /p' "$log" | sed '$d' | sed 's/^/      /'
    fi
    total_pass=$((total_pass + pass))
    total_skip=$((total_skip + skip))
    total_fail=$((total_fail + fail))
done
printf '%-24s %5s %5d %5d %5d\n' total '' "$total_pass" "$total_skip" "$total_fail"
[ ${#crashed[@]} -eq 0 ] || echo "crashed: ${crashed[*]}"
echo "logs: $LOGS"

if [ "$RECORD" = 1 ]; then
    mkdir -p "$(dirname "$EXPECTED_FILE")"
    echo "$total_pass" >"$EXPECTED_FILE"
    echo "recorded $total_pass passes in ${EXPECTED_FILE#"$ROOT"/}"
    exit 0
fi
if [ ${#CHOSEN[@]} -gt 0 ]; then
    # A chosen subset has no recorded count: it fails on any failure or crash.
    [ "$total_fail" -eq 0 ] && [ ${#crashed[@]} -eq 0 ]
    exit
fi
expected=$(tr -dc '0-9' <"$EXPECTED_FILE" 2>/dev/null || true)
if [ -z "$expected" ]; then
    echo "pyverbs-tests.sh: no recorded pass count in ${EXPECTED_FILE#"$ROOT"/} (run with --record)" >&2
    exit 1
fi
if [ "$total_pass" -lt "$expected" ]; then
    echo "pyverbs-tests.sh: FAIL: $total_pass tests pass, fewer than the $expected recorded in ${EXPECTED_FILE#"$ROOT"/}" >&2
    exit 1
fi
echo "pyverbs-tests.sh: ok: $total_pass tests pass (recorded: $expected)"

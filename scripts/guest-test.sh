#!/usr/bin/env bash
# guest-test.sh - tests that need a real Linux kernel, run in the QEMU guest of scripts/guest/.
#
#   scripts/guest-test.sh vfio     the VFIO backend on QEMU's edu device behind an intel
#                                  vIOMMU (driver/tests/vfio_edu.rs, the #[ignore]d tests)
#
# Builds the test binary here, prepares the guest kernel if needed (scripts/guest/build-guest.sh;
# with --install-host-pkgs when qemu is missing, which needs root and apt), boots the guest
# (its root file system is this machine's /, read-only, so the binary runs at the same path),
# runs the binary there and exits with its exit code: non-zero when any guest test fails or the
# guest does not come up.
# Env: LAB (default /var/tmp/bypass-guest), GUEST_TIMEOUT (default 900 s).
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
     && [ -f "$LAB/kernel/$kver/boot/vmlinuz-$kver" ] && [ -f "$LAB/initramfs-$kver.cpio.gz" ]; then
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

case "$MODE" in
  vfio)
    BIN=$(test_binary bypass-driver vfio_edu)
    [ -x "$BIN" ] || { echo "guest-test: building the vfio_edu test binary failed" >&2; exit 1; }
    cargo build --manifest-path "$ROOT/Cargo.toml" -p bypass --bin bypass
    CLI=$(cargo metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/bypass
    [ -x "$CLI" ] || { echo "guest-test: building the bypass CLI failed" >&2; exit 1; }
    ensure_guest
    echo "guest-test: running $BIN in the guest (--iommu intel --edu)"
    start=$(date +%s)
    rc=0
    (cd "$ROOT" && "$GUEST/run-guest.sh" --iommu intel --edu --net none --timeout "${GUEST_TIMEOUT:-900}" \
      -- BYPASS_CLI="$CLI" bash "$GUEST/jobs/vfio-edu.sh" "$BIN" --ignored --test-threads=1 --nocapture) || rc=$?
    echo "guest-test: vfio rc=$rc in $(( $(date +%s) - start )) s"
    exit "$rc"
    ;;
  *)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac

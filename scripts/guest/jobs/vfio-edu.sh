# Guest job: bind QEMU's edu device to vfio-pci and run a test binary against it.
# Usage (inside the guest, via run-guest.sh --iommu intel --edu):
#   bash jobs/vfio-edu.sh TEST_BINARY [TEST ARGS...]
# Env BYPASS_MORE_TESTS: more test binaries (space-separated), each run after TEST_BINARY
# with the same ARGS against the same bound device.
# Env BYPASS_CLI: also run `$BYPASS_CLI devinfo --vfio BDF` and check its output.
# Exits with the first failing test binary's exit code, else 0 (3: no edu device, 4: binding
# failed, 5: devinfo failed).
set -u
BIN=${1:?usage: vfio-edu.sh TEST_BINARY [ARGS...]}; shift
. "$(dirname "$0")/vfio-bind.sh"
vfio_bind vfio-edu 0x1234 0x11e8 || exit $?
rc=0
for b in "$BIN" ${BYPASS_MORE_TESTS:-}; do
  s=$(date +%s.%N)
  BYPASS_EDU_BDF=$BDF "$b" "$@"; brc=$?
  echo "vfio-edu: $(basename "$b") rc=$brc in $(echo "$(date +%s.%N) - $s" | bc) s"
  [ $rc != 0 ] || rc=$brc
done
if [ -n "${BYPASS_CLI:-}" ]; then
  # the CLI's view of the same device through the VFIO backend
  echo "vfio-edu: $BYPASS_CLI devinfo --vfio $BDF"
  out=$("$BYPASS_CLI" devinfo --vfio "$BDF" 2>&1); crc=$?
  echo "$out"
  if [ $crc != 0 ] || ! echo "$out" | grep -q "BAR0.*mmap" || ! echo "$out" | grep -q "MSI .*1 vector"; then
    echo "vfio-edu: bypass devinfo --vfio failed (rc=$crc)"; [ $rc != 0 ] || rc=5
  fi
fi
echo "vfio-edu: kernel IOMMU messages during the run:"
dmesg | grep -E 'DMAR.*fault|vfio' | tail -n 12
exit $rc

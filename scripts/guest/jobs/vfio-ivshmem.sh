# Guest job: bind QEMU's ivshmem-doorbell device to vfio-pci and run a test binary against it.
# Usage (inside the guest, via run-guest.sh --iommu intel with the device added; see
# scripts/guest-test.sh msix, which also runs scripts/guest/ivshmem-server.py on the host):
#   bash jobs/vfio-ivshmem.sh TEST_BINARY [TEST ARGS...]
# Env BYPASS_CLI: also run `$BYPASS_CLI devinfo --vfio BDF` and check it shows the MSI-X vectors.
# Exits with the test binary's exit code (3: no device, 4: binding failed, 5: devinfo failed).
set -u
BIN=${1:?usage: vfio-ivshmem.sh TEST_BINARY [ARGS...]}; shift
. "$(dirname "$0")/vfio-bind.sh"
vfio_bind vfio-ivshmem 0x1af4 0x1110 || exit $?
s=$(date +%s.%N)
BYPASS_IVSHMEM_BDF=$BDF "$BIN" "$@"; rc=$?
echo "vfio-ivshmem: $(basename "$BIN") rc=$rc in $(echo "$(date +%s.%N) - $s" | bc) s"
if [ -n "${BYPASS_CLI:-}" ]; then
  out=$("$BYPASS_CLI" devinfo --vfio "$BDF" 2>&1); crc=$?
  echo "$out" | grep -E "MSI|enabled"
  if [ $crc != 0 ] || ! echo "$out" | grep -q "enabled: MsiX, 4 eventfd"; then
    echo "vfio-ivshmem: bypass devinfo --vfio failed (rc=$crc)"; [ $rc != 0 ] || rc=5
  fi
fi
echo "vfio-ivshmem: kernel vfio messages during the run:"
dmesg | grep -E 'DMAR.*fault|vfio' | tail -n 12
exit $rc

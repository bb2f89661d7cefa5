# Guest job: bind QEMU's edu device to vfio-pci and run a test binary against it.
# Usage (inside the guest, via run-guest.sh --iommu intel --edu):
#   bash jobs/vfio-edu.sh TEST_BINARY [TEST ARGS...]
# Env BYPASS_CLI: also run `$BYPASS_CLI devinfo --vfio BDF` and check its output.
# Exits with the test binary's exit code (3: no edu device, 4: binding failed, 5: devinfo failed).
set -u
BIN=${1:?usage: vfio-edu.sh TEST_BINARY [ARGS...]}; shift
BDF=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor"):$(cat "$d/device")" = "0x1234:0x11e8" ] && BDF=$(basename "$d")
done
[ -n "$BDF" ] || { echo "vfio-edu: no edu device (1234:11e8): boot with --edu"; exit 3; }
# the IOMMU group appears once the vIOMMU has probed the device
for _ in $(seq 1 50); do [ -e "/sys/bus/pci/devices/$BDF/iommu_group" ] && break; sleep 0.1; done
if ls /sys/bus/virtio/drivers/virtio_iommu/ 2>/dev/null | grep -q virtio; then
  # virtio-iommu on x86 has no MSI isolation: type1 refuses VFIO_SET_IOMMU without this
  modprobe vfio_iommu_type1 allow_unsafe_interrupts=1
fi
modprobe vfio-pci
echo vfio-pci > "/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" > /sys/bus/pci/drivers_probe
DRV=$(basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null)
echo "vfio-edu: edu at $BDF, driver ${DRV:-none}, iommu group $(basename "$(readlink "/sys/bus/pci/devices/$BDF/iommu_group")")"
[ "$DRV" = vfio-pci ] || { echo "vfio-edu: binding $BDF to vfio-pci failed"; exit 4; }
s=$(date +%s.%N)
BYPASS_EDU_BDF=$BDF "$BIN" "$@"; rc=$?
echo "vfio-edu: $(basename "$BIN") rc=$rc in $(echo "$(date +%s.%N) - $s" | bc) s"
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

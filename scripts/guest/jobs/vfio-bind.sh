# Sourced by the guest's VFIO jobs: vfio_bind TAG VENDOR DEVICE finds the PCI function with
# those IDs, waits for its IOMMU group, binds it to vfio-pci (driver_override + drivers_probe)
# and sets BDF. Returns 3 when there is no such device, 4 when binding failed; messages are
# prefixed with TAG.
vfio_bind() {
  local tag=$1 ids="$2:$3" d drv
  BDF=
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor"):$(cat "$d/device")" = "$ids" ] && BDF=$(basename "$d")
  done
  [ -n "$BDF" ] || { echo "$tag: no device $ids in the guest"; return 3; }
  # the IOMMU group appears once the vIOMMU has probed the device
  for _ in $(seq 1 50); do [ -e "/sys/bus/pci/devices/$BDF/iommu_group" ] && break; sleep 0.1; done
  if ls /sys/bus/virtio/drivers/virtio_iommu/ 2>/dev/null | grep -q virtio; then
    # virtio-iommu on x86 has no MSI isolation: type1 refuses VFIO_SET_IOMMU without this
    modprobe vfio_iommu_type1 allow_unsafe_interrupts=1
  fi
  modprobe vfio-pci
  echo vfio-pci > "/sys/bus/pci/devices/$BDF/driver_override"
  echo "$BDF" > /sys/bus/pci/drivers_probe
  drv=$(basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null)
  echo "$tag: $ids at $BDF, driver ${drv:-none}, iommu group $(basename "$(readlink "/sys/bus/pci/devices/$BDF/iommu_group")")"
  [ "$drv" = vfio-pci ] || { echo "$tag: binding $BDF to vfio-pci failed"; return 4; }
}

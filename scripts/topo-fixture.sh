#!/usr/bin/env bash
# topo-fixture.sh - rebuild tests/fixtures/topo/numa2, the sysfs tree `bypass topo` tests read.
#
#   scripts/topo-fixture.sh [--from CAPTURE] [OUT]     (OUT default tests/fixtures/topo/numa2)
#
# Boots the lab guest with `run-guest.sh --topo numa2` (root; see scripts/guest/README.md),
# copies its sysfs with jobs/topo-capture.sh, then, because QEMU has no NVIDIA or Mellanox
# devices, rewrites the leaves' IDs: every e1000e (8086:10d3, class 0x020000) becomes a
# ConnectX-6 Dx function (15b3:101d, class kept) and every edu (1234:11e8) an NVIDIA 3D
# controller (10de:20b0, class 0x030200). It also gives three leaves a driver link (the guest
# binds none to them): 0000:43:00.0 mlx5_core, 0000:81:00.0 vfio-pci, 0000:44:00.0 nvidia.
# Everything else (paths, numa_node, local_cpulist, node cpulists) is the guest's.
# --from CAPTURE: skip the boot and rewrite an earlier capture (a tree with sys/ at its top).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
FROM=
if [ "${1:-}" = --from ]; then FROM=$2; shift 2; fi
OUT=${1:-$HERE/../tests/fixtures/topo/numa2}
LAB=${LAB:-/var/tmp/bypass-guest}
if [ -z "$FROM" ]; then
  FROM="$LAB/xfer/topo-capture-$$"
  rm -rf "$FROM"; mkdir -p "$LAB/xfer"
  bash "$HERE/guest/run-guest.sh" --topo numa2 --net none --timeout 300 -- \
    bash "$HERE/guest/jobs/topo-capture.sh" "$FROM"
  trap 'rm -rf "$FROM"' EXIT
fi
[ -d "$FROM/sys/bus/pci/devices" ] || { echo "topo-fixture: no sys/bus/pci/devices in $FROM" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"; cp -a "$FROM/sys" "$OUT/"
for l in "$OUT"/sys/bus/pci/devices/*; do
  d=$(cd "$l" && pwd -P)
  case "$(cat "$d/vendor"):$(cat "$d/device")" in
    0x8086:0x10d3) echo 0x15b3 > "$d/vendor"; echo 0x101d > "$d/device" ;;
    0x1234:0x11e8) echo 0x10de > "$d/vendor"; echo 0x20b0 > "$d/device"; echo 0x030200 > "$d/class" ;;
  esac
done
# a driver link as the kernel makes it: relative, up to sys/, then bus/pci/drivers/NAME
drv() { local d up; d=$(cd "$OUT/sys/bus/pci/devices/$1" && pwd -P); rm -f "$d/driver"
        up=$(echo "${d#"$(cd "$OUT/sys" && pwd -P)"/}" | sed 's|[^/]*|..|g')
        ln -s "$up/bus/pci/drivers/$2" "$d/driver"; }
drv 0000:43:00.0 mlx5_core
drv 0000:81:00.0 vfio-pci
drv 0000:44:00.0 nvidia
echo "topo-fixture: wrote $OUT ($(find "$OUT" -type f | wc -l) files)"

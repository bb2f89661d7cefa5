# Guest job: copy the sysfs files `bypass topo` reads into OUT, as a tree rooted like `/`.
# Usage (inside the guest, e.g. run-guest.sh --topo numa2): bash jobs/topo-capture.sh OUT
# Copies, for every PCI function: the bus/pci/devices link (as a symlink, same target),
# vendor, device, class, numa_node, local_cpulist and the driver link (target kept as the
# link's text, dangling in the copy); and node*/cpulist. Nothing else (no config space:
# the fixture must stay small text files).
set -u
OUT=${1:?usage: topo-capture.sh OUT}
mkdir -p "$OUT/sys/bus/pci/devices" "$OUT/sys/devices/system/node"
for l in /sys/bus/pci/devices/*; do
  bdf=$(basename "$l"); t=$(readlink "$l")
  ln -s "$t" "$OUT/sys/bus/pci/devices/$bdf"
  real=$(readlink -f "$l"); rel=${real#/sys/}
  dst="$OUT/sys/$rel"; mkdir -p "$dst"
  for f in vendor device class numa_node local_cpulist; do
    [ -r "$real/$f" ] && cat "$real/$f" > "$dst/$f"
  done
  [ -L "$real/driver" ] && ln -s "$(readlink "$real/driver")" "$dst/driver"
done
for n in /sys/devices/system/node/node[0-9]*; do
  mkdir -p "$OUT/sys/devices/system/node/$(basename "$n")"
  cat "$n/cpulist" > "$OUT/sys/devices/system/node/$(basename "$n")/cpulist"
done
find "$OUT/sys/bus/pci/devices" -maxdepth 1 | wc -l | sed 's/^/topo-capture: links+1: /'

//! The device's VFIO regions: the BARs, the expansion ROM and PCI config space; BAR0 mapped
//! for exact-width volatile MMIO; config-space access through the device fd.
//!
//! Owns: [`RegionInfo`] (what `VFIO_DEVICE_GET_REGION_INFO` said), [`Bar`] (an mmapped BAR
//! and its bounds-checked volatile accessors) and the config-space helpers. Must not: know
//! any device's register layout.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use memmap2::{MmapOptions, MmapRaw};
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ROM_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_ioctls::VfioDevice;

use super::error::VfioError;

/// `PCI_COMMAND` in config space (`include/uapi/linux/pci_regs.h`).
pub const PCI_COMMAND: u64 = 0x04;
/// `PCI_COMMAND_MEMORY`: the device answers memory-space (BAR) accesses.
pub const PCI_COMMAND_MEMORY: u16 = 0x2;
/// `PCI_COMMAND_MASTER`: the device may master the bus (DMA, MSI writes).
pub const PCI_COMMAND_MASTER: u16 = 0x4;

/// One region of a vfio-pci device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// VFIO region index (0..=5 BARs, 6 ROM, 7 config).
    pub index: u32,
    /// `BAR0`…`BAR5`, `ROM`, `CONFIG`.
    pub name: String,
    /// Size in bytes (0: the BAR is not implemented).
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite/mmap).
    pub offset: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
}

impl RegionInfo {
    /// The region may be mmapped.
    pub fn mmappable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_MMAP != 0
    }

    /// Reads every region's info from the device (indices 0..=7).
    pub(crate) fn all(device: &VfioDevice) -> Vec<Self> {
        (0..=VFIO_PCI_CONFIG_REGION_INDEX)
            .map(|index| Self {
                index,
                name: match index {
                    VFIO_PCI_ROM_REGION_INDEX => "ROM".to_owned(),
                    VFIO_PCI_CONFIG_REGION_INDEX => "CONFIG".to_owned(),
                    i => format!("BAR{i}"),
                },
                size: device.get_region_size(index),
                offset: device.get_region_offset(index),
                flags: device.get_region_flags(index),
            })
            .collect()
    }
}

impl std::fmt::Display for RegionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.size == 0 {
            return write!(f, "{:<6} not implemented", self.name);
        }
        let flag = |bit, s| if self.flags & bit != 0 { s } else { "" };
        write!(
            f,
            "{:<6} size {:#x} at fd offset {:#x} {}{}{}",
            self.name,
            self.size,
            self.offset,
            flag(VFIO_REGION_INFO_FLAG_READ, "read "),
            flag(VFIO_REGION_INFO_FLAG_WRITE, "write "),
            if self.mmappable() {
                "mmap"
            } else {
                "NOT mmappable (pread/pwrite only)"
            }
        )
    }
}

/// An mmapped BAR: volatile accesses of exactly one width, bounds- and alignment-checked.
#[derive(Debug)]
pub struct Bar {
    /// Keeps the mapping alive; accessed only through `ptr`.
    _map: MmapRaw,
    ptr: NonNull<u8>,
    len: u64,
}

// SAFETY: the mapping is device memory owned by `map`; every access is a volatile load or
// store through a raw pointer, valid from any thread (the device orders them, not Rust).
unsafe impl Send for Bar {}
// SAFETY: as above; no Rust reference into the mapping is ever created.
unsafe impl Sync for Bar {}

impl Bar {
    /// Maps region `info` of the device file `file` (read/write, shared).
    pub(crate) fn map(file: &File, info: &RegionInfo, bdf: &str) -> Result<Self, VfioError> {
        let region_err = |what: String| VfioError::Region {
            bdf: bdf.to_owned(),
            what,
        };
        if info.size == 0 {
            return Err(region_err(format!(
                "{} is not implemented by the device, so there are no registers to map",
                info.name
            )));
        }
        if !info.mmappable() {
            return Err(region_err(format!(
                "{} ({:#x} bytes) is not mmappable (vfio-pci did not set VFIO_REGION_INFO_FLAG_MMAP: the BAR is smaller than a page or holds the MSI-X table): its registers are reachable only through pread/pwrite, which the driver does not use for MMIO",
                info.name, info.size
            )));
        }
        let len = usize::try_from(info.size)
            .map_err(|_| region_err(format!("{} is too large to map", info.name)))?;
        let map = MmapOptions::new()
            .offset(info.offset)
            .len(len)
            .map_raw(file)
            .map_err(|e| {
                region_err(format!(
                    "mmap of {} ({:#x} bytes at fd offset {:#x}) failed: {e}",
                    info.name, info.size, info.offset
                ))
            })?;
        let ptr = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| region_err(format!("mmap of {} returned null", info.name)))?;
        Ok(Self {
            _map: map,
            ptr,
            len: info.size,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true (a zero-sized BAR is not mapped).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of a `T`-sized register at `off`, if it is inside the BAR and aligned.
    fn reg<T>(&self, off: u64) -> Option<*mut T> {
        let w = std::mem::size_of::<T>() as u64;
        if !off.is_multiple_of(w) || off.checked_add(w)? > self.len {
            return None;
        }
        let off = usize::try_from(off).ok()?;
        // SAFETY: off + size_of::<T>() <= len (checked), so the result stays inside the
        // live mapping owned by `self.map`.
        Some(unsafe { self.ptr.as_ptr().add(off) }.cast::<T>())
    }

    /// One `read_volatile::<u32>` at `off`; `None` if out of bounds or misaligned.
    pub fn read32(&self, off: u64) -> Option<u32> {
        let p = self.reg::<u32>(off)?;
        // SAFETY: p is an aligned, in-bounds address of the mapped BAR (checked by `reg`).
        Some(unsafe { p.read_volatile() })
    }

    /// One `write_volatile::<u32>` at `off`; `None` if out of bounds or misaligned.
    pub fn write32(&self, off: u64, v: u32) -> Option<()> {
        let p = self.reg::<u32>(off)?;
        // SAFETY: as in `read32`.
        unsafe { p.write_volatile(v) };
        Some(())
    }

    /// One `read_volatile::<u64>` at `off`; `None` if out of bounds or misaligned.
    pub fn read64(&self, off: u64) -> Option<u64> {
        let p = self.reg::<u64>(off)?;
        // SAFETY: as in `read32`.
        Some(unsafe { p.read_volatile() })
    }

    /// One `write_volatile::<u64>` at `off`; `None` if out of bounds or misaligned.
    pub fn write64(&self, off: u64, v: u64) -> Option<()> {
        let p = self.reg::<u64>(off)?;
        // SAFETY: as in `read32`.
        unsafe { p.write_volatile(v) };
        Some(())
    }

    /// Eight ordered `write_volatile::<u64>` stores at a 64-byte aligned `off`.
    pub fn write_bf(&self, off: u64, chunk: &[u64; 8]) -> Option<()> {
        if !off.is_multiple_of(64) || off.checked_add(64)? > self.len {
            return None;
        }
        for (i, &w) in chunk.iter().enumerate() {
            self.write64(off + 8 * i as u64, w)?;
        }
        Some(())
    }
}

/// Reads `N` bytes of config space at `off` through the device fd.
pub(crate) fn config_read<const N: usize>(
    file: &File,
    cfg: &RegionInfo,
    off: u64,
    bdf: &str,
) -> Result<[u8; N], VfioError> {
    let mut b = [0u8; N];
    file.read_exact_at(&mut b, cfg.offset + off)
        .map_err(|source| VfioError::Config {
            bdf: bdf.to_owned(),
            op: "read",
            off,
            source,
        })?;
    Ok(b)
}

/// Writes bytes to config space at `off` through the device fd (one pwrite of that width).
pub(crate) fn config_write(
    file: &File,
    cfg: &RegionInfo,
    off: u64,
    bytes: &[u8],
    bdf: &str,
) -> Result<(), VfioError> {
    file.write_all_at(bytes, cfg.offset + off)
        .map_err(|source| VfioError::Config {
            bdf: bdf.to_owned(),
            op: "write",
            off,
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4 KiB file standing in for a BAR: MAP_SHARED stores show up in `pread`.
    fn fake_bar(name: &str, flags: u32) -> (File, RegionInfo, std::path::PathBuf) {
        let path =
            std::env::temp_dir().join(format!("bypass-fake-bar-{name}-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(4096).unwrap();
        let info = RegionInfo {
            index: 0,
            name: "BAR0".into(),
            size: 4096,
            offset: 0,
            flags,
        };
        (file, info, path)
    }

    const RWM: u32 =
        VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;

    #[test]
    fn accesses_store_exactly_their_width_at_their_offset() {
        let (file, info, path) = fake_bar("width", RWM);
        let bar = Bar::map(&file, &info, "0000:00:03.0").unwrap();
        bar.write32(8, 0x1122_3344).unwrap();
        bar.write64(16, 0x5566_7788_99aa_bbcc).unwrap();
        bar.write_bf(64, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let mut b = [0u8; 128];
        file.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b[8..12], &0x1122_3344u32.to_ne_bytes());
        assert_eq!(&b[16..24], &0x5566_7788_99aa_bbccu64.to_ne_bytes());
        assert!(
            b[..8]
                .iter()
                .chain(&b[12..16])
                .chain(&b[24..64])
                .all(|&x| x == 0)
        );
        for i in 0..8u64 {
            let off = 64 + 8 * i as usize;
            assert_eq!(&b[off..off + 8], &(i + 1).to_ne_bytes());
        }
        assert_eq!(bar.read32(8), Some(0x1122_3344));
        assert_eq!(bar.read64(16), Some(0x5566_7788_99aa_bbcc));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn out_of_bounds_and_misaligned_accesses_are_refused() {
        let (file, info, path) = fake_bar("bounds", RWM);
        let bar = Bar::map(&file, &info, "0000:00:03.0").unwrap();
        assert_eq!(bar.len(), 4096);
        assert_eq!(bar.read32(4096), None);
        assert_eq!(bar.read32(4094), None, "straddles the end");
        assert_eq!(bar.read32(2), None, "misaligned");
        assert_eq!(bar.write64(4, 0), None, "misaligned for 8 bytes");
        assert_eq!(bar.write64(u64::MAX - 7, 0), None, "overflowing offset");
        assert_eq!(bar.write_bf(4096 - 32, &[0; 8]), None);
        assert_eq!(bar.write_bf(8, &[0; 8]), None);
        assert_eq!(bar.read32(4092), Some(0));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_bar_that_is_not_mmappable_says_so() {
        let (file, info, path) = fake_bar(
            "nommap",
            VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
        );
        let e = Bar::map(&file, &info, "0000:00:03.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("BAR0") && e.contains("not mmappable"), "{e}");
        assert!(info.to_string().contains("NOT mmappable"));
        let empty = RegionInfo { size: 0, ..info };
        assert!(empty.to_string().contains("not implemented"));
        assert!(
            Bar::map(&file, &empty, "x")
                .unwrap_err()
                .to_string()
                .contains("not implemented")
        );
        let _ = std::fs::remove_file(path);
    }
}

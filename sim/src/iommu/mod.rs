//! The IOMMU in front of the simulated device: IOVA → host memory, bounds-checked.
//!
//! Owns: the IOVA mappings (as `VFIO_IOMMU_MAP_DMA` / `UNMAP_DMA` create and remove them) and
//! every device access to host and peer memory. Must not: interpret what it moves.
//!
//! Every DMA the device makes (command entries, mailboxes, WQEs, payloads, CQEs, EQEs,
//! doorbell records) goes through [`Iommu::read`] / [`Iommu::write`]. An access that is not
//! entirely inside mappings with the needed permission is a [`DmaFault`]: nothing is read or
//! written, the fault is counted and returned, and the caller reports it the way the hardware
//! would (a command status, an error CQE, an event). The host is never touched outside what was
//! mapped.
//!
//! Rules follow VFIO type1 (`drivers/vfio/vfio_iommu_type1.c`): IOVA, size and host offset
//! page-aligned; no overlap with an existing mapping (EEXIST); unmap removes whole mappings
//! that lie inside the range and refuses to split one.
//!
//! A mapping reaches either host memory (an `Arc<dyn HostMemory>`: raw-pointer copies, and
//! the fast paths of the remembered mappings in `recent.rs`, `resolve` and
//! `write_within_one`) or peer memory (an `Arc<dyn PeerMemory>`: a dma-buf the CPU cannot
//! point into, reached only by its copies; the fast paths skip it and the access takes the
//! copy path). A failed peer copy is a [`DmaFault`] like any other.

use std::collections::BTreeMap;
use std::sync::Arc;

use bypass_seam::PeerMemory;

use crate::memory::{HostMemory, PAGE_SIZE, copy_small};

mod recent;

#[cfg(test)]
use recent::RECENT;
use recent::{Cached, Recent};

/// Permissions of a mapping (`VFIO_DMA_MAP_FLAG_READ` / `_WRITE`, from the device's view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perm {
    /// The device may read (host → device).
    pub read: bool,
    /// The device may write (device → host).
    pub write: bool,
}

impl Perm {
    /// Read and write, what every mlx5 mapping uses.
    pub const RW: Self = Self {
        read: true,
        write: true,
    };
    /// Device may only read.
    pub const RO: Self = Self {
        read: true,
        write: false,
    };
}

/// Direction of a DMA, from the device's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Device reads host memory.
    Read,
    /// Device writes host memory.
    Write,
}

/// A device access the IOMMU refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "IOMMU fault: device {dir:?} of {len} bytes at IOVA {iova:#x} is not inside a mapping that allows it: map the buffer (VFIO_IOMMU_MAP_DMA) before handing its IOVA to the device"
)]
pub struct DmaFault {
    /// First IOVA of the access.
    pub iova: u64,
    /// Bytes accessed.
    pub len: usize,
    /// Direction.
    pub dir: Dir,
}

/// Why a map or unmap request was refused (the host side's error, like VFIO's errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// IOVA, length or host offset not a multiple of the page size (EINVAL).
    #[error(
        "IOVA {iova:#x}, length {len:#x} and host offset {offset:#x} must be multiples of {PAGE_SIZE:#x} (EINVAL)"
    )]
    Unaligned {
        /// Requested IOVA.
        iova: u64,
        /// Requested length.
        len: usize,
        /// Offset into the host buffer.
        offset: usize,
    },
    /// Zero length, or the range wraps around the IOVA space (EINVAL).
    #[error("the range at IOVA {iova:#x} of {len:#x} bytes is empty or wraps (EINVAL)")]
    BadRange {
        /// Requested IOVA.
        iova: u64,
        /// Requested length.
        len: usize,
    },
    /// The host range is not inside the host buffer (EFAULT).
    #[error(
        "host offset {offset:#x} + {len:#x} bytes is outside the {host_len:#x}-byte buffer (EFAULT)"
    )]
    OutsideBuffer {
        /// Offset into the host buffer.
        offset: usize,
        /// Requested length.
        len: usize,
        /// The buffer's length.
        host_len: usize,
    },
    /// The IOVA range overlaps an existing mapping (EEXIST).
    #[error(
        "IOVA range {iova:#x}+{len:#x} overlaps the mapping at {existing:#x} (EEXIST): unmap it first"
    )]
    Overlap {
        /// Requested IOVA.
        iova: u64,
        /// Requested length.
        len: usize,
        /// Start of the mapping in the way.
        existing: u64,
    },
    /// Unmap would split a mapping (type1 v2 refuses this).
    #[error(
        "unmapping {iova:#x}+{len:#x} would split the mapping at {existing:#x} (EINVAL): unmap whole mappings"
    )]
    WouldSplit {
        /// Requested IOVA.
        iova: u64,
        /// Requested length.
        len: usize,
        /// The mapping that straddles the range.
        existing: u64,
    },
}

/// A run of host memory an IOVA range resolved to ([`Iommu::resolve`]).
#[derive(Clone)]
pub(crate) struct HostRun {
    /// The buffer.
    pub mem: Arc<dyn HostMemory>,
    /// Offset in it.
    pub off: usize,
    /// Bytes.
    pub len: usize,
}

impl std::fmt::Debug for HostRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRun")
            .field("off", &self.off)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// What a mapping reaches.
#[derive(Clone)]
enum Target {
    /// Host memory, from this offset in it: reached through its base pointer.
    Host(Arc<dyn HostMemory>),
    /// Peer memory, from this offset in it: reached by its copies only.
    Peer(Arc<dyn PeerMemory>),
}

#[derive(Clone)]
struct Mapping {
    len: usize,
    target: Target,
    /// Offset of the mapping's first byte in the target.
    offset: usize,
    perm: Perm,
}

impl Mapping {
    fn allows(&self, dir: Dir) -> bool {
        match dir {
            Dir::Read => self.perm.read,
            Dir::Write => self.perm.write,
        }
    }
}

/// A piece of an access inside one mapping ([`Iommu::segment`]).
enum Seg<'a> {
    Host(&'a Arc<dyn HostMemory>),
    Peer(&'a Arc<dyn PeerMemory>),
}

impl Seg<'_> {
    /// Copies `dst.len()` bytes at `off` of the target; false if the copy failed.
    fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        match self {
            Seg::Host(m) => m.read_at(off, dst),
            Seg::Peer(p) => p
                .read_at(off, dst)
                .inspect_err(|e| tracing::warn!(error = %e, "device read of peer memory"))
                .is_ok(),
        }
    }

    /// Copies `src` to `off` of the target; false if the copy failed.
    fn write(&self, off: usize, src: &[u8]) -> bool {
        match self {
            Seg::Host(m) => m.write_at(off, src),
            Seg::Peer(p) => p
                .write_at(off, src)
                .inspect_err(|e| tracing::warn!(error = %e, "device write of peer memory"))
                .is_ok(),
        }
    }
}

/// The IOVA space of one device.
#[derive(Default, Clone)]
pub struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    faults: u64,
    /// The mappings of the last few accesses.
    recent: Recent,
}

impl std::fmt::Debug for Iommu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iommu")
            .field(
                "mappings",
                &self
                    .maps
                    .iter()
                    .map(|(iova, m)| (*iova, m.len))
                    .collect::<Vec<_>>(),
            )
            .field("faults", &self.faults)
            .finish()
    }
}

impl Iommu {
    /// An empty IOVA space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `len` bytes of `mem` starting at `offset` at `iova`.
    pub fn map(
        &mut self,
        iova: u64,
        mem: Arc<dyn HostMemory>,
        offset: usize,
        len: usize,
        perm: Perm,
    ) -> Result<(), MapError> {
        let host_len = mem.len();
        self.insert(iova, Target::Host(mem), host_len, offset, len, perm)
    }

    /// Maps `len` bytes of `peer` starting at `offset` at `iova`: every access to them is a
    /// copy through [`PeerMemory::read_at`] / [`PeerMemory::write_at`] (a dma-buf the CPU
    /// cannot point into). The same rules as [`Iommu::map`].
    pub fn map_peer(
        &mut self,
        iova: u64,
        peer: Arc<dyn PeerMemory>,
        offset: usize,
        len: usize,
        perm: Perm,
    ) -> Result<(), MapError> {
        let peer_len = peer.len();
        self.insert(iova, Target::Peer(peer), peer_len, offset, len, perm)
    }

    /// [`Iommu::map`]'s checks, then the mapping.
    fn insert(
        &mut self,
        iova: u64,
        target: Target,
        target_len: usize,
        offset: usize,
        len: usize,
        perm: Perm,
    ) -> Result<(), MapError> {
        let page = PAGE_SIZE as u64;
        if !iova.is_multiple_of(page)
            || !len.is_multiple_of(PAGE_SIZE)
            || !offset.is_multiple_of(PAGE_SIZE)
        {
            return Err(MapError::Unaligned { iova, len, offset });
        }
        let end = iova
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or(MapError::BadRange { iova, len })?;
        if offset.checked_add(len).is_none_or(|e| e > target_len) {
            return Err(MapError::OutsideBuffer {
                offset,
                len,
                host_len: target_len,
            });
        }
        // The mapping that starts last at or before `end - 1` is the only one that can overlap.
        if let Some((&start, m)) = self.maps.range(..end).next_back()
            && start + m.len as u64 > iova
        {
            return Err(MapError::Overlap {
                iova,
                len,
                existing: start,
            });
        }
        self.maps.insert(
            iova,
            Mapping {
                len,
                target,
                offset,
                perm,
            },
        );
        Ok(())
    }

    /// Removes every mapping inside `iova..iova+len`; returns the bytes unmapped (0 if none,
    /// as VFIO reports). Refuses to split a mapping.
    pub fn unmap(&mut self, iova: u64, len: usize) -> Result<usize, MapError> {
        let end = iova
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or(MapError::BadRange { iova, len })?;
        let mut inside = Vec::new();
        for (&start, m) in self.maps.range(..end) {
            let m_end = start + m.len as u64;
            if m_end <= iova {
                continue;
            }
            if start < iova || m_end > end {
                return Err(MapError::WouldSplit {
                    iova,
                    len,
                    existing: start,
                });
            }
            inside.push(start);
        }
        let mut total = 0;
        self.recent.clear();
        for start in inside {
            total += self.maps.remove(&start).map_or(0, |m| m.len);
        }
        Ok(total)
    }

    /// Number of DMA faults since creation.
    pub fn faults(&self) -> u64 {
        self.faults
    }

    /// Number of live mappings.
    pub fn mappings(&self) -> usize {
        self.maps.len()
    }

    /// Device read of `dst.len()` bytes at `iova`. All or nothing.
    #[inline]
    pub fn read(&mut self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        if let Some(p) = self.recent.host(iova, dst.len(), Dir::Read) {
            // The common case: a remembered mapping holds the whole range.
            // SAFETY: `p..p + dst.len()` lies inside a mapped host buffer (`Recent::host`),
            // valid for raw reads by the `HostMemory` contract; `dst` is a distinct slice.
            unsafe { copy_small(p.as_ptr(), dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        self.read_slow(iova, dst)
    }

    /// [`Iommu::read`] of a range no single remembered mapping holds (or that failed).
    #[inline(never)]
    fn read_slow(&mut self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: dst.len(),
            dir: Dir::Read,
        };
        if let Some((mem, off)) = self.within_one(iova, dst.len(), Dir::Read) {
            if mem.read_at(off, dst) {
                return Ok(());
            }
            self.faults += 1;
            return Err(fault);
        }
        if self.walk(iova, dst.len(), Dir::Read).is_none() {
            self.faults += 1;
            return Err(fault);
        }
        let mut done = 0;
        while done < dst.len() {
            let Some((mem, off, n)) = self.segment(iova + done as u64, dst.len() - done) else {
                self.faults += 1;
                return Err(fault);
            };
            if !mem.read(off, &mut dst[done..done + n]) {
                self.faults += 1;
                return Err(fault);
            }
            done += n;
        }
        Ok(())
    }

    /// Device write of `src` at `iova`. All or nothing.
    #[inline]
    pub fn write(&mut self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        if let Some(p) = self.recent.host(iova, src.len(), Dir::Write) {
            // The common case: a remembered mapping holds the whole range.
            // SAFETY: `p..p + src.len()` lies inside a mapped host buffer (`Recent::host`),
            // valid for raw writes by the `HostMemory` contract; `src` is a distinct slice.
            unsafe { copy_small(src.as_ptr(), p.as_ptr(), src.len()) };
            return Ok(());
        }
        self.write_slow(iova, src)
    }

    /// Writes `src` at `iova` if one mapping allowing writes holds the whole range; false
    /// (writing and counting nothing) otherwise. For the in-process link's single-copy path,
    /// as [`Iommu::resolve`]: the caller falls back to the path that reports the fault.
    pub(crate) fn write_within_one(&mut self, iova: u64, src: &[u8]) -> bool {
        let hit = match self.recent.host(iova, src.len(), Dir::Write) {
            Some(p) => Some(p),
            // A miss: remembered now if one mapping holds the range, then found.
            None => self
                .remember_mapping(iova, src.len(), Dir::Write)
                .and_then(|_| self.recent.host(iova, src.len(), Dir::Write)),
        };
        let Some(p) = hit else {
            return false;
        };
        // SAFETY: `p..p + src.len()` lies inside a mapped host buffer (`Recent::host`), valid
        // for raw writes by the `HostMemory` contract; `src` is a distinct slice.
        unsafe { copy_small(src.as_ptr(), p.as_ptr(), src.len()) };
        true
    }

    /// [`Iommu::write`] of a range no single remembered mapping holds (or that failed).
    #[inline(never)]
    fn write_slow(&mut self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: src.len(),
            dir: Dir::Write,
        };
        if let Some((mem, off)) = self.within_one(iova, src.len(), Dir::Write) {
            if mem.write_at(off, src) {
                return Ok(());
            }
            self.faults += 1;
            return Err(fault);
        }
        if self.walk(iova, src.len(), Dir::Write).is_none() {
            self.faults += 1;
            return Err(fault);
        }
        let mut done = 0;
        while done < src.len() {
            let Some((mem, off, n)) = self.segment(iova + done as u64, src.len() - done) else {
                self.faults += 1;
                return Err(fault);
            };
            if !mem.write(off, &src[done..done + n]) {
                self.faults += 1;
                return Err(fault);
            }
            done += n;
        }
        Ok(())
    }

    /// Reads a big-endian u32 (doorbell records, counters).
    pub fn read_be32(&mut self, iova: u64) -> Result<u32, DmaFault> {
        let mut b = [0; 4];
        self.read(iova, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Writes a big-endian u32.
    pub fn write_be32(&mut self, iova: u64, v: u32) -> Result<(), DmaFault> {
        self.write(iova, &v.to_be_bytes())
    }

    /// The host memory behind `iova..iova + len` as (buffer, offset, length) runs, if the
    /// whole range is mapped for `dir`; `None` (counting nothing) otherwise. For the
    /// in-process link's single-copy path (`crate::frame`): the caller falls back to
    /// [`Iommu::read`]/[`Iommu::write`], which count and report the fault.
    pub(crate) fn resolve(
        &mut self,
        iova: u64,
        len: usize,
        dir: Dir,
        out: &mut Vec<HostRun>,
    ) -> Option<()> {
        if let Some((mem, off)) = self.within_one(iova, len, dir).filter(|_| len > 0) {
            // One mapping holds the whole range: one run.
            match out.last_mut() {
                Some(last) if Arc::ptr_eq(&last.mem, mem) && last.off + last.len == off => {
                    last.len += len;
                }
                _ => out.push(HostRun {
                    mem: mem.clone(),
                    off,
                    len,
                }),
            }
            return Some(());
        }
        self.walk(iova, len, dir)?;
        let mut done = 0;
        while done < len {
            let (seg, off, n) = self.segment(iova.checked_add(done as u64)?, len - done)?;
            // Peer memory has no host address: the caller takes the copy path.
            let Seg::Host(mem) = seg else {
                return None;
            };
            // Runs that continue the previous one in the same buffer merge (one copy, not one
            // per page).
            match out.last_mut() {
                Some(last) if Arc::ptr_eq(&last.mem, mem) && last.off + last.len == off => {
                    last.len += n;
                }
                _ => out.push(HostRun {
                    mem: mem.clone(),
                    off,
                    len: n,
                }),
            }
            done += n;
        }
        Some(())
    }

    /// The host memory and offset behind `iova..iova + len` if one mapping allowing `dir`
    /// holds the whole range (what [`Iommu::walk`] and [`Iommu::segment`] would find, in one
    /// lookup); `None` if the range spans mappings or is not allowed (the caller then takes
    /// the general path, which decides).
    ///
    /// Inlined into the accesses: a hit (the common case) is one search of the remembered
    /// mappings; a miss looks the mapping up out of line.
    #[inline]
    fn within_one(
        &mut self,
        iova: u64,
        len: usize,
        dir: Dir,
    ) -> Option<(&Arc<dyn HostMemory>, usize)> {
        let (i, off) = match self.recent.hit(iova, len, dir) {
            Some(h) => h,
            None => self.remember_mapping(iova, len, dir)?,
        };
        Some((self.recent.mem(i)?, off))
    }

    /// [`Iommu::within_one`] after a miss of the remembered mappings: looks the mapping up,
    /// remembers it if it holds the range for `dir`, and returns it as a hit would.
    #[inline(never)]
    fn remember_mapping(&mut self, iova: u64, len: usize, dir: Dir) -> Option<(usize, usize)> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let within = usize::try_from(iova - start).ok()?;
        if !m.allows(dir) || within >= m.len || len > m.len - within {
            return None;
        }
        // A peer mapping has no host address to remember.
        let Target::Host(mem) = &m.target else {
            return None;
        };
        if m.offset.checked_add(m.len).is_none_or(|e| e > mem.len()) {
            // `map` refuses such a mapping; never remember one.
            return None;
        }
        // SAFETY: `offset + len <= mem.len()` (checked above), so `offset` is inside (or at
        // the end of) the allocation `base()` points to.
        let host = unsafe { mem.base().add(m.offset) };
        let c = Cached {
            start,
            end: start.checked_add(m.len as u64)?,
            mem: mem.clone(),
            offset: m.offset,
            perm: m.perm,
            host,
        };
        self.recent.remember(c);
        self.recent.hit(iova, len, dir)
    }

    /// Checks that the whole range is covered by mappings allowing `dir`; `Some(())` if so.
    fn walk(&self, iova: u64, len: usize, dir: Dir) -> Option<()> {
        let end = iova.checked_add(len as u64)?;
        let mut at = iova;
        while at < end || (len == 0 && at == iova) {
            let (&start, m) = self.maps.range(..=at).next_back()?;
            let m_end = start + m.len as u64;
            if at >= m_end || !m.allows(dir) {
                return None;
            }
            if len == 0 {
                return Some(());
            }
            at = m_end;
        }
        Some(())
    }

    /// The memory behind `iova`, the offset in it, and how many of `len` bytes are
    /// contiguous there.
    fn segment(&self, iova: u64, len: usize) -> Option<(Seg<'_>, usize, usize)> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let within = usize::try_from(iova - start).ok()?;
        if within >= m.len {
            return None;
        }
        let seg = match &m.target {
            Target::Host(mem) => Seg::Host(mem),
            Target::Peer(p) => Seg::Peer(p),
        };
        Some((seg, m.offset + within, len.min(m.len - within)))
    }

    /// Every host mapping: its buffer, the mapping's offset in it and its length (for
    /// `Device::snapshot`).
    pub(crate) fn host_mappings(
        &self,
    ) -> impl Iterator<Item = (&Arc<dyn HostMemory>, usize, usize)> {
        self.maps.values().filter_map(|m| match &m.target {
            Target::Host(mem) => Some((mem, m.offset, m.len)),
            Target::Peer(_) => None,
        })
    }

    /// Number of live mappings that reach peer memory (by copies).
    pub fn peer_mappings(&self) -> usize {
        self.maps
            .values()
            .filter(|m| matches!(m.target, Target::Peer(_)))
            .count()
    }
}

#[cfg(test)]
mod tests;

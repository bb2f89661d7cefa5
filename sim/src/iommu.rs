//! The IOMMU in front of the simulated device: IOVA → host memory, bounds-checked.
//!
//! Owns: the IOVA mappings (as `VFIO_IOMMU_MAP_DMA` / `UNMAP_DMA` create and remove them) and
//! every device access to host memory. Must not: interpret what it moves.
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

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::memory::{HostMemory, PAGE_SIZE, copy_small};

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

struct Mapping {
    len: usize,
    mem: Arc<dyn HostMemory>,
    offset: usize,
    perm: Perm,
}

/// The IOVA space of one device.
#[derive(Default)]
pub struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    faults: u64,
    /// The mappings of the last few accesses.
    recent: Recent,
}

/// Slots of [`Recent`].
const RECENT: usize = 4;

/// A mapping an access went through lately: its IOVA range, buffer and rights.
struct Cached {
    start: u64,
    end: u64,
    mem: Arc<dyn HostMemory>,
    offset: usize,
    perm: Perm,
    /// The mapping's first byte in host memory (`mem.base() + offset`), so that an access
    /// inside the mapping copies without asking `mem` for its base and length again.
    host: NonNull<u8>,
}

impl Cached {
    /// The offset of `iova` into this mapping, if the mapping holds the whole of
    /// `iova..iova + len` and allows `dir` (the test [`Recent::hit`] and [`Recent::host`]
    /// share).
    #[inline(always)]
    fn within(&self, iova: u64, len: usize, dir: Dir) -> Option<u64> {
        // `iova - start` below the mapping's length: `start <= iova < end` in one compare
        // (a remembered mapping is never empty); then the range's end within the mapping.
        let within = iova.wrapping_sub(self.start);
        let ok = match dir {
            Dir::Read => self.perm.read,
            Dir::Write => self.perm.write,
        };
        (ok && within < self.end - self.start && len as u64 <= self.end - iova).then_some(within)
    }
}

// SAFETY: `host` points into the buffer `mem` keeps alive (the `Arc` is held beside it), whose
// bytes the `HostMemory` contract (a `Send + Sync` trait) lets any thread read and write
// through raw pointers. The pointer is only an address of that buffer: sending or sharing a
// `Cached` shares nothing `mem` does not already allow.
unsafe impl Send for Cached {}
// SAFETY: as for `Send`.
unsafe impl Sync for Cached {}

/// The last few mappings accesses went through (a ping-pong touches about four: SQ ring,
/// doorbell record, CQ ring, buffer), so that an access inside one costs a compare, not a
/// tree search. Emptied whenever a mapping goes away.
#[derive(Default)]
struct Recent {
    slots: [Option<Cached>; RECENT],
    next: usize,
}

impl Recent {
    /// The slot and the offset into its buffer of `iova..iova + len`, if a remembered
    /// mapping holds the whole range and allows `dir`.
    #[inline]
    fn hit(&self, iova: u64, len: usize, dir: Dir) -> Option<(usize, usize)> {
        for (i, c) in self.slots.iter().enumerate() {
            let Some(c) = c else { continue };
            if let Some(within) = c.within(iova, len, dir) {
                let within = usize::try_from(within).ok()?;
                return Some((i, c.offset.checked_add(within)?));
            }
        }
        None
    }

    /// The host address of `iova..iova + len`, if a remembered mapping holds the whole range
    /// and allows `dir`: [`Recent::hit`] for the accesses that copy at once.
    #[inline]
    fn host(&self, iova: u64, len: usize, dir: Dir) -> Option<NonNull<u8>> {
        for c in self.slots.iter().flatten() {
            if let Some(within) = c.within(iova, len, dir) {
                // `within + len` is inside the mapping, which `Iommu::map` checked lies inside
                // the buffer, so the address is inside the allocation `host` points into.
                let within = usize::try_from(within).ok()?;
                // SAFETY: in bounds of the mapping's host range (above), itself inside the
                // buffer `mem` keeps allocated.
                return Some(unsafe { c.host.add(within) });
            }
        }
        None
    }

    /// The buffer of slot `i` (one [`Recent::hit`] returned).
    fn mem(&self, i: usize) -> Option<&Arc<dyn HostMemory>> {
        self.slots.get(i)?.as_ref().map(|c| &c.mem)
    }

    /// Remembers `c`, replacing the oldest slot.
    fn remember(&mut self, c: Cached) {
        if let Some(slot) = self.slots.get_mut(self.next % RECENT) {
            *slot = Some(c);
        }
        self.next = self.next.wrapping_add(1);
    }

    /// Forgets everything (a mapping went away).
    fn clear(&mut self) {
        self.slots = Default::default();
    }
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
        let page = PAGE_SIZE as u64;
        if iova % page != 0 || len % PAGE_SIZE != 0 || offset % PAGE_SIZE != 0 {
            return Err(MapError::Unaligned { iova, len, offset });
        }
        let end = iova
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or(MapError::BadRange { iova, len })?;
        if offset.checked_add(len).is_none_or(|e| e > mem.len()) {
            return Err(MapError::OutsideBuffer {
                offset,
                len,
                host_len: mem.len(),
            });
        }
        // The mapping that starts last at or before `end - 1` is the only one that can overlap.
        if let Some((&start, m)) = self.maps.range(..end).next_back() {
            if start + m.len as u64 > iova {
                return Err(MapError::Overlap {
                    iova,
                    len,
                    existing: start,
                });
            }
        }
        self.maps.insert(
            iova,
            Mapping {
                len,
                mem,
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
            if !mem.read_at(off, &mut dst[done..done + n]) {
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
            if !mem.write_at(off, &src[done..done + n]) {
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
            let (mem, off, n) = self.segment(iova.checked_add(done as u64)?, len - done)?;
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
        let ok = match dir {
            Dir::Read => m.perm.read,
            Dir::Write => m.perm.write,
        };
        if !ok || within >= m.len || len > m.len - within {
            return None;
        }
        if m.offset.checked_add(m.len).is_none_or(|e| e > m.mem.len()) {
            // `map` refuses such a mapping; never remember one.
            return None;
        }
        // SAFETY: `offset + len <= mem.len()` (checked above), so `offset` is inside (or at
        // the end of) the allocation `base()` points to.
        let host = unsafe { m.mem.base().add(m.offset) };
        let c = Cached {
            start,
            end: start.checked_add(m.len as u64)?,
            mem: m.mem.clone(),
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
            let ok = match dir {
                Dir::Read => m.perm.read,
                Dir::Write => m.perm.write,
            };
            if at >= m_end || !ok {
                return None;
            }
            if len == 0 {
                return Some(());
            }
            at = m_end;
        }
        Some(())
    }

    /// The host memory behind `iova`, the offset in it, and how many of `len` bytes are
    /// contiguous there.
    fn segment(&self, iova: u64, len: usize) -> Option<(&Arc<dyn HostMemory>, usize, usize)> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let within = usize::try_from(iova - start).ok()?;
        if within >= m.len {
            return None;
        }
        Some((&m.mem, m.offset + within, len.min(m.len - within)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SimMemory;

    fn mem(pages: usize) -> Arc<SimMemory> {
        Arc::new(SimMemory::new(pages * PAGE_SIZE).unwrap())
    }

    #[test]
    fn read_and_write_through_a_mapping() {
        let m = mem(2);
        let mut io = Iommu::new();
        io.map(0x10000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
            .unwrap();
        io.write(0x10ffe, &[1, 2, 3, 4]).unwrap();
        assert_eq!(m.to_vec(0xffe, 4).unwrap(), vec![1, 2, 3, 4]);
        let mut b = [0; 4];
        io.read(0x10ffe, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
    }

    #[test]
    fn access_spanning_two_adjacent_mappings_of_different_buffers() {
        let (a, b) = (mem(1), mem(1));
        let mut io = Iommu::new();
        io.map(0x20000, a.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
        io.map(0x21000, b.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
        io.write(0x20ffe, &[9, 8, 7, 6]).unwrap();
        assert_eq!(a.to_vec(0xffe, 2).unwrap(), vec![9, 8]);
        assert_eq!(b.to_vec(0, 2).unwrap(), vec![7, 6]);
    }

    #[test]
    fn unmapped_or_partially_mapped_access_faults_and_touches_nothing() {
        let m = mem(1);
        let mut io = Iommu::new();
        io.map(0x10000, m.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
        let e = io.write(0x10ffe, &[1, 2, 3, 4]).unwrap_err();
        assert_eq!(
            e,
            DmaFault {
                iova: 0x10ffe,
                len: 4,
                dir: Dir::Write
            }
        );
        assert_eq!(
            m.to_vec(0xffe, 2).unwrap(),
            vec![0, 0],
            "an all-or-nothing DMA wrote part of itself"
        );
        assert!(io.read(0x5000, &mut [0; 1]).is_err());
        assert!(io.read(u64::MAX, &mut [0; 2]).is_err());
        assert_eq!(io.faults(), 3);
    }

    #[test]
    fn write_within_one_writes_only_inside_one_writable_mapping_and_counts_nothing() {
        let (a, b) = (mem(1), mem(1));
        let mut io = Iommu::new();
        io.map(0x20000, a.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
        io.map(0x21000, b.clone(), 0, PAGE_SIZE, Perm::RW).unwrap();
        io.map(0x30000, mem(1), 0, PAGE_SIZE, Perm::RO).unwrap();
        // Inside one mapping: written, on a miss and on the remembered hit alike.
        assert!(io.write_within_one(0x20ff8, &[1, 2, 3, 4, 5, 6, 7, 8]));
        assert!(io.write_within_one(0x21000, &[9; 4]));
        assert!(io.write_within_one(0x20ff0, &[7; 8]));
        assert_eq!(
            a.to_vec(0xff0, 16).unwrap(),
            [[7; 8], [1, 2, 3, 4, 5, 6, 7, 8]].concat()
        );
        assert_eq!(b.to_vec(0, 4).unwrap(), vec![9; 4]);
        // Across two mappings, unmapped, read-only: refused, nothing written, nothing counted
        // (the caller's fallback reports it).
        assert!(!io.write_within_one(0x20ffe, &[0xee; 4]));
        assert!(!io.write_within_one(0x5000, &[0xee; 4]));
        assert!(!io.write_within_one(0x30000, &[0xee; 4]));
        assert_eq!(a.to_vec(0xffe, 2).unwrap(), vec![7, 8]);
        assert_eq!(b.to_vec(0, 2).unwrap(), vec![9, 9]);
        assert_eq!(io.faults(), 0);
    }

    #[test]
    fn read_only_mapping_refuses_device_writes() {
        let mut io = Iommu::new();
        io.map(0x10000, mem(1), 0, PAGE_SIZE, Perm::RO).unwrap();
        assert!(io.read(0x10000, &mut [0; 8]).is_ok());
        assert!(io.write(0x10000, &[0; 8]).is_err());
    }

    #[test]
    fn map_rules_follow_vfio_type1() {
        let m = mem(4);
        let mut io = Iommu::new();
        assert!(matches!(
            io.map(0x10001, m.clone(), 0, PAGE_SIZE, Perm::RW),
            Err(MapError::Unaligned { .. })
        ));
        assert!(matches!(
            io.map(0x10000, m.clone(), 0, 5 * PAGE_SIZE, Perm::RW),
            Err(MapError::OutsideBuffer { .. })
        ));
        assert!(matches!(
            io.map(0x10000, m.clone(), 0, 0, Perm::RW),
            Err(MapError::BadRange { .. })
        ));
        io.map(0x10000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
            .unwrap();
        assert!(matches!(
            io.map(0x11000, m.clone(), 0, PAGE_SIZE, Perm::RW),
            Err(MapError::Overlap {
                existing: 0x10000,
                ..
            })
        ));
        assert!(matches!(
            io.map(0xf000, m.clone(), 0, 2 * PAGE_SIZE, Perm::RW),
            Err(MapError::Overlap { .. })
        ));
        io.map(0x12000, m.clone(), 2 * PAGE_SIZE, PAGE_SIZE, Perm::RW)
            .unwrap();
        assert!(matches!(
            io.unmap(0x11000, PAGE_SIZE),
            Err(MapError::WouldSplit { .. })
        ));
        assert_eq!(io.unmap(0x10000, 3 * PAGE_SIZE).unwrap(), 3 * PAGE_SIZE);
        assert_eq!(io.mappings(), 0);
        assert_eq!(io.unmap(0x10000, PAGE_SIZE).unwrap(), 0);
    }

    #[test]
    fn unmap_then_dma_faults() {
        let m = mem(1);
        let mut io = Iommu::new();
        io.map(0x10000, m, 0, PAGE_SIZE, Perm::RW).unwrap();
        io.unmap(0x10000, PAGE_SIZE).unwrap();
        assert!(io.write(0x10000, &[1]).is_err());
    }

    #[test]
    fn an_access_after_a_remap_reaches_the_new_buffer_not_a_remembered_one() {
        let (old, new) = (mem(2), mem(1));
        let mut io = Iommu::new();
        io.map(0x10000, old.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
            .unwrap();
        // Used: remembered as a recent mapping.
        io.write(0x10010, &[1]).unwrap();
        io.write(0x11010, &[2]).unwrap();
        io.unmap(0x10000, 2 * PAGE_SIZE).unwrap();
        assert!(io.read(0x11010, &mut [0]).is_err(), "unmapped: faults");
        io.map(0x10000, new.clone(), 0, PAGE_SIZE, Perm::RO)
            .unwrap();
        io.read(0x10010, &mut [0]).unwrap();
        assert!(
            io.write(0x10010, &[3]).is_err(),
            "the new mapping is read-only"
        );
        assert!(
            io.read(0x11010, &mut [0]).is_err(),
            "beyond the new mapping"
        );
        assert_eq!(old.to_vec(0x10, 1).unwrap(), vec![1]);
        assert_eq!(new.to_vec(0x10, 1).unwrap(), vec![0]);
        assert_eq!(io.faults(), 3);
    }

    #[test]
    fn more_mappings_in_use_than_remembered_each_reach_their_own_buffer() {
        let bufs: Vec<_> = (0..(RECENT + 3)).map(|_| mem(1)).collect();
        let mut io = Iommu::new();
        for (i, b) in bufs.iter().enumerate() {
            io.map(0x10000 * (i as u64 + 1), b.clone(), 0, PAGE_SIZE, Perm::RW)
                .unwrap();
        }
        for round in 0..3u8 {
            for (i, b) in bufs.iter().enumerate() {
                io.write(0x10000 * (i as u64 + 1) + 8, &[round + i as u8])
                    .unwrap();
                assert_eq!(b.to_vec(8, 1).unwrap(), vec![round + i as u8]);
            }
        }
    }
}

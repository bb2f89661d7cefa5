//! Queue buffers as the device sees them: a list of physical (IOVA) pages.
//!
//! Owns: [`PageList`], the `pas[]` list of a CQ, EQ or QP work queue with its page size and
//! first-page offset, and the byte-offset → IOVA translation every ring access uses.
//! Must not: know what the ring holds.
//!
//! PRM: `pas[]` entries are page addresses; the page size is `4 KiB << log_page_size`
//! (`cqc`/`eqc`/`qpc.log_page_size` are relative to 4 KiB, as the kernel's
//! `mlx5_fill_page_array` and rdma-core's `mlx5_vfio` use them), and `page_offset` is the
//! offset of the first entry in the first page, in 64-byte units.

use crate::iommu::{DmaFault, Iommu};

/// A buffer made of pages at arbitrary IOVAs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageList {
    pages: Vec<u64>,
    page_shift: u32,
    offset: u64,
}

/// Why a page list was refused at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageListError {
    /// A page address is not aligned to the page size.
    Unaligned,
    /// The page size is unreasonable (above 2^31).
    BadPageSize,
    /// The list does not cover the buffer.
    TooShort,
}

impl PageList {
    /// A list of `pages`, each `4096 << log_page_size` bytes, with the buffer starting
    /// `page_offset * 64` bytes into the first page, covering `len` bytes.
    pub fn new(
        pages: Vec<u64>,
        log_page_size: u32,
        page_offset: u32,
        len: u64,
    ) -> Result<Self, PageListError> {
        let page_shift = 12 + log_page_size;
        if page_shift > 31 {
            return Err(PageListError::BadPageSize);
        }
        let mask = (1u64 << page_shift) - 1;
        if pages.iter().any(|p| p & mask != 0) {
            return Err(PageListError::Unaligned);
        }
        let offset = u64::from(page_offset) * 64;
        let need = (offset + len).div_ceil(1 << page_shift);
        if (pages.len() as u64) < need {
            return Err(PageListError::TooShort);
        }
        Ok(Self {
            pages,
            page_shift,
            offset,
        })
    }

    /// The pages.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// The IOVA of byte `off` of the buffer, or `None` past the list.
    pub fn iova(&self, off: u64) -> Option<u64> {
        let at = off.checked_add(self.offset)?;
        let page = usize::try_from(at >> self.page_shift).ok()?;
        Some(self.pages.get(page)? + (at & ((1 << self.page_shift) - 1)))
    }

    /// Reads `dst.len()` bytes at buffer offset `off`, page by page.
    pub fn read(&self, iommu: &mut Iommu, off: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        let mut done = 0usize;
        while done < dst.len() {
            let at = off + done as u64;
            let n = self.run(at, dst.len() - done);
            let iova = self.iova(at).ok_or(DmaFault {
                iova: u64::MAX,
                len: dst.len(),
                dir: crate::iommu::Dir::Read,
            })?;
            iommu.read(iova, &mut dst[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// Writes `src` at buffer offset `off`, page by page.
    pub fn write(&self, iommu: &mut Iommu, off: u64, src: &[u8]) -> Result<(), DmaFault> {
        let mut done = 0usize;
        while done < src.len() {
            let at = off + done as u64;
            let n = self.run(at, src.len() - done);
            let iova = self.iova(at).ok_or(DmaFault {
                iova: u64::MAX,
                len: src.len(),
                dir: crate::iommu::Dir::Write,
            })?;
            iommu.write(iova, &src[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// How many of `len` bytes from buffer offset `at` lie in the same page.
    fn run(&self, at: u64, len: usize) -> usize {
        let psize = 1u64 << self.page_shift;
        let in_page = psize - ((at + self.offset) & (psize - 1));
        len.min(usize::try_from(in_page).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iommu::Perm;
    use crate::memory::{PAGE_SIZE, SimMemory};
    use std::sync::Arc;

    #[test]
    fn translation_follows_the_page_list_across_pages() {
        let mem = Arc::new(SimMemory::new(2 * PAGE_SIZE).unwrap());
        let mut io = Iommu::new();
        // Two pages mapped in reverse order: buffer page 0 is host page 1.
        io.map(0x40000, mem.clone(), PAGE_SIZE, PAGE_SIZE, Perm::RW)
            .unwrap();
        io.map(0x80000, mem.clone(), 0, PAGE_SIZE, Perm::RW)
            .unwrap();
        let pl = PageList::new(vec![0x40000, 0x80000], 0, 0, 2 * PAGE_SIZE as u64).unwrap();
        assert_eq!(pl.iova(0x1004), Some(0x80004));
        pl.write(&mut io, 0xffe, &[1, 2, 3, 4]).unwrap();
        assert_eq!(mem.to_vec(2 * PAGE_SIZE - 2, 2).unwrap(), vec![1, 2]);
        assert_eq!(mem.to_vec(0, 2).unwrap(), vec![3, 4]);
        assert_eq!(pl.iova(2 * PAGE_SIZE as u64), None);
    }

    #[test]
    fn refuses_unaligned_or_short_lists() {
        assert_eq!(
            PageList::new(vec![0x1001], 0, 0, 64),
            Err(PageListError::Unaligned)
        );
        assert_eq!(
            PageList::new(vec![0x1000], 0, 0, 8192),
            Err(PageListError::TooShort)
        );
        assert_eq!(
            PageList::new(vec![0x1000], 0, 1, 4096),
            Err(PageListError::TooShort)
        );
        assert_eq!(
            PageList::new(vec![0x1000], 20, 0, 64),
            Err(PageListError::BadPageSize)
        );
        assert_eq!(
            PageList::new(vec![0x3000], 1, 0, 64),
            Err(PageListError::Unaligned)
        );
    }
}

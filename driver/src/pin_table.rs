//! Which pages of application memory are mapped for the device, and by how many registrations.
//!
//! Owns: [`PinTable`] (disjoint page extents of host virtual memory, each mapped once at an
//! IOVA, with a count of the registrations that use it), [`PageMapper`] (the side effects:
//! pin, advise, map; unmap, advise back, unpin) and [`Pins`] (what one registration holds).
//! Must not: do any of those side effects itself (`user_dma.rs` does, through the backend), so
//! that the counting is tested without a device, or know about memory keys.
//!
//! Why count: two registrations may share pages (two buffers on one heap page, or an MR over
//! part of another). Mapping those pages twice would charge `RLIMIT_MEMLOCK` twice under VFIO
//! type1 (`vfio_pin_pages_remote` → `vfio_lock_acct` counts per mapping), spend a second
//! `dma_entry_limit` slot, and, on the sim path, a `munlock` of the first registration would
//! unlock pages the second still needs (mlock does not nest). So a page is mapped by exactly
//! one extent, and the extent stays until its last user goes, as libibverbs `memory.c`
//! (`ibv_madvise_range`: split nodes, `refcnt`, act only on 0 ↔ 1) counts its fork ranges.
//! rdma-core's own `mlx5_vfio_reg_mr` maps every MR on its own (no sharing), and a VFIO
//! mapping cannot be split on unmap (type1 v2 refuses), so an extent is never split: a
//! registration that overlaps an extent takes a reference on all of it and maps only the gaps.

use std::collections::BTreeMap;

use crate::error::Result;

/// 4 KiB, the page the extents are made of.
const PAGE: u64 = bypass_seam::PAGE_SIZE as u64;

/// The side effects of mapping and unmapping an extent.
pub trait PageMapper {
    /// Pins and maps the `len` bytes (whole pages) of host memory at `va`; returns the IOVA
    /// the device reaches them at (contiguous). On error nothing stays done.
    fn map(&mut self, va: u64, len: u64) -> Result<u64>;
    /// Undoes [`PageMapper::map`] of `va..va + len` at `iova`. Returns false when the device
    /// may still reach the memory (the unmap failed).
    fn unmap(&mut self, va: u64, len: u64, iova: u64) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    len: u64,
    iova: u64,
    users: u32,
}

/// The extents one registration holds a reference on (their first host addresses).
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "the pages stay mapped until these pins are released"]
pub struct Pins {
    extents: Vec<u64>,
}

/// Disjoint, page-aligned extents of mapped host memory: first address → extent.
#[derive(Debug, Default)]
pub struct PinTable {
    extents: BTreeMap<u64, Extent>,
}

impl PinTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The pages holding `va..va + len` (rounded out to whole pages), as `(start, end)`.
    pub fn page_span(va: u64, len: u64) -> Option<(u64, u64)> {
        let end = va.checked_add(len.max(1))?.checked_next_multiple_of(PAGE)?;
        Some((va & !(PAGE - 1), end))
    }

    /// Takes a reference on every page of `start..end` (page-aligned): extents that already
    /// cover some of them gain a user, the gaps between them are mapped as new extents. On
    /// error everything this call did is undone.
    pub fn acquire(&mut self, start: u64, end: u64, m: &mut impl PageMapper) -> Result<Pins> {
        let mut pins = Pins::default();
        let mut at = start;
        while at < end {
            // The extent holding `at`, or the first one after it.
            let holding = self
                .extents
                .range(..=at)
                .next_back()
                .filter(|(s, e)| **s + e.len > at)
                .map(|(s, _)| *s);
            if let Some(s) = holding {
                let e = self.extents.get_mut(&s).expect("found just now");
                e.users += 1;
                pins.extents.push(s);
                at = s + e.len;
                continue;
            }
            let gap_end = self.extents.range(at..end).next().map_or(end, |(s, _)| *s);
            match m.map(at, gap_end - at) {
                Ok(iova) => {
                    self.extents.insert(
                        at,
                        Extent {
                            len: gap_end - at,
                            iova,
                            users: 1,
                        },
                    );
                    pins.extents.push(at);
                    at = gap_end;
                }
                Err(e) => {
                    self.release(pins, m);
                    return Err(e);
                }
            }
        }
        Ok(pins)
    }

    /// Drops the references `pins` holds; extents left without users are unmapped. Returns
    /// false when some unmap failed (the device may still reach those pages: their memory
    /// must not be freed).
    pub fn release(&mut self, pins: Pins, m: &mut impl PageMapper) -> bool {
        let mut ok = true;
        for s in pins.extents {
            let Some(e) = self.extents.get_mut(&s) else {
                continue;
            };
            e.users -= 1;
            if e.users == 0 {
                let e = self.extents.remove(&s).expect("present");
                ok &= m.unmap(s, e.len, e.iova);
            }
        }
        ok
    }

    /// The IOVA of the page at host address `page` (page-aligned), if some extent maps it.
    pub fn iova_of(&self, page: u64) -> Option<u64> {
        let (s, e) = self.extents.range(..=page).next_back()?;
        (page < s + e.len).then(|| e.iova + (page - s))
    }

    /// The extents now mapped: `(va, len, iova, users)`, in address order.
    pub fn extents(&self) -> Vec<(u64, u64, u64, u32)> {
        self.extents
            .iter()
            .map(|(&s, e)| (s, e.len, e.iova, e.users))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DriverError;

    /// Records every map and unmap; IOVAs count up from 1 MiB; `fail_at` refuses a map.
    #[derive(Default)]
    struct Log {
        next: u64,
        mapped: Vec<(u64, u64)>,
        unmapped: Vec<(u64, u64)>,
        fail_at: Option<u64>,
    }

    impl PageMapper for Log {
        fn map(&mut self, va: u64, len: u64) -> Result<u64> {
            if self.fail_at == Some(va) {
                return Err(DriverError::IovaExhausted { len, align: PAGE });
            }
            self.mapped.push((va, len));
            let iova = 0x10_0000 + self.next;
            self.next += len;
            Ok(iova)
        }
        fn unmap(&mut self, va: u64, len: u64, _iova: u64) -> bool {
            self.unmapped.push((va, len));
            true
        }
    }

    const A: u64 = 0x7f00_0000_0000;

    #[test]
    fn page_span_rounds_out_an_unaligned_range() {
        assert_eq!(PinTable::page_span(A + 5, 10), Some((A, A + PAGE)));
        assert_eq!(
            PinTable::page_span(A + PAGE - 1, 2),
            Some((A, A + 2 * PAGE))
        );
        assert_eq!(PinTable::page_span(A, PAGE), Some((A, A + PAGE)));
        assert_eq!(PinTable::page_span(u64::MAX - 3, 8), None);
    }

    #[test]
    fn overlapping_registrations_share_pages_and_unmap_with_the_last_user() {
        let (mut t, mut m) = (PinTable::new(), Log::default());
        let r1 = t.acquire(A, A + 3 * PAGE, &mut m).unwrap();
        // Overlaps the last page of r1 and adds one page after it.
        let r2 = t.acquire(A + 2 * PAGE, A + 4 * PAGE, &mut m).unwrap();
        assert_eq!(m.mapped, vec![(A, 3 * PAGE), (A + 3 * PAGE, PAGE)]);
        assert_eq!(
            t.extents(),
            vec![
                (A, 3 * PAGE, 0x10_0000, 2),
                (A + 3 * PAGE, PAGE, 0x10_0000 + 3 * PAGE, 1)
            ]
        );
        // The shared page has one IOVA for both.
        assert_eq!(t.iova_of(A + 2 * PAGE), Some(0x10_0000 + 2 * PAGE));
        assert!(t.release(r1, &mut m));
        assert!(m.unmapped.is_empty(), "r2 still uses the first extent");
        assert_eq!(
            t.iova_of(A),
            Some(0x10_0000),
            "mapped whole until the last user"
        );
        assert!(t.release(r2, &mut m));
        assert_eq!(m.unmapped, vec![(A, 3 * PAGE), (A + 3 * PAGE, PAGE)]);
        assert!(t.extents().is_empty());
        assert_eq!(t.iova_of(A), None);
    }

    #[test]
    fn a_range_inside_an_extent_maps_nothing_new() {
        let (mut t, mut m) = (PinTable::new(), Log::default());
        let big = t.acquire(A, A + 8 * PAGE, &mut m).unwrap();
        let small = t.acquire(A + 3 * PAGE, A + 4 * PAGE, &mut m).unwrap();
        let again = t.acquire(A + 3 * PAGE, A + 4 * PAGE, &mut m).unwrap();
        assert_eq!(m.mapped.len(), 1);
        assert_eq!(t.extents()[0].3, 3);
        assert!(t.release(big, &mut m));
        assert!(t.release(small, &mut m));
        assert!(m.unmapped.is_empty());
        assert!(t.release(again, &mut m));
        assert_eq!(m.unmapped, vec![(A, 8 * PAGE)]);
    }

    #[test]
    fn a_range_spanning_two_extents_maps_the_gaps_between_them() {
        let (mut t, mut m) = (PinTable::new(), Log::default());
        let left = t.acquire(A + PAGE, A + 2 * PAGE, &mut m).unwrap();
        let right = t.acquire(A + 4 * PAGE, A + 5 * PAGE, &mut m).unwrap();
        let across = t.acquire(A, A + 6 * PAGE, &mut m).unwrap();
        assert_eq!(
            m.mapped[2..],
            [(A, PAGE), (A + 2 * PAGE, 2 * PAGE), (A + 5 * PAGE, PAGE)]
        );
        for p in 0..6 {
            assert!(t.iova_of(A + p * PAGE).is_some(), "page {p}");
        }
        assert!(t.release(across, &mut m));
        assert_eq!(m.unmapped.len(), 3, "the gaps go with their only user");
        assert!(t.release(left, &mut m) && t.release(right, &mut m));
        assert!(t.extents().is_empty());
    }

    #[test]
    fn a_failed_map_undoes_the_whole_acquire() {
        let (mut t, mut m) = (PinTable::new(), Log::default());
        let mid = t.acquire(A + 2 * PAGE, A + 3 * PAGE, &mut m).unwrap();
        m.fail_at = Some(A + 3 * PAGE);
        assert!(t.acquire(A, A + 5 * PAGE, &mut m).is_err());
        // The gap before `mid` was mapped, then unmapped again; `mid` is back to one user.
        assert_eq!(m.unmapped, vec![(A, 2 * PAGE)]);
        assert_eq!(t.extents(), vec![(A + 2 * PAGE, PAGE, 0x10_0000, 1)]);
        assert!(t.release(mid, &mut m));
        assert!(t.extents().is_empty());
    }
}

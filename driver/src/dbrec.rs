//! Doorbell records: 64-byte slots carved out of shared DMA pages, as rdma-core's `dbrec.c`
//! does (`mlx5_alloc_dbrec`: pages of `page_size / cache_line_size` records, a free bitmap
//! per page, the page freed when its last record goes, `mlx5_free_db`), so that a QP's
//! doorbell record costs 64 bytes of pinned memory instead of a page of its own. Each record is
//! a cache line, so two QPs' records never share one.
//!
//! Owns: [`DbrecPool`] and [`Dbrec`]. Must not: know what a record holds (the QP writes its
//! receive and send counters, `qp.rs`); hand out a record that is not zeroed.

use std::sync::{Arc, Mutex, PoisonError};

use core::ptr::NonNull;

use crate::dma::{DmaBuf, DmaMapper};
use crate::error::Result;

/// Bytes per record: a cache line (rdma-core `to_mdev(...)->cache_line_size`, 64 on x86-64).
pub const DBREC_SIZE: usize = 64;
/// Records per 4 KiB page.
const PER_PAGE: usize = 4096 / DBREC_SIZE;

#[derive(Debug)]
struct Page {
    buf: Arc<DmaBuf>,
    /// Bit `k` set: record `k` is free.
    free: u64,
}

/// All records of a page free.
const ALL_FREE: u64 = u64::MAX >> (64 - PER_PAGE);

/// The pages by id, and which have room: O(1) per allocation and per free, however many
/// pages there are.
#[derive(Debug, Default)]
struct Pages {
    slots: Vec<Option<Page>>,
    /// Ids of the pages with a free record, each once: a page leaves when its last free
    /// record is taken or when it goes, and comes back when a record of it is freed while it
    /// was full, so the list never holds more ids than there are pages.
    with_room: Vec<usize>,
    /// Ids of empty slots.
    unused: Vec<usize>,
}

/// The device's doorbell-record pages (one per `Hca`).
#[derive(Debug, Default)]
pub struct DbrecPool {
    pages: Arc<Mutex<Pages>>,
}

/// One doorbell record: 64 zeroed bytes of device-visible memory, given back on drop.
#[derive(Debug)]
pub struct Dbrec {
    buf: Arc<DmaBuf>,
    page: usize,
    index: usize,
    pages: Arc<Mutex<Pages>>,
}

impl DbrecPool {
    /// A zeroed record, from a page with room or a new one.
    pub fn alloc(&self, dma: &Arc<DmaMapper>) -> Result<Dbrec> {
        let mut p = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
        let mut at = None;
        while let Some(&id) = p.with_room.last() {
            if p.slots
                .get(id)
                .and_then(Option::as_ref)
                .is_some_and(|pg| pg.free != 0)
            {
                at = Some(id);
                break;
            }
            p.with_room.pop();
        }
        let id = match at {
            Some(id) => id,
            None => {
                let page = Page {
                    buf: Arc::new(dma.alloc(4096)?),
                    free: ALL_FREE,
                };
                let id = match p.unused.pop() {
                    Some(id) => {
                        p.slots[id] = Some(page);
                        id
                    }
                    None => {
                        p.slots.push(Some(page));
                        p.slots.len() - 1
                    }
                };
                p.with_room.push(id);
                id
            }
        };
        let Some(page) = p.slots.get_mut(id).and_then(Option::as_mut) else {
            unreachable!("the page was just found or made");
        };
        let index = page.free.trailing_zeros() as usize;
        page.free &= !(1u64 << index);
        let full = page.free == 0;
        let buf = page.buf.clone();
        if full {
            // `id` is the list's last entry (found there or just pushed).
            p.with_room.pop();
        }
        drop(p);
        // Made before it is zeroed, so a failed fill gives the record back (its drop).
        let rec = Dbrec {
            buf,
            page: id,
            index,
            pages: self.pages.clone(),
        };
        rec.buf.fill(index * DBREC_SIZE, DBREC_SIZE, 0)?;
        Ok(rec)
    }

    /// Pages held now (diagnostics and tests).
    pub fn pages(&self) -> usize {
        let p = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
        p.slots.iter().flatten().count()
    }
}

impl Dbrec {
    /// The record's device address.
    pub fn iova(&self) -> u64 {
        self.buf.iova() + (self.index * DBREC_SIZE) as u64
    }

    /// The record's first byte (64 bytes, 64-byte aligned, alive as long as `self`).
    pub fn as_ptr(&self) -> NonNull<u8> {
        // SAFETY: `index < PER_PAGE`, so the offset stays inside the 4096-byte buffer.
        unsafe { self.buf.as_ptr().add(self.index * DBREC_SIZE) }
    }
}

impl Drop for Dbrec {
    fn drop(&mut self) {
        let mut p = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(page) = p.slots.get_mut(self.page).and_then(Option::as_mut) else {
            return;
        };
        let was_full = page.free == 0;
        page.free |= 1u64 << self.index;
        if page.free == ALL_FREE {
            // The last record of the page: the page goes (rdma-core `mlx5_free_db`); its
            // memory is unmapped when this record's reference, the last, drops too.
            p.slots[self.page] = None;
            p.unused.push(self.page);
            // Rare (a page's last record): a scan of the pages with room.
            let gone = self.page;
            p.with_room.retain(|&id| id != gone);
        } else if was_full {
            p.with_room.push(self.page);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn records_share_pages_and_a_page_goes_with_its_last_record() {
        let fabric = bypass_sim::fabric::SimFabric::stepped(3);
        let dev = fabric.add_device(bypass_sim::Profile::default()).unwrap();
        let hca = crate::Hca::open(dev).unwrap();
        let pool = super::DbrecPool::default();
        let base = hca.dma().free_iova_bytes();
        let recs: Vec<_> = (0..130).map(|_| pool.alloc(hca.dma()).unwrap()).collect();
        assert_eq!(pool.pages(), 3, "64 records a page");
        assert_eq!(base - hca.dma().free_iova_bytes(), 3 * 4096);
        let mut iovas: Vec<u64> = recs.iter().map(|r| r.iova()).collect();
        iovas.sort_unstable();
        iovas.dedup();
        assert_eq!(iovas.len(), 130);
        assert!(iovas.iter().all(|i| i % 64 == 0));
        // Dirty one, free it, take it again: zeroed.
        let r = &recs[5];
        // SAFETY: the record's 64 bytes are ours while `r` lives.
        unsafe { r.as_ptr().write(0xee) };
        let (page_iova, mut recs) = (r.iova(), recs);
        recs.remove(5);
        let again = pool.alloc(hca.dma()).unwrap();
        assert_eq!(again.iova(), page_iova);
        // SAFETY: as above.
        assert_eq!(unsafe { again.as_ptr().read() }, 0);
        drop(again);
        drop(recs);
        assert_eq!(pool.pages(), 0);
        assert_eq!(hca.dma().free_iova_bytes(), base);
    }

    #[test]
    fn freeing_and_taking_on_a_full_page_does_not_grow_the_room_list() {
        let fabric = bypass_sim::fabric::SimFabric::stepped(4);
        let dev = fabric.add_device(bypass_sim::Profile::default()).unwrap();
        let hca = crate::Hca::open(dev).unwrap();
        let pool = super::DbrecPool::default();
        let mut recs: Vec<_> = (0..super::PER_PAGE * 2)
            .map(|_| pool.alloc(hca.dma()).unwrap())
            .collect();
        let room = |pool: &super::DbrecPool| pool.pages.lock().unwrap().with_room.len();
        assert_eq!(room(&pool), 0, "both pages full");
        for k in 0..1000 {
            // Free one record of a full page, take one: the page is full again.
            recs.swap_remove(k % recs.len());
            assert_eq!(room(&pool), 1);
            recs.push(pool.alloc(hca.dma()).unwrap());
            assert_eq!(room(&pool), 0, "cycle {k}");
        }
        assert_eq!(pool.pages(), 2);
        drop(recs);
        assert_eq!(pool.pages(), 0);
        assert_eq!(room(&pool), 0, "no stale ids of pages that went");
    }
}

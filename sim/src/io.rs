//! The device's reach into the host, as every part that touches host memory gets it: DMA
//! through the IOMMU, and the counters and trace each part reports to, at the device's time.
//!
//! Owns: [`Io`], a borrow of those for the length of one piece of work (a doorbell, a packet,
//! a command), and the accounting of a refused DMA. Must not: own any of them (the device
//! does) or decide anything.

use crate::counters::Counters;
use crate::iommu::{Dir, DmaFault, Iommu};
use crate::trace::{Trace, TraceEvent};

/// DMA, counters, trace and time, lent to a part.
#[derive(Debug)]
pub(crate) struct Io<'a> {
    /// Every device access to host memory goes through it.
    pub(crate) dma: &'a mut Iommu,
    /// The device's counters.
    pub(crate) counters: &'a mut Counters,
    /// The device's trace.
    pub(crate) trace: &'a mut Trace,
    /// Device time (ns).
    pub(crate) now: u64,
}

impl Io<'_> {
    /// The same borrows, for a shorter time (a part lending them on).
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> Io<'_> {
        Io {
            dma: &mut *self.dma,
            counters: &mut *self.counters,
            trace: &mut *self.trace,
            now: self.now,
        }
    }

    /// Counts and traces a DMA the IOMMU refused.
    pub(crate) fn dma_fault(&mut self, f: DmaFault) {
        self.counters.dma_faults += 1;
        let at = self.now;
        self.trace.record(|| TraceEvent::DmaFault {
            at,
            iova: f.iova,
            len: f.len,
            write: f.dir == Dir::Write,
        });
    }
}

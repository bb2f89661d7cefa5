//! Local memory of a send WQE: checking its SGEs, gathering payload from them, scattering READ
//! and atomic results into them.
//!
//! Owns: the walk over a WQE's SGE list at a message offset, through [`Mkey::translate`] and
//! the IOMMU, with the error the requester reports for each failure. Must not: decide
//! completions or touch rings.
//!
//! Every local key failure on the requester side is LOCAL_PROT_ERR: the verbs spec
//! (IBTA 11.6.2 "Local Protection Error: the locally posted WR's buffers are not valid for
//! the requested operation") and rxe agree (`rxe_req.c` / `rxe_comp.c` map a failed
//! `copy_data` to `IB_WC_LOC_PROT_ERR`). LOCAL_ACCESS_ERR is the responder's (a WRITE with
//! immediate that hit a bad local buffer). A DMA fault behind a valid key is counted as one
//! and reported the same way.

use bypass_hw::syndrome::CqeSyndrome;

use crate::io::Io;
use crate::iommu::{Dir, DmaFault, HostRun, Iommu};
use crate::mkey::{Mkey, Need, lookup};
use crate::table::Table;

use super::wqe::Sge;

/// Why a gather or scatter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemError {
    /// A key, PD, bounds or rights check failed.
    Access,
    /// The IOMMU refused the access.
    Dma(DmaFault),
}

impl MemError {
    /// The CQE syndrome the requester reports.
    pub fn syndrome(self) -> CqeSyndrome {
        CqeSyndrome::LOCAL_PROT_ERR
    }

    /// Counts and traces a refused DMA (`Io::dma_fault`), then the CQE syndrome.
    pub(crate) fn report(self, io: &mut Io<'_>) -> CqeSyndrome {
        if let Self::Dma(f) = self {
            io.dma_fault(f);
        }
        self.syndrome()
    }
}

/// Checks every SGE for `need` by a QP in `pd` numbered `qpn`, without touching memory.
pub(crate) fn check(
    mkeys: &Table<Mkey>,
    pd: u32,
    qpn: u32,
    sges: &[Sge],
    need: Need,
) -> Result<(), MemError> {
    for s in sges {
        let m = lookup(mkeys, s.lkey).ok_or(MemError::Access)?;
        m.translate(pd, qpn, s.addr, u64::from(s.len), need)
            .map_err(|_| MemError::Access)?;
    }
    Ok(())
}

/// Walks `len` bytes of the SGE list from message offset `off`, calling `f(iova, range)` for
/// each IOVA run, where `range` is the run's place in `0..len`. `who` is the QP's
/// (PD, QPN).
fn walk(
    mkeys: &Table<Mkey>,
    (pd, qpn): (u32, u32),
    sges: &[Sge],
    off: u64,
    len: usize,
    need: Need,
    mut f: impl FnMut(u64, std::ops::Range<usize>) -> Result<(), DmaFault>,
) -> Result<(), MemError> {
    let mut skip = off;
    let mut done = 0usize;
    for s in sges {
        if done >= len {
            break;
        }
        let slen = u64::from(s.len);
        if skip >= slen {
            skip -= slen;
            continue;
        }
        let take = (slen - skip).min((len - done) as u64);
        let m = lookup(mkeys, s.lkey).ok_or(MemError::Access)?;
        let va = s.addr.checked_add(skip).ok_or(MemError::Access)?;
        let runs = m
            .translate(pd, qpn, va, take, need)
            .map_err(|_| MemError::Access)?;
        for (iova, n) in runs {
            let n = n as usize;
            f(iova, done..done + n).map_err(MemError::Dma)?;
            done += n;
        }
        skip = 0;
    }
    if done < len {
        // The message is longer than the list: only a malformed length gets here.
        return Err(MemError::Access);
    }
    Ok(())
}

/// Reads `len` bytes of the message from offset `off` (Need::LocalRead).
pub(crate) fn gather(
    mkeys: &Table<Mkey>,
    iommu: &mut Iommu,
    pd: u32,
    qpn: u32,
    sges: &[Sge],
    off: u64,
    len: usize,
) -> Result<Vec<u8>, MemError> {
    let mut out = vec![0u8; len];
    walk(
        mkeys,
        (pd, qpn),
        sges,
        off,
        len,
        Need::LocalRead,
        |iova, r| iommu.read(iova, &mut out[r]),
    )?;
    Ok(out)
}

/// Writes `data` into the message at offset `off` (Need::LocalWrite).
pub(crate) fn scatter(
    mkeys: &Table<Mkey>,
    iommu: &mut Iommu,
    pd: u32,
    qpn: u32,
    sges: &[Sge],
    off: u64,
    data: &[u8],
) -> Result<(), MemError> {
    walk(
        mkeys,
        (pd, qpn),
        sges,
        off,
        data.len(),
        Need::LocalWrite,
        |iova, r| iommu.write(iova, &data[r]),
    )
}

/// The host memory behind `len` bytes of the message from offset `off` (Need::LocalRead), for
/// a burst that carries its payload by reference (`crate::frame`). `None` if any key check or
/// the IOMMU would refuse: the caller then takes the per-packet path, which reports it.
/// The runs are appended to `out` (a reused buffer: no allocation per burst).
pub(crate) fn resolve(
    mkeys: &Table<Mkey>,
    iommu: &mut Iommu,
    (pd, qpn): (u32, u32),
    sges: &[Sge],
    (off, len): (u64, usize),
    out: &mut Vec<HostRun>,
) -> Option<()> {
    let mut iovas = IovaRuns::default();
    walk(
        mkeys,
        (pd, qpn),
        sges,
        off,
        len,
        Need::LocalRead,
        |iova, r| {
            iovas.push(iova, r.len() as u64);
            Ok(())
        },
    )
    .ok()?;
    iovas.resolve_into(iommu, Dir::Read, out)
}

/// IOVA runs with contiguous neighbours merged (an mkey translates page by page; the IOMMU is
/// asked once per contiguous range). The first run is kept inline: the usual access (one
/// contiguous range) allocates nothing here.
#[derive(Debug, Default)]
pub(crate) struct IovaRuns {
    first: Option<(u64, u64)>,
    rest: Vec<(u64, u64)>,
}

impl IovaRuns {
    /// Appends `n` bytes at `iova`, extending the last run if it ends there.
    #[inline]
    pub(crate) fn push(&mut self, iova: u64, n: u64) {
        if self.first.is_none() {
            self.first = Some((iova, n));
            return;
        }
        let last = match self.rest.last_mut() {
            Some(r) => Some(r),
            None => self.first.as_mut(),
        };
        match last {
            Some((start, len)) if start.checked_add(*len) == Some(iova) => *len += n,
            _ => self.rest.push((iova, n)),
        }
    }

    /// The one run, if the range is contiguous.
    pub(crate) fn single(&self) -> Option<(u64, u64)> {
        if self.rest.is_empty() {
            self.first
        } else {
            None
        }
    }

    /// The host memory behind every run, if the IOMMU allows `dir` on all of them, appended to
    /// `out` (a caller's reused buffer: no allocation once it has grown to the usual run
    /// count). On `None`, `out` may hold part of the runs.
    pub(crate) fn resolve_into(
        &self,
        iommu: &mut Iommu,
        dir: Dir,
        out: &mut Vec<HostRun>,
    ) -> Option<()> {
        for &(iova, n) in self.first.iter().chain(self.rest.iter()) {
            iommu.resolve(iova, usize::try_from(n).ok()?, dir, out)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::IovaRuns;

    #[test]
    fn iova_runs_merge_contiguous_neighbours_in_order() {
        let mut r = IovaRuns::default();
        r.push(0x1000, 0x800);
        r.push(0x1800, 0x800);
        assert_eq!((r.first, r.rest.len()), (Some((0x1000, 0x1000)), 0));
        r.push(0x9000, 0x10);
        r.push(0x9010, 0x10);
        r.push(0x1000, 0x10);
        assert_eq!(r.rest, vec![(0x9000, 0x20), (0x1000, 0x10)]);
    }
}

//! Memory keys as the device checks them: PD, bounds, access rights and MTT translation.
//!
//! Owns: [`Mkey`] and [`Mkey::translate`], the one place a virtual address named by an lkey or
//! rkey becomes IOVAs. Must not: decide the completion or NAK an access failure turns into
//! (the engine maps [`AccessError`] to `LOCAL_PROT_ERR` / `REMOTE_ACCESS_ERR` etc.).
//!
//! PRM, as the kernel (`mlx5_ib` `set_mkc_access_pd_addr_fields`) and rdma-core
//! (`mlx5_vfio_reg_mr`) fill `mkc`: `start_addr` is the virtual address the key covers, `len`
//! its length (`length64` = the whole address space), `log_page_size` the absolute page shift
//! of the MTT, and MTT entry *i* the IOVA of the page holding `start_addr + i * page` (rounded
//! down), with `MLX5_MTT_READ`/`WRITE` in its low bits. The key is `mkey_index << 8 | mkey_7_0`.

use bypass_hw::cmd::mkey::mkey_index;

use crate::table::Table;

/// Access rights of an mkey (`mkc.lr/lw/rr/rw/a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// Local read (always set by drivers).
    pub local_read: bool,
    /// Local write (receives, READ responses, atomic results land here).
    pub local_write: bool,
    /// Remote read (RDMA READ targets).
    pub remote_read: bool,
    /// Remote write (RDMA WRITE targets).
    pub remote_write: bool,
    /// Remote atomic.
    pub remote_atomic: bool,
}

/// What an access needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The device reads local memory (send gather, WRITE source, READ response source...).
    LocalRead,
    /// The device writes local memory (receive scatter, READ destination, atomic result).
    LocalWrite,
    /// A remote peer reads (RDMA READ).
    RemoteRead,
    /// A remote peer writes (RDMA WRITE).
    RemoteWrite,
    /// A remote peer does an atomic.
    RemoteAtomic,
}

/// Why an access through an mkey was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// The mkey belongs to another protection domain than the QP's.
    WrongPd,
    /// The range is not inside `[start_addr, start_addr + len)` or wraps.
    OutOfBounds,
    /// The mkey does not grant the access.
    NoAccess,
    /// The mkey is bound to a different QP (`mkc.qpn` not 0xffffff).
    WrongQp,
    /// The MTT does not cover the page (a malformed registration).
    NoTranslation,
}

/// A memory key in the device's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mkey {
    /// The full key (`index << 8 | variant`).
    pub key: u32,
    /// Protection domain.
    pub pd: u32,
    /// QP the key is restricted to, or 0xffffff for any.
    pub qpn: u32,
    /// First virtual address covered.
    pub start: u64,
    /// Bytes covered (`u64::MAX` for length64).
    pub len: u64,
    /// Rights.
    pub access: Access,
    /// Absolute page shift of the MTT.
    pub page_shift: u32,
    /// MTT: page IOVAs (low bits may carry the read/write flags and are ignored).
    pub mtt: Vec<u64>,
}

/// The mkey `key` (an lkey or rkey) names in `mkeys`, if both its index and its variant byte
/// match: a key of a destroyed mkey whose index was given out again names nothing.
#[inline]
pub(crate) fn lookup(mkeys: &Table<Mkey>, key: u32) -> Option<&Mkey> {
    mkeys.get(mkey_index(key)).filter(|m| m.key == key)
}

impl Mkey {
    /// Checks an access of `len` bytes at virtual address `va` for `need`, by a QP in `pd`
    /// with number `qpn`, and returns the IOVA runs to touch, in order, as `(iova, bytes)`.
    /// No allocation: the runs are computed as they are iterated.
    ///
    /// A zero-length access only checks the key, PD and rights, and yields no run.
    pub fn translate(
        &self,
        pd: u32,
        qpn: u32,
        va: u64,
        len: u64,
        need: Need,
    ) -> Result<Runs<'_>, AccessError> {
        if self.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if self.qpn != 0x00ff_ffff && self.qpn != qpn {
            return Err(AccessError::WrongQp);
        }
        let ok = match need {
            Need::LocalRead => self.access.local_read,
            Need::LocalWrite => self.access.local_write,
            Need::RemoteRead => self.access.remote_read,
            Need::RemoteWrite => self.access.remote_write,
            Need::RemoteAtomic => self.access.remote_atomic,
        };
        if !ok {
            return Err(AccessError::NoAccess);
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if len > 0 {
            if va < self.start || end > self.start.saturating_add(self.len) {
                return Err(AccessError::OutOfBounds);
            }
            let last_page = ((end - 1) >> self.page_shift) - (self.start >> self.page_shift);
            if usize::try_from(last_page).map_or(true, |p| p >= self.mtt.len()) {
                return Err(AccessError::NoTranslation);
            }
        }
        Ok(Runs {
            key: self,
            at: va,
            end,
        })
    }
}

/// The IOVA runs of a checked access (see [`Mkey::translate`]).
#[derive(Debug, Clone)]
pub struct Runs<'a> {
    key: &'a Mkey,
    at: u64,
    end: u64,
}

impl Iterator for Runs<'_> {
    type Item = (u64, u64);

    #[inline]
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.at >= self.end {
            return None;
        }
        let shift = self.key.page_shift;
        let psize = 1u64 << shift;
        let idx = usize::try_from((self.at >> shift) - (self.key.start >> shift)).ok()?;
        // translate() checked that every page of the range has an MTT entry.
        let page = self.key.mtt.get(idx)? & !(psize - 1);
        let mut n = (psize - (self.at & (psize - 1))).min(self.end - self.at);
        let run_start = page + (self.at & (psize - 1));
        // Pages whose MTT entries continue the run physically extend it: one run per
        // contiguous IOVA range, so a large access is translated (and later resolved by the
        // IOMMU) once per range rather than once per page.
        let rest = self.end - (self.at + n);
        if rest > 0 {
            let more = usize::try_from(rest.div_ceil(psize)).unwrap_or(usize::MAX);
            let tail = self.key.mtt.get(idx + 1..).unwrap_or(&[]);
            let tail = tail.get(..more.min(tail.len())).unwrap_or(&[]);
            let contiguous = tail
                .iter()
                .zip(1u64..)
                .take_while(|&(e, j)| e & !(psize - 1) == page.wrapping_add(j << shift))
                .count() as u64;
            n += contiguous.saturating_mul(psize).min(rest);
        }
        self.at += n;
        Some((run_start, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Mkey {
        Mkey {
            key: 0x0300_01aa,
            pd: 5,
            qpn: 0x00ff_ffff,
            start: 0x7f00_0000_0800,
            len: 0x2000,
            access: Access {
                local_read: true,
                local_write: true,
                remote_write: true,
                ..Default::default()
            },
            page_shift: 12,
            // Pages of 0x7f00_0000_0000.., ..1000, ..2000 at these IOVAs (with MTT flags set).
            mtt: vec![0x50_0000 | 3, 0x90_0000 | 3, 0x30_0000 | 3],
        }
    }

    #[test]
    fn physically_contiguous_pages_make_one_run() {
        let mut k = key();
        // Pages 0 and 1 contiguous, page 2 elsewhere.
        k.mtt = vec![0x50_0000 | 3, 0x50_1000 | 3, 0x90_0000 | 3];
        let runs: Vec<_> = k
            .translate(5, 7, 0x7f00_0000_0800, 0x1810, Need::LocalRead)
            .unwrap()
            .collect();
        assert_eq!(runs, vec![(0x50_0800, 0x1800), (0x90_0000, 0x10)]);
        // A range ending inside the contiguous part stops there.
        let runs: Vec<_> = k
            .translate(5, 7, 0x7f00_0000_0ff0, 0x20, Need::LocalRead)
            .unwrap()
            .collect();
        assert_eq!(runs, vec![(0x50_0ff0, 0x20)]);
    }

    #[test]
    fn translation_splits_at_pages_and_keeps_the_offset() {
        let runs: Vec<_> = key()
            .translate(5, 7, 0x7f00_0000_0ff0, 0x20, Need::LocalRead)
            .unwrap()
            .collect();
        assert_eq!(runs, vec![(0x50_0ff0, 0x10), (0x90_0000, 0x10)]);
        let runs: Vec<_> = key()
            .translate(5, 7, 0x7f00_0000_2000, 0x800, Need::RemoteWrite)
            .unwrap()
            .collect();
        assert_eq!(runs, vec![(0x30_0000, 0x800)]);
    }

    #[test]
    fn an_unaligned_start_keeps_its_page_offset_to_the_last_byte() {
        // `ibv_reg_mr_iova2` of 5 bytes at IOVA ..ffd (3 in the first page, 2 in the next):
        // two MTT pages, the first byte at offset 0xffd of the first page's IOVA.
        let mut k = key();
        k.start = 0x5a5a_0000_0ffd;
        k.len = 5;
        k.mtt = vec![0x80_0000 | 3, 0x20_0000 | 3];
        let runs: Vec<_> = k
            .translate(5, 7, 0x5a5a_0000_0ffd, 5, Need::LocalRead)
            .unwrap()
            .collect();
        assert_eq!(runs, vec![(0x80_0ffd, 3), (0x20_0000, 2)]);
        let last: Vec<_> = k
            .translate(5, 7, 0x5a5a_0000_1001, 1, Need::LocalRead)
            .unwrap()
            .collect();
        assert_eq!(last, vec![(0x20_0001, 1)]);
        assert_eq!(
            k.translate(5, 7, 0x5a5a_0000_1001, 2, Need::LocalRead)
                .err(),
            Some(AccessError::OutOfBounds),
            "one byte past the exact length"
        );
        assert_eq!(
            k.translate(5, 7, 0x5a5a_0000_0ffc, 1, Need::LocalRead)
                .err(),
            Some(AccessError::OutOfBounds),
            "one byte before the start"
        );
    }

    #[test]
    fn checks_pd_rights_bounds_and_qp() {
        let k = key();
        assert_eq!(
            k.translate(6, 7, 0x7f00_0000_0800, 8, Need::LocalRead)
                .err(),
            Some(AccessError::WrongPd)
        );
        assert_eq!(
            k.translate(5, 7, 0x7f00_0000_0800, 8, Need::RemoteRead)
                .err(),
            Some(AccessError::NoAccess)
        );
        assert_eq!(
            k.translate(5, 7, 0x7f00_0000_07ff, 8, Need::LocalRead)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            k.translate(5, 7, 0x7f00_0000_27f9, 8, Need::LocalRead)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            k.translate(5, 7, u64::MAX - 2, 8, Need::LocalRead).err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            k.translate(5, 7, 0x7f00_0000_27f8, 8, Need::LocalRead)
                .unwrap()
                .count(),
            1
        );
        assert_eq!(k.translate(5, 7, 0, 0, Need::LocalRead).unwrap().count(), 0);
        let mut bound = key();
        bound.qpn = 9;
        assert_eq!(
            bound
                .translate(5, 7, 0x7f00_0000_0800, 8, Need::LocalRead)
                .err(),
            Some(AccessError::WrongQp)
        );
        let mut short = key();
        short.mtt.truncate(1);
        assert_eq!(
            short
                .translate(5, 7, 0x7f00_0000_1800, 8, Need::LocalRead)
                .err(),
            Some(AccessError::NoTranslation)
        );
    }
}

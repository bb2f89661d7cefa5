//! Which BlueFlame register ("bfreg") each QP rings, and the UAR pages they live on, as
//! rdma-core hands them out with dynamic UARs: two bfregs per UAR page; the first
//! [`LOW_LAT_BFREGS`] bfregs dedicated, one QP each (no lock on its post path); the next
//! `TOT_BFREGS - LOW_LAT_BFREGS` shared, each QP beyond that taking the least used of them and
//! posting under its lock; the driver's own page (bfreg 0, 8-byte doorbells, no lock) for a QP
//! without BlueFlame. UAR pages are allocated when a class needs one and freed when the last QP
//! on them goes, so any number of QPs gets a doorbell from at most 8 pages.
//!
//! Follows rdma-core `providers/mlx5/verbs.c` `mlx5_get_qp_uar` (pop a free dedicated bfreg,
//! else allocate a page while `qp_alloc_dedicated_uuars < qp_max_dedicated_uuars`, else one
//! while `qp_alloc_shared_uuars < qp_max_shared_uuars`, then the shared bfreg of least
//! `count`), `mlx5_insert_dyn_uuars` (bfreg `j` of a page at `MLX5_BF_OFFSET + j *
//! bf_reg_size`, `buf_size = bf_reg_size / 2`, `need_lock = qp_shared`), `mlx5_put_qp_uar`;
//! `mlx5.c` `mlx5_init_context` (`qp_max_dedicated_uuars = low_lat_uuars`,
//! `qp_max_shared_uuars = tot_uuars - low_lat_uuars`), `get_total_uuars`
//! (`MLX5_DEF_TOT_UUARS` = 16), `get_num_low_lat_uuars` (4); the kernel's `mlx5_ib` `qp.c`
//! `alloc_bfreg` (high class dedicated, then medium class least used, bfreg 0 last) follows the
//! same classes for the static layout. Unlike rdma-core, which keeps its pages for the
//! context's life, a page is freed (DEALLOC_UAR) when its last user goes.
//!
//! Owns: [`BfregPool`], [`BfregClass`], [`QpDoorbell`] (what a QP keeps of its bfreg). Must
//! not: build WQEs or ring doorbells (`doorbell.rs`); the lock is taken inside the shared
//! register's MMIO object, so a dedicated register's post path has no test for it.

use std::sync::{Arc, Mutex, PoisonError};

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::pd_uar::{AllocUarIn, AllocUarOut, DeallocUarIn};

use crate::backend::Mmio;
use crate::barrier::mmio_flush_writes;
use crate::cmdq::input;
use crate::error::{DriverError, Result};
use crate::hca::Hca;
pub use crate::uar::{BFREGS_PER_UAR, BfregClass};
use crate::uar::{Bfreg, MmioHandle};

/// Bfregs the QPs of one device may use (rdma-core `MLX5_DEF_TOT_UUARS`, 4 KiB pages).
pub const TOT_BFREGS: usize = 16;
/// Of those, dedicated to one QP each (rdma-core `get_num_low_lat_uuars`: 4).
pub const LOW_LAT_BFREGS: usize = 4;
/// The largest WQE (16-byte units) a shared register carries by BlueFlame: one WQEBB, one
/// MMIO call, so that its lock covers the whole copy; longer WQEs ring the 8-byte doorbell.
pub const SHARED_BF_MAX_DS: u8 = 4;

/// One UAR page the pool allocated for QPs.
struct Page {
    uar: u32,
    shared: bool,
    /// QPs on each of its two bfregs.
    users: [u32; BFREGS_PER_UAR],
    /// The locked MMIO objects of a shared page's bfregs.
    locked: Vec<Arc<dyn Mmio>>,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("uar", &self.uar)
            .field("shared", &self.shared)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct PoolState {
    pages: Vec<Page>,
    /// Bfregs on dedicated pages (`qp_alloc_dedicated_uuars`).
    dedicated: usize,
    /// Bfregs on shared pages (`qp_alloc_shared_uuars`).
    shared: usize,
}

/// The device's QP bfregs and their UAR pages (one per [`Hca`]).
///
/// Handing out a register is the driver's alone: a [`QpDoorbell`] writes any value to its
/// doorbell, which makes the device fetch whatever WQE the value names, so only a QP that
/// owns its ring may hold one. Safe code cannot take one:
/// ```compile_fail,E0624
/// fn doorbell(hca: &std::sync::Arc<bypass_driver::Hca>) {
///     let _ = hca.bfregs().get(hca, true);
/// }
/// ```
#[derive(Debug, Default)]
pub struct BfregPool {
    state: Mutex<PoolState>,
}

/// What a QP keeps of its bfreg: the register, the MMIO object it rings through (the
/// register's locked one when shared), and its claim, given back on drop.
#[derive(Debug)]
pub struct QpDoorbell {
    /// The register.
    pub bfreg: Bfreg,
    /// What the doorbell writes go through.
    pub mmio: MmioHandle,
    _lease: Option<Lease>,
}

#[derive(Debug)]
struct Lease {
    hca: Arc<Hca>,
    uar: u32,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.hca.bfregs().put(&self.hca, self.uar, self.index);
    }
}

/// The register `index` of a UAR page the way rdma-core's dynamic UARs lay it out.
fn reg(uar: u32, index: usize, bf_reg_size: usize, max_ds: u8, class: BfregClass) -> Result<Bfreg> {
    Bfreg::dynamic(uar, index, bf_reg_size, max_ds, class).map_err(|source| {
        DriverError::BuildInput {
            what: "the QP's BlueFlame register",
            source,
        }
    })
}

impl BfregPool {
    /// How many pages the pool holds now, and how many bfregs of each class they carry
    /// (diagnostics and tests).
    pub fn pages(&self) -> (usize, usize, usize) {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (s.pages.len(), s.dedicated, s.shared)
    }

    /// The doorbell of a new QP on `hca`: BlueFlame if `blueflame`, else (or when no page can
    /// be had) the driver's page with 8-byte doorbells.
    pub(crate) fn get(&self, hca: &Arc<Hca>, blueflame: bool) -> Result<QpDoorbell> {
        let bf_reg_size = hca.caps().bf_reg_size();
        let backend: Arc<dyn Mmio> = hca.dev().clone();
        if blueflame && let Some(d) = self.get_bf(hca, &backend, bf_reg_size)? {
            return Ok(d);
        }
        let bfreg =
            Bfreg::new(hca.uar_index(), 0, bf_reg_size.max(64), false).map_err(|source| {
                DriverError::BuildInput {
                    what: "the QP's BlueFlame register",
                    source,
                }
            })?;
        Ok(QpDoorbell {
            bfreg,
            mmio: MmioHandle::new(backend),
            _lease: None,
        })
    }

    fn get_bf(
        &self,
        hca: &Arc<Hca>,
        backend: &Arc<dyn Mmio>,
        bf_reg_size: usize,
    ) -> Result<Option<QpDoorbell>> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let lease = |uar, index| {
            Some(Lease {
                hca: hca.clone(),
                uar,
                index,
            })
        };
        loop {
            // A free dedicated bfreg (`list_pop(dyn_uar_qp_dedicated_list)`).
            let free = s.pages.iter_mut().filter(|p| !p.shared).find_map(|p| {
                let k = p.users.iter().position(|&u| u == 0)?;
                Some((p.uar, k))
            });
            if let Some((uar, k)) = free {
                // Taken only once the register is built: an error leaves it free.
                let bfreg = reg(uar, k, bf_reg_size, u8::MAX, BfregClass::LowLatency)?;
                if let Some(p) = s.pages.iter_mut().find(|p| p.uar == uar) {
                    p.users[k] = 1;
                }
                return Ok(Some(QpDoorbell {
                    bfreg,
                    mmio: MmioHandle::new(backend.clone()),
                    _lease: lease(uar, k),
                }));
            }
            if s.dedicated < LOW_LAT_BFREGS {
                match alloc_uar(hca) {
                    Ok(uar) => {
                        s.dedicated += BFREGS_PER_UAR;
                        s.pages.push(Page {
                            uar,
                            shared: false,
                            users: [0; BFREGS_PER_UAR],
                            locked: Vec::new(),
                        });
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no UAR page for a low-latency bfreg");
                    }
                }
            }
            break;
        }
        // A new shared page only when every shared bfreg has a user: a page allocated beside an
        // idle bfreg would get no user, and only a user's release frees a page.
        let idle_shared = s.pages.iter().any(|p| p.shared && p.users.contains(&0));
        if s.shared < TOT_BFREGS - LOW_LAT_BFREGS && !idle_shared {
            match alloc_uar(hca) {
                Ok(uar) => {
                    let locked = (0..BFREGS_PER_UAR)
                        .map(|k| {
                            let r = reg(uar, k, bf_reg_size, SHARED_BF_MAX_DS, BfregClass::Shared)?;
                            Ok(Arc::new(LockedBfreg::new(backend.clone(), &r)) as Arc<dyn Mmio>)
                        })
                        .collect::<Result<Vec<_>>>();
                    // The page is no one's until it is in the pool: give it back on error.
                    let locked = match locked {
                        Ok(l) => l,
                        Err(e) => {
                            drop(s);
                            dealloc_uar(hca, uar);
                            return Err(e);
                        }
                    };
                    s.shared += BFREGS_PER_UAR;
                    s.pages.push(Page {
                        uar,
                        shared: true,
                        users: [0; BFREGS_PER_UAR],
                        locked,
                    });
                }
                Err(e) => tracing::warn!(error = %e, "no UAR page for a shared bfreg"),
            }
        }
        // The shared bfreg of least use (`bf_entry->count < bf->count`), first one on ties.
        let least = s
            .pages
            .iter_mut()
            .filter(|p| p.shared)
            .flat_map(|p| {
                let uar = p.uar;
                p.users
                    .iter_mut()
                    .enumerate()
                    .map(move |(k, u)| (uar, k, u))
            })
            .min_by_key(|(_, _, u)| **u);
        let Some((uar, k, users)) = least else {
            return Ok(None);
        };
        *users += 1;
        let mmio = s
            .pages
            .iter()
            .find(|p| p.uar == uar)
            .and_then(|p| p.locked.get(k))
            .cloned()
            .unwrap_or_else(|| backend.clone());
        let bfreg = reg(uar, k, bf_reg_size, SHARED_BF_MAX_DS, BfregClass::Shared)?;
        Ok(Some(QpDoorbell {
            bfreg,
            mmio: MmioHandle::new(mmio),
            _lease: lease(uar, k),
        }))
    }

    /// Gives back bfreg `index` of page `uar`; the page goes when nobody uses it any more.
    fn put(&self, hca: &Hca, uar: u32, index: usize) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(at) = s.pages.iter().position(|p| p.uar == uar) else {
            return;
        };
        let page = &mut s.pages[at];
        if let Some(u) = page.users.get_mut(index) {
            *u = u.saturating_sub(1);
        }
        if page.users.iter().any(|&u| u != 0) {
            return;
        }
        let page = s.pages.swap_remove(at);
        if page.shared {
            s.shared -= BFREGS_PER_UAR;
        } else {
            s.dedicated -= BFREGS_PER_UAR;
        }
        drop(s);
        dealloc_uar(hca, page.uar);
    }
}

fn alloc_uar(hca: &Hca) -> Result<u32> {
    let i = input(Opcode::ALLOC_UAR, 0, AllocUarIn::LEN);
    let o = hca.exec_create(&i, AllocUarOut::LEN, crate::limits::Resource::Uar)?;
    Ok(AllocUarOut::new_checked(&o[..])
        .map_err(|source| DriverError::BadOutput {
            op: Opcode::ALLOC_UAR,
            source,
        })?
        .uar())
}

fn dealloc_uar(hca: &Hca, uar: u32) {
    let mut i = input(Opcode::DEALLOC_UAR, 0, DeallocUarIn::LEN);
    if let Ok(mut d) = DeallocUarIn::new_checked(&mut i[..]) {
        let _ = d.set_uar(uar);
    }
    if let Err(e) = hca.cmdq().exec(&i, 16) {
        tracing::error!(uar, error = %e, "DEALLOC_UAR failed");
    }
}

/// A shared bfreg's MMIO: every doorbell write goes to the half the register's shared toggle
/// names, under its lock, flushed before the lock is let go (rdma-core `post_send_db` with
/// `bf->need_lock`: `mmio_flush_writes` inside the lock keeps two CPUs' doorbells in order;
/// `bf->offset ^= bf->buf_size` on the register, not the QP). The QP's own toggle only says
/// which half its copy of the register last named; the register's decides.
struct LockedBfreg {
    mmio: Arc<dyn Mmio>,
    /// BAR0 offset of the register's first half.
    reg: u64,
    buf_size: u64,
    /// The half the next doorbell goes to (0 or `buf_size`).
    half: Mutex<u64>,
}

impl std::fmt::Debug for LockedBfreg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockedBfreg")
            .field("reg", &self.reg)
            .field("buf_size", &self.buf_size)
            .finish_non_exhaustive()
    }
}

impl LockedBfreg {
    fn new(mmio: Arc<dyn Mmio>, r: &Bfreg) -> Self {
        Self {
            mmio,
            reg: r.doorbell_offset(),
            buf_size: r.buf_size() as u64,
            half: Mutex::new(0),
        }
    }

    /// Where a write the QP aimed at `off` goes: the same place in the register's current half.
    fn place(&self, off: u64, half: u64) -> u64 {
        match off.checked_sub(self.reg) {
            Some(d) if self.buf_size != 0 && d < 2 * self.buf_size => {
                self.reg + half + d % self.buf_size
            }
            _ => off,
        }
    }

    fn locked(&self, off: u64, write: impl FnOnce(&dyn Mmio, u64)) {
        let mut half = self.half.lock().unwrap_or_else(PoisonError::into_inner);
        write(&*self.mmio, self.place(off, *half));
        mmio_flush_writes();
        *half ^= self.buf_size;
    }
}

impl Mmio for LockedBfreg {
    fn bar0_len(&self) -> u64 {
        self.mmio.bar0_len()
    }

    fn read32(&self, off: u64) -> u32 {
        self.mmio.read32(off)
    }

    unsafe fn write32(&self, off: u64, v: u32) {
        // SAFETY: the caller's contract (this type's Mmio contract) is passed on unchanged.
        unsafe { self.mmio.write32(off, v) };
    }

    unsafe fn write64(&self, off: u64, v: u64) {
        // SAFETY: as write32; the lock only serialises the register's users.
        self.locked(off, |m, at| unsafe { m.write64(at, v) });
    }

    unsafe fn write_bf(&self, off: u64, chunk: &[u64; 8]) {
        // SAFETY: as write32.
        self.locked(off, |m, at| unsafe { m.write_bf(at, chunk) });
    }

    fn mmio_errors(&self) -> u64 {
        self.mmio.mmio_errors()
    }
}

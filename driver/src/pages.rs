//! Firmware pages: the pool of 4 KiB pages the driver lends the firmware, and QUERY_PAGES /
//! MANAGE_PAGES give and take.
//!
//! Owns: [`PagePool`] (2 MiB DMA blocks, rdma-core's `MLX5_VFIO_BLOCK_SIZE`, each with a
//! bitmap of its 512 pages; a block is unmapped and freed when its last page comes back,
//! rdma-core `mlx5_vfio_alloc_page` / `mlx5_vfio_free_page`) and the page commands. Must not:
//! read or write the pages (they are the firmware's while it holds them).
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_satisfy_startup_pages`,
//! `mlx5_vfio_give_pages`, `mlx5_vfio_reclaim_pages`, `mlx5_vfio_teardown_hca`), kernel
//! `drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c` (`give_pages`, `reclaim_pages`,
//! `mlx5_reclaim_startup_pages`).

use std::sync::Arc;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::pages::{
    ManagePagesIn, ManagePagesOpMod, ManagePagesOut, QueryPagesIn, QueryPagesOpMod, QueryPagesOut,
    manage_pages_in_len, manage_pages_out_len,
};

use crate::cmdq::{CmdQueue, input};
use crate::dma::{DmaBuf, DmaMapper, MAX_IOVA_ALIGN, PAGE_SIZE};
use crate::error::{DriverError, Result};

/// Bytes per pool block (rdma-core `MLX5_VFIO_BLOCK_SIZE`).
pub const BLOCK_SIZE: usize = 2 << 20;
/// Pages per block.
const PAGES_PER_BLOCK: usize = BLOCK_SIZE / PAGE_SIZE;
/// Pages per MANAGE_PAGES command (a 4 KiB page list: 9 mailbox blocks).
pub const PAGES_PER_CMD: usize = 512;
/// Most TAKE rounds at teardown before giving up (each returns up to [`PAGES_PER_CMD`]).
const MAX_RECLAIM_ROUNDS: usize = 1 << 16;

struct Block {
    buf: DmaBuf,
    used: [u64; PAGES_PER_BLOCK / 64],
    count: usize,
}

impl Block {
    fn contains(&self, iova: u64) -> bool {
        iova >= self.buf.iova() && iova - self.buf.iova() < BLOCK_SIZE as u64
    }
}

/// Pages lent to the firmware, in 2 MiB DMA blocks.
pub struct PagePool {
    dma: Arc<DmaMapper>,
    blocks: Vec<Block>,
    /// The most pages lent at once (`HcaConfig::max_firmware_pages`).
    budget: usize,
}

impl std::fmt::Debug for PagePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagePool")
            .field("blocks", &self.blocks.len())
            .field("pages", &self.pages_in_use())
            .finish()
    }
}

impl PagePool {
    /// An empty pool allocating from `dma`, with the default budget
    /// ([`DEFAULT_MAX_FIRMWARE_PAGES`](crate::hca::DEFAULT_MAX_FIRMWARE_PAGES)).
    pub fn new(dma: Arc<DmaMapper>) -> Self {
        Self::with_budget(dma, crate::hca::DEFAULT_MAX_FIRMWARE_PAGES)
    }

    /// An empty pool lending at most `budget` pages at once.
    pub fn with_budget(dma: Arc<DmaMapper>, budget: usize) -> Self {
        Self {
            dma,
            blocks: Vec::new(),
            budget,
        }
    }

    /// The most pages this pool lends at once.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Refuses lending `n` more pages when that would pass the budget.
    pub fn check_budget(&self, n: usize) -> Result<()> {
        let held = self.pages_in_use();
        if held.saturating_add(n) > self.budget {
            return Err(DriverError::FirmwarePagesLimit {
                asked: n as u64,
                held: held as u64,
                limit: self.budget as u64,
            });
        }
        Ok(())
    }

    /// Pages handed out and not yet freed.
    pub fn pages_in_use(&self) -> usize {
        self.blocks.iter().map(|b| b.count).sum()
    }

    /// 2 MiB blocks allocated.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// One free page's IOVA, allocating a block if every block is full.
    pub fn alloc_page(&mut self) -> Result<u64> {
        if !self.blocks.iter().any(|b| b.count < PAGES_PER_BLOCK) {
            let buf = self.dma.alloc_aligned(BLOCK_SIZE, MAX_IOVA_ALIGN)?;
            self.blocks.push(Block {
                buf,
                used: [0; PAGES_PER_BLOCK / 64],
                count: 0,
            });
        }
        for b in &mut self.blocks {
            if b.count == PAGES_PER_BLOCK {
                continue;
            }
            for (w, word) in b.used.iter_mut().enumerate() {
                if *word != u64::MAX {
                    let bit = word.trailing_ones() as usize;
                    *word |= 1 << bit;
                    b.count += 1;
                    return Ok(b.buf.iova() + ((w * 64 + bit) * PAGE_SIZE) as u64);
                }
            }
        }
        Err(DriverError::Pages {
            pages: 1,
            reason: "the page pool's bitmaps are inconsistent (a bug)".into(),
        })
    }

    /// Returns a page; frees its block when it was the block's last. Returns false for an
    /// IOVA the pool never handed out (the firmware returned a page it was not given).
    pub fn free_page(&mut self, iova: u64) -> bool {
        let Some(i) = self.blocks.iter().position(|b| b.contains(iova)) else {
            return false;
        };
        let Some(b) = self.blocks.get_mut(i) else {
            return false;
        };
        let idx = ((iova - b.buf.iova()) as usize) / PAGE_SIZE;
        let (w, bit) = (idx / 64, idx % 64);
        let Some(word) = b.used.get_mut(w) else {
            return false;
        };
        if *word & (1 << bit) == 0 || !iova.is_multiple_of(PAGE_SIZE as u64) {
            return false;
        }
        *word &= !(1 << bit);
        b.count -= 1;
        if b.count == 0 {
            // Dropping the DmaBuf unmaps the block, frees its IOVA, then its memory.
            self.blocks.swap_remove(i);
        }
        true
    }
}

/// QUERY_PAGES with `op_mod`: the signed number of pages the firmware wants (positive) or
/// offers back (negative).
pub fn query_pages(cmd: &CmdQueue, op_mod: QueryPagesOpMod) -> Result<i32> {
    let i = input(Opcode::QUERY_PAGES, op_mod.0, QueryPagesIn::LEN);
    let o = cmd.exec(&i, QueryPagesOut::LEN)?;
    let o = QueryPagesOut::new_checked(&o[..]).map_err(|source| DriverError::BadOutput {
        op: Opcode::QUERY_PAGES,
        source,
    })?;
    Ok(o.num_pages_i32())
}

/// Gives `n` pages to the firmware (MANAGE_PAGES GIVE, [`PAGES_PER_CMD`] per command). On a
/// failed command the pages of that command go back to the pool. Refused up front, with
/// nothing given, when `n` more pages would pass the pool's budget.
pub fn give_pages(cmd: &CmdQueue, pool: &mut PagePool, n: usize) -> Result<()> {
    pool.check_budget(n)?;
    let mut left = n;
    while left > 0 {
        let k = left.min(PAGES_PER_CMD);
        let mut pages = Vec::with_capacity(k);
        for _ in 0..k {
            match pool.alloc_page() {
                Ok(p) => pages.push(p),
                Err(e) => {
                    for p in pages {
                        pool.free_page(p);
                    }
                    return Err(e);
                }
            }
        }
        let r = give_input(&pages).and_then(|i| cmd.exec(&i, ManagePagesOut::LEN));
        if let Err(e) = r {
            for p in pages {
                pool.free_page(p);
            }
            return Err(e);
        }
        left -= k;
    }
    tracing::debug!(pages = n, "gave pages to the firmware");
    Ok(())
}

fn give_input(pages: &[u64]) -> Result<Vec<u8>> {
    let mut i = input(
        Opcode::MANAGE_PAGES,
        ManagePagesOpMod::GIVE.0,
        manage_pages_in_len(pages.len()),
    );
    let build = |source| DriverError::BuildInput {
        what: "MANAGE_PAGES GIVE",
        source,
    };
    let mut m = ManagePagesIn::new_checked(&mut i[..]).map_err(build)?;
    m.set_input_num_entries(pages.len() as u32).map_err(build)?;
    for (k, &p) in pages.iter().enumerate() {
        m.set_pas(k, p).map_err(build)?;
    }
    Ok(i)
}

/// Takes up to `n` pages back (MANAGE_PAGES TAKE, [`PAGES_PER_CMD`] per command) and frees
/// them in the pool. Returns how many came back (fewer when the firmware has no more to give).
pub fn take_pages(cmd: &CmdQueue, pool: &mut PagePool, n: usize) -> Result<usize> {
    let mut got = 0;
    while got < n {
        let k = (n - got).min(PAGES_PER_CMD);
        let mut i = input(
            Opcode::MANAGE_PAGES,
            ManagePagesOpMod::TAKE.0,
            ManagePagesIn::LEN,
        );
        ManagePagesIn::new_checked(&mut i[..])
            .and_then(|mut m| m.set_input_num_entries(k as u32).map(|_| ()))
            .map_err(|source| DriverError::BuildInput {
                what: "MANAGE_PAGES TAKE",
                source,
            })?;
        let o = cmd.exec(&i, manage_pages_out_len(k))?;
        let bad = |source| DriverError::BadOutput {
            op: Opcode::MANAGE_PAGES,
            source,
        };
        let o = ManagePagesOut::new_checked(&o[..]).map_err(bad)?;
        let returned = (o.output_num_entries() as usize).min(k);
        for j in 0..returned {
            let p = o.pas(j).map_err(bad)?;
            if !pool.free_page(p) {
                tracing::warn!(iova = p, "the firmware returned a page it was never given");
            }
        }
        got += returned;
        if returned < k {
            break;
        }
    }
    tracing::debug!(pages = got, "took pages back from the firmware");
    Ok(got)
}

/// Answers QUERY_PAGES `op_mod` (boot or init: rdma-core `mlx5_vfio_satisfy_startup_pages`):
/// gives what it asks for.
pub fn satisfy(cmd: &CmdQueue, pool: &mut PagePool, op_mod: QueryPagesOpMod) -> Result<()> {
    let n = query_pages(cmd, op_mod)?;
    if n > 0 {
        give_pages(cmd, pool, n as usize)?;
    }
    Ok(())
}

/// Answers a page request of `n` pages (positive: give, negative: take), as a PAGE_REQUEST
/// event announces it. A give the budget or the host refuses is reported to the firmware
/// with MANAGE_PAGES ALLOC_FAIL, so it stops asking (kernel `page_notify_fail`), and the
/// error is returned; the pages already lent stay lent.
pub fn answer_request(cmd: &CmdQueue, pool: &mut PagePool, n: i64) -> Result<()> {
    if n > 0 {
        let r = give_pages(cmd, pool, usize::try_from(n).unwrap_or(usize::MAX));
        if let Err(e) = &r
            && !matches!(e, DriverError::CmdFailed { .. })
        {
            let fail = input(
                Opcode::MANAGE_PAGES,
                ManagePagesOpMod::ALLOC_FAIL.0,
                manage_pages_in_len(0),
            );
            if let Err(f) = cmd.exec(&fail, ManagePagesOut::LEN) {
                tracing::warn!(error = %f, "MANAGE_PAGES ALLOC_FAIL failed");
            }
        }
        r
    } else if n < 0 {
        take_pages(
            cmd,
            pool,
            usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX),
        )
        .map(|_| ())
    } else {
        Ok(())
    }
}

/// Takes back every page the firmware holds, until QUERY_PAGES (regular) says none are left
/// to return (kernel `mlx5_reclaim_startup_pages` after TEARDOWN_HCA).
pub fn reclaim_all(cmd: &CmdQueue, pool: &mut PagePool) -> Result<()> {
    for _ in 0..MAX_RECLAIM_ROUNDS {
        let n = query_pages(cmd, QueryPagesOpMod::REGULAR)?;
        if n >= 0 {
            return Ok(());
        }
        let want = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
        if take_pages(cmd, pool, want)? == 0 {
            return Err(DriverError::Pages {
                pages: i64::from(n),
                reason: "the firmware reports pages to return but TAKE returned none".into(),
            });
        }
    }
    Err(DriverError::Pages {
        pages: pool.pages_in_use() as i64,
        reason: "the firmware kept offering pages back; giving up on reclaiming".into(),
    })
}

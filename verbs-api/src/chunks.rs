//! Which chunks of a pool are leased: an atomic bitmap, so a chunk is taken and given back
//! from any thread without a lock or an allocation.
//!
//! Owns: [`Chunks`]. Must not: know what a chunk holds or where it lies (the host pool,
//! `pool.rs`, and the device pool, `device_pool.rs`, map indices to their memory), or hand
//! out an index twice: a set bit is the one claim on its chunk.
//!
//! Ordering: taking a chunk is an Acquire compare-exchange on its word and giving it back a
//! Release `fetch_and`, so whatever the previous holder wrote to the chunk happens before
//! the next holder's accesses (the bitmap is the only synchronisation between them). Bits
//! past the chunk count in the last word stay set, so they are never handed out. The search
//! starts at a hint (the word of the last take), which any value keeps correct.
//!
//! Sources: ixy.rs's `Mempool` (fixed-size buffers of one region, returned on drop), with an
//! atomic bitmap in place of its locked free stack.

use std::sync::atomic::{AtomicU64, Ordering};

/// `count` chunks, each free or leased.
pub(crate) struct Chunks {
    count: usize,
    /// One bit per chunk, set while it is leased.
    used: Box<[AtomicU64]>,
    /// Where the next search starts (a hint; any value is correct).
    hint: AtomicU64,
}

impl Chunks {
    /// `count` free chunks (`count > 0`).
    pub(crate) fn new(count: usize) -> Self {
        let words = count.div_ceil(64);
        let used: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        // Bits past `count` in the last word are set so they are never handed out.
        if let Some(last) = used.last() {
            let tail = count % 64;
            if tail != 0 {
                last.store(!0u64 << tail, Ordering::Relaxed);
            }
        }
        Chunks {
            count,
            used,
            hint: AtomicU64::new(0),
        }
    }

    /// How many chunks there are.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Takes a free chunk; `None` when every chunk is leased. Lock-free, no allocation.
    #[inline]
    pub(crate) fn take(&self) -> Option<usize> {
        let words = self.used.len();
        if words == 0 {
            return None;
        }
        let start = (self.hint.load(Ordering::Relaxed) as usize) % words;
        for k in 0..words {
            let w = (start + k) % words;
            let Some(word) = self.used.get(w) else {
                continue;
            };
            let mut cur = word.load(Ordering::Relaxed);
            while cur != u64::MAX {
                let bit = (!cur).trailing_zeros();
                // Acquire: pairs with the Release in `give`, so the previous holder's writes
                // to the chunk happen before ours.
                match word.compare_exchange_weak(
                    cur,
                    cur | 1 << bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.hint.store(w as u64, Ordering::Relaxed);
                        return Some(w * 64 + bit as usize);
                    }
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    /// Gives chunk `index` back (one [`Chunks::take`] returned).
    #[inline]
    pub(crate) fn give(&self, index: usize) {
        if let Some(w) = self.used.get(index / 64) {
            // Release: our writes to the chunk happen before the next lessee's (Acquire).
            w.fetch_and(!(1u64 << (index % 64)), Ordering::Release);
        }
    }

    /// How many chunks are leased now.
    pub(crate) fn leased(&self) -> usize {
        let ones: u32 = self
            .used
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum();
        let padding = self.used.len() * 64 - self.count;
        (ones as usize).saturating_sub(padding)
    }
}

//! A counting global allocator: the system allocator plus one relaxed atomic add per
//! allocation and free, so that `bypass perf qp-scale` can measure the heap bytes a QP costs,
//! driver and sim together (both live in this process).
//!
//! Owns: [`Counting`] and [`live_bytes`]. Must not: allocate, lock or do anything but count;
//! the data path's steady state allocates nothing, so the benchmarks that time it are not
//! affected.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Heap bytes allocated and not yet freed (requested sizes, not the allocator's rounding).
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting the bytes it has out.
pub struct Counting;

// SAFETY: every call forwards to `System` with the same arguments; the counter does not
// touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

/// Heap bytes live now.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

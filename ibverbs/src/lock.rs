//! The per-object lock the verbs ABI forces: libibverbs lets any thread post to a QP or poll
//! a CQ, so the driver's `&mut` object behind a C handle is taken under a spin lock.
//!
//! Owns: [`SpinCell`], an uncontended compare-and-swap and a release store around each
//! access (what rdma-core's mlx5 provider does with `mlx5_spin_lock` on every post and poll,
//! unless `MLX5_SINGLE_THREADED` is set), and its guardless form (`lock_raw` / `get_raw` /
//! `unlock_raw`) for a hold that spans C calls: the extended post holds a QP from
//! `ibv_wr_start` to `ibv_wr_complete`, as mlx5 holds `sq.lock`.
//! Must not: be held across a blocking wait (completion-channel reads, firmware commands
//! that wait for an interrupt run on objects that are not posted to concurrently).
//!
//! Sources: rdma-core `providers/mlx5/mlx5.h` (`mlx5_spin_lock`/`mlx5_spin_unlock`).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A value reached by one thread at a time.
pub(crate) struct SpinCell<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a `SpinGuard`, which the flag makes exclusive;
// moving it between threads needs `T: Send`, as a `Mutex<T>` does.
unsafe impl<T: Send> Sync for SpinCell<T> {}

impl<T> SpinCell<T> {
    /// A cell holding `value`, unlocked.
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Waits (spinning) until no other thread holds the value, then holds it.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        SpinGuard { cell: self }
    }

    /// Holds the value as [`SpinCell::lock`] does, but with no guard: for a hold that spans
    /// several C calls (`ibv_wr_start` … `ibv_wr_complete`, as mlx5's `sq.lock`). The
    /// caller must end it with exactly one [`SpinCell::unlock_raw`] on the same thread and
    /// reach the value only through [`SpinCell::get_raw`] in between.
    #[inline]
    pub(crate) fn lock_raw(&self) {
        core::mem::forget(self.lock());
    }

    /// The value, while held through [`SpinCell::lock_raw`].
    ///
    /// # Safety
    /// This thread holds the cell through `lock_raw` (not yet `unlock_raw`), and no other
    /// reference to the value obtained this way is live.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_raw(&self) -> &mut T {
        // SAFETY: the caller's contract: the flag is this thread's, the reference unique.
        unsafe { &mut *self.value.get() }
    }

    /// Ends a hold taken by [`SpinCell::lock_raw`].
    ///
    /// # Safety
    /// This thread holds the cell through `lock_raw`, and no reference from
    /// [`SpinCell::get_raw`] outlives this call.
    #[inline]
    pub(crate) unsafe fn unlock_raw(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Exclusive access to a [`SpinCell`]'s value until dropped.
pub(crate) struct SpinGuard<'a, T> {
    cell: &'a SpinCell<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard's existence means this thread set the flag and no other guard
        // exists.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.cell.locked.store(false, Ordering::Release);
    }
}

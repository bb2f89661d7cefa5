//! The fabric's locks, taken as its threads take them: a panic in one thread (a test's
//! assertion inside `with_device`, say) must not wedge the others, so a poisoned lock is
//! taken as it is.
//!
//! Owns: [`lock`] and [`try_lock`]. Must not: hold a lock itself.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Locks `m`, poisoned or not.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `m` if no other thread holds it (poisoned or not); `None` if one does.
pub(super) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

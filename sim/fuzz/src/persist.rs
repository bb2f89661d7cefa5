//! Persistent fuzz worlds: brought up once per process, snapshotted, and reset to the
//! snapshot before every input, so an input costs a reset (a copy of the device state and
//! of host memory) instead of a bring-up, and every input starts from the same state (a
//! finding replays from its file alone).
//!
//! Owns: [`Resettable`] (what can be snapshotted and reset: a `Raw`, a `Nic`, a `Pair`) and
//! [`Persistent`] (a world and its snapshot). Must not: let one input see what another did.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::common::pair::{Nic, NicSnapshot, Pair, PairSnapshot};
use crate::common::{Raw, RawSnapshot};

/// A world that can be snapshotted and put back.
pub trait Resettable {
    /// What a snapshot holds.
    type Snapshot;
    /// The world now.
    fn snapshot(&self) -> Self::Snapshot;
    /// Back to `snap` (taken of this world).
    fn reset_to(&mut self, snap: &Self::Snapshot);
}

impl Resettable for Raw {
    type Snapshot = RawSnapshot;
    fn snapshot(&self) -> RawSnapshot {
        Raw::snapshot(self)
    }
    fn reset_to(&mut self, snap: &RawSnapshot) {
        Raw::reset_to(self, snap)
    }
}

impl Resettable for Nic {
    type Snapshot = NicSnapshot;
    fn snapshot(&self) -> NicSnapshot {
        Nic::snapshot(self)
    }
    fn reset_to(&mut self, snap: &NicSnapshot) {
        Nic::reset_to(self, snap)
    }
}

impl Resettable for Pair {
    type Snapshot = PairSnapshot;
    fn snapshot(&self) -> PairSnapshot {
        Pair::snapshot(self)
    }
    fn reset_to(&mut self, snap: &PairSnapshot) {
        Pair::reset_to(self, snap)
    }
}

/// A world built once and the snapshot every input starts from.
pub struct Persistent<W: Resettable> {
    world: W,
    snap: W::Snapshot,
}

impl<W: Resettable> Persistent<W> {
    /// Snapshots `world` as the state every input starts from.
    pub fn new(world: W) -> Self {
        let snap = world.snapshot();
        Self { world, snap }
    }

    /// Resets the world to the snapshot, then runs `f` on it.
    pub fn run<R>(&mut self, f: impl FnOnce(&mut W) -> R) -> R {
        self.world.reset_to(&self.snap);
        f(&mut self.world)
    }
}

/// The thread's persistent world in `cell`, built by `make` on first use, reset and handed
/// to `f` (libFuzzer runs inputs on one thread, one after the other).
pub fn with<W: Resettable + 'static, R>(
    cell: &'static LocalKey<RefCell<Option<Persistent<W>>>>,
    make: impl FnOnce() -> W,
    f: impl FnOnce(&mut W) -> R,
) -> R {
    cell.with(|c| {
        let mut c = c.borrow_mut();
        let p = c.get_or_insert_with(|| Persistent::new(make()));
        p.run(f)
    })
}

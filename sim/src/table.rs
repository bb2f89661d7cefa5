//! Object tables: numbered objects with a capacity from the device's capabilities.
//!
//! Owns: [`Table`], number allocation (lowest free number from a base, like firmware handing
//! out QPNs/CQNs), lookup, and removal. Must not: know what the objects are.
//!
//! Numbers are handed out lowest-free-first, so the live numbers stay dense: the table is a
//! vector indexed by `number - base` (a lookup on the data path is one bounds check, not a
//! tree search), trimmed when its highest objects go. The free numbers below the highest live
//! one are kept in a min-heap, so an insertion is O(log holes) (O(1) amortised while there are
//! none: a push at the high-water mark), never a scan of the table: creating the 64k-th QP
//! costs what the first did. Nothing is sized by the capacity up front.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Numbered objects of one kind.
#[derive(Debug, Clone)]
pub struct Table<T> {
    /// Slot `i` holds the object numbered `base + i`.
    slots: Vec<Option<T>>,
    /// Objects present.
    count: usize,
    /// Slot indices freed below the last slot, lowest first. Invariant: every index in it
    /// below `slots.len()` names an empty slot; indices at or above it (left by trimming) are
    /// stale and dropped when met.
    holes: BinaryHeap<Reverse<usize>>,
    base: u32,
    capacity: u32,
    limit: u32,
}

impl<T> Table<T> {
    /// A table whose numbers start at `base`, holding at most `capacity` objects, with numbers
    /// below `limit` (exclusive; e.g. 1 << 24 for a 24-bit QPN).
    pub fn new(base: u32, capacity: u32, limit: u32) -> Self {
        Self {
            slots: Vec::new(),
            count: 0,
            holes: BinaryHeap::new(),
            base,
            capacity,
            limit,
        }
    }

    /// The slot index of number `n`, if `n` is at or above the base.
    fn index(&self, n: u32) -> Option<usize> {
        usize::try_from(n.checked_sub(self.base)?).ok()
    }

    /// Inserts `make(number)` under the lowest free number; `None` when full.
    pub fn insert_with(&mut self, make: impl FnOnce(u32) -> T) -> Option<u32> {
        if self.count as u64 >= u64::from(self.capacity) {
            return None;
        }
        // The lowest hole, if any is left below the last slot; else the high-water mark.
        while let Some(&Reverse(h)) = self.holes.peek() {
            if h < self.slots.len() && self.slots[h].is_none() {
                break;
            }
            self.holes.pop();
        }
        let i = self.holes.peek().map_or(self.slots.len(), |&Reverse(h)| h);
        let n = u32::try_from(i).ok()?.checked_add(self.base)?;
        if n >= self.limit {
            return None;
        }
        let item = Some(make(n));
        match self.slots.get_mut(i) {
            Some(slot) => {
                self.holes.pop();
                *slot = item;
            }
            None => self.slots.push(item),
        }
        self.count += 1;
        Some(n)
    }

    /// The object numbered `n`.
    #[inline]
    pub fn get(&self, n: u32) -> Option<&T> {
        self.slots.get(self.index(n)?)?.as_ref()
    }

    /// The object numbered `n`, writable.
    #[inline]
    pub fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        let i = self.index(n)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// Removes and returns the object numbered `n`.
    pub fn remove(&mut self, n: u32) -> Option<T> {
        let i = self.index(n)?;
        let item = self.slots.get_mut(i)?.take()?;
        self.count -= 1;
        if i + 1 == self.slots.len() {
            // The holes this uncovers at the end go with the slots; their heap entries are
            // now stale (at or above the length) and are dropped when met.
            while matches!(self.slots.last(), Some(None)) {
                self.slots.pop();
            }
        } else {
            self.holes.push(Reverse(i));
        }
        Some(item)
    }

    /// True if `n` names an object.
    pub fn contains(&self, n: u32) -> bool {
        self.get(n).is_some()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if empty.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Objects in number order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.iter_from(self.base)
    }

    /// Objects numbered `n` or above, in number order.
    pub fn iter_from(&self, n: u32) -> impl Iterator<Item = (u32, &T)> {
        let base = self.base;
        let skip = n.saturating_sub(base) as usize;
        self.slots
            .iter()
            .enumerate()
            .skip(skip)
            .filter_map(move |(i, s)| Some((base.wrapping_add(i as u32), s.as_ref()?)))
    }

    /// Objects in number order, writable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, s)| Some((base.wrapping_add(i as u32), s.as_mut()?)))
    }

    /// Removes every object.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.holes.clear();
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free_number_within_capacity_and_limit() {
        let mut t = Table::new(2, 3, 100);
        assert_eq!(t.insert_with(|n| n), Some(2));
        assert_eq!(t.insert_with(|n| n), Some(3));
        assert_eq!(t.insert_with(|n| n), Some(4));
        assert_eq!(t.insert_with(|n| n), None, "capacity");
        t.remove(3);
        assert_eq!(t.insert_with(|n| n), Some(3), "reuses the hole");
        let mut small = Table::new(0, 10, 2);
        small.insert_with(|_| ());
        small.insert_with(|_| ());
        assert_eq!(small.insert_with(|_| ()), None, "limit");
    }

    #[test]
    fn holes_are_refilled_lowest_first_and_trimming_leaves_no_stale_number() {
        let mut t = Table::new(0, 1 << 20, 1 << 24);
        for _ in 0..10 {
            t.insert_with(|n| n);
        }
        for n in [7, 2, 5, 9, 8] {
            t.remove(n);
        }
        // 9 and 8 were the last: trimmed with 7, which became the end.
        assert_eq!(t.slots.len(), 7);
        let got: Vec<_> = (0..5).filter_map(|_| t.insert_with(|n| n)).collect();
        assert_eq!(
            got,
            vec![2, 5, 7, 8, 9],
            "holes first, lowest first, then the end"
        );
        for n in 0..10 {
            assert_eq!(t.get(n), Some(&n));
        }
        // Many objects, many holes: every insertion takes the lowest free number.
        for n in 10..50_000 {
            assert_eq!(t.insert_with(|k| k), Some(n));
        }
        for n in (0..50_000).step_by(3) {
            t.remove(n);
        }
        for n in (0..50_000).step_by(3) {
            assert_eq!(t.insert_with(|k| k), Some(n));
        }
        assert_eq!(t.len(), 50_000);
        assert_eq!(t.insert_with(|k| k), Some(50_000));
    }

    #[test]
    fn lookups_iteration_and_removal_follow_the_numbers() {
        let mut t = Table::new(2, 10, 100);
        for _ in 0..4 {
            t.insert_with(|n| n * 10);
        }
        assert_eq!(
            (t.get(1), t.get(2), t.get(5), t.get(6)),
            (None, Some(&20), Some(&50), None)
        );
        assert_eq!(t.remove(3), Some(30));
        assert_eq!(t.remove(3), None);
        assert!(!t.contains(3));
        assert_eq!(t.len(), 3);
        let all: Vec<_> = t.iter().map(|(n, v)| (n, *v)).collect();
        assert_eq!(all, vec![(2, 20), (4, 40), (5, 50)]);
        let tail: Vec<_> = t.iter_from(3).map(|(n, _)| n).collect();
        assert_eq!(tail, vec![4, 5]);
        if let Some(v) = t.get_mut(4) {
            *v = 41;
        }
        for (_, v) in t.iter_mut() {
            *v += 1;
        }
        assert_eq!(t.get(4), Some(&42));
        assert_eq!(t.remove(5), Some(51));
        assert_eq!(t.remove(4), Some(42));
        assert_eq!(
            t.insert_with(|n| n),
            Some(3),
            "the lowest free number again"
        );
        t.clear();
        assert!(t.is_empty() && t.get(2).is_none());
    }
}

//! Object tables: numbered objects with a capacity from the device's capabilities.
//!
//! Owns: [`Table`], number allocation (lowest free number from a base, like firmware handing
//! out QPNs/CQNs), lookup, and removal. Must not: know what the objects are.

use std::collections::BTreeMap;

/// Numbered objects of one kind.
#[derive(Debug, Clone)]
pub struct Table<T> {
    items: BTreeMap<u32, T>,
    base: u32,
    capacity: u32,
    limit: u32,
}

impl<T> Table<T> {
    /// A table whose numbers start at `base`, holding at most `capacity` objects, with numbers
    /// below `limit` (exclusive; e.g. 1 << 24 for a 24-bit QPN).
    pub fn new(base: u32, capacity: u32, limit: u32) -> Self {
        Self {
            items: BTreeMap::new(),
            base,
            capacity,
            limit,
        }
    }

    /// Inserts `make(number)` under the lowest free number; `None` when full.
    pub fn insert_with(&mut self, make: impl FnOnce(u32) -> T) -> Option<u32> {
        if self.items.len() as u64 >= u64::from(self.capacity) {
            return None;
        }
        let mut n = self.base;
        for &k in self.items.keys() {
            if k > n {
                break;
            }
            n = k + 1;
        }
        if n >= self.limit {
            return None;
        }
        self.items.insert(n, make(n));
        Some(n)
    }

    /// The object numbered `n`.
    pub fn get(&self, n: u32) -> Option<&T> {
        self.items.get(&n)
    }

    /// The object numbered `n`, writable.
    pub fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        self.items.get_mut(&n)
    }

    /// Removes and returns the object numbered `n`.
    pub fn remove(&mut self, n: u32) -> Option<T> {
        self.items.remove(&n)
    }

    /// True if `n` names an object.
    pub fn contains(&self, n: u32) -> bool {
        self.items.contains_key(&n)
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Objects in number order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items.iter().map(|(k, v)| (*k, v))
    }

    /// Objects numbered `n` or above, in number order.
    pub fn iter_from(&self, n: u32) -> impl Iterator<Item = (u32, &T)> {
        self.items.range(n..).map(|(k, v)| (*k, v))
    }

    /// Objects in number order, writable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.items.iter_mut().map(|(k, v)| (*k, v))
    }

    /// Removes every object.
    pub fn clear(&mut self) {
        self.items.clear();
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
}

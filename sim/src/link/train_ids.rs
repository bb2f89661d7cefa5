//! The ICRC differences a UDP link applies to the segments of a segmented send: segment `k`
//! of a train leaves with IPv4 ID `k` (`inet_gso_segment` numbers the segments up from the
//! first's ID 0), and its ICRC, computed with ID 0, is XORed with `delta(k)` for its length
//! (see `link::ipv4_id` for why that is exact).
//!
//! Owns: [`TrainDeltas`], a small table of `delta(k)` for `k` below the most segments of one
//! send, per UDP payload length, so that re-stamping a segment costs one look-up (the
//! solver's per-length table sits behind a `HashMap`, hashed per call). Must not: touch
//! sockets or headers, or solve received IDs (`link::ipv4_id` does; the receive path asks it).

use super::ipv4_id::Ipv4IdSolver;

/// IDs the table holds: a segmented send has at most this many segments (Linux
/// `UDP_MAX_SEGMENTS`, the link's `GSO_MAX_SEGS`).
pub(crate) const TRAIN_IDS: usize = 64;

/// Lengths kept at once: a sending flow has a handful (full packets, a WRITE_FIRST with its
/// RETH, a message's last packet, ACKs).
const SLOTS: usize = 4;

/// `delta(k)` for `k < TRAIN_IDS` of one UDP payload length.
#[derive(Debug, Clone, Copy)]
struct Slot {
    len: usize,
    deltas: [u32; TRAIN_IDS],
}

/// `delta(id)` of the last few lengths sent, for the IDs of one segmented send.
#[derive(Debug, Default)]
pub(crate) struct TrainDeltas {
    slots: [Option<Slot>; SLOTS],
    /// The slot the next new length replaces (round robin).
    next: usize,
    /// The slot the last look-up used (a train's segments have one length but its last).
    hot: usize,
}

impl TrainDeltas {
    /// `delta(id)` for UDP payloads of `len` bytes: from the table when `id` is below
    /// [`TRAIN_IDS`] (built from the solver's single-bit values the first time `len` is
    /// seen), else from `solver` directly. `None` as the solver gives it (a length it has no
    /// table for).
    #[inline]
    pub(crate) fn delta(&mut self, solver: &mut Ipv4IdSolver, len: usize, id: u16) -> Option<u32> {
        if let Some(Some(s)) = self.slots.get(self.hot)
            && s.len == len
            && let Some(d) = s.deltas.get(usize::from(id))
        {
            return Some(*d);
        }
        self.delta_slow(solver, len, id)
    }

    /// [`TrainDeltas::delta`] when the last slot used is not for `len` or `id` is beyond it.
    #[inline(never)]
    fn delta_slow(&mut self, solver: &mut Ipv4IdSolver, len: usize, id: u16) -> Option<u32> {
        let k = usize::from(id);
        if k >= TRAIN_IDS {
            return solver.delta(len, id);
        }
        if let Some(at) = self
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.len == len))
        {
            self.hot = at;
            return self.slots.get(at)?.as_ref()?.deltas.get(k).copied();
        }
        // delta is linear in the ID's bits: delta(k) = delta(k without its lowest set bit)
        // ^ delta(that bit).
        let mut bits = [0u32; 6];
        for (b, d) in bits.iter_mut().enumerate() {
            *d = solver.delta(len, 1 << b)?;
        }
        let mut deltas = [0u32; TRAIN_IDS];
        for j in 1..TRAIN_IDS {
            let low = j.trailing_zeros() as usize;
            let rest = deltas.get(j & (j - 1)).copied().unwrap_or(0);
            let bit = bits.get(low).copied().unwrap_or(0);
            if let Some(d) = deltas.get_mut(j) {
                *d = rest ^ bit;
            }
        }
        let slot = self.slots.get_mut(self.next)?;
        *slot = Some(Slot { len, deltas });
        self.hot = self.next;
        self.next = (self.next + 1) % SLOTS;
        deltas.get(k).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_train_id_gets_the_solvers_delta_for_each_length() {
        let (mut table, mut solver, mut check) = (
            TrainDeltas::default(),
            Ipv4IdSolver::new(),
            Ipv4IdSolver::new(),
        );
        // More lengths than slots, revisited: replaced slots are rebuilt the same.
        for round in 0..2 {
            for len in [20usize, 36, 4112, 4128, 1000, 61] {
                for id in (0..TRAIN_IDS as u16).chain([64, 65, 1000, u16::MAX]) {
                    assert_eq!(
                        table.delta(&mut solver, len, id),
                        check.delta(len, id),
                        "round {round}, length {len}, id {id}"
                    );
                }
            }
        }
        // Two lengths the last round left in the table, in turn: each look-up finds its
        // length in a slot other than the one used last (`hot`).
        for id in (0..TRAIN_IDS as u16).chain([64, u16::MAX]) {
            for len in [4112usize, 1000] {
                let (hot, next) = (table.hot, table.next);
                assert_eq!(table.delta(&mut solver, len, id), check.delta(len, id));
                if usize::from(id) < TRAIN_IDS {
                    assert_ne!(table.hot, hot, "length {len} id {id} is in another slot");
                }
                assert_eq!(table.next, next, "length {len} is kept, not built again");
            }
        }
    }
}

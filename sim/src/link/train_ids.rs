//! The ICRC differences a UDP link applies for the IPv4 IDs its packets leave with: segment
//! `k` of a train leaves with the send's ID + `k` (`inet_gso_segment` numbers the segments up
//! from the first's: 0 on an unconnected socket, the socket's counted ID on a connected one,
//! `link::connected`), and its ICRC, computed with ID 0, is XORed with `delta(id)` for its
//! length (see `link::ipv4_id` for why that is exact). The receive side checks a connected
//! peer's guessed IDs with the same table.
//!
//! Owns: [`TrainDeltas`], `delta(id)` of every 16-bit ID for the last few UDP payload
//! lengths, as two 256-entry tables per length (`delta` is linear in the ID's bits:
//! `delta(id) = lo[id & 0xff] ^ hi[id >> 8]`), so that re-stamping a packet costs two
//! look-ups (the solver's per-length table sits behind a `HashMap`, hashed per call, and
//! XORs up to 16 values). Must not: touch sockets or headers, or solve received IDs
//! (`link::ipv4_id` does; the receive path asks it).

use super::ipv4_id::Ipv4IdSolver;

/// Lengths kept at once: a sending flow has a handful (full packets, a WRITE_FIRST with its
/// RETH, a message's last packet, ACKs).
const SLOTS: usize = 4;

/// `delta(id)` of one UDP payload length, for every ID: the low byte's and the high byte's.
#[derive(Debug, Clone)]
struct Slot {
    lo: [u32; 256],
    hi: [u32; 256],
}

impl Slot {
    #[inline]
    fn delta(&self, id: u16) -> Option<u32> {
        let [h, l] = id.to_be_bytes();
        Some(self.lo.get(usize::from(l))? ^ self.hi.get(usize::from(h))?)
    }
}

/// `delta(id)` of the last few lengths sent or received, for any ID.
#[derive(Debug, Default)]
pub(crate) struct TrainDeltas {
    /// Each slot's length (0: empty), side by side: a look-up scans these, not the boxes (a
    /// round trip alternates two lengths, a WRITE's and an ACK's).
    lens: [usize; SLOTS],
    slots: [Option<Box<Slot>>; SLOTS],
    /// The slot the next new length replaces (round robin).
    next: usize,
}

impl TrainDeltas {
    /// `delta(id)` for UDP payloads of `len` bytes, from the table (built from the solver's
    /// single-bit values the first time `len` is seen). `None` as the solver gives it (a
    /// length it has no table for).
    #[inline]
    pub(crate) fn delta(&mut self, solver: &mut Ipv4IdSolver, len: usize, id: u16) -> Option<u32> {
        if len != 0
            && let Some(at) = self.lens.iter().position(|&l| l == len)
            && let Some(Some(s)) = self.slots.get(at)
        {
            return s.delta(id);
        }
        self.delta_slow(solver, len, id)
    }

    /// [`TrainDeltas::delta`] of a length no slot holds: its tables are built into the next
    /// slot.
    #[inline(never)]
    fn delta_slow(&mut self, solver: &mut Ipv4IdSolver, len: usize, id: u16) -> Option<u32> {
        // delta is linear in the ID's bits: delta(j) = delta(j without its lowest set bit)
        // ^ delta(that bit), for each byte's 256 values.
        let mut slot = Box::new(Slot {
            lo: [0; 256],
            hi: [0; 256],
        });
        for (shift, table) in [(0u32, &mut slot.lo), (8, &mut slot.hi)] {
            let mut bits = [0u32; 8];
            for (b, d) in (0u32..).zip(bits.iter_mut()) {
                *d = solver.delta(len, 1 << (b + shift))?;
            }
            for j in 1..256usize {
                let low = j.trailing_zeros() as usize;
                let rest = table.get(j & (j - 1)).copied().unwrap_or(0);
                let bit = bits.get(low).copied().unwrap_or(0);
                if let Some(d) = table.get_mut(j) {
                    *d = rest ^ bit;
                }
            }
        }
        let d = slot.delta(id);
        *self.slots.get_mut(self.next)? = Some(slot);
        *self.lens.get_mut(self.next)? = len;
        self.next = (self.next + 1) % SLOTS;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most segments of one segmented send (Linux `UDP_MAX_SEGMENTS`): a train's IDs.
    const TRAIN_IDS: usize = 64;

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
                for id in (0..TRAIN_IDS as u16).chain([64, 65, 256, 1000, 0xbeef, u16::MAX]) {
                    assert_eq!(
                        table.delta(&mut solver, len, id),
                        check.delta(len, id),
                        "round {round}, length {len}, id {id}"
                    );
                }
            }
        }
        // Two lengths the last round left in the table, in turn: each is found in its slot.
        for id in (0..TRAIN_IDS as u16).chain([64, u16::MAX]) {
            for len in [4112usize, 1000] {
                let next = table.next;
                assert_eq!(table.delta(&mut solver, len, id), check.delta(len, id));
                assert_eq!(table.next, next, "length {len} is kept, not built again");
            }
        }
    }
}

//! Seeded link faults as a packet rule: drop, duplicate, reorder, corrupt, delay, and cutting
//! the link, for the stepped [`World`](crate::world::World) and the UDP link alike.
//!
//! Owns: [`FaultPlan`] (what may happen to packets sent by one device, by rate or by
//! schedule), [`Faults`] (the plans per sending device and what they did, [`FaultStats`]; a
//! [`Rule`]) and [`Fate`] (what happens to one packet). Every random choice is drawn from the
//! RNG the link hands the rule (the world's seeded one), and only for rates that are not zero,
//! so a world without faults draws exactly what it drew before faults existed, and the same
//! seed replays the same faults. Must not: parse packets beyond finding the bytes a corruption
//! may flip, or route.
//!
//! Corruption flips one bit from the BTH's destination QP (byte 5) to the end of the ICRC:
//! bits the ICRC covers and that do not change how the packet parses (the opcode and pad
//! count would, and the fields the ICRC masks — IP TTL/TOS/checksum, UDP checksum, the BTH
//! reserved byte — would go unnoticed), so the receiver's ICRC
//! check drops the packet and counts `rx_icrc_errors` — what a real corrupted RoCE packet that
//! got past the Ethernet FCS would do (rxe `rxe_icrc_check`).

use bypass_hw::roce::ip::{IPV4_HDR_LEN, IPV6_HDR_LEN, UDP_HDR_LEN};
use rand_core::RngCore;

use crate::link::rule::{Packet, Rule, Verdict};

/// A probability in parts per million.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(u32);

impl Rate {
    /// Never.
    pub const NEVER: Self = Self(0);
    /// Always.
    pub const ALWAYS: Self = Self(1_000_000);

    /// `ppm` in a million (capped at a million).
    pub const fn per_million(ppm: u32) -> Self {
        Self(if ppm > 1_000_000 { 1_000_000 } else { ppm })
    }

    /// `pct` percent (capped at 100).
    pub const fn percent(pct: u32) -> Self {
        Self::per_million(pct.saturating_mul(10_000))
    }

    /// Parts per million.
    pub const fn ppm(self) -> u32 {
        self.0
    }

    /// True if the rate is zero (nothing is drawn for it).
    pub const fn is_never(self) -> bool {
        self.0 == 0
    }

    /// Draws once from `rng` (only when the rate is neither never nor always).
    fn hit<R: RngCore + ?Sized>(self, rng: &mut R) -> bool {
        match self.0 {
            0 => false,
            1_000_000.. => true,
            p => rng.next_u32() % 1_000_000 < p,
        }
    }
}

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The packet is lost.
    Drop,
    /// The packet arrives twice (the copy [`FaultPlan::duplicate_gap_ns`] later).
    Duplicate,
    /// The packet is held back [`FaultPlan::reorder_ns`], behind packets sent after it.
    Reorder,
    /// One bit of the packet is flipped (the receiver's ICRC check catches it).
    Corrupt,
    /// The packet arrives this many ns late.
    Delay(u64),
}

/// When a scheduled fault applies, counted per sending device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The packet with this index (0 = the first packet the device sends once the plan is set).
    Packet(u64),
    /// Every packet from this index on (a link cut after N packets).
    PacketsFrom(u64),
    /// Every n-th packet: indices n - 1, 2n - 1, … (0: none).
    Every(u64),
    /// Every packet sent in `[from_ns, until_ns)` of virtual time (`u64::MAX`: for ever).
    Window {
        /// Start (inclusive), virtual ns.
        from_ns: u64,
        /// End (exclusive), virtual ns.
        until_ns: u64,
    },
}

impl Trigger {
    fn matches(self, index: u64, now: u64) -> bool {
        match self {
            Self::Packet(i) => index == i,
            Self::PacketsFrom(i) => index >= i,
            Self::Every(n) => n > 0 && (index + 1).is_multiple_of(n),
            Self::Window { from_ns, until_ns } => (from_ns..until_ns).contains(&now),
        }
    }
}

/// A fault applied on a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// When.
    pub when: Trigger,
    /// What.
    pub fault: Fault,
}

/// What may happen to the packets one device sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    /// Chance each packet is lost.
    pub drop: Rate,
    /// Chance each packet arrives twice.
    pub duplicate: Rate,
    /// Chance each packet is held back behind later ones.
    pub reorder: Rate,
    /// Chance each packet has a bit flipped.
    pub corrupt: Rate,
    /// Chance each packet is delayed by [`FaultPlan::delay_ns`].
    pub delay: Rate,
    /// The extra delay of a delayed packet.
    pub delay_ns: u64,
    /// How long a reordered packet is held back.
    pub reorder_ns: u64,
    /// How much later a duplicate arrives than the original.
    pub duplicate_gap_ns: u64,
    /// Faults on a schedule, applied on top of the rates.
    pub schedule: Vec<Scheduled>,
}

impl Default for FaultPlan {
    /// No faults; 50 µs delays, 5 µs reorder hold, duplicates 100 ns apart.
    fn default() -> Self {
        Self {
            drop: Rate::NEVER,
            duplicate: Rate::NEVER,
            reorder: Rate::NEVER,
            corrupt: Rate::NEVER,
            delay: Rate::NEVER,
            delay_ns: 50_000,
            reorder_ns: 5_000,
            duplicate_gap_ns: 100,
            schedule: Vec::new(),
        }
    }
}

impl FaultPlan {
    /// Each packet lost with chance `rate`.
    pub fn drop(rate: Rate) -> Self {
        Self {
            drop: rate,
            ..Self::default()
        }
    }

    /// The link cut: every packet sent from `from_ns` until `until_ns` is lost.
    pub fn cut(from_ns: u64, until_ns: u64) -> Self {
        Self::default().with(Trigger::Window { from_ns, until_ns }, Fault::Drop)
    }

    /// The link cut after `n` packets got through.
    pub fn cut_after(n: u64) -> Self {
        Self::default().with(Trigger::PacketsFrom(n), Fault::Drop)
    }

    /// Adds a scheduled fault.
    pub fn with(mut self, when: Trigger, fault: Fault) -> Self {
        self.schedule.push(Scheduled { when, fault });
        self
    }

    /// True if the plan can do anything to a packet.
    pub fn is_active(&self) -> bool {
        !(self.drop.is_never()
            && self.duplicate.is_never()
            && self.reorder.is_never()
            && self.corrupt.is_never()
            && self.delay.is_never()
            && self.schedule.is_empty())
    }
}

/// What the faults did, over the whole world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets lost (by rate or schedule, a cut included).
    pub dropped: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
    /// Packets held back behind later ones.
    pub reordered: u64,
    /// Packets delivered with a bit flipped (both copies of a duplicated one count).
    pub corrupted: u64,
    /// Packets delayed.
    pub delayed: u64,
}

impl FaultStats {
    /// Nothing happened.
    pub const NONE: Self = Self {
        dropped: 0,
        duplicated: 0,
        reordered: 0,
        corrupted: 0,
        delayed: 0,
    };

    fn count(&mut self, f: &Fate) {
        self.dropped += u64::from(f.drop);
        self.duplicated += u64::from(f.duplicate_after.is_some());
        self.reordered += u64::from(f.reordered);
        self.delayed += u64::from(f.delayed);
        if f.corrupt.is_some() {
            // Both copies of a duplicated packet carry the flipped bit.
            self.corrupted += if f.duplicate_after.is_some() { 2 } else { 1 };
        }
    }
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fate {
    /// Lost.
    pub drop: bool,
    /// Delivered a second time, this many ns after the original.
    pub duplicate_after: Option<u64>,
    /// Flip a bit: a random number that [`Fate::corrupt`] maps onto the packet.
    pub corrupt: Option<u64>,
    /// Arrives this many ns later than the link would deliver it.
    pub extra_ns: u64,
    /// Held back behind later packets (part of `extra_ns`).
    pub reordered: bool,
    /// Delayed (part of `extra_ns`).
    pub delayed: bool,
}

impl Fate {
    /// The verdict on a packet of this fate, `pkt` corrupted as it says: [`Verdict::Pass`]
    /// when nothing happens to it.
    pub fn verdict(&self, pkt: &mut [u8]) -> Verdict {
        if self.drop {
            return Verdict::Drop;
        }
        self.corrupt(pkt);
        if self.extra_ns == 0 && self.duplicate_after.is_none() {
            return Verdict::Pass;
        }
        Verdict::Deliver {
            extra_ns: self.extra_ns,
            copy_after_ns: self.duplicate_after,
        }
    }

    /// Flips the bit `self.corrupt` selects in `pkt` (see the module comment for which bits
    /// are eligible). Does nothing to a packet too short to have a BTH.
    pub fn corrupt(&self, pkt: &mut [u8]) {
        let Some(r) = self.corrupt else {
            return;
        };
        let ip_len = match pkt.first().map(|b| b >> 4) {
            Some(6) => IPV6_HDR_LEN,
            _ => IPV4_HDR_LEN,
        };
        // BTH byte 5 on: dest QP, PSN, extension headers, payload, ICRC. (Byte 4 is the
        // reserved byte the ICRC masks, rxe `rxe_icrc_hdr`.)
        let start = ip_len + UDP_HDR_LEN + 5;
        let Some(span) = pkt.len().checked_sub(start).filter(|&s| s > 0) else {
            return;
        };
        let bit = (r % (span as u64 * 8)) as usize;
        if let Some(b) = pkt.get_mut(start + bit / 8) {
            *b ^= 1 << (bit % 8);
        }
    }
}

/// The fault plans of a world: one for every sending device, optionally overridden per
/// device (faults per direction on a two-device link).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    all: Option<FaultPlan>,
    per_src: Vec<Option<FaultPlan>>,
    /// Packets each sending device has put on the link since its plan was set.
    sent: Vec<u64>,
    stats: FaultStats,
    /// The same, per sending device.
    per_src_stats: Vec<FaultStats>,
}

impl Faults {
    /// Sets the plan for packets from every device without a plan of its own (`None`: none).
    pub fn set_all(&mut self, plan: Option<FaultPlan>) {
        self.all = plan.filter(FaultPlan::is_active);
        self.sent.iter_mut().for_each(|n| *n = 0);
    }

    /// Sets the plan for packets sent by device `src` (`None`: back to the common plan).
    pub fn set_from(&mut self, src: usize, plan: Option<FaultPlan>) {
        if self.per_src.len() <= src {
            self.per_src.resize(src + 1, None);
        }
        if let Some(p) = self.per_src.get_mut(src) {
            *p = plan;
        }
        if let Some(n) = self.sent.get_mut(src) {
            *n = 0;
        }
    }

    /// True if any plan can touch a packet: links that carry packets by reference must then
    /// carry real bytes.
    pub fn is_active(&self) -> bool {
        self.all.is_some() || self.per_src.iter().flatten().any(FaultPlan::is_active)
    }

    /// What the faults did so far.
    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// What the faults did to packets sent by device `src`.
    pub fn stats_from(&self, src: usize) -> FaultStats {
        self.per_src_stats.get(src).cloned().unwrap_or_default()
    }

    fn plan(&self, src: usize) -> Option<&FaultPlan> {
        match self.per_src.get(src) {
            Some(Some(p)) => Some(p),
            _ => self.all.as_ref(),
        }
    }

    /// Decides the fate of the next packet device `src` sends at virtual time `now`, drawing
    /// from `rng` once per non-zero rate, and counts it.
    pub fn fate<R: RngCore + ?Sized>(&mut self, src: usize, now: u64, rng: &mut R) -> Fate {
        if self.sent.len() <= src {
            self.sent.resize(src + 1, 0);
        }
        let index = self.sent.get(src).copied().unwrap_or(0);
        if let Some(n) = self.sent.get_mut(src) {
            *n += 1;
        }
        let fate = self.decide(src, index, now, rng);
        if self.per_src_stats.len() <= src {
            self.per_src_stats.resize(src + 1, FaultStats::default());
        }
        if let Some(s) = self.per_src_stats.get_mut(src) {
            s.count(&fate);
        }
        self.stats.count(&fate);
        fate
    }

    fn decide<R: RngCore + ?Sized>(&self, src: usize, index: u64, now: u64, rng: &mut R) -> Fate {
        let Some(plan) = self.plan(src) else {
            return Fate::default();
        };
        let mut fate = Fate::default();
        let mut drop = plan.drop.hit(rng);
        let mut dup = plan.duplicate.hit(rng);
        let mut reorder = plan.reorder.hit(rng);
        let mut corrupt = plan.corrupt.hit(rng);
        let mut delay = if plan.delay.hit(rng) {
            plan.delay_ns
        } else {
            0
        };
        let (gap, hold) = (plan.duplicate_gap_ns, plan.reorder_ns);
        for s in plan.schedule.iter().filter(|s| s.when.matches(index, now)) {
            match s.fault {
                Fault::Drop => drop = true,
                Fault::Duplicate => dup = true,
                Fault::Reorder => reorder = true,
                Fault::Corrupt => corrupt = true,
                Fault::Delay(ns) => delay = delay.saturating_add(ns),
            }
        }
        if drop {
            fate.drop = true;
            return fate;
        }
        if dup {
            fate.duplicate_after = Some(gap);
        }
        if reorder {
            fate.reordered = true;
            fate.extra_ns = fate.extra_ns.saturating_add(hold);
        }
        if delay > 0 {
            fate.delayed = true;
            fate.extra_ns = fate.extra_ns.saturating_add(delay);
        }
        if corrupt {
            fate.corrupt = Some(rng.next_u64());
        }
        fate
    }
}

impl Rule for Faults {
    /// The fate of the packet ([`Faults::fate`], counted), as a verdict ([`Fate::verdict`]).
    fn on_packet(&mut self, pkt: &mut Packet<'_>, rng: &mut dyn RngCore) -> Verdict {
        self.fate(pkt.src, pkt.now_ns, rng).verdict(pkt.bytes)
    }

    fn active(&self) -> bool {
        self.is_active()
    }

    /// Faults decide a packet's fate; they do not look at it leave.
    fn watches(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    fn fates(plan: FaultPlan, seed: u64, n: u64) -> (Vec<Fate>, FaultStats) {
        let mut f = Faults::default();
        f.set_all(Some(plan));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let v = (0..n).map(|i| f.fate(0, i * 10, &mut rng)).collect();
        (v, f.stats().clone())
    }

    #[test]
    fn rates_hit_about_as_often_as_asked_and_replay_with_the_seed() {
        let plan = FaultPlan {
            drop: Rate::percent(5),
            duplicate: Rate::percent(1),
            ..FaultPlan::default()
        };
        let (a, s) = fates(plan.clone(), 3, 100_000);
        assert!((4_500..5_500).contains(&s.dropped), "{s:?}");
        assert!((800..1_200).contains(&s.duplicated), "{s:?}");
        assert_eq!(a, fates(plan.clone(), 3, 100_000).0);
        assert_ne!(a, fates(plan, 4, 100_000).0);
    }

    #[test]
    fn schedules_hit_exactly_the_packets_and_times_named() {
        let plan = FaultPlan::default()
            .with(Trigger::Packet(2), Fault::Drop)
            .with(Trigger::Packet(3), Fault::Corrupt)
            .with(Trigger::Packet(4), Fault::Delay(7))
            .with(
                Trigger::Window {
                    from_ns: 60,
                    until_ns: 80,
                },
                Fault::Drop,
            )
            .with(Trigger::PacketsFrom(9), Fault::Drop);
        let (v, s) = fates(plan, 1, 12);
        let dropped: Vec<usize> = (0..12).filter(|&i| v[i].drop).collect();
        assert_eq!(dropped, vec![2, 6, 7, 9, 10, 11]);
        assert!(v[3].corrupt.is_some());
        assert_eq!(v[4].extra_ns, 7);
        assert!(v[4].delayed);
        assert_eq!(s.dropped, 6);
        assert_eq!(s.corrupted, 1);
    }

    #[test]
    fn every_nth_packet_is_hit_counting_from_the_plan() {
        let (v, s) = fates(
            FaultPlan::default().with(Trigger::Every(3), Fault::Drop),
            1,
            9,
        );
        let dropped: Vec<usize> = (0..9).filter(|&i| v[i].drop).collect();
        assert_eq!(dropped, vec![2, 5, 8]);
        assert_eq!(s.dropped, 3);
        let (v, _) = fates(
            FaultPlan::default().with(Trigger::Every(0), Fault::Drop),
            1,
            4,
        );
        assert!(v.iter().all(|f| !f.drop), "every 0th: none");
    }

    #[test]
    fn a_fate_is_the_verdict_a_link_carries_out() {
        let mut pkt = vec![0x45u8; 20 + 8 + 12 + 4];
        let dropped = Fate {
            drop: true,
            corrupt: Some(1),
            ..Fate::default()
        };
        assert_eq!(dropped.verdict(&mut pkt), Verdict::Drop);
        assert_eq!(pkt, vec![0x45u8; 44], "a dropped packet is not corrupted");
        assert_eq!(Fate::default().verdict(&mut pkt), Verdict::Pass);
        let late = Fate {
            extra_ns: 9,
            duplicate_after: Some(4),
            delayed: true,
            corrupt: Some(1),
            ..Fate::default()
        };
        assert_eq!(
            late.verdict(&mut pkt),
            Verdict::Deliver {
                extra_ns: 9,
                copy_after_ns: Some(4)
            }
        );
        assert_ne!(pkt, vec![0x45u8; 44], "corrupted");
    }

    #[test]
    fn faults_decide_but_do_not_watch_so_a_link_shows_them_nothing() {
        use crate::link::rule::Rules;
        let mut f = Faults::default();
        f.set_all(Some(FaultPlan::drop(Rate::ALWAYS)));
        let mut rules = Rules::default();
        rules.push(Box::new(f));
        assert!(rules.active() && !rules.watched());
    }

    #[test]
    fn no_plan_draws_nothing_from_the_rng() {
        let mut f = Faults::default();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        assert_eq!(f.fate(0, 0, &mut rng), Fate::default());
        assert!(!f.is_active());
        assert_eq!(rng.next_u64(), ChaCha8Rng::seed_from_u64(9).next_u64());
    }

    #[test]
    fn a_per_device_plan_overrides_the_common_one() {
        let mut f = Faults::default();
        f.set_all(Some(FaultPlan::drop(Rate::ALWAYS)));
        f.set_from(1, Some(FaultPlan::default()));
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(f.fate(0, 0, &mut rng).drop);
        assert!(!f.fate(1, 0, &mut rng).drop);
    }

    #[test]
    fn corruption_flips_one_bit_the_icrc_covers_and_parsing_ignores() {
        let mut pkt = vec![0x45u8; 20 + 8 + 12 + 4];
        let orig = pkt.clone();
        for r in [0u64, 1, 7, 8, 1000, u64::MAX] {
            let mut p = pkt.clone();
            Fate {
                corrupt: Some(r),
                ..Fate::default()
            }
            .corrupt(&mut p);
            let diff: Vec<usize> = (0..p.len()).filter(|&i| p[i] != orig[i]).collect();
            assert_eq!(diff.len(), 1);
            assert!(
                diff[0] >= 33,
                "byte {} is before the BTH's dest QP",
                diff[0]
            );
            assert_eq!((p[diff[0]] ^ orig[diff[0]]).count_ones(), 1);
        }
        pkt.truncate(10);
        Fate {
            corrupt: Some(3),
            ..Fate::default()
        }
        .corrupt(&mut pkt);
        assert_eq!(pkt, vec![0x45u8; 10], "too short: untouched");
    }
}

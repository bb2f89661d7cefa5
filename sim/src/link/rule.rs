//! Packet rules: what a link does to the packets it carries besides carrying them, as plug-ins
//! every link applies (the stepped [`World`](crate::world::World) and the UDP link alike).
//!
//! Owns: [`Rule`] (a packet's [`Verdict`] as it enters the wire, and a look at it as it
//! leaves), [`Rules`] (a link's rules in the order they were added: the first verdict that is
//! not [`Verdict::Pass`] wins, and every rule sees every packet the link shows them leave) and
//! [`Packet`].
//! The rules themselves live with what they model: seeded faults in `crate::faults`, the pcap
//! tee in `crate::pcap`. Must not: draw randomness from anything but the RNG the link hands
//! in (the world's seeded one, so a seed replays every verdict), or route packets.
//!
//! Sources: turmoil's packet rules (`tokio-rs/turmoil`, `Rule::on_packet -> Verdict`: a
//! simulator as a small router plus plug-in rules). A link with no rule pays nothing: it
//! asks [`Rules::is_empty`] (or [`Rules::watched`]) once per packet, and an in-process link
//! carries packets by reference only while no rule is [`Rule::active`].

use std::any::Any;

use rand_core::RngCore;

/// A packet as a rule sees it entering the wire.
#[derive(Debug)]
pub struct Packet<'a> {
    /// The IP packet, IP header through ICRC. A rule may change it (a corruption).
    pub bytes: &'a mut [u8],
    /// The sender: the world's device id; 0 on a UDP link (its one peer).
    pub src: usize,
    /// Now: virtual ns in the world, wall-clock ns since the Unix epoch on a UDP link.
    pub now_ns: u64,
}

/// What happens to a packet ([`Rule::on_packet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No say: the next rule decides; when every rule passes, the link carries the packet
    /// as it would with no rule.
    Pass,
    /// Lost.
    Drop,
    /// Delivered `extra_ns` later than the link would, and once more `copy_after_ns` after
    /// that. The UDP link delivers at once, once: a socket's packets cannot be held back.
    Deliver {
        /// Extra delay, ns.
        extra_ns: u64,
        /// A second delivery this many ns after the first.
        copy_after_ns: Option<u64>,
    },
}

/// How a packet left the wire ([`Rule::on_seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Sent: the UDP link handed it to the kernel (the IP header as the wire carries it).
    Sent,
    /// Handed to its device: the world at its arrival time, the UDP link as it read it.
    Delivered,
    /// Dropped by a rule's verdict, shown as it was sent (the world shows its drops; the UDP
    /// link drops a received packet before it knows the ID its header carries, and shows it
    /// to none).
    Dropped,
}

/// A packet rule: a fault model, a tee, a filter.
pub trait Rule: Any + Send {
    /// The fate of `pkt` as it enters the wire; `rng` is the link's (the world's seeded RNG),
    /// the only randomness a rule may use.
    fn on_packet(&mut self, pkt: &mut Packet<'_>, rng: &mut dyn RngCore) -> Verdict {
        let _ = (pkt, rng);
        Verdict::Pass
    }

    /// `bytes` left the wire at `now_ns` ([`Packet::now_ns`]'s clock), as `seen` says.
    fn on_seen(&mut self, bytes: &[u8], now_ns: u64, seen: Seen) {
        let _ = (bytes, now_ns, seen);
    }

    /// Whether the rule can change or see a packet now: a link that carries packets by
    /// reference (the world's bursts) must then carry them as bytes.
    fn active(&self) -> bool;

    /// Whether [`Rule::on_seen`] looks at packets now: a link that has work to do to show a
    /// packet (build a gather packet's bytes, stamp the IP header the kernel would write, read
    /// the clock) does it only while some rule watches. By default, while it is active.
    fn watches(&self) -> bool {
        self.active()
    }
}

/// A link's rules, in the order they were added.
#[derive(Default)]
pub struct Rules {
    list: Vec<Box<dyn Rule>>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.list.len())
            .field("active", &self.active())
            .finish()
    }
}

impl Rules {
    /// Adds `rule` after the others.
    pub fn push(&mut self, rule: Box<dyn Rule>) {
        self.list.push(rule);
    }

    /// True if there is no rule (the link then asks nothing per packet).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// True if any rule is [`Rule::active`].
    pub fn active(&self) -> bool {
        self.list.iter().any(|r| r.active())
    }

    /// True if any rule [`Rule::watches`] what leaves the wire (false, at once, if there is
    /// no rule).
    #[inline]
    pub fn watched(&self) -> bool {
        self.list.iter().any(|r| r.watches())
    }

    /// The first rule of type `T`.
    pub fn get<T: Rule>(&self) -> Option<&T> {
        self.list
            .iter()
            .find_map(|r| (&**r as &dyn Any).downcast_ref::<T>())
    }

    /// The first rule of type `T`, to change it.
    pub fn get_mut<T: Rule>(&mut self) -> Option<&mut T> {
        self.list
            .iter_mut()
            .find_map(|r| (&mut **r as &mut dyn Any).downcast_mut::<T>())
    }

    /// The first rule of type `T`, to change it; if there is none, the one `make` gives,
    /// added last. `make` may give none (a link told to stop a rule it never had keeps its
    /// list empty): `None` then.
    pub fn get_or_add<T: Rule>(&mut self, make: impl FnOnce() -> Option<T>) -> Option<&mut T> {
        if self.get::<T>().is_none() {
            self.push(Box::new(make()?));
        }
        self.get_mut::<T>()
    }

    /// The verdict on `pkt`: the first rule's that is not [`Verdict::Pass`] (the rules after
    /// it are not asked).
    pub fn on_packet(&mut self, pkt: &mut Packet<'_>, rng: &mut dyn RngCore) -> Verdict {
        for r in &mut self.list {
            let verdict = r.on_packet(pkt, rng);
            if verdict != Verdict::Pass {
                return verdict;
            }
        }
        Verdict::Pass
    }

    /// Shows `bytes` to every rule: it left the wire at `now_ns` as `seen` says.
    pub fn seen(&mut self, bytes: &[u8], now_ns: u64, seen: Seen) {
        for r in &mut self.list {
            r.on_seen(bytes, now_ns, seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    /// Drops packets whose first byte is `0`, records what it sees.
    #[derive(Default)]
    struct ZeroDropper {
        seen: Vec<(u8, Seen)>,
    }

    impl Rule for ZeroDropper {
        fn on_packet(&mut self, pkt: &mut Packet<'_>, _: &mut dyn RngCore) -> Verdict {
            if pkt.bytes.first() == Some(&0) {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }
        fn on_seen(&mut self, bytes: &[u8], _: u64, seen: Seen) {
            self.seen.push((bytes[0], seen));
        }
        fn active(&self) -> bool {
            true
        }
    }

    /// Delays everything by 5 ns.
    struct Late;

    impl Rule for Late {
        fn on_packet(&mut self, _: &mut Packet<'_>, _: &mut dyn RngCore) -> Verdict {
            Verdict::Deliver {
                extra_ns: 5,
                copy_after_ns: None,
            }
        }
        fn active(&self) -> bool {
            false
        }
    }

    fn verdict(r: &mut Rules, first: u8) -> Verdict {
        let mut bytes = [first, 1, 2];
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut p = Packet {
            bytes: &mut bytes,
            src: 0,
            now_ns: 7,
        };
        r.on_packet(&mut p, &mut rng)
    }

    #[test]
    fn the_first_verdict_that_is_not_pass_wins_and_every_rule_sees_what_leaves() {
        let mut r = Rules::default();
        assert!(r.is_empty() && !r.active() && !r.watched());
        assert_eq!(verdict(&mut r, 0), Verdict::Pass, "no rule: carried");
        let mut late = Rules::default();
        late.push(Box::new(Late));
        assert!(
            !late.watched(),
            "an inactive rule watches nothing (by default)"
        );
        r.push(Box::new(ZeroDropper::default()));
        r.push(Box::new(Late));
        assert!(
            r.active() && r.watched(),
            "an active rule watches (by default)"
        );
        assert_eq!(verdict(&mut r, 0), Verdict::Drop, "the first rule decides");
        let late = Verdict::Deliver {
            extra_ns: 5,
            copy_after_ns: None,
        };
        assert_eq!(
            verdict(&mut r, 1),
            late,
            "the first passes: the second decides"
        );
        r.seen(&[0], 7, Seen::Dropped);
        r.seen(&[9], 8, Seen::Delivered);
        let z = r.get::<ZeroDropper>().unwrap();
        assert_eq!(z.seen, vec![(0, Seen::Dropped), (9, Seen::Delivered)]);
        assert!(r.get::<Late>().is_some());
        assert!(r.get_mut::<ZeroDropper>().is_some());
    }

    #[test]
    fn get_or_add_adds_a_rule_of_a_kind_once() {
        let mut r = Rules::default();
        assert!(r.get_or_add(|| None::<ZeroDropper>).is_none());
        assert!(r.is_empty(), "nothing made: nothing added");
        let make = || Some(ZeroDropper::default());
        r.get_or_add(make).unwrap().seen.push((1, Seen::Sent));
        r.get_or_add(make).unwrap().seen.push((2, Seen::Sent));
        assert!(r.get_or_add(|| None::<ZeroDropper>).is_some(), "found");
        assert_eq!(r.list.len(), 1);
        assert_eq!(r.get::<ZeroDropper>().unwrap().seen.len(), 2);
    }
}

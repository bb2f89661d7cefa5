//! How a UDP link reads its receiving socket: with `UDP_GRO` on, by `recvmsg` (a bypass
//! peer's segmented sends arrive whole, one read for up to 64 packets, and the segment size
//! comes in a control message), or with it off, by `recvfrom` (one datagram a read, cheaper).
//!
//! Owns: [`RxMode`], the choice between the two and when it changes. Must not: touch the
//! socket (the link sets the option and makes the reads [`RxMode`] asks for).
//!
//! The link starts with `UDP_GRO` on; after [`PLAIN_AFTER`] reads in a row that each got one
//! small datagram (ACKs, a latency ping-pong) it turns it off, and on again after
//! [`GRO_AFTER`] reads in a row of a stream's datagrams ([`STREAM_BYTES`] or more); a train,
//! or a stream-sized datagram from a peer that does not segment (rxe), keeps it on. A stream
//! needs it: without it the kernel cuts every segmented send into datagrams before it queues
//! them, on the sender's time (`net/ipv4/udp.c` `udp_queue_rcv_skb`, `udp_unexpected_gso`).
//! Turning it off is not instant for the reader: reads stay `recvmsg` for a drain
//! ([`DRAIN`]), since a train queued whole before the change is still read whole.

use std::time::{Duration, Instant};

/// Reads in a row of single small datagrams after which `UDP_GRO` goes off.
pub(crate) const PLAIN_AFTER: u32 = 64;

/// Reads in a row of stream-sized datagrams, with `UDP_GRO` off, after which it goes on
/// again.
pub(crate) const GRO_AFTER: u32 = 8;

/// The UDP payload length from which a datagram counts as a stream's: a full packet at path
/// MTU 256 is 272 bytes (BTH 12 + 256 + ICRC 4); an 8-byte WRITE is 40, an ACK 20.
pub(crate) const STREAM_BYTES: usize = 256;

/// How long after `UDP_GRO` went off an empty queue ends the drain: far longer than the
/// kernel takes from deciding not to cut a train to queueing it. A train queued whole before
/// the option changed stays in the queue until it is read, however long that takes, and one
/// in flight as it changes may still arrive whole (the kernel decides when it queues it,
/// `udp_queue_rcv_skb`); `recvfrom` cannot tell a train from one datagram (the segment size
/// only comes with `recvmsg`). So reads stay `recvmsg` until one finds the queue empty at
/// least this long after the change. (Were a train ever read plain, its ICRC would not
/// check: the device drops it and counts the error, and the transport resends what it
/// held. Nothing wrong is delivered.)
pub(crate) const DRAIN: Duration = Duration::from_millis(10);

/// What the link should do with the socket's `UDP_GRO` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// Nothing.
    Keep,
    /// Turn it off, then report with [`RxMode::turned_off`].
    Off,
    /// Turn it on, then report with [`RxMode::turned_on`].
    On,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gro {
    /// The kernel has no `UDP_GRO`: every datagram arrives alone, reads are plain.
    Unsupported,
    On,
    /// Off since this instant; reads stay `recvmsg` until one finds the queue empty
    /// [`DRAIN`] or more after it.
    Draining(Instant),
    Off,
}

/// The receiving socket's read mode (see the module comment).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxMode {
    gro: Gro,
    /// `On`: reads in a row of single small datagrams; off: reads in a row of a stream's.
    run: u32,
}

impl RxMode {
    /// A socket on which `UDP_GRO` is on (`gro`), or could not be turned on.
    pub(crate) fn new(gro: bool) -> Self {
        Self {
            gro: if gro { Gro::On } else { Gro::Unsupported },
            run: 0,
        }
    }

    /// Whether the next read must be a `recvmsg` that can report a train's segment size;
    /// false: `recvfrom`.
    pub(crate) fn reads_trains(&self) -> bool {
        matches!(self.gro, Gro::On | Gro::Draining(_))
    }

    /// A read found the queue empty: a drain [`DRAIN`] old or more ends (the clock is read
    /// only here, while draining).
    pub(crate) fn empty(&mut self) {
        if let Gro::Draining(since) = self.gro
            && since.elapsed() >= DRAIN
        {
            self.gro = Gro::Off;
        }
    }

    /// A read got a datagram; `stream`: a coalesced train, or one of [`STREAM_BYTES`] or
    /// more.
    pub(crate) fn read(&mut self, stream: bool) -> Switch {
        match self.gro {
            Gro::Unsupported => Switch::Keep,
            Gro::On => {
                self.run = if stream {
                    0
                } else {
                    self.run.saturating_add(1)
                };
                if self.run >= PLAIN_AFTER {
                    Switch::Off
                } else {
                    Switch::Keep
                }
            }
            Gro::Draining(_) | Gro::Off => {
                self.run = if stream {
                    self.run.saturating_add(1)
                } else {
                    0
                };
                if self.run >= GRO_AFTER {
                    Switch::On
                } else {
                    Switch::Keep
                }
            }
        }
    }

    /// The link tried to turn `UDP_GRO` off (`ok`: it is off since `now`).
    pub(crate) fn turned_off(&mut self, ok: bool, now: Instant) {
        self.run = 0;
        if ok {
            self.gro = Gro::Draining(now);
        }
    }

    /// The link tried to turn `UDP_GRO` on again (`ok`: it is on).
    pub(crate) fn turned_on(&mut self, ok: bool) {
        self.run = 0;
        if ok {
            self.gro = Gro::On;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gro_on(m: &RxMode) -> bool {
        m.gro == Gro::On
    }

    /// `n` reads (`stream` or not): every one but the last asks for no switch; what the last
    /// asks for.
    fn feed(m: &mut RxMode, stream: bool, n: u32) -> Switch {
        for _ in 1..n {
            assert_eq!(m.read(stream), Switch::Keep);
        }
        m.read(stream)
    }

    #[test]
    fn small_datagrams_turn_gro_off_and_reads_stay_trains_until_the_drain_ends() {
        let mut m = RxMode::new(true);
        assert!(m.reads_trains());
        assert_eq!(feed(&mut m, false, PLAIN_AFTER - 1), Switch::Keep);
        // A train (or a stream-sized datagram) starts the count again.
        assert_eq!(m.read(true), Switch::Keep);
        assert_eq!(feed(&mut m, false, PLAIN_AFTER), Switch::Off);
        let now = Instant::now();
        m.turned_off(true, now);
        assert!(!gro_on(&m));
        // Still draining: what the kernel queued whole before the change is read whole, even
        // past the drain time while the queue still holds packets.
        assert!(m.reads_trains());
        m.empty();
        assert!(m.reads_trains(), "an empty queue right after the change");
        m.gro = Gro::Draining(now - DRAIN);
        assert!(
            m.reads_trains(),
            "past the drain time, packets still queued"
        );
        // The first empty read after the drain time: reads are plain.
        m.empty();
        assert!(!m.reads_trains());
        assert_eq!(m.gro, Gro::Off);
    }

    #[test]
    fn a_refused_switch_keeps_the_mode_and_counts_again() {
        let mut m = RxMode::new(true);
        assert_eq!(feed(&mut m, false, PLAIN_AFTER), Switch::Off);
        m.turned_off(false, Instant::now());
        assert!(gro_on(&m));
        assert_eq!(m.read(false), Switch::Keep);
    }

    #[test]
    fn a_stream_turns_gro_on_again_and_small_datagrams_break_the_run() {
        let mut m = RxMode::new(true);
        m.gro = Gro::Off;
        assert_eq!(feed(&mut m, true, GRO_AFTER - 1), Switch::Keep);
        // A small datagram (an ACK, a ping-pong's request) starts the count again.
        assert_eq!(m.read(false), Switch::Keep);
        assert_eq!(feed(&mut m, true, GRO_AFTER), Switch::On);
        m.turned_on(true);
        assert!(gro_on(&m) && m.reads_trains());
        // With GRO on, a stream keeps it on however long it lasts.
        assert_eq!(feed(&mut m, true, 2 * PLAIN_AFTER), Switch::Keep);
    }

    #[test]
    fn without_udp_gro_every_read_is_plain_and_nothing_switches() {
        let mut m = RxMode::new(false);
        assert!(!m.reads_trains());
        for _ in 0..2 * PLAIN_AFTER {
            assert_eq!(m.read(false), Switch::Keep);
            assert_eq!(m.read(true), Switch::Keep);
        }
        assert!(!m.reads_trains());
    }
}

//! The pump: the threads of a UDP fabric moving one world over one [`UdpLink`].
//!
//! Owns: [`UdpWire`] (the link and its round buffers behind one lock, shared by the thread
//! that rang a doorbell, the application's wait loops and the fabric's engine thread) and
//! [`Pumper`] (who runs a round). A round reads the socket with the world unlocked, hands
//! each packet to the device that owns its destination GID in place, steps the devices until
//! idle, and sends what they transmit: requests in one send, the ACKs held for them in a
//! second. Must not: touch sockets or packet bytes (the link does), or reach into a device
//! beyond its public `step`/`step_again`/`set_time`/`set_fast_tx`/`set_tx_trains`/
//! `take_frame`/`receive_udp_in_place`/`next_deadline`/`flush_waiting`/`recycle_burst` (and
//! whether it records a trace). Locks: the link before the world, never after.
//!
//! Sources: ACK coalescing as a NIC does it (an ACK held for one round is late by at most
//! the process's next round, far below IBTA's `local_ack_timeout` of 4.096 us x 2^timeout);
//! the round-trip rationale is in `docs/DESIGN.md` (the UDP link); epoll(7) for the engine's
//! edge-triggered wait (a datagram that arrives wakes it once, one left unread does not).

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bypass_hw::roce::{BthOpcode, RocePacket};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use crate::fabric::lock::{lock, try_lock};
use crate::frame::{AckWriter, Frame};
use crate::header_cache::HeaderCache;
use crate::link::gather::{Gathered, Out};
use crate::link::udp::{GSO_MAX_SEGS, LinkError, RX_BATCH, UdpLink};
use crate::world::World;

/// How long the engine sleeps at most when it has nothing to do (bounds how late a timer,
/// or the first doorbell of a fabric whose doorbells are not acted on inline, is seen).
const IDLE_POLL_MS: u8 = 1;

/// An application thread that pumped less than this long ago is busy-polling the link (its
/// wait loop comes back within a few microseconds): the engine then leaves the socket to it
/// and does not wait on it (a waiting reader is woken by every datagram, and on few cores
/// each wake-up of the engine takes the CPU from a busy-polling thread), only checking now
/// and then whether the application stopped.
const APP_BUSY: Duration = Duration::from_micros(20);

/// The engine's first check on a busy-polling application comes this long after the last;
/// each check that finds it still pumping doubles the wait, up to [`IDLE_POLL_MS`], and a
/// round the engine ran for an application that had stopped (it moved packets) sets it back
/// here. An application that keeps pumping (`bypass perf`) then sees the engine wake once a
/// millisecond; one that stops after each completion to poll memory (`ib_write_lat`) gets its
/// packet within about [`APP_BUSY`] + this.
const APP_RECHECK: Duration = Duration::from_micros(10);

/// The engine thread's timer slack (`PR_SET_TIMERSLACK`, ns): its [`APP_RECHECK`] sleeps
/// would otherwise last 50 us more (the default slack).
const ENGINE_TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// True for an RC ACK (or NAK): BTH opcode `RC_ACKNOWLEDGE`.
fn is_ack(packet: &[u8]) -> bool {
    RocePacket::parse(packet).is_ok_and(|p| p.opcode() == BthOpcode::RC_ACKNOWLEDGE)
}

/// The most device steps of one pump round (a livelocking device cannot hold the lock).
const MAX_STEPS_PER_ROUND: usize = 100_000;

/// Who runs a pump round ([`UdpWire::pump`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pumper {
    /// A thread that just rang a doorbell: waits for the link if another thread holds it
    /// (the doorbell must not wait for the engine's next round), steps the devices and sends
    /// what they transmit; does not read the socket (its wait loop will).
    Doorbell,
    /// An application thread's wait loop: reads the socket, steps, sends; skips the round
    /// if another thread is running one.
    App,
    /// The fabric's engine thread: reads, steps and sends as `App` does, and always steps
    /// the devices (timers are its job).
    Engine,
}

/// The link's working buffers, reused round after round.
struct PumpState {
    link: UdpLink,
    outbound: Vec<Out>,
    /// The bursts whose payload `outbound`'s gather packets send from (kept, and with them
    /// the host memory, until the round's send returns).
    bursts: Gathered,
    /// Packets of a burst segmented into bytes (one the link does not send as gather
    /// packets), before they join `outbound`.
    segmented: Vec<Vec<u8>>,
    /// The ACKs (and NAKs) of the round, sent after `outbound`.
    acks: Vec<Vec<u8>>,
    /// `acks` holds ACKs kept back by the last round (sent by the next, whatever it is).
    held: bool,
    /// Writes the devices' ACK frames as bytes (a flow's headers and their CRC kept).
    ack_writer: AckWriter,
    /// The ICRC's state after the IP + UDP headers of the kinds of WRITE packet segmented
    /// lately (`Burst::segment_direct_into`).
    tx_crcs: HeaderCache,
    /// Buffers of packets already sent, for the next packets built (at most
    /// [`SPARE_BUFFERS`]).
    spare: Vec<Vec<u8>>,
}

/// Keeps the buffers of the sent packets in `sent` (up to [`SPARE_BUFFERS`]) to build the
/// next round's (no allocation per packet), and empties `sent`.
fn recycle(sent: &mut Vec<Out>, spare: &mut Vec<Vec<u8>>) {
    for p in sent.drain(..) {
        if spare.len() >= SPARE_BUFFERS {
            break;
        }
        if let Out::Bytes(b) = p {
            spare.push(b);
        }
    }
    sent.clear();
}

/// The most sent-packet buffers a link keeps for reuse (two full segmented sends).
const SPARE_BUFFERS: usize = 2 * GSO_MAX_SEGS;

/// A [`UdpLink`] as the wire of a fabric whose world is moved by whichever thread needs it:
/// the thread that rang a doorbell sends its packets itself ([`Pumper::Doorbell`]), an
/// application's wait loop reads the socket and runs the device ([`Pumper::App`]), and the
/// fabric's engine thread ([`UdpWire::run_engine`]), woken by each datagram and by timers,
/// runs the rounds nobody else runs. A busy-polling ping-pong between two processes is then
/// one busy thread per process, as with plain sockets (the engine only wakes and finds the
/// packet read), and a process that waits without calling in still gets its packets at
/// once. Socket calls happen with the world unlocked; the link is locked before the
/// world, never after.
pub struct UdpWire {
    state: Mutex<PumpState>,
    /// A second handle on the receiving socket, for the engine to wait on without the lock.
    poller: UdpSocket,
    /// Device time 0.
    start: Instant,
    /// When an application thread's wait loop last pumped (ns since `start`).
    app_pumped: AtomicU64,
    /// The earliest device timer (ns since `start`; `u64::MAX`: none) as the last round left
    /// it: an application round that receives nothing, holds nothing and comes before it
    /// has nothing to step (see [`UdpWire::pump`]).
    next_timer: AtomicU64,
}

impl std::fmt::Debug for UdpWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpWire")
            .field("local", &self.poller.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl UdpWire {
    /// Wraps `link` (device time starts now).
    pub fn new(link: UdpLink) -> Result<Self, LinkError> {
        let poller = link.poller()?;
        Ok(Self {
            state: Mutex::new(PumpState {
                link,
                outbound: Vec::new(),
                bursts: Gathered::default(),
                segmented: Vec::new(),
                acks: Vec::new(),
                held: false,
                ack_writer: AckWriter::new(),
                tx_crcs: HeaderCache::default(),
                spare: Vec::with_capacity(SPARE_BUFFERS),
            }),
            poller,
            start: Instant::now(),
            app_pumped: AtomicU64::new(0),
            next_timer: AtomicU64::new(0),
        })
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// One round: read what waits on the socket (not for [`Pumper::Doorbell`]), hand it to
    /// the device that owns its destination GID (else device 0), step the devices at the
    /// current device time (ns since [`UdpWire::new`]) until idle, and send what they
    /// transmit. True if anything moved. [`Pumper::App`] returns false at once when another
    /// thread is running a round; [`Pumper::Engine`] and [`Pumper::Doorbell`] wait for it (a
    /// doorbell written already: the round [`UdpWire::ring`] runs after its write).
    ///
    /// An application round that reads nothing, holds no ACKs and comes before the earliest
    /// device timer the last round saw does not touch the world: a device only has work after
    /// a doorbell (acted on by doorbell rounds), a packet, or a timer, so stepping it would
    /// change nothing. A busy-poll loop's empty rounds then cost one read, as a plain
    /// socket's do.
    pub fn pump(&self, world: &Mutex<World>, by: Pumper) -> bool {
        if by == Pumper::Doorbell {
            return self.ring_round(world, |_| ((), true)).1;
        }
        let t = self.now_ns();
        if by == Pumper::App {
            self.app_pumped.store(t, Ordering::Relaxed);
        }
        // The engine waits for a round another thread runs (asleep on the lock, not
        // spinning), then runs its own: that round may have read the socket before the
        // datagram that woke the engine arrived.
        let mut g = if by == Pumper::Engine {
            lock(&self.state)
        } else {
            let Some(g) = try_lock(&self.state) else {
                return false;
            };
            g
        };
        // The socket is read with the world unlocked; the packets wait in the link's
        // buffers and are handed to the devices in place below.
        let busy = g.link.fill_rx(RX_BATCH) > 0;
        if by == Pumper::App && !busy && !g.held && t < self.next_timer.load(Ordering::Relaxed) {
            return false;
        }
        let w = lock(world);
        self.round(&mut g, w, by, t, busy)
    }

    /// A [`Pumper::Doorbell`] round with the MMIO write that rings the doorbell in it: locks
    /// the link (waiting for a round another thread runs), then the world, and runs `ring` on
    /// the world (the write); when it says a doorbell is pending, the round goes on under the
    /// same lock, at the time read then (one world lock for the write and the round, where a
    /// write and a separate pump took it twice on every post). Returns what `ring` returned.
    pub fn ring<R>(&self, world: &Mutex<World>, ring: impl FnOnce(&mut World) -> (R, bool)) -> R {
        self.ring_round(world, ring).0
    }

    /// [`UdpWire::ring`], and whether its round moved anything.
    fn ring_round<R>(
        &self,
        world: &Mutex<World>,
        ring: impl FnOnce(&mut World) -> (R, bool),
    ) -> (R, bool) {
        let mut g = lock(&self.state);
        let mut w = lock(world);
        let (r, rang) = ring(&mut w);
        let moved = rang && {
            let now = self.now_ns();
            self.round(&mut g, w, Pumper::Doorbell, now, false)
        };
        (r, moved)
    }

    /// The rest of a round, with the link and the world locked (`w`, let go before the
    /// sends), at device time `now`; `busy`: the round read packets. See [`UdpWire::pump`].
    fn round(
        &self,
        g: &mut PumpState,
        mut w: MutexGuard<'_, World>,
        by: Pumper,
        now: u64,
        mut busy: bool,
    ) -> bool {
        let PumpState {
            link,
            outbound,
            bursts,
            segmented,
            acks,
            held,
            ack_writer,
            tx_crcs,
            spare,
        } = g;
        // A device's SQ flush waits for bursts this round sends (`engine::ledger::Ledger::post_err_when_read`).
        let mut flush_waits = false;
        {
            let n = w.len();
            let allowed = w.fast_path();
            let trains = link.tx_trains();
            // The boxes of the bursts the last send let go build the devices' next ones.
            for (id, b) in bursts.take_spent() {
                if id < n {
                    w.device(id).recycle_burst(b);
                }
            }
            for id in 0..n {
                let dev = w.device(id);
                dev.set_time(now);
                // Bursts and ACK frames, segmented below straight into recycled buffers,
                // unless the world forbids them or the device records a trace (it wants its
                // packets as bytes).
                let fast = allowed && !dev.trace.enabled();
                dev.set_fast_tx(fast);
                // Its WRITE bursts end where a segmented send ends (`requester::burst_count`).
                dev.set_tx_trains(trains);
            }
            link.deliver_rx(|p| {
                let owner = if n > 1 {
                    let (_, dgid) = p.ip.gids();
                    (0..n).find(|&id| w.device(id).profile().owns_gid(&dgid))
                } else {
                    None
                };
                if n > 0 {
                    w.device(owner.unwrap_or(0)).receive_udp_in_place(
                        p.bytes,
                        p.ip,
                        p.ports,
                        p.icrc_checked,
                    );
                }
            });
            let mut idle = false;
            for round in 0..MAX_STEPS_PER_ROUND {
                let mut progress = false;
                // As `World::run_until_idle`: the first step of the round scans every QP
                // (time moved), the later ones only when the step before gave them something
                // new (`Device::step_again`), not again at the same time for nothing.
                for id in 0..n {
                    let d = w.device(id);
                    progress |= if round == 0 { d.step() } else { d.step_again() };
                }
                if !progress {
                    idle = true;
                    break;
                }
                busy = true;
            }
            // A round cut short with work left: the next round steps whatever it reads.
            let mut next_timer = if idle { u64::MAX } else { 0 };
            for id in 0..n {
                let dev = w.device(id);
                if let Some(t) = dev.next_deadline() {
                    next_timer = next_timer.min(t);
                }
                flush_waits |= dev.flush_waiting();
                while let Some(frame) = dev.take_frame() {
                    match frame {
                        Frame::Wire(p) | Frame::WireChecked(p) => {
                            if is_ack(&p) {
                                acks.push(p);
                            } else {
                                outbound.push(Out::Bytes(p));
                            }
                        }
                        Frame::Ack(a) => {
                            let mut buf = spare.pop().unwrap_or_default();
                            if ack_writer.write(&a, &mut buf) {
                                acks.push(buf);
                            }
                        }
                        // Read from the sender's memory now, as a NIC reads it when it
                        // transmits (`crate::frame`). A host-memory burst: gather packets, the
                        // payload sent by the kernel straight from the sender's memory
                        // (`link::gather`; the ICRC pass reads it here, under the world
                        // lock). Others (inline payloads, too many runs): segmented into
                        // bytes, one copy into the packets.
                        Frame::Burst(b) => {
                            if let Err(b) = bursts.push_burst(b, id, outbound) {
                                b.segment_direct_into(segmented, spare, tx_crcs);
                                outbound.extend(segmented.drain(..).map(Out::Bytes));
                                // Its box builds the device's next burst (no allocation per
                                // WRITE); what it held is let go as a drop would.
                                dev.recycle_burst(b);
                            }
                        }
                    }
                }
            }
            self.next_timer.store(next_timer, Ordering::Relaxed);
            drop(w);
        }
        let sending = !outbound.is_empty() || !acks.is_empty();
        busy |= sending;
        let received = busy && by == Pumper::App && sending;
        if received && !*held && outbound.is_empty() {
            // Only ACKs, in a wait loop that just took packets: hold them for one round (the
            // application's reply, rung as a doorbell a moment later, goes out first and
            // they follow it; the next round of any kind sends them), as a NIC coalesces ACKs.
            *held = true;
            return busy;
        }
        *held = false;
        // Requests first, in their own send; the ACKs after them in another. The peer's
        // application waits for the requests, not for the ACKs: a request sent alone is one
        // plain datagram the peer reads alone and answers, while the ACKs' send and the peer's
        // read of them happen as it works on that answer. One segmented train of both (one
        // `UDP_SEGMENT` send, one `UDP_GRO` read) costs more on the path the round trip waits
        // for.
        let split = !outbound.is_empty() && !acks.is_empty();
        if !split {
            outbound.extend(acks.drain(..).map(Out::Bytes));
        }
        link.send_all(outbound, bursts);
        // The host memory is no longer referenced: let the bursts (and their buffers) go.
        bursts.clear();
        if flush_waits {
            // Their flushes may go ahead now: the next round steps the devices at once
            // (`next_timer` was read before the bursts went).
            self.next_timer.store(0, Ordering::Relaxed);
        }
        recycle(outbound, spare);
        if split {
            outbound.extend(acks.drain(..).map(Out::Bytes));
            link.send_all(outbound, bursts);
            recycle(outbound, spare);
        }
        busy
    }

    /// The engine thread of a UDP fabric, until `stop`: it runs the rounds nobody else runs
    /// (timers, a round cut short, and every packet of a process whose threads wait without
    /// calling in, as perftest's `ib_write_lat` polls memory). While an application thread
    /// busy-polls the link (it pumped within [`APP_BUSY`]) the engine leaves the socket to it
    /// and sleeps, [`APP_RECHECK`] first and twice as long each time it finds the application
    /// still pumping (up to [`IDLE_POLL_MS`]), running a round for the timers every
    /// [`IDLE_POLL_MS`]. Otherwise it runs the rounds itself (asleep on the link's lock while
    /// another thread runs one) and, with nothing to do, sleeps in `epoll_wait` on the socket,
    /// edge-triggered (a new datagram wakes it, one left unread does not), [`IDLE_POLL_MS`]
    /// at most.
    ///
    /// The trade-off: no thread spins but the application's, so an idle link costs no CPU;
    /// an application that keeps busy-polling sees the engine wake once a millisecond, as
    /// before; a packet that lands just as an application stops pumping waits up to about
    /// [`APP_BUSY`] + the current check interval ([`APP_RECHECK`] while the application keeps
    /// stopping, so perftest's latency loops pay about that on every hop), one that lands
    /// later a wake-up. The engine
    /// used to sleep a whole [`IDLE_POLL_MS`] whenever the application had pumped in the last
    /// 2 ms, which held such packets for up to a millisecond.
    pub fn run_engine(&self, world: &Mutex<World>, stop: &AtomicBool) {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).and_then(|e| {
            e.add(
                &self.poller,
                EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, 0),
            )
            .map(|()| e)
        });
        let mut events = [EpollEvent::empty(); 1];
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's
        // timer slack; a failure leaves the default, which only lengthens the sleeps.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, ENGINE_TIMER_SLACK_NS);
        }
        let busy = APP_BUSY.as_nanos() as u64;
        let timer_round = u64::from(IDLE_POLL_MS) * 1_000_000;
        let mut last_round = 0u64;
        let mut recheck = APP_RECHECK;
        let max_recheck = Duration::from_millis(u64::from(IDLE_POLL_MS));
        while !stop.load(Ordering::Acquire) {
            let now = self.now_ns();
            if now.saturating_sub(self.app_pumped.load(Ordering::Relaxed)) < busy {
                // A busy-polling application reads the socket and runs the devices itself;
                // the engine only runs a round for the timers now and then.
                if now.saturating_sub(last_round) >= timer_round {
                    last_round = now;
                    self.pump(world, Pumper::Engine);
                }
                std::thread::sleep(recheck);
                recheck = (recheck * 2).min(max_recheck);
                continue;
            }
            last_round = now;
            if self.pump(world, Pumper::Engine) {
                // Moved something (for an application that stopped pumping, or none): check
                // on the next busy spell soon, and go again at once.
                recheck = APP_RECHECK;
                continue;
            }
            if self.next_timer.load(Ordering::Relaxed) <= self.now_ns() {
                // A round cut short, a flush waiting or a timer due: again, after letting
                // other threads run.
                std::thread::yield_now();
                continue;
            }
            match &epoll {
                // EINTR, or the timeout: the loop comes back here anyway.
                Ok(e) => {
                    let _ = e.wait(&mut events, EpollTimeout::from(IDLE_POLL_MS));
                }
                // No epoll (descriptors exhausted): sleep as long, and read then.
                Err(_) => std::thread::sleep(Duration::from_millis(u64::from(IDLE_POLL_MS))),
            }
        }
    }
}

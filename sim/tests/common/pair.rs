//! Two NICs brought up with real commands and connected, and their snapshots: the world the
//! data-path fuzz targets and the reset tests start every input from.
//!
//! Owns: [`Nic`] (a brought-up device with a PD, a CQ, a 64 KiB MR, an RC and a UD QP, and
//! receive WQEs posted on both QPs), [`Pair`] (two of them, RC connected to RC and UD
//! addressed to UD, packets carried between them by [`Pair::carry`]) and their snapshots
//! ([`Pair::snapshot`], [`Pair::reset_to`]: device state, host memory and the driver's view).
//! Must not: reach into the sim's internals (only `Device`'s public methods, as `Raw`).

use bypass_hw::cmd::mkey::MkeyAccess;
use bypass_hw::cmd::qp::{PathMtu, service_type as st};
use bypass_sim::Profile;

use super::qp::HostQp;
use super::{HostCq, HostMr, Raw, RawSnapshot};

/// Receive WQEs posted on each QP at setup (each a 1 KiB slice of the MR).
pub const RECVS: u32 = 8;

/// Host memory per NIC of a [`Pair::lean`]. About 165 KiB of it is used: the command queue
/// page, 48 KiB of mailboxes, two firmware pages, the async EQ (16 KiB), the CQ, the 64 KiB
/// MR, the QPs' rings and the doorbell records (`Raw::alloc` panics if they do not fit).
pub const LEAN_MEM: usize = 192 << 10;

/// One brought-up device and the driver's view of its objects.
pub struct Nic {
    /// The device and host memory.
    pub raw: Raw,
    /// The CQ both QPs complete to.
    pub cq: HostCq,
    /// The RC QP.
    pub rc: HostQp,
    /// The UD QP.
    pub ud: HostQp,
    /// The MR (all access rights).
    pub mr: HostMr,
}

/// A [`Nic`] at one moment.
pub struct NicSnapshot {
    raw: RawSnapshot,
    cq: HostCq,
    rc: HostQp,
    ud: HostQp,
}

impl Nic {
    /// A device of `profile` with `mem_len` bytes of host memory, brought up, with its
    /// objects created (QPs in RESET).
    pub fn new(profile: Profile, mem_len: usize) -> Self {
        let mut raw = Raw::with_memory(profile, mem_len, 24);
        raw.bring_up();
        let pd = raw.alloc_pd().expect("PD");
        let eqn = raw.async_eq.expect("EQ").eqn;
        let cq = raw.create_cq(6, eqn).expect("CQ");
        let mr = raw.reg_mr(pd, 64 << 10, MkeyAccess::all()).expect("MR");
        let rc = raw.create_qp(st::RC, pd, &cq, &cq, 4, 4).expect("RC QP");
        let ud = raw.create_qp(st::UD, pd, &cq, &cq, 4, 4).expect("UD QP");
        Self {
            raw,
            cq,
            rc,
            ud,
            mr,
        }
    }

    /// Posts [`RECVS`] receive WQEs on each QP, RC into the MR's first half, UD its second.
    pub fn post_recvs(&mut self) {
        let (key, va) = (self.mr.key, self.mr.va);
        for k in 0..u64::from(RECVS) {
            let mut rc = self.rc;
            self.raw.post_recv(&mut rc, &[(key, va + k * 1024, 1024)]);
            self.rc = rc;
            let mut ud = self.ud;
            self.raw
                .post_recv(&mut ud, &[(key, va + (32 << 10) + k * 1024, 1024)]);
            self.ud = ud;
        }
    }

    /// The device, its memory and the driver's view now.
    pub fn snapshot(&self) -> NicSnapshot {
        NicSnapshot {
            raw: self.raw.snapshot(),
            cq: self.cq,
            rc: self.rc,
            ud: self.ud,
        }
    }

    /// Back to `snap` (taken of this NIC).
    pub fn reset_to(&mut self, snap: &NicSnapshot) {
        self.raw.reset_to(&snap.raw);
        self.cq = snap.cq;
        self.rc = snap.rc;
        self.ud = snap.ud;
    }
}

/// Two connected NICs: `a` is device 1, `b` device 2.
pub struct Pair {
    /// Device 1.
    pub a: Nic,
    /// Device 2.
    pub b: Nic,
}

/// A [`Pair`] at one moment.
pub struct PairSnapshot {
    a: NicSnapshot,
    b: NicSnapshot,
}

impl Pair {
    /// Devices 1 and 2 (10.0.0.1 and 10.0.0.2), as [`Pair::connected_as`] connects them.
    pub fn connected(mem_len: usize) -> Self {
        Self::connected_as(Profile::with_id(1), Profile::with_id(2), mem_len)
    }

    /// NICs of profiles `pa` and `pb` up (`mem_len` bytes of host memory each), RC QPs
    /// connected to each other (GID index 0 of each), UD QPs in RTS, receive WQEs posted on
    /// every QP.
    pub fn connected_as(pa: Profile, pb: Profile, mem_len: usize) -> Self {
        Self::connected_rnr(pa, pb, mem_len, 7)
    }

    /// As [`Pair::connected_as`], the RC QPs retrying an RNR NAK `rnr_retry` times (7:
    /// forever, as [`Pair::connected_as`] has them). A fuzz target gives a finite count: a
    /// SEND with no receive posted then ends in an RNR-retry-exceeded error instead of
    /// resending its packets every round until the carry budget runs out.
    pub fn connected_rnr(pa: Profile, pb: Profile, mem_len: usize, rnr_retry: u8) -> Self {
        let mut a = Nic::new(pa, mem_len);
        let mut b = Nic::new(pb, mem_len);
        a.raw.rnr_retry = rnr_retry;
        b.raw.rnr_retry = rnr_retry;
        let (ga, gb) = (a.raw.gid(), b.raw.gid());
        let (arc, brc, aud, bud) = (a.rc, b.rc, a.ud, b.ud);
        a.raw
            .walk_to_rts(&arc, st::RC, brc.qpn, gb, (1, 2), PathMtu::Mtu1024);
        b.raw
            .walk_to_rts(&brc, st::RC, arc.qpn, ga, (2, 1), PathMtu::Mtu1024);
        a.raw
            .walk_to_rts(&aud, st::UD, 0, gb, (1, 1), PathMtu::Mtu1024);
        b.raw
            .walk_to_rts(&bud, st::UD, 0, ga, (1, 1), PathMtu::Mtu1024);
        a.post_recvs();
        b.post_recvs();
        Self { a, b }
    }

    /// Devices 1 and 2 connected as [`Pair::connected_rnr`] connects them, in the least host
    /// memory that holds them: each in [`LEAN_MEM`] bytes, its firmware asking for one boot
    /// and one init page (the default profile asks for 48, which every reset of a snapshot
    /// would copy back for nothing). The world of the `wqes` fuzz target and of its seeds,
    /// which must agree: a WQE names MR addresses, and they follow from this layout.
    pub fn lean(rnr_retry: u8) -> Self {
        let lean = |id| Profile {
            boot_pages: 1,
            init_pages: 1,
            ..Profile::with_id(id)
        };
        Self::connected_rnr(lean(1), lean(2), LEAN_MEM, rnr_retry)
    }

    /// Steps both devices and carries packets between them, moving time on by 50 µs a
    /// round, for at most `rounds` rounds or until both are idle with no timer pending.
    ///
    /// A round in which nothing moved is followed by rounds that do nothing until the
    /// earliest timer falls due (`Device::next_deadline` names every timer a step acts on):
    /// those rounds are skipped, counted against `rounds`, and time lands on the round that
    /// fires the timer, so the devices see the same times and packets as round-by-round
    /// stepping, at the cost of one round.
    pub fn carry(&mut self, rounds: usize) {
        self.carry_seeing(rounds, |_, _| {});
    }

    /// [`Pair::carry`], showing `seen` every packet carried with the time it was carried at
    /// (`sim/tests/carry.rs` compares them with round-by-round stepping's).
    pub fn carry_seeing(&mut self, rounds: usize, mut seen: impl FnMut(u64, &[u8])) {
        const ROUND: u64 = 50_000;
        let (a, b) = (&mut self.a.raw.dev, &mut self.b.raw.dev);
        let mut left = rounds;
        let mut now = a.now().max(b.now());
        while left > 0 {
            left -= 1;
            now += ROUND;
            a.set_time(now);
            b.set_time(now);
            let mut moved = a.step() | b.step();
            while let Some(p) = a.take_tx() {
                seen(now, &p);
                b.receive(p);
                moved = true;
            }
            while let Some(p) = b.take_tx() {
                seen(now, &p);
                a.receive(p);
                moved = true;
            }
            if !moved {
                let Some(due) = a.next_deadline().into_iter().chain(b.next_deadline()).min() else {
                    break;
                };
                // Rounds before the one at or after `due` find nothing to do.
                let idle = due.saturating_sub(now + 1) / ROUND;
                let skip = usize::try_from(idle).unwrap_or(usize::MAX).min(left);
                left -= skip;
                now += skip as u64 * ROUND;
                a.set_time(now);
                b.set_time(now);
            }
        }
    }

    /// Every CQE waiting on A's CQ, then every one on B's, polled (each NIC's CQ consumer
    /// moves on past them).
    pub fn poll_all(&mut self) -> Vec<[u8; 64]> {
        let mut cqes = Vec::new();
        for n in [&mut self.a, &mut self.b] {
            let mut cq = n.cq;
            while let Some(e) = n.raw.poll_cq(&mut cq) {
                cqes.push(e);
            }
            n.cq = cq;
        }
        cqes
    }

    /// Both NICs now.
    pub fn snapshot(&self) -> PairSnapshot {
        PairSnapshot {
            a: self.a.snapshot(),
            b: self.b.snapshot(),
        }
    }

    /// Both NICs back to `snap` (taken of this pair).
    pub fn reset_to(&mut self, snap: &PairSnapshot) {
        self.a.reset_to(&snap.a);
        self.b.reset_to(&snap.b);
    }
}

//! The interleaving that completion sequence numbers must survive, driven step by step on the
//! stepped sim: a poll takes a CQE of QP X and lets go of the CQ; X is destroyed, a new QP X'
//! gets X's number from the firmware and posts; only then is X's completion turned into a
//! [`Completion`]. Reclaiming it on X' must be refused: the NIC may still be using the buffer
//! of X's WQE-slot successor on X'.
//!
//! Owns: this test. Must not: test the driver's poll itself (driver `poll.rs` tests do).

use std::time::Duration;

use crate::error::VerbsError;
use crate::test_pair::sim_pair;
use crate::{Access, Cq, Qp, QpBuilder, SendOp, SendWr};

const WAIT: Duration = Duration::from_secs(2);

/// An RC QP on `cq_a` connected to a new QP on `cq_b`.
fn connected(a: &crate::Pd, cq_a: &Cq, b: &crate::Pd, cq_b: &Cq) -> Result<(Qp, Qp), VerbsError> {
    connected_with(a, cq_a, QpBuilder::rc(b, cq_b, cq_b))
}

/// An RC QP on `cq_a` connected to the QP `y` builds.
fn connected_with(a: &crate::Pd, cq_a: &Cq, y: QpBuilder) -> Result<(Qp, Qp), VerbsError> {
    let mut x = QpBuilder::rc(a, cq_a, cq_a).build()?;
    let mut y = y.build()?;
    let (ex, ey) = (x.endpoint()?, y.endpoint()?);
    x.connect(&ey)?;
    y.connect(&ex)?;
    Ok((x, y))
}

#[test]
fn a_completion_of_a_destroyed_qp_numbered_after_its_poll_let_go_cannot_release_a_new_qps_buffers()
-> Result<(), VerbsError> {
    let (a, b) = sim_pair(11)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq_a, cq_b) = (Cq::new(&a, 64)?, Cq::new(&b, 64)?);
    let pool = pd_a.create_pool(256, 4)?;
    let target = pd_b.register(
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;

    // QP X writes once; its completion lands in cq_a.
    let (mut x, y) = connected(&pd_a, &cq_a, &pd_b, &cq_b)?;
    let stale_qpn = x.qpn();
    x.post_send(SendWr::new(1, SendOp::Write(target.remote())).sge(pool.lease(64)?))?;
    a.progress();
    b.progress();

    // Step 1: the driver's poll takes X's CQE and releases the CQ's consumer side; the
    // completion is not yet a `Completion` (the window the race lives in).
    let (wc, seq) = cq_a.inner.poll_one_seq().expect("X's completion");
    assert_eq!((wc.qpn(), wc.wr_id()), (stale_qpn, 1));
    assert!(wc.is_ok(), "{wc:?}");

    // Step 2: X is destroyed (DESTROY_QP, then the clean of cq_a) while its WQE's buffer is
    // still parked; step 3: the firmware hands X's number to the next QP on cq_a.
    drop(x);
    drop(y);
    let (mut x2, _y2) = connected(&pd_a, &cq_a, &pd_b, &cq_b)?;
    assert_eq!(x2.qpn(), stale_qpn, "the sim reuses the lowest free QPN");

    // Step 4: X' posts a READ into a lease at the same ring slot (SQ position 0); nothing
    // moves on the stepped fabric, so the NIC has not written it yet.
    x2.post_send(
        SendWr::new(
            2,
            SendOp::Read(target.remote().slice(0, 64).expect("64 bytes")),
        )
        .sge(pool.lease(64)?),
    )?;
    assert_eq!(
        pool.leased(),
        1,
        "X's lease went back at its destroy; X''s is parked"
    );
    assert_eq!(x2.sends_outstanding(), 1);

    // Step 5: X's completion becomes a proof only now, with the number its poll took.
    let stale = cq_a.wrap((wc, seq));
    assert_eq!(
        stale.qpn(),
        x2.qpn(),
        "same QPN, same CQ: only the number tells them apart"
    );
    match x2.reclaim(stale) {
        Err(VerbsError::StaleCompletion {
            qpn,
            queue,
            seq: got,
            posted_at,
        }) => {
            assert_eq!((qpn, queue, got), (stale_qpn, "send", seq));
            // The READ on the new QP was posted when the count stood at the stale
            // completion's own number: polled no later than its post, it cannot be its.
            assert_eq!(posted_at, seq, "posted at {posted_at}, polled as {seq}");
        }
        other => panic!("a stale completion was not refused: {other:?}"),
    }
    assert_eq!(pool.leased(), 1, "the READ's buffer stays parked");
    assert_eq!(x2.sends_outstanding(), 1);

    // The same completion numbered at wrap time instead (the count has moved on since the
    // destroy) passes: the number taken at poll time is what refuses it.
    let late = cq_a.wrap((wc, cq_a.inner.consumed() + 1));
    let released = x2.reclaim(late)?;
    assert!(
        !released.is_empty(),
        "a number taken after the destroy ranks the old completion after the new post"
    );
    drop(released);

    // X''s own completion arrives and is accepted (its buffer was already handed back by the
    // late-numbered proof above: nothing left to release, and no error).
    let own = cq_a.wait(WAIT)?.expect("X''s completion");
    assert_eq!((own.qpn(), own.wr_id()), (stale_qpn, 2));
    assert!(own.is_ok(), "{own}");
    assert!(own.seq() > seq);
    assert!(x2.reclaim(own)?.is_empty());
    Ok(())
}

#[test]
fn a_qps_own_completion_is_numbered_above_its_post() -> Result<(), VerbsError> {
    let (a, b) = sim_pair(12)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq_a, cq_b) = (Cq::new(&a, 8)?, Cq::new(&b, 8)?);
    let pool = pd_a.create_pool(256, 4)?;
    let target = pd_b.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (mut x, _y) = connected(&pd_a, &cq_a, &pd_b, &cq_b)?;
    // More completions than CQ entries: the numbers keep counting past the ring's laps.
    for k in 0..20u64 {
        let before = cq_a.table().consumed();
        x.post_send(SendWr::new(k, SendOp::Write(target.remote())).sge(pool.lease(8)?))?;
        let c = cq_a.wait(WAIT)?.expect("a completion");
        assert_eq!(c.seq(), before + 1, "one CQE consumed per WRITE");
        assert_eq!(c.seq(), cq_a.table().consumed());
        assert!(x.reclaim_lease(c)?.is_some(), "write {k}");
    }
    assert_eq!(pool.leased(), 0);
    Ok(())
}

#[test]
fn a_receive_completion_kept_while_its_slot_is_reposted_releases_no_other_receive()
-> Result<(), VerbsError> {
    use crate::RecvWr;
    let (a, b) = sim_pair(13)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, mut cq_b) = (Cq::new(&a, 64)?, Cq::new(&b, 64)?);
    let pool_a = pd_a.create_pool(256, 4)?;
    let pool_b = pd_b.create_pool(256, 8)?;
    let (mut x, mut y) = connected_with(
        &pd_a,
        &cq_a,
        QpBuilder::rc(&pd_b, &cq_b, &cq_b).max_recv_wr(4),
    )?;
    let slots = 4u32; // the receive table of `max_recv_wr(4)`: receive 4 reuses slot 0
    assert_eq!(y.options().caps.max_recv_wr, slots);
    // Fill the receive queue; each buffer tagged with its receive's number.
    for k in 0..slots {
        let mut l = pool_b.lease(64)?;
        l.as_mut_slice().fill(k as u8);
        y.post_recv(RecvWr::new(u64::from(k), l))?;
    }
    // One SEND consumes receive 0; its completion is polled and kept.
    x.post_send(SendWr::new(9, SendOp::Send).sge(pool_a.lease(8)?))?;
    let c0 = cq_b.wait(WAIT)?.expect("receive 0");
    assert_eq!(c0.wr_id(), 0);
    // The driver lets slot 0 be reused: receive `slots` goes there.
    let mut l = pool_b.lease(64)?;
    l.as_mut_slice().fill(0xee);
    y.post_recv(RecvWr::new(u64::from(slots), l))?;
    // Receives 1.. are still posted (no SEND for them): reclaiming receive 0's completion
    // must not hand any of their buffers back.
    let got = y.reclaim(c0)?;
    let tags: Vec<u8> = got
        .into_leases()
        .map(|l| l.as_slice().first().copied().unwrap_or(0xff))
        .collect();
    // Receive 0's slot was overwritten by a later lap (its buffer went back to the pool when
    // receive `slots` took the slot: `Outstanding::park`), so its completion releases nothing;
    // matching "the oldest outstanding receive" instead would release receive 1's buffer here.
    assert!(
        tags.is_empty(),
        "receive 0's completion released the buffers tagged {tags:?}"
    );
    assert_eq!(
        pool_b.leased(),
        slots as usize,
        "receives 1.. and the one reposted in slot 0 keep theirs"
    );
    Ok(())
}

#[test]
fn the_receive_table_follows_the_drivers_queue_through_laps_when_max_recv_wr_is_not_a_power_of_two()
-> Result<(), VerbsError> {
    use crate::RecvWr;
    let (a, b) = sim_pair(17)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq_a, mut cq_b) = (Cq::new(&a, 64)?, Cq::new(&b, 64)?);
    let pool_a = pd_a.create_pool(256, 4)?;
    let pool_b = pd_b.create_pool(256, 8)?;
    // Three asked for: the driver's RQ holds 4, and the verbs table must hold as many.
    let (mut x, mut y) = connected_with(
        &pd_a,
        &cq_a,
        QpBuilder::rc(&pd_b, &cq_b, &cq_b).max_recv_wr(3),
    )?;
    let slots = 4u32;
    // Three laps of the ring, each slot's buffer tagged with its receive's number; every
    // completion must give back exactly its own receive's buffer.
    let mut next = 0u32;
    for _lap in 0..3 {
        while next < slots * 3 && y.recvs_outstanding() < slots {
            let mut l = pool_b.lease(64)?;
            l.as_mut_slice().fill(next as u8);
            y.post_recv(RecvWr::new(u64::from(next), l))?;
            next += 1;
        }
        for _ in 0..slots {
            x.post_send(SendWr::new(9, SendOp::Send).sge(pool_a.lease(8)?))?;
            let c = cq_b.wait(WAIT)?.expect("a receive completion");
            assert!(c.is_ok(), "{c:?}");
            let k = c.wr_id();
            let tags: Vec<u8> = y
                .reclaim(c)?
                .into_leases()
                // The SEND overwrote the first 8 bytes; the last keeps the tag.
                .map(|l| l.as_slice().get(63).copied().unwrap_or(0xff))
                .collect();
            assert_eq!(tags, [k as u8], "receive {k} gave back these buffers");
            // The sender's completion too, so its pool does not run dry.
            let ca = cq_a.wait(WAIT)?.expect("the SEND's completion");
            drop(x.reclaim(ca)?);
        }
    }
    assert_eq!(pool_b.leased(), 0, "every receive buffer went back");
    Ok(())
}

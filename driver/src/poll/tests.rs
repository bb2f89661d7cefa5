//! Poller tests: the owner-bit rule, the consumer index, `wr_id`s from the QP slot arrays,
//! every poll form against `poll_one` on the same mix of CQEs, sequence numbers past 2^32, the
//! clean, and the fast step's one-test rules against `bypass_hw::cqe::sw_owns`.
use super::*;
use crate::wq::tests::TestRing;
use crate::wq::{RqRing, SqRing, WqShared};
use bypass_hw::cqe::{CQE_INVALID_OP_OWN, ErrCqe, MLX5_CQE_OWNER_MASK, make_op_own, sw_owns};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;
use zerocopy::{FromZeros, IntoBytes};

struct Fixture {
    _cq: TestRing,
    _dbr: TestRing,
    poller: CqPoller,
    table: Arc<QpTable>,
}

fn fixture(nent: u32) -> Fixture {
    let mut cq = TestRing::new(64 * nent as usize);
    let mut dbr = TestRing::new(64);
    let ring = cq.ring();
    for k in 0..nent as usize {
        ring.write(k * 64 + 63, &[CQE_INVALID_OP_OWN | 1]);
    }
    let table = Arc::new(QpTable::new());
    let poller = CqPoller::new(ring, nent, dbr.ring(), table.clone()).unwrap();
    Fixture {
        _cq: cq,
        _dbr: dbr,
        poller,
        table,
    }
}

#[test]
fn a_ring_the_poller_cannot_read_is_refused_with_what_does_not_fit() {
    let mut cq = TestRing::new(64 * 8);
    let mut dbr = TestRing::new(64);
    let table = Arc::new(QpTable::new());
    let refused = |ring, nent, dbr| CqPoller::new(ring, nent, dbr, table.clone()).err();
    assert_eq!(
        refused(cq.ring(), 6, dbr.ring()),
        Some(CqGeometryError::Entries(6))
    );
    assert_eq!(
        refused(cq.ring(), 16, dbr.ring()),
        Some(CqGeometryError::RingTooSmall {
            ring: 512,
            nent: 16
        })
    );
    let mut short = [0u32; 1];
    let base = std::ptr::NonNull::new(short.as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: `short` outlives the ring, which the refused poller never reads.
    let short = unsafe { RingPtr::new(base, 4) }.unwrap();
    assert_eq!(
        refused(cq.ring(), 8, short),
        Some(CqGeometryError::Doorbell { len: 4 })
    );
    assert!(refused(cq.ring(), 8, dbr.ring()).is_none());
}

fn put(f: &Fixture, index: u32, cqe: &Cqe64) {
    f.poller
        .ring
        .write((index & (f.poller.nent - 1)) as usize * 64, cqe.as_bytes());
}

fn req(qpn: u32, counter: u16, op: WqeOpcode, owner: bool) -> Cqe64 {
    let mut c = Cqe64::new_zeroed();
    c.sop_drop_qpn.set((u32::from(op.0) << 24) | qpn);
    c.wqe_counter.set(counter);
    c.byte_cnt.set(20);
    c.op_own = make_op_own(CqeOpcode::REQ, 0, false, owner);
    c
}

#[test]
fn owner_bit_rule_and_ci_publication() {
    let mut f = fixture(4);
    let mut out = [decode(&Cqe64::new_zeroed()); 4];
    assert_eq!(f.poller.poll(&mut out), 0, "a fresh ring is all invalid");
    // Lap 0: owner 0. Three CQEs.
    for i in 0..3 {
        put(&f, i, &req(5, i as u16, WqeOpcode::RDMA_READ, false));
    }
    assert_eq!(f.poller.poll(&mut out), 3);
    assert_eq!(out[0].opcode(), WcOpcode::RdmaRead);
    assert_eq!(out[0].byte_len(), 20);
    let mut ci = [0u8; 4];
    f.poller.dbr.read(0, &mut ci);
    assert_eq!(u32::from_be_bytes(ci), 3);
    // Slot 3 of lap 0, then slot 0 of lap 1 (owner 1).
    put(&f, 3, &req(5, 3, WqeOpcode::SEND, false));
    put(&f, 4, &req(5, 4, WqeOpcode::SEND, false));
    assert_eq!(
        f.poller.poll(&mut out),
        1,
        "a lap-0 owner bit at ci 4 is stale"
    );
    put(&f, 4, &req(5, 4, WqeOpcode::SEND_IMM, true));
    let wc = f.poller.poll_one().unwrap();
    assert_eq!(
        (wc.opcode(), wc.flags()),
        (WcOpcode::Send, WcFlags::WITH_IMM)
    );
    assert_eq!(f.poller.consumer_index(), 5);
}

#[test]
fn wr_ids_come_from_the_qp_slot_arrays() {
    let mut f = fixture(8);
    let sh = Arc::new(WqShared::new(9, 8, 4));
    f.table.attach(sh.clone());
    let mut sqm = TestRing::new(8 * 64);
    let mut sq = SqRing::new(sqm.ring());
    sq.commit(&sh, 0, 2, 0xaa);
    sq.commit(&sh, 2, 1, 0xbb);
    let mut rqm = TestRing::new(4 * 64);
    let mut rq = RqRing::new(rqm.ring(), 64);
    rq.commit(&sh, 0x11);
    rq.commit(&sh, 0x22);
    put(&f, 0, &req(9, 2, WqeOpcode::RDMA_WRITE, false));
    let mut r = Cqe64::new_zeroed();
    r.sop_drop_qpn.set(9);
    r.flags_rqpn.set((2 << 28) | 0x77);
    r.byte_cnt.set(100);
    r.imm_inval_pkey.set(0x1234);
    r.op_own = make_op_own(CqeOpcode::RESP_SEND_IMM, 0, true, false);
    put(&f, 1, &r);
    let wc = f.poller.poll_one().unwrap();
    assert_eq!((wc.wr_id(), wc.opcode()), (0xbb, WcOpcode::RdmaWrite));
    assert_eq!(
        sh.sq_tail(),
        3,
        "the unsignaled WQE before it is retired too"
    );
    let wc = f.poller.poll_one().unwrap();
    assert_eq!(wc.wr_id(), 0x11);
    assert_eq!((wc.byte_len(), wc.src_qp(), wc.imm()), (100, 0x77, 0x1234));
    assert!(
        wc.flags()
            .contains(WcFlags::WITH_IMM | WcFlags::GRH | WcFlags::SOLICITED | WcFlags::RECV)
    );
    f.table.detach(9);
    put(&f, 2, &req(9, 2, WqeOpcode::RDMA_WRITE, false));
    assert_eq!(
        f.poller.poll_one().unwrap().wr_id(),
        0,
        "a detached QP's wr_id is unknown"
    );
}

#[test]
fn a_receive_completion_names_the_receive_wqe_it_completed_whatever_wqe_counter_holds() {
    let mut f = fixture(8);
    let sh = Arc::new(WqShared::new(9, 8, 4));
    f.table.attach(sh.clone());
    let mut rqm = TestRing::new(4 * 64);
    let mut rq = RqRing::new(rqm.ring(), 64);
    for k in 0..4 {
        rq.commit(&sh, 0x10 + k);
    }
    // Receive CQEs whose `wqe_counter` holds junk (rdma-core does not read it for an RQ),
    // one of them a flushed receive (RESP_ERR).
    let recv = |counter: u16, op: CqeOpcode| {
        let mut r = Cqe64::new_zeroed();
        r.sop_drop_qpn.set(9);
        r.wqe_counter.set(counter);
        r.op_own = make_op_own(op, 0, false, false);
        r
    };
    put(&f, 0, &recv(0xabcd, CqeOpcode::RESP_SEND));
    put(&f, 1, &recv(0x7777, CqeOpcode::RESP_SEND));
    put(&f, 2, &recv(0x0003, CqeOpcode::RESP_SEND));
    put(&f, 3, &recv(0xffff, CqeOpcode::RESP_ERR));
    let (wc, _) = f.poller.poll_one_seq().unwrap();
    assert_eq!((wc.wr_id(), wc.wqe_index()), (0x10, 0));
    let (wc, _, _) = f.poller.poll_raw_seq().unwrap();
    assert_eq!((wc.wr_id(), wc.wqe_index()), (0x11, 1));
    {
        let mut g = f.poller.start_poll().unwrap();
        assert_eq!((g.wr_id(), g.wqe_index()), (0x12, 2));
        assert_eq!(g.completion().wqe_index(), 2);
        assert!(g.next_poll());
        assert_eq!((g.wr_id(), g.wqe_index(), g.is_ok()), (0x13, 3, false));
    }
    assert_eq!(sh.rq_tail(), 4);
    // A send completion keeps its `wqe_counter`.
    put(&f, 4, &req(9, 0x55, WqeOpcode::SEND, false));
    let mut out = [decode(&Cqe64::new_zeroed()); 2];
    assert_eq!(f.poller.poll(&mut out), 1);
    assert_eq!(out[0].wqe_index(), 0x55);
}

#[test]
fn clean_drops_one_qps_cqes_across_the_wrap_and_keeps_the_rest_in_order() {
    let mut f = fixture(4);
    // Consume two, so the four pending CQEs are at 2, 3 (lap 0) and 4, 5 (lap 1, owner 1).
    put(&f, 0, &req(5, 0, WqeOpcode::SEND, false));
    put(&f, 1, &req(5, 1, WqeOpcode::SEND, false));
    assert_eq!(f.poller.poll(&mut [decode(&Cqe64::new_zeroed()); 2]), 2);
    put(&f, 2, &req(9, 0, WqeOpcode::SEND, false));
    put(&f, 3, &req(5, 2, WqeOpcode::SEND, false));
    put(&f, 4, &req(9, 1, WqeOpcode::SEND, true));
    // Slot 5 (index 1 of lap 1) still holds lap 0's CQE: not produced yet.
    assert_eq!(f.poller.clean(9), 2);
    assert_eq!(f.poller.consumer_index(), 4);
    let mut ci = [0u8; 4];
    f.poller.dbr.read(0, &mut ci);
    assert_eq!(
        u32::from_be_bytes(ci),
        4,
        "the new consumer index is published"
    );
    let wc = f.poller.poll_one().unwrap();
    assert_eq!(
        (wc.qpn(), wc.wqe_index()),
        (5, 2),
        "moved to slot 4 with lap 1's owner bit"
    );
    assert!(f.poller.poll_one().is_none());
    assert_eq!(f.poller.clean(9), 0, "nothing left to drop");
}

#[test]
fn every_poll_form_numbers_its_completion_with_the_consumer_count_which_passes_2_pow_32_and_only_grows()
 {
    let mut f = fixture(4);
    // Start three CQEs short of 2^32: the count must not wrap with the ring arithmetic.
    let start: u64 = (1 << 32) - 3;
    let held = f.table.try_acquire().unwrap();
    held.get().set_ci(start);
    held.release();
    // QP 5 is attached (its send completions take the fast path once the first has filled
    // the last-QP cache), its WQE at index i posted with wr_id 0x100 + i.
    let sh = Arc::new(WqShared::new(5, 8, 4));
    f.table.attach(sh.clone());
    let mut sqm = TestRing::new(8 * 64);
    let mut sq = SqRing::new(sqm.ring());
    for i in 0..8u32 {
        let idx = (start as u32).wrapping_add(i);
        sq.commit(&sh, idx, 1, 0x100 + u64::from(idx & 7));
    }
    let wr = |ci: u64| 0x100 + (ci & 7);
    // A SEND CQE of `qpn` at consumer index `ci`, with the owner bit of its lap.
    let at = |f: &Fixture, ci: u64, qpn: u32| {
        put(
            f,
            ci as u32,
            &req(qpn, ci as u16, WqeOpcode::SEND, ci & 4 != 0),
        );
    };
    at(&f, start, 5);
    let (wc, seq) = f.poller.poll_one_seq().unwrap();
    assert_eq!((wc.wqe_index(), seq), (start as u16, start + 1));
    assert_eq!(wc.wr_id(), wr(start));
    assert_eq!(
        f.poller.consumed(),
        seq,
        "the number is the count after the CQE"
    );

    at(&f, start + 1, 5);
    let (wc, raw, seq) = f.poller.poll_raw_seq().unwrap();
    assert_eq!((wc.wqe_index(), seq), ((start + 1) as u16, start + 2));
    assert_eq!(wc.wr_id(), wr(start + 1));
    assert_eq!(raw[63] >> 4, CqeOpcode::REQ.0);

    // The extended poll across 2^32.
    at(&f, start + 2, 5);
    at(&f, start + 3, 5);
    {
        let mut g = f.poller.start_poll().unwrap();
        assert_eq!((g.seq(), g.wr_id()), (start + 3, wr(start + 2)));
        assert!(g.next_poll());
        assert_eq!((g.seq(), g.wqe_index()), (start + 4, (start + 3) as u16));
        assert!(!g.next_poll());
    }
    assert_eq!(f.poller.consumed(), (1 << 32) + 1);
    assert_eq!(f.poller.consumer_index(), 1, "the low 32 bits");
    let mut dbr = [0u8; 4];
    f.poller.dbr.read(0, &mut dbr);
    assert_eq!(
        u32::from_be_bytes(dbr),
        1,
        "the doorbell record takes the low 24 bits"
    );

    // A clean drops QP 9's CQE: the count moves up by the dropped CQE, never down.
    at(&f, start + 4, 9);
    at(&f, start + 5, 5);
    assert_eq!(f.poller.clean(9), 1);
    assert_eq!(f.poller.consumed(), start + 5);
    assert_eq!(f.poller.clean(9), 0);
    assert_eq!(
        f.poller.consumed(),
        start + 5,
        "nothing dropped, nothing counted"
    );

    // The batch poll: `out[0]` has the returned number, `out[i]` that plus `i`.
    at(&f, start + 6, 5);
    let mut out = [decode(&Cqe64::new_zeroed()); 4];
    assert_eq!(f.poller.poll_seq(&mut out), (2, start + 6));
    let got: Vec<_> = out[..2].iter().map(WorkCompletion::wqe_index).collect();
    assert_eq!(got, [(start + 5) as u16, (start + 6) as u16]);
    assert_eq!(f.poller.consumed(), start + 7);
    assert!(f.poller.poll_one_seq().is_none());
    assert_eq!(f.poller.poll_seq(&mut out).0, 0);
    assert_eq!(f.poller.consumed(), start + 7);
}

#[test]
fn error_cqes_carry_the_syndrome_and_the_failed_wqe() {
    let mut f = fixture(4);
    let sh = Arc::new(WqShared::new(3, 4, 0));
    f.table.attach(sh.clone());
    let mut sqm = TestRing::new(4 * 64);
    let mut sq = SqRing::new(sqm.ring());
    sq.commit(&sh, 0, 1, 0x42);
    let mut e = ErrCqe::new_zeroed();
    e.syndrome = CqeSyndrome::LOCAL_PROT_ERR.0;
    e.vendor_err_synd = 0x7;
    e.s_wqe_opcode_qpn
        .set((u32::from(WqeOpcode::SEND.0) << 24) | 3);
    e.wqe_counter.set(0);
    e.op_own = make_op_own(CqeOpcode::REQ_ERR, 0, false, false);
    let c: Cqe64 = zerocopy::transmute!(e);
    put(&f, 0, &c);
    let (wc, raw) = f.poller.poll_raw().unwrap();
    assert_eq!(wc.status(), WcStatus::Error(CqeSyndrome::LOCAL_PROT_ERR));
    assert!(
        wc.status()
            .to_string()
            .starts_with("LOCAL_PROT_ERR (0x4): a local SGE's lkey")
    );
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.vendor_err()),
        (0x42, WcOpcode::Send, 7)
    );
    assert_eq!(raw, *c.as_bytes());
    assert_eq!(f.poller.cqe_bytes(0), raw);
}

/// Fills a fixture with the same mix of CQEs: sends and receives of QP 9, a send of QP 25
/// (same home slot as 9 in a 16-slot table: found by probing), an error CQE, and a CQE of
/// a QPN nobody attached. Returns the QPs' bookkeeping.
fn mixed(f: &Fixture) -> (Arc<WqShared>, Arc<WqShared>, Vec<(TestRing, TestRing)>) {
    let (a, b) = (
        Arc::new(WqShared::new(9, 8, 4)),
        Arc::new(WqShared::new(25, 8, 4)),
    );
    f.table.attach(a.clone());
    f.table.attach(b.clone());
    let mut keep = Vec::new();
    for (sh, id) in [(&a, 0xa0u64), (&b, 0xb0)] {
        let (mut sqm, mut rqm) = (TestRing::new(8 * 64), TestRing::new(4 * 64));
        let mut sq = SqRing::new(sqm.ring());
        sq.commit(sh, 0, 1, id);
        sq.commit(sh, 1, 2, id + 1);
        let mut rq = RqRing::new(rqm.ring(), 64);
        rq.commit(sh, id + 2);
        keep.push((sqm, rqm));
    }
    put(f, 0, &req(9, 0, WqeOpcode::RDMA_WRITE, false));
    put(f, 1, &req(25, 1, WqeOpcode::SEND_IMM, false));
    let mut r = Cqe64::new_zeroed();
    r.sop_drop_qpn.set(9);
    r.flags_rqpn.set((2 << 28) | 0x77);
    r.byte_cnt.set(100);
    r.imm_inval_pkey.set(0x1234);
    r.op_own = make_op_own(CqeOpcode::RESP_WR_IMM, 0, true, false);
    put(f, 2, &r);
    let mut e = ErrCqe::new_zeroed();
    e.syndrome = CqeSyndrome::REMOTE_ACCESS_ERR.0;
    e.vendor_err_synd = 0x88;
    e.s_wqe_opcode_qpn
        .set((u32::from(WqeOpcode::RDMA_READ.0) << 24) | 9);
    e.wqe_counter.set(1);
    e.op_own = make_op_own(CqeOpcode::REQ_ERR, 0, false, false);
    put(f, 3, &zerocopy::transmute!(e));
    put(f, 4, &req(0x77, 3, WqeOpcode::SEND, false));
    (a, b, keep)
}

/// Every completion `poll_one` takes from `f`, oldest first: the reference the other
/// poll styles are compared with.
fn poll_one_all(f: &mut Fixture) -> Vec<WorkCompletion> {
    let mut all = Vec::new();
    while let Some(wc) = f.poller.poll_one() {
        all.push(wc);
    }
    all
}

/// Asserts that each work queue of `x` has the same SQ and RQ tails as its twin in `y`
/// (two [`mixed`] fixtures polled in different ways freed the same slots).
fn assert_same_tails(x: [&Arc<WqShared>; 2], y: [&Arc<WqShared>; 2]) {
    for (x, y) in x.into_iter().zip(y) {
        assert_eq!((x.sq_tail(), x.rq_tail()), (y.sq_tail(), y.rq_tail()));
    }
}

#[test]
fn the_extended_poll_reads_the_same_completions_as_poll_one() {
    let (mut fa, mut fb) = (fixture(8), fixture(8));
    let (a1, b1, _k1) = mixed(&fa);
    let (a2, b2, _k2) = mixed(&fb);
    let want = poll_one_all(&mut fa);
    assert_eq!(want.len(), 5);
    let mut got = Vec::new();
    {
        let mut p = fb.poller.start_poll().expect("five CQEs are ready");
        loop {
            let wc = p.completion();
            // Each lazy accessor reads what the full decode does.
            assert_eq!(
                (p.wr_id(), p.status(), p.is_ok(), p.opcode(), p.byte_len()),
                (
                    wc.wr_id(),
                    wc.status(),
                    wc.is_ok(),
                    wc.opcode(),
                    wc.byte_len()
                )
            );
            assert_eq!(
                (p.imm(), p.qpn(), p.src_qp(), p.flags(), p.wqe_index()),
                (wc.imm(), wc.qpn(), wc.src_qp(), wc.flags(), wc.wqe_index())
            );
            assert_eq!(p.vendor_err(), wc.vendor_err());
            got.push(wc);
            if !p.next_poll() {
                break;
            }
        }
        assert_eq!(
            p.wr_id(),
            got[4].wr_id(),
            "an empty next_poll keeps the last one"
        );
        p.end_poll();
    }
    assert_eq!(got, want);
    assert_eq!(
        got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        [0xa0, 0xb1, 0xa2, 0xa1, 0],
        "the colliding QP is found by probing; an unknown QPN has no wr_id"
    );
    assert_same_tails([&a1, &b1], [&a2, &b2]);
    let (mut ca, mut cb) = ([0u8; 4], [0u8; 4]);
    fa.poller.dbr.read(0, &mut ca);
    fb.poller.dbr.read(0, &mut cb);
    assert_eq!((u32::from_be_bytes(cb), fb.poller.consumer_index()), (5, 5));
    assert_eq!(ca, cb);
    assert!(fb.poller.start_poll().is_none(), "nothing more");
}

#[test]
fn the_batch_poll_reads_the_same_completions_as_poll_one() {
    let (mut fa, mut fb) = (fixture(8), fixture(8));
    let (a1, b1, _k1) = mixed(&fa);
    let (a2, b2, _k2) = mixed(&fb);
    let want = poll_one_all(&mut fa);
    let mut out = [decode(&Cqe64::new_zeroed()); 3];
    let mut got = Vec::new();
    loop {
        let n = fb.poller.poll(&mut out);
        got.extend_from_slice(&out[..n]);
        if n < out.len() {
            break;
        }
    }
    assert_eq!(got, want, "fast and cold steps mixed in one batch");
    assert_eq!(
        got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        [0xa0, 0xb1, 0xa2, 0xa1, 0]
    );
    assert_same_tails([&a1, &b1], [&a2, &b2]);
    assert_eq!(fb.poller.consumer_index(), 5);
}

#[test]
fn the_extended_poll_publishes_the_consumer_index_when_it_ends() {
    let mut f = fixture(4);
    put(&f, 0, &req(5, 0, WqeOpcode::SEND, false));
    put(&f, 1, &req(5, 1, WqeOpcode::SEND, false));
    {
        let mut p = f.poller.start_poll().unwrap();
        assert!(p.next_poll());
        assert!(!p.next_poll());
    }
    assert_eq!(f.poller.consumer_index(), 2);
    // One CQE, guard dropped without next_poll: the index moves by one.
    put(&f, 2, &req(5, 2, WqeOpcode::SEND, false));
    assert_eq!(f.poller.start_poll().unwrap().wqe_index(), 2);
    assert_eq!(f.poller.consumer_index(), 3);
    // While a QP destroy or reset holds the consumer side, the poll takes nothing.
    put(&f, 3, &req(5, 3, WqeOpcode::SEND, false));
    let held = f.table.try_acquire().unwrap();
    assert!(f.poller.start_poll().is_none());
    held.release();
    assert_eq!(f.poller.start_poll().unwrap().wqe_index(), 3);
}

#[test]
fn the_fast_test_takes_exactly_software_owned_requester_cqes() {
    assert_eq!(
        MLX5_CQE_OWNER_MASK, 1,
        "the parity fold and the rotation assume the owner bit is bit 0"
    );
    for op_own in 0..=255u8 {
        for ci in [0u32, 8] {
            let x = op_own ^ u8::from(ci & 8 != 0);
            let owned = sw_owns(op_own, ci, 8);
            assert_eq!(
                x & FAST_MASK == 0,
                owned && op_own >> 4 == CqeOpcode::REQ.0,
                "op_own {op_own:#x}, ci {ci}"
            );
            // The one-comparison ownership test of the other opcodes.
            assert_eq!(sw_owns_x(x), owned, "op_own {op_own:#x}, ci {ci}");
            // What the cold step is handed: the CQE's own opcode (the parity is bit 0 only).
            assert_eq!(x >> 4, op_own >> 4);
        }
    }
}

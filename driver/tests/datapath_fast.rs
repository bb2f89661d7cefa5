//! The specialised data path end to end on stepped sim NICs: `Qp::post_write` (one-SGE RDMA
//! WRITE) against `Qp::post_send` of the same request — same WQE bytes, same BlueFlame
//! writes, same data at the peer, same errors — and `Cq::start_poll` against `Cq::poll_one`.

mod datapath_util;

use bypass_driver::poll::{WcOpcode, WorkCompletion};
use bypass_driver::post::{PostError, RemoteAddr, SendFlags, SendOp, SendWr, Sge};
use bypass_driver::qp_attr::QpType;
use datapath_util::*;

fn remote_of(b: &Side, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: b.mr.addr() + off,
        rkey: b.mr.rkey(),
    }
}

/// Everything a start_poll/next_poll walk sees, as full completions.
fn drain_ext(s: &mut Side) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    if let Some(mut p) = s.cq.start_poll() {
        loop {
            v.push(p.completion());
            if !p.next_poll() {
                break;
            }
        }
    }
    v
}

/// The WQE bytes with the WQE index (ctrl bytes 1..3) cleared.
fn without_index(mut b: Vec<u8>) -> Vec<u8> {
    b[1] = 0;
    b[2] = 0;
    b
}

#[test]
fn post_write_and_post_send_put_the_same_bytes_on_the_ring_and_the_uar() {
    let (f, mut a, b) = pair(11, QpType::Rc, true);
    let msg: Vec<u8> = (0..200u32).map(|i| (i * 13) as u8).collect();
    a.write(64, &msg);
    a.trace(true);
    let flags = [
        SendFlags::SIGNALED,
        SendFlags::empty(),
        SendFlags::SIGNALED | SendFlags::FENCE,
        SendFlags::SIGNALED | SendFlags::SOLICITED,
    ];
    // Each request twice: through post_send (even WQEs), then through post_write (odd ones).
    for (k, fl) in flags.into_iter().enumerate() {
        let off = 2048 * k as u64;
        let sge = [a.mr.sge(64, 200)];
        let wr = SendWr {
            flags: fl,
            ..SendWr::new(
                k as u64,
                SendOp::Write {
                    remote: remote_of(&b, off),
                },
                &sge,
            )
        };
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { a.qp.post_send(&wr) }.unwrap();
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            a.qp.post_write(k as u64, sge[0], remote_of(&b, off + 1024), fl)
        }
        .unwrap();
    }
    assert_eq!(a.qp.sq_cur_post(), 8);
    let w = a.uar_writes();
    assert_eq!(w.len(), 8);
    assert!(
        w.iter().all(|(_, d)| d.len() == 64),
        "lone WQEs go by BlueFlame"
    );
    let half = a.qp.bfreg().buf_size() as u64;
    for i in 0..4 {
        let (g, s) = (a.qp.wqe_bytes(2 * i), a.qp.wqe_bytes(2 * i + 1));
        assert_eq!(
            u16::from_be_bytes([s[1], s[2]]),
            2 * i as u16 + 1,
            "WQE index"
        );
        // The remote address differs by 1024 (raddr bytes 16..24): patch it back.
        let mut s = s.to_vec();
        let raddr = u64::from_be_bytes(s[16..24].try_into().unwrap()) - 1024;
        s[16..24].copy_from_slice(&raddr.to_be_bytes());
        assert_eq!(
            without_index(g.to_vec()),
            without_index(s.clone()),
            "WQE pair {i}"
        );
        // What BlueFlame carried is the WQEBB as it is in the ring.
        assert_eq!(w[2 * i as usize].1, g.to_vec());
        assert_eq!(w[2 * i as usize + 1].1, a.qp.wqe_bytes(2 * i + 1).to_vec());
        assert_eq!(
            w[2 * i as usize + 1].0 ^ w[2 * i as usize].0,
            half,
            "halves alternate"
        );
    }
    settle(&f);
    for k in 0..4 {
        assert_eq!(b.read(2048 * k, 200), msg);
        assert_eq!(b.read(2048 * k + 1024, 200), msg);
    }
    // The unsignaled pair (1) is retired by the next signaled WQE.
    let got = drain_ext(&mut a);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id(), w.opcode(), w.wqe_index()))
            .collect::<Vec<_>>(),
        [
            (0, WcOpcode::RdmaWrite, 0),
            (0, WcOpcode::RdmaWrite, 1),
            (2, WcOpcode::RdmaWrite, 4),
            (2, WcOpcode::RdmaWrite, 5),
            (3, WcOpcode::RdmaWrite, 6),
            (3, WcOpcode::RdmaWrite, 7),
        ]
    );
    assert_eq!(a.cq.consumer_index(), 6);
}

#[test]
fn start_poll_and_poll_one_see_the_same_completions() {
    let (fa, mut a, ba) = pair(15, QpType::Rc, true);
    let (fc, mut c, bc) = pair(15, QpType::Rc, true);
    ba.write(0, b"x");
    bc.write(0, b"x");
    for k in 0..40u64 {
        let fl = if k % 3 == 1 {
            SendFlags::empty()
        } else {
            SendFlags::SIGNALED
        };
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            a.qp.post_write(k, a.mr.sge(0, 16), remote_of(&ba, 16 * k), fl)
        }
        .unwrap();
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            c.qp.post_write(k, c.mr.sge(0, 16), remote_of(&bc, 16 * k), fl)
        }
        .unwrap();
    }
    // A receive completion too, with immediate data and the peer's QPN.
    a.recv(0x500, 4096, 64);
    c.recv(0x500, 4096, 64);
    let (s1, s2) = ([ba.mr.sge(0, 8)], [bc.mr.sge(0, 8)]);
    let mut bam = ba;
    let mut bcm = bc;
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        bam.qp
            .post_send(&SendWr::new(1, SendOp::SendImm { imm: 0xfeed }, &s1))
    }
    .unwrap();
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        bcm.qp
            .post_send(&SendWr::new(1, SendOp::SendImm { imm: 0xfeed }, &s2))
    }
    .unwrap();
    settle(&fa);
    settle(&fc);
    let want = a.drain_all();
    let got = drain_ext(&mut c);
    assert_eq!(want.len(), 27 + 1);
    // Same completions; wr_ids, opcodes, lengths, immediates, QPNs compared field by field
    // (QPNs are equal: both worlds were built the same way).
    assert_eq!(got, want);
    let r = got.iter().find(|w| w.opcode().is_recv()).unwrap();
    assert_eq!((r.wr_id(), r.imm(), r.byte_len()), (0x500, 0xfeed, 8));
    assert_eq!(a.cq.consumer_index(), c.cq.consumer_index());
}

#[test]
fn post_write_laps_the_ring_and_refuses_a_full_queue() {
    let (f, mut a, b) = pair(12, QpType::Rc, true);
    let depth = a.qp.sq_wqebbs();
    let sge: Sge = a.mr.sge(0, 8);
    a.write(0, &[7; 8]);
    let mut next = 0u64;
    for _lap in 0..3 {
        for _ in 0..depth {
            // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
            unsafe {
                a.qp.post_write(
                    next,
                    sge,
                    remote_of(&b, 8 * (next % 64)),
                    SendFlags::SIGNALED,
                )
            }
            .unwrap();
            next += 1;
        }
        // Full: refused with the general path's error, nothing written.
        let before = a.qp.sq_cur_post();
        let e = PostError::from(
            // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
            unsafe {
                a.qp.post_write(999, sge, remote_of(&b, 0), SendFlags::SIGNALED)
            }
            .unwrap_err(),
        );
        assert_eq!(
            e,
            PostError::SqFull {
                qpn: a.qp.qpn(),
                need: 1,
                free: 0
            }
        );
        let one = [sge];
        assert_eq!(
            // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
            unsafe {
                a.qp.post_send(&SendWr::new(
                    999,
                    SendOp::Write {
                        remote: remote_of(&b, 0),
                    },
                    &one,
                ))
            }
            .unwrap_err(),
            e
        );
        assert_eq!(a.qp.sq_cur_post(), before);
        settle(&f);
        let got = drain_ext(&mut a);
        assert_eq!(got.len(), depth as usize);
        let first = next - u64::from(depth);
        assert!(
            got.iter()
                .zip(first..)
                .all(|(w, id)| w.wr_id() == id && w.is_ok())
        );
    }
    assert_eq!(b.read(0, 8), vec![7; 8]);
}

#[test]
fn post_write_refuses_what_post_send_refuses() {
    let f = fabric(13);
    let mut a = Side::new(&f, 1, QpType::Rc, true);
    let b = Side::new(&f, 2, QpType::Rc, true);
    let sge = a.mr.sge(0, 8);
    let one = [sge];
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote: remote_of(&b, 0),
        },
        &one,
    );
    // RST: not ready.
    let e = PostError::from(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            a.qp.post_write(1, sge, remote_of(&b, 0), SendFlags::SIGNALED)
        }
        .unwrap_err(),
    );
    assert!(matches!(e, PostError::BadState { .. }), "{e}");
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    assert_eq!(unsafe { a.qp.post_send(&wr) }.unwrap_err(), e);
    // UD: RDMA WRITE is not a UD operation.
    let (_f, mut u, v) = pair(14, QpType::Ud, true);
    let e = PostError::from(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            u.qp.post_write(1, u.mr.sge(0, 8), remote_of(&v, 0), SendFlags::SIGNALED)
        }
        .unwrap_err(),
    );
    assert!(matches!(e, PostError::BadRequest { .. }), "{e}");
    let one = [u.mr.sge(0, 8)];
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote: remote_of(&v, 0),
        },
        &one,
    );
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    assert_eq!(unsafe { u.qp.post_send(&wr) }.unwrap_err(), e);
    assert_eq!(u.qp.sq_cur_post(), 0);
}

#[test]
fn a_write_batch_rings_one_doorbell_and_a_lone_write_goes_by_blueflame() {
    let (f, mut a, b) = pair(16, QpType::Rc, true);
    a.write(0, b"batched!");
    let sge = a.mr.sge(0, 8);
    a.trace(true);
    let mut batch = a.qp.write_batch().unwrap();
    for k in 0..5u64 {
        // SAFETY: the SGE names this test's MR, read only by copies and alive past the post.
        unsafe { batch.write(k, sge, remote_of(&b, 8 * k), SendFlags::SIGNALED) }.unwrap();
    }
    assert_eq!(batch.len(), 5);
    batch.complete();
    let w = a.uar_writes();
    assert_eq!(w.len(), 1, "one doorbell for the batch");
    assert_eq!(
        w[0].1,
        a.qp.wqe_bytes(4)[..8].to_vec(),
        "the last WQE's 8-byte doorbell"
    );
    // A batch of one is a lone WQE: BlueFlame, as post_write.
    let mut one = a.qp.write_batch().unwrap();
    // SAFETY: the SGE names this test's MR, read only by copies and alive past the post.
    unsafe { one.write(5, sge, remote_of(&b, 40), SendFlags::SIGNALED) }.unwrap();
    drop(one);
    let w = a.uar_writes();
    assert_eq!(w.len(), 2);
    assert_eq!(w[1].1, a.qp.wqe_bytes(5).to_vec());
    // An empty batch rings nothing.
    a.qp.write_batch().unwrap().complete();
    assert_eq!(a.uar_writes().len(), 2);
    settle(&f);
    for k in 0..6 {
        assert_eq!(b.read(8 * k, 8), b"batched!");
    }
    let got = drain_ext(&mut a);
    assert_eq!(
        got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn a_full_queue_stops_a_batch_and_what_was_written_is_still_rung() {
    let (f, mut a, b) = pair(17, QpType::Rc, true);
    let depth = a.qp.sq_wqebbs();
    let sge = a.mr.sge(0, 8);
    let mut batch = a.qp.write_batch().unwrap();
    let mut k = 0u64;
    let e = loop {
        // SAFETY: the SGE names this test's MR, read only by copies and alive past the post.
        match unsafe { batch.write(k, sge, remote_of(&b, 0), SendFlags::SIGNALED) } {
            Ok(()) => k += 1,
            Err(e) => break PostError::from(e),
        }
    };
    assert_eq!(k, u64::from(depth));
    assert!(
        matches!(
            e,
            PostError::SqFull {
                need: 1,
                free: 0,
                ..
            }
        ),
        "{e}"
    );
    drop(batch);
    settle(&f);
    assert_eq!(drain_ext(&mut a).len(), depth as usize);
    // Not ready: no batch.
    let g = fabric(18);
    let mut c = Side::new(&g, 1, QpType::Rc, true);
    assert!(matches!(
        c.qp.write_batch().unwrap_err(),
        PostError::BadState { .. }
    ));
}

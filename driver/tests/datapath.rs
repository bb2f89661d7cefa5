//! The driver's resources and data path end to end on two stepped sim NICs: PD, MR, CQ, QP
//! created with commands, every RC opcode and UD, SGE lists, inline, unsignaled WQEs, post
//! lists, BlueFlame and plain doorbells, ring wrap, error completions, arming, QUERY_QP, and
//! teardown order.

mod datapath_util;

use std::time::Duration;

use bypass_driver::backend::Backend;
use bypass_driver::poll::{WcFlags, WcOpcode, WcStatus};
use bypass_driver::post::{Payload, PostError, RemoteAddr, SendFlags, SendOp, SendWr, UdDest};
use bypass_driver::qp_attr::{Init2Rtr, QpType, Rst2Init, Rtr2Rts, Rts2Rts};
use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::QpState;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::view::View;
use bypass_hw::wqe::{CtrlSeg, WqeOpcode};
use datapath_util::*;

#[test]
fn rc_send_write_read_and_atomics_complete_with_their_wr_ids() {
    let (f, mut a, mut b) = pair(1, QpType::Rc, false);
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    a.write(0, &msg);
    b.recv(0x100, 0, 4096);
    b.write(65536, b"remote bytes to read");
    b.write(100_000, &41u64.to_be_bytes());
    b.write(100_008, &7u64.to_be_bytes());
    let (bva, bkey) = (b.mr.addr(), b.mr.rkey());
    let remote = |off: u64| RemoteAddr {
        addr: bva + off,
        rkey: bkey,
    };
    let s = [a.mr.sge(0, 3000)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&SendWr::new(1, SendOp::Send, &s)) }.unwrap();
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(
            2,
            SendOp::Write {
                remote: remote(8192),
            },
            &s,
        ))
    }
    .unwrap();
    let r = [a.mr.sge(16384, 20)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(
            3,
            SendOp::Read {
                remote: remote(65536),
            },
            &r,
        ))
    }
    .unwrap();
    let fa = [a.mr.sge(32768, 8)];
    let op = SendOp::FetchAdd {
        remote: remote(100_000),
        add: 1,
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&SendWr::new(4, op, &fa)) }.unwrap();
    let cs = [a.mr.sge(32776, 8)];
    let op = SendOp::CompareSwap {
        remote: remote(100_008),
        compare: 7,
        swap: 99,
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&SendWr::new(5, op, &cs)) }.unwrap();
    settle(&f);

    assert_eq!(b.read(0, 3000), msg, "SEND payload");
    assert_eq!(b.read(8192, 3000), msg, "WRITE payload");
    assert_eq!(a.read(16384, 20), b"remote bytes to read");
    // Atomics operate on big-endian 64-bit words, as on a ConnectX.
    assert_eq!(b.read(100_000, 8), 42u64.to_be_bytes().to_vec());
    assert_eq!(a.read(32768, 8), 41u64.to_be_bytes().to_vec());
    assert_eq!(b.read(100_008, 8), 99u64.to_be_bytes().to_vec());
    let wcs = a.drain(5);
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id(), w.opcode(), w.status()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::RdmaWrite, WcStatus::Success),
            (3, WcOpcode::RdmaRead, WcStatus::Success),
            (4, WcOpcode::FetchAdd, WcStatus::Success),
            (5, WcOpcode::CompSwap, WcStatus::Success),
        ]
    );
    assert_eq!(wcs[2].byte_len(), 20);
    let r = b.drain(1);
    assert_eq!(
        (r[0].wr_id(), r[0].opcode(), r[0].byte_len()),
        (0x100, WcOpcode::Recv, 3000)
    );
    assert_eq!(r[0].src_qp(), a.qp.qpn());
}

#[test]
fn immediates_multi_sge_and_inline_arrive_intact() {
    let (f, mut a, mut b) = pair(2, QpType::Rc, false);
    a.write(0, b"hello ");
    a.write(4096, b"world");
    b.recv(1, 0, 4096);
    b.recv(2, 8192, 16);
    b.recv(3, 12288, 64);
    let sg = [a.mr.sge(0, 6), a.mr.sge(4096, 5)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(10, SendOp::SendImm { imm: 0xdead_beef }, &sg))
    }
    .unwrap();
    let remote = RemoteAddr {
        addr: b.mr.addr() + 20000,
        rkey: b.mr.rkey(),
    };
    let wr = SendWr {
        payload: Payload::Inline(b"inline write with imm"),
        ..SendWr::new(11, SendOp::WriteImm { remote, imm: 77 }, &[])
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&wr) }.unwrap();
    let wr = SendWr {
        payload: Payload::Inline(b"inline send"),
        flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        ..SendWr::new(12, SendOp::Send, &[])
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&wr) }.unwrap();
    settle(&f);
    assert_eq!(b.read(0, 11), b"hello world");
    assert_eq!(b.read(20000, 21), b"inline write with imm");
    assert_eq!(b.read(12288, 11), b"inline send");
    let r = b.drain(3);
    assert_eq!(
        (r[0].wr_id(), r[0].imm(), r[0].byte_len()),
        (1, 0xdead_beef, 11)
    );
    assert!(r[0].flags().contains(WcFlags::WITH_IMM));
    assert_eq!(
        (r[1].wr_id(), r[1].opcode(), r[1].imm()),
        (2, WcOpcode::RecvRdmaWithImm, 77)
    );
    assert_eq!((r[2].wr_id(), r[2].byte_len()), (3, 11));
    assert!(r[2].flags().contains(WcFlags::SOLICITED));
    let s = a.drain(3);
    assert!(s.iter().all(|w| w.is_ok()));
    let too_long = [0u8; 65];
    let wr = SendWr {
        payload: Payload::Inline(&too_long),
        ..SendWr::new(13, SendOp::Send, &[])
    };
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { a.qp.post_send(&wr) },
        Err(PostError::InlineTooLong {
            len: 65,
            max: 64,
            ..
        })
    ));
}

#[test]
fn unsignaled_requests_are_retired_by_a_later_signaled_one() {
    let (f, mut a, _b) = pair(3, QpType::Rc, false);
    let s = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: _b.mr.addr(),
        rkey: _b.mr.rkey(),
    };
    let depth = a.qp.sq_wqebbs();
    // Many more unsignaled writes than the SQ holds, one signaled every 16.
    for i in 0..(depth * 3) {
        let mut wr = SendWr::new(u64::from(i), SendOp::Write { remote }, &s);
        if i % 16 != 15 {
            wr.flags = SendFlags::empty();
        }
        loop {
            // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
            match unsafe { a.qp.post_send(&wr) } {
                Ok(()) => break,
                Err(PostError::SqFull { .. }) => {
                    settle(&f);
                    a.drain_some();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    settle(&f);
    let wcs = a.drain_all();
    assert!(wcs.iter().all(|w| w.wr_id() % 16 == 15 && w.is_ok()));
}

#[test]
fn a_post_list_rings_one_doorbell_and_blueflame_carries_lone_wqes() {
    let (f, mut a, b) = pair(4, QpType::Rc, true);
    assert_eq!(
        a.qp.bfreg().class(),
        bypass_driver::bfregs::BfregClass::LowLatency,
        "the device's first QP gets a low-latency bfreg of its own"
    );
    let s = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    a.trace(true);
    let wrs: Vec<_> = (0..4)
        .map(|i| SendWr::new(i, SendOp::Write { remote }, &s))
        .collect();
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send_list(&wrs) }.unwrap();
    let writes = a.uar_writes();
    assert_eq!(writes.len(), 1, "one doorbell for the list");
    assert_eq!(writes[0].1.len(), 8, "a list rings the 8-byte doorbell");
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&wrs[0]) }.unwrap();
    let writes = a.uar_writes();
    assert_eq!(writes[1].1.len(), 64, "a lone WQE goes by BlueFlame");
    let half = writes[1].0 - writes[0].0;
    assert_eq!(half, a.qp.bfreg().buf_size() as u64, "the halves alternate");
    settle(&f);
    assert_eq!(a.drain(5).len(), 5);
}

#[test]
fn the_sq_wraps_over_several_laps_with_multi_wqebb_wqes() {
    let (f, mut a, b) = pair(6, QpType::Rc, true);
    let depth = a.qp.sq_wqebbs();
    let remote = RemoteAddr {
        addr: b.mr.addr() + 4096,
        rkey: b.mr.rkey(),
    };
    let four = [
        a.mr.sge(0, 8),
        a.mr.sge(8, 8),
        a.mr.sge(16, 8),
        a.mr.sge(24, 8),
    ];
    let one = [a.mr.sge(0, 8)];
    let mut straddled = 0;
    for i in 0..(2 * depth) as u64 {
        // WRITE with 4 SGEs: 6 DS = 2 WQEBBs; every third one has 1 SGE (1 WQEBB), which shifts
        // the alignment so that some 2-block WQEs start at the ring's last block.
        let sg: &[_] = if i % 3 == 0 { &one } else { &four };
        if sg.len() == 4 && a.qp.sq_cur_post() % depth == depth - 1 {
            straddled += 1;
        }
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            a.qp.post_send(&SendWr::new(i, SendOp::Write { remote }, sg))
        }
        .unwrap();
        settle(&f);
        let w = a.drain(1);
        assert_eq!(w[0].wr_id(), i);
        assert!(w[0].is_ok(), "{}", w[0].status());
    }
    assert!(a.qp.sq_cur_post() > 3 * depth, "several laps");
    assert!(straddled > 0, "some WQEs wrapped to the ring start");
    assert_eq!(b.read(4096, 8), a.read(0, 8));
}

#[test]
fn bad_lkey_is_local_prot_err_and_flushes_the_rest() {
    let (f, mut a, b) = pair(7, QpType::Rc, false);
    let mut s = [a.mr.sge(0, 64)];
    s[0].lkey ^= 0xff;
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(1, SendOp::Write { remote }, &s))
    }
    .unwrap();
    let good = [a.mr.sge(0, 64)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(2, SendOp::Write { remote }, &good))
    }
    .unwrap();
    settle(&f);
    let w = a.drain(2);
    assert_eq!(
        (w[0].wr_id(), w[0].status()),
        (1, WcStatus::Error(CqeSyndrome::LOCAL_PROT_ERR))
    );
    assert_eq!(
        (w[1].wr_id(), w[1].status()),
        (2, WcStatus::Error(CqeSyndrome::WR_FLUSH_ERR))
    );
    assert_eq!(a.qp.query().unwrap().state, QpState::Err);
}

#[test]
fn wrong_rkey_is_remote_access_err() {
    let (f, mut a, b) = pair(8, QpType::Rc, false);
    let s = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey() ^ 0x1,
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(9, SendOp::Write { remote }, &s))
    }
    .unwrap();
    settle(&f);
    let w = a.drain(1);
    assert_eq!(
        (w[0].wr_id(), w[0].status()),
        (9, WcStatus::Error(CqeSyndrome::REMOTE_ACCESS_ERR))
    );
    assert_eq!(w[0].opcode(), WcOpcode::RdmaWrite);
}

#[test]
fn no_receive_posted_is_rnr_then_success_once_one_is() {
    let (f, mut a, mut b) = pair(9, QpType::Rc, false);
    let s = [a.mr.sge(0, 64)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&SendWr::new(1, SendOp::Send, &s)) }.unwrap();
    // Let the first attempts hit RNR, then post the receive (rnr_retry 7 = infinite).
    for _ in 0..3 {
        a.backend.progress();
        b.backend.progress();
    }
    assert!(a.cq.poll_one().is_none());
    let rnr = f.with_device(b.id, |d| d.counters.out_of_buffer).unwrap();
    assert!(rnr > 0, "the responder sent an RNR NAK");
    b.recv(5, 0, 4096);
    settle(&f);
    assert_eq!(a.drain(1)[0].status(), WcStatus::Success);
    assert_eq!(b.drain(1)[0].wr_id(), 5);
}

#[test]
fn an_armed_cq_interrupts_and_wait_returns_the_completion() {
    let (f, mut a, mut b) = pair(10, QpType::Rc, false);
    b.recv(3, 0, 4096);
    let s = [a.mr.sge(0, 64)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&SendWr::new(1, SendOp::Send, &s)) }.unwrap();
    let before = f.with_device(b.id, |d| d.interrupts(1)).unwrap();
    let wc =
        b.cq.wait(Duration::from_secs(5))
            .unwrap()
            .expect("a completion");
    assert_eq!(wc.wr_id(), 3);
    let after = f.with_device(b.id, |d| d.interrupts(1)).unwrap();
    assert!(after > before, "the armed CQ raised the completion vector");
    assert_eq!(b.cq.arm_sn(), 1);
    assert_eq!(
        a.cq.wait(Duration::from_secs(5))
            .unwrap()
            .map(|w| w.wr_id()),
        Some(1)
    );
    // Nothing more: a stepped sim goes idle and wait returns None at once.
    assert!(b.cq.wait(Duration::from_secs(5)).unwrap().is_none());
}

#[test]
fn query_qp_walks_the_states_and_reports_psns() {
    let f = fabric(11);
    let mut a = Side::new(&f, 1, QpType::Rc, false);
    let b = Side::new(&f, 2, QpType::Rc, false);
    assert_eq!(a.qp.query().unwrap().state, QpState::Rst);
    a.qp.rst2init(&Rst2Init::default()).unwrap();
    assert_eq!(a.qp.query().unwrap().state, QpState::Init);
    a.qp.init2rtr(&Init2Rtr::rc(b.qp.qpn(), 0x300, b.gid))
        .unwrap();
    let q = a.qp.query().unwrap();
    assert_eq!((q.state, q.rq_psn), (QpState::Rtr, 0x300));
    a.qp.rtr2rts(&Rtr2Rts::new(0x1234)).unwrap();
    let q = a.qp.query().unwrap();
    assert_eq!((q.state, q.sq_psn), (QpState::Rts, 0x1234));
    assert_eq!(q.qpc_bytes().len(), 0xe8);
    a.qp.rts2rts(&Rts2Rts {
        min_rnr_timer: Some(12),
        ..Default::default()
    })
    .unwrap();
    let e = a.qp.rtr2rts(&Rtr2Rts::new(0)).unwrap_err();
    assert!(e.to_string().contains("RTR2RTS"), "{e}");
    a.qp.to_error().unwrap();
    assert_eq!(a.qp.query().unwrap().state, QpState::Err);
    a.qp.reset().unwrap();
    assert_eq!(a.qp.query().unwrap().state, QpState::Rst);
    let s = [a.mr.sge(0, 8)];
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { a.qp.post_send(&SendWr::new(1, SendOp::Send, &s)) },
        Err(PostError::BadState { state: "RST", .. })
    ));
}

#[test]
fn ud_sends_carry_the_address_vector_and_a_grh() {
    let (f, mut a, mut b) = pair(12, QpType::Ud, false);
    a.write(0, b"ud payload");
    b.recv(4, 0, 1024);
    let dest = UdDest::roce(b.qp.qpn(), QKEY, b.gid, b.mac, 0, 64);
    let s = [a.mr.sge(0, 10)];
    let wr = SendWr {
        ud: Some(&dest),
        ..SendWr::new(8, SendOp::Send, &s)
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qp.post_send(&wr) }.unwrap();
    let ctrl = a.qp.wqe_bytes(0);
    assert_eq!(CtrlSeg::view(&ctrl).unwrap().opcode(), WqeOpcode::SEND);
    assert_eq!(CtrlSeg::view(&ctrl).unwrap().ds(), 5);
    settle(&f);
    assert_eq!(a.drain(1)[0].wr_id(), 8);
    let r = b.drain(1);
    assert_eq!(
        (r[0].wr_id(), r[0].byte_len(), r[0].src_qp()),
        (4, 50, a.qp.qpn())
    );
    assert!(r[0].flags().contains(WcFlags::GRH));
    assert_eq!(
        r[0].sl(),
        2,
        "sl carries the L3 type: IPv4 (MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4)"
    );
    assert_eq!(b.read(40, 10), b"ud payload");
    let w = SendOp::Write {
        remote: RemoteAddr::default(),
    };
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            a.qp.post_send(&SendWr {
                ud: Some(&dest),
                ..SendWr::new(1, w, &s)
            })
        },
        Err(PostError::BadRequest { .. })
    ));
}

#[test]
fn raw_cqe_and_wqe_bytes_are_readable() {
    let (f, mut a, b) = pair(13, QpType::Rc, false);
    let s = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        a.qp.post_send(&SendWr::new(1, SendOp::Write { remote }, &s))
    }
    .unwrap();
    let w = a.qp.wqe_bytes(0);
    let c = CtrlSeg::view(&w).unwrap();
    assert_eq!(
        (c.opcode(), c.qpn(), c.ds()),
        (WqeOpcode::RDMA_WRITE, a.qp.qpn(), 3)
    );
    settle(&f);
    let (wc, raw) = a.cq.poll_raw().unwrap();
    assert_eq!(wc.wr_id(), 1);
    assert_eq!(raw[63] >> 4, 0, "a REQ CQE");
    assert_eq!(a.cq.cqe_bytes(0), raw);
}

#[test]
fn dropping_everything_destroys_in_reverse_order() {
    let f = fabric(14);
    let side = Side::new(&f, 1, QpType::Rc, true);
    let dev = side.backend.clone();
    dev.with_device(|d| d.trace.set_enabled(true)).unwrap();
    drop(side);
    let ops = ok_commands(&dev);
    let pos = |op: Opcode| {
        ops.iter()
            .position(|&o| o == op.0)
            .unwrap_or_else(|| panic!("{op} not run: {ops:x?}"))
    };
    assert!(pos(Opcode::DESTROY_QP) < pos(Opcode::DEALLOC_UAR));
    assert!(pos(Opcode::DESTROY_QP) < pos(Opcode::DESTROY_CQ));
    assert!(pos(Opcode::DESTROY_QP) < pos(Opcode::DESTROY_MKEY));
    assert!(pos(Opcode::DESTROY_MKEY) < pos(Opcode::DEALLOC_PD));
    assert!(pos(Opcode::DESTROY_CQ) < pos(Opcode::TEARDOWN_HCA));
    assert!(pos(Opcode::DEALLOC_PD) < pos(Opcode::TEARDOWN_HCA));
    assert_eq!(dev.with_device(|d| d.firmware_pages()).unwrap(), 0);
}

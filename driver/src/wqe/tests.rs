//! WQE writer tests: each request shape's bytes against the `bypass_hw::wqe` views, the common
//! and general specialisations of the one writer against each other, the extended post of a
//! WRITE against both, the space checks and the receive terminator.

use super::*;
use crate::post::{PostRefused, Refusal, UdDest};
use crate::wq::tests::TestRing;
use bypass_hw::view::View;
use bypass_hw::wqe::{Av, CtrlSeg};

fn lim(ud: bool) -> SendLimits {
    SendLimits::new(0x123, ud, 4, 128, false)
}

fn bytes(sq: &SqRing, off: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    sq.ring.read(off, &mut v);
    v
}

#[test]
fn rdma_write_is_ctrl_raddr_data_in_one_wqebb() {
    let mut t = TestRing::new(8 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 8, 0);
    let sge = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 0x77,
    }];
    let wr = SendWr::new(
        9,
        SendOp::Write {
            remote: RemoteAddr {
                addr: 0xdead_0000,
                rkey: 0x55,
            },
        },
        &sge,
    );
    let w = write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
    assert_eq!((w.start, w.ds, w.wqebbs), (0, 3, 1));
    let b = bytes(&sq, 0, 48);
    let c = CtrlSeg::view(&b).unwrap();
    assert_eq!(c.opcode(), WqeOpcode::RDMA_WRITE);
    assert_eq!((c.qpn(), c.ds(), c.wqe_index()), (0x123, 3, 0));
    assert!(c.cq_update());
    assert_eq!(w.doorbell, c.doorbell_word().to_be());
    let r = RaddrSeg::view(&b[16..]).unwrap();
    assert_eq!((r.raddr(), r.rkey()), (0xdead_0000, 0x55));
    let d = DataSeg::view(&b[32..]).unwrap();
    assert_eq!((d.addr(), d.byte_count(), d.lkey()), (0x1000, 64, 0x77));
    assert_eq!(sq.cur_post, 1);
    assert_eq!(sh.complete_send(0), 9);
}

#[test]
fn the_common_shapes_write_the_same_bytes_as_the_general_ones() {
    let remote = RemoteAddr {
        addr: 0x1122_3344_5566_7788,
        rkey: 0xabcd_ef01,
    };
    let ops = [
        SendOp::Send,
        SendOp::SendImm { imm: 0xdead_beef },
        SendOp::Write { remote },
        SendOp::WriteImm { remote, imm: 7 },
        SendOp::Read { remote },
    ];
    let sges: Vec<Sge> = (0..4)
        .map(|k| Sge {
            addr: 0x1000 * (k + 1),
            length: 100 + k as u32,
            lkey: 0x50 + k as u32,
        })
        .collect();
    for sig_all in [false, true] {
        let lim = SendLimits::new(0x123, false, 4, 128, sig_all);
        for op in ops {
            for n in 0..=4 {
                for flags in 0..8u8 {
                    let wr = SendWr {
                        flags: SendFlags::from_bits_retain(flags),
                        ..SendWr::new(0x99, op, &sges[..n])
                    };
                    let (mut ta, mut tb) = (TestRing::new(8 * 64), TestRing::new(8 * 64));
                    let (mut a, mut b) = (SqRing::new(ta.ring()), SqRing::new(tb.ring()));
                    let (sa, sb) = (WqShared::new(0x123, 8, 0), WqShared::new(0x123, 8, 0));
                    // Start at WQEBB 5 of 8 so that 2-WQEBB WQEs still fit before the end.
                    for (sq, sh) in [(&mut a, &sa), (&mut b, &sb)] {
                        sq.commit(sh, 0, 5, 0);
                        sh.complete_send(0);
                    }
                    let wa = write_common(&mut a, &sa, &lim, &wr)
                        .expect("the common shapes take RC SGE requests");
                    let wb = write_any(&mut b, &sb, &lim, &wr).unwrap();
                    assert_eq!(wa, wb, "{op:?} with {n} SGEs, flags {flags:#x}");
                    assert_eq!(bytes(&a, 0, 8 * 64), bytes(&b, 0, 8 * 64));
                    assert_eq!((a.cur_post, sa.complete_send(5)), (b.cur_post, 0x99));
                }
            }
        }
    }
}

#[test]
fn the_common_shapes_leave_wrapping_wqes_ud_inline_and_atomics_to_the_general_one() {
    let mut t = TestRing::new(4 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 4, 0);
    sq.cur_post = 3;
    sq.commit(&sh, 3, 0, 0);
    sh.complete_send(3);
    let sges = [Sge::default(); 4];
    // 5 DS = 2 WQEBBs from the last block: it would cross the ring's end.
    let wr = SendWr::new(1, SendOp::Send, &sges);
    assert_eq!(
        write_common(&mut sq, &sh, &lim(false), &wr),
        Err(Stop::Left(()))
    );
    assert_eq!((sq.cur_post, bytes(&sq, 0, 256)), (3, vec![0; 256]));
    // UD: `write_send` goes to the general shapes, whose datagram checks refuse a send
    // without a destination (the common shapes, for RC QPs only, have no such check).
    assert!(matches!(
        write_send(&mut sq, &sh, &lim(true), &wr),
        Err(PostError::BadRequest { why, .. }) if why.contains("needs a destination")
    ));
    let inline = SendWr {
        payload: Payload::Inline(&[1, 2, 3]),
        ..SendWr::new(1, SendOp::Send, &[])
    };
    assert_eq!(
        write_common(&mut sq, &sh, &lim(false), &inline),
        Err(Stop::Left(()))
    );
    let fa = SendOp::FetchAdd {
        remote: RemoteAddr::default(),
        add: 1,
    };
    let one = [Sge {
        length: 8,
        ..Sge::default()
    }];
    let atomic = SendWr::new(1, fa, &one);
    assert_eq!(
        write_common(&mut sq, &sh, &lim(false), &atomic),
        Err(Stop::Left(()))
    );
    assert_eq!(sq.cur_post, 3);
    // The general shapes write the wrapping WQE (`a_multi_wqebb_wqe_wraps_to_the_ring_start`).
    assert_eq!(
        write_send(&mut sq, &sh, &lim(false), &wr).unwrap().wqebbs,
        2
    );
}

#[test]
fn fm_ce_se_follows_the_flags_and_sq_sig_all() {
    let quiet = SendLimits::new(1, false, 1, 0, false);
    let all = SendLimits::new(1, false, 1, 0, true);
    assert_eq!(quiet.fm_ce_se(SendFlags::empty()), 0);
    assert_eq!(all.fm_ce_se(SendFlags::empty()), MLX5_WQE_CTRL_CQ_UPDATE);
    assert_eq!(
        quiet.fm_ce_se(SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE),
        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED | MLX5_WQE_CTRL_FENCE
    );
    assert_eq!(quiet.fm_ce_se(SendFlags::FENCE), MLX5_WQE_CTRL_FENCE);
}

#[test]
fn a_multi_wqebb_wqe_wraps_to_the_ring_start() {
    let mut t = TestRing::new(4 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 4, 0);
    // Move producer and tail to block 3 (as after three retired WQEBBs).
    sq.cur_post = 2;
    sq.commit(&sh, 2, 1, 0);
    sh.complete_send(2);
    assert_eq!((sq.cur_post, sq.free(sh.sq_tail())), (3, 4));
    let sges = [Sge {
        addr: 1,
        length: 2,
        lkey: 3,
    }; 4];
    // SEND with 4 SGEs: 5 DS = 2 WQEBBs, starting at the last block.
    let w = write_send(
        &mut sq,
        &sh,
        &lim(false),
        &SendWr::new(1, SendOp::Send, &sges),
    )
    .unwrap();
    assert_eq!((w.start, w.ds, w.wqebbs), (3, 5, 2));
    let b = bytes(&sq, 192, 64);
    assert_eq!(CtrlSeg::view(&b).unwrap().wqe_index(), 3);
    // The fourth SGE (segment 4) is the first segment of block 0.
    let first = bytes(&sq, 0, 16);
    assert_eq!(DataSeg::view(&first).unwrap().lkey(), 3);
    assert_eq!(sq.cur_post, 5);
}

#[test]
fn inline_send_pads_and_counts_ds() {
    let mut t = TestRing::new(8 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 8, 0);
    let data = [7u8; 20];
    let wr = SendWr {
        payload: Payload::Inline(&data),
        ..SendWr::new(1, SendOp::SendImm { imm: 0xabcd }, &[])
    };
    let w = write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
    // ctrl + inline(4 + 20 -> 32 bytes = 2 DS).
    assert_eq!(w.ds, 3);
    let b = bytes(&sq, 0, 48);
    assert_eq!(CtrlSeg::view(&b).unwrap().imm(), 0xabcd);
    assert_eq!(&b[16..20], &(20u32 | MLX5_INLINE_SEG).to_be_bytes());
    assert_eq!(&b[20..40], &[7u8; 20]);
    assert_eq!(&b[40..48], &[0u8; 8]);
    let long = [0u8; 129];
    let wr = SendWr {
        payload: Payload::Inline(&long),
        ..SendWr::new(1, SendOp::Send, &[])
    };
    assert!(matches!(
        write_send(&mut sq, &sh, &lim(false), &wr),
        Err(PostError::InlineTooLong {
            len: 129,
            max: 128,
            ..
        })
    ));
}

#[test]
fn atomics_take_one_eight_byte_sge_and_one_wqebb() {
    let mut t = TestRing::new(8 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 8, 0);
    let sge = [Sge {
        addr: 0x10,
        length: 8,
        lkey: 1,
    }];
    let op = SendOp::CompareSwap {
        remote: RemoteAddr { addr: 8, rkey: 2 },
        compare: 5,
        swap: 6,
    };
    let w = write_send(&mut sq, &sh, &lim(false), &SendWr::new(1, op, &sge)).unwrap();
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    let b = bytes(&sq, 0, 64);
    let a = AtomicSeg::view(&b[32..]).unwrap();
    assert_eq!((a.compare(), a.swap_add()), (5, 6));
    let bad_sge = [Sge {
        length: 4,
        ..sge[0]
    }];
    assert!(matches!(
        write_send(&mut sq, &sh, &lim(false), &SendWr::new(1, op, &bad_sge)),
        Err(PostError::BadRequest { .. })
    ));
}

#[test]
fn ud_send_carries_the_datagram_segment() {
    let mut t = TestRing::new(8 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 8, 0);
    let dest = UdDest::roce(0x456, 0x1111, [1; 16], [2; 6], 0, 64);
    let sge = [Sge {
        addr: 0x10,
        length: 8,
        lkey: 1,
    }];
    let mut wr = SendWr::new(1, SendOp::Send, &sge);
    assert!(write_send(&mut sq, &sh, &lim(true), &wr).is_err());
    wr.ud = Some(&dest);
    let w = write_send(&mut sq, &sh, &lim(true), &wr).unwrap();
    assert_eq!((w.ds, w.wqebbs), (5, 2));
    let b = bytes(&sq, 0, 80);
    let av = Av::view(&b[16..]).unwrap();
    assert_eq!((av.dqpn(), av.qkey(), av.extended()), (0x456, 0x1111, true));
    let write = SendOp::Write {
        remote: RemoteAddr::default(),
    };
    assert!(write_send(&mut sq, &sh, &lim(true), &SendWr::new(1, write, &sge)).is_err());
}

#[test]
fn a_full_send_queue_is_an_error_not_an_overwrite() {
    let mut t = TestRing::new(2 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x123, 2, 0);
    let wr = SendWr::new(1, SendOp::Send, &[]);
    write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
    write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
    let before = bytes(&sq, 0, 128);
    assert!(matches!(
        write_send(&mut sq, &sh, &lim(false), &wr),
        Err(PostError::SqFull {
            need: 1,
            free: 0,
            ..
        })
    ));
    assert_eq!(bytes(&sq, 0, 128), before);
    assert_eq!(sh.complete_send(1), 1);
    write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
}

#[test]
fn receive_lists_end_with_the_invalid_lkey_terminator() {
    let mut t = TestRing::new(2 * 64);
    let mut rq = RqRing::new(t.ring(), 64);
    let sh = WqShared::new(0x123, 0, 2);
    let sge = [Sge {
        addr: 0x40,
        length: 100,
        lkey: 9,
    }];
    write_recv(
        &mut rq,
        &sh,
        0x123,
        &RecvWr {
            wr_id: 5,
            sges: &sge,
        },
    )
    .unwrap();
    let mut b = [0u8; 32];
    rq.ring.read(0, &mut b);
    assert_eq!(DataSeg::view(&b).unwrap().lkey(), 9);
    assert!(DataSeg::view(&b[16..]).unwrap().is_end_of_list());
    write_recv(
        &mut rq,
        &sh,
        0x123,
        &RecvWr {
            wr_id: 6,
            sges: &sge,
        },
    )
    .unwrap();
    assert!(matches!(
        write_recv(
            &mut rq,
            &sh,
            0x123,
            &RecvWr {
                wr_id: 7,
                sges: &sge
            }
        ),
        Err(PostError::RqFull { .. })
    ));
    assert!(matches!(
        write_recv(
            &mut rq,
            &sh,
            0x123,
            &RecvWr {
                wr_id: 7,
                sges: &[sge[0]; 5]
            }
        ),
        Err(PostError::TooManySges { .. })
    ));
    assert_eq!(sh.complete_recv(), 5);
}

#[test]
fn post_write_writes_the_same_wqe_and_bookkeeping_as_the_general_path() {
    let local = Sge {
        addr: 0x1122_3344_5566_7788,
        length: 0x0102_0304,
        lkey: 0xa0b0_c0d0,
    };
    let remote = RemoteAddr {
        addr: 0x8877_6655_4433_2211,
        rkey: 0x0f0e_0d0c,
    };
    for sig_all in [false, true] {
        let lim = SendLimits::new(0xab_cdef, false, 1, 0, sig_all);
        let tpl = WriteTemplate::new(&lim);
        for flags in 0..8u8 {
            let flags = SendFlags::from_bits_retain(flags);
            // Start near the u16 wrap of the WQE index and past one lap of the ring.
            for first in [0u32, 5, 0xfffe, 0x1_0003, u32::MAX - 1] {
                let (mut ta, mut tb) = (TestRing::new(8 * 64), TestRing::new(8 * 64));
                let (mut a, mut b) = (SqRing::new(ta.ring()), SqRing::new(tb.ring()));
                let (sa, sb) = (WqShared::new(lim.qpn, 8, 0), WqShared::new(lim.qpn, 8, 0));
                for (sq, sh) in [(&mut a, &sa), (&mut b, &sb)] {
                    sq.cur_post = first;
                    sq.commit(sh, first, 0, 0);
                    sh.complete_send(first as u16);
                }
                for k in 0..3u64 {
                    let w = write_rdma_write(&mut a, &sa, &tpl, 40 + k, &local, &remote, flags)
                        .unwrap();
                    let one = [local];
                    let wr = SendWr {
                        flags,
                        ..SendWr::new(40 + k, SendOp::Write { remote }, &one)
                    };
                    let g = write_any(&mut b, &sb, &lim, &wr).unwrap();
                    assert_eq!(w, g);
                    assert_eq!(g.ds, WRITE_DS);
                    assert_eq!(
                        bytes(&a, 0, 8 * 64),
                        bytes(&b, 0, 8 * 64),
                        "{flags:?} at {first}"
                    );
                    assert_eq!(a.cur_post, b.cur_post);
                }
                let last = first.wrapping_add(2) as u16;
                assert_eq!(sa.complete_send(last), sb.complete_send(last));
                assert_eq!(sa.sq_tail(), sb.sq_tail());
            }
        }
    }
}

#[test]
fn the_data_segment_words_are_the_hw_data_segment() {
    for (addr, length, lkey) in [
        (0x1122_3344_5566_7788u64, 0x0102_0304u32, 0xa0b0_c0d0u32),
        (0, 0, 0),
        (u64::MAX, u32::MAX, 1),
    ] {
        let want: [u64; 2] = zerocopy::transmute!(bypass_hw::wqe::DataSeg::new(length, lkey, addr));
        let local = Sge { addr, length, lkey };
        assert_eq!(data_seg(&local), want);
    }
}

#[test]
fn post_write_refuses_a_full_queue_without_writing() {
    let lim = SendLimits::new(0x12, false, 1, 0, false);
    let tpl = WriteTemplate::new(&lim);
    let mut t = TestRing::new(2 * 64);
    let mut sq = SqRing::new(t.ring());
    let sh = WqShared::new(0x12, 2, 0);
    let (l, r, f) = (Sge::default(), RemoteAddr::default(), SendFlags::SIGNALED);
    write_rdma_write(&mut sq, &sh, &tpl, 1, &l, &r, f).unwrap();
    write_rdma_write(&mut sq, &sh, &tpl, 2, &l, &r, f).unwrap();
    let before = bytes(&sq, 0, 128);
    assert_eq!(write_rdma_write(&mut sq, &sh, &tpl, 3, &l, &r, f), None);
    assert_eq!(
        sq.free(sh.sq_tail()),
        0,
        "what PostRefused's SqFull reports"
    );
    let e = PostError::from(PostRefused::new(0x12, Refusal::SqFull));
    assert_eq!((bytes(&sq, 0, 128), sq.cur_post), (before, 2));
    // The general path refuses it the same way.
    let one = [l];
    let wr = SendWr::new(3, SendOp::Write { remote: r }, &one);
    assert_eq!(write_send(&mut sq, &sh, &lim, &wr).unwrap_err(), e);
    // Retiring the first WQE makes room again.
    assert_eq!(sh.complete_send(0), 1);
    assert_eq!(
        write_rdma_write(&mut sq, &sh, &tpl, 3, &l, &r, f)
            .unwrap()
            .slot,
        0
    );
}

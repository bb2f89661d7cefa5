//! The data-path formats never panic: every view over random bytes of every length either
//! works (and every getter on it works) or is `Error::Truncated` exactly when the buffer is
//! short; the inline writer never writes outside its buffer; the pure helpers accept any input.

use bypass_hw::cqe::*;
use bypass_hw::doorbell::*;
use bypass_hw::eqe::*;
use bypass_hw::uar::*;
use bypass_hw::wqe::*;
use bypass_hw::{Error, View};
use proptest::prelude::*;

/// Views `T` over `bytes` (read-only and writable) and checks the length rule; on success
/// hands the view to `use_it`.
fn check_view<T: View>(bytes: &mut [u8], use_it: impl Fn(&T)) {
    let len = bytes.len();
    match T::view(bytes) {
        Ok(v) => {
            assert!(
                len >= T::SIZE,
                "{}: viewed {len} bytes but needs {}",
                T::NAME,
                T::SIZE
            );
            use_it(v);
        }
        Err(e) => {
            assert!(
                len < T::SIZE,
                "{}: refused {len} bytes though it needs only {}",
                T::NAME,
                T::SIZE
            );
            assert_eq!(
                e,
                Error::Truncated {
                    what: T::NAME,
                    need: T::SIZE,
                    got: len
                }
            );
        }
    }
    assert_eq!(
        T::view_mut(bytes).is_ok(),
        len >= T::SIZE,
        "{}: view_mut length rule",
        T::NAME
    );
}

fn all_views(bytes: &mut [u8]) {
    check_view::<CtrlSeg>(bytes, |c| {
        let _ = (
            c.opcode().name(),
            c.opmod(),
            c.wqe_index(),
            c.qpn(),
            c.ds(),
            c.fence_mode(),
            c.ce(),
        );
        let _ = (
            c.cq_update(),
            c.solicited(),
            c.imm(),
            c.dci_stream_channel_id(),
            c.doorbell_word(),
        );
        assert!(c.ds() <= MAX_WQE_DS && c.qpn() <= 0xff_ffff);
        let _ = c.opcode().to_string();
    });
    check_view::<RaddrSeg>(bytes, |r| {
        let _ = (r.raddr(), r.rkey());
    });
    check_view::<DataSeg>(bytes, |d| {
        let _ = (d.byte_count(), d.lkey(), d.addr(), d.is_end_of_list());
    });
    check_view::<AtomicSeg>(bytes, |a| {
        let _ = (a.swap_add(), a.compare());
    });
    check_view::<InlineSeg>(bytes, |i| {
        assert!(i.len() < MLX5_INLINE_SEG);
        let _ = (i.is_inline(), i.is_empty());
    });
    check_view::<Av>(bytes, |a| {
        let _ = (
            a.qkey(),
            a.dc_key(),
            a.dqpn(),
            a.extended(),
            a.rlid(),
            a.grh_gid_fl(),
        );
    });
    check_view::<DatagramSeg>(bytes, |d| {
        let _ = d.av.dc_key();
    });
    check_view::<Cqe64>(bytes, |q| {
        let _ = (
            q.opcode().name(),
            q.owner(),
            q.se(),
            q.format(),
            q.inline_scatter_32(),
            q.inline_scatter_64(),
        );
        let _ = (
            q.qpn(),
            q.wqe_opcode(),
            q.wqe_counter(),
            q.byte_cnt(),
            q.imm_inval_pkey(),
            q.rqpn(),
            q.flags(),
        );
        let _ = (
            q.srqn_uidx(),
            q.timestamp(),
            q.wqe_id(),
            q.slid(),
            q.vlan_info(),
            q.app_info(),
        );
        let _ = (q.sw_owns(7, 8), q.as_err().syndrome().to_string());
        assert!(q.owner() <= 1 && q.se() <= 1 && q.format() <= 3 && q.opcode().0 <= 15);
    });
    check_view::<Cqe128>(bytes, |q| {
        let _ = q.cqe.opcode();
    });
    check_view::<ErrCqe>(bytes, |e| {
        let _ = (
            e.syndrome().name(),
            e.syndrome().cause_and_fix(),
            e.vendor_err_synd(),
            e.wqe_opcode(),
            e.qpn(),
        );
        let _ = (e.srqn(), e.wqe_counter(), e.opcode(), e.owner());
    });
    check_view::<Eqe>(bytes, |e| {
        let _ = (
            e.event_type().name(),
            e.event_type().to_string(),
            e.sub_type(),
            e.owner_bit(),
            e.sw_owns(3, 4),
        );
        let _ = (
            e.comp().cqn(),
            e.cq_err().cqn(),
            e.cq_err().syndrome(),
            e.cmd().vector(),
        );
        let _ = (
            e.page_req().func_id(),
            e.page_req().num_pages(),
            e.qp_srq().qp_srq_n(),
            e.qp_srq().queue_type(),
        );
        let _ = e.port_state().port();
    });
    check_view::<EqeComp>(bytes, |d| {
        let _ = d.cqn();
    });
    check_view::<EqeCqErr>(bytes, |d| {
        let _ = (d.cqn(), d.syndrome());
    });
    check_view::<EqeCmd>(bytes, |d| {
        let _ = d.vector();
    });
    check_view::<EqePageReq>(bytes, |d| {
        let _ = (d.func_id(), d.num_pages());
    });
    check_view::<EqeQpSrq>(bytes, |d| {
        let _ = (d.qp_srq_n(), d.queue_type());
    });
    check_view::<EqePortState>(bytes, |d| {
        assert!(d.port() <= 0xf);
    });
    check_view::<QpDbRecord>(bytes, |r| {
        let _ = (r.rq_head(), r.sq_pi());
    });
    check_view::<CqDbRecord>(bytes, |r| {
        let _ = (r.ci(), r.arm_sn(), r.arm_cmd(), r.arm_ci());
    });
}

const SENTINEL: u8 = 0xa5;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn views_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
        all_views(&mut bytes);
    }

    #[test]
    fn views_at_every_length(len in 0usize..140, fill in any::<u8>()) {
        let mut bytes = vec![fill; len];
        all_views(&mut bytes);
    }

    #[test]
    fn inline_writer_stays_in_its_buffer(buf_len in 0usize..1100, payload in proptest::collection::vec(any::<u8>(), 0..1100)) {
        // The writer gets `buf_len` bytes of a larger buffer; the rest is a guard.
        let mut whole = vec![SENTINEL; buf_len + 64];
        let result = write_inline(&mut whole[..buf_len], &payload);
        let need = inline_ds(payload.len()) * SEND_WQE_DS;
        prop_assert!(whole[buf_len..].iter().all(|&b| b == SENTINEL), "wrote past its buffer");
        match result {
            Ok(ds) => {
                prop_assert_eq!(ds, inline_ds(payload.len()));
                prop_assert!(ds <= MAX_WQE_DS as usize && need <= buf_len);
                let h = InlineSeg::view(&whole).unwrap();
                prop_assert!(h.is_inline());
                prop_assert_eq!(h.len() as usize, payload.len());
                prop_assert_eq!(&whole[4..4 + payload.len()], &payload[..]);
                prop_assert!(whole[4 + payload.len()..need].iter().all(|&b| b == 0), "padding not zero");
                prop_assert!(whole[need..].iter().all(|&b| b == SENTINEL), "wrote past the segment");
            }
            Err(Error::Truncated { need: n, got, .. }) => {
                prop_assert!(need > buf_len && n == need && got == buf_len);
                prop_assert!(whole.iter().all(|&b| b == SENTINEL), "wrote although it failed");
            }
            Err(Error::FieldOverflow { .. }) => {
                prop_assert!(inline_ds(payload.len()) > MAX_WQE_DS as usize);
                prop_assert!(whole.iter().all(|&b| b == SENTINEL), "wrote although it failed");
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn ctrl_and_av_setters_check_widths(pi in any::<u16>(), op in any::<u8>(), opmod in any::<u8>(), qpn in any::<u32>(),
                                        fm in any::<u8>(), ds in any::<u8>(), sig in any::<u8>(), imm in any::<u32>(),
                                        key in any::<u64>(), dqp in any::<u32>()) {
        let p = CtrlParams { pi, opcode: WqeOpcode(op), opmod, qpn, fm_ce_se: fm, ds, signature: sig, imm };
        match CtrlSeg::new(&p) {
            Ok(c) => {
                prop_assert!(qpn <= 0xff_ffff && ds <= MAX_WQE_DS);
                prop_assert_eq!((c.wqe_index(), c.opcode(), c.opmod(), c.qpn(), c.ds(), c.fm_ce_se, c.signature, c.imm()),
                                (pi, WqeOpcode(op), opmod, qpn, ds, fm, sig, imm));
            }
            Err(_) => prop_assert!(qpn > 0xff_ffff || ds > MAX_WQE_DS),
        }
        let d = DgramParams { key, dqp_dct: dqp, ext: dqp & 1 == 0, ..DgramParams::default() };
        match Av::new(&d) {
            Ok(av) => prop_assert_eq!((av.dc_key(), av.dqp_dct.get() & !MLX5_EXTENDED_UD_AV, av.extended()), (key, dqp, d.ext)),
            Err(_) => prop_assert!(dqp & MLX5_EXTENDED_UD_AV != 0),
        }
        prop_assert_eq!(InlineSeg::new(dqp as usize).is_ok(), dqp < MLX5_INLINE_SEG);
    }

    #[test]
    fn pure_helpers_accept_anything(a in any::<u32>(), b in any::<u32>(), c in any::<u32>(), x in any::<u8>(),
                                    n in any::<usize>(), s in any::<bool>()) {
        let _ = (sw_owns(x, a, b), eqe_sw_owns(x, a, b), cqe_slot(a, b), make_op_own(CqeOpcode(x), x, s, s));
        let _ = (op_own_owner(x), op_own_se(x), op_own_format(x), op_own_opcode(x).name());
        let _ = (cq_arm_doorbell(a, s, b, c), cq_arm_doorbell_bytes(a, s, b, c), cq_arm_value(a, s, b), cq_ci_value(a));
        let _ = (eq_doorbell_value(a, x), eq_doorbell_bytes(a, x), uar_bar_offset(a), eq_doorbell_offset(s));
        prop_assert!(wqebbs_for_ds(x) <= 64);
        let _ = (rc_ds(WqeOpcode(x), n), ud_send_ds(n), inline_ds(n), EventType(x).name(), WqeOpcode(x).name());
        let _ = (bfreg_offset(n, a as usize), bf_buf_size(n % 8, a as usize), next_bf_offset(n, a as usize));
        let _ = would_use_blueflame(n, a as usize, s, x);
        if let Ok(off) = bfreg_offset(n % 8, a as usize % 1024) {
            prop_assert!(off >= BF_OFFSET && off + (a as usize % 1024) <= ADAPTER_PAGE_SIZE);
        }
        // The CQ arm doorbell carries the record's arm word in its high half.
        let mut rec = CqDbRecord::view_mut(&mut [0u8; 8]).map(|r| *r).unwrap();
        rec.set_arm(a, s, b);
        prop_assert_eq!((cq_arm_doorbell(a, s, b, c) >> 32) as u32, rec.arm.get());
    }
}

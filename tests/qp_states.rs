//! The send-queue states through the safe API on two stepped sim NICs: RTS→SQD drains the
//! SQ (the WRITEs in progress complete, SQ_DRAINED is raised once, a WRITE posted in SQD
//! starts only after SQD→RTS); a UD send error moves the QP to SQE (error CQE, then
//! WR_FLUSH_ERR), receives still work there, SQE→RTS recovers; bad transitions are refused by
//! the driver with typed errors and by the device with BAD_QP_STATE.

#[path = "verbs_support.rs"]
mod support;

use std::time::Duration;

use bypass_sim::link::rule::{Packet, Rule, Verdict};
use rand_core::RngCore;

use bypass_verbs::driver::DriverError;
use bypass_verbs::driver::eq::AsyncEvent;
use bypass_verbs::driver::hw::cmd::qp::QpState as HwQpState;
use bypass_verbs::driver::hw::eqe::EventType;
use bypass_verbs::driver::hw::syndrome::{CmdStatus, CqeSyndrome};
use bypass_verbs::driver::qp_attr::QpType;
use bypass_verbs::driver::qp_states::{SqAttrs, SqTransition, sq_transition_input};
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{QpBuilder, QpState, VerbsError, WcStatus};
use support::*;

const GRH: usize = 40;

/// Drops the first `left` packets whose BTH opcode is `opcode`.
struct DropFirst {
    opcode: u8,
    left: usize,
}

impl Rule for DropFirst {
    fn on_packet(&mut self, pkt: &mut Packet<'_>, _rng: &mut dyn RngCore) -> Verdict {
        let ip = match pkt.bytes.first().map(|b| b >> 4) {
            Some(4) => usize::from(pkt.bytes[0] & 0xf) * 4,
            _ => 40,
        };
        if self.left > 0 && pkt.bytes.get(ip + 8) == Some(&self.opcode) {
            self.left -= 1;
            return Verdict::Drop;
        }
        Verdict::Pass
    }

    fn active(&self) -> bool {
        true
    }
}

fn drained(events: &[AsyncEvent]) -> Vec<u32> {
    events.iter().filter_map(AsyncEvent::drained_qpn).collect()
}

#[test]
fn sqd_drains_the_writes_in_progress_and_holds_a_new_one_until_rts() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    // The first ACKs are lost (RC ACKNOWLEDGE, 0x11): the WRITEs are still in progress when
    // the drain starts, and complete after their retransmission.
    let rule = DropFirst {
        opcode: 0x11,
        left: 4,
    };
    r.fabric.with_world(|w| w.add_rule(Box::new(rule)));
    let target = r.b.mr.remote();
    for i in 0..4u64 {
        a.post_send(
            SendWr::new(i, SendOp::Write(target.slice(i * 8, 8).unwrap()))
                .sge(lease_with(&r.a.pool, &[i as u8 + 1; 8])),
        )
        .unwrap();
    }
    a.modify_to_sqd().unwrap();
    assert_eq!(a.state().unwrap(), QpState::Sqd);
    assert_eq!(
        a.query().unwrap().state,
        HwQpState::SqDraining,
        "the WRITEs are still waiting for their ACKs"
    );
    // Posting in SQD is accepted (libibverbs posts from RTS on) but nothing starts.
    a.post_send(
        SendWr::new(9, SendOp::Write(target.slice(100, 4).unwrap()))
            .sge(lease_with(&r.a.pool, b"late")),
    )
    .unwrap();
    for i in 0..4u64 {
        let c = wait1(&mut r.a.cq, "a WRITE in progress at the drain");
        assert!(c.is_ok(), "{c}");
        assert_eq!(c.wr_id(), i);
        drop(a.reclaim(c).unwrap());
    }
    let mut buf = [0u8; 32];
    r.b.mr.read(0, &mut buf).unwrap();
    assert_eq!(&buf[..8], &[1; 8]);
    assert_eq!(&buf[24..], &[4; 8]);
    let hca = r.a.ctx.hca().clone();
    let events = hca.process_events().unwrap();
    assert_eq!(drained(&events), [a.qpn()], "one SQ_DRAINED: {events:?}");
    assert_eq!(a.query().unwrap().state, HwQpState::Sqd);
    assert!(events.iter().any(|e| e.event_type == EventType::SQ_DRAINED));
    // The WRITE posted in SQD has not started.
    assert!(r.a.cq.wait(Duration::from_millis(20)).unwrap().is_none());
    r.b.mr.read(100, &mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], &[0; 4]);
    assert_eq!(a.sends_outstanding(), 1);

    a.modify_sqd_to_rts().unwrap();
    let c = wait1(&mut r.a.cq, "the WRITE posted in SQD");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 9);
    drop(a.reclaim(c).unwrap());
    r.b.mr.read(100, &mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"late");
    assert!(
        drained(&hca.process_events().unwrap()).is_empty(),
        "raised once"
    );
}

#[test]
fn an_idle_drain_ends_at_once_and_sqd_to_sqd_changes_attributes() {
    let r = rig();
    let mut a = QpBuilder::ud(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let b = QpBuilder::ud(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    a.connect(&b.endpoint().unwrap()).unwrap();
    a.modify_to_sqd().unwrap();
    let hca = r.a.ctx.hca().clone();
    assert_eq!(drained(&hca.process_events().unwrap()), [a.qpn()]);
    a.modify_sqd_to_sqd(&SqAttrs {
        qkey: Some(0x2222),
        ..SqAttrs::default()
    })
    .unwrap();
    let raw = a.query().unwrap().raw;
    let q = bypass_verbs::driver::hw::cmd::qp::QueryQpOut::new_checked(&raw[..]).unwrap();
    assert_eq!(q.qpc().q_key(), 0x2222);
    a.modify_sqd_to_rts().unwrap();
    assert_eq!(a.state().unwrap(), QpState::Rts);
}

#[test]
fn a_ud_send_error_moves_the_qp_to_sqe_receives_go_on_and_sqe_to_rts_recovers() {
    let mut r = rig();
    let mut a = QpBuilder::ud(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::ud(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    let to_b = a.ud_dest(&eb).unwrap();
    // 8 KiB: more than one packet, which a UD message must fit (mlx5: local length error).
    let too_big = SendWr::new(1, SendOp::Send)
        .sge(r.a.pool.lease(4096).unwrap())
        .sge(r.a.pool.lease(4096).unwrap())
        .to(&to_b);
    a.post_send(too_big).unwrap();
    a.post_send(send_of(&r.a.pool, 2, b"behind it").to(&to_b))
        .unwrap();
    let c = wait1(&mut r.a.cq, "the oversized UD send");
    assert_eq!(c.status(), WcStatus::Error(CqeSyndrome::LOCAL_LENGTH_ERR));
    assert_eq!(c.wr_id(), 1);
    drop(a.reclaim(c).unwrap());
    let c = wait1(&mut r.a.cq, "the send behind it");
    assert_eq!(c.status(), WcStatus::Error(CqeSyndrome::WR_FLUSH_ERR));
    assert_eq!(c.wr_id(), 2);
    drop(a.reclaim(c).unwrap());
    assert_eq!(a.state().unwrap(), QpState::Sqe, "SQE, not ERR");
    assert!(r.b.cq.poll_one().is_none(), "nothing reached b");

    // Receives work in SQE.
    a.post_recv(RecvWr::new(7, r.a.pool.lease(GRH + 64).unwrap()))
        .unwrap();
    let to_a = b.ud_dest(&ea).unwrap();
    b.post_send(send_of(&r.b.pool, 3, b"to a in SQE").to(&to_a))
        .unwrap();
    let rc = wait1(&mut r.a.cq, "a receive in SQE");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!(rc.wr_id(), 7);
    let l = a.reclaim_lease(rc).unwrap().unwrap();
    assert_eq!(&l.as_slice()[GRH..GRH + 11], b"to a in SQE");
    drop(l);
    assert!(wait1(&mut r.b.cq, "b's send").is_ok());

    // SQE → RTS, and a good send goes out.
    a.modify_sqe_to_rts().unwrap();
    assert_eq!(a.state().unwrap(), QpState::Rts);
    b.post_recv(RecvWr::new(8, r.b.pool.lease(GRH + 64).unwrap()))
        .unwrap();
    a.post_send(send_of(&r.a.pool, 4, b"recovered").to(&to_b))
        .unwrap();
    let c = wait1(&mut r.a.cq, "the send after recovery");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 4);
    let rc = wait1(&mut r.b.cq, "b's receive after recovery");
    assert!(rc.is_ok(), "{rc}");
    let l = b.reclaim_lease(rc).unwrap().unwrap();
    assert_eq!(&l.as_slice()[GRH..GRH + 9], b"recovered");
}

#[test]
fn bad_transitions_are_typed_driver_errors_and_bad_qp_state_on_the_device() {
    let r = rig();
    let (mut a, _b) = rc_pair(&r);
    let bad_transition = |e: VerbsError| {
        assert!(
            matches!(e, VerbsError::Driver(DriverError::BadQpTransition { .. })),
            "{e}"
        );
    };
    bad_transition(a.modify_sqd_to_rts().unwrap_err());
    bad_transition(a.modify_sqd_to_sqd(&SqAttrs::default()).unwrap_err());
    bad_transition(a.modify_sqe_to_rts().unwrap_err());
    a.modify_to_sqd().unwrap();
    bad_transition(a.modify_to_sqd().unwrap_err());
    // A Q_Key is a UD attribute: SQD→RTS of an RC QP does not take it.
    let e = a
        .modify_sqd_to_rts_with(&SqAttrs {
            qkey: Some(1),
            ..SqAttrs::default()
        })
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::Driver(DriverError::QpAttrNotAllowed { .. })),
        "{e}"
    );
    a.modify_sqd_to_rts().unwrap();

    // The device's own check, past the driver's: SQD→SQD of a QP in RTS.
    let hca = r.a.ctx.hca().clone();
    let i = sq_transition_input(
        a.qpn(),
        QpType::Rc,
        HwQpState::Sqd,
        SqTransition::Sqd2Sqd,
        &SqAttrs::default(),
    )
    .unwrap();
    // SAFETY: SQD->SQD of a QP in RTS: the device refuses it and the QP stays as it was
    // (asserted below); the command names no IOVA.
    let e = unsafe { hca.cmd() }.exec(&i, 16).unwrap_err();
    assert_eq!(e.cmd_status(), Some(CmdStatus::BAD_QP_STATE_ERR), "{e}");
    assert_eq!(a.state().unwrap(), QpState::Rts, "unchanged");
}

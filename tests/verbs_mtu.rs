//! MTU through the safe API on the stepped sim: a path MTU the local port's Ethernet MTU
//! cannot carry is refused at connect with the computed fix, a port just large enough
//! connects, two ends with different MTUs are named, and a QP whose packets the port drops
//! for size ends in TRANSPORT_RETRY_EXC with an error that names the MTU drops.

#[path = "verbs_support.rs"]
mod support;

use std::sync::Arc;

use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;
use bypass_testbed::SimContext;
use bypass_verbs::driver::hw::cmd::qp::PathMtu;
use bypass_verbs::driver::hw::syndrome::CqeSyndrome;
use bypass_verbs::driver::qp_attr::{Init2Rtr, Rtr2Rts};
use bypass_verbs::{Context, Mtu, QpBuilder, VerbsError, WcStatus};
use support::*;

/// Two NICs on a stepped fabric whose ports have Ethernet MTUs `mtu_a` and `mtu_b`.
fn rig_mtu(mtu_a: u32, mtu_b: u32) -> Rig {
    let fabric = SimFabric::stepped(7);
    let open = |id: u8, mtu: u32| -> Arc<Context> {
        let mut p = Profile::with_id(id);
        p.ports[0].eth_mtu = mtu;
        Context::new(fabric.add_device(p).expect("add a sim NIC")).expect("open it")
    };
    let (a, b) = (open(1, mtu_a), open(2, mtu_b));
    Rig {
        a: side_sized(a, 4096, 8, 4096),
        b: side_sized(b, 4096, 8, 4096),
        fabric,
    }
}

#[test]
fn path_mtu_4096_on_a_1500_port_is_refused_with_the_fix() {
    let r = rig_mtu(1500, 1500);
    assert_eq!(r.a.ctx.eth_mtu(1).unwrap(), 1500);
    assert_eq!(r.a.ctx.active_mtu(1).unwrap(), Mtu::Mtu1024);
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let eb = b.endpoint().unwrap();
    a.modify_to_init().unwrap();
    let err = a
        .modify_to_rtr_with(&Init2Rtr {
            mtu: PathMtu::Mtu4096,
            ..Init2Rtr::rc(eb.qpn, eb.psn, eb.gid.0)
        })
        .unwrap_err();
    assert!(matches!(err, VerbsError::PathMtuTooLarge { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "QP {:#x} cannot connect: path MTU 4096 needs an Ethernet MTU >= 4192 on every hop (RoCEv2 headers: 96 bytes); this port has 1500: set the MTU to >= 4192 (e.g. 9000) on every hop, or use path MTU 1024",
            a.qpn()
        )
    );
    // The suggested path MTU connects.
    a.modify_to_rtr_with(&Init2Rtr {
        mtu: PathMtu::Mtu1024,
        ..Init2Rtr::rc(eb.qpn, eb.psn, eb.gid.0)
    })
    .unwrap();
}

#[test]
fn a_4200_port_carries_path_mtu_4096() {
    let r = rig_mtu(4200, 4200);
    assert_eq!(r.a.ctx.active_mtu(1).unwrap(), Mtu::Mtu4096);
    let (a, _b) = rc_pair(&r);
    assert_eq!(a.state().unwrap(), bypass_verbs::QpState::Rts);
    let mtu =
        r.a.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.qp_path_mtu(a.qpn()))
            .unwrap();
    assert_eq!(mtu, Some(4096));
}

#[test]
fn two_ends_with_different_mtus_are_named() {
    let r = rig_mtu(9000, 1500);
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let eb = b.endpoint().unwrap();
    assert_eq!(eb.mtu, Mtu::Mtu1024);
    let err = a.connect_same_mtu(&eb).unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::PathMtuMismatch {
                local: 4096,
                remote: 1024,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("path MTU 4096, the peer's 1024") && text.contains("at path MTU 1024"),
        "{text}"
    );
    // Plain connect runs at the smaller.
    a.connect(&eb).unwrap();
    let mtu = r.a.ctx.sim().unwrap();
    assert_eq!(
        mtu.with_device(|d| d.qp_path_mtu(a.qpn())).unwrap(),
        Some(1024)
    );
}

#[test]
fn packets_dropped_for_size_end_in_retry_exc_that_names_the_mtu() {
    let mut r = rig_mtu(9000, 9000);
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.modify_to_init().unwrap();
    a.modify_to_rtr(&eb).unwrap();
    a.modify_to_rts_with(&Rtr2Rts {
        retry_cnt: 2,
        timeout: 8,
        ..Rtr2Rts::new(a.psn())
    })
    .unwrap();
    b.connect(&ea).unwrap();
    b.post_recv(bypass_verbs::wr::RecvWr::new(
        1,
        r.b.pool.lease(4096).unwrap(),
    ))
    .unwrap();
    // The port's MTU shrinks under the connected QP (a hop reconfigured): a 2000-byte SEND is
    // one 2000 + 60 byte packet, larger than 1500.
    let sim = r.a.ctx.sim().unwrap();
    assert!(sim.with_device(|d| d.set_port_mtu(1, 1500)).unwrap());
    a.post_send(send_of(&r.a.pool, 7, &[0x5a; 2000])).unwrap();
    let c = wait1(&mut r.a.cq, "the send that cannot pass");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::TRANSPORT_RETRY_EXC_ERR),
        "{c}"
    );
    let (dev, qp) = sim
        .with_device(|d| (d.counters.tx_mtu_drops, d.qp_counters(a.qpn())))
        .unwrap();
    let qp_drops = qp.unwrap().tx_mtu_drops;
    // The first send and its two retries.
    assert_eq!((dev, qp_drops), (3, 3));
    let err = r.a.ctx.retry_exc_cause(a.qpn()).expect("a cause");
    assert_eq!(
        err.to_string(),
        format!(
            "QP {:#x} completed with TRANSPORT_RETRY_EXC_ERR: 3 of its packets were dropped as larger than the Ethernet MTU 1500 (path MTU 4096 needs an Ethernet MTU >= 4192 on every hop (RoCEv2 headers: 96 bytes); this port has 1500: set the MTU to >= 4192 (e.g. 9000) on every hop, or use path MTU 1024)",
            a.qpn()
        )
    );
    assert!(r.b.ctx.retry_exc_cause(b.qpn()).is_none());
}

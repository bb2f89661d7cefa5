//! Fuzz target `wqes`: two NICs brought up with real commands, an RC QP pair and a UD QP pair
//! connected between them, registered memory and CQs; then the fuzz input drives the data path
//! the way a buggy driver could: arbitrary bytes as send WQEs (any opcode, DS count, segments,
//! lkeys, rkeys, addresses, lengths), written into the SQ ring and announced by an 8-byte
//! doorbell or a BlueFlame copy, arbitrary receive WQEs, doorbell-record producers that jump
//! anywhere, and CQ arm doorbells. Packets are carried between the NICs and time advances in
//! bounded steps.
//!
//! Asserts nothing but that nothing panics and that both devices still answer a command.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run wqes -- -max_total_time=60` in `sim/fuzz`.

#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::mkey::MkeyAccess;
use bypass_hw::cmd::qp::{PathMtu, service_type as st};
use bypass_sim::Profile;
use common::qp::HostQp;
use common::{HostCq, HostMr, Raw, header};
use libfuzzer_sys::fuzz_target;

struct Nic {
    raw: Raw,
    cq: HostCq,
    rc: HostQp,
    ud: HostQp,
    mr: HostMr,
}

fn nic(id: u8) -> Nic {
    let mut raw = Raw::with_memory(Profile::with_id(id), 4 << 20, 24);
    raw.bring_up();
    let pd = raw.alloc_pd().expect("PD");
    let eqn = raw.async_eq.expect("EQ").eqn;
    let cq = raw.create_cq(6, eqn).expect("CQ");
    let mr = raw.reg_mr(pd, 64 << 10, MkeyAccess::all()).expect("MR");
    let rc = raw.create_qp(st::RC, pd, &cq, &cq, 4, 4).expect("RC QP");
    let ud = raw.create_qp(st::UD, pd, &cq, &cq, 4, 4).expect("UD QP");
    Nic { raw, cq, rc, ud, mr }
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (a, b) = data.split_at(n);
    *data = b;
    a
}

/// Steps both devices and carries packets, for a bounded number of rounds, moving time on.
fn carry(a: &mut Nic, b: &mut Nic, rounds: usize) {
    for _ in 0..rounds {
        let now = a.raw.dev.now() + 50_000;
        a.raw.dev.set_time(now);
        b.raw.dev.set_time(now);
        let mut moved = a.raw.dev.step() | b.raw.dev.step();
        while let Some(p) = a.raw.dev.take_tx() {
            b.raw.dev.receive(p);
            moved = true;
        }
        while let Some(p) = b.raw.dev.take_tx() {
            a.raw.dev.receive(p);
            moved = true;
        }
        if !moved && a.raw.dev.next_deadline().is_none() && b.raw.dev.next_deadline().is_none() {
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut a = nic(1);
    let mut b = nic(2);
    let (ga, gb) = (a.raw.gid(), b.raw.gid());
    let (arc, brc, aud, bud) = (a.rc, b.rc, a.ud, b.ud);
    a.raw.walk_to_rts(&arc, st::RC, brc.qpn, gb, (1, 2), PathMtu::Mtu1024);
    b.raw.walk_to_rts(&brc, st::RC, arc.qpn, ga, (2, 1), PathMtu::Mtu1024);
    a.raw.walk_to_rts(&aud, st::UD, 0, gb, (1, 1), PathMtu::Mtu1024);
    b.raw.walk_to_rts(&bud, st::UD, 0, ga, (1, 1), PathMtu::Mtu1024);
    let mut data = data;
    while !data.is_empty() {
        let op = take(&mut data, 1).first().copied().unwrap_or(0);
        let (me, _peer) = if op & 0x80 == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
        let ud = op & 0x40 != 0;
        let mut qp = if ud { me.ud } else { me.rc };
        match op & 0x7 {
            // A send WQE of 1..=4 WQEBBs, fuzz bytes; 8-byte doorbell.
            0 | 1 => {
                let nbb = usize::from(op >> 3 & 0x3) + 1;
                let mut w = take(&mut data, nbb * 64).to_vec();
                w.resize(nbb * 64, 0);
                let _ = me.raw.try_post_send(&mut qp, &w);
            }
            // The same through BlueFlame.
            2 => {
                let mut w = take(&mut data, 64).to_vec();
                w.resize(64, 0);
                let _ = me.raw.try_post_send_bf(&mut qp, &w);
            }
            // A receive WQE pointing into (or around) the MR.
            3 => {
                let s = take(&mut data, 8);
                let get = |i: usize| s.get(i).copied().unwrap_or(0);
                let va = me.mr.va.wrapping_add(u64::from(get(0)) << 8).wrapping_sub(u64::from(get(1)));
                let len = u32::from(get(2)) << 8 | u32::from(get(3));
                let key = if get(4) & 1 == 0 { me.mr.key } else { me.mr.key ^ u32::from(get(5)) };
                me.raw.post_recv(&mut qp, &[(key, va, len)]);
            }
            // A doorbell record producer that jumps (SQ or RQ).
            4 => {
                let s = take(&mut data, 2);
                let v = u32::from(s.first().copied().unwrap_or(0)) << 8 | u32::from(s.get(1).copied().unwrap_or(0));
                let dw = if op & 0x8 == 0 { 0 } else { 4 };
                me.raw.write(qp.dbr_off + dw, &v.to_be_bytes());
            }
            // Arm the CQ.
            5 => {
                let cq = me.cq;
                me.raw.arm_cq(&cq, u32::from(op >> 3 & 3), op & 0x20 != 0);
            }
            // Poll the CQ a little.
            6 => {
                let mut cq = me.cq;
                for _ in 0..8 {
                    if me.raw.poll_cq(&mut cq).is_none() {
                        break;
                    }
                }
                me.cq = cq;
            }
            // Let the network run.
            _ => carry(&mut a, &mut b, 64),
        }
        if ud {
            if op & 0x80 == 0 { a.ud = qp } else { b.ud = qp }
        } else if op & 0x80 == 0 {
            a.rc = qp
        } else {
            b.rc = qp
        }
    }
    carry(&mut a, &mut b, 256);
    for n in [&mut a, &mut b] {
        let i = header(Opcode::NOP, 0, 16);
        n.raw.cmd(&i, 16).expect("the device still answers commands");
    }
});

//! Fuzz target `wqes`: two NICs brought up with real commands ([`Pair::lean`]: the least
//! host memory a reset has to copy back), an RC QP pair (two RNR retries) and a UD QP pair
//! connected between them, registered memory, CQs and posted receives (built once per
//! process, reset to their snapshot before every input); then the fuzz input drives the
//! data path the way a buggy driver could: arbitrary bytes as send WQEs (any opcode, DS
//! count, segments, lkeys, rkeys, addresses, lengths), written into the SQ ring and
//! announced by an 8-byte doorbell or a BlueFlame copy, arbitrary receive WQEs,
//! doorbell-record producers that jump laps ahead, and CQ arm doorbells. Packets are carried
//! between the NICs and time advances in bounded steps.
//!
//! Asserts nothing but that nothing panics and that both devices still answer a command.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run wqes -- -max_len=1024 -max_total_time=60` in
//! `sim/fuzz` (`options/wqes` says why inputs stop at 1 KiB; `scripts/fuzz.sh` passes it).

#![no_main]

use std::cell::RefCell;

use bypass_hw::cmd::Opcode;
use bypass_sim_fuzz::common::header;
use bypass_sim_fuzz::common::pair::Pair;
use bypass_sim_fuzz::input::Input;
use bypass_sim_fuzz::persist::{self, Persistent};
use libfuzzer_sys::fuzz_target;

/// RNR retries of the RC QPs: enough to run the RNR retry path and its exhaustion; with
/// infinite retries (7) a SEND that finds no receive resends its packets every round of
/// every carry, which would be most of what a long input costs and would explore nothing
/// new.
const RNR_RETRY: u8 = 2;

thread_local! {
    static WORLD: RefCell<Option<Persistent<Pair>>> = const { RefCell::new(None) };
}

/// One input op on `p`: `op`'s bit 7 picks the NIC (A or B), bit 6 the QP (RC or UD), bits
/// 0..2 what to do.
fn step(p: &mut Pair, op: u8, data: &mut Input<'_>) {
    if op & 0x7 == 7 {
        p.carry(64);
        return;
    }
    let me = if op & 0x80 == 0 { &mut p.a } else { &mut p.b };
    let ud = op & 0x40 != 0;
    let mut qp = if ud { me.ud } else { me.rc };
    match op & 0x7 {
        // A send WQE of 1..=4 WQEBBs, fuzz bytes; 8-byte doorbell.
        0 | 1 => {
            let nbb = usize::from(op >> 3 & 0x3) + 1;
            let mut w = data.take(nbb * 64).to_vec();
            w.resize(nbb * 64, 0);
            let _ = me.raw.try_post_send(&mut qp, &w);
        }
        // The same through BlueFlame.
        2 => {
            let mut w = data.take(64).to_vec();
            w.resize(64, 0);
            let _ = me.raw.try_post_send_bf(&mut qp, &w);
        }
        // A receive WQE pointing into (or around) the MR.
        3 => {
            let s = data.take(8);
            let get = |i: usize| s.get(i).copied().unwrap_or(0);
            let va = me
                .mr
                .va
                .wrapping_add(u64::from(get(0)) << 8)
                .wrapping_sub(u64::from(get(1)));
            let len = u32::from(get(2)) << 8 | u32::from(get(3));
            let key = if get(4) & 1 == 0 {
                me.mr.key
            } else {
                me.mr.key ^ u32::from(get(5))
            };
            me.raw.post_recv(&mut qp, &[(key, va, len)]);
        }
        // A doorbell record producer that jumps (RQ or SQ) up to 63 ahead of the driver's:
        // up to four laps of the 16-entry rings, which is every wrap case. (Each WQE a jump
        // announces on a QP in ERR is flushed with a CQE, so a larger jump only adds flush
        // CQEs; a producer behind the device's counter is ~65,500 ahead in 16-bit
        // arithmetic, which would flush the ring 4,096 times per input.)
        4 => {
            let jump = u32::from(data.u8() & 0x3f);
            let (pi, dw) = if op & 0x8 == 0 {
                (qp.rq_pi, 0)
            } else {
                (qp.sq_pi, 4)
            };
            let v = pi.wrapping_add(jump) & 0xffff;
            me.raw.write(qp.dbr_off + dw, &v.to_be_bytes());
        }
        // Arm the CQ.
        5 => {
            let cq = me.cq;
            me.raw.arm_cq(&cq, u32::from(op >> 3 & 3), op & 0x20 != 0);
        }
        // Poll the CQ a little.
        _ => {
            let mut cq = me.cq;
            for _ in 0..8 {
                if me.raw.poll_cq(&mut cq).is_none() {
                    break;
                }
            }
            me.cq = cq;
        }
    }
    if ud {
        me.ud = qp;
    } else {
        me.rc = qp;
    }
}

fuzz_target!(|data: &[u8]| {
    persist::with(
        &WORLD,
        || Pair::lean(RNR_RETRY),
        |p| {
            let mut data = Input(data);
            while !data.is_empty() {
                let op = data.u8();
                step(p, op, &mut data);
            }
            p.carry(256);
            for n in [&mut p.a, &mut p.b] {
                let i = header(Opcode::NOP, 0, 16);
                n.raw
                    .cmd(&i, 16)
                    .expect("the device still answers commands");
            }
        },
    );
});

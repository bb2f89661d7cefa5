//! Fuzz target `rx_packets`: RoCEv2 packets built from the input, delivered into NIC B of a
//! connected pair (RC QPs connected to each other, UD QPs in RTS, receives posted, all built
//! once per process and reset to their snapshot before every input); B's answers (ACKs,
//! NAKs, read responses) are carried to A, and both CQs are polled.
//!
//! Input: records `[flags][len:2][IP packet: IP header through ICRC]`, up to 4 KiB each.
//! `flags` (see `bypass_sim_fuzz::packet`): bit 0 rebuilds the IP/UDP headers for A → B and
//! bits 2..3 then pick the destination QP (as given, B's RC, B's UD, QP 1); bit 1 recomputes
//! the ICRC (about half the inputs, so they pass the ICRC check and reach the transport);
//! bit 4 hands the packet in place (`receive_in_place`, trusting the ICRC the fix-up made,
//! else checked) instead of queueing it; bit 5 moves time on 1 ms first (retransmit and RNR
//! timers). The seeds (`sim/fuzz/seeds/rx_packets`) are packets of a real A → B run.
//!
//! Asserts that nothing panics and that both devices still answer a command.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run rx_packets seeds/rx_packets` in `sim/fuzz`.

#![no_main]

use std::cell::RefCell;

use bypass_hw::cmd::Opcode;
use bypass_sim_fuzz::common::header;
use bypass_sim_fuzz::common::pair::Pair;
use bypass_sim_fuzz::input::Input;
use bypass_sim_fuzz::packet::{FIX_ICRC, fix_packet};
use bypass_sim_fuzz::persist::{self, Persistent};
use libfuzzer_sys::fuzz_target;

/// Host memory per NIC (a reset copies it back: keep it small).
const MEM: usize = 400 << 10;
/// The longest packet a record carries.
const MAX_PACKET: usize = 4096;

thread_local! {
    static WORLD: RefCell<Option<Persistent<Pair>>> = const { RefCell::new(None) };
}

fn deliver(p: &mut Pair, flags: u8, packet: &[u8]) {
    let (ga, gb) = (p.a.raw.gid(), p.b.raw.gid());
    let pkt = fix_packet(flags, packet, &ga, &gb, [p.b.rc.qpn, p.b.ud.qpn]);
    let b = &mut p.b.raw.dev;
    if flags & 0x20 != 0 {
        let now = b.now() + 1_000_000;
        b.set_time(now);
    }
    if flags & 0x10 != 0 {
        b.receive_in_place(&pkt, flags & FIX_ICRC != 0);
    } else {
        b.receive(pkt);
    }
    while b.step() {}
    while let Some(out) = b.take_tx() {
        p.a.raw.dev.receive(out);
    }
    while p.a.raw.dev.step() {}
    // A's answers to B's answers are dropped: the input drives B.
    while p.a.raw.dev.take_tx().is_some() {}
}

fuzz_target!(|data: &[u8]| {
    persist::with(
        &WORLD,
        || Pair::connected(MEM),
        |p| {
            let mut data = Input(data);
            while !data.is_empty() {
                let flags = data.u8();
                let packet = data.record(MAX_PACKET);
                deliver(p, flags, packet);
            }
            p.carry(64);
            for n in [&mut p.a, &mut p.b] {
                let mut cq = n.cq;
                for _ in 0..64 {
                    if n.raw.poll_cq(&mut cq).is_none() {
                        break;
                    }
                }
                n.cq = cq;
                let i = header(Opcode::NOP, 0, 16);
                n.raw
                    .cmd(&i, 16)
                    .expect("the device still answers commands");
            }
        },
    );
});

//! Fuzz target `commands`: a brought-up device (brought up once per process, reset to its
//! snapshot before every input), then the fuzz input as
//! (a) a sequence of command inputs of arbitrary length posted through correct mailbox chains,
//! or (b) raw command-entry and mailbox bytes.
//!
//! Asserts nothing but that nothing panics and that the device still answers a command
//! afterwards (a NOP completes with a delivered status: OK, or BAD_SYS_STATE if the fuzz input
//! tore the HCA down).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run commands -- -max_total_time=60` in `sim/fuzz`.

#![no_main]

use std::cell::RefCell;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::entry::MAILBOX_SIZE;
use bypass_sim_fuzz::common::{CmdFailure, Raw, header};
use bypass_sim_fuzz::persist::{self, Persistent};
use libfuzzer_sys::fuzz_target;

/// Host memory of the device (a reset copies it back: keep it small).
const MEM: usize = 400 << 10;

thread_local! {
    static WORLD: RefCell<Option<Persistent<Raw>>> = const { RefCell::new(None) };
}

fn bring_up() -> Raw {
    let mut r = Raw::with_memory(bypass_sim::Profile::default(), MEM, 24);
    r.bring_up();
    r
}

/// Longest command the target builds (keeps iterations fast; the device accepts up to 1 MiB).
const MAX_LEN: usize = 0x2000;

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (a, b) = data.split_at(n);
    *data = b;
    a
}

fn u16_of(data: &mut &[u8]) -> usize {
    let b = take(data, 2);
    usize::from(b.first().copied().unwrap_or(0)) << 8 | usize::from(b.get(1).copied().unwrap_or(0))
}

/// (a): `[sel][len:2][outlen:2][bytes]...`; `sel < 0x80` forces a known opcode.
fn commands(r: &mut Raw, mut data: &[u8]) {
    while !data.is_empty() {
        let sel = take(&mut data, 1).first().copied().unwrap_or(0);
        let len = u16_of(&mut data) % MAX_LEN;
        let out_len = u16_of(&mut data) % (MAX_LEN + 0x20);
        let mut input = take(&mut data, len).to_vec();
        if sel < 0x80 && input.len() >= 2 {
            let ops = Opcode::ALL;
            let op = ops[usize::from(sel) % ops.len()];
            input[..2].copy_from_slice(&op.0.to_be_bytes());
        }
        let _ = r.cmd(&input, out_len);
    }
}

/// (b): `[flags][entry:64][block bytes...]`: a posted NOP's entry and mailboxes overwritten.
fn raw_entry(r: &mut Raw, mut data: &[u8]) {
    let flags = take(&mut data, 1).first().copied().unwrap_or(0);
    let p = r.post(0, &header(Opcode::NOP, 0, 16 + 3 * 512), 16 + 2 * 512);
    let entry = take(&mut data, 64);
    let mut e = r.read(p.entry_off, 64);
    for (k, b) in entry.iter().enumerate() {
        let keep_ptr = flags & 1 != 0 && ((0x08..0x10).contains(&k) || (0x30..0x38).contains(&k));
        if !keep_ptr {
            e[k] = *b;
        }
    }
    if flags & 2 != 0 {
        e[0x3f] |= 1;
    }
    r.write(p.entry_off, &e);
    for &off in p.in_blocks.iter().chain(&p.out_blocks) {
        let bytes = take(&mut data, MAILBOX_SIZE);
        let mut blk = r.read(off, MAILBOX_SIZE);
        for (k, b) in bytes.iter().enumerate() {
            let keep_next = flags & 4 != 0 && (0x230..0x238).contains(&k);
            if !keep_next {
                blk[k] = *b;
            }
        }
        r.write(off, &blk);
    }
    r.ring(1);
    let _ = r.complete(&p);
}

fuzz_target!(|data: &[u8]| {
    persist::with(&WORLD, bring_up, |r| {
        let (mode, rest) = data.split_first().map_or((0, data), |(m, r)| (*m, r));
        if mode & 1 == 0 {
            commands(r, rest);
        } else {
            raw_entry(r, rest);
        }
        match r.simple(Opcode::NOP, 0) {
            Ok(_) | Err(CmdFailure::Status { .. }) => {}
            Err(other) => panic!("the device stopped answering: {other:?}"),
        }
    });
});

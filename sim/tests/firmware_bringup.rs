//! Bring-up order and each violation, the command queue's delivery errors, pages, teardown,
//! and command completion events, all through the command queue as a driver drives them.

mod common;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::caps::{CapMode, CapType, CmdHcaCap};
use bypass_hw::cmd::entry::{CMD_ENTRY_SIZE, DeliveryStatus};
use bypass_hw::cmd::hca::{QueryIssiOut, TeardownProfile};
use bypass_hw::cmd::pages::QueryPagesOpMod;
use bypass_hw::eqe::EventType;
use bypass_hw::init_seg::{self as iseg, NicInterface};
use bypass_hw::syndrome::CmdStatus;
use bypass_sim::memory::PAGE_SIZE;
use bypass_sim::syndromes as s;
use bypass_sim::{Profile, Stage};
use common::*;

fn state(synd: u32) -> Result<Vec<u8>, CmdFailure> {
    Err(CmdFailure::Status {
        status: CmdStatus::BAD_SYS_STATE_ERR,
        syndrome: synd,
    })
}

fn fresh() -> Raw {
    let mut r = Raw::new(Profile::default());
    r.init_cmdq();
    r
}

#[test]
fn rdma_core_bring_up_sequence_succeeds() {
    let r = Raw::up();
    assert!(r.async_eq.is_some());
    assert_eq!(r.dev.firmware_stage(), Stage::Initialized);
    let p = r.dev.profile().clone();
    assert_eq!(
        r.dev.firmware_pages(),
        (p.boot_pages + p.init_pages) as usize
    );
}

#[test]
fn only_enable_hca_is_accepted_before_enable_hca() {
    let mut r = fresh();
    for op in [
        Opcode::SET_ISSI,
        Opcode::DISABLE_HCA,
        Opcode::ALLOC_PD,
        Opcode::NOP,
        Opcode::QUERY_PAGES,
    ] {
        assert_eq!(r.simple(op, 0), state(s::NEED_ENABLE_HCA), "{op}");
    }
    r.enable_hca().unwrap();
    assert_eq!(r.enable_hca(), state(s::ALREADY_ENABLED));
}

#[test]
fn unknown_opcode_is_bad_op_in_any_stage() {
    let mut r = fresh();
    let e = r.simple(Opcode(0x7777), 0).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_OP_ERR));
    assert_eq!(e.syndrome(), Some(s::UNKNOWN_OPCODE));
    let mut r = Raw::up();
    assert_eq!(
        r.simple(Opcode(0xffff), 0).unwrap_err().status(),
        Some(CmdStatus::BAD_OP_ERR)
    );
}

#[test]
fn capabilities_need_the_boot_pages_and_init_hca_needs_issi_and_init_pages() {
    let mut r = fresh();
    r.enable_hca().unwrap();
    assert_eq!(
        r.query_cap(CapType::GENERAL, CapMode::CUR),
        state(s::NEED_BOOT_PAGES).map(|_| vec![])
    );
    assert_eq!(r.simple(Opcode::ALLOC_PD, 0), state(s::NEED_INIT_HCA));
    assert_eq!(r.init_hca(), state(s::NEED_SET_ISSI));
    let o = r.simple(Opcode::QUERY_ISSI, 0);
    assert!(o.is_err(), "QUERY_ISSI needs its 0x70-byte output");
    let o = r
        .cmd(&header(Opcode::QUERY_ISSI, 0, 16), QueryIssiOut::LEN)
        .unwrap();
    let q = QueryIssiOut::new_checked(&o[..]).unwrap();
    assert!(q.supports_issi(0) && q.supports_issi(1) && !q.supports_issi(2));
    assert_eq!(q.current_issi(), 0);
    let e = r.set_issi(2).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_PARAM_ERR));
    assert_eq!(e.syndrome(), Some(s::UNSUPPORTED_ISSI));
    r.set_issi(1).unwrap();
    let boot = r.query_pages(QueryPagesOpMod::BOOT);
    assert_eq!(boot, 16);
    assert_eq!(r.init_hca(), state(s::NEED_BOOT_PAGES));
    r.give_pages(boot as usize);
    assert_eq!(r.query_pages(QueryPagesOpMod::BOOT), 0);
    r.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    let init = r.query_pages(QueryPagesOpMod::INIT);
    assert_eq!(init, 32);
    r.give_pages(10);
    assert_eq!(r.query_pages(QueryPagesOpMod::INIT), 22);
    let e = r.init_hca().unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::NO_RES_ERR));
    assert_eq!(e.syndrome(), Some(s::NEED_INIT_PAGES));
    r.give_pages(22);
    r.init_hca().unwrap();
    assert_eq!(r.init_hca(), state(s::ALREADY_INITIALIZED));
    assert_eq!(r.set_issi(1), state(s::TOO_LATE_AFTER_INIT));
    assert_eq!(r.simple(Opcode::DISABLE_HCA, 0), state(s::NEED_TEARDOWN));
}

#[test]
fn graceful_teardown_returns_every_page_then_disable() {
    let mut r = Raw::up();
    let pd = r.alloc_pd().unwrap();
    let held = r.dev.firmware_pages();
    r.teardown(TeardownProfile::GRACEFUL_CLOSE).unwrap();
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), -(held as i32));
    assert_eq!(r.destroy(Opcode::DEALLOC_PD, pd), state(s::NEED_INIT_HCA));
    let mut back = Vec::new();
    loop {
        let got = r.take_pages(10).unwrap();
        if got.is_empty() {
            break;
        }
        back.extend(got);
    }
    assert_eq!(back.len(), held);
    back.sort();
    back.dedup();
    assert_eq!(back.len(), held, "every page once");
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), 0);
    r.simple(Opcode::DISABLE_HCA, 0).unwrap();
    assert_eq!(r.dev.firmware_stage(), Stage::Disabled);
    assert_eq!(r.simple(Opcode::ALLOC_PD, 0), state(s::NEED_ENABLE_HCA));
}

#[test]
fn fast_teardown_completes_when_the_driver_disables_the_nic_interface() {
    let mut r = Raw::up();
    r.alloc_pd().unwrap();
    r.teardown(TeardownProfile::PREPARE_FAST_TEARDOWN).unwrap();
    assert_eq!(r.dev.firmware_stage(), Stage::Initialized);
    let mut b = [0u8; 4];
    r.dev
        .mmio_read(iseg::CMDQ_ADDR_L_SZ as u64, &mut b)
        .unwrap();
    let v = u32::from_be_bytes(b) | (u32::from(NicInterface::DISABLED.0) << iseg::NIC_IFC_OFFSET);
    r.dev
        .mmio_write(iseg::CMDQ_ADDR_L_SZ as u64, &v.to_be_bytes())
        .unwrap();
    assert_eq!(r.dev.nic_interface(), NicInterface::DISABLED);
    assert_eq!(r.dev.firmware_stage(), Stage::Disabled);
    assert_eq!(r.dev.firmware_pages(), 0);
}

#[test]
fn teardown_with_an_unknown_profile_is_bad_param() {
    let mut r = Raw::up();
    let e = r.teardown(TeardownProfile(7)).unwrap_err();
    assert_eq!(e.syndrome(), Some(s::BAD_TEARDOWN_PROFILE));
}

#[test]
fn manage_pages_checks_alignment_mapping_and_duplicates() {
    let mut r = fresh();
    r.enable_hca().unwrap();
    let off = r.alloc(PAGE_SIZE * 2, PAGE_SIZE);
    let good = r.iova(off);
    for (pages, synd) in [
        (vec![good + 8], s::PAGE_UNALIGNED),
        (vec![0xdead_0000_0000], s::PAGE_NOT_MAPPED),
        (vec![good, good], s::PAGE_DUPLICATE),
    ] {
        let e = r.cmd(&Raw::give_input(&pages), 16).unwrap_err();
        assert_eq!(e.status(), Some(CmdStatus::BAD_PARAM_ERR));
        assert_eq!(e.syndrome(), Some(synd));
    }
    assert_eq!(r.dev.firmware_pages(), 0, "a refused GIVE keeps nothing");
    // A list shorter than input_num_entries says.
    let mut i = Raw::give_input(&[good, good + 4096]);
    i.truncate(i.len() - 8);
    let e = r.cmd(&i, 16).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_INP_LEN_ERR));
    r.cmd(&Raw::give_input(&[good]), 16).unwrap();
    let e = r.cmd(&Raw::give_input(&[good]), 16).unwrap_err();
    assert_eq!(e.syndrome(), Some(s::PAGE_DUPLICATE));
}

#[test]
fn page_request_event_and_query_pages_regular_follow_the_request() {
    let mut r = Raw::up();
    r.dev.request_pages(5);
    let ev = r.poll_async();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].0, EventType::PAGE_REQUEST.0);
    assert_eq!(&ev[0].2[2..4], &[0, 0], "function 0");
    assert_eq!(i32::from_be_bytes(ev[0].2[4..8].try_into().unwrap()), 5);
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), 5);
    assert_eq!(
        r.take_pages(5).unwrap(),
        vec![],
        "nothing to take while it wants pages"
    );
    let given = r.give_pages(5);
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), 0);
    r.dev.request_pages(-3);
    let ev = r.poll_async();
    assert_eq!(i32::from_be_bytes(ev[0].2[4..8].try_into().unwrap()), -3);
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), -3);
    let back = r.take_pages(10).unwrap();
    assert_eq!(
        back,
        vec![given[4], given[3], given[2]],
        "most recently given first, at most 3"
    );
    assert_eq!(r.query_pages(QueryPagesOpMod::REGULAR), 0);
}

#[test]
fn manage_pages_take_needs_room_for_its_list() {
    let mut r = Raw::up();
    r.dev.request_pages(-4);
    let mut i = header(Opcode::MANAGE_PAGES, 2, 16);
    i[12..16].copy_from_slice(&4u32.to_be_bytes());
    let e = r.cmd(&i, 16 + 8).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_OUTP_LEN_ERR));
}

#[test]
fn command_completion_posts_a_cmd_eqe_and_interrupt_when_subscribed() {
    let mut r = Raw::up();
    let uar = r.uar;
    let mut eq = r.create_eq(uar, 4, &[EventType::CMD], 3).unwrap();
    // CREATE_EQ's own completion is already in it (the EQ existed when it completed); taking
    // it re-arms the EQ.
    let ev = r.poll_eq(&mut eq);
    assert_eq!(ev.len(), 1);
    let before = r.dev.interrupts(3);
    r.simple(Opcode::NOP, 0).unwrap();
    assert_eq!(r.dev.interrupts(3), before + 1);
    let ev = r.poll_eq(&mut eq);
    assert!(!ev.is_empty());
    let last = ev.last().unwrap();
    assert_eq!(last.0, EventType::CMD.0);
    assert_eq!(
        u32::from_be_bytes(last.2[..4].try_into().unwrap()),
        1,
        "slot 0's bit"
    );
    // Slot 31, as rdma-core uses for page commands.
    let p = r.post(31, &header(Opcode::NOP, 0, 16), 16);
    r.ring(1 << 31);
    r.complete(&p).unwrap();
    let ev = r.poll_eq(&mut eq);
    assert_eq!(
        u32::from_be_bytes(ev[0].2[..4].try_into().unwrap()),
        1 << 31
    );
}

#[test]
fn multi_block_outputs_and_inputs_travel_through_mailbox_chains() {
    let mut r = Raw::up();
    let cur = r.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    let c = CmdHcaCap::new_checked(&cur[..]).unwrap();
    assert_eq!(c.port_type(), 1);
    assert_eq!(c.log_max_cq(), 24, "2^24 CQs, as a ConnectX-6");
    assert_eq!(
        c.cmdif_checksum(),
        0,
        "SET_HCA_CAP (a 4 KiB input) took effect"
    );
}

/// A corruption of a posted command.
type Corrupt = Box<dyn Fn(&Raw, &Posted)>;

fn nop_posted(r: &mut Raw, in_len: usize, out_len: usize) -> Posted {
    r.post(0, &header(Opcode::NOP, 0, in_len), out_len)
}

#[test]
fn broken_mailbox_chains_get_their_delivery_status() {
    let mut r = Raw::up();
    let cases: Vec<(&str, Corrupt, DeliveryStatus)> = vec![
        (
            "wrong block number",
            Box::new(|r: &Raw, p: &Posted| r.write(p.in_blocks[1] + 0x238, &7u32.to_be_bytes())),
            DeliveryStatus::BAD_BLK_NUM_ERR,
        ),
        (
            "token mismatch",
            Box::new(|r: &Raw, p: &Posted| r.write(p.in_blocks[0] + 0x23d, &[0xee])),
            DeliveryStatus::TOK_ERR,
        ),
        (
            "output token mismatch",
            Box::new(|r: &Raw, p: &Posted| r.write(p.out_blocks[0] + 0x23d, &[0xee])),
            DeliveryStatus::TOK_ERR,
        ),
        (
            "chain ends early",
            Box::new(|r: &Raw, p: &Posted| r.write(p.in_blocks[0] + 0x230, &0u64.to_be_bytes())),
            DeliveryStatus::IN_LENGTH_ERR,
        ),
        (
            "misaligned next pointer",
            Box::new(|r: &Raw, p: &Posted| {
                r.write(
                    p.in_blocks[0] + 0x230,
                    &(r.iova(p.in_blocks[1]) + 8).to_be_bytes(),
                )
            }),
            DeliveryStatus::IN_PTR_ALIGN_ERR,
        ),
        (
            "unmapped next pointer",
            Box::new(|r: &Raw, p: &Posted| {
                r.write(p.in_blocks[0] + 0x230, &0xdead_0000_0000u64.to_be_bytes())
            }),
            DeliveryStatus::IN_PTR_ALIGN_ERR,
        ),
        (
            "misaligned output pointer",
            Box::new(|r: &Raw, p: &Posted| {
                r.write(
                    p.entry_off + 0x30,
                    &(r.iova(p.out_blocks[0]) + 0x40).to_be_bytes(),
                )
            }),
            DeliveryStatus::OUT_PTR_ALIGN_ERR,
        ),
        (
            "bad entry type",
            Box::new(|r: &Raw, p: &Posted| r.write(p.entry_off, &[3])),
            DeliveryStatus::CMD_DESCR_ERR,
        ),
        (
            "input length beyond any command",
            Box::new(|r: &Raw, p: &Posted| r.write(p.entry_off + 4, &u32::MAX.to_be_bytes())),
            DeliveryStatus::IN_LENGTH_ERR,
        ),
        (
            "output length beyond any command",
            Box::new(|r: &Raw, p: &Posted| r.write(p.entry_off + 0x38, &u32::MAX.to_be_bytes())),
            DeliveryStatus::OUT_LENGTH_ERR,
        ),
    ];
    for (what, corrupt, want) in cases {
        let p = nop_posted(&mut r, 16 + 3 * 512, 16 + 600);
        corrupt(&r, &p);
        r.ring(1);
        assert_eq!(r.complete(&p), Err(CmdFailure::Delivery(want)), "{what}");
        // The device keeps answering.
        r.simple(Opcode::NOP, 0).unwrap();
    }
}

#[test]
fn an_entry_the_device_cannot_read_is_counted_and_skipped() {
    let mut r = Raw::new(Profile::default());
    // The command queue address points at unmapped IOVA space.
    r.dev
        .mmio_write(iseg::CMDQ_ADDR_H as u64, &0x77u32.to_be_bytes())
        .unwrap();
    r.dev
        .mmio_write(iseg::CMDQ_ADDR_L_SZ as u64, &0u32.to_be_bytes())
        .unwrap();
    r.dev
        .mmio_write(iseg::CMD_DBELL as u64, &1u32.to_be_bytes())
        .unwrap();
    while r.dev.step() {}
    assert_eq!(r.dev.counters.dma_faults, 1);
    assert_eq!(r.dev.counters.commands, 0);
}

#[test]
fn entries_not_owned_by_hardware_are_ignored() {
    let mut r = Raw::up();
    let p = nop_posted(&mut r, 16, 16);
    let mut e = r.read(p.entry_off, CMD_ENTRY_SIZE);
    e[0x3f] = 0;
    r.write(p.entry_off, &e);
    let n = r.dev.counters.commands;
    r.ring(1);
    assert_eq!(r.dev.counters.commands, n);
}

#[test]
fn short_input_and_output_lengths_are_reported_by_status() {
    let mut r = Raw::up();
    let e = r.cmd(&header(Opcode::ALLOC_PD, 0, 8)[..8], 16).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_INP_LEN_ERR));
    assert_eq!(e.syndrome(), Some(s::INLEN_TOO_SHORT));
    let e = r
        .cmd(&header(Opcode::QUERY_HCA_CAP, 1, 16), 16)
        .unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_OUTP_LEN_ERR));
    // An output shorter than the header still carries status and syndrome inline.
    let e = r.cmd(&header(Opcode::ALLOC_PD, 0, 16), 4).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BAD_OUTP_LEN_ERR));
}

//! The command interface through `Hca::cmd()`: typed failures that explain themselves, and
//! completion by CMD event once the async EQ exists.

use bypass_driver::cmdq::input;
use bypass_driver::hw::cmd::Opcode;
use bypass_driver::hw::cmd::cq::DestroyCqIn;
use bypass_driver::hw::syndrome::CmdStatus;
use bypass_driver::{DriverError, Hca};
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;
use bypass_sim::trace::TraceEvent;

#[test]
fn a_failed_command_names_command_status_syndrome_and_fix() {
    let fabric = SimFabric::stepped(1);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let hca = Hca::open(dev).unwrap();
    let mut i = input(Opcode::DESTROY_CQ, 0, DestroyCqIn::LEN);
    DestroyCqIn::new_checked(&mut i[..])
        .unwrap()
        .set_cqn(0x77)
        .unwrap();
    // SAFETY: DESTROY_CQ of a CQ number nobody created: the device refuses it.
    let e = unsafe { hca.cmd() }.exec(&i, 16).unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::CmdFailed {
                op: Opcode::DESTROY_CQ,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.cmd_status(), Some(CmdStatus::BAD_RES_ERR));
    let syndrome = e.syndrome().unwrap();
    assert_ne!(syndrome, 0);
    let msg = e.to_string();
    assert!(msg.contains("DESTROY_CQ"), "{msg}");
    assert!(msg.contains("BAD_RES_ERR"), "{msg}");
    assert!(msg.contains(&format!("{syndrome:#010x}")), "{msg}");
    assert!(
        msg.contains(CmdStatus::BAD_RES_ERR.cause_and_fix()),
        "{msg}"
    );
    assert!(
        msg.contains("CQ_UNKNOWN") || msg.contains('('),
        "the sim names its syndrome: {msg}"
    );
    assert_eq!(hca.cmd_stats().failed, 1);
}

#[test]
fn unknown_opcodes_and_short_inputs_are_typed_errors() {
    let fabric = SimFabric::stepped(1);
    let hca = Hca::open(fabric.add_device(Profile::default()).unwrap()).unwrap();
    // SAFETY: every command below is refused (unknown opcode, short, long) or a NOP: none
    // names an IOVA or an object.
    let cmd = unsafe { hca.cmd() };
    let e = cmd.exec(&input(Opcode(0x7ff), 0, 16), 16).unwrap_err();
    assert_eq!(e.cmd_status(), Some(CmdStatus::BAD_OP_ERR));
    assert!(e.to_string().contains("UNKNOWN_OPCODE(0x7ff)"), "{e}");
    assert!(matches!(
        cmd.exec(&[0u8; 8], 16),
        Err(DriverError::CmdTooShort { len: 8 })
    ));
    let huge = vec![0u8; bypass_driver::cmdq::MAX_MSG_LEN + 1];
    let mut h = huge;
    h[1] = 0x0d;
    h[0] = 0x08;
    assert!(matches!(
        cmd.exec(&h, 16),
        Err(DriverError::CmdTooLong { .. })
    ));
    // The interface still works after the failures.
    cmd.exec(&input(Opcode::NOP, 0, 16), 16).unwrap();
}

#[test]
fn commands_complete_by_cmd_event_once_the_async_eq_exists() {
    let fabric = SimFabric::stepped(2);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let hca = Hca::open(dev.clone()).unwrap();
    dev.with_device(|d| d.trace.set_enabled(true)).unwrap();
    let before = hca.cmd_stats();
    let irqs = dev.with_device(|d| d.interrupts(0)).unwrap();
    for _ in 0..3 {
        // SAFETY: a NOP names no IOVA and no object.
        unsafe { hca.cmd() }
            .exec(&input(Opcode::NOP, 0, 16), 16)
            .unwrap();
    }
    let after = hca.cmd_stats();
    assert_eq!(after.completed_by_event - before.completed_by_event, 3);
    assert_eq!(after.completed_by_polling, before.completed_by_polling);
    assert!(dev.with_device(|d| d.interrupts(0)).unwrap() >= irqs + 3);
    let cmd_eqes = dev
        .with_device(|d| {
            d.trace
                .events()
                .iter()
                .filter(|e| matches!(e, TraceEvent::Eqe { bytes, .. } if bytes[1] == 0x0a))
                .count()
        })
        .unwrap();
    assert_eq!(cmd_eqes, 3, "one CMD EQE per command");
    // Before the EQ existed (bring-up), commands completed by polling.
    assert!(before.completed_by_polling > 10);
}

#[test]
fn page_requests_are_answered_by_process_events() {
    let fabric = SimFabric::stepped(4);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let hca = Hca::open(dev.clone()).unwrap();
    let held = |d: &bypass_sim::Device| d.firmware_pages();
    let start = dev.with_device(|d| held(d)).unwrap();
    dev.with_device(|d| d.request_pages(40)).unwrap();
    let events = hca.process_events().unwrap();
    assert!(
        events.is_empty(),
        "page requests are handled, not returned: {events:?}"
    );
    assert_eq!(dev.with_device(|d| held(d)).unwrap(), start + 40);
    assert_eq!(hca.firmware_pages(), start + 40);
    dev.with_device(|d| d.request_pages(-30)).unwrap();
    hca.process_events().unwrap();
    assert_eq!(dev.with_device(|d| held(d)).unwrap(), start + 10);
    assert_eq!(hca.firmware_pages(), start + 10);
    drop(hca);
    assert_eq!(dev.with_device(|d| held(d)).unwrap(), 0);
    assert_eq!(dev.with_device(|d| d.iommu().mappings()).unwrap(), 0);
}

#[test]
fn large_page_requests_span_blocks_and_commands() {
    let fabric = SimFabric::stepped(6);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let hca = Hca::open(dev.clone()).unwrap();
    let start = hca.firmware_pages();
    dev.with_device(|d| d.request_pages(1200)).unwrap();
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), start + 1200);
    assert_eq!(
        dev.with_device(|d| d.firmware_pages()).unwrap(),
        start + 1200
    );
    drop(hca);
    assert_eq!(dev.with_device(|d| d.firmware_pages()).unwrap(), 0);
    assert_eq!(dev.with_device(|d| d.iommu().mappings()).unwrap(), 0);
}

//! Bring-up and teardown of an `Hca` on stepped and threaded sim fabrics: every firmware
//! page comes back, every object and DMA mapping is gone, commands complete by event.

use std::sync::Arc;

use bypass_driver::Hca;
use bypass_driver::backend::Backend;
use bypass_driver::backend::sim::{SimBackend, SimFabric};
use bypass_driver::cmdq::CompletionMode;
use bypass_sim::trace::TraceEvent;
use bypass_sim::{Profile, Stage};

fn device(fabric: &SimFabric) -> Arc<SimBackend> {
    fabric.add_device(Profile::default()).unwrap()
}

/// Opcodes of every command that completed OK, in order.
fn ok_commands(dev: &SimBackend) -> Vec<u16> {
    dev.with_device(|d| {
        d.trace
            .events()
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Command {
                    opcode,
                    status: 0,
                    delivery: 0,
                    ..
                } => Some(*opcode),
                _ => None,
            })
            .collect()
    })
    .unwrap()
}

#[test]
fn bring_up_then_teardown_returns_every_page_and_mapping() {
    let fabric = SimFabric::stepped(7);
    let dev = device(&fabric);
    dev.with_device(|d| d.trace.set_enabled(true)).unwrap();
    let hca = Hca::open(dev.clone()).unwrap();
    let held = dev.with_device(|d| d.firmware_pages()).unwrap();
    let profile = Profile::default();
    assert_eq!(held, (profile.boot_pages + profile.init_pages) as usize);
    assert_eq!(hca.firmware_pages(), held);
    assert_eq!(
        dev.with_device(|d| d.firmware_stage()).unwrap(),
        Stage::Initialized
    );
    assert_eq!(hca.cmd().mode(), CompletionMode::Events);
    assert!(hca.caps().roce && hca.caps().rc && hca.caps().log_max_qp_sz > 0);
    assert_eq!(hca.fw_version(), (16, 35, 1012));
    let port = hca.port(1).unwrap();
    assert_eq!(port.state_name(), "ACTIVE");
    assert_eq!(port.mac, profile.ports[0].mac);
    assert_eq!(
        port.valid_gids().next().map(|(_, g)| *g),
        Some(profile.ports[0].gids[0])
    );
    assert!(hca.completion_eq().is_some());
    let info = hca.device_info().to_string();
    assert!(
        info.contains("16.35.1012") && info.contains("ACTIVE"),
        "{info}"
    );
    assert!(dev.with_device(|d| d.iommu().mappings()).unwrap() > 0);

    drop(hca);
    let (pages, stage, mappings) = dev
        .with_device(|d| (d.firmware_pages(), d.firmware_stage(), d.iommu().mappings()))
        .unwrap();
    assert_eq!(pages, 0, "every firmware page was taken back");
    assert_eq!(stage, Stage::Disabled);
    assert_eq!(mappings, 0, "every DMA region was unmapped");
    let ops = ok_commands(&dev);
    let pos = |op: u16| ops.iter().rposition(|&o| o == op).unwrap();
    // DESTROY_EQ x2, DEALLOC_UAR, TEARDOWN_HCA, MANAGE_PAGES, DISABLE_HCA, in that order.
    assert_eq!(ops.iter().filter(|&&o| o == 0x302).count(), 2);
    assert!(pos(0x302) < pos(0x803));
    assert!(pos(0x803) < pos(0x103));
    assert!(pos(0x103) < pos(0x108));
    assert!(pos(0x108) < pos(0x105));
    assert_eq!(dev.mmio_errors(), 0);
}

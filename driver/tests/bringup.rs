//! Bring-up and teardown of an `Hca` on stepped and threaded sim fabrics: every firmware
//! page comes back, every object and DMA mapping is gone, commands complete by event.

use std::sync::Arc;

use bypass_driver::Hca;
use bypass_driver::backend::{Backend, Mmio};
use bypass_driver::cmdq::CompletionMode;
use bypass_sim::fabric::{SimBackend, SimFabric};
use bypass_sim::{Profile, Stage};

fn device(fabric: &SimFabric) -> Arc<SimBackend> {
    fabric.add_device(Profile::default()).unwrap()
}

/// Opcodes of every command that completed OK, in order.
fn ok_commands(dev: &SimBackend) -> Vec<u16> {
    dev.with_device(|d| d.trace.ok_commands()).unwrap()
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
    assert_eq!(hca.cmd_mode(), CompletionMode::Events);
    assert!(hca.caps().roce && hca.caps().rc && hca.caps().log_max_qp_sz > 0);
    // The sim advertises its MTT page bound on the GENERAL_2 page; the driver read it.
    assert_eq!(hca.caps().max_mkey_log_entity_size_mtt, 31);
    assert_eq!(hca.caps().mkey_max_page_shift(), 31);
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
    // One completion EQ per MSI-X vector beyond the async one (kernel `get_num_eqs`).
    let comp_eqs = hca.num_comp_vectors() as usize;
    assert_eq!(comp_eqs, usize::from(profile.msix_vectors) - 1);

    drop(hca);
    let (pages, stage, mappings) = dev
        .with_device(|d| (d.firmware_pages(), d.firmware_stage(), d.iommu().mappings()))
        .unwrap();
    assert_eq!(pages, 0, "every firmware page was taken back");
    assert_eq!(stage, Stage::Disabled);
    assert_eq!(mappings, 0, "every DMA region was unmapped");
    let ops = ok_commands(&dev);
    let pos = |op: u16| ops.iter().rposition(|&o| o == op).unwrap();
    // DESTROY_EQ for each EQ, DEALLOC_UAR, TEARDOWN_HCA, MANAGE_PAGES, DISABLE_HCA, in that
    // order.
    assert_eq!(ops.iter().filter(|&&o| o == 0x302).count(), 1 + comp_eqs);
    assert!(pos(0x302) < pos(0x803));
    assert!(pos(0x803) < pos(0x103));
    assert!(pos(0x103) < pos(0x108));
    assert!(pos(0x108) < pos(0x105));
    assert_eq!(dev.mmio_errors(), 0);
}

#[test]
fn threaded_fabric_brings_a_device_up_and_down() {
    let fabric = SimFabric::threaded(3);
    let dev = device(&fabric);
    let hca = Hca::open(dev.clone()).unwrap();
    assert_eq!(hca.cmd_mode(), CompletionMode::Events);
    assert!(hca.cmd_stats().completed_by_event > 0);
    assert!(hca.firmware_pages() > 0);
    drop(hca);
    let (pages, stage, mappings) = dev
        .with_device(|d| (d.firmware_pages(), d.firmware_stage(), d.iommu().mappings()))
        .unwrap();
    assert_eq!((pages, stage, mappings), (0, Stage::Disabled, 0));
    drop(dev);
    drop(fabric); // joins the engine thread
}

#[test]
fn two_devices_on_one_fabric_come_up_independently() {
    let fabric = SimFabric::stepped(11);
    let a = fabric.add_device(Profile::with_id(1)).unwrap();
    let b = fabric.add_device(Profile::with_id(2)).unwrap();
    let ha = Hca::open(a.clone()).unwrap();
    let hb = Hca::open(b.clone()).unwrap();
    assert_ne!(ha.port(1).unwrap().mac, hb.port(1).unwrap().mac);
    assert_eq!(a.name(), "sim0");
    assert_eq!(b.name(), "sim1");
    drop(ha);
    assert_eq!(
        b.with_device(|d| d.firmware_stage()).unwrap(),
        Stage::Initialized
    );
    drop(hb);
    assert!(
        fabric.with_device(5, |_| ()).is_err(),
        "unknown device ids are errors"
    );
}

#[test]
fn dma_buffers_are_mapped_until_dropped_and_their_iova_is_reused() {
    let fabric = SimFabric::stepped(5);
    let dev = device(&fabric);
    let hca = Hca::open(dev.clone()).unwrap();
    let maps = || dev.with_device(|d| d.iommu().mappings()).unwrap();
    let before = maps();
    let free = hca.dma().free_iova_bytes();
    let buf = hca.alloc_dma(10_000).unwrap();
    assert_eq!(buf.len(), 12_288);
    assert_eq!(buf.iova() % 16_384, 0, "aligned to the size's power of two");
    assert_ne!(
        buf.iova(),
        buf.as_ptr().as_ptr() as u64,
        "IOVA is not the VA"
    );
    buf.write(100, &[1, 2, 3]).unwrap();
    let mut back = [0u8; 3];
    buf.read(100, &mut back).unwrap();
    assert_eq!(back, [1, 2, 3]);
    assert!(
        buf.write(12_287, &[0, 0]).is_err(),
        "out-of-range access is an error"
    );
    assert_eq!(maps(), before + 1);
    let iova = buf.iova();
    drop(buf);
    assert_eq!(maps(), before);
    assert_eq!(hca.dma().free_iova_bytes(), free);
    assert_eq!(
        hca.alloc_dma(10_000).unwrap().iova(),
        iova,
        "first fit reuses it"
    );
}

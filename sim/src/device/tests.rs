//! The device's MMIO decode and receive entry points, through `Device`.

use super::*;

fn be(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Allocates a UAR page, as `ALLOC_UAR` does, and returns its index.
fn alloc_uar(d: &mut Device) -> u32 {
    d.objs
        .uars
        .insert_with(|_| crate::objects::Uar::default())
        .unwrap()
}

fn read32(d: &mut Device, off: u64) -> u32 {
    let mut b = [0u8; 4];
    d.mmio_read(off, &mut b).unwrap();
    u32::from_be_bytes(b)
}

/// A RoCEv2 SEND to QP `qpn` from 10.0.0.9 to `dst`, and its IP fields and ports.
fn send_packet(
    dst: [u8; 4],
    qpn: u32,
) -> (Vec<u8>, bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts) {
    use bypass_hw::roce::{BthFields, BthOpcode, ExtFields, IpSpec, PacketSpec, UdpPorts};
    let ip = IpSpec::from_gids(&Profile::ipv4_gid([10, 0, 0, 9]), &Profile::ipv4_gid(dst)).unwrap();
    let ports = UdpPorts {
        src: 0xc001,
        dst: bypass_hw::roce::ROCE_V2_UDP_DPORT,
    };
    let spec = PacketSpec {
        ip,
        ports,
        bth: BthFields {
            opcode: BthOpcode::RC_SEND_ONLY,
            dest_qp: qpn,
            psn: 3,
            ..Default::default()
        },
        ext: ExtFields::default(),
        payload: b"payload",
    };
    let mut buf = vec![0u8; spec.packet_len().unwrap()];
    bypass_hw::roce::emit(&spec, &mut buf).unwrap();
    (buf, ip, ports)
}

#[test]
fn a_packet_with_its_header_given_meets_every_check_a_parsed_one_meets() {
    // Each case: destination, ICRC corrupted, ICRC vouched for by the link, a doorbell
    // waiting (the packet is queued behind it, a copy, and taken by the next step), and
    // the counters (packets, ICRC errors, discards) both entry points must leave.
    struct Case {
        dst: [u8; 4],
        corrupt: bool,
        checked: bool,
        queued: bool,
        counts: (u64, u64, u64),
    }
    let case = |dst, corrupt, checked, queued, counts| Case {
        dst,
        corrupt,
        checked,
        queued,
        counts,
    };
    let (us, other) = ([10, 0, 0, 1], [10, 0, 0, 7]);
    let cases = [
        // Ours, but no QP 0x42: discarded (`receive_packet`'s QP lookup).
        case(us, false, false, false, (1, 0, 1)),
        // Another device's address: discarded.
        case(other, false, false, false, (1, 0, 1)),
        // A bad ICRC, not checked by the link: an ICRC error, nothing else looked at.
        case(us, true, false, false, (1, 1, 0)),
        // A bad ICRC the link vouched for: not computed again, so it passes, and the
        // unknown QP discards the packet.
        case(us, true, true, false, (1, 0, 1)),
        // Behind a waiting doorbell: queued, then counted as case 0 by the step.
        case(us, false, false, true, (1, 0, 1)),
    ];
    let ours = Profile::with_id(1);
    let counts = |d: &Device| {
        (
            d.counters.port_rcv_packets,
            d.counters.rx_icrc_errors,
            d.counters.rx_discards,
        )
    };
    for (i, c) in cases.into_iter().enumerate() {
        let (mut bytes, ip, ports) = send_packet(c.dst, 0x42);
        if c.corrupt {
            let n = bytes.len();
            bytes[n - 6] ^= 1;
        }
        let mut parsed = Device::new(ours.clone());
        let mut given = Device::new(ours.clone());
        if c.queued {
            // An empty `cmd_dbell` write: latched, and a no-op when rung.
            for d in [&mut parsed, &mut given] {
                d.mmio_write(iseg::CMD_DBELL as u64, &be(0)).unwrap();
            }
        }
        parsed.receive_in_place(&bytes, c.checked);
        given.receive_udp_in_place(&bytes, &ip, ports, c.checked);
        if c.queued {
            for d in [&mut parsed, &mut given] {
                assert_eq!(counts(d), (0, 0, 0), "case {i}: queued, not taken yet");
                assert_eq!(d.tp.rx.len(), 1, "case {i}: queued");
                assert!(d.step(), "case {i}");
            }
        }
        assert_eq!(counts(&given), c.counts, "case {i}: header given");
        assert_eq!(counts(&parsed), c.counts, "case {i}: parsed");
        assert_eq!(given.counters.port_rcv_data, bytes.len() as u64, "case {i}");
        assert_eq!(
            parsed.counters.port_rcv_data,
            bytes.len() as u64,
            "case {i}"
        );
    }
}

#[test]
fn init_segment_reports_revisions_and_initializing_until_cmdq_is_set() {
    let mut d = Device::new(Profile::default());
    assert_eq!(read32(&mut d, iseg::CMDIF_REV_FW_SUB as u64) >> 16, 5);
    assert_eq!(read32(&mut d, iseg::FW_REV as u64), (35 << 16) | 16);
    assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 1);
    assert_eq!(read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64) & 0xff, 0x56);
    d.mmio_write(iseg::CMDQ_ADDR_H as u64, &be(0x1)).unwrap();
    d.mmio_write(iseg::CMDQ_ADDR_L_SZ as u64, &be(0x2345_6000))
        .unwrap();
    assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 0);
    assert_eq!(d.cmdq_addr(), 0x1_2345_6000);
    assert_eq!(
        read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64),
        0x2345_6056,
        "log size/stride are read-only"
    );
}

#[test]
fn registers_take_only_their_width_and_bar_bounds_hold() {
    let mut d = Device::new(Profile::default());
    let mut b8 = [0u8; 8];
    assert!(matches!(
        d.mmio_read(iseg::FW_REV as u64, &mut b8),
        Err(MmioError::Width { expected: 4, .. })
    ));
    assert!(matches!(
        d.mmio_write(iseg::CMD_DBELL as u64, &[1, 0]),
        Err(MmioError::Width { .. })
    ));
    assert!(matches!(
        d.mmio_read(d.bar0_len(), &mut [0; 4]),
        Err(MmioError::OutOfRange { .. })
    ));
    assert!(matches!(
        d.mmio_write(u64::MAX - 1, &[0; 4]),
        Err(MmioError::OutOfRange { .. })
    ));
    assert_eq!(d.pending_doorbells(), 0);
    assert_eq!(d.counters.doorbell_errors, 4);
}

#[test]
fn health_counter_ticks_with_time() {
    let mut d = Device::new(Profile::default());
    let h0 = read32(&mut d, iseg::HEALTH_COUNTER as u64);
    d.set_time(3_500_000);
    assert_eq!(read32(&mut d, iseg::HEALTH_COUNTER as u64), h0 + 3);
    assert_eq!(read32(&mut d, iseg::INTERNAL_TIMER_L as u64), 3_500_000);
}

#[test]
fn doorbells_on_unallocated_uar_pages_are_refused() {
    let mut d = Device::new(Profile::default());
    let off = u64::from(d.profile.first_uar) * 4096 + 0x800;
    assert!(matches!(
        d.mmio_write(off, &[0; 8]),
        Err(MmioError::UarNotAllocated { .. })
    ));
    assert_eq!(d.pending_doorbells(), 0);
}

#[test]
fn uar_doorbells_latch_with_exact_widths_and_blueflame_bursts_assemble() {
    let mut d = Device::new(Profile::default());
    let uar = alloc_uar(&mut d);
    let base = u64::from(uar) * 4096;
    d.mmio_write(base + 0x20, &[0x10, 0, 0, 5, 0, 0, 0, 9])
        .unwrap();
    d.mmio_write(base + 0x40, &be((3 << 24) | 7)).unwrap();
    d.mmio_write(base + 0x48, &be((3 << 24) | 8)).unwrap();
    assert!(d.mmio_write(base + 0x40, &[0; 8]).is_err());
    // Plain 8-byte doorbell on bfreg 1, first half.
    d.mmio_write(base + 0x800 + 512, &[0, 0, 1, 0x0a, 0, 0, 0x12, 0x02])
        .unwrap();
    // A 2-WQEBB BlueFlame WQE (ds = 5) on bfreg 1, second half, in two bursts.
    let mut chunk = [0u8; 64];
    chunk[7] = 5;
    d.mmio_write(base + 0x800 + 512 + 256, &chunk).unwrap();
    assert_eq!(
        d.pending_doorbells(),
        4,
        "the WQE is not complete after its first burst"
    );
    d.mmio_write(base + 0x800 + 512 + 256 + 64, &[0xee; 64])
        .unwrap();
    let dbs: Vec<_> = d.bar.latched().cloned().collect();
    assert_eq!(
        dbs[0],
        Doorbell::CqArm {
            uar,
            cmd_sn_ci: 0x1000_0005,
            cqn: 9
        }
    );
    assert_eq!(
        dbs[1],
        Doorbell::Eq {
            uar,
            eqn: 3,
            ci: 7,
            arm: true
        }
    );
    assert_eq!(
        dbs[2],
        Doorbell::Eq {
            uar,
            eqn: 3,
            ci: 8,
            arm: false
        }
    );
    assert_eq!(
        dbs[3],
        Doorbell::Send {
            uar,
            ctrl: [0, 0, 1, 0x0a, 0, 0, 0x12, 0x02]
        }
    );
    match &dbs[4] {
        Doorbell::BlueFlame { uar: u, wqe } => {
            assert_eq!(*u, uar);
            assert_eq!(wqe.len(), 128);
            assert_eq!(wqe[64], 0xee);
        }
        other => panic!("expected BlueFlame, got {other:?}"),
    }
}

#[test]
fn a_one_burst_blueflame_wqe_latches_at_once_and_drops_a_partial_one_on_its_register() {
    let mut d = Device::new(Profile::default());
    let uar = alloc_uar(&mut d);
    let reg = u64::from(uar) * 4096 + 0x800 + 512;
    // The first burst of a 2-WQEBB WQE (ds = 5), then a 1-WQEBB WQE (ds = 3) on the same
    // register half: the new WQE replaces the unfinished one.
    let mut two = [0xa0u8; 64];
    two[7] = 5;
    d.mmio_write(reg, &two).unwrap();
    assert_eq!(d.pending_doorbells(), 0);
    let mut one = [0xb0u8; 64];
    one[7] = 3;
    d.mmio_write(reg, &one).unwrap();
    assert_eq!(d.pending_doorbells(), 1, "latched by its only burst");
    // The rest of the dropped WQE is no longer a continuation of anything.
    assert!(d.mmio_write(reg + 64, &[0xa1; 64]).is_err());
    match d.bar.latched().next() {
        Some(Doorbell::BlueFlame { uar: u, wqe }) => {
            assert_eq!(*u, uar);
            assert_eq!(&wqe[..], &one[..]);
        }
        other => panic!("expected the one-burst WQE, got {other:?}"),
    }
    assert_eq!(d.pending_doorbells(), 1);
}

#[test]
fn blueflame_bursts_to_different_registers_interleave_without_losing_either_wqe() {
    let mut d = Device::new(Profile::default());
    let (a, b) = (alloc_uar(&mut d), alloc_uar(&mut d));
    let (ra, rb) = (
        u64::from(a) * 4096 + 0x800 + 512,
        u64::from(b) * 4096 + 0x800 + 512 + 256,
    );
    // Two threads, each posting a 2-WQEBB WQE (ds = 5) by BlueFlame on its own UAR page;
    // their bursts reach the device interleaved, with an 8-byte doorbell on a third
    // register (bfreg 2 of page a) in between.
    let burst = |tag: u8, ds: u8| {
        let mut c = [tag; 64];
        c[7] = ds;
        c
    };
    d.mmio_write(ra, &burst(0xa0, 5)).unwrap();
    d.mmio_write(rb, &burst(0xb0, 5)).unwrap();
    d.mmio_write(
        u64::from(a) * 4096 + 0x800 + 1024,
        &[0, 0, 0, 0x0a, 0, 0, 0x13, 0x01],
    )
    .unwrap();
    d.mmio_write(rb + 64, &[0xb1; 64]).unwrap();
    d.mmio_write(ra + 64, &[0xa1; 64]).unwrap();
    let bf: Vec<_> = d
        .bar
        .latched()
        .filter_map(|db| match db {
            Doorbell::BlueFlame { uar, wqe } => Some((*uar, wqe[0], wqe[64], wqe.len())),
            _ => None,
        })
        .collect();
    assert_eq!(bf, [(b, 0xb0, 0xb1, 128), (a, 0xa0, 0xa1, 128)]);
    assert_eq!(d.pending_doorbells(), 3);
}

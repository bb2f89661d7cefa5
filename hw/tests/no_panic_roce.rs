//! No input makes the RoCE views, the packet and CNP parsers or the ICRC check panic; and every valid
//! packet spec survives emit → parse with identical fields.

use bypass_hw::View;
use bypass_hw::roce::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};
use bypass_hw::roce::ip::{IpSpec, Ipv4Spec, Ipv6Spec};
use bypass_hw::roce::opcode::ExtHeaders;
use bypass_hw::roce::{
    Bth, BthFields, BthOpcode, ExtFields, PacketSpec, ROCE_V2_UDP_DPORT, RocePacket, UdpPorts,
    emit, emit_udp_payload, icrc,
};
use bypass_hw::syndrome::AethSyndrome;
use proptest::prelude::*;

fn touch_packet(p: &RocePacket<'_>) {
    let _ = (
        p.bth().fields(),
        p.opcode(),
        p.info(),
        p.ip(),
        p.ports(),
        p.ext_fields(),
    );
    let _ = (
        p.payload().len(),
        p.pad().len(),
        p.icrc(),
        p.compute_icrc(),
        p.icrc_ok(),
    );
    if let Some(a) = p.aeth() {
        let _ = (a.syndrome().kind(), a.syndrome().to_string(), a.msn());
    }
}

fn every_view(b: &[u8]) {
    if let Ok(h) = Bth::view(b) {
        let _ = (h.fields(), h.opcode().to_string());
    }
    if let Ok(h) = Reth::view(b) {
        let _ = (h.va(), h.rkey(), h.len());
    }
    if let Ok(h) = Aeth::view(b) {
        let _ = (h.syndrome(), h.msn());
    }
    if let Ok(h) = AtomicEth::view(b) {
        let _ = (h.va(), h.rkey(), h.swap_add(), h.comp());
    }
    if let Ok(h) = AtomicAckEth::view(b) {
        let _ = h.orig();
    }
    if let Ok(h) = ImmDt::view(b) {
        let _ = h.imm();
    }
    if let Ok(h) = Ieth::view(b) {
        let _ = h.rkey();
    }
    if let Ok(h) = Deth::view(b) {
        let _ = (h.qkey(), h.src_qp());
    }
}

fn ip_strategy() -> impl Strategy<Value = IpSpec> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>()
        )
            .prop_map(
                |(src, dst, tos, ttl, id, dont_fragment)| IpSpec::V4(Ipv4Spec {
                    src,
                    dst,
                    tos,
                    ttl,
                    id,
                    dont_fragment
                })
            ),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            0u32..=0xf_ffff,
            any::<u8>()
        )
            .prop_map(
                |(src, dst, traffic_class, flow_label, hop_limit)| IpSpec::V6(Ipv6Spec {
                    src,
                    dst,
                    traffic_class,
                    flow_label,
                    hop_limit
                })
            ),
    ]
}

#[allow(clippy::type_complexity)]
fn spec_strategy() -> impl Strategy<Value = (IpSpec, UdpPorts, BthFields, ExtFields, Vec<u8>)> {
    let op = proptest::sample::select(BthOpcode::ALL.to_vec());
    let bth = (
        any::<[bool; 5]>(),
        any::<u16>(),
        0u32..1 << 24,
        0u32..1 << 24,
    );
    let ext = (
        any::<[u64; 4]>(),
        any::<[u32; 4]>(),
        any::<u8>(),
        0u32..1 << 24,
    );
    (
        op,
        ip_strategy(),
        any::<u16>(),
        bth,
        ext,
        proptest::collection::vec(any::<u8>(), 0..80),
    )
        .prop_map(
            |(op, ip, sport, (fl, pkey, qp, psn), (w, d, syn, q24), payload)| {
                let info = op.info().unwrap();
                let h = info.headers;
                let bth = BthFields {
                    opcode: op,
                    se: fl[0],
                    mig_req: fl[1],
                    pad_cnt: bypass_hw::roce::opcode::pad_len(payload.len()),
                    tver: 0,
                    pkey,
                    fecn: fl[2],
                    becn: fl[3],
                    dest_qp: qp,
                    ack_req: fl[4],
                    psn,
                };
                let ext = ExtFields {
                    deth: h
                        .contains(ExtHeaders::DETH)
                        .then(|| Deth::new(d[0], q24).unwrap()),
                    reth: h
                        .contains(ExtHeaders::RETH)
                        .then(|| Reth::new(w[0], d[1], d[2])),
                    atomic_eth: h
                        .contains(ExtHeaders::ATOMIC_ETH)
                        .then(|| AtomicEth::new(w[1], d[3], w[2], w[3])),
                    aeth: h
                        .contains(ExtHeaders::AETH)
                        .then(|| Aeth::new(AethSyndrome(syn), q24).unwrap()),
                    atomic_ack_eth: h
                        .contains(ExtHeaders::ATOMIC_ACK_ETH)
                        .then(|| AtomicAckEth::new(w[0] ^ w[3])),
                    imm_dt: h.contains(ExtHeaders::IMM_DT).then(|| ImmDt::new(d[2])),
                    ieth: h.contains(ExtHeaders::IETH).then(|| Ieth::new(d[3])),
                };
                let payload = if info.payload { payload } else { Vec::new() };
                let bth = BthFields {
                    pad_cnt: bypass_hw::roce::opcode::pad_len(payload.len()),
                    ..bth
                };
                (
                    ip,
                    UdpPorts {
                        src: sport,
                        dst: ROCE_V2_UDP_DPORT,
                    },
                    bth,
                    ext,
                    payload,
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300), ip in ip_strategy(), sport in any::<u16>()) {
        every_view(&b);
        for i in 0..b.len().min(64) {
            every_view(&b[i..]);
        }
        let _ = icrc::check(&b);
        let _ = icrc::compute(&b);
        if let Ok(p) = RocePacket::parse(&b) {
            touch_packet(&p);
        }
        let ports = UdpPorts { src: sport, dst: ROCE_V2_UDP_DPORT };
        let _ = icrc::check_udp_payload(&ip, ports, &b);
        if let Ok(p) = RocePacket::parse_udp_payload(ip, ports, &b) {
            touch_packet(&p);
        }
        // Random bytes behind a plausible IPv4/UDP header reach the BTH checks.
        let mut framed = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0xc0, 0, 0x12, 0xb7, 0, 0, 0, 0];
        let total = (framed.len() + b.len()) as u16;
        framed[2..4].copy_from_slice(&total.to_be_bytes());
        framed[24..26].copy_from_slice(&(8 + b.len() as u16).to_be_bytes());
        let c = bypass_hw::roce::ip::ipv4_checksum(&framed[..20]);
        framed[10..12].copy_from_slice(&c.to_be_bytes());
        framed.extend(&b);
        let _ = icrc::check(&framed);
        if let Ok(p) = RocePacket::parse(&framed) {
            touch_packet(&p);
        }
        // The CNP parser: random bytes, the same behind the header, and a CNP opcode there.
        for bytes in [&b[..], &framed[..]] {
            if let Ok(c) = bypass_hw::roce::Cnp::parse(bytes) {
                let _ = (c.dest_qp(), c.icrc_ok, c.bth);
            }
        }
        let _ = bypass_hw::roce::Cnp::parse_udp_payload(ip, ports, &b);
        if framed.len() > 28 {
            framed[28] = 0x81;
            let _ = bypass_hw::roce::Cnp::parse(&framed);
        }
    }

    #[test]
    fn valid_specs_round_trip((ip, ports, bth, ext, payload) in spec_strategy(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        let spec = PacketSpec { ip, ports, bth, ext, payload: &payload };
        let mut buf = vec![0u8; 512];
        let n = emit(&spec, &mut buf).unwrap();
        prop_assert!(emit(&spec, &mut vec![0u8; n - 1]).is_err());
        let pkt = &buf[..n];
        prop_assert_eq!(icrc::check(pkt), Ok(true));
        let p = RocePacket::parse(pkt).unwrap();
        prop_assert_eq!(p.bth().fields(), bth);
        prop_assert_eq!(p.ext_fields(), ext);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.pad(), &[0u8; 3][..bth.pad_cnt as usize]);
        prop_assert_eq!(*p.ip(), ip);
        prop_assert_eq!(p.ports(), ports);
        prop_assert!(p.icrc_ok());

        // The UDP-socket path produces the same bytes and accepts them.
        let mut ubuf = vec![0u8; 512];
        let un = emit_udp_payload(&spec, &mut ubuf).unwrap();
        prop_assert_eq!(&ubuf[..un], p.udp_payload());
        let q = RocePacket::parse_udp_payload(ip, ports, &ubuf[..un]).unwrap();
        prop_assert!(q.icrc_ok());
        prop_assert_eq!(q.bth().fields(), bth);

        // A few corrupted bytes never panic.
        let mut bad = pkt.to_vec();
        for (i, x) in flips {
            let i = i % bad.len();
            bad[i] ^= x;
        }
        let _ = icrc::check(&bad);
        if let Ok(p) = RocePacket::parse(&bad) {
            touch_packet(&p);
        }
        for cut in [0, 1, 4, 20, 28, 40, 48] {
            if let Ok(p) = RocePacket::parse(&pkt[..pkt.len().saturating_sub(cut)]) {
                touch_packet(&p);
            }
        }
    }
}

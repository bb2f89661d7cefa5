//! Shared by the RoCE conformance tests: the packet corpus (every opcode, IPv4 and IPv6, every
//! pad count). Oracle gating is `tests/common`.

#![allow(dead_code)] // each test binary uses a different subset

use bypass_hw::roce::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, GSI_QKEY, Ieth, ImmDt, Reth};
use bypass_hw::roce::ip::{IpSpec, Ipv4Spec, Ipv6Spec};
use bypass_hw::roce::opcode::{BthOpcode, ExtHeaders, rxe_udp_sport};
use bypass_hw::roce::{
    BthFields, DEFAULT_PKEY, ExtFields, PacketSpec, ROCE_V2_UDP_DPORT, UdpPorts, emit,
};
use bypass_hw::syndrome::AethSyndrome;

/// One emitted packet and what it was built from.
#[derive(Debug, Clone)]
pub struct Case {
    /// Human-readable label for failure messages.
    pub label: String,
    /// The packet from the IP header to the ICRC.
    pub bytes: Vec<u8>,
    /// The BTH as emitted (pad count filled in).
    pub bth: BthFields,
    /// The extension headers.
    pub ext: ExtFields,
    /// The payload.
    pub payload: Vec<u8>,
    /// The IP header.
    pub ip: IpSpec,
    /// The UDP ports.
    pub ports: UdpPorts,
}

/// IPv4 header as rxe sends it (DF, ID 0, TTL 64), with a non-zero TOS to show it is masked.
pub fn ipv4() -> IpSpec {
    IpSpec::V4(Ipv4Spec {
        src: [10, 99, 0, 1],
        dst: [10, 99, 0, 2],
        tos: 0x02,
        ttl: 64,
        id: 0,
        dont_fragment: true,
    })
}

/// IPv6 header with a traffic class and flow label (both masked out of the ICRC).
pub fn ipv6() -> IpSpec {
    let mut src = [0u8; 16];
    src[..2].copy_from_slice(&[0xfd, 0x00]);
    src[15] = 1;
    let mut dst = src;
    dst[15] = 2;
    IpSpec::V6(Ipv6Spec {
        src,
        dst,
        traffic_class: 0x28,
        flow_label: 0x1_2345,
        hop_limit: 64,
    })
}

/// The extension headers `op` needs, with values derived from `seed`.
pub fn ext_for(op: BthOpcode, seed: u32, syndrome: AethSyndrome) -> ExtFields {
    let h = op.info().expect("known opcode").headers;
    let s = seed as u64;
    ExtFields {
        deth: h.contains(ExtHeaders::DETH).then(|| {
            Deth::new(
                if seed.is_multiple_of(2) {
                    GSI_QKEY
                } else {
                    0x1111_2222 + seed
                },
                0x00_0abc + seed,
            )
            .unwrap()
        }),
        reth: h.contains(ExtHeaders::RETH).then(|| {
            Reth::new(
                0x7f00_dead_beef_0000 + s * 0x1000,
                0x0102_0304 + seed,
                4096 + seed,
            )
        }),
        atomic_eth: h.contains(ExtHeaders::ATOMIC_ETH).then(|| {
            AtomicEth::new(
                0x0000_5555_aaaa_0008 + s * 8,
                0xa0b0_c0d0 + seed,
                0x0123_4567_89ab_cdef ^ s,
                0xfedc_ba98_7654_3210 ^ s,
            )
        }),
        aeth: h
            .contains(ExtHeaders::AETH)
            .then(|| Aeth::new(syndrome, 0x00_1234 + seed).unwrap()),
        atomic_ack_eth: h
            .contains(ExtHeaders::ATOMIC_ACK_ETH)
            .then(|| AtomicAckEth::new(0x1122_3344_5566_7788 ^ s)),
        imm_dt: h
            .contains(ExtHeaders::IMM_DT)
            .then(|| ImmDt::new(0xcafe_0000 + seed)),
        ieth: h
            .contains(ExtHeaders::IETH)
            .then(|| Ieth::new(0x0bad_f00d + seed)),
    }
}

/// Every opcode in the table (plus NAK and RNR NAK variants of ACKNOWLEDGE), over IPv4 and
/// IPv6, and for opcodes with a payload, payload lengths 0 (ONLY), 16, 17, 18, 19
/// (≡ 0, 1, 2, 3 mod 4, so every pad count).
pub fn corpus() -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 0u32;
    for (ipname, ip) in [("v4", ipv4()), ("v6", ipv6())] {
        for &op in BthOpcode::ALL {
            let info = op.info().unwrap();
            let syndromes: &[AethSyndrome] = if op == BthOpcode::RC_ACKNOWLEDGE {
                &[
                    AethSyndrome::ACK_UNLIMITED,
                    AethSyndrome::rnr_nak(14),
                    AethSyndrome::NAK_PSN_SEQ_ERROR,
                    AethSyndrome::NAK_REMOTE_ACCESS_ERROR,
                ]
            } else {
                &[AethSyndrome::ACK_UNLIMITED]
            };
            let lens: &[usize] = if !info.payload {
                &[0]
            } else if matches!(info.position, bypass_hw::roce::Position::Only) {
                &[0, 16, 17, 18, 19]
            } else {
                &[16, 17, 18, 19]
            };
            for &syn in syndromes {
                for &len in lens {
                    seed += 1;
                    let payload: Vec<u8> = (0..len)
                        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed as u8))
                        .collect();
                    // Never QP1: tshark decodes a QP1 payload as a MAD, and these are arbitrary.
                    let dest_qp = (0x00_0011 + seed * 0x10101) & 0xff_ffff;
                    let bth = BthFields {
                        opcode: op,
                        se: seed % 2 == 1,
                        mig_req: seed.is_multiple_of(5),
                        pad_cnt: bypass_hw::roce::opcode::pad_len(len),
                        tver: 0,
                        pkey: if seed.is_multiple_of(7) {
                            0x8001
                        } else {
                            DEFAULT_PKEY
                        },
                        fecn: seed % 4 == 1,
                        becn: seed % 4 == 2,
                        dest_qp,
                        ack_req: !seed.is_multiple_of(3),
                        psn: (0xff_fff0 + seed * 3) & 0xff_ffff,
                    };
                    let ext = ext_for(op, seed, syn);
                    let ports = UdpPorts {
                        src: rxe_udp_sport(dest_qp),
                        dst: ROCE_V2_UDP_DPORT,
                    };
                    let spec = PacketSpec {
                        ip,
                        ports,
                        bth,
                        ext,
                        payload: &payload,
                    };
                    let mut buf = vec![0u8; 256];
                    let n = emit(&spec, &mut buf)
                        .unwrap_or_else(|e| panic!("emit {op} {ipname} len {len}: {e}"));
                    buf.truncate(n);
                    out.push(Case {
                        label: format!("{op} {ipname} syndrome {:#04x} payload {len}", syn.0),
                        bytes: buf,
                        bth,
                        ext,
                        payload,
                        ip,
                        ports,
                    });
                }
            }
        }
    }
    out
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses lowercase/uppercase hex.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

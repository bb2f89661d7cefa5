//! Whole RoCEv2 packets: emit one into a caller's buffer, or view a received one.
//!
//! Owns: [`PacketSpec`] / [`ExtFields`] (what to send), [`udp_payload_len`] (how long its
//! UDP payload is), [`emit`] / [`emit_udp_payload`] (write it, smoltcp style, no
//! allocation), and [`RocePacket`] (a checked, zero-copy view of
//! a received packet, from the IP header or from the UDP payload).
//! Must not: allocate, or panic on any input.
//!
//! Layout (IBTA annex A17.2; rxe `rxe_net.c`, `rxe_opcode.c`, `rxe_recv.c`):
//! `IPv4|IPv6 | UDP (dport 4791, csum 0) | BTH | ext headers (per opcode) | payload | pad | ICRC`.

use zerocopy::IntoBytes;

use crate::error::{Error, Result};
use crate::roce::bth::{BTH_LEN, Bth, BthFields, ROCE_V2_UDP_DPORT};
use crate::roce::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};
use crate::roce::icrc::{self, ICRC_LEN};
use crate::roce::ip::{IpSpec, UDP_HDR_LEN, UdpPorts, split_ip_udp};
use crate::roce::opcode::{BthOpcode, ExtHeaders, OpcodeInfo, pad_len};
use crate::view::View;

/// The extension headers of a packet; exactly those the opcode carries must be `Some`
/// (IBTA §9.3, rxe `rxe_opcode.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtFields {
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// RETH (WRITE FIRST/ONLY, READ request).
    pub reth: Option<Reth>,
    /// AtomicETH (CMP_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (ACK/NAK, READ response FIRST/LAST/ONLY, ATOMIC ACK).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// ImmDt (`*_WITH_IMMEDIATE`).
    pub imm_dt: Option<ImmDt>,
    /// IETH (`SEND_*_WITH_INVALIDATE`).
    pub ieth: Option<Ieth>,
}

impl ExtFields {
    /// Which headers are present.
    pub fn present(&self) -> ExtHeaders {
        let mut h = ExtHeaders::empty();
        h.set(ExtHeaders::DETH, self.deth.is_some());
        h.set(ExtHeaders::RETH, self.reth.is_some());
        h.set(ExtHeaders::ATOMIC_ETH, self.atomic_eth.is_some());
        h.set(ExtHeaders::AETH, self.aeth.is_some());
        h.set(ExtHeaders::ATOMIC_ACK_ETH, self.atomic_ack_eth.is_some());
        h.set(ExtHeaders::IMM_DT, self.imm_dt.is_some());
        h.set(ExtHeaders::IETH, self.ieth.is_some());
        h
    }

    /// The bytes of header `h` if present (`h` a single flag).
    fn bytes_of(&self, h: ExtHeaders) -> Option<&[u8]> {
        match h {
            ExtHeaders::DETH => self.deth.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::RETH => self.reth.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::ATOMIC_ETH => self.atomic_eth.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::AETH => self.aeth.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::ATOMIC_ACK_ETH => self.atomic_ack_eth.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::IMM_DT => self.imm_dt.as_ref().map(|x| x.as_bytes()),
            ExtHeaders::IETH => self.ieth.as_ref().map(|x| x.as_bytes()),
            _ => None,
        }
    }
}

/// Everything that goes into one RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketSpec<'a> {
    /// The IP header (build it with [`IpSpec::from_gids`] for rxe's defaults).
    pub ip: IpSpec,
    /// UDP ports (destination [`ROCE_V2_UDP_DPORT`]).
    pub ports: UdpPorts,
    /// The BTH. `pad_cnt` is ignored: the emitter writes `(-payload.len()) & 3`.
    pub bth: BthFields,
    /// The extension headers; exactly those `bth.opcode` carries.
    pub ext: ExtFields,
    /// The payload (empty for opcodes without one).
    pub payload: &'a [u8],
}

/// Length of the UDP payload (BTH .. ICRC) of a packet of opcode `op` carrying `payload`
/// bytes: its headers (rxe `rxe_opcode.c` `length`), the payload, its pad to 4 bytes and the
/// ICRC. `None` for an opcode bypass does not know.
pub fn udp_payload_len(op: BthOpcode, payload: usize) -> Option<usize> {
    Some(op.info()?.length + payload + usize::from(pad_len(payload)) + ICRC_LEN)
}

/// A [`PacketSpec`] whose opcode bypass does not know.
const UNKNOWN_OPCODE: Error = Error::Malformed {
    what: "roce packet spec",
    reason: "unknown BTH opcode",
};

impl PacketSpec<'_> {
    /// The table row of the opcode; an opcode bypass does not know is [`Error::Malformed`].
    fn info(&self) -> Result<&'static OpcodeInfo> {
        self.bth.opcode.info().ok_or(UNKNOWN_OPCODE)
    }

    /// Length of the UDP payload (BTH .. ICRC).
    pub fn udp_payload_len(&self) -> Result<usize> {
        udp_payload_len(self.bth.opcode, self.payload.len()).ok_or(UNKNOWN_OPCODE)
    }

    /// Length of the whole packet from the IP header.
    pub fn packet_len(&self) -> Result<usize> {
        Ok(self.ip.header_len() + UDP_HDR_LEN + self.udp_payload_len()?)
    }

    /// Writes BTH .. ICRC (ICRC left zero) into `buf`, which is exactly the UDP payload.
    fn write_transport(&self, buf: &mut [u8]) -> Result<()> {
        let info = self.info()?;
        if info.headers != self.ext.present() {
            return Err(Error::Malformed {
                what: "roce packet spec",
                reason: "the extension headers given are not exactly those the opcode carries",
            });
        }
        if !info.payload && !self.payload.is_empty() {
            return Err(Error::Malformed {
                what: "roce packet spec",
                reason: "this opcode carries no payload",
            });
        }
        let pad = pad_len(self.payload.len());
        let mut f = self.bth;
        f.pad_cnt = pad;
        let bth = Bth::from_fields(&f)?;
        buf[..BTH_LEN].copy_from_slice(bth.as_bytes());
        let mut off = BTH_LEN;
        for (h, n) in ExtHeaders::WIRE_ORDER {
            if let Some(b) = self.ext.bytes_of(h) {
                buf[off..off + n].copy_from_slice(b);
                off += n;
            }
        }
        let end = off + self.payload.len();
        buf[off..end].copy_from_slice(self.payload);
        buf[end..].fill(0); // pad (zero, as rxe sends) and the ICRC slot
        Ok(())
    }
}

/// Emits the whole packet, from the IP header to the ICRC, into the front of `buf` (IPv4
/// header checksum and ICRC computed); returns its length. A short `buf` is
/// [`Error::Truncated`]; an inconsistent spec is [`Error::Malformed`] or [`Error::FieldOverflow`].
pub fn emit(spec: &PacketSpec<'_>, buf: &mut [u8]) -> Result<usize> {
    let total = spec.packet_len()?;
    if buf.len() < total {
        return Err(Error::Truncated {
            what: "roce packet buffer",
            need: total,
            got: buf.len(),
        });
    }
    let buf = &mut buf[..total];
    let udp_payload = spec.udp_payload_len()?;
    let hdrs = spec.ip.write_ip_udp(spec.ports, udp_payload, buf)?;
    spec.write_transport(&mut buf[hdrs..])?;
    let c = icrc::compute(buf)?;
    buf[total - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    Ok(total)
}

/// Emits only the UDP payload (BTH .. ICRC), for sending through a UDP socket; the ICRC is
/// computed over the IP and UDP headers `spec.ip` and `spec.ports` describe, which must be what
/// the kernel will put on the wire (IPv4: DF and ID 0 need `IP_PMTUDISC_DO`). Returns its length.
pub fn emit_udp_payload(spec: &PacketSpec<'_>, buf: &mut [u8]) -> Result<usize> {
    let total = spec.udp_payload_len()?;
    if buf.len() < total {
        return Err(Error::Truncated {
            what: "roce udp payload buffer",
            need: total,
            got: buf.len(),
        });
    }
    let buf = &mut buf[..total];
    spec.write_transport(buf)?;
    let c = icrc::compute_udp_payload(&spec.ip, spec.ports, buf)?;
    buf[total - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    Ok(total)
}

/// A received RoCEv2 packet, checked and viewed in place.
///
/// Construction checks (rxe `rxe_recv.c` `rxe_rcv` / `hdr_check`): UDP destination port 4791,
/// room for the BTH, a known opcode, BTH TVer 0, room for the opcode's extension headers plus
/// pad plus ICRC, and no payload or pad on an opcode that carries none. The ICRC is *not*
/// checked on construction: call [`RocePacket::icrc_ok`].
#[derive(Debug, Clone, Copy)]
pub struct RocePacket<'a> {
    ip: IpSpec,
    ports: UdpPorts,
    /// The IP and UDP headers as received, when parsed from the IP header.
    raw_headers: Option<&'a [u8]>,
    /// BTH .. ICRC.
    udp_payload: &'a [u8],
    bth: &'a Bth,
    info: &'static OpcodeInfo,
}

impl<'a> RocePacket<'a> {
    /// Views a packet starting at its IPv4 or IPv6 header (the IPv4 header checksum must be
    /// right; bytes past the IP length, such as Ethernet padding, are ignored).
    pub fn parse(ip_packet: &'a [u8]) -> Result<Self> {
        let s = split_ip_udp(ip_packet, true)?;
        Self::new(s.ip, s.ports, Some(s.headers), s.payload)
    }

    /// Views a UDP payload (starting at the BTH) received on a UDP socket, with the IP and UDP
    /// header fields it travelled with (needed for the ICRC).
    pub fn parse_udp_payload(ip: IpSpec, ports: UdpPorts, udp_payload: &'a [u8]) -> Result<Self> {
        Self::new(ip, ports, None, udp_payload)
    }

    fn new(
        ip: IpSpec,
        ports: UdpPorts,
        raw_headers: Option<&'a [u8]>,
        udp_payload: &'a [u8],
    ) -> Result<Self> {
        const WHAT: &str = "roce packet";
        if ports.dst != ROCE_V2_UDP_DPORT {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "UDP destination port is not 4791",
            });
        }
        let bth = Bth::view(udp_payload)?;
        if bth.tver() != 0 {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "BTH TVer is not 0",
            });
        }
        let info = bth.opcode().info().ok_or(Error::Malformed {
            what: WHAT,
            reason: "BTH opcode unknown or not supported",
        })?;
        let pad = bth.pad_cnt() as usize;
        let need = info.length + pad + ICRC_LEN;
        if udp_payload.len() < need {
            return Err(Error::Truncated {
                what: "roce packet (headers + pad + ICRC)",
                need,
                got: udp_payload.len(),
            });
        }
        if !info.payload && udp_payload.len() != need - pad {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "this opcode carries no payload, but the packet has one",
            });
        }
        Ok(Self {
            ip,
            ports,
            raw_headers,
            udp_payload,
            bth,
            info,
        })
    }

    /// The IP header fields.
    pub fn ip(&self) -> &IpSpec {
        &self.ip
    }
    /// The UDP ports.
    pub fn ports(&self) -> UdpPorts {
        self.ports
    }
    /// The opcode's table row.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }
    /// The UDP payload: BTH .. ICRC.
    pub fn udp_payload(&self) -> &'a [u8] {
        self.udp_payload
    }
    /// The BTH.
    pub fn bth(&self) -> &'a Bth {
        self.bth
    }
    /// The opcode.
    pub fn opcode(&self) -> BthOpcode {
        self.bth().opcode()
    }

    fn ext<T: View>(&self, h: ExtHeaders) -> Option<&'a T> {
        let off = self.info.offset(h)?;
        T::view(self.udp_payload.get(off..)?).ok()
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<&'a Deth> {
        self.ext(ExtHeaders::DETH)
    }
    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<&'a Reth> {
        self.ext(ExtHeaders::RETH)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<&'a AtomicEth> {
        self.ext(ExtHeaders::ATOMIC_ETH)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<&'a Aeth> {
        self.ext(ExtHeaders::AETH)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<&'a AtomicAckEth> {
        self.ext(ExtHeaders::ATOMIC_ACK_ETH)
    }
    /// The immediate data, if the opcode carries it.
    pub fn imm_dt(&self) -> Option<&'a ImmDt> {
        self.ext(ExtHeaders::IMM_DT)
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<&'a Ieth> {
        self.ext(ExtHeaders::IETH)
    }
    /// All extension headers, copied.
    pub fn ext_fields(&self) -> ExtFields {
        ExtFields {
            deth: self.deth().copied(),
            reth: self.reth().copied(),
            atomic_eth: self.atomic_eth().copied(),
            aeth: self.aeth().copied(),
            atomic_ack_eth: self.atomic_ack_eth().copied(),
            imm_dt: self.imm_dt().copied(),
            ieth: self.ieth().copied(),
        }
    }

    fn payload_end(&self) -> usize {
        self.udp_payload
            .len()
            .saturating_sub(ICRC_LEN + self.bth().pad_cnt() as usize)
    }
    /// The payload (without pad).
    pub fn payload(&self) -> &'a [u8] {
        self.udp_payload
            .get(self.info.length..self.payload_end())
            .unwrap_or(&[])
    }
    /// The pad bytes (0..=3, rxe sends zeros and does not check them).
    pub fn pad(&self) -> &'a [u8] {
        let end = self.udp_payload.len().saturating_sub(ICRC_LEN);
        self.udp_payload.get(self.payload_end()..end).unwrap_or(&[])
    }
    /// The ICRC as carried (little-endian on the wire).
    pub fn icrc(&self) -> u32 {
        icrc::wire_value(self.udp_payload).unwrap_or(0)
    }
    /// The ICRC computed over the packet (from the received headers when parsed from the IP
    /// header, else from the IP/UDP fields given).
    pub fn compute_icrc(&self) -> Result<u32> {
        match self.raw_headers {
            Some(h) => icrc::compute_parts(h, self.udp_payload),
            None => icrc::compute_udp_payload(&self.ip, self.ports, self.udp_payload),
        }
    }
    /// Whether the ICRC is right (rxe `rxe_icrc_check`).
    pub fn icrc_ok(&self) -> bool {
        self.compute_icrc().is_ok_and(|c| c == self.icrc())
    }
}

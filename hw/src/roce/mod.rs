//! RoCEv2 on the wire: the InfiniBand transport headers carried in UDP (port 4791) over IPv4
//! or IPv6, the per-opcode header table, the ICRC, and whole-packet emit and parse.
//!
//! Owns: [`bth`] (BTH), [`cnp`] (the congestion notification packet), [`ext`] (RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH),
//! [`opcode`] (opcodes, the header table, PSN and pad arithmetic, rxe's UDP source port),
//! [`ip`] (the IP and UDP headers as rxe builds them, GID mapping), [`icrc`], [`packet`] and
//! [`mtu`] (path MTU against Ethernet MTU).
//! Must not: do I/O, allocate, keep transport state (PSN windows, retries belong to the sim).
//!
//! Sources: IBTA vol. 1 chapter 9 (transport headers) and annex A17 (RoCEv2); Linux
//! `drivers/infiniband/sw/rxe/{rxe_hdr.h,rxe_opcode.c,rxe_icrc.c,rxe_net.c,rxe_recv.c}` and
//! `include/rdma/ib_pack.h`. Everything is checked against scapy's `scapy.contrib.roce` (ICRC,
//! BTH) and tshark's InfiniBand dissector by the tests in `hw/tests/roce_*.rs`.

pub mod bth;
pub mod cnp;
pub mod ext;
pub mod icrc;
pub mod ip;
pub mod mtu;
pub mod opcode;
pub mod packet;

pub use bth::{BTH_LEN, Bth, BthFields, DEFAULT_PKEY, ROCE_V2_UDP_DPORT};
pub use cnp::{Cnp, CnpSpec, emit_cnp, emit_cnp_udp_payload, is_cnp};
pub use ext::{Aeth, AtomicAckEth, AtomicEth, Deth, GSI_QKEY, Ieth, ImmDt, Reth};
pub use icrc::ICRC_LEN;
pub use ip::{IpSpec, Ipv4Spec, Ipv6Spec, UdpPorts};
pub use opcode::{BthOpcode, Direction, ExtHeaders, OpcodeInfo, Position, Transport};
pub use packet::{ExtFields, PacketSpec, RocePacket, emit, emit_udp_payload};

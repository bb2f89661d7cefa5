//! What a UDP link did, counted: packets and bytes each way, and why some were not sent or
//! not delivered.
//!
//! Owns: [`LinkCounters`], written only by the link that owns them (a load and a store per
//! count, one writer at a time: `&mut UdpLink`, or its pump's lock) and read by anyone who
//! holds a clone. Must not: decide anything (the link's files count what they do).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a link did: packets and the reasons some were not sent or not delivered. The link
/// that owns them is their only writer (`LinkCounters::add`); anyone may read them.
#[derive(Debug, Default)]
pub struct LinkCounters {
    /// Datagrams sent.
    pub tx_packets: AtomicU64,
    /// UDP payload bytes sent.
    pub tx_bytes: AtomicU64,
    /// Datagrams received and handed to a device.
    pub rx_packets: AtomicU64,
    /// UDP payload bytes received.
    pub rx_bytes: AtomicU64,
    /// Sends the kernel refused (`EMSGSIZE`: the packet is larger than the route's MTU, lower
    /// the path MTU; unreachable hosts; full socket buffers). The transport retransmits.
    pub tx_errors: AtomicU64,
    /// Packets the kernel refused with `EMSGSIZE` (counted in `tx_errors` too): larger than
    /// the route's MTU, and DF is set (`IP_PMTUDISC_DO`), so nothing fragments them. The
    /// route's MTU is in `route_mtu`.
    pub tx_mtu_drops: AtomicU64,
    /// The MTU of the route the last `EMSGSIZE` was for, read with `IP_MTU` /
    /// `IPV6_MTU` (bytes; 0: none seen, or it could not be read).
    pub route_mtu: AtomicU64,
    /// Packets the device sent that are not RoCEv2 over IP (dropped; a device bug).
    pub tx_malformed: AtomicU64,
    /// Packets whose UDP source port could not be bound, sent from the listening socket
    /// instead (the peer will count an ICRC error for each).
    pub tx_sport_fallbacks: AtomicU64,
    /// IPv4 datagrams whose IP ID was not 0 (Linux rxe sends random ones) and was recovered
    /// from the ICRC (see [`recover_ipv4_id`](crate::link::ipv4_id::recover_ipv4_id)).
    pub rx_ip_id_recovered: AtomicU64,
    /// Datagrams that could not be handed on (another address family, or the rebuilt header
    /// did not fit).
    pub rx_dropped: AtomicU64,
    /// Segmented sends (`UDP_SEGMENT`): several packets to one peer in one `sendmsg`.
    pub tx_gso_sends: AtomicU64,
    /// Coalesced receives (`UDP_GRO`): several packets in one `recvmsg`.
    pub rx_gro_reads: AtomicU64,
    /// Packets received and dropped by a rule's verdict (`UdpLink::drop_incoming_every`).
    pub rx_injected_drops: AtomicU64,
    /// Packets sent (counted in `tx_packets` too) whose payload the kernel read straight
    /// from the sender's memory (`sendmsg` iovecs, no copy into a link buffer).
    pub tx_from_memory: AtomicU64,
    /// Send system calls made (`sendto`, `sendmsg` or `sendmmsg`, each counted once however
    /// many datagrams it carried).
    pub tx_send_calls: AtomicU64,
    /// Sends (datagrams or segmented sends) that went out on a connected socket (see
    /// `link::connected`); the rest went out unconnected, with IPv4 ID 0.
    pub tx_connected: AtomicU64,
    /// Empty datagrams sent to learn a connected socket's IPv4 ID (`link::connected`).
    pub tx_id_probes: AtomicU64,
    /// Connected sockets whose IPv4 ID could not be learned (the device does not loop
    /// transmit timestamps back): their flows go out unconnected.
    pub tx_id_probe_failures: AtomicU64,
    /// Empty datagrams received (a bypass peer's ID probes), skipped.
    pub rx_empty: AtomicU64,
    /// Times the receiving socket's `UDP_GRO` was turned off (single datagrams arriving:
    /// plain reads) or on again (a stream) (see `link::rx_mode`).
    pub rx_gro_switches: AtomicU64,
}

impl LinkCounters {
    /// Adds `n` to counter `c`: a load and a store, not an atomic add. Only the link that
    /// owns the counters writes them (from `&mut UdpLink`, or under its `UdpWire`'s lock: one
    /// writer at a time, the lock ordering the writes); readers holding
    /// [`crate::link::udp::UdpLink::counters`] only load. With one writer an atomic read-modify-write
    /// (a `lock`-prefixed add) buys nothing, and a packet's trip counts several times.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// What the MTU drops say, when there were any: "N packets larger than the route's MTU M
    /// were refused (EMSGSIZE): ...", with the path MTU that fits that route.
    pub fn mtu_note(&self) -> Option<String> {
        let drops = self.tx_mtu_drops.load(Ordering::Relaxed);
        if drops == 0 {
            return None;
        }
        let mtu = u32::try_from(self.route_mtu.load(Ordering::Relaxed)).unwrap_or(0);
        Some(if mtu == 0 {
            format!(
                "{drops} packets were refused by the kernel as larger than the route's MTU (EMSGSIZE; the MTU could not be read): raise the MTU on every hop or lower the path MTU"
            )
        } else {
            let fits = bypass_hw::roce::mtu::active_mtu(mtu)
                .map_or_else(|| "no path MTU".to_string(), |m| format!("path MTU {m}"));
            format!(
                "{drops} packets were refused by the kernel as larger than the route's MTU {mtu} (EMSGSIZE): the route carries {fits} at most (RoCEv2 headers: {} bytes); use it, or raise the MTU on every hop",
                bypass_hw::roce::mtu::ROCE_HEADER_BYTES
            )
        })
    }

    /// A one-line summary (`tx 10 pkts / 1234 B, rx …`).
    pub fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "tx {} pkts / {} B in {} send calls, {} segmented sends ({} from the sender's memory), {} sends connected ({} ID probes, {} failed), rx {} pkts / {} B in {} coalesced reads, tx errors {}, tx malformed {}, source-port fallbacks {}, rx IP IDs recovered {}, rx dropped {}, rx dropped on purpose {}, rx empty {}, rx GRO switches {}, tx MTU drops {} (route MTU {})",
            g(&self.tx_packets),
            g(&self.tx_bytes),
            g(&self.tx_send_calls),
            g(&self.tx_gso_sends),
            g(&self.tx_from_memory),
            g(&self.tx_connected),
            g(&self.tx_id_probes),
            g(&self.tx_id_probe_failures),
            g(&self.rx_packets),
            g(&self.rx_bytes),
            g(&self.rx_gro_reads),
            g(&self.tx_errors),
            g(&self.tx_malformed),
            g(&self.tx_sport_fallbacks),
            g(&self.rx_ip_id_recovered),
            g(&self.rx_dropped),
            g(&self.rx_injected_drops),
            g(&self.rx_empty),
            g(&self.rx_gro_switches),
            g(&self.tx_mtu_drops),
            g(&self.route_mtu)
        )
    }
}

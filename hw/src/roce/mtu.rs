//! MTU arithmetic of RoCEv2 over Ethernet: which IB path MTU an Ethernet MTU carries, which
//! Ethernet MTU a path MTU needs, and the sentence that explains a path MTU too large for a
//! hop.
//!
//! Owns: [`ROCE_HEADER_BYTES`], [`active_mtu`], [`eth_mtu_needed`], [`largest_fitting`] and
//! [`TooLarge`] (the explanation). Must not: know any device, port or link (callers pass the
//! MTUs they read), keep state, or do I/O.
//!
//! Sources: Linux `include/rdma/ib_addr.h` `iboe_get_mtu` (the active RoCE MTU of a netdev:
//! the largest IB MTU at most the netdev MTU less GRH 40 + UDP 8 + BTH 12 + XRC ETH 4 +
//! AtomicETH 28 + ICRC 4 bytes, the worst case of any packet a QP sends), and its callers in
//! `drivers/infiniband/hw/mlx5/main.c` (`mlx5_query_port_roce`: `active_mtu`, and
//! `max_mtu` from the port's largest). IB MTUs are `enum ib_mtu` (256..4096).

/// Bytes a RoCEv2 packet adds to its path MTU of payload in the worst case, as the kernel
/// counts them (`iboe_get_mtu`): GRH (IPv6 header) 40, UDP 8, BTH 12, XRC ETH 4, AtomicETH 28,
/// ICRC 4.
pub const ROCE_HEADER_BYTES: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// The IB MTUs, largest first.
const IB_MTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];

/// The active RoCE MTU of an Ethernet MTU (`iboe_get_mtu`): the largest IB MTU whose packets
/// fit, or `None` when not even 256 does (an Ethernet MTU below 352).
pub fn active_mtu(eth_mtu: u32) -> Option<u32> {
    largest_fitting(eth_mtu.saturating_sub(ROCE_HEADER_BYTES))
}

/// The largest IB MTU at most `bytes`, or `None` below 256.
pub fn largest_fitting(bytes: u32) -> Option<u32> {
    IB_MTUS.into_iter().find(|&m| m <= bytes)
}

/// The smallest Ethernet MTU that carries every packet of path MTU `path_mtu`.
pub fn eth_mtu_needed(path_mtu: u32) -> u32 {
    path_mtu.saturating_add(ROCE_HEADER_BYTES)
}

/// Why path MTU `path_mtu` cannot run over a hop of Ethernet MTU `eth_mtu` and what to do
/// (its `Display`), with the numbers computed: the Ethernet MTU it needs on every hop and the
/// path MTU that fits this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// The path MTU asked for (bytes).
    pub path_mtu: u32,
    /// The hop's Ethernet MTU (bytes).
    pub eth_mtu: u32,
}

impl TooLarge {
    /// `Some` when path MTU `path_mtu`'s packets do not fit Ethernet MTU `eth_mtu`.
    pub fn check(path_mtu: u32, eth_mtu: u32) -> Option<Self> {
        (eth_mtu_needed(path_mtu) > eth_mtu).then_some(Self { path_mtu, eth_mtu })
    }
}

impl core::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (path_mtu, eth_mtu) = (self.path_mtu, self.eth_mtu);
        let need = eth_mtu_needed(path_mtu);
        let example = if need <= 9000 { " (e.g. 9000)" } else { "" };
        write!(
            f,
            "path MTU {path_mtu} needs an Ethernet MTU >= {need} on every hop (RoCEv2 headers: {ROCE_HEADER_BYTES} bytes); this port has {eth_mtu}: set the MTU to >= {need}{example} on every hop, "
        )?;
        match active_mtu(eth_mtu) {
            Some(m) => write!(f, "or use path MTU {m}"),
            None => write!(
                f,
                "no path MTU fits {eth_mtu} (256 needs {})",
                eth_mtu_needed(256)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_follows_iboe_get_mtu() {
        // 9000 and 4200 carry 4096 (4192 needed); 1500 carries 1024; 4191 only 2048.
        assert_eq!(active_mtu(9000), Some(4096));
        assert_eq!(active_mtu(4200), Some(4096));
        assert_eq!(active_mtu(4192), Some(4096));
        assert_eq!(active_mtu(4191), Some(2048));
        assert_eq!(active_mtu(1500), Some(1024));
        assert_eq!(active_mtu(352), Some(256));
        assert_eq!(active_mtu(351), None);
    }

    #[test]
    fn the_explanation_names_the_needed_and_the_fitting_mtu() {
        assert_eq!(
            TooLarge {
                path_mtu: 4096,
                eth_mtu: 1500
            }
            .to_string(),
            "path MTU 4096 needs an Ethernet MTU >= 4192 on every hop (RoCEv2 headers: 96 bytes); this port has 1500: set the MTU to >= 4192 (e.g. 9000) on every hop, or use path MTU 1024"
        );
        assert_eq!(TooLarge::check(4096, 4192), None);
        assert_eq!(TooLarge::check(4096, 4191).map(|t| t.eth_mtu), Some(4191));
        assert!(
            TooLarge {
                path_mtu: 1024,
                eth_mtu: 300
            }
            .to_string()
            .ends_with("no path MTU fits 300 (256 needs 352)")
        );
    }
}

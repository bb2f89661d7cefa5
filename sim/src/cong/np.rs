//! The notification point: when a CE-marked packet earns its sender a CNP.
//!
//! Owns: [`NpState`] (when each flow last got a CNP) and [`cnp_prio`]. Must not: build or
//! send the CNP (the transport's receive path does, `bypass_hw::roce::cnp`), or decide
//! whether the NP is on (the caller reads `Cong::status.np`).
//!
//! A flow is the receiving QP, the sender's address and the sender's QPN: RC and UC QPs have
//! one, a UD QP one per sender. At most one CNP goes to a flow per `min_time_between_cnps`
//! µs (mlx5 `cong_control_r_roce_ecn_np`; the DCQCN paper's 50 µs); the marked packets in
//! between are counted and otherwise processed as usual.
//!
//! Priority: the sim's wire carries IP packets without an 802.1Q tag, so a switch sees a
//! CNP's priority through its DSCP (`cnp_dscp`, DSCP trust); [`cnp_prio`] says which 802.1p
//! priority mlx5 would tag it with (`cnp_prio_mode`, `cnp_802p_prio`), for reports.
//!
//! Sources: the kernel's `mlx5_ifc.h` (`cong_control_r_roce_ecn_np`), Zhu et al. SIGCOMM 2015
//! (the NP), IBTA annex A17.9 (CNPs).

use std::collections::HashMap;

use super::NpParams;

/// One flow a CNP goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// The QP that received the marked packet.
    pub local_qpn: u32,
    /// The sender's address (GID form).
    pub peer_gid: [u8; 16],
    /// The sender's QPN (the CNP's DestQP).
    pub peer_qpn: u32,
}

/// When each flow last got a CNP.
#[derive(Debug, Clone, Default)]
pub struct NpState {
    last: HashMap<Flow, u64>,
}

impl NpState {
    /// Whether `flow` may get a CNP at `now` (ns); if so, records it as sent.
    pub fn admit(&mut self, p: &NpParams, flow: Flow, now: u64) -> bool {
        let gap = u64::from(p.min_time_between_cnps) * 1000;
        match self.last.get(&flow) {
            Some(&t) if now.saturating_sub(t) < gap => false,
            _ => {
                self.last.insert(flow, now);
                true
            }
        }
    }

    /// Forgets the flows of QP `qpn` (it was reset or destroyed).
    pub fn forget_qp(&mut self, qpn: u32) {
        self.last.retain(|f, _| f.local_qpn != qpn);
    }
}

/// The 802.1p priority of a CNP answering a packet of priority `marked_prio`.
pub fn cnp_prio(p: &NpParams, marked_prio: u8) -> u8 {
    if p.cnp_prio_mode == 0 {
        p.cnp_802p_prio & 7
    } else {
        marked_prio & 7
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cnp_per_flow_per_interval() {
        let p = NpParams::default();
        let mut s = NpState::default();
        let f = Flow {
            local_qpn: 1,
            peer_gid: [1; 16],
            peer_qpn: 7,
        };
        let g = Flow { peer_qpn: 8, ..f };
        assert!(s.admit(&p, f, 0));
        assert!(!s.admit(&p, f, 49_999));
        assert!(s.admit(&p, g, 49_999), "another flow has its own interval");
        assert!(s.admit(&p, f, 50_000));
        s.forget_qp(1);
        assert!(s.admit(&p, f, 50_001));
    }

    #[test]
    fn cnp_priority_follows_the_mode() {
        let p = NpParams::default();
        assert_eq!(cnp_prio(&p, 3), 6);
        let m1 = NpParams {
            cnp_prio_mode: 1,
            ..p
        };
        assert_eq!(cnp_prio(&m1, 3), 3);
    }
}

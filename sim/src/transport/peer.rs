//! Peer checks on receive: a connected QP takes packets from its peer alone.
//!
//! Owns: [`from_peer`] (the address check of a packet for an RC or UC QP) and [`pkey_ok`]
//! (the BTH P_Key check every packet passes), both pure functions of the packet's headers
//! and the QP's connection attributes. Must not: count, drop or answer (the receive
//! dispatch in `transport/mod.rs` does, counting `rx_addr_errors` and `rx_pkey_errors` on the
//! device and the QP).
//!
//! Sources: Linux rxe `rxe_recv.c` — `check_addr` (for RC and UC, the IP source must be the
//! QP's destination GID and the IP destination its source GID, on the QP's port; UD and the
//! special QPs are not checked) and `check_keys` with `pkey_match` (the packet's P_Key must
//! match the default full key 0xffff: same low 15 bits, and full membership on one side).
//! IBTA vol. 1 §9.6.1.1 (packet header validation), §10.9 (P_Key rules). The mlx5 hardware
//! drops such packets as well; the sim has one P_Key (index 0, 0xffff), as rxe.

use bypass_hw::cmd::qp::service_type as st;
use bypass_hw::roce::{DEFAULT_PKEY, IpSpec};

use crate::objects::Qp;
use crate::profile::Profile;

/// True if a packet with IP header `ip` may reach `qp`: for RC and UC, its source is the
/// QP's remote GID (`qpc.primary_address_path.rgid_rip`) and its destination the QP's own
/// GID (`src_addr_index` on the QP's port in `profile`); any other service type passes (rxe
/// `check_addr`).
#[inline(always)]
pub(crate) fn from_peer(qp: &Qp, profile: &Profile, ip: &IpSpec) -> bool {
    if qp.st != st::RC && qp.st != st::UC {
        return true;
    }
    let path = &qp.attrs.path;
    let (src, dst) = ip.gids();
    if src != path.rgid {
        return false;
    }
    let own = usize::from(path.port)
        .checked_sub(1)
        .and_then(|i| profile.ports.get(i))
        .and_then(|p| p.gids.get(usize::from(path.src_addr_index)));
    own == Some(&dst)
}

/// True if a packet's BTH P_Key matches the port's one key, the default full P_Key (rxe
/// `check_keys`, `pkey_match`): the low 15 bits agree (0x7fff), and one of the two is a
/// full member (ours always is), so a limited-member 0x7fff matches too.
#[inline(always)]
pub(crate) fn pkey_ok(pkey: u16) -> bool {
    pkey & 0x7fff == DEFAULT_PKEY & 0x7fff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkey_matches_the_default_key_in_either_membership_only() {
        assert!(pkey_ok(0xffff));
        assert!(pkey_ok(0x7fff));
        assert!(!pkey_ok(0x8001));
        assert!(!pkey_ok(0x0000));
        assert!(!pkey_ok(0xfffe));
    }
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod carrier_tests;

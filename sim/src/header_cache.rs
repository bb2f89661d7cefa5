//! IP + UDP headers kept by what they are built from, with the ICRC's CRC state after them:
//! the headers the UDP link writes in front of the packets it receives, and those of the
//! packets a burst is segmented into (`Burst::segment_direct_into`, the inline WRITEs the
//! link sends as bytes).
//!
//! Owns: [`HeaderCache`]. Must not: decide any header field (the link does, from the socket
//! addresses; a burst from its spec); this only remembers what `IpSpec::write_ip_udp` wrote
//! for the same fields and length, so that a hit costs a field compare and a copy, no header
//! write and no CRC over it. The link asks it for received IPv4 headers with ID 0 only
//! (`stamp_header`): a train's segments differ from one another only in their IDs (segment
//! `k` carries ID `k`), so keyed with ID 0 one kind covers a whole train, and a peer's
//! packets of one kind (its ACKs, its equal-size WRITEs, every segment of its trains) cost a
//! copy and no CRC over the headers. The ICRC with another ID follows from the ID-0 one by
//! XOR (`link::ipv4_id`), and the header with that ID is written by the link.

use bypass_hw::roce::icrc::IcrcHeaderState;
use bypass_hw::roce::ip::{MAX_IP_UDP_HDR_LEN, UDP_HDR_LEN};
use bypass_hw::roce::{IpSpec, UdpPorts};

/// How many kinds of header are kept: a flow's ACKs and WRITEs of a few lengths (full
/// packets, a message's last one).
const SLOTS: usize = 4;

/// One header as written: the fields and UDP payload length it was built from, its bytes and
/// the ICRC's state after them.
#[derive(Debug, Clone)]
struct Written {
    ip: IpSpec,
    ports: UdpPorts,
    payload_len: usize,
    bytes: [u8; MAX_IP_UDP_HDR_LEN],
    len: usize,
    crc: IcrcHeaderState,
}

/// The last few headers written (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct HeaderCache {
    slots: [Option<Written>; SLOTS],
    /// The slot the next new kind replaces.
    next: usize,
}

impl HeaderCache {
    /// Writes the IP + UDP header of a UDP payload of `payload_len` bytes, from `ip` and
    /// `ports`, into `hdr` (exactly its length), byte for byte as `IpSpec::write_ip_udp`
    /// writes it, and returns the ICRC's CRC state after that header. `None` when
    /// `write_ip_udp` refuses (a payload over 64 KiB, or `hdr` of the wrong length).
    pub(crate) fn write(
        &mut self,
        ip: &IpSpec,
        ports: UdpPorts,
        payload_len: usize,
        hdr: &mut [u8],
    ) -> Option<&IcrcHeaderState> {
        if hdr.len() != ip.header_len() + UDP_HDR_LEN {
            return None;
        }
        let kept = self.slots.iter().position(|s| {
            s.as_ref()
                .is_some_and(|w| w.payload_len == payload_len && w.ports == ports && w.ip == *ip)
        });
        let at = match kept {
            Some(at) => {
                let w = self.slots.get(at)?.as_ref()?;
                hdr.copy_from_slice(w.bytes.get(..w.len)?);
                at
            }
            None => {
                let len = ip.write_ip_udp(ports, payload_len, hdr).ok()?;
                let written = hdr.get(..len)?;
                let crc = IcrcHeaderState::new(written).ok()?;
                let mut bytes = [0u8; MAX_IP_UDP_HDR_LEN];
                bytes.get_mut(..len)?.copy_from_slice(written);
                let at = self.next % SLOTS;
                self.next = (at + 1) % SLOTS;
                *self.slots.get_mut(at)? = Some(Written {
                    ip: *ip,
                    ports,
                    payload_len,
                    bytes,
                    len,
                    crc,
                });
                at
            }
        };
        self.slots.get(at)?.as_ref().map(|w| &w.crc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::roce::{Ipv4Spec, Ipv6Spec};

    #[test]
    fn kept_headers_are_the_bytes_write_ip_udp_writes_and_their_crc_state() {
        let v4 = |id, dst| {
            IpSpec::V4(Ipv4Spec {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, dst],
                tos: 0,
                ttl: 64,
                id,
                dont_fragment: true,
            })
        };
        let v6 = IpSpec::V6(Ipv6Spec {
            src: [0xfe; 16],
            dst: [0xfd; 16],
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        });
        let ports = |src| UdpPorts { src, dst: 4791 };
        // More kinds than are kept, each differing from another in one field, written in
        // rounds that hit, miss and evict.
        let kinds = [
            (v4(0, 2), ports(0xc000), 20),
            (v4(1, 2), ports(0xc000), 20),
            (v4(0, 3), ports(0xc000), 20),
            (v4(0, 2), ports(0xc001), 20),
            (v4(0, 2), ports(0xc000), 40),
            (v6, ports(0xc000), 20),
        ];
        let mut memo = HeaderCache::default();
        // The covered bytes after the header: a BTH (byte 4 masked) and an AETH.
        let body = [0x11u8, 0, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0, 0, 5, 0, 0, 0, 1];
        let check = |memo: &mut HeaderCache, (ip, p, n): &(IpSpec, UdpPorts, usize), what: &str| {
            let hl = ip.header_len() + UDP_HDR_LEN;
            let mut want = vec![0u8; hl];
            ip.write_ip_udp(*p, *n, &mut want).unwrap();
            let mut got = vec![0xa5u8; hl];
            let crc = memo.write(ip, *p, *n, &mut got).unwrap();
            let mut covered = body;
            let icrc = crc.icrc_in_place(&mut covered).unwrap();
            assert_eq!(got, want, "{what}");
            let fresh = IcrcHeaderState::new(&want).unwrap();
            assert_eq!(icrc, fresh.icrc_in_place(&mut covered).unwrap(), "{what}");
        };
        // Each kind twice in a row (written, then copied from its slot), then all of them
        // again: with more kinds than slots, the first ones were evicted and are rebuilt.
        for round in 0..3 {
            for (k, kind) in kinds.iter().enumerate() {
                check(&mut memo, kind, &format!("round {round} kind {k}"));
                if round == 0 {
                    // A new kind moves `next` on; a kept one does not.
                    let next = memo.next;
                    check(&mut memo, kind, &format!("kind {k} again"));
                    assert_eq!(memo.next, next, "kind {k} again is copied from its slot");
                }
            }
        }
        // The last kind written is kept: a header too short or too long is refused for it, as
        // for a kind not kept (which `write_ip_udp` alone would take too long).
        let (ip, p, n) = kinds[5];
        assert!(
            memo.slots
                .iter()
                .flatten()
                .any(|w| w.ip == ip && w.payload_len == n)
        );
        assert!(memo.write(&ip, p, n, &mut [0u8; 27]).is_none());
        assert!(memo.write(&v4(9, 9), p, 20, &mut [0u8; 27]).is_none());
        assert!(memo.write(&ip, p, n, &mut [0u8; 49]).is_none());
        assert!(memo.write(&v4(9, 9), p, 20, &mut [0u8; 29]).is_none());
    }
}

//! What two peers tell each other before they can talk: a QP's address ([`QpEndpoint`]) and
//! a buffer the peer may access ([`RemoteBuffer`]), with the path MTU ([`Mtu`]) and the GID
//! ([`Gid`]) they carry.
//!
//! Owns: the endpoint types, their serde form and the `ibv_rc_pingpong` text form
//! (`"%04x:%06x:%06x:%s"`, lid:qpn:psn:gid, rdma-core `libibverbs/examples/rc_pingpong.c`
//! `pp_client_exch_dest` with `gid_to_wire_gid` in `pingpong.c`).
//! Must not: touch the network (see `exchange`) or a device.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use bypass_driver::hw::cmd::qp::PathMtu;
use bypass_driver::redact::{Addr, Key};

/// A 128-bit GID (for RoCEv2: an IPv6 address, or an IPv4-mapped one `::ffff:a.b.c.d`).
///
/// Stored in wire (network) byte order, as `union ibv_gid.raw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID of `a.b.c.d` (`::ffff:a.b.c.d`), the form RoCEv2 uses for IPv4.
    pub const fn from_ipv4(ip: [u8; 4]) -> Self {
        let [a, b, c, d] = ip;
        Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d])
    }

    /// The GID as an IPv6 address.
    pub fn to_ipv6(self) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.0)
    }

    /// Parses the 32-hex-digit wire form of `ibv_rc_pingpong` (`wire_gid_to_gid`): the 16
    /// bytes in order, two hex digits each.
    pub fn from_wire_hex(s: &str) -> Result<Self, EndpointParseError> {
        let bytes = s.as_bytes();
        if bytes.len() != 32 {
            return Err(EndpointParseError::GidLength { len: bytes.len() });
        }
        let mut out = [0u8; 16];
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let hi = hex_digit(pair.first().copied())?;
            let lo = hex_digit(pair.get(1).copied())?;
            *o = hi << 4 | lo;
        }
        Ok(Gid(out))
    }
}

fn hex_digit(c: Option<u8>) -> Result<u8, EndpointParseError> {
    let c = c.ok_or(EndpointParseError::GidLength { len: 0 })?;
    (c as char)
        .to_digit(16)
        .map(|d| d as u8)
        .ok_or(EndpointParseError::GidDigit { digit: c as char })
}

impl fmt::Display for Gid {
    /// The 32-hex-digit wire form (`gid_to_wire_gid`): every byte in order, lower case.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A path MTU, as `enum ibv_mtu` (256 to 4096 bytes). Serialises as its size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes (the `ibv_rc_pingpong` default).
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        self.to_path_mtu().bytes()
    }

    /// The `qpc.mtu` code the driver writes.
    pub const fn to_path_mtu(self) -> PathMtu {
        match self {
            Mtu::Mtu256 => PathMtu::Mtu256,
            Mtu::Mtu512 => PathMtu::Mtu512,
            Mtu::Mtu1024 => PathMtu::Mtu1024,
            Mtu::Mtu2048 => PathMtu::Mtu2048,
            Mtu::Mtu4096 => PathMtu::Mtu4096,
        }
    }

    /// The MTU of `bytes` (exactly 256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
}

impl From<Mtu> for u32 {
    fn from(m: Mtu) -> u32 {
        m.bytes()
    }
}

impl TryFrom<u32> for Mtu {
    type Error = EndpointParseError;
    fn try_from(bytes: u32) -> Result<Self, Self::Error> {
        Mtu::from_bytes(bytes).ok_or(EndpointParseError::Mtu { bytes })
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// The address of a QP, what the peer needs for its INIT→RTR→RTS walk (`connect`).
///
/// ```
/// use bypass_verbs::{Gid, Mtu, QpEndpoint};
/// let ep = QpEndpoint { qpn: 0x1c, psn: 0x123456, gid: Gid::from_ipv4([10, 0, 0, 1]), lid: 0, mtu: Mtu::Mtu1024 };
/// let text = ep.to_string();
/// assert_eq!(text, "0000:00001c:123456:00000000000000000000ffff0a000001");
/// assert_eq!(text.parse::<QpEndpoint>().unwrap(), ep);
/// ```
///
/// Its serde form is checked as it is read: a QPN or PSN over 24 bits does not deserialise
/// ([`QpEndpoint::validate`]'s error), so no JSON a peer sends (the exchange helper, the
/// perf hello) yields an endpoint the device would refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "EndpointFields")]
pub struct QpEndpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number the QP sends (24 bits); the peer's RQ expects it.
    pub psn: u32,
    /// The GID of the port (RoCEv2: the IP address).
    pub gid: Gid,
    /// The port's LID (0 on RoCE, where the GID routes).
    pub lid: u16,
    /// The path MTU the QP's side uses; `connect` takes the smaller of the two.
    pub mtu: Mtu,
}

/// The largest value a 24-bit field (QPN, PSN) can hold.
pub const MAX_24BIT: u32 = 0x00ff_ffff;

/// [`QpEndpoint`]'s fields as a peer's serde form carries them, not yet checked.
#[derive(Deserialize)]
struct EndpointFields {
    qpn: u32,
    psn: u32,
    gid: Gid,
    lid: u16,
    mtu: Mtu,
}

impl TryFrom<EndpointFields> for QpEndpoint {
    type Error = EndpointParseError;
    fn try_from(f: EndpointFields) -> Result<Self, Self::Error> {
        let ep = QpEndpoint {
            qpn: f.qpn,
            psn: f.psn,
            gid: f.gid,
            lid: f.lid,
            mtu: f.mtu,
        };
        ep.validate()?;
        Ok(ep)
    }
}

impl QpEndpoint {
    /// Length of the `ibv_rc_pingpong` text form without its NUL (`"LLLL:QQQQQQ:PPPPPP:" + 32`).
    pub const PINGPONG_TEXT_LEN: usize = 4 + 1 + 6 + 1 + 6 + 1 + 32;

    /// Parses the `ibv_rc_pingpong` text form `lid:qpn:psn:gid` (hex fields). The text carries
    /// no MTU, so the endpoint gets `mtu` (`ibv_rc_pingpong` uses `-m`, default 1024).
    /// Trailing NULs and whitespace (the C side sends `sizeof msg` bytes) are ignored.
    pub fn parse_pingpong(s: &str, mtu: Mtu) -> Result<Self, EndpointParseError> {
        let s = s.trim_end_matches(['\0', '\n', '\r', ' ']);
        let mut parts = s.split(':');
        let mut field = |name: &'static str| {
            parts
                .next()
                .ok_or(EndpointParseError::MissingField { field: name })
        };
        let lid = hex_field(field("lid")?, "lid", 0xffff)? as u16;
        let qpn = hex_field(field("qpn")?, "qpn", MAX_24BIT)?;
        let psn = hex_field(field("psn")?, "psn", MAX_24BIT)?;
        let gid = Gid::from_wire_hex(field("gid")?)?;
        if parts.next().is_some() {
            return Err(EndpointParseError::TrailingField);
        }
        Ok(QpEndpoint {
            qpn,
            psn,
            gid,
            lid,
            mtu,
        })
    }

    /// Checks that QPN and PSN fit their 24-bit fields.
    pub fn validate(&self) -> Result<(), EndpointParseError> {
        if self.qpn > MAX_24BIT {
            return Err(EndpointParseError::Range {
                field: "qpn",
                value: self.qpn.into(),
                max: MAX_24BIT,
            });
        }
        if self.psn > MAX_24BIT {
            return Err(EndpointParseError::Range {
                field: "psn",
                value: self.psn.into(),
                max: MAX_24BIT,
            });
        }
        Ok(())
    }
}

/// The QPN a UD send to a multicast group carries (IBTA 10.5.2.3, `IB_MULTICAST_QPN`); bypass
/// joins no groups, so a unicast destination never has it.
pub const MULTICAST_QPN: u32 = MAX_24BIT;

impl QpEndpoint {
    /// Checks that the endpoint can be a UD destination ([`crate::Qp::ud_dest`]), beyond
    /// [`QpEndpoint::validate`]: the QPN fits 24 bits and is neither QP0 (the subnet
    /// management QP, which a RoCE port does not have: rdma-core refuses `ibv_create_qp` of
    /// `IBV_QPT_SMI` there) nor the multicast QPN 0xffffff; the GID is a unicast address
    /// (not `::`, not `::ffff:0.0.0.0`, not IPv6 multicast `ff00::/8`, not IPv4 multicast
    /// `224.0.0.0/4` or broadcast `255.255.255.255` in the mapped form), as the kernel's
    /// `rdma_addr_find_l2_eth_by_grh` resolves only unicast addresses for an address handle.
    ///
    /// The driver writes the QPN into the address vector masked to 24 bits, so without this
    /// check a peer's QPN 0x1000005 would silently address QP 5.
    pub fn validate_ud_dest(&self) -> Result<(), EndpointParseError> {
        if self.qpn == 0 || self.qpn >= MULTICAST_QPN {
            return Err(EndpointParseError::UdQpn { qpn: self.qpn });
        }
        if let Some(why) = not_unicast(&self.gid) {
            return Err(EndpointParseError::UdGid { gid: self.gid, why });
        }
        Ok(())
    }
}

/// Why `gid` is no unicast RoCE address, if it is not one.
fn not_unicast(gid: &Gid) -> Option<&'static str> {
    let ip = gid.to_ipv6();
    if ip.is_unspecified() {
        return Some("the unspecified address ::");
    }
    if ip.is_multicast() {
        return Some("an IPv6 multicast address (ff00::/8)");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        if v4.is_unspecified() {
            return Some("the IPv4 unspecified address 0.0.0.0");
        }
        if v4.is_multicast() {
            return Some("an IPv4 multicast address (224.0.0.0/4)");
        }
        if v4.is_broadcast() {
            return Some("the IPv4 broadcast address");
        }
    }
    None
}

fn hex_field(s: &str, field: &'static str, max: u32) -> Result<u32, EndpointParseError> {
    let v = u64::from_str_radix(s, 16).map_err(|_| EndpointParseError::Hex {
        field,
        text: s.chars().take(16).collect(),
    })?;
    if v > u64::from(max) {
        return Err(EndpointParseError::Range {
            field,
            value: v,
            max,
        });
    }
    Ok(v as u32)
}

impl fmt::Display for QpEndpoint {
    /// The `ibv_rc_pingpong` text form: `"%04x:%06x:%06x:%s"` (lid:qpn:psn:gid).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & MAX_24BIT,
            self.psn & MAX_24BIT,
            self.gid
        )
    }
}

impl FromStr for QpEndpoint {
    type Err = EndpointParseError;
    /// Parses the pingpong text form with the pingpong default MTU (1024).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QpEndpoint::parse_pingpong(s, Mtu::Mtu1024)
    }
}

/// A buffer the peer may read, write or run atomics on: what `ibv_mr`'s `addr`/`rkey`/`length`
/// tell a peer.
///
/// ```
/// use bypass_verbs::RemoteBuffer;
/// let rb = RemoteBuffer { addr: 0x10000, rkey: 0x1234_5600, len: 4096 };
/// let sub = rb.slice(64, 128).unwrap();
/// assert_eq!((sub.addr, sub.len), (0x10040, 128));
/// assert!(rb.slice(4000, 200).is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteBuffer {
    /// The address the peer uses in its RETH (the MR's IOVA on the owner's side).
    pub addr: u64,
    /// The remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteBuffer {
    /// The part `[offset, offset + len)` of this buffer, or `None` if it does not fit.
    pub fn slice(&self, offset: u64, len: u64) -> Option<RemoteBuffer> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(RemoteBuffer {
            addr: self.addr.checked_add(offset)?,
            rkey: self.rkey,
            len,
        })
    }
}

impl fmt::Debug for RemoteBuffer {
    /// Redacts the key and the address (DESIGN.md principle 6) unless `BYPASS_LOG_KEYS=1`
    /// ([`bypass_driver::redact`]): only the length shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBuffer")
            .field("addr", &Addr(self.addr))
            .field("rkey", &Key(self.rkey))
            .field("len", &self.len)
            .finish()
    }
}

/// Why an endpoint's text or serialised form was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointParseError {
    /// A `:`-separated field is missing.
    #[error(
        "endpoint text is missing its {field} field: expected lid:qpn:psn:gid as ibv_rc_pingpong prints it (\"%04x:%06x:%06x:%s\")"
    )]
    MissingField {
        /// The missing field.
        field: &'static str,
    },
    /// More than four fields.
    #[error(
        "endpoint text has more than four fields: expected exactly lid:qpn:psn:gid (\"%04x:%06x:%06x:%s\")"
    )]
    TrailingField,
    /// A field is not hexadecimal.
    #[error(
        "endpoint field {field} ({text:?}) is not hexadecimal: every field of lid:qpn:psn:gid is hex without 0x"
    )]
    Hex {
        /// The field.
        field: &'static str,
        /// Its text (first 16 characters).
        text: String,
    },
    /// A field is out of range.
    #[error(
        "endpoint field {field} = {value:#x} is out of range: it must be at most {max:#x}; the peer's endpoint is corrupt or not a QP's (check that both sides run the same protocol)"
    )]
    Range {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The largest value allowed.
        max: u32,
    },
    /// The GID is not 32 hex digits.
    #[error(
        "the GID has {len} characters: it must be 32 hex digits (16 bytes in order, as gid_to_wire_gid writes them)"
    )]
    GidLength {
        /// Its length.
        len: usize,
    },
    /// The GID has a non-hex digit.
    #[error("the GID has the non-hex character {digit:?}: it must be 32 hex digits")]
    GidDigit {
        /// The offending character.
        digit: char,
    },
    /// The bytes are not UTF-8 text.
    #[error("the endpoint message is not text: expected ASCII lid:qpn:psn:gid")]
    NotText,
    /// The QPN cannot be a UD destination.
    #[error(
        "UD destination QPN {qpn:#x} is not a unicast QP: it must be 1..=0xfffffe (QP0 does not exist on a RoCE port, 0xffffff is the multicast QPN, larger values do not fit 24 bits); the peer's endpoint is corrupt or not a UD QP's"
    )]
    UdQpn {
        /// The QPN given.
        qpn: u32,
    },
    /// The GID cannot be a UD destination.
    #[error(
        "UD destination GID {gid} is {why}: an address handle needs the peer port's unicast GID (its IP address); the peer's endpoint is corrupt"
    )]
    UdGid {
        /// The GID given.
        gid: Gid,
        /// What it is instead of a unicast address.
        why: &'static str,
    },
    /// The MTU is not one of the five IB MTUs.
    #[error("MTU {bytes} is not an IB path MTU: use 256, 512, 1024, 2048 or 4096")]
    Mtu {
        /// The size given.
        bytes: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_dest_refuses_qp0_the_multicast_qpn_and_qpns_over_24_bits() {
        let ok = QpEndpoint {
            gid: Gid::from_ipv4([10, 0, 0, 2]),
            ..ep()
        };
        assert_eq!(ok.validate_ud_dest(), Ok(()));
        for qpn in [0, MULTICAST_QPN, MAX_24BIT + 1, 0x0100_0005, u32::MAX] {
            let e = QpEndpoint { qpn, ..ok }.validate_ud_dest();
            assert_eq!(e, Err(EndpointParseError::UdQpn { qpn }), "{qpn:#x}");
        }
        assert_eq!(QpEndpoint { qpn: 1, ..ok }.validate_ud_dest(), Ok(()));
    }

    #[test]
    fn ud_dest_refuses_a_gid_that_is_not_unicast() {
        let mut mc6 = [0u8; 16];
        mc6[0] = 0xff;
        mc6[1] = 0x02;
        mc6[15] = 1;
        for (gid, what) in [
            (Gid([0; 16]), "::"),
            (Gid::from_ipv4([0, 0, 0, 0]), "0.0.0.0"),
            (Gid(mc6), "IPv6 multicast"),
            (Gid::from_ipv4([239, 1, 2, 3]), "224.0.0.0/4"),
            (Gid::from_ipv4([255, 255, 255, 255]), "broadcast"),
        ] {
            let e = QpEndpoint { gid, ..ep() }.validate_ud_dest().unwrap_err();
            assert!(
                matches!(e, EndpointParseError::UdGid { gid: g, why } if g == gid && why.contains(what)),
                "{gid}: {e:?}"
            );
            assert!(e.to_string().contains(&gid.to_string()), "{e}");
        }
        // A link-local IPv6 GID is a unicast address.
        assert_eq!(ep().validate_ud_dest(), Ok(()));
    }

    fn ep() -> QpEndpoint {
        QpEndpoint {
            qpn: 0xabcdef,
            psn: 0x000001,
            gid: Gid([
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
            ]),
            lid: 0x12,
            mtu: Mtu::Mtu4096,
        }
    }

    #[test]
    fn json_endpoint_with_a_psn_or_qpn_over_24_bits_does_not_deserialise() {
        let good = serde_json::to_value(ep()).unwrap();
        let back: QpEndpoint = serde_json::from_value(good.clone()).unwrap();
        assert_eq!(back, ep());
        for (field, value) in [
            ("psn", 0x0100_0000u64),
            ("qpn", 0x0100_0000),
            ("qpn", u64::from(u32::MAX)),
        ] {
            let mut v = good.clone();
            v[field] = value.into();
            let err = serde_json::from_value::<QpEndpoint>(v)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(
                    "endpoint field {field} = {value:#x} is out of range"
                )),
                "{field}: {err}"
            );
        }
        // At the limit it still reads.
        let mut v = good;
        v["psn"] = MAX_24BIT.into();
        v["qpn"] = MAX_24BIT.into();
        let at: QpEndpoint = serde_json::from_value(v).unwrap();
        assert_eq!((at.qpn, at.psn), (MAX_24BIT, MAX_24BIT));
    }

    #[test]
    fn pingpong_text_has_the_c_layout() {
        let s = ep().to_string();
        assert_eq!(s, "0012:abcdef:000001:fe80000000000000021122fffe334455");
        assert_eq!(s.len(), QpEndpoint::PINGPONG_TEXT_LEN);
    }

    #[test]
    fn pingpong_text_round_trips_with_given_mtu() {
        let e = ep();
        let back = QpEndpoint::parse_pingpong(&format!("{e}\0"), Mtu::Mtu4096).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn pingpong_text_rejects_short_gid_and_bad_hex() {
        assert!(matches!(
            "0000:000001:000001:00".parse::<QpEndpoint>(),
            Err(EndpointParseError::GidLength { len: 2 })
        ));
        assert!(matches!(
            "zz:000001:000001:00000000000000000000000000000000".parse::<QpEndpoint>(),
            Err(EndpointParseError::Hex { field: "lid", .. })
        ));
        assert!(matches!(
            "0000:1000000:000001:00000000000000000000000000000000".parse::<QpEndpoint>(),
            Err(EndpointParseError::Range { field: "qpn", .. })
        ));
        assert!(matches!(
            "0000:000001".parse::<QpEndpoint>(),
            Err(EndpointParseError::MissingField { field: "psn" })
        ));
    }

    #[test]
    fn mtu_serialises_as_bytes() {
        assert_eq!(u32::from(Mtu::Mtu2048), 2048);
        assert!(Mtu::try_from(1500).is_err());
        assert_eq!(Mtu::Mtu256.to_path_mtu(), PathMtu::Mtu256);
    }

    #[test]
    fn remote_buffer_debug_redacts_key_and_address() {
        let rb = RemoteBuffer {
            addr: 0xdead_beef,
            rkey: 0x4242,
            len: 8,
        };
        let s = format!("{rb:?}");
        assert!(!s.contains("deadbeef") && !s.contains("4242") && !s.contains("3735928559"));
    }
}

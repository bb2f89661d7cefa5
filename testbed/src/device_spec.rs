//! The device selector shared by the CLI's `-d/--device` and `libibverbs.so.1`'s
//! `BYPASS_DEVICE`: `sim`, `udp:ADDR[:PORT]`, or a PCI address (`vfio:BDF`).
//!
//! Owns: parsing and printing a [`DeviceSpec`], with messages that say what was expected.
//! Must not open devices: each user opens a spec its own way (the CLI one device per command,
//! the C library one HCA per listed device, shared by its contexts).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// Which device a command runs on: `-d/--device`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// An in-process simulated ConnectX NIC (`bypass-sim`), the default.
    #[default]
    Sim,
    /// A NIC bound to `vfio-pci`, named by its PCI address (`0000:3b:00.0`).
    Vfio(String),
    /// One simulated NIC whose wire is a UDP socket bound to this address (`udp:ADDR[:PORT]`,
    /// port 4791 by default; IPv6 as `udp:[ADDR]:PORT` or `udp:ADDR`).
    Udp(SocketAddr),
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("sim") {
            return Ok(Self::Sim);
        }
        if let Some(rest) = s.strip_prefix("udp:") {
            let spec = parse_udp(rest).ok_or_else(|| {
                format!(
                    "{s:?} is not a UDP device: give udp:ADDR or udp:ADDR:PORT with ADDR an IP address of this host (e.g. udp:10.99.0.1, udp:127.0.0.1:4792, udp:[::1]:4791)"
                )
            })?;
            // A link sends to its peers at its own port number, so every side must bind the
            // same known port: one the OS picks is one no peer sends to.
            if matches!(spec, Self::Udp(a) if a.port() == 0) {
                return Err(format!(
                    "{s:?}: UDP port 0 cannot work: a UDP device sends to its peers at its own port, so both sides must bind the same fixed port; give one (udp:ADDR uses 4791, or udp:ADDR:PORT with the same PORT on every side)"
                ));
            }
            return Ok(spec);
        }
        let addr = s.strip_prefix("vfio:").unwrap_or(s);
        if is_pci_address(addr) {
            return Ok(Self::Vfio(addr.to_owned()));
        }
        Err(format!(
            "{s:?} is not a device: give `sim` (an in-process simulated NIC, the default), `udp:ADDR[:PORT]` (a simulated NIC on a UDP socket) or the PCI address of a NIC bound to vfio-pci (e.g. 0000:3b:00.0)"
        ))
    }
}

impl DeviceSpec {
    /// True for a device that talks to peers in other processes (`udp:`, `vfio:`), false for
    /// the in-process pair of `sim`.
    pub fn is_network(&self) -> bool {
        matches!(self, Self::Udp(_) | Self::Vfio(_))
    }

    /// What kind of NIC it is, in words.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Sim => "in-process simulated NIC",
            Self::Vfio(_) => "NIC bound to vfio-pci",
            Self::Udp(_) => "simulated NIC on a UDP socket",
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sim => f.write_str("sim"),
            Self::Vfio(addr) => write!(f, "vfio:{addr}"),
            Self::Udp(addr) => write!(f, "udp:{addr}"),
        }
    }
}

/// `ADDR:PORT`, `[V6]:PORT`, or a bare address (port 4791).
fn parse_udp(s: &str) -> Option<DeviceSpec> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(DeviceSpec::Udp(sa));
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>()
        .ok()
        .map(|ip| DeviceSpec::Udp(SocketAddr::new(ip, bypass_sim::link::udp::ROCE_PORT)))
}

/// `DDDD:BB:DD.F` (domain optional) with hex digits.
fn is_pci_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let widths: &[usize] = match parts.len() {
        4 => &[4, 2, 2, 1],
        3 => &[2, 2, 1],
        _ => return false,
    };
    parts
        .iter()
        .zip(widths)
        .all(|(p, &w)| p.len() == w && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_defaults_to_sim_and_accepts_pci_addresses() {
        assert_eq!(DeviceSpec::default(), DeviceSpec::Sim);
        assert_eq!("SIM".parse(), Ok(DeviceSpec::Sim));
        assert_eq!(
            "0000:3b:00.0".parse(),
            Ok(DeviceSpec::Vfio("0000:3b:00.0".into()))
        );
        assert_eq!(
            "vfio:3b:00.1".parse(),
            Ok(DeviceSpec::Vfio("3b:00.1".into()))
        );
        assert!("mlx5_0".parse::<DeviceSpec>().is_err());
        assert_eq!(
            "udp:10.99.0.1".parse(),
            Ok(DeviceSpec::Udp("10.99.0.1:4791".parse().unwrap()))
        );
        assert_eq!(
            "udp:127.0.0.1:4792".parse(),
            Ok(DeviceSpec::Udp("127.0.0.1:4792".parse().unwrap()))
        );
        assert_eq!(
            "udp:[::1]:9".parse(),
            Ok(DeviceSpec::Udp("[::1]:9".parse().unwrap()))
        );
        assert_eq!(
            "udp:::1".parse(),
            Ok(DeviceSpec::Udp("[::1]:4791".parse().unwrap()))
        );
        assert!(
            "udp:nowhere"
                .parse::<DeviceSpec>()
                .unwrap_err()
                .contains("udp:ADDR")
        );
        assert!("0000:3b:00".parse::<DeviceSpec>().is_err());
    }

    #[test]
    fn udp_port_0_is_refused_with_the_reason_and_the_fix() {
        for s in ["udp:127.0.33.1:0", "udp:[::1]:0"] {
            let e = s.parse::<DeviceSpec>().unwrap_err();
            assert!(e.contains("UDP port 0 cannot work"), "{e}");
            assert!(e.contains("same fixed port"), "{e}");
            assert!(e.contains(s), "{e}");
        }
        assert_eq!(
            "udp:127.0.33.1:33000".parse(),
            Ok(DeviceSpec::Udp("127.0.33.1:33000".parse().unwrap()))
        );
    }
}

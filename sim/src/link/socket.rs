//! The UDP link's sockets: the receiving socket bound to `ADDR:PORT`, and the sending sockets,
//! one per UDP source port (unconnected) or per source port and peer (`link::connected`).
//!
//! Owns: [`LinkError`] and the socket options: `IP_MTU_DISCOVER = IP_PMTUDISC_DO` on every
//! socket (DF set, and IPv4 ID 0 on an unconnected one, `include/net/ip.h`
//! `ip_select_ident`), `SO_REUSEADDR`/`SO_REUSEPORT` on sending sockets (two links on one host
//! may send from one source port; nobody sends to those ports), the receiving socket's buffer
//! and `UDP_GRO`; and the MTU lookups: the route's (`IP_MTU`, after an `EMSGSIZE`) and the
//! interface's (`SIOCGIFMTU`, for the device's port). Must not: send or read packets (`link::tx`, `link::rx` do), or choose the
//! socket a send leaves on (`UdpLink::tx_route`).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, setsockopt, socket, sockopt,
};

/// Why a link could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A socket could not be created, configured or bound.
    #[error(
        "UDP link: {what} for {addr} failed: {source}; use an address of this host (`ip addr`), and a port no other process holds (Linux rxe holds 4791 on every address: give another port, e.g. udp:ADDR:4792, to both peers)"
    )]
    Socket {
        /// What was being done.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The address cannot carry RoCEv2.
    #[error(
        "UDP link: {addr} cannot be a RoCE address ({why}); give the unicast address of an interface of this host"
    )]
    BadAddress {
        /// The address.
        addr: IpAddr,
        /// Why.
        why: &'static str,
    },
}

/// The receive buffer a link asks for: a window of 4 KiB packets as deep as a bandwidth
/// test keeps in flight (the kernel's default, ~200 KiB, drops a burst of 64 KiB WRITEs
/// and the transport has to go back N). `SO_RCVBUFFORCE` (CAP_NET_ADMIN) goes past
/// `net.core.rmem_max`; without it the kernel caps `SO_RCVBUF` there.
pub(super) const RCVBUF: usize = 32 << 20;

/// Sets `IP_MTU_DISCOVER` (or `IPV6_MTU_DISCOVER`) to "do": DF set, never fragment, and —
/// for IPv4 on an unconnected socket — IP ID 0, the header the peer's ICRC check expects (see
/// the module comment; a connected socket stamps its counter, `link::connected`).
pub(super) fn set_pmtudisc_do(fd: &impl AsRawFd, v6: bool) -> io::Result<()> {
    let (level, name, value) = if v6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    };
    let value: libc::c_int = value;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is an open socket for the duration of the call (borrowed from its owner);
    // the option value points at a live `c_int` and `len` is its size, as setsockopt(2) asks.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast::<libc::c_void>(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The MTU of the route to `to` (`IP_MTU` / `IPV6_MTU`, ip(7)): read on `fd` itself when it
/// is connected to `to`, else on a fresh socket connected to `to` (the option needs a
/// connected socket; connecting a UDP socket sends nothing, it only looks the route up).
/// `None` when the kernel does not say.
pub(super) fn route_mtu(fd: std::os::fd::RawFd, to: SocketAddr, connected: bool) -> Option<u32> {
    let (level, name) = if to.is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let probe;
    let fd = if connected {
        fd
    } else {
        let any: SocketAddr = if to.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        probe = std::net::UdpSocket::bind(any).ok()?;
        probe.connect(to).ok()?;
        probe.as_raw_fd()
    };
    let mut value: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).ok()?;
    // SAFETY: `fd` is an open socket for the call (the caller's, or `probe`, alive to the end
    // of this function); the option buffer is a live `c_int` and `len` its size, as
    // getsockopt(2) asks.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&raw mut value).cast::<libc::c_void>(),
            &raw mut len,
        )
    };
    if r == 0 {
        u32::try_from(value).ok().filter(|&m| m > 0)
    } else {
        None
    }
}

/// The MTU of the interface that holds `ip` (its address, or a subnet of it: 127.0.23.1 is
/// `lo`'s through 127.0.0.1/8), read with `SIOCGIFMTU` (netdevice(7)) in this thread's
/// network namespace. `None` for an unspecified address or one no interface holds.
pub(super) fn interface_mtu(ip: IpAddr) -> Option<u32> {
    if ip.is_unspecified() {
        return None;
    }
    let within =
        |a: &nix::sys::socket::SockaddrStorage, m: &nix::sys::socket::SockaddrStorage| match (
            ip,
            a.as_sockaddr_in(),
            m.as_sockaddr_in(),
        ) {
            (IpAddr::V4(v4), Some(a), Some(m)) => {
                let (x, a, m) = (u32::from(v4), u32::from(a.ip()), u32::from(m.ip()));
                x & m == a & m
            }
            _ => match (ip, a.as_sockaddr_in6()) {
                (IpAddr::V6(v6), Some(a)) => a.ip() == v6,
                _ => false,
            },
        };
    let name = nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let (a, m) = (ifa.address.as_ref()?, ifa.netmask.as_ref()?);
        within(a, m).then_some(ifa.interface_name)
    })?;
    let probe = UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, &b) in req.ifr_name.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    // SAFETY: `probe` is an open socket for the call; SIOCGIFMTU reads `ifr_name` (NUL
    // terminated: the name is shorter than the array, which was zeroed) and writes
    // `ifr_ifru.ifru_mtu` of the live `req`.
    let r = unsafe { libc::ioctl(probe.as_raw_fd(), libc::SIOCGIFMTU, &raw mut req) };
    if r != 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).ok().filter(|&m| m > 0)
}

/// A non-blocking UDP socket bound to `addr` with `IP_PMTUDISC_DO`; `shared` adds
/// `SO_REUSEADDR`/`SO_REUSEPORT` (sending sockets: two links on one host may send from the
/// same source port; nobody sends to those ports).
pub(super) fn udp_socket(addr: SocketAddr, shared: bool) -> Result<UdpSocket, LinkError> {
    let err = |what| {
        move |e: nix::Error| LinkError::Socket {
            what,
            addr,
            source: io::Error::from(e),
        }
    };
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd: OwnedFd = socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(err("creating a UDP socket"))?;
    if shared {
        setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(err("setting SO_REUSEADDR"))?;
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(err("setting SO_REUSEPORT"))?;
    }
    set_pmtudisc_do(&fd, addr.is_ipv6()).map_err(|source| LinkError::Socket {
        what: "setting IP_MTU_DISCOVER = IP_PMTUDISC_DO",
        addr,
        source,
    })?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).map_err(err("binding"))?;
    Ok(UdpSocket::from(fd))
}

/// The receiving socket of a link bound to `local`, with a receive buffer of [`RCVBUF`]
/// (best effort: a smaller one only costs retransmissions under bursts), and whether
/// `UDP_GRO` is on (best effort: without it, kernels before 5.0, every datagram is read
/// alone).
pub(super) fn receiving_socket(local: SocketAddr) -> Result<(UdpSocket, bool), LinkError> {
    let rx = udp_socket(local, false)?;
    if setsockopt(&rx, sockopt::RcvBufForce, &RCVBUF).is_err() {
        let _ = setsockopt(&rx, sockopt::RcvBuf, &RCVBUF);
    }
    let gro = setsockopt(&rx, sockopt::UdpGroSegment, &true).is_ok();
    Ok((rx, gro))
}

/// A link's sending socket bound to `local` (shared: see [`udp_socket`]).
pub(crate) fn sending_socket(local: SocketAddr) -> Result<UdpSocket, LinkError> {
    udp_socket(local, true)
}

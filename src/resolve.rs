//! The HOST argument of the two-process commands (`pingpong HOST`, `perf … HOST`): resolved
//! once where it enters, so that a name that does not resolve is reported by that name.
//!
//! Owns: [`resolve`] and [`ResolveError`]. Must not connect or exchange anything: the
//! out-of-band exchange (`bypass_verbs::exchange`) does, given the resolved addresses.
//!
//! Sources: `std::net::ToSocketAddrs` (getaddrinfo(3) for names); rdma-core's
//! `ibv_rc_pingpong` resolves its servername with getaddrinfo and reports the name and
//! `gai_strerror` on failure (`pp_client_exch_dest`), which the message here follows.

use std::net::{SocketAddr, ToSocketAddrs};

/// A HOST that names no address.
#[derive(Debug, thiserror::Error)]
#[error(
    "HOST {host:?} does not resolve ({cause}): give the server's IP address (e.g. 192.0.2.1) or a name that DNS or /etc/hosts knows; the TCP port is -p ({port})"
)]
pub struct ResolveError {
    /// The HOST given.
    pub host: String,
    /// The TCP port it was resolved with.
    pub port: u16,
    /// The resolver's answer.
    pub cause: String,
}

/// The socket addresses of `host` at TCP `port` (an IP address, or a name the resolver
/// knows; IPv6 literals without brackets).
pub fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let fail = |cause: String| ResolveError {
        host: host.to_owned(),
        port,
        cause,
    };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(fail("no address for it".into()));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_and_bad_names_are_named() {
        let a = resolve("127.0.31.1", 31001).unwrap();
        assert_eq!(a, vec!["127.0.31.1:31001".parse().unwrap()]);
        // `.invalid` never resolves (RFC 6761 §6.4).
        let e = resolve("no-such-host.invalid", 31001).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"no-such-host.invalid\""), "{text}");
        assert!(text.contains("-p (31001)"), "{text}");
        assert!(!text.contains("host:port"), "{text}");
    }
}

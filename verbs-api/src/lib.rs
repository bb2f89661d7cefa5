//! # bypass-verbs: the safe application API of bypass
//!
//! `Context`, `Pd`, `Mr`, `MemoryPool`, `Cq` and `Qp` on top of `bypass-driver`, plus the
//! endpoints two peers exchange ([`QpEndpoint`], [`RemoteBuffer`]) and a TCP out-of-band
//! exchange ([`exchange`]).
//!
//! Owns: the public API and its soundness rules. Must not: format WQEs or CQEs itself (the
//! driver does), or touch the device except through the driver.

pub use bypass_driver as driver;

pub mod endpoint;
pub mod exchange;

pub use endpoint::{EndpointParseError, Gid, Mtu, QpEndpoint, RemoteBuffer};
pub use exchange::{ExchangeError, ExchangeServer, PeerInfo};

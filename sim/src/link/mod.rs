//! Links that carry a device's packets outside the stepped [`crate::World`].
//!
//! Owns: the link modules. Today [`udp`]: a device whose wire is a real UDP socket (RoCEv2 on
//! port 4791, interoperable with Linux rxe), and [`ipv4_id`], which recovers the IPv4 ID rxe
//! hashes into the ICRC, `connected`, the sending sockets connected to a peer and the IPv4
//! IDs they stamp, and [`floor`], the socket calls' share of a link's round trip
//! (measured by `bypass perf compare-udp`); `gather`, the WRITE packets the UDP link sends
//! straight from the sender's memory (`sendmsg` iovecs), `train_ids`, the ICRC
//! differences of the IDs a segmented send's segments leave with, `psn_deltas`, those of
//! the PSNs of a burst's middle packets, `rx_mode`, whether the receiving socket is read with
//! `UDP_GRO` or plain (the headers written in front of received packets
//! are kept by `crate::header_cache`). Must not: change what a device sends; a link only
//! moves the bytes.

pub(crate) mod connected;
pub mod floor;
pub(crate) mod gather;
pub mod ipv4_id;
mod psn_deltas;
mod rx_mode;
mod train_ids;
pub mod udp;

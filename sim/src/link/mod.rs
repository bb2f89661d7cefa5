//! Links that carry a device's packets outside the stepped [`crate::World`].
//!
//! Owns: the link modules. [`udp`]: a device whose wire is a real UDP socket (RoCEv2 on port
//! 4791, interoperable with Linux rxe), along its seams: `socket` (binding and options),
//! `connected` (sending sockets connected to a peer, and the IPv4 IDs they stamp), `rx`
//! (reads, `UDP_GRO`, delivery in place; `rx_mode`, whether reads are `UDP_GRO` or plain),
//! `tx` (trains, batches, routes), `sendmsg` (the `sendmsg`/`sendmmsg` calls), `gather` (WRITE
//! packets sent straight from the sender's memory), `stamp` (headers and IPv4 IDs against
//! the ICRC), [`ipv4_id`] (the ID rxe hashes into the ICRC, solved), `train_ids` and
//! `psn_deltas` (ICRC differences of a train's IDs and a burst's PSNs), `counters`; and
//! [`floor`], the socket calls' share of a link's round trip; [`rule`], the packet rules
//! every link applies, the world's included. Must not: change what a
//! device sends (a link only moves the bytes), or know the world (the fabric's pump drives
//! it, `fabric/udp/pump.rs`).

pub(crate) mod connected;
mod counters;
pub mod floor;
pub(crate) mod gather;
pub mod ipv4_id;
mod psn_deltas;
pub mod rule;
mod rx;
mod rx_mode;
mod sendmsg;
mod socket;
mod stamp;
mod train_ids;
mod tx;
pub mod udp;

//! Links that carry a device's packets outside the stepped [`crate::World`].
//!
//! Owns: the link modules. Today [`udp`]: a device whose wire is a real UDP socket (RoCEv2 on
//! port 4791, interoperable with Linux rxe). Must not: change what a device sends; a link only
//! moves the bytes.

pub mod udp;

//! The UDP fabric: one sim device whose wire is a real UDP socket ([`UdpWire`], the pump in
//! `fabric/udp/pump.rs`).
//!
//! Owns: [`SimFabric::udp`] and how the fabric's threads share the wire: a doorbell is acted on
//! in the thread that rang it (the device steps and its packets are sent before the MMIO write
//! returns), [`Backend::progress`](bypass_seam::Backend::progress) runs a pump round in the
//! caller's thread (driver wait loops and the `bypass` busy-poll loops call it), and the
//! engine thread runs timers, and the link whenever no application thread pumps it. Must not:
//! touch sockets or packets itself (the sim's link does), or change how the in-process
//! fabrics run.

use std::sync::Arc;

use crate::link::udp::{LinkError, UdpLink};
use crate::world::World;

use super::{FabricOptions, SimFabric};
use pump::{Pumper, UdpWire};

pub(super) mod pump;

impl SimFabric {
    /// A threaded fabric whose wire is a UDP socket: doorbells are acted on in the thread
    /// that rings them, `progress()` pumps the link in the caller's thread, and an engine
    /// thread runs timers (and everything when nobody pumps). Add the device with
    /// `link.profile()` (its GID is the link's address) before moving the link in.
    pub fn udp(seed: u64, link: UdpLink) -> Result<Self, LinkError> {
        let wire = Arc::new(UdpWire::new(link)?);
        let engine_wire = wire.clone();
        Ok(Self::with_engine(
            seed,
            FabricOptions::default(),
            Some(wire),
            move |world, stop, _start| engine_wire.run_engine(world, stop),
        ))
    }

    /// One pump round of a UDP fabric in the caller's thread; false (nothing done) on other
    /// fabrics.
    pub(super) fn pump(&self, by: Pumper) -> bool {
        self.inner
            .wire
            .as_ref()
            .is_some_and(|w| w.pump(&self.inner.world, by))
    }

    /// A UDP fabric's MMIO write `write` to the world, and the doorbell round it rings (when it
    /// says a doorbell is pending) in the caller's thread, under one world lock
    /// ([`UdpWire::ring`]); `None` (nothing done) on other fabrics.
    pub(super) fn ring<R>(&self, write: impl FnOnce(&mut World) -> (R, bool)) -> Option<R> {
        let wire = self.inner.wire.as_ref()?;
        Some(wire.ring(&self.inner.world, write))
    }
}

//! Opening the device a command runs on, from `-d/--device`.
//!
//! Owns: the mapping from a [`DeviceSpec`] to an open driver object (devices on an in-process
//! sim fabric, or one sim NIC on a UDP link) and the error a user sees when a backend is not
//! available. Must not print, and must not know what a command does with the device.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bypass_driver::backend::Backend;
use bypass_driver::backend::vfio::{VfioBackend, VfioError};
use bypass_driver::{DriverError, Hca};
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;
use bypass_sim::link::udp::{LinkCounters, LinkError, UdpLink};
use bypass_verbs::Context;

use crate::args::DeviceSpec;

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The VFIO device could not be opened (not bound to vfio-pci, IOMMU group, memlock, ...).
    #[error(transparent)]
    Vfio(#[from] VfioError),
    /// The driver failed to add or bring up the device.
    #[error("opening {device}: {source}")]
    Driver {
        /// The device being opened.
        device: String,
        /// What the driver reported.
        #[source]
        source: DriverError,
    },
    /// The verbs layer failed to open the device.
    #[error("opening {device}: {source}")]
    Verbs {
        /// The device being opened.
        device: String,
        /// What the verbs layer reported.
        #[source]
        source: bypass_verbs::VerbsError,
    },
    /// The UDP link could not be set up.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The pcap file could not be created.
    #[error("could not create the pcap file {path}: {source}")]
    Pcap {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The command runs both of its endpoints in this process, which one UDP NIC cannot do.
    #[error(
        "{command} runs both endpoints in one process on -d sim; -d {device} is one NIC: to talk to a peer run `bypass pingpong -d {device}` (or `bypass perf write-lat -d {device} [HOST]`) on both sides"
    )]
    InProcessOnly {
        /// The command.
        command: &'static str,
        /// The device given.
        device: String,
    },
    /// The command talks to a peer in another process, which `-d sim` cannot reach.
    #[error(
        "{command} talks to a peer process over the network, and -d {device} is in-process only: give -d udp:ADDR[:PORT] (a simulated NIC on a UDP socket bound to ADDR, e.g. -d udp:127.0.0.1 on one side and -d udp:127.0.0.2 on the other)"
    )]
    NeedsNetwork {
        /// The command.
        command: &'static str,
        /// The device given.
        device: String,
    },
}

/// Opens one device of `spec` for control-path use (`devinfo`). A sim device lives on its own
/// stepped fabric (deterministic; `seed` seeds it), which the returned `Hca` keeps alive; a
/// UDP device on its own UDP fabric.
pub fn open_hca(spec: &DeviceSpec, seed: u64) -> Result<Hca, DeviceError> {
    let driver = |source| DeviceError::Driver {
        device: spec.to_string(),
        source,
    };
    match spec {
        DeviceSpec::Vfio(addr) => {
            let backend = VfioBackend::open(addr)?;
            Hca::open(backend as Arc<dyn Backend>).map_err(driver)
        }
        DeviceSpec::Sim => {
            let fabric = SimFabric::stepped(seed);
            let backend = fabric
                .add_device(Profile::with_id(1))
                .map_err(|e| driver(e.into()))?;
            Hca::open(backend as Arc<_>).map_err(driver)
        }
        DeviceSpec::Udp(addr) => {
            let link = UdpLink::bind(*addr)?;
            let profile = link.profile();
            let fabric = SimFabric::udp(seed, link)?;
            let backend = fabric.add_device(profile).map_err(|e| driver(e.into()))?;
            Hca::open(backend as Arc<_>).map_err(driver)
        }
    }
}

/// One simulated NIC whose wire is a UDP socket, opened.
pub struct NetDevice {
    /// The open device.
    pub ctx: Arc<Context>,
    /// The address its UDP link is bound to (GID index 0); `None` for a real NIC.
    pub addr: Option<SocketAddr>,
    /// What its UDP link did; `None` for a real NIC.
    pub link: Option<Arc<LinkCounters>>,
}

impl NetDevice {
    /// `link ADDR: counters` for a NIC on a UDP link, `None` for a real NIC. The link's
    /// own counters see datagrams, not their ICRC (the NIC checks it and drops a bad one),
    /// so the port's `rx_icrc_errors` follows them: a corrupted packet is counted where
    /// a user looks for drops.
    pub fn link_summary(&self) -> Option<String> {
        let (addr, link) = (self.addr?, self.link.as_ref()?);
        let icrc = crate::stats_view::sim_counters(&self.ctx)
            .map_or(0, |snap| snap.port_counters.rx_icrc_errors);
        Some(format!(
            "link {addr}: {}, port rx_icrc_errors {icrc}",
            link.summary()
        ))
    }
}

/// Opens the one device of a command that talks to a peer process (`pingpong`, the
/// server/client forms of `perf`): `-d udp:ADDR[:PORT]`.
/// `pcap`: record every packet the link sends and receives there.
pub fn open_net(
    spec: &DeviceSpec,
    seed: u64,
    command: &'static str,
    pcap: Option<&Path>,
) -> Result<NetDevice, DeviceError> {
    match spec {
        DeviceSpec::Vfio(addr) => {
            // A real NIC: its wire is its own port; no link counters to report.
            let backend = VfioBackend::open(addr)?;
            let ctx =
                Context::new(backend as Arc<dyn Backend>).map_err(|source| DeviceError::Verbs {
                    device: spec.to_string(),
                    source,
                })?;
            Ok(NetDevice {
                ctx,
                addr: None,
                link: None,
            })
        }
        DeviceSpec::Sim => Err(DeviceError::NeedsNetwork {
            command,
            device: spec.to_string(),
        }),
        DeviceSpec::Udp(addr) => {
            let mut link = UdpLink::bind(*addr)?;
            if let Some(path) = pcap {
                link.record_pcap(path).map_err(|source| DeviceError::Pcap {
                    path: path.display().to_string(),
                    source,
                })?;
            }
            let bound = link.local_addr();
            let counters = link.counters();
            let profile = link.profile();
            let fabric = SimFabric::udp(seed, link)?;
            let backend = fabric
                .add_device(profile)
                .map_err(|source| DeviceError::Driver {
                    device: spec.to_string(),
                    source: source.into(),
                })?;
            let ctx = Context::new(backend).map_err(|source| DeviceError::Verbs {
                device: spec.to_string(),
                source,
            })?;
            Ok(NetDevice {
                ctx,
                addr: Some(bound),
                link: Some(counters),
            })
        }
    }
}

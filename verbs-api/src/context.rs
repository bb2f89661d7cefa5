//! The device context: an open HCA (the driver's [`Hca`]) shared by every object made from
//! it, its ports and GIDs.
//!
//! Owns: [`Context`]. Must not: create device objects other than through the driver, know
//! which backend is behind it (simulated NICs are opened by `bypass-testbed`), or keep global
//! state (every object holds an `Arc<Context>` instead).
//!
//! One device, many users: as libibverbs lets a process `ibv_open_device` one device several
//! times (each context with its own PDs, CQs and QPs on the device the kernel brought up once),
//! [`Context::open_sibling`] / [`Context::with_hca`] open another context on an HCA that is
//! up already. The contexts share the brought-up function (its command queue, EQs, firmware
//! pages and the UAR page of 8-byte doorbells; a QP with BlueFlame has a UAR page of its own);
//! everything made from one context is its alone. The HCA is torn down when the last context
//! and the last object made from any of them are gone (each holds an `Arc` of it). Without
//! globals there is no registry of open devices: a second `Context::new` on the same backend
//! would bring the function up again, so share the first context's HCA instead.

use std::sync::Arc;

use crate::driver::async_events::AsyncEvents;
use crate::driver::backend::{Backend, Progress};
use crate::driver::cmdq::CmdStats;
use crate::driver::comp_channel::CompletionChannel;
use crate::driver::{Caps, DeviceInfo, Hca, Port};
use crate::endpoint::{Gid, Mtu};
use crate::error::VerbsError;
use crate::pd::Pd;

/// An open device. Cheap to share (`Arc<Context>`); the device is torn down (every firmware
/// page returned) when the last object made from it is dropped.
#[derive(Debug)]
pub struct Context {
    hca: Arc<Hca>,
}

impl Context {
    /// Opens the device behind `backend` (brings it up: command queue, pages, EQs, UAR): a
    /// VFIO device, or a simulated NIC (`bypass-testbed`'s `SimContext` does this for one).
    pub fn new(backend: Arc<dyn Backend>) -> Result<Arc<Self>, VerbsError> {
        Ok(Arc::new(Context {
            hca: Arc::new(Hca::open(backend)?),
        }))
    }

    /// Another context on this context's device, sharing its brought-up HCA (see the module
    /// doc): its own PDs, CQs and QPs; this context may be dropped first.
    ///
    /// ```
    /// use bypass_testbed::SimContext;
    /// use bypass_verbs::Context;
    /// let pair = Context::sim_pair(1)?;
    /// let second = pair.a.open_sibling();
    /// assert!(pair.a.same_device(&second));
    /// assert_eq!(second.gid(1)?, pair.a.gid(1)?);
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn open_sibling(&self) -> Arc<Self> {
        Self::with_hca(self.hca.clone())
    }

    /// A context on an HCA brought up already (`Hca::open`), shared with whoever else holds
    /// it.
    pub fn with_hca(hca: Arc<Hca>) -> Arc<Self> {
        Arc::new(Context { hca })
    }

    /// The driver's device (research access: driver-level PDs, CQs and QPs beside the verbs
    /// objects).
    ///
    /// Safe to hand out: what on it reaches raw addresses is `unsafe` with its contract
    /// ([`Hca::cmd`], [`Hca::backend`], [`crate::driver::dma::DmaMapper::backend`]), and
    /// posting on a driver QP is `unsafe` too. For what applications read, prefer the narrow
    /// accessors: [`Context::caps`], [`Context::same_device`], [`Context::cmd_stats`],
    /// [`Context::dbrec_pages`], [`Context::free_iova_bytes`], [`Context::caller_extents`].
    pub fn hca(&self) -> &Arc<Hca> {
        &self.hca
    }

    /// The device's capabilities in force (limits such as `max_cqe`, `log_max_qp`,
    /// `max_inline_data`).
    pub fn caps(&self) -> &Caps {
        self.hca.caps()
    }

    /// True when `other` is a context on the same brought-up device as this one
    /// ([`Context::open_sibling`], [`Context::with_hca`]).
    pub fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.hca, &other.hca)
    }

    /// The device's command counters (commands run, completed by polling or by event, failed).
    pub fn cmd_stats(&self) -> CmdStats {
        self.hca.cmd_stats()
    }

    /// Pages of doorbell records the device holds now (64 records a page; freed with their
    /// last record).
    pub fn dbrec_pages(&self) -> usize {
        self.hca.dbrecs().pages()
    }

    /// IOVA bytes still free for DMA mappings on the device.
    pub fn free_iova_bytes(&self) -> u64 {
        self.hca.dma().free_iova_bytes()
    }

    /// The application-memory extents mapped for the device now, as `(host address, bytes,
    /// IOVA, users)` (an extent is unmapped with its last registration).
    pub fn caller_extents(&self) -> Vec<(u64, u64, u64, u32)> {
        self.hca.dma().caller_extents()
    }

    /// A summary of the device (`ibv_devinfo`).
    pub fn device_info(&self) -> DeviceInfo {
        self.hca.device_info()
    }

    /// The ports (index 0 is port 1).
    pub fn ports(&self) -> &[Port] {
        self.hca.ports()
    }

    /// Port `num` (1-based).
    pub fn port(&self, num: u8) -> Option<&Port> {
        self.hca.port(num)
    }

    /// GID index 0 of port `num` (RoCEv2: the port's IP address).
    pub fn gid(&self, port: u8) -> Result<Gid, VerbsError> {
        self.port(port)
            .and_then(|p| p.valid_gids().next().map(|(_, g)| Gid(*g)))
            .ok_or(VerbsError::PortUnusable {
                port,
                what: "GID at index 0",
            })
    }

    /// The Ethernet (netdev) MTU of port `num` in bytes, as the NIC vport reports it at
    /// bring-up (`mlx5_query_nic_vport_mtu`, less the 22 L2 bytes).
    pub fn eth_mtu(&self, port: u8) -> Result<u32, VerbsError> {
        self.port(port)
            .map(|p| p.eth_mtu())
            .ok_or(VerbsError::PortUnusable {
                port,
                what: "Ethernet MTU",
            })
    }

    /// The active path MTU of port `num` (the largest IB MTU its Ethernet MTU carries).
    pub fn active_mtu(&self, port: u8) -> Result<Mtu, VerbsError> {
        self.port(port)
            .and_then(|p| Mtu::from_bytes(p.active_mtu()))
            .ok_or(VerbsError::PortUnusable {
                port,
                what: "active MTU",
            })
    }

    /// Lets the device move: a stepped sim runs its world until idle; hardware and threaded
    /// sims ignore it. Waits ([`crate::Cq::wait`]) call it; a busy-polling loop on a stepped sim
    /// must call it too.
    pub fn progress(&self) -> Progress {
        self.hca.progress()
    }

    /// The device's congestion control (RoCE ECN / DCQCN): status per node and priority,
    /// parameters, counters (see [`crate::congestion`]).
    ///
    /// ```
    /// use bypass_testbed::SimContext;
    /// use bypass_verbs::Context;
    /// use bypass_verbs::congestion::CongNode;
    /// let pair = Context::sim_pair(1)?;
    /// pair.a.congestion().set_enabled(CongNode::Rp, 3, true)?;
    /// assert!(pair.a.congestion().enabled(CongNode::Rp, 3)?);
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn congestion(&self) -> crate::congestion::Congestion<'_> {
        crate::congestion::Congestion::new(&self.hca)
    }

    /// Pages lent to the firmware now.
    pub fn firmware_pages(&self) -> usize {
        self.hca.firmware_pages()
    }

    /// Completion vectors (`ibv_context.num_comp_vectors`): one completion EQ and MSI-X
    /// vector each; pick one per CQ with [`crate::Cq::with_channel`].
    pub fn num_comp_vectors(&self) -> u32 {
        self.hca.num_comp_vectors()
    }

    /// A new completion channel (`ibv_create_comp_channel`): its fd goes in epoll, CQs made
    /// on it report there.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, VerbsError> {
        Ok(CompletionChannel::new(&self.hca)?)
    }

    /// The context's async-event channel (`ibv_context.async_fd`, `ibv_get_async_event`):
    /// every call returns a handle to the same one.
    pub fn async_events(&self) -> Result<AsyncEvents, VerbsError> {
        Ok(AsyncEvents::new(&self.hca)?)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Pd, VerbsError> {
        Pd::alloc(self)
    }
}

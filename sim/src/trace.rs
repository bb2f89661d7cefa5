//! What the device did, in order: commands, doorbells, WQEs, CQEs, EQEs, packets, faults.
//!
//! Owns: [`TraceEvent`] and [`Trace`], an optional in-memory log. Two runs of a stepped world
//! with the same seed produce equal traces (the determinism test compares them). Must not:
//! change behaviour: tracing on or off, the device does the same thing.

/// One thing the device did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// The driver wrote a register (BAR0 offset, bytes as on the bus).
    MmioWrite {
        /// Device time, ns.
        at: u64,
        /// BAR0 offset.
        offset: u64,
        /// Bytes written.
        data: Vec<u8>,
    },
    /// An MMIO access the device refused (bad width, outside BAR0, unallocated UAR page...).
    MmioRejected {
        /// Device time, ns.
        at: u64,
        /// BAR0 offset.
        offset: u64,
        /// Access width.
        width: usize,
        /// Why.
        why: &'static str,
    },
    /// A firmware command completed.
    Command {
        /// Device time, ns.
        at: u64,
        /// Command queue slot.
        slot: u8,
        /// Opcode.
        opcode: u16,
        /// Opcode modifier.
        op_mod: u16,
        /// Delivery status (entry `status_own` bits 7:1); 0 when delivered.
        delivery: u8,
        /// Command status (`mbox_out.status`).
        status: u8,
        /// Syndrome.
        syndrome: u32,
    },
    /// A WQE was fetched and executed.
    Wqe {
        /// Device time, ns.
        at: u64,
        /// QP number.
        qpn: u32,
        /// WQE bytes (ctrl segment onwards).
        bytes: Vec<u8>,
    },
    /// A CQE was written.
    Cqe {
        /// Device time, ns.
        at: u64,
        /// CQ number.
        cqn: u32,
        /// CQE bytes.
        bytes: Vec<u8>,
    },
    /// An EQE was written.
    Eqe {
        /// Device time, ns.
        at: u64,
        /// EQ number.
        eqn: u32,
        /// EQE bytes.
        bytes: Vec<u8>,
    },
    /// An interrupt was raised on an MSI-X vector.
    Interrupt {
        /// Device time, ns.
        at: u64,
        /// Vector.
        vector: u16,
    },
    /// A packet left the device (`tx`) or arrived (`!tx`).
    Packet {
        /// Device time, ns.
        at: u64,
        /// Direction.
        tx: bool,
        /// The packet from its IP header through the ICRC.
        bytes: Vec<u8>,
    },
    /// A QP changed state.
    QpState {
        /// Device time, ns.
        at: u64,
        /// QP number.
        qpn: u32,
        /// Old state.
        from: u8,
        /// New state.
        to: u8,
    },
    /// A DMA the IOMMU refused.
    DmaFault {
        /// Device time, ns.
        at: u64,
        /// IOVA.
        iova: u64,
        /// Length.
        len: usize,
        /// Device write (true) or read.
        write: bool,
    },
}

/// An optional log of [`TraceEvent`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    enabled: bool,
    events: Vec<TraceEvent>,
}

impl Trace {
    /// Starts (or stops) recording.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// True while recording.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records `make()` if enabled (the closure is not run otherwise, so a disabled trace
    /// costs no allocation).
    #[inline]
    pub fn record(&mut self, make: impl FnOnce() -> TraceEvent) {
        if self.enabled {
            self.events.push(make());
        }
    }

    /// Everything recorded so far.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Opcodes of the recorded commands that were delivered and completed with status OK, in
    /// order (what a driver's bring-up or teardown sequence actually did).
    pub fn ok_commands(&self) -> Vec<u16> {
        self.events
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Command {
                    opcode,
                    status: 0,
                    delivery: 0,
                    ..
                } => Some(*opcode),
                _ => None,
            })
            .collect()
    }

    /// Takes the recorded events, leaving the log empty.
    pub fn take(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.events)
    }
}

//! The device: a thin owner of its parts, and the host's view of it.
//!
//! Owns: [`Device`] and the parts it holds: BAR0 (`bar0`: init segment, UAR decode, latched
//! doorbells), the firmware (`firmware`), the object tables (`objects`), the IOMMU
//! (`iommu`), the transport engine's device-wide state (`transport::state`), the
//! completions and events (`events`), the counters and the trace. It lends each piece of
//! work the parts it needs: a step its doorbells and frames ([`Device::step`]), the
//! firmware an `Hca` per command doorbell, the data path a `DataPath`, and it counts and
//! traces every MMIO access BAR0 refuses. Its port drops what it would send larger than the
//! port's Ethernet MTU (`crate::mtu` decides, the device counts `tx_mtu_drops`). Must not: decode registers, run commands or
//! packets itself (the parts do).
//!
//! Work a doorbell asks for happens in [`Device::step`], never inside the MMIO write, as on
//! hardware: the write only reaches the device.
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.c` (the bring-up polling of `initializing`,
//! `cmd_dbell`), the kernel's `include/linux/mlx5/device.h` (`health_buffer`).

use bypass_hw::init_seg::{self as iseg, NicInterface};

use crate::bar0::{Bar0, Doorbell, Written};
use crate::cong::Cong;
use crate::counters::Counters;
use crate::events::Completions;
use crate::firmware::{Firmware, Hca, Stage};
use crate::frame::Frame;
use crate::io::Io;
use crate::iommu::Iommu;
use crate::objects::Objects;
use crate::profile::Profile;
use crate::trace::{Trace, TraceEvent};
use crate::transport::state::{DataPath, Transport};

pub use crate::bar0::MmioError;
pub use crate::snapshot::DeviceSnapshot;

/// A simulated mlx5 device: the owner of its parts.
pub struct Device {
    pub(crate) profile: Profile,
    /// DMA: every device access to host memory goes through it.
    pub(crate) iommu: Iommu,
    /// BAR0: the init segment, UAR decode, latched doorbells.
    pub(crate) bar: Bar0,
    /// Firmware state: bring-up stage, pages.
    pub(crate) fw: Firmware,
    /// Object tables.
    pub(crate) objs: Objects,
    /// The transport engine's device-wide state.
    pub(crate) tp: Transport,
    /// Completions and events: the CQs, EQs and MSI-X interrupts.
    pub(crate) comp: Completions,
    /// Congestion control: the NP's and RP's status, parameters and counters.
    pub(crate) cong: Cong,
    /// Device time in nanoseconds (virtual in stepped mode).
    pub(crate) now: u64,
    /// Device-wide counters.
    pub counters: Counters,
    /// The optional trace.
    pub trace: Trace,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("now", &self.now)
            .field("iommu", &self.iommu)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// A device fresh from reset: firmware initializing, no command queue, nothing allocated.
    pub fn new(profile: Profile) -> Self {
        Self {
            bar: Bar0::new(&profile),
            fw: Firmware::new(&profile),
            objs: Objects::new(&profile.caps, profile.first_uar, profile.uar_pages),
            comp: Completions::new(&profile.caps, usize::from(profile.msix_vectors)),
            profile,
            iommu: Iommu::new(),
            tp: Transport::default(),
            cong: Cong::default(),
            now: 0,
            counters: Counters::default(),
            trace: Trace::default(),
        }
    }

    /// The device's profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The IOMMU in front of the device: the host maps its DMA memory here.
    pub fn iommu(&mut self) -> &mut Iommu {
        &mut self.iommu
    }

    /// BAR0's size.
    pub fn bar0_len(&self) -> u64 {
        self.profile.bar0_len()
    }

    /// Installs the interrupt handler: called with the MSI-X vector each time the device
    /// raises an interrupt (the VFIO backend's eventfd write, or a test's recorder).
    pub fn set_interrupt_handler(&mut self, handler: impl FnMut(u16) + Send + 'static) {
        self.comp.set_handler(handler);
    }

    /// Interrupts raised so far on `vector`.
    pub fn interrupts(&self, vector: u16) -> u64 {
        self.comp.raised(vector)
    }

    /// Moves QP `qpn` to `to`, tracing the change; entering ERR flushes both its queues.
    #[cfg(test)]
    pub(crate) fn set_qp_state(&mut self, qpn: u32, to: bypass_hw::cmd::qp::QpState) {
        self.data_path().set_qp_state(qpn, to);
    }

    /// The parts a command works on, lent to the firmware for one command doorbell.
    pub(crate) fn hca(&mut self) -> Hca<'_> {
        let (dp, fw, bar) = self.parts();
        hca_of(dp, fw, bar.cmdq_addr())
    }

    /// UAR pages allocated (ALLOC_UAR, not yet DEALLOC_UAR).
    pub fn uar_pages_allocated(&self) -> usize {
        self.objs.uars.len()
    }

    /// The numbers of every live QP, in ascending order (with [`Device::qp_counters`], the
    /// per-QP view `rdma statistic qp show` lists).
    pub fn live_qpns(&self) -> Vec<u32> {
        self.objs.qps.iter().map(|(qpn, _)| qpn).collect()
    }

    /// The firmware's bring-up stage.
    pub fn firmware_stage(&self) -> Stage {
        self.fw.stage
    }

    /// Pages the firmware holds (given by MANAGE_PAGES and not yet taken back).
    pub fn firmware_pages(&self) -> usize {
        self.fw.pages.len()
    }

    /// Test hook: the firmware asks for `n` more pages (positive) or offers `-n` back
    /// (negative), as firmware does at run time. Posts a PAGE_REQUEST event (function 0,
    /// signed count; kernel `struct mlx5_eqe_page_req`) to the EQ that subscribed to it and
    /// makes QUERY_PAGES REGULAR report the count until the driver gives or takes the pages.
    /// Ignored unless the HCA is initialized.
    pub fn request_pages(&mut self, n: i32) {
        let Hca {
            fw, comp, mut io, ..
        } = self.hca();
        crate::firmware::pages::request_pages(fw, comp, &mut io, n);
    }

    /// Test hook: port `port`'s link goes down (`up == false`) or comes back, as a pulled
    /// cable or a peer going away does; the firmware reports the port's new state and raises
    /// PORT_CHANGE (DOWN / ACTIVE). Returns false for an unknown port or no change.
    pub fn set_port_link(&mut self, port: u8, up: bool) -> bool {
        let Hca {
            fw, comp, mut io, ..
        } = self.hca();
        crate::firmware::vport::set_link(fw, comp, &mut io, port, up)
    }

    /// Sets port `port`'s Ethernet MTU (bytes, 68..=9000; clamped into that range), as
    /// `ip link set dev X mtu N` does on a host: the firmware reports it (plus 22 L2 bytes)
    /// as the NIC vport's `mtu`, a driver brought up after this derives the active RoCE MTU
    /// from it, and the port drops a packet it would send that is larger (counted in
    /// `tx_mtu_drops`). Returns false for an unknown port. The sim's function has one NIC
    /// vport: every port shares its MTU.
    pub fn set_port_mtu(&mut self, port: u8, mtu: u32) -> bool {
        let Some(p) = usize::from(port)
            .checked_sub(1)
            .and_then(|i| self.profile.ports.get_mut(i))
        else {
            return false;
        };
        self.fw.nic_mtu = crate::firmware::vport::nic_mtu_of(mtu);
        p.eth_mtu = crate::firmware::vport::eth_mtu_of(self.fw.nic_mtu);
        true
    }

    /// Port `port`'s Ethernet MTU in bytes (the NIC vport's `mtu` less 22 L2 bytes), or
    /// `None` for an unknown port.
    pub fn port_mtu(&self, port: u8) -> Option<u32> {
        let i = usize::from(port).checked_sub(1)?;
        self.profile.ports.get(i)?;
        Some(crate::firmware::vport::eth_mtu_of(self.fw.nic_mtu))
    }

    /// Research view: the IOVAs of QP `qpn`'s work queue pages (RQ then SQ), as CREATE_QP
    /// gave them, or `None` for no such QP.
    pub fn qp_wq_pages(&self, qpn: u32) -> Option<Vec<u64>> {
        self.objs.qps.get(qpn).map(|qp| qp.wq.pages().to_vec())
    }

    /// The path MTU of QP `qpn` in bytes (0 before INIT2RTR), or `None` for no such QP.
    pub fn qp_path_mtu(&self, qpn: u32) -> Option<u32> {
        self.objs.qps.get(qpn).map(|qp| qp.attrs.mtu)
    }

    /// The counters of QP `qpn` (what `rdma statistic qp` shows), or `None` for no such QP.
    pub fn qp_counters(&self, qpn: u32) -> Option<Counters> {
        self.objs.qps.get(qpn).map(|qp| qp.counters.clone())
    }

    /// The congestion-control state (status, parameters, counters) as the firmware's
    /// congestion commands see it.
    pub fn cong(&self) -> &Cong {
        &self.cong
    }

    /// The congestion-control state, writable: for a test or tool that sets counters or
    /// status directly, as the data path would.
    pub fn cong_mut(&mut self) -> &mut Cong {
        &mut self.cong
    }

    /// The data path's parts, lent for one doorbell, packet or scan.
    #[inline]
    pub(crate) fn data_path(&mut self) -> DataPath<'_> {
        self.parts().0
    }

    /// Every part, split: the data path's, the firmware and BAR0 (disjoint borrows).
    #[inline(always)]
    fn parts(&mut self) -> (DataPath<'_>, &mut Firmware, &mut Bar0) {
        let Self {
            profile,
            iommu,
            bar,
            fw,
            objs,
            tp,
            comp,
            cong,
            now,
            counters,
            trace,
        } = self;
        let dp = DataPath {
            objs,
            comp,
            tp,
            cong,
            profile,
            io: Io {
                dma: iommu,
                counters,
                trace,
                now: *now,
            },
        };
        (dp, fw, bar)
    }

    /// Device time (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Sets device time, ticking the health counter once per millisecond of it (the driver's
    /// health poll expects it to advance at least once a second).
    pub fn set_time(&mut self, now: u64) {
        if now > self.now {
            self.bar.tick(self.now, now);
            self.now = now;
        }
    }

    /// The command queue's IOVA, as the driver wrote it.
    #[cfg(test)]
    pub(crate) fn cmdq_addr(&self) -> u64 {
        self.bar.cmdq_addr()
    }

    /// The NIC interface state (bits 10:8 of `cmdq_addr_l_sz`).
    pub fn nic_interface(&self) -> NicInterface {
        self.bar.nic_interface()
    }

    /// Reports a fatal firmware error through the health buffer (as a dying device does):
    /// `rfr` set and the syndrome (kernel `MLX5_HEALTH_SYNDR_*`).
    pub fn inject_health_error(&mut self, synd: iseg::HealthSyndrome) {
        self.bar.health_error(synd);
    }

    /// Doorbells received and not yet acted on.
    pub fn pending_doorbells(&self) -> usize {
        self.bar.pending()
    }

    /// Counts and traces an MMIO access BAR0 refused.
    #[cold]
    fn reject(&mut self, offset: u64, width: usize, e: MmioError) -> MmioError {
        self.counters.doorbell_errors += 1;
        let at = self.now;
        let why = e.why();
        self.trace.record(|| TraceEvent::MmioRejected {
            at,
            offset,
            width,
            why,
        });
        e
    }

    /// Reads `data.len()` bytes of BAR0 at `offset` (bus byte order). Init segment registers
    /// take 4-byte reads; UAR pages are write-only and read as zero. Any other access is
    /// refused, counted and traced, and changes nothing.
    pub fn mmio_read(&mut self, offset: u64, data: &mut [u8]) -> Result<(), MmioError> {
        let r = Bar0::check_range(&self.profile, offset, data.len())
            .and_then(|()| self.bar.read(self.now, offset, data));
        r.map_err(|e| self.reject(offset, data.len(), e))
    }

    /// Writes `data` to BAR0 at `offset` (bus byte order). Doorbells are latched for
    /// [`Device::step`]; register writes take effect at once. Any access a register does not
    /// take is refused, counted and traced, and changes nothing.
    pub fn mmio_write(&mut self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        if let Err(e) = Bar0::check_range(&self.profile, offset, data.len()) {
            return Err(self.reject(offset, data.len(), e));
        }
        let at = self.now;
        self.trace.record(|| TraceEvent::MmioWrite {
            at,
            offset,
            data: data.to_vec(),
        });
        match self.bar.write(
            &self.profile,
            &self.objs.uars,
            &mut self.tp.bf_spare,
            offset,
            data,
        ) {
            Ok(Written::Done) => Ok(()),
            Ok(Written::NicDisabled) => {
                crate::firmware::nic_disabled(&mut self.hca());
                Ok(())
            }
            Err(e) => Err(self.reject(offset, data.len(), e)),
        }
    }
}

impl Device {
    /// Does the work that is due: latched doorbells in arrival order, then received packets,
    /// then expired transport timers. Returns true if anything happened (a stepped world calls
    /// it until every device returns false).
    #[inline]
    pub fn step(&mut self) -> bool {
        if self.bar.idle() && self.tp.rx.is_empty() && !self.tp.ledger.commands_waiting() {
            // Only the scan can do something: run it without the rest of the step.
            let scanned = self.scan();
            self.tp.scan_progressed = scanned;
            return scanned;
        }
        self.step_inner(true)
    }

    /// [`Device::step`] for the later rounds of a run to idle: the scans of every QP for
    /// expired timers and held-back work (`transport::scan`) run
    /// only if this step took a doorbell or a packet, or the last scan did something. A scan
    /// runs its QPs to a fixpoint, so repeating it with no new input, at the same time, changes
    /// nothing: skipping it keeps an exchange of a few packets from rescanning every QP of
    /// every device at each round.
    #[inline]
    pub(crate) fn step_again(&mut self) -> bool {
        // Nothing latched, nothing received, the last scan idle: this step would do nothing.
        if !self.has_pending() {
            return false;
        }
        self.step_inner(false)
    }

    /// True if [`Device::step_again`] may do something: a doorbell latched, a frame received,
    /// or the last scan did something (so the next scans again). False means the step would
    /// return false having changed nothing.
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        !self.bar.idle()
            || !self.tp.rx.is_empty()
            || self.tp.scan_progressed
            || self.tp.ledger.flushes_waiting()
            || self.tp.ledger.commands_waiting()
            || self.tp.tx_reopened()
    }

    /// `transport::scan`, without lending the data path's parts when its pass finds nothing.
    #[inline(always)]
    fn scan(&mut self) -> bool {
        if !self.tp.ledger.flushes_waiting() {
            let due = crate::transport::gated_pass(&mut self.tp, &self.objs.qps, self.now);
            if !due.any() {
                return false;
            }
            return crate::transport::scan_work(&mut self.data_path(), due);
        }
        crate::transport::scan(&mut self.data_path())
    }

    fn step_inner(&mut self, force_scan: bool) -> bool {
        let progress =
            self.tp.ledger.commands_waiting() && crate::firmware::retry_waiting(&mut self.hca());
        if self.bar.idle() && self.tp.rx.is_empty() {
            // Only the scan can do something.
            if force_scan
                || progress
                || self.tp.scan_progressed
                || self.tp.ledger.flushes_waiting()
                || self.tp.tx_reopened()
            {
                let scanned = self.scan();
                self.tp.scan_progressed = scanned;
                return progress | scanned;
            }
            return progress;
        }
        let (mut dp, fw, bar) = self.parts();
        while let Some(db) = bar.take() {
            ring(&mut dp, fw, bar, db);
        }
        while let Some(frame) = dp.tp.rx.pop_front() {
            match frame {
                Frame::Wire(pkt) => crate::transport::receive(&mut dp, &pkt, false),
                Frame::WireChecked(pkt) => crate::transport::receive(&mut dp, &pkt, true),
                Frame::Burst(b) => {
                    crate::transport::receive_burst(&mut dp, &b);
                    dp.tp.recycle_burst(b);
                }
                Frame::Ack(a) => crate::transport::receive_ack(&mut dp, &a),
            }
        }
        // A doorbell or a frame was taken: the step made progress, and the scan runs.
        let scanned = crate::transport::scan(&mut dp);
        dp.tp.scan_progressed = scanned;
        true
    }

    /// Keeps the box of a burst it received for one it sends, its payload let go (no buffer
    /// is kept alive by a spare).
    pub(crate) fn recycle_burst(&mut self, b: Box<crate::frame::Burst>) {
        self.tp.recycle_burst(b);
    }

    /// True if a QP's error CQEs or a command wait for its bursts still in flight
    /// (`engine::ledger`): the device has work once they are read.
    pub(crate) fn flush_waiting(&self) -> bool {
        self.tp.ledger.waiting()
    }

    /// The earliest device time at which a timer (retransmit, RNR retry) needs the device;
    /// now, if a command that waited for a QP's bursts can run.
    pub fn next_deadline(&self) -> Option<u64> {
        let timer = crate::transport::next_deadline(
            &self.objs.qps,
            &self.tp.ledger,
            self.now,
            self.tp.is_quiet(),
        );
        if self.tp.ledger.commands_waiting() && self.tp.ledger.command_ready() {
            return Some(timer.map_or(self.now, |t| t.min(self.now)));
        }
        timer
    }

    /// Hands a packet from the wire to the device (IP header through ICRC). It is processed by
    /// the next [`Device::step`].
    pub fn receive(&mut self, packet: Vec<u8>) {
        self.tp.rx.push_back(Frame::Wire(packet));
    }

    /// As [`Device::receive`], for a packet whose ICRC the link has already checked and found
    /// right (the UDP link computes it to recover the IPv4 ID): every other receive check is
    /// made, the ICRC is not computed again. A link must hand a packet whose ICRC it did not
    /// check, or found wrong, to [`Device::receive`].
    pub fn receive_icrc_checked(&mut self, packet: Vec<u8>) {
        self.tp.rx.push_back(Frame::WireChecked(packet));
    }

    /// As [`Device::receive`] (or [`Device::receive_icrc_checked`] when `icrc_checked`), for a
    /// link that reads packets into its own buffers: the packet is processed now, from
    /// `packet`, with no copy (what the next [`Device::step`] would do with it). When
    /// doorbells or earlier packets are still waiting for a step, it is queued behind them
    /// instead (a copy), so that the device takes everything in the order it arrived.
    pub fn receive_in_place(&mut self, packet: &[u8], icrc_checked: bool) {
        if !self.tp.rx.is_empty() || !self.bar.idle() {
            let bytes = packet.to_vec();
            self.tp.rx.push_back(if icrc_checked {
                Frame::WireChecked(bytes)
            } else {
                Frame::Wire(bytes)
            });
            return;
        }
        crate::transport::receive(&mut self.data_path(), packet, icrc_checked);
    }

    /// As [`Device::receive_in_place`], for a packet whose IP and UDP headers (the first
    /// `ip.header_len()` + 8 bytes) the link wrote itself from what its socket reported, `ip`
    /// and `ports`: the device takes them as given instead of parsing them again, and does not
    /// verify the IPv4 header checksum (the kernel verified the one on the wire; the link's
    /// is right by construction). Every other receive check is made. Queued behind waiting
    /// doorbells or packets as [`Device::receive_in_place`] queues (then parsed as any packet).
    pub fn receive_udp_in_place(
        &mut self,
        packet: &[u8],
        ip: &bypass_hw::roce::IpSpec,
        ports: bypass_hw::roce::UdpPorts,
        icrc_checked: bool,
    ) {
        if !self.tp.rx.is_empty() || !self.bar.idle() {
            self.receive_in_place(packet, icrc_checked);
            return;
        }
        crate::transport::receive_udp(&mut self.data_path(), packet, ip, ports, icrc_checked);
    }

    /// Takes the next packet the device sent, if any (IP header through ICRC). A burst the
    /// device queued for an in-process link is segmented into its wire packets first.
    pub fn take_tx(&mut self) -> Option<Vec<u8>> {
        match self.pop_admitted()? {
            Frame::Wire(bytes) | Frame::WireChecked(bytes) => Some(bytes),
            Frame::Ack(a) => a.to_wire(),
            Frame::Burst(b) => {
                let mut pkts = b.segment().into_iter();
                let first = pkts.next();
                for p in pkts.rev() {
                    self.tp.tx.push_front(Frame::Wire(p));
                }
                first
            }
        }
    }

    /// Takes the next frame the device sent (a packet, or a burst if the link said it takes
    /// them: [`Device::set_fast_tx`]).
    pub(crate) fn take_frame(&mut self) -> Option<Frame> {
        self.pop_admitted()
    }

    /// The next frame the device sent that fits the port's Ethernet MTU; each one larger
    /// is dropped at the port and counted (device and sending QP: `tx_mtu_drops`), as a
    /// NIC drops a DF packet its link cannot carry.
    fn pop_admitted(&mut self) -> Option<Frame> {
        let eth_mtu = crate::firmware::vport::eth_mtu_of(self.fw.nic_mtu);
        loop {
            let f = self.tp.tx.pop_front()?;
            let Some((dest_qp, dgid)) = crate::mtu::oversize(&f, eth_mtu) else {
                return Some(f);
            };
            let n = f.packets();
            self.counters.tx_mtu_drops += n;
            if let Some(qp) = self.objs.qps.iter_mut().find_map(|(_, q)| {
                (q.attrs.remote_qpn == dest_qp && q.attrs.path.rgid == dgid).then_some(q)
            }) {
                qp.counters.tx_mtu_drops += n;
            }
        }
    }

    /// True if the device has sent frames the link has not taken.
    #[inline]
    pub(crate) fn has_tx(&self) -> bool {
        !self.tp.tx.is_empty()
    }

    /// Puts the wire packets of a frame the link took back in front of what the device sent
    /// (a link that found it needs the bytes after all), in their order.
    pub(crate) fn untake_wire(&mut self, pkts: Vec<Vec<u8>>) {
        for pkt in pkts.into_iter().rev() {
            self.tp.tx.push_front(Frame::Wire(pkt));
        }
    }

    /// Hands a frame from an in-process link to the device; processed by the next
    /// [`Device::step`] as the packets it stands for.
    pub(crate) fn receive_frame(&mut self, frame: Frame) {
        self.tp.rx.push_back(frame);
    }

    /// Says whether the link this device sends on takes bursts: in-process, in order, and
    /// nobody needs the bytes (no trace, no faults, no jitter). Off by default: a device
    /// outside a [`crate::World`] sends only wire packets.
    pub(crate) fn set_fast_tx(&mut self, on: bool) {
        self.tp.fast_tx = on;
    }

    /// Says how the link this device sends on groups packets into one send (`None`, the
    /// default: it does not). The requester then ends a WRITE burst that its window cuts
    /// short where such a send ends, when an ACK is sure to come for what is in flight (see
    /// `transport::requester`); what is sent, and in which order, does not change.
    pub(crate) fn set_tx_trains(&mut self, trains: Option<crate::frame::TxTrains>) {
        self.tp.tx_trains = trains;
    }
}

/// The parts a command works on: the data path's (its transport as the firmware's
/// `QpControl`), the firmware's own, and the command queue at `cmdq`.
#[inline(always)]
fn hca_of<'a>(dp: DataPath<'a>, fw: &'a mut Firmware, cmdq: u64) -> Hca<'a> {
    let DataPath {
        objs,
        comp,
        tp,
        cong,
        profile,
        io,
    } = dp;
    Hca {
        fw,
        objs,
        comp,
        cong,
        profile,
        io,
        dp: tp,
        cmdq,
    }
}

/// Acts on doorbell `db` with the data path's parts (the firmware's, with `fw` and the command
/// queue `bar` names, for a command doorbell).
#[inline(always)]
fn ring(dp: &mut DataPath<'_>, fw: &mut Firmware, bar: &Bar0, db: Doorbell) {
    match db {
        Doorbell::Command(slots) => {
            crate::firmware::process(&mut hca_of(dp.reborrow(), fw, bar.cmdq_addr()), slots);
        }
        Doorbell::Send { uar, ctrl } => crate::transport::doorbell(dp, uar, ctrl, None),
        Doorbell::BlueFlame { uar, wqe } => {
            let mut ctrl = [0u8; 8];
            ctrl.copy_from_slice(&wqe[..8]);
            crate::transport::doorbell(dp, uar, ctrl, Some(wqe));
        }
        Doorbell::CqArm {
            uar,
            cmd_sn_ci,
            cqn,
        } => dp.comp.cq_arm(&mut dp.io, uar, cmd_sn_ci, cqn),
        Doorbell::Eq { uar, eqn, ci, arm } => dp.comp.eq_doorbell(&mut dp.io, uar, eqn, ci, arm),
    }
}

mod cong;
mod port_tx;
#[cfg(test)]
mod tests;

//! The device as the host sees it: BAR0 as MMIO callbacks, like a QEMU device model.
//!
//! Owns: [`Device`], the register file of the init segment (its semantics: `initializing` set
//! until the driver writes the command queue address, the NIC interface state, the health
//! counter ticking with time), the decoding of UAR pages (CQ arm at 0x20, EQ doorbells at
//! 0x40/0x48, BlueFlame registers from 0x800, double-buffered) and the latching of doorbells.
//! Work a doorbell asks for happens in [`Device::step`], never inside the MMIO write, as on
//! hardware: the write only reaches the device.
//! Must not: execute commands or WQEs itself (that is `firmware` and `engine`).
//!
//! MMIO data is given as the bytes on the bus (BAR offset order): a driver's
//! `write_volatile::<u32>(reg, v.to_be())` on a little-endian host reaches the device as
//! `v.to_be_bytes()`. Each register accepts only its width; any other access is rejected,
//! counted and traced, and changes nothing.
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.{c,h}` (`struct mlx5_init_seg`, the bring-up
//! polling of `initializing`, `cmd_dbell`), the kernel's `include/linux/mlx5/device.h`
//! (`mlx5_init_seg`, `health_buffer`), rdma-core `providers/mlx5/{cq.c,qp.c,mlx5.c}` (UAR layout,
//! BlueFlame double buffering).

use bypass_hw::init_seg::{self as iseg, NicInterface};

use crate::bar0::{Bar0, Written};
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

pub use crate::bar0::{CMDQ_LOG_SIZE, CMDQ_LOG_STRIDE, Doorbell, MmioError};

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
        Hca {
            fw: &mut self.fw,
            objs: &mut self.objs,
            comp: &mut self.comp,
            profile: &self.profile,
            io: Io {
                dma: &mut self.iommu,
                counters: &mut self.counters,
                trace: &mut self.trace,
                now: self.now,
            },
            dp: &mut self.tp,
            cmdq: self.bar.cmdq_addr(),
        }
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
        let mut io = Io {
            dma: &mut self.iommu,
            counters: &mut self.counters,
            trace: &mut self.trace,
            now: self.now,
        };
        crate::firmware::pages::request_pages(&mut self.fw, &mut self.comp, &mut io, n);
    }

    /// The data path's parts, lent for one doorbell, packet or scan.
    #[inline]
    pub(crate) fn data_path(&mut self) -> DataPath<'_> {
        DataPath {
            objs: &mut self.objs,
            comp: &mut self.comp,
            tp: &mut self.tp,
            profile: &self.profile,
            bf_spare: &mut self.bar.bf_spare,
            io: Io {
                dma: &mut self.iommu,
                counters: &mut self.counters,
                trace: &mut self.trace,
                now: self.now,
            },
        }
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
        match self.bar.write(&self.profile, &self.objs.uars, offset, data) {
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
    pub fn step(&mut self) -> bool {
        if self.bar.idle() && self.tp.rx.is_empty() && !self.tp.ledger.commands_waiting() {
            // Only the scan can do something: run it without the rest of the step.
            let mut dp = self.data_path();
            let scanned = crate::transport::scan(&mut dp);
            dp.tp.scan_progressed = scanned;
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
    }

    fn step_inner(&mut self, force_scan: bool) -> bool {
        let mut progress =
            self.tp.ledger.commands_waiting() && crate::firmware::retry_waiting(&mut self.hca());
        while let Some(db) = self.bar.take() {
            progress = true;
            self.ring(db);
        }
        let mut dp = self.data_path();
        while let Some(frame) = dp.tp.rx.pop_front() {
            progress = true;
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
        if force_scan || progress || dp.tp.scan_progressed || dp.tp.ledger.flushes_waiting() {
            let scanned = crate::transport::scan(&mut dp);
            dp.tp.scan_progressed = scanned;
            progress |= scanned;
        }
        progress
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
        let timer = crate::transport::next_deadline(&self.objs.qps, &self.tp.ledger, self.now);
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
        match self.tp.tx.pop_front()? {
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
    pub fn take_frame(&mut self) -> Option<Frame> {
        self.tp.tx.pop_front()
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
    pub fn receive_frame(&mut self, frame: Frame) {
        self.tp.rx.push_back(frame);
    }

    /// Says whether the link this device sends on takes bursts: in-process, in order, and
    /// nobody needs the bytes (no trace, no faults, no jitter). Off by default: a device
    /// outside a [`crate::World`] sends only wire packets.
    pub fn set_fast_tx(&mut self, on: bool) {
        self.tp.fast_tx = on;
    }

    /// Says how the link this device sends on groups packets into one send (`None`, the
    /// default: it does not). The requester then ends a WRITE burst that its window cuts
    /// short where such a send ends, when an ACK is sure to come for what is in flight (see
    /// `transport::requester`); what is sent, and in which order, does not change.
    pub(crate) fn set_tx_trains(&mut self, trains: Option<crate::frame::TxTrains>) {
        self.tp.tx_trains = trains;
    }

    fn ring(&mut self, db: Doorbell) {
        match db {
            Doorbell::Command(slots) => crate::firmware::process(&mut self.hca(), slots),
            Doorbell::Send { uar, ctrl } => {
                crate::transport::doorbell(&mut self.data_path(), uar, ctrl, None);
            }
            Doorbell::BlueFlame { uar, wqe } => {
                let mut ctrl = [0u8; 8];
                ctrl.copy_from_slice(&wqe[..8]);
                crate::transport::doorbell(&mut self.data_path(), uar, ctrl, Some(wqe));
            }
            Doorbell::CqArm {
                uar,
                cmd_sn_ci,
                cqn,
            } => {
                let mut io = Io {
                    dma: &mut self.iommu,
                    counters: &mut self.counters,
                    trace: &mut self.trace,
                    now: self.now,
                };
                self.comp.cq_arm(&mut io, uar, cmd_sn_ci, cqn);
            }
            Doorbell::Eq { uar, eqn, ci, arm } => {
                let mut io = Io {
                    dma: &mut self.iommu,
                    counters: &mut self.counters,
                    trace: &mut self.trace,
                    now: self.now,
                };
                self.comp.eq_doorbell(&mut io, uar, eqn, ci, arm);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(v: u32) -> [u8; 4] {
        v.to_be_bytes()
    }

    /// Allocates a UAR page, as `ALLOC_UAR` does, and returns its index.
    fn alloc_uar(d: &mut Device) -> u32 {
        d.objs
            .uars
            .insert_with(|_| crate::objects::Uar::default())
            .unwrap()
    }

    fn read32(d: &mut Device, off: u64) -> u32 {
        let mut b = [0u8; 4];
        d.mmio_read(off, &mut b).unwrap();
        u32::from_be_bytes(b)
    }

    /// A RoCEv2 SEND to QP `qpn` from 10.0.0.9 to `dst`, and its IP fields and ports.
    fn send_packet(
        dst: [u8; 4],
        qpn: u32,
    ) -> (Vec<u8>, bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts) {
        use bypass_hw::roce::{BthFields, BthOpcode, ExtFields, IpSpec, PacketSpec, UdpPorts};
        let ip =
            IpSpec::from_gids(&Profile::ipv4_gid([10, 0, 0, 9]), &Profile::ipv4_gid(dst)).unwrap();
        let ports = UdpPorts {
            src: 0xc001,
            dst: bypass_hw::roce::ROCE_V2_UDP_DPORT,
        };
        let spec = PacketSpec {
            ip,
            ports,
            bth: BthFields {
                opcode: BthOpcode::RC_SEND_ONLY,
                dest_qp: qpn,
                psn: 3,
                ..Default::default()
            },
            ext: ExtFields::default(),
            payload: b"payload",
        };
        let mut buf = vec![0u8; spec.packet_len().unwrap()];
        bypass_hw::roce::emit(&spec, &mut buf).unwrap();
        (buf, ip, ports)
    }

    #[test]
    fn a_packet_with_its_header_given_meets_every_check_a_parsed_one_meets() {
        // Each case: destination, ICRC corrupted, ICRC vouched for by the link, a doorbell
        // waiting (the packet is queued behind it, a copy, and taken by the next step), and
        // the counters (packets, ICRC errors, discards) both entry points must leave.
        struct Case {
            dst: [u8; 4],
            corrupt: bool,
            checked: bool,
            queued: bool,
            counts: (u64, u64, u64),
        }
        let case = |dst, corrupt, checked, queued, counts| Case {
            dst,
            corrupt,
            checked,
            queued,
            counts,
        };
        let (us, other) = ([10, 0, 0, 1], [10, 0, 0, 7]);
        let cases = [
            // Ours, but no QP 0x42: discarded (`receive_packet`'s QP lookup).
            case(us, false, false, false, (1, 0, 1)),
            // Another device's address: discarded.
            case(other, false, false, false, (1, 0, 1)),
            // A bad ICRC, not checked by the link: an ICRC error, nothing else looked at.
            case(us, true, false, false, (1, 1, 0)),
            // A bad ICRC the link vouched for: not computed again, so it passes, and the
            // unknown QP discards the packet.
            case(us, true, true, false, (1, 0, 1)),
            // Behind a waiting doorbell: queued, then counted as case 0 by the step.
            case(us, false, false, true, (1, 0, 1)),
        ];
        let ours = Profile::with_id(1);
        let counts = |d: &Device| {
            (
                d.counters.port_rcv_packets,
                d.counters.rx_icrc_errors,
                d.counters.rx_discards,
            )
        };
        for (i, c) in cases.into_iter().enumerate() {
            let (mut bytes, ip, ports) = send_packet(c.dst, 0x42);
            if c.corrupt {
                let n = bytes.len();
                bytes[n - 6] ^= 1;
            }
            let mut parsed = Device::new(ours.clone());
            let mut given = Device::new(ours.clone());
            if c.queued {
                // An empty `cmd_dbell` write: latched, and a no-op when rung.
                for d in [&mut parsed, &mut given] {
                    d.mmio_write(iseg::CMD_DBELL as u64, &be(0)).unwrap();
                }
            }
            parsed.receive_in_place(&bytes, c.checked);
            given.receive_udp_in_place(&bytes, &ip, ports, c.checked);
            if c.queued {
                for d in [&mut parsed, &mut given] {
                    assert_eq!(counts(d), (0, 0, 0), "case {i}: queued, not taken yet");
                    assert_eq!(d.tp.rx.len(), 1, "case {i}: queued");
                    assert!(d.step(), "case {i}");
                }
            }
            assert_eq!(counts(&given), c.counts, "case {i}: header given");
            assert_eq!(counts(&parsed), c.counts, "case {i}: parsed");
            assert_eq!(given.counters.port_rcv_data, bytes.len() as u64, "case {i}");
            assert_eq!(
                parsed.counters.port_rcv_data,
                bytes.len() as u64,
                "case {i}"
            );
        }
    }

    #[test]
    fn init_segment_reports_revisions_and_initializing_until_cmdq_is_set() {
        let mut d = Device::new(Profile::default());
        assert_eq!(read32(&mut d, iseg::CMDIF_REV_FW_SUB as u64) >> 16, 5);
        assert_eq!(read32(&mut d, iseg::FW_REV as u64), (35 << 16) | 16);
        assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 1);
        assert_eq!(read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64) & 0xff, 0x56);
        d.mmio_write(iseg::CMDQ_ADDR_H as u64, &be(0x1)).unwrap();
        d.mmio_write(iseg::CMDQ_ADDR_L_SZ as u64, &be(0x2345_6000))
            .unwrap();
        assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 0);
        assert_eq!(d.cmdq_addr(), 0x1_2345_6000);
        assert_eq!(
            read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64),
            0x2345_6056,
            "log size/stride are read-only"
        );
    }

    #[test]
    fn registers_take_only_their_width_and_bar_bounds_hold() {
        let mut d = Device::new(Profile::default());
        let mut b8 = [0u8; 8];
        assert!(matches!(
            d.mmio_read(iseg::FW_REV as u64, &mut b8),
            Err(MmioError::Width { expected: 4, .. })
        ));
        assert!(matches!(
            d.mmio_write(iseg::CMD_DBELL as u64, &[1, 0]),
            Err(MmioError::Width { .. })
        ));
        assert!(matches!(
            d.mmio_read(d.bar0_len(), &mut [0; 4]),
            Err(MmioError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.mmio_write(u64::MAX - 1, &[0; 4]),
            Err(MmioError::OutOfRange { .. })
        ));
        assert_eq!(d.pending_doorbells(), 0);
        assert_eq!(d.counters.doorbell_errors, 4);
    }

    #[test]
    fn health_counter_ticks_with_time() {
        let mut d = Device::new(Profile::default());
        let h0 = read32(&mut d, iseg::HEALTH_COUNTER as u64);
        d.set_time(3_500_000);
        assert_eq!(read32(&mut d, iseg::HEALTH_COUNTER as u64), h0 + 3);
        assert_eq!(read32(&mut d, iseg::INTERNAL_TIMER_L as u64), 3_500_000);
    }

    #[test]
    fn doorbells_on_unallocated_uar_pages_are_refused() {
        let mut d = Device::new(Profile::default());
        let off = u64::from(d.profile.first_uar) * 4096 + 0x800;
        assert!(matches!(
            d.mmio_write(off, &[0; 8]),
            Err(MmioError::UarNotAllocated { .. })
        ));
        assert_eq!(d.pending_doorbells(), 0);
    }

    #[test]
    fn uar_doorbells_latch_with_exact_widths_and_blueflame_bursts_assemble() {
        let mut d = Device::new(Profile::default());
        let uar = alloc_uar(&mut d);
        let base = u64::from(uar) * 4096;
        d.mmio_write(base + 0x20, &[0x10, 0, 0, 5, 0, 0, 0, 9])
            .unwrap();
        d.mmio_write(base + 0x40, &be((3 << 24) | 7)).unwrap();
        d.mmio_write(base + 0x48, &be((3 << 24) | 8)).unwrap();
        assert!(d.mmio_write(base + 0x40, &[0; 8]).is_err());
        // Plain 8-byte doorbell on bfreg 1, first half.
        d.mmio_write(base + 0x800 + 512, &[0, 0, 1, 0x0a, 0, 0, 0x12, 0x02])
            .unwrap();
        // A 2-WQEBB BlueFlame WQE (ds = 5) on bfreg 1, second half, in two bursts.
        let mut chunk = [0u8; 64];
        chunk[7] = 5;
        d.mmio_write(base + 0x800 + 512 + 256, &chunk).unwrap();
        assert_eq!(
            d.pending_doorbells(),
            4,
            "the WQE is not complete after its first burst"
        );
        d.mmio_write(base + 0x800 + 512 + 256 + 64, &[0xee; 64])
            .unwrap();
        let dbs: Vec<_> = d.bar.latched().cloned().collect();
        assert_eq!(
            dbs[0],
            Doorbell::CqArm {
                uar,
                cmd_sn_ci: 0x1000_0005,
                cqn: 9
            }
        );
        assert_eq!(
            dbs[1],
            Doorbell::Eq {
                uar,
                eqn: 3,
                ci: 7,
                arm: true
            }
        );
        assert_eq!(
            dbs[2],
            Doorbell::Eq {
                uar,
                eqn: 3,
                ci: 8,
                arm: false
            }
        );
        assert_eq!(
            dbs[3],
            Doorbell::Send {
                uar,
                ctrl: [0, 0, 1, 0x0a, 0, 0, 0x12, 0x02]
            }
        );
        match &dbs[4] {
            Doorbell::BlueFlame { uar: u, wqe } => {
                assert_eq!(*u, uar);
                assert_eq!(wqe.len(), 128);
                assert_eq!(wqe[64], 0xee);
            }
            other => panic!("expected BlueFlame, got {other:?}"),
        }
    }

    #[test]
    fn a_one_burst_blueflame_wqe_latches_at_once_and_drops_a_partial_one_on_its_register() {
        let mut d = Device::new(Profile::default());
        let uar = alloc_uar(&mut d);
        let reg = u64::from(uar) * 4096 + 0x800 + 512;
        // The first burst of a 2-WQEBB WQE (ds = 5), then a 1-WQEBB WQE (ds = 3) on the same
        // register half: the new WQE replaces the unfinished one, as the old path did.
        let mut two = [0xa0u8; 64];
        two[7] = 5;
        d.mmio_write(reg, &two).unwrap();
        assert_eq!(d.pending_doorbells(), 0);
        let mut one = [0xb0u8; 64];
        one[7] = 3;
        d.mmio_write(reg, &one).unwrap();
        assert_eq!(d.pending_doorbells(), 1, "latched by its only burst");
        // The rest of the dropped WQE is no longer a continuation of anything.
        assert!(d.mmio_write(reg + 64, &[0xa1; 64]).is_err());
        match d.bar.latched().next() {
            Some(Doorbell::BlueFlame { uar: u, wqe }) => {
                assert_eq!(*u, uar);
                assert_eq!(&wqe[..], &one[..]);
            }
            other => panic!("expected the one-burst WQE, got {other:?}"),
        }
        assert_eq!(d.pending_doorbells(), 1);
    }

    #[test]
    fn blueflame_bursts_to_different_registers_interleave_without_losing_either_wqe() {
        let mut d = Device::new(Profile::default());
        let (a, b) = (alloc_uar(&mut d), alloc_uar(&mut d));
        let (ra, rb) = (
            u64::from(a) * 4096 + 0x800 + 512,
            u64::from(b) * 4096 + 0x800 + 512 + 256,
        );
        // Two threads, each posting a 2-WQEBB WQE (ds = 5) by BlueFlame on its own UAR page;
        // their bursts reach the device interleaved, with an 8-byte doorbell on a third
        // register (bfreg 2 of page a) in between.
        let burst = |tag: u8, ds: u8| {
            let mut c = [tag; 64];
            c[7] = ds;
            c
        };
        d.mmio_write(ra, &burst(0xa0, 5)).unwrap();
        d.mmio_write(rb, &burst(0xb0, 5)).unwrap();
        d.mmio_write(
            u64::from(a) * 4096 + 0x800 + 1024,
            &[0, 0, 0, 0x0a, 0, 0, 0x13, 0x01],
        )
        .unwrap();
        d.mmio_write(rb + 64, &[0xb1; 64]).unwrap();
        d.mmio_write(ra + 64, &[0xa1; 64]).unwrap();
        let bf: Vec<_> = d
            .bar
            .latched()
            .filter_map(|db| match db {
                Doorbell::BlueFlame { uar, wqe } => Some((*uar, wqe[0], wqe[64], wqe.len())),
                _ => None,
            })
            .collect();
        assert_eq!(bf, [(b, 0xb0, 0xb1, 128), (a, 0xa0, 0xa1, 128)]);
        assert_eq!(d.pending_doorbells(), 3);
    }
}

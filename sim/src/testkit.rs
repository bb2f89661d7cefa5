//! Test-only rig: two devices with host memory, objects created directly in their tables
//! (bypassing the firmware), WQE posting, CQ polling, and a lossless wire between them.
//!
//! Lets the data path (engine, requester, completer, responder) be tested on its own. The
//! firmware's tests, and the driver-free integration tests in `sim/tests/`, create the same
//! objects through real commands instead.

#![allow(dead_code)] // each test uses a different subset

use std::sync::Arc;

use bypass_hw::cmd::entry::{
    CMD_ENTRY_SIZE, CMD_INLINE_LEN, CmdLayout, DeliveryStatus, MLX5_PCI_CMD_XPORT,
};
use bypass_hw::cmd::qp::{QpState, service_type as st};
use bypass_hw::cqe::CQE_INVALID_OP_OWN;
use bypass_hw::init_seg as iseg;
use bypass_hw::wqe::{CtrlParams, CtrlSeg, DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, WqeOpcode};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::buffer::PageList;
use crate::device::Device;
use crate::iommu::Perm;
use crate::memory::{HostMemory, PAGE_SIZE, SimMemory};
use crate::mkey::{Access, Mkey};
use crate::objects::{AddressPath, Cq, Eq, Pd, Qp, QpAttrs, Uar, WqGeometry};
use crate::profile::Profile;
use crate::ring::{CqRing, EqRing};
use crate::transport::requester::state::ReqState;
use crate::transport::responder::state::RespState;

/// IOVA where each device's host memory is mapped.
pub const IOVA_BASE: u64 = 0x10_0000;
/// Size of each device's host memory.
pub const MEM_LEN: usize = 8 << 20;
/// The virtual address MRs pretend to live at (VA = VA_BASE + offset in host memory).
pub const VA_BASE: u64 = 0x7f00_0000_0000;

/// One device and its host memory.
pub struct Host {
    pub dev: Device,
    pub mem: Arc<SimMemory>,
    next: usize,
    pub uar: u32,
    pub pd: u32,
    pub eqn: u32,
    /// Offset of the command queue page, once [`Host::post_inline_cmd`] has set it up.
    cmdq: Option<usize>,
}

/// A CQ as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostCq {
    pub cqn: u32,
    pub off: usize,
    pub nent: u32,
    pub dbr_off: usize,
    pub ci: u32,
}

/// A QP as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostQp {
    pub qpn: u32,
    pub wq_off: usize,
    pub rq_wqes: u32,
    pub rq_stride: usize,
    pub sq_wqebbs: u32,
    pub dbr_off: usize,
    /// SQ producer in WQEBBs.
    pub sq_pi: u32,
    /// RQ producer.
    pub rq_pi: u32,
}

/// An MR as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostMr {
    pub key: u32,
    pub off: usize,
    pub va: u64,
    pub len: usize,
}

impl Host {
    /// A device with profile `id`, memory mapped, one UAR, one PD, one EQ (all events).
    pub fn new(id: u8) -> Self {
        let mut dev = Device::new(Profile::with_id(id));
        let mem = Arc::new(SimMemory::new(MEM_LEN).expect("test memory"));
        dev.iommu
            .map(IOVA_BASE, mem.clone(), 0, MEM_LEN, Perm::RW)
            .expect("map");
        let uar = dev
            .objs
            .uars
            .insert_with(|_| Uar { users: 0 })
            .expect("uar");
        let pd = dev.objs.pds.insert_with(|_| Pd::default()).expect("pd");
        let mut h = Self {
            dev,
            mem,
            next: 0,
            uar,
            pd,
            eqn: 0,
            cmdq: None,
        };
        let eq_off = h.alloc(PAGE_SIZE);
        // EQEs start owned by hardware (owner = 1).
        for i in 0..64 {
            h.write(eq_off + i * 64 + 63, &[1]);
        }
        let ring = EqRing::new(
            PageList::new(vec![h.iova(eq_off)], 0, 0, 64 * 64).unwrap(),
            6,
        );
        h.eqn = h
            .dev
            .comp
            .eqs
            .insert_with(|_| Eq {
                ring,
                intr: 0,
                uar,
                event_bitmask: [u64::MAX; 4],
                users: 0,
                eqc: vec![0; 64],
            })
            .expect("eq");
        h
    }

    /// Page-aligned host memory; returns its offset.
    pub fn alloc(&mut self, len: usize) -> usize {
        let off = self.next;
        self.next += len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        assert!(self.next <= MEM_LEN, "test memory exhausted");
        off
    }

    pub fn iova(&self, off: usize) -> u64 {
        IOVA_BASE + off as u64
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(self.mem.write_at(off, data));
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        self.mem.to_vec(off, len).expect("in bounds")
    }

    /// A CQ of `1 << log_size` 64-byte CQEs, initialised invalid, reporting to the host's EQ.
    pub fn cq(&mut self, log_size: u32) -> HostCq {
        let nent = 1u32 << log_size;
        let off = self.alloc(nent as usize * 64);
        for i in 0..nent as usize {
            self.write(off + i * 64 + 63, &[CQE_INVALID_OP_OWN]);
        }
        let dbr_off = self.alloc(64);
        let pages = (0..(nent as usize * 64).div_ceil(PAGE_SIZE))
            .map(|p| self.iova(off + p * PAGE_SIZE))
            .collect();
        let ring = CqRing::new(
            PageList::new(pages, 0, 0, u64::from(nent) * 64).unwrap(),
            log_size,
            64,
            self.iova(dbr_off),
            false,
        );
        let (uar, eqn) = (self.uar, self.eqn);
        let cqn = self
            .dev
            .comp
            .cqs
            .insert_with(|_| Cq {
                ring,
                eqn,
                uar,
                users: 0,
                cqc: vec![0; 64],
            })
            .expect("cq");
        HostCq {
            cqn,
            off,
            nent,
            dbr_off,
            ci: 0,
        }
    }

    /// An MR of `len` bytes with `access`.
    pub fn mr(&mut self, len: usize, access: Access) -> HostMr {
        let off = self.alloc(len);
        let va = VA_BASE + off as u64;
        let mtt = (0..len.div_ceil(PAGE_SIZE))
            .map(|p| self.iova(off + p * PAGE_SIZE) | 3)
            .collect();
        let pd = self.pd;
        let index = self
            .dev
            .objs
            .mkeys
            .insert_with(|n| Mkey {
                key: (n << 8) | 0x5a,
                pd,
                qpn: 0x00ff_ffff,
                start: va,
                len: len as u64,
                access,
                page_shift: 12,
                mtt,
            })
            .expect("mkey");
        HostMr {
            key: (index << 8) | 0x5a,
            off,
            va,
            len,
        }
    }

    /// All rights.
    pub fn all_access() -> Access {
        Access {
            local_read: true,
            local_write: true,
            remote_read: true,
            remote_write: true,
            remote_atomic: true,
        }
    }

    /// A QP of service type `service` (RC or UD) in RESET.
    pub fn qp(
        &mut self,
        service: u8,
        scq: &HostCq,
        rcq: &HostCq,
        log_sq: u8,
        log_rq: u8,
    ) -> HostQp {
        let geom = WqGeometry {
            log_rq_size: log_rq,
            rq_stride: 64,
            log_sq_size: Some(log_sq),
        };
        let len = (geom.rq_bytes() + geom.sq_bytes()) as usize;
        let wq_off = self.alloc(len);
        let dbr_off = self.alloc(64);
        let pages = (0..len.div_ceil(PAGE_SIZE))
            .map(|p| self.iova(wq_off + p * PAGE_SIZE))
            .collect();
        let wq = PageList::new(pages, 0, 0, len as u64).unwrap();
        let (pd, uar, dbr) = (self.pd, self.uar, self.iova(dbr_off));
        let qpn = self
            .dev
            .objs
            .qps
            .insert_with(|qpn| Qp {
                qpn,
                st: service,
                pd,
                state: QpState::Rst,
                uar,
                cqn_snd: scq.cqn,
                cqn_rcv: rcq.cqn,
                user_index: qpn,
                wq,
                geom,
                dbr,
                attrs: QpAttrs::default(),
                headers: None,
                sq_ci: 0,
                rq_ci: 0,
                req: ReqState::default(),
                resp: RespState::default(),
                qpc: vec![0; 0xe8],
                counters: Default::default(),
                srqn: None,
            })
            .expect("qp");
        HostQp {
            qpn,
            wq_off,
            rq_wqes: 1 << log_rq,
            rq_stride: 64,
            sq_wqebbs: 1 << log_sq,
            dbr_off,
            sq_pi: 0,
            rq_pi: 0,
        }
    }

    /// The local GID (port 1, index 0).
    pub fn gid(&self) -> [u8; 16] {
        self.dev.profile.ports[0].gids[0]
    }

    /// Brings `qp` to RTS (RC: connected to `remote_qpn` at `remote_gid`; UD: q_key set),
    /// the way the firmware's modify commands would leave it.
    pub fn make_rts(
        &mut self,
        qp: &HostQp,
        remote_qpn: u32,
        remote_gid: [u8; 16],
        mtu: u32,
        sq_psn: u32,
        rq_psn: u32,
    ) {
        let q = self.dev.objs.qps.get_mut(qp.qpn).expect("qp");
        q.headers = None;
        q.attrs = QpAttrs {
            mtu,
            log_msg_max: 30,
            remote_qpn,
            q_key: 0x1111_1111,
            path: AddressPath {
                rgid: remote_gid,
                port: 1,
                hop_limit: 64,
                ack_timeout: 14,
                ..Default::default()
            },
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 1,
            log_sra_max: 4,
            log_rra_max: 4,
            rre: true,
            rwe: true,
            rae: true,
            sq_psn,
            rq_psn,
        };
        q.resp = RespState::new(rq_psn);
        q.req = ReqState::new(sq_psn);
        q.state = QpState::Rts;
        // A state change as the firmware's would count it: the scan looks at the QPs again.
        self.dev.tp.ledger.note_state_change();
    }

    /// Writes one WQE (whole WQEBBs) at the SQ producer, bumps the DBR and rings the 8-byte
    /// doorbell through the QP's UAR. `wqe` starts with the ctrl segment.
    pub fn post_send(&mut self, qp: &mut HostQp, wqe: &[u8]) {
        let sq_off = qp.wq_off + qp.rq_wqes as usize * qp.rq_stride;
        let nbb = wqe.len().div_ceil(64) as u32;
        for i in 0..nbb {
            let idx = (qp.sq_pi + i) % qp.sq_wqebbs;
            let chunk = &wqe[(i as usize * 64)..wqe.len().min((i as usize + 1) * 64)];
            self.write(sq_off + idx as usize * 64, chunk);
        }
        qp.sq_pi += nbb;
        self.write(qp.dbr_off + 4, &(qp.sq_pi & 0xffff).to_be_bytes());
        let db = u64::from(self.uar) * 4096 + 0x800 + 512;
        let mut ctrl = [0u8; 8];
        ctrl.copy_from_slice(&wqe[..8]);
        self.dev.mmio_write(db, &ctrl).expect("doorbell");
    }

    /// Posts a receive WQE with `sges` (lkey, va, len), ending the list with the invalid-lkey
    /// marker if the stride has room.
    pub fn post_recv(&mut self, qp: &mut HostQp, sges: &[(u32, u64, u32)]) {
        let idx = qp.rq_pi % qp.rq_wqes;
        let base = qp.wq_off + idx as usize * qp.rq_stride;
        for (i, &(lkey, va, len)) in sges.iter().enumerate() {
            self.write(base + i * 16, DataSeg::new(len, lkey, va).as_bytes());
        }
        if sges.len() * 16 < qp.rq_stride {
            self.write(base + sges.len() * 16, DataSeg::end_of_list().as_bytes());
        }
        qp.rq_pi += 1;
        self.write(qp.dbr_off, &(qp.rq_pi & 0xffff).to_be_bytes());
    }

    /// Writes a command whose input and output fit in the entry's 16 inline bytes (as those
    /// of 2RST_QP and DESTROY_QP do: no mailboxes) into command queue `slot`, hands it to the
    /// device and rings `cmd_dbell` for it (kernel `cmd_work_handler`: ownership set last,
    /// then the doorbell); the device runs it at its next step. The first call tells the
    /// device where the queue is (rdma-core `mlx5_vfio_init_cmd_interface`) and marks its
    /// firmware initialized, as the objects the rig makes stand for. Returns the
    /// entry's offset, for [`Host::inline_cmd_output`].
    pub fn post_inline_cmd(&mut self, slot: u8, input: &[u8; CMD_INLINE_LEN]) -> usize {
        let cmdq = match self.cmdq {
            Some(off) => off,
            None => {
                let off = self.alloc(PAGE_SIZE);
                let iova = self.iova(off);
                for (reg, v) in [
                    (iseg::CMDQ_ADDR_H, (iova >> 32) as u32),
                    (iseg::CMDQ_ADDR_L_SZ, iova as u32 & 0xffff_f000),
                ] {
                    self.dev
                        .mmio_write(reg as u64, &v.to_be_bytes())
                        .expect("cmdq address");
                }
                // The objects the rig made directly stand for a device brought up.
                self.dev.fw.stage = crate::firmware::Stage::Initialized;
                self.cmdq = Some(off);
                off
            }
        };
        let entry_off = cmdq + usize::from(slot) * CMD_ENTRY_SIZE;
        let mut e = CmdLayout::new_zeroed();
        e.set_cmd_type(MLX5_PCI_CMD_XPORT)
            .set_inlen(CMD_INLINE_LEN as u32)
            .set_outlen(CMD_INLINE_LEN as u32)
            .set_token(slot.wrapping_add(1));
        e.input = *input;
        e.give_to_hw();
        self.write(entry_off, e.as_bytes());
        self.dev
            .mmio_write(iseg::CMD_DBELL as u64, &(1u32 << slot).to_be_bytes())
            .expect("cmd_dbell");
        entry_off
    }

    /// The inline output of the command at `entry_off` ([`Host::post_inline_cmd`]), or None
    /// while the entry is still the device's. Panics unless it was delivered.
    pub fn inline_cmd_output(&self, entry_off: usize) -> Option<[u8; CMD_INLINE_LEN]> {
        let raw = self.read(entry_off, CMD_ENTRY_SIZE);
        let e = CmdLayout::read_from_bytes(&raw[..]).expect("an entry");
        if e.hw_owned() {
            return None;
        }
        assert_eq!(e.delivery_status(), DeliveryStatus::OK, "delivered");
        Some(e.output)
    }

    /// Polls one CQE (owner-bit rule), updating the CQ doorbell record's CI.
    pub fn poll(&mut self, cq: &mut HostCq) -> Option<[u8; 64]> {
        let idx = cq.ci & (cq.nent - 1);
        let bytes = self.read(cq.off + idx as usize * 64, 64);
        let op_own = bytes[63];
        if !bypass_hw::cqe::sw_owns(op_own, cq.ci, cq.nent) {
            return None;
        }
        cq.ci += 1;
        self.write(cq.dbr_off, &(cq.ci & 0xff_ffff).to_be_bytes());
        let mut out = [0u8; 64];
        out.copy_from_slice(&bytes);
        Some(out)
    }
}

/// A ctrl segment for `opcode` at WQE index `idx` of `qpn` with `ds` 16-byte segments,
/// signaled.
pub fn ctrl(opcode: WqeOpcode, idx: u16, qpn: u32, ds: u8, imm: u32) -> Vec<u8> {
    let c = CtrlSeg::new(&CtrlParams {
        pi: idx,
        opcode,
        opmod: 0,
        qpn,
        fm_ce_se: MLX5_WQE_CTRL_CQ_UPDATE,
        ds,
        signature: 0,
        imm,
    })
    .expect("ctrl");
    c.as_bytes().to_vec()
}

/// Builds a send WQE segment by segment; [`Wqe::finish`] writes the ctrl segment with the
/// DS count and pads to whole WQEBBs.
#[derive(Debug, Clone)]
pub struct Wqe {
    opcode: WqeOpcode,
    idx: u16,
    qpn: u32,
    fm_ce_se: u8,
    imm: u32,
    body: Vec<u8>,
}

impl Wqe {
    /// A signaled WQE.
    pub fn new(opcode: WqeOpcode, idx: u32, qpn: u32) -> Self {
        Self {
            opcode,
            idx: idx as u16,
            qpn,
            fm_ce_se: MLX5_WQE_CTRL_CQ_UPDATE,
            imm: 0,
            body: Vec::new(),
        }
    }
    /// Sets `fm_ce_se`.
    pub fn flags(mut self, fm_ce_se: u8) -> Self {
        self.fm_ce_se = fm_ce_se;
        self
    }
    /// Sets the immediate (as it goes on the wire, big-endian in the WQE).
    pub fn imm(mut self, imm: u32) -> Self {
        self.imm = imm;
        self
    }
    /// Adds a remote address segment.
    pub fn raddr(mut self, va: u64, rkey: u32) -> Self {
        self.body
            .extend_from_slice(bypass_hw::wqe::RaddrSeg::new(va, rkey).as_bytes());
        self
    }
    /// Adds an atomic segment.
    pub fn atomic(mut self, seg: bypass_hw::wqe::AtomicSeg) -> Self {
        self.body.extend_from_slice(seg.as_bytes());
        self
    }
    /// Adds a data segment.
    pub fn data(mut self, lkey: u32, va: u64, len: u32) -> Self {
        self.body
            .extend_from_slice(DataSeg::new(len, lkey, va).as_bytes());
        self
    }
    /// Adds an inline segment with `payload`.
    pub fn inline(mut self, payload: &[u8]) -> Self {
        let mut buf = vec![0u8; 16 + payload.len().div_ceil(16) * 16];
        let ds = bypass_hw::wqe::write_inline(&mut buf, payload).expect("inline");
        self.body.extend_from_slice(&buf[..ds * 16]);
        self
    }
    /// Adds a UD datagram segment (48-byte AV).
    pub fn av(mut self, p: &bypass_hw::wqe::DgramParams) -> Self {
        let seg = bypass_hw::wqe::Av::new(p).expect("av");
        self.body.extend_from_slice(seg.as_bytes());
        self
    }
    /// The WQE bytes, whole WQEBBs.
    pub fn finish(self) -> Vec<u8> {
        let ds = (16 + self.body.len()).div_ceil(16) as u8;
        let c = CtrlSeg::new(&CtrlParams {
            pi: self.idx,
            opcode: self.opcode,
            opmod: 0,
            qpn: self.qpn,
            fm_ce_se: self.fm_ce_se,
            ds,
            signature: 0,
            imm: self.imm,
        })
        .expect("ctrl");
        let mut v = c.as_bytes().to_vec();
        v.extend_from_slice(&self.body);
        v.resize(v.len().div_ceil(64) * 64, 0);
        v
    }
}

/// Two hosts joined by a lossless wire.
pub struct Pair {
    pub a: Host,
    pub b: Host,
}

/// Two RC QPs connected on a [`Pair`]: each side has its own CQ (2^6 entries), a QP (2^6 sends
/// and receives) and an MR with every right.
pub struct RcConn {
    pub p: Pair,
    pub a_cq: HostCq,
    pub b_cq: HostCq,
    pub a_qp: HostQp,
    pub b_qp: HostQp,
    pub a_mr: HostMr,
    pub b_mr: HostMr,
}

impl RcConn {
    /// Connects at `mtu` with MRs of `mr_len` bytes; a sends from PSN `psn_a`, b from `psn_b`.
    pub fn new(mtu: u32, mr_len: usize, psn_a: u32, psn_b: u32) -> Self {
        let mut p = Pair::new();
        let a_cq = p.a.cq(6);
        let b_cq = p.b.cq(6);
        let a_qp = p.a.qp(RC, &a_cq, &a_cq, 6, 6);
        let b_qp = p.b.qp(RC, &b_cq, &b_cq, 6, 6);
        let a_mr = p.a.mr(mr_len, Host::all_access());
        let b_mr = p.b.mr(mr_len, Host::all_access());
        let (ga, gb) = (p.a.gid(), p.b.gid());
        p.a.make_rts(&a_qp, b_qp.qpn, gb, mtu, psn_a, psn_b);
        p.b.make_rts(&b_qp, a_qp.qpn, ga, mtu, psn_b, psn_a);
        Self {
            p,
            a_cq,
            b_cq,
            a_qp,
            b_qp,
            a_mr,
            b_mr,
        }
    }
}

impl Pair {
    pub fn new() -> Self {
        Self {
            a: Host::new(1),
            b: Host::new(2),
        }
    }

    /// Steps both devices and carries packets between them until nothing moves; returns the
    /// packets carried.
    pub fn run(&mut self) -> usize {
        self.run_with(|p, to| to.receive(p))
    }

    /// As [`Pair::run`], each packet handed over as a UDP link hands it: its IP and UDP
    /// header fields given (`Device::receive_udp_in_place`), its ICRC not checked by the link.
    /// Returns the packets carried.
    pub fn run_udp_in_place(&mut self) -> usize {
        self.run_with(|p, to| {
            let parsed = bypass_hw::roce::RocePacket::parse(&p).expect("a packet the device built");
            let (ip, ports) = (*parsed.ip(), parsed.ports());
            to.receive_udp_in_place(&p, &ip, ports, false);
        })
    }

    /// [`Pair::run`] with each packet handed to its receiver by `hand`.
    fn run_with(&mut self, mut hand: impl FnMut(Vec<u8>, &mut crate::device::Device)) -> usize {
        let mut carried = 0;
        for _ in 0..100_000 {
            let mut progress = self.a.dev.step() | self.b.dev.step();
            while let Some(p) = self.a.dev.take_tx() {
                hand(p, &mut self.b.dev);
                carried += 1;
                progress = true;
            }
            while let Some(p) = self.b.dev.take_tx() {
                hand(p, &mut self.a.dev);
                carried += 1;
                progress = true;
            }
            if !progress {
                return carried;
            }
        }
        panic!("the pair never went idle");
    }

    /// As [`Pair::run`], on an in-process link that takes bursts (`crate::frame`): both
    /// devices may send them, and frames are carried as they are. Returns (frames, packets)
    /// carried.
    pub fn run_frames(&mut self) -> (usize, u64) {
        self.a.dev.set_fast_tx(true);
        self.b.dev.set_fast_tx(true);
        let (mut frames, mut packets) = (0, 0);
        for _ in 0..100_000 {
            let mut progress = self.a.dev.step() | self.b.dev.step();
            while let Some(f) = self.a.dev.take_frame() {
                packets += f.packets();
                self.b.dev.receive_frame(f);
                frames += 1;
                progress = true;
            }
            while let Some(f) = self.b.dev.take_frame() {
                packets += f.packets();
                self.a.dev.receive_frame(f);
                frames += 1;
                progress = true;
            }
            if !progress {
                return (frames, packets);
            }
        }
        panic!("the pair never went idle");
    }

    /// Advances both devices' clocks to `t` ns and runs to idle.
    pub fn run_until(&mut self, t: u64) -> usize {
        self.a.dev.set_time(t);
        self.b.dev.set_time(t);
        self.run()
    }
}

/// Service type shortcuts.
pub const RC: u8 = st::RC;
/// UD.
pub const UD: u8 = st::UD;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rig_builds_objects_and_rings_doorbells() {
        let mut p = Pair::new();
        let cq = p.a.cq(4);
        let mut qp = p.a.qp(RC, &cq, &cq, 4, 4);
        let remote = p.b.gid();
        p.a.make_rts(&qp, 0x10, remote, 1024, 100, 200);
        let w = ctrl(WqeOpcode::NOP, 0, qp.qpn, 1, 0);
        p.a.post_send(&mut qp, &w);
        assert_eq!(p.a.dev.pending_doorbells(), 1);
        assert_eq!(p.a.read(qp.dbr_off + 4, 4), vec![0, 0, 0, 1]);
        let mut cq2 = cq;
        assert!(p.a.poll(&mut cq2).is_none());
    }
}

//! A minimal raw mlx5 driver over the sim's public API only: host memory mapped through the
//! IOMMU, a command queue page, mailbox chains, `cmd()` as rdma-core's `mlx5_vfio_cmd_exec`
//! posts it, the whole rdma-core bring-up (`bring_up`), and helpers to create PDs, UARs, EQs,
//! CQs and mkeys with real commands. Integration tests (firmware, QP commands, data path)
//! build on it; the fuzz target reuses it.
//!
//! Owns: nothing of the sim; everything here is what a driver would do. Must not: reach into
//! the sim's internals (only `Device`'s public methods), so that it tests what a driver sees.
//!
//! Layout of host memory (one `SimMemory` mapped at [`IOVA_BASE`]): the command queue page,
//! an input and an output mailbox arena (blocks 1 KiB apart, the PRM's alignment), then a bump
//! allocator for everything else (pages given to the firmware, rings, doorbell records, MRs).

#![allow(dead_code)] // each test file uses a different subset

pub mod pair;
pub mod qp;

use std::sync::Arc;

use bypass_hw::cmd::caps::{
    CapMode, CapType, CmdHcaCap, QueryHcaCapIn, QueryHcaCapOut, RoceCap, SetHcaCapIn,
    query_cap_op_mod, set_cap_op_mod,
};
use bypass_hw::cmd::cq::{CreateCqIn, CreateCqOut, DestroyCqIn, cqe_sz, create_cq_in_len};
use bypass_hw::cmd::entry::{
    CMD_ENTRY_SIZE, CMD_INLINE_LEN, CmdLayout, CmdMailbox, DeliveryStatus, MAILBOX_ALIGN,
    MAILBOX_DATA_LEN, MLX5_PCI_CMD_XPORT, block_range, mailbox_blocks,
};
use bypass_hw::cmd::eq::{CreateEqIn, CreateEqOut, DestroyEqIn, create_eq_in_len};
use bypass_hw::cmd::hca::{
    AccessRegOpMod, AccessRegisterIn, EnableHcaIn, ISSI_1, InitHcaIn, QueryIssiIn, QueryIssiOut,
    RegisterHostEndianness, RegisterId, SetIssiIn, TeardownHcaIn, TeardownProfile,
    access_register_in_len,
};
use bypass_hw::cmd::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, MLX5_MTT_READ, MLX5_MTT_WRITE, MkeyAccess,
    access_mode, create_mkey_in_len, mkey_from, mtt_entry,
};
use bypass_hw::cmd::pages::{
    ManagePagesIn, ManagePagesOpMod, ManagePagesOut, QueryPagesIn, QueryPagesOpMod, QueryPagesOut,
    manage_pages_in_len, manage_pages_out_len,
};
use bypass_hw::cmd::pd_uar::{AllocPdIn, AllocPdOut, AllocUarIn, AllocUarOut};
use bypass_hw::cmd::vport::ModifyNicVportContextIn;
use bypass_hw::cmd::{MboxIn, MboxOut, Opcode};
use bypass_hw::eqe::{EQE_OWNER_INIT_VAL, EventType};
use bypass_hw::init_seg as iseg;
use bypass_hw::syndrome::CmdStatus;
use bypass_sim::iommu::Perm;
use bypass_sim::memory::{HostMemory, PAGE_SIZE, SimMemory};
use bypass_sim::{Device, Profile};
use zerocopy::{FromBytes, IntoBytes};

/// IOVA where host memory is mapped (rdma-core's allocator starts at 0x10000; any mapped,
/// page-aligned IOVA works).
pub const IOVA_BASE: u64 = 0x10_0000;
/// Host memory per device.
pub const MEM_LEN: usize = 32 << 20;
/// Virtual address MRs pretend to live at: VA = `VA_BASE` + offset in host memory.
pub const VA_BASE: u64 = 0x7f00_0000_0000;
/// Mailbox blocks per direction: enough for a 1 MiB message.
pub const MAILBOXES: usize = 2052;
/// Offset of the command queue page.
const CMDQ_OFF: usize = 0;
/// Offset of the input mailbox arena.
const IN_BOX_OFF: usize = PAGE_SIZE;

/// Why a command failed, as the driver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdFailure {
    /// The device gave the entry back with a delivery error (`status_own` bits 7..1).
    Delivery(DeliveryStatus),
    /// Delivered; `mbox_out.status` is not OK.
    Status {
        /// The status.
        status: CmdStatus,
        /// The syndrome.
        syndrome: u32,
    },
    /// The device never gave the entry back.
    NotCompleted,
}

impl CmdFailure {
    /// The command status, if the failure is one.
    pub fn status(&self) -> Option<CmdStatus> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
    /// The syndrome, if the failure carries one.
    pub fn syndrome(&self) -> Option<u32> {
        match self {
            Self::Status { syndrome, .. } => Some(*syndrome),
            _ => None,
        }
    }
}

/// A command written to the queue but not yet rung: where its pieces are, so a test can
/// corrupt them before [`Raw::ring`].
#[derive(Debug, Clone)]
pub struct Posted {
    /// Slot.
    pub slot: u8,
    /// Offset of the entry in host memory.
    pub entry_off: usize,
    /// Offsets of the input mailbox blocks.
    pub in_blocks: Vec<usize>,
    /// Offsets of the output mailbox blocks.
    pub out_blocks: Vec<usize>,
    /// The output length asked for.
    pub out_len: usize,
}

/// An EQ as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostEq {
    /// EQ number.
    pub eqn: u32,
    /// Ring offset in host memory.
    pub off: usize,
    /// Entries.
    pub nent: u32,
    /// Consumer index.
    pub ci: u32,
    /// UAR page of its doorbell.
    pub uar: u32,
}

/// A CQ as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostCq {
    /// CQ number.
    pub cqn: u32,
    /// Ring offset.
    pub off: usize,
    /// Entries.
    pub nent: u32,
    /// Bytes per CQE (64 or 128).
    pub cqe_size: usize,
    /// Doorbell record offset (dword 0: consumer index, dword 1: arm).
    pub dbr_off: usize,
    /// Consumer index.
    pub ci: u32,
}

/// A memory region as the host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostMr {
    /// lkey = rkey.
    pub key: u32,
    /// Offset in host memory.
    pub off: usize,
    /// Virtual address the key covers from.
    pub va: u64,
    /// Length.
    pub len: usize,
}

/// A [`Raw`] at one moment ([`Raw::snapshot`]).
#[derive(Debug)]
pub struct RawSnapshot {
    /// The device and its host memory.
    pub dev: bypass_sim::device::DeviceSnapshot,
    next: usize,
    token: u8,
    uar: u32,
    async_eq: Option<HostEq>,
}

/// One device and the driver's view of it.
pub struct Raw {
    /// The device.
    pub dev: Device,
    /// Its host memory.
    pub mem: Arc<SimMemory>,
    next: usize,
    token: u8,
    mailboxes: usize,
    /// UAR allocated by `bring_up` (for the async EQ and the helpers' CQs).
    pub uar: u32,
    /// The async EQ `bring_up` created (page requests, CQ errors, port changes; not CMD).
    pub async_eq: Option<HostEq>,
    /// When set, every command [`Raw::cmd`] runs is appended: its input and output length
    /// (the fuzz seeds' capture of real commands).
    pub log: Option<Vec<(Vec<u8>, usize)>>,
    /// The RNR retry count [`Raw::rtr2rts`] gives RC QPs (7, infinite, unless changed).
    pub rnr_retry: u8,
}

impl Raw {
    /// A device with `profile`, host memory mapped, nothing else done.
    pub fn new(profile: Profile) -> Self {
        Self::with_memory(profile, MEM_LEN, MAILBOXES)
    }

    /// Like [`Raw::new`] with `mem_len` bytes of host memory and `mailboxes` blocks per
    /// direction (a smaller device is faster to make: the fuzz target uses 2 MiB and 24).
    pub fn with_memory(profile: Profile, mem_len: usize, mailboxes: usize) -> Self {
        let mut dev = Device::new(profile);
        let mem = Arc::new(SimMemory::new(mem_len).expect("host memory"));
        let mem_len = mem.len();
        dev.iommu()
            .map(IOVA_BASE, mem.clone(), 0, mem_len, Perm::RW)
            .expect("map host memory");
        Self {
            dev,
            mem,
            next: IN_BOX_OFF + 2 * mailboxes * MAILBOX_ALIGN,
            token: 0,
            mailboxes,
            uar: 0,
            async_eq: None,
            log: None,
            rnr_retry: 7,
        }
    }

    /// The device's state and host memory ([`Device::snapshot`]) and the driver's own
    /// bookkeeping (allocator, command token, async EQ), for [`Raw::reset_to`].
    pub fn snapshot(&self) -> RawSnapshot {
        RawSnapshot {
            dev: self.dev.snapshot(),
            next: self.next,
            token: self.token,
            uar: self.uar,
            async_eq: self.async_eq,
        }
    }

    /// Puts device, host memory and driver bookkeeping back as they were at `snap` (taken of
    /// this `Raw`).
    pub fn reset_to(&mut self, snap: &RawSnapshot) {
        self.dev.reset_to(&snap.dev);
        self.next = snap.next;
        self.token = snap.token;
        self.uar = snap.uar;
        self.async_eq = snap.async_eq;
    }

    /// A default-profile device, brought up.
    pub fn up() -> Self {
        let mut r = Self::new(Profile::default());
        r.bring_up();
        r
    }

    /// IOVA of host offset `off`.
    pub fn iova(&self, off: usize) -> u64 {
        IOVA_BASE + off as u64
    }

    /// Allocates `len` zeroed bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: usize, align: usize) -> usize {
        let off = self.next.next_multiple_of(align);
        self.next = off + len;
        assert!(self.next <= self.mem.len(), "test host memory exhausted");
        self.write(off, &vec![0; len]);
        off
    }

    /// Writes host memory.
    pub fn write(&self, off: usize, bytes: &[u8]) {
        assert!(self.mem.write_at(off, bytes), "host write out of range");
    }

    /// Reads host memory.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        self.mem.to_vec(off, len).expect("host read out of range")
    }

    fn read32(&mut self, reg: usize) -> u32 {
        let mut b = [0u8; 4];
        self.dev.mmio_read(reg as u64, &mut b).expect("mmio read");
        u32::from_be_bytes(b)
    }

    fn write32(&mut self, reg: usize, v: u32) {
        self.dev
            .mmio_write(reg as u64, &v.to_be_bytes())
            .expect("mmio write");
    }

    /// Tells the device where the command queue is (rdma-core `mlx5_vfio_init_cmd_interface`)
    /// and checks the firmware left the initializing state.
    pub fn init_cmdq(&mut self) {
        assert_eq!(
            self.read32(iseg::CMDIF_REV_FW_SUB) >> 16,
            u32::from(iseg::CMDIF_REV)
        );
        let iova = self.iova(CMDQ_OFF);
        self.write32(iseg::CMDQ_ADDR_H, (iova >> 32) as u32);
        self.write32(iseg::CMDQ_ADDR_L_SZ, iova as u32 & 0xffff_f000);
        assert_eq!(self.read32(iseg::INITIALIZING) & iseg::INITIALIZING_BIT, 0);
    }

    /// Writes a command into `slot` (entry, input chain, output chain) without ringing.
    pub fn post(&mut self, slot: u8, input: &[u8], out_len: usize) -> Posted {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let entry_off = CMDQ_OFF + usize::from(slot) * CMD_ENTRY_SIZE;
        let in_blocks = self.write_chain(IN_BOX_OFF, input.len(), token, Some(input));
        let out_box = IN_BOX_OFF + self.mailboxes * MAILBOX_ALIGN;
        let out_blocks = self.write_chain(out_box, out_len, token, None);
        let mut e = CmdLayout::new_zeroed_layout();
        e.set_cmd_type(MLX5_PCI_CMD_XPORT)
            .set_inlen(input.len() as u32)
            .set_outlen(out_len as u32)
            .set_token(token)
            .set_in_ptr(in_blocks.first().map_or(0, |&o| self.iova(o)))
            .set_out_ptr(out_blocks.first().map_or(0, |&o| self.iova(o)));
        let n = input.len().min(CMD_INLINE_LEN);
        e.input[..n].copy_from_slice(&input[..n]);
        e.give_to_hw();
        self.write(entry_off, e.as_bytes());
        Posted {
            slot,
            entry_off,
            in_blocks,
            out_blocks,
            out_len,
        }
    }

    fn write_chain(
        &mut self,
        arena: usize,
        len: usize,
        token: u8,
        data: Option<&[u8]>,
    ) -> Vec<usize> {
        let n = mailbox_blocks(len);
        assert!(
            n <= self.mailboxes,
            "message too long for the mailbox arena"
        );
        let offs: Vec<usize> = (0..n).map(|b| arena + b * MAILBOX_ALIGN).collect();
        for (b, &off) in offs.iter().enumerate() {
            let mut blk = CmdMailbox::new_zeroed_block();
            if let (Some(d), Some(r)) = (data, block_range(len, b)) {
                blk.data[..r.len()].copy_from_slice(&d[r]);
            }
            let next = offs.get(b + 1).map_or(0, |&o| self.iova(o));
            blk.set_next(next).set_block_num(b as u32).set_token(token);
            self.write(off, blk.as_bytes());
        }
        offs
    }

    /// Rings `cmd_dbell` for `slots` and lets the device run.
    pub fn ring(&mut self, slots: u32) {
        self.write32(iseg::CMD_DBELL, slots);
        while self.dev.step() {}
    }

    /// Reads back a completed command: delivery status, output, command status.
    pub fn complete(&mut self, p: &Posted) -> Result<Vec<u8>, CmdFailure> {
        let raw = self.read(p.entry_off, CMD_ENTRY_SIZE);
        let e = CmdLayout::read_from_bytes(&raw[..]).expect("entry");
        if e.hw_owned() {
            return Err(CmdFailure::NotCompleted);
        }
        if e.delivery_status() != DeliveryStatus::OK {
            return Err(CmdFailure::Delivery(e.delivery_status()));
        }
        let mut out = vec![0u8; p.out_len.max(MboxOut::LEN)];
        let n = p.out_len.min(CMD_INLINE_LEN);
        out[..n].copy_from_slice(&e.output[..n]);
        if p.out_len < MboxOut::LEN {
            // The status and syndrome are in the entry's inline output regardless.
            out[..MboxOut::LEN].copy_from_slice(&e.output);
        }
        for (b, &off) in p.out_blocks.iter().enumerate() {
            if let Some(r) = block_range(p.out_len, b) {
                let blk = self.read(off, r.len());
                out[r].copy_from_slice(&blk);
            }
        }
        let o = MboxOut::new_checked(&out[..]).expect("header");
        if o.cmd_status() != CmdStatus::OK {
            return Err(CmdFailure::Status {
                status: o.cmd_status(),
                syndrome: o.syndrome(),
            });
        }
        Ok(out)
    }

    /// Executes one command on slot 0 and returns its output (`out_len` bytes).
    pub fn cmd(&mut self, input: &[u8], out_len: usize) -> Result<Vec<u8>, CmdFailure> {
        if let Some(log) = &mut self.log {
            log.push((input.to_vec(), out_len));
        }
        let p = self.post(0, input, out_len);
        self.ring(1);
        self.complete(&p)
    }

    /// Like [`Raw::cmd`], panicking with the opcode, status and syndrome on failure.
    pub fn ok(&mut self, input: &[u8], out_len: usize) -> Vec<u8> {
        let op = MboxIn::new_checked(input).map(|h| h.op());
        match self.cmd(input, out_len) {
            Ok(o) => o,
            Err(f) => panic!(
                "{op:?} failed: {f:?} ({:?})",
                f.syndrome().and_then(bypass_sim::syndromes::name)
            ),
        }
    }

    /// Runs `op` with a header-only input (op_mod `op_mod`) and a header-only output.
    pub fn simple(&mut self, op: Opcode, op_mod: u16) -> Result<Vec<u8>, CmdFailure> {
        self.cmd(&header(op, op_mod, 16), 16)
    }

    /// QUERY_PAGES `op_mod`: the signed count.
    pub fn query_pages(&mut self, op_mod: QueryPagesOpMod) -> i32 {
        let mut i = header(Opcode::QUERY_PAGES, op_mod.0, QueryPagesIn::LEN);
        QueryPagesIn::new_checked(&mut i[..]).unwrap();
        let o = self.ok(&i, QueryPagesOut::LEN);
        QueryPagesOut::new_checked(&o[..]).unwrap().num_pages_i32()
    }

    /// The MANAGE_PAGES GIVE input for `pages` (IOVAs).
    pub fn give_input(pages: &[u64]) -> Vec<u8> {
        let mut i = header(
            Opcode::MANAGE_PAGES,
            ManagePagesOpMod::GIVE.0,
            manage_pages_in_len(pages.len()),
        );
        let mut m = ManagePagesIn::new_checked(&mut i[..]).unwrap();
        m.set_input_num_entries(pages.len() as u32).unwrap();
        for (k, &p) in pages.iter().enumerate() {
            m.set_pas(k, p).unwrap();
        }
        i
    }

    /// Allocates `n` pages and gives them to the firmware; returns their IOVAs.
    pub fn give_pages(&mut self, n: usize) -> Vec<u64> {
        let pages: Vec<u64> = (0..n)
            .map(|_| {
                let off = self.alloc(PAGE_SIZE, PAGE_SIZE);
                self.iova(off)
            })
            .collect();
        let i = Self::give_input(&pages);
        self.ok(&i, ManagePagesOut::LEN);
        pages
    }

    /// MANAGE_PAGES TAKE of up to `n` pages: the pages returned.
    pub fn take_pages(&mut self, n: usize) -> Result<Vec<u64>, CmdFailure> {
        let mut i = header(
            Opcode::MANAGE_PAGES,
            ManagePagesOpMod::TAKE.0,
            ManagePagesIn::LEN,
        );
        ManagePagesIn::new_checked(&mut i[..])
            .unwrap()
            .set_input_num_entries(n as u32)
            .unwrap();
        let o = self.cmd(&i, manage_pages_out_len(n))?;
        let o = ManagePagesOut::new_checked(&o[..]).unwrap();
        Ok((0..o.output_num_entries() as usize)
            .map(|k| o.pas(k).unwrap())
            .collect())
    }

    /// QUERY_HCA_CAP of `cap`/`mode`: the 4 KiB page.
    pub fn query_cap(&mut self, cap: CapType, mode: CapMode) -> Result<Vec<u8>, CmdFailure> {
        let i = header(
            Opcode::QUERY_HCA_CAP,
            query_cap_op_mod(cap, mode),
            QueryHcaCapIn::LEN,
        );
        let o = self.cmd(&i, QueryHcaCapOut::LEN)?;
        Ok(o[0x10..0x1010].to_vec())
    }

    /// SET_HCA_CAP of `cap` with `page`.
    pub fn set_cap(&mut self, cap: CapType, page: &[u8]) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(Opcode::SET_HCA_CAP, set_cap_op_mod(cap), SetHcaCapIn::LEN);
        i[0x10..0x1010].copy_from_slice(page);
        self.cmd(&i, 16)
    }

    /// ENABLE_HCA.
    pub fn enable_hca(&mut self) -> Result<Vec<u8>, CmdFailure> {
        self.cmd(&header(Opcode::ENABLE_HCA, 0, EnableHcaIn::LEN), 16)
    }

    /// SET_ISSI `issi`.
    pub fn set_issi(&mut self, issi: u16) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(Opcode::SET_ISSI, 0, SetIssiIn::LEN);
        SetIssiIn::new_checked(&mut i[..])
            .unwrap()
            .set_current_issi(issi.into())
            .unwrap();
        self.cmd(&i, 16)
    }

    /// INIT_HCA.
    pub fn init_hca(&mut self) -> Result<Vec<u8>, CmdFailure> {
        self.cmd(&header(Opcode::INIT_HCA, 0, InitHcaIn::LEN), 16)
    }

    /// TEARDOWN_HCA with `profile`.
    pub fn teardown(&mut self, profile: TeardownProfile) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(Opcode::TEARDOWN_HCA, 0, TeardownHcaIn::LEN);
        TeardownHcaIn::new_checked(&mut i[..])
            .unwrap()
            .set_profile(profile.0.into())
            .unwrap();
        self.cmd(&i, 16)
    }

    /// ACCESS_REG write of HOST_ENDIANNESS (`he` = 0: little-endian host).
    pub fn write_host_endianness(&mut self) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(
            Opcode::ACCESS_REG,
            AccessRegOpMod::WRITE.0,
            access_register_in_len(RegisterHostEndianness::LEN),
        );
        let mut a = AccessRegisterIn::new_checked(&mut i[..]).unwrap();
        a.set_register_id(RegisterId::HOST_ENDIANNESS.0.into())
            .unwrap();
        self.cmd(&i, access_register_in_len(RegisterHostEndianness::LEN))
    }

    /// The whole rdma-core bring-up (`mlx5_vfio_setup_function`, then `create_async_eqs`):
    /// command queue, ENABLE_HCA, ISSI, boot pages, HOST_ENDIANNESS, caps, init pages,
    /// INIT_HCA, RoCE enable, a UAR and an async EQ (not subscribed to CMD events, so commands
    /// complete by polling as before the EQ exists).
    pub fn bring_up(&mut self) {
        self.init_cmdq();
        self.enable_hca().expect("ENABLE_HCA");
        let o = self.ok(
            &header(Opcode::QUERY_ISSI, 0, QueryIssiIn::LEN),
            QueryIssiOut::LEN,
        );
        assert!(QueryIssiOut::new_checked(&o[..]).unwrap().supports_issi(1));
        self.set_issi(ISSI_1).expect("SET_ISSI");
        let boot = self.query_pages(QueryPagesOpMod::BOOT);
        self.give_pages(boot.max(0) as usize);
        self.write_host_endianness().expect("HOST_ENDIANNESS");
        let mut cur = self
            .query_cap(CapType::GENERAL, CapMode::CUR)
            .expect("caps");
        let max = self
            .query_cap(CapType::GENERAL, CapMode::MAX)
            .expect("max caps");
        {
            let mut c = CmdHcaCap::new_checked(&mut cur[..]).unwrap();
            c.set_cmdif_checksum(0).unwrap();
            c.set_log_uar_page_sz(0).unwrap();
            let m = CmdHcaCap::new_checked(&max[..]).unwrap();
            if m.mkey_by_name() != 0 {
                c.set_mkey_by_name(1).unwrap();
            }
        }
        self.set_cap(CapType::GENERAL, &cur).expect("SET_HCA_CAP");
        if CmdHcaCap::new_checked(&cur[..]).unwrap().roce() != 0 {
            let mut roce = self
                .query_cap(CapType::ROCE, CapMode::CUR)
                .expect("roce caps");
            RoceCap::new_checked(&mut roce[..])
                .unwrap()
                .set_sw_r_roce_src_udp_port(1)
                .unwrap();
            self.set_cap(CapType::ROCE, &roce)
                .expect("SET_HCA_CAP roce");
        }
        let init = self.query_pages(QueryPagesOpMod::INIT);
        self.give_pages(init.max(0) as usize);
        self.init_hca().expect("INIT_HCA");
        let mut i = header(
            Opcode::MODIFY_NIC_VPORT_CONTEXT,
            0,
            ModifyNicVportContextIn::LEN,
        );
        {
            let mut m = ModifyNicVportContextIn::new_checked(&mut i[..]).unwrap();
            m.field_select_mut().set_roce_en(1).unwrap();
            m.nic_vport_context_mut().set_roce_en(1).unwrap();
        }
        self.ok(&i, 16);
        self.uar = self.alloc_uar().expect("ALLOC_UAR");
        let mask = [
            EventType::PAGE_REQUEST,
            EventType::CQ_ERROR,
            EventType::PORT_CHANGE,
            EventType::INTERNAL_ERROR,
            EventType::WQ_CATAS_ERROR,
            EventType::WQ_INVAL_REQ_ERROR,
            EventType::WQ_ACCESS_ERROR,
            EventType::PATH_MIG,
            EventType::COMM_EST,
            EventType::SQ_DRAINED,
        ];
        let uar = self.uar;
        let eq = self.create_eq(uar, 8, &mask, 0).expect("async EQ");
        self.arm_eq(&eq);
        self.async_eq = Some(eq);
    }

    /// ALLOC_PD.
    pub fn alloc_pd(&mut self) -> Result<u32, CmdFailure> {
        let o = self.cmd(
            &header(Opcode::ALLOC_PD, 0, AllocPdIn::LEN),
            AllocPdOut::LEN,
        )?;
        Ok(AllocPdOut::new_checked(&o[..]).unwrap().pd())
    }

    /// ALLOC_UAR.
    pub fn alloc_uar(&mut self) -> Result<u32, CmdFailure> {
        let o = self.cmd(
            &header(Opcode::ALLOC_UAR, 0, AllocUarIn::LEN),
            AllocUarOut::LEN,
        )?;
        Ok(AllocUarOut::new_checked(&o[..]).unwrap().uar())
    }

    /// A DEALLOC_PD / DEALLOC_UAR / DESTROY_* input naming object `n` (24 bits at 0x48).
    pub fn destroy_input(op: Opcode, n: u32) -> Vec<u8> {
        let mut i = header(op, 0, 16);
        if op == Opcode::DESTROY_EQ {
            DestroyEqIn::new_checked(&mut i[..])
                .unwrap()
                .set_eq_number(n)
                .unwrap();
        } else {
            i[9..12].copy_from_slice(&n.to_be_bytes()[1..]);
        }
        i
    }

    /// Runs the destroy/dealloc command `op` on object `n`.
    pub fn destroy(&mut self, op: Opcode, n: u32) -> Result<Vec<u8>, CmdFailure> {
        let i = Self::destroy_input(op, n);
        self.cmd(&i, 16)
    }

    /// A CREATE_EQ input for a ring at host offset `off` of `1 << log_size` EQEs (one page
    /// list entry per 4 KiB).
    pub fn create_eq_input(
        &self,
        uar: u32,
        log_size: u8,
        events: &[EventType],
        intr: u16,
        off: usize,
    ) -> Vec<u8> {
        let bytes = 64usize << log_size;
        let npages = bytes.div_ceil(PAGE_SIZE);
        let mut i = header(Opcode::CREATE_EQ, 0, create_eq_in_len(npages));
        let mut c = CreateEqIn::new_checked(&mut i[..]).unwrap();
        for t in events {
            c.enable_event(t.0.into()).unwrap();
        }
        for k in 0..npages {
            c.set_pas(k, self.iova(off + k * PAGE_SIZE)).unwrap();
        }
        let mut e = c.eqc_mut();
        e.set_log_eq_size(log_size.into()).unwrap();
        e.set_uar_page(uar).unwrap();
        e.set_intr(intr.into()).unwrap();
        e.set_log_page_size(0).unwrap();
        i
    }

    /// CREATE_EQ: allocates the ring (owner bits initialised to 1) and creates the EQ.
    pub fn create_eq(
        &mut self,
        uar: u32,
        log_size: u8,
        events: &[EventType],
        intr: u16,
    ) -> Result<HostEq, CmdFailure> {
        let nent = 1u32 << log_size;
        let off = self.alloc((64 * nent as usize).max(PAGE_SIZE), PAGE_SIZE);
        for k in 0..nent as usize {
            self.write(off + k * 64 + 63, &[EQE_OWNER_INIT_VAL]);
        }
        let i = self.create_eq_input(uar, log_size, events, intr, off);
        let o = self.cmd(&i, CreateEqOut::LEN)?;
        Ok(HostEq {
            eqn: CreateEqOut::new_checked(&o[..]).unwrap().eq_number(),
            off,
            nent,
            ci: 0,
            uar,
        })
    }

    /// Writes the EQ doorbell: consumer index and arm (UAR + 0x40).
    pub fn arm_eq(&mut self, eq: &HostEq) {
        let v = (eq.ci & 0x00ff_ffff) | (eq.eqn << 24);
        let off = u64::from(eq.uar) * 4096 + 0x40;
        self.dev
            .mmio_write(off, &v.to_be_bytes())
            .expect("EQ doorbell");
        while self.dev.step() {}
    }

    /// Takes the EQEs software owns (rdma-core `mlx5_eq_get_eqe`), as (type, sub_type, data),
    /// and re-arms the EQ.
    pub fn poll_eq(&mut self, eq: &mut HostEq) -> Vec<(u8, u8, [u8; 28])> {
        let mut v = Vec::new();
        loop {
            let idx = (eq.ci & (eq.nent - 1)) as usize;
            let e = self.read(eq.off + idx * 64, 64);
            let owner = e[63] & 1;
            if (owner != 0) != (eq.ci & eq.nent != 0) {
                break;
            }
            let mut data = [0u8; 28];
            data.copy_from_slice(&e[0x20..0x3c]);
            v.push((e[1], e[3], data));
            eq.ci = eq.ci.wrapping_add(1);
        }
        self.arm_eq(eq);
        v
    }

    /// Polls the async EQ `bring_up` created.
    pub fn poll_async(&mut self) -> Vec<(u8, u8, [u8; 28])> {
        let mut eq = self.async_eq.expect("bring_up first");
        let v = self.poll_eq(&mut eq);
        self.async_eq = Some(eq);
        v
    }

    /// A CREATE_CQ input for a ring at `off` with its doorbell record at `dbr_off`.
    pub fn create_cq_input(
        &self,
        log_size: u8,
        eqn: u32,
        uar: u32,
        off: usize,
        dbr_off: usize,
    ) -> Vec<u8> {
        let bytes = 64usize << log_size;
        let npages = bytes.div_ceil(PAGE_SIZE);
        let mut i = header(Opcode::CREATE_CQ, 0, create_cq_in_len(npages));
        let mut c = CreateCqIn::new_checked(&mut i[..]).unwrap();
        for k in 0..npages {
            c.set_pas(k, self.iova(off + k * PAGE_SIZE)).unwrap();
        }
        let dbr = self.iova(dbr_off);
        let mut x = c.cqc_mut();
        x.set_cqe_sz(cqe_sz::BYTES_64.into()).unwrap();
        x.set_log_cq_size(log_size.into()).unwrap();
        x.set_uar_page(uar).unwrap();
        x.set_c_eqn(eqn).unwrap();
        x.set_log_page_size(0).unwrap();
        x.set_dbr_addr(dbr).unwrap();
        i
    }

    /// CREATE_CQ of `1 << log_size` 64-byte CQEs reporting to `eqn`, on the `bring_up` UAR.
    /// The ring starts invalid (op_own = 0xf1, rdma-core `mlx5_alloc_cq_buf`'s init).
    pub fn create_cq(&mut self, log_size: u8, eqn: u32) -> Result<HostCq, CmdFailure> {
        let nent = 1u32 << log_size;
        let off = self.alloc((64 * nent as usize).max(PAGE_SIZE), PAGE_SIZE);
        for k in 0..nent as usize {
            self.write(off + k * 64 + 63, &[0xf1]);
        }
        let dbr_off = self.alloc(64, 64);
        let uar = self.uar;
        let i = self.create_cq_input(log_size, eqn, uar, off, dbr_off);
        let o = self.cmd(&i, CreateCqOut::LEN)?;
        Ok(HostCq {
            cqn: CreateCqOut::new_checked(&o[..]).unwrap().cqn(),
            off,
            nent,
            cqe_size: 64,
            dbr_off,
            ci: 0,
        })
    }

    /// DESTROY_CQ.
    pub fn destroy_cq(&mut self, cqn: u32) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(Opcode::DESTROY_CQ, 0, DestroyCqIn::LEN);
        DestroyCqIn::new_checked(&mut i[..])
            .unwrap()
            .set_cqn(cqn)
            .unwrap();
        self.cmd(&i, 16)
    }

    /// A CREATE_MKEY input registering `len` bytes at host offset `off` (VA = `VA_BASE + off`)
    /// in `pd` with `access`, as rdma-core's `mlx5_vfio_reg_mr` builds it (4 KiB MTT pages).
    pub fn create_mkey_input(
        &self,
        pd: u32,
        off: usize,
        len: usize,
        access: MkeyAccess,
        variant: u8,
    ) -> Vec<u8> {
        let va = VA_BASE + off as u64;
        let first = va & !0xfff;
        let npages = if len == 0 {
            0
        } else {
            ((va + len as u64 - 1) >> 12) - (va >> 12) + 1
        } as usize;
        let mut i = header(Opcode::CREATE_MKEY, 0, create_mkey_in_len(npages));
        let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
        c.set_pg_access(1).unwrap();
        c.set_translations_octword_actual_size(npages.div_ceil(2) as u32)
            .unwrap();
        for k in 0..npages {
            let iova = self.iova((first - VA_BASE) as usize + k * PAGE_SIZE);
            c.set_klm_pas_mtt(k, mtt_entry(iova, MLX5_MTT_READ | MLX5_MTT_WRITE))
                .unwrap();
        }
        let mut m = c.mkc_mut();
        m.set_access_mode(access_mode::MTT).unwrap();
        m.set_access(access).unwrap();
        m.set_qpn(0x00ff_ffff).unwrap();
        m.set_mkey_7_0(variant.into()).unwrap();
        m.set_pd(pd).unwrap();
        m.set_start_addr(va).unwrap();
        m.set_len(len as u64).unwrap();
        m.set_translations_octword_size(npages.div_ceil(2) as u32)
            .unwrap();
        m.set_log_page_size(12).unwrap();
        i
    }

    /// Allocates `len` bytes and registers them (CREATE_MKEY) in `pd` with `access`.
    pub fn reg_mr(
        &mut self,
        pd: u32,
        len: usize,
        access: MkeyAccess,
    ) -> Result<HostMr, CmdFailure> {
        let off = self.alloc(len.max(1), PAGE_SIZE);
        let variant = 0x5a;
        let i = self.create_mkey_input(pd, off, len, access, variant);
        let o = self.cmd(&i, CreateMkeyOut::LEN)?;
        let index = CreateMkeyOut::new_checked(&o[..]).unwrap().mkey_index();
        Ok(HostMr {
            key: mkey_from(index, variant),
            off,
            va: VA_BASE + off as u64,
            len,
        })
    }

    /// DESTROY_MKEY of `key`.
    pub fn dereg_mr(&mut self, key: u32) -> Result<Vec<u8>, CmdFailure> {
        let mut i = header(Opcode::DESTROY_MKEY, 0, DestroyMkeyIn::LEN);
        DestroyMkeyIn::new_checked(&mut i[..])
            .unwrap()
            .set_mkey_index(key >> 8)
            .unwrap();
        self.cmd(&i, 16)
    }
}

/// A zeroed input of `len` bytes (at least the 16-byte header) with `op` and `op_mod` set.
pub fn header(op: Opcode, op_mod: u16, len: usize) -> Vec<u8> {
    let mut i = vec![0u8; len.max(MboxIn::LEN)];
    let mut h = MboxIn::new_checked(&mut i[..]).unwrap();
    h.set_opcode(op.0.into()).unwrap();
    h.set_op_mod(op_mod.into()).unwrap();
    i
}

/// Zeroed entry/mailbox constructors (zerocopy's `new_zeroed` under names that read well here).
trait Zeroed {
    fn new_zeroed_layout() -> CmdLayout;
}
impl Zeroed for CmdLayout {
    fn new_zeroed_layout() -> CmdLayout {
        <CmdLayout as zerocopy::FromZeros>::new_zeroed()
    }
}
trait ZeroedBlock {
    fn new_zeroed_block() -> CmdMailbox;
}
impl ZeroedBlock for CmdMailbox {
    fn new_zeroed_block() -> CmdMailbox {
        <CmdMailbox as zerocopy::FromZeros>::new_zeroed()
    }
}

/// Reads `MAILBOX_DATA_LEN` for the compiler: the arena stride must hold a block.
const _: () = assert!(MAILBOX_DATA_LEN + 64 <= MAILBOX_ALIGN);

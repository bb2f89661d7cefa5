//! The firmware command interface: the command queue page, mailbox chains, posting a command
//! and waiting for it, by polling or by CMD events.
//!
//! Owns: [`CmdQueue`] (the queue page, the input/output mailbox arenas, the token, the async
//! EQ once it exists, and the events it carried that others must act on). Must not: know what
//! a command means beyond its header (bring-up, pages and resources build inputs with
//! `bypass-hw` views and parse outputs themselves).
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_init_cmd_interface`,
//! `mlx5_vfio_post_cmd`, `mlx5_vfio_cmd_exec`, `mlx5_vfio_wait_event`, `mlx5_copy_to_msg`,
//! `mlx5_copy_from_msg`), kernel `drivers/net/ethernet/mellanox/mlx5/core/cmd.c`
//! (`cmd_work_handler`: ownership set last, then the doorbell; `mlx5_cmd_comp_handler`: the
//! CMD EQE's vector is a bitmap of completed slots).
//!
//! Every command uses slot 0 and commands serialise on a mutex (control path only); page
//! requests announced by events are answered by the caller of [`CmdQueue::take_events`] with
//! ordinary commands (not on slot 31 as rdma-core does: one path for MANAGE_PAGES). Mailbox
//! blocks sit [`MAILBOX_ALIGN`] apart in one arena per direction, grown on demand.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bypass_hw::cmd::entry::{
    CMD_ENTRY_SIZE, CMD_INLINE_LEN, CmdLayout, CmdMailbox, DeliveryStatus, MAILBOX_ALIGN,
    MLX5_PCI_CMD_XPORT, block_range, inline_range, mailbox_blocks,
};
use bypass_hw::cmd::{MboxIn, MboxOut, Opcode};
use bypass_hw::eqe::EventType;
use bypass_hw::init_seg as iseg;
use bypass_hw::syndrome::CmdStatus;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::backend::{Backend, Progress};
use crate::dma::{DmaBuf, DmaMapper};
use crate::eq::{AsyncEvent, EventQueue};
use crate::error::{DriverError, Result};

/// The longest command message (input or output): 16 inline bytes and 2048 blocks (1 MiB).
pub const MAX_MSG_LEN: usize = CMD_INLINE_LEN + 2048 * bypass_hw::cmd::entry::MAILBOX_DATA_LEN;
/// Default time a command may take (rdma-core waits 60 s).
pub const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for the firmware's `initializing` bit to clear (rdma-core: 120 s).
pub const FW_INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Mailbox blocks per direction allocated up front (covers a 4 KiB capability page).
const INITIAL_BLOCKS: usize = 16;
/// The slot every command uses.
const SLOT: u32 = 0;

/// Byte offset of `status_own` in an entry.
const STATUS_OWN_OFF: usize = 0x3f;

/// How commands complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionMode {
    /// Polling the entry's ownership bit (before the async EQ exists, and while it is torn
    /// down).
    Polling,
    /// Waiting for the CMD event on the async EQ's vector.
    Events,
}

/// Counters of the command interface.
#[derive(Debug, Default)]
struct Stats {
    commands: AtomicU64,
    by_polling: AtomicU64,
    by_event: AtomicU64,
    failed: AtomicU64,
}

/// A snapshot of the command interface's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmdStats {
    /// Commands executed.
    pub commands: u64,
    /// Completions seen by polling the ownership bit.
    pub completed_by_polling: u64,
    /// Completions seen through a CMD event.
    pub completed_by_event: u64,
    /// Commands that returned an error (delivery or status).
    pub failed: u64,
}

struct Arena {
    buf: DmaBuf,
    blocks: usize,
}

impl Arena {
    fn new(dma: &Arc<DmaMapper>, blocks: usize) -> Result<Self> {
        let buf = dma.alloc(blocks.max(1) * MAILBOX_ALIGN)?;
        let blocks = buf.len() / MAILBOX_ALIGN;
        Ok(Self { buf, blocks })
    }
}

struct State {
    page: DmaBuf,
    inbox: Arena,
    outbox: Arena,
    token: u8,
    eq: Option<EventQueue>,
    /// Slots whose CMD event arrived and that nobody has claimed yet.
    done: u32,
    /// Signed page requests (sum) from PAGE_REQUEST events, not yet answered.
    page_requests: i64,
    /// Other async events, oldest first, for [`CmdQueue::take_events`].
    events: Vec<AsyncEvent>,
    /// Signalled whenever an event is kept for [`CmdQueue::take_events`] (the async-event
    /// channel's eventfd: a command waiter may take the interrupt that announced it).
    notify: Option<Arc<nix::sys::eventfd::EventFd>>,
}

/// The firmware command queue of one function.
///
/// Only bring-up makes one ([`crate::Hca::open`]); a second queue on a backend would take
/// over the function's command interface from safe code:
/// ```compile_fail,E0624
/// use std::sync::Arc;
/// use bypass_driver::backend::Backend;
/// use bypass_driver::cmdq::CmdQueue;
/// use bypass_driver::dma::DmaMapper;
/// fn second(b: Arc<dyn Backend>) {
///     let dma = DmaMapper::new(b.clone());
///     let _ = CmdQueue::new(b, dma, std::time::Duration::from_secs(1));
/// }
/// ```
pub struct CmdQueue {
    backend: Arc<dyn Backend>,
    dma: Arc<DmaMapper>,
    state: Mutex<State>,
    timeout: Duration,
    stats: Stats,
}

impl std::fmt::Debug for CmdQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmdQueue")
            .field("timeout", &self.timeout)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn read_be32(backend: &dyn Backend, off: usize) -> u32 {
    u32::from_be(backend.read32(off as u64))
}

/// Writes an init-segment register. Callers are this module's bring-up and doorbell paths,
/// which own the command queue whose address and doorbell they write.
fn write_be32(backend: &dyn Backend, off: usize, v: u32) {
    // SAFETY: only the command queue's own registers are written (the queue's address, its
    // doorbell, the init-segment handshake), for a queue this module built and keeps mapped.
    unsafe { backend.write32(off as u64, v.to_be()) };
}

/// Waits for the firmware to clear `initializing` (bit 31 at 0x1fc), polling every 2 ms
/// (rdma-core `wait_fw_init`), calling `progress()` in the loop.
pub fn wait_fw_init(backend: &dyn Backend, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        if read_be32(backend, iseg::INITIALIZING) & iseg::INITIALIZING_BIT == 0 {
            return Ok(());
        }
        let idle = backend.progress() == Progress::Idle;
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(DriverError::FirmwareInit { waited });
        }
        if !idle {
            std::thread::sleep(Duration::from_millis(2));
        } else {
            // A stepped device that is idle will not change by itself; a short sleep keeps
            // a misbehaving one from spinning a core.
            std::thread::yield_now();
        }
    }
}

impl CmdQueue {
    /// Sets up the command interface (rdma-core `mlx5_vfio_init_cmd_interface`): checks
    /// `cmdif_rev == 5` and the queue geometry, allocates the queue page and mailboxes,
    /// writes the queue address, and waits for `initializing` to clear.
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        dma: Arc<DmaMapper>,
        timeout: Duration,
    ) -> Result<Self> {
        let rev = read_be32(&*backend, iseg::CMDIF_REV_FW_SUB) >> 16;
        if rev != u32::from(iseg::CMDIF_REV) {
            return Err(DriverError::CmdifRev { found: rev });
        }
        let l_sz = read_be32(&*backend, iseg::CMDQ_ADDR_L_SZ);
        let log_size = ((l_sz >> 4) & 0xf) as u8;
        let log_stride = (l_sz & 0xf) as u8;
        // rdma-core: 1 << log_sz <= MLX5_MAX_COMMANDS, and the queue fits one 4 KiB page.
        if log_size > iseg::MAX_LOG_CMDQ_SIZE
            || log_size + log_stride > iseg::MAX_LOG_CMDQ_BYTES
            || (1usize << log_stride) < CMD_ENTRY_SIZE
        {
            return Err(DriverError::CmdqGeometry {
                log_size,
                log_stride,
            });
        }
        let page = dma.alloc(crate::dma::PAGE_SIZE)?;
        let inbox = Arena::new(&dma, INITIAL_BLOCKS)?;
        let outbox = Arena::new(&dma, INITIAL_BLOCKS)?;
        let iova = page.iova();
        write_be32(&*backend, iseg::CMDQ_ADDR_H, (iova >> 32) as u32);
        // The queue page is in memory before the device learns its address.
        fence(Ordering::SeqCst);
        write_be32(&*backend, iseg::CMDQ_ADDR_L_SZ, (iova as u32) & 0xffff_f000);
        wait_fw_init(&*backend, FW_INIT_TIMEOUT)?;
        Ok(Self {
            backend,
            dma,
            state: Mutex::new(State {
                page,
                inbox,
                outbox,
                token: 0,
                eq: None,
                done: 0,
                page_requests: 0,
                events: Vec::new(),
                notify: None,
            }),
            timeout,
            stats: Stats::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The backend commands go through.
    ///
    /// # Safety
    /// As for [`crate::Hca::backend`]: the caller must not unmap or remap an IOVA a live
    /// driver object maps, nor write a doorbell, BlueFlame or command-queue register through
    /// it.
    ///
    /// Safe code cannot reach it, even holding the queue:
    /// ```compile_fail,E0133
    /// fn raw(q: &bypass_driver::cmdq::CmdQueue) {
    ///     let _ = q.backend();
    /// }
    /// ```
    pub unsafe fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// How commands complete now.
    pub fn mode(&self) -> CompletionMode {
        if self.lock().eq.is_some() {
            CompletionMode::Events
        } else {
            CompletionMode::Polling
        }
    }

    /// The command interface's counters.
    pub fn stats(&self) -> CmdStats {
        CmdStats {
            commands: self.stats.commands.load(Ordering::Relaxed),
            completed_by_polling: self.stats.by_polling.load(Ordering::Relaxed),
            completed_by_event: self.stats.by_event.load(Ordering::Relaxed),
            failed: self.stats.failed.load(Ordering::Relaxed),
        }
    }

    /// Hands the async EQ (subscribed to CMD events, armed) to the command queue: from now
    /// on commands complete by event.
    pub fn attach_eq(&self, eq: EventQueue) {
        let mut st = self.lock();
        st.eq = Some(eq);
        // The EQ may already hold the CMD event of its own CREATE_EQ: collect it now so that
        // it is not taken for the next command's completion.
        Self::drain_eq(&self.backend, &mut st);
        st.done = 0;
    }

    /// Takes the async EQ back: commands complete by polling again (before DESTROY_EQ).
    pub fn detach_eq(&self) -> Option<EventQueue> {
        let mut st = self.lock();
        // Events still in the ring are collected first so nothing is lost.
        Self::drain_eq(&self.backend, &mut st);
        st.eq.take()
    }

    /// Signals `fd` from now on whenever an event other than CMD is kept for
    /// [`CmdQueue::take_events`] (replacing any earlier one).
    pub fn set_event_notify(&self, fd: Arc<nix::sys::eventfd::EventFd>) {
        self.lock().notify = Some(fd);
    }

    /// Polls the async EQ and returns what it carried for others: the net page request
    /// (positive: give, negative: take) and every event that is neither CMD nor
    /// PAGE_REQUEST. The EQ is re-armed.
    pub fn take_events(&self) -> (i64, Vec<AsyncEvent>) {
        let mut st = self.lock();
        Self::drain_eq(&self.backend, &mut st);
        let pages = std::mem::take(&mut st.page_requests);
        (pages, std::mem::take(&mut st.events))
    }

    /// Polls the async EQ (if any), recording CMD completions, page requests and other
    /// events, then re-arms it.
    fn drain_eq(backend: &Arc<dyn Backend>, st: &mut State) {
        let State {
            eq,
            done,
            page_requests,
            events,
            notify,
            ..
        } = st;
        let Some(eq) = eq.as_mut() else { return };
        let mut kept = false;
        eq.poll(&**backend, |ev| match ev.event_type {
            EventType::CMD => *done |= ev.cmd_vector(),
            EventType::PAGE_REQUEST => {
                *page_requests = page_requests.saturating_add(i64::from(ev.page_request()));
                kept = true;
            }
            _ => {
                events.push(*ev);
                kept = true;
            }
        });
        eq.update_ci(&**backend, true);
        if let (true, Some(fd)) = (kept, notify.as_ref()) {
            let _ = fd.write(1);
        }
    }

    /// Executes one command: `input` (header included) and `out_len` bytes of output
    /// (at least the 16-byte header). Returns the output, `out_len.max(16)` bytes.
    ///
    /// Errors: [`DriverError::CmdDelivery`] (the device could not deliver it),
    /// [`DriverError::CmdFailed`] (non-zero `mbox_out.status`, with the syndrome),
    /// [`DriverError::CmdTimeout`], [`DriverError::CmdNotCompleted`] (a stepped device went
    /// idle), [`DriverError::CmdTooLong`]/[`DriverError::CmdTooShort`].
    pub fn exec(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>> {
        let hdr = MboxIn::new_checked(input)
            .map_err(|_| DriverError::CmdTooShort { len: input.len() })?;
        let (op, op_mod) = (hdr.op(), hdr.op_mod() as u16);
        let out_len = out_len.max(MboxOut::LEN);
        for len in [input.len(), out_len] {
            if len > MAX_MSG_LEN {
                return Err(DriverError::CmdTooLong {
                    op,
                    len,
                    max: MAX_MSG_LEN,
                });
            }
        }
        let span = tracing::debug_span!("cmd", %op, op_mod);
        let _g = span.enter();
        self.stats.commands.fetch_add(1, Ordering::Relaxed);
        let r = self.exec_locked(input, out_len, op, op_mod);
        if let Err(e) = &r {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "command failed");
        }
        r
    }

    fn exec_locked(
        &self,
        input: &[u8],
        out_len: usize,
        op: Opcode,
        op_mod: u16,
    ) -> Result<Vec<u8>> {
        let mut st = self.lock();
        self.ensure_blocks(
            &mut st,
            mailbox_blocks(input.len()),
            mailbox_blocks(out_len),
        )?;
        st.token = st.token.wrapping_add(1).max(1);
        let token = st.token;
        // Events already in the EQ belong to earlier commands: collect them before posting.
        Self::drain_eq(&self.backend, &mut st);
        st.done &= !(1 << SLOT);
        let in_ptr = write_chain(&st.inbox, input.len(), token, Some(input))?;
        let out_ptr = write_chain(&st.outbox, out_len, token, None)?;
        let mut e = CmdLayout::new_zeroed();
        e.set_cmd_type(MLX5_PCI_CMD_XPORT)
            .set_inlen(input.len() as u32)
            .set_outlen(out_len as u32)
            .set_token(token)
            .set_in_ptr(in_ptr)
            .set_out_ptr(out_ptr);
        let inl = inline_range(input.len());
        if let (Some(dst), Some(src)) = (e.input.get_mut(inl.clone()), input.get(inl)) {
            dst.copy_from_slice(src);
        }
        e.give_to_hw();
        let entry_off = (SLOT as usize) * CMD_ENTRY_SIZE;
        st.page.write(entry_off, e.as_bytes())?;
        // udma_to_device_barrier: the entry and mailboxes are in memory before the doorbell
        // (rdma-core `mlx5_vfio_post_cmd`).
        fence(Ordering::SeqCst);
        write_be32(&*self.backend, iseg::CMD_DBELL, 1 << SLOT);

        self.wait(&mut st, entry_off, op, op_mod)?;
        // udma_from_device_barrier: read the entry and output only after seeing ownership.
        fence(Ordering::Acquire);
        let mut raw = [0u8; CMD_ENTRY_SIZE];
        st.page.read(entry_off, &mut raw)?;
        let entry = CmdLayout::read_from_bytes(&raw[..]).map_err(|_| DriverError::BadOutput {
            op,
            source: bypass_hw::Error::Truncated {
                what: "mlx5_cmd_layout",
                need: CMD_ENTRY_SIZE,
                got: raw.len(),
            },
        })?;
        let delivery = entry.delivery_status();
        if delivery != DeliveryStatus::OK {
            return Err(DriverError::CmdDelivery {
                op,
                op_mod,
                status: delivery,
            });
        }
        let mut out = vec![0u8; out_len];
        if let Some(dst) = out.get_mut(..CMD_INLINE_LEN) {
            dst.copy_from_slice(&entry.output);
        }
        for b in 0..mailbox_blocks(out_len) {
            if let Some(dst) = block_range(out_len, b).and_then(|r| out.get_mut(r)) {
                st.outbox.buf.read(b * MAILBOX_ALIGN, dst)?;
            }
        }
        let o = MboxOut::new_checked(&out[..])
            .map_err(|source| DriverError::BadOutput { op, source })?;
        let status = o.cmd_status();
        if status != CmdStatus::OK {
            let syndrome = o.syndrome();
            return Err(DriverError::CmdFailed {
                op,
                op_mod,
                status,
                syndrome,
                syndrome_name: self.backend.syndrome_name(syndrome),
            });
        }
        Ok(out)
    }

    fn owned_by_hw(st: &State, entry_off: usize) -> Result<bool> {
        Ok(st.page.read_u8_volatile(entry_off + STATUS_OWN_OFF)? & 1 != 0)
    }

    fn wait(&self, st: &mut State, entry_off: usize, op: Opcode, op_mod: u16) -> Result<()> {
        let start = Instant::now();
        let bit = 1u32 << SLOT;
        loop {
            if let Some(vector) = st.eq.as_ref().map(EventQueue::vector) {
                Self::drain_eq(&self.backend, st);
                if st.done & bit != 0 {
                    st.done &= !bit;
                    // The device writes the entry before the EQE; an event for a slot whose
                    // entry is still the device's is not this command's.
                    if !Self::owned_by_hw(st, entry_off)? {
                        self.stats.by_event.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    tracing::warn!(%op, "CMD event for a slot the device still owns; waiting on");
                }
                let left = self.timeout.saturating_sub(start.elapsed());
                let fired = self
                    .backend
                    .wait_irq(vector, left.min(Duration::from_millis(100)))?;
                if !fired {
                    Self::drain_eq(&self.backend, st);
                    if st.done & bit != 0 {
                        continue;
                    }
                    let gone = start.elapsed() >= self.timeout
                        || self.backend.progress() == Progress::Idle;
                    if gone {
                        if !Self::owned_by_hw(st, entry_off)? {
                            // Completed, but the event never came (a lost interrupt).
                            tracing::warn!(%op, "command completed without its CMD event");
                            self.stats.by_polling.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                        return Err(self.not_done(start, op, op_mod));
                    }
                }
            } else {
                if !Self::owned_by_hw(st, entry_off)? {
                    self.stats.by_polling.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                let idle = self.backend.progress() == Progress::Idle;
                if (idle && Self::owned_by_hw(st, entry_off)?) || start.elapsed() >= self.timeout {
                    if !Self::owned_by_hw(st, entry_off)? {
                        continue;
                    }
                    return Err(self.not_done(start, op, op_mod));
                }
                if !idle {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn not_done(&self, start: Instant, op: Opcode, op_mod: u16) -> DriverError {
        let waited = start.elapsed();
        if waited >= self.timeout {
            DriverError::CmdTimeout { op, op_mod, waited }
        } else {
            DriverError::CmdNotCompleted { op, op_mod }
        }
    }

    fn ensure_blocks(&self, st: &mut State, need_in: usize, need_out: usize) -> Result<()> {
        if st.inbox.blocks < need_in {
            st.inbox = Arena::new(&self.dma, need_in.next_power_of_two())?;
        }
        if st.outbox.blocks < need_out {
            st.outbox = Arena::new(&self.dma, need_out.next_power_of_two())?;
        }
        Ok(())
    }
}

/// Writes the mailbox chain for a `len`-byte message into `arena` (blocks `MAILBOX_ALIGN`
/// apart, numbered from 0, each with `token`, linked by `next`; data from `data` or zero).
/// Returns the first block's IOVA (0 if the message fits inline).
fn write_chain(arena: &Arena, len: usize, token: u8, data: Option<&[u8]>) -> Result<u64> {
    let n = mailbox_blocks(len);
    for b in 0..n {
        let mut blk = CmdMailbox::new_zeroed();
        if let (Some(d), Some(r)) = (data, block_range(len, b))
            && let (Some(dst), Some(src)) = (blk.data.get_mut(..r.len()), d.get(r))
        {
            dst.copy_from_slice(src);
        }
        let next = if b + 1 < n {
            arena.buf.iova_at((b + 1) * MAILBOX_ALIGN)?
        } else {
            0
        };
        blk.set_next(next).set_block_num(b as u32).set_token(token);
        arena.buf.write(b * MAILBOX_ALIGN, blk.as_bytes())?;
    }
    if n == 0 { Ok(0) } else { arena.buf.iova_at(0) }
}

/// A zeroed command input of `len` bytes (at least the header) with `op` and `op_mod` set.
pub fn input(op: Opcode, op_mod: u16, len: usize) -> Vec<u8> {
    let mut i = vec![0u8; len.max(MboxIn::LEN)];
    let mut h = MboxIn::wrap_unchecked(&mut i[..]);
    // Both fit their 16-bit fields and the buffer holds the header: these cannot fail.
    let _ = h.set_opcode(op.0.into());
    let _ = h.set_op_mod(op_mod.into());
    i
}

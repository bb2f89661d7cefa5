//! The extended post of `ibv_qp_ex`: `ibv_wr_start`, per request one `ibv_wr_<op>` (from
//! `qp_ex.wr_id` / `wr_flags`) and its data setter, then `ibv_wr_complete` or `ibv_wr_abort`.
//!
//! Owns: [`WrState`] (the QP's send ops and the batch between start and complete) and every
//! slot of `ibv_qp_ex`. `wr_start` takes the QP's lock (`SpinCell::lock_raw`, held across the
//! C calls as mlx5 holds `sq.lock`); complete/abort release it. Setters copy what they are
//! given (the program may reuse its SGE array or buffer at once, as with mlx5). The first
//! error is kept; `wr_complete` then posts nothing and returns it (mlx5's roll-back).
//! One doorbell per `wr_complete`: the driver cannot take a WQE back, so requests are gathered
//! (allocations reused) and posted together: `post_write` / `WriteBatch` when all are one-SGE
//! RDMA WRITEs on RC (the driver's fast path for this API), else `post_send` / `post_send_list`.
//! Gaps: only the driver knows the SQ's free room, so when it refuses a batch (SQ full, state)
//! the requests before the refused one are posted (mlx5 posts none); a batch deeper than
//! `max_send_wr` is refused whole (ENOMEM). Stricter than mlx5: an op missing from
//! `send_ops_flags` records EOPNOTSUPP (mlx5 posts it, or leaves a NULL slot).
//! Must not: build WQEs or ring doorbells (the driver's post forms do).
//!
//! Sources: rdma-core `providers/mlx5/qp.c` (`mlx5_send_wr_start`/`_complete`/`_abort`;
//! `_common_wqe_init_op`: ENOMEM on overflow; `_mlx5_send_wr_set_sge_list`,
//! `_mlx5_send_wr_set_inline_data[_list]`: ENOMEM past `max_gs` / `max_inline_data`,
//! zero-length SGEs skipped; `mlx5_qp_fill_wr_pfns`, `MLX5_SUPPORTED_SEND_OPS_FLAGS_*`),
//! `libibverbs/man/ibv_wr_post.3.md`.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};

use bypass_driver::post::{Payload, PostError, RemoteAddr, SendFlags, SendOp, SendWr, Sge, UdDest};
use bypass_driver::qp::Qp as DriverQp;
use bypass_driver::qp_attr::QpType;

use crate::abi::{self, ibv_ah, ibv_data_buf, ibv_mw, ibv_mw_bind_info, ibv_qp_ex, ibv_sge};
use crate::ah::Ah;
use crate::ffi::guard;
use crate::qp::Qp;
use crate::qp_post::{post_errno, send_flags};

/// The ops each QP type takes (mlx5's `MLX5_SUPPORTED_SEND_OPS_FLAGS_*` less what bypass
/// does not post: memory windows, invalidation, TSO, atomic write).
const UD_OPS: u64 = abi::IBV_QP_EX_WITH_SEND as u64 | abi::IBV_QP_EX_WITH_SEND_WITH_IMM as u64;
const UC_OPS: u64 =
    UD_OPS | abi::IBV_QP_EX_WITH_RDMA_WRITE as u64 | abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64;
const RC_OPS: u64 = UC_OPS
    | abi::IBV_QP_EX_WITH_RDMA_READ as u64
    | abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64
    | abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64;

/// The extended-post state of a QP (empty for one created without send ops).
#[derive(Debug, Default)]
pub(crate) struct WrState {
    /// The `IBV_QP_EX_WITH_*` ops the QP was created with.
    ops: u64,
    /// Reached only while this thread holds the QP's lock (between `wr_start` and
    /// `wr_complete`/`wr_abort`).
    batch: UnsafeCell<Batch>,
}

impl WrState {
    /// The state of a QP of type `t` created with `send_ops_flags` `ops`, or EOPNOTSUPP for
    /// an op that type does not take (`mlx5_qp_fill_wr_pfns`).
    pub(crate) fn new(ops: u64, t: QpType) -> Result<Self, i32> {
        let takes = match t {
            QpType::Rc => RC_OPS,
            QpType::Uc => UC_OPS,
            QpType::Ud => UD_OPS,
        };
        if ops & !takes != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        Ok(Self {
            ops,
            batch: UnsafeCell::default(),
        })
    }
}

/// Where a gathered request's data is.
#[derive(Debug, Clone, Copy)]
enum Data {
    /// `n` entries of `Batch::sges` from `at`.
    Sges { at: usize, n: usize },
    /// `len` bytes of `Batch::inline` from `at`.
    Inline { at: usize, len: usize },
}

/// One request begun by a `wr_<op>`.
#[derive(Debug, Clone, Copy)]
struct Pending {
    wr_id: u64,
    flags: SendFlags,
    op: SendOp,
    data: Data,
    ud: Option<UdDest>,
}

/// The requests between `wr_start` and `wr_complete`, and the first error.
#[derive(Debug, Default)]
struct Batch {
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    /// The first errno recorded (0: none).
    err: c_int,
    /// The allocation `post_send_list`'s slice is built in, kept between batches (empty).
    scratch: Vec<SendWr<'static>>,
}

impl Batch {
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.err = 0;
    }

    #[cold]
    fn fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }

    /// The request the setters fill: the last one begun (EINVAL if none).
    fn current(&mut self) -> Option<&mut Pending> {
        if self.err != 0 {
            return None;
        }
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
        }
        self.wrs.last_mut()
    }
}

/// The QP of `qpx`, its driver QP and its batch, during a hold.
///
/// # Safety
/// `qpx` from `ibv_qp_to_qp_ex` of a live QP, and this thread is between `wr_start` and
/// `wr_complete`/`wr_abort` on it (the C contract of `ibv_wr_*`); the references are not kept
/// past the C call.
#[inline]
unsafe fn held<'a>(qpx: *mut ibv_qp_ex) -> (&'a Qp, &'a mut Option<DriverQp>, &'a mut Batch) {
    // SAFETY: the caller's contract: a live QP, whose lock this thread holds, which makes
    // the driver QP and the batch this thread's alone.
    unsafe {
        let q = Qp::from_ibv(qpx.cast());
        (q, q.inner.get_raw(), &mut *q.wr.batch.get())
    }
}

/// Begins a request of `op` (needing send op `need`) from `wr_id` / `wr_flags`.
///
/// # Safety
/// As [`held`].
#[inline]
unsafe fn begin(qpx: *mut ibv_qp_ex, need: u32, op: SendOp) {
    // SAFETY: the caller's contract.
    let (q, dq, b) = unsafe { held(qpx) };
    if b.err != 0 {
        return;
    }
    if q.wr.ops & u64::from(need) == 0 {
        return b.fail(libc::EOPNOTSUPP);
    }
    let Some(dq) = dq.as_ref() else {
        return b.fail(libc::EINVAL);
    };
    if b.wrs.len() >= dq.caps().max_send_wr as usize {
        return b.fail(libc::ENOMEM);
    }
    b.wrs.push(Pending {
        // SAFETY: the program set `wr_id`/`wr_flags` before this call, on this thread (the
        // extended post's contract); they are read through the cell's raw place.
        wr_id: unsafe { (*q.ex.get()).wr_id },
        // SAFETY: as above.
        flags: send_flags(unsafe { (*q.ex.get()).wr_flags }),
        op,
        data: Data::Sges {
            at: b.sges.len(),
            n: 0,
        },
        ud: None,
    });
}

/// Sets the current request's SGEs (zero-length entries skipped, as mlx5 does).
///
/// # Safety
/// As [`held`].
#[inline]
unsafe fn set_sges(qpx: *mut ibv_qp_ex, list: &[Sge]) {
    // SAFETY: the caller's contract.
    let (_, dq, b) = unsafe { held(qpx) };
    let max = dq.as_ref().map_or(0, |d| d.caps().max_send_sge) as usize;
    let at = b.sges.len();
    if b.current().is_none() {
        return;
    }
    if list.len() > max {
        return b.fail(libc::ENOMEM);
    }
    b.sges.extend(list.iter().filter(|s| s.length != 0));
    let n = b.sges.len() - at;
    if let Some(p) = b.wrs.last_mut() {
        p.data = Data::Sges { at, n };
    }
}

/// Sets the current request's inline data, gathered from `bufs` (ENOMEM past
/// `max_inline_data`; EINVAL on a READ or atomic, which carry no inline data).
///
/// # Safety
/// As [`held`]; each buffer readable for its length.
unsafe fn set_inline(qpx: *mut ibv_qp_ex, bufs: &[ibv_data_buf]) {
    // SAFETY: the caller's contract.
    let (_, dq, b) = unsafe { held(qpx) };
    let max = dq.as_ref().map_or(0, |d| d.caps().max_inline_data) as usize;
    let at = b.inline.len();
    let Some(p) = b.current() else {
        return;
    };
    if !matches!(
        p.op,
        SendOp::Send | SendOp::SendImm { .. } | SendOp::Write { .. } | SendOp::WriteImm { .. }
    ) {
        return b.fail(libc::EINVAL);
    }
    let total = bufs.iter().try_fold(0usize, |t, d| t.checked_add(d.length));
    let Some(len) = total.filter(|&t| t <= max) else {
        return b.fail(libc::ENOMEM);
    };
    for d in bufs.iter().filter(|d| d.length != 0) {
        if d.addr.is_null() {
            return b.fail(libc::EINVAL);
        }
        // SAFETY: the caller's contract.
        let src = unsafe { std::slice::from_raw_parts(d.addr.cast::<u8>(), d.length) };
        b.inline.extend_from_slice(src);
    }
    if let Some(p) = b.wrs.last_mut() {
        p.data = Data::Inline { at, len };
    }
}

/// The driver's request for `p`, its data in `sges` / `inline`.
#[inline]
fn as_send_wr<'a>(p: &'a Pending, sges: &'a [Sge], inline: &'a [u8]) -> SendWr<'a> {
    let payload = match p.data {
        Data::Sges { at, n } => Payload::Sges(sges.get(at..at + n).unwrap_or(&[])),
        Data::Inline { at, len } => Payload::Inline(inline.get(at..at + len).unwrap_or(&[])),
    };
    SendWr {
        wr_id: p.wr_id,
        op: p.op,
        payload,
        flags: p.flags,
        ud: p.ud.as_ref(),
    }
}

/// The same allocation, emptied, for another lifetime (std collects a mapped `IntoIter`
/// of a same-layout type in place).
fn recycle<'b>(mut v: Vec<SendWr<'_>>) -> Vec<SendWr<'b>> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

/// Posts the batch with one doorbell: 0 or the errno of the request refused.
///
/// # Safety
/// The batch's SGEs are the program's (`ibv_wr_set_sge[_list]`): registered memory it leaves
/// alone until the completions, as libibverbs requires (the driver's posting contract,
/// `bypass_driver::post`).
unsafe fn post(dq: &mut DriverQp, b: &mut Batch) -> c_int {
    let Batch {
        wrs,
        sges,
        inline,
        scratch,
        ..
    } = b;
    let one_sge_write = |p: &Pending| match (p.op, p.data, p.ud) {
        (SendOp::Write { remote }, Data::Sges { at, n: 1 }, None) => Some((remote, sges[at])),
        _ => None,
    };
    if dq.qp_type() == QpType::Rc && wrs.iter().all(|p| one_sge_write(p).is_some()) {
        let refused = if let [p] = wrs.as_slice() {
            one_sge_write(p).and_then(|(remote, local)| {
                // SAFETY: the caller's contract (the program's SGE).
                unsafe { dq.post_write(p.wr_id, local, remote, p.flags) }.err()
            })
        } else {
            let mut wb = match dq.write_batch() {
                Ok(wb) => wb,
                Err(e) => return post_errno(&e),
            };
            wrs.iter().find_map(|p| {
                let (remote, local) = one_sge_write(p)?;
                // SAFETY: the caller's contract (the program's SGE).
                unsafe { wb.write(p.wr_id, local, remote, p.flags) }.err()
            })
        };
        return refused.map_or(0, |e| post_errno(&PostError::from(e)));
    }
    if let [p] = wrs.as_slice() {
        // SAFETY: the caller's contract (the program's SGEs; inline data is copied).
        return match unsafe { dq.post_send(&as_send_wr(p, sges, inline)) } {
            Ok(()) => 0,
            Err(e) => post_errno(&e),
        };
    }
    let mut list = recycle(std::mem::take(scratch));
    list.extend(wrs.iter().map(|p| as_send_wr(p, sges, inline)));
    // SAFETY: the caller's contract (the program's SGEs).
    let r = match unsafe { dq.post_send_list(&list) } {
        Ok(()) => 0,
        Err(e) => post_errno(&e.error),
    };
    *scratch = recycle(list);
    r
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: `qpx` is a live extended QP (the C contract); the lock is taken first, so the
    // batch is this thread's when `held` reaches it.
    unsafe {
        Qp::from_ibv(qpx.cast()).inner.lock_raw();
        held(qpx).2.clear();
    }
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: between `wr_start` and here (the C contract).
    let (q, dq, b) = unsafe { held(qpx) };
    let r = match (b.err, dq.as_mut()) {
        (0, _) if b.wrs.is_empty() => 0,
        // SAFETY: the SGEs the program set in this batch, under libibverbs' contract.
        (0, Some(d)) => guard(libc::EIO, || unsafe { post(d, b) }),
        (0, None) => libc::EINVAL,
        (e, _) => e,
    };
    b.clear();
    // SAFETY: taken by `wr_start` on this thread; `dq` and `b` are not used after this.
    unsafe { q.inner.unlock_raw() };
    r
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: between `wr_start` and here (the C contract).
    let (q, _, b) = unsafe { held(qpx) };
    b.clear();
    // SAFETY: as in `wr_complete`.
    unsafe { q.inner.unlock_raw() };
}

/// A remote address from the C arguments.
fn remote(rkey: u32, addr: u64) -> RemoteAddr {
    RemoteAddr { addr, rkey }
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    // SAFETY: the C contract of `ibv_wr_*` (between `wr_start` and `wr_complete`).
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_SEND, SendOp::Send) }
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    let op = SendOp::SendImm {
        imm: u32::from_be(imm),
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_SEND_WITH_IMM, op) }
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    let op = SendOp::Write {
        remote: remote(rkey, addr),
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_RDMA_WRITE, op) }
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    let op = SendOp::WriteImm {
        remote: remote(rkey, addr),
        imm: u32::from_be(imm),
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, op) }
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    let op = SendOp::Read {
        remote: remote(rkey, addr),
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_RDMA_READ, op) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = SendOp::CompareSwap {
        remote: remote(rkey, addr),
        compare,
        swap,
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, op) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    let op = SendOp::FetchAdd {
        remote: remote(rkey, addr),
        add,
    };
    // SAFETY: as in `wr_send`.
    unsafe { begin(qpx, abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, op) }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let s = [Sge { addr, length, lkey }];
    // SAFETY: as in `wr_send`.
    unsafe { set_sges(qpx, &s) }
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let list = if n == 0 || list.is_null() {
        &[]
    } else {
        // SAFETY: the program's array of `n` SGEs (the C contract); `Sge` has `ibv_sge`'s
        // layout (asserted in `qp.rs`).
        unsafe { std::slice::from_raw_parts(list.cast::<Sge>(), n) }
    };
    // SAFETY: as in `wr_send`.
    unsafe { set_sges(qpx, list) }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let one = [ibv_data_buf { addr, length }];
    // SAFETY: as in `wr_send`; the buffer is the program's, readable (the C contract).
    unsafe { set_inline(qpx, &one) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    let bufs = if n == 0 || bufs.is_null() {
        &[]
    } else {
        // SAFETY: the program's array of `n` buffers (the C contract).
        unsafe { std::slice::from_raw_parts(bufs, n) }
    };
    // SAFETY: as in `wr_set_inline_data`.
    unsafe { set_inline(qpx, bufs) }
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: as in `wr_send`.
    let (_, _, b) = unsafe { held(qpx) };
    if ah.is_null() {
        return b.fail(libc::EINVAL);
    }
    // SAFETY: `ah` from `ibv_create_ah`, live (the C contract).
    let dest = unsafe { Ah::from_ibv(ah) }.dest(qpn, qkey);
    if let Some(p) = b.current() {
        p.ud = Some(dest);
    }
}

/// Records EOPNOTSUPP: an op or setter bypass does not post.
///
/// # Safety
/// As [`held`].
#[cold]
unsafe fn unsupported(qpx: *mut ibv_qp_ex) {
    // SAFETY: the caller's contract.
    unsafe { held(qpx) }.2.fail(libc::EOPNOTSUPP);
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, _rkey: u32) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, _rkey: u32) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    _mw: *mut ibv_mw,
    _rkey: u32,
    _info: *const ibv_mw_bind_info,
) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

unsafe extern "C" fn wr_send_tso(qpx: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, _srqn: u32) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    _rkey: u32,
    _addr: u64,
    _wr: *const c_void,
) {
    // SAFETY: as in `wr_send`.
    unsafe { unsupported(qpx) }
}

/// Fills every function-pointer slot of `ex` (none is left NULL: the inline `ibv_wr_*`
/// calls them unchecked).
pub(crate) fn fill_ops(ex: &mut ibv_qp_ex) {
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_atomic_write = Some(wr_atomic_write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_ops_are_checked_against_the_qp_type() {
        assert!(WrState::new(RC_OPS, QpType::Rc).is_ok());
        assert!(WrState::new(0, QpType::Ud).is_ok());
        assert!(WrState::new(UC_OPS, QpType::Uc).is_ok());
        let read = u64::from(abi::IBV_QP_EX_WITH_RDMA_READ);
        let write = u64::from(abi::IBV_QP_EX_WITH_RDMA_WRITE);
        let inv = u64::from(abi::IBV_QP_EX_WITH_LOCAL_INV);
        assert_eq!(WrState::new(read, QpType::Uc).err(), Some(libc::EOPNOTSUPP));
        assert_eq!(
            WrState::new(write, QpType::Ud).err(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(WrState::new(inv, QpType::Rc).err(), Some(libc::EOPNOTSUPP));
    }

    #[test]
    fn recycle_keeps_the_allocation() {
        let v: Vec<SendWr<'_>> = Vec::with_capacity(16);
        let p = v.as_ptr() as usize;
        let w: Vec<SendWr<'_>> = recycle(v);
        assert!(w.capacity() >= 16 && w.is_empty());
        assert_eq!(w.as_ptr() as usize, p);
    }
}

//! Lowering safe work requests to the driver's: owned buffers become `post::Sge`s in a stack
//! array (no allocation), remote buffers become `RemoteAddr`s, and everything that can be
//! checked locally is checked here, before anything reaches the ring (SGE count, inline size,
//! a message larger than the remote buffer the peer advertised, an atomic target that is not
//! 8 aligned bytes).
//!
//! Owns: the conversions and local checks. Must not: write WQEs (the driver's `post` does).

use crate::driver::post::{self, RemoteAddr, SendFlags, Sge};
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::wr::{MAX_SGES, SendOp, SendWr, SgeList};

/// The driver SGEs of a list, in a stack array, and how many are used.
pub(crate) fn sges(list: &SgeList) -> Result<([Sge; MAX_SGES], usize), VerbsError> {
    if list.overflowed() {
        return Err(VerbsError::TooManySges {
            sges: MAX_SGES + 1,
            max: MAX_SGES,
        });
    }
    let mut out = [Sge::default(); MAX_SGES];
    let mut n = 0;
    for (o, b) in out.iter_mut().zip(list.iter()) {
        let length = u32::try_from(b.len()).map_err(|_| VerbsError::OutsideMr {
            offset: 0,
            len: b.len() as u64,
            mr_len: u64::from(u32::MAX),
        })?;
        *o = Sge {
            addr: b.addr(),
            length,
            lkey: b.lkey(),
        };
        n += 1;
    }
    Ok((out, n))
}

pub(crate) fn raddr(r: &RemoteBuffer) -> RemoteAddr {
    RemoteAddr {
        addr: r.addr,
        rkey: r.rkey,
    }
}

pub(crate) fn fits(r: &RemoteBuffer, len: u64) -> Result<(), VerbsError> {
    if len > r.len {
        return Err(VerbsError::RemoteTooSmall {
            len,
            remote_len: r.len,
        });
    }
    Ok(())
}

fn atomic_target(r: &RemoteBuffer, local: u64) -> Result<(), VerbsError> {
    if r.len < 8 || !r.addr.is_multiple_of(8) || local != 8 {
        return Err(VerbsError::BadAtomic {
            remote_len: r.len,
            aligned: r.addr.is_multiple_of(8),
            local_len: local,
        });
    }
    Ok(())
}

/// The driver opcode of a safe request, after the checks that need only the request.
pub(crate) fn send_op(wr: &SendWr<'_>) -> Result<post::SendOp, VerbsError> {
    let len = match wr.inline {
        Some(d) => d.len() as u64,
        None => wr.sges.total_len(),
    };
    if wr.sges.any_shared() {
        let op = match wr.op {
            SendOp::Read(_) => Some("an RDMA READ"),
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => Some("an atomic"),
            _ => None,
        };
        if let Some(op) = op {
            return Err(VerbsError::SharedBufferWritten { op });
        }
    }
    Ok(match wr.op {
        SendOp::Send => post::SendOp::Send,
        SendOp::SendImm(imm) => post::SendOp::SendImm { imm },
        SendOp::Write(r) => {
            fits(&r, len)?;
            post::SendOp::Write { remote: raddr(&r) }
        }
        SendOp::WriteImm(r, imm) => {
            fits(&r, len)?;
            post::SendOp::WriteImm {
                remote: raddr(&r),
                imm,
            }
        }
        SendOp::Read(r) => {
            fits(&r, len)?;
            post::SendOp::Read { remote: raddr(&r) }
        }
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => {
            atomic_target(&remote, len)?;
            post::SendOp::CompareSwap {
                remote: raddr(&remote),
                compare,
                swap,
            }
        }
        SendOp::FetchAdd { remote, add } => {
            atomic_target(&remote, len)?;
            post::SendOp::FetchAdd {
                remote: raddr(&remote),
                add,
            }
        }
    })
}

/// The driver flags of a safe request.
pub(crate) fn flags(wr: &SendWr<'_>) -> SendFlags {
    let mut f = SendFlags::empty();
    f.set(SendFlags::SIGNALED, wr.signaled);
    f.set(SendFlags::FENCE, wr.fence);
    f.set(SendFlags::SOLICITED, wr.solicited);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::MemoryPool;
    use crate::pool::tests::HeapMemory;

    fn pool() -> MemoryPool {
        MemoryPool::from_memory(HeapMemory::new(64 * 8), 64, 8).unwrap()
    }

    const R: RemoteBuffer = RemoteBuffer {
        addr: 0x2000,
        rkey: 9,
        len: 32,
    };

    #[test]
    fn sges_carry_lease_address_length_and_key() {
        let p = pool();
        let wr = SendWr::new(1, SendOp::Send)
            .sge(p.lease(10).unwrap())
            .sge(p.lease(20).unwrap());
        let (s, n) = sges(&wr.sges).unwrap();
        assert_eq!(n, 2);
        assert_eq!((s[0].length, s[1].length, s[0].lkey), (10, 20, 0x1234));
        assert_ne!(s[0].addr, s[1].addr);
    }

    #[test]
    fn too_many_sges_is_refused_before_posting() {
        let p = pool();
        let mut wr = SendWr::new(1, SendOp::Send);
        for _ in 0..=MAX_SGES {
            wr = wr.sge(p.lease(1).unwrap());
        }
        assert!(matches!(
            sges(&wr.sges),
            Err(VerbsError::TooManySges { .. })
        ));
        drop(wr);
        assert_eq!(p.leased(), 0, "the refused lease went back to the pool");
    }

    #[test]
    fn write_larger_than_the_remote_buffer_is_refused_locally() {
        let p = pool();
        let wr = SendWr::new(1, SendOp::Write(R)).sge(p.lease(33).unwrap());
        let err = send_op(&wr).unwrap_err();
        assert!(matches!(
            err,
            VerbsError::RemoteTooSmall {
                len: 33,
                remote_len: 32
            }
        ));
        let ok = SendWr::new(1, SendOp::Write(R)).sge(p.lease(32).unwrap());
        assert!(matches!(send_op(&ok), Ok(post::SendOp::Write { .. })));
    }

    #[test]
    fn atomics_need_eight_aligned_bytes_on_both_sides() {
        let p = pool();
        let fa = |r, len| {
            SendWr::new(1, SendOp::FetchAdd { remote: r, add: 1 }).sge(p.lease(len).unwrap())
        };
        assert!(send_op(&fa(R, 8)).is_ok());
        assert!(send_op(&fa(R, 4)).is_err());
        let odd = RemoteBuffer { addr: 0x2004, ..R };
        assert!(send_op(&fa(odd, 8)).is_err());
    }

    #[test]
    fn a_shared_lease_is_a_source_only() {
        let p = pool();
        let s = p.lease(8).unwrap().freeze();
        let w = SendWr::new(1, SendOp::Write(R)).sge(s.clone());
        assert!(matches!(send_op(&w), Ok(post::SendOp::Write { .. })));
        assert!(send_op(&SendWr::new(1, SendOp::Send).sge(s.clone())).is_ok());
        let r = SendWr::new(1, SendOp::Read(R)).sge(s.clone());
        let err = send_op(&r).unwrap_err();
        assert!(matches!(err, VerbsError::SharedBufferWritten { .. }));
        assert!(err.to_string().contains("try_unfreeze"), "{err}");
        let fa = SendWr::new(1, SendOp::FetchAdd { remote: R, add: 1 }).sge(s.clone());
        assert!(matches!(
            send_op(&fa),
            Err(VerbsError::SharedBufferWritten { op: "an atomic" })
        ));
        assert_eq!(s.handles(), 4, "each live request holds a clone");
        drop((w, r, fa));
        assert_eq!(s.handles(), 1);
    }

    #[test]
    fn flags_follow_the_request() {
        let wr = SendWr::new(1, SendOp::Send).unsignaled().fenced();
        assert_eq!(flags(&wr), SendFlags::FENCE);
        assert_eq!(flags(&SendWr::new(1, SendOp::Send)), SendFlags::SIGNALED);
    }
}

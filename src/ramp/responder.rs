//! The passive end of `ping --ramp` (B): it makes QPs and regions when asked, connects them,
//! and checks what the active end sent, answering each [`Request`] with a [`Reply`].
//!
//! Owns: [`Responder`], the same code in-process (called directly) and as the server of the
//! two-process form (called per request off the TCP channel). Must not print (the server
//! loop prints its replies), time anything, or post anything but receives.

use bypass_verbs::wr::RecvWr;
use bypass_verbs::{Context, VerbsError};

use super::end::{End, MAX_QPS, check};
use super::wire::{Reply, Request};
use std::sync::Arc;
use std::time::Duration;

/// The byte stage 1 sends.
pub const PING_BYTE: u8 = 0x42;

/// Tag of the SEND on stage 2's QP `i` (the WRITE's is [`write_tag`]).
pub fn send_tag(i: usize) -> u64 {
    0x5e00 + i as u64
}

/// Tag of the WRITE on stage 2's QP `i`.
pub fn write_tag(i: usize) -> u64 {
    0x7700 + i as u64
}

/// Tag of stage 3's message of `size` bytes.
pub fn size_tag(size: u64) -> u64 {
    size.wrapping_mul(0x9e37_79b9)
}

/// B: its end and where the current stage's QPs start.
pub struct Responder {
    end: End,
    /// Index of stage 2's first QP in `end.qps`.
    stage2_from: usize,
}

/// A failed request: the step and why.
type Fail = (String, String);

fn at<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> Fail + '_ {
    move |e| (format!("B: {step}"), e.to_string())
}

impl Responder {
    /// B's end on `ctx`.
    pub fn new(ctx: &Arc<Context>, timeout: Duration) -> Result<Self, VerbsError> {
        Ok(Self {
            end: End::new("B", ctx, timeout)?,
            stage2_from: 0,
        })
    }

    /// Acts on one request; a failure becomes [`Reply::Failed`].
    pub fn handle(&mut self, req: &Request) -> Reply {
        match self.try_handle(req) {
            Ok(r) => r,
            Err((step, why)) => Reply::Failed { step, why },
        }
    }

    fn try_handle(&mut self, req: &Request) -> Result<Reply, Fail> {
        let e = &mut self.end;
        match req {
            Request::PingPrepare => {
                let endpoints = e.add_qps(1).map_err(at("create the RC QP"))?;
                let lease = e.pool.lease(1).map_err(at("lease a receive buffer"))?;
                let qp = e
                    .qps
                    .last_mut()
                    .ok_or_else(|| at("post a 1-byte receive")("no QP"))?;
                qp.post_recv(RecvWr::new(2, lease))
                    .map_err(at("post a 1-byte receive"))?;
                Ok(Reply::Made {
                    endpoints,
                    target: None,
                })
            }
            Request::Connect { endpoints } => {
                e.connect_last(endpoints)
                    .map_err(at("connect its QPs (INIT -> RTR -> RTS)"))?;
                Ok(Reply::Done {
                    detail: format!("{} QP(s) in RTS", endpoints.len()),
                })
            }
            Request::PingCheck => {
                let d = e.wait("1-byte receive").map_err(at("receive completion"))?;
                let got = d.lease.as_ref().and_then(|l| l.as_slice().first().copied());
                if d.byte_len != 1 || got != Some(PING_BYTE) {
                    return Err(at("check the byte")(format!(
                        "received {} byte(s), first {got:?}, expected 1 byte {PING_BYTE:#04x} (the payload was not delivered intact)",
                        d.byte_len
                    )));
                }
                Ok(Reply::Done {
                    detail: format!("B got 1 byte {PING_BYTE:#04x} on qpn {:#x}", d.qpn),
                })
            }
            Request::QpsPrepare { qps, msg } => {
                if *qps == 0 || *qps > MAX_QPS || *msg as usize > e.pool.chunk_size() {
                    return Err(at("check the request")(format!(
                        "{qps} QPs of {msg}-byte messages asked; this side takes 1..={MAX_QPS} QPs of at most {} bytes",
                        e.pool.chunk_size()
                    )));
                }
                let len = (*qps as usize) * (*msg as usize);
                let access = bypass_verbs::Access::LOCAL_WRITE | bypass_verbs::Access::REMOTE_WRITE;
                let target =
                    e.pd.register(len, access)
                        .map_err(at("register the WRITE region"))?;
                let remote = target.remote();
                e.target = Some(target);
                self.stage2_from = e.qps.len();
                let endpoints = e.add_qps(*qps).map_err(at("create the RC QPs"))?;
                for (i, qp) in e.qps.iter_mut().skip(self.stage2_from).enumerate() {
                    let lease = e
                        .pool
                        .lease(*msg as usize)
                        .map_err(at("lease a receive buffer"))?;
                    qp.post_recv(RecvWr::new(i as u64, lease))
                        .map_err(at("post the receives"))?;
                }
                Ok(Reply::Made {
                    endpoints,
                    target: Some(remote),
                })
            }
            Request::QpsCheck => self.check_qps(),
            Request::SizesPrepare { max_size } => {
                e.make_big(*max_size)
                    .map_err(at("register the stage 3 region"))?;
                let target = e.big.as_ref().map(|b| b.target.remote());
                Ok(Reply::Made {
                    endpoints: Vec::new(),
                    target,
                })
            }
            Request::SizesCheck { size } => {
                let big = e
                    .big
                    .as_ref()
                    .ok_or_else(|| at("check the region")("no stage 3 region"))?;
                let n = usize::try_from(*size)
                    .ok()
                    .filter(|&n| n <= big.target.len())
                    .ok_or_else(|| {
                        at("check the region")(format!("{size} bytes is larger than the region"))
                    })?;
                let mut buf = vec![0u8; n];
                big.target
                    .read(0, &mut buf)
                    .map_err(at("read the region"))?;
                check(&buf, super::responder::size_tag(*size))
                    .map_err(at("check the last WRITE"))?;
                Ok(Reply::Done {
                    detail: format!(
                        "B's region holds the last WRITE ({}) exactly",
                        super::end::human(*size)
                    ),
                })
            }
            Request::Abort { .. } | Request::Bye => Ok(Reply::Done {
                detail: "bye".to_owned(),
            }),
        }
    }

    fn check_qps(&mut self) -> Result<Reply, Fail> {
        let e = &mut self.end;
        let n = e.qps.len() - self.stage2_from;
        let qpns: Vec<u32> = e.qps[self.stage2_from..].iter().map(|q| q.qpn()).collect();
        let mut seen = vec![false; n];
        let mut bytes = 0u64;
        for _ in 0..n {
            let d = e.wait("receive").map_err(at("receive completions"))?;
            let i = qpns.iter().position(|&q| q == d.qpn).ok_or_else(|| {
                at("receive completions")(format!(
                    "a receive on qpn {:#x}, not a stage 2 QP",
                    d.qpn
                ))
            })?;
            let data = d.lease.as_ref().map(|l| l.as_slice()).unwrap_or_default();
            let data = data.get(..d.byte_len as usize).unwrap_or(data);
            check(data, send_tag(i))
                .map_err(|w| at("check the SENDs")(format!("QP {i} (qpn {:#x}): {w}", d.qpn)))?;
            seen[i] = true;
            bytes += u64::from(d.byte_len);
        }
        let target = e
            .target
            .as_ref()
            .ok_or_else(|| at("check the WRITEs")("no region"))?;
        let msg = target.len() / n.max(1);
        let mut buf = vec![0u8; msg];
        for i in 0..n {
            target
                .read(i * msg, &mut buf)
                .map_err(at("read the WRITE region"))?;
            check(&buf, write_tag(i))
                .map_err(|w| at("check the WRITEs")(format!("QP {i}'s slice: {w}")))?;
        }
        Ok(Reply::Done {
            detail: format!(
                "B got {} SENDs ({bytes} bytes) and {n} WRITE slices, every byte as sent",
                seen.iter().filter(|&&s| s).count()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_testbed::SimContext;

    #[test]
    fn a_check_with_nothing_sent_fails_naming_bs_step() {
        let pair = Context::sim_pair(1).unwrap();
        let mut b = Responder::new(&pair.b, Duration::from_millis(20)).unwrap();
        assert!(matches!(
            b.handle(&Request::PingPrepare),
            Reply::Made { .. }
        ));
        match b.handle(&Request::PingCheck) {
            Reply::Failed { step, why } => {
                assert_eq!(step, "B: receive completion");
                assert!(why.contains("no 1-byte receive completion"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_pattern_check_names_the_first_wrong_byte() {
        let mut buf = vec![0u8; 300];
        crate::ramp::end::fill(&mut buf, write_tag(3));
        assert!(check(&buf, write_tag(3)).is_ok());
        assert!(check(&buf, write_tag(4)).is_err());
        buf[257] ^= 1;
        let why = check(&buf, write_tag(3)).unwrap_err();
        assert!(why.starts_with("byte 257 of 300"), "{why}");
    }
}

//! The active end (A) of `ping --ramp`: stages 1–3 run from here against a [`Peer`] (B in
//! this process, or a server over TCP), each printing one line of what it proved, the first
//! failure stopping the ramp with its stage, step and explained error; then stage 4 (GPU
//! memory, `gpu.rs`) or its account.
//!
//! Owns: the stage plan, the verbs each stage posts, the checks A makes (READ-back) and the
//! figures it prints. Must not reach B's objects but through [`Peer`] (so both forms run the
//! same stages), or draw anything on stdout but the stage lines.

use std::io::Write;
use std::time::Instant;

use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{QpEndpoint, RemoteBuffer};

use super::end::{End, QP_MSG, check, fill, human};
use super::responder::{PING_BYTE, send_tag, size_tag, write_tag};
use super::wire::{Reply, Request};
use super::{RampError, gpu};
use crate::progress::Progress;

/// A failed step: its name and the explained error.
pub type Fail = (String, String);

/// B, as A reaches it.
pub trait Peer {
    /// Sends one request and returns B's reply (a transport failure is a `Fail`).
    fn call(&mut self, req: &Request) -> Result<Reply, Fail>;
}

/// What the ramp covers.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Stage 2's QP count.
    pub qps: u32,
    /// Stage 3's largest message.
    pub max_size: u64,
}

fn at<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> Fail + '_ {
    move |e| (step.to_owned(), e.to_string())
}

fn made(r: Reply) -> Result<(Vec<QpEndpoint>, Option<RemoteBuffer>), Fail> {
    match r {
        Reply::Made { endpoints, target } => Ok((endpoints, target)),
        Reply::Failed { step, why } => Err((step, why)),
        Reply::Done { detail } => Err(unexpected(&detail)),
    }
}

fn done(r: Reply) -> Result<String, Fail> {
    match r {
        Reply::Done { detail } => Ok(detail),
        Reply::Failed { step, why } => Err((step, why)),
        Reply::Made { .. } => Err(unexpected("objects made")),
    }
}

fn unexpected(what: &str) -> Fail {
    (
        "B: reply".to_owned(),
        format!("B answered out of turn ({what}): run the same bypass version on both sides"),
    )
}

/// The sizes of stage 3: 1, 2, 4, ... up to `max`, and `max` itself.
pub fn sizes(max: u64) -> Vec<u64> {
    let mut v: Vec<u64> = std::iter::successors(Some(1u64), |s| s.checked_mul(2))
        .take_while(|&s| s <= max)
        .collect();
    if v.last() != Some(&max) && max > 0 {
        v.push(max);
    }
    v
}

/// Bytes per second as GB/s.
fn gbps(bytes: u64, t: Instant) -> f64 {
    bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9
}

/// Runs stages 1-3 in order, then stage 4 as `stage4` does it; the first failure returns
/// the stage, step and error. `Ok(true)` when stage 4 ran (and passed), `Ok(false)` when it
/// was skipped.
pub fn run_stages(
    a: &mut End,
    peer: &mut dyn Peer,
    plan: &Plan,
    stage4: impl FnOnce() -> Result<gpu::Outcome, Fail>,
) -> Result<bool, RampError> {
    let names = ["ping", "qps", "sizes"];
    for (k, name) in names.into_iter().enumerate() {
        let stage = k as u8 + 1;
        print!("stage {stage} {name:<6}");
        let _ = std::io::stdout().flush();
        let r = match stage {
            1 => ping(a, peer),
            2 => qps(a, peer, plan.qps),
            _ => ramp_sizes(a, peer, plan.max_size),
        };
        match r {
            Ok(line) => println!("ok  {line}"),
            Err((step, why)) => {
                println!("FAILED at step {step}");
                return Err(RampError {
                    stage,
                    name,
                    step,
                    why,
                });
            }
        }
    }
    print!("stage 4 gpu   ");
    let _ = std::io::stdout().flush();
    match stage4() {
        Ok(gpu::Outcome::Passed(line)) => {
            println!("ok  {line}");
            Ok(true)
        }
        Ok(gpu::Outcome::Skipped(why)) => {
            println!("{why}");
            Ok(false)
        }
        Err((step, why)) => {
            println!("FAILED at step {step}");
            Err(RampError {
                stage: 4,
                name: "gpu",
                step,
                why,
            })
        }
    }
}

/// Stage 1: one RC QP each, a 1-byte SEND from A, B checks the byte.
fn ping(a: &mut End, peer: &mut dyn Peer) -> Result<String, Fail> {
    let (eps, _) = made(peer.call(&Request::PingPrepare)?)?;
    let ea = a.add_qps(1).map_err(at("A: create the RC QP"))?;
    a.connect_last(&eps)
        .map_err(at("A: connect (INIT -> RTR -> RTS)"))?;
    done(peer.call(&Request::Connect { endpoints: ea })?)?;
    let mut lease = a.pool.lease(1).map_err(at("A: lease a send buffer"))?;
    lease.as_mut_slice().fill(PING_BYTE);
    let t0 = Instant::now();
    let qp = a
        .qps
        .first_mut()
        .ok_or_else(|| at("A: post a 1-byte SEND")("no QP"))?;
    qp.post_send(SendWr::new(1, SendOp::Send).sge(lease))
        .map_err(at("A: post a 1-byte SEND"))?;
    a.wait("SEND").map_err(at("A: send completion"))?;
    let rtt = t0.elapsed().as_micros();
    let detail = done(peer.call(&Request::PingCheck)?)?;
    Ok(format!(
        "1-byte RC SEND A -> B, round-trip {rtt} us (post to ACK); {detail}"
    ))
}

/// Stage 2: `n` QPs at once, each a WRITE then a SEND of [`QP_MSG`] bytes; B checks all.
fn qps(a: &mut End, peer: &mut dyn Peer, n: u32) -> Result<String, Fail> {
    let (eps, target) = made(peer.call(&Request::QpsPrepare {
        qps: n,
        msg: QP_MSG,
    })?)?;
    let target = target
        .filter(|_| eps.len() == n as usize)
        .ok_or_else(|| unexpected("the wrong number of QPs or no region"))?;
    let from = a.qps.len();
    let ea = a.add_qps(n).map_err(at("A: create the RC QPs"))?;
    a.connect_last(&eps)
        .map_err(at("A: connect (INIT -> RTR -> RTS)"))?;
    done(peer.call(&Request::Connect { endpoints: ea })?)?;
    let msg = QP_MSG as usize;
    let t0 = Instant::now();
    for (i, qp) in a.qps.iter_mut().skip(from).enumerate() {
        let remote = target
            .slice((i * msg) as u64, msg as u64)
            .ok_or_else(|| unexpected("a region too small for every QP"))?;
        let mut w = a.pool.lease(msg).map_err(at("A: lease buffers"))?;
        fill(w.as_mut_slice(), write_tag(i));
        let mut s = a.pool.lease(msg).map_err(at("A: lease buffers"))?;
        fill(s.as_mut_slice(), send_tag(i));
        qp.post_send(SendWr::new(2 * i as u64, SendOp::Write(remote)).sge(w))
            .map_err(at("A: post the WRITEs and SENDs"))?;
        qp.post_send(SendWr::new(2 * i as u64 + 1, SendOp::Send).sge(s))
            .map_err(at("A: post the WRITEs and SENDs"))?;
    }
    for _ in 0..2 * n {
        a.wait("WRITE/SEND").map_err(at("A: send completions"))?;
    }
    let bytes = 2 * u64::from(n) * msg as u64;
    let (us, rate) = (t0.elapsed().as_micros(), gbps(bytes, t0));
    let detail = done(peer.call(&Request::QpsCheck)?)?;
    Ok(format!(
        "{n} RC QPs at once, each a {} WRITE then SEND: {} in {us} us ({rate:.3} GB/s); {detail}",
        human(msg as u64),
        human(bytes)
    ))
}

/// Stage 3: WRITE then READ back at every size up to `max`, A checking each READ and B the
/// last WRITE.
fn ramp_sizes(a: &mut End, peer: &mut dyn Peer, max: u64) -> Result<String, Fail> {
    a.make_big(max)
        .map_err(at("A: register the stage 3 buffers"))?;
    let (_, target) = made(peer.call(&Request::SizesPrepare { max_size: max })?)?;
    let target = target.ok_or_else(|| unexpected("no region"))?;
    let big = a
        .big
        .take()
        .ok_or_else(|| at("A: register the stage 3 buffers")("none"))?;
    let list = sizes(max);
    let progress = Progress::new(list.len() as u64, "ping --ramp: stage 3 sizes");
    let (mut w_rate, mut r_rate) = (0.0, 0.0);
    let result = (|| {
        for &s in &list {
            let len = s as usize;
            let remote = target
                .slice(0, s)
                .ok_or_else(|| unexpected("a region smaller than --max-size"))?;
            let step = |what: &str| format!("A: {what} of {}", human(s));
            let mut src = big
                .pool
                .lease(len)
                .map_err(at(&step("lease the WRITE source")))?;
            fill(src.as_mut_slice(), size_tag(s));
            let qp = a
                .qps
                .first_mut()
                .ok_or_else(|| unexpected("no stage 1 QP"))?;
            let t0 = Instant::now();
            qp.post_send(SendWr::new(3, SendOp::Write(remote)).sge(src))
                .map_err(at(&step("post the WRITE")))?;
            a.wait("WRITE").map_err(at(&step("WRITE completion")))?;
            w_rate = gbps(s, t0);
            let mut dst = big
                .pool
                .lease(len)
                .map_err(at(&step("lease the READ sink")))?;
            fill(dst.as_mut_slice(), size_tag(s) ^ 0xff);
            let qp = a
                .qps
                .first_mut()
                .ok_or_else(|| unexpected("no stage 1 QP"))?;
            let t0 = Instant::now();
            qp.post_send(SendWr::new(4, SendOp::Read(remote)).sge(dst))
                .map_err(at(&step("post the READ")))?;
            let d = a.wait("READ").map_err(at(&step("READ completion")))?;
            r_rate = gbps(s, t0);
            let data = d.lease.as_ref().map(|l| l.as_slice()).unwrap_or_default();
            check(data, size_tag(s)).map_err(at(&step("check the READ-back")))?;
            progress.inc(1);
        }
        Ok::<_, Fail>(())
    })();
    progress.finish();
    a.big = Some(big);
    result?;
    let detail = done(peer.call(&Request::SizesCheck { size: max })?)?;
    Ok(format!(
        "WRITE then READ back at {} sizes, 1 B .. {m}, every byte checked; at {m}: WRITE {w_rate:.3} GB/s, READ {r_rate:.3} GB/s; {detail}",
        list.len(),
        m = human(max)
    ))
}

#[cfg(test)]
mod tests {
    use super::sizes;

    #[test]
    fn sizes_read_as_a_person_writes_them() {
        use super::human;
        assert_eq!(human(8 << 20), "8 MiB");
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(1 << 30), "1 GiB");
        assert_eq!(human(1536), "1536 B");
        assert_eq!(human(1), "1 B");
    }

    #[test]
    fn sizes_double_and_end_at_the_maximum() {
        assert_eq!(sizes(1), vec![1]);
        assert_eq!(sizes(8), vec![1, 2, 4, 8]);
        assert_eq!(sizes(6), vec![1, 2, 4, 6]);
        assert_eq!(sizes(8 << 20).len(), 24);
        assert!(sizes(0).is_empty());
    }
}

//! `bypass ping`'s path probe: before the 1-byte SEND, one message of the path MTU crosses
//! the path on QPs of its own; if it does not, smaller ones find the largest that passes, so
//! a hop with a small MTU is found and explained instead of showing up as a bare
//! TRANSPORT_RETRY_EXC on the ping.
//!
//! Owns: [`probe`] and its QPs (a fresh RC pair per message, few retries, short timeout),
//! and the text of its verdict. Must not: touch the ping's own QPs, or a device except
//! through the verbs API and the testbed's `retry_exc_cause` (the sim's MTU drop counts).
//!
//! Sources: the technique is `ping -M do -s SIZE` (RFC 1191 path MTU discovery by DF probes),
//! with IB path MTUs; the arithmetic is `bypass_hw::roce::mtu` (kernel `iboe_get_mtu`).

use std::sync::Arc;
use std::time::Duration;

use bypass_sim::net::PortRef;
use bypass_testbed::SimContext;
use bypass_verbs::driver::hw::roce::mtu::{ROCE_HEADER_BYTES, eth_mtu_needed};
use bypass_verbs::driver::qp_attr::{Init2Rtr, Rtr2Rts};
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Context, Cq, Mtu, QpBuilder, VerbsError};

/// The IB MTUs a probe falls back to, largest first.
const SIZES: [Mtu; 5] = [
    Mtu::Mtu4096,
    Mtu::Mtu2048,
    Mtu::Mtu1024,
    Mtu::Mtu512,
    Mtu::Mtu256,
];

/// How one probe message ended.
enum Sent {
    /// Delivered and acknowledged.
    Passed,
    /// Not delivered: why (the MTU drop explanation when the port counted any).
    Lost(String),
}

/// One `size`-byte SEND at path MTU `size` from a fresh RC QP on `a` to one on `b`: one
/// retry, ACK timeout code 10 (about 4 ms), so a message that cannot pass fails fast.
fn send_one(
    a: &Arc<Context>,
    b: &Arc<Context>,
    size: Mtu,
    wait: Duration,
) -> Result<Sent, VerbsError> {
    let len = size.bytes() as usize;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut ca, cb) = (Cq::new(a, 4)?, Cq::new(b, 4)?);
    let (la, lb) = (pa.create_pool(len, 1)?, pb.create_pool(len, 1)?);
    let mut qa = QpBuilder::rc(&pa, &ca, &ca)
        .max_send_wr(1)
        .max_recv_wr(1)
        .build()?;
    let mut qb = QpBuilder::rc(&pb, &cb, &cb)
        .max_send_wr(1)
        .max_recv_wr(1)
        .build()?;
    let (ea, eb) = (qa.endpoint()?, qb.endpoint()?);
    for (q, e) in [(&mut qa, &eb), (&mut qb, &ea)] {
        q.modify_to_init()?;
        q.modify_to_rtr_with(&Init2Rtr {
            mtu: size.to_path_mtu(),
            ..Init2Rtr::rc(e.qpn, e.psn, e.gid.0)
        })?;
        q.modify_to_rts_with(&Rtr2Rts {
            retry_cnt: 1,
            timeout: 10,
            ..Rtr2Rts::new(q.psn())
        })?;
    }
    qb.post_recv(RecvWr::new(2, lb.lease(len)?))?;
    let mut lease = la.lease(len)?;
    lease.as_mut_slice().fill(0x5a);
    let before = switch_mtu_drops(a);
    qa.post_send(SendWr::new(1, SendOp::Send).sge(lease))?;
    let outcome = match ca.wait(wait)? {
        Some(c) if c.is_ok() => Sent::Passed,
        Some(c) => Sent::Lost(
            a.retry_exc_cause(qa.qpn())
                .map(|e| e.to_string())
                .or_else(|| switch_drop_note(&before, &switch_mtu_drops(a), c.status(), size))
                .unwrap_or_else(|| format!("it completed with {}", c.status())),
        ),
        None => Sent::Lost(format!("no completion within {} ms", wait.as_millis())),
    };
    // The receive side's completion, if any, goes with its CQ and QP.
    drop((qb, cb));
    Ok(outcome)
}

/// Per switch port of `a`'s simulated network: (port, its link's MTU, packets it dropped as
/// larger than that MTU). Empty without a switched network.
fn switch_mtu_drops(a: &Context) -> Vec<(PortRef, u32, u64)> {
    let Some(sim) = a.sim() else {
        return Vec::new();
    };
    sim.fabric().with_world(|w| {
        let Some(net) = w.network() else {
            return Vec::new();
        };
        net.ports()
            .filter(|p| matches!(p, PortRef::Switch { .. }))
            .filter_map(|p| Some((p, net.port_mtu(p)?, net.port_stats(p)?.total().drop_mtu)))
            .collect()
    })
}

/// What the switches dropped for size between two snapshots, as the reason a probe failed.
fn switch_drop_note(
    before: &[(PortRef, u32, u64)],
    after: &[(PortRef, u32, u64)],
    status: impl std::fmt::Display,
    path_mtu: Mtu,
) -> Option<String> {
    let (port, mtu, n) = after
        .iter()
        .zip(before)
        .map(|(&(p, mtu, a), &(_, _, b))| (p, mtu, a.saturating_sub(b)))
        .find(|&(_, _, n)| n > 0)?;
    let PortRef::Switch { switch, port } = port else {
        return None;
    };
    Some(format!(
        "it completed with {status}: switch {switch} port {port} dropped {n} of its packets as larger than that link's MTU {mtu} (path MTU {path_mtu} needs an Ethernet MTU >= {} on every hop)",
        eth_mtu_needed(path_mtu.bytes())
    ))
}

/// Probes the path from `a` to `b` at path MTU `path_mtu`: `Ok` with what passed, or `Err`
/// naming the size that did not, why, the largest that did and what to change.
pub fn probe(
    a: &Arc<Context>,
    b: &Arc<Context>,
    path_mtu: Mtu,
    wait: Duration,
) -> Result<String, String> {
    let fail = |e: VerbsError| e.to_string();
    let why = match send_one(a, b, path_mtu, wait).map_err(fail)? {
        Sent::Passed => {
            return Ok(format!(
                "a {path_mtu}-byte message (one full packet at path MTU {path_mtu}) passed"
            ));
        }
        Sent::Lost(why) => why,
    };
    let mut largest = None;
    for size in SIZES.into_iter().filter(|&m| m < path_mtu) {
        if let Sent::Passed = send_one(a, b, size, wait).map_err(fail)? {
            largest = Some(size);
            break;
        }
    }
    let need = eth_mtu_needed(path_mtu.bytes());
    Err(match largest {
        Some(m) => format!(
            "a {path_mtu}-byte message (one packet at path MTU {path_mtu}) does not cross the path: {why}; the largest that passes is {m} bytes, so a hop's Ethernet MTU is below {need} (path MTU {path_mtu} + {ROCE_HEADER_BYTES} bytes of RoCEv2 headers): use path MTU {m}, or raise that hop's MTU"
        ),
        None => format!(
            "a {path_mtu}-byte message does not cross the path: {why}; nor does a 256-byte one, so it is not the MTU alone: check the link and the peer"
        ),
    })
}

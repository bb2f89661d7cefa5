//! The in-process rig of the perf tools: two simulated NICs on one threaded fabric, a
//! [`Side`] on each, connected QP to QP.
//!
//! Owns: building and connecting that pair (and refusing a UD message larger than the path
//! MTU), and reading both devices' counters afterwards. Must not time or post: `bw` and `lat`.
//!
//! Sources: perftest runs the same `ctx_init` / `ctx_connect` on server and client; here both
//! run in one process and swap their [`super::flows::SideInfo`] directly.

use bypass_testbed::{FabricOptions, SimContext, SimFabric};
use bypass_verbs::{Context, Mtu};

use super::PerfError;
use super::flows::{Side, SideSpec};
use super::ops::Conn;
use crate::counters_view::{Labelled, collect};

/// Two connected sides on one fabric.
pub struct LocalPair {
    /// The client (the side that times).
    pub a: Side,
    /// The server.
    pub b: Side,
    /// Kept alive for the sides (its engine thread stops when it drops).
    _fabric: SimFabric,
}

impl LocalPair {
    /// Builds both sides as `spec` says on a threaded fabric (zero-latency link) seeded with
    /// `seed`, at path MTU `mtu` (`None`: the port's), and connects them.
    pub fn new(seed: u64, spec: SideSpec, mtu: Option<Mtu>) -> Result<Self, PerfError> {
        let fabric = SimFabric::threaded_with(seed, FabricOptions::low_latency());
        let ca = Context::open_sim(&fabric, 1)?;
        let cb = Context::open_sim(&fabric, 2)?;
        check_ud_size(&spec, ca.active_mtu(1)?, mtu)?;
        let mut a = Side::new(&ca, spec)?;
        let mut b = Side::new(&cb, spec)?;
        let (ia, ib) = (a.info()?, b.info()?);
        a.connect(&ib, mtu)?;
        b.connect(&ia, mtu)?;
        Ok(Self {
            a,
            b,
            _fabric: fabric,
        })
    }

    /// Both devices' counters: the port's and each QP's.
    pub fn counters(&self) -> Vec<Labelled> {
        let qpns = |s: &Side| s.qps.iter().map(|q| q.qpn()).collect::<Vec<_>>();
        let mut v = collect(&self.a.ctx, "client", &qpns(&self.a));
        v.extend(collect(&self.b.ctx, "server", &qpns(&self.b)));
        v
    }
}

/// A UD message is one packet: refuses one larger than the path MTU (the port's `active`,
/// or `asked` if smaller), with the fix.
pub fn check_ud_size(spec: &SideSpec, active: Mtu, asked: Option<Mtu>) -> Result<(), PerfError> {
    let mtu = asked.map_or(active, |m| m.min(active)).bytes() as usize;
    if spec.conn == Conn::Ud && spec.size > mtu {
        return Err(PerfError::Usage(format!(
            "-c UD -s {}: a UD message is one packet and the path MTU is {mtu} bytes: use -s {mtu} or less, or -c RC / -c UC for larger messages",
            spec.size
        )));
    }
    Ok(())
}

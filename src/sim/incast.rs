//! `bypass sim incast`: N senders WRITE to one receiver through one simulated switch, on a
//! lossy fabric, with PFC alone, or with PFC and ECN (DCQCN), and what each did.
//!
//! Owns: the experiment's options ([`IncastOpts`]), building it (the stepped fabric, one sim
//! NIC per host with its line rate, the switch for the mode, congestion control switched on
//! through the firmware commands as `/sys/class/net/*/ecn/roce_{np,rp}/enable/3` would),
//! running it ([`run_incast`]) and its result ([`IncastResult`]). Must not: print (`report`
//! does) or reach into the sim's devices except through the world's public reports.
//!
//! The flows are RC WRITE streams at traffic class 106 (DSCP 26, priority 3, ECT(0)), the
//! priority RoCE deployments make lossless. With `--victim`, sender 0 also streams to one more
//! NIC whose port is idle: the head-of-line blocking PFC causes shows as that flow's rate.
//! Sources: the DCQCN paper's incast experiments (Zhu et al., SIGCOMM 2015, §6), the
//! project's `docs/DESIGN.md` "The switched network".

use std::sync::Arc;

use bypass_sim::World;
use bypass_sim::faults::{FaultPlan, Rate};
use bypass_sim::net::{LinkSpec, PfcConfig, PortRef, RedConfig, SwitchSpec, Topology};
use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::{Context, Mtu};

use super::cong;
use super::flows::{Flow, FlowError, FlowSpec, drive};
use super::series::{Sample, Series, jain, percentile};

/// How the switch treats the incast's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Drop-tail, no ECN, no PFC.
    Lossy,
    /// PFC on the priority, no ECN.
    Pfc,
    /// PFC and ECN marking, with DCQCN in every NIC.
    #[value(name = "pfc-ecn", alias = "dcqcn")]
    PfcEcn,
}

impl Mode {
    /// The name the tool prints.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lossy => "lossy",
            Self::Pfc => "pfc",
            Self::PfcEcn => "pfc-ecn",
        }
    }
}

/// Which DCQCN parameters the reaction points run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RpPreset {
    /// The firmware's defaults (NVIDIA DOCA's table).
    Firmware,
    /// The DCQCN paper's (Zhu et al., SIGCOMM 2015, §5): g = 1/256 and alpha updated every
    /// 55 µs, rate-increase timer 55 µs, byte counter 10 MB, 5 fast-recovery steps, additive
    /// increase 40 Mb/s, the target rate clamped to the current one on every CNP.
    Paper,
}

/// The priority the flows use (DSCP 26 → 3).
pub const PRIO: u8 = 3;
/// Their traffic class: DSCP 26, ECT(0).
pub const TCLASS: u8 = (26 << 2) | 0b10;

/// The flows are served (completions taken, WRITEs posted) every microsecond of virtual
/// time: latencies are exact to 1 µs.
const QUANTUM_NS: u64 = 1_000;

/// An incast experiment.
#[derive(Debug, Clone, clap::Args)]
pub struct IncastOpts {
    /// How the switch treats the flows' priority.
    #[arg(long, value_enum, default_value = "pfc-ecn")]
    pub mode: Mode,
    /// Senders (each one flow to the receiver).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub senders: u16,
    /// Bytes per RDMA WRITE.
    #[arg(long, default_value = "64K", value_parser = crate::args::parse_size)]
    pub size: u64,
    /// WRITEs each flow keeps in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub depth: u32,
    /// Virtual time to run, µs.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub duration_us: u64,
    /// From when rates, fairness and the queue count as converged, µs (default: half the run).
    #[arg(long)]
    pub converge_us: Option<u64>,
    /// Sampling interval of rates and queue, µs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub sample_us: u64,
    /// Line rate of every link, Gb/s.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..=800))]
    pub link_gbps: u64,
    /// Propagation delay of every link, ns.
    #[arg(long, default_value_t = 1_000)]
    pub prop_ns: u64,
    /// The switch's shared buffer, bytes.
    #[arg(long, default_value = "1M", value_parser = crate::args::parse_size)]
    pub buffer: u64,
    /// RED: marking starts at this queue depth (pfc-ecn).
    #[arg(long, default_value = "5K", value_parser = crate::args::parse_size)]
    pub kmin: u64,
    /// RED: every ECN-capable packet is marked from this depth (pfc-ecn).
    #[arg(long, default_value = "200K", value_parser = crate::args::parse_size)]
    pub kmax: u64,
    /// RED: marking probability just below kmax, percent. The paper's 1 % is for 1 KB packets
    /// at 40 Gb/s; 4 KiB packets at 25 Gb/s reach the port about twenty times less often, and
    /// 20 % gives their flows about as many marks per microsecond.
    #[arg(long, default_value_t = 20.0)]
    pub pmax_pct: f64,
    /// PFC: bytes from one ingress port that send XOFF (pfc, pfc-ecn).
    #[arg(long, default_value = "64K", value_parser = crate::args::parse_size)]
    pub xoff: u64,
    /// PFC: bytes at which XON follows.
    #[arg(long, default_value = "32K", value_parser = crate::args::parse_size)]
    pub xon: u64,
    /// PFC: headroom above XOFF per ingress port.
    #[arg(long, default_value = "64K", value_parser = crate::args::parse_size)]
    pub headroom: u64,
    /// Extra random loss on every link, percent (0..=50).
    #[arg(long, default_value_t = 0.0)]
    pub loss_pct: f64,
    /// Path MTU of the QPs (256, 512, 1024, 2048 or 4096).
    #[arg(long, default_value_t = 4096)]
    pub mtu: u32,
    /// Local ACK timeout code of the QPs (4.096 µs × 2^N).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(1..=31))]
    pub timeout: u8,
    /// The reaction points' DCQCN parameters (pfc-ecn).
    #[arg(long, value_enum, default_value = "paper")]
    pub rp_params: RpPreset,
    /// The NPs' `min_time_between_cnps`, µs (default: the firmware's).
    #[arg(long, value_name = "US")]
    pub min_time_between_cnps: Option<u32>,
    /// Sender 0 also streams to an idle NIC: the head-of-line victim.
    #[arg(long)]
    pub victim: bool,
    /// The run's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Record every packet as it reaches its NIC (CE marks and CNPs included) into this
    /// pcap file (LINKTYPE_RAW, virtual timestamps); decode CNPs with
    /// `tshark -X lua_script:scripts/wireshark/roce_cnp.lua`.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
}

/// What one flow did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowResult {
    /// "s0→r" style name.
    pub name: String,
    /// Mean rate at the receiver after convergence, Gb/s.
    pub gbps: f64,
    /// WRITEs completed.
    pub writes: u64,
    /// Median WRITE latency, µs.
    pub p50_us: f64,
    /// 99th percentile WRITE latency, µs.
    pub p99_us: f64,
    /// Largest WRITE latency, µs.
    pub max_us: f64,
    /// The sending QP's DCQCN state at the end: current and target rate (Mb/s; the line
    /// rate while not limited), alpha (1/1024) and CNPs it reacted to.
    pub rp: Option<RpState>,
    /// The error that stopped it, if any.
    pub error: Option<String>,
}

/// A sending QP's DCQCN state (`Device::qp_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RpState {
    /// Whether its rate limiter is on.
    pub limited: bool,
    /// Current rate, Mb/s.
    pub current_mbps: u64,
    /// Target rate, Mb/s.
    pub target_mbps: u64,
    /// Alpha, in 1/1024.
    pub alpha: u32,
    /// CNPs it reacted to.
    pub cnps_handled: u64,
}

/// What an incast run did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IncastResult {
    /// The mode.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
    /// Senders.
    pub senders: u16,
    /// Link rate, Gb/s.
    pub link_gbps: u64,
    /// From when the figures count as converged, µs.
    pub converge_us: u64,
    /// The incast flows (not the victim).
    pub flows: Vec<FlowResult>,
    /// The head-of-line victim flow, with `--victim`.
    pub victim: Option<FlowResult>,
    /// Jain's fairness index of the incast flows' rates after convergence.
    pub jain: Option<f64>,
    /// Sum of the incast flows' rates after convergence, Gb/s.
    pub total_gbps: f64,
    /// The bottleneck queue's largest depth over the run, bytes.
    pub queue_max: u64,
    /// The bottleneck queue's largest depth after convergence, bytes.
    pub queue_max_converged: u64,
    /// The bottleneck queue's mean depth after convergence, bytes.
    pub queue_mean_converged: u64,
    /// RED's Kmax, bytes.
    pub kmax: u64,
    /// XOFF frames sent by the switch.
    pub pauses: u64,
    /// Packets the switch dropped for lack of buffer (tail) or headroom.
    pub drops: u64,
    /// Packets the fault model dropped (`--loss-pct`).
    pub fault_drops: u64,
    /// Packets the bottleneck port sent.
    pub bottleneck_packets: u64,
    /// Packets marked CE.
    pub ecn_marked: u64,
    /// CNPs the receivers sent (`np_cnp_sent`).
    pub cnps_sent: u64,
    /// CNPs the senders acted on (`rp_cnp_handled`).
    pub cnps_handled: u64,
    /// Retransmitted packets, every sender.
    pub retransmits: u64,
    /// The samples (rates and queue over time).
    #[serde(skip)]
    pub series: Series,
}

/// Why an incast could not run.
#[derive(Debug, thiserror::Error)]
pub enum IncastError {
    /// An option is out of range.
    #[error("{0}")]
    Option(String),
    /// The network could not be built.
    #[error("building the switch: {0}")]
    Topology(#[from] bypass_sim::net::TopologyError),
    /// A flow failed to build or run.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] bypass_verbs::VerbsError),
    /// Congestion control could not be set up.
    #[error(transparent)]
    Cong(#[from] cong::CongSetupError),
    /// The pcap file could not be written.
    #[error("writing the pcap {path}: {source}")]
    Pcap {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl IncastOpts {
    fn check(&self) -> Result<Mtu, IncastError> {
        let bad = |s: String| Err(IncastError::Option(s));
        let mtu = match Mtu::from_bytes(self.mtu) {
            Some(m) => m,
            None => {
                return bad(format!(
                    "--mtu {} is not a RoCE path MTU: use 256, 512, 1024, 2048 or 4096",
                    self.mtu
                ));
            }
        };
        if self.kmin >= self.kmax {
            return bad(format!(
                "--kmin {} must be below --kmax {}",
                self.kmin, self.kmax
            ));
        }
        if !(0.0..=100.0).contains(&self.pmax_pct) {
            return bad(format!(
                "--pmax-pct {} is not a percentage (0..=100)",
                self.pmax_pct
            ));
        }
        if self.xon > self.xoff {
            return bad(format!(
                "--xon {} must not exceed --xoff {}",
                self.xon, self.xoff
            ));
        }
        if !(0.0..=50.0).contains(&self.loss_pct) {
            return bad(format!("--loss-pct {} is outside 0..=50", self.loss_pct));
        }
        if self.size == 0 || self.size > 1 << 30 {
            return bad(format!("--size {} must be 1 byte to 1 GiB", self.size));
        }
        if self.converge_us.is_some_and(|c| c >= self.duration_us) {
            return bad(format!(
                "--converge-us must be below --duration-us {} (the figures need samples after it)",
                self.duration_us
            ));
        }
        Ok(mtu)
    }

    /// The switch for the mode.
    fn switch(&self) -> SwitchSpec {
        let s = SwitchSpec {
            buffer_bytes: self.buffer,
            ..SwitchSpec::default()
        };
        let pfc = PfcConfig {
            xoff_bytes: self.xoff,
            xon_bytes: self.xon,
            headroom_bytes: self.headroom,
        };
        let red = RedConfig {
            kmin_bytes: self.kmin,
            kmax_bytes: self.kmax,
            pmax: self.pmax_pct / 100.0,
        };
        match self.mode {
            Mode::Lossy => s,
            Mode::Pfc => s.with_pfc(PRIO, pfc),
            Mode::PfcEcn => s.with_pfc(PRIO, pfc).with_red(PRIO, red),
        }
    }
}

/// Runs the experiment `o` describes.
pub fn run_incast(o: &IncastOpts) -> Result<IncastResult, IncastError> {
    let mtu = o.check()?;
    let senders = usize::from(o.senders);
    let receiver = senders;
    let victim = o.victim.then_some(senders + 1);
    let nics = senders + 1 + usize::from(o.victim);
    let fabric = SimFabric::stepped(o.seed);
    let rate_bps = o.link_gbps * 1_000_000_000;
    let link = LinkSpec {
        rate_bps,
        prop_ns: o.prop_ns,
        mtu: 9_000,
    };
    let topo = Topology::single_switch(nics, link, o.switch());
    let pcap = o.pcap.as_deref().map(open_pcap).transpose()?;
    fabric.with_world(|w| -> Result<(), IncastError> {
        w.set_topology(Some(&topo))?;
        if let Some(p) = pcap {
            w.set_pcap(Some(p));
        }
        if o.loss_pct > 0.0 {
            w.set_faults(Some(FaultPlan {
                drop: Rate::per_million((o.loss_pct * 10_000.0) as u32),
                ..FaultPlan::default()
            }));
        }
        Ok(())
    })?;
    // The NICs join the network after it exists: each takes its link's rate and MTU
    // before its driver brings it up (and reads the MTU).
    let ctxs = (0..nics)
        .map(|i| Context::open_sim(&fabric, u8::try_from(i + 1).unwrap_or(u8::MAX)))
        .collect::<Result<Vec<Arc<Context>>, _>>()?;
    if o.mode == Mode::PfcEcn {
        for c in &ctxs {
            cong::enable_dcqcn(c, PRIO, o.min_time_between_cnps)?;
            if o.rp_params == RpPreset::Paper {
                cong::use_paper_rp(c)?;
            }
        }
    }
    let spec = |src, dst| FlowSpec {
        src,
        dst,
        tclass: TCLASS,
        size: usize::try_from(o.size).unwrap_or(usize::MAX),
        depth: o.depth,
        mtu,
        timeout: o.timeout,
        retry_cnt: 7,
    };
    let mut flows = (0..senders)
        .map(|s| Flow::new(&ctxs, spec(s, receiver)))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(v) = victim {
        flows.push(Flow::new(&ctxs, spec(0, v))?);
    }
    let names: Vec<String> = flows
        .iter()
        .map(|f| {
            if Some(f.spec.dst) == victim {
                "victim".to_owned()
            } else {
                format!("s{}", f.spec.src)
            }
        })
        .collect();
    let bottleneck = PortRef::Switch {
        switch: 0,
        port: receiver,
    };
    let sample_ns = o.sample_us * 1000;
    let mut series = Series {
        flows: names.clone(),
        samples: Vec::new(),
    };
    let mut last_rx = vec![0u64; flows.len()];
    let mut next_sample = 0u64;
    let start = fabric.with_world(|w| w.now());
    drive(
        &fabric,
        &mut flows,
        o.duration_us * 1000,
        QUANTUM_NS,
        |w, flows| {
            let t = w.now().saturating_sub(start);
            if t < next_sample {
                return;
            }
            next_sample = t + sample_ns;
            let mut gbps = Vec::with_capacity(flows.len());
            for (f, last) in flows.iter().zip(last_rx.iter_mut()) {
                let rx = w
                    .network()
                    .and_then(|n| n.flow_stats().get(&(f.spec.src, f.spec.dst)).copied())
                    .map_or(0, |s| s.bytes);
                gbps.push(rx.saturating_sub(*last) as f64 * 8.0 / sample_ns as f64);
                *last = rx;
            }
            let totals = net_totals(w);
            series.samples.push(Sample {
                t_ns: t,
                flow_gbps: gbps,
                queue_bytes: w
                    .network()
                    .and_then(|n| n.queued_bytes(bottleneck))
                    .map_or(0, |q| q.iter().sum()),
                pauses: totals.pauses,
                drops: totals.drops,
                cnps: cong::cnps_sent(w, nics),
            });
        },
    )?;
    if let Some(path) = &o.pcap {
        close_pcap(&fabric, path)?;
    }
    // The first sample only sets the counters' baseline.
    if let Some(first) = series.samples.first_mut() {
        first.flow_gbps.iter_mut().for_each(|r| *r = 0.0);
    }
    let converge_us = o.converge_us.unwrap_or(o.duration_us / 2);
    let from = converge_us * 1000;
    let rates = series.mean_rates(from);
    let rp: Vec<Option<RpState>> = fabric.with_world(|w| {
        flows
            .iter()
            .map(|f| {
                w.device(f.spec.src).qp_rate(f.tx_qpn).map(|r| RpState {
                    limited: r.limited,
                    current_mbps: r.current_mbps,
                    target_mbps: r.target_mbps,
                    alpha: r.alpha,
                    cnps_handled: r.cnps_handled,
                })
            })
            .collect()
    });
    let results: Vec<FlowResult> = flows
        .iter()
        .zip(&names)
        .zip(&rates)
        .zip(rp)
        .map(|(((f, n), &r), rp)| flow_result(f, n, r, rp))
        .collect();
    let (incast, victim_result): (Vec<_>, Vec<_>) =
        results.into_iter().partition(|f| f.name != "victim");
    let incast_rates: Vec<f64> = incast.iter().map(|f| f.gbps).collect();
    let converged: Vec<u64> = series.after(from).map(|s| s.queue_bytes).collect();
    let (totals, retransmits, handled, sent) = fabric.with_world(|w| {
        let r = (0..nics)
            .map(|d| w.device(d).counters.retransmits)
            .sum::<u64>();
        (
            net_totals(w),
            r,
            cong::cnps_handled(w, nics),
            cong::cnps_sent(w, nics),
        )
    });
    let (fault_drops, bottleneck_packets, ecn_marked) = fabric.with_world(|w| {
        let net = w.network();
        let b = net
            .and_then(|n| n.port_stats(bottleneck))
            .map(|s| s.total());
        (
            w.fault_stats().dropped,
            b.map_or(0, |t| t.dequeued_packets),
            totals.marks,
        )
    });
    Ok(IncastResult {
        mode: o.mode,
        seed: o.seed,
        senders: o.senders,
        link_gbps: o.link_gbps,
        converge_us,
        jain: jain(&incast_rates),
        total_gbps: incast_rates.iter().sum(),
        flows: incast,
        victim: victim_result.into_iter().next(),
        queue_max: series.max_queue(0),
        queue_max_converged: converged.iter().copied().max().unwrap_or(0),
        queue_mean_converged: converged.iter().sum::<u64>() / converged.len().max(1) as u64,
        kmax: o.kmax,
        pauses: totals.pauses,
        drops: totals.drops,
        fault_drops,
        bottleneck_packets,
        ecn_marked,
        cnps_sent: sent,
        cnps_handled: handled,
        retransmits,
        series,
    })
}

fn pcap_error(path: &std::path::Path, source: std::io::Error) -> IncastError {
    IncastError::Pcap {
        path: path.display().to_string(),
        source,
    }
}

fn open_pcap(path: &std::path::Path) -> Result<bypass_sim::world::PcapSink, IncastError> {
    let f = std::fs::File::create(path).map_err(|e| pcap_error(path, e))?;
    let out: Box<dyn std::io::Write + Send> = Box::new(std::io::BufWriter::new(f));
    bypass_sim::pcap::PcapWriter::new(out).map_err(|e| pcap_error(path, e))
}

/// Stops the world's tee and flushes the file, reporting a write that failed on the way.
fn close_pcap(fabric: &SimFabric, path: &std::path::Path) -> Result<(), IncastError> {
    fabric.with_world(|w| {
        if let Some(e) = w.pcap_error() {
            return Err(pcap_error(
                path,
                std::io::Error::new(e.kind(), e.to_string()),
            ));
        }
        match w.set_pcap(None) {
            Some(mut p) => p.flush().map_err(|e| pcap_error(path, e)),
            None => Ok(()),
        }
    })
}

fn flow_result(f: &Flow, name: &str, gbps: f64, rp: Option<RpState>) -> FlowResult {
    let us = |p: f64| percentile(&f.stats.latencies_ns, p).map_or(0.0, |ns| ns as f64 / 1e3);
    FlowResult {
        name: name.to_owned(),
        gbps,
        writes: f.stats.completed,
        p50_us: us(50.0),
        p99_us: us(99.0),
        max_us: us(100.0),
        rp,
        error: f.stats.error.clone(),
    }
}

/// The switch's totals over every port and priority.
#[derive(Debug, Clone, Copy, Default)]
struct NetTotals {
    pauses: u64,
    drops: u64,
    marks: u64,
}

fn net_totals(w: &World) -> NetTotals {
    let Some(net) = w.network() else {
        return NetTotals::default();
    };
    let mut t = NetTotals::default();
    for p in net.ports() {
        if let Some(s) = net.port_stats(p).map(|s| s.total()) {
            t.pauses += s.xoff_sent;
            t.drops += s.drop_tail + s.drop_headroom + s.drop_mtu;
            t.marks += s.ecn_marked;
        }
    }
    t
}

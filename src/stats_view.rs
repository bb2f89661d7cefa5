//! The counters a simulated NIC keeps, per port and per QP, as `rdma statistic show` and
//! `rdma statistic qp show` print them: `link DEV/PORT name value name value ...`.
//!
//! Owns: a snapshot of every counter of a sim device, port and all live QPs ([`sim_counters`]),
//! and its two renderings for `bypass stats` (rdma's line form, JSON). Must not run traffic
//! or open devices (`bypass stats` does), nor rename counters: the names are
//! `bypass_sim::counters`'s, which follow the kernel's mlx5 `counters.c` (and rxe's where
//! mlx5 has none). The port line ends with the four congestion counters, read from the firmware
//! (QUERY_CONG_STATISTICS) under the names mlx5's `counters.c` gives them (`rp_cnp_handled`,
//! ...), when the device allows the query. `crate::counters_view` is perftest-style blocks
//! for `--report-counters`.

use std::io::{self, Write};

use bypass_sim::counters::Counters;
use bypass_testbed::SimContext;
use bypass_verbs::Context;
use bypass_verbs::congestion::CongStats;

/// One device's counters at one moment: the port set and each live QP's.
#[derive(Debug, Clone)]
pub struct DeviceCounters {
    /// The device's name (`sim0`, `sim1`, ...).
    pub device: String,
    /// The port the counters belong to (the sim NIC has one: 1).
    pub port: u8,
    /// The device-wide (port) counters.
    pub port_counters: Counters,
    /// Each live QP's counters, by QP number.
    pub qps: Vec<(u32, Counters)>,
    /// The congestion counters (QUERY_CONG_STATISTICS), or `None` where the device does not
    /// allow the query.
    pub cong: Option<CongStats>,
}

/// A snapshot of `ctx`'s counters, or `None` when `ctx` is not a simulated NIC (a real NIC's
/// live in firmware Q counters, which this build does not read).
pub fn sim_counters(ctx: &Context) -> Option<DeviceCounters> {
    let sim = ctx.sim()?;
    let (port_counters, qps) = sim
        .with_device(|d| {
            let qps = d
                .live_qpns()
                .into_iter()
                .filter_map(|qpn| Some((qpn, d.qp_counters(qpn)?)))
                .collect();
            (d.counters.clone(), qps)
        })
        .ok()?;
    Some(DeviceCounters {
        device: ctx.device_info().name,
        port: 1,
        port_counters,
        qps,
        cong: ctx.congestion().counters(false).ok(),
    })
}

fn line(
    out: &mut impl Write,
    label: &str,
    c: &Counters,
    cong: Option<&CongStats>,
) -> io::Result<()> {
    write!(out, "{label}")?;
    for (name, v) in c.iter().chain(cong.into_iter().flat_map(CongStats::iter)) {
        write!(out, " {name} {v}")?;
    }
    writeln!(out)
}

/// Prints each device's port line, then one line per QP (`... lqpn 0x..`), every counter by
/// name, zeros included (as `rdma statistic` does).
pub fn print_counters(out: &mut impl Write, devs: &[DeviceCounters]) -> io::Result<()> {
    for d in devs {
        let link = format!("link {}/{}", d.device, d.port);
        line(out, &link, &d.port_counters, d.cong.as_ref())?;
        for (qpn, c) in &d.qps {
            line(out, &format!("{link} lqpn {qpn:#x}"), c, None)?;
        }
    }
    Ok(())
}

fn object(c: &Counters, cong: Option<&CongStats>) -> serde_json::Value {
    c.iter()
        .chain(cong.into_iter().flat_map(CongStats::iter))
        .map(|(k, v)| (k.to_owned(), serde_json::Value::from(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The same snapshot as JSON: `[{"ifname": "sim0", "port": 1, "counters": {..}, "qps":
/// [{"lqpn": 18, "counters": {..}}]}]`.
pub fn counters_json(devs: &[DeviceCounters]) -> serde_json::Value {
    devs.iter()
        .map(|d| {
            serde_json::json!({
                "ifname": d.device,
                "port": d.port,
                "counters": object(&d.port_counters, d.cong.as_ref()),
                "qps": d.qps.iter().map(|(qpn, c)| serde_json::json!({
                    "lqpn": qpn,
                    "counters": object(c, None),
                })).collect::<Vec<_>>(),
            })
        })
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<DeviceCounters> {
        vec![DeviceCounters {
            device: "sim0".into(),
            port: 1,
            port_counters: Counters {
                port_xmit_packets: 7,
                ..Default::default()
            },
            qps: vec![(
                0x12,
                Counters {
                    retransmits: 2,
                    ..Default::default()
                },
            )],
            cong: Some(CongStats {
                np_cnp_sent: 4,
                ..Default::default()
            }),
        }]
    }

    #[test]
    fn prints_one_line_per_port_and_qp_with_every_name() {
        let mut out = Vec::new();
        print_counters(&mut out, &sample()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("link sim0/1 port_xmit_packets 7 "),
            "{text}"
        );
        assert!(lines[1].starts_with("link sim0/1 lqpn 0x12 "), "{text}");
        assert!(lines[1].contains(" retransmits 2"), "{text}");
        let names = Counters::default().iter().count() + CongStats::default().iter().count();
        assert_eq!(lines[0].split_whitespace().count(), 2 + 2 * names);
        assert!(lines[0].ends_with(" np_cnp_sent 4"), "{text}");
        assert!(lines[0].contains(" rp_cnp_handled 0 "), "{text}");
        assert!(!lines[1].contains("np_cnp_sent"), "{text}");
    }

    #[test]
    fn json_holds_the_same_values() {
        let v = counters_json(&sample());
        assert_eq!(v[0]["ifname"], "sim0");
        assert_eq!(v[0]["counters"]["port_xmit_packets"], 7);
        assert_eq!(v[0]["qps"][0]["lqpn"], 0x12);
        assert_eq!(v[0]["qps"][0]["counters"]["retransmits"], 2);
        assert_eq!(v[0]["counters"]["np_cnp_sent"], 4);
        assert_eq!(v[0]["counters"]["np_ecn_marked_roce_packets"], 0);
    }
}

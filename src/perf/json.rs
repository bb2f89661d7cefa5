//! `--out_json` / `--out_json_file`: the results of a perf tool as perftest's JSON report
//! (perftest 4.5 writes keys unquoted, which no JSON parser reads; these are quoted).
//!
//! Owns: the document's shape and field names. Must not measure or print tables.
//!
//! Sources: perftest's JSON output (`--out_json`, src/perftest_parameters.c): a
//! `test_info` object of the header's key/value lines and a `results` object with
//! `MsgSize`, `n_iterations`, `BW_peak`, `BW_average`, `MsgRate` (bandwidth) or `t_min`,
//! `t_max`, `t_typical`, `t_avg`, `t_stdev`, `percentile_99`, `percentile_99.9` (latency),
//! and `CPU_util` with `--cpu_util`. With several sizes (`-a`) `results` is an array of them.

use serde_json::{Map, Value, json};

use crate::stats::{BwReport, LatencyReport};

/// One size's results object (bandwidth).
pub fn bw_result(r: &BwReport, cpu: Option<Option<f64>>) -> Value {
    let mut m = Map::new();
    m.insert("MsgSize".into(), json!(r.bytes));
    m.insert("n_iterations".into(), json!(r.iterations));
    m.insert("BW_peak".into(), json!(r.bw_peak));
    m.insert("BW_average".into(), json!(r.bw_avg));
    m.insert("MsgRate".into(), json!(r.msg_rate_mpps));
    add_cpu(&mut m, cpu);
    Value::Object(m)
}

/// One size's results object (latency, iteration run).
pub fn lat_result(r: &LatencyReport, cpu: Option<Option<f64>>) -> Value {
    let mut m = Map::new();
    m.insert("MsgSize".into(), json!(r.bytes));
    m.insert("n_iterations".into(), json!(r.iterations));
    m.insert("t_min".into(), json!(r.t_min));
    m.insert("t_max".into(), json!(r.t_max));
    m.insert("t_typical".into(), json!(r.t_typical));
    m.insert("t_avg".into(), json!(r.t_avg));
    m.insert("t_stdev".into(), json!(r.t_stdev));
    m.insert("percentile_99".into(), json!(r.p99));
    m.insert("percentile_99.9".into(), json!(r.p99_9));
    add_cpu(&mut m, cpu);
    Value::Object(m)
}

/// One size's results object (latency, duration run: only the average).
pub fn lat_duration_result(
    size: u64,
    iters: u64,
    t_avg: f64,
    tps: f64,
    cpu: Option<Option<f64>>,
) -> Value {
    let mut m = Map::new();
    m.insert("MsgSize".into(), json!(size));
    m.insert("n_iterations".into(), json!(iters));
    m.insert("t_avg".into(), json!(t_avg));
    m.insert("tps".into(), json!(tps));
    add_cpu(&mut m, cpu);
    Value::Object(m)
}

/// `cpu`: `None` without `--cpu_util`; `Some(None)` when it could not be measured.
fn add_cpu(m: &mut Map<String, Value>, cpu: Option<Option<f64>>) {
    if let Some(c) = cpu {
        m.insert("CPU_util".into(), c.map_or(Value::Null, |u| json!(u)));
    }
}

/// The whole document: `test` (perftest's test name, e.g. `RDMA_Write_BW_Test`), the
/// header's `(key, value)` lines and one results object per size. Keys are the header's with
/// `_` for spaces, dots and dashes (`Dual-port` → `Dual_port`, `Data ex. method` →
/// `Data_ex_method`); a value that is a whole number, with or without its `[B]`/`[s]` unit,
/// is a JSON number (perftest 4.5 writes `Mtu: 4096`, `Number_of_qps: 1`).
pub fn document(test: &str, info: &[(String, String)], mut results: Vec<Value>) -> Value {
    let mut test_info = Map::new();
    test_info.insert("test".into(), json!(test));
    for (k, v) in info {
        let key = k.replace(". ", "_").replace([' ', '.', '-'], "_");
        test_info.insert(key, info_value(v));
    }
    let results = if results.len() == 1 {
        results.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(results)
    };
    json!({ "test_info": test_info, "results": results })
}

/// A header value as perftest's JSON has it: a number when it is one.
fn info_value(v: &str) -> Value {
    let bare = v.trim_end_matches("[B]").trim_end_matches("[s]");
    bare.parse::<u64>().map_or_else(|_| json!(v), |n| json!(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::BwUnits;

    #[test]
    fn one_size_is_an_object_with_perftests_fields() {
        let r = BwReport::from_times(64, &[0, 0], &[10, 20], 1, 1, BwUnits::MibPerSec).unwrap();
        let d = document(
            "RDMA_Write_BW_Test",
            &[
                ("Number of qps".into(), "1".into()),
                ("Dual-port".into(), "OFF".into()),
                ("Max inline data".into(), "220[B]".into()),
                ("Data ex. method".into(), "Ethernet".into()),
            ],
            vec![bw_result(&r, Some(Some(12.5)))],
        );
        assert_eq!(d["test_info"]["test"], "RDMA_Write_BW_Test");
        assert_eq!(d["test_info"]["Number_of_qps"], 1);
        assert_eq!(d["test_info"]["Dual_port"], "OFF");
        assert_eq!(d["test_info"]["Max_inline_data"], 220);
        assert_eq!(d["test_info"]["Data_ex_method"], "Ethernet");
        assert_eq!(d["results"]["MsgSize"], 64);
        assert_eq!(d["results"]["CPU_util"], 12.5);
        let two = document("t", &[], vec![bw_result(&r, None), bw_result(&r, None)]);
        assert_eq!(two["results"].as_array().map(Vec::len), Some(2));
        assert!(two["results"][0].get("CPU_util").is_none());
    }
}

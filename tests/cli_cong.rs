//! `bypass cong show|set` on an in-process sim NIC: the defaults under mlx5's names, a change
//! shown in the same run, and typed errors for a bad name, a value out of range and bad syntax.

mod cli_support;

use cli_support::bypass;

#[test]
fn show_prints_the_defaults_and_counters() {
    let (code, out, err) = bypass(&["cong", "show"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("roce_rp enabled on priorities: none\n"),
        "{out}"
    );
    for line in [
        "rp rpg_time_reset 300",
        "rp rpg_byte_reset 32767",
        "rp dce_tcp_g 1019",
        "rp initial_alpha_value 1023",
        "np min_time_between_cnps 50",
        "counter rp_cnp_handled 0",
        "counter np_cnp_sent 0",
    ] {
        assert!(out.lines().any(|l| l == line), "{line}: {out}");
    }
}

#[test]
fn set_changes_what_it_names() {
    let (code, out, err) = bypass(&[
        "cong",
        "set",
        "--enable",
        "np:3",
        "--enable",
        "rp:3",
        "--rp",
        "rpg_ai_rate=10",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("roce_rp enabled on priorities: 3\n"), "{out}");
    assert!(out.contains("roce_np enabled on priorities: 3\n"), "{out}");
    assert!(out.lines().any(|l| l == "rp rpg_ai_rate 10"), "{out}");
    assert!(out.lines().any(|l| l == "rp rpg_hai_rate 50"), "{out}");
}

#[test]
fn bad_sets_are_explained() {
    let (code, out, err) = bypass(&["cong", "set", "--rp", "rpg_min_dec_fac=101"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("MODIFY_CONG_PARAMS") && err.contains("CONG_PARAM_RANGE"),
        "{err}"
    );
    let (code, _, err) = bypass(&["cong", "set", "--np", "cnp_colour=1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no parameter \"cnp_colour\"") && err.contains("cnp_dscp"),
        "{err}"
    );
    let (code, _, err) = bypass(&["cong", "set", "--enable", "rp:9"]);
    assert_eq!(code, 2, "a usage error");
    assert!(err.contains("0..=7"), "{err}");
}

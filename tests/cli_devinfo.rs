//! `bypass devinfo`: shows a simulated device like `ibv_devinfo`, and refuses devices this
//! build cannot open with an error that says what to use instead.

mod cli_support;

use cli_support::bypass;

/// The value printed after `key:` on its line (ibv_devinfo's `key:<tabs>value` layout).
fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[test]
fn devinfo_shows_the_sim_device_by_default() {
    let (code, out, err) = bypass(&["devinfo"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("hca_id:\tsim"), "{out}");
    assert_eq!(field(&out, "fw_ver"), Some("16.35.1012"), "{out}");
    assert_eq!(field(&out, "transport"), Some("Ethernet (RoCE)"), "{out}");
    assert_eq!(field(&out, "phys_port_cnt"), Some("1"), "{out}");
    assert_eq!(field(&out, "state"), Some("ACTIVE (4)"), "{out}");
    assert_eq!(field(&out, "active_mtu"), Some("4096"), "{out}");
    assert!(
        field(&out, "max_qp_wr").is_some_and(|v| v.parse::<u64>().is_ok()),
        "{out}"
    );
    // The IPv4-mapped RoCE v2 GID of 10.0.0.1.
    assert_eq!(
        field(&out, "GID[  0]"),
        Some("0000:0000:0000:0000:0000:ffff:0a00:0001"),
        "{out}"
    );
}

#[test]
fn devinfo_with_explicit_sim_device_is_the_same_device() {
    let (code, out, _) = bypass(&["devinfo", "--device", "sim"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("hca_id:\tsim"), "{out}");
}

#[test]
fn devinfo_on_a_pci_address_opens_it_through_vfio() {
    // No such device here: the VFIO backend's own error, naming the address.
    let (code, out, err) = bypass(&["devinfo", "-d", "0000:3b:00.0"]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("there is no PCI device 0000:3b:00.0"), "{err}");
}

#[test]
fn devinfo_bad_device_is_a_usage_error() {
    let (code, _, err) = bypass(&["devinfo", "-d", "mlx5_0"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not a device"), "{err}");
}

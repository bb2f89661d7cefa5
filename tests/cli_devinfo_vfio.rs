//! `bypass devinfo --vfio BDF` on a machine without the device: every refusal names what is
//! wrong and what to do. (The successful path runs in the QEMU guest on `edu`:
//! `scripts/guest-test.sh vfio` runs `bypass devinfo --vfio` there.)

mod cli_support;

use cli_support::bypass;

#[test]
fn devinfo_vfio_rejects_a_malformed_address_with_the_expected_form() {
    let (code, _, err) = bypass(&["devinfo", "--vfio", "00:1f.9"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is not a PCI address") && err.contains("lspci -D"),
        "{err}"
    );
}

#[test]
fn devinfo_vfio_names_a_missing_device() {
    let (code, _, err) = bypass(&["devinfo", "--vfio", "0000:ff:1f.7"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("there is no PCI device 0000:ff:1f.7"), "{err}");
}

#[test]
fn commands_that_talk_to_a_peer_open_a_vfio_device_and_name_what_is_missing() {
    for args in [
        &["pingpong", "-d", "vfio:0000:ff:1f.7"][..],
        &["perf", "write-lat", "-d", "0000:ff:1f.7"][..],
        &["perf", "write-bw", "-d", "0000:ff:1f.7", "127.0.0.1"][..],
    ] {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("there is no PCI device 0000:ff:1f.7"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn ping_on_one_vfio_nic_says_to_run_pingpong_on_both_sides() {
    let (code, _, err) = bypass(&["ping", "-d", "0000:ff:1f.7"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("runs both endpoints in one process")
            && err.contains("bypass pingpong -d vfio:0000:ff:1f.7"),
        "{err}"
    );
}

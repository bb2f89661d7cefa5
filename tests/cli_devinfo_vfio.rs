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

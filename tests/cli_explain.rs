//! The `bypass explain` command: a user pastes a code from a failed command, an error CQE or a
//! packet capture and gets its name, cause and fix.

mod cli_support;

use cli_support::bypass;

#[test]
fn explains_an_error_cqe_syndrome() {
    let (code, out, _) = bypass(&["explain", "syndrome", "0x13"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("REMOTE_ACCESS_ERR (0x13): the remote side rejected the rkey"),
        "{out}"
    );
}

#[test]
fn explains_a_command_status_given_in_decimal() {
    let (code, out, _) = bypass(&["explain", "status", "3"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("BAD_PARAM_ERR (0x3):"), "{out}");
}

#[test]
fn explains_an_rnr_nak_with_its_timer() {
    let (code, out, _) = bypass(&["explain", "aeth", "0x2c"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("RNR_NAK (0x20): receiver not ready"),
        "{out}"
    );
    assert!(out.contains("RnrNak(12)"), "{out}");
}

#[test]
fn unknown_codes_are_named_unknown_not_hidden() {
    let (code, out, _) = bypass(&["explain", "syndrome", "0xee"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("UNKNOWN(0xee)"), "{out}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let cases: [(&[&str], &str); 3] = [
        (&["explain", "syndrome", "0x1ff"], "is not a byte value"),
        (&["explain", "color", "1"], "invalid value 'color'"),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, why) in cases {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

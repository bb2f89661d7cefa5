//! Why a call failed, for a person: a C caller sees only an errno, so the typed error is
//! printed on stderr when `BYPASS_VERBS_DEBUG` is set (read once).
//!
//! Owns: [`failure`]. Must not: print anything when the variable is unset (programs parse
//! their own output, as perftest's tables are parsed).

use std::fmt::Display;
use std::sync::OnceLock;

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("BYPASS_VERBS_DEBUG").is_some_and(|v| v != "0"))
}

/// Prints `e` with its cause and fix when `BYPASS_VERBS_DEBUG` is set.
#[cold]
pub(crate) fn failure(e: &dyn Display) {
    if enabled() {
        eprintln!("bypass libibverbs: {e}");
    }
}

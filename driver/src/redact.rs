//! Secrets in formatted output: memory keys (lkeys, rkeys) and the addresses registered memory
//! is reached at are shown by `Debug`/`Display` only when the user asks for them.
//!
//! An rkey together with an address lets a peer read and write that memory, so neither may
//! reach a log by accident. Every type of the driver and of `bypass-verbs` that holds one
//! formats it through [`Key`] or [`Addr`], which print `<redacted>` unless the process was
//! started with `BYPASS_LOG_KEYS=1` ([`keys_shown`], read once, the first time any of them is
//! formatted). The values themselves stay reachable through methods named for them
//! (`lkey()`, `rkey()`, `addr()`), which is the explicit way to ask. A key generator's state
//! is never formatted, whatever the switch says (it predicts every future key).
//!
//! Owns: the switch and the two wrappers. Must not: change any value it wraps, or be used on
//! the data path (it reads the environment once, then one atomic load per format).
//! Sources: the seed's §3.1 rule (an rkey lets a peer read and write that memory and must never
//! reach a log); perftest prints keys only as part of the output a user runs it for.

use core::fmt;
use std::sync::OnceLock;

/// The environment variable that shows keys and remote addresses in formatted output when it
/// is `1`.
pub const LOG_KEYS_ENV: &str = "BYPASS_LOG_KEYS";

/// What formatted keys and addresses show when [`keys_shown`] is false.
pub const REDACTED: &str = "<redacted>";

/// Whether `Debug`/`Display` show keys and addresses: `BYPASS_LOG_KEYS=1` in the environment,
/// read once per process.
pub fn keys_shown() -> bool {
    static SHOWN: OnceLock<bool> = OnceLock::new();
    *SHOWN.get_or_init(|| std::env::var_os(LOG_KEYS_ENV).is_some_and(|v| v == "1"))
}

/// A memory key (lkey or rkey) as formatted output shows it: hex when [`keys_shown`], else
/// [`REDACTED`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key(pub u32);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if keys_shown() {
            write!(f, "{:#x}", self.0)
        } else {
            f.write_str(REDACTED)
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An address of registered memory (what SGEs and peers use) as formatted output shows it:
/// hex when [`keys_shown`], else [`REDACTED`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Addr(pub u64);

impl fmt::Debug for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if keys_shown() {
            write!(f, "{:#x}", self.0)
        } else {
            f.write_str(REDACTED)
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_unless_the_switch_is_on() {
        // The test binary runs without BYPASS_LOG_KEYS (scripts and CI do not set it).
        if std::env::var_os(LOG_KEYS_ENV).is_some() {
            return;
        }
        assert_eq!(format!("{:?}", Key(0x1234_5678)), REDACTED);
        assert_eq!(format!("{}", Addr(0xdead_beef_0000)), REDACTED);
        assert!(!keys_shown());
    }
}

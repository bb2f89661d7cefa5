//! Parsers for the tool's option values: byte values, sizes with binary suffixes, and the
//! `-d/--device` selector.
//!
//! Owns: turning strings into typed option values with messages that say what was expected.
//! Must not open devices or print: clap reports the errors as usage errors (exit code 2).

/// Parses a byte value: decimal, or hex with `0x`.
pub fn parse_u8(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a byte value (0..=255, decimal or 0x-prefixed hex)"))
}

/// Parses a size in bytes: a decimal number with an optional binary suffix `K`, `M` or `G`
/// (`64K` = 65536, `1M` = 1048576), as sizes are written in perftest's output.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "{s:?} is not a size: give bytes as a number, optionally with K, M or G (e.g. 8, 4096, 64K, 1M)"
        )
    };
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (t.get(..i).ok_or_else(bad)?, 10),
        Some((i, 'm' | 'M')) => (t.get(..i).ok_or_else(bad)?, 20),
        Some((i, 'g' | 'G')) => (t.get(..i).ok_or_else(bad)?, 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

pub use bypass_testbed::DeviceSpec;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert!(parse_size("1.5M").unwrap_err().contains("is not a size"));
    }

    #[test]
    fn byte_values_in_decimal_or_hex() {
        assert_eq!(parse_u8("0x13"), Ok(0x13));
        assert_eq!(parse_u8("255"), Ok(255));
        assert!(parse_u8("0x1ff").is_err());
    }
}

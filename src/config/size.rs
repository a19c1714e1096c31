//! Sizes in the file (`512m`, `1g`, `64k`, `1048576`), read by the `bytesize` crate.
//!
//! Pier's `k`, `m` and `g` have always been powers of 1024 (`512m` is 512 MiB, as Docker
//! reads a memory limit); `bytesize` reads those letters as powers of 1000, so they (and
//! `t`, `p`, `e`, new here) are handed to it as its binary units (`512mi`). Anything else
//! it accepts (`1.5g`, `64 KiB`) is accepted too; zero and sizes beyond `i64` are refused.

use bytesize::ByteSize;

/// A size that does not parse, or is zero or too large.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a size such as 512m or 1g")]
pub struct SizeError(String);

/// Parses sizes such as `512m`, `1g`, `1048576` into bytes.
pub fn parse_bytes(text: &str) -> Result<i64, SizeError> {
    let err = || SizeError(text.to_owned());
    let lower = text.trim().to_ascii_lowercase();
    // As the hand-written parser read them: a leading `+`, and a space before `b`.
    let t = lower.strip_prefix('+').unwrap_or(&lower);
    let t = t.strip_suffix('b').unwrap_or(t).trim_end();
    let binary = match t.chars().last() {
        Some('k' | 'm' | 'g' | 't' | 'p' | 'e') => format!("{t}i"),
        _ => t.to_owned(),
    };
    let n: ByteSize = binary.parse().map_err(|_| err())?;
    i64::try_from(n.as_u64())
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_powers_of_1024_and_zero_or_garbage_is_refused() {
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("64kb"), Ok(64 << 10));
        assert_eq!(parse_bytes(" 16m "), Ok(16 << 20));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert_eq!(parse_bytes("100b"), Ok(100));
        assert_eq!(parse_bytes("2 MiB"), Ok(2 << 20));
        assert_eq!(parse_bytes("5 b"), Ok(5));
        assert_eq!(parse_bytes("+5 m"), Ok(5 << 20));
        assert_eq!(parse_bytes("1t"), Ok(1 << 40));
        for bad in ["lots", "0", "0m", "-5", "", "m", "99999999999999g"] {
            let e = parse_bytes(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("`{bad}` is not a size such as 512m or 1g")
            );
        }
    }
}

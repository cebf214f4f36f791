//! Kubernetes resource quantities (`"1"`, `"2k"`, `"1Gi"`, `"1e3"`) as whole numbers.

/// Why a quantity was refused; `value` is the trimmed input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("{value:?} is not a quantity (expected a number such as 1, 2k, 1Gi)")]
    NotAQuantity { value: String },
    #[error("{value:?} has an invalid exponent {exponent:?}")]
    InvalidExponent { value: String, exponent: String },
    #[error("{value:?} has an unknown suffix {suffix:?}")]
    UnknownSuffix { value: String, suffix: String },
    #[error("{value:?} is out of range")]
    OutOfRange { value: String },
    #[error("{value:?} must not be negative")]
    Negative { value: String },
    #[error("{value:?} must be a whole number")]
    NotWhole { value: String },
}

/// Parses a Kubernetes quantity that must be a whole, non-negative number fitting an `i64`
/// (the values of `nvidia.com/gpu`, `gpumem`, `gpumem-percentage`, `gpucores`).
pub(crate) fn parse_whole(value: &str) -> Result<u64, QuantityError> {
    parse_scaled(value, 1, 1, Rounding::Exact)
}

/// Parses a non-negative Kubernetes quantity and gives `ceil(value * mul / div)`, fitting an
/// `i64` (CPU in millicores: `mul` 1000; memory in MiB: `div` 2^20). Kubernetes itself rounds
/// CPU up to the millicore.
pub(crate) fn parse_ceil(value: &str, mul: u128, div: u128) -> Result<u64, QuantityError> {
    parse_scaled(value, mul, div, Rounding::Up)
}

/// How a quantity that is not a whole number of the unit is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rounding {
    /// Refused (`NotWhole`).
    Exact,
    /// Rounded up.
    Up,
}

fn parse_scaled(
    value: &str,
    mul: u128,
    div: u128,
    rounding: Rounding,
) -> Result<u64, QuantityError> {
    let s = value.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let bytes = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if let Some(&c) = bytes.first()
        && (c == b'+' || c == b'-')
    {
        negative = c == b'-';
        pos = 1;
    }
    let digits_start = pos;
    while bytes.get(pos).is_some_and(u8::is_ascii_digit) {
        pos += 1;
    }
    let int_digits = &s[digits_start..pos];
    let mut frac_digits = "";
    if bytes.get(pos) == Some(&b'.') {
        let fs = pos + 1;
        pos += 1;
        while bytes.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        frac_digits = &s[fs..pos];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(QuantityError::NotAQuantity {
            value: s.to_owned(),
        });
    }
    let suffix = &s[pos..];
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        other => match other.strip_prefix(['e', 'E']) {
            Some(exp) if !exp.is_empty() => {
                let e: i32 = exp.parse().map_err(|_| QuantityError::InvalidExponent {
                    value: s.to_owned(),
                    exponent: exp.to_owned(),
                })?;
                if !(-64..=64).contains(&e) {
                    return Err(QuantityError::OutOfRange {
                        value: s.to_owned(),
                    });
                }
                (e, 0)
            }
            _ => {
                return Err(QuantityError::UnknownSuffix {
                    value: s.to_owned(),
                    suffix: other.to_owned(),
                });
            }
        },
    };
    // mantissa = int_digits . frac_digits, as an integer with `frac_digits.len()` implied decimals.
    let mut mantissa: u128 = 0;
    let mut significant = 0usize;
    for c in int_digits.bytes().chain(frac_digits.bytes()) {
        if mantissa == 0 && c == b'0' {
            continue;
        }
        significant += 1;
        if significant > 30 {
            return Err(QuantityError::OutOfRange {
                value: s.to_owned(),
            });
        }
        mantissa = mantissa * 10 + u128::from(c - b'0');
    }
    if mantissa == 0 {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative {
            value: s.to_owned(),
        });
    }
    let out_of_range = || QuantityError::OutOfRange {
        value: s.to_owned(),
    };
    let frac_len = i32::try_from(frac_digits.len()).map_err(|_| out_of_range())?;
    let mut num = mantissa
        .checked_shl(exp2)
        .filter(|v| v >> exp2 == mantissa)
        .ok_or_else(out_of_range)?
        .checked_mul(mul)
        .ok_or_else(out_of_range)?;
    let mut den = div.max(1);
    let e = exp10 - frac_len;
    if e >= 0 {
        for _ in 0..e {
            num = num.checked_mul(10).ok_or_else(out_of_range)?;
        }
    } else {
        for _ in 0..(-e) {
            match den.checked_mul(10) {
                Some(d) => den = d,
                // More decimals than any u128 holds: a positive value below one unit.
                None if rounding == Rounding::Up => return Ok(1),
                None => {
                    return Err(QuantityError::NotWhole {
                        value: s.to_owned(),
                    });
                }
            }
        }
    }
    let n = match rounding {
        Rounding::Exact if num % den != 0 => {
            return Err(QuantityError::NotWhole {
                value: s.to_owned(),
            });
        }
        Rounding::Exact => num / den,
        Rounding::Up => num.div_ceil(den),
    };
    if n > i64::MAX as u128 {
        return Err(out_of_range());
    }
    u64::try_from(n).map_err(|_| out_of_range())
}

#[cfg(test)]
mod tests {
    use super::{QuantityError, parse_ceil, parse_whole};

    #[test]
    fn whole_quantities() {
        for (s, v) in [
            ("1", 1),
            ("+3", 3),
            ("0", 0),
            ("-0", 0),
            ("2k", 2000),
            ("1Ki", 1024),
            ("1Gi", 1 << 30),
            ("1e3", 1000),
            ("1.5k", 1500),
            ("3000m", 3),
            (" 40 ", 40),
            ("0.0", 0),
        ] {
            assert_eq!(parse_whole(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn cpu_and_memory_round_up() {
        for (s, mul, div, v) in [
            ("500m", 1000, 1, 500),
            ("1.5", 1000, 1, 1500),
            ("2", 1000, 1, 2000),
            ("0.0001", 1000, 1, 1),
            ("16Gi", 1, 1 << 20, 16384),
            ("12288Mi", 1, 1 << 20, 12288),
            ("1000", 1, 1 << 20, 1),
            ("1G", 1, 1 << 20, 954),
            ("0", 1000, 1, 0),
        ] {
            assert_eq!(parse_ceil(s, mul, div), Ok(v), "{s}");
        }
        assert!(parse_ceil("-1", 1000, 1).is_err());
        assert!(parse_ceil("abc", 1000, 1).is_err());
    }

    #[test]
    fn rejected_quantities() {
        for s in [
            "",
            "abc",
            "1.5",
            "500m",
            "-1",
            "1x",
            "1e",
            "1Ki2",
            "99999999999999999999",
            "8Ei",
            ".",
            "1e99",
        ] {
            assert!(parse_whole(s).is_err(), "{s:?} must be rejected");
        }
        let v = |s: &str| s.to_owned();
        for (s, want) in [
            ("", QuantityError::Empty),
            ("abc", QuantityError::NotAQuantity { value: v("abc") }),
            ("-1", QuantityError::Negative { value: v("-1") }),
            ("500m", QuantityError::NotWhole { value: v("500m") }),
            (
                "1x",
                QuantityError::UnknownSuffix {
                    value: v("1x"),
                    suffix: v("x"),
                },
            ),
            (
                "1e+",
                QuantityError::InvalidExponent {
                    value: v("1e+"),
                    exponent: v("+"),
                },
            ),
            ("1e99", QuantityError::OutOfRange { value: v("1e99") }),
        ] {
            assert_eq!(parse_whole(s), Err(want), "{s:?}");
        }
    }
}

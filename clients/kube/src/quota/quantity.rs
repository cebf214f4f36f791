//! The values of a ResourceQuota's GPU keys: Kubernetes quantities read as whole counts of MiB
//! or percent. The API server stores them canonically (`20000` comes back as `20k`), so decimal
//! multipliers and exponents are counts like any other; a binary suffix (`16Gi`) multiplies
//! bytes, which a MiB or percent count never is, so it is refused rather than read as 2^34.

/// The largest budget the service accepts (2^53 - 1, contract 10.1); a larger hard limit is
/// read as this, which no cluster can book.
pub const MAX_BUDGET: u64 = (1 << 53) - 1;

/// Why a quota value is not a whole, non-negative count.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Empty or not a number at all.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// Below zero.
    #[error("{0:?} is negative")]
    Negative(String),
    /// A fraction (`1.5`, `500m`).
    #[error("{0:?} is not a whole number")]
    NotWhole(String),
    /// `Ki`, `Mi`, `Gi`, ...: bytes, not a count.
    #[error(
        "{value:?} has the binary suffix {suffix:?}, a multiple of bytes; the key counts {unit} \
         (write a plain number{hint})"
    )]
    BinarySuffix {
        /// The value as written.
        value: String,
        /// The suffix.
        suffix: String,
        /// What the key counts (`MiB`, `percent of a card`).
        unit: &'static str,
        /// `, e.g. 16384 for 16Gi of memory` where it can be said.
        hint: String,
    },
    /// Any other suffix.
    #[error("{value:?} has an unknown suffix {suffix:?}")]
    UnknownSuffix {
        /// The value as written.
        value: String,
        /// The suffix.
        suffix: String,
    },
}

/// Powers of ten of the decimal suffixes (the fractional ones can still give a whole number).
fn decimal_power(suffix: &str) -> Option<i32> {
    Some(match suffix {
        "" => 0,
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        _ => {
            let e = suffix.strip_prefix(['e', 'E'])?;
            let e: i32 = e.parse().ok()?;
            return (-400..=400).contains(&e).then_some(e);
        }
    })
}

/// Powers of two of the binary suffixes.
fn binary_power(suffix: &str) -> Option<u32> {
    ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .position(|s| *s == suffix)
        .map(|i| 10 * (u32::try_from(i).unwrap_or(0) + 1))
}

/// Reads `value` as a whole, non-negative count, capped at [`MAX_BUDGET`]. `memory` says
/// whether the key counts MiB (for the hint of a binary suffix) or percent.
pub fn parse(value: &str, memory: bool) -> Result<u64, ValueError> {
    let v = value.trim();
    let unsigned = v.strip_prefix('+').unwrap_or(v);
    let (negative, unsigned) = match unsigned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, unsigned),
    };
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(ValueError::NotANumber(v.to_owned()));
    }
    let digits: String = format!("{whole}{fraction}");
    let all_zero = digits.bytes().all(|b| b == b'0');
    if negative && !all_zero {
        return Err(ValueError::Negative(v.to_owned()));
    }
    if let Some(power) = binary_power(suffix) {
        let hint = if memory && fraction.is_empty() {
            whole
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(1 << power).map(|bytes| bytes >> 20))
                .filter(|mib| *mib > 0)
                .map(|mib| format!(", e.g. {mib} for {v} of memory"))
                .unwrap_or_default()
        } else {
            String::new()
        };
        return Err(ValueError::BinarySuffix {
            value: v.to_owned(),
            suffix: suffix.to_owned(),
            unit: if memory { "MiB" } else { "percent of a card" },
            hint,
        });
    }
    let Some(power) = decimal_power(suffix) else {
        return Err(ValueError::UnknownSuffix {
            value: v.to_owned(),
            suffix: suffix.to_owned(),
        });
    };
    if all_zero {
        return Ok(0);
    }
    // value = digits * 10^(power - fraction digits); whole only if the negative part divides.
    let significant = digits.trim_start_matches('0');
    let shift = i64::from(power) - i64::try_from(fraction.len()).unwrap_or(i64::MAX);
    let kept = if shift >= 0 {
        significant
    } else {
        let cut = usize::try_from(-shift).unwrap_or(usize::MAX);
        let (kept, dropped) = significant.split_at(significant.len().saturating_sub(cut));
        if dropped.bytes().any(|b| b != b'0') || cut > significant.len() {
            return Err(ValueError::NotWhole(v.to_owned()));
        }
        kept
    };
    // More than 16 significant digits, or any scale past 10^16, is beyond MAX_BUDGET.
    let zeros = usize::try_from(shift.max(0)).unwrap_or(usize::MAX);
    if kept.len().saturating_add(zeros) > 16 {
        return Ok(MAX_BUDGET);
    }
    let n: u64 = format!("{kept}{}", "0".repeat(zeros))
        .parse()
        .map_err(|_| ValueError::NotANumber(v.to_owned()))?;
    Ok(n.min(MAX_BUDGET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_counts_in_every_canonical_form() {
        for (value, want) in [
            ("0", 0),
            ("20000", 20_000),
            ("20k", 20_000),
            ("1500k", 1_500_000),
            ("1.5k", 1_500),
            ("2M", 2_000_000),
            ("1e3", 1_000),
            ("1E3", 1_000),
            ("+300", 300),
            (" 80 ", 80),
            ("1000m", 1),
            ("0.000", 0),
            ("-0", 0),
            ("007", 7),
            ("9007199254740991", MAX_BUDGET),
            ("9007199254740992", MAX_BUDGET),
            ("10E", MAX_BUDGET),
            ("1e300", MAX_BUDGET),
            ("123456789012345678901234567890", MAX_BUDGET),
        ] {
            assert_eq!(parse(value, true), Ok(want), "{value}");
        }
    }

    #[test]
    fn what_is_not_a_whole_count_is_refused_with_its_reason() {
        let binary = |value: &str, suffix: &str, hint: &str| ValueError::BinarySuffix {
            value: value.into(),
            suffix: suffix.into(),
            unit: "MiB",
            hint: hint.into(),
        };
        for (value, want) in [
            ("", ValueError::NotANumber(String::new())),
            ("abc", ValueError::NotANumber("abc".into())),
            (".", ValueError::NotANumber(".".into())),
            ("1.2.3", ValueError::NotANumber("1.2.3".into())),
            ("-1", ValueError::Negative("-1".into())),
            ("-20k", ValueError::Negative("-20k".into())),
            ("1.5", ValueError::NotWhole("1.5".into())),
            ("500m", ValueError::NotWhole("500m".into())),
            ("1e-3", ValueError::NotWhole("1e-3".into())),
            (
                "16Gi",
                binary("16Gi", "Gi", ", e.g. 16384 for 16Gi of memory"),
            ),
            ("512Ki", binary("512Ki", "Ki", "")),
            (
                "16GB",
                ValueError::UnknownSuffix {
                    value: "16GB".into(),
                    suffix: "GB".into(),
                },
            ),
            (
                "1e",
                ValueError::UnknownSuffix {
                    value: "1e".into(),
                    suffix: "e".into(),
                },
            ),
        ] {
            assert_eq!(parse(value, true), Err(want), "{value}");
        }
        let cores = parse("1Ki", false).unwrap_err();
        assert_eq!(
            cores.to_string(),
            "\"1Ki\" has the binary suffix \"Ki\", a multiple of bytes; the key counts percent \
             of a card (write a plain number)"
        );
    }
}

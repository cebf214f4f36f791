//! Kubernetes resource quantities (`"1"`, `"2k"`, `"1Gi"`, `"1e3"`) as whole numbers.

/// Parses a Kubernetes quantity that must be a whole, non-negative number fitting an `i64`
/// (the values of `nvidia.com/gpu`, `gpumem`, `gpumem-percentage`, `gpucores`).
pub(crate) fn parse_whole(value: &str) -> Result<u64, String> {
    let s = value.trim();
    if s.is_empty() {
        return Err("empty quantity".to_owned());
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
        return Err(format!(
            "{s:?} is not a quantity (expected a number such as 1, 2k, 1Gi)"
        ));
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
                let e: i32 = exp
                    .parse()
                    .map_err(|_| format!("{s:?} has an invalid exponent {exp:?}"))?;
                if !(-64..=64).contains(&e) {
                    return Err(format!("{s:?} is out of range"));
                }
                (e, 0)
            }
            _ => return Err(format!("{s:?} has an unknown suffix {other:?}")),
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
            return Err(format!("{s:?} is out of range"));
        }
        mantissa = mantissa * 10 + u128::from(c - b'0');
    }
    if mantissa == 0 {
        return Ok(0);
    }
    if negative {
        return Err(format!("{s:?} must not be negative"));
    }
    let frac_len =
        i32::try_from(frac_digits.len()).map_err(|_| format!("{s:?} is out of range"))?;
    let out_of_range = || format!("{s:?} is out of range");
    let mut n = mantissa
        .checked_shl(exp2)
        .filter(|v| v >> exp2 == mantissa)
        .ok_or_else(out_of_range)?;
    let e = exp10 - frac_len;
    if e >= 0 {
        for _ in 0..e {
            n = n.checked_mul(10).ok_or_else(out_of_range)?;
        }
    } else {
        for _ in 0..(-e) {
            if n % 10 != 0 {
                return Err(format!("{s:?} must be a whole number"));
            }
            n /= 10;
        }
    }
    if n > i64::MAX as u128 {
        return Err(out_of_range());
    }
    u64::try_from(n).map_err(|_| out_of_range())
}

#[cfg(test)]
mod tests {
    use super::parse_whole;

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
    }
}

//! How numbers read on the page, in the API's texts and in the terminal: `2,048 MiB`, `61.5%`.

/// `2048` → `2,048`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `12.3456` → `12.3` (one decimal, for percentages).
pub fn pct(x: f64) -> String {
    format!("{x:.1}")
}

/// `used` over `total` as a percentage 0..100 (0 when `total` is 0).
pub fn share(used: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        used as f64 * 100.0 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_with_separators() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (2048, "2,048"),
            (16_777_216, "16,777,216"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(thousands(n), want);
        }
        assert_eq!(pct(61.549), "61.5");
        assert_eq!(share(1, 4), 25.0);
        assert_eq!(share(1, 0), 0.0);
    }
}

//! Workload priorities for the replay with preemption (`--preemption`): Kubernetes
//! `spec.priority` semantics, a signed 32-bit integer, higher is more important.
//!
//! - openb `qos`: `LS` (latency-sensitive) and `Guaranteed` 1000, `Burstable` 500, `BE`
//!   (best-effort) and an empty value 0: LS above BE, as in the trace's cluster. Any other value
//!   is a bad row naming it.
//! - JSON Lines: an optional `priority`, an integer in the i32 range (absent or null: 0).

/// openb's `qos` as a priority.
pub fn of_qos(qos: &str) -> Result<i32, String> {
    match qos.trim() {
        "LS" | "Guaranteed" => Ok(1000),
        "Burstable" => Ok(500),
        "BE" | "" => Ok(0),
        other => Err(format!(
            "`{other}` is not a QoS class (LS, Guaranteed, Burstable, BE)"
        )),
    }
}

/// A JSON Lines `priority` (absent or null: 0).
pub fn of_json(v: Option<&serde_json::Value>) -> Result<i32, String> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(0),
        Some(x) => x
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| {
                format!(
                    "`priority` must be an integer in {}..={}, got {x}",
                    i32::MIN,
                    i32::MAX
                )
            }),
    }
}

/// The name of a priority class in reports: openb's names for their values, else the number.
pub fn class_name(p: i32, openb: bool) -> String {
    match (openb, p) {
        (true, 1000) => "LS/Guaranteed (1000)".to_owned(),
        (true, 500) => "Burstable (500)".to_owned(),
        (true, 0) => "BE (0)".to_owned(),
        _ => p.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qos_classes_and_json_priorities() {
        let cases = [
            ("LS", Ok(1000)),
            ("Guaranteed", Ok(1000)),
            ("Burstable", Ok(500)),
            ("BE", Ok(0)),
            ("", Ok(0)),
        ];
        for (q, want) in cases {
            assert_eq!(of_qos(q), want, "{q}");
        }
        assert!(of_qos("Gold").unwrap_err().contains("`Gold`"));
        assert_eq!(of_json(None), Ok(0));
        assert_eq!(of_json(Some(&json!(null))), Ok(0));
        assert_eq!(of_json(Some(&json!(-5))), Ok(-5));
        assert_eq!(of_json(Some(&json!(2147483647))), Ok(i32::MAX));
        for bad in [
            json!(2147483648i64),
            json!(1.5),
            json!("high"),
            json!(-2147483649i64),
        ] {
            let e = of_json(Some(&bad)).unwrap_err();
            assert!(
                e.contains("`priority` must be an integer in -2147483648..=2147483647"),
                "{e}"
            );
        }
        assert_eq!(class_name(1000, true), "LS/Guaranteed (1000)");
        assert_eq!(class_name(7, true), "7");
        assert_eq!(class_name(1000, false), "1000");
    }
}

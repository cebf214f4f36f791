//! `hami.io/device-scoring-weights`: the per-workload weights of the device score terms.

use std::fmt;

/// Weights of the slot, core and memory terms of the device score.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScoringWeights {
    /// Weight of the slot term.
    pub slot: u64,
    /// Weight of the core term.
    pub core: u64,
    /// Weight of the memory term.
    pub memory: u64,
}

/// Largest accepted weight (HAMi parses weights as int64).
pub const MAX_WEIGHT: u64 = i64::MAX as u64;

impl Default for ScoringWeights {
    fn default() -> Self {
        ScoringWeights {
            slot: 1,
            core: 1,
            memory: 1,
        }
    }
}

impl fmt::Display for ScoringWeights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slot={},core={},memory={}",
            self.slot, self.core, self.memory
        )
    }
}

impl ScoringWeights {
    /// Checks the typed form: each weight at most [`MAX_WEIGHT`], at least one positive.
    pub fn validate(self) -> Result<Self, String> {
        for (name, w) in [
            ("slot", self.slot),
            ("core", self.core),
            ("memory", self.memory),
        ] {
            if w > MAX_WEIGHT {
                return Err(format!(
                    "{name} weight {w} is out of range (at most {MAX_WEIGHT})"
                ));
            }
        }
        if self.slot == 0 && self.core == 0 && self.memory == 0 {
            return Err("at least one of slot, core and memory must be greater than 0".to_owned());
        }
        Ok(self)
    }

    /// Parses `slot=<int>,core=<int>,memory=<int>`: exactly three entries, each split at its
    /// first `=`, keys trimmed and case-sensitive without duplicates, values trimmed base-10
    /// integers >= 0 (leading `+` accepted), at least one > 0. Key order and whitespace do not
    /// matter.
    pub fn parse(value: &str) -> Result<Self, String> {
        const FORM: &str = "expected slot=<int>,core=<int>,memory=<int>";
        let entries: Vec<&str> = value.split(',').collect();
        if entries.len() != 3 {
            return Err(format!(
                "{FORM}: found {} comma-separated entries, need exactly 3",
                entries.len()
            ));
        }
        let (mut slot, mut core, mut memory) = (None, None, None);
        for entry in entries {
            let entry = entry.trim();
            let Some((key, val)) = entry.split_once('=') else {
                return Err(format!("{FORM}: entry {entry:?} has no '='"));
            };
            let key = key.trim();
            let val = val.trim();
            let target = match key {
                "slot" => &mut slot,
                "core" => &mut core,
                "memory" => &mut memory,
                other => {
                    return Err(format!(
                        "{FORM}: unknown key {other:?} (keys are slot, core, memory, case-sensitive)"
                    ));
                }
            };
            if target.is_some() {
                return Err(format!("{FORM}: duplicate key {key:?}"));
            }
            if val.is_empty() {
                return Err(format!("{FORM}: {key} has an empty value"));
            }
            let parsed: i64 = val.parse().map_err(|_| {
                format!("{FORM}: {key} weight {val:?} is not a base-10 integer in range")
            })?;
            if parsed < 0 {
                return Err(format!("{FORM}: {key} weight {val:?} must not be negative"));
            }
            *target = Some(parsed.unsigned_abs());
        }
        let weights = ScoringWeights {
            slot: slot.unwrap_or(0),
            core: core.unwrap_or(0),
            memory: memory.unwrap_or(0),
        };
        weights.validate()
    }

    /// Weights scaled to sum 1, used to compare scores whatever the magnitude of the weights.
    pub(crate) fn normalized(self) -> [f64; 3] {
        let sum = self.slot as f64 + self.core as f64 + self.memory as f64;
        if sum <= 0.0 {
            return [0.0; 3];
        }
        [
            self.slot as f64 / sum,
            self.core as f64 / sum,
            self.memory as f64 / sum,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let w = |s: &str| ScoringWeights::parse(s).unwrap();
        assert_eq!(
            w("slot=1,core=1,memory=3"),
            ScoringWeights {
                slot: 1,
                core: 1,
                memory: 3
            }
        );
        assert_eq!(
            w(" memory = 3 , slot=1,core= 1 "),
            ScoringWeights {
                slot: 1,
                core: 1,
                memory: 3
            }
        );
        assert_eq!(
            w("slot=+2,core=0,memory=0"),
            ScoringWeights {
                slot: 2,
                core: 0,
                memory: 0
            }
        );
        assert_eq!(
            w("slot=0,core=0,memory=007"),
            ScoringWeights {
                slot: 0,
                core: 0,
                memory: 7
            }
        );
    }

    #[test]
    fn rejected_forms() {
        for bad in [
            "",
            "slot=1,core=1",
            "slot=1,core=1,memory=1,extra=1",
            "slot=1,core=1,memory=1,",
            "slot=1,core,memory=1",
            "slot=1.5,core=1,memory=1",
            "slot=high,core=1,memory=1",
            "slot=-1,core=1,memory=1",
            "slot=1,core=1,mem=1",
            "Slot=1,core=1,memory=1",
            "slot=1,slot=1,memory=1",
            "slot=0,core=0,memory=0",
            "slot=,core=1,memory=1",
            "slot=99999999999999999999,core=1,memory=1",
            "slot=1 2,core=1,memory=1",
        ] {
            assert!(
                ScoringWeights::parse(bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
    }
}

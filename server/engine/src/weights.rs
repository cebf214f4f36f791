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

/// One of the three weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightKey {
    /// `slot`.
    Slot,
    /// `core`.
    Core,
    /// `memory`.
    Memory,
}

impl WeightKey {
    /// The key as written in the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            WeightKey::Slot => "slot",
            WeightKey::Core => "core",
            WeightKey::Memory => "memory",
        }
    }
}

impl fmt::Display for WeightKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why scoring weights were refused (parsing `slot=<int>,core=<int>,memory=<int>`, or
/// checking the typed form).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScoringWeightsError {
    /// Not exactly three comma-separated entries.
    #[error("{FORM}: found {found} comma-separated entries, need exactly 3")]
    EntryCount {
        /// Entries found.
        found: usize,
    },
    /// An entry without `=` (trimmed).
    #[error("{FORM}: entry {entry:?} has no '='")]
    NoEquals {
        /// The entry.
        entry: String,
    },
    /// A key other than `slot`, `core`, `memory` (trimmed).
    #[error("{FORM}: unknown key {key:?} (keys are slot, core, memory, case-sensitive)")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("{FORM}: duplicate key \"{key}\"")]
    DuplicateKey {
        /// The key.
        key: WeightKey,
    },
    /// `key=` with nothing after it.
    #[error("{FORM}: {key} has an empty value")]
    EmptyValue {
        /// The key.
        key: WeightKey,
    },
    /// A value that is not a base-10 integer within `i64` (trimmed).
    #[error("{FORM}: {key} weight {value:?} is not a base-10 integer in range")]
    NotInteger {
        /// The key.
        key: WeightKey,
        /// The value.
        value: String,
    },
    /// A negative value (trimmed).
    #[error("{FORM}: {key} weight {value:?} must not be negative")]
    Negative {
        /// The key.
        key: WeightKey,
        /// The value.
        value: String,
    },
    /// A typed weight above [`MAX_WEIGHT`].
    #[error("{key} weight {weight} is out of range (at most {MAX_WEIGHT})")]
    OutOfRange {
        /// The key.
        key: WeightKey,
        /// The weight.
        weight: u64,
    },
    /// Every weight is 0.
    #[error("at least one of slot, core and memory must be greater than 0")]
    AllZero,
}

const FORM: &str = "expected slot=<int>,core=<int>,memory=<int>";

impl ScoringWeights {
    /// Checks the typed form: each weight at most [`MAX_WEIGHT`], at least one positive.
    pub fn validate(self) -> Result<Self, ScoringWeightsError> {
        for (key, weight) in [
            (WeightKey::Slot, self.slot),
            (WeightKey::Core, self.core),
            (WeightKey::Memory, self.memory),
        ] {
            if weight > MAX_WEIGHT {
                return Err(ScoringWeightsError::OutOfRange { key, weight });
            }
        }
        if self.slot == 0 && self.core == 0 && self.memory == 0 {
            return Err(ScoringWeightsError::AllZero);
        }
        Ok(self)
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

impl std::str::FromStr for ScoringWeights {
    type Err = ScoringWeightsError;

    /// Parses `slot=<int>,core=<int>,memory=<int>`: exactly three entries, each split at its
    /// first `=`, keys trimmed and case-sensitive without duplicates, values trimmed base-10
    /// integers >= 0 (leading `+` accepted), at least one > 0. Key order and whitespace do not
    /// matter.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let entries: Vec<&str> = value.split(',').collect();
        if entries.len() != 3 {
            return Err(ScoringWeightsError::EntryCount {
                found: entries.len(),
            });
        }
        let (mut slot, mut core, mut memory) = (None, None, None);
        for entry in entries {
            let entry = entry.trim();
            let Some((key, val)) = entry.split_once('=') else {
                return Err(ScoringWeightsError::NoEquals {
                    entry: entry.to_owned(),
                });
            };
            let val = val.trim();
            let (key, target) = match key.trim() {
                "slot" => (WeightKey::Slot, &mut slot),
                "core" => (WeightKey::Core, &mut core),
                "memory" => (WeightKey::Memory, &mut memory),
                other => {
                    return Err(ScoringWeightsError::UnknownKey {
                        key: other.to_owned(),
                    });
                }
            };
            if target.is_some() {
                return Err(ScoringWeightsError::DuplicateKey { key });
            }
            if val.is_empty() {
                return Err(ScoringWeightsError::EmptyValue { key });
            }
            let parsed: i64 = val.parse().map_err(|_| ScoringWeightsError::NotInteger {
                key,
                value: val.to_owned(),
            })?;
            if parsed < 0 {
                return Err(ScoringWeightsError::Negative {
                    key,
                    value: val.to_owned(),
                });
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let w = |s: &str| s.parse::<ScoringWeights>().unwrap();
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
                bad.parse::<ScoringWeights>().is_err(),
                "{bad:?} must be rejected"
            );
        }
    }
}

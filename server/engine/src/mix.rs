//! The target workload mix (`docs/placement-semantics.md` section 12.1): the request shapes
//! the fragmentation measure expects, with their weights. A leaf: value types and validation.

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::model::MAX_CARD_MEM_MIB;

/// Most shapes a mix may have (the service may configure fewer). A card's fit is kept as one
/// bit per shape in a 64-bit word.
pub const MAX_MIX_SHAPES: usize = 64;

/// Largest weight of one shape. The service turns a probability `p` into the weight
/// `round(p * 1e9)`, so this is a probability of 1.
pub const MAX_SHAPE_WEIGHT: u64 = 1_000_000_000;

/// How far the probabilities of [`WorkloadMix::from_probabilities`] may sum from 1.
pub const PROBABILITY_TOLERANCE: f64 = 1e-6;

/// One request shape of a mix: a GPU container (its cards and the share of each card it asks),
/// optionally with the host CPU and memory its workload asks, and how likely it is.
#[derive(Clone, Debug, PartialEq, Eq, Default, Hash)]
pub struct MixShape {
    /// How likely the shape is, as an integer weight (only ratios between weights matter).
    pub weight: u64,
    /// Cards (at least 1).
    pub gpus: u32,
    /// Cores per card, percent (0..=100).
    pub cores: u32,
    /// Memory per card, MiB; 0 = not set.
    pub mem_mib: u64,
    /// Memory per card, percent of the card; 0 = not set. Neither set: 100 (the whole card,
    /// as a container without memory under the default of section 2). Both: the MiB.
    pub mem_percent: u32,
    /// Card types the shape accepts (the `nvidia.com/use-gputype` rule: a card is accepted
    /// when its type contains an entry, case-insensitive); empty = any type.
    pub card_types: Vec<String>,
    /// Host CPU of its workload, millicores (0 = none).
    pub cpu_milli: u64,
    /// Host memory of its workload, MiB (0 = none).
    pub host_mem_mib: u64,
}

/// A validated workload mix: 1..=[`MAX_MIX_SHAPES`] shapes whose weights do not all vanish.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkloadMix {
    shapes: Vec<MixShape>,
    /// Upper-case card types per shape (for the case-insensitive match).
    types_upper: Vec<Vec<String>>,
    total_weight: u64,
}

impl WorkloadMix {
    /// Validates the shapes. Fields are named as in the API, relative to the mix
    /// (`shapes[3].gpucores_percent`); every problem is reported.
    pub fn new(shapes: Vec<MixShape>) -> Result<WorkloadMix, InvalidInput> {
        let mut violations = Vec::new();
        if shapes.is_empty() {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                "shapes",
                "a workload mix needs at least one shape",
            ));
        }
        if shapes.len() > MAX_MIX_SHAPES {
            violations.push(Violation::new(
                ViolationKind::LimitExceeded,
                "shapes",
                format!(
                    "{} shapes; at most {MAX_MIX_SHAPES} are accepted",
                    shapes.len()
                ),
            ));
        }
        let mut total: u64 = 0;
        for (i, s) in shapes.iter().enumerate() {
            let out_of_range = |field: &str, text: String| {
                Violation::new(
                    ViolationKind::OutOfRange,
                    format!("shapes[{i}].{field}"),
                    text,
                )
            };
            if s.weight > MAX_SHAPE_WEIGHT {
                violations.push(Violation::new(
                    ViolationKind::InvalidWorkloadMix,
                    format!("shapes[{i}].weight"),
                    format!(
                        "weight {} is above the largest accepted {MAX_SHAPE_WEIGHT}",
                        s.weight
                    ),
                ));
            }
            total = total.saturating_add(s.weight);
            if s.gpus == 0 {
                violations.push(out_of_range(
                    "gpu_count",
                    "a shape asks for at least one card".into(),
                ));
            }
            if s.cores > 100 {
                violations.push(out_of_range(
                    "gpucores_percent",
                    format!("cores {} is out of range 0..=100", s.cores),
                ));
            }
            if s.mem_percent > 100 {
                violations.push(out_of_range(
                    "gpumem_percent",
                    format!(
                        "memory percentage {} is out of range 1..=100 (0 = not set)",
                        s.mem_percent
                    ),
                ));
            }
            if s.mem_mib > MAX_CARD_MEM_MIB {
                violations.push(out_of_range(
                    "gpumem_mib",
                    format!(
                        "{} MiB is above the largest card ({MAX_CARD_MEM_MIB} MiB)",
                        s.mem_mib
                    ),
                ));
            }
            for (field, value) in [("cpu_milli", s.cpu_milli), ("host_mem_mib", s.host_mem_mib)] {
                if i64::try_from(value).is_err() {
                    violations.push(out_of_range(
                        field,
                        format!("{value} is above the largest accepted {}", i64::MAX),
                    ));
                }
            }
            for (j, t) in s.card_types.iter().enumerate() {
                if t.trim().is_empty() {
                    violations.push(Violation::new(
                        ViolationKind::MissingField,
                        format!("shapes[{i}].gpu_types[{j}]"),
                        "a card type must not be blank",
                    ));
                }
            }
        }
        if !shapes.is_empty() && total == 0 {
            violations.push(Violation::new(
                ViolationKind::InvalidWorkloadMix,
                "shapes",
                "every shape has weight 0: the mix expects nothing",
            ));
        }
        if !violations.is_empty() {
            return Err(InvalidInput { violations });
        }
        let types_upper = shapes
            .iter()
            .map(|s| {
                s.card_types
                    .iter()
                    .map(|t| t.trim().to_uppercase())
                    .collect()
            })
            .collect();
        Ok(WorkloadMix {
            shapes,
            types_upper,
            total_weight: total,
        })
    }

    /// A mix from shapes with probabilities (the API's form, section 12.1): each probability
    /// finite and in `[0, 1]` (`shapes[i].probability`), together summing to 1 within
    /// [`PROBABILITY_TOLERANCE`] (`shapes`), all `INVALID_WORKLOAD_MIX`; each becomes the
    /// weight `round(p * 1e9)` (the shapes' own `weight` is replaced), then [`WorkloadMix::new`].
    pub fn from_probabilities(shapes: Vec<(f64, MixShape)>) -> Result<WorkloadMix, InvalidInput> {
        let mut violations = Vec::new();
        let mut sum = 0.0f64;
        let mut out = Vec::with_capacity(shapes.len());
        for (i, (p, shape)) in shapes.into_iter().enumerate() {
            let weight = if p.is_finite() && (0.0..=1.0).contains(&p) {
                sum += p;
                // 0..=1e9 after rounding: the cast cannot saturate.
                (p * MAX_SHAPE_WEIGHT as f64).round() as u64
            } else {
                violations.push(Violation::new(
                    ViolationKind::InvalidWorkloadMix,
                    format!("shapes[{i}].probability"),
                    format!("probability {p} is not in [0, 1]"),
                ));
                // Not returned (the mix is refused); 1 keeps "every weight is 0" from being
                // reported on top of the probability's own violation.
                1
            };
            out.push(MixShape { weight, ..shape });
        }
        if violations.is_empty() && !out.is_empty() && (sum - 1.0).abs() > PROBABILITY_TOLERANCE {
            violations.push(Violation::new(
                ViolationKind::InvalidWorkloadMix,
                "shapes",
                format!("the probabilities sum to {sum}; they must sum to 1 (within 1e-6)"),
            ));
        }
        match WorkloadMix::new(out) {
            Ok(mix) if violations.is_empty() => Ok(mix),
            Ok(_) => Err(InvalidInput { violations }),
            Err(e) => {
                violations.extend(e.violations);
                Err(InvalidInput { violations })
            }
        }
    }

    /// The shapes, in the order given (shape `i` is bit `i` of the measure).
    pub fn shapes(&self) -> &[MixShape] {
        &self.shapes
    }

    /// The sum of the weights (positive).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// Whether shape `i` accepts a card of type `card_type` (case-insensitive substring of
    /// an entry; no entries: any type).
    pub fn accepts_type(&self, i: usize, card_type: &str) -> bool {
        let Some(types) = self.types_upper.get(i) else {
            return false;
        };
        if types.is_empty() {
            return true;
        }
        let upper = card_type.to_uppercase();
        types.iter().any(|t| upper.contains(t.as_str()))
    }

    /// Whether any shape names card types.
    pub(crate) fn has_types(&self) -> bool {
        self.types_upper.iter().any(|t| !t.is_empty())
    }
}

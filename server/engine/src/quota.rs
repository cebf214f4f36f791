//! Quota budgets (`docs/placement-semantics.md` section 10.1): the values a workload carries,
//! what a placement consumes, and the rule of what passes a budget. A leaf: what a workload
//! consumes is in `quota_workload`, the running total of check 7q in `quota_tally`.

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::reason::Reason;

/// Largest accepted budget value (MiB or percent): 2^53 - 1, the largest integer every
/// client's JSON number keeps exactly. A larger value is taken for a sentinel meaning
/// "unlimited", which is an absent value.
pub const MAX_QUOTA_VALUE: u64 = (1 << 53) - 1;

/// What a workload may still book against its namespace's quota (section 10.1): each value
/// optional, absent = unlimited; 0 blocks every GPU container for that resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct QuotaBudget {
    /// GPU memory it may still book, MiB (`limits.nvidia.com/gpumem` minus what the namespace
    /// holds).
    pub mem_mib: Option<u64>,
    /// GPU cores it may still book, percent of a card (`limits.nvidia.com/gpucores` minus what
    /// the namespace holds).
    pub cores: Option<u64>,
}

/// What a placement consumes (or a workload at least consumes): GPU memory and cores summed
/// over every card it books.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct QuotaUse {
    /// MiB.
    pub mem_mib: u64,
    /// Percent of a card.
    pub cores: u64,
}

impl QuotaUse {
    /// Both values added (saturating).
    pub(crate) fn plus(self, other: QuotaUse) -> QuotaUse {
        QuotaUse {
            mem_mib: self.mem_mib.saturating_add(other.mem_mib),
            cores: self.cores.saturating_add(other.cores),
        }
    }
}

/// Which budget a workload would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaResource {
    /// GPU memory ([`Reason::QuotaMemoryExceeded`]).
    Memory,
    /// GPU cores ([`Reason::QuotaCoresExceeded`]).
    Cores,
}

impl QuotaResource {
    /// The card-level reason of check 7q for this resource.
    pub fn reason(self) -> Reason {
        match self {
            QuotaResource::Memory => Reason::QuotaMemoryExceeded,
            QuotaResource::Cores => Reason::QuotaCoresExceeded,
        }
    }
}

/// The quota part of a node's explanation: the budget and what the node's tentative placement
/// consumes (up to the container that failed, when one did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaExplanation {
    /// The workload's budget (in a batch, after what its namespace placed before it).
    pub budget: QuotaBudget,
    /// What the containers placed on this node consume.
    pub consumed: QuotaUse,
}

impl QuotaBudget {
    /// No budget: every value absent.
    pub const UNLIMITED: QuotaBudget = QuotaBudget {
        mem_mib: None,
        cores: None,
    };

    /// Whether neither value is set (decisions are then those without quotas).
    pub fn is_unlimited(&self) -> bool {
        self.mem_mib.is_none() && self.cores.is_none()
    }

    /// Checks the values against [`MAX_QUOTA_VALUE`]; violations name `quota.mem_mib` and
    /// `quota.cores` (`OUT_OF_RANGE`).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let violations: Vec<Violation> =
            [("quota.mem_mib", self.mem_mib), ("quota.cores", self.cores)]
                .into_iter()
                .filter_map(|(field, value)| {
                    let v = value.filter(|v| *v > MAX_QUOTA_VALUE)?;
                    Some(Violation::new(
                        ViolationKind::OutOfRange,
                        field,
                        format!(
                            "{v} is above the largest budget {MAX_QUOTA_VALUE}; leave the value \
                         unset for no limit"
                        ),
                    ))
                })
                .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidInput { violations })
        }
    }

    /// The resource whose budget `consumed` passes, memory first; a budget of 0 is passed by
    /// anything (section 10.1: 0 blocks every GPU container). `None` when within budget.
    pub fn refusal(&self, consumed: QuotaUse) -> Option<QuotaResource> {
        let over = |budget: Option<u64>, used: u64| budget.is_some_and(|b| b == 0 || used > b);
        if over(self.mem_mib, consumed.mem_mib) {
            Some(QuotaResource::Memory)
        } else if over(self.cores, consumed.cores) {
            Some(QuotaResource::Cores)
        } else {
            None
        }
    }

    /// What is left after `spent` (saturating at 0; an absent value stays absent).
    pub(crate) fn less(self, spent: QuotaUse) -> QuotaBudget {
        QuotaBudget {
            mem_mib: self.mem_mib.map(|b| b.saturating_sub(spent.mem_mib)),
            cores: self.cores.map(|b| b.saturating_sub(spent.cores)),
        }
    }
}

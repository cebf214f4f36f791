//! What a workload consumes against a quota budget (`docs/placement-semantics.md` section 10):
//! the budget set on a workload, the admission floor (10.6), and the sharing of a namespace's
//! budget within a batch (10.5).

use std::collections::BTreeMap;

use crate::error::InvalidInput;
use crate::quota::{QuotaBudget, QuotaResource, QuotaUse};
use crate::workload::Workload;

impl Workload {
    /// The same workload with a quota budget (section 10.1), validated
    /// ([`QuotaBudget::validate`]): whatever the workload asks, since the budget comes from the
    /// caller, not from the pod.
    pub fn with_quota(mut self, budget: QuotaBudget) -> Result<Workload, InvalidInput> {
        budget.validate()?;
        self.quota = budget;
        Ok(self)
    }

    /// The workload's quota budget ([`QuotaBudget::UNLIMITED`] unless set by
    /// [`Workload::with_quota`]).
    pub fn quota(&self) -> QuotaBudget {
        self.quota
    }

    /// The least this workload consumes on any node (section 10.6): per resource, the larger of
    /// the app containers' sum and the largest init container, each container counted as its
    /// cards times its fixed per-card booking (`mem_mib`; a percentage counts 0 MiB, since its
    /// MiB depend on the card; cores).
    pub fn quota_floor(&self) -> QuotaUse {
        let mut app = QuotaUse::default();
        let mut init = QuotaUse::default();
        for c in self.containers.iter().filter(|c| c.gpus > 0) {
            let cards = u64::from(c.gpus);
            let one = QuotaUse {
                mem_mib: c.mem_mib.unwrap_or(0).saturating_mul(cards),
                cores: u64::from(c.cores).saturating_mul(cards),
            };
            if c.init {
                init.mem_mib = init.mem_mib.max(one.mem_mib);
                init.cores = init.cores.max(one.cores);
            } else {
                app = app.plus(one);
            }
        }
        QuotaUse {
            mem_mib: app.mem_mib.max(init.mem_mib),
            cores: app.cores.max(init.cores),
        }
    }
}

impl QuotaBudget {
    /// Admission (section 10.6), with `self` the namespace's **hard** limits: the resource
    /// for which `workload` can never fit (its [`Workload::quota_floor`] is above the limit,
    /// or the limit is 0), or `None` when it may fit now or later. A workload without GPU
    /// always may.
    pub fn admission_refusal(&self, workload: &Workload) -> Option<QuotaResource> {
        if !workload.requests_gpu() {
            return None;
        }
        self.refusal(workload.quota_floor())
    }
}

/// The budgets of a batch's namespaces (section 10.5): each workload's budget is reduced by what
/// the workloads of its namespace placed before it consume.
#[derive(Debug, Default)]
pub(crate) struct BatchQuotas {
    active: bool,
    /// What each namespace's placed workloads consume, by namespace.
    spent: BTreeMap<String, QuotaUse>,
}

impl BatchQuotas {
    /// Inactive (no bookkeeping at all) when no workload of the batch has a budget.
    pub(crate) fn new(workloads: &[Workload]) -> Self {
        BatchQuotas {
            active: workloads.iter().any(|w| !w.quota.is_unlimited()),
            spent: BTreeMap::new(),
        }
    }

    /// `workload` with its budget reduced by its namespace's spending, when there is any.
    pub(crate) fn narrowed(&self, workload: &Workload) -> Option<Workload> {
        if !self.active || workload.quota.is_unlimited() {
            return None;
        }
        let spent = self.spent.get(&workload.meta.namespace)?;
        let mut w = workload.clone();
        w.quota = w.quota.less(*spent);
        Some(w)
    }

    /// Records that `workload` was placed, consuming `used` ([`crate::Placement::quota_use`]).
    pub(crate) fn spend(&mut self, workload: &Workload, used: QuotaUse) {
        if !self.active {
            return;
        }
        match self.spent.get_mut(&workload.meta.namespace) {
            Some(spent) => *spent = spent.plus(used),
            None => {
                self.spent.insert(workload.meta.namespace.clone(), used);
            }
        }
    }
}

//! Quotas (`docs/placement-semantics.md` section 9): the budget a workload carries, what a
//! placement consumes, the running total of check 7q, the admission floor and the sharing of
//! a namespace's budget within a batch.
//!
//! The hot path pays nothing without a budget: [`QuotaTally`] is inactive and every hook
//! returns at its first branch.

use std::collections::BTreeMap;

use crate::decide::Placement;
use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::explain::NodeExplanation;
use crate::model::{Card, Node};
use crate::reason::Reason;
use crate::workload::{ContainerRequest, Workload};

/// Largest accepted budget value (MiB or percent): 2^53 - 1, the largest integer every
/// client's JSON number keeps exactly. A larger value is taken for a sentinel meaning
/// "unlimited", which is an absent value.
pub const MAX_QUOTA_VALUE: u64 = (1 << 53) - 1;

/// What a workload may still book against its namespace's quota (section 9.1): each value
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
    fn plus(self, other: QuotaUse) -> QuotaUse {
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
    /// anything (section 9.1: 0 blocks every GPU container). `None` when within budget.
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

    /// Admission (section 9.6), with `self` the namespace's **hard** limits: the resource
    /// for which `workload` can never fit (its [`Workload::quota_floor`] is above the limit,
    /// or the limit is 0), or `None` when it may fit now or later. A workload without GPU
    /// always may.
    pub fn admission_refusal(&self, workload: &Workload) -> Option<QuotaResource> {
        if !workload.requests_gpu() {
            return None;
        }
        self.refusal(workload.quota_floor())
    }

    /// What is left after `spent` (saturating at 0; an absent value stays absent).
    fn less(self, spent: QuotaUse) -> QuotaBudget {
        QuotaBudget {
            mem_mib: self.mem_mib.map(|b| b.saturating_sub(spent.mem_mib)),
            cores: self.cores.map(|b| b.saturating_sub(spent.cores)),
        }
    }
}

impl Workload {
    /// The same workload with a quota budget (section 9.1), validated
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

    /// The least this workload consumes on any node (section 9.6): per resource, the larger of
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

impl Placement {
    /// What the placement consumes against its workload's budget: memory and cores of
    /// [`Placement::booked`] summed over the node's cards (section 9.2).
    pub fn quota_use(&self) -> QuotaUse {
        self.booked.iter().fold(QuotaUse::default(), |sum, b| {
            sum.plus(QuotaUse {
                mem_mib: b.used_mem_mib,
                cores: u64::from(b.used_cores),
            })
        })
    }
}

/// The workload's bookings on one card so far (only tracked with init containers).
#[derive(Clone, Copy, Debug, Default)]
struct CardBook {
    /// Largest init container booking.
    peak: QuotaUse,
    /// Sum of the app containers' bookings.
    app: QuotaUse,
}

/// The running total of check 7q while one node's tentative placement is built (section 9.3).
#[derive(Debug, Default)]
pub(crate) struct QuotaTally {
    active: bool,
    budget: QuotaBudget,
    /// Per card bookings; used only when the workload has GPU init containers (else every
    /// card's growth is its booking).
    per_card: bool,
    cards: Vec<CardBook>,
    /// What the containers placed on this node consume (`T`).
    used: QuotaUse,
    /// Growth of the cards the current container has collected so far.
    pending: QuotaUse,
}

impl QuotaTally {
    /// Starts a node of `cards` cards for `workload`; inactive (every check passes, nothing is
    /// counted) without a budget.
    #[inline]
    pub(crate) fn start(&mut self, workload: &Workload, cards: usize) {
        self.active = false;
        if !workload.quota.is_unlimited() {
            self.start_budget(workload, cards);
        }
    }

    #[inline(never)]
    fn start_budget(&mut self, workload: &Workload, cards: usize) {
        self.active = true;
        self.budget = workload.quota;
        self.per_card = workload.containers.iter().any(|c| c.init && c.gpus > 0);
        self.cards.clear();
        if self.per_card {
            self.cards.resize(cards, CardBook::default());
        }
        self.used = QuotaUse::default();
        self.pending = QuotaUse::default();
    }

    /// The tally of a workload's only GPU container before anything is placed (the budget
    /// alone), when the workload has a budget.
    pub(crate) fn alone(workload: &Workload) -> Option<QuotaTally> {
        (!workload.quota.is_unlimited()).then(|| QuotaTally {
            active: true,
            budget: workload.quota,
            ..QuotaTally::default()
        })
    }

    /// With nothing placed yet: whether the budget admits some but fewer than `need` cards
    /// that each book `mem` MiB and the container's cores (then the visiting order decides
    /// which cards a container gets, and whether it fits).
    pub(crate) fn admits_some_not(&self, need: usize, req: &ContainerRequest, mem: u64) -> bool {
        let cards = |budget: Option<u64>, each: u64| match budget {
            None => u64::MAX,
            Some(b) if each == 0 && b > 0 => u64::MAX,
            Some(b) => b.checked_div(each).unwrap_or(0),
        };
        let admitted =
            cards(self.budget.mem_mib, mem).min(cards(self.budget.cores, u64::from(req.cores)));
        admitted > 0 && admitted < u64::try_from(need).unwrap_or(u64::MAX)
    }

    /// Whether a budget is being checked.
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// A new container: nothing collected yet.
    pub(crate) fn start_container(&mut self) {
        self.pending = QuotaUse::default();
    }

    /// How much the workload's consumption grows when the container books `booked_mem` MiB and
    /// its cores on the card at `pos`.
    fn growth(&self, pos: usize, req: &ContainerRequest, booked_mem: u64) -> QuotaUse {
        let b = QuotaUse {
            mem_mib: booked_mem,
            cores: u64::from(req.cores),
        };
        let Some(book) = self.cards.get(pos).filter(|_| self.per_card) else {
            return b;
        };
        let grow = |peak: u64, app: u64, b: u64| {
            let before = peak.max(app);
            let after = if req.init {
                peak.max(b).max(app)
            } else {
                peak.max(app.saturating_add(b))
            };
            after - before
        };
        QuotaUse {
            mem_mib: grow(book.peak.mem_mib, book.app.mem_mib, b.mem_mib),
            cores: grow(book.peak.cores, book.app.cores, b.cores),
        }
    }

    /// The tally when a budget is being checked, for the card loops: they test the `Option`
    /// (a register) per card instead of reading the flag.
    #[inline]
    pub(crate) fn gate(&self) -> Option<&QuotaTally> {
        self.active.then_some(self)
    }

    /// Check 7q: the reason to refuse the card at `pos` for the container `req` (booking
    /// `booked_mem` MiB there), given what the container has collected so far. Kept out of
    /// line: the card loops stay small.
    #[inline(never)]
    pub(crate) fn refuse(
        &self,
        pos: usize,
        req: &ContainerRequest,
        booked_mem: u64,
    ) -> Option<Reason> {
        let total = self
            .used
            .plus(self.pending)
            .plus(self.growth(pos, req, booked_mem));
        self.budget.refusal(total).map(QuotaResource::reason)
    }

    /// The container collected the card at `pos` (its growth now counts for the next cards).
    #[inline]
    pub(crate) fn collect(&mut self, pos: usize, card: &Card, req: &ContainerRequest) {
        if self.active {
            self.pending = self
                .pending
                .plus(self.growth(pos, req, req.booked_mem(card)));
        }
    }

    /// The collected cards were abandoned (a NUMA group that could not supply the container).
    pub(crate) fn drop_collected(&mut self) {
        self.pending = QuotaUse::default();
    }

    /// The container was given the card at `pos`, booking `booked_mem` MiB there.
    pub(crate) fn commit(&mut self, pos: usize, req: &ContainerRequest, booked_mem: u64) {
        if !self.active {
            return;
        }
        self.used = self.used.plus(self.growth(pos, req, booked_mem));
        if let Some(book) = self.cards.get_mut(pos).filter(|_| self.per_card) {
            let cores = u64::from(req.cores);
            if req.init {
                book.peak.mem_mib = book.peak.mem_mib.max(booked_mem);
                book.peak.cores = book.peak.cores.max(cores);
            } else {
                book.app.mem_mib = book.app.mem_mib.saturating_add(booked_mem);
                book.app.cores = book.app.cores.saturating_add(cores);
            }
        }
    }

    /// Whether the container can be given all of `cards` (positions) within budget, checked
    /// together (topology-aware, section 9.4). Always true when inactive.
    pub(crate) fn fits_together(
        &self,
        node: &Node,
        cards: &[usize],
        req: &ContainerRequest,
    ) -> bool {
        if !self.active {
            return true;
        }
        let total = cards.iter().fold(self.used, |sum, &pos| {
            let mem = node.cards.get(pos).map_or(0, |c| req.booked_mem(c));
            sum.plus(self.growth(pos, req, mem))
        });
        self.budget.refusal(total).is_none()
    }

    /// Why no `need`-combination of `candidates` fits (section 9.4): memory when even the
    /// `need` smallest memory growths exceed the memory budget, else cores.
    pub(crate) fn combination_reason(
        &self,
        node: &Node,
        candidates: &[usize],
        need: usize,
        req: &ContainerRequest,
    ) -> Reason {
        let mut mem: Vec<u64> = candidates
            .iter()
            .map(|&pos| {
                let booked = node.cards.get(pos).map_or(0, |c| req.booked_mem(c));
                self.growth(pos, req, booked).mem_mib
            })
            .collect();
        mem.sort_unstable();
        let least = mem
            .iter()
            .take(need)
            .fold(self.used.mem_mib, |s, m| s.saturating_add(*m));
        let only_mem = QuotaUse {
            mem_mib: least,
            cores: 0,
        };
        let memory = QuotaBudget {
            cores: None,
            ..self.budget
        };
        match memory.refusal(only_mem) {
            Some(_) => Reason::QuotaMemoryExceeded,
            None => Reason::QuotaCoresExceeded,
        }
    }

    /// Sets the node explanation's quota part (nothing without a budget).
    pub(crate) fn explain(&self, ex: &mut NodeExplanation) {
        if self.active {
            ex.quota = Some(QuotaExplanation {
                budget: self.budget,
                consumed: self.used,
            });
        }
    }
}

/// The budgets of a batch's namespaces (section 9.5): each workload's budget is reduced by what
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

    /// Records that `workload` was placed with `placement`.
    pub(crate) fn spend(&mut self, workload: &Workload, placement: &Placement) {
        if !self.active {
            return;
        }
        let used = placement.quota_use();
        match self.spent.get_mut(&workload.meta.namespace) {
            Some(spent) => *spent = spent.plus(used),
            None => {
                self.spent.insert(workload.meta.namespace.clone(), used);
            }
        }
    }
}

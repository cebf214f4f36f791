//! The running total of check 7q while one node's tentative placement is built
//! (`docs/placement-semantics.md` sections 10.3 and 10.4). The hot path pays nothing without a
//! budget: the tally is inactive and the card loops are given no tally at all.

use crate::explain::NodeExplanation;
use crate::model::{Card, Node};
use crate::quota::{QuotaBudget, QuotaExplanation, QuotaResource, QuotaUse};
use crate::reason::Reason;
use crate::workload::{ContainerRequest, Workload};

/// The workload's bookings on one card so far (only tracked with init containers).
#[derive(Clone, Copy, Debug, Default)]
struct CardBook {
    /// Largest init container booking.
    peak: QuotaUse,
    /// Sum of the app containers' bookings.
    app: QuotaUse,
}

/// The running total of check 7q while one node's tentative placement is built (section 10.3).
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

    /// Check 7q for a MIG instance (section 11.4): it consumes `amount` (its profile's memory
    /// and cores) whatever else the workload holds on the card (instances add up, no init
    /// peak).
    #[inline(never)]
    pub(crate) fn refuse_instance(&self, amount: QuotaUse) -> Option<Reason> {
        let total = self.used.plus(self.pending).plus(amount);
        self.budget.refusal(total).map(QuotaResource::reason)
    }

    /// The container collected a MIG instance that consumes `amount`.
    pub(crate) fn collect_instance(&mut self, amount: QuotaUse) {
        if self.active {
            self.pending = self.pending.plus(amount);
        }
    }

    /// The container was given a MIG instance that consumes `amount`.
    pub(crate) fn commit_instance(&mut self, amount: QuotaUse) {
        if self.active {
            self.used = self.used.plus(amount);
        }
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
    /// together (topology-aware, section 10.4). Always true when inactive.
    pub(crate) fn fits_together(
        &self,
        node: &Node,
        cards: &[usize],
        req: &ContainerRequest,
        instance: &dyn Fn(usize) -> Option<QuotaUse>,
    ) -> bool {
        if !self.active {
            return true;
        }
        let total = cards.iter().fold(self.used, |sum, &pos| {
            sum.plus(self.card_growth(node, pos, req, instance))
        });
        self.budget.refusal(total).is_none()
    }

    /// Why no `need`-combination of `candidates` fits (section 10.4): memory when even the
    /// `need` smallest memory growths exceed the memory budget, else cores.
    pub(crate) fn combination_reason(
        &self,
        node: &Node,
        candidates: &[usize],
        need: usize,
        req: &ContainerRequest,
        instance: &dyn Fn(usize) -> Option<QuotaUse>,
    ) -> Reason {
        let mut mem: Vec<u64> = candidates
            .iter()
            .map(|&pos| self.card_growth(node, pos, req, instance).mem_mib)
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

    /// The growth of giving the container the card at `pos`: its MIG instance's amount when
    /// `instance` has one for the card, else its booking there.
    fn card_growth(
        &self,
        node: &Node,
        pos: usize,
        req: &ContainerRequest,
        instance: &dyn Fn(usize) -> Option<QuotaUse>,
    ) -> QuotaUse {
        match instance(pos) {
            Some(amount) => amount,
            None => {
                let mem = node.cards.get(pos).map_or(0, |c| req.booked_mem(c));
                self.growth(pos, req, mem)
            }
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

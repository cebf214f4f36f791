//! Which cards one container gets on one node (`docs/placement-semantics.md` section 5).

use std::cmp::Ordering;

use crate::explain::CardExplanation;
use crate::frag::{FragScratch, PreparedMix};
use crate::mig::choose::{MigChoice, MigExplanation, MigTaken, choose};
use crate::model::{Card, CardMode, CardUsage, Node};
use crate::policy::{NodePolicy, SortKey, VisitPlan};
use crate::quota::QuotaUse;
use crate::quota_tally::QuotaTally;
use crate::reason::{Reason, ReasonCounts};
use crate::score::{booking_key, booking_score, device_key, device_score};
use crate::weights::ScoringWeights;
use crate::workload::{ContainerRequest, Workload};

/// Largest number of card combinations the topology-aware choice enumerates exactly; beyond it
/// a greedy choice is used (best pair first, then the card adding the most pair score).
pub const TOPOLOGY_EXACT_LIMIT: u128 = 200_000;

/// A workload with everything derived once per decision.
#[derive(Debug)]
pub(crate) struct Prepared<'w> {
    pub(crate) workload: &'w Workload,
    pub(crate) plan: VisitPlan,
    pub(crate) norm: [f64; 3],
    pub(crate) weights: ScoringWeights,
    type_filter: bool,
    uuid_filter: bool,
    /// The workload asks for MIG instances (`vgpu-mode` contains `mig`, section 11.2).
    pub(crate) admits_mig: bool,
    /// Position of the only GPU container when the workload is one app container without
    /// numa-bind or topology: its node feasibility and score need no device scores.
    pub(crate) lone: Option<usize>,
    /// The quota check of that lone container, when the workload has a budget (nothing placed
    /// before it: the budget alone).
    pub(crate) lone_quota: Option<QuotaTally>,
    /// The workload's mix, ready for the fragmentation measure, when a policy reads it.
    pub(crate) mix: Option<PreparedMix<'w>>,
    /// The node policy is `fgd`: every feasible node is measured before and after.
    pub(crate) node_fgd: bool,
}

impl Prepared<'_> {
    /// Whether the lone-container shortcut of section 12.3 applies: node and GPU policy plain
    /// `fgd` with a mix, one app container, no quota budget (see `fgd_lone`).
    pub(crate) fn fgd_lone(&self) -> Option<usize> {
        let plain = self.plan.keys == [SortKey::FragAsc, SortKey::ScoreDesc, SortKey::NumaDesc];
        self.lone.filter(|_| {
            self.node_fgd
                && plain
                && !self.plan.mutex
                && self.mix.is_some()
                && self.lone_quota.is_none()
        })
    }
}

impl<'w> Prepared<'w> {
    pub(crate) fn new(workload: &'w Workload) -> Self {
        let node_fgd = workload.node_policy == NodePolicy::Fgd;
        Prepared {
            workload,
            plan: workload.gpu_policy.visit_plan(workload.numa_bind),
            norm: workload.weights.normalized(),
            weights: workload.weights,
            type_filter: workload.filters.has_type_filter(),
            uuid_filter: workload.filters.has_uuid_filter(),
            admits_mig: workload.filters.admits_mig(),
            // A MIG choice depends on the card's instances, and the fragmentation after a
            // placement on the cards chosen: no shortcut.
            lone: lone_container(workload).filter(|_| !workload.filters.admits_mig()),
            lone_quota: QuotaTally::alone(workload),
            mix: workload
                .mix
                .as_deref()
                .filter(|_| workload.uses_fragmentation())
                .map(PreparedMix::new),
            node_fgd,
        }
    }
}

fn lone_container(w: &Workload) -> Option<usize> {
    let mut gpu = w.containers.iter().enumerate().filter(|(_, c)| c.gpus > 0);
    let (position, c) = gpu.next()?;
    let plan = w.gpu_policy.visit_plan(w.numa_bind);
    (gpu.next().is_none() && !c.init && !plan.numa_bind && !plan.topology).then_some(position)
}

/// Outcome of [`lone_fit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoneFit {
    /// The container fits; every fitting card books the same memory, so the node's usage
    /// after placement does not depend on which cards are chosen.
    Uniform { booked_mem: u64 },
    /// The container fits but fitting cards book different memory: choose the cards. Also
    /// when a quota budget makes the visiting order decide (placement-semantics section 10.3).
    Varying,
}

/// Feasibility of a lone container (see [`Prepared::lone`]) without choosing cards: without
/// numa-bind or topology, the container gets the first `gpus` cards in visiting order that
/// pass the checks, so it fits exactly when that many cards pass. Reasons are those of the
/// full visit. `QUOTA`: whether [`Prepared::lone_quota`] is checked (a constant, so that the
/// loop without a budget carries no quota test at all).
pub(crate) fn lone_fit<const QUOTA: bool>(
    node: &Node,
    idle: bool,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
) -> Result<LoneFit, ReasonCounts> {
    let quota = if QUOTA {
        prep.lone_quota.as_ref()
    } else {
        None
    };
    let need = req.gpus as usize;
    let mut reasons = ReasonCounts::default();
    if need > node.cards.len() {
        reasons.add(Reason::NodeInsufficientDevice, 1);
        return Err(reasons);
    }
    // Under a budget the cards of a multi-card container are counted, not chosen, only when
    // every card books the same and the budget admits none of them or all it needs.
    if let (Some(q), true) = (quota, need > 1) {
        let uniform = req.mem_mib.is_some() || node.sums.uniform_mem;
        let mem = node.cards.first().map_or(0, |c| req.booked_mem(c));
        if !uniform || q.admits_some_not(need, req, mem) {
            return Ok(LoneFit::Varying);
        }
    }
    let mut passing = 0usize;
    let mut booked: Option<u64> = None;
    let mut varying = false;
    // Every card books the same memory: stop as soon as enough cards pass.
    let uniform = req.mem_mib.is_some() || node.sums.uniform_mem;
    for (pos, card) in node.cards.iter().enumerate() {
        if uniform && passing >= need {
            break;
        }
        let u = if idle {
            CardUsage::default()
        } else {
            card.usage
        };
        if let Some(r) = pre_checks(card, node.is_cordoned(pos), prep)
            .or_else(|| post_checks(card, pos, u, req, prep, quota))
        {
            reasons.add(r, 1);
            continue;
        }
        passing += 1;
        let b = req.booked_mem(card);
        match booked {
            None => booked = Some(b),
            Some(x) if x != b => varying = true,
            Some(_) => {}
        }
    }
    match booked {
        Some(_) if passing >= need && varying => Ok(LoneFit::Varying),
        Some(booked_mem) if passing >= need => Ok(LoneFit::Uniform { booked_mem }),
        _ => {
            if passing > 0 {
                reasons.set(
                    Reason::AllocatedCardsInsufficientRequest,
                    u32::try_from(passing).unwrap_or(u32::MAX),
                );
            }
            Err(reasons)
        }
    }
}

/// One card given to a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pick {
    pub(crate) container: usize,
    pub(crate) card: usize,
    pub(crate) mem_mib: u64,
    pub(crate) cores: u32,
    /// The instance, on a MIG card.
    pub(crate) mig: Option<MigChoice>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct OrderEntry {
    pub(crate) keys: [i64; 4],
    pub(crate) index: u32,
    pub(crate) pos: usize,
}

/// Reusable buffers (no allocation per node once warmed up).
#[derive(Debug, Default)]
pub(crate) struct FitScratch {
    order: Vec<OrderEntry>,
    collected: Vec<usize>,
    chosen: Vec<usize>,
    /// MIG instances chosen so far in this evaluation, every container (section 11.5).
    pub(crate) mig_taken: Vec<MigTaken>,
    /// The current container's MIG choice per card position (MIG cards only).
    mig_choice: Vec<Option<Result<MigChoice, Reason>>>,
    /// Evaluating as if every card were idle (no MIG instance at all).
    idle: bool,
    /// The workload's running total against its quota budget on the node being evaluated.
    pub(crate) quota: QuotaTally,
    /// The fragmentation measure's buffers and, per card, the change of the node's measure
    /// when one card of the current container is booked there (GPU policy `fgd`).
    frag: FragScratch,
    frag_delta: Vec<i128>,
}

impl FitScratch {
    /// Starts the evaluation of one node.
    pub(crate) fn begin(&mut self, idle: bool) {
        self.mig_taken.clear();
        self.idle = idle;
    }
}

/// The MIG choice (section 11.4) for `req` on the card at `pos`; `None` for a card not in
/// mode `mig`. A MIG card without a layout has no profile.
fn mig_choice(
    card: &Card,
    pos: usize,
    req: &ContainerRequest,
    taken: &[MigTaken],
    idle: bool,
    explain: Option<&mut MigExplanation>,
) -> Option<Result<MigChoice, Reason>> {
    if card.mode != CardMode::Mig {
        return None;
    }
    Some(match card.mig.as_deref() {
        Some(layout) => choose(card, layout, pos, req, taken, idle, explain),
        None => Err(Reason::MigNoProfileLargeEnough),
    })
}

/// Checks 5-7 of a MIG card, its choice (section 11.4), then 7q on the chosen instance: it
/// consumes its profile's memory and cores (what the assignment reports and the caller counts
/// against the quota), not the request's as HAMi's `fitQuota` counts (section 11.9).
fn mig_post_checks(
    card: &Card,
    pos: usize,
    u: CardUsage,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    quota: Option<&QuotaTally>,
    choice: Result<MigChoice, Reason>,
) -> Result<MigChoice, Reason> {
    if let Some(r) = checks_5_to_7q(card, pos, u, req, prep, None) {
        return Err(r);
    }
    let c = choice?;
    match quota.and_then(|q| q.refuse_instance(instance_amount(card, &c))) {
        Some(r) => Err(r),
        None => Ok(c),
    }
}

/// What a MIG instance consumes against a quota: its profile's memory and cores.
pub(crate) fn instance_amount(card: &Card, c: &MigChoice) -> QuotaUse {
    card.mig
        .as_deref()
        .and_then(|l| l.profiles.get(c.profile))
        .map_or(QuotaUse::default(), |p| QuotaUse {
            mem_mib: p.mem_mib,
            cores: u64::from(p.cores),
        })
}

/// The `FragAsc` key of a card's `Δ_card`: saturates only on nodes far beyond any real one
/// (section 12.4).
pub(crate) fn frag_key(frag: i128) -> i64 {
    i64::try_from(frag).unwrap_or(if frag < 0 { i64::MIN } else { i64::MAX })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn card_keys(
    plan: &VisitPlan,
    card: &Card,
    usage: CardUsage,
    req: &ContainerRequest,
    norm: [f64; 3],
    mig: Option<&MigChoice>,
    frag: i128,
) -> [i64; 4] {
    let score = match (plan.uses_score(), mig) {
        (false, _) => 0,
        (true, Some(c)) => booking_key(card, usage, c.booked, norm),
        (true, None) => device_key(card, usage, req, norm),
    };
    let mut keys = [0i64; 4];
    for (slot, key) in keys.iter_mut().zip(&plan.keys) {
        *slot = match key {
            SortKey::ScoreDesc => -score,
            SortKey::ScoreAsc => score,
            SortKey::NumaDesc => -i64::from(card.numa),
            SortKey::NumaAsc => i64::from(card.numa),
            SortKey::IdleFirst => i64::from(usage.used > 0),
            // Saturates only on nodes far beyond any real one (section 12.3).
            SortKey::FragAsc => {
                i64::try_from(frag).unwrap_or(if frag < 0 { i64::MIN } else { i64::MAX })
            }
        };
    }
    keys
}

pub(crate) fn cmp_entries(node: &Node, a: &OrderEntry, b: &OrderEntry) -> Ordering {
    a.keys
        .cmp(&b.keys)
        .then(a.index.cmp(&b.index))
        .then_with(|| {
            let ida = node.cards.get(a.pos).map(|c| c.id.as_str());
            let idb = node.cards.get(b.pos).map(|c| c.id.as_str());
            ida.cmp(&idb)
        })
}

/// Checks 0-3: capacity, health, cordon, type/mode filter (a MIG card refuses a workload
/// that does not ask for MIG, section 11.2).
#[inline]
pub(crate) fn pre_checks(card: &Card, cordoned: bool, prep: &Prepared<'_>) -> Option<Reason> {
    if card.count == 0 || card.total_mem_mib == 0 || card.total_cores == 0 {
        return Some(Reason::CardZeroCapacity);
    }
    if !card.healthy {
        return Some(Reason::CardNotHealth);
    }
    if cordoned {
        return Some(Reason::CardCordoned);
    }
    if prep.type_filter && !prep.workload.filters.type_allows(card) {
        return Some(Reason::CardTypeMismatch);
    }
    if card.mode == CardMode::Mig && !prep.admits_mig {
        return Some(Reason::CardTypeMismatch);
    }
    None
}

/// Checks 5-7q, every card's (a MIG card's too): id filter, slots, mutex, quota.
#[inline(always)]
fn checks_5_to_7q(
    card: &Card,
    pos: usize,
    u: CardUsage,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    quota: Option<&QuotaTally>,
) -> Option<Reason> {
    if prep.uuid_filter && !prep.workload.filters.uuid_allows(card) {
        return Some(Reason::CardUuidMismatch);
    }
    if u.used >= card.count {
        return Some(Reason::CardTimeSlicingExhausted);
    }
    if prep.plan.mutex && u.used > 0 {
        return Some(Reason::ExclusiveDeviceAllocateConflict);
    }
    quota.and_then(|q| q.refuse(pos, req, req.booked_mem(card)))
}

/// Checks 5-11: id filter, slots, mutex, quota (7q, only with a budget), memory, cores,
/// exclusivity, compute exhausted. `pos` is the card's position on its node; `quota` is the
/// running total when the workload has a budget ([`QuotaTally::gate`]). Always inlined: it is
/// the inner loop of every card visit.
#[inline(always)]
pub(crate) fn post_checks(
    card: &Card,
    pos: usize,
    u: CardUsage,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    quota: Option<&QuotaTally>,
) -> Option<Reason> {
    if let Some(r) = checks_5_to_7q(card, pos, u, req, prep, quota) {
        return Some(r);
    }
    let free_mem = i128::from(card.total_mem_mib) - i128::from(u.used_mem_mib);
    if free_mem < i128::from(req.booked_mem(card)) {
        return Some(Reason::CardInsufficientMemory);
    }
    let free_cores = i64::from(card.total_cores) - i64::from(u.used_cores);
    if free_cores < i64::from(req.cores) {
        return Some(Reason::CardInsufficientCore);
    }
    if card.total_cores == 100 && req.cores == 100 && u.used > 0 {
        return Some(Reason::ExclusiveDeviceAllocateConflict);
    }
    if card.total_cores != 0 && u.used_cores == card.total_cores && req.cores == 0 {
        return Some(Reason::CardComputeUnitsExhausted);
    }
    None
}

/// Places container `position` (`req`) on `node` against `usage`, which is updated on success.
/// The chosen cards are appended to `picks`; on failure the reasons are returned.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place_container(
    node: &Node,
    usage: &mut [CardUsage],
    position: usize,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &mut FitScratch,
    picks: &mut Vec<Pick>,
    explain: Option<&mut Vec<CardExplanation>>,
) -> Result<(), ReasonCounts> {
    let n = node.cards.len();
    let need = req.gpus as usize;
    let mut reasons = ReasonCounts::default();
    if need > n {
        reasons.add(Reason::NodeInsufficientDevice, 1);
        if let Some(ex) = explain {
            explain_unvisited(node, usage, req, prep, scratch, ex);
        }
        return Err(reasons);
    }
    scratch.chosen.clear();
    if prep.admits_mig {
        scratch.mig_choice.clear();
        scratch.mig_choice.resize(n, None);
    }
    scratch.quota.start_container();
    let plan = &prep.plan;
    frag_deltas(node, usage, req, prep, scratch);
    if need == 1 && !plan.numa_bind && !plan.topology && explain.is_none() {
        // Fast path: the first card in visiting order that passes is the best passing card.
        let mut best: Option<OrderEntry> = None;
        let quota = scratch.quota.gate();
        for (pos, (card, &u)) in node.cards.iter().zip(usage.iter()).enumerate() {
            if let Some(r) = pre_checks(card, node.is_cordoned(pos), prep) {
                reasons.add(r, 1);
                continue;
            }
            let asked = if prep.admits_mig {
                mig_choice(card, pos, req, &scratch.mig_taken, scratch.idle, None)
            } else {
                None
            };
            let mig = match asked {
                Some(choice) => match mig_post_checks(card, pos, u, req, prep, quota, choice) {
                    Ok(c) => {
                        if let Some(slot) = scratch.mig_choice.get_mut(pos) {
                            *slot = Some(Ok(c));
                        }
                        Some(c)
                    }
                    Err(r) => {
                        reasons.add(r, 1);
                        continue;
                    }
                },
                None => {
                    if let Some(r) = post_checks(card, pos, u, req, prep, quota) {
                        reasons.add(r, 1);
                        continue;
                    }
                    None
                }
            };
            let frag = scratch.frag_delta.get(pos).copied().unwrap_or(0);
            let entry = OrderEntry {
                keys: card_keys(plan, card, u, req, prep.norm, mig.as_ref(), frag),
                index: card.index,
                pos,
            };
            if best.is_none_or(|b| cmp_entries(node, &entry, &b) == Ordering::Less) {
                best = Some(entry);
            }
        }
        let Some(best) = best else {
            return Err(reasons);
        };
        scratch.chosen.push(best.pos);
    } else {
        visit_in_order(node, usage, req, prep, scratch, &mut reasons, explain)?;
    }
    for &pos in &scratch.chosen {
        let (Some(card), Some(u)) = (node.cards.get(pos), usage.get_mut(pos)) else {
            continue;
        };
        let mig = if prep.admits_mig {
            scratch.mig_choice.get(pos).copied().flatten()
        } else {
            None
        };
        if let (Some(Ok(c)), Some(layout)) = (mig, card.mig.as_deref()) {
            // A MIG card books the instance's slices; the container gets the profile's memory
            // and cores (section 11.5).
            let (mem_mib, cores) = layout
                .profiles
                .get(c.profile)
                .map_or((0, 0), |p| (p.mem_mib, p.cores));
            scratch.quota.commit_instance(instance_amount(card, &c));
            *u = add_usage(*u, c.booked);
            picks.push(Pick {
                container: position,
                card: pos,
                mem_mib,
                cores,
                mig: Some(c),
            });
            scratch.mig_taken.push(MigTaken {
                card: pos,
                choice: c,
            });
            continue;
        }
        let mem = req.booked_mem(card);
        scratch.quota.commit(pos, req, mem);
        u.used = u.used.saturating_add(1);
        u.used_mem_mib = u.used_mem_mib.saturating_add(mem);
        u.used_cores = u.used_cores.saturating_add(req.cores);
        picks.push(Pick {
            container: position,
            card: pos,
            mem_mib: mem,
            cores: req.cores,
            mig: None,
        });
    }
    Ok(())
}

/// Under GPU policy `fgd` (a `FragAsc` key): per card, how the node's fragmentation changes
/// when one card of `req` is booked there against `usage` (section 12.3); else nothing (the
/// key reads 0). A card on which the request would book more than it has gets a value too:
/// the checks refuse it anyway.
fn frag_deltas(
    node: &Node,
    usage: &[CardUsage],
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &mut FitScratch,
) {
    scratch.frag_delta.clear();
    let (true, Some(mix)) = (prep.plan.uses_fragmentation(), prep.mix.as_ref()) else {
        return;
    };
    mix.measure(node, usage, node.host, &mut scratch.frag);
    let booking = |_: usize, card: &Card| {
        Some(CardUsage {
            used: 1,
            used_mem_mib: req.booked_mem(card),
            used_cores: req.cores,
        })
    };
    mix.card_deltas(
        node,
        usage,
        booking,
        &mut scratch.frag,
        &mut scratch.frag_delta,
    );
}

/// Per-dimension saturating sum.
pub(crate) fn add_usage(u: CardUsage, b: CardUsage) -> CardUsage {
    CardUsage {
        used: u.used.saturating_add(b.used),
        used_mem_mib: u.used_mem_mib.saturating_add(b.used_mem_mib),
        used_cores: u.used_cores.saturating_add(b.used_cores),
    }
}

/// One card's explanation for `req`: device score terms (a MIG card's with its choice's
/// booking) and, for a MIG card, every profile's outcome.
fn explain_card(
    card: &Card,
    pos: usize,
    u: CardUsage,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &FitScratch,
) -> CardExplanation {
    let mut mig = (card.mode == CardMode::Mig && prep.admits_mig).then(MigExplanation::default);
    let choice = if prep.admits_mig {
        mig_choice(
            card,
            pos,
            req,
            &scratch.mig_taken,
            scratch.idle,
            mig.as_mut(),
        )
    } else {
        None
    };
    let terms = match choice {
        Some(Ok(c)) => booking_score(card, u, c.booked, prep.weights),
        _ => device_score(card, u, req, prep.weights),
    };
    CardExplanation {
        card: pos,
        terms,
        visit_position: None,
        rejected: None,
        chosen: false,
        mig,
    }
}

fn explain_unvisited(
    node: &Node,
    usage: &[CardUsage],
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &FitScratch,
    ex: &mut Vec<CardExplanation>,
) {
    for (pos, card) in node.cards.iter().enumerate() {
        let u = usage.get(pos).copied().unwrap_or_default();
        ex.push(explain_card(card, pos, u, req, prep, scratch));
    }
}

fn visit_in_order(
    node: &Node,
    usage: &[CardUsage],
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &mut FitScratch,
    reasons: &mut ReasonCounts,
    mut explain: Option<&mut Vec<CardExplanation>>,
) -> Result<(), ReasonCounts> {
    let plan = &prep.plan;
    let need = req.gpus as usize;
    scratch.order.clear();
    for (pos, (card, &u)) in node.cards.iter().zip(usage.iter()).enumerate() {
        let mig = if prep.admits_mig {
            mig_choice(card, pos, req, &scratch.mig_taken, scratch.idle, None)
        } else {
            None
        };
        if let (Some(choice), Some(slot)) = (mig, scratch.mig_choice.get_mut(pos)) {
            *slot = Some(choice);
        }
        let mig = mig.and_then(Result::ok);
        let frag = scratch.frag_delta.get(pos).copied().unwrap_or(0);
        scratch.order.push(OrderEntry {
            keys: card_keys(plan, card, u, req, prep.norm, mig.as_ref(), frag),
            index: card.index,
            pos,
        });
    }
    scratch.order.sort_by(|a, b| cmp_entries(node, a, b));
    let first_explained = explain.as_ref().map_or(0, |e| e.len());
    if let Some(ex) = explain.as_deref_mut() {
        for entry in &scratch.order {
            let u = usage.get(entry.pos).copied().unwrap_or_default();
            if let Some(c) = node.cards.get(entry.pos) {
                ex.push(explain_card(c, entry.pos, u, req, prep, scratch));
            }
        }
    }
    let mark = |explain: &mut Option<&mut Vec<CardExplanation>>,
                visit: usize,
                rejected: Option<Reason>| {
        if let Some(e) = explain
            .as_deref_mut()
            .and_then(|ex| ex.get_mut(first_explained + visit))
        {
            e.visit_position = Some(u32::try_from(visit).unwrap_or(u32::MAX));
            if rejected.is_some() {
                e.rejected = rejected;
            }
        }
    };
    scratch.collected.clear();
    let mut collected_visits: Vec<usize> = Vec::new();
    let mut prev_numa: Option<u32> = None;
    // A container's cards are of one mode: MIG or not (section 11.2).
    let mut mig_mode: Option<bool> = None;
    let mut done = false;
    for visit in 0..scratch.order.len() {
        let Some(entry) = scratch.order.get(visit).copied() else {
            break;
        };
        let pos = entry.pos;
        let Some(card) = node.cards.get(pos) else {
            continue;
        };
        if let Some(r) = pre_checks(card, node.is_cordoned(pos), prep) {
            reasons.add(r, 1);
            mark(&mut explain, visit, Some(r));
            continue;
        }
        if plan.numa_bind && prev_numa != Some(card.numa) {
            if plan.topology && scratch.collected.len() >= need {
                match choose_collected(node, req, need, scratch, reasons) {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    // No combination of this group within the quota budget: the next group.
                    Err(r) => {
                        for &v in &collected_visits {
                            mark(&mut explain, v, Some(r));
                        }
                    }
                }
            } else if !scratch.collected.is_empty() {
                reasons.add(
                    Reason::NumaNotFit,
                    u32::try_from(scratch.collected.len()).unwrap_or(u32::MAX),
                );
                for &v in &collected_visits {
                    mark(&mut explain, v, Some(Reason::NumaNotFit));
                }
            }
            scratch.collected.clear();
            scratch.quota.drop_collected();
            collected_visits.clear();
            mig_mode = None;
            prev_numa = Some(card.numa);
        }
        let u = usage.get(pos).copied().unwrap_or_default();
        let later = if prep.admits_mig {
            let is_mig = card.mode == CardMode::Mig;
            let r = if mig_mode.is_some_and(|m| m != is_mig) {
                Some(Reason::CardTypeMismatch)
            } else if let Some(Some(choice)) =
                scratch.mig_choice.get(pos).copied().filter(|_| is_mig)
            {
                mig_post_checks(card, pos, u, req, prep, scratch.quota.gate(), choice).err()
            } else {
                post_checks(card, pos, u, req, prep, scratch.quota.gate())
            };
            if r.is_none() && mig_mode.is_none() {
                mig_mode = Some(is_mig);
            }
            r
        } else {
            post_checks(card, pos, u, req, prep, scratch.quota.gate())
        };
        if let Some(r) = later {
            reasons.add(r, 1);
            mark(&mut explain, visit, Some(r));
            continue;
        }
        mark(&mut explain, visit, None);
        scratch.collected.push(pos);
        collected_visits.push(visit);
        if !plan.topology {
            // Topology-aware candidates are checked one by one and chosen within budget
            // together (placement-semantics section 10.4).
            match scratch
                .mig_choice
                .get(pos)
                .copied()
                .flatten()
                .and_then(Result::ok)
                .filter(|_| prep.admits_mig)
            {
                Some(c) => scratch.quota.collect_instance(instance_amount(card, &c)),
                None => scratch.quota.collect(pos, card, req),
            }
        }
        if !plan.topology && scratch.collected.len() == need {
            done = true;
            break;
        }
    }
    if !done && plan.topology && scratch.collected.len() >= need {
        match choose_collected(node, req, need, scratch, reasons) {
            Ok(()) => done = true,
            Err(r) => {
                for &v in &collected_visits {
                    mark(&mut explain, v, Some(r));
                }
                scratch.collected.clear();
            }
        }
    } else if done && !plan.topology {
        scratch.chosen.extend_from_slice(&scratch.collected);
    }
    if !done {
        if !scratch.collected.is_empty() {
            reasons.set(
                Reason::AllocatedCardsInsufficientRequest,
                u32::try_from(scratch.collected.len()).unwrap_or(u32::MAX),
            );
        }
        return Err(*reasons);
    }
    if let Some(ex) = explain {
        for e in ex.iter_mut().skip(first_explained) {
            e.chosen = scratch.chosen.contains(&e.card);
        }
    }
    Ok(())
}

/// Whether a set of cards (positions) fits the workload's quota budget together.
type Within<'a> = &'a dyn Fn(&[usize]) -> bool;

/// The topology-aware choice among the collected candidates, within the quota budget, into
/// `scratch.chosen`. When no combination fits the budget, every candidate is counted with the
/// quota reason, which is returned (placement-semantics section 10.4).
fn choose_collected(
    node: &Node,
    req: &ContainerRequest,
    need: usize,
    scratch: &mut FitScratch,
    reasons: &mut ReasonCounts,
) -> Result<(), Reason> {
    let quota = &scratch.quota;
    let choices = &scratch.mig_choice;
    // Only a MIG card has an instance (a workload that does not ask for MIG collects none).
    let instance = |pos: usize| {
        let card = node.cards.get(pos).filter(|c| c.mig.is_some())?;
        let c = choices.get(pos).copied().flatten().and_then(Result::ok)?;
        Some(instance_amount(card, &c))
    };
    let within = |combo: &[usize]| quota.fits_together(node, combo, req, &instance);
    let within: Option<Within<'_>> = quota.is_active().then_some(&within);
    let chosen = choose_by_topology(node, &scratch.collected, need, within);
    if chosen.len() == need {
        scratch.chosen.extend(chosen);
        return Ok(());
    }
    let reason = quota.combination_reason(node, &scratch.collected, need, req, &instance);
    reasons.add(
        reason,
        u32::try_from(scratch.collected.len()).unwrap_or(u32::MAX),
    );
    Err(reason)
}

/// Topology-aware choice among `candidates` (card positions in visiting order).
/// One card: the lowest sum of pair scores to the other candidates. N cards: the
/// N-combination with the highest sum over its pairs. Ties: first in visiting order.
/// With `within` (a quota budget), only combinations it accepts; empty when none does.
pub(crate) fn choose_by_topology(
    node: &Node,
    candidates: &[usize],
    need: usize,
    within: Option<Within<'_>>,
) -> Vec<usize> {
    let fits = |combo: &[usize]| within.is_none_or(|f| f(combo));
    if candidates.len() <= need {
        return if fits(candidates) {
            candidates.to_vec()
        } else {
            Vec::new()
        };
    }
    if need == 1 {
        let mut best: Option<(i128, usize)> = None;
        for &c in candidates {
            let sum: i128 = candidates
                .iter()
                .filter(|&&o| o != c)
                .map(|&o| i128::from(node.pair(c, o)))
                .sum();
            if best.is_none_or(|(s, _)| sum < s) {
                best = Some((sum, c));
            }
        }
        return best.map(|(_, c)| vec![c]).unwrap_or_default();
    }
    if combinations(candidates.len(), need) <= TOPOLOGY_EXACT_LIMIT {
        let mut best: Option<(i128, Vec<usize>)> = None;
        let mut idx: Vec<usize> = (0..need).collect();
        loop {
            let combo: Vec<usize> = idx
                .iter()
                .filter_map(|&i| candidates.get(i).copied())
                .collect();
            if fits(&combo) {
                let sum = pair_sum(node, &combo);
                if best.as_ref().is_none_or(|(s, _)| sum > *s) {
                    best = Some((sum, combo));
                }
            }
            if !next_combination(&mut idx, candidates.len()) {
                break;
            }
        }
        return best.map(|(_, c)| c).unwrap_or_default();
    }
    let Some(within) = within else {
        return greedy_topology(node, candidates, need);
    };
    // Beyond the exact limit under a budget: first the candidates that keep the running total
    // within budget, in visiting order (every subset of them fits), then the greedy choice.
    let mut kept: Vec<usize> = Vec::new();
    for &c in candidates {
        kept.push(c);
        if !within(&kept) {
            kept.pop();
        }
    }
    match kept.len().cmp(&need) {
        Ordering::Less => Vec::new(),
        Ordering::Equal => kept,
        Ordering::Greater => greedy_topology(node, &kept, need),
    }
}

fn pair_sum(node: &Node, combo: &[usize]) -> i128 {
    let mut sum = 0i128;
    for (i, &a) in combo.iter().enumerate() {
        for &b in combo.iter().skip(i + 1) {
            sum += i128::from(node.pair(a, b));
        }
    }
    sum
}

fn next_combination(idx: &mut [usize], n: usize) -> bool {
    let k = idx.len();
    let mut i = k;
    while i > 0 {
        i -= 1;
        let max_here = n - k + i;
        if idx.get(i).is_some_and(|&v| v < max_here) {
            let start = idx.get(i).copied().unwrap_or(0) + 1;
            for (offset, slot) in idx.iter_mut().skip(i).enumerate() {
                *slot = start + offset;
            }
            return true;
        }
    }
    false
}

/// C(n, k), saturating above the exact limit.
fn combinations(n: usize, k: usize) -> u128 {
    let k = k.min(n - k.min(n));
    let mut c: u128 = 1;
    for i in 0..k {
        c = c * (n - i) as u128 / (i as u128 + 1);
        if c > TOPOLOGY_EXACT_LIMIT {
            return c;
        }
    }
    c
}

fn greedy_topology(node: &Node, candidates: &[usize], need: usize) -> Vec<usize> {
    let mut best_pair: Option<(i128, usize, usize)> = None;
    for (i, &a) in candidates.iter().enumerate() {
        for &b in candidates.iter().skip(i + 1) {
            let s = i128::from(node.pair(a, b));
            if best_pair.is_none_or(|(bs, _, _)| s > bs) {
                best_pair = Some((s, a, b));
            }
        }
    }
    let Some((_, a, b)) = best_pair else {
        return candidates.iter().take(need).copied().collect();
    };
    let mut chosen = vec![a, b];
    while chosen.len() < need {
        let mut best: Option<(i128, usize)> = None;
        for &c in candidates {
            if chosen.contains(&c) {
                continue;
            }
            let gain: i128 = chosen.iter().map(|&x| i128::from(node.pair(x, c))).sum();
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, c));
            }
        }
        match best {
            Some((_, c)) => chosen.push(c),
            None => break,
        }
    }
    // Report in visiting order.
    candidates
        .iter()
        .copied()
        .filter(|c| chosen.contains(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_enumerate_in_order() {
        let mut idx = vec![0, 1];
        let mut all = vec![idx.clone()];
        while next_combination(&mut idx, 4) {
            all.push(idx.clone());
        }
        assert_eq!(
            all,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        assert_eq!(combinations(16, 8), 12870);
        assert_eq!(combinations(4, 4), 1);
        assert!(combinations(64, 32) > TOPOLOGY_EXACT_LIMIT);
    }
}

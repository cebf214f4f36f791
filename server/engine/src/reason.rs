//! Why a card or node does not fit: typed reasons, counts and HAMi's reason text.

use std::fmt;

/// A reason a card (or the whole node) cannot take a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The container wants more cards than the node has.
    NodeInsufficientDevice,
    /// Check 1: card unhealthy.
    CardNotHealth,
    /// Check 2: card cordoned.
    CardCordoned,
    /// Check 3: type filter or vgpu-mode refuses the card.
    CardTypeMismatch,
    /// Check 4: collected in a NUMA group that could not supply the whole container.
    NumaNotFit,
    /// Check 5: id filter refuses the card.
    CardUuidMismatch,
    /// Check 6: every slot in use.
    CardTimeSlicingExhausted,
    /// Checks 7 and 10: mutex wants an idle card, or an exclusive request meets a used card.
    ExclusiveDeviceAllocateConflict,
    /// Check 8: not enough free memory.
    CardInsufficientMemory,
    /// Check 9: not enough free cores.
    CardInsufficientCore,
    /// Check 11: all cores booked and the container asks for none.
    CardComputeUnitsExhausted,
    /// The container collected fewer cards than it asked for.
    AllocatedCardsInsufficientRequest,
    /// Check 0: the card has no capacity (0 slots, 0 MiB or 0 cores): it can host nothing.
    CardZeroCapacity,
    /// The node itself is invalid ([`crate::Node::new`] refused it: duplicate or blank card
    /// ids, pair scores or cordons naming unknown cards, capacities out of range). The engine's
    /// decisions never see such a node; a caller that validates nodes one by one and decides
    /// on the valid ones reports the others with this reason ([`NodeFailure::invalid_node`]).
    InvalidNode,
    /// Check 7q: the card's booking would take the workload's GPU memory past its quota budget
    /// (`docs/placement-semantics.md` section 10). HAMi's text: `ResourceQuotaNotFit`.
    QuotaMemoryExceeded,
    /// Check 7q: the card's booking would take the workload's GPU cores past its quota budget.
    /// HAMi's text: `ResourceQuotaNotFit`.
    QuotaCoresExceeded,
    /// A MIG card: no profile covers the request's memory (or memory slices) and cores, or the
    /// card has no MIG layout (`docs/placement-semantics.md` section 11.4).
    MigNoProfileLargeEnough,
    /// A MIG card: profiles cover the request, but none of them is allowed on the node.
    MigProfileNotAllowed,
    /// A MIG card: no covering allowed profile has a free instance or a free placement
    /// (HAMi's `CardMigTopologyInfeasible`).
    MigNoFreePlacement,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 19] = [
        Reason::NodeInsufficientDevice,
        Reason::CardNotHealth,
        Reason::CardCordoned,
        Reason::CardTypeMismatch,
        Reason::NumaNotFit,
        Reason::CardUuidMismatch,
        Reason::CardTimeSlicingExhausted,
        Reason::ExclusiveDeviceAllocateConflict,
        Reason::CardInsufficientMemory,
        Reason::CardInsufficientCore,
        Reason::CardComputeUnitsExhausted,
        Reason::AllocatedCardsInsufficientRequest,
        Reason::CardZeroCapacity,
        Reason::InvalidNode,
        Reason::QuotaMemoryExceeded,
        Reason::QuotaCoresExceeded,
        Reason::MigNoProfileLargeEnough,
        Reason::MigProfileNotAllowed,
        Reason::MigNoFreePlacement,
    ];

    /// The reason's name: HAMi's, except `CardZeroCapacity` and `InvalidNode` (HAMi has no such
    /// checks), the two quota reasons, which HAMi writes as one, `ResourceQuotaNotFit`
    /// ([`Reason::hami_name`]), and the three `Mig*` (HAMi reports every MIG failure as
    /// `CardMigTopologyInfeasible`; we keep which of the three it is, also in the text).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NodeInsufficientDevice => "NodeInsufficientDevice",
            Reason::CardNotHealth => "CardNotHealth",
            Reason::CardCordoned => "CardCordoned",
            Reason::CardTypeMismatch => "CardTypeMismatch",
            Reason::NumaNotFit => "NumaNotFit",
            Reason::CardUuidMismatch => "CardUuidMismatch",
            Reason::CardTimeSlicingExhausted => "CardTimeSlicingExhausted",
            Reason::ExclusiveDeviceAllocateConflict => "ExclusiveDeviceAllocateConflict",
            Reason::CardInsufficientMemory => "CardInsufficientMemory",
            Reason::CardInsufficientCore => "CardInsufficientCore",
            Reason::CardComputeUnitsExhausted => "CardComputeUnitsExhausted",
            Reason::AllocatedCardsInsufficientRequest => "AllocatedCardsInsufficientRequest",
            Reason::CardZeroCapacity => "CardZeroCapacity",
            Reason::InvalidNode => "InvalidNode",
            Reason::QuotaMemoryExceeded => "QuotaMemoryExceeded",
            Reason::QuotaCoresExceeded => "QuotaCoresExceeded",
            Reason::MigNoProfileLargeEnough => "MigNoProfileLargeEnough",
            Reason::MigProfileNotAllowed => "MigProfileNotAllowed",
            Reason::MigNoFreePlacement => "MigNoFreePlacement",
        }
    }

    /// The name in HAMi's text: [`Reason::as_str`], but `ResourceQuotaNotFit` for both quota
    /// reasons.
    pub fn hami_name(self) -> &'static str {
        match self {
            Reason::QuotaMemoryExceeded | Reason::QuotaCoresExceeded => "ResourceQuotaNotFit",
            other => other.as_str(),
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many cards each reason applied to (fixed size: no allocation on the hot path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct ReasonCounts {
    counts: [u32; Reason::ALL.len()],
}

impl ReasonCounts {
    /// Adds `n` to `reason`.
    pub fn add(&mut self, reason: Reason, n: u32) {
        if let Some(c) = self.counts.get_mut(reason.slot()) {
            *c = c.saturating_add(n);
        }
    }

    /// Sets `reason` to `n`.
    pub fn set(&mut self, reason: Reason, n: u32) {
        if let Some(c) = self.counts.get_mut(reason.slot()) {
            *c = n;
        }
    }

    /// The count of `reason`.
    pub fn get(&self, reason: Reason) -> u32 {
        self.counts.get(reason.slot()).copied().unwrap_or(0)
    }

    /// Reasons with a non-zero count, in HAMi text order (sorted by their text item).
    pub fn entries(&self, cards_on_node: u32) -> Vec<(Reason, u32)> {
        let mut v: Vec<(Reason, u32, String)> = Reason::ALL
            .into_iter()
            .filter_map(|r| {
                let n = self.get(r);
                (n > 0).then(|| (r, n, item(r, n, cards_on_node)))
            })
            .collect();
        v.sort_by(|a, b| a.2.cmp(&b.2));
        v.into_iter().map(|(r, n, _)| (r, n)).collect()
    }

    /// HAMi's text: `"<count>/<cards> <Reason>"` items sorted as strings, joined with `", "`
    /// (`NodeInsufficientDevice` and `InvalidNode` stand alone, as HAMi writes the former; the
    /// two quota reasons are one item, `ResourceQuotaNotFit`, with their counts added).
    pub fn hami_text(&self, cards_on_node: u32) -> String {
        let quota = self
            .get(Reason::QuotaMemoryExceeded)
            .saturating_add(self.get(Reason::QuotaCoresExceeded));
        let mut items: Vec<String> = Reason::ALL
            .into_iter()
            .filter(|r| *r != Reason::QuotaCoresExceeded)
            .map(|r| match r {
                Reason::QuotaMemoryExceeded => (r, quota),
                _ => (r, self.get(r)),
            })
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| item(r, n, cards_on_node))
            .collect();
        items.sort();
        items.join(", ")
    }
}

fn item(reason: Reason, count: u32, cards: u32) -> String {
    match reason {
        Reason::NodeInsufficientDevice | Reason::InvalidNode => reason.as_str().to_owned(),
        _ => format!("{count}/{cards} {}", reason.hami_name()),
    }
}

/// Why a node cannot host a workload: the first container that could not be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFailure {
    /// Position of the container in pod order (init containers first).
    pub container_position: usize,
    /// Reasons with card counts.
    pub reasons: ReasonCounts,
    /// Number of cards on the node (the denominator of HAMi's text).
    pub cards_on_node: u32,
    /// The node fails even with every card idle: no change of usage can help.
    pub unresolvable: bool,
}

impl NodeFailure {
    /// The failure of a node that is invalid itself ([`Reason::InvalidNode`], counted once):
    /// unresolvable, reported for no container (position 0), `cards_on_node` as sent.
    pub fn invalid_node(cards_on_node: u32) -> NodeFailure {
        let mut reasons = ReasonCounts::default();
        reasons.add(Reason::InvalidNode, 1);
        NodeFailure {
            container_position: 0,
            reasons,
            cards_on_node,
            unresolvable: true,
        }
    }

    /// HAMi's reason text.
    pub fn hami_text(&self) -> String {
        self.reasons.hami_text(self.cards_on_node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hami_text_sorts_items_as_strings() {
        let mut r = ReasonCounts::default();
        r.add(Reason::CardInsufficientMemory, 3);
        r.add(Reason::CardNotHealth, 1);
        r.add(Reason::AllocatedCardsInsufficientRequest, 1);
        assert_eq!(
            r.hami_text(4),
            "1/4 AllocatedCardsInsufficientRequest, 1/4 CardNotHealth, 3/4 CardInsufficientMemory"
        );
        let mut n = ReasonCounts::default();
        n.add(Reason::NodeInsufficientDevice, 1);
        assert_eq!(n.hami_text(2), "NodeInsufficientDevice");
        // "10/12 ..." sorts before "2/12 ..." as strings.
        let mut s = ReasonCounts::default();
        s.add(Reason::CardTimeSlicingExhausted, 10);
        s.add(Reason::CardCordoned, 2);
        assert_eq!(
            s.hami_text(12),
            "10/12 CardTimeSlicingExhausted, 2/12 CardCordoned"
        );
        assert_eq!(
            s.entries(12),
            vec![
                (Reason::CardTimeSlicingExhausted, 10),
                (Reason::CardCordoned, 2)
            ]
        );
    }

    #[test]
    fn the_two_quota_reasons_are_one_hami_item() {
        let mut r = ReasonCounts::default();
        r.add(Reason::QuotaMemoryExceeded, 2);
        r.add(Reason::QuotaCoresExceeded, 1);
        r.add(Reason::AllocatedCardsInsufficientRequest, 1);
        assert_eq!(
            r.hami_text(4),
            "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit"
        );
        let mut c = ReasonCounts::default();
        c.add(Reason::QuotaCoresExceeded, 2);
        assert_eq!(c.hami_text(2), "2/2 ResourceQuotaNotFit");
        assert_eq!(c.entries(2), vec![(Reason::QuotaCoresExceeded, 2)]);
        assert_eq!(Reason::QuotaCoresExceeded.as_str(), "QuotaCoresExceeded");
    }
}

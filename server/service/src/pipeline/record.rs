//! What a decision records about itself for its span, its metrics and its one log line.

use gpusched_engine::Reason;

/// Facts about a decision, recorded by the handler for the span, metrics and log.
#[derive(Debug, Default)]
pub struct Record {
    /// `namespace/name` of the workload(s).
    pub workload: String,
    /// Candidate nodes.
    pub nodes: usize,
    /// Candidate cards.
    pub cards: usize,
    /// Chosen node (Allocate).
    pub chosen: Option<String>,
    /// Decision result: `placed`, `unschedulable`, `feasible`, `no_gpu`, `valid`, `invalid`...
    pub result: &'static str,
    /// Node policy used.
    pub node_policy: &'static str,
    /// GPU policy used.
    pub gpu_policy: String,
    /// Nodes rejected per reason (summed over the request).
    pub rejections: Vec<(Reason, u64)>,
    /// Whether this call is a placement decision (logged at INFO).
    pub decision: bool,
    /// Preempt: the victims on the chosen node, when it chose one.
    pub victims: Option<usize>,
}

impl Record {
    /// Sums reasons over failed nodes.
    pub fn add_rejections<'a>(
        &mut self,
        failures: impl Iterator<Item = &'a gpusched_engine::NodeFailure>,
    ) {
        let mut sums = [0u64; Reason::ALL.len()];
        for f in failures {
            for (i, r) in Reason::ALL.iter().enumerate() {
                if f.reasons.get(*r) > 0
                    && let Some(s) = sums.get_mut(i)
                {
                    *s += 1;
                }
            }
        }
        self.rejections = Reason::ALL
            .iter()
            .copied()
            .zip(sums)
            .filter(|(_, n)| *n > 0)
            .collect();
    }

    /// `reason=count,...` over the rejections.
    pub(crate) fn summary(&self) -> String {
        self.rejections
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

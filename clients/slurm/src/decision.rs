//! The decision recorded on a Slurm job, in its `Comment`:
//!
//! ```text
//! gpusched/v1 node=node1 gpus=0,2 devices=GPU-a,NVIDIA,3000,20:GPU-c,NVIDIA,3000,20:;
//! ```
//!
//! `node` is the node the job is pinned to (`--nodelist`), `gpus` the NVML indexes of the
//! chosen cards in the order chosen (what `CUDA_VISIBLE_DEVICES` gets), and `devices` the same
//! cards in HAMi's `hami.io/vgpu-devices-allocated` encoding (uuid, vendor, MiB, cores per card),
//! so Slurm jobs and Kubernetes pods carry their bookings in one format. Usage is rebuilt from
//! these comments (`squeue --json`) on every submission: nothing else holds state.

use gpusched_client::v1;
use gpusched_hami::{Booking, decode_pod_devices, encode_pod_devices};

/// The first word of every recorded decision.
pub const MARKER: &str = "gpusched/v1";

/// The second word of a preempted job's comment (`gpusched/v1 preempted by=<job>`): it holds
/// nothing (its cards went to job `<job>`) and waits, held, to be placed again.
pub const PREEMPTED: &str = "preempted";

/// The comment of a job requeued by a preemption for job `by`, naming what it held.
pub fn preempted_comment(by: u64, was: &Decision) -> String {
    let gpus: Vec<String> = was.cards.iter().map(|c| c.index.to_string()).collect();
    format!(
        "{MARKER} {PREEMPTED} by={by} was-node={} was-gpus={}",
        was.node,
        gpus.join(",")
    )
}

/// One card booked by a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookedCard {
    /// NVML index on the node.
    pub index: u32,
    /// Card UUID.
    pub uuid: String,
    /// Memory booked, MiB.
    pub mem_mib: u64,
    /// Cores booked, percent.
    pub cores: u32,
}

/// The node and cards gpusched chose for one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The node.
    pub node: String,
    /// The cards, in the order chosen.
    pub cards: Vec<BookedCard>,
}

/// A comment that starts with [`MARKER`] but cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unreadable gpusched decision {comment:?}: {why}")]
pub struct DecisionError {
    /// The comment.
    pub comment: String,
    /// What is wrong.
    pub why: String,
}

impl Decision {
    /// The decision of a placed allocation result (one container).
    pub fn from_result(r: &v1::AllocationResult) -> Option<Decision> {
        if !r.placed {
            return None;
        }
        let cards = r
            .containers
            .iter()
            .flat_map(|c| c.cards.iter())
            .map(|c| BookedCard {
                index: c.card_index,
                uuid: c.card_id.clone(),
                mem_mib: c.mem_mib,
                cores: c.cores_percent,
            })
            .collect();
        Some(Decision {
            node: r.node_name.clone(),
            cards,
        })
    }

    /// The card UUIDs in order.
    pub fn uuids(&self) -> Vec<String> {
        self.cards.iter().map(|c| c.uuid.clone()).collect()
    }

    /// The HAMi bookings (one container).
    pub fn bookings(&self) -> Vec<Vec<Booking>> {
        vec![
            self.cards
                .iter()
                .map(|c| Booking {
                    uuid: c.uuid.clone(),
                    device_type: "NVIDIA".to_owned(),
                    mem_mib: c.mem_mib,
                    cores: c.cores,
                })
                .collect(),
        ]
    }

    /// The comment text.
    pub fn encode(&self) -> String {
        let gpus: Vec<String> = self.cards.iter().map(|c| c.index.to_string()).collect();
        format!(
            "{MARKER} node={} gpus={} devices={}",
            self.node,
            gpus.join(","),
            encode_pod_devices(&self.bookings())
        )
    }

    /// Reads a job comment: `Ok(None)` when it is not a gpusched decision at all.
    pub fn parse(comment: &str) -> Result<Option<Decision>, DecisionError> {
        let mut words = comment.split_whitespace();
        if words.next() != Some(MARKER) {
            return Ok(None);
        }
        if comment.split_whitespace().nth(1) == Some(PREEMPTED) {
            return Ok(None);
        }
        let bad = |why: String| DecisionError {
            comment: comment.to_owned(),
            why,
        };
        let (mut node, mut gpus, mut devices) = (None, None, None);
        for w in words {
            match w.split_once('=') {
                Some(("node", v)) if !v.is_empty() => node = Some(v.to_owned()),
                Some(("gpus", v)) => gpus = Some(v.to_owned()),
                Some(("devices", v)) => devices = Some(v.to_owned()),
                _ => return Err(bad(format!("unexpected word {w:?}"))),
            }
        }
        let node = node.ok_or_else(|| bad("no node=".to_owned()))?;
        let gpus = gpus.ok_or_else(|| bad("no gpus=".to_owned()))?;
        let devices = devices.ok_or_else(|| bad("no devices=".to_owned()))?;
        let indexes = gpus
            .split(',')
            .map(|i| {
                i.parse::<u32>()
                    .map_err(|_| bad(format!("gpus: {i:?} is not an index")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let containers = decode_pod_devices(&devices).map_err(|e| bad(e.to_string()))?;
        let [bookings] = containers.as_slice() else {
            return Err(bad(format!(
                "devices: {} containers, expected 1",
                containers.len()
            )));
        };
        if bookings.len() != indexes.len() || bookings.is_empty() {
            return Err(bad(format!(
                "{} indexes for {} devices",
                indexes.len(),
                bookings.len()
            )));
        }
        let cards = indexes
            .into_iter()
            .zip(bookings)
            .map(|(index, b)| BookedCard {
                index,
                uuid: b.uuid.clone(),
                mem_mib: b.mem_mib,
                cores: b.cores,
            })
            .collect();
        Ok(Some(Decision { node, cards }))
    }

    /// The Slurm gres the job holds so that Slurm's own accounting matches the decision:
    /// one `gpuslot` per card, the booked memory (MiB) and cores (percent) summed.
    pub fn gres(&self) -> String {
        let mem: u64 = self.cards.iter().map(|c| c.mem_mib).sum();
        let cores: u64 = self.cards.iter().map(|c| u64::from(c.cores)).sum();
        let mut g = format!("gpuslot:{}", self.cards.len());
        if mem > 0 {
            g.push_str(&format!(",gpumem:{mem}"));
        }
        if cores > 0 {
            g.push_str(&format!(",gpucore:{cores}"));
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision() -> Decision {
        Decision {
            node: "node1".into(),
            cards: vec![
                BookedCard {
                    index: 2,
                    uuid: "GPU-c".into(),
                    mem_mib: 3000,
                    cores: 20,
                },
                BookedCard {
                    index: 0,
                    uuid: "GPU-a".into(),
                    mem_mib: 3000,
                    cores: 20,
                },
            ],
        }
    }

    #[test]
    fn round_trip_and_exact_text() {
        let d = decision();
        let text = d.encode();
        assert_eq!(
            text,
            "gpusched/v1 node=node1 gpus=2,0 devices=GPU-c,NVIDIA,3000,20:GPU-a,NVIDIA,3000,20:;"
        );
        assert_eq!(Decision::parse(&text).unwrap(), Some(d));
        assert_eq!(decision().gres(), "gpuslot:2,gpumem:6000,gpucore:40");
    }

    #[test]
    fn other_comments_are_not_decisions_and_broken_ones_are_errors() {
        assert_eq!(Decision::parse("my experiment").unwrap(), None);
        assert_eq!(Decision::parse("").unwrap(), None);
        assert!(Decision::parse("gpusched/v1 node=n1 gpus=0").is_err());
        assert!(
            Decision::parse("gpusched/v1 node=n1 gpus=0,1 devices=GPU-a,NVIDIA,1,0:;").is_err()
        );
        assert!(Decision::parse("gpusched/v1 node=n1 gpus=x devices=GPU-a,NVIDIA,1,0:;").is_err());
        assert!(
            Decision::parse("gpusched/v1 node=n1 gpus=0 devices=GPU-a,NVIDIA,1,0:; x").is_err()
        );
    }

    #[test]
    fn a_preempted_job_holds_nothing() {
        let c = preempted_comment(42, &decision());
        assert_eq!(c, "gpusched/v1 preempted by=42 was-node=node1 was-gpus=2,0");
        assert_eq!(Decision::parse(&c).unwrap(), None);
    }

    #[test]
    fn gres_leaves_out_zero_terms() {
        let mut d = decision();
        for c in &mut d.cards {
            c.cores = 0;
        }
        assert_eq!(d.gres(), "gpuslot:2,gpumem:6000");
    }
}

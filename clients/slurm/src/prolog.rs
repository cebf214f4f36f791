//! What the TaskProlog prints: `export NAME=value` lines that slurmd puts into every task's
//! environment, from the job's recorded decision.
//!
//! - `CUDA_VISIBLE_DEVICES`: the chosen cards' NVML indexes, in the order chosen;
//! - `CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m` for the i-th visible card and
//!   `CUDA_DEVICE_SM_LIMIT=<percent>` (when cores are booked), as HAMi-core reads them;
//! - `GPUSCHED_NODE`, `GPUSCHED_GPU_UUIDS`: the decision itself.
//!
//! A job without a decision gets `CUDA_VISIBLE_DEVICES=` (no card): it booked none. A decision
//! for another node (should never happen: the job is pinned with `--nodelist`) also gives no
//! card, and says so.

use crate::decision::Decision;

/// The TaskProlog's output for a job on `node` with `decision`.
pub fn task_env(node: &str, decision: Option<&Decision>) -> String {
    let Some(d) = decision else {
        return "export CUDA_VISIBLE_DEVICES=\n".to_owned();
    };
    if d.node != node {
        return format!(
            "print gpusched: this job was placed on {} but runs on {node}; no GPU given\n\
             export CUDA_VISIBLE_DEVICES=\n",
            d.node
        );
    }
    let indexes: Vec<String> = d.cards.iter().map(|c| c.index.to_string()).collect();
    let mut out = format!("export CUDA_VISIBLE_DEVICES={}\n", indexes.join(","));
    for (i, c) in d.cards.iter().enumerate() {
        if c.mem_mib > 0 {
            out.push_str(&format!(
                "export CUDA_DEVICE_MEMORY_LIMIT_{i}={}m\n",
                c.mem_mib
            ));
        }
    }
    if let Some(cores) = d.cards.iter().map(|c| c.cores).max().filter(|c| *c > 0) {
        out.push_str(&format!("export CUDA_DEVICE_SM_LIMIT={cores}\n"));
    }
    out.push_str(&format!("export GPUSCHED_NODE={}\n", d.node));
    out.push_str(&format!(
        "export GPUSCHED_GPU_UUIDS={}\n",
        d.uuids().join(",")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::BookedCard;

    fn d() -> Decision {
        Decision {
            node: "node1".into(),
            cards: vec![
                BookedCard {
                    index: 3,
                    uuid: "GPU-d".into(),
                    mem_mib: 16384,
                    cores: 20,
                },
                BookedCard {
                    index: 1,
                    uuid: "GPU-b".into(),
                    mem_mib: 16384,
                    cores: 20,
                },
            ],
        }
    }

    #[test]
    fn exports_the_chosen_cards_and_limits() {
        assert_eq!(
            task_env("node1", Some(&d())),
            "export CUDA_VISIBLE_DEVICES=3,1\n\
             export CUDA_DEVICE_MEMORY_LIMIT_0=16384m\n\
             export CUDA_DEVICE_MEMORY_LIMIT_1=16384m\n\
             export CUDA_DEVICE_SM_LIMIT=20\n\
             export GPUSCHED_NODE=node1\n\
             export GPUSCHED_GPU_UUIDS=GPU-d,GPU-b\n"
        );
    }

    #[test]
    fn no_decision_or_wrong_node_gives_no_card() {
        assert_eq!(task_env("node1", None), "export CUDA_VISIBLE_DEVICES=\n");
        let out = task_env("node2", Some(&d()));
        assert!(out.ends_with("export CUDA_VISIBLE_DEVICES=\n"), "{out}");
        assert!(out.starts_with("print "), "{out}");
    }
}

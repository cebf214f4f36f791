//! The simulated cluster: nodes with the usage booked from the service's answers.

use std::collections::{BTreeSet, HashMap};

use gpusched_api::v1;
use gpusched_client::measure;
use prost::Message as _;

use crate::trace::Need;

pub use gpusched_client::measure::{CardStates, card_may_fit};

/// What one placement booked: released exactly on departure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Booking {
    /// Node index.
    pub node: usize,
    /// (card index within the node, MiB, cores percent), one entry per card assignment on a
    /// card without a MIG layout.
    pub cards: Vec<(usize, u64, u32)>,
    /// Host CPU (millicores) and memory (MiB) booked on the node.
    pub host: (u64, u64),
    /// The MIG instances held, one per card assignment on a MIG card ([`crate::mig`]).
    pub mig: Vec<crate::mig::MigHeld>,
}

/// Nodes and their usage.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The nodes with current usage (as sent to the service).
    pub nodes: Vec<v1::Node>,
    index: HashMap<String, usize>,
    total_cards: usize,
    /// Node index -> position in name order.
    rank: Vec<usize>,
    /// Position in name order -> node index.
    by_rank: Vec<usize>,
    /// Node index -> its content without the name (usage included).
    key: Vec<Vec<u8>>,
    /// Content -> the nodes (name ranks) with exactly that content.
    classes: HashMap<Vec<u8>, BTreeSet<usize>>,
    /// Per node: host CPU (millicores) and memory (MiB) capacity, when known.
    host_cap: Vec<Option<(u64, u64)>>,
    /// Per node: host CPU and memory booked.
    host_used: Vec<(u64, u64)>,
    /// Whether the nodes sent carry their free host resources (`v1::Node::host`).
    host_in_nodes: bool,
}

/// A node's content without its name: nodes with equal keys are interchangeable but for the
/// name, which only breaks ties (smaller name first, as the API specifies).
fn node_key(n: &v1::Node) -> Vec<u8> {
    let mut k = n.clone();
    k.name.clear();
    k.encode_to_vec()
}

impl Cluster {
    /// A cluster of these nodes (names must be unique), without host resources.
    pub fn new(nodes: Vec<v1::Node>) -> anyhow::Result<Cluster> {
        let n = nodes.len();
        Cluster::with_hosts(nodes, vec![None; n], false)
    }

    /// A cluster whose nodes have host CPU and memory (`hosts`, parallel to `nodes`); with
    /// `host_in_nodes` the nodes sent to the service carry their free host resources.
    pub fn with_hosts(
        mut nodes: Vec<v1::Node>,
        hosts: Vec<Option<(u64, u64)>>,
        host_in_nodes: bool,
    ) -> anyhow::Result<Cluster> {
        anyhow::ensure!(
            hosts.len() == nodes.len(),
            "internal: {} host entries for {} nodes",
            hosts.len(),
            nodes.len()
        );
        for (n, h) in nodes.iter_mut().zip(&hosts) {
            n.host = match (host_in_nodes, h) {
                (true, Some((cpu, mem))) => Some(v1::HostResources {
                    free_cpu_milli: i64::try_from(*cpu).unwrap_or(i64::MAX),
                    free_mem_mib: i64::try_from(*mem).unwrap_or(i64::MAX),
                }),
                _ => None,
            };
        }
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            if index.insert(n.name.clone(), i).is_some() {
                anyhow::bail!("duplicate node `{}`", n.name);
            }
        }
        let total_cards = nodes.iter().map(|n| n.cards.len()).sum();
        let mut by_rank: Vec<usize> = (0..nodes.len()).collect();
        by_rank.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
        let mut rank = vec![0; nodes.len()];
        for (r, &i) in by_rank.iter().enumerate() {
            rank[i] = r;
        }
        let key: Vec<Vec<u8>> = nodes.iter().map(node_key).collect();
        let mut classes: HashMap<Vec<u8>, BTreeSet<usize>> = HashMap::new();
        for (i, k) in key.iter().enumerate() {
            classes.entry(k.clone()).or_default().insert(rank[i]);
        }
        let host_used = vec![(0, 0); nodes.len()];
        Ok(Cluster {
            nodes,
            index,
            total_cards,
            rank,
            by_rank,
            key,
            classes,
            host_cap: hosts,
            host_used,
            host_in_nodes,
        })
    }

    /// Whether node `i` has `cpu` millicores and `mem` MiB of host resources free (a node
    /// without host resources always has).
    pub fn host_fits(&self, i: usize, (cpu, mem): (u64, u64)) -> bool {
        match (
            self.host_cap.get(i).copied().flatten(),
            self.host_used.get(i),
        ) {
            (Some((cc, cm)), Some(&(uc, um))) => {
                cc.saturating_sub(uc) >= cpu && cm.saturating_sub(um) >= mem
            }
            _ => true,
        }
    }

    /// Free host CPU and memory of node `i`, when known.
    pub fn host_free(&self, i: usize) -> Option<(u64, u64)> {
        let (cc, cm) = self.host_cap.get(i).copied().flatten()?;
        let (uc, um) = self.host_used.get(i).copied().unwrap_or((0, 0));
        Some((cc.saturating_sub(uc), cm.saturating_sub(um)))
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Books (`sign` +1) or frees (-1) host resources on node `i`; keeps the node's `host`
    /// field in step when the nodes carry it.
    fn host_book(&mut self, i: usize, (cpu, mem): (u64, u64), add: bool) -> anyhow::Result<()> {
        let Some(u) = self.host_used.get_mut(i) else {
            anyhow::bail!("internal: no node {i}");
        };
        *u = if add {
            (u.0.saturating_add(cpu), u.1.saturating_add(mem))
        } else {
            match (u.0.checked_sub(cpu), u.1.checked_sub(mem)) {
                (Some(c), Some(m)) => (c, m),
                _ => anyhow::bail!("host release below zero on node {i}"),
            }
        };
        if self.host_in_nodes
            && let (Some((cc, cm)), Some(n)) = (self.host_cap[i], self.nodes.get_mut(i))
        {
            let free = |cap: u64, used: u64| {
                i64::try_from(cap).unwrap_or(i64::MAX) - i64::try_from(used).unwrap_or(i64::MAX)
            };
            n.host = Some(v1::HostResources {
                free_cpu_milli: free(cc, self.host_used[i].0),
                free_mem_mib: free(cm, self.host_used[i].1),
            });
        }
        Ok(())
    }

    /// A pod without GPU (host resources only): the node with enough free CPU and memory whose
    /// free GPU compute is smallest (it strands the least GPU), then the most free CPU, then
    /// the smaller name; `None` when no node has room. The same rule under every set-up.
    pub fn place_cpu_only(&mut self, host: (u64, u64)) -> anyhow::Result<Option<Booking>> {
        let mut best: Option<(u64, std::cmp::Reverse<u64>, usize, usize)> = None;
        for i in 0..self.nodes.len() {
            if !self.host_fits(i, host) {
                continue;
            }
            let free_gpu: u64 = self.nodes[i]
                .cards
                .iter()
                .map(|c| {
                    let used = c.usage.unwrap_or_default().used_cores;
                    u64::from(c.total_cores.saturating_sub(used))
                })
                .sum();
            let free_cpu = self.host_free(i).map_or(u64::MAX, |h| h.0);
            let key = (free_gpu, std::cmp::Reverse(free_cpu), self.rank[i], i);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        let Some((_, _, _, i)) = best else {
            return Ok(None);
        };
        self.host_book(i, host, true)?;
        self.rekey(i);
        Ok(Some(Booking {
            node: i,
            host,
            ..Booking::default()
        }))
    }

    /// Re-files node `i` after its usage changed.
    fn rekey(&mut self, i: usize) {
        let new = node_key(&self.nodes[i]);
        let old = std::mem::replace(&mut self.key[i], new.clone());
        if old == new {
            return;
        }
        if let Some(set) = self.classes.get_mut(&old) {
            set.remove(&self.rank[i]);
            if set.is_empty() {
                self.classes.remove(&old);
            }
        }
        self.classes.entry(new).or_default().insert(self.rank[i]);
    }

    /// Groups of identical nodes (same cards and usage), for tests and statistics.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Cards in the cluster.
    pub fn total_cards(&self) -> usize {
        self.total_cards
    }

    /// Books a placement the service returned; None when nothing was placed.
    pub fn book(&mut self, r: &v1::AllocationResult) -> anyhow::Result<Option<Booking>> {
        self.book_with_host(r, (0, 0))
    }

    /// [`Cluster::book`] with the workload's host CPU and memory.
    pub fn book_with_host(
        &mut self,
        r: &v1::AllocationResult,
        host: (u64, u64),
    ) -> anyhow::Result<Option<Booking>> {
        if !r.placed {
            return Ok(None);
        }
        let node = *self
            .index
            .get(&r.node_name)
            .ok_or_else(|| anyhow::anyhow!("the service chose unknown node `{}`", r.node_name))?;
        let n = &mut self.nodes[node];
        let mut b = Booking {
            node,
            host,
            ..Booking::default()
        };
        for ca in r.containers.iter().flat_map(|c| &c.cards) {
            let ci = n
                .cards
                .iter()
                .position(|c| c.id == ca.card_id)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the service chose unknown card `{}` on `{}`",
                        ca.card_id,
                        r.node_name
                    )
                })?;
            if let Some(m) = &ca.mig {
                let who = format!("sim/{}", r.node_name);
                b.mig.push(crate::mig::book(&mut n.cards[ci], ci, m, &who)?);
                continue;
            }
            let u = n.cards[ci].usage.get_or_insert_with(v1::CardUsage::default);
            u.used_slots += 1;
            u.used_mem_mib += ca.mem_mib;
            u.used_cores += ca.cores_percent;
            b.cards.push((ci, ca.mem_mib, ca.cores_percent));
        }
        self.host_book(node, host, true)?;
        self.rekey(node);
        Ok(Some(b))
    }

    /// Releases exactly what `b` booked.
    pub fn release(&mut self, b: &Booking) -> anyhow::Result<()> {
        let n = &mut self.nodes[b.node];
        for &(ci, mem, cores) in &b.cards {
            let u = n.cards[ci].usage.get_or_insert_with(v1::CardUsage::default);
            let (Some(s), Some(m), Some(c)) = (
                u.used_slots.checked_sub(1),
                u.used_mem_mib.checked_sub(mem),
                u.used_cores.checked_sub(cores),
            ) else {
                anyhow::bail!("release below zero on `{}` card {ci}", n.name);
            };
            *u = v1::CardUsage {
                used_slots: s,
                used_mem_mib: m,
                used_cores: c,
            };
            if *u == v1::CardUsage::default() {
                n.cards[ci].usage = None;
            }
        }
        for h in &b.mig {
            crate::mig::release(&mut n.cards[h.card], h)?;
        }
        self.host_book(b.node, b.host, false)?;
        self.rekey(b.node);
        Ok(())
    }

    /// Whether node `i` may take every container of `needs` (each on its own, now).
    fn node_may_fit(&self, i: usize, needs: &[Need]) -> bool {
        let n = &self.nodes[i];
        needs.iter().all(|need| {
            let fit = n.cards.iter().filter(|c| card_may_fit(c, need)).count();
            fit >= need.count as usize
        })
    }

    /// The nodes to send for a batch of `jobs` (each a list of needs; None = not known):
    /// of every group of identical nodes, the `per_group` smallest names (a batch of k
    /// workloads can touch at most k nodes of a group, and among identical nodes the service
    /// prefers the smaller name), and only groups whose nodes may take at least one of the jobs
    /// (usage only grows within a batch). The service's choices are the same as with every
    /// node; its reasons for unplaced workloads are not (ask again with every node).
    pub fn candidates(&self, jobs: &[Option<&[Need]>], per_group: usize) -> Vec<v1::Node> {
        self.candidates_where(jobs, per_group, &|_| true)
    }

    /// [`Cluster::candidates`] among the nodes `allowed` accepts (by index): groups are formed
    /// of the allowed members only, so the smallest allowed names are sent.
    pub fn candidates_where(
        &self,
        jobs: &[Option<&[Need]>],
        per_group: usize,
        allowed: &dyn Fn(usize) -> bool,
    ) -> Vec<v1::Node> {
        let unknown = jobs.iter().any(Option::is_none);
        let mut ranks: Vec<usize> = Vec::new();
        for all in self.classes.values() {
            let members: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&r| allowed(self.by_rank[r]))
                .collect();
            let Some(&first) = members.first() else {
                continue;
            };
            let i = self.by_rank[first];
            if !unknown
                && !jobs
                    .iter()
                    .flatten()
                    .any(|needs| self.node_may_fit(i, needs))
            {
                continue;
            }
            ranks.extend(members.iter().take(per_group.max(1)));
        }
        ranks.sort_unstable();
        ranks
            .into_iter()
            .map(|r| self.nodes[self.by_rank[r]].clone())
            .collect()
    }

    /// Cards by state (the shared measure, `gpusched_client::measure`).
    pub fn card_states(&self) -> CardStates {
        measure::card_states(&self.nodes)
    }

    /// Booked compute over all compute (cores percent summed), 0..1 (the shared measure).
    pub fn allocation_ratio(&self) -> f64 {
        measure::allocation_ratio(&self.nodes)
    }

    /// Expected fragmentation of the free compute for request `classes`, 0..1 (the shared
    /// measure, `gpusched_client::measure::fragmentation`).
    pub fn fragmentation(&self, classes: &[(Need, f64)]) -> f64 {
        measure::fragmentation(&self.nodes, classes)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::trace::card;

    fn need(cores: u32) -> Need {
        Need {
            count: 1,
            cores,
            mem_mib: 0,
            mem_percent: cores,
        }
    }

    #[test]
    fn measures_and_groups() {
        let mut n = v1::Node {
            name: "b".into(),
            cards: vec![card(0, "T4", 16384, 10), card(1, "T4", 16384, 10)],
            ..v1::Node::default()
        };
        n.cards[0].usage = Some(v1::CardUsage {
            used_slots: 1,
            used_mem_mib: 8192,
            used_cores: 50,
        });
        let idle = v1::Node {
            name: "a".into(),
            cards: vec![card(0, "T4", 16384, 10), card(1, "T4", 16384, 10)],
            ..v1::Node::default()
        };
        let c = Cluster::new(vec![
            n,
            idle.clone(),
            v1::Node {
                name: "c".into(),
                ..idle.clone()
            },
        ])
        .unwrap();
        assert_eq!(
            c.card_states(),
            CardStates {
                idle: 5,
                partial: 1,
                full: 0
            }
        );
        assert!((c.allocation_ratio() - 50.0 / 600.0).abs() < 1e-12);
        // Free: 50 on the used card, 100 on each of 5 idle cards. A 30% request fits
        // everywhere; an 80% request misses the used card only: 0.5 * 50 / 550.
        let f = c.fragmentation(&[(need(30), 0.5), (need(80), 0.5)]);
        assert!((f - 25.0 / 550.0).abs() < 1e-12, "{f}");
        // Two identical idle nodes are one group: a batch of one gets the smaller name.
        assert_eq!(c.class_count(), 2);
        let one: Vec<String> = c
            .candidates(&[Some(&[need(80)][..])], 1)
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(one, ["a", "b"]);
        let two: Vec<String> = c
            .candidates(&[Some(&[need(100)][..]), None], 2)
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(two, ["a", "b", "c"]);
        let big = Need {
            count: 2,
            ..need(80)
        };
        let fits: Vec<String> = c
            .candidates(&[Some(&[big][..])], 1)
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(fits, ["a"]);
    }
}

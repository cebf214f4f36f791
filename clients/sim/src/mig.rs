//! MIG cards in the simulated cluster (docs/placement-semantics.md section 11): booking and
//! releasing the instance a placement holds exactly as the service's answer says (a MIG card's
//! usage is its instances, so nothing goes to the card's `usage`), and the MIG measures of a
//! report: slices used and stranded slices (MIG fragmentation). Which instance a workload gets
//! is the service's answer; nothing here chooses.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpusched_api::v1;
use serde::Serialize;

/// The instance one container holds on one MIG card: released exactly on departure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigHeld {
    /// Card index within the node.
    pub card: usize,
    /// Profile name.
    pub profile: String,
    /// First memory slice.
    pub start: u32,
    /// A free instance was reused (released back to free); else it was created (removed).
    pub reused: bool,
}

/// Books the instance of `a` on card `ci` (`card`): a reused free instance becomes held, a new
/// one is added in use. `who` names the holder when the answer's owner is empty.
pub fn book(
    card: &mut v1::Card,
    ci: usize,
    a: &v1::MigAssignment,
    who: &str,
) -> anyhow::Result<MigHeld> {
    let layout = card.mig.as_mut().ok_or_else(|| {
        anyhow::anyhow!(
            "a MIG assignment on card `{}`, which has no MIG layout",
            card.id
        )
    })?;
    let owner = if a.owner.is_empty() {
        who
    } else {
        a.owner.as_str()
    };
    if a.reused {
        let inst = layout
            .instances
            .iter_mut()
            .find(|i| i.start == a.start && i.profile == a.profile && i.in_use_by.is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the service reused {} at {} on `{}`, which has no such free instance",
                    a.profile,
                    a.start,
                    card.id
                )
            })?;
        inst.in_use_by = owner.to_owned();
    } else {
        layout.instances.push(v1::MigInstance {
            profile: a.profile.clone(),
            start: a.start,
            size: a.size,
            in_use_by: owner.to_owned(),
        });
        layout
            .instances
            .sort_by(|x, y| (x.start, &x.profile).cmp(&(y.start, &y.profile)));
    }
    Ok(MigHeld {
        card: ci,
        profile: a.profile.clone(),
        start: a.start,
        reused: a.reused,
    })
}

/// Releases exactly what [`book`] booked.
pub fn release(card: &mut v1::Card, h: &MigHeld) -> anyhow::Result<()> {
    let id = card.id.clone();
    let layout = card
        .mig
        .as_mut()
        .ok_or_else(|| anyhow::anyhow!("release of a MIG instance on `{id}` without a layout"))?;
    let k = layout
        .instances
        .iter()
        .position(|i| i.start == h.start && i.profile == h.profile && !i.in_use_by.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "release of {} at {} on `{id}`: not held",
                h.profile,
                h.start
            )
        })?;
    if h.reused {
        layout.instances[k].in_use_by.clear();
    } else {
        layout.instances.remove(k);
    }
    Ok(())
}

/// The MIG cards of a cluster at one point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MigSample {
    /// Cards with a MIG layout.
    pub cards: usize,
    /// Memory slices of instances in use / of all MIG cards.
    pub memory_slices_used: u64,
    /// Memory slices of all MIG cards.
    pub memory_slices: u64,
    /// Compute slices of instances in use / of all MIG cards.
    pub compute_slices_used: u64,
    /// Compute slices of all MIG cards.
    pub compute_slices: u64,
    /// Memory slices in use, % of all.
    pub slices_used_pct: f64,
    /// MIG fragmentation: of the free memory slices (no instance on them, in use or free), the
    /// share that no allowed profile can take now (every placement of an allowed profile that
    /// covers the slice overlaps an instance, or the profile is at its `max_instances`), %.
    /// 0 when no slice is free.
    pub stranded_pct: f64,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Free memory slices of a layout and how many of them no allowed profile can take now.
fn free_and_stranded(l: &v1::MigLayout) -> (u64, u64) {
    let taken = |s: u32| {
        l.instances
            .iter()
            .any(|i| i.start <= s && s < i.start.saturating_add(i.size))
    };
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    for i in &l.instances {
        *count.entry(i.profile.as_str()).or_default() += 1;
    }
    let placeable = |s: u32| {
        l.profiles.iter().filter(|p| !p.not_allowed).any(|p| {
            count.get(p.name.as_str()).copied().unwrap_or(0) < p.max_instances
                && p.placements.iter().any(|&start| {
                    let end = start.saturating_add(p.memory_slices);
                    start <= s && s < end && (start..end).all(|t| !taken(t))
                })
        })
    };
    let (mut free, mut stranded) = (0, 0);
    for s in (0..l.memory_slices).filter(|&s| !taken(s)) {
        free += 1;
        if !placeable(s) {
            stranded += 1;
        }
    }
    (free, stranded)
}

/// The MIG measures of `nodes`; None when no card has a MIG layout.
pub fn measure(nodes: &[v1::Node]) -> Option<MigSample> {
    let mut m = MigSample::default();
    let (mut free, mut stranded) = (0u64, 0u64);
    for l in nodes
        .iter()
        .flat_map(|n| &n.cards)
        .filter_map(|c| c.mig.as_ref())
    {
        m.cards += 1;
        m.memory_slices += u64::from(l.memory_slices);
        m.compute_slices += u64::from(l.compute_slices);
        for i in l.instances.iter().filter(|i| !i.in_use_by.is_empty()) {
            m.memory_slices_used += u64::from(i.size);
            m.compute_slices_used += l
                .profiles
                .iter()
                .find(|p| p.name == i.profile)
                .map_or(0, |p| u64::from(p.compute_slices));
        }
        let (f, s) = free_and_stranded(l);
        free += f;
        stranded += s;
    }
    if m.cards == 0 {
        return None;
    }
    m.slices_used_pct = round3(m.memory_slices_used as f64 * 100.0 / m.memory_slices.max(1) as f64);
    m.stranded_pct = if free == 0 {
        0.0
    } else {
        round3(stranded as f64 * 100.0 / free as f64)
    };
    Some(m)
}

/// Markdown lines for set-ups whose cluster has MIG cards (`(name, samples)`), empty otherwise:
/// slices used at the end and at peak, mean stranded share.
pub fn summary(setups: &[(&str, Vec<MigSample>)]) -> String {
    let mut s = String::new();
    for (name, samples) in setups {
        let (Some(last), false) = (samples.last(), samples.is_empty()) else {
            continue;
        };
        if s.is_empty() {
            s.push_str(
                "\n| set-up | MIG cards | memory slices used at the end | peak | mean stranded |\n\
                 |---|---:|---:|---:|---:|\n",
            );
        }
        let peak = samples
            .iter()
            .map(|m| m.slices_used_pct)
            .fold(0.0, f64::max);
        let mean = samples.iter().map(|m| m.stranded_pct).sum::<f64>() / samples.len() as f64;
        let _ = writeln!(
            s,
            "| {name} | {} | {} / {} ({:.1}%) | {peak:.1}% | {mean:.1}% |",
            last.cards, last.memory_slices_used, last.memory_slices, last.slices_used_pct
        );
    }
    if !s.is_empty() {
        s.push_str(
            "\nMIG: memory slices held by instances in use (a MIG card's usage; its cores and \
             memory are not in alloc); stranded: the share of free memory slices that no allowed \
             profile can take now (MIG fragmentation).\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn profile(name: &str, c: u32, m: u32, max: u32, at: &[u32]) -> v1::MigProfile {
        v1::MigProfile {
            name: name.into(),
            mem_mib: u64::from(m) * 10000,
            compute_slices: c,
            memory_slices: m,
            cores: c * 14,
            max_instances: max,
            placements: at.to_vec(),
            not_allowed: false,
        }
    }

    fn h100() -> v1::Card {
        v1::Card {
            id: "gpu0".into(),
            slots: 7,
            total_mem_mib: 81559,
            total_cores: 100,
            mode: v1::CardMode::Mig as i32,
            health: v1::CardHealth::Healthy as i32,
            mig: Some(v1::MigLayout {
                compute_slices: 7,
                memory_slices: 8,
                profiles: vec![
                    profile("1g.10gb", 1, 1, 7, &[0, 1, 2, 3, 4, 5, 6]),
                    profile("2g.20gb", 2, 2, 3, &[0, 2, 4]),
                    profile("3g.40gb", 3, 4, 2, &[0, 4]),
                    profile("7g.80gb", 7, 8, 1, &[0]),
                ],
                instances: vec![v1::MigInstance {
                    profile: "1g.10gb".into(),
                    start: 0,
                    size: 1,
                    in_use_by: String::new(),
                }],
            }),
            ..v1::Card::default()
        }
    }

    fn assignment(profile: &str, start: u32, size: u32, reused: bool) -> v1::MigAssignment {
        v1::MigAssignment {
            profile: profile.into(),
            start,
            size,
            reused,
            owner: String::new(),
        }
    }

    fn node(c: v1::Card) -> Vec<v1::Node> {
        vec![v1::Node {
            name: "n".into(),
            cards: vec![c],
            ..v1::Node::default()
        }]
    }

    #[test]
    fn booking_and_release_are_exact_inverses() {
        let idle = h100();
        let mut c = idle.clone();
        let reused = book(&mut c, 0, &assignment("1g.10gb", 0, 1, true), "ns/a").unwrap();
        let created = book(&mut c, 0, &assignment("3g.40gb", 4, 4, false), "ns/b").unwrap();
        let l = c.mig.as_ref().unwrap();
        assert_eq!(
            l.instances
                .iter()
                .map(|i| (i.profile.as_str(), i.start, i.in_use_by.as_str()))
                .collect::<Vec<_>>(),
            vec![("1g.10gb", 0, "ns/a"), ("3g.40gb", 4, "ns/b")]
        );
        assert_eq!(c.usage, None, "a MIG card's usage is its instances'");
        release(&mut c, &created).unwrap();
        release(&mut c, &reused).unwrap();
        assert_eq!(c, idle);
        // What the answer cannot mean is an error, not a panic.
        assert!(book(&mut c, 0, &assignment("2g.20gb", 2, 2, true), "x").is_err());
        assert!(release(&mut c, &created).is_err());
        let mut plain = h100();
        plain.mig = None;
        assert!(book(&mut plain, 0, &assignment("1g.10gb", 1, 1, false), "x").is_err());
    }

    #[test]
    fn slices_used_and_stranded() {
        // Seven 1g in use: 7 of 8 memory slices, 7 compute slices; slice 7 is free but no
        // placement of any profile can take it (1g's starts end at 6): 100% stranded.
        let mut c = h100();
        c.mig.as_mut().unwrap().instances.clear();
        for s in 0..7 {
            book(&mut c, 0, &assignment("1g.10gb", s, 1, false), "ns/p").unwrap();
        }
        let m = measure(&node(c)).unwrap();
        assert_eq!(
            (
                m.memory_slices_used,
                m.memory_slices,
                m.compute_slices_used,
                m.compute_slices
            ),
            (7, 8, 7, 7)
        );
        assert_eq!((m.slices_used_pct, m.stranded_pct), (87.5, 100.0));
        // A free node-reported 1g at 0 and a 3g in use at 4: slices 1-3 are free, 1g and 2g
        // can take each (2g at 2 covers 2-3; 1 by 1g at 1), 0 is taken by the free instance:
        // nothing stranded; the free instance is not "used".
        let mut c = h100();
        book(&mut c, 0, &assignment("3g.40gb", 4, 4, false), "ns/q").unwrap();
        let m = measure(&node(c.clone())).unwrap();
        assert_eq!((m.memory_slices_used, m.stranded_pct), (4, 0.0));
        // Only 2g allowed: slice 1 (between the instance at 0 and 2g's starts 0, 2) is stranded.
        for p in &mut c.mig.as_mut().unwrap().profiles {
            p.not_allowed = p.name != "2g.20gb";
        }
        let m = measure(&node(c)).unwrap();
        assert!((m.stranded_pct - 100.0 / 3.0).abs() < 0.001, "{m:?}");
        let mut plain = h100();
        plain.mig = None;
        assert_eq!(measure(&node(plain)), None);
        let text = summary(&[("binpack/binpack", vec![m])]);
        assert!(
            text.contains("| binpack/binpack | 1 | 4 / 8 (50.0%) | 50.0% | 33.3% |"),
            "{text}"
        );
        assert_eq!(summary(&[("x", vec![])]), "");
    }
}

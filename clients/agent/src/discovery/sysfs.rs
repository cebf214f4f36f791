//! sysfs facts: a PCI device's NUMA node, the NUMA node of a CPU set, CPU lists, and Slurm's
//! logical core numbering. Every function takes the sysfs root (`/sys`, or a test tree).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Converts an NVML bus id (`00000000:3B:00.0`) to the sysfs form (`0000:3b:00.0`).
pub fn normalize_bus_id(bus_id: &str) -> Option<String> {
    let s = bus_id.trim().trim_end_matches('\0');
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u32::from_str_radix(bus, 16).ok()?;
    let device = u32::from_str_radix(device, 16).ok()?;
    let function = u32::from_str_radix(function, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `numa_node` of a PCI device (None when absent or -1).
pub fn pci_numa_node(root: &Path, bus_id: &str) -> Option<u32> {
    let v = read_trimmed(&root.join("bus/pci/devices").join(bus_id).join("numa_node"))?;
    v.parse::<i64>().ok().and_then(|n| u32::try_from(n).ok())
}

/// `local_cpulist` of a PCI device.
pub fn pci_local_cpus(root: &Path, bus_id: &str) -> Option<Vec<u32>> {
    let v = read_trimmed(
        &root
            .join("bus/pci/devices")
            .join(bus_id)
            .join("local_cpulist"),
    )?;
    parse_cpu_list(&v).filter(|c| !c.is_empty())
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.trim().split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 1 << 20 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.trim().parse::<u32>().ok()?);
            }
        }
    }
    Some(out.into_iter().collect())
}

/// Formats ids as a compact list (`0-3,8,10-11`).
pub fn format_cpu_list(ids: &[u32]) -> String {
    let set: BTreeSet<u32> = ids.iter().copied().collect();
    let mut parts = Vec::new();
    let mut iter = set.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// CPU ids set in an NVML CPU affinity mask (words of `unsigned long`, lowest CPU first).
pub fn cpus_of_mask<T: Copy + Into<u64>>(words: &[T]) -> Vec<u32> {
    let bits = u32::try_from(std::mem::size_of::<T>() * 8)
        .unwrap_or(64)
        .min(64);
    let mut out = Vec::new();
    for (w, word) in words.iter().enumerate() {
        let word: u64 = (*word).into();
        for b in 0..bits {
            if word >> b & 1 == 1
                && let Ok(w) = u32::try_from(w)
            {
                out.push(w * bits + b);
            }
        }
    }
    out
}

/// The NUMA node holding most of `cpus` (ties: the lowest node), from
/// `devices/system/node/node*/cpulist`.
pub fn numa_of_cpus(root: &Path, cpus: &[u32]) -> Option<u32> {
    if cpus.is_empty() {
        return None;
    }
    let dir = std::fs::read_dir(root.join("devices/system/node")).ok()?;
    let wanted: BTreeSet<u32> = cpus.iter().copied().collect();
    let mut best: Option<(usize, u32)> = None;
    let mut nodes: Vec<(u32, Vec<u32>)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let id = name.strip_prefix("node")?.parse::<u32>().ok()?;
            let list = parse_cpu_list(&read_trimmed(&e.path().join("cpulist"))?)?;
            Some((id, list))
        })
        .collect();
    nodes.sort();
    for (id, list) in nodes {
        let n = list.iter().filter(|c| wanted.contains(c)).count();
        if n > 0 && best.is_none_or(|(m, _)| n > m) {
            best = Some((n, id));
        }
    }
    best.map(|(_, id)| id)
}

/// Slurm's logical core indices of `cpus`: every core of the machine, one per
/// (`physical_package_id`, `core_id`) from `devices/system/cpu/cpu*/topology`, numbered in
/// (package, core id) order; each CPU maps to its core. None when the topology is unreadable.
pub fn slurm_core_indices(root: &Path, cpus: &[u32]) -> Option<Vec<u32>> {
    let dir = std::fs::read_dir(root.join("devices/system/cpu")).ok()?;
    let mut cpu_core: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for e in dir.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let topo = e.path().join("topology");
        let pkg = read_trimmed(&topo.join("physical_package_id"))?
            .parse::<i64>()
            .ok()?;
        let core = read_trimmed(&topo.join("core_id"))?.parse::<i64>().ok()?;
        cpu_core.insert(
            id,
            (
                u32::try_from(pkg).unwrap_or(0),
                u32::try_from(core).unwrap_or(0),
            ),
        );
    }
    if cpu_core.is_empty() {
        return None;
    }
    let cores: BTreeSet<(u32, u32)> = cpu_core.values().copied().collect();
    let index: BTreeMap<(u32, u32), u32> = cores
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| u32::try_from(i).ok().map(|i| (c, i)))
        .collect();
    let mut out = BTreeSet::new();
    for cpu in cpus {
        let core = cpu_core.get(cpu)?;
        out.insert(*index.get(core)?);
    }
    Some(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids() {
        assert_eq!(
            normalize_bus_id("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            normalize_bus_id("0001:C1:1F.7").as_deref(),
            Some("0001:c1:1f.7")
        );
        assert_eq!(normalize_bus_id("nonsense"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(format_cpu_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(cpus_of_mask(&[0b1011u64, 1]), vec![0, 1, 3, 64]);
        assert_eq!(cpus_of_mask(&[1u32 << 31, 1]), vec![31, 32]);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn numa_and_cores_from_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "bus/pci/devices/0000:10:00.0/numa_node", "1\n");
        write(root, "bus/pci/devices/0000:20:00.0/numa_node", "-1\n");
        write(root, "bus/pci/devices/0000:20:00.0/local_cpulist", "4-7\n");
        write(root, "devices/system/node/node0/cpulist", "0-3\n");
        write(root, "devices/system/node/node1/cpulist", "4-7\n");
        assert_eq!(pci_numa_node(root, "0000:10:00.0"), Some(1));
        assert_eq!(pci_numa_node(root, "0000:20:00.0"), None);
        assert_eq!(pci_numa_node(root, "0000:99:00.0"), None);
        assert_eq!(pci_local_cpus(root, "0000:20:00.0"), Some(vec![4, 5, 6, 7]));
        assert_eq!(numa_of_cpus(root, &[3, 4, 5]), Some(1));
        assert_eq!(numa_of_cpus(root, &[0]), Some(0));
        assert_eq!(numa_of_cpus(root, &[42]), None);
        // 2 packages x 2 cores x 2 threads: cpu n and n+4 are siblings.
        for cpu in 0..8u32 {
            let pkg = (cpu % 4) / 2;
            let core = cpu % 2;
            write(
                root,
                &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                &format!("{pkg}\n"),
            );
            write(
                root,
                &format!("devices/system/cpu/cpu{cpu}/topology/core_id"),
                &format!("{core}\n"),
            );
        }
        write(root, "devices/system/cpu/online", "0-7\n");
        assert_eq!(slurm_core_indices(root, &[2, 3, 6, 7]), Some(vec![2, 3]));
        assert_eq!(slurm_core_indices(root, &[0, 4]), Some(vec![0]));
        assert_eq!(slurm_core_indices(root, &[99]), None);
    }
}

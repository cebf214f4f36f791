//! Host CPU and memory (`docs/placement-semantics.md` section 12.2): what a node has free and
//! what a workload asks. The GPU rules (sections 2-11) never read them; only the fragmentation
//! measure does. A leaf: value types and their arithmetic.

/// The host CPU and memory a node has free (optional on a node). Negative values are accepted:
/// the node is over-committed (booking a placement on it may take it below zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct HostResources {
    /// Free CPU, millicores.
    pub free_cpu_milli: i64,
    /// Free memory, MiB.
    pub free_mem_mib: i64,
}

/// The host CPU and memory a workload asks (the Kubernetes form's `cpu` and `memory`
/// requests; zero for a typed workload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct HostRequest {
    /// CPU, millicores.
    pub cpu_milli: u64,
    /// Memory, MiB.
    pub mem_mib: u64,
}

impl HostResources {
    /// What is left after `request` is booked (`None` on overflow of the 64-bit counters).
    pub(crate) fn minus(self, request: HostRequest) -> Option<HostResources> {
        Some(HostResources {
            free_cpu_milli: self
                .free_cpu_milli
                .checked_sub(i64::try_from(request.cpu_milli).ok()?)?,
            free_mem_mib: self
                .free_mem_mib
                .checked_sub(i64::try_from(request.mem_mib).ok()?)?,
        })
    }

    /// What there is after `request` is released (`None` on overflow).
    pub(crate) fn plus(self, request: HostRequest) -> Option<HostResources> {
        Some(HostResources {
            free_cpu_milli: self
                .free_cpu_milli
                .checked_add(i64::try_from(request.cpu_milli).ok()?)?,
            free_mem_mib: self
                .free_mem_mib
                .checked_add(i64::try_from(request.mem_mib).ok()?)?,
        })
    }
}

impl HostRequest {
    /// Per-dimension maximum (the init-container rule of Kubernetes' effective request).
    pub(crate) fn max(self, other: HostRequest) -> HostRequest {
        HostRequest {
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            mem_mib: self.mem_mib.max(other.mem_mib),
        }
    }

    /// Per-dimension saturating sum.
    pub(crate) fn plus(self, other: HostRequest) -> HostRequest {
        HostRequest {
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            mem_mib: self.mem_mib.saturating_add(other.mem_mib),
        }
    }
}

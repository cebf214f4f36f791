//! What a pod's decision consumes against its namespace's quota (contract section 10.2): per
//! card, the larger of the app containers' sum and the largest init container, summed over the
//! cards, for memory and cores each. The same number the service checked the placement
//! against, so a namespace placed within budget is never counted over it.

use std::collections::BTreeMap;

use gpusched_hami::Booking;

/// MiB and cores (percent of a card) a namespace holds or a pod consumes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Use {
    /// MiB.
    pub mem_mib: u64,
    /// Percent of a card.
    pub cores: u64,
}

impl Use {
    /// Both sums, saturating.
    pub fn plus(self, other: Use) -> Use {
        Use {
            mem_mib: self.mem_mib.saturating_add(other.mem_mib),
            cores: self.cores.saturating_add(other.cores),
        }
    }
}

/// What a decision consumes: `containers` are its per-container bookings in pod order, the
/// first `init` of them init containers' (HAMi's `-allocated` order).
pub fn consumed(containers: &[Vec<Booking>], init: usize) -> Use {
    // card -> (init peak, app sum), per resource.
    let mut cards: BTreeMap<&str, (Use, Use)> = BTreeMap::new();
    for (i, container) in containers.iter().enumerate() {
        for b in container {
            let (peak, sum) = cards.entry(b.uuid.as_str()).or_default();
            if i < init {
                peak.mem_mib = peak.mem_mib.max(b.mem_mib);
                peak.cores = peak.cores.max(u64::from(b.cores));
            } else {
                *sum = sum.plus(Use {
                    mem_mib: b.mem_mib,
                    cores: u64::from(b.cores),
                });
            }
        }
    }
    cards.values().fold(Use::default(), |total, (peak, sum)| {
        total.plus(Use {
            mem_mib: peak.mem_mib.max(sum.mem_mib),
            cores: peak.cores.max(sum.cores),
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The contract's examples, as `-allocated` annotations: (annotation, init containers,
    /// MiB, cores).
    #[test]
    fn decisions_consume_as_the_contract_counts() {
        for (annotation, init, mem, cores, why) in [
            ("", 0, 0, 0, "no GPU"),
            (
                "GPU-0,NVIDIA,2000,100:GPU-1,NVIDIA,2000,100:;",
                0,
                4000,
                200,
                "10.7.1, two cards",
            ),
            (
                "GPU-0,NVIDIA,10000,0:;GPU-1,NVIDIA,10000,0:;",
                0,
                20000,
                0,
                "10.7.3, one card each",
            ),
            (
                "GPU-0,NVIDIA,30000,0:;GPU-0,NVIDIA,10000,0:GPU-1,NVIDIA,10000,0:;",
                1,
                40000,
                0,
                "10.7.4: init 30,000 on card 0, app 10,000 on cards 0 and 1",
            ),
            (
                "GPU-0,NVIDIA,30000,0:;GPU-0,NVIDIA,10000,0:GPU-1,NVIDIA,10000,0:;",
                0,
                50000,
                0,
                "the same bookings once init has finished are all app containers'",
            ),
            (
                "GPU-0,NVIDIA,8000,30:;GPU-0,NVIDIA,6000,20:;GPU-0,NVIDIA,5000,20:;GPU-0,NVIDIA,4000,20:;",
                2,
                9000,
                40,
                "two init containers on one card: their peak (8,000, 30) against the app sum (9,000, 40)",
            ),
            (
                "GPU-0,NVIDIA,4096,30:;;GPU-1,NVIDIA,4096,30:;",
                0,
                8192,
                60,
                "a container without GPU between two",
            ),
        ] {
            let b = gpusched_hami::decode_pod_devices(annotation).unwrap();
            assert_eq!(
                consumed(&b, init),
                Use {
                    mem_mib: mem,
                    cores
                },
                "{why}"
            );
        }
    }
}

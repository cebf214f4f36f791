//! The field numbers the prescan walks, in one place: each constant is declared with the
//! messages and the field of `proto/gpusched/v1` it is the number of, and a test checks every
//! declaration against the generated descriptors (`gpusched_api::FILE_DESCRIPTOR_SET`), so a
//! renumbered or renamed field fails a test instead of miscounting a request.

/// Declares the constants and, for the test, the table of what each one is.
macro_rules! fields {
    ($($name:ident = $number:literal: [$($message:ident),+] . $field:ident;)*) => {
        $(
            #[doc = concat!("`", stringify!($field), "` of", $(" `", stringify!($message), "`"),+, ".")]
            pub const $name: u32 = $number;
        )*
        /// Every constant: its value, the messages and the field it is the number of.
        #[cfg(test)]
        const DECLARED: &[(u32, &[&str], &str)] = &[
            $(($name, &[$(stringify!($message)),+], stringify!($field))),*
        ];
    };
}

fields! {
    PLACEMENT_NODES = 1: [FilterRequest, ScoreRequest, AllocateRequest, AllocateBatchRequest, PreemptRequest].nodes;
    PLACEMENT_WORKLOAD = 2: [FilterRequest, ScoreRequest, AllocateRequest, PreemptRequest].workload;
    BATCH_WORKLOADS = 2: [AllocateBatchRequest].workloads;
    PLACEMENT_OPTIONS = 3: [FilterRequest, ScoreRequest, AllocateRequest, AllocateBatchRequest, PreemptRequest].options;
    ALLOCATE_RESTRICT = 4: [AllocateRequest].restrict_to_node_names;
    PLACEMENT_NODE_REFS = 5: [FilterRequest, ScoreRequest, AllocateRequest].node_refs;
    BATCH_UPDATED_NODES = 5: [AllocateBatchRequest].return_updated_nodes;
    BATCH_NODE_REFS = 6: [AllocateBatchRequest].node_refs;
    PREEMPT_PLACED = 5: [PreemptRequest].placed;
    PREEMPT_NODE_REFS = 6: [PreemptRequest].node_refs;
    PLACED_WORKLOADS = 2: [NodePlaced].workloads;
    PLACED_BOOKINGS = 5: [PlacedWorkload].bookings;

    VALIDATE_WORKLOAD = 1: [ValidateWorkloadRequest].workload;
    VALIDATE_OPTIONS = 2: [ValidateWorkloadRequest].options;

    NORMALIZE_CARDS = 2: [NormalizeInventoryRequest].cards;
    NORMALIZE_CONFIG = 3: [NormalizeInventoryRequest].config;
    RAW_CARD_LINKS = 8: [RawCard].links;
    NORMALIZATION_OVERRIDES = 4: [NormalizationConfig].overrides;

    NODE_CARDS = 2: [Node].cards;
    NODE_CORDONED = 3: [Node].cordoned_card_ids;
    NODE_PAIR_SCORES = 4: [Node].pair_scores;
    NODE_ANNOTATIONS = 5: [Node].annotations;
    CARD_MIG = 11: [Card].mig;
    MIG_PROFILES = 3: [MigLayout].profiles;
    MIG_INSTANCES = 4: [MigLayout].instances;
    MIG_PROFILE_PLACEMENTS = 7: [MigProfile].placements;

    REF_INVENTORY = 1: [NodeRef].inventory;
    REF_USAGE = 3: [NodeRef].usage;
    USAGE_CARDS = 1: [NodeUsage].cards;

    WORKLOAD_TYPED = 4: [Workload].typed;
    WORKLOAD_KUBERNETES = 5: [Workload].kubernetes;
    TYPED_GPU_POLICY = 2: [TypedWorkloadSpec].gpu_policy;
    TYPED_USE_TYPES = 5: [TypedWorkloadSpec].use_gpu_types;
    TYPED_NOUSE_TYPES = 6: [TypedWorkloadSpec].nouse_gpu_types;
    TYPED_USE_UUIDS = 7: [TypedWorkloadSpec].use_gpu_uuids;
    TYPED_NOUSE_UUIDS = 8: [TypedWorkloadSpec].nouse_gpu_uuids;
    TYPED_INIT_CONTAINERS = 10: [TypedWorkloadSpec].init_containers;
    TYPED_CONTAINERS = 11: [TypedWorkloadSpec].containers;
    KUBE_ANNOTATIONS = 1: [KubernetesWorkloadSpec].annotations;
    KUBE_INIT_CONTAINERS = 2: [KubernetesWorkloadSpec].init_containers;
    KUBE_CONTAINERS = 3: [KubernetesWorkloadSpec].containers;
    CONTAINER_LIMITS = 2: [KubernetesContainer].limits;
    CONTAINER_REQUESTS = 3: [KubernetesContainer].requests;

    OPTIONS_GPU_POLICY = 2: [PlacementOptions].default_gpu_policy;
    OPTIONS_EXPLAIN = 5: [PlacementOptions].explain;
    OPTIONS_WORKLOAD_MIX = 7: [PlacementOptions].workload_mix;
    MIX_SHAPES = 1: [WorkloadMix].shapes;
    SHAPE_GPU_TYPES = 6: [WorkloadMixShape].gpu_types;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use prost::Message as _;

    use super::*;

    #[test]
    fn every_walked_field_number_is_the_descriptors() {
        let set =
            prost_types::FileDescriptorSet::decode(gpusched_api::FILE_DESCRIPTOR_SET).unwrap();
        // (message, field) -> number, for every message of gpusched.v1.
        let mut numbers: BTreeMap<(String, String), i32> = BTreeMap::new();
        for f in set.file.iter().filter(|f| f.package() == "gpusched.v1") {
            for m in &f.message_type {
                for field in &m.field {
                    numbers.insert(
                        (m.name().to_owned(), field.name().to_owned()),
                        field.number(),
                    );
                }
            }
        }
        assert!(numbers.len() > 100, "{} fields", numbers.len());
        assert!(DECLARED.len() >= 36, "{} declared", DECLARED.len());
        for (value, messages, field) in DECLARED {
            for m in *messages {
                let described = numbers.get(&((*m).to_owned(), (*field).to_owned()));
                assert_eq!(
                    described.copied(),
                    Some(i32::try_from(*value).unwrap()),
                    "{m}.{field}"
                );
            }
        }
    }
}

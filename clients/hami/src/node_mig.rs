//! gpusched's companion node annotation `gpusched.io/node-mig-layouts`: the whole MIG layout of
//! each MIG card as the node agent read it from NVML (`docs/hami-protocol.md`, "MIG"), which
//! HAMi's `migProfiles` cannot carry (no card slice counts, no instance counts, no profile
//! outside the allowlist, no existing instances). It sits beside HAMi's annotations, which stay
//! byte for byte what HAMi's device plugin writes.
//!
//! The value is a JSON object: card UUID → that card's v1 `MigLayout` in proto3 JSON (the API's
//! own form, `computeSlices`, `memorySlices`, `profiles`, `instances`). Instances are written
//! without `inUseBy`: NVML cannot tell who holds an instance; who does is learnt from pods'
//! `hami.io/vgpu-mig-allocations`.

use std::collections::BTreeMap;

use gpusched_api::json::{from_json, to_json};
use gpusched_api::v1;

use crate::error::{HamiError, err};

/// Node annotation: the MIG layout of each MIG card (gpusched's, beside HAMi's register).
pub const NODE_MIG_LAYOUTS: &str = "gpusched.io/node-mig-layouts";

const LAYOUT: &str = "gpusched.v1.MigLayout";

/// The `gpusched.io/node-mig-layouts` value for these layouts, by card UUID (cards in UUID
/// order). Who holds an instance is never written.
pub fn encode_node_mig_layouts(layouts: &BTreeMap<String, v1::MigLayout>) -> String {
    let mut out = String::from("{");
    for (i, (id, layout)) in layouts.iter().enumerate() {
        let mut layout = layout.clone();
        for inst in &mut layout.instances {
            inst.in_use_by.clear();
        }
        let key = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".to_owned());
        let value = to_json(LAYOUT, &layout, false).unwrap_or_else(|_| "{}".to_owned());
        if i > 0 {
            out.push(',');
        }
        out.push_str(&key);
        out.push(':');
        out.push_str(&value);
    }
    out.push('}');
    out
}

/// Reads `gpusched.io/node-mig-layouts`: a JSON object of card UUID → `MigLayout`. Refused,
/// naming the card: a value that is not a `MigLayout`, a blank card UUID, an instance that
/// names who holds it (only pods say that). Whether a layout is sound (slices, profiles,
/// placements, overlapping instances) is the service's to judge, like every node fact.
pub fn decode_node_mig_layouts(value: &str) -> Result<BTreeMap<String, v1::MigLayout>, HamiError> {
    let raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(value.trim()).map_err(|e| {
            err(
                NODE_MIG_LAYOUTS,
                format!("not a JSON object of layouts: {e}"),
            )
        })?;
    let mut out = BTreeMap::new();
    for (id, v) in raw {
        if id.trim().is_empty() {
            return Err(err(NODE_MIG_LAYOUTS, "a layout for a blank card UUID"));
        }
        let layout: v1::MigLayout = from_json(LAYOUT, &v.to_string()).map_err(|e| {
            err(
                NODE_MIG_LAYOUTS,
                format!("card {id:?}: not a MigLayout: {e}"),
            )
        })?;
        if let Some(k) = layout
            .instances
            .iter()
            .position(|i| !i.in_use_by.is_empty())
        {
            return Err(err(
                NODE_MIG_LAYOUTS,
                format!(
                    "card {id:?}: instances[{k}] names who holds it ({:?}); a node reports \
                     instances only, pods' reservations say who holds them",
                    layout.instances[k].in_use_by
                ),
            ));
        }
        out.insert(id, layout);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> v1::MigLayout {
        v1::MigLayout {
            compute_slices: 7,
            memory_slices: 8,
            profiles: vec![
                v1::MigProfile {
                    name: "1g.10gb".into(),
                    mem_mib: 9984,
                    compute_slices: 1,
                    memory_slices: 1,
                    cores: 13,
                    max_instances: 7,
                    placements: vec![0, 1, 2, 3, 4, 5, 6],
                    not_allowed: false,
                },
                v1::MigProfile {
                    name: "4g.40gb".into(),
                    mem_mib: 40448,
                    compute_slices: 4,
                    memory_slices: 4,
                    cores: 49,
                    max_instances: 1,
                    placements: vec![0],
                    not_allowed: true,
                },
            ],
            instances: vec![v1::MigInstance {
                profile: "4g.40gb".into(),
                start: 0,
                size: 4,
                in_use_by: String::new(),
            }],
        }
    }

    #[test]
    fn layouts_are_written_in_the_apis_json_and_read_back() {
        let layouts = BTreeMap::from([("GPU-a".to_owned(), layout())]);
        let text = encode_node_mig_layouts(&layouts);
        assert_eq!(
            text,
            r#"{"GPU-a":{"computeSlices":7,"memorySlices":8,"profiles":[{"name":"1g.10gb","memMib":"9984","computeSlices":1,"memorySlices":1,"cores":13,"maxInstances":7,"placements":[0,1,2,3,4,5,6]},{"name":"4g.40gb","memMib":"40448","computeSlices":4,"memorySlices":4,"cores":49,"maxInstances":1,"placements":[0],"notAllowed":true}],"instances":[{"profile":"4g.40gb","size":4}]}}"#
        );
        assert_eq!(decode_node_mig_layouts(&text).unwrap(), layouts);
        assert_eq!(
            decode_node_mig_layouts("{}").unwrap(),
            BTreeMap::new(),
            "no MIG card"
        );
        // Who holds an instance is never written.
        let mut held = layout();
        held.instances[0].in_use_by = "ns/p".into();
        let text2 = encode_node_mig_layouts(&BTreeMap::from([("GPU-a".to_owned(), held)]));
        assert_eq!(text2, text);
    }

    #[test]
    fn what_cannot_be_a_layout_is_refused_naming_the_card() {
        for (text, why) in [
            ("[]", "not a JSON object"),
            ("nonsense", "not a JSON object"),
            (r#"{" ":{}}"#, "blank card UUID"),
            (
                r#"{"GPU-a":{"computeSlices":"x"}}"#,
                "card \"GPU-a\": not a MigLayout",
            ),
            (
                r#"{"GPU-a":{"profiles":[{"name":"1g","bogus":1}]}}"#,
                "card \"GPU-a\": not a MigLayout",
            ),
            (
                r#"{"GPU-a":{"computeSlices":-1}}"#,
                "card \"GPU-a\": not a MigLayout",
            ),
            (
                r#"{"GPU-a":{"instances":[{"profile":"1g","start":1,"size":1,"inUseBy":"ns/p"}]}}"#,
                "instances[0] names who holds it",
            ),
        ] {
            let e = decode_node_mig_layouts(text).unwrap_err();
            assert_eq!(e.annotation, NODE_MIG_LAYOUTS);
            assert!(e.message.contains(why), "{text}: {e}");
        }
    }

    proptest::proptest! {
        /// Any layouts round-trip (who holds an instance is dropped), and any text decodes or
        /// is refused, never a panic.
        #[test]
        fn layouts_round_trip_and_text_never_panics(
            cards in proptest::collection::btree_map(
                "GPU-[a-z0-9]{1,8}",
                (
                    0u32..20,
                    0u32..20,
                    proptest::collection::vec(
                        ("[a-z0-9.+]{0,8}", 0u64..200_000, 0u32..9, 0u32..9, 0u32..120, 0u32..9,
                         proptest::collection::vec(0u32..9, 0..8), proptest::bool::ANY),
                        0..5,
                    ),
                    proptest::collection::vec(("[a-z0-9.]{0,8}", 0u32..9, 0u32..9, "[a-z/]{0,4}"), 0..5),
                ),
                0..4,
            ),
            text in ".{0,200}",
        ) {
            let layouts: BTreeMap<String, v1::MigLayout> = cards
                .into_iter()
                .map(|(id, (c, m, profiles, instances))| {
                    let l = v1::MigLayout {
                        compute_slices: c,
                        memory_slices: m,
                        profiles: profiles
                            .into_iter()
                            .map(|(name, mem_mib, cs, ms, cores, max, placements, not_allowed)| {
                                v1::MigProfile {
                                    name,
                                    mem_mib,
                                    compute_slices: cs,
                                    memory_slices: ms,
                                    cores,
                                    max_instances: max,
                                    placements,
                                    not_allowed,
                                }
                            })
                            .collect(),
                        instances: instances
                            .into_iter()
                            .map(|(profile, start, size, in_use_by)| v1::MigInstance {
                                profile,
                                start,
                                size,
                                in_use_by,
                            })
                            .collect(),
                    };
                    (id, l)
                })
                .collect();
            let mut want = layouts.clone();
            for l in want.values_mut() {
                for i in &mut l.instances {
                    i.in_use_by.clear();
                }
            }
            let text2 = encode_node_mig_layouts(&layouts);
            proptest::prop_assert_eq!(decode_node_mig_layouts(&text2).unwrap(), want);
            let _ = decode_node_mig_layouts(&text);
        }
    }
}

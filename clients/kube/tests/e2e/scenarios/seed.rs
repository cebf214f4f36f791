//! The four seed stories: node binpack/spread (which node two pods land on) and GPU
//! binpack/spread (which card two pods land on), schedulerName set by the mutating webhook and
//! HAMi's annotations and label checked on every bound pod.

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, first_card, node_of};
use crate::harness::{ALLOCATED, SCHEDULER};

const SHAPE: Shape = Shape {
    cards: 4,
    mem: 16384,
};

/// A node-policy story: two one-card pods onto two nodes; `want` are the nodes' suffixes.
struct NodeStory {
    story: u32,
    policy: &'static str,
    want: [&'static str; 2],
}

const NODE_STORIES: [NodeStory; 2] = [
    NodeStory {
        story: 1,
        policy: "binpack",
        want: ["node1", "node1"],
    },
    NodeStory {
        story: 2,
        policy: "spread",
        want: ["node1", "node2"],
    },
];

/// A GPU-policy story: two pods (20% memory, 20 cores) onto one node; `want` are the cards'
/// numbers.
struct GpuStory {
    story: u32,
    policy: &'static str,
    want: [u32; 2],
}

const GPU_STORIES: [GpuStory; 2] = [
    GpuStory {
        story: 3,
        policy: "binpack",
        want: [1, 1],
    },
    GpuStory {
        story: 4,
        policy: "spread",
        want: [1, 2],
    },
];

pub async fn node_policies(h: &H) {
    for NodeStory {
        story,
        policy,
        want,
    } in NODE_STORIES
    {
        let pool = format!("seed{story}");
        let ns = h.namespace(&pool, false).await;
        h.make_node(&format!("{pool}-node1"), &pool, SHAPE, 4).await;
        h.make_node(&format!("{pool}-node2"), &pool, SHAPE, 4).await;
        let mut got = vec![];
        for i in 1..=2 {
            // No schedulerName: the mutating webhook sets it.
            let pod = PodSpec::new(format!("pod{i}"), &pool)
                .ann("hami.io/node-scheduler-policy", policy)
                .limit("nvidia.com/gpu", "1")
                .build();
            h.create(&ns, &pod).await.unwrap();
            let p = h.wait_bound(&ns, &format!("pod{i}")).await;
            assert_eq!(
                p.spec.as_ref().unwrap().scheduler_name.as_deref(),
                Some(SCHEDULER),
                "mutating webhook sets schedulerName"
            );
            got.push(node_of(&p).unwrap());
        }
        let want: Vec<String> = want.iter().map(|n| format!("{pool}-{n}")).collect();
        assert_eq!(got, want, "story {story} (node {policy})");
        h.result(format!(
            "seed story {story} (node {policy}): pod1 -> {}, pod2 -> {} ✓",
            got[0], got[1]
        ));
    }
}

pub async fn gpu_policies(h: &H) {
    for GpuStory {
        story,
        policy,
        want,
    } in GPU_STORIES
    {
        let pool = format!("seed{story}");
        let ns = h.namespace(&pool, false).await;
        let node = format!("{pool}-node1");
        h.make_node(&node, &pool, SHAPE, 4).await;
        let mut got = vec![];
        for i in 1..=2 {
            let pod = PodSpec::new(format!("pod{i}"), &pool)
                .ann("hami.io/gpu-scheduler-policy", policy)
                .limit("nvidia.com/gpu", "1")
                .limit("nvidia.com/gpucores", "20")
                .limit("nvidia.com/gpumem-percentage", "20")
                .build();
            h.create(&ns, &pod).await.unwrap();
            let p = h.wait_bound(&ns, &format!("pod{i}")).await;
            assert_eq!(node_of(&p).unwrap(), node);
            let ann = p.metadata.annotations.clone().unwrap();
            assert_eq!(
                ann.get("hami.io/bind-phase").map(String::as_str),
                Some("allocating")
            );
            assert_eq!(
                ann.get(gpusched_hami::DEVICES_TO_ALLOCATE),
                ann.get(ALLOCATED)
            );
            assert!(ann.contains_key("hami.io/vgpu-time") && ann.contains_key("hami.io/bind-time"));
            assert_eq!(
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(gpusched_hami::VGPU_NODE)),
                Some(&node),
                "hami.io/vgpu-node label"
            );
            // 20% of 16384 MiB, 20 cores, as HAMi writes it.
            let card = first_card(&p);
            assert_eq!(ann[ALLOCATED], format!("{card},NVIDIA,3276,20:;"));
            got.push(card);
        }
        let want: Vec<String> = want.iter().map(|c| format!("GPU-{node}-{c}")).collect();
        assert_eq!(got, want, "story {story} (GPU {policy})");
        h.result(format!(
            "seed story {story} (GPU {policy}): pod1 -> {}, pod2 -> {} ✓",
            got[0], got[1]
        ));
    }
}

//! The seed's `hami.io/device-scoring-weights` example: with the usage of pods already bound,
//! binpack chooses GPU A under the default weights and GPU B under `slot=1,core=1,memory=3`.

use std::time::Duration;

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, first_card};

/// One case: the annotation (None: absent) and the card binpack must choose (1 = A, 2 = B).
struct Case {
    name: &'static str,
    weights: Option<&'static str>,
    want: u32,
    why: &'static str,
}

// After the request (1 card, 40% memory), GPU A is at slot 0.2 / core 0.9 / memory 0.5 and GPU B
// at 0.8 / 0.1 / 0.6. Default weights: A 16 > B 15; slot=1,core=1,memory=3: A 26 < B 27. Under
// binpack the higher score wins.
const CASES: [Case; 2] = [
    Case {
        name: "default",
        weights: None,
        want: 1,
        why: "GPU A (16 vs 15)",
    },
    Case {
        name: "memory3",
        weights: Some("slot=1,core=1,memory=3"),
        want: 2,
        why: "GPU B (27 vs 26)",
    },
];

pub async fn run(h: &H) {
    for Case {
        name,
        weights,
        want,
        why,
    } in CASES
    {
        let pool = format!("weights-{name}");
        let ns = h.namespace(&pool, false).await;
        let node = format!("{pool}-node1");
        h.make_node(
            &node,
            &pool,
            Shape {
                cards: 2,
                mem: 10000,
            },
            2,
        )
        .await;
        let (a, b) = (format!("GPU-{node}-1"), format!("GPU-{node}-2"));
        h.holder(&ns, "uses-a", &node, &format!("{a},NVIDIA,1000,90:;"), 1)
            .await;
        let mut b_dev = format!("{b},NVIDIA,2000,10:;");
        for _ in 1..7 {
            b_dev.push_str(&format!("{b},NVIDIA,0,0:;"));
        }
        h.holder(&ns, "uses-b", &node, &b_dev, 7).await;
        tokio::time::sleep(Duration::from_millis(1500)).await; // informer catches up
        let mut spec = PodSpec::new("weighted", &pool)
            .ann("hami.io/gpu-scheduler-policy", "binpack")
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem-percentage", "40");
        if let Some(w) = weights {
            spec = spec.ann("hami.io/device-scoring-weights", w);
        }
        h.create(&ns, &spec.build()).await.unwrap();
        let p = h.wait_bound(&ns, "weighted").await;
        let card = first_card(&p);
        let expected = if want == 1 { &a } else { &b };
        assert_eq!(&card, expected, "weights {weights:?}");
        h.result(format!(
            "device-scoring-weights {}: binpack chose {why} ✓",
            weights.unwrap_or("absent (1,1,1)"),
        ));
    }
}

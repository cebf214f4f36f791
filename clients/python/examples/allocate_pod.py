"""Allocate a pod-like workload (annotations + container limits) on two nodes.

    python examples/allocate_pod.py --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import os

import gpusched
from gpusched import v1
from gpusched import workload as wl


def a100(node: str, index: int, mem_mib: int, used_slots: int = 0, used_mem_mib: int = 0, used_cores: int = 0) -> v1.Card:
    return v1.Card(
        id=f"GPU-{node}-{index}",
        index=index,
        type="NVIDIA-A100-SXM4-80GB" if mem_mib > 40960 else "NVIDIA-A100-SXM4-40GB",
        slots=10,
        total_mem_mib=mem_mib,
        total_cores=100,
        health=v1.CARD_HEALTH_HEALTHY,
        usage=v1.CardUsage(used_slots=used_slots, used_mem_mib=used_mem_mib, used_cores=used_cores),
    )


def main(address: str) -> None:
    nodes = [
        # node-a: two 40 GB cards, the first one already half busy
        v1.Node(name="node-a", cards=[a100("node-a", 0, 40960, 2, 20000, 50), a100("node-a", 1, 40960)]),
        # node-b: four idle 80 GB cards
        v1.Node(name="node-b", cards=[a100("node-b", i, 81920) for i in range(4)]),
    ]
    pod = wl.kubernetes_workload(
        namespace="ml",
        name="trainer-0",
        annotations={
            wl.NODE_SCHEDULER_POLICY: "binpack",  # fill nodes up
            wl.GPU_SCHEDULER_POLICY: "spread",  # but spread over the cards of a node
        },
        containers=[wl.container("trainer", wl.gpu_limits(2, gpumem_mib=16000, gpucores=30))],
    )

    with gpusched.Client(address, timeout=10) as client:
        result = client.allocate(v1.AllocateRequest(nodes=nodes, workload=pod)).result

    assert result.placed, result
    print(f"placed on {result.node_name} (score {result.node_score.raw_score:.2f}, "
          f"policy {result.effective_policy.gpu_policy_text})")
    for c in result.containers:
        for card in c.cards:
            print(f"  {c.container_name}: {card.card_id} (index {card.card_index}) "
                  f"{card.mem_mib} MiB, {card.cores_percent}% cores")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default=os.environ.get("GPUSCHED_ADDRESS", "127.0.0.1:50051"))
    main(p.parse_args().address)

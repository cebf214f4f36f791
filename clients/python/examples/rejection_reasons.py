"""Read why nodes cannot host a workload: typed reasons with card counts, HAMi's text, and
whether freeing capacity could ever help.

    python examples/rejection_reasons.py --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import os

import gpusched
from gpusched import v1
from gpusched import workload as wl


def card(node: str, index: int, mem_mib: int, used_mem_mib: int = 0, healthy: bool = True) -> v1.Card:
    return v1.Card(
        id=f"GPU-{node}-{index}",
        index=index,
        type="NVIDIA-A100-SXM4-80GB" if mem_mib > 40960 else "NVIDIA-A100-SXM4-40GB",
        slots=10,
        total_mem_mib=mem_mib,
        total_cores=100,
        health=v1.CARD_HEALTH_HEALTHY if healthy else v1.CARD_HEALTH_UNHEALTHY,
        usage=v1.CardUsage(used_slots=1 if used_mem_mib else 0, used_mem_mib=used_mem_mib),
    )


def main(address: str) -> None:
    nodes = [
        # 40 GB cards: too small for 50,000 MiB, now and forever
        v1.Node(name="node-a", cards=[card("node-a", i, 40960) for i in range(2)]),
        # 80 GB cards: one unhealthy, the others half full right now
        v1.Node(
            name="node-b",
            cards=[card("node-b", 0, 81920, healthy=False)]
            + [card("node-b", i, 81920, used_mem_mib=40000) for i in (1, 2, 3)],
        ),
    ]
    pod = wl.kubernetes_workload(
        name="big", containers={"main": wl.gpu_limits(2, gpumem_mib=50000)}
    )

    with gpusched.Client(address, timeout=10) as client:
        result = client.allocate(v1.AllocateRequest(nodes=nodes, workload=pod)).result

    assert not result.placed and len(result.failed_nodes) == 2, result
    print(f"not placed ({result.feasible_node_count} feasible nodes)")
    for failed in result.failed_nodes:
        hint = "never fits" if failed.unresolvable else "may fit once cards free up"
        print(f"  {failed.node_name}: {failed.message}  [{hint}; container {failed.container_name!r}]")
        for r in failed.reasons:
            print(f"    {v1.Reason.Name(r.reason)} ({r.name}) on {r.count} card(s)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default=os.environ.get("GPUSCHED_ADDRESS", "127.0.0.1:50051"))
    main(p.parse_args().address)

"""Small builders of nodes and workloads for the tests."""

from __future__ import annotations

import grpc

from gpusched import v1
from gpusched import workload as wl

A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"


def card(
    index: int,
    *,
    type: str = A100_40,
    mem_mib: int = 40960,
    used_slots: int = 0,
    used_mem_mib: int = 0,
    used_cores: int = 0,
    healthy: bool = True,
    numa: int = 0,
    node: str = "n",
) -> v1.Card:
    c = v1.Card(
        id=f"GPU-{node}-{index}",
        index=index,
        type=type,
        slots=10,
        total_mem_mib=mem_mib,
        total_cores=100,
        numa=numa,
        health=v1.CARD_HEALTH_HEALTHY if healthy else v1.CARD_HEALTH_UNHEALTHY,
        mode=v1.CARD_MODE_HAMI_CORE,
    )
    if used_slots or used_mem_mib or used_cores:
        c.usage.CopyFrom(
            v1.CardUsage(used_slots=used_slots, used_mem_mib=used_mem_mib, used_cores=used_cores)
        )
    return c


def node(name: str, cards: int = 2, **card_kwargs: object) -> v1.Node:
    return v1.Node(name=name, cards=[card(i, node=name, **card_kwargs) for i in range(cards)])  # type: ignore[arg-type]


def two_nodes() -> list[v1.Node]:
    return [node("node-a", 2), node("node-b", 4, type=A100_80, mem_mib=81920)]


def gpu_pod(gpus: int = 1, annotations: dict[str, str] | None = None, **limits: int) -> v1.Workload:
    return wl.kubernetes_workload(
        name="pod",
        namespace="default",
        annotations=annotations,
        containers=[wl.container("main", wl.gpu_limits(gpus, **limits))],
    )


BAD_WEIGHTS = {wl.DEVICE_SCORING_WEIGHTS: "slot=1,core=high,memory=1"}


class AllocateOnlyPlacement(v1.PlacementServiceServicer):
    """A fake PlacementService for tests that only answer Allocate: every other method is
    UNIMPLEMENTED."""

    def Filter(self, request: v1.FilterRequest, context: grpc.ServicerContext) -> v1.FilterResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "filter")

    def Score(self, request: v1.ScoreRequest, context: grpc.ServicerContext) -> v1.ScoreResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "score")

    def AllocateBatch(
        self, request: v1.AllocateBatchRequest, context: grpc.ServicerContext
    ) -> v1.AllocateBatchResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "batch")

    def ValidateWorkload(
        self, request: v1.ValidateWorkloadRequest, context: grpc.ServicerContext
    ) -> v1.ValidateWorkloadResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "validate")

    def Preempt(self, request: v1.PreemptRequest, context: grpc.ServicerContext) -> v1.PreemptResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "preempt")

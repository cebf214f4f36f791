"""Nodes by reference: the shared exchange (proto/testdata/exchanges/*.json) replayed in order on
a fresh server, and the clients' automatic mode answering like whole nodes."""

from __future__ import annotations

import asyncio
import json
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

import gpusched
from gpusched import v1
from helpers import AllocateOnlyPlacement

from conftest import TESTDATA, start_server

EXCHANGES = sorted((TESTDATA / "exchanges").glob("*.json"))


def _replay(client: Any, steps: list[dict[str, Any]]) -> None:
    for i, step in enumerate(steps):
        m = gpusched.METHODS[step["method"]]
        request = json_format.ParseDict(step["request"], m.request_type())
        note = f"step {i}: {step.get('description', '')}"
        if "response" in step:
            expected = json_format.ParseDict(step["response"], m.response_type())
            got = client.invoke(step["method"], request)
            assert got == expected, note
        else:
            want = step["error"]
            with pytest.raises(gpusched.GpuschedError) as info:
                client.invoke(step["method"], request)
            err = info.value
            assert err.code.name == want["code"], f"{note}\n{err}"
            assert [(f.field, f.description) for f in err.field_violations] == [
                (f["field"], f["description"]) for f in want.get("fieldViolations", [])
            ], f"{note}\n{err}"
            assert sorted(err.missing_digests) == want.get("missingDigests", []), f"{note}\n{err}"


@pytest.mark.server
@pytest.mark.parametrize("path", EXCHANGES, ids=[p.stem for p in EXCHANGES])
def test_exchange(path: Path, tmp_path: Path) -> None:
    steps = json.loads(path.read_text())["steps"]
    srv = start_server([], tmp_path / "stderr.log")
    try:
        with gpusched.Client(srv.address, timeout=30) as client:
            _replay(client, steps)
    finally:
        srv.stop()


def _cluster() -> list[v1.Node]:
    nodes = []
    for i in range(10):
        n = v1.Node(name=f"py-byref-{i:02d}")
        for j in range(4):
            n.cards.add(
                id=f"{n.name}-gpu{j}",
                index=j,
                type="NVIDIA-A100",
                slots=10,
                total_mem_mib=40960,
                total_cores=100,
                health=v1.CardHealth.CARD_HEALTH_HEALTHY,
            )
        nodes.append(n)
    return nodes


def _book(nodes: list[v1.Node], r: v1.AllocationResult) -> None:
    for n in nodes:
        if n.name != r.node_name:
            continue
        for ct in r.containers:
            for a in ct.cards:
                for c in n.cards:
                    if c.id == a.card_id:
                        c.usage.used_slots += 1
                        c.usage.used_mem_mib += a.mem_mib
                        c.usage.used_cores += a.cores_percent


def _pod() -> v1.Workload:
    return gpusched.kubernetes_workload(
        containers={"c0": gpusched.gpu_limits(1, gpumem_mib=10000)}, name="p", namespace="default"
    )


@pytest.mark.server
def test_by_reference_answers_like_whole_nodes(address: str) -> None:
    nodes = _cluster()
    with gpusched.Client(address) as by_ref, gpusched.Client(address, by_reference=False) as whole:
        for _ in range(6):
            req = v1.AllocateRequest(nodes=nodes, workload=_pod())
            want = whole.allocate(req)
            got = by_ref.allocate(req)
            assert got == want
            _book(nodes, got.result)
        assert by_ref.acknowledged_parts >= 10
        assert whole.acknowledged_parts == 0
        bad = v1.Node()
        bad.CopyFrom(nodes[0])
        bad.cards[0].health = v1.CardHealth.CARD_HEALTH_UNSPECIFIED
        with pytest.raises(gpusched.InvalidArgumentError) as info:
            by_ref.allocate(v1.AllocateRequest(nodes=[nodes[1], bad], workload=_pod()))
        assert info.value.violated_fields == ["nodes[1].cards[0].health"]


@pytest.mark.server
def test_async_by_reference(address: str) -> None:
    async def go() -> None:
        nodes = _cluster()[:3]
        async with gpusched.AsyncClient(address) as c:
            for _ in range(3):
                r = await c.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
                assert r.result.placed
                _book(nodes, r.result)
            assert c.acknowledged_parts >= 3

    asyncio.run(go())


class _OldPlacement(AllocateOnlyPlacement):
    """A server that predates ``node_refs``: it reads only ``nodes`` and sets no
    ``gpusched-node-refs`` header (here: drops the references, counts them, asks the real server
    with whole nodes)."""

    def __init__(self, behind: gpusched.Client) -> None:
        self.behind = behind
        self.refs_seen = 0
        self.nodes_seen = 0

    def Allocate(self, request: v1.AllocateRequest, context: grpc.ServicerContext) -> v1.AllocateResponse:
        if len(request.node_refs):
            self.refs_seen += 1
        if len(request.nodes):
            self.nodes_seen += 1
        r = v1.AllocateRequest()
        r.CopyFrom(request)
        r.ClearField("node_refs")
        return self.behind.allocate(r)


@pytest.mark.server
def test_old_server_without_the_header_gets_whole_nodes(address: str) -> None:
    nodes = _cluster()[:5]
    for n in nodes:
        n.name = n.name.replace("py-byref", "py-old")
        for c in n.cards:
            c.id = c.id.replace("py-byref", "py-old")
    with gpusched.Client(address, by_reference=False) as behind, gpusched.Client(
        address, by_reference=False
    ) as whole:
        old = _OldPlacement(behind)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        v1.add_PlacementServiceServicer_to_server(old, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with gpusched.Client(f"127.0.0.1:{port}") as client:
                for _ in range(4):
                    req = v1.AllocateRequest(nodes=nodes, workload=_pod())
                    want = whole.allocate(req)
                    got = client.allocate(req)
                    assert got == want and got.result.placed
                    _book(nodes, got.result)
                assert old.refs_seen == 0
                assert old.nodes_seen == 4
                assert not client.server_reads_refs
                assert client.acknowledged_parts == 0
        finally:
            server.stop(None)
    # The real server sets the header: a client of it switches after its first answer.
    with gpusched.Client(address) as direct:
        assert not direct.server_reads_refs
        direct.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
        assert direct.server_reads_refs

    async def go() -> None:
        async with gpusched.AsyncClient(address) as c:
            assert not c.server_reads_refs
            await c.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
            assert c.server_reads_refs

    asyncio.run(go())

"""The sync and asyncio clients against the live server."""

from __future__ import annotations

import asyncio

import grpc
import pytest

import gpusched
from gpusched import v1
from gpusched import workload as wl

from conftest import RunningServer, TlsFiles
from helpers import BAD_WEIGHTS, gpu_pod, node, two_nodes

pytestmark = pytest.mark.server


def test_allocate_sync(address: str) -> None:
    with gpusched.Client(address) as client:
        resp = client.allocate(v1.AllocateRequest(nodes=two_nodes(), workload=gpu_pod(2, gpumem_mib=8000)))
    r = resp.result
    assert r.placed and r.requests_gpu
    assert r.node_name in ("node-a", "node-b")
    assert r.feasible_node_count == 2
    [c] = r.containers
    assert c.container_name == "main" and not c.init
    assert len(c.cards) == 2
    assert all(card.mem_mib == 8000 for card in c.cards)
    assert r.effective_policy.gpu_policy_text


def test_allocate_async(address: str) -> None:
    async def run() -> v1.AllocateResponse:
        async with gpusched.AsyncClient(address) as client:
            return await client.allocate(
                v1.AllocateRequest(nodes=two_nodes(), workload=gpu_pod(2, gpumem_mib=8000))
            )

    sync = gpusched.Client(address).allocate(
        v1.AllocateRequest(nodes=two_nodes(), workload=gpu_pod(2, gpumem_mib=8000))
    )
    assert asyncio.run(run()) == sync


def test_async_concurrent_calls(address: str) -> None:
    async def run() -> list[v1.FilterResponse]:
        async with gpusched.AsyncClient(address) as client:
            req = v1.FilterRequest(nodes=two_nodes(), workload=gpu_pod(1))
            return await asyncio.gather(*(client.filter(req) for _ in range(20)))

    answers = asyncio.run(run())
    assert all(a == answers[0] for a in answers)
    assert list(answers[0].feasible_node_names) == ["node-a", "node-b"]


def test_filter_and_score_reasons(address: str) -> None:
    # 3 cards: node-a (2 cards) cannot host it, node-b (4 cards) can.
    req_nodes = two_nodes()
    with gpusched.Client(address) as client:
        f = client.filter(v1.FilterRequest(nodes=req_nodes, workload=gpu_pod(3)))
        s = client.score(v1.ScoreRequest(nodes=req_nodes, workload=gpu_pod(3)))
    assert list(f.feasible_node_names) == ["node-b"]
    [failed] = f.failed_nodes
    assert failed.node_name == "node-a"
    assert [r.reason for r in failed.reasons] == [v1.REASON_NODE_INSUFFICIENT_DEVICE]
    assert failed.reasons[0].name == "NodeInsufficientDevice"
    assert "NodeInsufficientDevice" in failed.message
    assert failed.unresolvable
    assert [x.node_name for x in s.scores] == ["node-b"]
    assert list(s.failed_nodes) == list(f.failed_nodes)


def test_no_gpu_workload_passes_everywhere(address: str) -> None:
    pod = wl.kubernetes_workload(containers={"web": {"cpu": "1"}})
    with gpusched.Client(address) as client:
        f = client.filter(v1.FilterRequest(nodes=two_nodes(), workload=pod))
    assert not f.requests_gpu
    assert list(f.feasible_node_names) == ["node-a", "node-b"]


def test_allocate_batch_all_or_nothing(address: str) -> None:
    nodes = [node("only", 1)]
    with gpusched.Client(address) as client:
        resp = client.allocate_batch(
            v1.AllocateBatchRequest(
                nodes=nodes,
                workloads=[gpu_pod(1, gpucores=100), gpu_pod(1, gpucores=100)],
                all_or_nothing=True,
                return_updated_nodes=True,
            )
        )
    assert not resp.all_placed
    assert [r.placed for r in resp.results] == [False, False]
    assert [r.rolled_back for r in resp.results] == [True, False]
    assert resp.results[0].node_name == "only"  # where it fitted before the roll-back
    # rolled back: usage unchanged (compared by value: an empty usage may come back set)
    assert [(n.name, [(c.id, c.usage.used_slots, c.usage.used_mem_mib, c.usage.used_cores) for c in n.cards])
            for n in resp.updated_nodes] == [("only", [("GPU-only-0", 0, 0, 0)])]


def test_normalize_inventory(address: str) -> None:
    raw = [
        v1.RawCard(
            uuid=f"GPU-{i}",
            index=i,
            model_name="NVIDIA A100-SXM4-40GB",
            total_memory_bytes=40 * 1024**3,
            health=v1.CARD_HEALTH_HEALTHY,
        )
        for i in (1, 0)
    ]
    with gpusched.Client(address) as client:
        resp = client.normalize_inventory(v1.NormalizeInventoryRequest(node_name="n", cards=raw))
    assert [c.id for c in resp.cards] == ["GPU-0", "GPU-1"]
    assert all(c.slots > 0 and c.total_mem_mib > 0 for c in resp.cards)
    assert not resp.skipped


def test_invoke_by_path(address: str) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    with gpusched.Client(address) as client:
        got = client.invoke("/gpusched.v1.PlacementService/ValidateWorkload", req)
        assert got == client.validate_workload(req)
        with pytest.raises(ValueError):
            client.invoke("/gpusched.v1.PlacementService/Nope", req)


# --- errors --------------------------------------------------------------------------------------


def _check_weights_error(e: gpusched.InvalidArgumentError) -> None:
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.status is not None and e.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert e.field_violations, f"no field violations in {e}"
    assert any("hami.io/device-scoring-weights" in f for f in e.violated_fields), e.violated_fields
    assert all(v.description for v in e.field_violations)
    assert e.method == "/gpusched.v1.PlacementService/Allocate"


def test_invalid_annotation_sync(address: str) -> None:
    with gpusched.Client(address) as client:
        with pytest.raises(gpusched.InvalidArgumentError) as info:
            client.allocate(v1.AllocateRequest(nodes=two_nodes(), workload=gpu_pod(1, BAD_WEIGHTS)))
    _check_weights_error(info.value)
    assert isinstance(info.value, gpusched.GpuschedError)
    assert "hami.io/device-scoring-weights" in str(info.value)


def test_invalid_annotation_async(address: str) -> None:
    async def run() -> None:
        async with gpusched.AsyncClient(address) as client:
            await client.allocate(v1.AllocateRequest(nodes=two_nodes(), workload=gpu_pod(1, BAD_WEIGHTS)))

    with pytest.raises(gpusched.InvalidArgumentError) as info:
        asyncio.run(run())
    _check_weights_error(info.value)


def test_validate_workload_reports_violations(address: str) -> None:
    with gpusched.Client(address) as client:
        bad = client.validate_workload(v1.ValidateWorkloadRequest(workload=gpu_pod(1, BAD_WEIGHTS)))
        good = client.validate_workload(v1.ValidateWorkloadRequest(workload=gpu_pod(1, gpumem_mib=1000)))
    assert not bad.valid
    assert any("hami.io/device-scoring-weights" in v.field for v in bad.violations)
    assert good.valid and good.requests_gpu and not good.violations
    [c] = good.containers
    assert c.container_name == "main" and c.gpu_count == 1 and c.mem_mib == 1000


def test_duplicate_node_name_is_invalid_argument(address: str) -> None:
    with gpusched.Client(address) as client:
        with pytest.raises(gpusched.InvalidArgumentError) as info:
            client.filter(v1.FilterRequest(nodes=[node("same"), node("same")], workload=gpu_pod(1)))
    assert info.value.field_violations


# --- timeouts ------------------------------------------------------------------------------------


def _big_filter() -> v1.FilterRequest:
    # ~2 MB: 4,000 nodes x 8 cards, with explanations: far more than 1 ms of work for any server
    nodes = [node(f"node-{i:04d}", 8) for i in range(4000)]
    return v1.FilterRequest(nodes=nodes, workload=gpu_pod(1), options=v1.PlacementOptions(explain=True))


def test_default_timeout_and_override(address: str) -> None:
    big = _big_filter()
    with gpusched.Client(address, timeout=1e-3) as client:
        assert client.timeout == 1e-3
        client.wait_ready(timeout=10)
        with pytest.raises((gpusched.DeadlineExceededError, gpusched.CallCancelledError)) as info:
            client.filter(big)
        assert info.value.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
        assert len(client.filter(big, timeout=60).feasible_node_names) == 4000
        assert len(client.filter(big, timeout=None).feasible_node_names) == 4000
        with pytest.raises((gpusched.DeadlineExceededError, gpusched.CallCancelledError)):
            client.filter(big, timeout=gpusched.DEFAULT)


def test_async_timeout(address: str) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    big = _big_filter()

    async def run() -> None:
        async with gpusched.AsyncClient(address, timeout=1e-3) as client:
            await client.wait_ready(timeout=10)
            with pytest.raises((gpusched.DeadlineExceededError, gpusched.CallCancelledError)):
                await client.filter(big)
            assert (await client.validate_workload(req, timeout=30)).requests_gpu
            assert len((await client.filter(big, timeout=60)).feasible_node_names) == 4000

    asyncio.run(run())


def test_wait_ready(address: str) -> None:
    with gpusched.Client(address) as client:
        client.wait_ready(timeout=10)

    async def run() -> None:
        async with gpusched.AsyncClient(address) as client:
            await client.wait_ready(timeout=10)

    asyncio.run(run())


# --- TLS -----------------------------------------------------------------------------------------


def test_tls(tls_server: RunningServer, tls_files: TlsFiles) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    with gpusched.Client(tls_server.address, root_ca=tls_files.ca_cert, timeout=10) as client:
        assert client.validate_workload(req).valid
    # root_ca as PEM bytes, and the server name checked against "localhost"
    with gpusched.Client(
        tls_server.address, root_ca=tls_files.ca_cert.read_bytes(), tls_server_name="localhost", timeout=10
    ) as client:
        assert client.validate_workload(req).valid

    async def run() -> bool:
        async with gpusched.AsyncClient(tls_server.address, root_ca=tls_files.ca_cert, timeout=10) as c:
            return (await c.validate_workload(req)).valid

    assert asyncio.run(run())


def test_tls_rejects_untrusted_server(tls_server: RunningServer, tls_files: TlsFiles) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    with gpusched.Client(tls_server.address, root_ca=tls_files.other_ca_cert, timeout=5) as client:
        with pytest.raises(gpusched.UnavailableError):
            client.validate_workload(req)
    with gpusched.Client(tls_server.address, timeout=5) as client:  # plaintext to a TLS port
        with pytest.raises(gpusched.UnavailableError):
            client.validate_workload(req)


def test_mtls(mtls_server: RunningServer, tls_files: TlsFiles) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    with gpusched.Client(
        mtls_server.address,
        root_ca=tls_files.ca_cert,
        client_cert=tls_files.client_cert,
        client_key=tls_files.client_key,
        timeout=10,
    ) as client:
        assert client.validate_workload(req).valid

    async def run() -> bool:
        async with gpusched.AsyncClient(
            mtls_server.address,
            root_ca=tls_files.ca_cert,
            client_cert=tls_files.client_cert,
            client_key=tls_files.client_key,
            timeout=10,
        ) as c:
            return (await c.validate_workload(req)).valid

    assert asyncio.run(run())


def test_mtls_rejects_clients_without_a_trusted_cert(mtls_server: RunningServer, tls_files: TlsFiles) -> None:
    req = v1.ValidateWorkloadRequest(workload=gpu_pod(1))
    with gpusched.Client(mtls_server.address, root_ca=tls_files.ca_cert, timeout=5) as client:
        with pytest.raises(gpusched.GpuschedError) as no_cert:
            client.validate_workload(req)
    with gpusched.Client(
        mtls_server.address,
        root_ca=tls_files.ca_cert,
        client_cert=tls_files.other_client_cert,
        client_key=tls_files.other_client_key,
        timeout=5,
    ) as client:
        with pytest.raises(gpusched.GpuschedError) as wrong_ca:
            client.validate_workload(req)
    for e in (no_cert.value, wrong_ca.value):
        assert e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED), e

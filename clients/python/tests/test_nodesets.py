"""Node sets (``NodeSetRef``) done for the caller: the plan rules and the set digest without a
server, then the sync and asyncio clients against real servers, observed through /metrics."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

import gpusched
from gpusched import _byref, v1
from helpers import AllocateOnlyPlacement

from conftest import TESTDATA, RunningServer, start_server
from test_byref import _book, _pod

SET_INSERTS = "gpusched_node_sets_inserts_total"
SET_HITS = "gpusched_node_sets_hits_total"
SET_MISSES = "gpusched_node_sets_misses_total"
INV_INSERTS = 'gpusched_node_cache_inserts_total{part="inventory"}'
INV_HITS = 'gpusched_node_cache_hits_total{part="inventory"}'
INV_MISSES = 'gpusched_node_cache_misses_total{part="inventory"}'


def _nodes(prefix: str, n: int) -> list[v1.Node]:
    out = []
    for i in range(n):
        node = v1.Node(name=f"{prefix}-{i:02d}")
        for j in range(4):
            node.cards.add(
                id=f"{node.name}-gpu{j}",
                index=j,
                type="NVIDIA-A100",
                slots=10,
                total_mem_mib=40960,
                total_cores=100,
                health=v1.CardHealth.CARD_HEALTH_HEALTHY,
            )
        out.append(node)
    return out


def _scrape(srv: RunningServer) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{srv.metrics_address}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


# --- the rules, without a server ----------------------------------------------------------------


def _prepared(b: _byref.ByRef, nodes: list[v1.Node]) -> list[_byref.PreparedNode]:
    return b.prepare(nodes)


def test_plan_rules() -> None:
    b = _byref.ByRef()
    nodes = _nodes("rules", 64)  # budget max(8, 64 // 8) = 8
    assert b.plan(_prepared(b, nodes)) == _byref.Plan(), "before the header: full, not kept"
    b.server_reads_sets = True
    assert b.plan(_prepared(b, nodes[: _byref.MIN_SET_NODES - 1])) == _byref.Plan()
    assert b.plan(_prepared(b, nodes)) == _byref.Plan(keep=True), "no base yet"
    b.kept(_prepared(b, nodes))
    key = b.base_key()
    assert key is not None and key[1] == 64 * 64

    same = b.plan(_prepared(b, nodes))
    assert same.base is not None and same.changed == () and same.removed == ()

    changed = [v1.Node() for _ in nodes]
    for c, n in zip(changed, nodes):
        c.CopyFrom(n)
    changed[5].cards[0].usage.used_slots = 1
    changed = changed[:10] + changed[12:] + _nodes("rules-new", 1)
    p = b.plan(_prepared(b, changed))
    assert p.base is not None
    assert p.changed == (5, len(changed) - 1)
    assert p.removed == ("rules-10", "rules-11")
    assert p.position(1) == len(changed) - 1
    assert [n.name for n in p.sent(_prepared(b, changed))] == ["rules-05", "rules-new-00"]

    over = [v1.Node() for _ in nodes]
    for c, n in zip(over, nodes):
        c.CopyFrom(n)
    for n in over[:9]:
        n.cards[0].usage.used_slots = 1
    assert b.plan(_prepared(b, over)) == _byref.Plan(keep=True), "9 changed of 64"
    assert b.plan(_prepared(b, nodes[:55])) == _byref.Plan(keep=True), "9 removed of 64"
    assert b.plan(_prepared(b, over[4:])) == _byref.Plan(keep=True), "5 changed, 4 removed"
    assert b.plan(_prepared(b, [*nodes, nodes[3]])) == _byref.Plan(keep=True), "a name twice"

    b.drop_base((bytes(32), 64))
    assert b.base_key() == key, "dropped for another digest"
    b.drop_base(key)
    assert b.base_key() is None


def test_fields_map_back_to_the_callers_positions() -> None:
    assert _byref.field_back("node_refs[2].inventory.cards[0].health") == "nodes[2].cards[0].health"
    assert _byref.field_back("node_refs[2].inventory_digest") == "nodes[2]"
    assert _byref.field_back("workload.x") == "workload.x"
    p = _byref.Plan(base=_byref.Base(key=(bytes(32), 0), nodes={}), changed=(41,))
    assert _byref.field_back("node_refs[0].inventory.cards[1].id", p.position) == "nodes[41].cards[1].id"
    assert _byref.field_back("node_refs[1].usage", lambda j: j + 5) == "nodes[6].usage"


def test_set_key_agrees_with_the_shared_exchange() -> None:
    steps = json.loads((TESTDATA / "exchanges" / "by-reference.json").read_text())["steps"]
    checked = 0
    for step, following in zip(steps, steps[1:]):
        keep = json_format.ParseDict(step["request"], v1.AllocateRequest())
        if not keep.node_set.keep:
            continue
        nodes = [
            _byref.PreparedNode(
                name="",
                node=b"",
                inventory=b"",
                inventory_key=(r.inventory_digest.hash, r.inventory_digest.size_bytes),
                usage=b"",
                usage_key=(r.usage_digest.hash, r.usage_digest.size_bytes)
                if r.HasField("usage_digest")
                else None,
            )
            for r in keep.node_refs
        ]
        base = json_format.ParseDict(following["request"], v1.AllocateRequest()).node_set.base
        assert _byref.set_key(nodes) == (base.hash, base.size_bytes)
        checked += 1
    assert checked, "no kept set in the exchange"


# --- against servers ----------------------------------------------------------------------------


def _allocate_both(client: gpusched.Client, whole: gpusched.Client, nodes: list[v1.Node]) -> None:
    want = whole.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
    got = client.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
    assert got == want and got.result.placed
    _book(nodes, got.result)


@pytest.mark.server
def test_changes_only_after_the_second_call(tmp_path: Path) -> None:
    srv = start_server([], tmp_path / "stderr.log")
    try:
        nodes = _nodes("py-sets", 20)
        with gpusched.Client(srv.address) as client, gpusched.Client(
            srv.address, by_reference=False
        ) as whole:
            for _ in range(10):
                _allocate_both(client, whole, nodes)
            m = _scrape(srv)
            # The first call whole (the server's headers not yet seen), the second by reference
            # inline and kept as a node set, then each call names that set and sends only the
            # node whose usage changed: one inventory hit (and one new usage part) per call.
            assert m[INV_INSERTS] == 20
            assert m[INV_MISSES] == 0
            assert m[SET_INSERTS] == 1, "one set kept"
            assert m[SET_HITS] == 8, "the eight later calls sent changes only"
            assert m[INV_HITS] == 8, "one changed node per call"
            base = client.node_set_base
            assert base is not None and base.startswith("sha256/") and base.endswith("/1280")
            assert whole.node_set_base is None, "by_reference=False: no node sets either"

            # Filter, Score and AllocateBatch send changes to the same set, and answer as whole
            # nodes.
            f = v1.FilterRequest(nodes=nodes, workload=_pod())
            assert client.filter(f) == whole.filter(f)
            s = v1.ScoreRequest(nodes=nodes, workload=_pod())
            assert client.score(s) == whole.score(s)
            b = v1.AllocateBatchRequest(nodes=nodes, workloads=[_pod(), _pod()], return_updated_nodes=True)
            assert client.allocate_batch(b) == whole.allocate_batch(b)
            assert _scrape(srv)[SET_HITS] == 11

            # A bad node among the changes is named as the caller's nodes[i].
            bad = [v1.Node() for _ in nodes]
            for c, n in zip(bad, nodes):
                c.CopyFrom(n)
            bad[13].cards[2].health = v1.CardHealth.CARD_HEALTH_UNSPECIFIED
            with pytest.raises(gpusched.InvalidArgumentError) as info:
                client.allocate(v1.AllocateRequest(nodes=bad, workload=_pod()))
            assert info.value.violated_fields == ["nodes[13].cards[2].health"]
            assert _scrape(srv)[SET_HITS] == 12, "the bad node went as a change to the set"

            # A name twice goes in full: the answer is the one to whole nodes.
            dup = [*nodes, nodes[4]]
            with pytest.raises(gpusched.InvalidArgumentError) as w:
                whole.allocate(v1.AllocateRequest(nodes=dup, workload=_pod()))
            with pytest.raises(gpusched.InvalidArgumentError) as g:
                client.allocate(v1.AllocateRequest(nodes=dup, workload=_pod()))
            assert g.value.violated_fields == w.value.violated_fields
    finally:
        srv.stop()


@pytest.mark.server
def test_async_changes_only(tmp_path: Path) -> None:
    srv = start_server([], tmp_path / "stderr.log")

    async def go() -> None:
        nodes = _nodes("py-async-sets", 20)
        async with gpusched.AsyncClient(srv.address) as c, gpusched.AsyncClient(
            srv.address, by_reference=False
        ) as whole:
            for _ in range(6):
                want = await whole.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
                got = await c.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
                assert got == want and got.result.placed
                _book(nodes, got.result)
            assert c.node_set_base is not None

    try:
        asyncio.run(go())
        m = _scrape(srv)
        assert m[SET_INSERTS] == 1 and m[SET_HITS] == 4
    finally:
        srv.stop()


@pytest.mark.server
def test_a_restart_between_calls_is_transparent(tmp_path: Path) -> None:
    first = start_server([], tmp_path / "first.log")
    addr = first.address
    nodes = _nodes("py-restart", 20)
    with gpusched.Client(addr, wait_for_ready=True) as client:
        try:
            # Whole (the headers not yet seen), by reference inline and kept as a set, a change.
            for _ in range(3):
                r = client.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
                _book(nodes, r.result)
            assert client.acknowledged_parts >= 20
            before = client.node_set_base
            assert before is not None
        finally:
            first.stop()
        second = start_server(["--listen", addr], tmp_path / "second.log")
        try:
            with gpusched.Client(addr, by_reference=False, wait_for_ready=True) as whole:
                # The client still names its set: the new server answers FAILED_PRECONDITION
                # naming it, the client sends everything by reference (missing again), then
                # inline; the caller sees an answer.
                _allocate_both(client, whole, nodes)
                m = _scrape(second)
                assert m[SET_MISSES] == 1, "the lost set was noticed"
                assert m[INV_MISSES] >= 20, "the lost parts were noticed"
                assert m[SET_INSERTS] == 1, "the set was kept again"
                assert client.node_set_base not in (None, before)
                _allocate_both(client, whole, nodes)
                assert _scrape(second)[SET_HITS] == 1, "changes only again"
        finally:
            second.stop()



@pytest.mark.server
def test_a_truncated_missing_list_sends_every_part_inline_once(tmp_path: Path) -> None:
    """After a restart the new server misses 60+ parts but lists at most 20 (plus a ``MORE``
    entry): the client sends every part inline at once instead of paging through the list."""
    first = start_server([], tmp_path / "first.log")
    addr = first.address
    nodes = _nodes("py-more", 60)
    with gpusched.Client(addr, wait_for_ready=True) as client:
        try:
            for _ in range(2):
                r = client.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
                _book(nodes, r.result)
        finally:
            first.stop()
        second = start_server(["--listen", addr], tmp_path / "second.log")
        try:
            with gpusched.Client(addr, by_reference=False, wait_for_ready=True) as whole:
                _allocate_both(client, whole, nodes)
                assert _scrape(second)[INV_MISSES] == 60, "each inventory missed once"
        finally:
            second.stop()

class _RefsOnly(AllocateOnlyPlacement):
    """A server that reads ``node_refs`` (and says so) but predates node sets: it sets no
    ``gpusched-node-sets`` header, counts requests naming a set and asks the real server."""

    def __init__(self, behind: v1.PlacementServiceStub) -> None:
        self.behind = behind
        self.sets_seen = 0

    def Allocate(self, request: v1.AllocateRequest, context: grpc.ServicerContext) -> v1.AllocateResponse:
        if request.HasField("node_set"):
            self.sets_seen += 1
        context.send_initial_metadata(((_byref.NODE_REFS_HEADER, "1"),))
        resp: v1.AllocateResponse = self.behind.Allocate(request, timeout=30)
        return resp


@pytest.mark.server
def test_no_node_set_for_a_server_without_the_header(address: str) -> None:
    nodes = _nodes("py-refs-only", 20)
    with grpc.insecure_channel(address) as behind, gpusched.Client(address, by_reference=False) as whole:
        refs_only = _RefsOnly(v1.PlacementServiceStub(behind))
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        v1.add_PlacementServiceServicer_to_server(refs_only, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with gpusched.Client(f"127.0.0.1:{port}") as client:
                for _ in range(5):
                    _allocate_both(client, whole, nodes)
                assert client.server_reads_refs and client.acknowledged_parts >= 20
                assert refs_only.sets_seen == 0
                assert client.node_set_base is None
        finally:
            server.stop(None)


@pytest.mark.server
def test_the_callers_own_node_set_goes_as_it_is(address: str) -> None:
    nodes = _nodes("py-own-set", 20)
    lost = "nodeset/sha256/" + "0" * 64 + "/64"

    def request() -> v1.AllocateRequest:
        r = v1.AllocateRequest(nodes=nodes, workload=_pod())
        r.node_set.base.CopyFrom(v1.Digest(hash=bytes(32), size_bytes=64))
        return r

    with gpusched.Client(address) as client:
        # The headers seen and a set of the client's own kept: the client would name it.
        for _ in range(2):
            client.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
        assert client.node_set_base is not None
        with pytest.raises(gpusched.GpuschedError) as info:
            client.allocate(request())
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert lost in info.value.missing_digests

    async def go() -> Any:
        async with gpusched.AsyncClient(address) as c:
            for _ in range(2):
                await c.allocate(v1.AllocateRequest(nodes=nodes, workload=_pod()))
            assert c.node_set_base is not None
            with pytest.raises(gpusched.GpuschedError) as info:
                await c.allocate(request())
            return info.value

    err = asyncio.run(go())
    assert lost in err.missing_digests


@pytest.mark.server
def test_replicas_behind_one_address_answer_like_whole_nodes(tmp_path: Path) -> None:
    """Two replicas behind one channel, round robin (gRPC Python has no random picker): a call
    whose changes go to the replica without the client's set misses and is resent in full; the
    answers stay those to whole nodes."""
    r1 = start_server([], tmp_path / "r1.log")
    r2 = start_server([], tmp_path / "r2.log")
    try:
        options = [("grpc.lb_policy_name", "round_robin"), ("grpc.default_authority", "replicas")]
        nodes = _nodes("py-replicas", 20)
        with gpusched.Client(
            f"ipv4:{r1.address},{r2.address}", options=options, wait_for_ready=True
        ) as client, gpusched.Client(r1.address, by_reference=False) as whole:
            for _ in range(20):
                _allocate_both(client, whole, nodes)
        stats = [_scrape(r) for r in (r1, r2)]
        for i, m in enumerate(stats, 1):
            print(
                f"replica {i}: sets kept {m[SET_INSERTS]}, hit {m[SET_HITS]}, missed "
                f"{m[SET_MISSES]}; inventories converted {m[INV_INSERTS]}"
            )
        assert sum(m[SET_INSERTS] for m in stats) >= 1, "a set was kept"
        assert sum(m[SET_MISSES] for m in stats) >= 1, "a replica without the set was asked"
    finally:
        r1.stop()
        r2.stop()

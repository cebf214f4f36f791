"""The Kubernetes workload helpers and the generated package (no server needed)."""

from __future__ import annotations

import pickle

import pytest
from google.protobuf import json_format

import gpusched
from gpusched import v1
from gpusched import workload as wl
from gpusched._gen.gpusched.v1 import inventory_pb2, placement_pb2, types_pb2


def test_gpu_limits() -> None:
    assert wl.gpu_limits() == {"nvidia.com/gpu": "1"}
    assert wl.gpu_limits(2, gpumem_mib=16000, gpumem_percent=50, gpucores=30) == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "16000",
        "nvidia.com/gpumem-percentage": "50",
        "nvidia.com/gpucores": "30",
    }


def test_kubernetes_workload_forms_agree() -> None:
    a = wl.kubernetes_workload(
        name="p",
        namespace="ns",
        uid="u",
        annotations={wl.NUMA_BIND: "true"},
        init_containers={"init": {wl.GPU: 1}},
        containers=[wl.container("main", wl.gpu_limits(2, gpucores=50), requests={"cpu": "1"}), wl.container("side")],
    )
    assert a.WhichOneof("spec") == "kubernetes"
    k = a.kubernetes
    assert dict(k.annotations) == {"nvidia.com/numa-bind": "true"}
    assert [c.name for c in k.init_containers] == ["init"]
    assert dict(k.init_containers[0].limits) == {"nvidia.com/gpu": "1"}
    assert [c.name for c in k.containers] == ["main", "side"]
    assert dict(k.containers[0].limits) == {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"}
    assert dict(k.containers[0].requests) == {"cpu": "1"}

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": {"nvidia.com/numa-bind": "true"}},
        "spec": {
            "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "2", "nvidia.com/gpucores": 50},
                        "requests": {"cpu": "1"},
                    },
                },
                {"name": "side"},
            ],
        },
    }
    assert wl.workload_from_pod(pod) == a
    assert gpusched.kubernetes_workload is wl.kubernetes_workload


def test_helpers_reject_bad_values() -> None:
    with pytest.raises(TypeError):
        wl.container("c", {wl.GPU: 1.5})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        wl.container("c", {wl.GPU: True})
    with pytest.raises(TypeError):
        wl.kubernetes_workload(annotations={wl.NUMA_BIND: True})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        wl.kubernetes_workload(containers=[v1.TypedWorkloadSpec()])  # type: ignore[list-item]


def test_generated_modules_live_inside_the_package() -> None:
    assert v1.Node.__module__ == "gpusched._gen.gpusched.v1.types_pb2"
    assert v1.AllocateRequest.__module__ == "gpusched._gen.gpusched.v1.placement_pb2"
    assert v1.Node.DESCRIPTOR.full_name == "gpusched.v1.Node"
    assert placement_pb2.DESCRIPTOR.name == "gpusched/v1/placement.proto"
    n = v1.Node(name="a", cards=[v1.Card(id="GPU-1", health=v1.CARD_HEALTH_HEALTHY)])
    assert pickle.loads(pickle.dumps(n)) == n
    assert json_format.MessageToDict(n) == {"name": "a", "cards": [{"id": "GPU-1", "health": "CARD_HEALTH_HEALTHY"}]}


def test_v1_reexports_everything() -> None:
    names = set()
    for mod in (types_pb2, placement_pb2, inventory_pb2):
        fd = mod.DESCRIPTOR
        names |= set(fd.message_types_by_name)
        for e in fd.enum_types_by_name.values():
            names.add(e.name)
            names |= {val.name for val in e.values}
        for s in fd.services_by_name:
            names |= {f"{s}Stub", f"{s}Servicer", f"add_{s}Servicer_to_server"}
    assert names == set(v1.__all__)
    for n in v1.__all__:
        assert getattr(v1, n) is not None
    assert v1.NodePolicy.NODE_POLICY_BINPACK == v1.NODE_POLICY_BINPACK == 1

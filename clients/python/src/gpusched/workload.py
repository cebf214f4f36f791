"""Helpers that build a Kubernetes-form :class:`gpusched.v1.Workload` (pod annotations plus
per-container resource limits), parsed by the server exactly like the admission webhook does::

    from gpusched import workload as wl

    pod = wl.kubernetes_workload(
        name="trainer",
        annotations={wl.GPU_SCHEDULER_POLICY: "binpack", wl.DEVICE_SCORING_WEIGHTS: "slot=1,core=2,memory=1"},
        containers=[wl.container("main", wl.gpu_limits(2, gpumem_mib=16000, gpucores=50))],
    )
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from gpusched import v1

__all__ = [
    "DEVICE_CORDON",
    "DEVICE_SCORING_WEIGHTS",
    "GPU",
    "GPUCORES",
    "GPUMEM",
    "GPUMEM_PERCENTAGE",
    "GPU_SCHEDULER_POLICY",
    "NODE_SCHEDULER_POLICY",
    "NOUSE_GPUTYPE",
    "NOUSE_GPUUUID",
    "NUMA_BIND",
    "USE_GPUTYPE",
    "USE_GPUUUID",
    "VGPU_MODE",
    "Containers",
    "Quantity",
    "container",
    "gpu_limits",
    "kubernetes_workload",
    "workload_from_pod",
]

# Resource names (container limits / requests).
GPU: Final = "nvidia.com/gpu"
GPUMEM: Final = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
GPUCORES: Final = "nvidia.com/gpucores"

# Pod annotations.
NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NUMA_BIND: Final = "nvidia.com/numa-bind"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"

# Node annotation (goes into v1.Node.annotations).
DEVICE_CORDON: Final = "hami.io/device-cordon"

#: A Kubernetes resource quantity: a string such as ``"2"`` or ``"16000"``, or an int.
Quantity: TypeAlias = str | int
#: Containers: generated messages, or an ordered mapping of container name to limits.
Containers: TypeAlias = Iterable[v1.KubernetesContainer] | Mapping[str, Mapping[str, Quantity]]


def _quantity(resource: str, value: Quantity) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{resource}: a quantity is a str or an int, got {type(value).__name__}")
    return str(value)


def _quantities(values: Mapping[str, Quantity] | None) -> dict[str, str]:
    return {str(k): _quantity(str(k), v) for k, v in (values or {}).items()}


def gpu_limits(
    gpu: int = 1,
    *,
    gpumem_mib: int | None = None,
    gpumem_percent: int | None = None,
    gpucores: int | None = None,
) -> dict[str, str]:
    """The HAMi resource limits of a GPU container.

    Args:
        gpu: cards wanted (``nvidia.com/gpu``).
        gpumem_mib: memory per card, MiB (``nvidia.com/gpumem``).
        gpumem_percent: memory per card as percent of the card (``nvidia.com/gpumem-percentage``).
        gpucores: compute per card, percent (``nvidia.com/gpucores``).
    """
    limits = {GPU: _quantity(GPU, gpu)}
    if gpumem_mib is not None:
        limits[GPUMEM] = _quantity(GPUMEM, gpumem_mib)
    if gpumem_percent is not None:
        limits[GPUMEM_PERCENTAGE] = _quantity(GPUMEM_PERCENTAGE, gpumem_percent)
    if gpucores is not None:
        limits[GPUCORES] = _quantity(GPUCORES, gpucores)
    return limits


def container(
    name: str,
    limits: Mapping[str, Quantity] | None = None,
    requests: Mapping[str, Quantity] | None = None,
) -> v1.KubernetesContainer:
    """One container in Kubernetes form (``resources.limits`` are read first, then ``requests``)."""
    return v1.KubernetesContainer(name=name, limits=_quantities(limits), requests=_quantities(requests))


def _containers(items: Containers) -> list[v1.KubernetesContainer]:
    if isinstance(items, Mapping):
        return [container(name, limits) for name, limits in items.items()]
    out = []
    for c in items:
        if not isinstance(c, v1.KubernetesContainer):
            raise TypeError(f"expected gpusched.v1.KubernetesContainer, got {type(c).__name__}")
        out.append(c)
    return out


def _annotations(values: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (values or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"annotation {k!r}: keys and values are strings, got {type(v).__name__}")
        out[k] = v
    return out


def kubernetes_workload(
    *,
    containers: Containers = (),
    init_containers: Containers = (),
    annotations: Mapping[str, str] | None = None,
    name: str = "",
    namespace: str = "",
    uid: str = "",
) -> v1.Workload:
    """A workload in Kubernetes form: pod annotations and per-container resources.

    ``containers`` and ``init_containers`` are in pod order: a list of
    :func:`container` messages, or a mapping ``{"name": {"nvidia.com/gpu": 1, ...}}`` of
    container name to limits.
    """
    return v1.Workload(
        name=name,
        namespace=namespace,
        uid=uid,
        kubernetes=v1.KubernetesWorkloadSpec(
            annotations=_annotations(annotations),
            init_containers=_containers(init_containers),
            containers=_containers(containers),
        ),
    )


def _pod_containers(items: Any, where: str) -> list[v1.KubernetesContainer]:
    out = []
    for i, c in enumerate(items or ()):
        if not isinstance(c, Mapping):
            raise TypeError(f"{where}[{i}]: expected a mapping")
        resources = c.get("resources") or {}
        out.append(
            container(
                str(c.get("name", "")),
                limits=resources.get("limits"),
                requests=resources.get("requests"),
            )
        )
    return out


def workload_from_pod(pod: Mapping[str, Any]) -> v1.Workload:
    """A workload from a Pod manifest as a mapping (parsed YAML/JSON, or
    ``ApiClient().sanitize_for_serialization(v1_pod)`` of the Kubernetes Python client).

    Reads ``metadata.{name,namespace,uid,annotations}`` and the ``resources`` of
    ``spec.initContainers`` and ``spec.containers`` (``init_containers`` is accepted too).
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    init = spec.get("initContainers", spec.get("init_containers"))
    return v1.Workload(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        kubernetes=v1.KubernetesWorkloadSpec(
            annotations=_annotations(meta.get("annotations")),
            init_containers=_pod_containers(init, "spec.initContainers"),
            containers=_pod_containers(spec.get("containers"), "spec.containers"),
        ),
    )

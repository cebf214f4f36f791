"""Workload mixes for the fgd policies (``docs/placement-semantics.md`` section 12.1): derive one
from the GPU requests a caller has seen, the way the paper's artifact does (the most popular
shapes covering a share of them), and keep only the card types a request's nodes have::

    from gpusched import mix

    counter = mix.MixCounter()
    counter.add(v1.WorkloadMixShape(gpu_count=1, gpucores_percent=50, gpumem_percent=50), 3)
    options = v1.PlacementOptions(workload_mix=counter.mix(0.95, 64))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from gpusched import v1

__all__ = ["FGD", "MixCounter", "for_card_types"]

#: The value of the fragmentation-aware node and GPU policies in the annotations.
FGD: Final = "fgd"

_Key = tuple[int, int, int, int, tuple[str, ...], int, int]


def _key(s: v1.WorkloadMixShape) -> _Key:
    types = tuple(sorted({t.strip() for t in s.gpu_types if t.strip()}))
    return (
        s.gpu_count,
        s.gpucores_percent,
        s.gpumem_mib,
        s.gpumem_percent,
        types,
        s.cpu_milli,
        s.host_mem_mib,
    )


def _shape(k: _Key, probability: float) -> v1.WorkloadMixShape:
    gpus, cores, mib, pct, types, cpu, mem = k
    return v1.WorkloadMixShape(
        probability=probability,
        gpu_count=gpus,
        gpucores_percent=cores,
        gpumem_mib=mib,
        gpumem_percent=pct,
        gpu_types=list(types),
        cpu_milli=cpu,
        host_mem_mib=mem,
    )


class MixCounter:
    """Counts the shapes seen; with ``limit``, at most that many distinct shapes are kept (a new
    shape seen when full only adds to :attr:`dropped`)."""

    def __init__(self, limit: int | None = None) -> None:
        self._counts: dict[_Key, int] = {}
        self.limit = limit
        self.dropped = 0

    def add(self, shape: v1.WorkloadMixShape, n: int = 1) -> None:
        """Counts ``n`` observations of ``shape`` (its probability is ignored)."""
        if shape.gpu_count == 0 or n <= 0:
            return
        k = _key(shape)
        if k in self._counts:
            self._counts[k] += n
        elif self.limit is not None and len(self._counts) >= self.limit:
            self.dropped += n
        else:
            self._counts[k] = n

    def __len__(self) -> int:
        return len(self._counts)

    def mix(self, coverage: float = 0.95, max_shapes: int = 64) -> v1.WorkloadMix | None:
        """The mix of the most popular shapes (ties: the smaller shape first) that together cover
        at least ``coverage`` of the observations, at most ``max_shapes`` of them, probabilities
        renormalised over the shapes taken. ``None`` when nothing was counted."""
        total = sum(self._counts.values())
        if total == 0 or max_shapes <= 0:
            return None
        ranked = sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))
        want = min(max(coverage, 0.0), 1.0) * total
        taken: list[tuple[_Key, int]] = []
        covered = 0
        for k, c in ranked:
            if len(taken) >= max_shapes or (covered >= want and taken):
                break
            covered += c
            taken.append((k, c))
        return v1.WorkloadMix(shapes=[_shape(k, c / covered) for k, c in taken])


def for_card_types(mix: v1.WorkloadMix, card_types: Iterable[str]) -> v1.WorkloadMix | None:
    """``mix`` for a request whose nodes have cards of ``card_types``: a type entry that matches
    no card type (case-insensitive substring, the use-gputype rule) is dropped, a shape left with
    none is dropped, probabilities renormalised. The service refuses unknown types; such a shape
    changes no decision, so dropping it is exact. ``None`` when no shape is left."""
    have = [t.upper() for t in card_types]

    def known(t: str) -> bool:
        want = t.strip().upper()
        return any(want in h for h in have)

    kept: list[v1.WorkloadMixShape] = []
    for s in mix.shapes:
        types = list(s.gpu_types)
        if types:
            types = [t for t in types if known(t)]
            if not types:
                continue
        c = v1.WorkloadMixShape()
        c.CopyFrom(s)
        del c.gpu_types[:]
        c.gpu_types.extend(types)
        kept.append(c)
    total = sum(s.probability for s in kept)
    if not kept or total <= 0:
        return None
    for s in kept:
        s.probability /= total
    return v1.WorkloadMix(shapes=kept)

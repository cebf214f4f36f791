"""The workload mix helpers (section 12.1 of the contract)."""

from __future__ import annotations

import pytest

from gpusched import mix, v1


def shape(gpus: int, cores: int, *types: str) -> v1.WorkloadMixShape:
    return v1.WorkloadMixShape(
        gpu_count=gpus, gpucores_percent=cores, gpumem_percent=cores, gpu_types=list(types)
    )


def test_the_most_popular_shapes_cover_the_share() -> None:
    c = mix.MixCounter()
    c.add(shape(1, 100), 60)
    c.add(shape(1, 50), 30)
    c.add(shape(2, 100), 8)
    c.add(shape(1, 10), 2)
    m = c.mix(0.95, 64)
    assert m is not None
    assert [s.gpucores_percent for s in m.shapes] == [100, 50, 100]
    assert [s.probability for s in m.shapes] == pytest.approx([60 / 98, 30 / 98, 8 / 98])
    m2 = c.mix(1.0, 2)
    assert m2 is not None and len(m2.shapes) == 2
    assert mix.MixCounter().mix() is None
    bounded = mix.MixCounter(limit=1)
    bounded.add(shape(1, 100))
    bounded.add(shape(1, 50), 3)
    assert (len(bounded), bounded.dropped) == (1, 3)


def test_unknown_types_are_dropped_and_the_rest_renormalised() -> None:
    c = mix.MixCounter()
    c.add(shape(1, 100), 2)
    c.add(shape(1, 50, "v100", "A100"), 1)
    c.add(shape(1, 50, "H100"), 1)
    m = c.mix(1.0, 64)
    assert m is not None
    r = mix.for_card_types(m, ["NVIDIA-A100-SXM4-40GB", "Tesla-T4"])
    assert r is not None
    assert [list(s.gpu_types) for s in r.shapes] == [[], ["A100"]]
    assert [s.probability for s in r.shapes] == pytest.approx([2 / 3, 1 / 3])

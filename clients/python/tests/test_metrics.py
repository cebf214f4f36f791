"""gpusched-server's /metrics read by the Prometheus Python parsers, in both formats the endpoint
negotiates: text format 0.0.4 (``Accept: text/plain; version=0.0.4``) and OpenMetrics
(``Accept: application/openmetrics-text``). Every family has HELP; names carry their units."""

from __future__ import annotations

import re
import urllib.request

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

import gpusched
from gpusched import v1

from conftest import RunningServer


def _scrape(server: RunningServer, accept: str) -> tuple[str, str]:
    m = re.search(r"metrics=(\S+)", server.first_line)
    assert m, server.first_line
    req = urllib.request.Request(f"http://{m.group(1)}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def _check(families: list[Metric]) -> dict[str, Metric]:
    by_name = {f.name: f for f in families}
    for f in families:
        assert f.documentation.strip(), f"{f.name}: no HELP"
        assert f.name == f.name.lower(), f.name
        if "duration" in f.name or "latency" in f.name:
            assert f.name.endswith("_seconds"), f.name
        if "size" in f.name or "memory" in f.name:
            assert f.name.endswith("_bytes"), f.name
    return by_name


@pytest.fixture(scope="module")
def one_call(address: str) -> None:
    # An invalid workload: the call fails, its request size is recorded all the same.
    with gpusched.Client(address) as c, pytest.raises(gpusched.InvalidArgumentError):
        c.validate_workload(v1.ValidateWorkloadRequest(workload=v1.Workload(name="p", namespace="default")))


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("text/plain; version=0.0.4", "text/plain; version=0.0.4"),
        ("application/openmetrics-text; version=1.0.0", "application/openmetrics-text; version=1.0.0"),
    ],
)
def test_metrics_parse_in_both_formats(
    server: RunningServer, one_call: None, accept: str, content_type: str
) -> None:
    got_type, body = _scrape(server, accept)
    assert got_type.startswith(content_type), got_type
    if accept.startswith("text/plain"):
        families = _check(list(text_families(body)))
        # In 0.0.4 a counter family is named after its _total sample.
        requests = "gpusched_requests"
        assert "# TYPE gpusched_requests_total counter" in body
    else:
        families = _check(list(openmetrics_families(body)))  # type: ignore[no-untyped-call]
        requests = "gpusched_requests"
    assert families[requests].type == "counter"
    for name, kind in [
        ("gpusched_request_duration_seconds", "histogram"),
        ("gpusched_request_size_bytes", "histogram"),
        ("gpusched_requests_in_flight", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("gpusched_build_info", "gauge"),
    ]:
        assert name in families, f"{name} missing: {sorted(families)}"
        assert families[name].type == kind, (name, families[name].type)
    info = families["gpusched_build_info"].samples[0]
    assert info.labels["version"] == gpusched.__version__ and info.value == 1
    sizes = [
        s
        for s in families["gpusched_request_size_bytes"].samples
        if s.name.endswith("_count") and s.labels.get("rpc") == "ValidateWorkload"
    ]
    assert sizes and sizes[0].value >= 1

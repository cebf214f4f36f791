"""Error decoding, timeouts and request checks against an in-process Python fake server
(no gpusched-server needed)."""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc
import pytest
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc import code_pb2
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import BadRequest, ErrorInfo, QuotaFailure, RetryInfo
from google.rpc.status_pb2 import Status
from grpc_status import rpc_status

import gpusched
from gpusched import v1

WEIGHTS_FIELD = 'annotations["hami.io/device-scoring-weights"]'


class _GrpcStatus(collections.namedtuple("_GrpcStatus", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


def _packed(*msgs: Any) -> list[AnyProto]:
    out = []
    for m in msgs:
        a = AnyProto()
        a.Pack(m)
        out.append(a)
    return out


def _bad_request_status() -> Status:
    return Status(
        code=code_pb2.INVALID_ARGUMENT,
        message="invalid workload",
        details=_packed(
            ErrorInfo(reason="INVALID_ANNOTATION", domain="gpusched"),
            BadRequest(
                field_violations=[
                    BadRequest.FieldViolation(
                        field=WEIGHTS_FIELD,
                        description="core: 'high' is not an integer",
                        reason="INVALID_SCORING_WEIGHTS",
                    ),
                    BadRequest.FieldViolation(field="containers[0].limits", description="second"),
                ]
            ),
        ),
    )


class FakePlacement(v1.PlacementServiceServicer):
    def Allocate(self, request: v1.AllocateRequest, context: grpc.ServicerContext) -> v1.AllocateResponse:
        name = request.workload.name
        if name == "slow":
            time.sleep(2)
        elif name == "bad":
            context.abort_with_status(rpc_status.to_status(_bad_request_status()))
        elif name == "mismatch":
            # details whose message differs from grpc-message: rpc_status.from_call refuses them
            context.abort_with_status(
                _GrpcStatus(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "another message",
                    (("grpc-status-details-bin", _bad_request_status().SerializeToString()),),
                )
            )
        elif name == "too-large":
            st = Status(
                code=code_pb2.RESOURCE_EXHAUSTED,
                message="request too large",
                details=_packed(
                    QuotaFailure(violations=[QuotaFailure.Violation(subject="nodes", description="over 10000")]),
                    RetryInfo(retry_delay=Duration(nanos=100_000_000)),
                ),
            )
            context.abort_with_status(rpc_status.to_status(st))
        elif name == "plain":
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "request too large")
        elif name == "echo-traceparent":
            md = {k: str(v) for k, v in context.invocation_metadata()}
            return v1.AllocateResponse(
                result=v1.AllocationResult(node_name=f"{md.get('traceparent')}|{md.get('tracestate')}")
            )
        elif name == "echo-metadata":
            md = {k: str(v) for k, v in context.invocation_metadata()}
            return v1.AllocateResponse(result=v1.AllocationResult(node_name=f"{md.get('x-a')},{md.get('x-b')}"))
        return v1.AllocateResponse(result=v1.AllocationResult(placed=True, node_name="n1"))

    def _unimplemented(self, context: grpc.ServicerContext) -> NoReturn:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in the fake")
        raise AssertionError("unreachable")

    def Filter(self, request: v1.FilterRequest, context: grpc.ServicerContext) -> v1.FilterResponse:
        self._unimplemented(context)

    def Score(self, request: v1.ScoreRequest, context: grpc.ServicerContext) -> v1.ScoreResponse:
        self._unimplemented(context)

    def AllocateBatch(
        self, request: v1.AllocateBatchRequest, context: grpc.ServicerContext
    ) -> v1.AllocateBatchResponse:
        self._unimplemented(context)

    def ValidateWorkload(
        self, request: v1.ValidateWorkloadRequest, context: grpc.ServicerContext
    ) -> v1.ValidateWorkloadResponse:
        self._unimplemented(context)

    def Preempt(self, request: v1.PreemptRequest, context: grpc.ServicerContext) -> v1.PreemptResponse:
        self._unimplemented(context)


@pytest.fixture(scope="module")
def fake_address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    v1.add_PlacementServiceServicer_to_server(FakePlacement(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _req(name: str) -> v1.AllocateRequest:
    return v1.AllocateRequest(workload=v1.Workload(name=name))


def _check_bad(e: gpusched.GpuschedError) -> None:
    assert isinstance(e, gpusched.InvalidArgumentError)
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [(v.field, v.description) for v in e.field_violations] == [
        (WEIGHTS_FIELD, "core: 'high' is not an integer"),
        ("containers[0].limits", "second"),
    ]
    assert e.violated_fields[0] == WEIGHTS_FIELD
    assert [v.reason for v in e.field_violations] == ["INVALID_SCORING_WEIGHTS", ""]
    assert e.violations_of(v1.VIOLATION_REASON_INVALID_SCORING_WEIGHTS) == [e.field_violations[0]]
    assert e.violations_of(v1.VIOLATION_REASON_DUPLICATE_ID) == []
    assert e.reason == "INVALID_ANNOTATION" and e.error_info is not None and e.error_info.domain == "gpusched"
    assert "[INVALID_SCORING_WEIGHTS]" in str(e)
    assert e.status is not None and len(e.status_details) == 2
    assert WEIGHTS_FIELD in str(e)


def test_bad_request_details_sync(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        assert client.allocate(_req("ok")).result.node_name == "n1"
        with pytest.raises(gpusched.InvalidArgumentError) as info:
            client.allocate(_req("bad"))
    _check_bad(info.value)
    assert info.value.details == "invalid workload"
    assert isinstance(info.value.__cause__, grpc.RpcError)


def test_bad_request_details_async(fake_address: str) -> None:
    async def run() -> None:
        async with gpusched.AsyncClient(fake_address) as client:
            await client.allocate(_req("bad"))

    with pytest.raises(gpusched.InvalidArgumentError) as info:
        asyncio.run(run())
    _check_bad(info.value)


def test_details_kept_when_message_differs(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        with pytest.raises(gpusched.InvalidArgumentError) as info:
            client.allocate(_req("mismatch"))
    _check_bad(info.value)
    assert info.value.details == "another message"


def test_quota_failure_and_retry_info(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        with pytest.raises(gpusched.ResourceExhaustedError) as info:
            client.allocate(_req("too-large"))
    e = info.value
    assert [(q.subject, q.description) for q in e.quota_violations] == [("nodes", "over 10000")]
    assert e.retry_delay == pytest.approx(0.1)
    assert e.field_violations == ()
    assert "nodes: over 10000" in str(e)


def test_error_without_details(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        with pytest.raises(gpusched.ResourceExhaustedError) as info:
            client.allocate(_req("plain"))
    e = info.value
    assert e.code == grpc.StatusCode.RESOURCE_EXHAUSTED and e.details == "request too large"
    assert e.status is None and e.field_violations == () and e.violated_fields == []
    assert e.quota_violations == () and e.retry_delay is None


def test_server_side_slowness_hits_the_deadline(fake_address: str) -> None:
    with gpusched.Client(fake_address, timeout=0.3) as client:
        t0 = time.monotonic()
        with pytest.raises(gpusched.DeadlineExceededError):
            client.allocate(_req("slow"))
        assert time.monotonic() - t0 < 1.5

    async def run() -> None:
        async with gpusched.AsyncClient(fake_address, timeout=5) as client:
            with pytest.raises(gpusched.DeadlineExceededError):
                await client.allocate(_req("slow"), timeout=0.3)

    asyncio.run(run())


@pytest.fixture()
def silent_address() -> Iterator[str]:
    """A TCP port that accepts connections and never answers: calls can only time out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_timeouts_against_a_silent_port(silent_address: str) -> None:
    with gpusched.Client(silent_address, timeout=0.3) as client:
        t0 = time.monotonic()
        with pytest.raises(gpusched.DeadlineExceededError) as info:
            client.allocate(_req("x"))
        assert 0.25 < time.monotonic() - t0 < 5
        assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    with gpusched.Client(silent_address, timeout=60) as client:
        t0 = time.monotonic()
        with pytest.raises(gpusched.DeadlineExceededError):
            client.allocate(_req("x"), timeout=0.2)  # per-call override of the 60 s default
        assert time.monotonic() - t0 < 5

    async def run() -> None:
        async with gpusched.AsyncClient(silent_address, timeout=None) as client:
            t0 = time.monotonic()
            with pytest.raises(gpusched.DeadlineExceededError):
                await client.allocate(_req("x"), timeout=0.3)
            assert 0.25 < time.monotonic() - t0 < 5

    asyncio.run(run())


def test_metadata_is_merged(fake_address: str) -> None:
    with gpusched.Client(fake_address, metadata=[("x-a", "1")]) as client:
        got = client.allocate(_req("echo-metadata"), metadata=[("x-b", "2")])
    assert got.result.node_name == "1,2"


def test_unimplemented_service(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        with pytest.raises(gpusched.UnimplementedError):
            client.normalize_inventory(v1.NormalizeInventoryRequest())


def test_unreachable_server() -> None:
    with gpusched.Client("127.0.0.1:1", timeout=5) as client:
        with pytest.raises(gpusched.UnavailableError) as info:
            client.allocate(_req("x"))
    assert info.value.method == "/gpusched.v1.PlacementService/Allocate"


def test_wrong_request_type_is_a_type_error(fake_address: str) -> None:
    with gpusched.Client(fake_address) as client:
        with pytest.raises(TypeError, match="gpusched.v1.AllocateRequest"):
            client.allocate(v1.FilterRequest())  # type: ignore[arg-type]


def test_constructor_checks(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="go together"):
        gpusched.Client("x:1", client_cert=b"-----BEGIN CERTIFICATE-----")
    with pytest.raises(ValueError, match="tls=False"):
        gpusched.Client("x:1", tls=False, root_ca=b"-----BEGIN CERTIFICATE-----")
    with pytest.raises(ValueError, match="timeout"):
        gpusched.Client("x:1", timeout=0)
    not_pem = tmp_path / "x.pem"
    not_pem.write_text("hello")
    with pytest.raises(ValueError, match="not PEM"):
        gpusched.Client("x:1", root_ca=not_pem)
    with pytest.raises(FileNotFoundError):
        gpusched.Client("x:1", root_ca=tmp_path / "missing.pem")
    c = gpusched.Client("x:1", tls=True)  # system roots
    c.close()


def test_violation_reasons_round_trip() -> None:
    """Every ViolationReason has a reason string that maps back to it; unknown strings do not."""
    for name, value in v1.ViolationReason.items():
        assert gpusched.violation_reason(gpusched.violation_reason_name(value)) == value, name
    assert gpusched.violation_reason_name(v1.VIOLATION_REASON_LIMIT_EXCEEDED) == "LIMIT_EXCEEDED"
    assert gpusched.violation_reason("INVALID_NUMA_BIND") == v1.VIOLATION_REASON_INVALID_NUMA_BIND
    assert gpusched.violation_reason("SOMETHING_NEWER") == v1.VIOLATION_REASON_UNSPECIFIED
    assert gpusched.violation_reason("") == v1.VIOLATION_REASON_UNSPECIFIED


def _traced_call(address: str, tracing: bool) -> tuple[str, str]:
    """Calls the fake inside an OpenTelemetry span; returns what the server got and the
    traceparent the caller's span has."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState, use_span

    tracer = TracerProvider().get_tracer("test")
    # A parent with a tracestate, as a service in the middle of a trace has.
    parent = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("congo", "t61rcWkgMzE")]),
    )
    with use_span(NonRecordingSpan(parent)):
        with tracer.start_as_current_span("caller") as span:
            ctx = span.get_span_context()
            want = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
            with gpusched.Client(address, tracing=tracing) as c:
                got = c.allocate(_req("echo-traceparent")).result.node_name
    return got, want


def test_tracing_sends_the_current_trace_context(fake_address: str) -> None:
    got, want = _traced_call(fake_address, tracing=True)
    assert got == f"{want}|congo=t61rcWkgMzE"


def test_tracing_off_by_default(fake_address: str) -> None:
    got, _ = _traced_call(fake_address, tracing=False)
    assert got == "None|None"


def test_tracing_async(fake_address: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")

    async def run() -> tuple[str, str]:
        with tracer.start_as_current_span("caller") as span:
            ctx = span.get_span_context()
            async with gpusched.AsyncClient(fake_address, tracing=True) as c:
                r = await c.allocate(_req("echo-traceparent"))
            # A root span of the Python SDK has flags 03 (sampled + random trace id): the
            # server accepts them (W3C: unknown bits are ignored).
            flags = int(ctx.trace_flags)
            return r.result.node_name, f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"

    got, want = asyncio.run(run())
    assert got == f"{want}|None"


def test_tracing_without_a_span_sends_nothing(fake_address: str) -> None:
    with gpusched.Client(fake_address, tracing=True) as c:
        assert c.allocate(_req("echo-traceparent")).result.node_name == "None|None"

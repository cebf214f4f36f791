"""Exceptions raised by the gpusched clients.

Every failed call raises a :class:`GpuschedError` (or one of its subclasses, chosen by the
gRPC status code). The exception carries the status code, the status message and, when the
server sent one, the ``google.rpc.Status`` from the ``grpc-status-details-bin`` trailer with
its ``google.rpc.BadRequest`` field violations decoded::

    try:
        client.allocate(request)
    except gpusched.InvalidArgumentError as e:
        for v in e.field_violations:
            print(v.field, v.description)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import grpc
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc.error_details_pb2 import BadRequest, PreconditionFailure, QuotaFailure, RetryInfo
from google.rpc.status_pb2 import Status
from grpc_status import rpc_status

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CallCancelledError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "GpuschedError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "QuotaViolation",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "error_from_rpc_error",
]

#: ``google.rpc.BadRequest.FieldViolation``: ``field`` (e.g.
#: ``annotations["hami.io/device-scoring-weights"]``) and ``description``.
FieldViolation: TypeAlias = BadRequest.FieldViolation
#: ``google.rpc.QuotaFailure.Violation``: ``subject`` (the limited field) and ``description``.
QuotaViolation: TypeAlias = QuotaFailure.Violation

_DETAILS_KEY = "grpc-status-details-bin"


class GpuschedError(Exception):
    """A gpusched call failed.

    Attributes:
        code: the gRPC status code.
        details: the status message sent by the server (or by the local gRPC library).
        method: the full gRPC method path, e.g. ``/gpusched.v1.PlacementService/Allocate``.
        status: the ``google.rpc.Status`` from the status details trailer, or ``None``.
        field_violations: the field violations of every ``google.rpc.BadRequest`` detail
            (empty when there is none); INVALID_ARGUMENT carries them.
        quota_violations: the violations of every ``google.rpc.QuotaFailure`` detail;
            RESOURCE_EXHAUSTED for a request over a server limit carries them.
        retry_delay: seconds to wait before retrying, from a ``google.rpc.RetryInfo`` detail
            (a busy or shutting-down server sends one), else ``None``.
        missing_digests: subjects (``sha256/<hex>/<size>``) of the ``google.rpc.PreconditionFailure``
            violations of type ``MISSING``: node parts referenced by digest that the server does
            not hold (FAILED_PRECONDITION); the client resends them inline.
    """

    code: grpc.StatusCode
    details: str
    method: str | None
    status: Status | None
    field_violations: tuple[FieldViolation, ...]
    quota_violations: tuple[QuotaViolation, ...]
    retry_delay: float | None
    missing_digests: tuple[str, ...]

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        *,
        method: str | None = None,
        status: Status | None = None,
        field_violations: Iterable[FieldViolation] = (),
        quota_violations: Iterable[QuotaViolation] = (),
        retry_delay: float | None = None,
        missing_digests: Iterable[str] = (),
    ) -> None:
        self.missing_digests = tuple(missing_digests)
        self.code = code
        self.details = details
        self.method = method
        self.status = status
        self.field_violations = tuple(field_violations)
        self.quota_violations = tuple(quota_violations)
        self.retry_delay = retry_delay
        super().__init__(self._describe())

    @property
    def violated_fields(self) -> list[str]:
        """The ``field`` of every field violation, in order."""
        return [v.field for v in self.field_violations]

    @property
    def status_details(self) -> Sequence[AnyProto]:
        """The packed details of :attr:`status` (empty without a status)."""
        return list(self.status.details) if self.status is not None else []

    def _describe(self) -> str:
        text = f"{self.code.name}: {self.details}"
        if self.method:
            text = f"{self.method}: {text}"
        for v in self.field_violations:
            text += f"\n  {v.field}: {v.description}"
        for q in self.quota_violations:
            text += f"\n  {q.subject}: {q.description}"
        return text


class CallCancelledError(GpuschedError):
    """CANCELLED. tonic reports a server-side timeout this way ("Timeout expired")."""


class UnknownError(GpuschedError):
    """UNKNOWN."""


class InvalidArgumentError(GpuschedError):
    """INVALID_ARGUMENT: bad input (an invalid annotation, a duplicate node name, ...).

    :attr:`field_violations` says which fields are wrong and why.
    """


class DeadlineExceededError(GpuschedError):
    """DEADLINE_EXCEEDED: the call's timeout expired."""


class NotFoundError(GpuschedError):
    """NOT_FOUND."""


class AlreadyExistsError(GpuschedError):
    """ALREADY_EXISTS."""


class PermissionDeniedError(GpuschedError):
    """PERMISSION_DENIED."""


class ResourceExhaustedError(GpuschedError):
    """RESOURCE_EXHAUSTED: e.g. a request larger than the server accepts."""


class FailedPreconditionError(GpuschedError):
    """FAILED_PRECONDITION."""


class AbortedError(GpuschedError):
    """ABORTED."""


class OutOfRangeError(GpuschedError):
    """OUT_OF_RANGE."""


class UnimplementedError(GpuschedError):
    """UNIMPLEMENTED: e.g. a server too old for the method."""


class InternalError(GpuschedError):
    """INTERNAL."""


class UnavailableError(GpuschedError):
    """UNAVAILABLE: the server cannot be reached (or the TLS handshake failed)."""


class DataLossError(GpuschedError):
    """DATA_LOSS."""


class UnauthenticatedError(GpuschedError):
    """UNAUTHENTICATED."""


_BY_CODE: dict[grpc.StatusCode, type[GpuschedError]] = {
    grpc.StatusCode.CANCELLED: CallCancelledError,
    grpc.StatusCode.UNKNOWN: UnknownError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def _rich_status(err: Any) -> Status | None:
    """The google.rpc.Status of a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    try:
        found: Status | None = rpc_status.from_call(err)
        return found
    except ValueError:
        # Code or message of the details differ from the call's: keep the details anyway.
        pass
    except (AttributeError, TypeError):
        return None  # not a call object (an RpcError raised before any call existed)
    for key, value in err.trailing_metadata() or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            return Status.FromString(value)
    return None


def _missing(status: Status | None) -> list[str]:
    out: list[str] = []
    for detail in status.details if status is not None else ():
        pf = PreconditionFailure()
        if detail.Unpack(pf):
            out.extend(v.subject for v in pf.violations if v.type == "MISSING")
    return out


def _decoded(status: Status | None) -> tuple[list[FieldViolation], list[QuotaViolation], float | None]:
    fields: list[FieldViolation] = []
    quotas: list[QuotaViolation] = []
    retry: float | None = None
    for detail in status.details if status is not None else ():
        bad, quota, info = BadRequest(), QuotaFailure(), RetryInfo()
        # Unpack is False for other detail types
        if detail.Unpack(bad):
            fields.extend(bad.field_violations)
        elif detail.Unpack(quota):
            quotas.extend(quota.violations)
        elif detail.Unpack(info):
            retry = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return fields, quotas, retry


def error_from_rpc_error(err: grpc.RpcError, method: str | None = None) -> GpuschedError:
    """Converts a failed gRPC call (sync or asyncio) into the matching :class:`GpuschedError`."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = details_fn() if callable(details_fn) else None
    status = _rich_status(err)
    fields, quotas, retry = _decoded(status)
    cls = _BY_CODE.get(code, GpuschedError)
    return cls(
        code,
        details if isinstance(details, str) else str(err),
        method=method,
        status=status,
        field_violations=fields,
        quota_violations=quotas,
        retry_delay=retry,
        missing_digests=_missing(status),
    )

"""Exceptions raised by the gpusched clients.

Every failed call raises a :class:`GpuschedError` (or one of its subclasses, chosen by the
gRPC status code). The exception carries the status code, the status message and, when the
server sent one, the ``google.rpc.Status`` from the ``grpc-status-details-bin`` trailer with
its ``google.rpc.BadRequest`` field violations and ``google.rpc.ErrorInfo`` decoded. Every
field violation carries a stable machine-readable ``reason`` (a ``ViolationReason`` name without
its ``VIOLATION_REASON_`` prefix, e.g. ``INVALID_SCORING_WEIGHTS``): branch on it, not on the
field path or the description::

    try:
        client.allocate(request)
    except gpusched.InvalidArgumentError as e:
        for v in e.field_violations:
            print(v.reason, v.field, v.description)
        if e.violations_of(gpusched.v1.VIOLATION_REASON_INVALID_SCORING_WEIGHTS):
            ...
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import grpc
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc.error_details_pb2 import (
    BadRequest,
    ErrorInfo,
    PreconditionFailure,
    QuotaFailure,
    RetryInfo,
)
from google.rpc.status_pb2 import Status
from grpc_status import rpc_status

from gpusched._gen.gpusched.v1 import types_pb2

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CallCancelledError",
    "DataLossError",
    "ERROR_DOMAIN",
    "DeadlineExceededError",
    "ErrorInfo",
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
    "violation_reason",
    "violation_reason_name",
]

#: ``google.rpc.BadRequest.FieldViolation``: ``field`` (e.g.
#: ``annotations["hami.io/device-scoring-weights"]``), ``description`` and ``reason`` (the kind
#: of problem, e.g. ``INVALID_SCORING_WEIGHTS``; :func:`violation_reason` gives the enum value).
FieldViolation: TypeAlias = BadRequest.FieldViolation
#: ``google.rpc.QuotaFailure.Violation``: ``subject`` (the limited field) and ``description``
#: (no reason of its own: the error's :attr:`GpuschedError.reason` is ``LIMIT_EXCEEDED``).
QuotaViolation: TypeAlias = QuotaFailure.Violation

#: The ``google.rpc.ErrorInfo`` domain of the server's errors.
ERROR_DOMAIN = "gpusched.io"

_REASON_PREFIX = "VIOLATION_REASON_"


def violation_reason(reason: str) -> types_pb2.ViolationReason.ValueType:
    """The ``ViolationReason`` value of a reason string such as ``INVALID_SCORING_WEIGHTS``;
    ``VIOLATION_REASON_UNSPECIFIED`` when empty or unknown to this client."""
    if not reason:
        return types_pb2.VIOLATION_REASON_UNSPECIFIED
    try:
        return types_pb2.ViolationReason.Value(_REASON_PREFIX + reason)
    except ValueError:
        return types_pb2.VIOLATION_REASON_UNSPECIFIED


def violation_reason_name(kind: types_pb2.ViolationReason.ValueType) -> str:
    """The reason string the server sends for a ``ViolationReason`` value (its name without the
    ``VIOLATION_REASON_`` prefix; ``""`` for ``VIOLATION_REASON_UNSPECIFIED``)."""
    if kind == types_pb2.VIOLATION_REASON_UNSPECIFIED:
        return ""
    return types_pb2.ViolationReason.Name(kind).removeprefix(_REASON_PREFIX)

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
        error_info: the ``google.rpc.ErrorInfo`` detail (``reason`` = the reason of the first
            violation, ``domain`` = :data:`ERROR_DOMAIN`, ``metadata`` with ``field``,
            ``reasons`` and ``violationCount``), or ``None``; every error with violations has one.
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
    error_info: ErrorInfo | None
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
        error_info: ErrorInfo | None = None,
        missing_digests: Iterable[str] = (),
        missing_more: bool = False,
    ) -> None:
        self.missing_digests = tuple(missing_digests)
        #: The server listed only some missing parts (a ``MORE`` violation).
        self.missing_more = missing_more
        self.code = code
        self.details = details
        self.method = method
        self.status = status
        self.field_violations = tuple(field_violations)
        self.quota_violations = tuple(quota_violations)
        self.retry_delay = retry_delay
        self.error_info = error_info
        super().__init__(self._describe())

    @property
    def reason(self) -> str:
        """The ``google.rpc.ErrorInfo`` reason (e.g. ``INVALID_SCORING_WEIGHTS`` or
        ``LIMIT_EXCEEDED``), or ``""`` when the error carries none."""
        return self.error_info.reason if self.error_info is not None else ""

    def violations_of(self, kind: types_pb2.ViolationReason.ValueType) -> list[FieldViolation]:
        """The field violations of one kind (a ``ViolationReason`` value), in order."""
        return [v for v in self.field_violations if violation_reason(v.reason) == kind]

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
            text += f"\n  {v.field}: {v.description}" + (f" [{v.reason}]" if v.reason else "")
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


class _Decoded:
    """The details of a google.rpc.Status this client understands."""

    def __init__(self, status: Status | None) -> None:
        self.fields: list[FieldViolation] = []
        self.quotas: list[QuotaViolation] = []
        self.retry: float | None = None
        self.error_info: ErrorInfo | None = None
        self.missing: list[str] = []
        self.missing_more = False
        for detail in status.details if status is not None else ():
            bad, quota, retry, info, pf = (
                BadRequest(),
                QuotaFailure(),
                RetryInfo(),
                ErrorInfo(),
                PreconditionFailure(),
            )
            # Unpack is False for other detail types
            if detail.Unpack(bad):
                self.fields.extend(bad.field_violations)
            elif detail.Unpack(quota):
                self.quotas.extend(quota.violations)
            elif detail.Unpack(retry):
                self.retry = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
            elif detail.Unpack(info):
                self.error_info = info
            elif detail.Unpack(pf):
                self.missing.extend(v.subject for v in pf.violations if v.type == "MISSING")
                self.missing_more = self.missing_more or any(v.type == "MORE" for v in pf.violations)


def error_from_rpc_error(err: grpc.RpcError, method: str | None = None) -> GpuschedError:
    """Converts a failed gRPC call (sync or asyncio) into the matching :class:`GpuschedError`."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = details_fn() if callable(details_fn) else None
    status = _rich_status(err)
    decoded = _Decoded(status)
    cls = _BY_CODE.get(code, GpuschedError)
    return cls(
        code,
        details if isinstance(details, str) else str(err),
        method=method,
        status=status,
        field_violations=decoded.fields,
        quota_violations=decoded.quotas,
        retry_delay=decoded.retry,
        error_info=decoded.error_info,
        missing_digests=decoded.missing,
        missing_more=decoded.missing_more,
    )

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
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
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
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "error_from_rpc_error",
]

#: ``google.rpc.BadRequest.FieldViolation``: ``field`` (e.g.
#: ``annotations["hami.io/device-scoring-weights"]``) and ``description``.
FieldViolation = error_details_pb2.BadRequest.FieldViolation

_DETAILS_KEY = "grpc-status-details-bin"


class GpuschedError(Exception):
    """A gpusched call failed.

    Attributes:
        code: the gRPC status code.
        details: the status message sent by the server (or by the local gRPC library).
        method: the full gRPC method path, e.g. ``/gpusched.v1.PlacementService/Allocate``.
        status: the ``google.rpc.Status`` from the status details trailer, or ``None``.
        field_violations: the field violations of every ``google.rpc.BadRequest`` detail
            (empty when there is none).
    """

    code: grpc.StatusCode
    details: str
    method: str | None
    status: status_pb2.Status | None
    field_violations: tuple[FieldViolation, ...]

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        *,
        method: str | None = None,
        status: status_pb2.Status | None = None,
        field_violations: Iterable[FieldViolation] = (),
    ) -> None:
        self.code = code
        self.details = details
        self.method = method
        self.status = status
        self.field_violations = tuple(field_violations)
        super().__init__(self._describe())

    @property
    def violated_fields(self) -> list[str]:
        """The ``field`` of every field violation, in order."""
        return [v.field for v in self.field_violations]

    @property
    def status_details(self) -> Sequence[any_pb2.Any]:
        """The packed details of :attr:`status` (empty without a status)."""
        return list(self.status.details) if self.status is not None else []

    def _describe(self) -> str:
        text = f"{self.code.name}: {self.details}"
        if self.method:
            text = f"{self.method}: {text}"
        for v in self.field_violations:
            text += f"\n  {v.field}: {v.description}"
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


def _rich_status(err: Any) -> status_pb2.Status | None:
    """The google.rpc.Status of a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    try:
        found: status_pb2.Status | None = rpc_status.from_call(err)
        return found
    except ValueError:
        # Code or message of the details differ from the call's: keep the details anyway.
        pass
    except (AttributeError, TypeError):
        return None  # not a call object (an RpcError raised before any call existed)
    for key, value in err.trailing_metadata() or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def _field_violations(status: status_pb2.Status | None) -> list[FieldViolation]:
    out: list[FieldViolation] = []
    if status is None:
        return out
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.extend(bad.field_violations)
    return out


def error_from_rpc_error(err: grpc.RpcError, method: str | None = None) -> GpuschedError:
    """Converts a failed gRPC call (sync or asyncio) into the matching :class:`GpuschedError`."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = details_fn() if callable(details_fn) else None
    status = _rich_status(err)
    cls = _BY_CODE.get(code, GpuschedError)
    return cls(
        code,
        details if isinstance(details, str) else str(err),
        method=method,
        status=status,
        field_violations=_field_violations(status),
    )

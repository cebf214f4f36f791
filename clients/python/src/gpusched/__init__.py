"""Python client of gpusched, the stateless gRPC GPU placement service.

- :class:`Client` / :class:`AsyncClient`: the sync and asyncio clients.
- :mod:`gpusched.v1`: the API messages, enums and service stubs (generated).
- :mod:`gpusched.errors`: :class:`GpuschedError` and one subclass per gRPC status code.
- :mod:`gpusched.workload`: build a Kubernetes-form workload from annotations and limits.
- :mod:`gpusched.mix`: derive the workload mix of the fgd policies from the requests seen.
"""

from gpusched import mix, v1, workload
from gpusched.client import DEFAULT, DEFAULT_TIMEOUT, METHODS, AsyncClient, Client, Method
from gpusched.errors import (
    AbortedError,
    AlreadyExistsError,
    CallCancelledError,
    DataLossError,
    ERROR_DOMAIN,
    DeadlineExceededError,
    ErrorInfo,
    FailedPreconditionError,
    FieldViolation,
    GpuschedError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    QuotaViolation,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
    violation_reason,
    violation_reason_name,
)
from gpusched.workload import container, gpu_limits, kubernetes_workload, workload_from_pod

__version__ = "0.1.0"

__all__ = [
    "DEFAULT",
    "DEFAULT_TIMEOUT",
    "ERROR_DOMAIN",
    "METHODS",
    "AbortedError",
    "AlreadyExistsError",
    "AsyncClient",
    "CallCancelledError",
    "Client",
    "DataLossError",
    "DeadlineExceededError",
    "ErrorInfo",
    "FailedPreconditionError",
    "FieldViolation",
    "GpuschedError",
    "InternalError",
    "InvalidArgumentError",
    "Method",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "QuotaViolation",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "container",
    "gpu_limits",
    "kubernetes_workload",
    "mix",
    "v1",
    "violation_reason",
    "violation_reason_name",
    "workload",
    "workload_from_pod",
]

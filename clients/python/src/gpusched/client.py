"""Sync (:class:`Client`) and asyncio (:class:`AsyncClient`) clients of gpusched-server.

Both take and return the generated messages of :mod:`gpusched.v1` and raise
:class:`gpusched.errors.GpuschedError` subclasses on failure::

    from gpusched import Client, v1

    with Client("127.0.0.1:50051", timeout=5.0) as client:
        answer = client.allocate(v1.AllocateRequest(nodes=nodes, workload=workload))
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, TypeAlias, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from gpusched import v1
from gpusched import _byref, _otel
from gpusched.errors import GpuschedError, UnavailableError, error_from_rpc_error

__all__ = [
    "DEFAULT",
    "DEFAULT_TIMEOUT",
    "METHODS",
    "AsyncClient",
    "Client",
    "Method",
    "Metadata",
    "PemSource",
    "Timeout",
]

#: A PEM source: the PEM bytes themselves, or the path of a PEM file (``str`` or path-like).
PemSource: TypeAlias = bytes | str | os.PathLike[str]
#: Call metadata: ``(key, value)`` pairs (``-bin`` keys take bytes values).
Metadata: TypeAlias = Sequence[tuple[str, str | bytes]]

#: Default per-call timeout of a client, seconds.
DEFAULT_TIMEOUT: Final = 30.0
#: Default receive limit: answers with explanations over many nodes exceed gRPC's 4 MiB.
DEFAULT_MAX_RECEIVE_BYTES: Final = 64 * 1024 * 1024


class _Default:
    """Type of :data:`DEFAULT`."""

    def __repr__(self) -> str:
        return "DEFAULT"


#: "Use the client's default timeout" (a per-call ``timeout=None`` means no deadline at all).
DEFAULT: Final = _Default()
#: Per-call timeout: seconds, ``None`` for no deadline, or :data:`DEFAULT`.
Timeout: TypeAlias = float | None | _Default


@dataclass(frozen=True)
class Method:
    """One RPC of the API: full path, message types and the client method that calls it."""

    path: str
    request_type: type[Message]
    response_type: type[Message]
    client_method: str


#: Every RPC by full gRPC path (``/gpusched.v1.PlacementService/Allocate``, ...).
METHODS: Final[dict[str, Method]] = {
    m.path: m
    for m in (
        Method("/gpusched.v1.PlacementService/Filter", v1.FilterRequest, v1.FilterResponse, "filter"),
        Method("/gpusched.v1.PlacementService/Score", v1.ScoreRequest, v1.ScoreResponse, "score"),
        Method(
            "/gpusched.v1.PlacementService/Allocate", v1.AllocateRequest, v1.AllocateResponse, "allocate"
        ),
        Method(
            "/gpusched.v1.PlacementService/AllocateBatch",
            v1.AllocateBatchRequest,
            v1.AllocateBatchResponse,
            "allocate_batch",
        ),
        Method(
            "/gpusched.v1.PlacementService/ValidateWorkload",
            v1.ValidateWorkloadRequest,
            v1.ValidateWorkloadResponse,
            "validate_workload",
        ),
        Method(
            "/gpusched.v1.PlacementService/Preempt",
            v1.PreemptRequest,
            v1.PreemptResponse,
            "preempt",
        ),
        Method(
            "/gpusched.v1.InventoryService/NormalizeInventory",
            v1.NormalizeInventoryRequest,
            v1.NormalizeInventoryResponse,
            "normalize_inventory",
        ),
    )
}

_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)


def _read_pem(source: PemSource | None, what: str) -> bytes | None:
    if source is None:
        return None
    if isinstance(source, bytes):
        data = source
    else:
        with open(source, "rb") as f:
            data = f.read()
    if b"-----BEGIN" not in data:
        raise ValueError(f"{what}: not PEM data")
    return data


class _Settings:
    """Constructor options shared by :class:`Client` and :class:`AsyncClient`."""

    def __init__(
        self,
        address: str,
        *,
        tls: bool | None,
        root_ca: PemSource | None,
        client_cert: PemSource | None,
        client_key: PemSource | None,
        tls_server_name: str | None,
        timeout: float | None,
        metadata: Metadata,
        wait_for_ready: bool | None,
        options: Sequence[tuple[str, Any]],
        tracing: bool = False,
    ) -> None:
        if not address:
            raise ValueError("address is empty")
        if (client_cert is None) != (client_key is None):
            raise ValueError("client_cert and client_key go together (mutual TLS)")
        wants_tls = root_ca is not None or client_cert is not None or tls_server_name is not None
        if tls is False and wants_tls:
            raise ValueError("tls=False contradicts root_ca/client_cert/client_key/tls_server_name")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0 seconds (or None for no deadline)")
        self.address = address
        self.timeout = timeout
        self.metadata: tuple[tuple[str, str | bytes], ...] = tuple(metadata)
        self.wait_for_ready = wait_for_ready
        self.tracing = tracing
        if tracing:
            _otel.check_available()
        self.credentials: grpc.ChannelCredentials | None = None
        if tls or wants_tls:
            self.credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(root_ca, "root_ca"),
                private_key=_read_pem(client_key, "client_key"),
                certificate_chain=_read_pem(client_cert, "client_cert"),
            )
        opts: dict[str, Any] = {
            "grpc.max_receive_message_length": DEFAULT_MAX_RECEIVE_BYTES,
        }
        if tls_server_name is not None:
            opts["grpc.ssl_target_name_override"] = tls_server_name
        opts.update(dict(options))
        self.options: list[tuple[str, Any]] = sorted(opts.items())

    def timeout_for(self, timeout: Timeout) -> float | None:
        if isinstance(timeout, _Default):
            return self.timeout
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0 seconds (or None for no deadline)")
        return timeout

    def metadata_for(self, metadata: Metadata | None) -> tuple[tuple[str, str | bytes], ...] | None:
        merged = self.metadata + tuple(metadata or ())
        if self.tracing:
            merged += _otel.trace_metadata()
        return merged or None


def _check_request(request: Message, expected: type[Message], method: str) -> None:
    if not isinstance(request, expected):
        raise TypeError(
            f"{method} takes a {expected.DESCRIPTOR.full_name}, got {type(request).__qualname__}"
        )


class _ByRefState:
    """What the sync and asyncio clients tell about their nodes-by-reference state."""

    _byref: _byref.ByRef | None

    @property
    def acknowledged_parts(self) -> int:
        """Node parts (inventories, usages) the server acknowledged on this client."""
        return len(self._byref) if self._byref is not None else 0

    @property
    def server_reads_refs(self) -> bool:
        """Whether a PlacementService answer carried the ``gpusched-node-refs`` header: until
        then nodes go whole, even with ``by_reference`` on."""
        return self._byref is not None and self._byref.server_reads_refs

    @property
    def node_set_base(self) -> str | None:
        """The digest (``sha256/<hex>/<size>``) of the node set this client names as the base
        of its calls, if any (tests, diagnostics)."""
        k = self._byref.base_key() if self._byref is not None else None
        return _byref.subject(k) if k is not None else None


class Client(_ByRefState):
    """Blocking client of gpusched-server (one gRPC channel; thread-safe).

    Args:
        address: ``host:port`` (or any gRPC target such as ``dns:///host:port``).
        tls: use TLS. ``None`` (default) = on when any of ``root_ca``, ``client_cert``,
            ``client_key`` or ``tls_server_name`` is given; ``True`` alone verifies the server
            against the system roots.
        root_ca: CA that signed the server certificate (PEM bytes or file path).
        client_cert, client_key: client certificate chain and key for mutual TLS (PEM bytes or
            file paths); give both or neither.
        tls_server_name: expected name in the server certificate, when it differs from the host
            in ``address``.
        timeout: default per-call timeout in seconds (``None`` = no deadline). Each method takes
            ``timeout=`` to override it for one call.
        metadata: metadata sent with every call.
        wait_for_ready: gRPC wait-for-ready: calls wait (up to their timeout) for the server
            instead of failing at once with UNAVAILABLE.
        options: extra gRPC channel options (they override the client's defaults).
        channel: use this channel instead of opening one (``address`` and the TLS options are
            then ignored; :meth:`close` closes it).
        by_reference: send nodes by reference (default on): Filter, Score, Allocate and
            AllocateBatch send each node's inventory and usage as SHA-256 digests once the server
            acknowledged them on this client, inline otherwise, and resend them inline when the
            server reports them missing (restart, another replica, eviction). A list of at least
            16 nodes is kept by the server as a node set, and later calls send only the nodes
            that changed since (see :attr:`node_set_base`). Requests that carry ``node_refs`` or
            ``node_set`` themselves go as they are. ``False``: nodes always go whole. On, nodes
            still go whole until a PlacementService answer carried the ``gpusched-node-refs``
            header (a server that reads ``node_refs``; see :attr:`server_reads_refs`), and no
            node set is named before one carried ``gpusched-node-sets``.
        tracing: send the current OpenTelemetry context (``traceparent``/``tracestate`` from
            the globally configured propagator, W3C Trace Context by default) with every call,
            so the server's span joins the caller's trace. Needs ``opentelemetry-api``
            (``pip install gpusched-client[otel]``); ``ImportError`` otherwise.
    """

    def __init__(
        self,
        address: str,
        *,
        tls: bool | None = None,
        root_ca: PemSource | None = None,
        client_cert: PemSource | None = None,
        client_key: PemSource | None = None,
        tls_server_name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool | None = None,
        options: Sequence[tuple[str, Any]] = (),
        channel: grpc.Channel | None = None,
        by_reference: bool = True,
        tracing: bool = False,
    ) -> None:
        self._byref: _byref.ByRef | None = _byref.ByRef() if by_reference else None
        self._settings = _Settings(
            address,
            tls=tls,
            root_ca=root_ca,
            client_cert=client_cert,
            client_key=client_key,
            tls_server_name=tls_server_name,
            timeout=timeout,
            metadata=metadata,
            wait_for_ready=wait_for_ready,
            options=options,
            tracing=tracing,
        )
        s = self._settings
        if channel is not None:
            self._channel = channel
        elif s.credentials is not None:
            self._channel = grpc.secure_channel(s.address, s.credentials, options=s.options)
        else:
            self._channel = grpc.insecure_channel(s.address, options=s.options)
        self._placement = v1.PlacementServiceStub(self._channel)
        self._inventory = v1.InventoryServiceStub(self._channel)

    @property
    def address(self) -> str:
        return self._settings.address

    @property
    def channel(self) -> grpc.Channel:
        """The underlying gRPC channel."""
        return self._channel

    @property
    def timeout(self) -> float | None:
        """The default per-call timeout, seconds."""
        return self._settings.timeout

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Blocks until the channel is connected (``UnavailableError`` after ``timeout`` s)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise UnavailableError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address} not ready after {timeout} s"
            ) from None

    def _call(
        self,
        fn: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        path: str,
        request: _Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> _Resp:
        _check_request(request, METHODS[path].request_type, path)
        s = self._settings
        b = self._byref
        watch = b is not None and b.watching and path.startswith(_byref.PLACEMENT_PREFIX)
        try:
            if not watch:
                return fn(
                    request,
                    timeout=s.timeout_for(timeout),
                    metadata=s.metadata_for(metadata),
                    wait_for_ready=s.wait_for_ready,
                )
            resp, call = fn.with_call(
                request,
                timeout=s.timeout_for(timeout),
                metadata=s.metadata_for(metadata),
                wait_for_ready=s.wait_for_ready,
            )
            assert b is not None
            b.note(call.initial_metadata())
            return resp
        except grpc.RpcError as e:
            if watch and b is not None and isinstance(e, grpc.Call):
                b.note(e.initial_metadata())
            raise error_from_rpc_error(e, path) from e

    def _call_nodes(
        self,
        fn: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        path: str,
        request: _Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> _Resp:
        b = self._byref
        req: Any = request
        if (
            b is None
            or not b.server_reads_refs
            or len(req.node_refs)
            or not len(req.nodes)
            or req.HasField("node_set")
        ):
            return self._call(fn, path, request, timeout, metadata)
        _check_request(request, METHODS[path].request_type, path)
        exchange = _byref.Exchange(b, req)
        while True:
            try:
                resp = self._call(fn, path, exchange.request(), timeout, metadata)
            except GpuschedError as e:
                exchange.failed(e)
                continue
            exchange.succeeded()
            return resp

    def filter(
        self, request: v1.FilterRequest, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> v1.FilterResponse:
        """PlacementService.Filter: which nodes can host the workload, and why the others cannot."""
        return self._call_nodes(
            self._placement.Filter, "/gpusched.v1.PlacementService/Filter", request, timeout, metadata
        )

    def score(
        self, request: v1.ScoreRequest, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> v1.ScoreResponse:
        """PlacementService.Score: scores of the feasible nodes, most preferred first."""
        return self._call_nodes(
            self._placement.Score, "/gpusched.v1.PlacementService/Score", request, timeout, metadata
        )

    def allocate(
        self,
        request: v1.AllocateRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.AllocateResponse:
        """PlacementService.Allocate: the node and the cards for one workload."""
        return self._call_nodes(
            self._placement.Allocate, "/gpusched.v1.PlacementService/Allocate", request, timeout, metadata
        )

    def allocate_batch(
        self,
        request: v1.AllocateBatchRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.AllocateBatchResponse:
        """PlacementService.AllocateBatch: place workloads one after another on one snapshot."""
        return self._call_nodes(
            self._placement.AllocateBatch,
            "/gpusched.v1.PlacementService/AllocateBatch",
            request,
            timeout,
            metadata,
        )

    def preempt(
        self,
        request: v1.PreemptRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.PreemptResponse:
        """PlacementService.Preempt: which placed workloads must leave which node so that a pending
        workload of higher priority fits (nothing is evicted; nodes by reference as for allocate)."""
        return self._call_nodes(
            self._placement.Preempt,
            "/gpusched.v1.PlacementService/Preempt",
            request,
            timeout,
            metadata,
        )

    def validate_workload(
        self,
        request: v1.ValidateWorkloadRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.ValidateWorkloadResponse:
        """PlacementService.ValidateWorkload: parse and validate a workload without placing it."""
        return self._call(
            self._placement.ValidateWorkload,
            "/gpusched.v1.PlacementService/ValidateWorkload",
            request,
            timeout,
            metadata,
        )

    def normalize_inventory(
        self,
        request: v1.NormalizeInventoryRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.NormalizeInventoryResponse:
        """InventoryService.NormalizeInventory: raw NVML card facts to schedulable cards."""
        return self._call(
            self._inventory.NormalizeInventory,
            "/gpusched.v1.InventoryService/NormalizeInventory",
            request,
            timeout,
            metadata,
        )

    def invoke(
        self, method: str, request: Message, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> Message:
        """Calls an RPC by full gRPC path (see :data:`METHODS`), e.g. to replay recorded requests."""
        m = METHODS.get(method)
        if m is None:
            raise ValueError(f"unknown method {method!r}; known: {sorted(METHODS)}")
        fn: Callable[..., Message] = getattr(self, m.client_method)
        return fn(request, timeout=timeout, metadata=metadata)


class AsyncClient(_ByRefState):
    """asyncio client of gpusched-server (``grpc.aio``).

    Takes the same arguments as :class:`Client` (``channel`` must be a ``grpc.aio.Channel``).
    Create and use it inside one running event loop::

        async with AsyncClient("127.0.0.1:50051") as client:
            answer = await client.allocate(request)
    """

    def __init__(
        self,
        address: str,
        *,
        tls: bool | None = None,
        root_ca: PemSource | None = None,
        client_cert: PemSource | None = None,
        client_key: PemSource | None = None,
        tls_server_name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool | None = None,
        options: Sequence[tuple[str, Any]] = (),
        channel: grpc.aio.Channel | None = None,
        by_reference: bool = True,
        tracing: bool = False,
    ) -> None:
        self._byref: _byref.ByRef | None = _byref.ByRef() if by_reference else None
        self._settings = _Settings(
            address,
            tls=tls,
            root_ca=root_ca,
            client_cert=client_cert,
            client_key=client_key,
            tls_server_name=tls_server_name,
            timeout=timeout,
            metadata=metadata,
            wait_for_ready=wait_for_ready,
            options=options,
            tracing=tracing,
        )
        s = self._settings
        if channel is not None:
            self._channel = channel
        elif s.credentials is not None:
            self._channel = grpc.aio.secure_channel(s.address, s.credentials, options=s.options)
        else:
            self._channel = grpc.aio.insecure_channel(s.address, options=s.options)
        self._placement = v1.PlacementServiceStub(self._channel)
        self._inventory = v1.InventoryServiceStub(self._channel)

    @property
    def address(self) -> str:
        return self._settings.address

    @property
    def channel(self) -> grpc.aio.Channel:
        """The underlying ``grpc.aio`` channel."""
        return self._channel

    @property
    def timeout(self) -> float | None:
        """The default per-call timeout, seconds."""
        return self._settings.timeout

    async def close(self, grace: float | None = None) -> None:
        """Closes the channel; calls still running after ``grace`` seconds are cancelled."""
        await self._channel.close(grace)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Waits until the channel is connected (``UnavailableError`` after ``timeout`` s)."""
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout)
        except asyncio.TimeoutError:
            raise UnavailableError(
                grpc.StatusCode.UNAVAILABLE, f"{self.address} not ready after {timeout} s"
            ) from None

    async def _call(
        self,
        fn: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        path: str,
        request: _Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> _Resp:
        _check_request(request, METHODS[path].request_type, path)
        s = self._settings
        b = self._byref
        watch = b is not None and b.watching and path.startswith(_byref.PLACEMENT_PREFIX)
        try:
            call = fn(
                request,
                timeout=s.timeout_for(timeout),
                metadata=s.metadata_for(metadata),
                wait_for_ready=s.wait_for_ready,
            )
            resp = await call
            if watch and b is not None:
                b.note(await call.initial_metadata())
            return resp
        except grpc.aio.AioRpcError as e:
            if watch and b is not None:
                b.note(e.initial_metadata())
            raise error_from_rpc_error(e, path) from e
        except grpc.RpcError as e:
            raise error_from_rpc_error(e, path) from e

    async def _call_nodes(
        self,
        fn: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        path: str,
        request: _Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> _Resp:
        b = self._byref
        req: Any = request
        if (
            b is None
            or not b.server_reads_refs
            or len(req.node_refs)
            or not len(req.nodes)
            or req.HasField("node_set")
        ):
            return await self._call(fn, path, request, timeout, metadata)
        _check_request(request, METHODS[path].request_type, path)
        exchange = _byref.Exchange(b, req)
        while True:
            try:
                resp = await self._call(fn, path, exchange.request(), timeout, metadata)
            except GpuschedError as e:
                exchange.failed(e)
                continue
            exchange.succeeded()
            return resp

    async def filter(
        self, request: v1.FilterRequest, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> v1.FilterResponse:
        """PlacementService.Filter: which nodes can host the workload, and why the others cannot."""
        return await self._call_nodes(
            self._placement.Filter, "/gpusched.v1.PlacementService/Filter", request, timeout, metadata
        )

    async def score(
        self, request: v1.ScoreRequest, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> v1.ScoreResponse:
        """PlacementService.Score: scores of the feasible nodes, most preferred first."""
        return await self._call_nodes(
            self._placement.Score, "/gpusched.v1.PlacementService/Score", request, timeout, metadata
        )

    async def allocate(
        self,
        request: v1.AllocateRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.AllocateResponse:
        """PlacementService.Allocate: the node and the cards for one workload."""
        return await self._call_nodes(
            self._placement.Allocate, "/gpusched.v1.PlacementService/Allocate", request, timeout, metadata
        )

    async def allocate_batch(
        self,
        request: v1.AllocateBatchRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.AllocateBatchResponse:
        """PlacementService.AllocateBatch: place workloads one after another on one snapshot."""
        return await self._call_nodes(
            self._placement.AllocateBatch,
            "/gpusched.v1.PlacementService/AllocateBatch",
            request,
            timeout,
            metadata,
        )

    async def preempt(
        self,
        request: v1.PreemptRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.PreemptResponse:
        """PlacementService.Preempt: which placed workloads must leave which node so that a pending
        workload of higher priority fits (nothing is evicted; nodes by reference as for allocate)."""
        return await self._call_nodes(
            self._placement.Preempt,
            "/gpusched.v1.PlacementService/Preempt",
            request,
            timeout,
            metadata,
        )

    async def validate_workload(
        self,
        request: v1.ValidateWorkloadRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.ValidateWorkloadResponse:
        """PlacementService.ValidateWorkload: parse and validate a workload without placing it."""
        return await self._call(
            self._placement.ValidateWorkload,
            "/gpusched.v1.PlacementService/ValidateWorkload",
            request,
            timeout,
            metadata,
        )

    async def normalize_inventory(
        self,
        request: v1.NormalizeInventoryRequest,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Metadata | None = None,
    ) -> v1.NormalizeInventoryResponse:
        """InventoryService.NormalizeInventory: raw NVML card facts to schedulable cards."""
        return await self._call(
            self._inventory.NormalizeInventory,
            "/gpusched.v1.InventoryService/NormalizeInventory",
            request,
            timeout,
            metadata,
        )

    async def invoke(
        self, method: str, request: Message, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> Message:
        """Calls an RPC by full gRPC path (see :data:`METHODS`)."""
        m = METHODS.get(method)
        if m is None:
            raise ValueError(f"unknown method {method!r}; known: {sorted(METHODS)}")
        fn: Callable[..., Awaitable[Message]] = getattr(self, m.client_method)
        return await fn(request, timeout=timeout, metadata=metadata)


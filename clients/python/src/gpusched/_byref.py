"""Nodes by reference (``NodeRef``), done for the caller.

Each node is split into its inventory (the node with its cards' usage cleared) and its usage
(``NodeUsage``), serialized once and named by SHA-256 digest. A part the server acknowledged (a
successful call carried it inline) goes as its digest alone; a part the server reports missing
(FAILED_PRECONDITION, ``google.rpc.PreconditionFailure`` type ``MISSING``) is resent inline, once
per missing digest. The server never needs to remember anything for a correct answer.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from gpusched import v1
from gpusched.errors import GpuschedError

Key = tuple[bytes, int]

_MAX_KNOWN = 1 << 20

#: Response metadata a server that reads ``node_refs`` sets on every PlacementService answer;
#: nodes go whole until a client has seen it (a server that predates ``node_refs`` ignores them).
NODE_REFS_HEADER = "gpusched-node-refs"
PLACEMENT_PREFIX = "/gpusched.v1.PlacementService/"
_MAX_MEMO = 1 << 17


def _key(b: bytes) -> Key:
    return hashlib.sha256(b).digest(), len(b)


def subject(k: Key) -> str:
    """``sha256/<hex>/<size>``, as the server names a missing digest."""
    return f"sha256/{k[0].hex()}/{k[1]}"


def parse_subject(s: str) -> Key | None:
    parts = s.split("/")
    if len(parts) != 3 or parts[0] != "sha256" or len(parts[1]) != 64 or not parts[2].isdigit():
        return None
    try:
        return bytes.fromhex(parts[1]), int(parts[2])
    except ValueError:
        return None


def _digest(k: Key) -> v1.Digest:
    return v1.Digest(hash=k[0], size_bytes=k[1])


@dataclass(frozen=True)
class PreparedNode:
    """A node serialized and digested once."""

    node: bytes  # the whole node, serialized (to notice changes)
    inventory: bytes
    inventory_key: Key
    usage: bytes
    usage_key: Key | None

    @staticmethod
    def of(node: v1.Node) -> PreparedNode:
        inv = v1.Node()
        inv.CopyFrom(node)
        usage = v1.NodeUsage()
        for c in inv.cards:
            if c.HasField("usage"):
                u = c.usage
                if u.used_slots or u.used_mem_mib or u.used_cores:
                    usage.cards.add(card_id=c.id, usage=u)
                c.ClearField("usage")
        ib = inv.SerializeToString(deterministic=True)
        ub = usage.SerializeToString(deterministic=True) if len(usage.cards) else b""
        return PreparedNode(
            node=node.SerializeToString(deterministic=True),
            inventory=ib,
            inventory_key=_key(ib),
            usage=ub,
            usage_key=_key(ub) if ub else None,
        )

    def ref(self, by_digest: Any) -> v1.NodeRef:
        r = v1.NodeRef(inventory_digest=_digest(self.inventory_key))
        if not by_digest(self.inventory_key):
            r.inventory = self.inventory
        if self.usage_key is not None:
            r.usage_digest.CopyFrom(_digest(self.usage_key))
            if not by_digest(self.usage_key):
                r.usage = self.usage
        return r


class ByRef:
    """Per-client state: acknowledged digests and the last prepared form of each node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: set[Key] = set()
        self._memo: dict[str, PreparedNode] = {}
        #: A PlacementService answer on this client carried ``NODE_REFS_HEADER``.
        self.server_reads_refs = False

    def note(self, metadata: Any) -> None:
        """Switches references on when an answer's metadata carries ``NODE_REFS_HEADER``."""
        if not self.server_reads_refs and any(
            k == NODE_REFS_HEADER for k, _ in (metadata or ())
        ):
            self.server_reads_refs = True

    def prepare(self, nodes: Any) -> list[PreparedNode]:
        out = []
        with self._lock:
            if len(self._memo) > _MAX_MEMO:
                self._memo.clear()
            for n in nodes:
                raw = n.SerializeToString(deterministic=True)
                p = self._memo.get(n.name)
                if p is None or p.node != raw:
                    p = PreparedNode.of(n)
                    self._memo[n.name] = p
                out.append(p)
        return out

    def refs(self, nodes: list[PreparedNode], force: set[Key]) -> list[v1.NodeRef]:
        with self._lock:
            known = self._known
            return [p.ref(lambda k: k in known and k not in force) for p in nodes]

    def acknowledge(self, nodes: list[PreparedNode]) -> None:
        with self._lock:
            if len(self._known) + 2 * len(nodes) > _MAX_KNOWN:
                self._known.clear()
            for p in nodes:
                self._known.add(p.inventory_key)
                if p.usage_key is not None:
                    self._known.add(p.usage_key)

    def forget(self, keys: set[Key]) -> None:
        with self._lock:
            self._known.difference_update(keys)

    def __len__(self) -> int:
        with self._lock:
            return len(self._known)


_REF_FIELD = re.compile(r"^node_refs\[(\d+)\](\.inventory_digest.*|\.inventory)?(.*)$")


def field_back(field: str) -> str:
    """``node_refs[i].inventory...`` back to ``nodes[i]...`` (node i went as reference i)."""
    m = _REF_FIELD.match(field)
    if not m:
        return field
    tail = "" if (m.group(2) or "").startswith(".inventory_digest") else m.group(3)
    return f"nodes[{m.group(1)}]{tail}"


def missing_keys(e: GpuschedError) -> set[Key]:
    return {k for k in (parse_subject(s) for s in e.missing_digests) if k is not None}


def with_fields_back(e: GpuschedError) -> GpuschedError:
    for v in e.field_violations:
        v.field = field_back(v.field)
    for q in e.quota_violations:
        q.subject = field_back(q.subject)
    if e.error_info is not None and "field" in e.error_info.metadata:
        e.error_info.metadata["field"] = field_back(e.error_info.metadata["field"])
    e.args = (e._describe(),)
    return e


class Exchange:
    """One call's requests by reference, shared by the sync and asyncio clients: ``request()``
    gives the next attempt; after it, ``failed(e)`` says whether to retry (each missing part is
    resent inline once) or raises, and ``succeeded()`` records what the server now holds."""

    def __init__(self, byref: ByRef, request: Any) -> None:
        self._byref = byref
        self._prepared = byref.prepare(request.nodes)
        self._base = type(request)()
        self._base.CopyFrom(request)
        self._base.ClearField("nodes")
        self._force: set[Key] = set()

    def request(self) -> Any:
        r = type(self._base)()
        r.CopyFrom(self._base)
        r.node_refs.extend(self._byref.refs(self._prepared, self._force))
        return r

    def failed(self, e: GpuschedError) -> None:
        """Returns when the call should be retried (missing parts will go inline); raises the
        error otherwise, with ``node_refs[i]`` fields named as the caller's ``nodes[i]``."""
        if e.code == grpc.StatusCode.FAILED_PRECONDITION:
            missing = missing_keys(e)
            self._byref.forget(missing)
            if not missing or missing & self._force:
                raise e
            self._force |= missing
            return
        raise with_fields_back(e) from e.__cause__

    def succeeded(self) -> None:
        self._byref.acknowledge(self._prepared)

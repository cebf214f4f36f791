"""Nodes by reference (``NodeRef``), done for the caller.

Each node is split into its inventory (the node with its cards' usage cleared) and its usage
(``NodeUsage``), serialized once and named by SHA-256 digest. A part the server acknowledged (a
successful call carried it inline) goes as its digest alone; a part the server reports missing
(FAILED_PRECONDITION, ``google.rpc.PreconditionFailure`` type ``MISSING``) is resent inline, once
per missing digest. The server never needs to remember anything for a correct answer.

On top of it, node sets (``NodeSetRef``): once the server has shown it reads them
(``NODE_SETS_HEADER``), a candidate list of at least ``MIN_SET_NODES`` nodes goes in full with
``keep``; after that call succeeded, the next calls name the kept set as their base and send only
the nodes that changed (and the names of base nodes no longer among the candidates), as long as
the changes stay within the budget (one in eight of the base, at least 8). A base the server does
not hold (FAILED_PRECONDITION naming ``nodeset/sha256/<hex>/<size>``) is dropped and the
candidates go in full once more, kept again.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import grpc

from gpusched import v1
from gpusched.errors import GpuschedError

Key = tuple[bytes, int]

_MAX_KNOWN = 1 << 20

#: Response metadata a server that reads ``node_refs`` sets on every PlacementService answer;
#: nodes go whole until a client has seen it (a server that predates ``node_refs`` ignores them).
NODE_REFS_HEADER = "gpusched-node-refs"
#: Response metadata a server that reads ``node_set`` (``NodeSetRef``) sets on every answer; no
#: node set is named until a client has seen it.
NODE_SETS_HEADER = "gpusched-node-sets"
PLACEMENT_PREFIX = "/gpusched.v1.PlacementService/"
#: Smallest candidate list sent as a node set (smaller lists gain nothing).
MIN_SET_NODES = 16
#: Prefix of the PreconditionFailure subject of a missing node set.
SET_SUBJECT_PREFIX = "nodeset/"
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

    name: str
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
            name=node.name,
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


def set_key(nodes: list[PreparedNode]) -> Key:
    """The digest of a node set kept from references to ``nodes`` in this order: SHA-256 over
    each node's inventory hash and usage hash (32 zero bytes without usage); size 64 per node."""
    h = hashlib.sha256()
    for p in nodes:
        h.update(p.inventory_key[0])
        h.update(p.usage_key[0] if p.usage_key is not None else bytes(32))
    return h.digest(), 64 * len(nodes)


def _parts(p: PreparedNode) -> tuple[Key, Key | None]:
    return p.inventory_key, p.usage_key


@dataclass(frozen=True)
class Base:
    """A node set the server kept for this client: its digest and each node's part digests."""

    key: Key
    nodes: dict[str, tuple[Key, Key | None]]


@dataclass(frozen=True)
class Plan:
    """How the candidates of one call go: in full (``keep``: kept as a set), or, with a
    ``base``, as changes to it: the caller's nodes at positions ``changed``, and ``removed``
    base names."""

    keep: bool = False
    base: Base | None = None
    changed: tuple[int, ...] = ()
    removed: tuple[str, ...] = ()

    def position(self, j: int) -> int:
        """Position in the caller's node list of reference ``j`` of this plan's request."""
        if self.base is None or not 0 <= j < len(self.changed):
            return j
        return self.changed[j]

    def sent(self, nodes: list[PreparedNode]) -> list[PreparedNode]:
        """The nodes this plan's request carries."""
        return nodes if self.base is None else [nodes[i] for i in self.changed]


_KEEP = Plan(keep=True)
_FULL = Plan()


def budget(base_nodes: int) -> int:
    """Changed plus removed nodes a call may send against a base of this many nodes."""
    return max(8, base_nodes // 8)


class ByRef:
    """Per-client state: acknowledged digests, the last prepared form of each node, and the
    kept node set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: set[Key] = set()
        self._memo: dict[str, PreparedNode] = {}
        self._base: Base | None = None
        #: A PlacementService answer on this client carried ``NODE_REFS_HEADER``.
        self.server_reads_refs = False
        #: An answer carried ``NODE_SETS_HEADER``.
        self.server_reads_sets = False

    @property
    def watching(self) -> bool:
        """Whether answers' metadata still matter (a header not yet seen)."""
        return not (self.server_reads_refs and self.server_reads_sets)

    def note(self, metadata: Any) -> None:
        """Switches references on when an answer's metadata carries ``NODE_REFS_HEADER``, and
        node sets when it carries ``NODE_SETS_HEADER``."""
        keys = {k for k, _ in (metadata or ())}
        if NODE_REFS_HEADER in keys:
            self.server_reads_refs = True
        if NODE_SETS_HEADER in keys:
            self.server_reads_sets = True

    def plan(self, nodes: list[PreparedNode]) -> Plan:
        """Changes to the kept set when few changed, else in full (kept as a set when the
        server reads sets and the list is long enough)."""
        if not self.server_reads_sets or len(nodes) < MIN_SET_NODES:
            return _FULL
        with self._lock:
            base = self._base
        if base is None:
            return _KEEP
        limit = budget(len(base.nodes))
        changed: list[int] = []
        names: set[str] = set()
        for i, p in enumerate(nodes):
            if p.name in names:
                return _KEEP  # a name twice: the server's INVALID_ARGUMENT, on the full list
            names.add(p.name)
            if base.nodes.get(p.name) != _parts(p):
                changed.append(i)
                if len(changed) > limit:
                    return _KEEP
        removed = sorted(n for n in base.nodes if n not in names)
        if len(changed) + len(removed) > limit:
            return _KEEP
        return Plan(base=base, changed=tuple(changed), removed=tuple(removed))

    def kept(self, nodes: list[PreparedNode]) -> None:
        """After a successful call in full with ``keep``: ``nodes`` are the server's set."""
        base = Base(key=set_key(nodes), nodes={p.name: _parts(p) for p in nodes})
        with self._lock:
            self._base = base

    def drop_base(self, key: Key) -> None:
        """After FAILED_PRECONDITION naming the kept set: the replica does not hold it."""
        with self._lock:
            if self._base is not None and self._base.key == key:
                self._base = None

    def base_key(self) -> Key | None:
        """The kept set's digest, if any."""
        with self._lock:
            return self._base.key if self._base is not None else None

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


def field_back(field: str, position: Callable[[int], int] = lambda j: j) -> str:
    """``node_refs[j].inventory...`` back to ``nodes[i]...``, where reference ``j`` was the
    caller's node ``i = position(j)``."""
    m = _REF_FIELD.match(field)
    if not m:
        return field
    tail = "" if (m.group(2) or "").startswith(".inventory_digest") else m.group(3)
    return f"nodes[{position(int(m.group(1)))}]{tail}"


def missing_keys(e: GpuschedError) -> set[Key]:
    """The node parts a FAILED_PRECONDITION reports missing."""
    return {k for k in (parse_subject(s) for s in e.missing_digests) if k is not None}


def missing_sets(e: GpuschedError) -> set[Key]:
    """The node sets a FAILED_PRECONDITION reports missing."""
    return {
        k
        for k in (
            parse_subject(s[len(SET_SUBJECT_PREFIX) :])
            for s in e.missing_digests
            if s.startswith(SET_SUBJECT_PREFIX)
        )
        if k is not None
    }


def with_fields_back(e: GpuschedError, position: Callable[[int], int] = lambda j: j) -> GpuschedError:
    for v in e.field_violations:
        v.field = field_back(v.field, position)
    for q in e.quota_violations:
        q.subject = field_back(q.subject, position)
    if e.error_info is not None and "field" in e.error_info.metadata:
        e.error_info.metadata["field"] = field_back(e.error_info.metadata["field"], position)
    e.args = (e._describe(),)
    return e


class Exchange:
    """One call's requests by reference, shared by the sync and asyncio clients: ``request()``
    gives the next attempt; after it, ``failed(e)`` says whether to retry (each missing part is
    resent inline once; a missing base set is dropped and the candidates go in full, kept, once)
    or raises, and ``succeeded()`` records what the server now holds."""

    def __init__(self, byref: ByRef, request: Any) -> None:
        self._byref = byref
        self._prepared = byref.prepare(request.nodes)
        self._template = type(request)()
        self._template.CopyFrom(request)
        self._template.ClearField("nodes")
        self._force: set[Key] = set()
        self._plan = byref.plan(self._prepared)

    def request(self) -> Any:
        r = type(self._template)()
        r.CopyFrom(self._template)
        p = self._plan
        r.node_refs.extend(self._byref.refs(p.sent(self._prepared), self._force))
        if p.base is not None:
            r.node_set.base.CopyFrom(_digest(p.base.key))
            r.node_set.removed_node_names.extend(p.removed)
        elif p.keep:
            r.node_set.keep = True
        return r

    def failed(self, e: GpuschedError) -> None:
        """Returns when the call should be retried (missing parts will go inline, a missing
        base set in full); raises the error otherwise, with ``node_refs[j]`` fields named as
        the caller's ``nodes[i]``."""
        if e.code == grpc.StatusCode.FAILED_PRECONDITION:
            missing = missing_keys(e)
            self._byref.forget(missing)
            base = self._plan.base
            if base is not None and base.key in missing_sets(e):
                # The replica does not hold the set: everything in full, kept again (once: a
                # full plan names no base).
                self._byref.drop_base(base.key)
                self._plan = _KEEP
                return
            if e.missing_more:
                # Only some missing parts listed: every part inline, once.
                every = {p.inventory_key for p in self._prepared} | {
                    p.usage_key for p in self._prepared if p.usage_key is not None
                }
                if every <= self._force:
                    raise e
                self._byref.forget(every)
                self._force |= every
                return
            if not missing or missing & self._force:
                raise e
            self._force |= missing
            return
        raise with_fields_back(e, self._plan.position) from e.__cause__

    def succeeded(self) -> None:
        p = self._plan
        self._byref.acknowledge(p.sent(self._prepared))
        if p.keep:
            self._byref.kept(self._prepared)

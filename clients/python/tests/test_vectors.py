"""The shared request/response vectors of proto/testdata/*.json against the live server.

Each vector is sent through the sync and the asyncio client (by method path, through the typed
client methods); a response vector must equal the answer as a message, an error vector must
match the status code, the google.rpc.BadRequest field violations (field, description, reason)
and the google.rpc.ErrorInfo.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, text_format
from google.protobuf.message import Message

import gpusched
from gpusched._gen.gpusched.v1 import inventory_pb2, placement_pb2

from conftest import TESTDATA, vector_files

log = logging.getLogger(__name__)
FILES = vector_files()
log.info("gpusched: %d vector file(s) in %s", len(FILES), TESTDATA)


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a JSON object"
    return data


def _show(msg: Message) -> str:
    return text_format.MessageToString(msg) or "<empty>"


def _diff(expected: Message, got: Message) -> str:
    lines = difflib.unified_diff(
        _show(expected).splitlines(), _show(got).splitlines(), "expected", "got", lineterm="", n=4
    )
    return "\n".join(list(lines)[:300])


def test_methods_cover_the_api() -> None:
    """gpusched.METHODS (used to dispatch vectors) has every RPC of the descriptors, with the right types."""
    seen = {}
    for fd in (placement_pb2.DESCRIPTOR, inventory_pb2.DESCRIPTOR):
        for svc in fd.services_by_name.values():
            for m in svc.methods:
                seen[f"/{svc.full_name}/{m.name}"] = (m.input_type.full_name, m.output_type.full_name)
    got = {
        path: (m.request_type.DESCRIPTOR.full_name, m.response_type.DESCRIPTOR.full_name)
        for path, m in gpusched.METHODS.items()
    }
    assert got == seen


def test_vector_files_are_well_formed() -> None:
    """Runs without a server: every vector parses into its request and response/error form."""
    print(f"gpusched: {len(FILES)} vector file(s) in {TESTDATA}")
    for path in FILES:
        v = _load(path)
        assert v.get("method") in gpusched.METHODS, f"{path.name}: unknown method {v.get('method')!r}"
        m = gpusched.METHODS[v["method"]]
        json_format.ParseDict(v["request"], m.request_type())
        assert ("response" in v) != ("error" in v), f"{path.name}: exactly one of response and error"
        if "response" in v:
            json_format.ParseDict(v["response"], m.response_type())
        else:
            assert v["error"]["code"] in grpc.StatusCode.__members__, f"{path.name}: bad code"


async def _call_async(address: str, method: str, request: Message) -> Message:
    async with gpusched.AsyncClient(address, timeout=30) as client:
        return await client.invoke(method, request)


def _call(kind: str, address: str, method: str, request: Message) -> Message:
    if kind == "sync":
        with gpusched.Client(address, timeout=30) as client:
            return client.invoke(method, request)
    return asyncio.run(_call_async(address, method, request))


@pytest.mark.server
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_vector(path: Path, kind: str, address: str) -> None:
    v = _load(path)
    m = gpusched.METHODS[v["method"]]
    # json_format.Parse, as the vector README says (strict: unknown fields are an error).
    request = json_format.Parse(json.dumps(v["request"]), m.request_type())
    note = f"{path.name}: {v.get('description', '')}"
    if "response" in v:
        expected = json_format.Parse(json.dumps(v["response"]), m.response_type())
        try:
            got = _call(kind, address, v["method"], request)
        except gpusched.GpuschedError as e:
            pytest.fail(f"{note}\nexpected a response, got {e}", pytrace=False)
        if got != expected:
            pytest.fail(f"{note}\nanswer differs from the vector's response:\n{_diff(expected, got)}", pytrace=False)
    else:
        want = v["error"]
        want_violations = [(f["field"], f["description"], f["reason"]) for f in want.get("fieldViolations", [])]
        with pytest.raises(gpusched.GpuschedError) as info:
            got = _call(kind, address, v["method"], request)
            pytest.fail(f"{note}\nexpected {want['code']}, got a response:\n{_show(got)}", pytrace=False)
        err = info.value
        assert err.code.name == want["code"], f"{note}\n{err}"
        got_violations = [(f.field, f.description, f.reason) for f in err.field_violations]
        assert got_violations == want_violations, f"{note}\n{err}"
        got_info = (
            None
            if err.error_info is None
            else {
                "reason": err.error_info.reason,
                "domain": err.error_info.domain,
                "metadata": dict(err.error_info.metadata),
            }
        )
        assert got_info == want.get("errorInfo"), f"{note}\n{err}"

"""Random JSON documents through the real server: starts, signals and approvals with odd text
(lone surrogates, NUL, line separators), NaN and Infinity, huge integers and deep nesting. Every
answer is a 2xx or a 4xx problem document — never a 5xx — and afterwards the server still lists,
reads and draws every run it admitted."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from tests.api.test_http import PROBLEM_JSON, _order, api, server  # noqa: F401 (fixtures)

TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x00", "\ud800", "\udfff", "\u2028", "\ufeff", "😀", '"', "\\"]),
    ),
    max_size=10,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.sampled_from([10**3999, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=10,
)
DEEP = st.integers(50, 700).map(lambda n: {"a": 1} if n < 0 else _deep(n))


def _deep(depth: int) -> Any:
    doc: Any = 1
    for _ in range(depth):
        doc = {"a": doc}
    return doc


def _text(value: Any) -> str:
    """JSON text as a client might send it: escapes for surrogates, NaN and Infinity literals."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


def _check(answer: httpx.Response) -> None:
    assert answer.status_code < 500, answer.text[:500]
    if answer.status_code >= 400:
        assert answer.headers["content-type"].startswith(PROBLEM_JSON)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    note=st.one_of(TEXT, VALUES, DEEP),
    extra=st.dictionaries(TEXT, VALUES, max_size=3),
    payload=st.one_of(VALUES, DEEP),
    key=TEXT,
    actor=TEXT,
)
def test_random_documents_never_get_a_server_error(
    api: httpx.Client,  # noqa: F811
    note: Any,
    extra: dict[str, Any],
    payload: Any,
    key: str,
    actor: str,
) -> None:
    headers = {"content-type": "application/json"}
    order = _order()
    body = {"workflow": "http-order", "data": {"order_id": order, "note": note, **extra}}
    started = api.post("/runs", content=_text(body), headers=headers)
    _check(started)
    signal = {"payload": {"amount": 5, "memo": payload}, "actor": actor}
    segment = quote(key.encode("utf-8", "surrogatepass"), safe="") or "x"
    _check(api.post(f"/signals/paid/{segment}", content=_text(signal), headers=headers))
    if started.status_code == 201:
        run_id = started.json()["run_id"]
        _check(api.post(f"/signals/paid/{order}", content=_text(signal), headers=headers))
        decision = {"approved": True, "actor": actor, "comment": key}
        review = f"/runs/{run_id}/approvals/review"
        _check(api.post(review, content=_text(decision), headers=headers))
        for route in (f"/runs/{run_id}", f"/runs/{run_id}/graph.svg"):
            read = api.get(route)
            assert read.status_code == 200, read.text[:500]
    assert api.get("/runs", params={"limit": 1000}).status_code == 200
    assert api.get("/waiting").status_code == 200

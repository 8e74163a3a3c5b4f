"""Random values through every way data enters a run: admission, signals, posted signals,
approvals and activity results. Each is either taken (and the run goes on to its end) or refused
with wfkit's own error, and nothing wedges: after every example all runs have ended or wait
where they should, and the next example still runs."""

from __future__ import annotations

import math
import uuid
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

import wfkit as wf

TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x00", "\ud800", "\udfff", "\u2028", "\ufeff", "é", "😀", "'", '"']),
    ),
    max_size=12,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**3999, -(10**4000)]),  # at and over the 4,000-digit limit
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.sampled_from([b"raw", {1, 2}, (1, 2), object()]),
)


def deep(depth: int) -> Any:
    doc: Any = 1
    for _ in range(depth):
        doc = [doc]
    return doc


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=12,
) | st.integers(60, 80).map(deep)
DOCS = st.dictionaries(TEXT, VALUES, max_size=4)


def storable(value: Any, depth: int = 0) -> bool:
    """An independent statement of the policy, to check the engine's decisions against."""
    if depth > 64:
        return False
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, int):
        return len(str(abs(value))) <= 4000
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(storable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and storable(k) for k in value) and all(
            storable(v, depth + 1) for v in value.values()
        )
    return False


def test_random_values_are_taken_or_refused_and_nothing_wedges(open_engine, acts) -> None:
    engine = open_engine()
    box: dict[str, Any] = {}
    acts.add("echo", lambda ctx: box.get("output"))

    def write(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["written"] = box.get("written")

    acts.add("write", write)
    engine.register(
        wf.Workflow("fuzz")
        .start_with("echo", max_attempts=1)
        .then("write", max_attempts=1)
        .wait_for_signal("go", correlate="key", bind={"v": "got"}, id="go")
        .approval("ok")
    )
    serial = iter(range(10**9))

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=DOCS, output=VALUES, written=VALUES, payload=DOCS, actor=TEXT, key=TEXT)
    def example(data: Any, output: Any, written: Any, payload: Any, actor: str, key: str) -> None:
        own = f"own-{next(serial)}-{uuid.uuid4().hex}"  # no generated key can match it
        try:
            run = engine.start("fuzz", {**data, "key": own})
        except wf.AdmissionError:
            assert not storable({**data, "key": own})
            return
        assert storable({**data, "key": own})
        box["output"], box["written"] = output, written
        engine.run_until_idle()
        if not (storable(output) and storable({"written": written})):  # written one level in
            assert run.status == wf.RunStatus.FAILED
            return
        assert run.status == wf.RunStatus.WAITING
        for sender, body, other in ((actor, payload, key), ("ops", {"v": 1}, "elsewhere")):
            try:
                engine.post_signal("go", other, body, actor=sender)  # kept: nothing waits there
                taken = engine.signal("go", own, body, actor=sender)
            except wf.SignalError:
                assert not (storable(body) and storable(sender) and storable(other))
                continue
            assert taken
            break
        engine.run_until_idle()
        try:
            engine.approve(run.id, "ok", True, actor=actor, comment=key)
        except wf.SignalError:
            assert not (storable(actor) and storable(key))
            engine.approve(run.id, "ok", True, actor="ops")
        engine.run_until_idle()
        assert run.status == wf.RunStatus.COMPLETED

    example()

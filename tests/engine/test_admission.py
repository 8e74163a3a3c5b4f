"""Admission: bad input is refused with an error saying what to do, and writes no rows."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
from pydantic import BaseModel, Field

import wfkit as wf

TABLES = ("wf_definitions", "wf_instances", "wf_events", "wf_jobs", "wf_bookmarks", "wf_timers")


class Order(BaseModel):
    """A typed document for admission tests."""

    order_id: str
    amount: int = Field(ge=0)


def counts(engine: wf.Engine) -> dict[str, int]:
    return {t: engine.sql(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


@pytest.fixture
def ready(engine, acts) -> wf.Engine:
    """An engine with an untyped workflow ``w`` and a typed workflow ``typed`` registered."""
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    engine.register(wf.Workflow("typed", data=Order).start_with("a"))
    engine.start("w", {"warm": True})  # some rows exist already: refusals must add none
    engine.run_until_idle()
    return engine


@pytest.mark.parametrize(
    "data",
    [
        {"tags": {1, 2}},
        {"when": object()},
        object(),
        {"ratio": float("nan")},
    ],
    ids=["set", "object-field", "object", "nan"],
)
def test_data_that_is_not_json_is_refused_and_nothing_is_written(ready, data: Any) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError) as info:
        ready.start("w", data)

    message = str(info.value)
    assert "not JSON" in message
    assert "nothing was written" in message
    assert "use dicts, lists" in message
    assert info.value.reasons and "not JSON" in info.value.reasons[0]
    assert counts(ready) == before


@pytest.mark.parametrize("data", [[1, 2, 3], "text", 42])
def test_data_that_is_not_an_object_is_refused(ready, data: Any) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError, match="must be a JSON object") as info:
        ready.start("w", data)

    assert "wrap it" in str(info.value)
    assert counts(ready) == before


def test_a_document_that_fails_its_model_is_refused_with_every_field(ready) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError) as info:
        ready.start("typed", {"amount": -5})

    message = str(info.value)
    assert "'order_id'" in message
    assert "'amount'" in message
    assert "fits Order" in message
    assert "'typed' v1" in message
    assert len(info.value.reasons) == 2
    assert counts(ready) == before


def test_a_document_that_fits_its_model_is_admitted_as_a_dict_or_an_instance(ready) -> None:
    first = ready.start("typed", {"order_id": "o-1", "amount": "7"})
    second = ready.start("typed", Order(order_id="o-2", amount=3))
    ready.run_until_idle()

    assert first.data == Order(order_id="o-1", amount=7)
    assert second.data == Order(order_id="o-2", amount=3)
    assert first.status == second.status == wf.RunStatus.COMPLETED


def test_an_oversize_payload_is_refused(open_engine, acts) -> None:
    engine = open_engine(max_payload=1000)
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    before = counts(engine)

    with pytest.raises(wf.AdmissionError) as info:
        engine.start("w", {"blob": "x" * 2000})

    message = str(info.value)
    assert "1,000-byte limit" in message
    assert "keep a reference" in message
    assert counts(engine) == before
    engine.start("w", {"blob": "x" * 900})  # under the limit: admitted
    assert counts(engine)["wf_instances"] == 1


def test_an_unknown_workflow_is_refused_naming_what_is_registered(ready) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError) as info:
        ready.start("nope", {})

    message = str(info.value)
    assert "'nope'" in message
    assert "typed, w" in message
    assert "engine.register(flow)" in message
    assert counts(ready) == before


def test_an_unknown_version_is_refused_naming_the_versions(ready) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError) as info:
        ready.start("w", {}, version=7)

    message = str(info.value)
    assert "no version 7" in message
    assert "versions: 1" in message
    assert counts(ready) == before


def test_start_many_admits_all_or_none(ready) -> None:
    before = counts(ready)

    with pytest.raises(wf.AdmissionError):
        ready.start_many("typed", [{"order_id": "ok", "amount": 1}, {"amount": "bad"}])

    assert counts(ready) == before
    runs = ready.start_many("typed", [{"order_id": f"o-{i}", "amount": i} for i in range(5)])
    assert counts(ready)["wf_instances"] == before["wf_instances"] + 5
    assert len({r.id for r in runs}) == 5


def test_registering_an_invalid_graph_lists_every_problem_and_writes_nothing(engine, acts) -> None:
    acts.noop("known")
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("ghost", kind="action", activity="not.registered")
    G.add_node("known", kind="action", activity="known")
    G.add_node("spin", kind="action", activity="known")
    G.add_edge("start", "ghost", key="next")
    G.add_edge("ghost", "known", key="sideways")
    G.add_edge("known", "spin", key="next")
    G.add_edge("spin", "known", key="next")
    before = counts(engine)

    with pytest.raises(wf.DefinitionError) as info:
        engine.register(wf.Workflow.from_graph("broken", 1, G))

    codes = {p.code for p in info.value.problems}
    assert {"unknown-activity", "unknown-outlet", "unbounded-cycle"} <= codes
    message = str(info.value)
    assert "'broken' v1" in message
    assert "not.registered" in message
    assert "sideways" in message
    assert "max_visits" in message
    assert counts(engine) == before
    assert engine.workflows() == {}
    with pytest.raises(wf.AdmissionError):
        engine.start("broken", {})


def test_a_workflow_reading_fields_its_model_lacks_is_refused_at_registration(engine, acts) -> None:
    acts.noop("a", "b")
    flow = (
        wf.Workflow("w", data=Order).start_with("a").if_("priority > 1", then=lambda s: s.then("b"))
    )
    before = counts(engine)

    with pytest.raises(wf.DefinitionError, match="priority"):
        engine.register(flow)

    assert counts(engine) == before

"""Admission policies and deactivated versions: who refuses a run, with every reason at once,
and nothing written on a refusal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, Field

import wfkit as wf

from .conftest import Activities, OpenEngine

TABLES = ("wf_instances", "wf_events", "wf_jobs", "wf_bookmarks", "wf_timers")


class Order(BaseModel):
    """A typed document."""

    order_id: str
    amount: int = Field(ge=0)


def counts(engine: wf.Engine) -> dict[str, int]:
    return {t: engine.sql(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


def nothing_written(engine: wf.Engine) -> bool:
    return all(n == 0 for n in counts(engine).values())


@pytest.fixture
def orders(engine: wf.Engine, acts: Activities) -> wf.Engine:
    acts.noop("ship")
    engine.register(wf.Workflow("orders", data=Order).start_with("ship"))
    return engine


def under_limit(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
    return [f"amount {data['amount']} is over 100"] if data.get("amount", 0) > 100 else []


def known_actor(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
    return [] if actor in ("ana", "bo") else [f"actor {actor!r} may not start {workflow.id}"]


# --- policies ---------------------------------------------------------------------------------


def test_a_policy_sees_the_workflow_the_validated_data_and_the_actor(orders, acts) -> None:
    seen: list[tuple[str, int, Any, str | None]] = []

    def spy(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
        seen.append((workflow.id, workflow.version, data, actor))
        return []

    orders.add_admission_policy(spy)
    run = orders.start("orders", Order(order_id="o-1", amount=5), actor="ana")
    orders.run_until_idle()

    assert seen == [("orders", 1, {"order_id": "o-1", "amount": 5}, "ana")]
    assert run.status == wf.RunStatus.COMPLETED


def test_every_policy_reason_comes_after_the_model_errors_and_nothing_is_written(
    orders,
) -> None:
    orders.add_admission_policy(known_actor)
    seen: list[Any] = []
    orders.add_admission_policy(lambda w, data, a: seen.append(data) or ["closed for stocktake"])

    with pytest.raises(wf.AdmissionError) as info:
        orders.start("orders", {"order_id": "o-1", "amount": -3}, actor="eve")

    reasons = info.value.reasons
    assert len(reasons) == 3
    assert "amount" in reasons[0] and "greater than or equal to 0" in reasons[0]
    assert reasons[1:] == ["actor 'eve' may not start orders", "closed for stocktake"]
    assert "nothing was written" in str(info.value)
    assert "closed for stocktake" in str(info.value)
    # the model refused the data: the policy saw it as given
    assert seen == [{"order_id": "o-1", "amount": -3}]
    assert nothing_written(orders)


def test_policies_alone_refuse_data_that_fits_the_model(orders) -> None:
    orders.add_admission_policy(under_limit)
    orders.add_admission_policy(known_actor)

    with pytest.raises(wf.AdmissionError) as info:
        orders.start("orders", {"order_id": "o-1", "amount": 500}, actor="ana")

    assert info.value.reasons == ["amount 500 is over 100"]
    assert nothing_written(orders)
    assert orders.start("orders", {"order_id": "o-2", "amount": 50}, actor="bo").id


def test_a_policy_that_raises_refuses_the_run_naming_itself_and_the_exception(orders) -> None:
    def broken(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
        raise KeyError("customer_tier")

    orders.add_admission_policy(broken)
    orders.add_admission_policy(under_limit)

    with pytest.raises(wf.AdmissionError) as info:
        orders.start("orders", {"order_id": "o-1", "amount": 500})

    first, second = info.value.reasons
    assert "broken" in first and "raised KeyError" in first and "customer_tier" in first
    assert second == "amount 500 is over 100"
    assert nothing_written(orders)


@pytest.mark.parametrize("returned", [None, "no", ["ok", 3], ("a tuple",), {"reason": "x"}])
def test_a_policy_returning_anything_but_a_list_of_strings_is_a_usage_error(
    orders, returned: Any
) -> None:
    orders.add_admission_policy(lambda w, d, a: returned)

    with pytest.raises(wf.UsageError, match="not a list of strings") as info:
        orders.start("orders", {"order_id": "o-1", "amount": 1})

    assert "return the reasons" in str(info.value)
    assert nothing_written(orders)


def test_start_many_admits_all_or_none(orders) -> None:
    orders.add_admission_policy(under_limit)
    docs = [{"order_id": f"o-{i}", "amount": amount} for i, amount in enumerate([5, 500, 7])]

    with pytest.raises(wf.AdmissionError) as info:
        orders.start_many("orders", docs)

    assert info.value.reasons == ["amount 500 is over 100"]
    assert nothing_written(orders)
    runs = orders.start_many("orders", [docs[0], docs[2]])
    orders.run_until_idle()
    assert [r.status for r in runs] == [wf.RunStatus.COMPLETED] * 2


def test_start_async_asks_the_policies(orders) -> None:
    orders.add_admission_policy(under_limit)

    with pytest.raises(wf.AdmissionError) as info:
        asyncio.run(orders.start_async("orders", {"order_id": "o-1", "amount": 101}))

    assert info.value.reasons == ["amount 101 is over 100"]
    assert nothing_written(orders)


def test_restart_as_new_asks_the_policies_with_the_original_input(orders) -> None:
    run = orders.start("orders", {"order_id": "o-1", "amount": 50})
    orders.run_until_idle()
    seen: list[tuple[Any, str | None]] = []

    def closed(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
        seen.append((data, actor))
        return ["orders are closed today"]

    orders.add_admission_policy(closed)
    before = counts(orders)

    with pytest.raises(wf.AdmissionError) as info:
        orders.restart_as_new(run.id, actor="ops")

    assert info.value.reasons == ["orders are closed today"]
    assert f"restart of run {run.id}" in str(info.value)
    assert seen == [({"order_id": "o-1", "amount": 50}, "ops")]
    assert counts(orders) == before
    orders.remove_admission_policy(closed)
    assert orders.restart_as_new(run.id).id != run.id


def test_removing_a_policy_stops_asking_it_and_an_unknown_one_is_a_usage_error(orders) -> None:
    orders.add_admission_policy(under_limit)
    orders.add_admission_policy(under_limit)  # added once
    orders.remove_admission_policy(under_limit)

    assert orders.start("orders", {"order_id": "o-1", "amount": 500}).id
    with pytest.raises(wf.UsageError, match="is not an admission policy of this engine"):
        orders.remove_admission_policy(under_limit)
    with pytest.raises(wf.UsageError, match="must be a function"):
        orders.add_admission_policy("not a function")  # type: ignore[arg-type]


def test_add_admission_policy_decorates(orders) -> None:
    @orders.add_admission_policy
    def nobody(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
        return ["nobody starts runs"]

    assert callable(nobody)
    with pytest.raises(wf.AdmissionError, match="nobody starts runs"):
        orders.start("orders", {"order_id": "o-1", "amount": 1})


# --- deactivated versions ---------------------------------------------------------------------


@pytest.fixture
def versions(engine: wf.Engine, acts: Activities) -> wf.Engine:
    acts.noop("a", "b")
    engine.register(wf.Workflow("flow", 1).start_with("a").approval("check"))
    engine.register(wf.Workflow("flow", 2).start_with("b"))
    return engine


def test_a_deactivated_version_refuses_new_runs_while_its_runs_in_flight_finish(
    versions,
) -> None:
    in_flight = versions.start("flow", version=1)
    versions.run_until_idle()
    versions.deactivate("flow", 1)
    before = counts(versions)

    with pytest.raises(wf.AdmissionError) as info:
        versions.start("flow", version=1)

    message = str(info.value)
    assert "'flow' v1 is deactivated" in message
    assert "active versions: v2" in message
    assert "engine.activate('flow', 1)" in message
    assert info.value.reasons == ["workflow 'flow' v1 is deactivated"]
    assert counts(versions) == before
    versions.approve(in_flight.id, "check", actor="ana")
    versions.run_until_idle()
    assert in_flight.status == wf.RunStatus.COMPLETED


def test_start_without_a_version_picks_the_latest_active_one(versions) -> None:
    versions.deactivate("flow", 2)
    assert versions.start("flow").version == 1
    versions.activate("flow", 2)
    assert versions.start("flow").version == 2


def test_with_every_version_deactivated_start_says_how_to_go_on(versions) -> None:
    versions.deactivate("flow", 1)
    versions.deactivate("flow", 2)
    versions.deactivate("flow", 2)  # again: nothing changes

    with pytest.raises(wf.AdmissionError, match=r"every version of workflow 'flow' is deact"):
        versions.start("flow")
    with pytest.raises(wf.AdmissionError, match="active versions: none"):
        versions.start_many("flow", [{}], version=2)
    assert nothing_written(versions)


def test_deactivation_is_listed_and_outlasts_the_engine(
    open_engine: OpenEngine, acts: Activities
) -> None:
    acts.noop("a", "b")
    first = open_engine()
    first.register(wf.Workflow("flow", 1).start_with("a"))
    first.register(wf.Workflow("flow", 2).start_with("b"))
    first.deactivate("flow", 2)
    listed = first.definitions()
    first.close()

    second = open_engine()
    assert [(d.workflow_id, d.version, d.active) for d in second.definitions()] == [
        ("flow", 1, True),
        ("flow", 2, False),
    ]
    assert [(d.version, d.active) for d in listed] == [(1, True), (2, False)]
    assert second.workflows() == {"flow": [1, 2]}  # every version, active or not
    assert second.start("flow").version == 1
    with pytest.raises(wf.AdmissionError, match="deactivated"):
        second.start("flow", version=2)
    # registering the same graph again does not reactivate it
    second.register(wf.Workflow("flow", 2).start_with("b"))
    with pytest.raises(wf.AdmissionError, match="deactivated"):
        second.start("flow", version=2)


def test_restart_as_new_of_a_run_on_a_deactivated_version_is_refused(versions) -> None:
    run = versions.start("flow", version=2)
    versions.run_until_idle()
    versions.deactivate("flow", 2)

    with pytest.raises(wf.AdmissionError, match="'flow' v2 is deactivated"):
        versions.restart_as_new(run.id)


@pytest.mark.parametrize(
    ("workflow_id", "version", "message"),
    [
        ("nope", 1, "no workflow 'nope' is registered"),
        ("flow", 9, "workflow 'flow' has no version 9 (versions: 1, 2)"),
    ],
)
def test_deactivating_an_unknown_workflow_or_version_is_a_usage_error(
    versions, workflow_id: str, version: int, message: str
) -> None:
    with pytest.raises(wf.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        versions.deactivate(workflow_id, version)
    with pytest.raises(wf.UsageError, match="no"):
        versions.activate(workflow_id, version)
    assert all(d.active for d in versions.definitions())

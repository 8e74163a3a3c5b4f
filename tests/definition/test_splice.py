"""Splicing: ``flow.splice(other)`` grafts another workflow's graph at the builder's cursor."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import wfkit as wf
from wfkit.definition.graph import graph_to_data
from wfkit.definition.splicing import open_ends


def edges(flow: wf.Workflow) -> list[tuple[str, str, str]]:
    return [(u, v, k) for u, v, k in flow.graph.edges(keys=True)]


def payment() -> wf.Workflow:
    return (
        wf.Workflow("payment", 1)
        .start_with("card.charge", max_attempts=5)
        .compensate_with("card.refund")
        .then("mail.receipt", label="Receipt")
    )


# --- ids ------------------------------------------------------------------------------------------


def test_ids_are_kept_where_they_do_not_clash_and_the_start_is_dropped() -> None:
    flow = wf.Workflow("shop", 1).start_with("cart.check").splice(payment()).then("ship")

    assert list(flow.graph.nodes) == ["start", "cart.check", "card.charge", "mail.receipt", "ship"]
    assert edges(flow) == [
        ("start", "cart.check", "next"),
        ("cart.check", "card.charge", "next"),
        ("card.charge", "mail.receipt", "next"),
        ("mail.receipt", "ship", "next"),
    ]


def test_clashing_ids_take_the_other_workflows_id_as_prefix_then_a_number() -> None:
    flow = (
        wf.Workflow("shop", 1)
        .start_with("card.charge")
        .splice(payment())
        .splice(payment())
        .splice(payment())
    )

    assert list(flow.graph.nodes) == [
        "start",
        "card.charge",
        "payment.card.charge",
        "mail.receipt",
        "payment.card.charge-2",
        "payment.mail.receipt",
        "payment.card.charge-3",
        "payment.mail.receipt-2",
    ]
    assert ("payment.card.charge-3", "payment.mail.receipt-2", "next") in edges(flow)


def test_an_id_of_the_other_workflow_that_is_free_is_kept_even_if_a_renamed_one_wants_it() -> None:
    other = wf.Workflow("o", 1).start_with("x").then("o.x")
    flow = wf.Workflow("h", 1).start_with("x").splice(other)

    # "x" clashes and would become "o.x", which the other workflow has itself: that one keeps it
    assert list(flow.graph.nodes) == ["start", "x", "o.x-2", "o.x"]
    assert edges(flow)[1:] == [("x", "o.x-2", "next"), ("o.x-2", "o.x", "next")]


def test_the_same_splice_gives_the_same_graph_every_time() -> None:
    def build() -> wf.Workflow:
        return wf.Workflow("shop", 1).start_with("card.charge").splice(payment()).then("ship")

    assert build().to_json() == build().to_json()
    assert build().content_hash == build().content_hash


# --- what comes along --------------------------------------------------------------------------


def test_policies_compensations_labels_and_config_come_along() -> None:
    other = (
        wf.Workflow("o", 1)
        .start_with("a")
        .delay("2h")
        .wait_for_signal("paid", correlate="order", bind={"amount": "total"}, timeout="1d")
    )
    flow = wf.Workflow("h", 1).start_with("b").splice(payment()).splice(other)

    charge = flow.node("card.charge")
    assert charge.policy.max_attempts == 5
    assert charge.compensation == "card.refund"
    assert flow.node("mail.receipt").label == "Receipt"
    assert flow.node("delay-1").config.duration.total_seconds() == 7200
    wait = flow.node("paid").config
    assert (wait.signal, wait.correlate, wait.bind) == ("paid", "order", {"amount": "total"})


def test_a_parallel_is_spliced_with_its_join_pointing_at_the_renamed_fork() -> None:
    other = (
        wf.Workflow("o", 1).start_with("a").parallel(lambda b: b.then("p"), lambda b: b.then("q"))
    )
    flow = (
        wf.Workflow("h", 1)
        .start_with("z")
        .parallel(lambda b: b.then("r"), lambda b: b.then("s"))
        .splice(other)
        .then("t")
    )

    assert flow.node("o.parallel-1").kind == wf.NodeKind.PARALLEL
    assert flow.node("o.join-1").config.fork == "o.parallel-1"
    assert flow.node("join-1").config.fork == "parallel-1"
    assert ("o.join-1", "t", "completed") in edges(flow)
    assert flow.validate(registry=None) == []


def test_edge_labels_come_along_and_an_open_true_branch_is_labelled_when_connected() -> None:
    other = wf.Workflow("o", 1).start_with("a").if_("n > 1", otherwise=lambda b: b.then("small"))
    flow = wf.Workflow("h", 1).start_with("b").splice(other).then("after")

    data = {(e["source"], e["outlet"]): e for e in graph_to_data(flow.graph)["edges"]}
    assert data[("if-1", "true")]["target"] == "after"
    assert data[("if-1", "true")]["label"] == "n > 1"
    assert data[("small", "next")]["target"] == "after"


# --- ends ---------------------------------------------------------------------------------------


def test_every_open_end_of_the_other_workflow_continues_to_the_next_step() -> None:
    other = (
        wf.Workflow("o", 1)
        .start_with("a")
        .if_("go", then=lambda b: b.then("b"))
        .approval("review", on_reject=lambda b: b.then("fix"))
    )
    # the other workflow alone: the open decision branch joins the approval, so its ends are
    # the approval's approved outlet and the rejection branch's last step
    assert open_ends(other.graph) == [("review", "approved"), ("fix", "next")]

    flow = wf.Workflow("h", 1).start_with("x").splice(other).then("last")

    assert ("review", "last", "approved") in edges(flow)
    assert ("fix", "last", "next") in edges(flow)
    assert ("review", "last", "rejected") not in edges(flow)
    assert not [e for e in edges(flow) if e[2] in ("failed", "fallback", "expired")]


def test_an_open_decision_branch_at_the_end_of_the_other_workflow_continues_too() -> None:
    other = wf.Workflow("o", 1).start_with("a").if_("go", then=lambda b: b.then("b"))
    flow = wf.Workflow("h", 1).start_with("x").splice(other).then("last")

    assert ("if-1", "last", "false") in edges(flow)
    assert ("b", "last", "next") in edges(flow)
    assert [p.code for p in flow.validate(registry=None)] == []


def test_failed_and_fallback_routes_of_the_other_workflow_rejoin_like_builder_branches() -> None:
    other = wf.Workflow("o", 1).start_with("a").on_failed(lambda b: b.then("handle"))
    flow = wf.Workflow("h", 1).start_with("x").splice(other).then("last")

    assert ("a", "handle", "failed") in edges(flow)
    assert ("a", "last", "next") in edges(flow)
    assert ("handle", "last", "next") in edges(flow)


def test_a_workflow_that_ends_every_path_leaves_nothing_to_follow() -> None:
    other = wf.Workflow("o", 1).start_with("a").end()
    flow = wf.Workflow("h", 1).start_with("x").splice(other)

    with pytest.raises(wf.UsageError, match="nothing to follow"):
        flow.then("more")


def test_compensate_with_after_a_splice_annotates_the_other_workflows_last_step() -> None:
    other = wf.Workflow("o", 1).start_with("a").then("b")
    flow = wf.Workflow("h", 1).start_with("x").saga(lambda s: s.splice(other).compensate_with("u"))

    assert flow.node("b").compensation == "u"
    assert flow.node("a").compensation is None


# --- sagas ----------------------------------------------------------------------------------------


def test_sagas_come_along_and_clashing_saga_ids_are_prefixed_with_parents_mapped() -> None:
    other = (
        wf.Workflow("trip", 1)
        .start_with("plan")
        .saga(
            lambda s: (
                s.then("flight.book")
                .compensate_with("flight.cancel")
                .saga(
                    lambda i: i.then("hotel.book").compensate_with("hotel.cancel"),
                    policy="keep",
                )
            )
        )
    )
    flow = (
        wf.Workflow("h", 1)
        .start_with("x")
        .saga(lambda s: s.then("car.book").compensate_with("car.cancel"))
        .splice(other)
    )

    sagas = flow.graph.graph["sagas"]
    assert list(sagas) == ["saga-1", "trip.saga-1", "saga-2"]
    assert sagas["saga-2"] == {"parent": "trip.saga-1", "policy": "keep"}
    assert flow.node("flight.book").saga == "trip.saga-1"
    assert flow.node("hotel.book").saga == "saga-2"
    assert flow.node("car.book").saga == "saga-1"
    assert flow.validate(registry=None) == []


def test_a_splice_inside_a_saga_body_puts_the_steps_in_that_saga() -> None:
    other = (
        wf.Workflow("o", 1)
        .start_with("a")
        .compensate_with("undo-a")
        .saga(lambda s: s.then("b").compensate_with("undo-b"), policy="unwind")
    )
    flow = wf.Workflow("h", 1).start_with("x").saga(lambda s: s.then("c").splice(other))

    assert flow.node("a").saga == "saga-1"
    assert flow.node("b").saga == "o.saga-1"
    assert flow.graph.graph["sagas"]["o.saga-1"] == {"parent": "saga-1", "policy": "unwind"}
    assert flow.validate(registry=None) == []


def test_an_outer_saga_without_policy_cannot_nest_in_the_hosts_saga_and_nothing_is_added() -> None:
    other = wf.Workflow("o", 1).start_with("a").saga(lambda s: s.then("b").compensate_with("u"))
    flow = wf.Workflow("h", 1).start_with("x")
    before = flow.to_json()

    with pytest.raises(wf.UsageError, match="policy='unwind' or policy='keep'"):
        flow.saga(lambda s: s.then("c").splice(other))

    # the saga verb declared its scope and added "c" before the splice refused; the splice
    # itself added nothing of the other workflow
    assert "a" not in flow.graph and "b" not in flow.graph
    assert before != flow.to_json()


# --- builder lambdas ---------------------------------------------------------------------------


def test_splice_works_inside_parallel_and_for_each_bodies() -> None:
    other = wf.Workflow("o", 1).start_with("a").then("b")
    flow = (
        wf.Workflow("h", 1)
        .start_with("x")
        .parallel(lambda b: b.splice(other), lambda b: b.then("c"))
        .for_each("items", lambda b: b.splice(other))
        .then("z")
    )

    assert ("b", "join-1", "next") in edges(flow)
    assert ("for_each-1", "o.a", "each") in edges(flow)
    assert ("o.b", "join-2", "next") in edges(flow)
    assert flow.validate(registry=None) == []


def test_a_workflow_can_be_spliced_into_itself() -> None:
    flow = wf.Workflow("loop", 1).start_with("a").then("b")
    flow.splice(flow)

    assert list(flow.graph.nodes) == ["start", "a", "b", "loop.a", "loop.b"]
    assert ("b", "loop.a", "next") in edges(flow)


# --- JSON ---------------------------------------------------------------------------------------


def test_a_spliced_workflow_round_trips_through_json() -> None:
    other = (
        wf.Workflow("o", 1)
        .start_with("a")
        .saga(lambda s: s.then("card.charge").compensate_with("card.refund"))
        .if_("x > 1", then=lambda b: b.delay("1d"))
    )
    flow = wf.Workflow("h", 1).start_with("card.charge").splice(other).then("done")

    again = wf.Workflow.from_json(flow.to_json())

    assert again.to_json() == flow.to_json()
    assert again.content_hash == flow.content_hash
    assert graph_to_data(again.graph) == graph_to_data(flow.graph)


# --- data models --------------------------------------------------------------------------------


class Host(BaseModel):
    total: float = 0
    lines: list[str] = []


class Other(BaseModel):
    amount: float = 0
    parts: list[str] = []
    order: str = ""
    paid: float = 0


def test_spliced_expressions_are_checked_against_the_hosts_data_model() -> None:
    other = (
        wf.Workflow("o", 1, data=Other)
        .start_with("a")
        .if_("amount > 10", then=lambda b: b.then("big"))
        .for_each("parts", lambda b: b.then("part"))
        .wait_for_signal("paid", correlate="order", bind={"sum": "paid"})
    )
    assert other.validate(registry=None) == []

    flow = wf.Workflow("h", 1, data=Host).start_with("b").splice(other)
    problems = [(p.node, p.code) for p in flow.validate(registry=None)]

    assert ("if-1", "unknown-name") in problems
    assert ("for_each-1", "unknown-name") in problems
    assert [n for n, c in problems if n == "paid" and c == "unknown-name"] == ["paid", "paid"]
    message = next(p.message for p in flow.validate(registry=None) if p.node == "if-1")
    assert "'amount'" in message and "total" in message
    with pytest.raises(wf.DefinitionError):
        flow.check(registry=None)


def test_spliced_expressions_the_hosts_model_answers_are_accepted() -> None:
    other = wf.Workflow("o", 1, data=Other).start_with("a").if_("len(lines) > 0")
    flow = wf.Workflow("h", 1, data=Host).start_with("b").splice(other).then("c")

    assert flow.validate(registry=None) == []
    assert flow.data_model is Host


# --- refusals ------------------------------------------------------------------------------------


def test_splice_before_start_with_says_to_start_first() -> None:
    with pytest.raises(wf.UsageError, match="call start_with"):
        wf.Workflow("h", 1).splice(payment())


def test_splice_of_something_that_is_not_a_workflow_is_refused() -> None:
    with pytest.raises(wf.UsageError, match=r"takes a wf\.Workflow"):
        wf.Workflow("h", 1).start_with("a").splice("payment")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (wf.Workflow("empty", 1), "exactly one start node"),
        (wf.Workflow("bare", 1).start_with(), "no step after its start"),
    ],
)
def test_a_workflow_without_steps_cannot_be_spliced(other: wf.Workflow, message: str) -> None:
    flow = wf.Workflow("h", 1).start_with("a")
    before = flow.to_json()

    with pytest.raises(wf.UsageError, match=message):
        flow.splice(other)

    assert flow.to_json() == before


def test_an_edge_back_into_the_other_workflows_start_is_refused_and_nothing_is_added() -> None:
    other = wf.Workflow("o", 1).start_with("a")
    other.graph.add_edge("a", "start", key="next")
    flow = wf.Workflow("h", 1).start_with("x")
    before = flow.to_json()

    with pytest.raises(wf.UsageError, match="back into its start"):
        flow.splice(other)

    assert flow.to_json() == before


def test_unreachable_nodes_of_the_other_workflow_are_left_out() -> None:
    other = wf.Workflow("o", 1).start_with("a")
    other.graph.add_node("orphan", kind="action", activity="orphan")
    flow = wf.Workflow("h", 1).start_with("x").splice(other)

    assert "orphan" not in flow.graph


# --- open ends of a graph -----------------------------------------------------------------------


def test_a_calls_next_is_an_open_end_and_a_splice_goes_on_from_it() -> None:
    other = wf.Workflow("o", 1).start_with("a").call("payment", on_failed=lambda b: b.then("x"))

    assert open_ends(other.graph) == [("call-payment", "next"), ("x", "next")]
    flow = wf.Workflow("h", 1).start_with("b").splice(other).then("after")
    assert ("call-payment", "after", "next") in edges(flow)
    assert ("x", "after", "next") in edges(flow)


def test_open_ends_skip_failure_outlets_and_the_inside_of_fork_bodies() -> None:
    G = wf.Workflow("h", 1).start_with("a").parallel(lambda b: b.then("p")).graph
    G.add_node("stray", kind="action", activity="stray")
    G.add_edge("parallel-1", "stray", key="extra")  # a hand-drawn branch that ends inside
    G.nodes["parallel-1"]["config"]["branches"].append("extra")

    assert open_ends(G) == [("join-1", "completed")]

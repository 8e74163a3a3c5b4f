"""Call nodes in definitions: the builder verb, validation, JSON, content hash and picture."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import pytest
from pydantic import BaseModel, ConfigDict

import wfkit as wf
from wfkit.definition.kinds import CallConfig, NodeKind, outlets_of

SVG = "{http://www.w3.org/2000/svg}"


class Order(BaseModel):
    total: int
    receipt: str | None = None


class Payment(BaseModel):
    amount: int
    receipt: str | None = None


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


REGISTERED = {"payment": {1: Payment, 2: Payment}, "loose": {1: Loose}, "untyped": {1: None}}


def codes(flow: wf.Workflow, **kw: object) -> list[str]:
    return [p.code for p in flow.validate(registry=None, **kw)]  # type: ignore[arg-type]


def shop(**call: object) -> wf.Workflow:
    call.setdefault("input", {"amount": "total"})
    call.setdefault("bind", {"receipt": "receipt"})
    return wf.Workflow("shop", 1, data=Order).start_with().call("payment", **call)  # type: ignore[arg-type]


# --- builder ------------------------------------------------------------------------------------


def test_call_adds_a_call_node_named_after_the_workflow_with_next_and_failed_outlets() -> None:
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .call("payment", input={"amount": "total"}, bind={"receipt": "receipt"})
        .call("payment", version=2, on_failed=lambda b: b.then("refund"))
        .then("ship")
    )
    G = flow.graph
    assert list(G.nodes) == ["start", "call-payment", "call-payment-2", "refund", "ship"]
    assert G.nodes["call-payment"] == {
        "kind": "call",
        "config": {
            "workflow_id": "payment",
            "input": {"amount": "total"},
            "bind": {"receipt": "receipt"},
        },
    }
    assert flow.node("call-payment-2").config == CallConfig(workflow_id="payment", version=2)
    assert sorted((u, v, k) for u, v, k in G.edges(keys=True)) == [
        ("call-payment", "call-payment-2", "next"),
        ("call-payment-2", "refund", "failed"),
        ("call-payment-2", "ship", "next"),
        ("refund", "ship", "next"),
        ("start", "call-payment", "next"),
    ]
    assert outlets_of(NodeKind.CALL) == ("next", "failed")
    assert flow.validate(registry=None) == []


def test_call_takes_an_explicit_id_and_label_and_on_failed_follows_it() -> None:
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .call("payment", id="pay", label="Take payment")
        .on_failed(lambda b: b.then("refund").end())
    )
    assert flow.node("pay").label == "Take payment"
    assert flow.graph.has_edge("pay", "refund", key="failed")


def test_call_refuses_bad_arguments_with_what_to_do() -> None:
    base = wf.Workflow("shop", 1).start_with()
    with pytest.raises(wf.UsageError, match="needs a workflow id"):
        base.call("")
    with pytest.raises(wf.UsageError, match=r"input must map child fields to strings"):
        base.call("payment", input=["total"])  # type: ignore[arg-type]
    with pytest.raises(wf.UsageError, match="malformed"):
        base.call("payment", version=0)
    with pytest.raises(wf.UsageError, match="malformed"):
        base.call("payment", bind={"receipt": 3})  # type: ignore[dict-item]
    with pytest.raises(wf.UsageError, match="nothing to follow"):
        wf.Workflow("x", 1).call("payment")
    assert list(base.graph.nodes) == ["start"]


def test_a_call_node_takes_no_activity_or_compensation() -> None:
    with pytest.raises(ValueError, match="takes no activity"):
        wf.Node.model_validate(
            {"kind": "call", "activity": "a", "config": {"workflow_id": "payment"}}
        )
    with pytest.raises(wf.UsageError, match="follows an action"):
        wf.Workflow("x", 1).start_with().call("payment").compensate_with("undo")


# --- validation ---------------------------------------------------------------------------------


def test_a_valid_call_passes_with_the_engines_registered_workflows() -> None:
    assert codes(shop(), workflows=REGISTERED) == []
    assert codes(shop(version=1), workflows=REGISTERED) == []


def test_an_unregistered_workflow_or_version_is_an_error_only_when_workflows_are_known() -> None:
    assert codes(shop()) == []  # no engine: nothing to check against
    problems = shop().validate(registry=None, workflows={"billing": {1: None}})
    assert [p.code for p in problems] == ["unknown-workflow"]
    assert "'payment', which is not registered (registered: billing)" in problems[0].message
    (pinned,) = shop(version=3).validate(registry=None, workflows=REGISTERED)
    assert pinned.code == "unknown-workflow" and pinned.node == "call-payment"
    assert "'payment' v3, which is not registered (versions 1, 2)" in pinned.message


def test_a_workflow_calling_itself_is_refused() -> None:
    flow = wf.Workflow("payment", 1).start_with().call("payment")
    (problem,) = flow.validate(registry=None, workflows=REGISTERED)
    assert problem.code == "self-call"
    assert "may not call itself" in problem.message
    assert [p.code for p in flow.validate(registry=None)] == ["self-call"]


def test_input_expressions_are_parsed_and_checked_against_the_callers_model() -> None:
    assert "unknown-name" in codes(shop(input={"amount": "totl"}))
    bad = codes(shop(input={"amount": "total.__class__"}))
    assert bad and bad[0] != "unknown-name"
    assert codes(shop(input={"amount": "total +"})) != []
    assert codes(shop(input={"amount": "total * 2 if total > 1 else 0"})) == []


def test_bind_targets_must_be_fields_of_the_caller_and_sources_of_the_child() -> None:
    (target,) = shop(bind={"receipt": "reciept"}).validate(registry=None)
    assert target.code == "unknown-name" and "bind writes 'reciept'" in target.message
    (source,) = shop(bind={"reciept": "receipt"}).validate(registry=None, workflows=REGISTERED)
    assert source.code == "unknown-name"
    assert "child field 'reciept', which Payment ('payment' v2) does not have" in source.message
    (key,) = shop(input={"amont": "total"}).validate(registry=None, workflows=REGISTERED)
    assert "input names child field 'amont'" in key.message
    loose = wf.Workflow("shop", 1).start_with().call("loose", input={"anything": "1"})
    assert codes(loose, workflows=REGISTERED) == []
    untyped = wf.Workflow("shop", 1).start_with().call("untyped", bind={"x": "y"})
    assert codes(untyped, workflows=REGISTERED) == []


def test_empty_field_names_in_input_or_bind_are_refused() -> None:
    flow = wf.Workflow("shop", 1).start_with().call("payment", bind={"a..b": "c"})
    assert "bad-config" in codes(flow)


def test_a_call_is_never_retried_and_cannot_be_suspended() -> None:
    flow = shop().with_policy(max_attempts=5, retry_delay="2s")
    (problem,) = flow.validate(registry=None)
    assert problem.code == "call-policy"
    assert "sets max_attempts, retry_delay" in problem.message
    assert "never retried" in problem.message
    (suspend,) = shop().on_failure("suspend").validate(registry=None)
    assert suspend.code == "call-policy" and "on_failure='suspend'" in suspend.message
    assert codes(shop().on_failure("terminate").with_policy(max_visits=2)) == []


# --- JSON and content hash ------------------------------------------------------------------


def test_a_call_round_trips_through_json_with_the_same_content_hash() -> None:
    flow = shop(version=2)
    again = wf.Workflow.from_json(flow.to_json(), data=Order)
    assert again.node("call-payment") == flow.node("call-payment")
    assert again.content_hash == flow.content_hash
    assert again.validate(registry=None, workflows=REGISTERED) == []


def test_every_part_of_a_call_changes_the_content_hash() -> None:
    hashes = {
        shop().content_hash,
        shop(version=1).content_hash,
        shop(input={"amount": "total * 2"}).content_hash,
        shop(bind={"receipt": "total"}).content_hash,
        shop(input=None).content_hash,
        wf.Workflow("shop", 1, data=Order).start_with().call("billing").content_hash,
    }
    assert len(hashes) == 6


# --- picture ------------------------------------------------------------------------------------


def test_a_call_is_drawn_as_a_call_activity_with_a_thick_border_and_a_plus_marker() -> None:
    dot = shop(version=2).to_dot(problems=False)
    start = dot.index('label="payment v2\n⊞"')
    line = dot[start : dot.index("]", start)]
    assert 'id="node-call-payment"' in line
    assert "penwidth=3" in line and "rounded,filled" in line and "shape=box" in line
    labelled = shop(label="Take payment").to_dot(problems=False)
    assert 'label="Take payment\n⊞"' in labelled


@pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz 'dot' program is missing")
def test_the_call_picture_is_deterministic_svg_with_the_node_id() -> None:
    flow = shop()
    svg = flow.to_svg()
    assert svg == shop().to_svg()
    root = ET.fromstring(svg)
    group = next(e for e in root.iter() if e.get("id") == "node-call-payment")
    assert [t.text for t in group.iter(f"{SVG}text")] == ["payment", "⊞"]
    path = next(iter(group.iter(f"{SVG}path")))
    assert path.get("stroke-width") == "3"

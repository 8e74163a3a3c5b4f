"""Typed outputs: an activity annotated ``-> Receipt`` has its return value fitted to the model
(stored as the model's JSON, or the attempt fails with the fields in words), and
``ctx.output(node, Model)`` reads an earlier step's output as a model, by cell inside loops."""

from __future__ import annotations

import logging
import sys
import types
from datetime import timedelta
from typing import Any, Optional

import pytest
from pydantic import BaseModel

import wfkit as wf
from tests.engine.helpers import charge_then_fail_each_line, run_to_idle
from wfkit.definition.typed_outputs import OutputType

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


class Receipt(BaseModel):
    amount: float
    currency: str = "EUR"


class Invoice(BaseModel):
    amount: float
    currency: str
    number: int


class Quote(BaseModel):
    sku: str
    price: float


def errors_of(run: wf.Run, kind: str = "step.failed") -> list[str]:
    return [e.error or "" for e in run.history() if e.kind == kind]


def stored_outputs(engine: wf.Engine, run: wf.Run) -> list[tuple[str, str]]:
    return engine.sql(
        f"SELECT node_id, output FROM wf_outputs WHERE run_id = '{run.id}' ORDER BY occurred_at"
    ).fetchall()


# --- registration -----------------------------------------------------------------------------


def charge_model(ctx: Any) -> Receipt:
    return Receipt(amount=1)


def charge_optional(ctx: Any) -> Receipt | None:
    return None


def charge_typing_optional(ctx: Any) -> Optional[Receipt]:  # noqa: UP045 (the old spelling)
    return None


def charge_plain(ctx: Any) -> dict[str, Any]:
    return {}


def charge_list(ctx: Any) -> list[Receipt]:
    return []


def charge_odd_parameter(ctx: NotDefinedAnywhere) -> Receipt:  # type: ignore[name-defined]  # noqa: F821
    return Receipt(amount=1)


def test_the_registry_resolves_return_annotations_once_at_registration() -> None:
    reg = wf.ActivityRegistry()
    reg.register("model", charge_model)
    reg.register("optional", charge_optional)
    reg.register("typing-optional", charge_typing_optional)
    reg.register("plain", charge_plain)
    reg.register("list", charge_list)
    reg.register("lambda", lambda ctx: None)
    reg.register("odd-parameter", charge_odd_parameter)  # only the return annotation is read

    assert reg.output_type("model") == OutputType(Receipt)
    assert reg.output_type("optional") == OutputType(Receipt, optional=True)
    assert reg.output_type("typing-optional") == OutputType(Receipt, optional=True)
    assert reg.output_type("optional").name == "Receipt | None"  # type: ignore[union-attr]
    assert reg.output_type("plain") is None
    assert reg.output_type("list") is None
    assert reg.output_type("lambda") is None
    assert reg.output_type("odd-parameter") == OutputType(Receipt)
    reg.register("model", charge_plain)  # re-registering replaces the type too
    assert reg.output_type("model") is None


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(source, module.__dict__)
    return module


def test_a_model_defined_below_its_activity_is_resolved_when_the_activity_first_runs(
    engine, acts, caplog
) -> None:
    module = _module(
        "wfkit_test_late_model",
        "from __future__ import annotations\n"
        "def charge(ctx) -> Later:\n"
        "    return {'amount': 'x'}\n"
        "def never(ctx) -> Missing:\n"
        "    return {'amount': 'x'}\n",
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="wfkit.activity"):
            acts.registry.register("charge", module.charge)  # no crash: `Later` is not there yet
            acts.registry.register("never", module.never)

            class Later(BaseModel):
                amount: float

            module.Later = Later  # type: ignore[attr-defined]
            run = run_to_idle(
                engine,
                wf.Workflow("w")
                .start_with()
                .parallel(lambda b: b.then("charge", max_attempts=1), lambda b: b.then("never")),
                {},
            )
    finally:
        del sys.modules["wfkit_test_late_model"]

    assert run.status == wf.RunStatus.FAILED
    assert any(
        "does not fit Later: amount: Input should be a valid number" in e for e in errors_of(run)
    )
    assert run.outputs.get("never") == {"amount": "x"}  # never resolved: untyped, stored as is
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("'never'" in m and "Missing" in m and "untyped" in m for m in debug)


def test_an_annotation_naming_a_local_class_leaves_the_output_untyped(engine, acts) -> None:
    class Local(BaseModel):
        amount: float

    def charge(ctx: Any) -> Local:  # a string (future import) its module cannot resolve
        return {"amount": "not a number"}  # type: ignore[return-value]

    acts.registry.register("charge", charge)
    run = run_to_idle(engine, wf.Workflow("w").start_with("charge"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs == {"charge": {"amount": "not a number"}}


# --- fitting what an activity returns -----------------------------------------------------------


def test_a_returned_model_is_stored_as_its_json_and_read_back_as_the_model(engine, acts) -> None:
    def charge(ctx: Any) -> Receipt:
        return Receipt(amount=12.5, currency="USD")

    def mail(ctx: Any) -> dict[str, Any]:
        receipt = ctx.output("billing.charge", Receipt)
        assert isinstance(receipt, Receipt)
        return {"text": f"{receipt.amount} {receipt.currency}", "raw": ctx.output("billing.charge")}

    acts.registry.register("billing.charge", charge)
    acts.registry.register("mail", mail)
    run = run_to_idle(engine, wf.Workflow("w").start_with("billing.charge").then("mail"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["billing.charge"] == {"amount": 12.5, "currency": "USD"}
    assert run.outputs["mail"] == {
        "text": "12.5 USD",
        "raw": {"amount": 12.5, "currency": "USD"},
    }
    assert stored_outputs(engine, run)[0] == (
        "billing.charge",
        '{"amount":12.5,"currency":"USD"}',
    )


def test_a_returned_dict_is_validated_and_stored_as_the_model_makes_it(engine, acts) -> None:
    def charge(ctx: Any) -> Receipt:
        return {"amount": "7"}  # type: ignore[return-value]  # coerced, the default filled

    def from_invoice(ctx: Any) -> Receipt:
        return Invoice(amount=3, currency="GBP", number=9)  # type: ignore[return-value]

    acts.registry.register("charge", charge)
    acts.registry.register("from_invoice", from_invoice)
    run = run_to_idle(engine, wf.Workflow("w").start_with("charge").then("from_invoice"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs == {
        "charge": {"amount": 7.0, "currency": "EUR"},
        "from_invoice": {"amount": 3.0, "currency": "GBP"},  # the fields Receipt has
    }


def test_an_output_that_does_not_fit_fails_the_attempt_in_words_and_is_retried(
    engine, acts
) -> None:
    def charge(ctx: Any) -> Receipt:
        if ctx.attempt == 1:
            return {"amount": "x", "currency": 5}  # type: ignore[return-value]
        return Receipt(amount=2)

    acts.registry.register("billing.charge", charge)
    run = run_to_idle(
        engine, wf.Workflow("w").start_with().then("billing.charge", max_attempts=2, **NO_WAIT), {}
    )

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs == {"billing.charge": {"amount": 2.0, "currency": "EUR"}}
    (error,) = errors_of(run)
    assert error == (
        "output of 'billing.charge' does not fit Receipt: amount: Input should be a valid "
        "number, unable to parse string as a number (got 'x'); currency: Input should be a "
        "valid string (got 5); return a Receipt or a dict that fits it"
    )
    assert "pydantic.dev" not in error and "Traceback" not in error


def test_an_output_that_never_fits_fails_the_run_with_the_fields_named(engine, acts) -> None:
    def charge(ctx: Any) -> Receipt:
        return {"currency": "EUR"}  # type: ignore[return-value]

    acts.registry.register("billing.charge", charge)
    run = run_to_idle(
        engine, wf.Workflow("w").start_with().then("billing.charge", max_attempts=2, **NO_WAIT), {}
    )

    assert run.status == wf.RunStatus.FAILED
    assert len(errors_of(run)) == 2  # retry rules applied as for any failure
    with pytest.raises(wf.WorkflowFailed, match="does not fit Receipt: amount: Field required;"):
        run.result()
    assert run.outputs == {}


def test_none_fits_only_an_optional_model(engine, acts) -> None:
    def maybe(ctx: Any) -> Receipt | None:
        return None

    def must(ctx: Any) -> Receipt:
        return None  # type: ignore[return-value]

    acts.registry.register("maybe", maybe)
    acts.registry.register("must", must)
    run = run_to_idle(engine, wf.Workflow("w").start_with("maybe").then("must", max_attempts=1), {})

    assert run.status == wf.RunStatus.FAILED
    assert [e.node_id for e in run.history() if e.kind == "step.completed"] == ["maybe"]
    assert errors_of(run) == [
        "output of 'must' does not fit Receipt: the activity returned None; return a Receipt "
        "(or annotate it -> Receipt | None)"
    ]


def test_an_async_activity_is_typed_by_its_return_annotation(engine, acts) -> None:
    async def charge(ctx: Any) -> Receipt:
        return {"amount": 4}  # type: ignore[return-value]

    acts.registry.register("charge", charge)
    run = run_to_idle(engine, wf.Workflow("w").start_with("charge"), {})

    assert run.outputs == {"charge": {"amount": 4.0, "currency": "EUR"}}


# --- reading an earlier step's output -----------------------------------------------------------


def test_ctx_output_errors_say_what_is_missing_or_does_not_fit(engine, acts) -> None:
    reads = {
        "unknown": lambda ctx: ctx.output("nope"),
        "not-yet": lambda ctx: ctx.output("later"),
        "misfit": lambda ctx: ctx.output("first", Quote),
        "not-a-model": lambda ctx: ctx.output("first", dict),
        "cell-outside": lambda ctx: ctx.output("first", cell="1"),
    }
    acts.add("first", lambda ctx: {"amount": 1})
    acts.add("later")
    for name, body in reads.items():
        acts.add(name, body)
    run = run_to_idle(
        engine,
        wf.Workflow("w")
        .start_with("first")
        .parallel(*[lambda b, n=n: b.then(n, max_attempts=1) for n in reads])
        .then("later"),
        {},
    )

    failed = {
        e.node_id: (e.error or "").strip().splitlines()[-1]
        for e in run.history()
        if e.kind == "step.failed"
    }
    assert "the workflow has no node 'nope' (nodes: " in failed["unknown"]
    assert "node 'later' has no output yet" in failed["not-yet"]
    assert "nodes with an output: first" in failed["not-yet"]
    assert failed["misfit"].endswith(
        "output of 'first' does not fit Quote: sku: Field required; price: Field required; "
        "read it with the model its activity returns, or untyped with ctx.output('first')"
    )
    assert "the model must be a pydantic model class" in failed["not-a-model"]
    assert "is not inside a for_each" in failed["cell-outside"]


class LoopData(BaseModel):
    skus: list[str]
    rows: list[list[str]] = []


def test_inside_for_each_ctx_output_reads_the_attempts_own_cell(engine, acts) -> None:
    def price(ctx: Any) -> Quote:
        return Quote(sku=ctx.item, price=len(ctx.item))

    def ship(ctx: Any) -> dict[str, Any]:
        quote = ctx.output("price", Quote)
        return {"sku": quote.sku, "price": quote.price, "cell": ctx.loop_index}

    def total(ctx: Any) -> dict[str, Any]:
        cells = ctx.output("price")
        return {
            "cells": sorted(cells),
            "sum": sum(c["price"] for c in cells.values()),
            "second": ctx.output("price", Quote, cell="1").sku,
            "third": ctx.output("price", cell=2),
        }

    acts.registry.register("price", price)
    acts.add("ship", ship)
    acts.add("total", total)
    acts.add("typed-outside", lambda ctx: ctx.output("price", Quote))
    run = run_to_idle(
        engine,
        wf.Workflow("w", data=LoopData)
        .start_with()
        .for_each("skus", lambda b: b.then("price").then("ship"))
        .then("total")
        .then("typed-outside", max_attempts=1),
        {"skus": ["a", "bb", "ccc"]},
    )

    assert run.outputs["ship"] == {
        "0": {"sku": "a", "price": 1.0, "cell": 0},
        "1": {"sku": "bb", "price": 2.0, "cell": 1},
        "2": {"sku": "ccc", "price": 3.0, "cell": 2},
    }
    assert run.outputs["total"] == {
        "cells": ["0", "1", "2"],
        "sum": 6.0,
        "second": "bb",
        "third": {"sku": "ccc", "price": 3.0},
    }
    (error,) = errors_of(run)
    assert "node 'price' is inside a for_each this step is not in" in error
    assert "(0, 1, 2); name one with cell='...'" in error


def test_nested_loops_read_their_own_cell_and_an_outer_cell(engine, acts) -> None:
    acts.add("outer", lambda ctx: {"row": ctx.loop_index})
    acts.add(
        "inner",
        lambda ctx: {
            "outer": ctx.output("outer"),
            "path": list(ctx.loop_path),
        },
    )
    acts.add("row-done", lambda ctx: {"cells": sorted(ctx.output("inner"))})
    run = run_to_idle(
        engine,
        wf.Workflow("w", data=LoopData)
        .start_with()
        .for_each(
            "rows",
            lambda b: b.then("outer").for_each("item", lambda c: c.then("inner")).then("row-done"),
        ),
        {"skus": [], "rows": [["x", "y"], ["z"]]},
    )

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["inner"] == {
        "0.0": {"outer": {"row": 0}, "path": [0, 0]},
        "0.1": {"outer": {"row": 0}, "path": [0, 1]},
        "1.0": {"outer": {"row": 1}, "path": [1, 0]},
    }
    # after the inner join, a row reads the inner cells of its own row only
    assert run.outputs["row-done"] == {"0": {"cells": ["0.0", "0.1"]}, "1": {"cells": ["1.0"]}}


def test_a_compensation_reads_the_output_of_the_visit_it_undoes(engine, acts) -> None:
    def charge(ctx: Any) -> Receipt:
        return Receipt(amount=len(ctx.item))

    def refund(ctx: Any) -> None:
        receipt = ctx.output(ctx.node_id, Receipt)
        ctx.data["refunded"] = [*ctx.data.get("refunded", []), receipt.amount]

    def fail(ctx: Any) -> None:
        raise RuntimeError("courier down")

    acts.registry.register("charge", charge)
    acts.add("refund", refund)
    acts.add("fail", fail)
    run = run_to_idle(engine, charge_then_fail_each_line(), {"lines": ["a", "bbb"]})

    assert sorted(run.data["refunded"]) == [1.0, 3.0]

"""Activities and a workflow for the HTTP API tests; the test server imports this file.

``http-order`` waits for signal ``paid`` (key: the order id; payload model :class:`Payment`),
then for approval ``review``, then runs a saga: reserve (undone by release), then charge.
``fail_charge`` makes the charge fail, which unwinds the saga; ``break_release`` makes the
release fail too, which leaves the run suspended for an operator.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

import wfkit as wf


class Order(BaseModel):
    """The order document."""

    order_id: str
    paid: float | None = None
    fail_charge: bool = False
    break_release: bool = False
    reserved: bool = False
    charged: bool = False
    receipt: bool = False
    note: str = ""  # free text: lets a test send a data document close to the size limit


class Payment(BaseModel):
    """What signal ``paid`` must carry."""

    amount: float = Field(gt=0)


class ChargeDeclined(RuntimeError):
    """The test asked for the charge to fail."""


@wf.activity("httptest.invoice")
def invoice(ctx: wf.ActivityContext[Order]) -> dict[str, str]:
    """Send the invoice."""
    return {"invoice": f"inv-{ctx.data.order_id}"}


@wf.activity("httptest.reserve")
def reserve(ctx: wf.ActivityContext[Order]) -> None:
    """Reserve the stock."""
    ctx.data.reserved = True


@wf.activity("httptest.release")
def release(ctx: wf.ActivityContext[Order]) -> None:
    """Release the stock, or fail when the document says so."""
    if ctx.data.break_release:
        raise RuntimeError(f"the warehouse is offline; cannot release {ctx.data.order_id}")
    ctx.data.reserved = False


@wf.activity("httptest.charge")
def charge(ctx: wf.ActivityContext[Order]) -> None:
    """Charge the card, or fail when the document says so."""
    if ctx.data.fail_charge:
        raise ChargeDeclined(f"card declined for {ctx.data.order_id}")
    ctx.data.charged = True


@wf.activity("httptest.receipt")
def receipt(ctx: wf.ActivityContext[Order]) -> None:
    """Send the receipt."""
    ctx.data.receipt = True


flow = (
    wf.Workflow("http-order", version=1, data=Order)
    .start_with("httptest.invoice")
    .wait_for_signal("paid", correlate="order_id", bind={"amount": "paid"}, payload=Payment)
    .approval("review")
    .saga(
        lambda s: (
            s.then("httptest.reserve")
            .compensate_with("httptest.release", policy={"max_attempts": 1})
            .then("httptest.charge", max_attempts=1)
            .on_failure("compensate")
        ),
        id="fulfil",
    )
    .then("httptest.receipt")
)

"""Checkout as a saga: reserve stock, charge the card, book a courier — undone in reverse."""

from __future__ import annotations

from pydantic import BaseModel

import wfkit as wf


class CheckoutData(BaseModel):
    """The checkout document."""

    order_id: str
    amount: float
    card_ok: bool = True
    inventory_down: bool = False
    """While true the inventory service is unreachable: releasing a reservation raises
    ``ConnectionError``, so a compensation fails (the demo and notebook 03 use it)."""
    reservation: str | None = None
    charge: str | None = None
    courier: str | None = None


class PaymentDeclined(RuntimeError):
    """The card issuer declined the charge."""


@wf.activity("inventory.reserve")
def reserve(ctx: wf.ActivityContext[CheckoutData]) -> dict[str, str]:
    """Reserve the stock."""
    ctx.data.reservation = f"res-{ctx.data.order_id}"
    return {"reservation": ctx.data.reservation}


@wf.activity("inventory.release")
def release(ctx: wf.ActivityContext[CheckoutData]) -> None:
    """Release the reservation; fails while the document says the inventory service is down."""
    if ctx.data.inventory_down:
        raise ConnectionError(
            f"inventory service unreachable: cannot release {ctx.data.reservation} "
            f"(attempt {ctx.attempt})"
        )
    ctx.data.reservation = None


@wf.activity("card.charge")
def charge(ctx: wf.ActivityContext[CheckoutData]) -> dict[str, str]:
    """Charge the card; declined when the document says the card is not good."""
    if not ctx.data.card_ok:
        raise PaymentDeclined(f"card declined for order {ctx.data.order_id}")
    ctx.data.charge = f"ch-{ctx.idempotency_key or ctx.data.order_id}"
    return {"charge": ctx.data.charge}


@wf.activity("card.refund")
def refund(ctx: wf.ActivityContext[CheckoutData]) -> None:
    """Refund the charge."""
    ctx.data.charge = None


@wf.activity("courier.book")
def book_courier(ctx: wf.ActivityContext[CheckoutData]) -> dict[str, str]:
    """Book the courier."""
    ctx.data.courier = f"cr-{ctx.data.order_id}"
    return {"courier": ctx.data.courier}


@wf.activity("courier.cancel")
def cancel_courier(ctx: wf.ActivityContext[CheckoutData]) -> None:
    """Cancel the courier."""
    ctx.data.courier = None


@wf.activity("mail.receipt")
def receipt(ctx: wf.ActivityContext[CheckoutData]) -> dict[str, float]:
    """Send the receipt."""
    return {"amount": ctx.data.amount}


flow = (
    wf.Workflow("checkout", version=1, data=CheckoutData)
    .start_with()
    .saga(
        lambda s: (
            s.then("inventory.reserve")
            .compensate_with("inventory.release")
            .then("card.charge", max_attempts=2)
            .compensate_with("card.refund")
            .on_failure("compensate")
            .then("courier.book")
            .compensate_with("courier.cancel")
        ),
        label="checkout",
    )
    .then("mail.receipt")
)

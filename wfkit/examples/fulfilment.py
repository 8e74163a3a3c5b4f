"""Order fulfilment: ship every line, four at a time; a person reviews a partial shipment."""

from __future__ import annotations

from pydantic import BaseModel, Field

import wfkit as wf


class Line(BaseModel):
    """One order line."""

    sku: str
    quantity: int = Field(1, ge=1)


class OrderData(BaseModel):
    """The order document."""

    order_id: str
    lines: list[Line] = Field(default_factory=list)
    confirmed: bool = False


class ShippingError(RuntimeError):
    """A carrier refused a line."""


@wf.activity("orders.load-lines")
def load_lines(ctx: wf.ActivityContext[OrderData]) -> dict[str, int]:
    """Check the order has lines to ship."""
    return {"lines": len(ctx.data.lines)}


@wf.activity("orders.ship-line")
def ship_line(ctx: wf.ActivityContext[OrderData]) -> dict[str, str]:
    """Ship one line; a SKU starting with 'BROKEN' is refused by the carrier every time."""
    line = ctx.data.lines[ctx.loop_index or 0]
    if line.sku.startswith("BROKEN"):
        raise ShippingError(f"carrier refused {line.sku}: item damaged in the warehouse")
    return {"sku": line.sku, "tracking": f"trk-{ctx.data.order_id}-{ctx.loop_index}"}


@wf.activity("orders.confirm")
def confirm(ctx: wf.ActivityContext[OrderData]) -> None:
    """Tell the customer the order is on its way."""
    ctx.data.confirmed = True


flow = (
    wf.Workflow("fulfilment", version=1, data=OrderData)
    .start_with("orders.load-lines")
    .for_each(
        "lines",
        lambda b: b.then("orders.ship-line", max_attempts=3, retry_delay="2s"),
        max_parallelism=4,
        join="all",
        on_partial=lambda b: b.approval("review", timeout="2d", assignees=["warehouse"]),
    )
    .then("orders.confirm")
)

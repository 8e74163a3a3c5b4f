"""Trip booking: a flight saga holding a nested hotel-and-car saga that unwinds with it."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

import wfkit as wf


class TripData(BaseModel):
    """The trip document."""

    traveller: str
    budget: float
    booked: list[str] = Field(default_factory=list)


def _book(kind: str) -> Callable[..., dict[str, str]]:
    def book(ctx: wf.ActivityContext[TripData]) -> dict[str, str]:
        ctx.data.booked.append(kind)
        return {"booking": f"{kind}-{ctx.instance_id}"}

    return book


def _cancel(kind: str) -> Callable[..., None]:
    def cancel(ctx: wf.ActivityContext[TripData]) -> None:
        if kind in ctx.data.booked:
            ctx.data.booked.remove(kind)

    return cancel


for _kind in ("flight", "hotel", "car"):
    wf.activity(f"{_kind}.book")(_book(_kind))
    wf.activity(f"{_kind}.cancel")(_cancel(_kind))


@wf.activity("payment.capture")
def capture(ctx: wf.ActivityContext[TripData]) -> dict[str, float]:
    """Capture the payment; fails when the trip is over budget."""
    if ctx.data.budget < 100:
        raise RuntimeError(f"budget {ctx.data.budget} too small for {ctx.data.booked}")
    return {"captured": ctx.data.budget}


flow = (
    wf.Workflow("trip", version=1, data=TripData)
    .start_with()
    .saga(
        lambda outer: (
            outer.then("flight.book")
            .compensate_with("flight.cancel")
            .saga(
                lambda inner: (
                    inner.then("hotel.book")
                    .compensate_with("hotel.cancel")
                    .then("car.book")
                    .compensate_with("car.cancel")
                ),
                policy="unwind",
                label="stay",
            )
            .then("payment.capture")
            .on_failure("compensate")
        ),
        label="trip",
    )
)

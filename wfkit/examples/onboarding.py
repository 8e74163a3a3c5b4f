"""Customer onboarding: create the account, wait for approval where needed, welcome.

The wait gives up after three days: with no ``on_timeout=`` branch the run goes on to the
welcome mail, ``is_approved`` left unset.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel

import wfkit as wf


class OnboardingData(BaseModel):
    """The onboarding document."""

    customer_id: str
    email: str
    needs_approval: bool = False
    is_approved: bool | None = None
    account_id: str | None = None
    welcomed: bool = False


@wf.activity("accounts.create")
def create_account(ctx: wf.ActivityContext[OnboardingData]) -> dict[str, str]:
    """Open the account (idempotent: the key is stable across attempts)."""
    ctx.data.account_id = ctx.data.account_id or f"acc-{uuid.uuid4().hex[:8]}"
    return {"account_id": ctx.data.account_id}


@wf.activity("mail.welcome")
def send_welcome(ctx: wf.ActivityContext[OnboardingData]) -> dict[str, str]:
    """Send the welcome mail."""
    ctx.data.welcomed = True
    return {"to": ctx.data.email}


flow = (
    wf.Workflow("onboarding", version=1, data=OnboardingData)
    .start_with("accounts.create")
    .if_(
        "needs_approval",
        then=lambda b: b.wait_for_signal(
            "approval", correlate="customer_id", bind={"approved": "is_approved"}, timeout="3d"
        ),
    )
    .then("mail.welcome")
)

"""Example workflows used by ``wfkit demo``, the notebooks and the tests.

Importing a module registers its activities in the default registry and defines ``flow``.
"""

from __future__ import annotations

from wfkit.definition.workflow import Workflow

__all__ = ["all_workflows"]


def all_workflows() -> dict[str, Workflow]:
    """Every example workflow by id, in a stable order."""
    from wfkit.examples import checkout, fulfilment, nested_saga, onboarding

    flows = (onboarding.flow, fulfilment.flow, checkout.flow, nested_saga.flow)
    return {f.id: f for f in flows}

"""README.md's admission example ("Who may start a run"), run as written on DuckDB and
PostgreSQL: the refusal reads as shown, a deactivated version takes no new runs while the latest
active one does, and activating it again undoes that."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities


def test_the_admission_example_refuses_as_shown(engine: wf.Engine, acts: Activities) -> None:
    acts.noop("pay")
    for version in (1, 2, 3):
        engine.register(wf.Workflow("payments", version).start_with("pay", id=f"pay-v{version}"))

    @engine.add_admission_policy
    def limits(workflow: Any, data: dict[str, Any], actor: str | None) -> list[str]:
        return ["amounts over 10,000 need a manager"] if data.get("amount", 0) > 10_000 else []

    with pytest.raises(wf.AdmissionError) as info:
        engine.start("payments", {"amount": 50_000})
    assert str(info.value) == (
        "run of 'payments' v3 refused, nothing was written:\n  - amounts over 10,000 need a manager"
    )
    assert info.value.reasons == ["amounts over 10,000 need a manager"]
    assert engine.runs() == []

    engine.deactivate("payments", 2)
    listed = {(d.workflow_id, d.version): d.active for d in engine.definitions()}
    assert listed == {("payments", 1): True, ("payments", 2): False, ("payments", 3): True}
    with pytest.raises(wf.AdmissionError, match="v2"):
        engine.start("payments", {"amount": 5}, version=2)
    assert engine.start("payments", {"amount": 5}).version == 3  # the latest active
    engine.deactivate("payments", 3)
    assert engine.start("payments", {"amount": 5}).version == 1  # v2 is off too

    engine.activate("payments", 2)
    assert engine.start("payments", {"amount": 5}, version=2).version == 2
    assert engine.start("payments", {"amount": 5}).version == 2
    engine.run_until_idle()
    assert acts.count("pay") == 4

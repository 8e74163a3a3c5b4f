"""Pydantic errors as the lines a person reads in the editor and in validation problems."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from wfkit.definition.field_errors import field_errors
from wfkit.definition.kinds import DelayConfig, JoinConfig, ParallelConfig, WaitConfig
from wfkit.definition.policy import Policy


class Inner(BaseModel):
    city: str = Field(..., description="where it goes")


class Outer(BaseModel):
    address: Inner
    mode: Literal["a", "b"] = "a"
    count: int = Field(1, ge=1)


def lines(model: type[BaseModel], data: object, prefix: str = "") -> list[str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return field_errors(info.value, model, prefix)


def test_a_missing_duration_says_required_with_examples() -> None:
    assert lines(DelayConfig, {}) == ["duration: required — e.g. 90s, 7d or 1h30m"]


def test_messages_name_the_field_say_what_is_wrong_and_carry_no_links() -> None:
    found = lines(
        Policy, {"max_attempts": 0, "backoff": "x", "on_failure": "nah", "zzz": 1}, "policy"
    )
    assert found == [
        "policy.max_attempts: must be at least 1 (got 0)",
        "policy.backoff: must be a number (got 'x') — delay multiplier per attempt",
        "policy.on_failure: must be one of 'retry', 'compensate', 'suspend' or 'terminate' "
        "(got 'nah')",
        "policy.zzz: is not a setting here; remove it",
    ]
    assert not any("pydantic" in line or "[type=" in line for line in found)


def test_model_rules_list_items_empty_text_and_nested_fields() -> None:
    assert lines(JoinConfig, {"fork": "p", "mode": "at_least"}) == [
        "mode 'at_least' needs a count, e.g. wf.at_least(2)"
    ]
    assert lines(ParallelConfig, {"branches": []}) == ["branches: needs at least 1 item (got [])"]
    assert lines(ParallelConfig, {"branches": ["a", 2]}) == [
        "branches item 2: must be text (got 2) — outlet per branch"
    ]
    assert lines(WaitConfig, {"signal": ""}) == ["signal: required (it is empty) — signal name"]
    assert lines(Outer, {"address": {}, "mode": "c", "count": "x"}) == [
        "address.city: required — where it goes",
        "mode: must be one of 'a' or 'b' (got 'c')",
        "count: must be a whole number (got 'x')",
    ]


def test_without_a_model_there_are_no_hints_and_long_values_are_cut() -> None:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"address": {"city": "x"}, "count": "y" * 200})
    [line] = field_errors(info.value)
    assert line.startswith("count: must be a whole number (got 'yyyy")
    assert line.endswith("...)") and len(line) < 120

"""The public surface: ``wfkit.__all__`` is sorted, resolvable and complete."""

from __future__ import annotations

import inspect
import re

import wfkit


def _isort_key(name: str) -> tuple[int, list[object]]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions; natural within."""
    group = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return group, natural


def test_all_is_sorted() -> None:
    assert list(wfkit.__all__) == sorted(wfkit.__all__, key=_isort_key)


def test_all_has_no_duplicates() -> None:
    assert len(set(wfkit.__all__)) == len(wfkit.__all__)


def test_every_name_in_all_resolves() -> None:
    missing = [name for name in wfkit.__all__ if not hasattr(wfkit, name)]
    assert missing == []


def test_every_public_class_and_function_is_in_all() -> None:
    forgotten = sorted(
        name
        for name, value in vars(wfkit).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and (getattr(value, "__module__", "") or "").split(".")[0] == "wfkit"
        and name not in wfkit.__all__
    )
    assert forgotten == []


def test_the_documented_names_are_public() -> None:
    # names DESIGN.md promises users (wf.Workflow, wf.activity, wf.at_least...)
    documented = {
        "ActivityContext",
        "DefinitionError",
        "Workflow",
        "activity",
        "at_least",
        "validate",
        "UsageError",
        "WfkitError",
    }
    assert documented <= set(wfkit.__all__)


def test_every_error_of_the_error_module_is_public_and_a_wfkit_error() -> None:
    # (control-flow signals such as a cancellation may live elsewhere and derive otherwise)
    from wfkit import errors

    assert set(errors.__all__) <= set(wfkit.__all__)
    assert all(issubclass(getattr(errors, name), wfkit.WfkitError) for name in errors.__all__)


def test_version_is_a_string() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", wfkit.__version__)

"""Shared fixtures: a fresh activity registry, so tests never depend on the global one."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf

THROWAWAY_ACTIVITIES = (
    "a",
    "b",
    "c",
    "d",
    "e",
    "pick",
    "undo.a",
    "undo.b",
    "binder",
)
"""Activity names the ``registry`` fixture registers (each a no-op)."""


def _noop(ctx: Any) -> None:
    return None


@pytest.fixture
def registry() -> wf.ActivityRegistry:
    """A fresh registry holding :data:`THROWAWAY_ACTIVITIES`, independent of the default one."""
    reg = wf.ActivityRegistry()
    for name in THROWAWAY_ACTIVITIES:
        reg.register(name, _noop)
    return reg

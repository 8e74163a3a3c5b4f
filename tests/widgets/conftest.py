"""Fixtures for the operating widgets' tests: a REAL engine on a DuckDB file under ``tmp_path``,
a ``ManualClock`` and a per-test activity registry (as in tests/engine/conftest.py).

Widgets are driven as a user would: ``button.click()``, setting ``.value`` on text fields and
dropdowns, setting surface traits; assertions read the engine afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf


class Acts:
    """A per-test registry; ``broken[name] = True`` makes activity ``name`` raise."""

    def __init__(self) -> None:
        self.registry = wf.ActivityRegistry()
        self.broken: dict[str, bool] = {}
        self.calls: list[str] = []

    def add(self, name: str, body: Callable[[Any], Any] | None = None) -> None:
        """Register ``name``: record the call, raise while broken, else run ``body(ctx)``."""

        def run(ctx: wf.ActivityContext[Any]) -> Any:
            self.calls.append(name)
            if self.broken.get(name):
                raise RuntimeError(f"{name} backend down (attempt {ctx.attempt})")
            return body(ctx) if body is not None else None

        self.registry.register(name, run)

    def noop(self, *names: str) -> None:
        """Register recording activities that do nothing else."""
        for name in names:
            self.add(name)


@pytest.fixture
def acts() -> Acts:
    """A fresh registry (never ``wf.default_registry``)."""
    return Acts()


@pytest.fixture
def clock() -> wf.ManualClock:
    """A clock that only moves on ``clock.advance(...)``."""
    return wf.ManualClock()


@pytest.fixture
def engine(tmp_path: Path, clock: wf.ManualClock, acts: Acts) -> Iterator[wf.Engine]:
    """An engine on a fresh DuckDB file with the test's clock and registry."""
    engine = wf.Engine(tmp_path / "runs.duckdb", clock=clock, registry=acts.registry)
    yield engine
    engine.close()

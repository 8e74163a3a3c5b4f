"""The engine does what docs/semantics.md says: generated workflows, run on the engine and on the
reference model (tests/model/model.py), end with the same status, data document, outputs,
compensation order and multiset of activity calls, on DuckDB and on PostgreSQL.

``WFKIT_MODEL_EXAMPLES`` sets the examples per backend (default 150); ``scripts/soak_model.py``
runs thousands.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.model.harness import check, database
from tests.model.strategies import Case, cases
from tests.scale import count

EXAMPLES = int(os.environ.get("WFKIT_MODEL_EXAMPLES", count(150, 40)))

settings.register_profile(
    "model",
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,  # the same cases on every run of `make test`; the soak explores
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(params=["duckdb", "postgres"])
def fresh(request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    """A clean database per example: a new DuckDB file, or the test's PostgreSQL database
    emptied (one database per test function keeps PostgreSQL cheap)."""
    with database(request.param) as make:
        yield make


def test_engine_matches_model(fresh: Callable[[], Any]) -> None:
    @settings(settings.get_profile("model"))
    @given(cases())
    def matches(case: Case) -> None:
        diffs = check(case, fresh())
        assert not diffs, case.describe() + "\n" + "\n".join(diffs)

    matches()


@pytest.fixture
def fresh_duckdb() -> Iterator[Callable[[], Any]]:
    with database("duckdb") as make:
        yield make


def test_batched_durability_matches_model(fresh_duckdb: Callable[[], Any]) -> None:
    """durability="batched" changes when checkpoints are written, never what a run does."""

    @settings(settings.get_profile("model"), max_examples=max(EXAMPLES // 3, 10))
    @given(cases())
    def matches(case: Case) -> None:
        diffs = check(case, fresh_duckdb(), durability="batched")
        assert not diffs, case.describe() + "\n" + "\n".join(diffs)

    matches()

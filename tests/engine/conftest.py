"""Fixtures for engine behaviour tests.

Every test gets its own database FILE under ``tmp_path`` (no mocked storage), a ``ManualClock``
and a fresh :class:`wfkit.ActivityRegistry`, so tests never depend on each other or on
``wf.default_registry``. Activities record what they saw into ``acts.calls`` so tests can assert
call counts and call order.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.postgres import shared_database


@dataclass
class Call:
    """One activity call as the activity saw it."""

    name: str
    node_id: str
    attempt: int
    loop_index: int | None
    item: Any
    key: str


@dataclass
class Activities:
    """A per-test registry whose activities record every call (thread-safe)."""

    registry: wf.ActivityRegistry = field(default_factory=wf.ActivityRegistry)
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # An empty ActivityRegistry is falsy, and Engine(registry=...) falls back to the default
        # registry for a falsy one (test_durability.py::test_an_engine_uses_the_registry_it_is_
        # given_even_while_empty). One activity keeps every other test independent of that bug.
        self.registry.register("fixture.unused", lambda ctx: None)

    def add(self, name: str, body: Callable[[Any], Any] | None = None) -> None:
        """Register ``name``: record the call, then run ``body(ctx)`` (returns its value)."""

        def run(ctx: wf.ActivityContext[Any]) -> Any:
            self.record(name, ctx)
            return body(ctx) if body is not None else None

        self.registry.register(name, run)

    def add_async(self, name: str, body: Callable[[Any], Any]) -> None:
        """Register ``name`` as an ``async def`` activity running the coroutine ``body(ctx)``."""

        async def run(ctx: wf.ActivityContext[Any]) -> Any:
            self.record(name, ctx)
            return await body(ctx)

        self.registry.register(name, run)

    def noop(self, *names: str) -> None:
        """Register recording activities that do nothing else."""
        for name in names:
            self.add(name)

    def record(self, name: str, ctx: wf.ActivityContext[Any]) -> None:
        """Append one :class:`Call`."""
        call = Call(name, ctx.node_id, ctx.attempt, ctx.loop_index, ctx.item, ctx.idempotency_key)
        with self.lock:
            self.calls.append(call)

    def names(self) -> list[str]:
        """Names of the activities called, in call order."""
        with self.lock:
            return [c.name for c in self.calls]

    def count(self, name: str) -> int:
        """How often ``name`` ran."""
        return self.names().count(name)

    def of(self, name: str) -> list[Call]:
        """The calls of ``name``, in order."""
        with self.lock:
            return [c for c in self.calls if c.name == name]


@pytest.fixture
def acts() -> Activities:
    """A fresh recording registry (not ``wf.default_registry``)."""
    return Activities()


@pytest.fixture
def clock() -> wf.ManualClock:
    """A clock that only moves on ``clock.advance(...)``."""
    return wf.ManualClock()


@pytest.fixture(params=["duckdb", "postgres"])
def db_path(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """An empty database per test, for every store backend: a DuckDB file (not created yet),
    a PostgreSQL database (this process's migrated one, emptied; see tests/postgres.py)."""
    if request.param == "duckdb":
        yield tmp_path / "runs.duckdb"
        return
    if request.node.get_closest_marker("duckdb_only"):
        pytest.skip("DuckDB-only behaviour (files, their locks and their schema)")
    yield shared_database()


@pytest.fixture(scope="session")
def duckdb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty DuckDB file that ``open_engine`` copies instead of migrating anew
    (a copy opens in a third of the time)."""
    path = tmp_path_factory.mktemp("template") / "template.duckdb"
    wf.Engine(path, registry=Activities().registry).close()
    return path


OpenEngine = Callable[..., wf.Engine]


@pytest.fixture
def open_engine(
    db_path: Path, clock: wf.ManualClock, acts: Activities, duckdb_template: Path
) -> Iterator[OpenEngine]:
    """Open engines on the test's file (closed at teardown); keyword arguments override.

    The test's DuckDB file starts as a copy of the migrated template (owner-only, as the
    engine creates it), unless the test opened or created it first."""
    opened: list[wf.Engine] = []

    def open_(**kw: Any) -> wf.Engine:
        kw.setdefault("clock", clock)
        kw.setdefault("registry", acts.registry)
        path = kw.pop("path", db_path)
        if isinstance(path, Path) and path == db_path and not path.exists():
            shutil.copyfile(duckdb_template, path)
            path.chmod(0o600)
        engine = wf.Engine(path, **kw)
        opened.append(engine)
        return engine

    yield open_
    for engine in reversed(opened):
        engine.close()


@pytest.fixture
def engine(open_engine: OpenEngine) -> wf.Engine:
    """An engine on a fresh DuckDB file with a manual clock and the test's registry."""
    return open_engine()


@pytest.fixture(scope="session")
def client() -> Iterator[Any]:
    """A real Dask LocalCluster of two worker processes (one thread each), shared by the tests
    that send attempts to Dask; its workers import this checkout's tests and wfkit."""
    distributed = pytest.importorskip("distributed")
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p
    )
    cluster = wf.DaskExecutor.local_cluster(
        n_workers=2, threads_per_worker=1, dashboard_address=":0"
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()

"""PostgreSQL databases for the tests, on the server named by ``WFKIT_TEST_POSTGRES``.

Default: ``postgresql://postgres@127.0.0.1:5432/postgres`` (trust auth, as CI's machine starts
it). Where no server answers, PostgreSQL tests are skipped on a developer machine and fail under
``CI=true``, so a missing server never passes silently in CI.

Two kinds of database:

- :func:`shared_database` — one migrated database per test process (per pytest-xdist worker),
  emptied between tests by :meth:`SharedDatabase.reset` (a few milliseconds: rows deleted,
  tables a test created dropped, other connections closed). Creating, migrating and dropping a
  database per test cost 0.2-0.8 s of setup each, most of the engine suite's time.
- :func:`postgres_database` — a fresh database of its own, dropped afterwards, for the tests
  that need one (migrations, several processes that outlive a test, a store copy).
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

ADMIN_URL = os.environ.get("WFKIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def _admin():  # type: ignore[no-untyped-def]
    import psycopg

    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        message = (
            f"no PostgreSQL server at {ADMIN_URL} ({exc}); start one "
            "(scripts/ensure-postgres.sh) or set WFKIT_TEST_POSTGRES"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


@contextmanager
def postgres_database() -> Iterator[str]:
    """Create a fresh database, yield its URL, drop it afterwards."""
    admin = _admin()
    name = f"wfkit_t_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _url(name)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


_RELATIONS = """
SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm', 'S', 'p')
"""


class SharedDatabase:
    """A migrated database that many tests of one process use in turn."""

    def __init__(self) -> None:
        self.name = (
            f"wfkit_w_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:8]}"
        )
        self.url = _url(self.name)
        self._baseline: dict[str, str] | None = None
        self._seed: dict[str, list[tuple[Any, ...]]] = {}
        admin = _admin()
        try:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            admin.close()
        atexit.register(self.drop)

    def _migrate(self) -> None:
        import psycopg

        from wfkit.store import open_store

        open_store(self.url).close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            self._baseline = dict(conn.execute(_RELATIONS).fetchall())
            self._version = conn.execute("SELECT max(version) FROM wf_schema_version").fetchone()
            # rows the migrations themselves insert (a one-row tally): put back after each reset
            self._seed = {
                name: rows
                for name, kind in self._baseline.items()
                if kind == "r" and name != "wf_schema_version"
                for rows in [conn.execute(f'SELECT * FROM "{name}"').fetchall()]
                if rows
            }

    def reset(self) -> str:
        """Empty every wfkit table (the schema stays migrated) and return the URL."""
        import psycopg

        if self._baseline is None:
            self._migrate()
        assert self._baseline is not None
        with psycopg.connect(self.url, autocommit=True) as conn:
            # a connection a test left open (an engine never closed, a child process) must not
            # write into the next test's rows
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            now = dict(conn.execute(_RELATIONS).fetchall())
            version = conn.execute("SELECT max(version) FROM wf_schema_version").fetchone()
            changed = version != self._version or any(
                now.get(name) != kind for name, kind in self._baseline.items()
            )
            if not changed:
                self._empty(conn, now)
                return self.url
        self._recreate()  # a test changed the schema itself: start again from a fresh database
        return self.reset()

    def _empty(self, conn: Any, now: dict[str, str]) -> None:
        assert self._baseline is not None
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '10s'")
            for name in (n for n in now if n not in self._baseline):
                # tables, views and sequences a test created
                kind = {"v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE"}.get(now[name])
                conn.execute(f'DROP {kind or "TABLE"} IF EXISTS "{name}" CASCADE')
            for name, kind in self._baseline.items():
                if kind == "r" and name != "wf_schema_version":
                    conn.execute(f'DELETE FROM "{name}"')
                    for row in self._seed.get(name, ()):
                        marks = ", ".join(["%s"] * len(row))
                        conn.execute(f'INSERT INTO "{name}" VALUES ({marks})', row)
                elif kind == "S":
                    conn.execute(f'ALTER SEQUENCE "{name}" RESTART')

    def _recreate(self) -> None:
        self.drop()
        admin = _admin()
        try:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            admin.close()
        self._baseline = None

    def drop(self) -> None:
        try:
            admin = _admin()
        except BaseException:  # the server is gone at exit: nothing to drop
            return
        try:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            admin.close()


_shared: SharedDatabase | None = None


def shared_database() -> str:
    """This process's migrated test database, emptied: its URL."""
    global _shared
    if _shared is None:
        _shared = SharedDatabase()
    return _shared.reset()

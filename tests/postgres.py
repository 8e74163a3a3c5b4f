"""A throwaway PostgreSQL database per test, on the server named by ``WFKIT_TEST_POSTGRES``.

Default: ``postgresql://postgres@127.0.0.1:5432/postgres`` (trust auth, as CI's machine starts
it). Where no server answers, PostgreSQL tests are skipped on a developer machine and fail under
``CI=true``, so a missing server never passes silently in CI.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def postgres_database() -> Iterator[str]:
    """Create a fresh database, yield its URL, drop it afterwards."""
    admin = _admin()
    name = f"wfkit_t_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

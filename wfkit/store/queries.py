"""Named SQL blocks from ``sql/queries.sql`` and ordered migrations from ``sql/migrations``."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["has_query", "migrations", "query"]

_NAME = re.compile(r"^--\s*name:\s*(\S+)\s*$", re.MULTILINE)


@cache
def _blocks() -> dict[str, str]:
    text = resources.files("wfkit.store").joinpath("sql/queries.sql").read_text()
    parts = _NAME.split(text)
    return {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def query(name: str) -> str:
    """The SQL of the block called ``name``."""
    return _blocks()[name]


@cache
def migrations() -> list[tuple[int, str]]:
    """``(version, sql)`` of every migration file, in order (``0001_initial.sql`` is 1).

    Migrations are written in SQL that both DuckDB and PostgreSQL read.
    """
    folder = resources.files("wfkit.store").joinpath("sql/migrations")
    found = [
        (int(item.name.split("_", 1)[0]), item.read_text())
        for item in folder.iterdir()
        if item.name.endswith(".sql")
    ]
    return sorted(found)


def has_query(name: str) -> bool:
    """True when a block called ``name`` exists."""
    return name in _blocks()

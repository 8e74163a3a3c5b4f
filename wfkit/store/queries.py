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
def migrations(dialect: str = "duckdb") -> list[tuple[int, str]]:
    """``(version, sql)`` of every migration, in order (``0001_initial.sql`` is 1).

    A file ``NNNN_name.<dialect>.sql`` replaces ``NNNN_name.sql`` for that dialect; the
    differences between backends stay in those few files.
    """
    folder = resources.files("wfkit.store").joinpath("sql/migrations")
    plain: dict[int, str] = {}
    special: dict[int, str] = {}
    for item in folder.iterdir():
        name = item.name
        if not name.endswith(".sql"):
            continue
        version = int(name.split("_", 1)[0])
        parts = name.split(".")
        if len(parts) == 2:
            plain[version] = item.read_text()
        elif parts[-2] == dialect:
            special[version] = item.read_text()
    return sorted({**plain, **special}.items())


def has_query(name: str) -> bool:
    """True when a block called ``name`` exists."""
    return name in _blocks()

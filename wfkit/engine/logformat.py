"""``--log-format json``: one JSON object per log line, naming the run, node and attempt.

Written with the standard library's :mod:`json` and :mod:`logging` rather than
python-json-logger: the format is a dozen lines, it needs no extra dependency for a server
flag, and the field names are ours to keep stable.

Every line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``; a record that
names a run (``ctx.logger`` of an activity, see :class:`wfkit.engine.logs.AttemptLogger`, or
an ``extra={"run_id": ...}`` of the engine) adds ``run_id``, ``workflow``, ``version``,
``node_id``, ``activity``, ``attempt`` and ``loop_path`` where known, and ``exception`` when it
carries a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from wfkit.errors import UsageError

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")

# record attribute -> JSON field
_RUN_FIELDS = (
    ("run_id", "run_id"),
    ("workflow_id", "workflow"),
    ("workflow_version", "version"),
    ("node_id", "node_id"),
    ("activity", "activity"),
    ("attempt", "attempt"),
    ("loop_path", "loop_path"),
)


class JsonFormatter(logging.Formatter):
    """Format a record as one line of JSON (never raises on a value JSON cannot hold)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object on one line."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for attribute, field in _RUN_FIELDS:
            value = record.__dict__.get(attribute)
            if value is not None and value != "":
                line[field] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(fmt: str, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """Send the process's log records to ``stream`` (stderr) in ``fmt`` (``text`` or ``json``).

    ``text`` leaves logging as it is (Python's defaults, uvicorn's own format); ``json`` puts
    one handler with :class:`JsonFormatter` on the root logger, replacing any there.

    Raises
    ------
    UsageError
        For a format other than ``text`` or ``json``.
    """
    if fmt not in LOG_FORMATS:
        raise UsageError(f"--log-format must be 'text' or 'json', not {fmt!r}")
    if fmt == "text":
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)

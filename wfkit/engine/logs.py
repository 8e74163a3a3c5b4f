"""An attempt's log lines: they belong to its run.

``ctx.logger`` is an :class:`AttemptLogger`: every record it emits carries ``run_id``,
``workflow_id``, ``workflow_version``, ``node_id``, ``activity``, ``attempt`` and ``loop_path``
as attributes (so a ``logging.Formatter`` can print ``%(run_id)s``), and the lines at INFO and
above are kept — whatever the logging configuration lets through — at most :data:`MAX_LINES`
lines and :data:`MAX_BYTES` of text per attempt, the rest counted in a last line. The writer
stores them in ``wf_logs`` in the transaction of the checkpoint that records the attempt, so an
attempt's lines are durable exactly when its outcome is; an attempt that logs nothing writes
nothing.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from wfkit.definition.values import printable

if TYPE_CHECKING:
    from wfkit.engine.checkpoint import Checkpoint
    from wfkit.engine.executor import AttemptResult, Job

__all__ = [
    "KEPT_LEVEL",
    "MAX_BYTES",
    "MAX_LINES",
    "AttemptLines",
    "AttemptLogger",
    "LogLine",
    "log_rows",
    "read_logs",
]

MAX_LINES = 200
"""Most log lines kept per attempt (one more says how many were not kept)."""

MAX_BYTES = 64 * 1024
"""Most bytes of UTF-8 text kept per attempt; a line that does not fit is cut."""

KEPT_LEVEL = logging.INFO
"""Records at this level and above are kept with the run."""

_SHORTEST_CUT = 80  # bytes of a line worth keeping cut; with less room left it is dropped

_ACTIVITY_LOGGER = logging.getLogger("wfkit.activity")

Entry = tuple[datetime, str, str]  # logged at, level name, message


@dataclass(frozen=True)
class LogLine:
    """One line an activity logged through ``ctx.logger`` (a row of ``wf_logs``)."""

    at: datetime
    level: str  # INFO, WARNING, ERROR, CRITICAL (or a custom level's name)
    node_id: str
    attempt: int
    message: str
    activity: str = ""  # the activity (or compensation) that logged it
    token: str = ""
    loop_path: tuple[int, ...] = ()  # the for_each cell (outermost index first)
    seq: int = 0  # the event that recorded the attempt
    line: int = 0  # its place among the attempt's lines

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.level} {self.node_id}#{self.attempt}: {self.message}"


@dataclass(frozen=True)
class AttemptLines:
    """The lines one attempt kept, and where they come from."""

    activity: str
    loop_path: tuple[int, ...]
    lines: list[Entry]


class AttemptLogger(logging.LoggerAdapter[logging.Logger]):
    """``ctx.logger`` of one attempt: stamps records with the attempt, keeps its lines.

    Records are emitted to the ``wfkit.activity`` logger as usual (with ``extra`` attributes
    naming the run, node and attempt); lines at INFO and above are kept for the run
    independently of that logger's level. Nothing is built until the first record.
    """

    def __init__(
        self,
        job: Job,
        now: Callable[[], datetime],
        logger: logging.Logger = _ACTIVITY_LOGGER,
    ) -> None:
        self.logger = logger
        self.extra: Mapping[str, object] | None = None
        self._job = job
        self._now = now
        self._lines: list[Entry] | None = None
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        self._lock = threading.Lock()

    def _stamp(self) -> dict[str, Any]:
        job = self._job
        return {
            "run_id": job.run_id,
            "workflow_id": job.definition_id,
            "workflow_version": job.version,
            "node_id": job.node_id,
            "activity": job.activity,
            "attempt": job.attempt,
            "loop_path": ".".join(str(i) for i in job.loop_path),
        }

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Add the attempt's attributes to the record (next to any ``extra`` of the call)."""
        if self.extra is None:
            self.extra = self._stamp()
        given = kwargs.get("extra")
        kwargs["extra"] = {**given, **self.extra} if given else self.extra
        return msg, kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Keep the line (INFO and above), then emit the record where logging allows it."""
        if level >= KEPT_LEVEL and not self._closed:
            self._keep(level, msg, args, kwargs.get("exc_info"))
        if self.isEnabledFor(level):
            msg, stamped = self.process(msg, kwargs)
            # name the activity's own line in the record, not this method
            stamped["stacklevel"] = int(stamped.get("stacklevel", 1)) + 1
            self.logger.log(level, msg, *args, **stamped)

    def _keep(self, level: int, msg: Any, args: tuple[Any, ...], exc_info: Any) -> None:
        text = _message(msg, args, exc_info)
        size = len(text.encode("utf-8"))
        with self._lock:
            if self._lines is None:
                self._lines = []
            if len(self._lines) >= MAX_LINES or self._bytes >= MAX_BYTES:
                self._dropped += 1
                return
            room = MAX_BYTES - self._bytes
            if size > room:  # the attempt's text is full after this line
                note = f" … [cut: the line had {size:,} bytes]"
                kept = room - len(note.encode())
                self._bytes = MAX_BYTES
                if kept < _SHORTEST_CUT:
                    self._dropped += 1
                    return
                text = _clip_bytes(text, kept) + note
                size = 0
            self._lines.append((self._now(), printable(logging.getLevelName(level)), text))
            self._bytes += size

    def finish(self) -> AttemptLines | None:
        """The attempt ended: its lines (None when it logged none); later records are not kept
        (a timed-out attempt's thread may go on logging)."""
        self._closed = True
        if self._lines is None:  # nothing logged: the common case costs no lock
            return None
        with self._lock:
            lines = list(self._lines)
        if self._dropped:
            lines.append(
                (
                    self._now(),
                    "WARNING",
                    f"{self._dropped} more log line{'s' if self._dropped != 1 else ''} of this "
                    f"attempt not kept: at most {MAX_LINES} lines and {MAX_BYTES // 1024} KiB "
                    "are kept per attempt",
                )
            )
        return AttemptLines(self._job.activity, self._job.loop_path, lines)


def _message(msg: Any, args: tuple[Any, ...], exc_info: Any) -> str:
    """The record's message as logging formats it, with its traceback; storable text. Never
    raises: keeping a line must not fail the attempt that logs it."""
    try:
        text = str(msg) % args if args else str(msg)
    except Exception:  # a format that does not match its arguments: keep both
        text = f"{_safe(msg)} {_safe(args)}"
    if exc_info:
        try:
            if isinstance(exc_info, BaseException):
                exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
            elif not isinstance(exc_info, tuple):
                exc_info = sys.exc_info()
            if exc_info[0] is not None:
                text += "\n" + "".join(traceback.format_exception(*exc_info)).rstrip()
        except Exception as exc:
            text += f"\n(the exception could not be formatted: {type(exc).__name__})"
    return printable(text)


def _safe(value: Any) -> str:
    try:
        return repr(value) if isinstance(value, tuple) else str(value)
    except Exception as exc:
        return f"<unprintable {type(value).__name__}: {type(exc).__name__}>"


def _clip_bytes(text: str, limit: int) -> str:
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


# --- rows ---------------------------------------------------------------------------------------


def keep(cp: Checkpoint, result: AttemptResult) -> None:
    """Hold an attempt's lines in its run's checkpoint, next to the event about to record it."""
    cp.logs.append((len(cp.events), result))


def log_rows(cp: Checkpoint, last_seq: int) -> list[tuple[Any, ...]]:
    """The ``wf_logs`` rows of the attempts ``cp`` recorded (its events numbered up to
    ``last_seq``): each line names the event that recorded its attempt."""
    rows: list[tuple[Any, ...]] = []
    first = last_seq - len(cp.events) + 1
    for index, result in cp.logs:
        kept = result.logs
        if kept is None:
            continue
        seq = first + index if index < len(cp.events) else last_seq
        path = json.dumps(list(kept.loop_path)) if kept.loop_path else None
        for line, (at, level, message) in enumerate(kept.lines):
            rows.append(
                (
                    result.run_id,
                    seq,
                    line,
                    result.node_id,
                    result.token_id,
                    kept.activity,
                    result.attempt,
                    path,
                    at,
                    level,
                    message,
                )
            )
    return rows


def read_logs(rows: list[tuple[Any, ...]]) -> list[LogLine]:
    """``run_logs`` rows as :class:`LogLine` records."""
    return [
        LogLine(
            at=r[8],
            level=r[9],
            node_id=r[3],
            attempt=r[6],
            message=r[10],
            activity=r[5],
            token=r[4],
            loop_path=tuple(json.loads(r[7])) if r[7] else (),
            seq=r[1],
            line=r[2],
        )
        for r in rows
    ]

"""Durations: ``timedelta`` or human strings such as ``"90s"``, ``"7d"``, ``"1h30m"``.

Parsing is delegated to ``pytimeparse``; the canonical text form written into graphs is compact
(``"1h30m"``) so graphs stay readable and hash the same however the duration was typed.

Every duration wfkit accepts — policies, delays, wait and approval timeouts, signal expiry, clock
steps, leases — goes through :func:`parse_duration`, which refuses anything longer than
:data:`MAX_DURATION` (36,500 days, about 100 years). ``datetime`` ends at the end of year 9999, so
a due time ``now + duration`` can always be computed for any ``now`` before year 9899; without the
cap a wait timeout of ``"3000000d"`` overflowed when its timer was set.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pytimeparse import parse as _parse

__all__ = ["MAX_DURATION", "Duration", "format_duration", "parse_duration"]

MAX_DURATION = timedelta(days=36_500)
"""The longest duration wfkit accepts: 36,500 days (about 100 years)."""

_MAX_SECONDS = MAX_DURATION.total_seconds()
_TOO_LONG = "the limit is 36,500 days, about 100 years, so that a due time stays a valid date"

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def parse_duration(value: timedelta | str | float) -> timedelta:
    """Turn a duration given as ``timedelta``, seconds or text into a ``timedelta``.

    Parameters
    ----------
    value : timedelta, str or number
        ``"90s"``, ``"7d"``, ``"1h30m"``, ``"2 days"``, ``"1:30:00"``, or a number of seconds.

    Returns
    -------
    timedelta

    Raises
    ------
    ValueError
        When the text is not a duration, the duration is negative, or it is longer than
        :data:`MAX_DURATION` (36,500 days).

    Examples
    --------
    >>> parse_duration("1h30m")
    datetime.timedelta(seconds=5400)
    """
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write it like '90s', '7d' or '1h30m'")
    elif isinstance(value, int | float):
        result = _seconds(value, value)
    elif isinstance(value, str):
        seconds = _parse(value.strip())
        if seconds is None:
            raise ValueError(
                f"{value!r} is not a duration; write it like '90s', '7d', '1h30m' or '0.5s'"
            )
        result = _seconds(seconds, value)
    else:
        raise ValueError(f"{value!r} is not a duration; give a timedelta or text like '7d'")
    if result < timedelta(0):
        raise ValueError(f"duration {value!r} is negative; durations must be zero or more")
    if result > MAX_DURATION:
        raise ValueError(f"duration {value!r} is too long: {_TOO_LONG}")
    return result


def _seconds(seconds: float, original: object) -> timedelta:
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{original!r} is not a finite duration; give a number of seconds")
    if seconds < 0:  # checked before timedelta() can overflow, as for too long
        raise ValueError(f"duration {original!r} is negative; durations must be zero or more")
    if seconds > _MAX_SECONDS:
        raise ValueError(f"duration {original!r} is too long: {_TOO_LONG}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """Write a duration in the compact form wfkit stores: ``"3d"``, ``"1h30m"``, ``"0.5s"``.

    Examples
    --------
    >>> format_duration(timedelta(hours=1, minutes=30))
    '1h30m'
    """
    total = value.total_seconds()
    if total == 0:
        return "0s"
    whole = int(total)
    fraction = round(total - whole, 6)
    parts: list[str] = []
    for unit, size in _UNITS:
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    if fraction:
        seconds = (int(parts.pop()[:-1]) if parts and parts[-1].endswith("s") else 0) + fraction
        parts.append(f"{seconds:.6f}".rstrip("0").rstrip(".") + "s")
    return "".join(parts)


def _validate(value: Any) -> timedelta:
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_validate),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "examples": ["90s", "7d", "1h30m"]}),
]
"""A pydantic field type: accepts timedelta, seconds or text; serialises to compact text in JSON."""

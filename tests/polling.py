"""Waiting in a test for what another thread or process does: the one polling helper.

Tests never sleep for a fixed time: they poll a check until it holds, and fail naming what
never happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL = 0.02
"""Seconds between two checks."""


def eventually(check: Callable[[], T], timeout: float = 15.0) -> T:
    """The first true value of ``check()``, or its last value once ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(INTERVAL)


def wait_until(check: Callable[[], T], what: str, timeout: float = 15.0) -> T:
    """Like :func:`eventually`, but fail the test, naming ``what``, when the time runs out."""
    value = eventually(check, timeout)
    if not value:
        raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
    return value


__all__ = ["eventually", "wait_until"]

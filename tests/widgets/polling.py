"""Waiting in a test for what a widget's background thread does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(check: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    """Return once ``check()`` is true; fail the test, naming ``what``, after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)

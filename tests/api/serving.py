"""What the tests of ``wfkit serve`` processes share: the server's environment, and polling."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest


def server_env(token: str) -> dict[str, str]:
    """The environment of a ``wfkit serve`` under test: its API token, plain wide output."""
    return {**os.environ, "WFKIT_API_TOKEN": token, "NO_COLOR": "1", "COLUMNS": "400"}


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``probe`` until it returns something truthy; fail saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")

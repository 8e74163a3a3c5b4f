"""The HTTP API: signals, approvals, runs and recovery over an engine (``wfkit serve``).

It imports the engine and the definition layer, never widgets; the engine never imports it.
"""

from __future__ import annotations

from wfkit.api.app import API_PREFIX, create_app
from wfkit.api.auth import TOKEN_ENV
from wfkit.api.limits import DEFAULT_MAX_BODY

__all__ = ["API_PREFIX", "DEFAULT_MAX_BODY", "TOKEN_ENV", "create_app"]

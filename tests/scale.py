"""How much work the soak-like tests do: full counts in CI, fewer on a developer's machine.

Crash loops, kill loops, multi-process runs and model checks prove more the more they repeat,
and cost seconds per repetition. ``CI`` (set by CI) or ``WFKIT_FULL=1`` selects the full counts
(what ``make test`` runs on CI); otherwise each test uses its smaller local count, which still
exercises every path it checks. ``WFKIT_FULL=0`` picks the local counts under CI too.
"""

from __future__ import annotations

import os

FULL = os.environ.get("WFKIT_FULL", "1" if os.environ.get("CI") else "0") == "1"
"""Whether this run uses the full counts."""


def count(full: int, local: int) -> int:
    """``full`` in CI (or with ``WFKIT_FULL=1``), ``local`` otherwise."""
    return full if FULL else local

"""A workflow whose activity kills its process on every attempt, for ``test_server_crash_loop.py``.

``wfkit serve`` and ``wfkit worker`` import this file with ``--module``. ``crash-loop`` waits one
second (so that ``POST /runs`` is answered before the first death), then runs ``crashtest.boom``
(``max_attempts=3``, no retry delay), which appends ``"<node> <attempt> <pid>"`` to the file named
by ``WFKIT_CRASH_LOG`` (fsynced) and ends its process with ``os._exit(1)``; ``crashtest.after``
must never run. Importing the module registers the activities and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

import wfkit as wf

LOG_ENV = "WFKIT_CRASH_LOG"


def _note(ctx: wf.ActivityContext[Any]) -> None:
    line = f"{ctx.node_id} {ctx.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


@wf.activity("crashtest.boom")
def boom(ctx: wf.ActivityContext[Any]) -> None:
    """Log the call, then kill the process."""
    _note(ctx)
    os._exit(1)


@wf.activity("crashtest.after")
def after(ctx: wf.ActivityContext[Any]) -> None:
    """Log the call (it must never come)."""
    _note(ctx)


flow = (
    wf.Workflow("crash-loop", version=1)
    .start_with()
    .delay("1s")
    .then("crashtest.boom", max_attempts=3, retry_delay="0s")
    .then("crashtest.after")
)

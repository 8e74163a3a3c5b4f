"""Activities the Dask tests run on the cluster's worker processes (importable there)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import wfkit as wf


def whoami(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    """Where it ran, and the item doubled."""
    began = time.time()
    time.sleep(0.3)  # long enough for both workers to hold an item at once
    item = ctx.item if ctx.item is not None else 0
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "double": item * 2,
        "began": began,
        "ended": time.time(),
    }


def count(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    """Writes into the data document."""
    ctx.data["n"] = ctx.data.get("n", 0) + 1
    return {"pid": os.getpid()}


def die_first(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    """Kills its worker process on the first attempt (a marker file says it tried)."""
    marker = Path(ctx.data["marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def sleepy(ctx: wf.ActivityContext[Any]) -> None:
    """Sleeps until cancelled, or 30 s."""
    for _ in range(300):
        if ctx.cancelled:
            raise wf.Cancelled("asked to stop")
        time.sleep(0.1)


def die_on_first_call(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    """Counts its calls in a file; kills its worker process on the first call."""
    calls = Path(ctx.data["calls"])
    with calls.open("a") as f:
        f.write(f"{ctx.attempt}\n")
    if len(calls.read_text().split()) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"pid": os.getpid(), "attempt": ctx.attempt}
